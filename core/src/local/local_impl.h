/* What the local backend's files share: its state, the op functions and small helpers. */
#ifndef ASP_LOCAL_IMPL_H
#define ASP_LOCAL_IMPL_H

#include "local.h"
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

/*
 * The ops a bound connection adds to asp_local_ops (local_conn.c): `self` is the
 * asp_local_conn. hello lists what this and asp_local_ops fill.
 */
extern const asp_ops local_stream_ops;

/* The ops (local.c, local_exec.c, local_files.c, local_fs.c, local_remove.c). */
/*
 * hello's result; `streaming` adds local_stream_ops's to the ops it lists, `follow` (a
 * connection with a sink) the feature "follow", and a shared backend "reattach".
 */
asp_status local_hello(asp_local *l, bool streaming, bool follow, asp_hello_result *r, asp_arena *a,
                       asp_error *err);
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

/* ---- time, for exec and the pumps of spawned processes --------------------------- */

#define NS_PER_MS     1000000ull
#define KILL_GRACE_NS (2000ull * NS_PER_MS) /* KILL 2 s after TERM (design.md, "Operations") */
/* After the KILL, pipes still open belong to processes that left the group (setsid):
 * stop waiting for them. */
#define GIVE_UP_NS     (500ull * NS_PER_MS)
#define MAX_TIMEOUT_MS (1000ull * 1000 * 1000 * 10) /* ~115 days: as good as none */
#define BIG_OUTPUT     (256u * 1024u)               /* past this, a bigger pipe saves wakeups */

/* CLOCK_MONOTONIC in ns. */
uint64_t local_now_ns(void);

/* poll's timeout from now until `until` (UINT64_MAX: none, -1), rounded up to a ms. */
int local_poll_ms(uint64_t now, uint64_t until);

/* `ms` from now on CLOCK_MONOTONIC, for a condition variable made by local_cond_init. */
void local_deadline(struct timespec *dl, uint64_t ms);

/* A condition variable whose timed waits use CLOCK_MONOTONIC. */
void local_cond_init(pthread_cond_t *cv);

/* internal "OP: out of memory in the responder" (asp_error_oom). */
asp_status local_oom(const char *op, asp_error *err);

/*
 * Hands a malloc'd buffer of `len` used bytes (`cap` allocated) to the arena as `out`:
 * small ones are copied (so the arena does not hold a mostly empty block), large ones
 * adopted without a copy. `buf` is consumed either way. 0, or -1 when out of memory.
 */
int local_bytes_give(asp_arena *a, uint8_t *buf, size_t len, size_t cap, asp_bytes *out);

/* The protocol's type name of a st_mode ("file", "dir", ...). */
const char *local_type_name(mode_t mode);

/* asp_mkdir_parents with this machine's mkdir(2): 0 or an errno. */
int local_mkdir_parents(const char *path, mode_t mode, mode_t parent_mode);

#endif
