/* In-process connections to a local backend, and the "local" transport built on them. */
#include "local_client.h"

#include "proc_route.h"
#include "proto_desc.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct local_client {
	asp_local *l;
	bool own;
	asp_local_conn *conn; /* the ops' self; its sink ctx is this struct */
	asp_proc_routes *routes;
} local_client;

static asp_ops conn_ops; /* asp_local_conn_ops, completed */

static void ops_init(void)
{
	conn_ops = asp_local_conn_ops;
	asp_ops_complete(&conn_ops);
}

/*
 * The sink takes the backend's events as they are: routed to the follower on the pump's
 * thread, no frame in between. asp_proc_routes_route is synchronous (the follower calls
 * back, or copies what comes before its call's answer), so the event's bytes, lent from
 * the process's ring for the duration of this call, are never kept.
 */
static bool sink_event(void *ctx, asp_notice_id n, const void *params)
{
	local_client *lc = ctx;
	asp_proc_routes_route(lc->routes, n, params);
	return true;
}

/* No frame ever comes: this client calls the ops itself and takes their results. */
static bool sink_send(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	(void)frame;
	(void)len;
	return true;
}

asp_status asp_local_client_open(asp_local *l, bool own, const asp_ops **ops, void **self,
                                 asp_error *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, ops_init);
	local_client *lc = calloc(1, sizeof *lc);
	if (lc)
		lc->routes = asp_proc_routes_new();
	asp_conn_sink sink = {.send = sink_send, .ctx = lc, .event = sink_event};
	if (lc && lc->routes)
		lc->conn = asp_local_connect(l, &sink);
	if (!lc || !lc->conn) {
		if (lc)
			asp_proc_routes_free(lc->routes);
		free(lc);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	lc->l = l;
	lc->own = own;
	*ops = &conn_ops;
	*self = lc->conn;
	return ASP_OK;
}

void asp_local_client_close(void *self)
{
	local_client *lc = asp_local_conn_ctx(self);
	asp_local_disconnect(self); /* no sink call after this */
	asp_error why;
	asp_error_set(&why, ASP_E_TRANSPORT_ERROR, NULL, "the client closed the connection");
	asp_proc_routes_lost(lc->routes, &why);
	asp_proc_routes_free(lc->routes);
	if (lc->own)
		asp_local_free(lc->l);
	free(lc);
}

typedef struct held_call {
	asp_local_conn *conn;
} held_call;

static asp_status call_held(void *ctx, asp_op_id op, const void *params, void *result, asp_arena *a,
                            asp_error *err)
{
	const asp_op_desc *d = &asp_op_descs[op];
	return d->call(&conn_ops, ((held_call *)ctx)->conn, params, result, a, err);
}

asp_status asp_local_client_subscribe(void *self, asp_op_id op, const void *params, void *result,
                                      asp_arena *a, asp_proc_sub *sub, asp_error *err)
{
	local_client *lc = asp_local_conn_ctx(self);
	held_call h = {self};
	/*
	 * The backend keeps the process's live events back until asp_proc_routes_call
	 * returns: a spawn's follower is listed only once the answer names the process, and
	 * an attach's keeps what comes before its start in memory, which the gate bounds to
	 * the replay (live output waits in the child's pipe meanwhile, not in a list).
	 */
	asp_local_conn_hold(self);
	asp_status st =
	    asp_proc_routes_call(lc->routes, call_held, &h, op, params, result, a, sub, err);
	asp_local_conn_release(self);
	return st;
}

void asp_local_client_unsubscribe(void *self, uint64_t proc)
{
	local_client *lc = asp_local_conn_ctx(self);
	asp_proc_routes_remove(lc->routes, proc);
}

/* ---- the local backend as a transport --------------------------------------------- */

static asp_status local_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                             asp_error *err)
{
	(void)cfg;
	asp_local *l = asp_local_new(0);
	if (!l)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_status st = asp_local_client_open(l, true, ops, self, err);
	if (st)
		asp_local_free(l);
	return st;
}

const asp_transport asp_local_transport = {
    .kind = ASP_TRANSPORT_LOCAL,
    .name = "local",
    .open = local_open,
    .abort = NULL, /* an op running in this process cannot be cut short */
    .close = asp_local_client_close,
    .alive = NULL,
    .subscribe = asp_local_client_subscribe,
    .unsubscribe = asp_local_client_unsubscribe,
};
