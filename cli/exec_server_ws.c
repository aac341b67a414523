/*
 * asp exec-server --listen ws://IP:PORT: one exec-server session per WebSocket connection,
 * one text message per JSON-RPC message. libwebsockets runs the sockets on this thread;
 * each connection's messages are handled in order on a thread of its own (a session makes
 * blocking calls on the client), and what a session sends is queued and written when the
 * socket is writable. Only loopback addresses: there is no authentication, and a request
 * with an Origin header (a web page) is refused.
 */
#include "exec_server.h"

#include <arpa/inet.h>
#include <libwebsockets.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Largest message taken, and most bytes waiting to be handled, per connection. */
#define WS_MSG_MAX   (96u << 20)
#define WS_QUEUE_MAX (192u << 20)

typedef struct ws_msg {
	struct ws_msg *next;
	size_t len;
	char data[];
} ws_msg;

typedef struct ws_conn {
	struct ws_conn *next; /* in the server's list, while the socket is open */
	struct lws *wsi;      /* NULL once closed */
	asp_client *client;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	ws_msg *in_head, *in_tail; /* received, not yet handled */
	size_t in_bytes;
	ws_msg *out_head, *out_tail; /* to send */
	bool closed;
	bool kill;    /* the session could not start: close the socket */
	cli_ws_rx rx; /* the message being received, in fragments */
} ws_conn;

static struct {
	struct lws_context *ctx;
	asp_client *client;  /* borrowed: every session's */
	const char *session; /* borrowed: --session */
	pthread_mutex_t mu;  /* guards conns */
	ws_conn *conns;
	unsigned live; /* connection threads still running */
	pthread_cond_t ended;
	volatile sig_atomic_t stop;
} server = {.mu = PTHREAD_MUTEX_INITIALIZER, .ended = PTHREAD_COND_INITIALIZER};

static ws_msg *msg_new(const char *data, size_t len)
{
	ws_msg *m = malloc(sizeof *m + LWS_PRE + len);
	if (m) {
		m->next = NULL;
		m->len = len;
		memcpy(m->data + LWS_PRE, data, len);
	}
	return m;
}

/* The session's send: queue, then wake the service thread to ask for writability. */
static void conn_send(void *user, const char *data, size_t len)
{
	ws_conn *c = user;
	ws_msg *m = msg_new(data, len);
	pthread_mutex_lock(&c->mu);
	if (m && !c->closed) {
		if (c->out_tail)
			c->out_tail->next = m;
		else
			c->out_head = m;
		c->out_tail = m;
		m = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	free(m);
	pthread_mutex_lock(&server.mu);
	if (server.ctx)
		lws_cancel_service(server.ctx);
	pthread_mutex_unlock(&server.mu);
}

static void free_list(ws_msg *m)
{
	while (m) {
		ws_msg *next = m->next;
		free(m);
		m = next;
	}
}

/* The connection's thread: a session, fed in order until the socket closes. */
static void *conn_main(void *arg)
{
	ws_conn *c = arg;
	asp_error err;
	xs_session *s = xs_session_new(c->client, server.session, conn_send, c, &err);
	if (!s)
		fprintf(stderr, "asp: exec-server: %s\n", err.message);
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->in_head && !c->closed)
			pthread_cond_wait(&c->cv, &c->mu);
		ws_msg *m = c->in_head;
		if (m) {
			c->in_head = m->next;
			if (!c->in_head)
				c->in_tail = NULL;
			c->in_bytes -= m->len;
		}
		bool closed = c->closed;
		pthread_mutex_unlock(&c->mu);
		if (!m && closed)
			break;
		if (m && s)
			xs_session_handle(s, m->data + LWS_PRE, m->len);
		free(m);
		if (!s) { /* nothing to serve: close */
			pthread_mutex_lock(&c->mu);
			c->kill = true;
			pthread_mutex_unlock(&c->mu);
			pthread_mutex_lock(&server.mu);
			if (server.ctx)
				lws_cancel_service(server.ctx);
			pthread_mutex_unlock(&server.mu);
		}
	}
	xs_session_free(s); /* kills what still runs; no callback after this */
	free_list(c->in_head);
	free_list(c->out_head);
	cli_ws_rx_reset(&c->rx);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
	pthread_mutex_lock(&server.mu);
	server.live--;
	pthread_cond_broadcast(&server.ended);
	pthread_mutex_unlock(&server.mu);
	return NULL;
}

static void conn_receive(ws_conn *c, struct lws *wsi, const void *in, size_t len)
{
	cli_ws_rx_add(&c->rx, in, len, WS_MSG_MAX);
	if (!lws_is_final_fragment(wsi))
		return;
	ws_msg *m = c->rx.over ? NULL : msg_new(c->rx.buf, c->rx.len);
	bool over = c->rx.over;
	cli_ws_rx_reset(&c->rx);
	pthread_mutex_lock(&c->mu);
	if (m && c->in_bytes + m->len <= WS_QUEUE_MAX) {
		if (c->in_tail)
			c->in_tail->next = m;
		else
			c->in_head = m;
		c->in_tail = m;
		c->in_bytes += m->len;
		m = NULL;
		pthread_cond_signal(&c->cv);
	} else {
		over = true;
	}
	pthread_mutex_unlock(&c->mu);
	free(m);
	if (over) /* a message (or a backlog) beyond the budget: drop the connection */
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	ws_conn **slot = user;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		/* A browser page may not drive a shell here. */
		return lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) > 0 ? -1 : 0;
	case LWS_CALLBACK_ESTABLISHED: {
		ws_conn *c = calloc(1, sizeof *c);
		if (!c)
			return -1;
		c->wsi = wsi;
		c->client = server.client;
		pthread_mutex_init(&c->mu, NULL);
		pthread_cond_init(&c->cv, NULL);
		pthread_mutex_lock(&server.mu);
		server.live++;
		pthread_mutex_unlock(&server.mu);
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &at, conn_main, c) != 0) {
			pthread_mutex_lock(&server.mu);
			server.live--;
			pthread_mutex_unlock(&server.mu);
			pthread_attr_destroy(&at);
			pthread_cond_destroy(&c->cv);
			pthread_mutex_destroy(&c->mu);
			free(c);
			return -1;
		}
		pthread_attr_destroy(&at);
		*slot = c;
		pthread_mutex_lock(&server.mu);
		c->next = server.conns;
		server.conns = c;
		pthread_mutex_unlock(&server.mu);
		return 0;
	}
	case LWS_CALLBACK_RECEIVE:
		if (*slot)
			conn_receive(*slot, wsi, in, len);
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE: {
		ws_conn *c = *slot;
		if (!c)
			return 0;
		pthread_mutex_lock(&c->mu);
		ws_msg *m = c->out_head;
		if (m) {
			c->out_head = m->next;
			if (!c->out_head)
				c->out_tail = NULL;
		}
		bool more = c->out_head != NULL;
		pthread_mutex_unlock(&c->mu);
		if (!m)
			return 0;
		int n = lws_write(wsi, (unsigned char *)m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
		free(m);
		if (n < 0)
			return -1;
		if (more)
			lws_callback_on_writable(wsi);
		return 0;
	}
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		/* woken by a send (or the stop): ask for writability where something waits */
		pthread_mutex_lock(&server.mu);
		for (ws_conn *c = server.conns; c; c = c->next) {
			pthread_mutex_lock(&c->mu);
			bool pending = c->out_head != NULL, kill = c->kill;
			pthread_mutex_unlock(&c->mu);
			if (kill && c->wsi)
				lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			else if (pending && c->wsi)
				lws_callback_on_writable(c->wsi);
		}
		pthread_mutex_unlock(&server.mu);
		return 0;
	case LWS_CALLBACK_CLOSED: {
		ws_conn *c = *slot;
		if (!c)
			return 0;
		*slot = NULL;
		pthread_mutex_lock(&server.mu);
		for (ws_conn **pp = &server.conns; *pp; pp = &(*pp)->next)
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		c->wsi = NULL;
		pthread_mutex_unlock(&server.mu);
		pthread_mutex_lock(&c->mu);
		c->closed = true;
		pthread_cond_signal(&c->cv);
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	default: return 0;
	}
}

static void on_stop(int sig)
{
	(void)sig;
	server.stop = 1;
	if (server.ctx)
		lws_cancel_service(server.ctx);
}

/* Parses ws://IP:PORT (an IPv4 or [IPv6] literal) into host and port. */
static int parse_url(const char *url, char *host, size_t cap, int *port, char *why, size_t wcap)
{
	const char *p = url + 5, *end;
	size_t hl;
	if (*p == '[') {
		end = strchr(p, ']');
		if (!end || end[1] != ':')
			goto bad;
		hl = (size_t)(end - p - 1);
		p++;
		end++;
	} else {
		end = strrchr(p, ':');
		if (!end)
			goto bad;
		hl = (size_t)(end - p);
	}
	if (hl == 0 || hl >= cap)
		goto bad;
	memcpy(host, p, hl);
	host[hl] = '\0';
	char *rest;
	long n = strtol(end + 1, &rest, 10);
	if (rest == end + 1 || (*rest && strcmp(rest, "/")) || n < 0 || n > 65535)
		goto bad;
	*port = (int)n;
	unsigned char a[16];
	if (inet_pton(AF_INET, host, a) == 1 ? a[0] != 127
	    : inet_pton(AF_INET6, host, a) == 1
	        ? memcmp(a, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16) != 0
	        : true) {
		snprintf(why, wcap,
		         "--listen %s: only a loopback address (127.0.0.1, [::1]) is served: "
		         "asp exec-server has no authentication",
		         url);
		return -1;
	}
	return 0;
bad:
	snprintf(why, wcap, "--listen %s: expected ws://IP:PORT, e.g. ws://127.0.0.1:8765", url);
	return -1;
}

int xs_ws_serve(asp_client *client, const char *session, const char *url, char *why, size_t cap)
{
	server.session = session;
	char host[64];
	int port;
	if (parse_url(url, host, sizeof host, &port, why, cap) != 0)
		return -1;
	static const struct lws_protocols protocols[] = {
	    {"exec-server", callback, sizeof(ws_conn *), 65536, 0, NULL, 0},
	    {NULL, NULL, 0, 0, 0, NULL, 0}};
	lws_set_log_level(LLL_ERR, NULL);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.port = port;
	info.iface = host;
	info.protocols = protocols;
	server.client = client;
	info.options = LWS_SERVER_OPTION_DISABLE_IPV6 * (strchr(host, ':') == NULL);
	server.ctx = lws_create_context(&info);
	if (!server.ctx) {
		snprintf(why, cap, "cannot listen on %s (address in use, or not this machine's)",
		         url);
		return -1;
	}
	struct lws_vhost *vh = lws_get_vhost_by_name(server.ctx, "default");
	int bound = vh ? lws_get_vhost_listen_port(vh) : port;
	printf(strchr(host, ':') ? "ws://[%s]:%d\n" : "ws://%s:%d\n", host, bound);
	fflush(stdout);
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	while (!server.stop)
		if (lws_service(server.ctx, 0) < 0)
			break;
	lws_context_destroy(server.ctx); /* closes every connection: their threads end */
	pthread_mutex_lock(&server.mu);
	server.ctx = NULL;
	/* their sessions use the client: wait for them (killing their processes is quick) */
	struct timespec end;
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += 30;
	while (server.live && pthread_cond_timedwait(&server.ended, &server.mu, &end) == 0)
		;
	bool left = server.live > 0;
	pthread_mutex_unlock(&server.mu);
	if (left) {
		snprintf(why, cap, "connections still closing after 30 s");
		return -1;
	}
	return 0;
}
