/*
 * A responder connection bound to the local backend, and the wrapper around its sink:
 * a dead connection is never called again.
 */
#include "local_proc.h"
#include "sink_send.h"

#include <stdlib.h>
#include <string.h>

/* ---- connections ------------------------------------------------------------------ */

asp_local_conn *asp_local_connect(asp_local *l, const asp_conn_sink *sink)
{
	asp_local_conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->l = l;
	if (sink && sink->send) {
		c->sink = *sink;
		c->has_sink = true;
	}
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	return c;
}

void local_conn_ref(asp_local_conn *c)
{
	atomic_fetch_add(&c->refs, 1);
}

void local_conn_unref(asp_local_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void asp_local_disconnect(asp_local_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->dead = true;
	while (c->sending > 0) /* a pump inside the sink: the promise is "never again" */
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	/* Subscribers still listed find the connection dead and are dropped by their pump. */
	local_conn_unref(c);
}

void *asp_local_conn_ctx(const asp_local_conn *c)
{
	return c->has_sink ? c->sink.ctx : NULL;
}

/* Before calling the sink: false when the connection is dead (then do not call it). */
static bool sink_enter(asp_local_conn *c)
{
	pthread_mutex_lock(&c->mu);
	bool ok = !c->dead && c->has_sink;
	if (ok)
		c->sending++;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

/* After the sink returned `ok`: whether the connection is still alive. */
static bool sink_leave(asp_local_conn *c, bool ok)
{
	pthread_mutex_lock(&c->mu);
	if (!ok)
		c->dead = true;
	if (--c->sending == 0)
		pthread_cond_broadcast(&c->cv);
	ok = ok && !c->dead;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

bool local_conn_send(asp_local_conn *c, const uint8_t *frame, size_t len)
{
	return sink_enter(c) && sink_leave(c, c->sink.send(c->sink.ctx, frame, len));
}

/* As local_conn_send, for a frame that may reference bins: 1 sent, 0 gone, -1 out of memory. */
int local_conn_send_buf(asp_local_conn *c, const asp_buf *out)
{
	if (!sink_enter(c))
		return 0;
	int rc = asp_sink_send_frame(&c->sink, out);
	return sink_leave(c, rc != 0) ? (rc < 0 ? -1 : 1) : 0;
}

int local_conn_event(asp_local_conn *c, asp_notice_id n, const void *ev, asp_buf *scratch)
{
	if (!sink_enter(c))
		return 0;
	int rc = c->sink.event ? (c->sink.event(c->sink.ctx, n, ev) ? 1 : 0)
	                       : asp_sink_send_event(&c->sink, scratch, n, ev);
	return sink_leave(c, rc != 0) ? (rc < 0 ? -1 : 1) : 0;
}
