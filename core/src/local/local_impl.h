/* What the local backend's files share: its state, the op functions and small helpers. */
#ifndef ASP_LOCAL_IMPL_H
#define ASP_LOCAL_IMPL_H

#include "local.h"
#include "local_util.h"
#include "proto_desc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* Room left in max_message for the envelope and the result's other fields. */
#define LOCAL_ENVELOPE_HEADROOM (64u * 1024u)

struct asp_local {
	size_t max_message;
	size_t payload_budget; /* bytes of data one response may carry */
	char os[64];           /* uname sysname, lower case */
	char arch[64];         /* uname machine */

	/* Spawned processes (local_proc.h). */
	pthread_mutex_t mu;        /* the fields below */
	pthread_cond_t cv;         /* a pump ended */
	struct local_proc **procs; /* by increasing id */
	size_t nprocs, cap;
	uint64_t last_id;
	uint64_t done_seq;    /* finished processes so far: orders eviction */
	unsigned done;        /* finished processes in the table */
	unsigned pumps;       /* pump threads running */
	unsigned starting;    /* spawns starting their process, not yet in the table */
	bool shutting_down;   /* no more spawns */
	bool shared;          /* asp_local_set_shared: hello announces "reattach" */
	uint64_t end_kill_ns; /* shutting down: when its KILL is due (local_now_ns) */
};

/* The ops (local.c, local_exec.c, local_files.c, local_fs.c, local_remove.c). */
/*
 * hello's result: the ops asp_local_ops fills and, for a bound connection, those its
 * `stream` table adds (local_conn_ops.c); `follow` (a connection with a sink) adds the
 * feature "follow", a shared backend with a stream table "reattach".
 */
asp_status local_hello(asp_local *l, const asp_ops *stream, bool follow, asp_hello_result *r,
                       asp_arena *a, asp_error *err);
asp_status asp_local_hello(void *self, const asp_hello_params *p, asp_hello_result *r, asp_arena *a,
                           asp_error *err);
asp_status asp_local_exec(void *self, const asp_exec_params *p, asp_exec_result *r, asp_arena *a,
                          asp_error *err);
asp_status asp_local_read(void *self, const asp_read_params *p, asp_read_result *r, asp_arena *a,
                          asp_error *err);
asp_status asp_local_write(void *self, const asp_write_params *p, asp_write_result *r, asp_arena *a,
                           asp_error *err);
asp_status asp_local_stat(void *self, const asp_stat_params *p, asp_stat_result *r, asp_arena *a,
                          asp_error *err);
asp_status asp_local_list(void *self, const asp_list_params *p, asp_list_result *r, asp_arena *a,
                          asp_error *err);
asp_status asp_local_mkdir(void *self, const asp_mkdir_params *p, asp_mkdir_result *r, asp_arena *a,
                           asp_error *err);
asp_status asp_local_remove(void *self, const asp_remove_params *p, asp_remove_result *r,
                            asp_arena *a, asp_error *err);
asp_status asp_local_rename(void *self, const asp_rename_params *p, asp_rename_result *r,
                            asp_arena *a, asp_error *err);

asp_status asp_local_glob(void *self, const asp_glob_params *p, asp_glob_result *r, asp_arena *a,
                          asp_error *err);
asp_status asp_local_grep(void *self, const asp_grep_params *p, asp_grep_result *r, asp_arena *a,
                          asp_error *err);
asp_status asp_local_edit(void *self, const asp_edit_params *p, asp_edit_result *r, asp_arena *a,
                          asp_error *err);
/* hello's feature naming grep's regex dialect: grep-pcre2 or grep-ere (local_search.c). */
const char *local_grep_dialect(void);

/* The protocol's type name of a st_mode ("file", "dir", ...). */
const char *local_type_name(mode_t mode);

/*
 * Removes the directory `path` and everything in it, never following a symlink
 * (local_remove.c): 0, or an errno with `where` (may have cap 0) naming the entry below
 * `path` that could not be removed.
 */
int local_remove_tree(const char *path, char *where, size_t where_cap);

/* asp_mkdir_parents with this machine's mkdir(2): 0 or an errno. */
int local_mkdir_parents(const char *path, mode_t mode, mode_t parent_mode);

#endif
