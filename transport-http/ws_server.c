/*
 * The listener's WebSocket (/v1/ws, subprotocol asp.v1): each binary message is one
 * msgpack message, as a stdio frame is. Messages are reassembled up to max_message and
 * handed to workers; answers and notifications go out one chunk per WRITEABLE, large
 * ones as fragments. The upgrade itself is checked in http_server.c.
 */
#include "srv.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct ws_pss {
	srv_conn *c;
} ws_pss;

static int close_with(struct lws *wsi, int code, const char *why)
{
	lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)why, strlen(why));
	return -1;
}

static int on_receive(srv *s, struct lws *wsi, srv_conn *c, const void *in, size_t len)
{
	if (c->rx_len == 0 && !c->rx)
		c->rx_binary = lws_frame_is_binary(wsi);
	if (!c->rx_binary) {
		asp_server_log(
		    "asp-agent: %s: a text WebSocket message; ASP sends binary ones; closing",
		    c->peer);
		return close_with(wsi, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE,
		                  "ASP messages are binary");
	}
	size_t rest = lws_remaining_packet_payload(wsi);
	if (len > s->max_message - c->rx_len || rest > s->max_message - c->rx_len - len) {
		asp_server_log(
		    "asp-agent: %s: a WebSocket message larger than max_message (%zu); closing",
		    c->peer, s->max_message);
		return close_with(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE,
		                  "message larger than max_message");
	}
	size_t need = c->rx_len + len + rest;
	if (need > c->rx_cap || !c->rx) {
		/* Geometric growth: a message in many fragments is not copied over and over. */
		size_t cap = c->rx_cap * 2 > need ? c->rx_cap * 2 : need;
		if (cap < 4096)
			cap = 4096;
		if (cap > s->max_message)
			cap = s->max_message > need ? s->max_message : need;
		uint8_t *r = realloc(c->rx, cap ? cap : 1);
		if (!r)
			return close_with(wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION,
			                  "out of memory");
		c->rx = r;
		c->rx_cap = cap;
	}
	if (len)
		memcpy(c->rx + c->rx_len, in, len);
	c->rx_len += len;
	if (!lws_is_final_fragment(wsi) || rest)
		return 0;
	uint8_t *msg = c->rx;
	size_t n = c->rx_len;
	c->rx = NULL;
	c->rx_len = c->rx_cap = 0;
	if (s->stopping || c->going_away) {
		free(msg); /* shutting down: no new work */
		return 0;
	}
	if (!srv_submit(c, msg, n, NULL))
		return close_with(wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
	srv_update_rx(c);
	return 0;
}

/* WRITEABLE: one chunk of the first queued message, or the close the connection owes. */
static int on_writeable(struct lws *wsi, srv_conn *c)
{
	int code = srv_close_code(c);
	if (code)
		return close_with(wsi, code, "undecodable message");
	srv_out *o = srv_out_peek(c);
	if (!o) {
		if (c->going_away)
			return close_with(wsi, LWS_CLOSE_STATUS_GOINGAWAY,
			                  "asp-agent is shutting down");
		return 0;
	}
	uint8_t *buf = c->s->stage;
	size_t total = o->len - o->off;
	size_t take = total - o->sent;
	if (take > SRV_CHUNK)
		take = SRV_CHUNK;
	memcpy(buf + LWS_PRE, o->data + o->off + o->sent, take);
	bool first = o->sent == 0, last = o->sent + take == total;
	int flags = first ? LWS_WRITE_BINARY : LWS_WRITE_CONTINUATION;
	if (!last)
		flags |= LWS_WRITE_NO_FIN;
	if (lws_write(wsi, buf + LWS_PRE, take, (enum lws_write_protocol)flags) < (int)take)
		return -1;
	o->sent += take;
	if (last) {
		srv_out_pop(c);
		srv_update_rx(c);
	}
	if (!last || srv_out_peek(c) || c->going_away)
		lws_callback_on_writable(wsi);
	return 0;
}

int srv_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	srv *s = lws_context_user(lws_get_context(wsi));
	ws_pss *pss = user;
	switch (reason) {
	case LWS_CALLBACK_ESTABLISHED: {
		srv_conn *c = srv_conn_new(s, wsi, true);
		if (!c)
			return -1;
		pss->c = c;
		/*
		 * Little unsent data in the kernel: an answer queued behind a process's output
		 * waits for at most this much, while the window (bandwidth) is unaffected.
		 */
		int lowat = SRV_NOTSENT_LOWAT;
		setsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat,
		           sizeof lowat);
		if (!srv_conn_bind(c))
			return close_with(wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION,
			                  "out of memory");
		if (s->stopping) {
			c->going_away = true;
			lws_callback_on_writable(wsi);
		}
		return 0;
	}
	case LWS_CALLBACK_RECEIVE: return pss->c ? on_receive(s, wsi, pss->c, in, len) : -1;
	case LWS_CALLBACK_SERVER_WRITEABLE: return pss->c ? on_writeable(wsi, pss->c) : 0;
	case LWS_CALLBACK_CLOSED:
		if (pss && pss->c) {
			srv_conn_detach(pss->c);
			pss->c = NULL;
		}
		return 0;
	default: return 0;
	}
}
