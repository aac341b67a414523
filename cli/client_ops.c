/*
 * The client as an op table (self = asp_client *), so code written against asp_ops — the
 * conformance suite — runs through the client's config handling and transport unchanged.
 */
#include "cli.h"

#define THUNK(op)                                                                                  \
	static asp_status thunk_##op(void *self, const asp_##op##_params *p, asp_##op##_result *r, \
	                             asp_arena *a, asp_error *err)                                 \
	{                                                                                          \
		return asp_##op((asp_client *)self, p, r, a, err);                                 \
	}

ASP_FOR_EACH_OP(THUNK)

#define SLOT(op) .op = thunk_##op,
const asp_ops cli_client_ops = {ASP_FOR_EACH_OP(SLOT)};
