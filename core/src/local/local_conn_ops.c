/*
 * The op table of a connection bound to the local backend (asp_local_conn_ops): the
 * streaming ops that need the connection, every other op forwarded to the backend's
 * table; and serving one request on it.
 */
#include "local_proc.h"
#include "sink_send.h"

static const asp_ops local_stream_ops; /* below: it names stream_hello */

static asp_status stream_hello(void *self, const asp_hello_params *p, asp_hello_result *r,
                               asp_arena *a, asp_error *err)
{
	(void)p;
	const asp_local_conn *c = self;
	return local_hello(c->l, &local_stream_ops, c->has_sink, r, a, err);
}

/* The ops that need the connection: `self` is the asp_local_conn. */
static const asp_ops local_stream_ops = {
    .hello = stream_hello,
    .spawn = asp_local_spawn,
    .proc_write = asp_local_proc_write,
    .proc_signal = asp_local_proc_signal,
    .proc_resize = asp_local_proc_resize,
    .proc_wait = asp_local_proc_wait,
    .proc_list = asp_local_proc_list,
    .proc_attach = asp_local_proc_attach,
    .connect = local_op_connect,
    .watch = local_op_watch,
    .tree_write = local_op_tree_write,
    .tree_read = local_op_tree_read,
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

int asp_local_conn_serve(asp_local_conn *c, const struct asp_msg *req, struct asp_buf *out)
{
	local_hold h;
	local_hold_begin(&h, c);
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
	local_hold_end(&h);
	return rc;
}
