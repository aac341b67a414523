/*
 * asp ui's sockets (docs/design.md, "The page"): libwebsockets on this thread serves the
 * embedded page, GET /file, and one WebSocket per page (subprotocol asp-ui, one JSON
 * text message per request, answer or event). Every request, the WebSocket's upgrade
 * included, must name this listener in Host (a page of another name that resolves here,
 * DNS rebinding, is refused), carry no Origin but ours, and carry the token: in the URL
 * the command printed, whose first visit trades it for a cookie, or in that cookie.
 * Requests run on the pool (ui_pool.c); what they send is queued here and written when
 * the socket is writable, the only place lws_write is called.
 */
#include "ui.h"

#include "cli.h"

#include <libwebsockets.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest request taken (an upload chunk in base64 is 1.4 MiB), most bytes waiting to go. */
#define UI_MSG_MAX   (8u << 20)
#define UI_QUEUE_MAX (16u << 20)
/* How long output waits for a page that reads slower than it comes, before it is dropped. */
#define UI_STALL_MS 10000
/* Bytes written per writable callback. */
#define UI_CHUNK (64u << 10)

typedef struct ui_msg {
	struct ui_msg *next;
	size_t len;
	unsigned char data[]; /* LWS_PRE, then the bytes */
} ui_msg;

struct ui_conn {
	struct ui_conn *next; /* in server.conns while the socket is open */
	struct lws *wsi;      /* NULL once closed */
	pthread_mutex_t mu;
	pthread_cond_t room; /* broadcast when the queue shrank or the socket closed */
	ui_msg *out_head, *out_tail;
	size_t out_bytes;
	bool closed, kill;
	unsigned refs; /* the socket's and one per job */
	ui_page *page;
	cli_ws_rx rx; /* the message being received, in fragments */
};

/* An HTTP transaction: a body from memory (an asset, a refusal) or a download. */
typedef struct http_pss {
	struct http_pss *next; /* in server.downloads */
	struct lws *wsi;
	const char *body;
	size_t len, sent;
	ui_download *dl;
	bool headers_sent;
	bool listed;
	char type[64];   /* a download's Content-Type */
	char disp[1200]; /* and its Content-Disposition */
} http_pss;

static struct {
	struct lws_context *ctx;
	asp_client *client;
	char token[65];
	char host[80];      /* the Host header a request must carry: 127.0.0.1:PORT */
	char origin[96];    /* the Origin it may carry: http://127.0.0.1:PORT */
	char cookie[32];    /* the cookie's name, per port: asp_ui_PORT */
	pthread_mutex_t mu; /* guards conns, downloads and ctx for the wakes */
	ui_conn *conns;
	http_pss *downloads;
	volatile sig_atomic_t stop;
} server = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void wake(void)
{
	pthread_mutex_lock(&server.mu);
	if (server.ctx)
		lws_cancel_service(server.ctx);
	pthread_mutex_unlock(&server.mu);
}

static void wake_arg(void *arg)
{
	(void)arg;
	wake();
}

/* --- the page's connection ----------------------------------------------------------------- */

static void free_msgs(ui_msg *m)
{
	while (m) {
		ui_msg *n = m->next;
		free(m);
		m = n;
	}
}

/* The last reference: what the page opened ends (on a worker: it calls the client). */
static void conn_finish(void *arg)
{
	ui_conn *c = arg;
	ui_page_free(c->page);
	free_msgs(c->out_head);
	cli_ws_rx_reset(&c->rx);
	pthread_cond_destroy(&c->room);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static void conn_unref(ui_conn *c)
{
	pthread_mutex_lock(&c->mu);
	bool last = --c->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (last && !ui_pool_run(conn_finish, c))
		conn_finish(c); /* stopping: no worker takes it */
}

static void queue_msg(ui_conn *c, json_t *msg, bool wait_for_room)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	size_t len = s ? strlen(s) : 0;
	ui_msg *m = s ? malloc(sizeof *m + LWS_PRE + len) : NULL;
	if (m) {
		m->next = NULL;
		m->len = len;
		memcpy(m->data + LWS_PRE, s, len);
	}
	free(s);
	pthread_mutex_lock(&c->mu);
	if (wait_for_room && c->out_bytes > UI_QUEUE_MAX) {
		struct timespec end;
		clock_gettime(CLOCK_REALTIME, &end);
		end.tv_sec += UI_STALL_MS / 1000;
		while (c->out_bytes > UI_QUEUE_MAX && !c->closed)
			if (pthread_cond_timedwait(&c->room, &c->mu, &end) != 0)
				break;
		if (c->out_bytes > UI_QUEUE_MAX)
			c->kill = true; /* the page stopped reading: let it go */
	}
	if (m && !c->closed && !c->kill) {
		if (c->out_tail)
			c->out_tail->next = m;
		else
			c->out_head = m;
		c->out_tail = m;
		c->out_bytes += m->len;
		m = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	free(m);
	wake();
}

void ui_send(ui_conn *c, json_t *msg)
{
	queue_msg(c, msg, false);
}

void ui_send_output(ui_conn *c, json_t *msg)
{
	queue_msg(c, msg, true);
}

typedef struct request_job {
	ui_conn *c;
	size_t len;
	char data[];
} request_job;

static void run_request(void *arg)
{
	request_job *j = arg;
	json_error_t je;
	json_t *req = json_loadb(j->data, j->len, JSON_REJECT_DUPLICATES, &je);
	pthread_mutex_lock(&j->c->mu);
	bool closed = j->c->closed;
	pthread_mutex_unlock(&j->c->mu);
	if (!json_is_object(req))
		ui_reply_error(j->c, json_null(), "invalid_argument", "not a JSON object: %s",
		               req ? "another value" : je.text);
	else if (!closed) /* a request of a page gone needs no work (an upload chunk) */
		ui_page_handle(j->c->page, req);
	json_decref(req);
	conn_unref(j->c);
	free(j);
}

static void conn_receive(ui_conn *c, struct lws *wsi, const void *in, size_t len)
{
	cli_ws_rx_add(&c->rx, in, len, UI_MSG_MAX);
	if (!lws_is_final_fragment(wsi))
		return;
	request_job *j = c->rx.over ? NULL : malloc(sizeof *j + c->rx.len);
	if (j) {
		j->c = c;
		j->len = c->rx.len;
		memcpy(j->data, c->rx.buf, c->rx.len);
		pthread_mutex_lock(&c->mu);
		c->refs++;
		pthread_mutex_unlock(&c->mu);
		if (!ui_pool_run(run_request, j)) {
			conn_unref(c);
			free(j);
			j = NULL;
		}
	}
	bool over = !j;
	cli_ws_rx_reset(&c->rx);
	if (over) /* beyond the budget, or no worker: drop the page */
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static int ws_writeable(ui_conn *c, struct lws *wsi)
{
	pthread_mutex_lock(&c->mu);
	ui_msg *m = c->out_head;
	if (m) {
		c->out_head = m->next;
		if (!c->out_head)
			c->out_tail = NULL;
		c->out_bytes -= m->len;
		pthread_cond_broadcast(&c->room);
	}
	bool more = c->out_head != NULL;
	pthread_mutex_unlock(&c->mu);
	if (!m)
		return 0;
	int n = lws_write(wsi, m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
	free(m);
	if (n < 0)
		return -1;
	if (more)
		lws_callback_on_writable(wsi);
	return 0;
}

static int ws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
	ui_conn **slot = user;
	switch (reason) {
	case LWS_CALLBACK_ESTABLISHED: {
		ui_conn *c = calloc(1, sizeof *c);
		if (!c)
			return -1;
		pthread_mutex_init(&c->mu, NULL);
		pthread_cond_init(&c->room, NULL);
		c->wsi = wsi;
		c->refs = 1;
		c->page = ui_page_new(server.client, c);
		if (!c->page) {
			pthread_cond_destroy(&c->room);
			pthread_mutex_destroy(&c->mu);
			free(c);
			return -1;
		}
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
	case LWS_CALLBACK_SERVER_WRITEABLE: return *slot ? ws_writeable(*slot, wsi) : 0;
	case LWS_CALLBACK_CLOSED: {
		ui_conn *c = *slot;
		if (!c)
			return 0;
		*slot = NULL;
		pthread_mutex_lock(&server.mu);
		for (ui_conn **pp = &server.conns; *pp; pp = &(*pp)->next)
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		pthread_mutex_unlock(&server.mu);
		pthread_mutex_lock(&c->mu);
		c->wsi = NULL;
		c->closed = true;
		pthread_cond_broadcast(&c->room);
		pthread_mutex_unlock(&c->mu);
		conn_unref(c);
		return 0;
	}
	default: return 0;
	}
}

/* --- who may ask ------------------------------------------------------------------------- */

static bool same_secret(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = la != lb;
	for (size_t i = 0; i < la && i < lb; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

/* URL argument `name` ("path"), decoded, into `out`; false when absent. */
static bool urlarg(struct lws *wsi, const char *name, char *out, size_t cap)
{
	char key[32], buf[4200];
	snprintf(key, sizeof key, "%s=", name);
	const char *v = lws_get_urlarg_by_name(wsi, key, buf, sizeof buf);
	if (!v)
		return false;
	snprintf(out, cap, "%s", v);
	return true;
}

/* Our cookie's value from the Cookie header into `out`; false when absent. */
static bool cookie_token(struct lws *wsi, char *out, size_t cap)
{
	char hdr[2048];
	if (lws_hdr_copy(wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_COOKIE) <= 0)
		return false;
	size_t nl = strlen(server.cookie);
	for (char *save = NULL, *t = strtok_r(hdr, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
		while (*t == ' ')
			t++;
		if (!strncmp(t, server.cookie, nl) && t[nl] == '=') {
			snprintf(out, cap, "%s", t + nl + 1);
			return true;
		}
	}
	return false;
}

/*
 * 0 when the request may go on; else the status to refuse it with and why. *from_url: the
 * token came in the URL (a first visit), which the answer trades for the cookie.
 */
static int check_request(struct lws *wsi, bool *from_url, const char **why)
{
	char v[256];
	*from_url = false;
	if (lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HOST) <= 0 || strcmp(v, server.host)) {
		*why = "this page answers only requests for its own address (the Host header must "
		       "be the address asp ui printed)\n";
		return 421;
	}
	if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) > 0 &&
	    (lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_ORIGIN) <= 0 || strcmp(v, server.origin))) {
		*why = "another origin may not call this page\n";
		return 403;
	}
	char tok[128];
	bool have = false;
	if (urlarg(wsi, "token", tok, sizeof tok)) {
		have = *from_url = true;
	} else {
		have = cookie_token(wsi, tok, sizeof tok);
	}
	if (!have) {
		*why = "open the URL asp ui printed: it carries the token this page needs\n";
		return 401;
	}
	if (!same_secret(tok, server.token)) {
		*from_url = false;
		*why = "wrong token: open the URL asp ui printed\n";
		return 403;
	}
	return 0;
}

/* --- HTTP answers --------------------------------------------------------------------------- */

static const char page_csp[] =
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' blob: data:; connect-src 'self'; font-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";
/* A sandbox's file never runs as this page: no script, no origin of ours. */
static const char file_csp[] = "sandbox; default-src 'none'; img-src 'self' data:; "
                               "style-src 'unsafe-inline'; frame-ancestors 'self'";

static int add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                      unsigned char *end)
{
	return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
	                                   (const unsigned char *)value, (int)strlen(value), p,
	                                   end);
}

/* The headers every answer has; nonzero when they did not fit. */
static int common_headers(struct lws *wsi, const char *csp, unsigned char **p, unsigned char *end)
{
	return add_header(wsi, "cache-control:", "no-store", p, end) ||
	       add_header(wsi, "x-content-type-options:", "nosniff", p, end) ||
	       add_header(wsi, "referrer-policy:", "no-referrer", p, end) ||
	       add_header(wsi, "x-frame-options:", "DENY", p, end) ||
	       add_header(wsi, "content-security-policy:", csp, p, end);
}

/* A whole small answer now, then the transaction ends. */
static int answer_now(struct lws *wsi, int status, const char *msg, const char *location,
                      bool set_cookie)
{
	unsigned char buf[LWS_PRE + 4096], *start = buf + LWS_PRE, *p = start,
	                                   *end = buf + sizeof buf - 1;
	size_t ml = strlen(msg);
	char cookie[256];
	snprintf(cookie, sizeof cookie, "%s=%s; Path=/; HttpOnly; SameSite=Strict", server.cookie,
	         server.token);
	if (lws_add_http_common_headers(wsi, (unsigned)status, "text/plain; charset=utf-8", ml, &p,
	                                end) ||
	    common_headers(wsi, page_csp, &p, end) ||
	    (location && add_header(wsi, "location:", location, &p, end)) ||
	    (set_cookie && add_header(wsi, "set-cookie:", cookie, &p, end)) ||
	    lws_finalize_http_header(wsi, &p, end) || (size_t)(end - p) < ml)
		return -1;
	memcpy(p, msg, ml);
	p += ml;
	if (lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_FINAL) != (int)(p - start))
		return -1;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* For the upgrade: lws ends the transaction when the callback returns, so all of it now. */
static int refuse_upgrade(struct lws *wsi, int status, const char *msg)
{
	unsigned char buf[LWS_PRE + 2048], *start = buf + LWS_PRE, *p = start,
	                                   *end = buf + sizeof buf;
	size_t ml = strlen(msg);
	char line[64];
	int ll = snprintf(line, sizeof line, "HTTP/1.1 %d %s", status,
	                  status == 401   ? "Unauthorized"
	                  : status == 403 ? "Forbidden"
	                  : status == 421 ? "Misdirected Request"
	                                  : "Bad Request");
	if (lws_add_http_header_by_name(wsi, NULL, (const unsigned char *)line, ll, &p, end) ||
	    add_header(wsi, "content-type:", "text/plain; charset=utf-8", &p, end) ||
	    lws_add_http_header_content_length(wsi, ml, &p, end) ||
	    add_header(wsi, "connection:", "close", &p, end) ||
	    lws_finalize_http_header(wsi, &p, end) || (size_t)(end - p) < ml)
		return -1;
	memcpy(p, msg, ml);
	p += ml;
	(void)lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_FINAL);
	return 1;
}

static int confirm_upgrade(struct lws *wsi, const char *upgrade)
{
	char uri[64], proto[128];
	bool from_url;
	const char *why;
	if (!upgrade || strcasecmp(upgrade, "websocket") != 0 ||
	    lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0 || strcmp(uri, "/ws") != 0)
		return refuse_upgrade(wsi, 400, "the page's WebSocket is at /ws\n");
	int st = check_request(wsi, &from_url, &why);
	if (st)
		return refuse_upgrade(wsi, st, why);
	if (lws_hdr_copy(wsi, proto, sizeof proto, WSI_TOKEN_PROTOCOL) <= 0 ||
	    !strstr(proto, "asp-ui"))
		return refuse_upgrade(wsi, 400, "the WebSocket needs the subprotocol asp-ui\n");
	return 0;
}

/* The file name for Content-Disposition: the last component, quotes and controls out. */
static void disposition(const char *path, bool download, char *out, size_t cap)
{
	const char *base = strrchr(path, '/');
	base = base && base[1] ? base + 1 : path;
	char ascii[256];
	size_t n = 0;
	for (const char *s = base; *s && n + 1 < sizeof ascii; s++)
		ascii[n++] =
		    (*s < 0x20 || *s == '"' || *s == '\\' || (unsigned char)*s >= 0x7f) ? '_' : *s;
	ascii[n] = '\0';
	int w = snprintf(out, cap, "%s; filename=\"%s\"; filename*=UTF-8''",
	                 download ? "attachment" : "inline", ascii);
	for (const unsigned char *s = (const unsigned char *)base;
	     *s && w > 0 && (size_t)w + 4 < cap; s++)
		w += (*s >= 0x80 || *s <= 0x20 || strchr("\"%'()*,/:;<=>?@[\\]{}", *s))
		         ? snprintf(out + w, cap - (size_t)w, "%%%02X", *s)
		         : snprintf(out + w, cap - (size_t)w, "%c", *s);
}

static const char *file_type(const char *path)
{
	static const char *const types[][2] = {
	    {".png", "image/png"},    {".jpg", "image/jpeg"},    {".jpeg", "image/jpeg"},
	    {".gif", "image/gif"},    {".webp", "image/webp"},   {".bmp", "image/bmp"},
	    {".ico", "image/x-icon"}, {".svg", "image/svg+xml"},
	};
	size_t pl = strlen(path);
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		size_t el = strlen(types[i][0]);
		if (pl > el && !strcasecmp(path + pl - el, types[i][0]))
			return types[i][1];
	}
	return "application/octet-stream";
}

static void list_download(http_pss *h, bool on)
{
	pthread_mutex_lock(&server.mu);
	if (on && !h->listed) {
		h->next = server.downloads;
		server.downloads = h;
	}
	if (!on && h->listed)
		for (http_pss **pp = &server.downloads; *pp; pp = &(*pp)->next)
			if (*pp == h) {
				*pp = h->next;
				break;
			}
	h->listed = on;
	pthread_mutex_unlock(&server.mu);
}

static void end_download(http_pss *h)
{
	if (!h->dl)
		return;
	list_download(h, false);
	ui_download_release(h->dl);
	h->dl = NULL;
}

static int on_http(struct lws *wsi, http_pss *h, const char *uri)
{
	memset(h, 0, sizeof *h);
	h->wsi = wsi;
	bool from_url;
	const char *why;
	int st = check_request(wsi, &from_url, &why);
	if (st)
		return answer_now(wsi, st, why, NULL, false);
	char *up;
	int ul;
	if (lws_http_get_uri_and_method(wsi, &up, &ul) != LWSHUMETH_GET)
		return answer_now(wsi, 405, "only GET is served here\n", NULL, false);
	if (from_url) /* the token leaves the address bar: the cookie carries it from now on */
		return answer_now(wsi, 303, "see /\n", "/", true);
	if (!strcmp(uri, "/file")) {
		char path[4096], dl[8];
		if (!urlarg(wsi, "path", path, sizeof path) || !path[0])
			return answer_now(wsi, 400, "GET /file?path=PATH\n", NULL, false);
		bool download = urlarg(wsi, "download", dl, sizeof dl);
		h->dl = ui_download_start(server.client, path, wake_arg, NULL);
		if (!h->dl)
			return answer_now(wsi, 503, "out of memory\n", NULL, false);
		disposition(path, download, h->disp, sizeof h->disp);
		snprintf(h->type, sizeof h->type, "%s", file_type(path));
		list_download(h, true);
		return 0; /* the headers once the worker knows the size (on_http_writeable) */
	}
	const ui_asset *a = ui_asset_find(uri);
	if (!a)
		return answer_now(wsi, 404, "not found\n", NULL, false);
	unsigned char buf[LWS_PRE + 2048], *start = buf + LWS_PRE, *p = start,
	                                   *end = buf + sizeof buf - 1;
	if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, a->type, a->len, &p, end) ||
	    common_headers(wsi, page_csp, &p, end) ||
	    lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	h->body = a->data;
	h->len = a->len;
	h->headers_sent = true;
	lws_callback_on_writable(wsi);
	return 0;
}

/* A download's headers, or its refusal, once the worker stat'ed the file. */
static int download_headers(struct lws *wsi, http_pss *h)
{
	uint64_t size;
	const char *msg;
	int st = ui_download_status(h->dl, &size, &msg);
	if (st == 0)
		return 0;
	if (st >= 400) {
		char text[1200];
		snprintf(text, sizeof text, "%s\n", msg);
		end_download(h);
		return answer_now(wsi, st, text, NULL, false);
	}
	unsigned char buf[LWS_PRE + 4096], *start = buf + LWS_PRE, *p = start,
	                                   *end = buf + sizeof buf - 1;
	if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, h->type, size, &p, end) ||
	    common_headers(wsi, file_csp, &p, end) ||
	    add_header(wsi, "content-disposition:", h->disp, &p, end) ||
	    lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	h->headers_sent = true;
	h->len = size;
	return 1;
}

static int on_http_writeable(struct lws *wsi, http_pss *h)
{
	static unsigned char buf[LWS_PRE + UI_CHUNK];
	if (h->dl && !h->headers_sent) {
		int r = download_headers(wsi, h);
		if (r <= 0)
			return r;
	}
	size_t n = 0;
	bool last;
	if (h->dl) {
		bool done = false;
		n = ui_download_take(h->dl, buf + LWS_PRE, UI_CHUNK, &done);
		if (done && h->sent + n != h->len)
			return -1; /* the file changed under us, or a read failed: cut the answer */
		last = done;
		if (!n && !done)
			return 0; /* the worker wakes us when more is there */
	} else {
		n = h->len - h->sent < UI_CHUNK ? h->len - h->sent : UI_CHUNK;
		memcpy(buf + LWS_PRE, h->body + h->sent, n);
		last = h->sent + n == h->len;
	}
	h->sent += n;
	if (lws_write(wsi, buf + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) !=
	    (int)n)
		return -1;
	if (!last) {
		lws_callback_on_writable(wsi);
		return 0;
	}
	end_download(h);
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static void on_wake(void)
{
	pthread_mutex_lock(&server.mu);
	for (ui_conn *c = server.conns; c; c = c->next) {
		pthread_mutex_lock(&c->mu);
		bool pending = c->out_head != NULL, kill = c->kill;
		pthread_mutex_unlock(&c->mu);
		if (kill && c->wsi)
			lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		else if (pending && c->wsi)
			lws_callback_on_writable(c->wsi);
	}
	for (http_pss *h = server.downloads; h; h = h->next)
		lws_callback_on_writable(h->wsi);
	pthread_mutex_unlock(&server.mu);
}

static int http_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	http_pss *h = user;
	switch (reason) {
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED: on_wake(); return 0;
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: return confirm_upgrade(wsi, in);
	case LWS_CALLBACK_HTTP: return on_http(wsi, h, in);
	case LWS_CALLBACK_HTTP_WRITEABLE: return h ? on_http_writeable(wsi, h) : 0;
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
	case LWS_CALLBACK_CLOSED_HTTP:
		if (h)
			end_download(h);
		break;
	default: break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
    {"http", http_cb, sizeof(http_pss), 0, 0, NULL, 0},
    {"asp-ui", ws_cb, sizeof(ui_conn *), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* --- running ------------------------------------------------------------------------------- */

static void on_stop(int sig)
{
	(void)sig;
	server.stop = 1;
	if (server.ctx)
		lws_cancel_service(server.ctx);
}

int ui_serve(asp_client *client, const ui_listen *l, char *why, size_t cap)
{
	bool v6 = strchr(l->host, ':') != NULL;
	server.client = client;
	snprintf(server.token, sizeof server.token, "%s", l->token);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.port = l->port;
	info.iface = l->host;
	info.protocols = protocols;
	info.options = v6 ? 0 : LWS_SERVER_OPTION_DISABLE_IPV6;
	info.timeout_secs = 30;
	info.max_http_header_data = 8192;
	lws_set_log_level(LLL_ERR, NULL);
	struct lws_context *ctx = lws_create_context(&info);
	if (!ctx) {
		snprintf(why, cap, "cannot listen on %s port %d (in use, or not this machine's)",
		         l->host, l->port);
		return -1;
	}
	pthread_mutex_lock(&server.mu);
	server.ctx = ctx;
	pthread_mutex_unlock(&server.mu);
	struct lws_vhost *vh = lws_get_vhost_by_name(ctx, "default");
	int port = vh ? lws_get_vhost_listen_port(vh) : l->port;
	snprintf(server.host, sizeof server.host, v6 ? "[%s]:%d" : "%s:%d", l->host, port);
	snprintf(server.origin, sizeof server.origin, "http://%s", server.host);
	snprintf(server.cookie, sizeof server.cookie, "asp_ui_%d", port);
	printf("http://%s/?token=%s\n", server.host, server.token);
	fflush(stdout);
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	while (!server.stop)
		if (lws_service(ctx, 0) < 0)
			break;
	pthread_mutex_lock(&server.mu);
	server.ctx = NULL;
	pthread_mutex_unlock(&server.mu);
	lws_context_destroy(ctx); /* closes every page: their cleanup goes to the pool */
	ui_pool_stop();
	return 0;
}
