/*
 * Private to the core: the layout behind the public asp_channel (asp/channel.h), so the
 * core's own channels (fd_channel.c) embed it and skip an allocation.
 */
#ifndef ASP_RPC_CHANNEL_H
#define ASP_RPC_CHANNEL_H

#include "asp/channel.h"

struct asp_channel {
	const asp_channel_ops *ops;
	void *ctx;
	bool boxed; /* allocated by asp_channel_new: asp_channel_free frees it too */
};

/* Whether the channel can send a frame in pieces (asp_buf references). */
static inline bool asp_channel_has_sendv(const asp_channel *ch)
{
	return ch->ops->sendv != NULL;
}

/*
 * For the RPC engine's poller (rpc.c, io_pool.c), only on channels from
 * asp_fd_channel_new. The fd to watch when the channel has ready (close wakes a reader:
 * an eventfd, or a socket), else -1.
 */
int asp_fd_channel_poll_fd(asp_channel *ch);
/*
 * The fd given to asp_fd_channel_watch (-1: none, or not an fd channel). `take`: the
 * engine's poller watches it from now on instead of the channel's own waits; false
 * gives it back.
 */
int asp_fd_channel_take_watch(asp_channel *ch, bool take);
/* Calls the watch callback once (the watch fd is readable); false when it is done. */
bool asp_fd_channel_run_watch(asp_channel *ch);
/* Frees the read buffer while it holds no bytes (an idle connection); no reader inside. */
void asp_fd_channel_trim(asp_channel *ch);

#endif
