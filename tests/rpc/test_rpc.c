/*
 * The RPC engine (core/src/rpc/rpc.c) and the fd channel: against a real asp-agent over
 * a socketpair, and against a scripted fake responder for what a real one never sends.
 */
#include "cu_run.h"
#include "rpc/rpc.h"
#include "testproc.h"

#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *agent;

/* An engine on a real agent whose stdin and stdout are one end of a socketpair. */
typedef struct fixture {
	tproc p;
	asp_rpc *rpc;
} fixture;

static void fx_open(fixture *f, size_t max_message)
{
	char *argv[] = {(char *)agent, "--stdio", NULL};
	CU_ASSERT_FATAL(tproc_spawn_socket(&f->p, argv) == 0);
	int fd = dup(f->p.out); /* the channel owns its copy */
	asp_channel *ch;
	asp_error err;
	CU_ASSERT_FATAL(
	    asp_fd_channel_new(fd, fd, ASP_FDCH_OWN_FDS | ASP_FDCH_WAKEABLE, &ch, &err) == ASP_OK);
	CU_ASSERT_FATAL(asp_rpc_new(ch, max_message, &f->rpc, &err) == ASP_OK);
}

static void fx_close(fixture *f)
{
	asp_rpc_free(f->rpc);
	tproc_close_in(&f->p);
	int st = tproc_wait(&f->p, 5000, NULL);
	(void)st;
	tproc_close(&f->p);
}

static asp_status do_stat(asp_rpc *rpc, const char *path, asp_error *err)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	asp_stat_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_rpc_ops.stat(rpc, &p, &r, a, err);
	if (st == ASP_OK)
		CU_ASSERT_STRING_EQUAL(r.type, "dir");
	asp_arena_free(a);
	return st;
}

static void test_basic_calls(void)
{
	fixture f;
	fx_open(&f, 0);
	asp_error err;
	asp_arena *a = asp_arena_new();

	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	CU_ASSERT_EQUAL_FATAL(asp_rpc_ops.hello(f.rpc, &hp, &hr, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(hr.protocol, ASP_PROTOCOL);
	CU_ASSERT_EQUAL(hr.max_message, ASP_MAX_MESSAGE_DEFAULT);

	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_OK);
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = "/nonexistent/x";
	asp_stat_result sr;
	CU_ASSERT_EQUAL(asp_rpc_ops.stat(f.rpc, &sp, &sr, a, &err), ASP_E_NOT_FOUND);
	CU_ASSERT_EQUAL(err.code, ASP_E_NOT_FOUND);

	/* bins both ways: 1 MiB through cat; the result points into the adopted frame */
	size_t n = 1 << 20;
	uint8_t *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (uint8_t)(i * 7);
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "cat";
	ep.stdin_data.data = data;
	ep.stdin_data.len = n;
	asp_exec_result er;
	CU_ASSERT_EQUAL_FATAL(asp_rpc_ops.exec(f.rpc, &ep, &er, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(er.exit_code, 0);
	CU_ASSERT_EQUAL(er.stdout_data.len, n);
	CU_ASSERT(er.stdout_data.len == n && memcmp(er.stdout_data.data, data, n) == 0);
	free(data);
	asp_arena_free(a);
	fx_close(&f);
}

/* A request larger than max_message fails locally; the connection stays usable. */
static void test_request_too_large(void)
{
	fixture f;
	fx_open(&f, 64 * 1024);
	asp_error err;
	asp_arena *a = asp_arena_new();
	static uint8_t big[100 * 1024];
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = "/tmp/never-written";
	wp.data.data = big;
	wp.data.len = sizeof big;
	asp_write_result wr;
	CU_ASSERT_EQUAL(asp_rpc_ops.write(f.rpc, &wp, &wr, a, &err), ASP_E_TOO_LARGE);
	CU_ASSERT(strstr(err.message, "max_message") != NULL);
	CU_ASSERT(asp_rpc_alive(f.rpc));
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_OK);
	asp_arena_free(a);
	fx_close(&f);
}

typedef struct thread_arg {
	asp_rpc *rpc;
	int calls, ok;
	const char *command; /* exec this instead of stat */
	asp_status st;
	asp_error err;
	int64_t done_ms;
} thread_arg;

static void *caller(void *v)
{
	thread_arg *t = v;
	for (int i = 0; i < t->calls; i++) {
		if (t->command) {
			asp_exec_params p;
			asp_exec_params_init(&p);
			p.command = t->command;
			asp_exec_result r;
			asp_arena *a = asp_arena_new();
			t->st = asp_rpc_ops.exec(t->rpc, &p, &r, a, &t->err);
			asp_arena_free(a);
		} else {
			t->st = do_stat(t->rpc, "/", &t->err);
		}
		t->ok += t->st == ASP_OK;
	}
	t->done_ms = t_now_ms();
	return NULL;
}

/* Many threads pipelining on one connection. */
static void test_threads(void)
{
	fixture f;
	fx_open(&f, 0);
	enum { N = 8, CALLS = 300 };
	pthread_t th[N];
	thread_arg ta[N];
	for (int i = 0; i < N; i++) {
		ta[i] = (thread_arg){.rpc = f.rpc, .calls = CALLS};
		pthread_create(&th[i], NULL, caller, &ta[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(ta[i].ok, CALLS);
	}
	fx_close(&f);
}

/* A slow call does not hold up a fast one on the same connection. */
static void test_out_of_order(void)
{
	fixture f;
	fx_open(&f, 0);
	pthread_t th;
	/* 3 s: the stat is answered first even when a loaded machine is slow to serve it. */
	thread_arg slow = {.rpc = f.rpc, .calls = 1, .command = "sleep 3"};
	int64_t t0 = t_now_ms();
	pthread_create(&th, NULL, caller, &slow);
	for (int64_t until = t0 + 20000; t_children_of(f.p.pid) < 1 && t_now_ms() < until;)
		usleep(10 * 1000); /* the exec is running: the stat goes after it */
	asp_error err;
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_OK);
	int64_t stat_ms = t_now_ms();
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(slow.st, ASP_OK);
	CU_ASSERT(stat_ms < slow.done_ms);
	CU_ASSERT(slow.done_ms - t0 >= 2900);
	fx_close(&f);
}

/* The responder dies: the pending call fails at once, later calls immediately. */
static void test_dead_connection(void)
{
	fixture f;
	fx_open(&f, 0);
	asp_error err;
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_OK);
	pthread_t th;
	thread_arg slow = {.rpc = f.rpc, .calls = 1, .command = "sleep 10"};
	pthread_create(&th, NULL, caller, &slow);
	for (int64_t until = t_now_ms() + 20000; t_children_of(f.p.pid) < 1 && t_now_ms() < until;)
		usleep(10 * 1000); /* the call is in flight */
	int64_t t0 = t_now_ms();
	kill(f.p.pid, SIGKILL);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(slow.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(slow.done_ms - t0 < 5000); /* not the 10 s of the sleep */
	CU_ASSERT(!asp_rpc_alive(f.rpc));
	t0 = t_now_ms();
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(t_now_ms() - t0 < 50);
	/* what the first to notice saw: EOF ("closed"), a reset read or a broken pipe */
	CU_ASSERT(strstr(err.message, "connection") != NULL);
	fx_close(&f);
}

/* ---- a scripted responder --------------------------------------------------------- */

typedef struct fake {
	int fd; /* our end */
	asp_rpc *rpc;
	int notices; /* notifications the callback saw */
	uint64_t notice_proc;
} fake;

static void on_notice(void *ctx, asp_notice_id n, const void *params, asp_arena *a)
{
	(void)a;
	fake *f = ctx;
	if (n == ASP_NOTICE_OUTPUT) {
		const asp_output_event *e = params;
		f->notice_proc = e->proc;
		CU_ASSERT(e->data.len == 3 && memcmp(e->data.data, "abc", 3) == 0);
	}
	f->notices++;
}

static void fake_open(fake *f)
{
	int sv[2];
	CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	f->fd = sv[0];
	f->notices = 0;
	asp_channel *ch;
	asp_error err;
	CU_ASSERT_FATAL(asp_fd_channel_new(sv[1], sv[1], ASP_FDCH_OWN_FDS | ASP_FDCH_WAKEABLE, &ch,
	                                   &err) == ASP_OK);
	CU_ASSERT_FATAL(asp_rpc_new(ch, 4096, &f->rpc, &err) == ASP_OK);
	asp_rpc_set_notify(f->rpc, on_notice, f);
}

static void fake_close(fake *f)
{
	asp_rpc_free(f->rpc);
	close(f->fd);
}

/* Reads one request from the engine; returns its id. */
static uint32_t fake_read_request(fake *f)
{
	uint8_t *body;
	size_t len;
	CU_ASSERT_EQUAL_FATAL(t_read_frame(f->fd, 5000, &body, &len), 1);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	asp_error e;
	CU_ASSERT_EQUAL_FATAL(asp_wire_decode(body, len, &u, &m, &e), ASP_OK);
	CU_ASSERT_EQUAL(m.type, ASP_MSG_REQUEST);
	uint32_t id = m.id;
	msgpack_unpacked_destroy(&u);
	free(body);
	return id;
}

static void fake_send(fake *f, const void *data, size_t len)
{
	CU_ASSERT_FATAL(t_write_all(f->fd, data, len) == 0);
}

static void fake_send_msg(fake *f, msgpack_sbuffer *sb)
{
	asp_buf b;
	asp_buf_init(&b);
	t_add_framed(&b, sb->data, sb->size);
	fake_send(f, b.data, b.len);
	asp_buf_free(&b);
	msgpack_sbuffer_clear(sb);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/* [1, id, nil, {"type": "dir", ...}]: a stat result, the id packed as uint32 (0xce). */
static void pack_stat_response(msgpack_packer *pk, uint32_t id, bool wide_id)
{
	msgpack_pack_array(pk, 4);
	msgpack_pack_uint8(pk, 1);
	if (wide_id) /* the engine must not rely on the shortest encoding */
		msgpack_pack_uint64(pk, id), (void)0;
	else
		msgpack_pack_uint32(pk, id);
	msgpack_pack_nil(pk);
	msgpack_pack_map(pk, 6);
	pack_str(pk, "type"), pack_str(pk, "dir");
	pack_str(pk, "size"), msgpack_pack_uint8(pk, 1);
	pack_str(pk, "mode"), msgpack_pack_uint16(pk, 0755);
	pack_str(pk, "mtime_ns"), msgpack_pack_int64(pk, 5);
	pack_str(pk, "uid"), msgpack_pack_uint8(pk, 0);
	pack_str(pk, "gid"), msgpack_pack_uint8(pk, 0);
}

typedef struct stat_call {
	asp_rpc *rpc;
	asp_status st;
	asp_error err;
	int64_t done_ms;
} stat_call;

static void *stat_thread(void *v)
{
	stat_call *c = v;
	c->st = do_stat(c->rpc, "/", &c->err);
	c->done_ms = t_now_ms();
	return NULL;
}

/* Notifications reach the callback, odd id encodings work. */
static void test_fake_ids_and_notices(void)
{
	fake f;
	fake_open(&f);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

	for (int wide = 0; wide < 2; wide++) {
		pthread_t th;
		stat_call c = {.rpc = f.rpc};
		pthread_create(&th, NULL, stat_thread, &c);
		uint32_t id = fake_read_request(&f);
		/* [2, "output", {...}] */
		msgpack_pack_array(&pk, 3);
		msgpack_pack_uint8(&pk, 2);
		pack_str(&pk, "output");
		msgpack_pack_map(&pk, 4);
		pack_str(&pk, "proc"), msgpack_pack_uint8(&pk, 9);
		pack_str(&pk, "stream"), pack_str(&pk, "stdout");
		pack_str(&pk, "offset"), msgpack_pack_uint8(&pk, 0);
		pack_str(&pk, "data"), msgpack_pack_bin(&pk, 3),
		    msgpack_pack_bin_body(&pk, "abc", 3);
		fake_send_msg(&f, &sb);
		/* an unknown notification is ignored */
		msgpack_pack_array(&pk, 3);
		msgpack_pack_uint8(&pk, 2);
		pack_str(&pk, "future_event");
		msgpack_pack_map(&pk, 0);
		fake_send_msg(&f, &sb);
		pack_stat_response(&pk, id, wide);
		fake_send_msg(&f, &sb);
		pthread_join(th, NULL);
		CU_ASSERT_EQUAL(c.st, ASP_OK);
	}
	CU_ASSERT_EQUAL(f.notices, 2);
	CU_ASSERT_EQUAL(f.notice_proc, 9);
	CU_ASSERT(asp_rpc_alive(f.rpc));
	msgpack_sbuffer_destroy(&sb);
	fake_close(&f);
}

/* ---- following processes: routing, the gate, replay before the answer ------------- */

typedef struct follower {
	pthread_mutex_t mu;
	char out[64];
	size_t len;
	uint64_t first_off;
	int outputs, exits, losts;
	pthread_t cb_thread;
} follower;

static void fo_output(void *user, uint64_t proc, asp_stream s, uint64_t off, const uint8_t *d,
                      size_t len)
{
	(void)proc;
	(void)s;
	follower *fo = user;
	pthread_mutex_lock(&fo->mu);
	if (!fo->outputs)
		fo->first_off = off;
	fo->outputs++;
	fo->cb_thread = pthread_self();
	if (fo->len + len < sizeof fo->out) {
		memcpy(fo->out + fo->len, d, len);
		fo->len += len;
	}
	pthread_mutex_unlock(&fo->mu);
}

static void fo_exit(void *user, const asp_exit_event *ev)
{
	(void)ev;
	follower *fo = user;
	pthread_mutex_lock(&fo->mu);
	fo->exits++;
	pthread_mutex_unlock(&fo->mu);
}

static void fo_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	(void)err;
	follower *fo = user;
	pthread_mutex_lock(&fo->mu);
	fo->losts++;
	pthread_mutex_unlock(&fo->mu);
}

static const asp_proc_callbacks fo_cb = {fo_output, fo_exit, fo_lost};

typedef struct sub_call {
	asp_rpc *rpc;
	asp_op_id op;
	uint64_t proc, stdout_offset;
	follower *fo;
	asp_status st;
	uint64_t got_proc;
} sub_call;

static void *sub_thread(void *v)
{
	sub_call *c = v;
	asp_proc_sub *sub = asp_proc_sub_new(&fo_cb, c->fo);
	asp_arena *a = asp_arena_new();
	asp_error err;
	if (c->op == ASP_OP_SPAWN) {
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.command = "x";
		asp_spawn_result r;
		c->st = asp_rpc_subscribe(c->rpc, ASP_OP_SPAWN, &p, &r, a, sub, &err);
		c->got_proc = c->st == ASP_OK ? r.proc : 0;
	} else {
		asp_proc_attach_params p;
		asp_proc_attach_params_init(&p);
		p.proc = c->proc;
		p.stdout_offset = c->stdout_offset;
		asp_proc_attach_result r;
		c->st = asp_rpc_subscribe(c->rpc, ASP_OP_PROC_ATTACH, &p, &r, a, sub, &err);
	}
	asp_proc_sub_unref(sub);
	asp_arena_free(a);
	return NULL;
}

static void pack_output(msgpack_packer *pk, uint64_t proc, uint64_t off, const char *data)
{
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint8(pk, 2);
	pack_str(pk, "output");
	msgpack_pack_map(pk, 4);
	pack_str(pk, "proc"), msgpack_pack_uint64(pk, proc);
	pack_str(pk, "stream"), pack_str(pk, "stdout");
	pack_str(pk, "offset"), msgpack_pack_uint64(pk, off);
	size_t n = strlen(data);
	pack_str(pk, "data"), msgpack_pack_bin(pk, n), msgpack_pack_bin_body(pk, data, n);
}

static void pack_exit(msgpack_packer *pk, uint64_t proc)
{
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint8(pk, 2);
	pack_str(pk, "exit");
	msgpack_pack_map(pk, 4);
	pack_str(pk, "proc"), msgpack_pack_uint64(pk, proc);
	pack_str(pk, "exit_code"), msgpack_pack_int8(pk, 0);
	pack_str(pk, "signal"), msgpack_pack_nil(pk);
	pack_str(pk, "timed_out"), msgpack_pack_false(pk);
}

/* [1, id, nil, {"proc": N}] or an empty result map. */
static void pack_ok(msgpack_packer *pk, uint32_t id, bool with_proc, uint64_t proc)
{
	msgpack_pack_array(pk, 4);
	msgpack_pack_uint8(pk, 1);
	msgpack_pack_uint32(pk, id);
	msgpack_pack_nil(pk);
	msgpack_pack_map(pk, with_proc ? 1 : 0);
	if (with_proc)
		pack_str(pk, "proc"), msgpack_pack_uint64(pk, proc);
}

static void pack_err(msgpack_packer *pk, uint32_t id, const char *code)
{
	msgpack_pack_array(pk, 4);
	msgpack_pack_uint8(pk, 1);
	msgpack_pack_uint32(pk, id);
	msgpack_pack_map(pk, 2);
	pack_str(pk, "code"), pack_str(pk, code);
	pack_str(pk, "message"), pack_str(pk, "no such process");
	msgpack_pack_nil(pk);
}

static bool wait_count(follower *fo, int *field, int want, int ms)
{
	int64_t until = t_now_ms() + ms;
	for (;;) {
		pthread_mutex_lock(&fo->mu);
		int v = *field;
		pthread_mutex_unlock(&fo->mu);
		if (v >= want)
			return true;
		if (t_now_ms() > until)
			return false;
		usleep(1000);
	}
}

/*
 * A spawn's answer followed at once by its output: the gate keeps the output back until
 * the follower is listed, so nothing is lost. Another process's output goes nowhere.
 */
static void test_follow_spawn_gate(void)
{
	fake f;
	fake_open(&f);
	asp_rpc_set_notify(f.rpc, NULL, NULL); /* the engine's own routing */
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	for (int round = 0; round < 20; round++) {
		follower fo = {.len = 0};
		pthread_mutex_init(&fo.mu, NULL);
		sub_call c = {.rpc = f.rpc, .op = ASP_OP_SPAWN, .fo = &fo};
		pthread_t th;
		pthread_create(&th, NULL, sub_thread, &c);
		uint32_t id = fake_read_request(&f);
		/* one write: the answer and the notifications arrive together */
		pack_ok(&pk, id, true, 7 + (uint64_t)round);
		asp_buf b;
		asp_buf_init(&b);
		t_add_framed(&b, sb.data, sb.size);
		msgpack_sbuffer_clear(&sb);
		pack_output(&pk, 7 + (uint64_t)round, 0, "abc");
		t_add_framed(&b, sb.data, sb.size);
		msgpack_sbuffer_clear(&sb);
		pack_output(&pk, 999, 0, "zzz"); /* nobody follows 999 */
		t_add_framed(&b, sb.data, sb.size);
		msgpack_sbuffer_clear(&sb);
		pack_output(&pk, 7 + (uint64_t)round, 3, "def");
		t_add_framed(&b, sb.data, sb.size);
		msgpack_sbuffer_clear(&sb);
		pack_exit(&pk, 7 + (uint64_t)round);
		t_add_framed(&b, sb.data, sb.size);
		msgpack_sbuffer_clear(&sb);
		fake_send(&f, b.data, b.len);
		asp_buf_free(&b);
		pthread_join(th, NULL);
		CU_ASSERT_EQUAL(c.st, ASP_OK);
		CU_ASSERT_EQUAL(c.got_proc, 7 + (uint64_t)round);
		CU_ASSERT(wait_count(&fo, &fo.exits, 1, 2000));
		CU_ASSERT(fo.len == 6 && memcmp(fo.out, "abcdef", 6) == 0);
		CU_ASSERT_EQUAL(fo.losts, 0);
		pthread_mutex_destroy(&fo.mu);
	}
	CU_ASSERT(asp_rpc_alive(f.rpc));
	msgpack_sbuffer_destroy(&sb);
	fake_close(&f);
}

/*
 * An attach's replay comes before its answer: kept, then delivered on the calling
 * thread before the call returns, trimmed to the asked offset. A failed attach calls
 * nothing; a dead connection tells live followers on_lost.
 */
static void test_follow_attach_replay(void)
{
	fake f;
	fake_open(&f);
	asp_rpc_set_notify(f.rpc, NULL, NULL);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

	/* a failed attach: its replay (a misbehaving responder's) never reaches the user */
	follower bad = {.len = 0};
	pthread_mutex_init(&bad.mu, NULL);
	sub_call c = {.rpc = f.rpc, .op = ASP_OP_PROC_ATTACH, .proc = 5, .fo = &bad};
	pthread_t th;
	pthread_create(&th, NULL, sub_thread, &c);
	uint32_t id = fake_read_request(&f);
	pack_output(&pk, 5, 0, "xx");
	fake_send_msg(&f, &sb);
	pack_err(&pk, id, "not_found");
	fake_send_msg(&f, &sb);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_E_NOT_FOUND);
	usleep(20 * 1000);
	CU_ASSERT_EQUAL(bad.outputs + bad.exits + bad.losts, 0);

	/* a good one from offset 2: "xyz12" at 0 is trimmed to "z12" */
	follower fo = {.len = 0};
	pthread_mutex_init(&fo.mu, NULL);
	c = (sub_call){
	    .rpc = f.rpc, .op = ASP_OP_PROC_ATTACH, .proc = 5, .stdout_offset = 2, .fo = &fo};
	pthread_create(&th, NULL, sub_thread, &c);
	id = fake_read_request(&f);
	pack_output(&pk, 5, 0, "xyz12");
	fake_send_msg(&f, &sb);
	pack_ok(&pk, id, false, 0);
	fake_send_msg(&f, &sb);
	pthread_t caller = th;
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_OK);
	CU_ASSERT(fo.outputs == 1 && fo.first_off == 2 && fo.len == 3 &&
	          memcmp(fo.out, "z12", 3) == 0);
	CU_ASSERT(pthread_equal(fo.cb_thread, caller)); /* before the call returned */
	/* live output continues on the reader thread; a repeat is dropped */
	pack_output(&pk, 5, 3, "12AB");
	fake_send_msg(&f, &sb);
	CU_ASSERT(wait_count(&fo, &fo.outputs, 2, 2000));
	CU_ASSERT(fo.len == 5 && memcmp(fo.out, "z12AB", 5) == 0);
	/* the responder goes away: the live follower learns it */
	close(f.fd);
	f.fd = -1;
	CU_ASSERT(wait_count(&fo, &fo.losts, 1, 2000));
	CU_ASSERT_EQUAL(fo.exits, 0);
	pthread_mutex_destroy(&fo.mu);
	pthread_mutex_destroy(&bad.mu);
	msgpack_sbuffer_destroy(&sb);
	asp_rpc_free(f.rpc);
}

/* Hostile responders: each kills the connection and fails the pending call promptly. */
static void fake_hostile(const uint8_t *bytes, size_t len, bool then_eof, asp_status code,
                         const char *want)
{
	fake f;
	fake_open(&f);
	pthread_t th;
	stat_call c = {.rpc = f.rpc};
	pthread_create(&th, NULL, stat_thread, &c);
	fake_read_request(&f);
	int64_t t0 = t_now_ms();
	fake_send(&f, bytes, len);
	if (then_eof)
		shutdown(f.fd, SHUT_WR);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, code);
	CU_ASSERT(c.done_ms - t0 < 1000);
	if (!strstr(c.err.message, want))
		fprintf(stderr, "\nwanted '%s' in: %s\n", want, c.err.message);
	CU_ASSERT(strstr(c.err.message, want) != NULL);
	CU_ASSERT(!asp_rpc_alive(f.rpc));
	fake_close(&f);
}

static void test_fake_hostile(void)
{
	/* a frame above max_message (4096 in this fixture) */
	fake_hostile((const uint8_t *)"\x00\x01\x00\x00", 4, false, ASP_E_PROTOCOL_ERROR,
	             "max_message");
	/* count bomb */
	fake_hostile((const uint8_t *)"\x00\x00\x00\x05\xdd\xff\xff\xff\xff", 9, false,
	             ASP_E_PROTOCOL_ERROR, "undecodable");
	/* a request where a response belongs */
	fake_hostile((const uint8_t *)"\x00\x00\x00\x05\x94\x00\x01\xa0\x80", 9, false,
	             ASP_E_PROTOCOL_ERROR, "request");
	/* EOF inside a frame */
	fake_hostile((const uint8_t *)"\x00\x00\x00\x10\x94", 5, true, ASP_E_TRANSPORT_ERROR,
	             "inside a frame");
	/* a clean end of stream */
	fake_hostile((const uint8_t *)"", 0, true, ASP_E_TRANSPORT_ERROR, "closed the connection");
}

/* A response that decodes but is not a valid stat result: protocol_error for the call. */
static void test_fake_bad_result(void)
{
	fake f;
	fake_open(&f);
	pthread_t th;
	stat_call c = {.rpc = f.rpc};
	pthread_create(&th, NULL, stat_thread, &c);
	uint32_t id = fake_read_request(&f);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_uint32(&pk, id);
	msgpack_pack_nil(&pk);
	msgpack_pack_map(&pk, 1);
	pack_str(&pk, "type"), msgpack_pack_uint8(&pk, 3);
	fake_send_msg(&f, &sb);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_E_PROTOCOL_ERROR);
	/* an error response comes through with its code */
	pthread_create(&th, NULL, stat_thread, &c);
	id = fake_read_request(&f);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_uint32(&pk, id);
	msgpack_pack_map(&pk, 2);
	pack_str(&pk, "code"), pack_str(&pk, "permission_denied");
	pack_str(&pk, "message"), pack_str(&pk, "no");
	msgpack_pack_nil(&pk);
	fake_send_msg(&f, &sb);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_E_PERMISSION_DENIED);
	CU_ASSERT_STRING_EQUAL(c.err.message, "no");
	msgpack_sbuffer_destroy(&sb);
	fake_close(&f);
}

/* A call with a deadline gives up; its late answer is dropped; the connection lives on. */
static void test_call_timeout(void)
{
	fake f;
	fake_open(&f);
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "/";
	asp_stat_result r;
	asp_arena *a = asp_arena_new();
	asp_error err;
	int64_t t0 = t_now_ms();
	CU_ASSERT_EQUAL(asp_rpc_call(f.rpc, ASP_OP_STAT, &p, &r, a, 100, &err), ASP_E_TIMEOUT);
	int64_t took = t_now_ms() - t0;
	CU_ASSERT(took >= 90 && took < 5000); /* without the deadline: never */
	uint32_t late = fake_read_request(&f);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	pack_stat_response(&pk, late, false);
	fake_send_msg(&f, &sb);
	/* the next call (which may reuse the slot) gets its own answer, not the late one */
	pthread_t th;
	stat_call c = {.rpc = f.rpc};
	pthread_create(&th, NULL, stat_thread, &c);
	uint32_t id = fake_read_request(&f);
	CU_ASSERT_NOT_EQUAL(id, late);
	pack_stat_response(&pk, id, false);
	fake_send_msg(&f, &sb);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_OK);
	CU_ASSERT(asp_rpc_alive(f.rpc));
	msgpack_sbuffer_destroy(&sb);
	asp_arena_free(a);
	fake_close(&f);
}

/*
 * A response for an id nobody waits for (docs/design.md, "Faults and budgets"): the
 * connection closes and every pending call fails at once with protocol_error, whose
 * message names the id.
 */
static void test_fake_stray_id(void)
{
	fake f;
	fake_open(&f);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	pthread_t th[2];
	stat_call c[2] = {{.rpc = f.rpc}, {.rpc = f.rpc}};
	uint32_t id = 0;
	for (int i = 0; i < 2; i++) {
		pthread_create(&th[i], NULL, stat_thread, &c[i]);
		id = fake_read_request(&f);
	}
	int64_t t0 = t_now_ms();
	pack_stat_response(&pk, id + 12345, false); /* nobody waits for this id */
	fake_send_msg(&f, &sb);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(c[i].st, ASP_E_PROTOCOL_ERROR);
		CU_ASSERT(c[i].done_ms - t0 < 2000);
		CU_ASSERT(strstr(c[i].err.message, "no call is waiting for") != NULL);
	}
	CU_ASSERT(!asp_rpc_alive(f.rpc));
	/* a second answer to the same id is stray too */
	fake_close(&f);
	fake_open(&f);
	stat_call d = {.rpc = f.rpc};
	pthread_create(&th[0], NULL, stat_thread, &d);
	id = fake_read_request(&f);
	pack_stat_response(&pk, id, false);
	fake_send_msg(&f, &sb);
	pthread_join(th[0], NULL);
	CU_ASSERT_EQUAL(d.st, ASP_OK);
	pack_stat_response(&pk, id, false);
	fake_send_msg(&f, &sb);
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &d.err), ASP_E_PROTOCOL_ERROR);
	msgpack_sbuffer_destroy(&sb);
	fake_close(&f);
}

/*
 * call_timeout_ms bounds a call that has no limit of its own: it fails with timeout,
 * naming the op and the limit; a late answer is dropped (not stray); a second miss in a
 * row closes the connection with transport_error, failing the other pending calls too.
 */
static void test_call_deadline(void)
{
	fake f;
	fake_open(&f);
	asp_rpc_set_call_timeout(f.rpc, 200);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	asp_error err;
	int64_t t0 = t_now_ms();
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_E_TIMEOUT);
	int64_t took = t_now_ms() - t0;
	CU_ASSERT(took >= 190 && took < 5000);
	CU_ASSERT(strstr(err.message, "stat") && strstr(err.message, "200 ms") &&
	          strstr(err.message, "call_timeout_ms"));
	uint32_t late = fake_read_request(&f);
	pack_stat_response(&pk, late, false); /* late: dropped, and the responder lives */
	fake_send_msg(&f, &sb);
	pthread_t th;
	stat_call c = {.rpc = f.rpc};
	pthread_create(&th, NULL, stat_thread, &c);
	uint32_t id = fake_read_request(&f);
	pack_stat_response(&pk, id, false);
	fake_send_msg(&f, &sb);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_OK);
	CU_ASSERT(asp_rpc_alive(f.rpc));

	/* an answer cleared the suspicion: one miss is a timeout again, then a second
	 * miss in a row closes, and a call still pending (started later) fails with it */
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_E_TIMEOUT);
	fake_read_request(&f);
	asp_rpc_set_call_timeout(f.rpc, 60000);
	stat_call pending = {.rpc = f.rpc};
	pthread_create(&th, NULL, stat_thread, &pending);
	fake_read_request(&f);
	asp_rpc_set_call_timeout(f.rpc, 200);
	t0 = t_now_ms();
	CU_ASSERT_EQUAL(do_stat(f.rpc, "/", &err), ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(strstr(err.message, "second missed deadline") != NULL);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(pending.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(pending.done_ms - t0 < 5000);
	CU_ASSERT(!asp_rpc_alive(f.rpc));
	msgpack_sbuffer_destroy(&sb);
	fake_close(&f);
}

typedef struct exec_call {
	asp_rpc *rpc;
	asp_status st;
	asp_error err;
} exec_call;

static void *exec_thread(void *v)
{
	exec_call *c = v;
	asp_exec_params p;
	asp_exec_params_init(&p);
	const char *argv[] = {"sleep", "1000", NULL};
	p.has_argv = true;
	p.argv = (asp_strv){argv, 2};
	asp_exec_result r;
	asp_arena *a = asp_arena_new();
	c->st = asp_rpc_ops.exec(c->rpc, &p, &r, a, &c->err);
	asp_arena_free(a);
	return NULL;
}

/*
 * An exec without a timeout may run for ever: past call_timeout_ms it is not failed but
 * probed with a hello; answered, it keeps waiting; unanswered, the connection closes.
 */
static void test_unbounded_probe(void)
{
	fake f;
	fake_open(&f);
	asp_rpc_set_call_timeout(f.rpc, 150);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	pthread_t th;
	exec_call c = {.rpc = f.rpc};
	pthread_create(&th, NULL, exec_thread, &c);
	uint32_t exec_id = fake_read_request(&f);
	for (int i = 0; i < 2; i++) { /* two probes, answered (an error answer is an answer) */
		uint32_t probe_id = fake_read_request(&f);
		CU_ASSERT_NOT_EQUAL(probe_id, exec_id);
		pack_err(&pk, probe_id, "unsupported");
		fake_send_msg(&f, &sb);
	}
	fake_read_request(&f); /* a third probe, never answered */
	int64_t t0 = t_now_ms();
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(strstr(c.err.message, "liveness probe") != NULL);
	CU_ASSERT(t_now_ms() - t0 < 5000);
	CU_ASSERT(!asp_rpc_alive(f.rpc));
	msgpack_sbuffer_destroy(&sb);
	fake_close(&f);
}

/* asp_rpc_close from another thread fails a call whose answer never comes. */
static void test_close_unblocks(void)
{
	fake f;
	fake_open(&f);
	pthread_t th;
	stat_call c = {.rpc = f.rpc};
	pthread_create(&th, NULL, stat_thread, &c);
	fake_read_request(&f);
	int64_t t0 = t_now_ms();
	asp_rpc_close(f.rpc);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(c.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(c.done_ms - t0 < 200);
	fake_close(&f);
}

/* The fd channel alone: a burst of frames in one write comes out one by one. */
typedef struct burst {
	int fd;
	asp_buf *b;
} burst;

static void *burst_writer(void *v)
{
	burst *w = v; /* the socket buffer may be smaller than the burst */
	CU_ASSERT(t_write_all(w->fd, w->b->data, w->b->len) == 0);
	return NULL;
}

static void test_channel_burst(void)
{
	int sv[2];
	CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	asp_channel *ch;
	asp_error err;
	CU_ASSERT_FATAL(asp_fd_channel_new(sv[1], sv[1], ASP_FDCH_OWN_FDS, &ch, &err) == ASP_OK);
	asp_buf b;
	asp_buf_init(&b);
	static uint8_t big[200000];
	memset(big, 'x', sizeof big);
	t_add_framed(&b, "a", 1);
	t_add_framed(&b, big, sizeof big); /* read straight into its own buffer */
	t_add_framed(&b, "", 0);
	for (int i = 0; i < 1000; i++) /* many small frames straddle the read buffer */
		t_add_framed(&b, "0123456789abcdefghijklmnopqrstuvwxyz", 36 - i % 30);
	pthread_t th;
	burst w = {sv[0], &b};
	pthread_create(&th, NULL, burst_writer, &w);
	uint8_t *m;
	size_t len;
	CU_ASSERT(asp_channel_recv(ch, 1 << 20, &m, &len, &err) == ASP_OK && len == 1 &&
	          m[0] == 'a');
	free(m);
	CU_ASSERT(asp_channel_recv(ch, 1 << 20, &m, &len, &err) == ASP_OK && len == sizeof big &&
	          memcmp(m, big, len) == 0);
	free(m);
	CU_ASSERT(asp_channel_recv(ch, 1 << 20, &m, &len, &err) == ASP_OK && len == 0 && m);
	free(m);
	for (int i = 0; i < 1000; i++) {
		size_t want = 36 - i % 30;
		asp_status st = asp_channel_recv(ch, 1 << 20, &m, &len, &err);
		CU_ASSERT(st == ASP_OK && len == want &&
		          memcmp(m, "0123456789abcdefghijklmnopqrstuvwxyz", want) == 0);
		free(m);
		if (st)
			break;
	}
	pthread_join(th, NULL);
	close(sv[0]); /* clean EOF at a frame boundary: OK with no message */
	CU_ASSERT(asp_channel_recv(ch, 1 << 20, &m, &len, &err) == ASP_OK && m == NULL);
	asp_buf_free(&b);
	asp_channel_free(ch);
}

static void *close_later(void *v)
{
	usleep(100 * 1000);
	asp_channel_close(v);
	return NULL;
}

/* Reads `want` bytes from `fd` in small steps, as a slow peer would. */
typedef struct slow_reader {
	int fd;
	uint8_t *got;
	size_t want, have;
} slow_reader;

static void *slow_read(void *v)
{
	slow_reader *r = v;
	while (r->have < r->want) {
		size_t step = r->want - r->have < 7001 ? r->want - r->have : 7001;
		ssize_t n = read(r->fd, r->got + r->have, step);
		if (n <= 0)
			break;
		r->have += (size_t)n;
		if (r->have % 5 == 0)
			usleep(100); /* let the pipe fill: the writer meets EAGAIN */
	}
	return NULL;
}

/*
 * A frame in many pieces through a non-blocking pipe that fills up: short writes end
 * inside a piece and between pieces, and every byte arrives once, in order. Then a
 * sendv blocked on a full pipe returns transport_error when the channel is closed.
 */
static void test_channel_sendv(void)
{
	int p[2];
	CU_ASSERT_FATAL(pipe(p) == 0);
	asp_channel *ch;
	asp_error err;
	CU_ASSERT_FATAL(asp_fd_channel_new(p[0], p[1], ASP_FDCH_WAKEABLE | ASP_FDCH_PRIVATE_WFD,
	                                   &ch, &err) == ASP_OK);
	enum { PIECES = 20 };
	struct iovec iov[PIECES];
	size_t total = 0;
	for (int i = 0; i < PIECES; i++) {
		size_t len = i % 4 == 3 ? 0 : (size_t)(i * 37813 % 300007);
		uint8_t *d = malloc(len ? len : 1);
		for (size_t k = 0; k < len; k++)
			d[k] = (uint8_t)(k * 131 + (size_t)i);
		iov[i] = (struct iovec){d, len};
		total += len;
	}
	slow_reader r = {.fd = p[0], .got = malloc(total), .want = total};
	pthread_t th;
	pthread_create(&th, NULL, slow_read, &r);
	CU_ASSERT_EQUAL(asp_channel_sendv(ch, iov, PIECES, &err), ASP_OK);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(r.have, total);
	size_t at = 0;
	bool same = r.have == total;
	for (int i = 0; i < PIECES && same; i++) {
		same = memcmp(r.got + at, iov[i].iov_base, iov[i].iov_len) == 0;
		at += iov[i].iov_len;
	}
	CU_ASSERT(same);

	/* Nobody reads now: the pipe fills and the send waits until close() wakes it. */
	pthread_t closer;
	CU_ASSERT_FATAL(pthread_create(&closer, NULL, close_later, ch) == 0);
	CU_ASSERT_EQUAL(asp_channel_sendv(ch, iov, PIECES, &err), ASP_E_TRANSPORT_ERROR);
	pthread_join(closer, NULL);
	for (int i = 0; i < PIECES; i++)
		free(iov[i].iov_base);
	free(r.got);
	asp_channel_free(ch);
	close(p[0]);
	close(p[1]);
}

/* The peer dies and the channel is closed at once, racing a send (SIGPIPE at default). */
typedef struct pipe_race {
	asp_channel *ch;
	int rfd;
	atomic_int go;
} pipe_race;

static void *peer_dies(void *v)
{
	pipe_race *r = v;
	while (!atomic_load(&r->go))
		;
	close(r->rfd);
	asp_channel_close(r->ch); /* what the reader does when it sees the peer die */
	return NULL;
}

/*
 * A send that meets EPIPE while another thread closes the channel must still swallow
 * the SIGPIPE it raised, or restoring the signal mask kills the process (SIGPIPE is at
 * its default here, as in an application that does not ignore it).
 */
static void test_channel_epipe_while_closing(void)
{
	struct sigaction old, dfl = {.sa_handler = SIG_DFL};
	sigaction(SIGPIPE, &dfl, &old);
	int failures = 0;
	for (int i = 0; i < 3000; i++) {
		int p[2], d[2];
		CU_ASSERT_FATAL(pipe(p) == 0 && pipe(d) == 0);
		asp_channel *ch;
		asp_error err;
		CU_ASSERT_FATAL(asp_fd_channel_new(d[0], p[1],
		                                   ASP_FDCH_WAKEABLE | ASP_FDCH_PRIVATE_WFD, &ch,
		                                   &err) == ASP_OK);
		pipe_race r = {.ch = ch, .rfd = p[0]};
		pthread_t th;
		pthread_create(&th, NULL, peer_dies, &r);
		atomic_store(&r.go, 1);
		for (int k = 0; k < 50; k++) { /* some of these meet the peer gone */
			asp_status st = asp_channel_send(ch, (const uint8_t *)"\0\0\0\1x", 5, &err);
			if (st != ASP_OK && st != ASP_E_TRANSPORT_ERROR)
				failures++;
			if (st)
				break;
		}
		pthread_join(th, NULL);
		asp_channel_free(ch);
		close(p[1]);
		close(d[0]);
		close(d[1]);
	}
	CU_ASSERT_EQUAL(failures, 0);
	sigaction(SIGPIPE, &old, NULL);
}

int main(int argc, char **argv)
{
	agent = t_env("ASP_AGENT");
	if (!agent) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("rpc engine, real asp-agent", NULL, NULL);
	CU_add_test(s, "hello, stat, errors, 1 MiB bins", test_basic_calls);
	CU_add_test(s, "request above max_message", test_request_too_large);
	CU_add_test(s, "8 threads x 300 pipelined calls", test_threads);
	CU_add_test(s, "a slow call does not hold up a fast one", test_out_of_order);
	CU_add_test(s, "dead connection fails pending and later calls", test_dead_connection);
	s = CU_add_suite("rpc engine, scripted responder", NULL, NULL);
	CU_add_test(s, "notifications, id encodings", test_fake_ids_and_notices);
	CU_add_test(s, "an answer to an id not in flight is a protocol_error", test_fake_stray_id);
	CU_add_test(s, "call_timeout_ms: timeout, suspect, second miss closes", test_call_deadline);
	CU_add_test(s, "a call without a limit probes, and dies unanswered", test_unbounded_probe);
	CU_add_test(s, "hostile responders kill the connection", test_fake_hostile);
	CU_add_test(s, "bad result, error response", test_fake_bad_result);
	CU_add_test(s, "close unblocks a waiting call", test_close_unblocks);
	CU_add_test(s, "a call with a deadline times out", test_call_timeout);
	CU_add_test(s, "fd channel: burst of frames", test_channel_burst);
	CU_add_test(s, "fd channel: a frame in pieces, short writes, close", test_channel_sendv);
	CU_add_test(s, "fd channel: EPIPE while the channel closes, no SIGPIPE death",
	            test_channel_epipe_while_closing);
	CU_add_test(s, "spawn: output right after the answer is not lost (gate)",
	            test_follow_spawn_gate);
	CU_add_test(s, "attach: replay kept until the answer; failure calls nothing",
	            test_follow_attach_replay);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
