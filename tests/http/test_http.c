/*
 * The http transport and asp-agent --listen, against real agents on loopback: auth, the
 * loopback rule, TLS (certificates made with the openssl command), 64 concurrent
 * clients, stalled clients, limits (413, 400, WebSocket 1002), a listener killed
 * mid-call, graceful SIGTERM, and the relay to a --listen unix:PATH daemon.
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "listener.h"
#include "wire.h"
#include "ws_client.h"

#include <CUnit/Basic.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "t0k3n-for-the-tests"
#define MIB   (1024 * 1024)

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* Prints the agent's log when a check failed, so a CI failure explains itself. */
static void dump_log(const listener *l)
{
	char *t = listener_log_text(l);
	fprintf(stderr, "\n--- asp-agent log (%s) ---\n%s---\n", l->log, t ? t : "");
	free(t);
}

/* ---- clients ---------------------------------------------------------------------- */

typedef struct cfg {
	const char *url;
	bool websocket;
	const char *token_env;
	const char *token_file;
	const char *ca_file;
} cfg;

static asp_client *open_client(const cfg *c, asp_error *err)
{
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = ASP_TRANSPORT_HTTP;
	v.path = "/test/.asp.json";
	v.http.url = c->url;
	v.http.websocket = c->websocket ? ASP_HTTP_WS_ONLY : ASP_HTTP_WS_NEVER;
	v.http.token_env = c->token_env;
	v.http.token_file = c->token_file;
	v.http.ca_file = c->ca_file;
	asp_client *cl = NULL;
	if (asp_client_open_view(&v, &cl, err))
		return NULL;
	return cl;
}

/* exec of `cmd`; the status, with stdout in `out` (cap bytes) when given. */
static asp_status run(asp_client *cl, const char *cmd, char *out, size_t cap, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	asp_exec_result r;
	asp_status st = asp_exec(cl, &p, &r, a, err);
	if (st == ASP_OK && out)
		snprintf(out, cap, "%.*s", (int)r.stdout_data.len,
		         (const char *)r.stdout_data.data);
	if (st == ASP_OK && r.exit_code != 0)
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "exit %lld", (long long)r.exit_code);
	asp_arena_free(a);
	return st;
}

static asp_status hello(asp_client *cl, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	asp_status st = asp_hello(cl, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

/* ---- raw HTTP with libcurl -------------------------------------------------------- */

typedef struct raw {
	long status;
	CURLcode rc;
	char body[4096];
	size_t len;
	char headers[4096];
	size_t hlen;
} raw;

static size_t raw_body(char *p, size_t s, size_t n, void *ud)
{
	raw *r = ud;
	size_t len = s * n, room = sizeof r->body - 1 - r->len;
	memcpy(r->body + r->len, p, len < room ? len : room);
	r->len += len < room ? len : room;
	r->body[r->len] = '\0';
	return len;
}

static size_t raw_header(char *p, size_t s, size_t n, void *ud)
{
	raw *r = ud;
	size_t len = s * n, room = sizeof r->headers - 1 - r->hlen;
	memcpy(r->headers + r->hlen, p, len < room ? len : room);
	r->hlen += len < room ? len : room;
	r->headers[r->hlen] = '\0';
	return len;
}

/* GET (body NULL) or POST `path` on `base`; `auth` is a whole Authorization value. */
static void raw_req(const char *base, const char *path, const void *body, size_t len,
                    const char *auth, const char *ca, raw *r)
{
	memset(r, 0, sizeof *r);
	CURL *e = curl_easy_init();
	char url[512], authh[512];
	snprintf(url, sizeof url, "%s%s", base, path);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/msgpack");
	h = curl_slist_append(h, "Expect:");
	if (auth) {
		snprintf(authh, sizeof authh, "Authorization: %s", auth);
		h = curl_slist_append(h, authh);
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 20000L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, raw_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, raw_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	if (ca)
		curl_easy_setopt(e, CURLOPT_CAINFO, ca);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, (const char *)body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	r->rc = curl_easy_perform(e);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
}

/* [0, 1, "hello", {}] */
static const uint8_t hello_req[] = {0x94, 0x00, 0x01, 0xa5, 'h', 'e', 'l', 'l', 'o', 0x80};

/* A socket connected to 127.0.0.1:port, or -1. */
static int tcp_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* ---- auth ------------------------------------------------------------------------- */

static void test_auth(void)
{
	listener l;
	const char *a[] = {NULL};
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", a, TOKEN) == 0);
	raw r;
	raw_req(l.url, "/v1/health", NULL, 0, NULL, NULL, &r);
	CU_ASSERT(r.rc == CURLE_OK && r.status == 200 && strcmp(r.body, "ok\n") == 0);
	raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, NULL, NULL, &r);
	CU_ASSERT(r.status == 401);
	CU_ASSERT(strstr(r.headers, "www-authenticate: Bearer") != NULL);
	raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, "Bearer wrong", NULL, &r);
	CU_ASSERT(r.status == 401);
	raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, "Bearer " TOKEN "x", NULL, &r);
	CU_ASSERT(r.status == 401);
	raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, "Basic " TOKEN, NULL, &r);
	CU_ASSERT(r.status == 401);
	raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, "Bearer " TOKEN, NULL, &r);
	CU_ASSERT(r.status == 200 && r.len > 4 && (uint8_t)r.body[0] == 0x94);
	raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, "bearer " TOKEN, NULL, &r);
	CU_ASSERT(r.status == 200);

	/* Through the transport: the token from a variable, a file, or missing. */
	setenv("ASP_TEST_TOKEN_RIGHT", TOKEN, 1);
	setenv("ASP_TEST_TOKEN_WRONG", "nope", 1);
	char tf[256];
	snprintf(tf, sizeof tf, "%s/token", test_tmpdir());
	FILE *f = fopen(tf, "w");
	fprintf(f, "%s\n", TOKEN);
	fclose(f);
	for (int ws = 0; ws < 2; ws++) {
		asp_error err;
		cfg ok = {.url = l.url, .websocket = ws, .token_env = "ASP_TEST_TOKEN_RIGHT"};
		asp_client *c = open_client(&ok, &err);
		CU_ASSERT_FATAL(c != NULL);
		CU_ASSERT(hello(c, &err) == ASP_OK);
		asp_client_free(c);
		cfg file = {.url = l.url, .websocket = ws, .token_file = tf};
		c = open_client(&file, &err);
		CU_ASSERT(c && hello(c, &err) == ASP_OK);
		asp_client_free(c);
		cfg wrong = {.url = l.url, .websocket = ws, .token_env = "ASP_TEST_TOKEN_WRONG"};
		c = open_client(&wrong, &err);
		asp_status st = c ? hello(c, &err) : err.code;
		CU_ASSERT(st == ASP_E_UNAUTHORIZED);
		CU_ASSERT(strstr(err.message, "token_env (ASP_TEST_TOKEN_WRONG)") != NULL);
		if (st != ASP_E_UNAUTHORIZED || !strstr(err.message, "token_env"))
			fprintf(stderr, "\n(ws %d) %s: %s\n", ws, asp_strerror(st), err.message);
		asp_client_free(c);
		cfg none = {.url = l.url, .websocket = ws};
		c = open_client(&none, &err);
		st = c ? hello(c, &err) : err.code;
		CU_ASSERT(st == ASP_E_UNAUTHORIZED && strstr(err.message, "token") != NULL);
		asp_client_free(c);
	}
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
}

/* Without a token only loopback; with one anything. The token never reaches commands. */
static void test_loopback_rule(void)
{
	listener l;
	int st = listener_run_to_exit(&l, "0.0.0.0:0", NULL, NULL, 5000);
	CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
	char *log = listener_log_text(&l);
	CU_ASSERT(log && strstr(log, "refusing to listen on 0.0.0.0:0 without a token"));
	free(log);
	st = listener_run_to_exit(&l, ":0", NULL, NULL, 5000);
	CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);

	CU_ASSERT_FATAL(listener_start(&l, "0.0.0.0:0", NULL, TOKEN) == 0);
	char url[128];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", l.port);
	setenv("ASP_TEST_TOKEN_RIGHT", TOKEN, 1);
	cfg c = {.url = url, .token_env = "ASP_TEST_TOKEN_RIGHT"};
	asp_error err;
	asp_client *cl = open_client(&c, &err);
	char out[256] = "";
	CU_ASSERT(cl &&
	          run(cl, "printf %s \"${ASP_TOKEN-unset}\"", out, sizeof out, &err) == ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, "unset");
	asp_client_free(cl);
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);

	/* A bad address and a bad token file are refused with a reason. */
	st = listener_run_to_exit(&l, "nonsense", NULL, NULL, 5000);
	CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
	const char *missing[] = {"--token-file", "/nonexistent/token", NULL};
	st = listener_run_to_exit(&l, "127.0.0.1:0", missing, NULL, 5000);
	CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
	log = listener_log_text(&l);
	CU_ASSERT(log && strstr(log, "/nonexistent/token"));
	free(log);
}

/* ---- TLS -------------------------------------------------------------------------- */

static char ca_pem[256], other_ca_pem[256], cert_pem[256], key_pem[256];

/* A CA, a server certificate it signs (for 127.0.0.1 and localhost), and another CA. */
static int make_certs(void)
{
	const char *d = test_tmpdir();
	snprintf(ca_pem, sizeof ca_pem, "%s/ca.pem", d);
	snprintf(other_ca_pem, sizeof other_ca_pem, "%s/other-ca.pem", d);
	snprintf(cert_pem, sizeof cert_pem, "%s/server.pem", d);
	snprintf(key_pem, sizeof key_pem, "%s/server.key", d);
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
	         "set -e; cd '%s'; exec >openssl.log 2>&1\n"
	         "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=asp-test-ca "
	         "  -keyout ca.key -out ca.pem\n"
	         "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca "
	         "  -keyout other-ca.key -out other-ca.pem\n"
	         "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost "
	         "  -keyout server.key -out server.csr\n"
	         "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext\n"
	         "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
	         "  -days 2 -extfile san.ext -out server.pem\n",
	         d);
	int st = test_sh(cmd);
	if (st != 0)
		fprintf(stderr, "openssl failed (%d); see %s/openssl.log\n", st, d);
	return st;
}

static void test_tls(void)
{
	if (test_sh("command -v openssl >/dev/null") != 0) {
		fprintf(stderr, "\n    skipped: no openssl command\n");
		return;
	}
	CU_ASSERT_FATAL(make_certs() == 0);
	listener l;
	const char *a[] = {"--tls-cert", cert_pem, "--tls-key", key_pem, NULL};
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", a, TOKEN) == 0);
	CU_ASSERT(strncmp(l.url, "https://127.0.0.1:", 18) == 0);
	setenv("ASP_TEST_TOKEN_RIGHT", TOKEN, 1);
	raw r;
	raw_req(l.url, "/v1/health", NULL, 0, NULL, ca_pem, &r);
	CU_ASSERT(r.rc == CURLE_OK && r.status == 200);
	for (int ws = 0; ws < 2; ws++) {
		asp_error err;
		cfg good = {.url = l.url,
		            .websocket = ws,
		            .token_env = "ASP_TEST_TOKEN_RIGHT",
		            .ca_file = ca_pem};
		asp_client *c = open_client(&good, &err);
		char out[64] = "";
		asp_status st = c ? run(c, "echo tls", out, sizeof out, &err) : err.code;
		CU_ASSERT(st == ASP_OK && strcmp(out, "tls\n") == 0);
		if (st)
			fprintf(stderr, "\n(ws %d) %s: %s\n", ws, asp_strerror(st), err.message);
		asp_client_free(c);
		/* A CA that did not sign the certificate: refused, and the message says TLS. */
		cfg bad = good;
		bad.ca_file = other_ca_pem;
		c = open_client(&bad, &err);
		st = c ? hello(c, &err) : err.code;
		CU_ASSERT(st == ASP_E_TRANSPORT_ERROR && strstr(err.message, "TLS") != NULL);
		if (st != ASP_E_TRANSPORT_ERROR || !strstr(err.message, "TLS"))
			fprintf(stderr, "\n(ws %d, wrong CA) %s: %s\n", ws, asp_strerror(st),
			        err.message);
		asp_client_free(c);
		/* Plain http to the TLS port fails cleanly. */
		char plain[128];
		snprintf(plain, sizeof plain, "http://127.0.0.1:%d", l.port);
		cfg p = {.url = plain, .websocket = ws, .token_env = "ASP_TEST_TOKEN_RIGHT"};
		c = open_client(&p, &err);
		st = c ? hello(c, &err) : err.code;
		CU_ASSERT(st == ASP_E_TRANSPORT_ERROR || st == ASP_E_PROTOCOL_ERROR);
		asp_client_free(c);
	}
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
	/* A key that does not exist: a clear refusal at start. */
	const char *nokey[] = {"--tls-cert", cert_pem, "--tls-key", "/nonexistent.key", NULL};
	int st = listener_run_to_exit(&l, "127.0.0.1:0", nokey, NULL, 5000);
	CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0);
}

/* ---- many clients ----------------------------------------------------------------- */

#define NCLIENTS 64
#define CALLS    20

typedef struct worker {
	pthread_t th;
	asp_client *shared; /* or NULL: opens its own */
	const char *url;
	bool websocket;
	int index;
	int failures;
	asp_error err;
} worker;

static void *worker_main(void *arg)
{
	worker *w = arg;
	asp_client *c = w->shared;
	if (!c) {
		cfg cf = {.url = w->url, .websocket = w->websocket};
		c = open_client(&cf, &w->err);
		if (!c) {
			w->failures = CALLS;
			return NULL;
		}
	}
	char path[256], data[64], expect[64];
	snprintf(path, sizeof path, "%s/w%d-%d", test_tmpdir(), w->index, w->websocket);
	snprintf(data, sizeof data, "client %d", w->index);
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < CALLS; i++) {
		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = path;
		wp.data.data = (const uint8_t *)data;
		wp.data.len = strlen(data);
		asp_write_result wr;
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = path;
		asp_read_result rr;
		if (asp_write(c, &wp, &wr, a, &w->err) || asp_read(c, &rp, &rr, a, &w->err) ||
		    rr.data.len != strlen(data) || memcmp(rr.data.data, data, rr.data.len))
			w->failures++;
		if (i % 5 == 0) {
			char out[64];
			snprintf(expect, sizeof expect, "%d\n", w->index);
			char cmd[64];
			snprintf(cmd, sizeof cmd, "echo %d", w->index);
			if (run(c, cmd, out, sizeof out, &w->err) || strcmp(out, expect))
				w->failures++;
		}
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	if (!w->shared)
		asp_client_free(c);
	return NULL;
}

static void run_workers(worker *w, int n)
{
	for (int i = 0; i < n; i++)
		CU_ASSERT_FATAL(pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0);
	int failed = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].failures && !failed++)
			fprintf(stderr, "\nworker %d: %d failures, last: %s\n", i, w[i].failures,
			        w[i].err.message);
	}
	CU_ASSERT(failed == 0);
}

static void test_concurrent_clients(void)
{
	listener l;
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
	static worker w[NCLIENTS];
	/* 64 clients of their own, half over POST, half over the WebSocket. */
	int64_t t0 = now_ms();
	for (int i = 0; i < NCLIENTS; i++)
		w[i] = (worker){.url = l.url, .websocket = i % 2, .index = i};
	run_workers(w, NCLIENTS);
	int64_t t1 = now_ms();
	/* One client shared by 64 threads, each way: calls pipelined or pooled. */
	for (int ws = 0; ws < 2; ws++) {
		cfg cf = {.url = l.url, .websocket = ws};
		asp_error err;
		asp_client *shared = open_client(&cf, &err);
		CU_ASSERT_FATAL(shared != NULL);
		for (int i = 0; i < NCLIENTS; i++)
			w[i] =
			    (worker){.shared = shared, .url = l.url, .websocket = ws, .index = i};
		run_workers(w, NCLIENTS);
		asp_client_free(shared);
	}
	fprintf(stderr, "\n    64 clients x %d calls: %lld ms; shared: %lld ms\n", CALLS * 2 + 4,
	        (long long)(t1 - t0), (long long)(now_ms() - t1));
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
}

/* ---- stalled clients -------------------------------------------------------------- */

/*
 * Clients that stop mid-request, or never read a large answer, or flood a WebSocket
 * without reading, do not slow anybody else down.
 */
static void test_stalled_clients(void)
{
	listener l;
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
	char big[256];
	snprintf(big, sizeof big, "%s/big", test_tmpdir());
	char cmd[512];
	snprintf(cmd, sizeof cmd, "head -c %d /dev/urandom > '%s'", 12 * MIB, big);
	CU_ASSERT_FATAL(test_sh(cmd) == 0);

	/* 1: headers only, then silence. */
	int s1 = tcp_connect(l.port);
	const char *partial = "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n";
	CU_ASSERT(s1 >= 0 && write(s1, partial, strlen(partial)) > 0);
	/* 2: a whole request for 12 MiB that it never reads. */
	asp_buf req;
	asp_buf_init(&req);
	asp_read_params rp;
	asp_read_params_init(&rp);
	rp.path = big;
	CU_ASSERT_FATAL(asp_wire_request(&req, 1, ASP_OP_READ, &rp) == 0);
	int s2 = tcp_connect(l.port);
	int rcv = 4096;
	setsockopt(s2, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	char head[256];
	int hl = snprintf(head, sizeof head,
	                  "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
	                  req.len - 4);
	CU_ASSERT(s2 >= 0 && write(s2, head, (size_t)hl) == hl);
	CU_ASSERT(write(s2, req.data + 4, req.len - 4) == (ssize_t)(req.len - 4));
	/* 3: a WebSocket that sends 200 such requests and reads nothing. */
	ws_target t = {.address = "127.0.0.1",
	               .port = l.port,
	               .host_header = "127.0.0.1",
	               .path = "/v1/ws",
	               .url = l.url};
	asp_channel *ws = NULL;
	asp_error err;
	CU_ASSERT_FATAL(ws_channel_open(&t, 5000, &ws, &err) == ASP_OK);
	for (int i = 0; i < 200; i++) {
		req.data[6] = (uint8_t)(i & 0x7f); /* the id's fixint */
		asp_channel_send(ws, req.data, req.len, &err);
	}
	asp_buf_free(&req);
	sleep_ms(300);

	/* Meanwhile: another client, quick as ever. */
	cfg cf = {.url = l.url};
	asp_client *c = open_client(&cf, &err);
	CU_ASSERT_FATAL(c != NULL);
	int64_t t0 = now_ms(), worst = 0;
	for (int i = 0; i < 50; i++) {
		int64_t t1 = now_ms();
		CU_ASSERT(hello(c, &err) == ASP_OK);
		if (now_ms() - t1 > worst)
			worst = now_ms() - t1;
	}
	fprintf(stderr, "\n    50 hellos beside stalled clients: %lld ms (worst %lld ms)\n",
	        (long long)(now_ms() - t0), (long long)worst);
	CU_ASSERT(worst < 1000);
	asp_client_free(c);
	/* The agent holds the WebSocket's answers back instead of queueing them all. */
	char status[64];
	snprintf(status, sizeof status, "/proc/%d/status", (int)l.pid);
	FILE *f = fopen(status, "r");
	long rss_kb = 0;
	char line[256];
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			rss_kb = atol(line + 6);
	if (f)
		fclose(f);
	fprintf(stderr, "    agent RSS with a flooding WebSocket: %ld MiB\n", rss_kb / 1024);
	/*
	 * Bounded: 16 requests running at a time, each answer held once or twice (built,
	 * then queued) = ~400 MiB at most; unbounded would be 200 x 12 MiB, over 2 GiB.
	 */
	CU_ASSERT(rss_kb < 1024 * 1024);
	asp_channel_free(ws);
	close(s1);
	close(s2);
	CU_ASSERT(listener_stop(&l, SIGTERM, 20000) == 0);
}

/* ---- limits and hostile input ----------------------------------------------------- */

static void test_limits(void)
{
	listener l;
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
	size_t n = 16 * MIB + 1;
	uint8_t *body = calloc(1, n);
	raw r;
	raw_req(l.url, "/v1/rpc", body, n, NULL, NULL, &r);
	CU_ASSERT(r.rc == CURLE_OK && r.status == 413); /* the status, not a reset */
	CU_ASSERT(strstr(r.body, "too_large") != NULL);
	free(body);
	raw_req(l.url, "/v1/rpc", "garbage", 7, NULL, NULL, &r);
	CU_ASSERT(r.status == 400 && strstr(r.body, "protocol_error"));
	/* [1, 1, nil, {}] is a response, not a request. */
	static const uint8_t resp[] = {0x94, 0x01, 0x01, 0xc0, 0x80};
	raw_req(l.url, "/v1/rpc", resp, sizeof resp, NULL, NULL, &r);
	CU_ASSERT(r.status == 400);
	/* A request with bad params is an RPC-level answer: 200 with the error inside. */
	static const uint8_t bad[] = {0x94, 0x00, 0x05, 0xa4, 'r', 'e', 'a', 'd', 0x80};
	raw_req(l.url, "/v1/rpc", bad, sizeof bad, NULL, NULL, &r);
	CU_ASSERT(r.status == 200 && memmem(r.body, r.len, "invalid_argument", 16));
	raw_req(l.url, "/v1/rpc", NULL, 0, NULL, NULL, &r);
	CU_ASSERT(r.status == 405);
	raw_req(l.url, "/elsewhere", NULL, 0, NULL, NULL, &r);
	CU_ASSERT(r.status == 404);
	/* The connection survives all that: health still answers. */
	raw_req(l.url, "/v1/health", NULL, 0, NULL, NULL, &r);
	CU_ASSERT(r.status == 200);

	/* An undecodable WebSocket message closes that WebSocket with 1002. */
	ws_target t = {.address = "127.0.0.1",
	               .port = l.port,
	               .host_header = "127.0.0.1",
	               .path = "/v1/ws",
	               .url = l.url};
	asp_channel *ws;
	asp_error err;
	CU_ASSERT_FATAL(ws_channel_open(&t, 5000, &ws, &err) == ASP_OK);
	static const uint8_t garbage[] = {0, 0, 0, 2, 0xc1, 0xc1};
	CU_ASSERT(asp_channel_send(ws, garbage, sizeof garbage, &err) == ASP_OK);
	uint8_t *m = NULL;
	size_t len;
	asp_status st = asp_channel_recv(ws, 1 << 20, &m, &len, &err);
	CU_ASSERT(st == ASP_E_TRANSPORT_ERROR && strstr(err.message, "1002"));
	free(m);
	asp_channel_free(ws);
	/* Without the subprotocol the upgrade is refused. */
	int s = tcp_connect(l.port);
	const char *up = "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
	                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	                 "Sec-WebSocket-Version: 13\r\n\r\n";
	CU_ASSERT(write(s, up, strlen(up)) == (ssize_t)strlen(up));
	char ans[512] = "";
	ssize_t got = read(s, ans, sizeof ans - 1);
	CU_ASSERT(got > 0 && strncmp(ans, "HTTP/1.", 7) == 0 && strncmp(ans + 8, " 400", 4) == 0);
	close(s);

	/* Client side: a request above max_message never leaves. */
	cfg cf = {.url = l.url};
	asp_client *c = open_client(&cf, &err);
	asp_arena *a = asp_arena_new();
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = "/tmp/never-written";
	uint8_t *huge = calloc(1, 17 * MIB);
	wp.data.data = huge;
	wp.data.len = 17 * MIB;
	asp_write_result wr;
	CU_ASSERT(c && asp_write(c, &wp, &wr, a, &err) == ASP_E_TOO_LARGE);
	free(huge);
	asp_arena_free(a);
	asp_client_free(c);
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
}

/* ---- a listener that goes away ---------------------------------------------------- */

typedef struct slow_call {
	asp_client *c;
	asp_status st;
	asp_error err;
	int64_t ms;
} slow_call;

static void *slow_main(void *arg)
{
	slow_call *s = arg;
	int64_t t0 = now_ms();
	s->st = run(s->c, "sleep 3", NULL, 0, &s->err);
	s->ms = now_ms() - t0;
	return NULL;
}

static void test_listener_killed(void)
{
	for (int ws = 0; ws < 2; ws++) {
		listener l;
		CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
		cfg cf = {.url = l.url, .websocket = ws};
		asp_error err;
		asp_client *c = open_client(&cf, &err);
		CU_ASSERT_FATAL(c && hello(c, &err) == ASP_OK);
		slow_call s = {.c = c};
		pthread_t th;
		pthread_create(&th, NULL, slow_main, &s);
		sleep_ms(300);
		listener_stop(&l, SIGKILL, 5000);
		pthread_join(th, NULL);
		CU_ASSERT(s.st == ASP_E_TRANSPORT_ERROR && s.ms < 2500);
		if (s.st != ASP_E_TRANSPORT_ERROR || s.ms >= 2500)
			fprintf(stderr, "\n(ws %d) after %lld ms: %s: %s\n", ws, (long long)s.ms,
			        asp_strerror(s.st), s.err.message);
		/* Nobody listens: a refused connection names the URL. */
		asp_status st = hello(c, &err);
		CU_ASSERT(st == ASP_E_TRANSPORT_ERROR && strstr(err.message, l.url) != NULL);
		/* Back on the same port: the next call reconnects. */
		char addr[64];
		snprintf(addr, sizeof addr, "127.0.0.1:%d", l.port);
		listener l2;
		CU_ASSERT_FATAL(listener_start(&l2, addr, NULL, NULL) == 0);
		char out[64] = "";
		st = run(c, "echo back", out, sizeof out, &err);
		CU_ASSERT(st == ASP_OK && strcmp(out, "back\n") == 0);
		if (st)
			fprintf(stderr, "\n(ws %d) reconnect: %s\n", ws, err.message);
		asp_client_free(c);
		CU_ASSERT(listener_stop(&l2, SIGTERM, 10000) == 0);
	}
}

/* SIGTERM: the call in flight is answered, a new request is refused (503), exit 0. */
static void test_graceful_sigterm(void)
{
	for (int ws = 0; ws < 2; ws++) {
		listener l;
		CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
		cfg cf = {.url = l.url, .websocket = ws};
		asp_error err;
		asp_client *c = open_client(&cf, &err);
		CU_ASSERT_FATAL(c && hello(c, &err) == ASP_OK);
		slow_call s = {.c = c};
		pthread_t th;
		pthread_create(&th, NULL, slow_main, &s);
		sleep_ms(300);
		kill(l.pid, SIGTERM);
		sleep_ms(200);
		raw r;
		raw_req(l.url, "/v1/rpc", hello_req, sizeof hello_req, NULL, NULL, &r);
		CU_ASSERT(r.status == 503);
		pthread_join(th, NULL);
		CU_ASSERT(s.st == ASP_OK);
		if (s.st)
			fprintf(stderr, "\n(ws %d) %s: %s\n", ws, asp_strerror(s.st),
			        s.err.message);
		int st = listener_stop(&l, 0, 10000);
		CU_ASSERT(st == 0);
		if (st != 0)
			dump_log(&l);
		asp_client_free(c);
	}
}

/* ---- the relay -------------------------------------------------------------------- */

static asp_client *open_relay(const char *sock, asp_error *err)
{
	char arg[300];
	snprintf(arg, sizeof arg, "unix:%s", sock);
	const char *argv[] = {getenv("ASP_AGENT"), "--relay", arg, NULL};
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = ASP_TRANSPORT_STDIO;
	v.stdio.argv = argv;
	v.stdio.argc = 3;
	asp_client *c = NULL;
	return asp_client_open_view(&v, &c, err) ? NULL : c;
}

/*
 * asp-agent --relay unix:PATH as a stdio command: calls reach the daemon, and a process
 * started through one relay outlives it and is there for the next one.
 */
static void test_relay(void)
{
	char sock[256], addr[300];
	snprintf(sock, sizeof sock, "%s/asp.sock", test_tmpdir());
	snprintf(addr, sizeof addr, "unix:%s", sock);
	listener d;
	CU_ASSERT_FATAL(listener_start(&d, addr, NULL, NULL) == 0);
	struct stat sb;
	CU_ASSERT(stat(sock, &sb) == 0 && (sb.st_mode & 077) == 0); /* this user's only */
	asp_error err;
	asp_client *c = open_relay(sock, &err);
	CU_ASSERT_FATAL(c != NULL);
	char out[64] = "";
	CU_ASSERT(run(c, "echo relayed", out, sizeof out, &err) == ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, "relayed\n");
	asp_arena *a = asp_arena_new();
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = "sleep 30";
	sp.tag = "survivor";
	asp_spawn_result sr;
	CU_ASSERT_FATAL(asp_spawn(c, &sp, &sr, a, &err) == ASP_OK);
	asp_client_free(c); /* the relay process ends */

	c = open_relay(sock, &err);
	CU_ASSERT_FATAL(c != NULL);
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CU_ASSERT(asp_proc_list(c, &lp, &lr, a, &err) == ASP_OK);
	bool found = false;
	for (size_t i = 0; i < lr.procs.count; i++)
		found |= lr.procs.items[i].proc == sr.proc && lr.procs.items[i].running;
	CU_ASSERT(found);
	asp_proc_signal_params sg;
	asp_proc_signal_params_init(&sg);
	sg.proc = sr.proc;
	sg.signal = "KILL";
	asp_proc_signal_result sgr;
	CU_ASSERT(asp_proc_signal(c, &sg, &sgr, a, &err) == ASP_OK);
	asp_proc_wait_params wp;
	asp_proc_wait_params_init(&wp);
	wp.proc = sr.proc;
	wp.timeout_ms = 5000;
	asp_proc_wait_result wr;
	CU_ASSERT(asp_proc_wait(c, &wp, &wr, a, &err) == ASP_OK && wr.signal &&
	          strcmp(wr.signal, "KILL") == 0);
	asp_arena_free(a);
	asp_client_free(c);
	/* The daemon goes: a relay started now says why it cannot connect. */
	CU_ASSERT(listener_stop(&d, SIGTERM, 10000) == 0);
	c = open_relay(sock, &err);
	asp_status st = c ? hello(c, &err) : err.code;
	CU_ASSERT(st == ASP_E_TRANSPORT_ERROR && strstr(err.message, "cannot connect"));
	asp_client_free(c);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (!getenv("ASP_AGENT")) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("http transport and asp-agent --listen", NULL, NULL);
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
	    {"auth: 401 without or with a wrong token, health open", test_auth},
	    {"only loopback without a token", test_loopback_rule},
	    {"TLS: right CA, wrong CA, plain http", test_tls},
	    {"64 concurrent clients; one client, 64 threads", test_concurrent_clients},
	    {"stalled clients do not slow others", test_stalled_clients},
	    {"413, 400, WebSocket 1002, client-side too_large", test_limits},
	    {"listener killed mid-call: transport_error, then reconnect", test_listener_killed},
	    {"SIGTERM finishes the call in flight, refuses new ones", test_graceful_sigterm},
	    {"--relay unix:PATH to a --listen daemon", test_relay},
	};
	/* ASP_TEST_ONLY=WORD runs the tests whose names contain WORD (for debugging). */
	const char *only = getenv("ASP_TEST_ONLY");
	for (size_t i = 0; s && i < sizeof tests / sizeof *tests; i++)
		if ((!only || strstr(tests[i].name, only)) &&
		    !CU_add_test(s, tests[i].name, tests[i].fn))
			return 1;
	if (!s)
		return 1;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures();
	CU_cleanup_registry();
	curl_global_cleanup();
	return failed ? 1 : 0;
}
