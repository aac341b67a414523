/*
 * POST /v1/rpc with libcurl. Easy handles live in a pool: a call takes the most recently
 * used one (its connection is the warmest), so N threads calling at once use N kept-alive
 * connections. abort() shuts down the sockets of the calls in flight, which wakes curl
 * at once, and its progress callback refuses to go on.
 */
#include "http_client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Idle handles kept beyond this are cleaned up (a burst of threads does not linger). */
#define POOL_KEEP          64
#define CONNECT_TIMEOUT_MS 10000
/* Bytes of a non-200 answer kept for the message. */
#define TEXT_KEEP 512

typedef struct handle {
	struct handle *next_idle; /* the pool */
	struct handle *next_all;  /* every handle, for abort */
	http_client *c;
	CURL *e;
	curl_socket_t fd; /* the open socket, under c->mu; CURL_SOCKET_BAD if none */
	char errbuf[CURL_ERROR_SIZE];
	/* the answer being received */
	uint8_t *buf;
	size_t len, cap, max;
	bool over; /* larger than max */
	/* the call's deadline (http_deadline): progress seen, when the send ended, and why
	 * the progress callback stopped the call */
	const http_deadline *dl;
	size_t body_len;
	curl_off_t up, down;
	int64_t moved_ms, sent_ms, probed_ms;
	asp_status why_st;
	char why[256];
	bool sending; /* the request went out once in this perform (on_prereq) */
} handle;

struct http_client {
	char *base_url, *rpc_url, *ca_file, *hint, *ca_hint;
	struct curl_slist *headers;
	char refused_hint[600]; /* for a 401 or 403: http.headers to check or set */
	CURLSH *share;
	pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
	pthread_mutex_t mu; /* the pool, the list and the fds */
	handle *idle, *all;
	size_t nidle;
	atomic_bool aborted;
};

/* ---- libcurl callbacks ------------------------------------------------------------ */

static void share_lock(CURL *e, curl_lock_data data, curl_lock_access access, void *ud)
{
	(void)e;
	(void)access;
	http_client *c = ud;
	pthread_mutex_lock(&c->share_mu[data]);
}

static void share_unlock(CURL *e, curl_lock_data data, void *ud)
{
	(void)e;
	http_client *c = ud;
	pthread_mutex_unlock(&c->share_mu[data]);
}

static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	(void)purpose;
	handle *h = ud;
	curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	if (fd == CURL_SOCKET_BAD)
		return fd;
	pthread_mutex_lock(&h->c->mu);
	h->fd = fd;
	if (atomic_load(&h->c->aborted))
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&h->c->mu);
	return fd;
}

static int close_socket(void *ud, curl_socket_t fd)
{
	handle *h = ud;
	pthread_mutex_lock(&h->c->mu);
	if (h->fd == fd)
		h->fd = CURL_SOCKET_BAD;
	pthread_mutex_unlock(&h->c->mu); /* before close: abort must not shut a reused number */
	return close(fd);
}

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int stop_call(handle *h, asp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int stop_call(handle *h, asp_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(h->why, sizeof h->why, fmt, ap);
	va_end(ap);
	h->why_st = st;
	return 1; /* curl ends the transfer with CURLE_ABORTED_BY_CALLBACK */
}

static asp_status post(http_client *c, const uint8_t *body, size_t len, size_t max_resp,
                       const http_deadline *dl, uint8_t **resp, size_t *rlen, asp_error *err);

/* Whether the listener answers the probe within call_ms, on a connection of its own. */
static bool probe_answered(http_client *c, const http_deadline *d)
{
	http_deadline pd = {.op = "hello", .call_ms = d->call_ms};
	uint8_t *resp;
	size_t rlen;
	asp_error err;
	asp_status st = post(c, d->probe, d->probe_len, 1u << 20, &pd, &resp, &rlen, &err);
	if (st == ASP_OK)
		free(resp);
	return st == ASP_OK;
}

/* The call's deadline (http_deadline), each time libcurl reports: 1 stops the call. */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt;
	(void)ut;
	handle *h = ud;
	if (atomic_load_explicit(&h->c->aborted, memory_order_relaxed))
		return 1;
	const http_deadline *d = h->dl;
	if (!d || !d->call_ms)
		return 0;
	int64_t now = now_ms();
	if (un != h->up || dn != h->down) {
		h->up = un;
		h->down = dn;
		h->moved_ms = now;
	}
	int64_t still = now - h->moved_ms;
	const char *url = h->c->base_url;
	if (dn > 0) /* the answer is arriving: it must keep coming */
		return still < d->call_ms ? 0
		                          : stop_call(h, ASP_E_TRANSPORT_ERROR,
		                                      "%s: the answer from %s stopped arriving for "
		                                      "call_timeout_ms (%u ms)",
		                                      d->op, url, d->call_ms);
	if ((size_t)un < h->body_len) /* connecting or sending */
		return still < d->call_ms ? 0
		                          : stop_call(h, ASP_E_TRANSPORT_ERROR,
		                                      "%s: %s took none of the request for "
		                                      "call_timeout_ms (%u ms)",
		                                      d->op, url, d->call_ms);
	if (!h->sent_ms)
		h->sent_ms = h->probed_ms = now;
	if (d->probe) {
		if (now - h->probed_ms < d->call_ms)
			return 0;
		if (!probe_answered(h->c, d))
			return stop_call(h, ASP_E_TRANSPORT_ERROR,
			                 "%s: %s did not answer a liveness probe (hello) within "
			                 "call_timeout_ms (%u ms)",
			                 d->op, url, d->call_ms);
		h->probed_ms = now_ms();
		return 0;
	}
	uint64_t limit = d->own_ms + d->call_ms;
	if ((uint64_t)(now - h->sent_ms) < limit)
		return 0;
	if (d->own_ms)
		return stop_call(h, ASP_E_TIMEOUT,
		                 "%s: no answer within %llu ms (its timeout_ms %llu + "
		                 "call_timeout_ms %u)",
		                 d->op, (unsigned long long)limit, (unsigned long long)d->own_ms,
		                 d->call_ms);
	return stop_call(h, ASP_E_TIMEOUT, "%s: no answer within call_timeout_ms (%u ms)", d->op,
	                 d->call_ms);
}

/*
 * Right before the request goes out on a connection, new or reused. A second time in one
 * perform is libcurl's retry after a reused connection died before any answer: the
 * request may have reached the listener and run (an exec, a write), so it is not sent
 * again; the call fails as on any transport whose connection died under it.
 */
static int on_prereq(void *ud, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
                     int conn_local_port)
{
	(void)conn_primary_ip, (void)conn_local_ip, (void)conn_primary_port, (void)conn_local_port;
	handle *h = ud;
	if (!h->sending) {
		h->sending = true;
		return CURL_PREREQFUNC_OK;
	}
	stop_call(h, ASP_E_TRANSPORT_ERROR,
	          "%s: the connection to %s closed before the answer; the request is not sent "
	          "again (it may have run); the next call reconnects",
	          h->dl && h->dl->op ? h->dl->op : "call", h->c->base_url);
	return CURL_PREREQFUNC_ABORT;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	handle *h = ud;
	size_t len = size * n;
	if (len > h->max - h->len) {
		h->over = true;
		return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
	}
	if (h->len + len > h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 0;
		curl_off_t cl = -1;
		if (!h->cap &&
		    curl_easy_getinfo(h->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
		    cl > 0 && (uint64_t)cl <= h->max)
			cap = (size_t)cl; /* the whole answer at once: no regrowth */
		if (cap < h->len + len)
			cap = h->len + len < 4096 ? 4096 : h->len + len;
		uint8_t *b = realloc(h->buf, cap);
		if (!b)
			return 0;
		h->buf = b;
		h->cap = cap;
	}
	memcpy(h->buf + h->len, p, len);
	h->len += len;
	return len;
}

/* ---- the pool --------------------------------------------------------------------- */

static void handle_free(handle *h)
{
	if (h->e)
		curl_easy_cleanup(h->e); /* closes its connection through close_socket */
	free(h->buf);
	free(h);
}

static handle *handle_new(http_client *c)
{
	handle *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	h->c = c;
	h->fd = CURL_SOCKET_BAD;
	h->e = curl_easy_init();
	if (!h->e) {
		free(h);
		return NULL;
	}
	CURL *e = h->e;
	curl_easy_setopt(e, CURLOPT_URL, c->rpc_url);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
	/* A call may legitimately wait minutes (a long exec): keepalive finds a dead peer. */
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->errbuf);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, h);
	curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
	curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, h);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, h);
	curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, h);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(e, CURLOPT_SHARE, c->share);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	if (c->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
	pthread_mutex_lock(&c->mu);
	h->next_all = c->all;
	c->all = h;
	pthread_mutex_unlock(&c->mu);
	return h;
}

static handle *acquire(http_client *c)
{
	pthread_mutex_lock(&c->mu);
	handle *h = c->idle;
	if (h) {
		c->idle = h->next_idle;
		c->nidle--;
	}
	pthread_mutex_unlock(&c->mu);
	return h ? h : handle_new(c);
}

static void release(http_client *c, handle *h)
{
	if (h->cap > 64 * 1024) { /* a large answer's buffer is not kept */
		free(h->buf);
		h->buf = NULL;
		h->cap = 0;
	}
	pthread_mutex_lock(&c->mu);
	bool keep = c->nidle < POOL_KEEP;
	if (keep) {
		h->next_idle = c->idle;
		c->idle = h;
		c->nidle++;
	} else { /* off the list of all handles, then gone */
		for (handle **p = &c->all; *p; p = &(*p)->next_all)
			if (*p == h) {
				*p = h->next_all;
				break;
			}
	}
	pthread_mutex_unlock(&c->mu);
	if (!keep)
		handle_free(h);
}

/* ---- a call ----------------------------------------------------------------------- */

static bool is_tls_error(CURLcode r)
{
	return r == CURLE_SSL_CONNECT_ERROR || r == CURLE_PEER_FAILED_VERIFICATION ||
	       r == CURLE_SSL_CACERT_BADFILE || r == CURLE_SSL_CERTPROBLEM ||
	       r == CURLE_SSL_CIPHER || r == CURLE_SSL_ISSUER_ERROR ||
	       r == CURLE_SSL_PINNEDPUBKEYNOTMATCH || r == CURLE_SSL_ENGINE_INITFAILED ||
	       r == CURLE_SSL_CRL_BADFILE || r == CURLE_SSL_SHUTDOWN_FAILED ||
	       r == CURLE_USE_SSL_FAILED;
}

/* A curl failure, for a person. */
static asp_status curl_failed(http_client *c, handle *h, CURLcode r, asp_error *err)
{
	const char *detail = h->errbuf[0] ? h->errbuf : curl_easy_strerror(r);
	if (r == CURLE_ABORTED_BY_CALLBACK && h->why_st && !atomic_load(&c->aborted))
		return asp_error_set(err, h->why_st, NULL, "%s", h->why);
	if (atomic_load(&c->aborted) || r == CURLE_ABORTED_BY_CALLBACK)
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "the call to %s was cut short: the connection was closed",
		                     c->base_url);
	if (r == CURLE_COULDNT_CONNECT || r == CURLE_COULDNT_RESOLVE_HOST ||
	    r == CURLE_OPERATION_TIMEDOUT)
		return asp_error_set(
		    err, ASP_E_TRANSPORT_ERROR, NULL,
		    "cannot connect to %s: %s; is asp-agent --listen running there?", c->base_url,
		    detail);
	if (is_tls_error(r))
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "TLS with %s failed: %s%s",
		                     c->base_url, detail, c->ca_hint ? c->ca_hint : "");
	if (r == CURLE_UNSUPPORTED_PROTOCOL && strncmp(c->base_url, "https", 5) == 0)
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "%s: this libcurl cannot speak https", c->base_url);
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
	                     "%s went away during the call (%s); the next call reconnects",
	                     c->base_url, detail);
}

/* The text of a non-200 answer, one line, for a message. */
static void answer_text(const handle *h, char *out, size_t cap)
{
	size_t n = h->len < TEXT_KEEP ? h->len : TEXT_KEEP;
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		unsigned char ch = h->buf[i];
		if (ch == '\n' && i + 1 == n)
			break;
		out[o++] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
	}
	out[o] = '\0';
}

static asp_status status_failed(http_client *c, handle *h, long status, asp_error *err)
{
	char text[TEXT_KEEP + 1];
	answer_text(h, text, sizeof text);
	switch (status) {
	case 401:
		return asp_error_set(err, ASP_E_UNAUTHORIZED, NULL,
		                     "%s answered 401 Unauthorized: the bearer token is missing or "
		                     "wrong%s%s",
		                     c->base_url, c->hint ? c->hint : "", c->refused_hint);
	case 403:
		return asp_error_set(err, ASP_E_UNAUTHORIZED, NULL,
		                     "%s answered 403 Forbidden%s%s: something in front of "
		                     "asp-agent --listen refused the request%s",
		                     c->base_url, text[0] ? ": " : "", text, c->refused_hint);
	case 413:
		return asp_error_set(err, ASP_E_TOO_LARGE, NULL, "%s answered 413: %s", c->base_url,
		                     text[0] ? text : "the request is too large");
	case 400:
		return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL, "%s answered 400: %s",
		                     c->base_url, text[0] ? text : "bad request");
	case 503:
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "%s answered 503: %s",
		                     c->base_url, text[0] ? text : "the listener is unavailable");
	default:
		return asp_error_set(
		    err, ASP_E_TRANSPORT_ERROR, NULL,
		    "%s answered HTTP %ld%s%s; is the URL that of asp-agent --listen?", c->base_url,
		    status, text[0] ? ": " : "", text);
	}
}

asp_status http_client_post(http_client *c, const uint8_t *body, size_t len, size_t max_resp,
                            const http_deadline *dl, uint8_t **resp, size_t *rlen, asp_error *err)
{
	return post(c, body, len, max_resp, dl, resp, rlen, err);
}

static asp_status post(http_client *c, const uint8_t *body, size_t len, size_t max_resp,
                       const http_deadline *dl, uint8_t **resp, size_t *rlen, asp_error *err)
{
	*resp = NULL;
	*rlen = 0;
	if (atomic_load(&c->aborted))
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "the connection was closed");
	handle *h = acquire(c);
	if (!h)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory (a curl handle)");
	h->len = 0;
	h->over = false;
	h->max = max_resp;
	h->errbuf[0] = '\0';
	h->dl = dl;
	h->body_len = len;
	h->up = h->down = 0;
	h->moved_ms = now_ms();
	h->sent_ms = h->probed_ms = 0;
	h->why_st = ASP_OK;
	h->sending = false;
	curl_easy_setopt(h->e, CURLOPT_POSTFIELDS, (const char *)body);
	curl_easy_setopt(h->e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	CURLcode r = curl_easy_perform(h->e);
	curl_easy_setopt(h->e, CURLOPT_POSTFIELDS, NULL); /* the body is the caller's */
	h->dl = NULL;
	long status = 0;
	curl_easy_getinfo(h->e, CURLINFO_RESPONSE_CODE, &status);
	asp_status st = ASP_OK;
	if (r == CURLE_WRITE_ERROR && h->over && status == 200) {
		st = asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                   "%s sent an answer larger than max_message (%zu)", c->base_url,
		                   max_resp);
	} else if (status != 200 && status != 0 && (r == CURLE_OK || h->over)) {
		st = status_failed(c, h, status, err);
	} else if (r != CURLE_OK) {
		st = curl_failed(c, h, r, err);
	} else {
		const char *ct = NULL;
		curl_easy_getinfo(h->e, CURLINFO_CONTENT_TYPE, &ct);
		if (!ct || strncasecmp(ct, "application/msgpack", 19) != 0)
			st = asp_error_set(
			    err, ASP_E_PROTOCOL_ERROR, NULL,
			    "%s answered 200 with Content-Type %s, not application/msgpack; "
			    "is the URL that of asp-agent --listen?",
			    c->base_url, ct ? ct : "(none)");
	}
	if (st == ASP_OK) {
		*resp = h->buf ? h->buf : malloc(1);
		*rlen = h->len;
		h->buf = NULL;
		h->cap = 0;
		if (!*resp)
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	release(c, h);
	return st;
}

/* ---- lifecycle -------------------------------------------------------------------- */

static void global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool dup_to(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return !src || *dst;
}

asp_status http_client_new(const http_client_cfg *cfg, http_client **out, asp_error *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, global_init);
	*out = NULL;
	http_client *c = calloc(1, sizeof *c);
	if (!c)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	pthread_mutex_init(&c->mu, NULL);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&c->share_mu[i], NULL);
	atomic_init(&c->aborted, false);
	bool ok = dup_to(&c->base_url, cfg->base_url) && dup_to(&c->rpc_url, cfg->rpc_url) &&
	          dup_to(&c->ca_file, cfg->ca_file) && dup_to(&c->hint, cfg->hint) &&
	          dup_to(&c->ca_hint, cfg->ca_hint);
	struct curl_slist *hl = NULL;
	const char *fixed[] = {
	    "Content-Type: application/msgpack", "Accept: application/msgpack",
	    "Expect:", /* no 100-continue round trip before large bodies */
	};
	for (size_t i = 0; ok && i < sizeof fixed / sizeof *fixed; i++) {
		struct curl_slist *n = curl_slist_append(hl, fixed[i]);
		ok = n != NULL;
		hl = n ? n : hl;
	}
	for (size_t i = 0; ok && cfg->headers && i < cfg->headers->count; i++) {
		struct curl_slist *n = curl_slist_append(hl, cfg->headers->lines[i]);
		ok = n != NULL;
		hl = n ? n : hl;
	}
	if (cfg->headers)
		snprintf(c->refused_hint, sizeof c->refused_hint, "%s", cfg->headers->hint);
	if (ok && cfg->token) {
		size_t n = strlen(cfg->token) + 32;
		char *line = malloc(n);
		ok = line != NULL;
		if (ok) {
			snprintf(line, n, "Authorization: Bearer %s", cfg->token);
			struct curl_slist *s = curl_slist_append(hl, line);
			memset(line, 0, n); /* the secret does not linger in freed memory */
			free(line);
			ok = s != NULL;
			hl = s ? s : hl;
		}
	}
	c->headers = hl;
	c->share = ok ? curl_share_init() : NULL;
	if (!c->share) {
		http_client_free(c);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*out = c;
	return ASP_OK;
}

void http_client_abort(http_client *c)
{
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->aborted, true);
	for (handle *h = c->all; h; h = h->next_all)
		if (h->fd != CURL_SOCKET_BAD)
			shutdown(h->fd, SHUT_RDWR); /* a blocked curl wakes with an error */
	pthread_mutex_unlock(&c->mu);
}

bool http_client_aborted(http_client *c)
{
	return atomic_load(&c->aborted);
}

void http_client_free(http_client *c)
{
	if (!c)
		return;
	handle *h = c->all;
	c->all = NULL;
	while (h) {
		handle *n = h->next_all;
		handle_free(h);
		h = n;
	}
	if (c->share)
		curl_share_cleanup(c->share);
	if (c->headers) { /* the Authorization line holds the token, http.headers secrets */
		for (struct curl_slist *s = c->headers; s; s = s->next)
			memset(s->data, 0, strlen(s->data));
		curl_slist_free_all(c->headers);
	}
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&c->share_mu[i]);
	pthread_mutex_destroy(&c->mu);
	free(c->base_url);
	free(c->rpc_url);
	free(c->ca_file);
	free(c->hint);
	free(c->ca_hint);
	free(c);
}
