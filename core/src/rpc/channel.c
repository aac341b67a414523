/* The public calls on a frame channel (asp/channel.h) and the box behind asp_channel_new. */
#include "channel.h"

#include <stdlib.h>
#include <string.h>

asp_status asp_channel_new(const asp_channel_ops *ops, void *ctx, asp_channel **out, asp_error *err)
{
	*out = NULL;
	if (!ops || !ops->send || !ops->recv || !ops->close || !ops->free)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_channel_new: send, recv, close and free are mandatory");
	asp_channel *ch = malloc(sizeof *ch);
	if (!ch)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	ch->ops = ops;
	ch->ctx = ctx;
	ch->boxed = true;
	*out = ch;
	return ASP_OK;
}

asp_status asp_channel_send(asp_channel *ch, const uint8_t *frame, size_t len, asp_error *err)
{
	return ch->ops->send(ch->ctx, frame, len, err);
}

asp_status asp_channel_sendv(asp_channel *ch, const struct iovec *iov, int iovcnt, asp_error *err)
{
	if (ch->ops->sendv)
		return ch->ops->sendv(ch->ctx, iov, iovcnt, err);
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	uint8_t *frame = malloc(total ? total : 1);
	if (!frame)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	size_t at = 0;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(frame + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	asp_status st = ch->ops->send(ch->ctx, frame, total, err);
	free(frame);
	return st;
}

asp_status asp_channel_recv(asp_channel *ch, size_t max, uint8_t **msg, size_t *len, asp_error *err)
{
	return ch->ops->recv(ch->ctx, max, msg, len, err);
}

int asp_channel_ready(asp_channel *ch, int ms, asp_error *err)
{
	return ch->ops->ready ? ch->ops->ready(ch->ctx, ms, err) : 1;
}

void asp_channel_explain(asp_channel *ch, asp_error *err)
{
	if (ch->ops->explain)
		ch->ops->explain(ch->ctx, err);
}

void asp_channel_close(asp_channel *ch)
{
	ch->ops->close(ch->ctx);
}

void asp_channel_free(asp_channel *ch)
{
	if (!ch)
		return;
	/* ops->free may release `ch` itself (a channel the core embeds): read it first. */
	bool boxed = ch->boxed;
	ch->ops->free(ch->ctx);
	if (boxed)
		free(ch);
}
