/*
 * The local backend: every unary op done with POSIX calls in this process. asp-agent
 * serves it to remote clients; tests and the CLI may call it directly. Relative paths
 * resolve against the process's working directory (the responder's start directory).
 */
#ifndef ASP_LOCAL_H
#define ASP_LOCAL_H

#include "asp/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct asp_local asp_local;

/*
 * A backend whose responses fit `max_message` bytes (exec output trimmed, read length
 * capped); 0 means ASP_MAX_MESSAGE_DEFAULT. NULL when out of memory.
 */
asp_local *asp_local_new(size_t max_message);

/* NULL is a no-op. No call may be in flight. */
void asp_local_free(asp_local *l);

/*
 * self is an asp_local *. Every op may block (exec until the process ends) and may be
 * called from many threads at once. The streaming ops (spawn, proc_*) are NULL: run the
 * table through asp_ops_complete() to have them answer `unsupported`.
 */
extern const asp_ops asp_local_ops;

/*
 * Streaming (spawn, proc_*) needs to know which responder connection a request came
 * from: notifications of a process go to the connection that spawned it and to every
 * connection that attached to it. Each server (stdio, WebSocket, HTTP) wraps each of its
 * connections in a sink and passes the bound connection as `self` with
 * asp_local_conn_ops for the requests it reads from that connection.
 */
typedef struct asp_conn_sink {
	/*
	 * Sends one whole frame (header included) to the connection. May be called from any
	 * thread and may block while the peer is slow: that is the backpressure that keeps
	 * a process's pipe unread while its client does not read. Returns false once the
	 * connection is gone; the backend then never calls it again.
	 */
	bool (*send)(void *ctx, const uint8_t *frame, size_t len);
	void *ctx;
} asp_conn_sink;

typedef struct asp_local_conn asp_local_conn;

/*
 * Binds a connection to the backend. `sink` NULL: a connection that cannot carry
 * notifications (plain HTTP POST); its spawns still run and can be attached from
 * elsewhere. NULL when out of memory. The sink is copied.
 */
asp_local_conn *asp_local_connect(asp_local *l, const asp_conn_sink *sink);

/*
 * Unbinds: when it returns, the sink is never called again (processes the connection
 * spawned keep running, DESIGN §3). No call on `c` may be in flight. NULL is a no-op.
 */
void asp_local_disconnect(asp_local_conn *c);

/* Every op, streaming ones included; self is an asp_local_conn *. */
extern const asp_ops asp_local_conn_ops;

/*
 * Ends every spawned process (TERM to its group, KILL 2 s later) and waits for them: the
 * responder calls it on EOF or SIGTERM before it exits (DESIGN §5).
 */
void asp_local_shutdown(asp_local *l);

#endif
