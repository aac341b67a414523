/*
 * A frame channel: the one thing a message transport implements so the RPC engine can
 * drive it (stdio pipes, an SSH channel in agent mode, a WebSocket). Frames are those of
 * DESIGN §2: a 4-byte big-endian length, then that many bytes of msgpack.
 *
 * Lifecycle: close (non-blocking, idempotent, from any thread) → the reader and any
 * writer return → free (once, when no thread is inside the channel any more).
 */
#ifndef ASP_RPC_CHANNEL_H
#define ASP_RPC_CHANNEL_H

#include "asp/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct asp_channel asp_channel;

typedef struct asp_channel_ops {
	/*
	 * Sends one whole frame, header included. May block while the peer is slow; one
	 * thread at a time (the caller serializes). transport_error when the connection is
	 * gone or closed.
	 */
	asp_status (*send)(asp_channel *ch, const uint8_t *frame, size_t len, asp_error *err);
	/*
	 * Optional: as send, for a frame in pieces (asp_buf_iov), so large payloads go out
	 * from where they are instead of being copied into one buffer first. Senders only
	 * build frames with references when the channel has it.
	 */
	asp_status (*sendv)(asp_channel *ch, const struct iovec *iov, int iovcnt, asp_error *err);
	/*
	 * Receives one message (the bytes after the length) into a malloc'd buffer that
	 * becomes the caller's (*msg, *len; at least one byte is allocated even for an
	 * empty message). Blocks; one thread at a time. Returns ASP_OK with *msg NULL on a
	 * clean end of stream (EOF at a frame boundary); protocol_error when the length is
	 * above `max` (nothing more is read); transport_error on EOF inside a frame, on an
	 * I/O error or once the channel is closed.
	 */
	asp_status (*recv)(asp_channel *ch, size_t max, uint8_t **msg, size_t *len, asp_error *err);
	/*
	 * Optional: waits at most `ms` (-1: for ever) until a recv would find bytes (buffered
	 * or arriving). 1 yes, 0 timed out, -1 closed or failed (`err` set). Same thread rule
	 * as recv. With it, a calling thread can read its own answer (rpc.c's leader).
	 */
	int (*ready)(asp_channel *ch, int ms, asp_error *err);
	/*
	 * What the connection's end was, for a person: called once, by whoever saw the
	 * connection die, with `err` already holding the low-level reason, which it may
	 * replace (the stdio transport adds the agent's exit status and last stderr lines).
	 * May block briefly (bounded). NULL when there is nothing to add.
	 */
	void (*explain)(asp_channel *ch, asp_error *err);
	/* Makes a blocked or later send/recv fail with transport_error. Never blocks. */
	void (*close)(asp_channel *ch);
	/* Releases everything; no thread may be inside the channel. */
	void (*free)(asp_channel *ch);
} asp_channel_ops;

/* Every channel starts with this member; implementations extend it. */
struct asp_channel {
	const asp_channel_ops *ops;
};

static inline asp_status asp_channel_send(asp_channel *ch, const uint8_t *frame, size_t len,
                                          asp_error *err)
{
	return ch->ops->send(ch, frame, len, err);
}

static inline asp_status asp_channel_sendv(asp_channel *ch, const struct iovec *iov, int iovcnt,
                                           asp_error *err)
{
	return ch->ops->sendv(ch, iov, iovcnt, err);
}

static inline asp_status asp_channel_recv(asp_channel *ch, size_t max, uint8_t **msg,
                                          size_t *len, asp_error *err)
{
	return ch->ops->recv(ch, max, msg, len, err);
}

static inline int asp_channel_ready(asp_channel *ch, int ms, asp_error *err)
{
	return ch->ops->ready(ch, ms, err);
}

static inline void asp_channel_explain(asp_channel *ch, asp_error *err)
{
	if (ch->ops->explain)
		ch->ops->explain(ch, err);
}

static inline void asp_channel_close(asp_channel *ch)
{
	ch->ops->close(ch);
}

/* NULL is a no-op. */
static inline void asp_channel_free(asp_channel *ch)
{
	if (ch)
		ch->ops->free(ch);
}

/* ---- the fd-pair channel: pipes, a socketpair, a process's stdin/stdout ------------ */

enum asp_fd_channel_flags {
	/* The channel closes the fds when freed. */
	ASP_FDCH_OWN_FDS = 1 << 0,
	/*
	 * close() must wake a blocked reader: the reader waits in poll() on the fd and an
	 * eventfd (one more syscall per wait) instead of a plain blocking read. Also needed
	 * for asp_fd_channel_watch. Without it the owner must end the peer to unblock.
	 */
	ASP_FDCH_WAKEABLE = 1 << 1,
	/*
	 * The write fd is private to us, so it may be made non-blocking: a send stuck on a
	 * full pipe then also wakes on close().
	 */
	ASP_FDCH_PRIVATE_WFD = 1 << 2,
};

/*
 * A channel reading frames from `rfd` and writing them to `wfd` (may be the same fd, a
 * socket). Reads are buffered, so one read() can bring many small frames; a large body
 * is read straight into its own buffer. Writes never raise SIGPIPE: sockets use
 * MSG_NOSIGNAL, pipes block SIGPIPE in the writing thread around the write unless the
 * process ignores or handles it already. On failure (out of memory, eventfd) the fds
 * stay the caller's.
 */
asp_status asp_fd_channel_new(int rfd, int wfd, unsigned flags, asp_channel **out,
                              asp_error *err);

/*
 * A send through a non-blocking write fd (ASP_FDCH_PRIVATE_WFD) that can write nothing
 * for `ms` fails with transport_error (0: waits for ever, the default): a transfer's
 * deadline is its progress. Call before the first send.
 */
void asp_fd_channel_set_stall(asp_channel *ch, unsigned ms);

/*
 * Has the reader also watch `fd` (needs ASP_FDCH_WAKEABLE) and call `fn` from the
 * reader's thread whenever it is readable; `fn` returns false once it is done with the
 * fd (EOF), which stops the watch. Call before the first recv. The stdio transport
 * drains the agent's stderr this way, without a thread of its own.
 */
void asp_fd_channel_watch(asp_channel *ch, int fd, bool (*fn)(void *ctx, int fd), void *ctx);

#endif
