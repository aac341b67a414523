/*
 * For transport authors: the frame channel and the RPC engine that drives it. A message
 * transport (stdio pipes, an SSH exec channel, a WebSocket, a Unix socket) only moves
 * frames; the engine does the rest of the wire format (docs/design.md, "Wire format"):
 * ids, pipelining from many threads, deadlines, hello's max_message, notifications and
 * their routing to asp_proc_sub followers. docs/transports.md shows how the pieces fit.
 *
 * A frame is a 4-byte big-endian length, then that many bytes of msgpack (one message).
 *
 * Ownership: handles are opaque; each *_new has one matching *_free, and free(NULL) is a
 * no-op. Arguments are borrowed unless a comment says the call takes them.
 */
#ifndef ASP_CHANNEL_H
#define ASP_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "asp/arena.h"
#include "asp/proto.h"
#include "asp/status.h"
#include "asp/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a frame's length prefix. */
#define ASP_FRAME_HEADER 4

/* ---- the frame channel ------------------------------------------------------------ */

/*
 * One connection that carries frames both ways. Lifecycle: close (non-blocking,
 * idempotent, from any thread) makes the reader and any writer return; free (once, when
 * no thread is inside the channel any more) releases it.
 */
typedef struct asp_channel asp_channel;

/*
 * What a message transport implements; every callback gets the `ctx` given to
 * asp_channel_new. send, recv, close and free are mandatory.
 */
typedef struct asp_channel_ops {
	/*
	 * Sends one whole frame, header included. May block while the peer is slow; one
	 * thread at a time (the engine serializes senders). transport_error when the
	 * connection is gone or closed.
	 */
	asp_status (*send)(void *ctx, const uint8_t *frame, size_t len, asp_error *err);
	/*
	 * Optional: as send, for one frame in pieces, so large payloads (a write's data) go
	 * out from the caller's memory instead of being copied into one buffer first. The
	 * engine only builds frames in pieces when the channel has it.
	 */
	asp_status (*sendv)(void *ctx, const struct iovec *iov, int iovcnt, asp_error *err);
	/*
	 * Receives one message (the bytes after the length) into a malloc'd buffer that
	 * becomes the caller's (*msg, *len; at least one byte is allocated even for an empty
	 * message). Blocks; one thread at a time (whichever holds the engine's read role). ASP_OK
	 * with *msg NULL on a clean end of stream (EOF at a frame boundary); protocol_error when
	 * the length is above `max` (read nothing more); transport_error on EOF inside a frame, on
	 * an I/O error, or once the channel is closed.
	 */
	asp_status (*recv)(void *ctx, size_t max, uint8_t **msg, size_t *len, asp_error *err);
	/*
	 * Optional: waits at most `ms` (-1: for ever) until a recv would find bytes (buffered
	 * or arriving): 1 yes, 0 timed out, -1 closed or failed (`err` set). Same thread rule
	 * as recv.
	 */
	int (*ready)(void *ctx, int ms, asp_error *err);
	/*
	 * Optional: what the connection's end was, for a person. Called once, by whichever
	 * thread saw the connection die, with `err` holding the low-level reason, which it may
	 * replace (the stdio transport adds the agent's exit status and last stderr lines).
	 * May block briefly (bounded).
	 */
	void (*explain)(void *ctx, asp_error *err);
	/* Makes a blocked or later send/recv fail with transport_error. Never blocks; any thread.
	 */
	void (*close)(void *ctx);
	/* Releases `ctx`. Called once, by asp_channel_free, when no thread is inside any more. */
	void (*free)(void *ctx);
} asp_channel_ops;

/*
 * A channel calling `ops` (kept by pointer: static storage, or outliving the channel)
 * with `ctx`, which the channel takes: asp_channel_free calls ops->free(ctx). On failure
 * (invalid_argument when a mandatory slot is NULL, internal when out of memory) `ctx`
 * stays the caller's.
 */
asp_status asp_channel_new(const asp_channel_ops *ops, void *ctx, asp_channel **out,
                           asp_error *err);

/*
 * Calls on a channel, for a transport that wraps another channel (the stdio transport
 * wraps an fd channel) and for a server edge reading requests. Thread rules as the
 * callbacks above. asp_channel_sendv on a channel without sendv sends the pieces joined.
 * asp_channel_ready on a channel without ready answers 1 (a recv may block).
 */
asp_status asp_channel_send(asp_channel *ch, const uint8_t *frame, size_t len, asp_error *err);
asp_status asp_channel_sendv(asp_channel *ch, const struct iovec *iov, int iovcnt, asp_error *err);
asp_status asp_channel_recv(asp_channel *ch, size_t max, uint8_t **msg, size_t *len,
                            asp_error *err);
int asp_channel_ready(asp_channel *ch, int ms, asp_error *err);
/* Lets the channel replace `err`'s message (explain); a no-op without explain. */
void asp_channel_explain(asp_channel *ch, asp_error *err);
void asp_channel_close(asp_channel *ch);
/* Releases the channel; no thread may be inside it. NULL is a no-op. */
void asp_channel_free(asp_channel *ch);

/* ---- a channel over a pair of file descriptors ------------------------------------ */

enum asp_fd_channel_flags {
	/* The channel closes the fds when freed. */
	ASP_FDCH_OWN_FDS = 1 << 0,
	/*
	 * close() must wake a blocked reader (and a sender on a full pipe): they wait in
	 * poll() on the fd and on an eventfd of the waiting thread's own (made on first use,
	 * closed when the thread exits: one per thread, not per channel) instead of a plain
	 * blocking read. A socket needs no flag: close shuts it down, which wakes its reader
	 * too. Without either the owner must end the peer to unblock the reader.
	 */
	ASP_FDCH_WAKEABLE = 1 << 1,
	/*
	 * The write fd is private to the channel, so it may be made non-blocking: a send
	 * stuck on a full pipe then also wakes on close.
	 */
	ASP_FDCH_PRIVATE_WFD = 1 << 2,
};

/*
 * A channel reading frames from `rfd` and writing them to `wfd` (the same fd for a
 * socket): pipes, a socketpair, a connected Unix or TCP socket, a process's stdin and
 * stdout. Reads are buffered, so one read() can bring many small frames; a large body is
 * read straight into its own buffer. Writes never raise SIGPIPE: sockets use
 * MSG_NOSIGNAL, pipes block SIGPIPE in the writing thread around the write unless the
 * process ignores or handles it already. On failure (out of memory, eventfd) the fds stay
 * the caller's. Has sendv, and ready when ASP_FDCH_WAKEABLE or `rfd` is a socket; such a
 * channel is one the RPC engine watches without a thread of its own (asp_rpc_new). The
 * engine frees such a channel's 64 KiB read buffer while the connection is idle.
 */
asp_status asp_fd_channel_new(int rfd, int wfd, unsigned flags, asp_channel **out, asp_error *err);

/*
 * Only for a channel from asp_fd_channel_new. A send through a non-blocking write fd
 * (ASP_FDCH_PRIVATE_WFD) that can write nothing for `ms` fails with transport_error (0:
 * waits for ever, the default): a transfer's deadline is its progress. Call before the
 * first send.
 */
void asp_fd_channel_set_stall(asp_channel *ch, unsigned ms);

/*
 * Whether the channel has read bytes ahead of the frames returned so far (which a poll
 * of its read fd would not show). False for a channel not from asp_fd_channel_new.
 */
bool asp_fd_channel_buffered(asp_channel *ch);

/*
 * Only for a channel from asp_fd_channel_new that has ready (ASP_FDCH_WAKEABLE or a
 * socket). Has `fd` watched too, calling `fn` whenever it is readable; `fn` returns false
 * once it is done with the fd (EOF), which stops the watch. Under the RPC engine the
 * process-wide poller thread calls `fn`, so it must not block (read a non-blocking fd
 * until EAGAIN); otherwise whoever reads the channel does. Call before asp_rpc_new and
 * the first recv. The stdio transport drains the agent's stderr this way.
 */
void asp_fd_channel_watch(asp_channel *ch, int fd, bool (*fn)(void *ctx, int fd), void *ctx);

/*
 * Only for a channel from asp_fd_channel_new, before the first call on it: gives the
 * channel an `explain` (as asp_channel_ops.explain) and a `release`, called with `ctx` by
 * asp_channel_free after the channel let go of its fds (closing them with
 * ASP_FDCH_OWN_FDS) and its memory, for what the owner keeps beside it (the stdio
 * transport: its child process and stderr). Either may be NULL. A transport that needs
 * only these keeps the channel an fd channel, which the engine can watch without a thread
 * of its own (asp_rpc_new).
 */
void asp_fd_channel_set_owner(asp_channel *ch, void (*explain)(void *ctx, asp_error *err),
                              void (*release)(void *ctx), void *ctx);

/* ---- a channel over byte callbacks ------------------------------------------------ */

/*
 * A byte stream that is not a file descriptor (a TLS session, a library's socket, a
 * serial line): the core does the framing. read and write are called from one thread
 * each at a time (the engine's reader, one sender), possibly concurrently with each
 * other; close from any thread.
 */
typedef struct asp_stream_ops {
	/* Up to `n` bytes into `buf`: how many (> 0), 0 at end of stream, -1 on error (errno). */
	ssize_t (*read)(void *ctx, void *buf, size_t n);
	/* Up to `n` bytes from `buf`: how many (> 0, may be fewer), -1 on error (errno). */
	ssize_t (*write)(void *ctx, const void *buf, size_t n);
	/*
	 * Makes a blocked and every later read or write return promptly (0 or -1), e.g.
	 * shutdown(fd, SHUT_RDWR). Never blocks; may be called more than once.
	 */
	void (*close)(void *ctx);
	/* Releases `ctx` (closes the stream). Called once, from asp_channel_free. */
	void (*free)(void *ctx);
} asp_stream_ops;

/*
 * A frame channel over `io` (kept by pointer) and `ctx`, which the channel takes (as
 * asp_channel_new; on failure `ctx` stays the caller's). EINTR from read or write is
 * retried. No sendv and no ready: the engine copies large payloads into the frame.
 */
asp_status asp_stream_channel_new(const asp_stream_ops *io, void *ctx, asp_channel **out,
                                  asp_error *err);

/* ---- the RPC engine --------------------------------------------------------------- */

/*
 * The client side of the wire format (docs/design.md, "Wire format") over one channel.
 * Calls from many threads are pipelined on the connection, and one thread at a time reads
 * it. On a channel from asp_fd_channel_new that has ready, there is no thread per
 * connection: a calling thread that finds nobody reading reads until its own answer comes
 * (handing other callers theirs), and while nobody calls, one process-wide poller thread
 * watches the connection and a small pool of worker threads (at most 8, shared by every
 * connection) reads what arrives; notifications are routed on those workers, in order per
 * connection. On any other channel a reader thread of its own reads everything.
 */
typedef struct asp_rpc asp_rpc;

/*
 * Starts the engine on `ch` (with the pool's poller, or a reader thread: see above),
 * which it takes in every case (freed by asp_rpc_free, or here on failure). `max_message` bounds
 * messages both ways until a hello result announces the peer's (0: ASP_MAX_MESSAGE_DEFAULT).
 */
asp_status asp_rpc_new(asp_channel *ch, size_t max_message, asp_rpc **out, asp_error *err);

/*
 * The deadline of calls without a time limit of their own (call_timeout_ms,
 * docs/design.md, ".asp.json"; 0: ASP_CALL_TIMEOUT_DEFAULT). Set before the first call.
 */
void asp_rpc_set_call_timeout(asp_rpc *rpc, unsigned ms);

/*
 * The op table whose every op is asp_rpc_invoke: a transport's open returns it with the
 * asp_rpc * as `self`.
 */
extern const asp_ops asp_rpc_ops;

/*
 * One call: encodes `params`, sends, waits (at most the call deadline) for the answer
 * and decodes it into `result`, whose strings and bytes live in `a`. `rpc` is an
 * asp_rpc *. Any thread, many at once. A transport_error makes the connection dead
 * (asp_rpc_alive false); a timeout does not.
 */
asp_status asp_rpc_invoke(void *rpc, asp_op_id op, const void *params, void *result, asp_arena *a,
                          asp_error *err);

/*
 * asp_rpc_invoke with a deadline of its own: `timeout_ms` (0: the usual one) after
 * sending, the call gives up with ASP_E_TIMEOUT and a late answer is dropped; the
 * connection stays usable. For handshakes, where a wrong command might never answer.
 */
asp_status asp_rpc_call(asp_rpc *rpc, asp_op_id op, const void *params, void *result, asp_arena *a,
                        unsigned timeout_ms, asp_error *err);

/*
 * asp_transport.subscribe and .unsubscribe for a transport whose backend is this engine
 * (self = asp_rpc *): follows a spawned process's notifications on this connection.
 */
asp_status asp_rpc_subscribe(void *self, asp_op_id op, const void *params, void *result,
                             asp_arena *a, asp_proc_sub *sub, asp_error *err);
void asp_rpc_unsubscribe(void *self, uint64_t proc);

/*
 * Notifications without asp_rpc_subscribe: called on the reading thread (the
 * connection's reader thread or a pool worker, never a calling thread) for each
 * notification whose method the spec knows, with its params decoded (an
 * asp_output_event *, an asp_exit_event *) into `a`, reset after the call. It must not
 * block or call into the same asp_rpc.
 */
typedef void (*asp_rpc_notify_fn)(void *ctx, asp_notice_id n, const void *params, asp_arena *a);

/* Routes every notification to `fn` instead of the subscribed followers. Before the first call. */
void asp_rpc_set_notify(asp_rpc *rpc, asp_rpc_notify_fn fn, void *ctx);

/* Whether the connection is still usable; false once it died or was closed. Cheap. */
bool asp_rpc_alive(asp_rpc *rpc);

/*
 * Fails every call in flight and every later call with transport_error and closes the
 * channel. Never blocks; idempotent; any thread.
 */
void asp_rpc_close(asp_rpc *rpc);

/*
 * Closes, waits until no thread reads the connection any more (the reader thread, a
 * pool worker's turn), frees the channel and the engine. NULL: no-op.
 */
void asp_rpc_free(asp_rpc *rpc);

/* ---- one call per message (HTTP POST) --------------------------------------------- */

/*
 * For a transport that carries each call in a message of its own: the request frame
 * (header included: the message is (*frame) + ASP_FRAME_HEADER) of call `id` of `op`,
 * malloc'd, the caller frees it. too_large, naming the op, when the request's bytes or the
 * message exceed `max_message`; internal when out of memory.
 */
asp_status asp_rpc_encode(asp_op_id op, uint32_t id, const void *params, size_t max_message,
                          uint8_t **frame, size_t *frame_len, asp_error *err);

/*
 * Decodes the answer `msg` (no header) to call `id` of `op` into `result`, taking `msg`
 * (malloc'd): on success `a` adopts it (the result points into it), else it is freed.
 * The answer's error when it is one; protocol_error "the WHO's answer to OP is
 * undecodable (...)" when it is not the response to `id`.
 */
asp_status asp_rpc_decode(asp_op_id op, uint32_t id, uint8_t *msg, size_t len, void *result,
                          asp_arena *a, const char *who, asp_error *err);

#ifdef __cplusplus
}
#endif

#endif
