/* Sending a frame, or a notification built from a typed event, through an asp_conn_sink. */
#include "sink_send.h"

#include <stdlib.h>
#include <sys/uio.h>

int asp_sink_send_frame(const asp_conn_sink *s, const asp_buf *b)
{
	if (b->nrefs == 0 || !s->sendv)
		return s->send(s->ctx, b->data, b->len) ? 1 : 0;
	struct iovec stack[8];
	int max = (int)(2 * b->nrefs + 1);
	struct iovec *iov = max <= 8 ? stack : malloc((size_t)max * sizeof *iov);
	if (!iov)
		return -1;
	int n = asp_buf_iov(b, iov, max);
	bool ok = s->sendv(s->ctx, iov, n);
	if (iov != stack)
		free(iov);
	return ok ? 1 : 0;
}

int asp_sink_send_event(const asp_conn_sink *s, asp_buf *b, asp_notice_id n, const void *params)
{
	/* With sendv, a chunk as large as an answer's bin is lent, as the answer's is. */
	b->ref_min = s->sendv ? ASP_BUF_REF_MIN : 0;
	int rc = asp_wire_notify(b, n, params);
	b->ref_min = 0;
	return rc ? -1 : asp_sink_send_frame(s, b);
}
