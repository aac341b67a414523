/*
 * For transport authors: how a transport plugs into libasp. The core knows no transport;
 * each one registers an asp_transport, and libasp registers every transport it was built
 * with before the first client opens. A message transport implements a frame channel and
 * hands it to the core's RPC engine; a transport with its own file protocol implements
 * the op table (asp_ops) itself.
 */
#ifndef ASP_TRANSPORT_H
#define ASP_TRANSPORT_H

#include <stdbool.h>

#include "asp/config.h"
#include "asp/proc.h"
#include "asp/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The local backend as a transport: ops run with POSIX calls in this process. Internal
 * (tests, embedding); never a value of .asp.json's "transport".
 */
#define ASP_TRANSPORT_LOCAL ((asp_transport_kind)100)

/*
 * Kinds from here up are an application's own transports (examples/unix-socket): it
 * registers one with asp_transport_register and opens clients with
 * asp_client_open_view, putting what to connect to in the view's `target`.
 */
#define ASP_TRANSPORT_USER_MIN ((asp_transport_kind)1000)

/*
 * One follower of one spawned process (asp/proc.h): the user's callbacks, the order and
 * offset checks, the buffer of what arrives before its call's answer. A transport that
 * streams delivers the process's notifications into it. Reference counted.
 */
typedef struct asp_proc_sub asp_proc_sub;

/* A follower calling `cb` (copied) with `user`; NULL when out of memory. */
asp_proc_sub *asp_proc_sub_new(const asp_proc_callbacks *cb, void *user);
asp_proc_sub *asp_proc_sub_ref(asp_proc_sub *s);
/* The offsets the call asked for (0, 0 for a spawn): what comes before is a repeat. */
void asp_proc_sub_expect(asp_proc_sub *s, uint64_t stdout_offset, uint64_t stderr_offset);
void asp_proc_sub_unref(asp_proc_sub *s); /* NULL is a no-op */

/*
 * Deliveries, from any one thread at a time. Before asp_proc_sub_start they are kept
 * (an attach's replay comes before its answer); after a terminal event, or after
 * asp_proc_sub_close, they are dropped. Chunks that repeat bytes already delivered are
 * trimmed, so a replay overlapping live output is harmless.
 */
void asp_proc_sub_output(asp_proc_sub *s, const asp_output_event *ev);
void asp_proc_sub_exit(asp_proc_sub *s, const asp_exit_event *ev);
/* A watch's change; one that comes before asp_proc_sub_start is dropped (the gates of
 * every transport make that impossible: a watch's events follow its answer). */
void asp_proc_sub_fs_event(asp_proc_sub *s, const asp_fs_event_event *ev);
void asp_proc_sub_lost(asp_proc_sub *s, const asp_error *why);

/* The call succeeded for process `proc`: what was kept is delivered now, on this thread. */
void asp_proc_sub_start(asp_proc_sub *s, uint64_t proc);
/* The call failed: nothing is ever delivered. */
void asp_proc_sub_fail(asp_proc_sub *s);
/* No callback after this returns (but the one running on this thread, if any). */
void asp_proc_sub_close(asp_proc_sub *s);
/* True once it has delivered its last event (exit or lost) or was closed or failed. */
bool asp_proc_sub_done(asp_proc_sub *s);

typedef struct asp_transport {
	asp_transport_kind kind;
	const char *name; /* "stdio", ...: for messages */
	/*
	 * Connects to the sandbox `cfg` describes and returns the backend: its op table and
	 * the `self` every op gets. `cfg` stays valid until the backend is closed. May
	 * block (spawning, connecting). Called again to reconnect after a transport_error.
	 */
	asp_status (*open)(const asp_config_view *cfg, const asp_ops **ops, void **self,
	                   asp_error *err);
	/*
	 * Optional. Makes the calls in flight on `self` fail promptly with transport_error,
	 * and later ones at once. Never blocks; may run while calls are in flight.
	 */
	void (*abort)(void *self);
	/* Frees `self`. Called once, when no call is inside it any more. */
	void (*close)(void *self);
	/*
	 * Optional (NULL: always true). Whether `self` can still carry calls; when false,
	 * the next call reconnects first instead of failing. Must be cheap: called per call.
	 */
	bool (*alive)(void *self);
	/*
	 * Optional (NULL: asp_spawn_start and asp_proc_attach_start answer unsupported).
	 * Runs `op` (ASP_OP_SPAWN or ASP_OP_PROC_ATTACH) like the op table, routing the
	 * process's notifications on this connection to `sub`: on success it has called
	 * asp_proc_sub_start before returning; on failure it calls asp_proc_sub_fail. A
	 * connection that dies calls asp_proc_sub_lost on every sub it routes to.
	 */
	asp_status (*subscribe)(void *self, asp_op_id op, const void *params, void *result,
	                        asp_arena *a, asp_proc_sub *sub, asp_error *err);
	/* Optional: stops routing `proc` (asp_proc_detach); closes its sub. */
	void (*unsubscribe)(void *self, uint64_t proc);
	/*
	 * Optional (NULL: not known). The largest message `self` takes when that is known
	 * without a round trip (a backend that frames nothing, as native SSH), else 0: a
	 * caller that needs it asks hello.
	 */
	size_t (*max_message)(void *self);
} asp_transport;

/* ---- helpers for a backend that implements the op table itself ------------------- */

/* Points every NULL slot of `ops` at a function that answers `unsupported`. */
void asp_ops_complete(asp_ops *ops);

/*
 * What hello announces: the names, in spec order, of the ops whose slot is filled in any
 * of the `n` tables (NULL entries skipped). `out` has room for ASP_OP_COUNT; returns how
 * many. Call it before asp_ops_complete fills the rest.
 */
size_t asp_ops_filled(const asp_ops *const *tables, size_t n, const char **out);

/*
 * The checks of write's params every backend makes alike, so the same input gets the
 * same answer: offset with append or atomic, mode beyond 07777, offset out of range
 * (invalid_argument).
 */
asp_status asp_check_write_params(const asp_write_params *p, asp_error *err);

/* The largest rows and cols a terminal may have (spawn's tty, proc_resize). */
#define ASP_TTY_MAX 4096

/*
 * A terminal's size as every backend checks it: rows and cols from 1 to ASP_TTY_MAX, else
 * invalid_argument naming `what` ("spawn", "proc_resize") and the bad value.
 */
asp_status asp_check_tty_size(const char *what, uint64_t rows, uint64_t cols, asp_error *err);

/* The TERM a terminal gets when spawn's tty names none. */
#define ASP_TTY_TERM_DEFAULT "xterm-256color"

/*
 * invalid_argument "OP: field 'FIELD' is required" when `value` is NULL (a direct caller
 * may leave a required string out), else ASP_OK.
 */
asp_status asp_check_required(const char *op, const char *field, const char *value, asp_error *err);

/*
 * A path every backend checks alike (docs/design.md, "Operations"): NULL is
 * asp_check_required's invalid_argument; "" names nothing and is not_found, as the file
 * ops answer it, so no op takes it for the working directory ("." is that).
 */
asp_status asp_check_path(const char *op, const char *path, asp_error *err);

/*
 * The directory part of `path`, malloc'd: "a" for "a//b", "/" for "/b". NULL when it has
 * none ("b") or out of memory; strchr(path, '/') tells the two apart.
 */
char *asp_path_parent(const char *path);

/*
 * A backend's own one-level mkdir, for asp_mkdir_parents. Each returns 0, an errno, or -1
 * when the backend failed in a way an errno does not say (a lost connection; `ctx` keeps
 * why): asp_mkdir_parents then stops and returns -1.
 */
typedef struct asp_mkdir_fns {
	/* Makes one directory: 0, ENOENT (its parent is missing), EEXIST (something is
	 * there, of any kind), or another errno. */
	int (*mkdir)(void *ctx, const char *path, unsigned mode);
	/* After EEXIST: 0 when `path` is a directory, EEXIST for another kind, or an errno. */
	int (*exists)(void *ctx, const char *path);
	/* After ENOENT where the parents were there or made: the precise errno (ENOTDIR when
	 * an ancestor is not a directory). NULL: ENOENT. */
	int (*missing)(void *ctx, const char *path);
} asp_mkdir_fns;

/*
 * mkdir -p with the fewest calls (the local backend and SFTP alike): tries `path`
 * (trailing slashes ignored) with `mode`; when its parent is missing, walks back to the
 * deepest ancestor that exists or can be made (with `parent_mode`), then forward. An
 * existing directory is success, an existing non-directory at `path` is EEXIST. Returns
 * 0, an errno (ENOMEM when out of memory), or -1 from a callback.
 */
int asp_mkdir_parents(const char *path, unsigned mode, unsigned parent_mode,
                      const asp_mkdir_fns *fns, void *ctx);

/*
 * edit's replacement on a file's bytes, for a backend that reads and writes the file
 * itself (native SSH): the new bytes (malloc'd, *out_len of them; the caller frees) and
 * how many occurrences; not_found / invalid_argument (with the count) as the spec says.
 */
asp_status asp_edit_apply(const asp_edit_params *p, const uint8_t *buf, size_t n, uint8_t **out,
                          size_t *out_len, uint64_t *count, asp_error *err);

/*
 * A transport that streams with a protocol of its own (SSH native mode) routes each
 * process's output and exit to its followers with one of these per connection. The
 * call protocol every streaming transport shares: an attach's follower is listed before
 * its request (the replay comes first), a spawn's once the answer names the process; the
 * transport keeps later events back meanwhile. Thread-safe; its own lock.
 */
typedef struct asp_proc_routes asp_proc_routes;

/* NULL when out of memory. */
asp_proc_routes *asp_proc_routes_new(void);

/* Closes and releases the followers left (no callback). NULL is a no-op. */
void asp_proc_routes_free(asp_proc_routes *t);

/*
 * An event (ASP_NOTICE_OUTPUT with an asp_output_event, ASP_NOTICE_EXIT with an
 * asp_exit_event) to the process's follower, on this thread; one for nobody is dropped.
 */
void asp_proc_routes_route(asp_proc_routes *t, asp_notice_id n, const void *params);

/*
 * The connection died: every follower gets on_lost (on this thread) and later calls
 * fail with `why`. Idempotent.
 */
void asp_proc_routes_lost(asp_proc_routes *t, const asp_error *why);

/* Unlists `proc`'s follower and closes it (asp_proc_detach). */
void asp_proc_routes_remove(asp_proc_routes *t, uint64_t proc);

/*
 * The first process handle a backend hands out (then counting up): a random point in
 * [2^16, 2^30 + 2^16), so that a handle from a connection that died names nothing on the
 * next one. Numbered from 1, a client that reconnected waited on, signalled or detached
 * another process under the old number (bench/soak found it). Below 2^32: the TypeScript
 * SDK sends larger numbers as floats.
 */
uint64_t asp_proc_first_id(void);

/* The transport's plain call of `op`. */
typedef asp_status (*asp_proc_call_fn)(void *ctx, asp_op_id op, const void *params, void *result,
                                       asp_arena *a, asp_error *err);

/*
 * Runs `call` for spawn or proc_attach with `sub` following the process on this
 * connection, as asp_transport.subscribe promises. The transport must hold the process's
 * events back from the moment `call` has the answer until this returns.
 */
asp_status asp_proc_routes_call(asp_proc_routes *t, asp_proc_call_fn call, void *ctx, asp_op_id op,
                                const void *params, void *result, asp_arena *a, asp_proc_sub *sub,
                                asp_error *err);

/* ---- registration ----------------------------------------------------------------- */

/*
 * Makes `t` (static storage, kept by pointer) the transport for t->kind, replacing any
 * registered before. invalid_argument when a mandatory slot is NULL; too_large when the
 * registry is full. Thread-safe.
 */
asp_status asp_transport_register(const asp_transport *t, asp_error *err);

/* The transport registered for `kind`, or NULL. */
const asp_transport *asp_transport_find(asp_transport_kind kind);

/*
 * Opens a client from a config view built in memory (every string copied; the view may
 * be freed afterwards). transport may be ASP_TRANSPORT_LOCAL. As asp_client_open.
 */
asp_status asp_client_open_view(const asp_config_view *view, asp_client **out, asp_error *err);

/*
 * The largest message the client's connection takes when its transport knows it without
 * a round trip (asp_transport.max_message), else 0. Opens no connection.
 */
size_t asp_client_max_message_known(asp_client *c);

#ifdef __cplusplus
}
#endif

#endif
