/*
 * What conformance registrations go through besides an op table: the public client API
 * (its calls as an op table, and its streaming), or a transport's subscribe slots.
 */
#include "conformance.h"

#include "asp/transport.h"

/* ---- the public client API (self is an asp_client *) ---- */

#define THUNK(op)                                                                                  \
	static asp_status call_##op(void *self, const asp_##op##_params *p, asp_##op##_result *r,  \
	                            asp_arena *a, asp_error *err)                                  \
	{                                                                                          \
		return asp_##op((asp_client *)self, p, r, a, err);                                 \
	}
ASP_FOR_EACH_OP(THUNK)
#undef THUNK

#define SLOT(op) .op = call_##op,
const asp_ops conf_client_ops = {ASP_FOR_EACH_OP(SLOT)};
#undef SLOT

static asp_status client_spawn(void *ctx, void *self, const asp_spawn_params *p,
                               const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                               asp_error *err)
{
	(void)ctx;
	return asp_spawn_start(self, p, cb, user, proc, err);
}

static asp_status client_attach(void *ctx, void *self, const asp_proc_attach_params *p,
                                const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	(void)ctx;
	return asp_proc_attach_start(self, p, cb, user, err);
}

static asp_status client_connect(void *ctx, void *self, const asp_connect_params *p,
                                 const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                                 asp_error *err)
{
	(void)ctx;
	return asp_connect_start(self, p, cb, user, proc, err);
}

static asp_status client_tree_read(void *ctx, void *self, const asp_tree_read_params *p,
                                   const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                                   asp_error *err)
{
	(void)ctx;
	return asp_tree_read_start(self, p, cb, user, proc, err);
}

static void client_detach(void *ctx, void *self, uint64_t proc)
{
	(void)ctx;
	asp_proc_detach(self, proc);
}

const conf_streaming conf_client_streaming = {
    .spawn = client_spawn,
    .attach = client_attach,
    .detach = client_detach,
    .connect = client_connect,
    .tree_read = client_tree_read,
};

/* ---- a transport's subscribe/unsubscribe (ctx is the asp_transport) ---- */

static asp_status follow(const asp_transport *t, void *self, asp_op_id op, const void *params,
                         void *result, const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	if (!t->subscribe)
		return asp_error_set(err, ASP_E_UNSUPPORTED, NULL, "the %s transport cannot stream",
		                     t->name);
	asp_proc_sub *sub = asp_proc_sub_new(cb, user);
	asp_arena *a = asp_arena_new();
	asp_status st;
	if (!sub || !a)
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	else
		st = t->subscribe(self, op, params, result, a, sub, err);
	asp_proc_sub_unref(sub);
	asp_arena_free(a);
	return st;
}

static asp_status transport_spawn(void *ctx, void *self, const asp_spawn_params *p,
                                  const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                                  asp_error *err)
{
	asp_spawn_result r = {0};
	asp_status st = follow(ctx, self, ASP_OP_SPAWN, p, &r, cb, user, err);
	*proc = st == ASP_OK ? r.proc : 0;
	return st;
}

static asp_status transport_attach(void *ctx, void *self, const asp_proc_attach_params *p,
                                   const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	asp_proc_attach_result r;
	return follow(ctx, self, ASP_OP_PROC_ATTACH, p, &r, cb, user, err);
}

static asp_status transport_connect(void *ctx, void *self, const asp_connect_params *p,
                                    const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                                    asp_error *err)
{
	asp_connect_result r = {0};
	asp_status st = follow(ctx, self, ASP_OP_CONNECT, p, &r, cb, user, err);
	*proc = st == ASP_OK ? r.proc : 0;
	return st;
}

static asp_status transport_tree_read(void *ctx, void *self, const asp_tree_read_params *p,
                                      const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                                      asp_error *err)
{
	asp_tree_read_result r = {0};
	asp_status st = follow(ctx, self, ASP_OP_TREE_READ, p, &r, cb, user, err);
	*proc = st == ASP_OK ? r.proc : 0;
	return st;
}

static void transport_detach(void *ctx, void *self, uint64_t proc)
{
	const asp_transport *t = ctx;
	if (t->unsubscribe)
		t->unsubscribe(self, proc);
}

void conf_transport_streaming(conf_streaming *st, const struct asp_transport *t)
{
	*st = (conf_streaming){
	    .spawn = transport_spawn,
	    .attach = transport_attach,
	    .detach = transport_detach,
	    .connect = transport_connect,
	    .tree_read = transport_tree_read,
	    .ctx = (void *)t,
	};
}
