/*
 * The WebSocket frame channel. Each channel has its own lws context and service thread
 * (one connection each, so nothing is shared with other channels). Senders queue a copy
 * of the message and wake the service thread with lws_cancel_service, the only lws call
 * made off it; the service thread writes one chunk per WRITEABLE and reassembles
 * incoming messages (capped at the reader's max) into a queue recv() takes from.
 */
#include "ws_client.h"

#include <libwebsockets.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* Bytes per lws_write (a fragment of a larger message). */
#define CHUNK (256 * 1024)
/* Queued outgoing bytes above which send() waits for the socket. */
#define TX_HIGH (8u * 1024 * 1024)
/*
 * Received bytes not yet taken by recv() above which the socket is not read (resumed
 * below RX_LOW): a slow reader (a slow notification callback) holds the responder back,
 * as a full pipe does over stdio, instead of growing this queue.
 */
#define RX_HIGH (256 * 1024)
#define RX_LOW  (64 * 1024)
/*
 * The socket's receive buffer, fixed: Linux would grow it up to tcp_rmem's maximum (32
 * MiB here), which a slow reader fills with notifications that an answer then waits
 * behind (as over stdio, about 1 MiB in all may be ahead of it). The kernel doubles the
 * value. The cost is bulk over long round trips (~30 MB/s at 20 ms): POST has no limit.
 */
#define SOCK_RCVBUF (512 * 1024)
/* After close(): how long the connection gets to send its close frame. */
#define CLOSE_GRACE_US (300 * 1000)
/* Idle keepalive: a ping after this long, and the connection given up after that. */
#define PING_SECS   30
#define HANGUP_SECS 75

enum { CONNECTING, OPEN, DEAD };

typedef struct ws_msg {
	struct ws_msg *next;
	uint8_t *buf; /* tx: LWS_PRE bytes, then the message; rx: the message */
	size_t len, sent;
} ws_msg;

typedef struct ws_chan {
	pthread_mutex_t mu;      /* everything up to "service thread only" */
	pthread_cond_t cv;       /* state, rx queue, tx room */
	struct lws_context *ctx; /* NULL once the service thread destroyed it */
	int state;
	bool closing; /* close() was called */
	asp_error death;
	ws_msg *tx_head, *tx_tail;
	size_t tx_bytes;
	ws_msg *rx_head, *rx_tail;
	size_t rx_bytes;
	atomic_size_t max; /* the reader's max_message */

	/* service thread only */
	pthread_t thread;
	bool thread_started;
	struct lws *wsi;
	bool done; /* leave the service loop */
	bool rx_paused;
	bool close_scheduled;
	lws_sorted_usec_list_t grace;
	uint8_t *asm_buf;
	size_t asm_len, asm_cap;
	bool asm_text;
	int peer_code;
	char peer_reason[124];

	/* copies of the target */
	char *url, *address, *host_header, *path, *auth, *ca_file, *hint;
	http_headers headers; /* http.headers, sent with the upgrade */
	int port;
	bool tls;
	lws_retry_bo_t retry;
} ws_chan;

/* ---- helpers ---------------------------------------------------------------------- */

static void msg_free(ws_msg *m)
{
	if (m) {
		free(m->buf);
		free(m);
	}
}

static struct timespec deadline_in(unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

/* Under mu. The first death wins; later ones keep its reason. */
static void die_locked(ws_chan *ch, const asp_error *why)
{
	if (ch->state == DEAD)
		return;
	ch->state = DEAD;
	ch->death = *why;
	pthread_cond_broadcast(&ch->cv);
}

static void die(ws_chan *ch, const asp_error *why)
{
	pthread_mutex_lock(&ch->mu);
	die_locked(ch, why);
	pthread_mutex_unlock(&ch->mu);
}

/* ---- the service thread: callbacks ------------------------------------------------ */

/* Why the connection could not be made, for a person. */
static void connect_failed(ws_chan *ch, struct lws *wsi, const char *in, size_t len)
{
	asp_error e;
	char reason[256];
	snprintf(reason, sizeof reason, "%.*s", in ? (int)len : 0, in ? in : "");
	if (!reason[0])
		strcpy(reason, "connection failed");
	unsigned status = wsi ? lws_http_client_http_response(wsi) : 0;
	if (status == 401 || strcasestr(reason, "unauthorized"))
		asp_error_set(
		    &e, ASP_E_UNAUTHORIZED, NULL,
		    "%s answered 401 Unauthorized: the bearer token is missing or wrong%s%s",
		    ch->url, ch->hint ? ch->hint : "", ch->headers.hint);
	else if (status == 403 || strcasestr(reason, "forbidden"))
		asp_error_set(&e, ASP_E_UNAUTHORIZED, NULL,
		              "%s answered 403 Forbidden to the WebSocket upgrade: something in "
		              "front of asp-agent --listen refused it%s",
		              ch->url, ch->headers.hint);
	else if (status && status != 101)
		asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL,
		              "%s answered HTTP %u to the WebSocket upgrade, not 101; is it "
		              "asp-agent --listen?",
		              ch->url, status);
	else if (strcasestr(reason, "tls") || strcasestr(reason, "ssl") ||
	         strcasestr(reason, "cert"))
		asp_error_set(
		    &e, ASP_E_TRANSPORT_ERROR, NULL,
		    "TLS with %s failed: %s; is the server's certificate signed by %s, and "
		    "issued for this host name?",
		    ch->url, reason, ch->ca_file ? ch->ca_file : "a CA this system trusts");
	else
		asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL,
		              "cannot connect to %s: %s; is asp-agent --listen running there?",
		              ch->url, reason);
	die(ch, &e);
}

/* The connection ended after it was up. */
static void closed(ws_chan *ch)
{
	asp_error e;
	if (ch->peer_code == LWS_CLOSE_STATUS_GOINGAWAY)
		asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL,
		              "%s closed the WebSocket: going away (the listener is shutting down)",
		              ch->url);
	else if (ch->peer_code)
		asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL,
		              "%s closed the WebSocket (code %d%s%s)", ch->url, ch->peer_code,
		              ch->peer_reason[0] ? ": " : "", ch->peer_reason);
	else
		asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL,
		              "the connection to %s was lost (did the listener stop?)", ch->url);
	die(ch, &e);
}

static void grace_over(lws_sorted_usec_list_t *sul)
{
	ws_chan *ch = lws_container_of(sul, ws_chan, grace);
	ch->done = true;
	if (ch->wsi) /* lws_service polls after running timers: wake that poll */
		lws_cancel_service(lws_get_context(ch->wsi));
}

/* EVENT_WAIT_CANCELLED: a sender queued something, or close() was called. */
static void on_wake(ws_chan *ch)
{
	pthread_mutex_lock(&ch->mu);
	bool closing = ch->closing, pending = ch->tx_head != NULL;
	bool resume = ch->rx_paused && ch->rx_bytes < RX_LOW;
	pthread_mutex_unlock(&ch->mu);
	if (resume && ch->wsi) {
		ch->rx_paused = false;
		lws_rx_flow_control(ch->wsi, 1);
	}
	if (closing && !ch->close_scheduled) {
		ch->close_scheduled = true;
		if (!ch->wsi) {
			ch->done = true;
			return;
		}
		lws_sul_schedule(lws_get_context(ch->wsi), 0, &ch->grace, grace_over,
		                 CLOSE_GRACE_US);
	}
	if (ch->wsi && (pending || closing))
		lws_callback_on_writable(ch->wsi);
}

static int on_receive(ws_chan *ch, struct lws *wsi, const void *in, size_t len)
{
	asp_error e;
	if (ch->asm_len == 0 && !ch->asm_buf)
		ch->asm_text = !lws_frame_is_binary(wsi);
	size_t max = atomic_load_explicit(&ch->max, memory_order_relaxed);
	size_t rest = lws_remaining_packet_payload(wsi);
	if (ch->asm_text) {
		asp_error_set(&e, ASP_E_PROTOCOL_ERROR, NULL,
		              "%s sent a text WebSocket message; ASP messages are binary", ch->url);
		die(ch, &e);
		return -1;
	}
	if (len > max - ch->asm_len || rest > max - ch->asm_len - len) {
		asp_error_set(&e, ASP_E_PROTOCOL_ERROR, NULL,
		              "%s sent a message larger than max_message (%zu)", ch->url, max);
		die(ch, &e);
		return -1;
	}
	size_t need = ch->asm_len + len + rest;
	if (need > ch->asm_cap || !ch->asm_buf) {
		size_t cap = ch->asm_cap * 2 > need ? ch->asm_cap * 2 : need;
		if (cap < 4096)
			cap = 4096;
		if (cap > max && max >= need)
			cap = max;
		uint8_t *b = realloc(ch->asm_buf, cap);
		if (!b) {
			asp_error_set(&e, ASP_E_INTERNAL, NULL, "out of memory for a message");
			die(ch, &e);
			return -1;
		}
		ch->asm_buf = b;
		ch->asm_cap = cap;
	}
	if (len)
		memcpy(ch->asm_buf + ch->asm_len, in, len);
	ch->asm_len += len;
	if (!lws_is_final_fragment(wsi) || rest)
		return 0;
	ws_msg *m = calloc(1, sizeof *m);
	if (!m) {
		asp_error_set(&e, ASP_E_INTERNAL, NULL, "out of memory for a message");
		die(ch, &e);
		return -1;
	}
	m->buf = ch->asm_buf;
	m->len = ch->asm_len;
	ch->asm_buf = NULL;
	ch->asm_len = ch->asm_cap = 0;
	pthread_mutex_lock(&ch->mu);
	if (ch->rx_tail)
		ch->rx_tail->next = m;
	else
		ch->rx_head = m;
	ch->rx_tail = m;
	ch->rx_bytes += m->len;
	bool full = ch->rx_bytes > RX_HIGH && !ch->rx_paused;
	if (full)
		ch->rx_paused = true; /* under mu: recv() sees it and wakes us to resume */
	pthread_cond_broadcast(&ch->cv);
	pthread_mutex_unlock(&ch->mu);
	if (full)
		lws_rx_flow_control(wsi, 0);
	return 0;
}

static int on_writeable(ws_chan *ch, struct lws *wsi)
{
	pthread_mutex_lock(&ch->mu);
	bool closing = ch->closing;
	ws_msg *m = ch->tx_head;
	pthread_mutex_unlock(&ch->mu);
	if (closing) {
		lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
		return -1;
	}
	if (!m)
		return 0;
	size_t take = m->len - m->sent;
	if (take > CHUNK)
		take = CHUNK;
	bool first = m->sent == 0, last = m->sent + take == m->len;
	int flags = first ? LWS_WRITE_BINARY : LWS_WRITE_CONTINUATION;
	if (!last)
		flags |= LWS_WRITE_NO_FIN;
	/*
	 * In place: lws puts the frame header in the LWS_PRE bytes before the chunk, which
	 * for a later fragment are bytes already sent (lws copies what the socket refuses).
	 */
	if (lws_write(wsi, m->buf + LWS_PRE + m->sent, take, (enum lws_write_protocol)flags) <
	    (int)take)
		return -1;
	m->sent += take;
	bool more = !last;
	if (last) {
		pthread_mutex_lock(&ch->mu);
		ch->tx_head = m->next;
		if (!ch->tx_head)
			ch->tx_tail = NULL;
		ch->tx_bytes -= m->len;
		more = ch->tx_head != NULL;
		pthread_cond_broadcast(&ch->cv);
		pthread_mutex_unlock(&ch->mu);
		msg_free(m);
	}
	if (more)
		lws_callback_on_writable(wsi);
	return 0;
}

/* http.headers into the upgrade request: lws wants "Name:" and the value apart. */
static int add_headers(ws_chan *ch, struct lws *wsi, unsigned char **p, unsigned char *end)
{
	for (size_t i = 0; i < ch->headers.count; i++) {
		const char *line = ch->headers.lines[i], *colon = strchr(line, ':');
		char name[256];
		if (!colon || (size_t)(colon - line) + 2 > sizeof name)
			return -1;
		memcpy(name, line, (size_t)(colon - line) + 1);
		name[colon - line + 1] = '\0';
		const char *value = colon + 1 + (colon[1] == ' ');
		if (lws_add_http_header_by_name(wsi, (const unsigned char *)name,
		                                (const unsigned char *)value, (int)strlen(value), p,
		                                end))
			return -1;
	}
	return 0;
}

static int ws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
	(void)user;
	ws_chan *ch = lws_context_user(lws_get_context(wsi));
	switch (reason) {
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED: on_wake(ch); return 0;
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = (unsigned char **)in, *end = *p + len;
		if (ch->auth && lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
		                                             (const unsigned char *)ch->auth,
		                                             (int)strlen(ch->auth), p, end))
			return -1;
		return add_headers(ch, wsi, p, end);
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED: {
		int rcv = SOCK_RCVBUF;
		setsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
		pthread_mutex_lock(&ch->mu);
		if (ch->state == CONNECTING)
			ch->state = OPEN;
		pthread_cond_broadcast(&ch->cv);
		bool pending = ch->tx_head != NULL || ch->closing;
		pthread_mutex_unlock(&ch->mu);
		if (pending)
			lws_callback_on_writable(wsi);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		connect_failed(ch, wsi, in, in ? strlen(in) : 0);
		ch->wsi = NULL;
		ch->done = true;
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE: return on_receive(ch, wsi, in, len);
	case LWS_CALLBACK_CLIENT_WRITEABLE: return on_writeable(ch, wsi);
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (in && len >= 2) {
			const uint8_t *b = in;
			ch->peer_code = b[0] << 8 | b[1];
			snprintf(ch->peer_reason, sizeof ch->peer_reason, "%.*s",
			         (int)(len - 2 < 120 ? len - 2 : 120), (const char *)b + 2);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		closed(ch);
		ch->wsi = NULL;
		ch->done = true;
		return 0;
	default: return 0;
	}
}

static const struct lws_protocols client_protocols[] = {
    {"asp.v1", ws_cb, 0, 128 * 1024, 0, NULL, CHUNK + 64},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *service_main(void *arg)
{
	ws_chan *ch = arg;
	while (!ch->done && lws_service(ch->ctx, 0) >= 0)
		;
	lws_sul_cancel(&ch->grace);
	pthread_mutex_lock(&ch->mu);
	struct lws_context *ctx = ch->ctx;
	ch->ctx = NULL; /* senders no longer wake it */
	asp_error e;
	asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL, "the connection to %s ended", ch->url);
	die_locked(ch, &e);
	pthread_mutex_unlock(&ch->mu);
	lws_context_destroy(ctx);
	return NULL;
}

/* ---- the channel ------------------------------------------------------------------ */

static asp_status dead_error(ws_chan *ch, asp_error *err)
{
	*err = ch->death;
	if (err->code == ASP_OK)
		asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "the connection was closed");
	return err->code;
}

static asp_status ch_send(void *base, const uint8_t *frame, size_t len, asp_error *err)
{
	ws_chan *ch = (ws_chan *)base;
	if (len < 4)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "a frame without its length");
	ws_msg *m = calloc(1, sizeof *m);
	uint8_t *b = malloc(LWS_PRE + len - 4);
	if (!m || !b) {
		free(m);
		free(b);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory for a message");
	}
	memcpy(b + LWS_PRE, frame + 4, len - 4);
	m->buf = b;
	m->len = len - 4;
	pthread_mutex_lock(&ch->mu);
	while (ch->state != DEAD && ch->tx_bytes > TX_HIGH) {
		struct timespec ts = deadline_in(1000); /* bounded: a lost wake-up costs 1 s */
		pthread_cond_timedwait(&ch->cv, &ch->mu, &ts);
	}
	if (ch->state == DEAD) {
		asp_status st = dead_error(ch, err);
		pthread_mutex_unlock(&ch->mu);
		msg_free(m);
		return st;
	}
	if (ch->tx_tail)
		ch->tx_tail->next = m;
	else
		ch->tx_head = m;
	ch->tx_tail = m;
	ch->tx_bytes += m->len;
	if (ch->ctx)
		lws_cancel_service(ch->ctx);
	pthread_mutex_unlock(&ch->mu);
	return ASP_OK;
}

static asp_status ch_recv(void *base, size_t max, uint8_t **msg, size_t *len, asp_error *err)
{
	ws_chan *ch = (ws_chan *)base;
	*msg = NULL;
	*len = 0;
	atomic_store_explicit(&ch->max, max, memory_order_relaxed);
	pthread_mutex_lock(&ch->mu);
	while (!ch->rx_head && ch->state != DEAD) {
		struct timespec ts = deadline_in(1000);
		pthread_cond_timedwait(&ch->cv, &ch->mu, &ts);
	}
	ws_msg *m = ch->rx_head;
	if (m && !ch->closing) {
		ch->rx_head = m->next;
		if (!ch->rx_head)
			ch->rx_tail = NULL;
		ch->rx_bytes -= m->len;
		if (ch->rx_paused && ch->rx_bytes < RX_LOW && ch->ctx)
			lws_cancel_service(ch->ctx); /* reading resumes */
		pthread_mutex_unlock(&ch->mu);
		if (m->len > max) { /* max dropped after the message was taken in */
			msg_free(m);
			return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
			                     "a message larger than max_message (%zu)", max);
		}
		*msg = m->buf;
		*len = m->len;
		if (!*msg) /* an empty message still gets a byte */
			*msg = malloc(1);
		free(m);
		return *msg ? ASP_OK : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	asp_status st = dead_error(ch, err);
	pthread_mutex_unlock(&ch->mu);
	return st;
}

static void ch_close(void *base)
{
	ws_chan *ch = (ws_chan *)base;
	asp_error e;
	asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL, "the connection was closed");
	pthread_mutex_lock(&ch->mu);
	ch->closing = true;
	die_locked(ch, &e);
	if (ch->ctx)
		lws_cancel_service(ch->ctx);
	pthread_mutex_unlock(&ch->mu);
}

static void ch_free(void *base)
{
	ws_chan *ch = (ws_chan *)base;
	ch_close(base);
	if (ch->thread_started)
		pthread_join(ch->thread, NULL);
	else if (ch->ctx)
		lws_context_destroy(ch->ctx);
	for (ws_msg *m = ch->tx_head, *n; m; m = n) {
		n = m->next;
		msg_free(m);
	}
	for (ws_msg *m = ch->rx_head, *n; m; m = n) {
		n = m->next;
		msg_free(m);
	}
	free(ch->asm_buf);
	pthread_cond_destroy(&ch->cv);
	pthread_mutex_destroy(&ch->mu);
	free(ch->url);
	free(ch->address);
	free(ch->host_header);
	free(ch->path);
	free(ch->auth);
	http_headers_free(&ch->headers);
	free(ch->ca_file);
	free(ch->hint);
	free(ch);
}

static const asp_channel_ops ws_channel_ops = {
    .send = ch_send,
    .recv = ch_recv,
    .explain = NULL, /* every error already names the URL */
    .close = ch_close,
    .free = ch_free,
};

/* ---- opening ---------------------------------------------------------------------- */

static bool dup_to(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return !src || *dst;
}

static struct lws_context *make_context(ws_chan *ch)
{
	struct lws_context_creation_info ci;
	memset(&ci, 0, sizeof ci);
	ci.port = CONTEXT_PORT_NO_LISTEN;
	ci.protocols = client_protocols;
	ci.user = ch;
	ci.fd_limit_per_thread = 8; /* one connection: no table sized by the fd limit */
	ci.pt_serv_buf_size = CHUNK;
	ci.timeout_secs = 20;
	if (ch->tls) {
		ci.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		ci.client_ssl_ca_filepath = ch->ca_file;
	}
	/* lws sets SIGPIPE to SIG_IGN, which is the application's business: put it back. */
	struct sigaction old;
	sigaction(SIGPIPE, NULL, &old);
	lws_set_log_level(0, NULL); /* a library does not write to the application's stderr */
	struct lws_context *ctx = lws_create_context(&ci);
	sigaction(SIGPIPE, &old, NULL);
	return ctx;
}

asp_status ws_channel_open(const ws_target *t, unsigned timeout_ms, asp_channel **out,
                           asp_error *err)
{
	*out = NULL;
	ws_chan *ch = calloc(1, sizeof *ch);
	if (!ch)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	pthread_mutex_init(&ch->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ch->cv, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&ch->max, (size_t)16 * 1024 * 1024);
	ch->port = t->port;
	ch->tls = t->tls;
	ch->retry.secs_since_valid_ping = PING_SECS;
	ch->retry.secs_since_valid_hangup = HANGUP_SECS;
	bool ok = dup_to(&ch->url, t->url) && dup_to(&ch->address, t->address) &&
	          dup_to(&ch->host_header, t->host_header) && dup_to(&ch->path, t->path) &&
	          dup_to(&ch->ca_file, t->ca_file) && dup_to(&ch->hint, t->hint);
	if (ok && t->headers)
		ok = http_headers_copy(t->headers, &ch->headers);
	if (ok && t->token) {
		size_t n = strlen(t->token) + 8;
		ch->auth = malloc(n);
		ok = ch->auth != NULL;
		if (ok)
			snprintf(ch->auth, n, "Bearer %s", t->token);
	}
	if (!ok) {
		ch_free(ch);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	ch->ctx = make_context(ch);
	if (!ch->ctx) {
		ch_free(ch);
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "cannot set up a WebSocket client for %s (TLS set-up failed? "
		                     "is %s a readable PEM file?)",
		                     t->url, t->ca_file ? t->ca_file : "the CA file");
	}
	struct lws_client_connect_info cc;
	memset(&cc, 0, sizeof cc);
	cc.context = ch->ctx;
	cc.address = ch->address;
	cc.port = ch->port;
	cc.ssl_connection = ch->tls ? LCCSCF_USE_SSL : 0;
	cc.path = ch->path;
	cc.host = ch->host_header;
	cc.origin = ch->host_header;
	cc.protocol = "asp.v1";
	cc.local_protocol_name = "asp.v1";
	cc.retry_and_idle_policy = &ch->retry;
	cc.alpn = "http/1.1";
	cc.pwsi = &ch->wsi;
	if (!lws_client_connect_via_info(&cc)) {
		asp_error e;
		pthread_mutex_lock(&ch->mu);
		if (ch->state != DEAD) {
			asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL,
			              "cannot connect to %s; is asp-agent --listen running there?",
			              t->url);
			die_locked(ch, &e);
		}
		asp_status st = dead_error(ch, err);
		pthread_mutex_unlock(&ch->mu);
		ch->wsi = NULL;
		ch_free(ch);
		return st;
	}
	/* The service thread takes no signals: they belong to the application's threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&ch->thread, NULL, service_main, ch);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		ch_free(ch);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "cannot start a thread: %s",
		                     strerror(e));
	}
	ch->thread_started = true;
	struct timespec dl = deadline_in(timeout_ms);
	pthread_mutex_lock(&ch->mu);
	bool timed_out = false;
	while (ch->state == CONNECTING && !timed_out)
		timed_out =
		    pthread_cond_timedwait(&ch->cv, &ch->mu, &dl) != 0 && ch->state == CONNECTING;
	asp_status st = ASP_OK;
	if (timed_out) {
		asp_error te;
		asp_error_set(&te, ASP_E_TRANSPORT_ERROR, NULL,
		              "%s did not complete the WebSocket handshake within %u ms", t->url,
		              timeout_ms);
		die_locked(ch, &te);
	}
	if (ch->state != OPEN)
		st = dead_error(ch, err);
	pthread_mutex_unlock(&ch->mu);
	if (st) {
		ch_free(ch);
		return st;
	}
	st = asp_channel_new(&ws_channel_ops, ch, out, err);
	if (st)
		ch_free(ch);
	return st;
}
