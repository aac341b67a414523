/*
 * The http transport and asp-agent --listen, against real agents on loopback: auth, the
 * loopback rule, TLS (certificates made with the openssl command), 64 concurrent
 * clients, stalled clients, limits (413, 400, WebSocket 1002), a listener killed
 * mid-call, graceful SIGTERM, and the relay to a --listen unix:PATH daemon.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "http_addr.h"
#include "listener.h"
#include "testproc.h"
#include "wire.h"
#include "ws_client.h"

#include <CUnit/Basic.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
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
	unsigned call_ms; /* call_timeout_ms; 0: the default */
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
	v.call_timeout_ms = c->call_ms;
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

/* exec of `cmd` with `timeout_ms`: the status only. */
static asp_status run_within(asp_client *cl, const char *cmd, uint64_t timeout_ms, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	p.timeout_ms = timeout_ms;
	asp_exec_result r;
	asp_status st = asp_exec(cl, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

static asp_status stat_root(asp_client *cl, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "/";
	asp_stat_result r;
	asp_status st = asp_stat(cl, &p, &r, a, err);
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

/* A socket connected to 127.0.0.1:port with a receive buffer of `rcvbuf` (0: default). */
static int tcp_connect_rcvbuf(int port, int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && rcvbuf) /* before connect: the window it offers is set then */
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* A socket connected to 127.0.0.1:port, or -1. */
static int tcp_connect(int port)
{
	return tcp_connect_rcvbuf(port, 0);
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

/* utime + stime of `pid` in clock ticks, or -1. */
static long cpu_ticks(pid_t pid)
{
	char path[64], line[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(line, 1, sizeof line - 1, f);
	fclose(f);
	line[n] = '\0';
	char *p = strrchr(line, ')'); /* the name may hold spaces */
	unsigned long ut = 0, st = 0;
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

/* Waits until `pid` used no CPU over 300 ms (bounded by `ms`): whether it did. */
static bool wait_cpu_quiet(pid_t pid, int ms)
{
	int64_t deadline = now_ms() + ms;
	long last = cpu_ticks(pid);
	int64_t since = now_ms();
	while (now_ms() < deadline) {
		sleep_ms(50); /* polling a condition, not a synchronisation */
		long t = cpu_ticks(pid);
		if (t != last) {
			last = t;
			since = now_ms();
		} else if (now_ms() - since >= 300) {
			return true;
		}
	}
	return false;
}

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
	/*
	 * Once the agent has built what it will for them (its CPU time stops growing): on a
	 * loaded machine that takes seconds, and hellos timed during it would measure the
	 * machine's load rather than the stalled clients.
	 */
	CU_ASSERT(wait_cpu_quiet(l.pid, 60000));

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
	CU_ASSERT(worst < 3000); /* a few ms when it works; generous for a loaded machine */
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

/* ---- raw clients: bytes on a socket, for what libcurl and our ws client never send -- */

/* Bytes read from a socket and not consumed yet. */
typedef struct rd {
	int fd;
	uint8_t *data;
	size_t len, cap;
	bool eof;
} rd;

static void rd_init(rd *r, int fd)
{
	memset(r, 0, sizeof *r);
	r->fd = fd;
}

static void rd_free(rd *r)
{
	if (r->fd >= 0)
		close(r->fd);
	free(r->data);
	memset(r, 0, sizeof *r);
	r->fd = -1;
}

/* Reads until `want` bytes are buffered, EOF or the deadline: whether they are. */
static bool rd_fill(rd *r, size_t want, int64_t deadline)
{
	while (r->len < want && !r->eof) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return false;
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		if (r->cap - r->len < 65536) {
			size_t cap = r->cap ? r->cap * 2 : 131072;
			uint8_t *d = realloc(r->data, cap);
			if (!d)
				return false;
			r->data = d;
			r->cap = cap;
		}
		ssize_t n = read(r->fd, r->data + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r->eof = true; /* EOF, or a reset: both end what we can read */
		else
			r->len += (size_t)n;
	}
	return r->len >= want;
}

static void rd_consume(rd *r, size_t n)
{
	memmove(r->data, r->data + n, r->len - n);
	r->len -= n;
}

static bool write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		b += w;
		n -= (size_t)w;
	}
	return true;
}

/* One HTTP/1.1 response: the status (0: none came), its head and its body. */
typedef struct http_resp {
	int status;
	char head[2048]; /* status line and headers, NUL-terminated, lower-cased names kept */
	uint8_t body[8192];
	size_t blen;
} http_resp;

/* Reads one response with a Content-Length body; false when none came whole in time. */
static bool http_read(rd *r, http_resp *h, int ms)
{
	int64_t deadline = now_ms() + ms;
	memset(h, 0, sizeof *h);
	size_t end = 0;
	for (;;) {
		uint8_t *e = r->len ? memmem(r->data, r->len, "\r\n\r\n", 4) : NULL;
		if (e) {
			end = (size_t)(e - r->data) + 4;
			break;
		}
		if (!rd_fill(r, r->len + 1, deadline))
			return false;
	}
	size_t hl = end < sizeof h->head ? end : sizeof h->head - 1;
	memcpy(h->head, r->data, hl);
	h->head[hl] = '\0';
	if (strncmp(h->head, "HTTP/1.1 ", 9) == 0)
		h->status = atoi(h->head + 9);
	const char *cl = strcasestr(h->head, "\r\ncontent-length:");
	size_t blen = cl ? (size_t)strtoul(cl + 17, NULL, 10) : 0;
	if (!rd_fill(r, end + blen, deadline))
		return false;
	h->blen = blen < sizeof h->body ? blen : sizeof h->body;
	memcpy(h->body, r->data + end, h->blen);
	rd_consume(r, end + blen);
	return true;
}

/* A POST /v1/rpc of `req` (a frame from asp_wire_request) appended to `out`. */
static void http_post_bytes(asp_buf *out, const asp_buf *req)
{
	char head[160];
	int n = snprintf(head, sizeof head,
	                 "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
	                 req->len - 4);
	asp_buf_write(out, head, (size_t)n);
	asp_buf_write(out, (const char *)req->data + 4, req->len - 4);
}

/* The id of a response message, or -1. */
static long resp_id(const uint8_t *m, size_t len)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg msg;
	asp_error err;
	long id = -1;
	if (asp_wire_decode(m, len, &u, &msg, &err) == ASP_OK && msg.type == ASP_MSG_RESPONSE)
		id = (long)msg.id;
	msgpack_unpacked_destroy(&u);
	return id;
}

/* A WebSocket opened by hand on /v1/ws with asp.v1: the reader, or fd -1. */
static void ws_raw_open(rd *r, int port)
{
	rd_init(r, tcp_connect(port));
	const char *up = "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
	                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	                 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: asp.v1\r\n\r\n";
	http_resp h;
	if (r->fd < 0 || !write_all(r->fd, up, strlen(up)) || !http_read(r, &h, 10000) ||
	    h.status != 101) {
		fprintf(stderr, "\n    raw WebSocket upgrade failed: %s\n", h.head);
		rd_free(r);
	}
}

/* A client frame (FIN set) appended to `out`, masked unless `unmasked`. */
static void ws_frame(asp_buf *out, int opcode, const void *payload, size_t len, bool unmasked)
{
	uint8_t h[14];
	size_t n = 0;
	h[n++] = (uint8_t)(0x80 | opcode);
	uint8_t mbit = unmasked ? 0 : 0x80;
	if (len < 126) {
		h[n++] = (uint8_t)(mbit | len);
	} else if (len < 65536) {
		h[n++] = (uint8_t)(mbit | 126);
		h[n++] = (uint8_t)(len >> 8);
		h[n++] = (uint8_t)len;
	} else {
		h[n++] = (uint8_t)(mbit | 127);
		for (int i = 7; i >= 0; i--)
			h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
	}
	static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
	if (!unmasked)
		for (int i = 0; i < 4; i++)
			h[n++] = key[i];
	asp_buf_write(out, (const char *)h, n);
	size_t at = out->len;
	asp_buf_write(out, payload, len);
	if (!unmasked)
		for (size_t i = 0; i < len; i++)
			out->data[at + i] ^= key[i & 3];
}

/* One server frame: its opcode and payload (malloc'd), or false on timeout or EOF. */
static bool ws_read_frame(rd *r, int ms, int *opcode, uint8_t **payload, size_t *len)
{
	int64_t deadline = now_ms() + ms;
	if (!rd_fill(r, 2, deadline))
		return false;
	size_t hl = 2, n = r->data[1] & 0x7f;
	if (n == 126)
		hl = 4;
	else if (n == 127)
		hl = 10;
	if (!rd_fill(r, hl, deadline))
		return false;
	if (n == 126)
		n = (size_t)r->data[2] << 8 | r->data[3];
	else if (n == 127) {
		n = 0;
		for (int i = 0; i < 8; i++)
			n = n << 8 | r->data[2 + i];
	}
	if (!rd_fill(r, hl + n, deadline))
		return false;
	*opcode = r->data[0] & 0x0f;
	*payload = malloc(n ? n : 1);
	memcpy(*payload, r->data + hl, n);
	*len = n;
	rd_consume(r, hl + n);
	return true;
}

/* The next data message's response id, skipping notifications; -1 on timeout/close. */
static long ws_next_id(rd *r, int ms)
{
	int64_t deadline = now_ms() + ms;
	for (;;) {
		int op;
		uint8_t *p;
		size_t n;
		int64_t left = deadline - now_ms();
		if (left <= 0 || !ws_read_frame(r, (int)left, &op, &p, &n))
			return -1;
		long id = op == 2 ? resp_id(p, n) : -1;
		free(p);
		if (op == 8)
			return -1;
		if (id >= 0)
			return id;
	}
}

/* A request frame for `op` as a WebSocket message appended to `out`. */
static void ws_request(asp_buf *out, uint32_t id, asp_op_id op, const void *params)
{
	asp_buf req;
	asp_buf_init(&req);
	CU_ASSERT_FATAL(asp_wire_request(&req, id, op, params) == 0);
	ws_frame(out, 2, req.data + 4, req.len - 4, false);
	asp_buf_free(&req);
}

/*
 * A quick request on a WebSocket is answered while slow ones sent just before it on
 * the same WebSocket still run. The slow ones wait for a file the test makes only once
 * the quick answer came, so the order of the answers says it, not a timing: the old
 * listener counted a signalled worker as still idle, signalled it again for the next
 * request instead of starting a worker, and ran the hello behind an exec.
 */
#define SLOW   4
#define ROUNDS 5
static void test_ws_no_head_of_line(void)
{
	listener l;
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
	rd r;
	ws_raw_open(&r, l.port);
	CU_ASSERT_FATAL(r.fd >= 0);
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	for (int round = 0; round < ROUNDS; round++) {
		/* Workers made (up to SLOW), idle again once their answers came. */
		asp_buf out;
		asp_buf_init(&out);
		for (int i = 0; i < SLOW; i++)
			ws_request(&out, 1, ASP_OP_HELLO, &hp);
		CU_ASSERT_FATAL(write_all(r.fd, out.data, out.len));
		for (int i = 0; i < SLOW; i++)
			CU_ASSERT_FATAL(ws_next_id(&r, 20000) == 1);
		out.len = 0;
		char flag[256], cmd[512];
		snprintf(flag, sizeof flag, "%s/hol-%d", test_tmpdir(), round);
		snprintf(cmd, sizeof cmd,
		         "i=0; while [ ! -e '%s' ]; do i=$((i+1)); [ $i -gt 200 ] && exit 1; "
		         "sleep 0.05; done",
		         flag);
		asp_exec_params ep;
		asp_exec_params_init(&ep);
		ep.command = cmd;
		for (int i = 0; i < SLOW; i++)
			ws_request(&out, 10, ASP_OP_EXEC, &ep);
		ws_request(&out, 11, ASP_OP_HELLO, &hp);
		CU_ASSERT_FATAL(write_all(r.fd, out.data, out.len)); /* one write: one read */
		asp_buf_free(&out);
		long first = ws_next_id(&r, 30000);
		FILE *f = fopen(flag, "w");
		if (f)
			fclose(f);
		int slow_done = 0;
		for (int i = 0; i < SLOW; i++)
			slow_done += ws_next_id(&r, 30000) == 10;
		CU_ASSERT(first == 11 && slow_done == SLOW);
		if (first != 11) {
			fprintf(stderr, "\n    round %d: first answer %ld (the hello is 11)\n",
			        round, first);
			break;
		}
	}
	rd_free(&r);
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
}

/* The response id in a 200 answer's msgpack body, or -1. */
static long http_resp_id(const http_resp *h)
{
	return h->status == 200 ? resp_id(h->body, h->blen) : -1;
}

/*
 * HTTP/1.1 pipelining: requests sent back to back on one connection are all answered,
 * in order (the old listener ran the first POST and closed without answering either),
 * and a request followed by the client's shutdown(SHUT_WR) is still answered.
 */
static void test_http_pipelining(void)
{
	listener l;
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "sleep 0.2; echo two";
	asp_buf r1, r2, r3, all;
	asp_buf_init(&r1);
	asp_buf_init(&r2);
	asp_buf_init(&r3);
	asp_buf_init(&all);
	CU_ASSERT_FATAL(asp_wire_request(&r1, 1, ASP_OP_HELLO, &hp) == 0);
	CU_ASSERT_FATAL(asp_wire_request(&r2, 2, ASP_OP_EXEC, &ep) == 0);
	CU_ASSERT_FATAL(asp_wire_request(&r3, 3, ASP_OP_HELLO, &hp) == 0);
	/* A POST and two GETs: in one write, then in pieces. */
	http_post_bytes(&all, &r2);
	static const char health[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
	asp_buf_write(&all, health, sizeof health - 1);
	static const char nf[] = "GET /v1/elsewhere HTTP/1.1\r\nHost: x\r\n\r\n";
	asp_buf_write(&all, nf, sizeof nf - 1);
	for (int split = 0; split < 2; split++) {
		rd r;
		rd_init(&r, tcp_connect(l.port));
		CU_ASSERT_FATAL(r.fd >= 0);
		if (split) { /* each write cuts a request somewhere */
			for (size_t at = 0; at < all.len; at += 37)
				CU_ASSERT(write_all(r.fd, all.data + at,
				                    all.len - at < 37 ? all.len - at : 37));
		} else {
			CU_ASSERT(write_all(r.fd, all.data, all.len));
		}
		http_resp h;
		CU_ASSERT(http_read(&r, &h, 20000) && http_resp_id(&h) == 2);
		CU_ASSERT(memmem(h.body, h.blen, "two\n", 4) != NULL);
		CU_ASSERT(http_read(&r, &h, 20000) && h.status == 200 && h.blen == 3 &&
		          memcmp(h.body, "ok\n", 3) == 0);
		CU_ASSERT(http_read(&r, &h, 20000) && h.status == 404);
		if (h.status != 404)
			fprintf(stderr, "\n    split %d: last answer: %s\n", split, h.head);
		rd_free(&r);
	}
	/*
	 * Two POSTs back to back: the first is answered, the second refused with a status
	 * that says why (lws 4.1 cannot parse a POST from what it read ahead), then EOF.
	 */
	{
		asp_buf two;
		asp_buf_init(&two);
		http_post_bytes(&two, &r1);
		http_post_bytes(&two, &r3);
		rd r;
		rd_init(&r, tcp_connect(l.port));
		CU_ASSERT_FATAL(r.fd >= 0);
		CU_ASSERT(write_all(r.fd, two.data, two.len));
		asp_buf_free(&two);
		http_resp h;
		CU_ASSERT(http_read(&r, &h, 20000) && http_resp_id(&h) == 1);
		bool got = http_read(&r, &h, 20000);
		CU_ASSERT(got && (http_resp_id(&h) == 3 ||
		                  (h.status == 400 && memmem(h.body, h.blen, "pipelined", 9))));
		if (!got)
			fprintf(stderr, "\n    two POSTs: no second answer\n");
		rd_free(&r);
	}
	/* A request, then EOF from the client: answered, then the connection closes. */
	for (int get = 0; get < 2; get++) {
		rd r;
		rd_init(&r, tcp_connect(l.port));
		CU_ASSERT_FATAL(r.fd >= 0);
		asp_buf one;
		asp_buf_init(&one);
		if (get)
			asp_buf_write(&one, health, sizeof health - 1);
		else
			http_post_bytes(&one, &r2);
		CU_ASSERT(write_all(r.fd, one.data, one.len));
		asp_buf_free(&one);
		CU_ASSERT(shutdown(r.fd, SHUT_WR) == 0);
		http_resp h;
		bool got = http_read(&r, &h, 20000);
		CU_ASSERT(got && h.status == 200);
		CU_ASSERT(get || http_resp_id(&h) == 2);
		if (!got)
			fprintf(stderr, "\n    %s then shutdown(SHUT_WR): no answer\n",
			        get ? "GET" : "POST");
		CU_ASSERT(!rd_fill(&r, 1, now_ms() + 20000) && r.eof);
		rd_free(&r);
	}
	/*
	 * The same with an answer larger than the socket takes at once (8 MiB, read through
	 * a small receive buffer): all of it comes before the connection closes.
	 */
	{
		char big[256], cmd[512];
		snprintf(big, sizeof big, "%s/pipe-big", test_tmpdir());
		snprintf(cmd, sizeof cmd, "head -c %d /dev/zero > '%s'", 8 * MIB, big);
		CU_ASSERT_FATAL(test_sh(cmd) == 0);
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = big;
		asp_buf rq, one;
		asp_buf_init(&rq);
		asp_buf_init(&one);
		CU_ASSERT_FATAL(asp_wire_request(&rq, 4, ASP_OP_READ, &rp) == 0);
		http_post_bytes(&one, &rq);
		rd r;
		rd_init(&r, tcp_connect_rcvbuf(l.port, 4096));
		CU_ASSERT_FATAL(r.fd >= 0);
		CU_ASSERT(write_all(r.fd, one.data, one.len));
		CU_ASSERT(shutdown(r.fd, SHUT_WR) == 0);
		http_resp h;
		int64_t t0 = now_ms();
		bool got = http_read(&r, &h, 60000); /* false unless all Content-Length came */
		CU_ASSERT(got && h.status == 200);
		if (!got)
			fprintf(stderr,
			        "\n    8 MiB read, shutdown(SHUT_WR): %zu bytes in %lld ms\n",
			        r.len, (long long)(now_ms() - t0));
		rd_free(&r);
		/*
		 * Keep-alive, not pipelined: each request sent as soon as the last answer came
		 * whole. The next request must find the last one over even while lws still
		 * held its tail (the listener closed such connections at one point).
		 */
		rd_init(&r, tcp_connect_rcvbuf(l.port, 4096));
		CU_ASSERT_FATAL(r.fd >= 0);
		int ok = 0;
		for (int i = 0; i < 5; i++)
			ok += write_all(r.fd, one.data, one.len) && http_read(&r, &h, 60000) &&
			      h.status == 200;
		CU_ASSERT(ok == 5);
		if (ok != 5)
			fprintf(stderr, "\n    8 MiB reads on one connection: %d of 5 answered\n",
			        ok);
		rd_free(&r);
		/* The same through the http transport (libcurl reuses its connection at once). */
		cfg cf = {.url = l.url};
		asp_error err;
		asp_client *c = open_client(&cf, &err);
		CU_ASSERT_FATAL(c != NULL);
		asp_arena *a = asp_arena_new();
		int reads = 0;
		for (int i = 0; i < 16; i++) {
			asp_read_result rr;
			asp_status st = asp_read(c, &rp, &rr, a, &err);
			reads += st == ASP_OK && rr.data.len == 8 * MIB;
			if (st)
				fprintf(stderr, "\n    8 MiB read %d over POST: %s\n", i,
				        err.message);
			asp_arena_reset(a);
		}
		CU_ASSERT(reads == 16);
		asp_arena_free(a);
		asp_client_free(c);
		asp_buf_free(&rq);
		asp_buf_free(&one);
	}
	asp_buf_free(&r1);
	asp_buf_free(&r2);
	asp_buf_free(&r3);
	asp_buf_free(&all);
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
}

/* Sends `req` on a new connection and reads one answer; the status, 0 when none came. */
static int raw_exchange(int port, const void *req, size_t len, http_resp *h)
{
	rd r;
	rd_init(&r, tcp_connect(port));
	if (r.fd < 0)
		return 0;
	/* Without blocking: a server that stops reading a huge request must not hang us. */
	const uint8_t *p = req;
	while (len > 0) {
		ssize_t w = send(r.fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = {.fd = r.fd, .events = POLLOUT | POLLIN};
			if (poll(&pf, 1, 10000) <= 0 || (pf.revents & ~POLLOUT))
				break; /* an answer (or the end) came before all was sent */
			continue;
		}
		if (w <= 0)
			break;
		p += w;
		len -= (size_t)w;
	}
	bool ok = http_read(&r, h, 20000);
	rd_free(&r);
	return ok ? h->status : 0;
}

/* A Content-Length that is not only digits is 400 (the old listener took "+10" as 10). */
static void test_http_strict(void)
{
	listener l;
	CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
	http_resp h;
	static const char plus[] = "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: +10\r\n\r\n"
	                           "\224\000\001\245hello\200";
	CU_ASSERT(raw_exchange(l.port, plus, sizeof plus - 1, &h) == 400);
	CU_ASSERT(memmem(h.body, h.blen, "Content-Length", 14) != NULL);
	static const char good[] = "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
	                           "\224\000\001\245hello\200";
	CU_ASSERT(raw_exchange(l.port, good, sizeof good - 1, &h) == 200);

	/* The listener is fine after all that. */
	static const char hget[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
	CU_ASSERT(raw_exchange(l.port, hget, sizeof hget - 1, &h) == 200);
	CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
}

/* ---- a fake listener: answers every POST with fixed bytes ------------------------- */

typedef struct fake_srv {
	int lfd, port;
	const uint8_t *body;
	size_t blen;
	pthread_t th;
} fake_srv;

static void *fake_main(void *arg)
{
	fake_srv *f = arg;
	for (;;) {
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			return NULL; /* the listening socket was shut down */
		rd r;
		rd_init(&r, fd);
		http_resp req; /* a request parses as a response would: head, Content-Length */
		while (http_read(&r, &req, 10000)) {
			char head[160];
			int n = snprintf(head, sizeof head,
			                 "HTTP/1.1 200 OK\r\nContent-Type: application/msgpack\r\n"
			                 "Content-Length: %zu\r\n\r\n",
			                 f->blen);
			if (!write_all(fd, head, (size_t)n) || !write_all(fd, f->body, f->blen))
				break;
		}
		rd_free(&r);
	}
}

static void fake_start(fake_srv *f, const uint8_t *body, size_t blen)
{
	f->body = body;
	f->blen = blen;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof sa;
	CU_ASSERT_FATAL(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	                listen(f->lfd, 8) == 0 &&
	                getsockname(f->lfd, (struct sockaddr *)&sa, &sl) == 0);
	f->port = ntohs(sa.sin_port);
	CU_ASSERT_FATAL(pthread_create(&f->th, NULL, fake_main, f) == 0);
}

static void fake_stop(fake_srv *f)
{
	shutdown(f->lfd, SHUT_RDWR); /* accept returns */
	pthread_join(f->th, NULL);
	close(f->lfd);
}

/*
 * An answer that is no response, or the response to another request: the error names
 * the reason once. The old code formatted err->message into itself (overlapping
 * vsnprintf), which printed the start of the new message where the reason belonged.
 */
static void test_client_bad_answer(void)
{
	static const uint8_t garbage[] = {0xc1, 0xc1};
	/* [1, 99, nil, {}]: a response, to request 99 */
	static const uint8_t other[] = {0x94, 0x01, 0x63, 0xc0, 0x80};
	for (int i = 0; i < 2; i++) {
		fake_srv f;
		fake_start(&f, i ? other : garbage, i ? sizeof other : sizeof garbage);
		char url[64];
		snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
		cfg cf = {.url = url};
		asp_error err;
		asp_client *c = open_client(&cf, &err);
		asp_status st = c ? hello(c, &err) : err.code;
		CU_ASSERT(st == ASP_E_PROTOCOL_ERROR);
		const char *m = strstr(err.message, "is undecodable (");
		CU_ASSERT(m != NULL);
		CU_ASSERT(m && strstr(m, "the listener's answer") == NULL);
		CU_ASSERT(!i || strstr(err.message, "(not the response to request ") != NULL);
		if (!m || strstr(m, "the listener's answer") ||
		    (i && !strstr(err.message, "(not the response to request ")))
			fprintf(stderr, "\n    %s\n", err.message);
		asp_client_free(c);
		fake_stop(&f);
	}
}

/* ---- a listener that goes away ---------------------------------------------------- */

typedef struct slow_call {
	asp_client *c;
	const char *cmd; /* "sleep 3" when none */
	asp_status st;
	asp_error err;
	int64_t ms;
} slow_call;

static void *slow_main(void *arg)
{
	slow_call *s = arg;
	int64_t t0 = now_ms();
	s->st = run(s->c, s->cmd ? s->cmd : "sleep 3", NULL, 0, &s->err);
	s->ms = now_ms() - t0;
	return NULL;
}

/*
 * A SIGSTOPped listener (docs/faults.md): over POST a call fails with timeout naming the
 * op and the limit, an exec's limit is its timeout_ms + call_timeout_ms, an exec with no
 * limit of its own fails when the liveness probe goes unanswered, hello is answered from
 * the first answer; over the WebSocket the engine's deadline holds, at the config's
 * call_timeout_ms. After SIGCONT calls work again. Without deadlines each of these calls
 * waits for ever.
 */
static void test_stopped_listener(void)
{
	for (int ws = 0; ws < 2; ws++) {
		listener l;
		CU_ASSERT_FATAL(listener_start(&l, "127.0.0.1:0", NULL, NULL) == 0);
		cfg cf = {.url = l.url, .websocket = ws, .call_ms = 400};
		asp_error err;
		asp_client *c = open_client(&cf, &err);
		CU_ASSERT_FATAL(c && hello(c, &err) == ASP_OK && stat_root(c, &err) == ASP_OK);
		CU_ASSERT_FATAL(t_stop(l.pid, 10000));
		CU_ASSERT_EQUAL(hello(c, &err), ASP_OK);
		int64_t t0 = now_ms();
		asp_status st = stat_root(c, &err);
		int64_t took = now_ms() - t0;
		CU_ASSERT(st == ASP_E_TIMEOUT && took >= 350 && took < 10000);
		CU_ASSERT(strstr(err.message, "stat") && strstr(err.message, "400 ms"));
		if (st != ASP_E_TIMEOUT || !strstr(err.message, "400 ms"))
			fprintf(stderr, "\n(ws %d) stat after %lld ms: %s: %s\n", ws,
			        (long long)took, asp_strerror(st), err.message);
		if (!ws) {
			st = run_within(c, "true", 300, &err);
			CU_ASSERT(st == ASP_E_TIMEOUT && strstr(err.message, "timeout_ms 300"));
			st = run_within(c, "true", 0, &err);
			CU_ASSERT(st == ASP_E_TRANSPORT_ERROR &&
			          strstr(err.message, "liveness probe"));
			if (st != ASP_E_TRANSPORT_ERROR)
				fprintf(stderr, "\nexec without a limit: %s: %s\n",
				        asp_strerror(st), err.message);
		}
		kill(l.pid, SIGCONT);
		/* the WebSocket's second miss may have closed it: the next call reconnects */
		st = stat_root(c, &err);
		if (st == ASP_E_TRANSPORT_ERROR)
			st = stat_root(c, &err);
		CU_ASSERT_EQUAL(st, ASP_OK);
		asp_client_free(c);
		CU_ASSERT(listener_stop(&l, SIGTERM, 10000) == 0);
	}
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
		/* the call must fail when the listener dies, far sooner than its command ends */
		slow_call s = {.c = c, .cmd = "sleep 30"};
		pthread_t th;
		pthread_create(&th, NULL, slow_main, &s);
		sleep_ms(300);
		listener_stop(&l, SIGKILL, 5000);
		pthread_join(th, NULL);
		CU_ASSERT(s.st == ASP_E_TRANSPORT_ERROR && s.ms < 10000);
		if (s.st != ASP_E_TRANSPORT_ERROR || s.ms >= 10000)
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

/* ---- http.url, read as libcurl reads it ---------------------------------------------- */

static void expect_url(const char *url, const char *host, int port, bool tls, const char *prefix)
{
	http_addr a;
	char why[600] = "";
	int rc = http_addr_parse_url(url, &a, why, sizeof why);
	bool ok = rc == 0 && strcmp(a.host, host) == 0 && a.port == port && a.tls == tls &&
	          strcmp(a.prefix, prefix) == 0;
	if (!ok)
		fprintf(stderr, "%s: rc %d (%s) host '%s' port %d tls %d prefix '%s'\n", url, rc,
		        why, a.host, a.port, a.tls, a.prefix);
	CU_ASSERT(ok);
}

static void expect_url_refused(const char *url, const char *says)
{
	http_addr a;
	char why[600] = "";
	int rc = http_addr_parse_url(url, &a, why, sizeof why);
	bool ok = rc < 0 && strstr(why, says) != NULL;
	if (!ok)
		fprintf(stderr, "%s: rc %d, '%s' does not say '%s'\n", url, rc, why, says);
	CU_ASSERT(ok);
}

static void test_url_parse(void)
{
	expect_url("http://127.0.0.1:8722", "127.0.0.1", 8722, false, "");
	expect_url("https://[::1]/asp/", "::1", 443, true, "/asp");
	expect_url("http://h/v1?x=1#y", "h", 80, false, "/v1");
	expect_url("http://sandbox.example:1/a/b//", "sandbox.example", 1, false, "/a/b");
	expect_url("https://h//", "h", 443, true, "");
	expect_url_refused("ftp://h", "'ftp://h' is not an http:// or https:// URL");
	expect_url_refused("127.0.0.1:8722", "is not an http:// or https:// URL");
	expect_url_refused("http://", "expected http(s)://HOST[:PORT][/PREFIX]");
	expect_url_refused("http://h:65536", "expected http(s)://HOST[:PORT][/PREFIX] (Port");
	expect_url_refused("http://me:secret@h/", "the token goes in http.token_env");
	char long_path[700];
	snprintf(long_path, sizeof long_path, "http://h/%0520d", 0); /* prefix: 511 at most */
	expect_url_refused(long_path, "the path is too long");
}

int main(int argc, char **argv)
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
	    {"http.url: host, port and prefix as libcurl reads them, refusals", test_url_parse},
	    {"auth: 401 without or with a wrong token, health open", test_auth},
	    {"only loopback without a token", test_loopback_rule},
	    {"TLS: right CA, wrong CA, plain http", test_tls},
	    {"64 concurrent clients; one client, 64 threads", test_concurrent_clients},
	    {"stalled clients do not slow others", test_stalled_clients},
	    {"413, 400, WebSocket 1002, client-side too_large", test_limits},
	    {"WebSocket: a quick request is not held behind a slow one", test_ws_no_head_of_line},
	    {"HTTP/1.1 pipelining, and an answer after the client's EOF", test_http_pipelining},
	    {"400 for a Content-Length of +N", test_http_strict},
	    {"client: an answer that is no response names the reason", test_client_bad_answer},
	    {"a SIGSTOPped listener: deadlines, probe, hello kept", test_stopped_listener},
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
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	curl_global_cleanup();
	return failed ? 1 : 0;
}
