/*
 * For a server edge: serving this machine's files and processes (the local backend) to
 * connections that speak the wire format (docs/design.md, "Wire format"). asp-agent's
 * stdio server and its HTTP/WebSocket listener are built on it. An edge reads a request
 * message from its connection, makes it an asp_request, and serves it on the connection's
 * binding; answers and the notifications of spawned processes go out through the
 * binding's sink.
 *
 * Ownership: handles are opaque; each *_new has one matching *_free, and free(NULL) is a
 * no-op. Arguments are borrowed unless a comment says the call takes them.
 */
#ifndef ASP_SERVER_H
#define ASP_SERVER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "asp/proto.h"
#include "asp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct iovec;

/* ---- logging ---------------------------------------------------------------------- */

/*
 * A server's diagnostic: the printf-style line, a newline added, to stderr in one
 * write(2), so lines from many threads never interleave. A line longer than about 1 KiB
 * is cut. Any thread; never fails (a write error is ignored: stderr may be gone).
 */
void asp_server_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the local backend ------------------------------------------------------------ */

/*
 * Every op done with POSIX calls in this process. Relative paths resolve against the
 * process's working directory. Ops may block (exec until the process ends) and run from
 * many threads at once.
 */
typedef struct asp_local asp_local;

/*
 * A backend whose responses fit `max_message` bytes (exec output trimmed, read length
 * capped); 0 means ASP_MAX_MESSAGE_DEFAULT. NULL when out of memory.
 */
asp_local *asp_local_new(size_t max_message);

/*
 * The owner serves many connections with this backend and outlives each (asp-agent
 * --listen), so a process can be reattached from another connection after the one that
 * spawned it closed: hello announces the feature "reattach". Before the first connection.
 */
void asp_local_set_shared(asp_local *l, bool shared);

/*
 * Ends every spawned process (TERM to its group, KILL 2 s later) and waits for them: a
 * responder calls it at the end of its input or on SIGTERM before it exits
 * (docs/design.md, "Concurrency and lifetime"). Later spawns fail. false when some
 * process's output could not be delivered in time (a connection's sink stays blocked):
 * the backend must then not be freed (exit instead). Any thread; may run while calls are
 * in flight (a proc_wait among them is answered).
 */
bool asp_local_shutdown(asp_local *l);

/* As asp_local_shutdown with the KILL `kill_after_ms` after the TERM (being killed soon). */
bool asp_local_shutdown_grace(asp_local *l, unsigned kill_after_ms);

/*
 * Ends the spawned processes still running (as asp_local_shutdown) and frees. NULL is a
 * no-op. No call may be in flight and every connection must be disconnected.
 */
void asp_local_free(asp_local *l);

/*
 * The responder's side (process-wide, so never in a host process): call it from the main
 * thread before starting any thread. Makes this process a child subreaper, so orphans of
 * commands are re-parented to it, forks a keeper process that moves us into a cgroup v2
 * child of our own where it may and, once we are gone (exit or SIGKILL), kills
 * everything in it and every process still carrying one of our markers; blocks SIGCHLD
 * (every thread started later inherits that; children start with an empty mask). Then
 * runs fn(arg) on this thread, then asp_local_reaper_finish, and returns fn's value.
 * Orphans are reaped by a thread that runs only while this process has children or
 * starts one, and ends a second after the last one is gone: at rest, no thread but fn's.
 * Where the reaper cannot be set up, fn runs alone (reported on stderr).
 */
int asp_local_reaper_run(int (*fn)(void *), void *arg);

/*
 * Async-signal-safe, for a stop signal's handler: while processes run (the reaper
 * thread exists), asks that thread to call the function given to
 * asp_local_reaper_on_stop with `sig` (it ends them and the process) and returns true;
 * false when no process of ours runs or starts: nothing to end, the caller may exit.
 */
bool asp_local_reaper_stop(int sig);
void asp_local_reaper_on_stop(void (*fn)(int sig, void *arg), void *arg);

/* At the responder's exit: kills every process carrying our marker and every orphan adopted. */
void asp_local_reaper_finish(void);

/* ---- connections ------------------------------------------------------------------ */

/* A reusable buffer to build frames in (see "requests" below). */
typedef struct asp_reply asp_reply;

/*
 * How the backend writes to one connection: answers as frames, and the notifications of
 * the processes the connection spawned or attached to as typed events (an edge encodes
 * them: asp_conn_sink_notify).
 */
typedef struct asp_conn_sink {
	/*
	 * Sends one whole frame (header included). Called from any thread, one frame at a
	 * time per call (the sink serializes its writes); may block while the peer is slow:
	 * that is the backpressure that leaves a process's pipe unread while its client does
	 * not read. Returns false once the connection is gone; it is then never called
	 * again. It must return (false) once the server has closed the connection, or
	 * asp_local_disconnect waits for it.
	 */
	bool (*send)(void *ctx, const uint8_t *frame, size_t len);
	void *ctx;
	/*
	 * Optional: as send, for one frame in pieces; a read's data then goes out from where
	 * the op put it instead of being copied into the frame first.
	 */
	bool (*sendv)(void *ctx, const struct iovec *iov, int iovcnt);
	/*
	 * Optional: one notification of a process as a typed event, `n` ASP_NOTICE_OUTPUT
	 * with an asp_output_event or ASP_NOTICE_EXIT with an asp_exit_event (asp/proto.h).
	 * The event and what it points to (the output's bytes, lent from the process's
	 * replay buffer) are valid only during the call: a sink that keeps them copies.
	 * Called as send is (any thread, one event at a time per subscriber and in order,
	 * may block, false once the connection is gone). NULL: each event goes out as a
	 * notification frame through send / sendv, encoded by asp_conn_sink_notify.
	 */
	bool (*event)(void *ctx, asp_notice_id n, const void *params);
} asp_conn_sink;

/*
 * The edges' encoding of a typed event: one notification frame [2, method, params]
 * (docs/design.md, "Wire format") through s->sendv when set (large output bytes then go
 * out from where the event points instead of being copied) else s->send. `scratch` is a
 * buffer to build the frame in (reused from call to call by one thread), or NULL for a
 * temporary one. What the sink returned; false too when out of memory. Any thread.
 */
bool asp_conn_sink_notify(const asp_conn_sink *s, asp_reply *scratch, asp_notice_id n,
                          const void *params);

/* One connection bound to the backend. */
typedef struct asp_local_conn asp_local_conn;

/*
 * Binds a connection (any thread). `sink` (copied) NULL: a connection that cannot carry
 * notifications (plain HTTP POST); its spawns still run and can be attached from
 * elsewhere, and proc_attach on it answers `unsupported`. NULL when out of memory.
 */
asp_local_conn *asp_local_connect(asp_local *l, const asp_conn_sink *sink);

/*
 * Unbinds: when it returns, the sink is never called again (processes the connection
 * spawned keep running, docs/design.md, "Operations"). No call on `c` may be in flight.
 * NULL is a no-op.
 */
void asp_local_disconnect(asp_local_conn *c);

/* The sink's ctx (NULL without a sink). */
void *asp_local_conn_ctx(const asp_local_conn *c);

/* ---- requests --------------------------------------------------------------------- */

/*
 * One request message read from a connection, on its way to being served. One thread
 * at a time per request (the reader makes it, a worker serves and frees it); requests
 * of one connection may be served on many threads at once.
 */
typedef struct asp_request asp_request;

/*
 * Checks one message (the bytes after a frame's length) without decoding it yet, and
 * takes `msg` (malloc'd). *cost (may be NULL) is what decoding will hold, the bytes and
 * msgpack-c's objects: a server bounds the sum over the requests it serves at once
 * (docs/faults.md) and calls asp_request_decode when the cost fits.
 *   ASP_OK: *out is the request.
 *   Another status with *out set: the message names a request id but is refused
 *     (too_large); serving it answers that id with the error in `err`.
 *   Another status with *out NULL: protocol_error (the connection must close;
 *     docs/design.md, "Faults and budgets"), or internal when out of memory. `msg` has
 *     been freed.
 */
asp_status asp_request_new(uint8_t *msg, size_t len, asp_request **out, size_t *cost,
                           asp_error *err);

/*
 * Decodes it. ASP_OK, or the refusal asp_request_new reported, or a new one: a request
 * with an id but bad params (invalid_argument; serving answers it), or protocol_error
 * when the message is not a request with an id (then asp_request_has_id is false and
 * the connection must close). `err` says why.
 */
asp_status asp_request_decode(asp_request *r, asp_error *err);

/* Whether the request has an id to answer; its id (0 without). */
bool asp_request_has_id(const asp_request *r);
uint32_t asp_request_id(const asp_request *r);

/*
 * What a decoded request asks, read without serving it: for a server that picks where
 * to serve it (the HTTP listener serves small local file calls on its own thread). All
 * point into the request and live as long as it. Before a successful asp_request_decode
 * there is nothing: NULL and false.
 *   asp_request_method: the method's bytes (not NUL-terminated), *len their count.
 *   asp_request_param_str: the str param `name`'s bytes, false when absent or not a str.
 *   asp_request_param_true: whether the param `name` is the bool true.
 */
const char *asp_request_method(const asp_request *r, size_t *len);
bool asp_request_param_str(const asp_request *r, const char *name, const char **s, size_t *len);
bool asp_request_param_true(const asp_request *r, const char *name);

/* Releases the request and its message. NULL is a no-op. */
void asp_request_free(asp_request *r);

/*
 * A reusable buffer a thread builds answers in: one per serving thread (never shared)
 * saves an allocation per request (asp_reply, declared above). NULL when out of memory.
 */
asp_reply *asp_reply_new(void);
void asp_reply_free(asp_reply *b); /* NULL is a no-op */
/* Releases the buffer's memory when it has grown past `keep` bytes (after a large answer). */
void asp_reply_trim(asp_reply *b, size_t keep);
/*
 * The answer ASP_SERVE_REPLY left in `b`: the whole frame (header included), malloc'd and
 * now the caller's, *len bytes. `b` is empty afterwards. NULL when there is none.
 */
uint8_t *asp_reply_take(asp_reply *b, size_t *len);

typedef enum asp_serve_result {
	ASP_SERVE_FAILED = -1, /* out of memory: nothing was sent; close the connection */
	ASP_SERVE_GONE = 0,    /* the sink failed: the connection is gone */
	ASP_SERVE_SENT = 1,    /* the answer went out through the sink */
	ASP_SERVE_REPLY = 2,   /* no sink: the answer is in `b` (asp_reply_take) */
	ASP_SERVE_RUNNING = 3, /* asp_local_exec_begin: the exec runs; no answer yet */
} asp_serve_result;

/*
 * Serves one decoded (or refused, with an id) request on `c` from any thread, many at
 * once: runs the op, or takes the refusal, and answers it through the sink; only then do
 * the processes it spawned or attached send notifications (docs/design.md, "Operations":
 * the spawn answer comes before the process's first notification; proc_attach replays
 * before its answer). Without a sink the answer is left in `b`. `r` stays the caller's.
 */
asp_serve_result asp_local_serve(asp_local_conn *c, asp_request *r, asp_reply *b);

/*
 * An exec driven by a server's event loop, for a connection without a sink (the HTTP
 * listener's POSTs): started on the loop's thread and followed there, so no other thread
 * wakes up for it (two wake-ups, a large part of an exec of `true`: docs/benchmarks.md).
 * Starting blocks the thread until the command is running (a vfork): the cwd and the
 * program's path are looked up meanwhile, so a server does this only where they cannot
 * hang (local filesystems) and hands other execs to asp_local_serve on a worker. One
 * thread at a time per exec; any number of execs at once.
 *
 * asp_local_exec_begin serves `r` (decoded or refused; it stays the caller's):
 *   ASP_SERVE_RUNNING: *x is the running exec, its command started; no answer yet.
 *   Otherwise as asp_local_serve: the answer is in `b` (params refused, a command that
 *     could not start), or ASP_SERVE_FAILED. A request that is not an exec, and an exec
 *     whose stdin is over PIPE_BUF bytes (feeding it takes turns of a loop), are served
 *     at once by asp_local_serve, on this thread, to their end.
 * asp_local_exec_wants: the fds to wait for now (at most ASP_LOCAL_EXEC_FDS, a subset of
 *   the first call's; each stays open until the exec closes it in a step or its end) and
 *   their events; *until is when to step even without an event (CLOCK_MONOTONIC ns,
 *   UINT64_MAX for never). 0 fds and *until 0 once it has ended.
 * asp_local_exec_step: serves `pfd` (as wants filled it, revents set; entries may be in
 *   any order and a subset) and the time; true once the answer can be made.
 * asp_local_exec_end: makes the answer in `b` (as asp_local_serve would have) and frees
 *   *x: ASP_SERVE_REPLY, or ASP_SERVE_FAILED when out of memory. Before the exec ended
 *   (a server going away) its command's whole tree is killed first.
 */
typedef struct asp_local_exec_job asp_local_exec_job;
#define ASP_LOCAL_EXEC_FDS 4
asp_serve_result asp_local_exec_begin(asp_local_conn *c, asp_request *r, asp_reply *b,
                                      asp_local_exec_job **x);
int asp_local_exec_wants(asp_local_exec_job *x, struct pollfd *pfd, uint64_t *until);
bool asp_local_exec_step(asp_local_exec_job *x, const struct pollfd *pfd, int n);
asp_serve_result asp_local_exec_end(asp_local_exec_job *x, asp_reply *b);

/*
 * For a server that reads requests on the thread that serves them: while this thread
 * serves one, an exec that waits for its command also polls `fd` and calls `ready(ctx)`
 * once it is readable, then stops watching it. So a lone exec can be served on the
 * thread that read it, and reading is handed to another thread only if more input comes
 * meanwhile (not before every exec, which costs two thread wake-ups). Per thread; set
 * before asp_local_serve, cleared (NULL) after. `ready` must not block for long. In
 * asp-agent (asp_local_reaper_run), `ready` is also called, from another thread, when
 * the command's start takes more than 20 ms (the start cannot watch: a cwd on a hung
 * mount holds it in the vfork wait).
 */
typedef struct asp_local_watch {
	int fd;
	void (*ready)(void *ctx);
	void *ctx;
} asp_local_watch;
void asp_local_watch_input(const asp_local_watch *w);

#ifdef __cplusplus
}
#endif

#endif
