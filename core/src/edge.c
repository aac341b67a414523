/*
 * A server edge's requests and answers (asp/server.h): the wire checks of docs/design.md,
 * "Wire format" in front of asp_local_conn_serve, so an edge needs no msgpack and no core
 * header; and the one encoding of the backend's typed events into notification frames.
 */
#include "edge.h"
#include "sink_send.h"
#include "spare.h"
#include "local/local_proc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

void asp_server_log(const char *fmt, ...)
{
	char line[1200];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	ssize_t w = write(2, line, (size_t)n); /* one write: lines from threads do not mix */
	(void)w;
}

struct asp_request {
	uint8_t *msg;
	size_t len;
	bool unpacked; /* `u` holds objects */
	bool decoded;
	asp_status st; /* ASP_OK, or the refusal to answer msg.id with */
	asp_error err;
	msgpack_unpacked u;
	asp_msg m;
};

struct asp_reply {
	asp_buf b;
};

/* One request's bookkeeping kept for the next (spare.h). */
static asp_spare spare_request;

static void request_drop(asp_request *r)
{
	free(asp_spare_keep(&spare_request, r));
}

asp_status asp_request_new(uint8_t *msg, size_t len, asp_request **out, size_t *cost,
                           asp_error *err)
{
	*out = NULL;
	if (cost)
		*cost = 0;
	/* Not calloc: zeroing the error's 2 KiB of text on every request costs more than the
	 * rest of the request's bookkeeping, and asp_error_clear is all it needs. */
	asp_request *r = asp_spare_take(&spare_request);
	if (!r)
		r = malloc(sizeof *r);
	if (!r) {
		free(msg);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	r->unpacked = r->decoded = false; /* msg, len and st are set below */
	memset(&r->u, 0, sizeof r->u);
	memset(&r->m, 0, sizeof r->m);
	size_t objects = 0;
	asp_error_clear(&r->err);
	r->st = asp_wire_check(msg, len, &objects, &r->m, &r->err);
	if (r->st && !r->m.has_id) {
		asp_status st = r->st;
		if (err)
			*err = r->err;
		request_drop(r);
		free(msg);
		return st;
	}
	r->msg = msg;
	r->len = len;
	if (cost)
		*cost = ASP_WIRE_DECODE_COST(len, r->st ? 0 : objects);
	if (r->st && err)
		*err = r->err;
	*out = r;
	return r->st;
}

asp_status asp_request_decode(asp_request *r, asp_error *err)
{
	if (!r->decoded && r->st == ASP_OK) {
		r->decoded = true;
		asp_wire_unpacked_init(&r->u);
		r->unpacked = true;
		r->st = asp_wire_unpack(r->msg, r->len, &r->u, &r->m, &r->err);
		if (r->st == ASP_OK && r->m.type != ASP_MSG_REQUEST) {
			r->m.has_id = false;
			r->st = asp_error_set(&r->err, ASP_E_PROTOCOL_ERROR, NULL,
			                      "expected a request [0, id, method, params], got a "
			                      "message of type %d",
			                      r->m.type);
		}
	}
	if (r->st && err)
		*err = r->err;
	return r->st;
}

const char *asp_request_method(const asp_request *r, size_t *len)
{
	bool ok = r->decoded && r->st == ASP_OK;
	*len = ok ? r->m.method_len : 0;
	return ok ? r->m.method : NULL;
}

/* The params' value for `name`, or NULL. */
static const msgpack_object *request_param(const asp_request *r, const char *name)
{
	if (!r->decoded || r->st != ASP_OK || !r->m.params ||
	    r->m.params->type != MSGPACK_OBJECT_MAP)
		return NULL;
	size_t n = strlen(name);
	const msgpack_object_map *m = &r->m.params->via.map;
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
		    memcmp(k->via.str.ptr, name, n) == 0)
			return &m->ptr[i].val;
	}
	return NULL;
}

bool asp_request_param_str(const asp_request *r, const char *name, const char **s, size_t *len)
{
	const msgpack_object *v = request_param(r, name);
	if (!v || v->type != MSGPACK_OBJECT_STR)
		return false;
	*s = v->via.str.ptr;
	*len = v->via.str.size;
	return true;
}

bool asp_request_param_true(const asp_request *r, const char *name)
{
	const msgpack_object *v = request_param(r, name);
	return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

bool asp_request_has_id(const asp_request *r)
{
	return r->m.has_id;
}

uint32_t asp_request_id(const asp_request *r)
{
	return r->m.has_id ? r->m.id : 0;
}

void asp_request_free(asp_request *r)
{
	if (!r)
		return;
	if (r->unpacked)
		asp_wire_unpacked_done(&r->u);
	free(r->msg);
	request_drop(r);
}

const asp_msg *asp_request_msg(const asp_request *r)
{
	return r->decoded && r->st == ASP_OK ? &r->m : NULL;
}

asp_buf *asp_reply_buf(asp_reply *b)
{
	return &b->b;
}

asp_reply *asp_reply_new(void)
{
	asp_reply *b = malloc(sizeof *b);
	if (b)
		asp_buf_init(&b->b);
	return b;
}

void asp_reply_free(asp_reply *b)
{
	if (!b)
		return;
	asp_buf_free(&b->b);
	free(b);
}

void asp_reply_trim(asp_reply *b, size_t keep)
{
	if (b->b.cap > keep)
		asp_buf_free(&b->b);
}

uint8_t *asp_reply_take(asp_reply *b, size_t *len)
{
	*len = 0;
	if (b->b.len <= ASP_FRAME_HEADER)
		return NULL;
	uint8_t *data = b->b.data;
	*len = b->b.len;
	b->b.data = NULL; /* the refs, if any, stay with the buffer */
	b->b.len = b->b.cap = 0;
	asp_buf_free(&b->b);
	return data;
}

bool asp_conn_sink_notify(const asp_conn_sink *s, asp_reply *scratch, asp_notice_id n,
                          const void *params)
{
	asp_buf tmp, *b = scratch ? &scratch->b : &tmp;
	if (!scratch)
		asp_buf_init(&tmp);
	int rc = asp_sink_send_event(s, b, n, params);
	if (!scratch)
		asp_buf_free(&tmp);
	return rc > 0;
}

asp_serve_result asp_local_serve(asp_local_conn *c, asp_request *r, asp_reply *b)
{
	asp_buf *out = &b->b;
	bool sink = c->has_sink;
	if (!r->decoded && r->st == ASP_OK)
		asp_request_decode(r, NULL);
	if (r->st) {
		if (!r->m.has_id || asp_wire_response_err(out, r->m.id, &r->err) < 0)
			return ASP_SERVE_FAILED;
		if (!sink)
			return ASP_SERVE_REPLY;
		return local_conn_send(c, out->data, out->len) ? ASP_SERVE_SENT : ASP_SERVE_GONE;
	}
	if (!sink) {
		asp_dispatch(&asp_local_conn_ops, c, &r->m, out, c->l->max_message);
		return out->len > ASP_FRAME_HEADER ? ASP_SERVE_REPLY : ASP_SERVE_FAILED;
	}
	return (asp_serve_result)asp_local_conn_serve(c, &r->m, out);
}
