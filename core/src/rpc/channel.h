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

#endif
