/*
 * In-process connections to a local backend: the "local" transport, and tests that want
 * several connections to one backend (reattaching to a process from another one). Each
 * is a bound connection (asp_local_connect) whose sink takes the backend's typed events
 * and routes them to the process followers on the pump's thread, synchronously (the
 * follower calls back, or copies what comes before its call's answer): no frame is
 * encoded or decoded, and streaming keeps the promises it keeps over a wire.
 */
#ifndef ASP_RPC_LOCAL_CLIENT_H
#define ASP_RPC_LOCAL_CLIENT_H

#include "asp/transport.h"
#include "local/local.h"

/*
 * A connection to `l`; with `own` the backend is freed (its processes ended) with the
 * connection. *ops (every slot filled) and *self are the backend as asp_transport.open
 * returns it.
 */
asp_status asp_local_client_open(asp_local *l, bool own, const asp_ops **ops, void **self,
                                 asp_error *err);

/* Disconnects (its followers get on_lost) and frees; the backend too if owned. */
void asp_local_client_close(void *self);

/* asp_transport.subscribe and .unsubscribe for such a connection. */
asp_status asp_local_client_subscribe(void *self, asp_op_id op, const void *params, void *result,
                                      asp_arena *a, asp_proc_sub *sub, asp_error *err);
void asp_local_client_unsubscribe(void *self, uint64_t proc);

/* The "local" transport (ASP_TRANSPORT_LOCAL): a connection to a backend of its own. */
extern const asp_transport asp_local_transport;

#endif
