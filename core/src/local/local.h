/*
 * The local backend: every unary op done with POSIX calls in this process. asp-agent
 * serves it to remote clients; tests and the CLI may call it directly. Relative paths
 * resolve against the process's working directory (the responder's start directory).
 */
#ifndef ASP_LOCAL_H
#define ASP_LOCAL_H

#include "asp/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct asp_local asp_local;

/*
 * A backend whose responses fit `max_message` bytes (exec output trimmed, read length
 * capped); 0 means ASP_MAX_MESSAGE_DEFAULT. NULL when out of memory.
 */
asp_local *asp_local_new(size_t max_message);

/*
 * The owner serves many connections with this backend and outlives each (asp-agent
 * --listen), so a process can be reattached from another connection after the one that
 * spawned it closed: hello on its connections announces the feature "reattach". Set it
 * before the first connection.
 */
void asp_local_set_shared(asp_local *l, bool shared);

/*
 * Ends the spawned processes still running (as asp_local_shutdown) and frees. NULL is a
 * no-op. No call may be in flight and every connection must be disconnected.
 */
void asp_local_free(asp_local *l);

/*
 * self is an asp_local *. Every op may block (exec until the process ends) and may be
 * called from many threads at once. The streaming ops (spawn, proc_*) are NULL here (they
 * need a connection: asp_local_conn_ops); run the table through asp_ops_complete() to
 * have them answer `unsupported`.
 */
extern const asp_ops asp_local_ops;

/*
 * Streaming (spawn, proc_*) needs to know which responder connection a request came
 * from: notifications of a process go to the connection that spawned it and to every
 * connection that attached to it. Each server (stdio, WebSocket, HTTP) wraps each of its
 * connections in a sink and passes the bound connection as `self` with
 * asp_local_conn_ops for the requests it reads from that connection.
 */
struct iovec;

typedef struct asp_conn_sink {
	/*
	 * Sends one whole frame (header included) to the connection. May be called from any
	 * thread and may block while the peer is slow: that is the backpressure that keeps
	 * a process's pipe unread while its client does not read. Returns false once the
	 * connection is gone; the backend then never calls it again. It must return (false)
	 * once the server has closed the connection, or asp_local_disconnect waits for it.
	 */
	bool (*send)(void *ctx, const uint8_t *frame, size_t len);
	void *ctx;
	/*
	 * Optional: as send, for one frame in pieces. With it, a response's large bins
	 * (a read's data) go out from where the op put them instead of being copied into
	 * the frame buffer first.
	 */
	bool (*sendv)(void *ctx, const struct iovec *iov, int iovcnt);
} asp_conn_sink;

typedef struct asp_local_conn asp_local_conn;

/*
 * Binds a connection to the backend. `sink` NULL: a connection that cannot carry
 * notifications (plain HTTP POST); its spawns still run and can be attached from
 * elsewhere, and proc_attach on it answers `unsupported`. NULL when out of memory. The
 * sink is copied.
 */
asp_local_conn *asp_local_connect(asp_local *l, const asp_conn_sink *sink);

/*
 * Unbinds: when it returns, the sink is never called again (processes the connection
 * spawned keep running, DESIGN §3). No call on `c` may be in flight. NULL is a no-op.
 */
void asp_local_disconnect(asp_local_conn *c);

/*
 * Every op, streaming ones included; self is an asp_local_conn *. hello lists them.
 * spawn and proc_attach called directly (outside asp_local_conn_serve or a hold) let
 * notifications flow at once, which may be before the caller has seen the result.
 */
extern const asp_ops asp_local_conn_ops;

/*
 * Serves one request read from a connection with a sink: runs it with
 * asp_local_conn_ops, sends the response through the sink, and only then lets the
 * processes it spawned or attached send notifications (DESIGN §3: the spawn response
 * comes before the process's first notification; proc_attach replays before its
 * response and live output follows it). `out` is the caller's reusable scratch buffer.
 * 1: sent; 0: the sink failed (the connection is gone); -1: out of memory, nothing sent
 * (the server should close the connection). Servers use this rather than asp_dispatch
 * plus their own write; a connection without a sink uses asp_dispatch and answers itself.
 */
struct asp_msg;
struct asp_buf;
int asp_local_conn_serve(asp_local_conn *c, const struct asp_msg *req, struct asp_buf *out);

/*
 * For a caller that calls asp_local_conn_ops itself and delivers the results in its own
 * way (the in-process transport): between hold and release, processes that spawn or
 * proc_attach on this thread start or attach keep their notifications for `c` back.
 * release lets them flow. Not nested; one connection per thread at a time.
 */
void asp_local_conn_hold(asp_local_conn *c);
void asp_local_conn_release(asp_local_conn *c);

/* The sink's ctx (NULL without a sink): lets an owner find its state from `c`. */
void *asp_local_conn_ctx(const asp_local_conn *c);

/*
 * Ends every spawned process (TERM to its group, KILL 2 s later) and waits for them: the
 * responder calls it on EOF or SIGTERM before it exits (DESIGN §5). Later spawns fail.
 * false when some process's output could not be delivered in time (a connection's sink
 * stays blocked): the backend must then not be freed (exit the process instead).
 */
bool asp_local_shutdown(asp_local *l);

/*
 * As asp_local_shutdown with the KILL `kill_after_ms` after the TERM: for a responder
 * that is being terminated itself and may be killed before 2 s are up.
 */
bool asp_local_shutdown_grace(asp_local *l, unsigned kill_after_ms);

/*
 * The responder's side (asp-agent only; process-wide, so never in a host process):
 * asp_local_reaper_start makes this process a child subreaper, so orphans of commands are
 * re-parented to it rather than to init, starts a thread that reaps those orphans (never
 * a child that local_child_start made: its owner reaps it), and forks a keeper process
 * that outlives us and, once we are gone (exit or SIGKILL), kills every process still
 * carrying one of our markers. Call it before starting any thread. 0, or -1 (Linux only;
 * then nothing changed but what a partial start could not undo, reported on stderr).
 */
int asp_local_reaper_start(void);

/* At the responder's exit: kills every process carrying one of our markers and every
 * orphan we adopted (even one that cleared its environment). */
void asp_local_reaper_finish(void);

/*
 * edit's replacement on a file's bytes, for any backend that reads and writes the file
 * itself (native SSH): the new bytes (malloc'd, *out_len of them) and how many
 * occurrences; not_found / invalid_argument (with the count) as the spec says.
 */
asp_status asp_edit_apply(const asp_edit_params *p, const uint8_t *buf, size_t n, uint8_t **out,
                          size_t *out_len, uint64_t *count, asp_error *err);

#endif
