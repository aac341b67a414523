/*
 * What the generated tables (proto_desc.c, proto_client.c from asp-sdkgen) provide to
 * the hand-written core, and the two core functions the generated client glue calls.
 */
#ifndef ASP_PROTO_DESC_H
#define ASP_PROTO_DESC_H

#include "asp/channel.h"
#include "asp/proto.h"
#include "asp/transport.h"
#include "codec.h"

typedef asp_status (*asp_op_thunk)(const asp_ops *ops, void *self, const void *p, void *r,
                                   asp_arena *a, asp_error *err);

typedef struct asp_op_desc {
	const char *name;
	size_t name_len;
	int since;
	bool streaming; /* needs a connection that carries notifications */
	const asp_record_desc *params, *result;
	asp_op_thunk call; /* ops->NAME(self, p, r, a, err) */
} asp_op_desc;

typedef struct asp_notice_desc {
	const char *name;
	size_t name_len;
	const asp_record_desc *params;
} asp_notice_desc;

extern const asp_op_desc asp_op_descs[ASP_OP_COUNT];
extern const asp_notice_desc asp_notice_descs[ASP_NOTICE_COUNT];

/*
 * asp_ops_complete, asp_ops_filled (asp/transport.h) and asp_rpc_ops, asp_rpc_invoke
 * (asp/channel.h) are public: transports use them.
 */

/* Defined in client.c: applies the config (cwd, env, timeout) and calls the backend. */
asp_status asp_client_call(asp_client *c, asp_op_id op, const void *params, void *result,
                           asp_arena *a, asp_error *err);

#endif
