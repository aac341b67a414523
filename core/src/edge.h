/*
 * Private to the core and its tests: what is inside an asp_request and an asp_reply
 * (asp/server.h), for a harness that serves them with an op table of its own
 * (tests/fuzz/fuzz_http.c), and the edges' frame sending the local backend uses for a
 * sink's answers and, when the sink takes no typed events, its notifications.
 */
#ifndef ASP_EDGE_H
#define ASP_EDGE_H

#include "asp/server.h"
#include "wire.h"

/* The decoded message (asp_request_decode returned ASP_OK), else NULL. */
const asp_msg *asp_request_msg(const asp_request *r);

/* The buffer the answer is built in. */
asp_buf *asp_reply_buf(asp_reply *b);

/*
 * The frame in `b` through the sink: in pieces (sendv) when it references bins, else in
 * one send. 1 sent, 0 the sink failed (the connection is gone), -1 out of memory.
 */
int asp_edge_send_buf(const asp_conn_sink *s, const asp_buf *b);

/*
 * asp_conn_sink_notify with the frame built in `b` (the caller's, reused): 1 sent, 0 the
 * sink failed, -1 out of memory (nothing sent). With sendv, large output bytes stay
 * where the event points until the sink returns.
 */
int asp_edge_notify(const asp_conn_sink *s, asp_buf *b, asp_notice_id n, const void *params);

#endif
