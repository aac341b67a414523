/*
 * The RPC engine: drives one frame channel as the client side of DESIGN §2. Calls from
 * many threads are pipelined on the connection; one reader thread hands each response
 * to the caller waiting for its id. Its op table is asp_rpc_ops (proto_desc.h), whose
 * `self` is an asp_rpc *.
 */
#ifndef ASP_RPC_RPC_H
#define ASP_RPC_RPC_H

#include "asp/transport.h"
#include "channel.h"
#include "proto_desc.h"

typedef struct asp_rpc asp_rpc;

/*
 * Called on the reader thread for each notification whose method the spec knows, with
 * its params decoded into `a` (reset after the call). It must not block or call into
 * the same asp_rpc.
 */
typedef void (*asp_rpc_notify_fn)(void *ctx, asp_notice_id n, const void *params, asp_arena *a);

/*
 * Starts the engine on `ch`, which it takes (freed by asp_rpc_free, or here on
 * failure). `max_message` bounds messages both ways until a hello result announces the
 * peer's (0: the protocol default).
 */
asp_status asp_rpc_new(asp_channel *ch, size_t max_message, asp_rpc **out, asp_error *err);

/*
 * The deadline of calls without a time limit of their own (DESIGN §4 call_timeout_ms;
 * 0: ASP_CALL_TIMEOUT_DEFAULT). Set before the first call.
 */
void asp_rpc_set_call_timeout(asp_rpc *rpc, unsigned ms);

/*
 * Routes notifications to `fn` instead of the followers of asp_rpc_subscribe (tests of
 * the engine). Set before the first call.
 */
void asp_rpc_set_notify(asp_rpc *rpc, asp_rpc_notify_fn fn, void *ctx);

/*
 * asp_rpc_invoke with a deadline of its own: `timeout_ms` (0: the usual deadline, as
 * asp_rpc_invoke) after sending, the call gives up with ASP_E_TIMEOUT and a late answer
 * is dropped; the connection stays usable and is not made suspect. For handshakes, where
 * a wrong command might never answer.
 */
asp_status asp_rpc_call(asp_rpc *rpc, asp_op_id op, const void *params, void *result,
                        asp_arena *a, unsigned timeout_ms, asp_error *err);

/*
 * asp_transport.subscribe and .unsubscribe for a transport whose backend is this engine
 * (self = asp_rpc *): follows a spawned process's notifications on this connection.
 */
asp_status asp_rpc_subscribe(void *self, asp_op_id op, const void *params, void *result,
                             asp_arena *a, asp_proc_sub *sub, asp_error *err);
void asp_rpc_unsubscribe(void *self, uint64_t proc);

/* Whether the connection is still usable; false once it died or was closed. */
bool asp_rpc_alive(asp_rpc *rpc);

/*
 * Fails every call in flight and every later call with transport_error, closes the
 * channel. Never blocks; idempotent.
 */
void asp_rpc_close(asp_rpc *rpc);

/* Closes, waits for the reader thread, frees the channel and the engine. NULL: no-op. */
void asp_rpc_free(asp_rpc *rpc);

#endif
