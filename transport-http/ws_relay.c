/*
 * asp-agent --relay unix:PATH (docs/design.md, "Concurrency and lifetime"): stdio frames
 * in, WebSocket messages to the daemon (asp-agent --listen unix:PATH), and back. The
 * bytes of each message pass unchanged, so pipelining and notifications work as over
 * stdio, while the processes the daemon runs survive this relay's end.
 */
#include "asp_http.h"
#include "http_addr.h"
#include "http_auth.h"
#include "ws_client.h"

#include "asp/proto.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Frames up to this size pass; the daemon's own max_message decides below it. */
#define RELAY_MAX  (1u << 30)
#define CONNECT_MS 10000

typedef struct relay {
	asp_channel *ws, *in;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned long pending; /* requests sent, not yet answered */
	bool ws_dead;
	asp_error why;
} relay;

static bool is_request(const uint8_t *m, size_t len)
{
	return len >= 2 && m[0] == 0x94 && m[1] == 0x00;
}

static bool is_response(const uint8_t *m, size_t len)
{
	return len >= 2 && m[0] == 0x94 && m[1] == 0x01;
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* WebSocket → stdout, until the daemon's side ends. */
static void *from_daemon(void *arg)
{
	relay *r = arg;
	asp_error err;
	asp_error_clear(&err);
	for (;;) {
		uint8_t *m;
		size_t len;
		asp_status st = asp_channel_recv(r->ws, RELAY_MAX, &m, &len, &err);
		if (st || !m)
			break;
		uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
		                (uint8_t)len};
		bool ok = write_all(1, h, 4) && write_all(1, m, len);
		bool resp = is_response(m, len);
		free(m);
		if (!ok) {
			asp_error_set(&err, ASP_E_TRANSPORT_ERROR, NULL, "stdout: %s",
			              strerror(errno));
			break;
		}
		if (resp) {
			pthread_mutex_lock(&r->mu);
			if (r->pending)
				r->pending--;
			pthread_cond_broadcast(&r->cv);
			pthread_mutex_unlock(&r->mu);
		}
	}
	pthread_mutex_lock(&r->mu);
	r->ws_dead = true;
	r->why = err;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	asp_channel_close(r->in); /* the stdin side stops too */
	return NULL;
}

int asp_http_relay(const char *addr, const char *token_file)
{
	http_addr a;
	char why[400];
	if (http_addr_parse_listen(addr, &a, why, sizeof why) < 0) {
		fprintf(stderr, "asp-agent: --relay %s\n", why);
		return 2;
	}
	char *token = NULL;
	if (http_token_load(token_file, &token, why, sizeof why) < 0) {
		fprintf(stderr, "asp-agent: %s\n", why);
		return 2;
	}
	char address[sizeof a.host + 2], url[sizeof a.host + 16], host[sizeof a.host + 8];
	if (a.unix_sock) {
		snprintf(address, sizeof address, "+%s", a.path);
		snprintf(url, sizeof url, "unix:%s", a.path);
		snprintf(host, sizeof host, "localhost");
	} else {
		snprintf(address, sizeof address, "%s", a.host[0] ? a.host : "127.0.0.1");
		snprintf(url, sizeof url, "ws://%s:%d", address, a.port);
		snprintf(host, sizeof host, "%s:%d", address, a.port);
	}
	ws_target t = {.address = address,
	               .port = a.port,
	               .host_header = host,
	               .path = "/v1/ws",
	               .token = token,
	               .url = url,
	               .hint = "; give the relay the daemon's token (--token-file or ASP_TOKEN)"};
	relay r = {0};
	asp_error err;
	asp_status st = ws_channel_open(&t, CONNECT_MS, &r.ws, &err);
	free(token);
	if (st) {
		fprintf(stderr, "asp-agent: --relay: %s: %s\n", asp_strerror(st), err.message);
		return 1;
	}
	if (asp_fd_channel_new(0, 1, ASP_FDCH_WAKEABLE, &r.in, &err)) {
		fprintf(stderr, "asp-agent: --relay: %s\n", err.message);
		asp_channel_free(r.ws);
		return 1;
	}
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	pthread_t th;
	if (pthread_create(&th, NULL, from_daemon, &r) != 0) {
		fprintf(stderr, "asp-agent: --relay: cannot start a thread\n");
		asp_channel_free(r.in);
		asp_channel_free(r.ws);
		return 1;
	}
	/* stdin → WebSocket, until EOF (or the daemon's side ended). */
	int code = 0;
	for (;;) {
		uint8_t *m;
		size_t len;
		st = asp_channel_recv(r.in, RELAY_MAX, &m, &len, &err);
		if (st == ASP_OK && !m)
			break; /* EOF: answer what is in flight, then go */
		if (st) {
			pthread_mutex_lock(&r.mu);
			bool dead = r.ws_dead;
			pthread_mutex_unlock(&r.mu);
			if (!dead)
				fprintf(stderr, "asp-agent: --relay: stdin: %s: %s\n",
				        asp_strerror(st), err.message);
			code = 1; /* a dead daemon is reported below */
			break;
		}
		uint8_t *f = malloc(len + 4);
		if (!f) {
			free(m);
			fprintf(stderr, "asp-agent: --relay: out of memory\n");
			code = 1;
			break;
		}
		f[0] = (uint8_t)(len >> 24);
		f[1] = (uint8_t)(len >> 16);
		f[2] = (uint8_t)(len >> 8);
		f[3] = (uint8_t)len;
		memcpy(f + 4, m, len);
		if (is_request(m, len)) {
			pthread_mutex_lock(&r.mu);
			r.pending++;
			pthread_mutex_unlock(&r.mu);
		}
		free(m);
		st = asp_channel_send(r.ws, f, len + 4, &err);
		free(f);
		if (st) {
			code = 1; /* the reader thread has the reason */
			break;
		}
	}
	pthread_mutex_lock(&r.mu);
	while (r.pending > 0 && !r.ws_dead)
		pthread_cond_wait(&r.cv, &r.mu);
	bool dead = r.ws_dead;
	asp_error why_dead = r.why;
	pthread_mutex_unlock(&r.mu);
	asp_channel_close(r.ws);
	pthread_join(th, NULL);
	if (dead && (code || r.pending > 0)) {
		fprintf(stderr, "asp-agent: --relay: %s\n",
		        why_dead.message[0] ? why_dead.message : "the daemon's connection ended");
		code = 1;
	}
	asp_channel_free(r.in);
	asp_channel_free(r.ws);
	pthread_cond_destroy(&r.cv);
	pthread_mutex_destroy(&r.mu);
	return code;
}
