/*
 * The "http" transport (docs/design.md, "Wire format", ".asp.json"), three ways by
 * http.websocket:
 *   absent  both: unary calls and bulk data are POST /v1/rpc over libcurl (keep-alive,
 *           ~4x the WebSocket's bulk rate); the first spawn or attach opens the /v1/ws
 *           WebSocket and the streams go over it, so the responder routes their
 *           notifications there (to the connection that spawned or attached:
 *           docs/design.md, "Operations").
 *           A WebSocket that dies tells its followers lost; the next stream opens another.
 *   true    every call on the WebSocket, driven by the core's RPC engine.
 *   false   every call a POST; nothing streams.
 * Opening says hello once (over POST unless true), which checks the URL, the token and
 * TLS up front and learns the listener's max_message.
 */
#include "asp/channel.h"
#include "asp/transport.h"

#include "http_addr.h"
#include "http_client.h"
#include "http_headers.h"
#include "ws_client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ASP_VERSION
#define ASP_VERSION "dev"
#endif

/* How long opening may take: connecting, TLS, the upgrade, hello. */
#define OPEN_TIMEOUT_MS 15000
/* A listener may announce a larger max_message; beyond this we do not follow it. */
#define MAX_MESSAGE_CAP (1u << 30)

/*
 * Both-mode's WebSocket: one engine and the calls inside it. A link that died is retired
 * when the next stream replaces it and freed once no call is inside, by a caller that
 * cannot be one of its reader thread's callbacks (those must not make calls).
 */
typedef struct ws_link {
	struct ws_link *next; /* http_backend.retired */
	asp_rpc *rpc;
	atomic_uint users;
} ws_link;

typedef struct http_backend {
	asp_http_websocket mode;
	asp_rpc *rpc;    /* ASP_HTTP_WS_ONLY: every call */
	http_client *hc; /* the other modes: unary calls */
	atomic_size_t max_message;
	atomic_uint next_id;
	unsigned call_ms; /* call_timeout_ms */
	uint8_t *probe;   /* a hello request (no header), the liveness probe */
	size_t probe_len;
	/* POST's first hello answer, as received, until a call fails with transport_error */
	pthread_mutex_t hello_mu;
	uint8_t *hello;
	size_t hello_len;
	uint32_t hello_id;

	/* ASP_HTTP_WS_BOTH: where the WebSocket is (copies; the token wiped when freed) */
	char *ws_url, *ws_host, *ws_host_port, *ws_path, *ws_token, *ws_ca_file, *ws_hint;
	http_headers ws_headers;
	int ws_port;
	bool ws_tls;
	pthread_mutex_t ws_mu; /* ws, retired, opening, aborted; never held while blocking */
	pthread_cond_t ws_cv;  /* an opening finished */
	ws_link *ws;           /* the current WebSocket, or NULL until a stream needs one */
	ws_link *retired;
	bool opening; /* a caller is connecting one (outside the lock) */
	bool aborted;
} http_backend;

/* ---- one unary call --------------------------------------------------------------- */

/* The kept hello answer, decoded into `result`; false when there is none. */
static bool hello_cached(http_backend *b, void *result, asp_arena *a, asp_error *err,
                         asp_status *st)
{
	pthread_mutex_lock(&b->hello_mu);
	uint8_t *m = b->hello ? malloc(b->hello_len) : NULL;
	size_t len = b->hello_len;
	uint32_t id = b->hello_id;
	if (m)
		memcpy(m, b->hello, len);
	pthread_mutex_unlock(&b->hello_mu);
	if (m)
		*st = asp_rpc_decode(ASP_OP_HELLO, id, m, len, result, a, "listener", err);
	return m != NULL;
}

static void hello_keep(http_backend *b, const uint8_t *resp, size_t len, uint32_t id)
{
	uint8_t *m = malloc(len);
	if (!m)
		return;
	memcpy(m, resp, len);
	pthread_mutex_lock(&b->hello_mu);
	if (!b->hello) {
		b->hello = m;
		b->hello_len = len;
		b->hello_id = id;
		m = NULL;
	}
	pthread_mutex_unlock(&b->hello_mu);
	free(m);
}

static void hello_forget(http_backend *b)
{
	pthread_mutex_lock(&b->hello_mu);
	free(b->hello);
	b->hello = NULL;
	pthread_mutex_unlock(&b->hello_mu);
}

/*
 * One call, one POST, within docs/faults.md's deadline: `answer_ms` set, the answer must
 * start within it (opening's hello); else within call_timeout_ms plus the op's own
 * timeout_ms, or, with none of its own, as long as the listener answers a probe.
 */
static asp_status unary(http_backend *b, asp_op_id op, const void *params, void *result,
                        asp_arena *a, unsigned answer_ms, asp_error *err)
{
	asp_status st;
	if (op == ASP_OP_HELLO && !answer_ms && hello_cached(b, result, a, err, &st))
		return st;
	size_t max = atomic_load_explicit(&b->max_message, memory_order_relaxed);
	uint32_t id = atomic_fetch_add_explicit(&b->next_id, 1, memory_order_relaxed) + 1;
	uint8_t *req, *resp;
	size_t req_len, rlen;
	st = asp_rpc_encode(op, id, params, max, &req, &req_len, err);
	if (st)
		return st;
	http_deadline dl = {.op = asp_op_name(op), .call_ms = answer_ms ? answer_ms : b->call_ms};
	uint64_t own = op == ASP_OP_EXEC        ? ((const asp_exec_params *)params)->timeout_ms
	               : op == ASP_OP_PROC_WAIT ? ((const asp_proc_wait_params *)params)->timeout_ms
	                                        : 0;
	if (!answer_ms && own)
		dl.own_ms = own;
	else if (!answer_ms && (op == ASP_OP_EXEC || op == ASP_OP_PROC_WAIT) && b->probe)
		dl.probe = b->probe, dl.probe_len = b->probe_len;
	st = http_client_post(b->hc, req + ASP_FRAME_HEADER, req_len - ASP_FRAME_HEADER, max, &dl,
	                      &resp, &rlen, err);
	free(req);
	if (st == ASP_E_TRANSPORT_ERROR)
		hello_forget(b); /* the next hello asks: it may be another listener by then */
	if (st)
		return st;
	if (op == ASP_OP_HELLO)
		hello_keep(b, resp, rlen, id);
	st = asp_rpc_decode(op, id, resp, rlen, result, a, "listener", err);
	if (st == ASP_OK && op == ASP_OP_HELLO) {
		uint64_t mm = ((const asp_hello_result *)result)->max_message;
		if (mm >= 4096)
			atomic_store(&b->max_message,
			             mm > MAX_MESSAGE_CAP ? MAX_MESSAGE_CAP : (size_t)mm);
	}
	return st;
}

/* ---- both-mode's WebSocket ------------------------------------------------------- */

static void link_free(ws_link *l)
{
	if (l) {
		asp_rpc_free(l->rpc);
		free(l);
	}
}

/* Under ws_mu: unlinks the retired links no call is inside, for the caller to free. */
static ws_link *take_idle_locked(http_backend *b)
{
	ws_link *idle = NULL, **pp = &b->retired;
	while (*pp) {
		ws_link *l = *pp;
		if (atomic_load(&l->users) == 0) {
			*pp = l->next;
			l->next = idle;
			idle = l;
		} else {
			pp = &l->next;
		}
	}
	return idle;
}

static void free_links(ws_link *l)
{
	while (l) {
		ws_link *next = l->next;
		link_free(l);
		l = next;
	}
}

static asp_status ws_dial(http_backend *b, ws_link **out, asp_error *err)
{
	ws_target t = {.address = b->ws_host,
	               .port = b->ws_port,
	               .tls = b->ws_tls,
	               .ca_file = b->ws_ca_file,
	               .host_header = b->ws_host_port,
	               .path = b->ws_path,
	               .token = b->ws_token,
	               .url = b->ws_url,
	               .hint = b->ws_hint,
	               .headers = &b->ws_headers};
	ws_link *l = calloc(1, sizeof *l);
	if (!l)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_channel *ch;
	asp_status st = ws_channel_open(&t, OPEN_TIMEOUT_MS, &ch, err);
	if (st == ASP_OK) /* POST's hello announced max_message: no hello of its own */
		st = asp_rpc_new(ch, atomic_load(&b->max_message), &l->rpc, err);
	if (st == ASP_OK)
		asp_rpc_set_call_timeout(l->rpc, b->call_ms);
	if (st) {
		free(l);
		return st;
	}
	atomic_init(&l->users, 0);
	*out = l;
	return ASP_OK;
}

/*
 * The WebSocket for a stream, opened by the first caller that needs it (the others wait
 * for that one), or again when the last one died. Returned with a use taken: ws_put.
 */
static ws_link *ws_get(http_backend *b, asp_error *err)
{
	ws_link *l = NULL, *idle;
	pthread_mutex_lock(&b->ws_mu);
	for (;;) {
		if (b->aborted) {
			asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			              "the connection to %s was closed", b->ws_url);
			break;
		}
		if (b->ws && asp_rpc_alive(b->ws->rpc)) {
			l = b->ws;
			atomic_fetch_add(&l->users, 1);
			break;
		}
		if (b->ws) { /* died: its followers were told on_lost */
			b->ws->next = b->retired;
			b->retired = b->ws;
			b->ws = NULL;
		}
		if (!b->opening) {
			b->opening = true;
			pthread_mutex_unlock(&b->ws_mu);
			asp_status st = ws_dial(b, &l, err); /* bounded by OPEN_TIMEOUT_MS */
			pthread_mutex_lock(&b->ws_mu);
			b->opening = false;
			pthread_cond_broadcast(&b->ws_cv);
			if (st == ASP_OK && b->aborted) { /* abort came while connecting */
				asp_rpc_close(l->rpc);
				l->next = b->retired;
				b->retired = l;
				l = NULL;
				continue;
			}
			if (st == ASP_OK) {
				b->ws = l;
				atomic_fetch_add(&l->users, 1);
			}
			break;
		}
		pthread_cond_wait(&b->ws_cv, &b->ws_mu); /* the opener is bounded */
	}
	idle = take_idle_locked(b);
	pthread_mutex_unlock(&b->ws_mu);
	free_links(idle);
	return l;
}

static void ws_put(ws_link *l)
{
	atomic_fetch_sub(&l->users, 1); /* a retired link is freed later, off this thread */
}

/*
 * The op table's slot for an op that needs a connection able to carry notifications: an
 * attach, and the handles whose only output is notifications (a POST connection refuses
 * them), made on the connection that will follow them.
 */
static bool needs_ws(asp_op_id op)
{
	return op == ASP_OP_PROC_ATTACH || op == ASP_OP_CONNECT || op == ASP_OP_WATCH ||
	       op == ASP_OP_TREE_READ;
}

static bool lists(const asp_hello_result *r, const char *op)
{
	for (size_t i = 0; i < r->ops.count; i++)
		if (strcmp(r->ops.items[i], op) == 0)
			return true;
	return false;
}

/*
 * hello says what this client can do through the listener. Both-mode streams over the
 * WebSocket: when POST's answer leaves out the streaming ops (a listener announcing per
 * channel), the WebSocket's answer is the one. POST alone cannot attach.
 */
static asp_status hello_ops(http_backend *b, const asp_hello_params *p, asp_hello_result *r,
                            asp_arena *a, asp_error *err)
{
	if (b->mode == ASP_HTTP_WS_BOTH && lists(r, "spawn") && lists(r, "proc_attach")) {
		/* POST answered for its own channel; this client follows over the WebSocket. */
		for (size_t i = 0; r->has_features && i < r->features.count; i++)
			if (strcmp(r->features.items[i], "follow") == 0)
				return ASP_OK;
		const char **f = asp_arena_alloc(a, (r->features.count + 3) * sizeof *f);
		if (!f)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		for (size_t i = 0; r->has_features && i < r->features.count; i++)
			f[i] = r->features.items[i];
		size_t n = r->has_features ? r->features.count : 0;
		f[n++] = "follow";
		/* what delivers by notification comes over the WebSocket too */
		if (lists(r, "connect"))
			f[n++] = "connect";
		if (lists(r, "watch"))
			f[n++] = "watch";
		r->has_features = true;
		r->features = (asp_strv){f, n};
		return ASP_OK;
	}
	if (b->mode == ASP_HTTP_WS_BOTH) {
		/* A WebSocket that cannot open streams nothing: POST's answer is then the truth. */
		asp_error why;
		ws_link *l = ws_get(b, &why);
		asp_hello_result wr;
		if (l &&
		    asp_rpc_call(l->rpc, ASP_OP_HELLO, p, &wr, a, OPEN_TIMEOUT_MS, &why) == ASP_OK)
			*r = wr;
		if (l)
			ws_put(l);
		return ASP_OK;
	}
	if (b->mode == ASP_HTTP_WS_NEVER && lists(r, "proc_attach")) {
		const char **ops = asp_arena_alloc(a, r->ops.count * sizeof *ops);
		if (!ops)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		size_t n = 0;
		for (size_t i = 0; i < r->ops.count; i++)
			if (strcmp(r->ops.items[i], "proc_attach") != 0)
				ops[n++] = r->ops.items[i];
		r->ops.items = ops;
		r->ops.count = n;
	}
	return ASP_OK;
}

static asp_status invoke(void *self, asp_op_id op, const void *p, void *r, asp_arena *a,
                         asp_error *err)
{
	http_backend *b = self;
	if (b->rpc) /* asp_rpc_invoke: a hello is answered from the first one */
		return asp_rpc_invoke(b->rpc, op, p, r, a, err);
	if (b->mode == ASP_HTTP_WS_BOTH && needs_ws(op)) {
		ws_link *l = ws_get(b, err);
		if (!l)
			return err->code;
		asp_status st = asp_rpc_invoke(l->rpc, op, p, r, a, err);
		ws_put(l);
		return st;
	}
	asp_status st = unary(b, op, p, r, a, 0, err);
	if (st == ASP_OK && op == ASP_OP_HELLO)
		st = hello_ops(b, p, r, a, err);
	return st;
}

/* The op table: one thunk per op of the spec, every one forwarded to the listener. */
#define HTTP_THUNK(name, ID)                                                                       \
	static asp_status http_##name(void *self, const asp_##name##_params *p,                    \
	                              asp_##name##_result *r, asp_arena *a, asp_error *err)        \
	{                                                                                          \
		return invoke(self, ID, p, r, a, err);                                             \
	}
ASP_FOR_EACH_OP_ID(HTTP_THUNK)

#define HTTP_SLOT(name, ID) .name = http_##name,
static const asp_ops http_ops = {ASP_FOR_EACH_OP_ID(HTTP_SLOT)};

/* ---- opening ---------------------------------------------------------------------- */

/* "; check http.token_env (ASP_TOKEN) in /x/.asp.json" and the like. */
static void token_hint(const asp_config_view *cfg, char *out, size_t cap)
{
	const char *where = cfg->path ? cfg->path : "the config";
	const asp_config_http *h = &cfg->http;
	if (h->token_env && h->token_file)
		snprintf(out, cap, "; check http.token_env (%s) and http.token_file (%s) in %s",
		         h->token_env, h->token_file, where);
	else if (h->token_env)
		snprintf(out, cap, "; check http.token_env (%s) in %s", h->token_env, where);
	else if (h->token_file)
		snprintf(out, cap, "; check http.token_file (%s) in %s", h->token_file, where);
	else
		snprintf(out, cap,
		         "; the listener wants a token: set http.token_env or "
		         "http.token_file in %s",
		         where);
}

static asp_status say_hello(http_backend *b, const asp_config_view *cfg, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "libasp/" ASP_VERSION;
	hp.has_protocol = true;
	hp.protocol = ASP_PROTOCOL;
	asp_hello_result hr;
	asp_status st = b->rpc
	                    ? asp_rpc_call(b->rpc, ASP_OP_HELLO, &hp, &hr, a, OPEN_TIMEOUT_MS, err)
	                    : unary(b, ASP_OP_HELLO, &hp, &hr, a, OPEN_TIMEOUT_MS, err);
	if (st == ASP_E_TIMEOUT)
		st = asp_error_set(err, ASP_E_TRANSPORT_ERROR, cfg->path,
		                   "%s did not answer hello within %d s; is it asp-agent --listen?",
		                   cfg->http.url, OPEN_TIMEOUT_MS / 1000);
	if (st == ASP_OK && hr.protocol < 1)
		st = asp_error_set(err, ASP_E_PROTOCOL_ERROR, cfg->path,
		                   "%s speaks protocol %llu, this client needs 1", cfg->http.url,
		                   (unsigned long long)hr.protocol);
	asp_arena_free(a);
	return st;
}

static void wipe_free(char *secret)
{
	if (secret) {
		memset(secret, 0, strlen(secret));
		free(secret);
	}
}

static void backend_free(http_backend *b)
{
	asp_rpc_free(b->rpc);
	http_client_free(b->hc);
	free(b->probe);
	free(b->hello);
	pthread_mutex_destroy(&b->hello_mu);
	if (b->mode == ASP_HTTP_WS_BOTH) {
		if (b->ws)
			link_free(b->ws);
		free_links(b->retired);
		pthread_mutex_destroy(&b->ws_mu);
		pthread_cond_destroy(&b->ws_cv);
	}
	free(b->ws_url);
	free(b->ws_host);
	free(b->ws_host_port);
	free(b->ws_path);
	wipe_free(b->ws_token);
	free(b->ws_ca_file);
	free(b->ws_hint);
	http_headers_free(&b->ws_headers);
	free(b);
}

static bool dup_to(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return !src || *dst;
}

/* Both-mode keeps where the WebSocket is, to open it when a stream first needs it. */
static bool keep_ws_target(http_backend *b, const ws_target *t)
{
	b->ws_port = t->port;
	b->ws_tls = t->tls;
	return dup_to(&b->ws_url, t->url) && dup_to(&b->ws_host, t->address) &&
	       dup_to(&b->ws_host_port, t->host_header) && dup_to(&b->ws_path, t->path) &&
	       dup_to(&b->ws_token, t->token) && dup_to(&b->ws_ca_file, t->ca_file) &&
	       dup_to(&b->ws_hint, t->hint) && http_headers_copy(t->headers, &b->ws_headers);
}

static asp_status http_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                            asp_error *err)
{
	const char *where = cfg->path ? cfg->path : "the config";
	const char *url = cfg->http.url;
	if (!url)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, cfg->path,
		                     "the http transport needs http.url (e.g. "
		                     "\"http://127.0.0.1:8722\") in %s",
		                     where);
	http_addr a;
	char why[600];
	if (http_addr_parse_url(url, &a, why, sizeof why) < 0)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, cfg->path, "http.url in %s: %s",
		                     where, why);
	char *token = NULL;
	if (cfg->http.token_env || cfg->http.token_file) {
		asp_status st =
		    asp_config_secret(cfg->http.token_env, cfg->http.token_file, &token, err);
		if (st) {
			asp_error why_token = *err; /* the message is reformatted into err */
			return asp_error_set(
			    err, st, why_token.path[0] ? why_token.path : cfg->path,
			    "the http token: %s (see http.token_env/http.token_file in "
			    "%s)",
			    why_token.message, where);
		}
	}
	http_headers headers;
	asp_status hst = http_headers_load(cfg, &headers, err);
	if (hst != ASP_OK) {
		wipe_free(token);
		return hst;
	}
	http_backend *b = calloc(1, sizeof *b);
	if (!b) {
		wipe_free(token);
		http_headers_free(&headers);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	b->mode = cfg->http.websocket;
	if (b->mode != ASP_HTTP_WS_ONLY && b->mode != ASP_HTTP_WS_NEVER)
		b->mode = ASP_HTTP_WS_BOTH;
	atomic_init(&b->max_message, ASP_MAX_MESSAGE_DEFAULT);
	atomic_init(&b->next_id, 0);
	pthread_mutex_init(&b->hello_mu, NULL);
	b->call_ms = cfg->call_timeout_ms ? cfg->call_timeout_ms : ASP_CALL_TIMEOUT_DEFAULT;
	{
		asp_hello_params hp;
		asp_hello_params_init(&hp);
		uint8_t *frame;
		size_t len;
		asp_error ignored;
		if (asp_rpc_encode(ASP_OP_HELLO, 0, &hp, ASP_MAX_MESSAGE_DEFAULT, &frame, &len,
		                   &ignored) == ASP_OK) {
			b->probe_len = len - ASP_FRAME_HEADER;
			b->probe = malloc(b->probe_len);
			if (b->probe)
				memcpy(b->probe, frame + ASP_FRAME_HEADER, b->probe_len);
			free(frame);
		}
	}
	if (b->mode == ASP_HTTP_WS_BOTH) {
		pthread_mutex_init(&b->ws_mu, NULL);
		pthread_cond_init(&b->ws_cv, NULL);
	}
	char hint[700], ca_hint[600], endpoint[sizeof a.prefix + 16];
	char host_port[sizeof a.host + 16]; /* "host:port", an IPv6 literal in [] */
	bool v6 = strchr(a.host, ':') != NULL;
	snprintf(host_port, sizeof host_port, "%s%s%s:%d", v6 ? "[" : "", a.host, v6 ? "]" : "",
	         a.port);
	token_hint(cfg, hint, sizeof hint);
	snprintf(ca_hint, sizeof ca_hint,
	         "; is the listener's certificate signed by %s and issued for %s? (http.ca_file "
	         "in %s)",
	         cfg->http.ca_file ? cfg->http.ca_file : "a CA this system trusts", a.host, where);
	snprintf(endpoint, sizeof endpoint, "%s/v1/ws", a.prefix);
	ws_target t = {.address = a.host,
	               .port = a.port,
	               .tls = a.tls,
	               .ca_file = cfg->http.ca_file,
	               .host_header = host_port,
	               .path = endpoint,
	               .token = token,
	               .url = url,
	               .hint = hint,
	               .headers = &headers};
	asp_status st;
	if (b->mode == ASP_HTTP_WS_ONLY) {
		asp_channel *ch;
		st = ws_channel_open(&t, OPEN_TIMEOUT_MS, &ch, err);
		if (st == ASP_E_TRANSPORT_ERROR && a.tls && strstr(err->message, "TLS"))
			snprintf(err->message + strlen(err->message),
			         sizeof err->message - strlen(err->message),
			         " (http.ca_file in %s)", where);
		if (st == ASP_OK)
			st = asp_rpc_new(ch, 0, &b->rpc, err);
		if (st == ASP_OK)
			asp_rpc_set_call_timeout(b->rpc, b->call_ms);
	} else {
		char rpc_url[2100];
		snprintf(rpc_url, sizeof rpc_url, "%s://%s%s/v1/rpc", a.tls ? "https" : "http",
		         host_port, a.prefix);
		http_client_cfg hc = {.base_url = url,
		                      .rpc_url = rpc_url,
		                      .token = token,
		                      .ca_file = cfg->http.ca_file,
		                      .hint = hint,
		                      .ca_hint = ca_hint,
		                      .headers = &headers};
		st = http_client_new(&hc, &b->hc, err);
		if (st == ASP_OK && b->mode == ASP_HTTP_WS_BOTH && !keep_ws_target(b, &t))
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	wipe_free(token);
	http_headers_free(&headers);
	if (st == ASP_OK)
		st = say_hello(b, cfg, err);
	if (st) {
		backend_free(b);
		return st;
	}
	*ops = &http_ops;
	*self = b;
	return ASP_OK;
}

static void http_abort(void *self)
{
	http_backend *b = self;
	if (b->rpc) {
		asp_rpc_close(b->rpc);
		return;
	}
	if (b->mode == ASP_HTTP_WS_BOTH) {
		pthread_mutex_lock(&b->ws_mu);
		b->aborted = true;
		if (b->ws)
			asp_rpc_close(b->ws->rpc); /* its followers: on_lost */
		pthread_cond_broadcast(&b->ws_cv); /* callers waiting for an opening fail now */
		pthread_mutex_unlock(&b->ws_mu);
	}
	http_client_abort(b->hc);
}

static void http_close(void *self)
{
	backend_free(self);
}

/* Both-mode lives by its POST side: a WebSocket that died is reopened by the next stream. */
static bool http_alive(void *self)
{
	http_backend *b = self;
	return b->rpc ? asp_rpc_alive(b->rpc) : !http_client_aborted(b->hc);
}

/*
 * Following a process's output needs notifications: the WebSocket carries them. The spawn
 * or attach itself goes over it, since the responder routes a process's notifications
 * to the connection that spawned or attached it.
 */
static asp_status http_subscribe(void *self, asp_op_id op, const void *params, void *result,
                                 asp_arena *a, asp_proc_sub *sub, asp_error *err)
{
	http_backend *b = self;
	if (b->rpc)
		return asp_rpc_subscribe(b->rpc, op, params, result, a, sub, err);
	if (b->mode == ASP_HTTP_WS_NEVER) {
		asp_proc_sub_fail(sub);
		return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
		                     "following a process's output needs the WebSocket, and the "
		                     "config says \"websocket\": false; remove that key from the "
		                     "http section (or set it to true)");
	}
	ws_link *l = ws_get(b, err);
	if (!l) {
		asp_proc_sub_fail(sub);
		return err->code;
	}
	asp_status st = asp_rpc_subscribe(l->rpc, op, params, result, a, sub, err);
	ws_put(l);
	return st;
}

static void http_unsubscribe(void *self, uint64_t proc)
{
	http_backend *b = self;
	if (b->rpc) {
		asp_rpc_unsubscribe(b->rpc, proc);
		return;
	}
	if (b->mode != ASP_HTTP_WS_BOTH)
		return;
	/* May run in a callback on the WebSocket's reader thread: it never frees a link. */
	pthread_mutex_lock(&b->ws_mu);
	ws_link *l = b->ws;
	if (l)
		atomic_fetch_add(&l->users, 1);
	pthread_mutex_unlock(&b->ws_mu);
	if (l) {
		asp_rpc_unsubscribe(l->rpc, proc);
		ws_put(l);
	}
}

const asp_transport asp_transport_http = {
    .kind = ASP_TRANSPORT_HTTP,
    .name = "http",
    .open = http_open,
    .abort = http_abort,
    .close = http_close,
    .alive = http_alive,
    .subscribe = http_subscribe,
    .unsubscribe = http_unsubscribe,
};
