/*
 * Spawned processes with live output (spawn and proc_*, docs/design.md, "Operations"): start a
 * process or attach to one, and get its output and exit through callbacks as they happen.
 *
 * proc_write, proc_signal, proc_resize, proc_wait and proc_list are the plain calls of
 * asp/proto.h (asp_proc_write, ...). The generated asp_spawn and asp_proc_attach work too,
 * but nothing receives the notifications they cause; use the two calls below.
 *
 * Threads. Callbacks run on the thread reading the connection: for stdio one of the
 * engine's pool workers, shared by all connections (asp/channel.h); the connection's
 * reader thread (WebSocket, SSH agent mode); its delivery thread (SSH native mode) or,
 * in process, the process's pump thread. The output that asp_proc_attach_start replays
 * runs on the calling thread before that call returns.
 * For one subscription they never run concurrently, and they come in order: each
 * stream's chunks with contiguous offsets, then on_exit after all output. A callback must
 * return soon and must not make calls on the same client (the reading thread would be
 * waiting for its own answer): hand the data to another thread for anything slow. A slow
 * callback is backpressure: the responder stops reading the process's output meanwhile
 * (and, over stdio, it holds one of the pool's few workers).
 *
 * Ownership. `cb` is copied; `user` is borrowed until the last callback (on_exit or
 * on_lost) has returned or asp_proc_detach returned. Event data is valid only during the
 * callback. A start call that fails never calls a callback (libuv's rule); one that
 * succeeds calls exactly one of on_exit and on_lost at the end, unless detached first.
 */
#ifndef ASP_PROC_H
#define ASP_PROC_H

#include "asp/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum asp_stream { ASP_STREAM_STDOUT = 0, ASP_STREAM_STDERR = 1 } asp_stream;

typedef struct asp_proc_callbacks {
	/*
	 * A chunk of output. `offset` is the bytes of that stream before it. An attach whose
	 * offset was older than the responder's buffer (the last 1 MiB) starts later: the
	 * first offset is then larger than the one asked for. NULL: output is dropped.
	 */
	void (*on_output)(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
	                  const uint8_t *data, size_t len);
	/* The process has exited and all of its output came. The last call. May be NULL. */
	void (*on_exit)(void *user, const asp_exit_event *ev);
	/*
	 * The connection died first (transport_error in `err`): the process may still run.
	 * Attach again on a new connection with the offsets seen so far. The last call; it
	 * may run on any thread, inside asp_client_free too. May be NULL.
	 */
	void (*on_lost)(void *user, uint64_t proc, const asp_error *err);
	/*
	 * A change under a watch (asp_watch_start); the event's strings are valid only during
	 * the callback. NULL: dropped. Processes and connections never call it.
	 */
	void (*on_fs_event)(void *user, const asp_fs_event_event *ev);
	/*
	 * Stream `stream` has ended before the exit: a connection's peer shut down its
	 * sending side (processes never call it). After all of that stream's output. May be
	 * NULL.
	 */
	void (*on_eof)(void *user, uint64_t proc, asp_stream stream);
} asp_proc_callbacks;

/*
 * spawn, then the process's output and exit to `cb`. *proc gets its handle. `p` as for
 * asp_spawn (the config's cwd, env and timeout apply). unsupported when the transport
 * cannot carry notifications (plain HTTP).
 */
asp_status asp_spawn_start(asp_client *c, const asp_spawn_params *p, const asp_proc_callbacks *cb,
                           void *user, uint64_t *proc, asp_error *err);

/*
 * proc_attach: replays the responder's buffered output from the offsets in `p` (to `cb`,
 * before this returns), then live output and the exit. A finished process replays, then
 * its exit. invalid_argument when this client already follows `p->proc` on its current
 * connection (detach first); not_found for an unknown or no longer retained process.
 */
asp_status asp_proc_attach_start(asp_client *c, const asp_proc_attach_params *p,
                                 const asp_proc_callbacks *cb, void *user, asp_error *err);

/*
 * connect (docs/design.md, "Ports and changes"): a TCP connection opened from inside the
 * sandbox, followed as a process is: bytes received come to on_output (stream stdout),
 * the end to on_exit (exit_code 0; 1 with ev->error on a failure; -1 with signal KILL
 * once closed). Send with asp_proc_write (eof half-closes), close with asp_proc_signal
 * KILL. *proc gets its handle. The callbacks are backpressure as for a process: while
 * one runs, the responder stops reading the socket, so a slow consumer closes the TCP
 * window rather than growing memory. unsupported where the responder has no connect.
 */
asp_status asp_connect_start(asp_client *c, const asp_connect_params *p,
                             const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                             asp_error *err);

/*
 * watch: changes under p->path come to on_fs_event until the watch is closed
 * (asp_proc_signal KILL) or its path removed; then on_exit. *proc gets its handle.
 */
asp_status asp_watch_start(asp_client *c, const asp_watch_params *p, const asp_proc_callbacks *cb,
                           void *user, uint64_t *proc, asp_error *err);

/*
 * tree_read (docs/design.md, "Trees as one stream"): the tar stream of p->path comes to
 * on_output (stream stdout, in order), its end to on_exit (exit_code 0 with entries and
 * bytes; 1 with error and error_code). *proc gets its handle. asp_tree_download
 * (asp/tree.h) unpacks it into a local directory. unsupported where the transport cannot
 * carry notifications.
 */
asp_status asp_tree_read_start(asp_client *c, const asp_tree_read_params *p,
                               const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                               asp_error *err);

/*
 * Stops following `proc` (the process keeps running). When it returns no callback for it
 * runs any more, except the one that called it. Unknown `proc`: a no-op.
 */
void asp_proc_detach(asp_client *c, uint64_t proc);

#ifdef __cplusplus
}
#endif

#endif
