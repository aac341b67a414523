/*
 * Binding responder connections to the local backend: the sink wrapper (a dead
 * connection is never called again), the per-request hold that keeps a spawn's
 * notifications behind its response, and the op table of a bound connection.
 */
#include "edge.h"
#include "local_proc.h"

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

/* ---- holding notifications until the response is out ----------------------------- */

typedef struct hold_entry {
	struct hold_entry *next;
	local_proc *p;
	local_sub *s;
} hold_entry;

typedef struct hold {
	asp_local_conn *c;
	hold_entry *list;
} hold;

/* The request this thread is serving; one at a time per thread. */
static _Thread_local hold *tls_hold;
/* asp_local_conn_hold's, for callers that cannot keep one on their stack. */
static _Thread_local hold tls_direct;

bool local_hold_add(asp_local_conn *c, local_proc *p, local_sub *s)
{
	hold *h = tls_hold;
	if (!h || h->c != c)
		return false;
	hold_entry *e = malloc(sizeof *e);
	if (!e)
		return false;
	atomic_fetch_add(&p->refs, 1);
	s->refs++; /* under p->mu: the caller holds it */
	e->p = p;
	e->s = s;
	e->next = h->list;
	h->list = e;
	return true;
}

static void hold_begin(hold *h, asp_local_conn *c)
{
	h->c = c;
	h->list = NULL;
	tls_hold = h;
}

/* Opens the gates this request closed, and lets the pumps go on. */
static void hold_end(hold *h)
{
	tls_hold = NULL;
	hold_entry *e = h->list;
	h->list = NULL;
	while (e) {
		hold_entry *next = e->next;
		pthread_mutex_lock(&e->p->mu);
		e->s->gated = false;
		pthread_cond_broadcast(&e->p->cv);
		local_sub_unref_locked(e->s);
		pthread_mutex_unlock(&e->p->mu);
		local_proc_unref(e->p);
		free(e);
		e = next;
	}
}

void asp_local_conn_hold(asp_local_conn *c)
{
	hold_begin(&tls_direct, c);
}

void asp_local_conn_release(asp_local_conn *c)
{
	if (tls_hold == &tls_direct && tls_direct.c == c)
		hold_end(&tls_direct);
}

/* As local_conn_send, for a frame that may reference bins: 1 sent, 0 gone, -1 out of memory. */
static int local_conn_send_buf(asp_local_conn *c, const asp_buf *out)
{
	if (!sink_enter(c))
		return 0;
	int rc = asp_edge_send_buf(&c->sink, out);
	return sink_leave(c, rc != 0) ? (rc < 0 ? -1 : 1) : 0;
}

int local_conn_event(asp_local_conn *c, asp_notice_id n, const void *ev, asp_buf *scratch)
{
	if (!sink_enter(c))
		return 0;
	int rc = c->sink.event ? (c->sink.event(c->sink.ctx, n, ev) ? 1 : 0)
	                       : asp_edge_notify(&c->sink, scratch, n, ev);
	return sink_leave(c, rc != 0) ? (rc < 0 ? -1 : 1) : 0;
}

int asp_local_conn_serve(asp_local_conn *c, const struct asp_msg *req, struct asp_buf *out)
{
	hold h;
	hold_begin(&h, c);
	int rc;
	asp_arena *a = c->has_sink && c->sink.sendv ? asp_dispatch_arena() : NULL;
	if (a) {
		/* The frame references the result's bins in `a` until it is written. */
		out->ref_min = ASP_BUF_REF_MIN;
		asp_dispatch_in(&asp_local_conn_ops, c, req, out, c->l->max_message, a);
		out->ref_min = 0;
		if (out->len == 0)
			rc = -1;
		else
			rc = local_conn_send_buf(c, out);
		asp_dispatch_arena_done(a);
	} else {
		asp_dispatch(&asp_local_conn_ops, c, req, out, c->l->max_message);
		rc = out->len == 0 ? -1 : local_conn_send(c, out->data, out->len) ? 1 : 0;
	}
	hold_end(&h);
	return rc;
}

/* ---- the op table of a bound connection ------------------------------------------- */

static asp_status stream_hello(void *self, const asp_hello_params *p, asp_hello_result *r,
                               asp_arena *a, asp_error *err)
{
	(void)p;
	const asp_local_conn *c = self;
	return local_hello(c->l, true, c->has_sink, r, a, err);
}

/* The ops that need the connection: `self` is the asp_local_conn. */
const asp_ops local_stream_ops = {
    .hello = stream_hello,
    .spawn = asp_local_spawn,
    .proc_write = asp_local_proc_write,
    .proc_signal = asp_local_proc_signal,
    .proc_resize = asp_local_proc_resize,
    .proc_wait = asp_local_proc_wait,
    .proc_list = asp_local_proc_list,
    .proc_attach = asp_local_proc_attach,
    .connect = local_op_connect,
};

/*
 * Every op of the spec: the connection's own, else the backend's (unary ops do not care
 * about the connection), else unsupported. So a new op needs only its backend slot filled.
 */
#define FORWARD(name)                                                                              \
	static asp_status conn_##name(void *self, const asp_##name##_params *p,                    \
	                              asp_##name##_result *r, asp_arena *a, asp_error *err)        \
	{                                                                                          \
		if (local_stream_ops.name)                                                         \
			return local_stream_ops.name(self, p, r, a, err);                          \
		if (asp_local_ops.name)                                                            \
			return asp_local_ops.name(((asp_local_conn *)self)->l, p, r, a, err);      \
		return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,                                 \
		                     #name " is not supported by this backend");                   \
	}
ASP_FOR_EACH_OP(FORWARD)
#undef FORWARD

#define SLOT(name) .name = conn_##name,
const asp_ops asp_local_conn_ops = {ASP_FOR_EACH_OP(SLOT)};
#undef SLOT
