/*
 * Routing a connection's output/exit notifications to the followers of each process
 * (asp_proc_sub), and the call protocol every streaming transport shares: an attach's
 * follower is listed before its request (the replay comes first), a spawn's once the
 * answer names the process; the transport keeps later notifications back meanwhile
 * (the RPC engine's gate, the local backend's hold). One table per connection.
 */
#ifndef ASP_RPC_PROC_ROUTE_H
#define ASP_RPC_PROC_ROUTE_H

#include "asp/transport.h"

typedef struct asp_proc_routes asp_proc_routes;

/* NULL when out of memory. */
asp_proc_routes *asp_proc_routes_new(void);

/* Closes and releases the followers left (no callback). NULL is a no-op. */
void asp_proc_routes_free(asp_proc_routes *t);

/* A decoded notification: to the process's follower; one for nobody is dropped. */
void asp_proc_routes_route(asp_proc_routes *t, asp_notice_id n, const void *params);

/*
 * The connection died: every follower gets on_lost (on this thread) and later calls
 * fail with `why`. Idempotent.
 */
void asp_proc_routes_lost(asp_proc_routes *t, const asp_error *why);

/* Unlists `proc`'s follower and closes it (asp_proc_detach). */
void asp_proc_routes_remove(asp_proc_routes *t, uint64_t proc);

/* The transport's plain call of `op`. */
typedef asp_status (*asp_proc_call_fn)(void *ctx, asp_op_id op, const void *params, void *result,
                                       asp_arena *a, asp_error *err);

/*
 * Runs `call` for spawn or proc_attach with `sub` following the process on this
 * connection, as asp_transport.subscribe promises. The transport must hold the process's
 * notifications back from the moment `call` has the answer until this returns.
 */
asp_status asp_proc_routes_call(asp_proc_routes *t, asp_proc_call_fn call, void *ctx, asp_op_id op,
                                const void *params, void *result, asp_arena *a, asp_proc_sub *sub,
                                asp_error *err);

#endif
