/*
 * The http transport's default, both-mode (http.websocket absent, docs/design.md, ".asp.json"):
 * unary calls and bulk data over POST, a process's output over a WebSocket opened by the first
 * stream. A real asp-agent --listen sits behind a counting TCP relay (tcp_relay.h), so
 * what each connection carried is measured on the wire: no WebSocket before the first
 * spawn, one for many streams and threads, 64 MiB each way over POST and none of it over
 * the WebSocket (and, as a control, all of it over the WebSocket with "websocket": true),
 * a WebSocket cut mid-stream giving on_lost while POST calls go on and the next spawn
 * opening another; with "websocket": false nothing streams and hello says so.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "listener.h"
#include "lost_conn.h"
#include "tcp_relay.h"

#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB        (1024 * 1024)
#define BULK       (64 * MIB)
#define BULK_CHUNK (8 * MIB)
#define WAIT_MS    20000 /* bound on every wait: generous, the machine is shared */

#define WS   "GET /v1/ws"
#define POST "POST /v1/rpc"

static listener agent;

/* ---- a client through a fresh relay ----------------------------------------------- */

typedef struct setup {
	tcp_relay *relay;
	asp_client *c;
} setup;

static bool setup_open(setup *s, asp_http_websocket mode)
{
	memset(s, 0, sizeof *s);
	s->relay = tcp_relay_start(agent.port);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s->relay);
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = ASP_TRANSPORT_HTTP;
	v.http.url = tcp_relay_url(s->relay);
	v.http.websocket = mode;
	asp_error err;
	if (asp_client_open_view(&v, &s->c, &err)) {
		fprintf(stderr, "open %s: %s\n", v.http.url, err.message);
		CU_FAIL("open");
		tcp_relay_stop(s->relay);
		return false;
	}
	return true;
}

static void setup_close(setup *s)
{
	asp_client_free(s->c);
	tcp_relay_stop(s->relay);
}

static asp_status run(asp_client *c, const char *cmd, char *out, size_t cap, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	asp_exec_result r;
	asp_status st = asp_exec(c, &p, &r, a, err);
	if (st == ASP_OK && out)
		snprintf(out, cap, "%.*s", (int)r.stdout_data.len,
		         (const char *)r.stdout_data.data);
	asp_arena_free(a);
	return st;
}

/* ---- following a process ---------------------------------------------------------- */

typedef struct coll {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char out[8192];
	size_t out_len;
	bool exited, lost;
	int64_t exit_code;
	asp_status lost_code;
} coll;

static void coll_init(coll *c)
{
	memset(c, 0, sizeof *c);
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void coll_destroy(coll *c)
{
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
}

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	(void)offset;
	coll *c = user;
	if (stream != ASP_STREAM_STDOUT)
		return;
	pthread_mutex_lock(&c->mu);
	size_t k = sizeof c->out - 1 - c->out_len;
	k = len < k ? len : k;
	memcpy(c->out + c->out_len, data, k);
	c->out_len += k;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	c->exited = true;
	c->exit_code = ev->exit_code;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	c->lost = true;
	c->lost_code = err->code;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static const asp_proc_callbacks coll_cb = {
    .on_output = on_output, .on_exit = on_exit_ev, .on_lost = on_lost};

/* Waits (bounded) until the process ended (exit or lost) or its stdout holds `needle`. */
static bool coll_wait(coll *c, const char *needle)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&c->mu);
	bool ok;
	for (;;) {
		c->out[c->out_len] = '\0';
		ok = needle ? strstr(c->out, needle) != NULL : c->exited || c->lost;
		if (ok || pthread_cond_timedwait(&c->cv, &c->mu, &dl) != 0)
			break;
	}
	if (!ok) {
		c->out[c->out_len] = '\0';
		ok = needle ? strstr(c->out, needle) != NULL : c->exited || c->lost;
	}
	pthread_mutex_unlock(&c->mu);
	return ok;
}

static asp_status spawn(asp_client *cl, const char *cmd, coll *c, uint64_t *proc, asp_error *err)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = cmd;
	return asp_spawn_start(cl, &p, &coll_cb, c, proc, err);
}

/* ---- cases ------------------------------------------------------------------------ */

/* No WebSocket until the first stream; then one, for every later stream too. */
static void test_ws_opened_on_first_stream(void)
{
	setup s;
	if (!setup_open(&s, ASP_HTTP_WS_BOTH))
		return;
	asp_error err;
	char out[64];
	CU_ASSERT_EQUAL(run(s.c, "echo unary", out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, "unary\n");
	asp_arena *a = asp_arena_new();
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	CU_ASSERT_EQUAL_FATAL(asp_hello(s.c, &hp, &hr, a, &err), ASP_OK);
	bool spawn_listed = false, attach_listed = false;
	for (size_t i = 0; i < hr.ops.count; i++) {
		spawn_listed |= strcmp(hr.ops.items[i], "spawn") == 0;
		attach_listed |= strcmp(hr.ops.items[i], "proc_attach") == 0;
	}
	CU_ASSERT_TRUE(spawn_listed && attach_listed); /* what both-mode can do */
	asp_arena_free(a);
	relay_count ws = tcp_relay_count(s.relay, WS), post = tcp_relay_count(s.relay, POST);
	CU_ASSERT_EQUAL(ws.conns, 0);
	CU_ASSERT_TRUE(post.conns >= 1);

	for (int i = 0; i < 3; i++) {
		coll c;
		coll_init(&c);
		uint64_t proc = 0;
		CU_ASSERT_EQUAL_FATAL(spawn(s.c, "echo one; echo two; exit 3", &c, &proc, &err),
		                      ASP_OK);
		CU_ASSERT_TRUE(coll_wait(&c, NULL));
		CU_ASSERT_TRUE(c.exited);
		CU_ASSERT_EQUAL(c.exit_code, 3);
		CU_ASSERT_STRING_EQUAL(c.out, "one\ntwo\n");
		coll_destroy(&c);
		ws = tcp_relay_count(s.relay, WS);
		CU_ASSERT_EQUAL(ws.conns, 1); /* the first stream opened it; the others reuse it */
		CU_ASSERT_EQUAL(ws.open, 1);
	}
	setup_close(&s);
}

/* Many threads start the first stream at once: one WebSocket is opened, all stream. */
#define NTHREADS 8

typedef struct racer {
	asp_client *c;
	pthread_barrier_t *go;
	asp_status st;
	bool ok;
} racer;

static void *racer_main(void *arg)
{
	racer *r = arg;
	coll c;
	coll_init(&c);
	asp_error err;
	uint64_t proc;
	pthread_barrier_wait(r->go);
	r->st = spawn(r->c, "echo raced", &c, &proc, &err);
	if (r->st)
		fprintf(stderr, "spawn: %s\n", err.message);
	r->ok = r->st == ASP_OK && coll_wait(&c, NULL) && c.exited && c.exit_code == 0 &&
	        strcmp(c.out, "raced\n") == 0;
	coll_destroy(&c);
	return NULL;
}

static void test_first_stream_from_many_threads(void)
{
	setup s;
	if (!setup_open(&s, ASP_HTTP_WS_BOTH))
		return;
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, NTHREADS);
	racer r[NTHREADS];
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		r[i] = (racer){.c = s.c, .go = &go};
		pthread_create(&th[i], NULL, racer_main, &r[i]);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(r[i].st, ASP_OK);
		CU_ASSERT_TRUE(r[i].ok);
	}
	pthread_barrier_destroy(&go);
	CU_ASSERT_EQUAL(tcp_relay_count(s.relay, WS).conns, 1);
	setup_close(&s);
}

/* 64 MiB written and read back in 8 MiB calls; the bytes each kind of connection carried. */
static void bulk(setup *s, const char *path, relay_count *ws, relay_count *post)
{
	uint8_t *data = malloc(BULK_CHUNK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(data);
	relay_count ws0 = tcp_relay_count(s->relay, WS), post0 = tcp_relay_count(s->relay, POST);
	asp_arena *a = asp_arena_new();
	asp_error err;
	bool ok = true;
	for (int i = 0; ok && i < BULK / BULK_CHUNK; i++) {
		for (size_t k = 0; k < BULK_CHUNK; k++)
			data[k] = (uint8_t)(k * 31 + (size_t)i);
		asp_write_params p;
		asp_write_params_init(&p);
		p.path = path;
		p.data.data = data;
		p.data.len = BULK_CHUNK;
		p.has_offset = i > 0;
		p.offset = (uint64_t)i * BULK_CHUNK;
		asp_write_result r;
		ok = asp_write(s->c, &p, &r, a, &err) == ASP_OK && r.written == BULK_CHUNK;
		asp_arena_reset(a);
	}
	CU_ASSERT_TRUE(ok);
	for (int i = 0; ok && i < BULK / BULK_CHUNK; i++) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = path;
		p.offset = (uint64_t)i * BULK_CHUNK;
		p.has_length = true;
		p.length = BULK_CHUNK;
		asp_read_result r;
		ok = asp_read(s->c, &p, &r, a, &err) == ASP_OK && r.data.len == BULK_CHUNK;
		for (size_t k = 0; ok && k < BULK_CHUNK; k++)
			ok = r.data.data[k] == (uint8_t)(k * 31 + (size_t)i);
		asp_arena_reset(a);
	}
	CU_ASSERT_TRUE(ok);
	asp_arena_free(a);
	free(data);
	relay_count w = tcp_relay_count(s->relay, WS), p = tcp_relay_count(s->relay, POST);
	*ws = (relay_count){.up = w.up - ws0.up, .down = w.down - ws0.down};
	*post = (relay_count){.up = p.up - post0.up, .down = p.down - post0.down};
}

static void test_bulk_over_post(void)
{
	char path[300];
	snprintf(path, sizeof path, "%s/bulk.bin", test_tmpdir());
	setup s;
	if (!setup_open(&s, ASP_HTTP_WS_BOTH))
		return;
	/* A stream first, so the WebSocket is open and could carry the transfer. */
	coll c;
	coll_init(&c);
	asp_error err;
	uint64_t proc;
	CU_ASSERT_EQUAL_FATAL(spawn(s.c, "echo ready", &c, &proc, &err), ASP_OK);
	CU_ASSERT_TRUE(coll_wait(&c, NULL));
	coll_destroy(&c);
	CU_ASSERT_EQUAL(tcp_relay_count(s.relay, WS).open, 1);
	relay_count ws, post;
	bulk(&s, path, &ws, &post);
	CU_ASSERT_TRUE(post.up >= BULK && post.down >= BULK);
	CU_ASSERT_TRUE(ws.up + ws.down < 64 * 1024); /* at most the keepalive pings */
	if (!(post.up >= BULK && ws.up + ws.down < 64 * 1024))
		fprintf(stderr, "both: POST %llu up %llu down, WebSocket %llu up %llu down\n",
		        (unsigned long long)post.up, (unsigned long long)post.down,
		        (unsigned long long)ws.up, (unsigned long long)ws.down);
	setup_close(&s);

	/* The control: with "websocket": true the same transfer shows on the WebSocket. */
	if (!setup_open(&s, ASP_HTTP_WS_ONLY))
		return;
	bulk(&s, path, &ws, &post);
	CU_ASSERT_TRUE(ws.up >= BULK && ws.down >= BULK);
	CU_ASSERT_EQUAL(post.up + post.down, 0);
	setup_close(&s);
}

/* The WebSocket cut mid-stream: on_lost; POST calls go on; the next spawn opens another. */
static void test_ws_cut_mid_stream(void)
{
	setup s;
	if (!setup_open(&s, ASP_HTTP_WS_BOTH))
		return;
	asp_error err;
	coll c;
	coll_init(&c);
	uint64_t proc = 0;
	/* Output that goes on until it is killed; the sleep paces it, nothing waits on it. */
	CU_ASSERT_EQUAL_FATAL(
	    spawn(s.c, "echo started; while :; do echo tick; sleep 0.05; done", &c, &proc, &err),
	    ASP_OK);
	CU_ASSERT_TRUE_FATAL(coll_wait(&c, "started\n"));
	CU_ASSERT_EQUAL(tcp_relay_cut(s.relay, WS), 1);
	CU_ASSERT_TRUE(coll_wait(&c, NULL));
	CU_ASSERT_TRUE(c.lost);
	CU_ASSERT_FALSE(c.exited);
	CU_ASSERT_EQUAL(c.lost_code, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_TRUE(tcp_relay_wait_open(s.relay, WS, 0, WAIT_MS)); /* the cut took */

	/* POST calls are unaffected: the process outlived its WebSocket, and can be ended. */
	char out[64];
	CU_ASSERT_EQUAL(run(s.c, "echo still", out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, "still\n");
	asp_arena *a = asp_arena_new();
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CU_ASSERT_EQUAL_FATAL(asp_proc_list(s.c, &lp, &lr, a, &err), ASP_OK);
	bool running = false;
	for (size_t i = 0; i < lr.procs.count; i++)
		if (lr.procs.items[i].proc == proc)
			running = lr.procs.items[i].running;
	CU_ASSERT_TRUE(running);
	asp_proc_signal_params sp;
	asp_proc_signal_params_init(&sp);
	sp.proc = proc;
	sp.signal = "KILL";
	asp_proc_signal_result sr;
	CU_ASSERT_EQUAL(asp_proc_signal(s.c, &sp, &sr, a, &err), ASP_OK);
	asp_proc_wait_params wp;
	asp_proc_wait_params_init(&wp);
	wp.proc = proc;
	wp.timeout_ms = WAIT_MS;
	asp_proc_wait_result wr;
	CU_ASSERT_EQUAL(asp_proc_wait(s.c, &wp, &wr, a, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(wr.signal ? wr.signal : "", "KILL");
	asp_arena_free(a);
	coll_destroy(&c);

	/* The next stream opens a new WebSocket. */
	coll_init(&c);
	CU_ASSERT_EQUAL_FATAL(spawn(s.c, "echo again", &c, &proc, &err), ASP_OK);
	CU_ASSERT_TRUE(coll_wait(&c, NULL));
	CU_ASSERT_TRUE(c.exited);
	CU_ASSERT_STRING_EQUAL(c.out, "again\n");
	coll_destroy(&c);
	relay_count ws = tcp_relay_count(s.relay, WS);
	CU_ASSERT_EQUAL(ws.conns, 2);
	CU_ASSERT_EQUAL(ws.open, 1);
	setup_close(&s);
}

/* "websocket": false: POST only; spawn_start names the key, hello does not list attach. */
static void test_false_never_streams(void)
{
	setup s;
	if (!setup_open(&s, ASP_HTTP_WS_NEVER))
		return;
	asp_error err;
	coll c;
	coll_init(&c);
	uint64_t proc;
	CU_ASSERT_EQUAL(spawn(s.c, "echo x", &c, &proc, &err), ASP_E_UNSUPPORTED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "\"websocket\": false"));
	coll_destroy(&c);
	asp_arena *a = asp_arena_new();
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	CU_ASSERT_EQUAL_FATAL(asp_hello(s.c, &hp, &hr, a, &err), ASP_OK);
	for (size_t i = 0; i < hr.ops.count; i++)
		CU_ASSERT_NOT_EQUAL(strcmp(hr.ops.items[i], "proc_attach"), 0);
	asp_arena_free(a);
	CU_ASSERT_EQUAL(tcp_relay_count(s.relay, WS).conns, 0);
	setup_close(&s);
}

/* Every connection through the relay cut, as a network that drops them would. */
static int cut_all(void *ctx)
{
	return (int)tcp_relay_cut(ctx, "");
}

/*
 * The client's connections to the listener cut with each kind of stream open
 * (tests/common/lost_conn.c), in both-mode and over the WebSocket alone: streams end
 * with on_lost, calls in flight fail, the next call reconnects.
 */
static void test_lost_streams(void)
{
	static const asp_http_websocket modes[] = {ASP_HTTP_WS_BOTH, ASP_HTTP_WS_ONLY};
	for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
		setup s;
		if (!setup_open(&s, modes[i]))
			return;
		lost_target t = {.c = s.c,
		                 .kill = cut_all,
		                 .ctx = s.relay,
		                 .scratch = "/tmp",
		                 .name = i ? "HTTP, WebSocket only" : "HTTP, both-mode"};
		lost_conn_run_all(&t);
		setup_close(&s);
	}
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (listener_start(&agent, "127.0.0.1:0", NULL, NULL) < 0)
		return 1;
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("http-both", NULL, NULL);
	if (!s ||
	    !CU_add_test(s, "no WebSocket until the first stream, then one",
	                 test_ws_opened_on_first_stream) ||
	    !CU_add_test(s, "the first stream from 8 threads at once opens one WebSocket",
	                 test_first_stream_from_many_threads) ||
	    !CU_add_test(s, "64 MiB each way over POST, none over the WebSocket",
	                 test_bulk_over_post) ||
	    !CU_add_test(s, "a WebSocket cut mid-stream: lost, POST goes on, the next reopens",
	                 test_ws_cut_mid_stream) ||
	    !CU_add_test(s, "websocket false: nothing streams, hello says so",
	                 test_false_never_streams) ||
	    !CU_add_test(s, "connections cut with each kind of stream open: lost, then reconnect",
	                 test_lost_streams))
		return 1;
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	int st = listener_stop(&agent, SIGTERM, 10000);
	if (st != 0) {
		char *log = listener_log_text(&agent);
		fprintf(stderr, "asp-agent --listen did not exit 0 on SIGTERM (%d): %s\n", st,
		        log ? log : "");
		free(log);
		failed++;
	}
	return failed ? 1 : 0;
}
