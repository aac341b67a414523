/*
 * A frame channel over byte callbacks (asp_stream_channel_new): the framing of
 * docs/design.md, "Wire format", on top of a stream the core cannot poll. Reads are
 * buffered so that small pipelined frames take one read; a large body is read straight
 * into its own buffer.
 */
#include "channel.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define RBUF 65536

typedef struct stream_channel {
	asp_channel base;
	const asp_stream_ops *io;
	void *ctx;
	atomic_bool closed;
	size_t start, end; /* unread bytes are buf[start .. end) */
	uint8_t *buf;
} stream_channel;

static asp_status closed_error(asp_error *err)
{
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "the connection was closed");
}

/* One read into `dst`: > 0 bytes, 0 at EOF, -1 on error (err set). */
static ssize_t read_some(stream_channel *c, void *dst, size_t cap, asp_error *err)
{
	for (;;) {
		if (atomic_load(&c->closed))
			return closed_error(err), -1;
		ssize_t n = c->io->read(c->ctx, dst, cap);
		if (n >= 0)
			return atomic_load(&c->closed) && n == 0 ? (closed_error(err), -1) : n;
		if (errno == EINTR)
			continue;
		int e = errno;
		asp_error_errno(err, e, NULL, "reading from the connection");
		err->code = ASP_E_TRANSPORT_ERROR;
		return -1;
	}
}

/* Reads until `need` bytes are buffered. 1 ok, 0 EOF (with *got bytes), -1 error. */
static int fill(stream_channel *c, size_t need, asp_error *err)
{
	if (c->start > 0 && c->start == c->end)
		c->start = c->end = 0;
	if (c->start + need > RBUF) {
		memmove(c->buf, c->buf + c->start, c->end - c->start);
		c->end -= c->start;
		c->start = 0;
	}
	while (c->end - c->start < need) {
		ssize_t n = read_some(c, c->buf + c->end, RBUF - c->end, err);
		if (n <= 0)
			return (int)n;
		c->end += (size_t)n;
	}
	return 1;
}

static asp_status st_recv(void *ctx, size_t max, uint8_t **msg, size_t *len, asp_error *err)
{
	stream_channel *c = ctx;
	*msg = NULL;
	*len = 0;
	int r = fill(c, ASP_FRAME_HEADER, err);
	if (r < 0)
		return err->code;
	if (r == 0) {
		if (c->end == c->start)
			return ASP_OK; /* EOF at a frame boundary */
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "the connection ended inside a frame header");
	}
	const uint8_t *h = c->buf + c->start;
	size_t n = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
	if (n > max)
		return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                     "a frame of %zu bytes is above max_message (%zu)", n, max);
	c->start += ASP_FRAME_HEADER;
	uint8_t *m = malloc(n ? n : 1);
	if (!m)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	size_t have = c->end - c->start < n ? c->end - c->start : n;
	memcpy(m, c->buf + c->start, have);
	c->start += have;
	while (have < n) {
		ssize_t got = read_some(c, m + have, n - have, err);
		if (got <= 0) {
			free(m);
			if (got == 0)
				return asp_error_set(
				    err, ASP_E_TRANSPORT_ERROR, NULL,
				    "the connection ended inside a frame (%zu of %zu "
				    "bytes)",
				    have, n);
			return err->code;
		}
		have += (size_t)got;
	}
	*msg = m;
	*len = n;
	return ASP_OK;
}

static asp_status st_send(void *ctx, const uint8_t *frame, size_t len, asp_error *err)
{
	stream_channel *c = ctx;
	size_t off = 0;
	while (off < len) {
		if (atomic_load(&c->closed))
			return closed_error(err);
		ssize_t n = c->io->write(c->ctx, frame + off, len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			                     "writing to the connection: nothing written");
		int e = errno;
		asp_error_errno(err, e, NULL, "writing to the connection");
		err->code = ASP_E_TRANSPORT_ERROR;
		return err->code;
	}
	return ASP_OK;
}

static void st_close(void *ctx)
{
	stream_channel *c = ctx;
	if (!atomic_exchange(&c->closed, true))
		c->io->close(c->ctx);
}

static void st_free(void *ctx)
{
	stream_channel *c = ctx;
	c->io->free(c->ctx);
	free(c->buf);
	free(c);
}

static const asp_channel_ops stream_channel_ops = {
    .send = st_send,
    .recv = st_recv,
    .close = st_close,
    .free = st_free,
};

asp_status asp_stream_channel_new(const asp_stream_ops *io, void *ctx, asp_channel **out,
                                  asp_error *err)
{
	*out = NULL;
	if (!io || !io->read || !io->write || !io->close || !io->free)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_stream_channel_new: read, write, close and free are "
		                     "mandatory");
	stream_channel *c = calloc(1, sizeof *c);
	uint8_t *buf = malloc(RBUF);
	if (!c || !buf) {
		free(c);
		free(buf);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	c->base.ops = &stream_channel_ops;
	c->base.ctx = c;
	c->base.boxed = false;
	c->io = io;
	c->ctx = ctx;
	c->buf = buf;
	atomic_init(&c->closed, false);
	*out = &c->base;
	return ASP_OK;
}
