/*
 * The cross-transport conformance suite: one table of named cases, each exercising the op
 * semantics of docs/design.md, "Operations" through an op table only (never local POSIX
 * calls), so the same cases run against the local backend, stdio, SSH, HTTP and a real
 * sandbox. No test framework inside: a case records its first failure (file:line and a
 * message) and returns; runners (conf_run_all, conf_cunit.c, `asp conformance`) report
 * it.
 *
 * Verdicts judge only what the responder claims. A case declares the ops it needs beyond
 * protocol 1's unary ones (which every responder has; hello_fields checks that hello
 * lists them) and the hello features it needs ("follow", "reattach"); the runner asks
 * hello before the case, and a case whose needs hello does not announce is `n/a`, with
 * the missing op or feature as the reason, and does not fail the run. A case that runs
 * and breaks a promise fails, announced or not.
 */
#ifndef ASP_CONFORMANCE_H
#define ASP_CONFORMANCE_H

#include "asp/proc.h"
#include "asp/proto.h"

#include <stdbool.h>
#include <stdio.h>

/*
 * What a registration offers beyond its op table for the streaming cases: following a
 * process's notifications (asp/proc.h semantics) and, optionally, a second connection to
 * the same responder (reattaching after a connection closed). Each function gets `ctx`
 * and the connection's `self`. A case needing the feature "follow" is n/a without it,
 * one needing "reattach" without peer_open, whatever hello announces.
 */
typedef struct conf_streaming {
	asp_status (*spawn)(void *ctx, void *self, const asp_spawn_params *p,
	                    const asp_proc_callbacks *cb, void *user, uint64_t *proc,
	                    asp_error *err);
	asp_status (*attach)(void *ctx, void *self, const asp_proc_attach_params *p,
	                     const asp_proc_callbacks *cb, void *user, asp_error *err);
	void (*detach)(void *ctx, void *self, uint64_t proc);
	/*
	 * Optional: connect, followed from its answer on (as spawn is). Without it the
	 * connect cases call connect and then proc_attach.
	 */
	asp_status (*connect)(void *ctx, void *self, const asp_connect_params *p,
	                      const asp_proc_callbacks *cb, void *user, uint64_t *proc,
	                      asp_error *err);
	/*
	 * Optional: tree_read, followed from its answer on. Without it the tree cases call
	 * tree_read and then proc_attach (which replays the stream's first 256 KiB).
	 */
	asp_status (*tree_read)(void *ctx, void *self, const asp_tree_read_params *p,
	                        const asp_proc_callbacks *cb, void *user, uint64_t *proc,
	                        asp_error *err);
	/* Another connection (a `self` for the same ops), or NULL; NULL slots: none. */
	void *(*peer_open)(void *ctx);
	void (*peer_close)(void *ctx, void *peer);
	void *ctx;
	/*
	 * Optional: what to do about a need (an op or feature name) hello lacks, for the
	 * transport in use ("set websocket true ..."), appended to the n/a reason; NULL: no
	 * advice.
	 */
	const char *(*hint)(void *ctx, const char *need);
} conf_streaming;

typedef struct conf_ctx {
	const asp_ops *ops; /* every slot non-NULL (see asp_ops_complete) */
	void *self;
	const conf_streaming *st; /* NULL: no streaming */
	bool follow; /* hello announces "follow" and st can: a case may follow where it wants */
	const char *root; /* absolute scratch directory shared by all cases */
	const char *dir;  /* this case's own empty directory under root */
	asp_arena *a;     /* for the case's allocations; freed after the case */
	/* the first failure */
	bool failed;
	bool skipped; /* the sandbox lacks a tool the case needs (reported, not failed) */
	bool na;      /* hello does not announce what the case needs (reported, not failed) */
	const char *file;
	int line;
	char msg[1024];
} conf_ctx;

typedef void (*conf_fn)(conf_ctx *ctx);

typedef struct conf_case {
	const char *name; /* "exec_timeout_kills_group": op first, unique, a C identifier */
	conf_fn fn;
	const char *what; /* one line for listings */
	/* Space-separated: ops beyond the unary ones, hello features; NULL: none. */
	const char *ops;
	const char *features;
} conf_case;

/* The hello features cases may need (spec/protocol.json, hello result "features"). */
#define CONF_FEATURE_FOLLOW   "follow"
#define CONF_FEATURE_REATTACH "reattach"
#define CONF_FEATURE_PTY      "pty"

/* The table, in a stable order. */
extern const conf_case conf_cases[];
extern const size_t conf_case_count;

/* The case called `name`, or NULL. */
const conf_case *conf_find(const char *name);

/* Records the first failure of the case; later calls are ignored. */
void conf_fail(conf_ctx *ctx, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Marks the case skipped with a reason (not a failure). */
void conf_skip(conf_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Marks the case n/a with a reason (not a failure): the runner does, from hello. */
void conf_na(conf_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct conf_outcome {
	bool passed;  /* true for a skip and an n/a too */
	bool skipped; /* did not run to the end: a skip, or an n/a */
	bool na;      /* n/a: msg names the op or feature hello lacks */
	const char *file;
	int line;
	char msg[1024];
	double ms;
} conf_outcome;

/*
 * Runs one case in a fresh directory ROOT/NAME (made and, unless the case failed,
 * removed through the ops). `root` must be absolute and exist.
 */
void conf_run_case(const conf_case *c, const asp_ops *ops, void *self, const char *root,
                   conf_outcome *out);

/* As conf_run_case, with streaming (may be NULL). */
void conf_run_case_st(const conf_case *c, const asp_ops *ops, void *self, const conf_streaming *st,
                      const char *root, conf_outcome *out);

/* "PASS", "FAIL", "SKIP" or "n/a", as the table shows it. */
const char *conf_verdict(const conf_outcome *o);

/*
 * Runs every case (or, with `only` non-NULL, those whose names contain it) and prints a
 * PASS/FAIL/SKIP/n/a table to `report` (may be NULL). Returns the number of failures.
 */
int conf_run_filtered(const asp_ops *ops, void *self, const char *root, const char *only,
                      FILE *report);

/* As conf_run_filtered, with streaming (may be NULL). */
int conf_run_filtered_st(const asp_ops *ops, void *self, const conf_streaming *st, const char *root,
                         const char *only, FILE *report);

/* All cases. Returns the number of failures. */
int conf_run_all(const asp_ops *ops, void *self, const char *root, FILE *report);

/* Prints "name  what" per case, and what it needs. */
void conf_list(FILE *out);

/*
 * conf_cunit.c (links CUnit): registers the whole table as one CUnit suite `suite`, one
 * test per case, against `ops`/`self`. The suite's init makes a fresh scratch directory
 * under `parent` (absolute, in the sandbox) through the ops and its cleanup removes it,
 * so any transport registers with one call. 0, or -1 if CUnit refused.
 */
int conf_register_cunit(const char *suite, const asp_ops *ops, void *self, const char *parent);

/* As conf_register_cunit, with streaming (may be NULL; kept by pointer). */
int conf_register_cunit_st(const char *suite, const asp_ops *ops, void *self,
                           const conf_streaming *st, const char *parent);

/*
 * conf_stream.c (links libasp): streaming through the public client API (self is an
 * asp_client *), and through a transport's subscribe slots (ctx is the asp_transport).
 */
extern const conf_streaming conf_client_streaming;
/* The client's calls as an op table (self is an asp_client *): reconnects, config applied. */
extern const asp_ops conf_client_ops;
struct asp_transport;
void conf_transport_streaming(conf_streaming *st, const struct asp_transport *t);

/* Upper bound on what should take well under a second (a timeout taking effect): generous for a
 * starved machine, and still a third of the 30 s the commands would run without it. */
#define CONF_SLOW_MS 10000

/*
 * sh: "alive" or "dead" for the pid in FILE (relative to the case dir). A zombie counts
 * as dead: in a container whose init does not reap, a killed orphan stays one. No pid in
 * FILE counts as dead too (nothing to find; a case checks the file first where it
 * matters), rather than reading /proc/ itself.
 */
#define CONF_PID_STATE_SH(file)                                                                    \
	"p=$(cat " file " 2>/dev/null); st=dead; case \"$p\" in ''|*[!0-9]*) p=0 ;; esac; "        \
	"if [ $p = 0 ]; then :; elif [ -d /proc/$p ]; then s=$(sed 's/.*) //' /proc/$p/stat "      \
	"2>/dev/null | cut -c1); "                                                                 \
	"case \"$s\" in ''|Z) ;; *) st=alive ;; esac; "                                            \
	"elif [ ! -d /proc/self ] && kill -0 $p 2>/dev/null; then st=alive; fi; printf %s $st"

/* Checks. Each records file:line and returns from the case when it fails. */
#define CONF_CHECK(ctx, cond)                                                                      \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			conf_fail((ctx), __FILE__, __LINE__, "check failed: %s", #cond);           \
			return;                                                                    \
		}                                                                                  \
	} while (0)

#define CONF_CHECKF(ctx, cond, ...)                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			conf_fail((ctx), __FILE__, __LINE__, __VA_ARGS__);                         \
			return;                                                                    \
		}                                                                                  \
	} while (0)

/* `st` must be ASP_OK; the message carries the error's code and text. */
#define CONF_OK(ctx, st, err)                                                                      \
	do {                                                                                       \
		asp_status st_ = (st);                                                             \
		if (st_ != ASP_OK) {                                                               \
			conf_fail((ctx), __FILE__, __LINE__, "expected ok, got %s: %s",            \
			          asp_strerror(st_), (err)->message);                              \
			return;                                                                    \
		}                                                                                  \
	} while (0)

/* `st` must be the error `code`. */
#define CONF_ERR(ctx, st, code, err)                                                               \
	do {                                                                                       \
		asp_status st_ = (st);                                                             \
		if (st_ != (code)) {                                                               \
			conf_fail((ctx), __FILE__, __LINE__, "expected %s, got %s%s%s",            \
			          asp_strerror(code), asp_strerror(st_),                           \
			          st_ != ASP_OK ? ": " : "", st_ != ASP_OK ? (err)->message : ""); \
			return;                                                                    \
		}                                                                                  \
	} while (0)

/* Leaves the case when a helper (which recorded why) failed. */
#define CONF_REQ(ctx, ok)                                                                          \
	do {                                                                                       \
		if (!(ok) || (ctx)->failed || (ctx)->skipped || (ctx)->na)                         \
			return;                                                                    \
	} while (0)

#endif
