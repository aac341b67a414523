/*
 * asp-agent --listen: the lws context, the service loop, graceful shutdown, and the HTTP
 * side of the wire format (docs/design.md, "Wire format": POST /v1/rpc, GET /v1/health,
 * the WebSocket upgrade's checks). The WebSocket itself is ws_server.c; requests run in
 * srv_work.c.
 */
#include "asp_http.h"
#include "http_addr.h"
#include "http_auth.h"
#include "srv.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How long SIGTERM waits for the answers in flight before giving up on them. */
#define DRAIN_MS 30000
/* How long closed WebSockets get to say goodbye before the context goes. */
#define GOODBYE_MS 1000
#define TICK_US    (20 * 1000)
/* lws's header table per connection (its default): the request line and the headers,
 * less the names lws knows. More is answered 431 (see awaiting). */
#define MAX_HEADERS     4096
#define MAX_HEADERS_STR "4096"

static const char ctype_text[] = "text/plain; charset=utf-8";

typedef struct http_pss {
	srv_conn *c;
	/*
	 * Not reading while a request is unanswered: what follows it (a pipelined request,
	 * the client's EOF after shutdown(SHUT_WR)) waits in lws until the answer went.
	 */
	bool paused;
} http_pss;

/*
 * Headers larger than lws's header table (MAX_HEADERS, or more fragments than it holds):
 * lws 4.1 closes the connection at once, shutting the socket before any callback, and
 * offers no hook of its own. Its log line, written on the service thread from inside the
 * parse, is the only sign, and it does not say which connection. So the connections that
 * may be parsing headers (accepted, or kept alive after an answer, with no request line
 * and headers complete since) are tracked: when the line comes and only one of them
 * exists, or only one holds part of a request line, it is the one, and it gets 431 there
 * and then. Else a connection that has carried a request still gets it from
 * HTTP_DROP_PROTOCOL (lws calls it before shutting the socket once a transaction has
 * bound the protocol); a connection's first request, while another connection is part
 * way through its headers, closes bare (docs/faults.md). Service thread only.
 */
static struct lws **awaiting;
static size_t n_awaiting, cap_awaiting;
static bool headers_overflowed; /* the line came, no 431 went yet; cleared every turn */

static void awaiting_add(struct lws *wsi)
{
	for (size_t i = 0; i < n_awaiting; i++)
		if (awaiting[i] == wsi)
			return;
	if (n_awaiting == cap_awaiting) {
		size_t cap = cap_awaiting ? 2 * cap_awaiting : 16;
		struct lws **a = realloc(awaiting, cap * sizeof *a);
		if (!a)
			return; /* untracked: at worst a bare close instead of a 431 */
		awaiting = a;
		cap_awaiting = cap;
	}
	awaiting[n_awaiting++] = wsi;
}

static void awaiting_remove(struct lws *wsi)
{
	for (size_t i = 0; i < n_awaiting; i++)
		if (awaiting[i] == wsi) {
			awaiting[i] = awaiting[--n_awaiting];
			return;
		}
}

static bool is_awaiting(const struct lws *wsi)
{
	for (size_t i = 0; i < n_awaiting; i++)
		if (awaiting[i] == wsi)
			return true;
	return false;
}

/*
 * Whether `wsi` holds part of a request line: the connection whose headers overflowed
 * does (its method's URI is stored before any header), an idle or fresh one does not.
 */
static bool has_request_line(struct lws *wsi)
{
	static const enum lws_token_indexes uri[] = {
		WSI_TOKEN_GET_URI,
		WSI_TOKEN_POST_URI,
		WSI_TOKEN_HEAD_URI,
		WSI_TOKEN_CONNECT,
#if defined(LWS_WITH_HTTP_UNCOMMON_HEADERS) || defined(LWS_HTTP_HEADERS_ALL)
		WSI_TOKEN_OPTIONS_URI,
		WSI_TOKEN_PUT_URI,
		WSI_TOKEN_PATCH_URI,
		WSI_TOKEN_DELETE_URI,
#endif
	};
	for (size_t i = 0; i < sizeof uri / sizeof uri[0]; i++)
		if (lws_hdr_total_length(wsi, uri[i]) > 0)
			return true;
	return false;
}

/* The one connection the overflow can be, or NULL when several could. */
static struct lws *overflowed_one(void)
{
	if (n_awaiting == 1)
		return awaiting[0];
	struct lws *one = NULL;
	for (size_t i = 0; i < n_awaiting; i++)
		if (has_request_line(awaiting[i])) {
			if (one)
				return NULL;
			one = awaiting[i];
		}
	return one;
}

static void headers_too_large(struct lws *wsi);

static void lws_emit(int level, const char *line)
{
	(void)level;
	if (!strncmp(line, "Ran out of header data space", 28) ||
	    !strncmp(line, "More hdr frags than we can deal with", 36)) {
		struct lws *one = overflowed_one();
		if (one)
			headers_too_large(one);
		else
			headers_overflowed = true;
		return; /* logged with the peer by headers_too_large */
	}
	asp_server_log("asp-agent: lws: %.*s", (int)strcspn(line, "\n"), line);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static srv *srv_of(struct lws *wsi)
{
	return lws_context_user(lws_get_context(wsi));
}

/* ---- checks ----------------------------------------------------------------------- */

static bool authorized(srv *s, struct lws *wsi)
{
	if (!s->token)
		return true;
	char hdr[4200];
	int n = lws_hdr_copy(wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION);
	return n > 0 && http_token_check(s->token, hdr, (size_t)n);
}

static bool has_expect_continue(struct lws *wsi)
{
	char v[64];
	int n = lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_EXPECT);
	return n > 0 && strncasecmp(v, "100-continue", 12) == 0;
}

static const char *reason_phrase(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 431: return "Request Header Fields Too Large";
	case 503: return "Service Unavailable";
	default: return "Error";
	}
}

/*
 * For the upgrade only (lws completes the transaction as soon as the callback returns,
 * so there is no WRITEABLE to wait for), and for a pipelined POST lws cannot parse:
 * the status written at once, then the connection closes. The status line is ours:
 * lws has not read the request's version yet at this point and would say HTTP/1.0,
 * which WebSocket clients refuse to read (they would not see the 401).
 */
static int reject_now(struct lws *wsi, int status, const char *msg)
{
	uint8_t buf[LWS_PRE + 2048], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf;
	size_t ml = strlen(msg);
	char line[64];
	int ll = snprintf(line, sizeof line, "HTTP/1.1 %d %s", status, reason_phrase(status));
	if (lws_add_http_header_by_name(wsi, NULL, (const uint8_t *)line, ll, &p, end) ||
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE,
	                                 (const uint8_t *)ctype_text, (int)strlen(ctype_text), &p,
	                                 end) ||
	    lws_add_http_header_content_length(wsi, ml, &p, end) ||
	    (status == 401 &&
	     lws_add_http_header_by_name(wsi, (const uint8_t *)"www-authenticate:",
	                                 (const uint8_t *)"Bearer realm=\"asp\"", 18, &p, end)) ||
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const uint8_t *)"close", 5, &p,
	                                 end) ||
	    lws_finalize_http_header(wsi, &p, end) || (size_t)(end - p) < ml)
		return -1;
	memcpy(p, msg, ml);
	p += ml;
	int n = (int)(p - start);
	if (lws_write(wsi, start, (size_t)n, LWS_WRITE_HTTP_FINAL) != n)
		return -1;
	return 1; /* lws: "answered" */
}

/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: only a WebSocket on /v1/ws, authorized, asp.v1. */
static int confirm_upgrade(srv *s, struct lws *wsi, const char *upgrade)
{
	char uri[256], proto[256];
	if (!upgrade || strcasecmp(upgrade, "websocket") != 0)
		return reject_now(wsi, 400, "only a WebSocket upgrade on /v1/ws is served\n");
	int n = lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
	if (n <= 0 || strcmp(uri, "/v1/ws") != 0)
		return reject_now(wsi, 404, "not found: the WebSocket is at /v1/ws\n");
	if (s->stopping)
		return reject_now(wsi, 503, "asp-agent is shutting down\n");
	if (!authorized(s, wsi))
		return reject_now(wsi, 401, "unauthorized: send Authorization: Bearer TOKEN\n");
	n = lws_hdr_copy(wsi, proto, sizeof proto, WSI_TOKEN_PROTOCOL);
	bool found = false;
	for (char *save = NULL, *t = n > 0 ? strtok_r(proto, ", \t", &save) : NULL; t && !found;
	     t = strtok_r(NULL, ", \t", &save))
		found = strcmp(t, "asp.v1") == 0;
	if (!found)
		return reject_now(wsi, 400,
		                  "the WebSocket needs the subprotocol asp.v1 "
		                  "(Sec-WebSocket-Protocol: asp.v1)\n");
	return 0;
}

/*
 * 431 for a connection whose headers overflowed (see awaiting), as lws is about to close
 * it: with our own status line, since lws has no request to answer. The rest of the
 * client's headers is not read.
 */
static void headers_too_large(struct lws *wsi)
{
	static const char msg[] =
	    "request headers too large: at most " MAX_HEADERS_STR " bytes of them\n";
	uint8_t buf[LWS_PRE + 256];
	headers_overflowed = false;
	awaiting_remove(wsi);
	int n = snprintf((char *)buf + LWS_PRE, sizeof buf - LWS_PRE,
	                 "HTTP/1.1 431 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n%s",
	                 reason_phrase(431), ctype_text, sizeof msg - 1, msg);
	char peer[64] = "";
	lws_get_peer_simple(wsi, peer, sizeof peer);
	asp_server_log("asp-agent: %s: request headers larger than %d bytes; answered 431",
	               peer[0] ? peer : "a client", MAX_HEADERS);
	if (n > 0 && (size_t)n < sizeof buf - LWS_PRE)
		(void)lws_write(wsi, buf + LWS_PRE, (size_t)n, LWS_WRITE_HTTP);
}

/* ---- HTTP requests ---------------------------------------------------------------- */

static int answer_allow(srv_conn *c, int status, const char *msg, bool conn_close,
                        const char *allow)
{
	srv_out head = {
	    .status = status, .ctype = ctype_text, .allow = allow, .conn_close = conn_close};
	c->hs = c->hs == HS_BODY ? HS_DISCARD : HS_ANSWER;
	return srv_respond(c, &head, msg, strlen(msg)) ? 0 : -1;
}

static int answer(srv_conn *c, int status, const char *msg, bool conn_close)
{
	return answer_allow(c, status, msg, conn_close, NULL);
}

/*
 * HTTP/1.1 pipelining: lws parses what follows a request as soon as it has read it, even
 * while the request is unanswered, and reads the client's EOF as "close now". So a
 * connection is not read from the end of a request (its headers, or its body) until its
 * answer went; lws keeps the bytes after it and parses them once reading resumes.
 */
static void pause_rx(struct lws *wsi, http_pss *pss, bool pause)
{
	if (pss->paused != pause) {
		pss->paused = pause;
		lws_rx_flow_control(wsi, !pause);
	}
}

/* LWS_CALLBACK_HTTP: routes a request once its headers are in. */
static int on_request(srv *s, struct lws *wsi, http_pss *pss, const char *uri)
{
	if (pss->c) { /* cannot happen while reading is paused (pause_rx); be safe anyway */
		srv_conn_detach(pss->c);
		pss->c = NULL;
		return -1;
	}
	srv_conn *c = srv_conn_new(s, wsi, false);
	if (!c)
		return -1;
	pss->c = c;
	char *up;
	int ul;
	int method = lws_http_get_uri_and_method(wsi, &up, &ul);
	bool post = method == LWSHUMETH_POST;
	/* A body we will not read is discarded by lws after the answer (or, when the client
	 * waits for 100-continue, never comes: then the connection closes). */
	bool body = post || lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
	if (!body) /* the request ends with its headers; with a body, at BODY_COMPLETION */
		pause_rx(wsi, pss, true);
	bool expect = body && has_expect_continue(wsi);
	if (body) /* answered early, its body callbacks are then ignored (HS_DISCARD) */
		c->hs = HS_BODY;
	if (s->stopping)
		return answer(c, 503, "asp-agent is shutting down\n", true);
	if (strcmp(uri, "/v1/health") == 0) {
		if (method != LWSHUMETH_GET)
			return answer_allow(c, 405, "method not allowed: GET /v1/health\n", expect,
			                    "GET");
		return answer(c, 200, "ok\n", expect);
	}
	if (strcmp(uri, "/v1/ws") == 0)
		return answer(c, 426,
		              "upgrade required: /v1/ws is a WebSocket (subprotocol "
		              "asp.v1)\n",
		              expect);
	if (strcmp(uri, "/v1/rpc") != 0)
		return answer(c, 404,
		              "not found: ASP serves POST /v1/rpc, GET /v1/ws and GET "
		              "/v1/health\n",
		              expect);
	if (!post)
		return answer_allow(c, 405, "method not allowed: POST /v1/rpc\n", expect, "POST");
	if (!authorized(s, wsi))
		return answer(c, 401, "unauthorized: send Authorization: Bearer TOKEN\n", expect);
	char cl[32];
	if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
		return answer(c, 411, "length required: send the body with a Content-Length\n",
		              expect);
	int n = lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH);
	/* Digits only (RFC 9110 §8.6): strtoull alone would take "+5", " 5" or "-5". */
	bool digits = n > 0 && n <= 19;
	for (int i = 0; i < n && digits; i++)
		digits = cl[i] >= '0' && cl[i] <= '9';
	if (!digits)
		return answer(c, 400, "bad Content-Length: digits only\n", true);
	unsigned long long len = strtoull(cl, NULL, 10);
	if (len > s->max_message) {
		char msg[160];
		snprintf(msg, sizeof msg, "too_large: the body is %llu bytes, max_message is %zu\n",
		         len, s->max_message);
		return answer(c, 413, msg, expect);
	}
	if (len == 0)
		return answer(c, 400,
		              "protocol_error: the body is empty; send one msgpack request "
		              "[0, id, method, params]\n",
		              false);
	c->rx = malloc(len);
	if (!c->rx)
		return answer(c, 500, "internal: out of memory\n", true);
	c->rx_cap = len;
	c->hs = HS_BODY;
	if (expect) { /* the client waits for this before it sends the body */
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		srv_out head = {.status = 100};
		if (!srv_respond(c, &head, cont, sizeof cont - 1))
			return -1;
	}
	return 0;
}

/*
 * Body bytes for a request being served or answered: only if lws read past a request
 * despite pause_rx. The connection closes rather than mixing two requests.
 */
static bool pipelined(const srv_conn *c)
{
	return c && (c->hs == HS_BUSY || c->hs == HS_ANSWER);
}

static int on_body(struct lws *wsi, srv_conn *c, const void *in, size_t len)
{
	if (pipelined(c))
		return -1;
	if (!c || c->hs != HS_BODY)
		return 0; /* answered already: lws discards the rest */
	/*
	 * lws 4.1 mis-reads a POST it parses from its own buffer (pipelined behind another
	 * request): it hands over the request's header bytes as its body, then loops on the
	 * rest until the connection closes. No msgpack request starts with "POST " (0x94
	 * does), so that is how it shows: refused, clearly, and the connection closes.
	 */
	if (c->rx_len == 0 && len >= 5 && memcmp(in, "POST ", 5) == 0) {
		lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
		asp_server_log(
		    "asp-agent: %s: a POST pipelined behind another request; answered 400",
		    c->peer);
		reject_now(wsi, 400,
		           "pipelined POST not served: send a POST after the answer to the "
		           "previous request (or on another connection)\n");
		return -1;
	}
	if (len > c->rx_cap - c->rx_len)
		return -1; /* lws never gives more than Content-Length */
	memcpy(c->rx + c->rx_len, in, len);
	c->rx_len += len;
	return 0;
}

static int on_body_done(struct lws *wsi, http_pss *pss)
{
	srv_conn *c = pss->c;
	if (pipelined(c))
		return -1; /* see pipelined(): lws 4.1 would loop on a body from its buffer */
	if (c)             /* the request is read: what follows waits for its answer */
		pause_rx(wsi, pss, true);
	if (!c || c->hs != HS_BODY)
		return 0;
	c->hs = HS_BUSY;
	uint8_t *msg = c->rx;
	size_t len = c->rx_len;
	c->rx = NULL;
	c->rx_len = c->rx_cap = 0;
	/* A small request is decoded here to see whether it can be served here. */
	asp_request *r = NULL;
	if (len <= SRV_INLINE_MAX) {
		asp_error err;
		asp_error_clear(&err);
		bool proc = len <= PIPE_BUF && memmem(msg, len, "/proc", 5); /* see srv_exec.c */
		asp_request_new(msg, len, &r, NULL, &err); /* takes msg; r NULL: refused */
		msg = NULL;
		if (r)
			asp_request_decode(r, NULL);
		if (r && srv_exec_ok(c, r, len, proc)) {
			if (!srv_exec_start(c, r))
				return answer(c, 500, "internal: out of memory\n", true);
			return 0;
		}
		if (r && srv_inline_ok(c->s, r)) {
			if (!srv_serve_inline(c, r))
				return answer(c, 500, "internal: out of memory\n", true);
			/* written now, from this callback, as a form handler answers in it: no
			 * wake-up of this thread (an eventfd write, a poll and a read) */
			srv_drain_ready(c->s);
			return 0;
		}
		if (!r) { /* as a worker would answer it */
			char text[ASP_ERROR_MESSAGE_MAX + 32];
			snprintf(text, sizeof text, "protocol_error: %s\n", err.message);
			return answer(c, 400, text, false);
		}
	}
	if (!srv_submit(c, msg, len, r))
		return answer(c, 500, "internal: out of memory\n", true);
	return 0;
}

/* HTTP_WRITEABLE: writes one chunk of the queued answer. */
static int on_http_writeable(srv *s, struct lws *wsi, http_pss *pss)
{
	srv_conn *c = pss->c;
	if (c && srv_close_code(c))
		return -1; /* no answer could be made */
	srv_out *o = c ? srv_out_peek(c) : NULL;
	if (!o)
		return 0;
	uint8_t *start = s->stage + LWS_PRE, *p = start, *end = start + SRV_HEADROOM + SRV_CHUNK;
	if (o->status == 100) { /* an interim line, not the answer */
		size_t n = o->len;
		memcpy(p, o->data, n);
		srv_out_pop(c);
		if (lws_write(wsi, start, n, LWS_WRITE_HTTP) != (int)n)
			return -1;
		if (srv_out_peek(c))
			lws_callback_on_writable(wsi);
		return 0;
	}
	size_t body = o->len - o->off;
	if (o->started && o->sent == body)
		goto written; /* all of it is with lws already (hand_over_rest) */
	if (!o->started) {
		uint8_t *hend = start + SRV_HEADROOM;
		if (lws_add_http_common_headers(wsi, (unsigned)o->status, o->ctype, body, &p,
		                                hend) ||
		    (o->status == 401 &&
		     lws_add_http_header_by_name(wsi, (const uint8_t *)"www-authenticate:",
		                                 (const uint8_t *)"Bearer realm=\"asp\"", 18, &p,
		                                 hend)) ||
		    (o->allow && lws_add_http_header_by_name(
		                     wsi, (const uint8_t *)"allow:", (const uint8_t *)o->allow,
		                     (int)strlen(o->allow), &p, hend)) ||
		    (o->conn_close &&
		     lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION,
		                                  (const uint8_t *)"close", 5, &p, hend)) ||
		    lws_finalize_http_header(wsi, &p, hend))
			return -1;
		o->started = true;
	}
	size_t take = body - o->sent;
	if (take > (size_t)(end - p))
		take = (size_t)(end - p);
	memcpy(p, o->data + o->off + o->sent, take);
	p += take;
	o->sent += take;
	bool last = o->sent == body;
	int n = (int)(p - start);
	if (lws_write(wsi, start, (size_t)n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != n)
		return -1;
	if (!last) {
		lws_callback_on_writable(wsi);
		return 0;
	}
	/*
	 * Over even if lws still holds part of it: lws defers the end of the transaction
	 * until that went (and sends it before any close), and the next request cannot come
	 * before the client has the whole answer.
	 */
written:;
	bool close_after = o->conn_close;
	srv_out_pop(c);
	pss->c = NULL;
	srv_conn_detach(c); /* the request is over; the connection may carry another */
	if (close_after)
		return -1;
	/* Before the transaction ends: that rebinds the protocol, freeing pss. */
	pause_rx(wsi, pss, false); /* the next request, pipelined or not */
	awaiting_add(wsi);         /* first: lws may parse a pipelined request in there */
	if (lws_http_transaction_completed(wsi)) {
		awaiting_remove(wsi);
		return -1;
	}
	return 0;
}

/* The unsent rest of `c`'s answer given to lws in one write (it keeps what cannot go). */
static int hand_over_rest(struct lws *wsi, srv_conn *c)
{
	srv_out *o = srv_out_peek(c);
	if (!o || o->status == 100 || !o->started || o->sent == o->len - o->off)
		return 0;
	size_t rest = o->len - o->off - o->sent;
	uint8_t *buf = malloc(LWS_PRE + rest);
	if (!buf)
		return -1;
	memcpy(buf + LWS_PRE, o->data + o->off + o->sent, rest);
	int n = lws_write(wsi, buf + LWS_PRE, rest, LWS_WRITE_HTTP_FINAL);
	free(buf);
	if (n != (int)rest)
		return -1;
	o->sent += rest;
	return 0;
}

/*
 * While reading is paused (pause_rx) lws gives an HTTP connection no WRITEABLE: its h1
 * role ignores POLLOUT on a flow-controlled connection. So the answer is written from
 * here, on the service thread, as far as the socket takes it; only a socket that is
 * full resumes reading and leaves the rest to WRITEABLE.
 */
static void http_kick(srv_conn *c)
{
	struct lws *wsi = c->wsi;
	http_pss *pss = lws_wsi_user(wsi);
	if (!pss || pss->c != c || !pss->paused) {
		lws_callback_on_writable(wsi);
		return;
	}
	/*
	 * The first write needs no check that the socket has room (a poll): lws holds nothing
	 * of an earlier answer (the transaction ends only once that went) and keeps what the
	 * socket does not take of this one.
	 */
	bool first = true;
	while (pss && pss->c == c && pss->paused && srv_out_peek(c) &&
	       (first || !lws_send_pipe_choked(wsi))) {
		first = false;
		if (on_http_writeable(c->s, wsi, pss) < 0) {
			lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			return;
		}
		pss = lws_wsi_user(wsi); /* a finished transaction gets a new one */
	}
	if (pss && pss->c == c && pss->paused && (srv_out_peek(c) || srv_close_code(c))) {
		/*
		 * The socket is full: lws sends the rest only on POLLOUT, which it sees only
		 * while reading, and reading may meet the client's EOF, on which lws closes at
		 * once, sending what it holds first. So it is handed the whole rest now.
		 */
		if (hand_over_rest(wsi, c) < 0) {
			lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			return;
		}
		srv_out *o = srv_out_peek(c);
		if (o && o->started && o->sent == o->len - o->off) { /* all with lws: ends it */
			if (on_http_writeable(c->s, wsi, pss) < 0)
				lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			return;
		}
		pause_rx(wsi, pss, false);
		lws_callback_on_writable(wsi);
	}
}

/* ---- waking up and shutting down -------------------------------------------------- */

/* Leaves the service loop: lws_service polls after running timers, so wake that poll. */
static void finish(srv *s, bool forced)
{
	s->forced = forced;
	s->finished = true;
	lws_cancel_service(s->ctx);
}

static void tick(lws_sorted_usec_list_t *sul)
{
	srv *s = lws_container_of(sul, srv, tick);
	int64_t now = now_ms();
	if (!s->stopping) {
		s->stopping = true;
		s->drain_deadline_ms = now + DRAIN_MS;
		/*
		 * New requests are answered 503 from now on. (lws_context_deprecate would close
		 * the listening socket, but it also raises SIGINT once the context is empty.)
		 */
		asp_server_log(
		    "asp-agent: stopping: finishing the answers in flight, refusing new work");
	}
	bool idle = srv_idle(s);
	if (atomic_load(&s->signals) >= 2 || (!idle && now > s->drain_deadline_ms)) {
		if (!idle)
			asp_server_log(
			    "asp-agent: stopping without waiting for the requests still running");
		finish(s, !idle);
		return;
	}
	if (idle) {
		/* Every answer went: the WebSockets are told goodbye (1001), then we go. */
		for (srv_conn *c = s->live; c; c = c->next)
			if (c->ws && !c->going_away) {
				c->going_away = true;
				lws_callback_on_writable(c->wsi);
			}
		if (!s->goodbye_deadline_ms)
			s->goodbye_deadline_ms = now + GOODBYE_MS;
		if (!s->live || now > s->goodbye_deadline_ms) {
			finish(s, false);
			return;
		}
	}
	lws_sul_schedule(s->ctx, 0, &s->tick, tick, TICK_US);
}

static void on_wake(srv *s)
{
	srv_drain_ready(s);
	if (!s->stopping && atomic_load(&s->signals) > 0)
		lws_sul_schedule(s->ctx, 0, &s->tick, tick, 1);
}

/* The signal thread: SIGTERM/SIGINT are blocked everywhere else and arrive here. */
static void *sig_main(void *arg)
{
	srv *s = arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	for (;;) {
		int sig;
		if (sigwait(&set, &sig) != 0)
			continue;
		if (atomic_load(&s->quit_sig_thread))
			return NULL;
		atomic_fetch_add(&s->signals, 1);
		srv_wake(s);
	}
}

/* ---- the protocols ---------------------------------------------------------------- */

static int http_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	srv *s = srv_of(wsi);
	http_pss *pss = user;
	switch (reason) {
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED: on_wake(s); return 0;
	case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: awaiting_add(wsi); break;
	case LWS_CALLBACK_WSI_DESTROY: awaiting_remove(wsi); break;
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
		awaiting_remove(wsi);
		return confirm_upgrade(s, wsi, in);
	case LWS_CALLBACK_HTTP: awaiting_remove(wsi); return on_request(s, wsi, pss, in);
	case LWS_CALLBACK_HTTP_BODY: return on_body(wsi, pss->c, in, len);
	case LWS_CALLBACK_HTTP_BODY_COMPLETION: return on_body_done(wsi, pss);
	case LWS_CALLBACK_HTTP_WRITEABLE: return on_http_writeable(s, wsi, pss);
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
	case LWS_CALLBACK_CLOSED_HTTP:
		/*
		 * The overflowing connection closes right after lws's line, before lws serves
		 * any other: its DROP_PROTOCOL (if a transaction bound it) comes before lws
		 * shuts the socket, its CLOSED_HTTP after, and ends the chance. (DROP_PROTOCOL
		 * comes too as a transaction ends; the connection stays awaiting then.)
		 */
		if (headers_overflowed && reason == LWS_CALLBACK_HTTP_DROP_PROTOCOL &&
		    is_awaiting(wsi))
			headers_too_large(wsi);
		if (reason == LWS_CALLBACK_CLOSED_HTTP) {
			headers_overflowed = false;
			awaiting_remove(wsi);
		}
		if (pss && pss->c) {
			srv_conn_detach(pss->c);
			pss->c = NULL;
		}
		break;
	default: break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
    {"http", http_cb, sizeof(http_pss), 0, 0, NULL, 0},
    {"asp.v1", srv_ws_callback, sizeof(void *), 128 * 1024, 0, NULL, SRV_CHUNK + 64},
    {"asp-exec", srv_exec_callback, 0, 0, 0, NULL, 0}, /* srv_exec.c's epoll set */
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- setting up ------------------------------------------------------------------- */

static void on_sigpipe(int sig)
{
	(void)sig;
}

/* lws sets SIGPIPE to SIG_IGN, which every command we run would inherit: undo that. */
static void restore_sigpipe(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigpipe;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);
}

static int setup(srv *s, const asp_http_listen_opts *o, const http_addr *a)
{
	char numeric[64], why[300];
	bool loopback, v6;
	if (http_addr_resolve(a, numeric, sizeof numeric, &loopback, &v6, why, sizeof why) < 0) {
		asp_server_log("asp-agent: --listen %s: %s", o->addr, why);
		return 2;
	}
	if (!loopback && !s->token) {
		asp_server_log(
		    "asp-agent: refusing to listen on %s without a token: anyone who reaches it "
		    "could run commands here; give --token-file FILE or set ASP_TOKEN (or listen "
		    "on 127.0.0.1)",
		    o->addr);
		return 2;
	}
	if (!o->tls_cert != !o->tls_key) {
		asp_server_log("asp-agent: --tls-cert and --tls-key go together");
		return 2;
	}
	struct lws_context_creation_info ci;
	memset(&ci, 0, sizeof ci);
	ci.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
	if (o->tls_cert)
		ci.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	ci.user = s;
	ci.pt_serv_buf_size = SRV_CHUNK;
	ci.max_http_header_data = MAX_HEADERS;
	ci.timeout_secs = 30;
	lws_set_log_level(LLL_ERR | LLL_WARN, lws_emit);
	s->ctx = lws_create_context(&ci);
	restore_sigpipe();
	if (!s->ctx) {
		asp_server_log("asp-agent: cannot create the libwebsockets context");
		return 1;
	}
	struct lws_context_creation_info vi;
	memset(&vi, 0, sizeof vi);
	vi.protocols = protocols;
	vi.vhost_name = "asp";
	vi.keepalive_timeout = 60;
	vi.timeout_secs = 30;
	vi.options = LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
	if (a->unix_sock) {
		vi.options |= LWS_SERVER_OPTION_UNIX_SOCK;
		vi.iface = a->path;
		unlink(a->path); /* a stale socket from a previous run would fail the bind */
	} else {
		vi.iface = numeric[0] ? numeric : NULL;
		vi.port = a->port;
		if (!v6 && numeric[0])
			vi.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
	}
	if (o->tls_cert) {
		vi.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		vi.ssl_cert_filepath = o->tls_cert;
		vi.ssl_private_key_filepath = o->tls_key;
		vi.alpn = "http/1.1"; /* no h2: one request per connection at a time is the model */
	}
	/* The socket file of unix: is for this user only (no token is needed there). */
	mode_t old_umask = a->unix_sock ? umask(0077) : 0;
	struct lws_vhost *vh = lws_create_vhost(s->ctx, &vi);
	if (a->unix_sock)
		umask(old_umask);
	restore_sigpipe();
	if (!vh) {
		asp_server_log(
		    "asp-agent: cannot listen on %s (in use? a bad TLS certificate or key?)",
		    o->addr);
		return 1;
	}
	srv_exec_init(s, vh); /* without it, every exec goes to a worker */
	const char *scheme = o->tls_cert ? "https" : "http";
	if (a->unix_sock)
		snprintf(s->url, sizeof s->url, "%s+unix:%s", scheme, a->path);
	else if (v6 || (numeric[0] && strchr(numeric, ':')))
		snprintf(s->url, sizeof s->url, "%s://[%s]:%d", scheme,
		         numeric[0] ? numeric : "::", lws_get_vhost_listen_port(vh));
	else
		snprintf(s->url, sizeof s->url, "%s://%s:%d", scheme,
		         numeric[0] ? numeric : "0.0.0.0", lws_get_vhost_listen_port(vh));
	return 0;
}

/* Blocks SIGTERM and SIGINT in this thread and every thread it starts later. */
static void block_stop_signals(sigset_t *old)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, old);
}

int asp_http_listen(const asp_http_listen_opts *o)
{
	http_addr a;
	char why[400];
	if (http_addr_parse_listen(o->addr, &a, why, sizeof why) < 0) {
		asp_server_log("asp-agent: --listen %s", why);
		return 2;
	}
	srv *s = calloc(1, sizeof *s);
	if (!s || srv_work_init(s) < 0) {
		asp_server_log("asp-agent: out of memory");
		free(s);
		return 1;
	}
	s->exec_ep = -1;
	s->http_kick = http_kick;
	pthread_mutex_init(&s->ctx_mu, NULL);
	atomic_init(&s->signals, 0);
	atomic_init(&s->quit_sig_thread, false);
	s->max_message = o->max_message ? o->max_message : ASP_MAX_MESSAGE_DEFAULT;
	srv_inline_init(s);
	s->stage = malloc(LWS_PRE + SRV_HEADROOM + SRV_CHUNK);
	char *token = NULL;
	int rc = 0;
	if (http_token_load(o->token_file, &token, why, sizeof why) < 0) {
		asp_server_log("asp-agent: %s", why);
		rc = 2;
	}
	s->token = token;
	sigset_t old_mask;
	block_stop_signals(&old_mask);
	s->backend = rc ? NULL : asp_local_new(s->max_message);
	if (!rc && (!s->backend || !s->stage)) {
		asp_server_log("asp-agent: out of memory");
		rc = 1;
	}
	if (!rc)
		rc = srv_backend_init(s);
	if (!rc)
		rc = setup(s, o, &a);
	if (!rc && pthread_create(&s->sig_thread, NULL, sig_main, s) != 0) {
		asp_server_log("asp-agent: cannot start the signal thread");
		rc = 1;
	}
	if (!rc) {
		s->sig_thread_started = true;
		asp_server_log("asp-agent: listening on %s%s", s->url,
		               s->token ? " (token required)" : "");
		while (!s->finished && lws_service(s->ctx, 0) >= 0)
			headers_overflowed = false; /* its connection has closed by now */
		lws_sul_cancel(&s->tick);
	}
	if (s->ctx) {
		struct lws_context *ctx = s->ctx;
		pthread_mutex_lock(&s->ctx_mu);
		s->ctx = NULL; /* workers still running (forced) must not wake a freed context */
		pthread_mutex_unlock(&s->ctx_mu);
		lws_context_destroy(ctx); /* closes every connection: their bindings go */
		srv_exec_stop(s);         /* the execs the service thread ran: killed, reaped */
		while (s->live)           /* any lws closed without telling us */
			srv_conn_detach(s->live);
		free(awaiting);
		awaiting = NULL;
		n_awaiting = cap_awaiting = 0;
	}
	if (a.unix_sock && !rc)
		unlink(a.path);
	if (s->sig_thread_started) {
		atomic_store(&s->quit_sig_thread, true);
		pthread_kill(s->sig_thread, SIGTERM); /* blocked, so sigwait takes it */
		pthread_join(s->sig_thread, NULL);
	}
	/*
	 * A worker's request still runs: its thread keeps s; the process exits anyway. The
	 * execs the service thread ran are gone by now, so with none in a worker we free all.
	 */
	if (s->forced && srv_workers_busy(s))
		return 1;
	if (s->forced)
		rc = 1;
	srv_work_stop(s);
	if (s->backend && !srv_backend_free(s)) {
		asp_server_log(
		    "asp-agent: a client stopped reading a process's output; exiting anyway");
		return rc ? rc : 1;
	}
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	pthread_mutex_destroy(&s->ctx_mu);
	free(token);
	free(s->stage);
	srv_inline_free(s);
	free(s);
	return rc;
}
