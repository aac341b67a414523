/* The server side of one request: decode params, call the op, encode the answer. */
#include "wire.h"
#include "spare.h"

#include <stdbool.h>
#include <stdlib.h>

size_t asp_ops_filled(const asp_ops *const *tables, size_t n, const char **out)
{
	size_t count = 0;
#define FILLED(name)                                                                               \
	for (size_t i = 0; i < n; i++) {                                                           \
		if (tables[i] && tables[i]->name) {                                                \
			out[count++] = #name;                                                      \
			break;                                                                     \
		}                                                                                  \
	}
	ASP_FOR_EACH_OP(FILLED)
#undef FILLED
	return count;
}

static void answer_error(asp_buf *out, uint32_t id, const asp_error *err)
{
	if (asp_wire_response_err(out, id, err) < 0)
		out->len = 0; /* out of memory: the caller sees an empty frame and closes */
}

static asp_spare spare_arena;

asp_arena *asp_dispatch_arena(void)
{
	asp_arena *a = asp_spare_take(&spare_arena);
	return a ? a : asp_arena_new();
}

void asp_dispatch_arena_done(asp_arena *a)
{
	if (!a)
		return;
	asp_arena_reset(a); /* keeps its first block only */
	asp_arena_free(asp_spare_keep(&spare_arena, a));
}

void asp_dispatch(const asp_ops *ops, void *self, const asp_msg *req, asp_buf *out,
                  size_t max_message)
{
	/* The arena dies here, so nothing of it may stay referenced by the frame. */
	size_t ref_min = out->ref_min;
	out->ref_min = 0;
	asp_arena *a = asp_dispatch_arena();
	asp_dispatch_in(ops, self, req, out, max_message, a);
	asp_dispatch_arena_done(a);
	out->ref_min = ref_min;
}

asp_status asp_dispatch_params(const asp_op_desc *d, const asp_msg *req, void *p, asp_arena *a,
                               asp_error *err)
{
	if (req->params)
		return asp_record_decode(d->params, req->params, p, a, err);
	msgpack_object empty = {.type = MSGPACK_OBJECT_MAP};
	return asp_record_decode(d->params, &empty, p, a, err);
}

void asp_dispatch_answer(asp_buf *out, uint32_t id, const asp_op_desc *d, const void *r,
                         asp_status st, asp_error *err, size_t max_message)
{
	if (st) {
		answer_error(out, id, err);
	} else if (asp_wire_response_ok(out, id, d->result, r) < 0) {
		asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory encoding the %s result",
		              d->name);
		answer_error(out, id, err);
	} else if (asp_buf_frame_len(out) - ASP_FRAME_HEADER > max_message) {
		asp_error_set(err, ASP_E_TOO_LARGE, NULL,
		              "%s: the result is %zu bytes, more than max_message (%zu)", d->name,
		              asp_buf_frame_len(out) - ASP_FRAME_HEADER, max_message);
		answer_error(out, id, err);
	}
}

void asp_dispatch_in(const asp_ops *ops, void *self, const asp_msg *req, asp_buf *out,
                     size_t max_message, asp_arena *a)
{
	asp_error err;
	asp_error_clear(&err);
	int op = asp_op_lookup(req->method, req->method_len);
	if (op < 0) {
		asp_error_set(&err, ASP_E_UNSUPPORTED, NULL, "unknown method '%.*s'",
		              (int)(req->method_len > 64 ? 64 : req->method_len), req->method);
		answer_error(out, req->id, &err);
		return;
	}
	const asp_op_desc *d = &asp_op_descs[op];
	void *p = a ? asp_arena_alloc(a, d->params->size) : NULL;
	void *r = a ? asp_arena_alloc(a, d->result->size) : NULL;
	if (!p || !r) {
		asp_error_set(&err, ASP_E_INTERNAL, NULL, "out of memory");
		answer_error(out, req->id, &err);
		return;
	}
	asp_status st = asp_dispatch_params(d, req, p, a, &err);
	if (!st) {
		asp_record_init(d->result, r);
		st = d->call(ops, self, p, r, a, &err);
		if (st && err.code != st) /* a backend that forgot to fill err still says what */
			asp_error_set(&err, st, NULL, "%s failed", d->name);
	}
	asp_dispatch_answer(out, req->id, d, r, st, &err, max_message);
}
