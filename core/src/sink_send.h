/*
 * The one way the core sends through an asp_conn_sink (asp/server.h): a response frame,
 * or a typed event encoded as a notification frame when the sink takes no typed events.
 */
#ifndef ASP_SINK_SEND_H
#define ASP_SINK_SEND_H

#include "asp/server.h"
#include "wire.h"

/*
 * The frame in `b` through the sink: in pieces (sendv) when it references bins, else in
 * one send. 1 sent, 0 the sink failed (the connection is gone), -1 out of memory.
 */
int asp_sink_send_frame(const asp_conn_sink *s, const asp_buf *b);

/*
 * asp_conn_sink_notify with the frame built in `b` (the caller's, reused): 1 sent, 0 the
 * sink failed, -1 out of memory (nothing sent). With sendv, large output bytes stay
 * where the event points until the sink returns.
 */
int asp_sink_send_event(const asp_conn_sink *s, asp_buf *b, asp_notice_id n, const void *params);

#endif
