/*
 * What the streaming cases (cases_proc.c, cases_tty.c) share: a collector of what one
 * follower received, a fixture that cleans up after a case whatever happened, and
 * helpers that record a failure at the caller's line.
 */
#ifndef ASP_CONF_FOLLOW_H
#define ASP_CONF_FOLLOW_H

#include "conformance.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SAFETY_TIMEOUT_MS 30000 /* every spawn ends by then even if a case fails */
#define END_WAIT_MS       15000
#define MIB               (1024u * 1024u)

/* ---- a collector: what one follower received ------------------------------------- */

typedef struct coll {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	void *self;    /* the connection it follows on */
	uint64_t proc; /* set once followed */
	bool followed;
	uint8_t *data[2];
	size_t len[2], keep; /* bytes kept per stream (the rest only counted) */
	size_t cap[2];       /* data's allocated size */
	uint64_t total[2], first[2], next[2];
	bool got[2];
	uint64_t seen_proc; /* the proc the callbacks named */
	int chunks[2];
	double t_first, t_last, t_end;
	char bad[256]; /* the first broken promise */
	bool ended, exited, lost;
	asp_exit_event ev;
	char sig[16];
	bool eof_seen; /* on_eof of stdout (a connection's peer shut its side) */
	char fs[8192]; /* fs_events as "KIND PATH\n" lines (a watch), as many as fit */
	size_t fs_len;
	int fs_count;
	int delay_ms;      /* a slow reader: sleep this long per chunk ... */
	bool slow;         /* ... while this holds ... */
	double slow_until; /* ... and until then (a case that failed must not crawl) */
} coll;

double mono_ms(void);
void coll_init(coll *c, size_t keep);
void coll_destroy(coll *c);
/* Waits until the follower ended; false after `ms`. */
bool coll_wait_end(coll *c, int ms);
/* Waits until stream `s` has at least `n` bytes; false after `ms`. */
bool coll_wait_bytes(coll *c, int s, uint64_t n, int ms);
/* Waits until the fs_event log holds the line `line` ("KIND PATH"); false after `ms`. */
bool coll_wait_fs(coll *c, const char *line, int ms);
/* Stream `s` kept exactly `want`. */
bool coll_is(coll *c, int s, const char *want);
/* A printable excerpt of stream `s`, for messages. */
const char *coll_show(conf_ctx *ctx, coll *c, int s);

/* ---- the fixture ------------------------------------------------------------------ */

#define MAX_COLL  6
#define MAX_PROCS 16

typedef struct fx {
	conf_ctx *ctx;
	coll c[MAX_COLL];
	int ncoll;
	uint64_t procs[MAX_PROCS];
	int nprocs;
	void *peer;
} fx;

/* A fresh collector of the case, or NULL when all are taken. */
coll *fx_coll(fx *f, size_t keep);
void kill_proc(conf_ctx *ctx, void *self, uint64_t proc);
/* KILLs what the case spawned, detaches what it still follows, frees the collectors. */
void fx_done(fx *f);

/* A case with a fixture `f` that runs fx_done however the body returns. */
#define PROC_CASE(name)                                                                            \
	static void name##_body(conf_ctx *ctx, fx *f);                                             \
	void name(conf_ctx *ctx)                                                                   \
	{                                                                                          \
		fx f = {.ctx = ctx};                                                               \
		name##_body(ctx, &f);                                                              \
		fx_done(&f);                                                                       \
	}                                                                                          \
	static void name##_body(conf_ctx *ctx, fx *f)

/* ---- helpers: each records a failure at the caller's line ------------------------- */

/* Spawns on `self`, followed by `c` (NULL: not followed); the fixture will KILL it. */
asp_status do_spawn(conf_ctx *ctx, fx *f, void *self, asp_spawn_params *p, coll *c, uint64_t *proc,
                    asp_error *err);
bool h_spawn(conf_ctx *ctx, fx *f, int line, asp_spawn_params *p, coll *c, uint64_t *proc);
/* A collector's end within END_WAIT_MS, with no broken promise. */
bool h_end(conf_ctx *ctx, int line, coll *c);
asp_status do_wait(conf_ctx *ctx, uint64_t proc, uint64_t ms, asp_proc_wait_result *r,
                   asp_error *err);
asp_status do_signal(conf_ctx *ctx, uint64_t proc, const char *sig, asp_error *err);
asp_status do_write(conf_ctx *ctx, uint64_t proc, const void *data, size_t len, bool eof,
                    asp_error *err);
/*
 * connect; with `c` followed from the answer on through the registration's connect (which
 * must exist), without it a plain connect. Recorded in f->procs (closed at the end).
 */
asp_status do_connect(conf_ctx *ctx, fx *f, void *self, const asp_connect_params *p, coll *c,
                      uint64_t *proc, asp_error *err);
/*
 * tree_read followed by `c`: from the answer on through the registration's tree_read,
 * else a plain tree_read and proc_attach from offset 0.
 */
asp_status do_tree_read(conf_ctx *ctx, fx *f, void *self, const asp_tree_read_params *p, coll *c,
                        uint64_t *proc, asp_error *err);
asp_status do_attach(conf_ctx *ctx, void *self, uint64_t proc, uint64_t out_off, uint64_t err_off,
                     coll *c, asp_error *err);
asp_strv strv_of(conf_ctx *ctx, const char *const *items, size_t n);
/* exec of `cmd` through sh in the case's directory. */
bool h_sh(conf_ctx *ctx, int line, const char *cmd, asp_exec_result *r);

#define SPAWN(p, c, proc) CONF_REQ(ctx, h_spawn(ctx, f, __LINE__, (p), (c), (proc)))
#define END(c)            CONF_REQ(ctx, h_end(ctx, __LINE__, (c)))
#define COLL(var, keep)                                                                            \
	coll *var = fx_coll(f, (keep));                                                            \
	CONF_CHECK(ctx, var != NULL)
#define ARGV(...)                                                                                  \
	strv_of(ctx, (const char *const[]){__VA_ARGS__},                                           \
	        sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

#endif
