/*
 * Private to the core: the parts of the local backend that are not public (asp/server.h
 * has the rest): its op tables, serving a decoded message, holding notifications back.
 */
#ifndef ASP_LOCAL_H
#define ASP_LOCAL_H

#include "asp/proto.h"
#include "asp/server.h"
#include "asp/transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * self is an asp_local *. Every op may block (exec until the process ends) and may be
 * called from many threads at once. The streaming ops (spawn, proc_*) are NULL here (they
 * need a connection: asp_local_conn_ops); run the table through asp_ops_complete() to
 * have them answer `unsupported`.
 */
extern const asp_ops asp_local_ops;

/*
 * Streaming (spawn, proc_*) needs to know which responder connection a request came
 * from: notifications of a process go to the connection that spawned it and to every
 * connection that attached to it. Each server (stdio, WebSocket, HTTP) wraps each of its
 * connections in a sink and passes the bound connection as `self` with
 * asp_local_conn_ops for the requests it reads from that connection.
 */

/*
 * Every op, streaming ones included; self is an asp_local_conn *. hello lists them.
 * spawn and proc_attach called directly (outside asp_local_conn_serve or a hold) let
 * notifications flow at once, which may be before the caller has seen the result.
 */
extern const asp_ops asp_local_conn_ops;

/*
 * Serves one request read from a connection with a sink: runs it with asp_local_conn_ops,
 * sends the response through the sink, and only then lets the processes it spawned or
 * attached send notifications (docs/design.md, "Operations": the spawn response comes
 * before the process's first notification; proc_attach replays before its response and
 * live output follows it). `out` is the caller's reusable scratch buffer. 1: sent; 0: the
 * sink failed (the connection is gone); -1: out of memory, nothing sent (the server
 * should close the connection). Servers use this rather than asp_dispatch plus their own
 * write; a connection without a sink uses asp_dispatch and answers itself.
 */
struct asp_msg;
struct asp_buf;
int asp_local_conn_serve(asp_local_conn *c, const struct asp_msg *req, struct asp_buf *out);

/*
 * For a caller that calls asp_local_conn_ops itself and delivers the results in its own
 * way (the in-process transport): between hold and release, processes that spawn or
 * proc_attach on this thread start or attach keep their events for `c` back. release
 * lets them flow. Not nested; one connection per thread at a time.
 */
void asp_local_conn_hold(asp_local_conn *c);
void asp_local_conn_release(asp_local_conn *c);

#endif
