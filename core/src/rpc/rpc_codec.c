/*
 * One call per message (asp/channel.h asp_rpc_encode / asp_rpc_decode): the request and
 * answer codec the RPC engine uses, for a transport that carries each call on its own
 * (HTTP POST) and so has no engine.
 */
#include "rpc.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>

/* Bytes the bins of `params` add to the request: reserved up front, so no regrowth. */
static size_t bin_bytes(const asp_record_desc *d, const void *params)
{
	size_t n = 0;
	for (size_t i = 0; i < d->nfields; i++)
		if (d->fields[i].type == ASP_FT_BIN)
			n += ((const asp_bytes *)((const char *)params + d->fields[i].offset))->len;
	return n;
}

asp_status asp_rpc_encode(asp_op_id op, uint32_t id, const void *params, size_t max_message,
                          uint8_t **frame, size_t *frame_len, asp_error *err)
{
	*frame = NULL;
	*frame_len = 0;
	if ((unsigned)op >= ASP_OP_COUNT)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "op %d is not in the spec",
		                     (int)op);
	const asp_op_desc *d = &asp_op_descs[op];
	size_t bins = bin_bytes(d->params, params);
	if (bins > max_message)
		return asp_error_set(err, ASP_E_TOO_LARGE, NULL,
		                     "%s: the request carries %zu bytes, more than max_message "
		                     "(%zu); send the data in smaller parts",
		                     d->name, bins, max_message);
	asp_buf req;
	asp_buf_init(&req);
	if (asp_buf_reserve(&req, 256 + bins) < 0 || asp_wire_request(&req, id, op, params) < 0) {
		asp_buf_free(&req);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory encoding %s",
		                     d->name);
	}
	size_t len = req.len - ASP_FRAME_HEADER;
	if (len > max_message) {
		asp_buf_free(&req);
		return asp_error_set(err, ASP_E_TOO_LARGE, NULL,
		                     "%s: the request is %zu bytes, more than max_message (%zu); "
		                     "send the data in smaller parts",
		                     d->name, len, max_message);
	}
	*frame = req.data;
	*frame_len = req.len;
	return ASP_OK;
}

asp_status asp_rpc_decode(asp_op_id op, uint32_t id, uint8_t *msg, size_t len, void *result,
                          asp_arena *a, const char *who, asp_error *err)
{
	msgpack_unpacked u;
	asp_wire_unpacked_init(&u);
	asp_msg m;
	asp_status st = asp_wire_decode(msg, len, &u, &m, err);
	if (st || m.type != ASP_MSG_RESPONSE || m.id != id) {
		char why[ASP_ERROR_MESSAGE_MAX];
		if (st == ASP_OK)
			snprintf(why, sizeof why, "not the response to request %u", id);
		else /* a copy: err->message cannot be both the output and an argument */
			snprintf(why, sizeof why, "%s", err->message);
		st = asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                   "the %s's answer to %s is undecodable (%s)", who ? who : "peer",
		                   asp_op_name(op), why);
		asp_wire_unpacked_done(&u);
		free(msg);
		return st;
	}
	st = asp_wire_result_decode(op, &m, result, a, err);
	asp_wire_unpacked_done(&u);
	if (st == ASP_OK && asp_arena_adopt(a, msg) < 0) /* results point into it; frees it */
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	if (st)
		free(msg);
	return st;
}
