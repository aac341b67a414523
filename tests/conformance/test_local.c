/*
 * The conformance suite against the local backend (suite "local"; the streaming cases
 * are n/a there: its hello lists no spawn) and against bound connections to one backend, as a
 * server makes them (suite "local_conn": streaming, reattaching from a second connection), plus
 * what only the local backend can show (suite "local_backend"): no leaked fds or zombies, trimming
 * to a small max_message, robustness against direct callers, many threads at once.
 *
 *   test_local            run everything
 *   test_local --list     list the conformance cases
 *   test_local NAME...    run only the named tests (of either suite)
 */
#include "conformance.h"
#include "local/local.h"
#include "local/local_proc.h"
#include "proto_desc.h"
#include "wire.h"
#include "rpc/local_client.h"
#include "cu_run.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static asp_ops local_ops; /* asp_local_ops with the unsupported slots filled */
static asp_local *backend;
/* The streaming suite: connections bound to a backend of their own, as a server binds. */
static asp_local *conn_backend;
static conf_streaming conn_streaming;

static void *peer_open(void *ctx)
{
	(void)ctx;
	const asp_ops *ops;
	void *self;
	asp_error err;
	return asp_local_client_open(conn_backend, false, &ops, &self, &err) ? NULL : self;
}

static void peer_close(void *ctx, void *peer)
{
	(void)ctx;
	asp_local_client_close(peer);
}
static char scratch[256]; /* for the local_backend suite */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static const char *spath(const char *rel)
{
	static _Thread_local char buf[512];
	snprintf(buf, sizeof buf, "%s/%s", scratch, rel);
	return buf;
}

static int backend_init(void)
{
	snprintf(scratch, sizeof scratch, "%s/asp-local-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(scratch) ? 0 : -1;
}

static int backend_clean(void)
{
	asp_arena *a = asp_arena_new();
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = scratch;
	p.recursive = true;
	asp_remove_result r;
	asp_error err;
	asp_status st = asp_local_ops.remove(backend, &p, &r, a, &err);
	asp_arena_free(a);
	return st == ASP_OK ? 0 : -1;
}

static asp_status sh(asp_local *l, const char *cmd, uint64_t timeout_ms, asp_exec_result *r,
                     asp_arena *a)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	p.timeout_ms = timeout_ms;
	asp_error err;
	return asp_local_ops.exec(l, &p, r, a, &err);
}

/* Every path through the ops, errors included, gives back every fd it opened. */
static void test_no_fd_leaks(void)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_exec_result er;
	sh(backend, "true", 0, &er, a); /* warm up anything lazily opened */
	int before = count_fds();
	CU_ASSERT_FATAL(before > 0);
	for (int i = 0; i < 5; i++) {
		CU_ASSERT_EQUAL(sh(backend, "echo x; echo y >&2", 0, &er, a), ASP_OK);
		CU_ASSERT_EQUAL(sh(backend, "sleep 5", 50, &er, a), ASP_OK);
		CU_ASSERT_TRUE(er.timed_out);
		asp_exec_params p;
		asp_exec_params_init(&p);
		const char *argv[] = {"asp-no-such-program"};
		p.has_argv = true;
		p.argv = (asp_strv){argv, 1};
		CU_ASSERT_EQUAL(asp_local_ops.exec(backend, &p, &er, a, &err), ASP_E_NOT_FOUND);
		asp_exec_params_init(&p);
		p.command = "true";
		p.cwd = spath("missing");
		CU_ASSERT_EQUAL(asp_local_ops.exec(backend, &p, &er, a, &err), ASP_E_NOT_FOUND);
		asp_exec_params_init(&p);
		p.command = "exec 0<&-";
		static uint8_t big[1 << 20];
		p.stdin_data = (asp_bytes){big, sizeof big};
		CU_ASSERT_EQUAL(asp_local_ops.exec(backend, &p, &er, a, &err), ASP_OK);

		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = spath("d/f");
		wp.data = (asp_bytes){(const uint8_t *)"abc", 3};
		wp.mkdirs = true;
		wp.atomic = i % 2;
		asp_write_result wr;
		CU_ASSERT_EQUAL(asp_local_ops.write(backend, &wp, &wr, a, &err), ASP_OK);
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = spath("d/f");
		asp_read_result rr;
		CU_ASSERT_EQUAL(asp_local_ops.read(backend, &rp, &rr, a, &err), ASP_OK);
		rp.path = spath("d");
		CU_ASSERT_EQUAL(asp_local_ops.read(backend, &rp, &rr, a, &err),
		                ASP_E_IS_A_DIRECTORY);
		asp_list_params lp = {.path = spath("d")};
		asp_list_result lr;
		CU_ASSERT_EQUAL(asp_local_ops.list(backend, &lp, &lr, a, &err), ASP_OK);
		asp_remove_params mp;
		asp_remove_params_init(&mp);
		mp.path = spath("d");
		asp_remove_result mr;
		CU_ASSERT_EQUAL(asp_local_ops.remove(backend, &mp, &mr, a, &err), ASP_E_NOT_EMPTY);
		mp.recursive = true;
		CU_ASSERT_EQUAL(asp_local_ops.remove(backend, &mp, &mr, a, &err), ASP_OK);
		asp_arena_reset(a);
	}
	CU_ASSERT_EQUAL(count_fds(), before);
	/* every child reaped: this process has none left */
	CU_ASSERT_EQUAL(waitpid(-1, NULL, WNOHANG), -1);
	CU_ASSERT_EQUAL(errno, ECHILD);
	asp_arena_free(a);
}

/* Responses fit max_message: exec output trimmed fairly, read capped. */
static void test_small_max_message(void)
{
	asp_local *small = asp_local_new(256 * 1024);
	asp_arena *a = asp_arena_new();
	CU_ASSERT_FATAL(small && a);
	size_t budget = 192 * 1024; /* 256 KiB minus the 64 KiB envelope headroom */
	asp_exec_result r;
	CU_ASSERT_EQUAL_FATAL(
	    sh(small, "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2", 0, &r, a), ASP_OK);
	CU_ASSERT_EQUAL(r.stdout_bytes, 300000);
	CU_ASSERT_EQUAL(r.stderr_bytes, 300000);
	CU_ASSERT_EQUAL(r.stdout_data.len, budget / 2);
	CU_ASSERT_EQUAL(r.stderr_data.len, budget / 2);
	CU_ASSERT_EQUAL_FATAL(
	    sh(small, "head -c 300000 /dev/zero; printf 1234567890 >&2", 0, &r, a), ASP_OK);
	CU_ASSERT_EQUAL(r.stderr_data.len, 10);
	CU_ASSERT_EQUAL(r.stdout_data.len, budget - 10);

	static uint8_t big[1 << 20];
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = spath("big");
	wp.data = (asp_bytes){big, sizeof big};
	asp_write_result wr;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_local_ops.write(small, &wp, &wr, a, &err), ASP_OK);
	asp_read_params rp;
	asp_read_params_init(&rp);
	rp.path = spath("big");
	asp_read_result rr;
	CU_ASSERT_EQUAL_FATAL(asp_local_ops.read(small, &rp, &rr, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(rr.data.len, budget);
	CU_ASSERT_FALSE(rr.eof);
	CU_ASSERT_EQUAL(rr.size, sizeof big);
	rp.has_length = true;
	rp.length = sizeof big;
	CU_ASSERT_EQUAL_FATAL(asp_local_ops.read(small, &rp, &rr, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(rr.data.len, budget);
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	CU_ASSERT_EQUAL_FATAL(asp_local_ops.hello(small, &hp, &hr, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(hr.max_message, 256 * 1024);
	asp_arena_free(a);
	asp_local_free(small);
}

/* Calls from C (not via the decoder) may carry what the wire cannot: refuse, not crash. */
static void test_direct_call_checks(void)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_read_params rp;
	asp_read_params_init(&rp);
	asp_read_result rr;
	CU_ASSERT_EQUAL(asp_local_ops.read(backend, &rp, &rr, a, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "path"));
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = spath("m");
	wp.mode = 010000;
	asp_write_result wr;
	CU_ASSERT_EQUAL(asp_local_ops.write(backend, &wp, &wr, a, &err), ASP_E_INVALID_ARGUMENT);
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "true";
	asp_strmap_entry bad[] = {{"A=B", "x"}};
	ep.has_env = true;
	ep.env = (asp_strmap){bad, 1};
	asp_exec_result er;
	CU_ASSERT_EQUAL(asp_local_ops.exec(backend, &ep, &er, a, &err), ASP_E_INVALID_ARGUMENT);
	asp_remove_params mp;
	asp_remove_params_init(&mp);
	mp.path = "/";
	mp.recursive = true;
	asp_remove_result mr;
	CU_ASSERT_EQUAL(asp_local_ops.remove(backend, &mp, &mr, a, &err), ASP_E_INVALID_ARGUMENT);
	mp.path = "..";
	CU_ASSERT_EQUAL(asp_local_ops.remove(backend, &mp, &mr, a, &err), ASP_E_INVALID_ARGUMENT);
	/* streaming needs a bound connection: the unbound table answers unsupported */
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = "true";
	asp_spawn_result sr;
	CU_ASSERT_EQUAL(local_ops.spawn(backend, &sp, &sr, a, &err), ASP_E_UNSUPPORTED);
	/* error messages name the op and the path */
	rp.path = spath("nope");
	CU_ASSERT_EQUAL(asp_local_ops.read(backend, &rp, &rr, a, &err), ASP_E_NOT_FOUND);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "read "));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "nope"));
	CU_ASSERT_STRING_EQUAL(err.path, spath("nope"));
	asp_arena_free(a);
}

struct stress {
	int id, failures;
};

static void *stress_worker(void *v)
{
	struct stress *s = v;
	asp_arena *a = asp_arena_new();
	size_t sizes[] = {0, 1, 4096, 4097, 70000, 300000};
	uint8_t *buf = malloc(300000);
	for (int j = 0; j < 12 && a && buf; j++) {
		size_t n = sizes[(size_t)(s->id + j) % 6];
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)(i * 7 + (size_t)s->id + (size_t)j);
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = j % 3 ? "cat" : "cat; echo e >&2";
		p.stdin_data = (asp_bytes){buf, n};
		p.timeout_ms = j == 5 ? 30 : 20000;
		if (j == 5)
			p.command = "cat >/dev/null; sleep 5";
		asp_exec_result r;
		asp_error err;
		asp_status st = asp_local_ops.exec(backend, &p, &r, a, &err);
		bool ok = st == ASP_OK;
		if (ok && j == 5)
			ok = r.timed_out;
		else if (ok)
			ok = r.stdout_data.len == n &&
			     (n == 0 || !memcmp(r.stdout_data.data, buf, n));
		if (!ok)
			s->failures++;
		asp_arena_reset(a);
	}
	free(buf);
	asp_arena_free(a);
	return NULL;
}

/* The unbound table with a hello that claims the streaming ops it answers unsupported. */
static asp_status lying_hello(void *self, const asp_hello_params *p, asp_hello_result *r,
                              asp_arena *a, asp_error *err)
{
	asp_status st = asp_local_ops.hello(self, p, r, a, err);
	static const char *const ops[] = {"hello",     "exec",      "read",       "write",
	                                  "stat",      "list",      "mkdir",      "remove",
	                                  "rename",    "spawn",     "proc_write", "proc_signal",
	                                  "proc_wait", "proc_list", "proc_attach"};
	static const char *const features[] = {"follow"};
	r->ops = (asp_strv){ops, sizeof ops / sizeof ops[0]};
	r->has_features = true;
	r->features = (asp_strv){features, 1};
	return st;
}

/*
 * Verdicts judge claims: a case needing what hello does not announce is n/a (and the
 * reason names it); the same case against a hello that claims it, and an op that then
 * answers unsupported, fails.
 */
static void test_claims_are_judged(void)
{
	const conf_case *c = conf_find("proc_wait_timeout");
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	conf_outcome o;
	conf_run_case(c, &local_ops, backend, scratch, &o);
	CU_ASSERT_TRUE(o.passed && o.na && o.skipped);
	CU_ASSERT_PTR_NOT_NULL(strstr(o.msg, "needs op \"spawn\""));
	CU_ASSERT_STRING_EQUAL(conf_verdict(&o), "n/a");
	asp_ops lying = local_ops;
	lying.hello = lying_hello;
	conf_run_case(c, &lying, backend, scratch, &o);
	CU_ASSERT_FALSE(o.passed);
	CU_ASSERT_PTR_NOT_NULL(strstr(o.msg, "unsupported"));
	CU_ASSERT_STRING_EQUAL(conf_verdict(&o), "FAIL");
	/* "follow" claimed, but this registration has no streaming: n/a, saying so */
	conf_run_case(conf_find("spawn_output_live"), &lying, backend, scratch, &o);
	CU_ASSERT_TRUE(o.passed && o.na);
	CU_ASSERT_PTR_NOT_NULL(strstr(o.msg, "registered without a way to follow"));
	/* every op a terminal case needs, but no "pty" in hello: n/a, naming it */
	conf_run_case(conf_find("tty_exit_codes"), &lying, backend, scratch, &o);
	CU_ASSERT_TRUE(o.passed && o.na);
	CU_ASSERT_PTR_NOT_NULL(strstr(o.msg, "needs the feature \"pty\" (spawn with tty"));
	/* a case without needs runs whatever hello says */
	conf_run_case(conf_find("read_ranges"), &lying, backend, scratch, &o);
	CU_ASSERT_TRUE(o.passed && !o.skipped);
}

/* Many threads running execs at once: outputs never cross, timeouts stay local. */
static void test_many_threads(void)
{
	enum { T = 16 };
	pthread_t th[T];
	struct stress s[T];
	int before = count_fds();
	for (int i = 0; i < T; i++) {
		s[i] = (struct stress){i, 0};
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, stress_worker, &s[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(s[i].failures, 0);
	}
	CU_ASSERT_EQUAL(count_fds(), before);
	CU_ASSERT_EQUAL(waitpid(-1, NULL, WNOHANG), -1);
}

/* ---- a replay's events lend the ring's bytes -------------------------------------- */

/*
 * Line k (from 0) of `seq -f %015.0f 1 N` is k+1 in 15 digits and a newline: the byte at
 * any offset says which offset it is.
 */
static bool seq_bytes_ok(uint64_t off, const uint8_t *data, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t o = off + i, line = o / 16 + 1;
		unsigned col = (unsigned)(o % 16);
		char want = '\n';
		if (col < 15) {
			uint64_t v = line;
			for (unsigned d = 14; d > col; d--)
				v /= 10;
			want = (char)('0' + v % 10);
		}
		if (data[i] != (uint8_t)want)
			return false;
	}
	return true;
}

typedef struct lend {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t b_got; /* stdout bytes the spawner's sink has had, in order */
	bool b_blocked; /* the spawner's sink is holding the pump */
	bool b_release; /* ... until this */
	bool b_exit;
	bool a_failed;     /* the attacher's connection has failed */
	uint64_t p1;       /* the process followed */
	asp_local_conn *a; /* the attacher's connection */
	bool a_first_done; /* the replay's first event was checked */
	int bad;           /* events whose bytes were wrong while the sink had them */
	uint64_t a_first_off;
} lend;

static lend lend_state = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static bool conn_is_dead(asp_local_conn *c)
{
	pthread_mutex_lock(&c->mu);
	bool dead = c->dead;
	pthread_mutex_unlock(&c->mu);
	return dead;
}

static bool frame_ignored(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	(void)frame;
	(void)len;
	return true;
}

static bool deadline_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *dl)
{
	return pthread_cond_timedwait(cv, mu, dl) != ETIMEDOUT;
}

static void deadline_in(struct timespec *dl, int seconds)
{
	clock_gettime(CLOCK_REALTIME, dl);
	dl->tv_sec += seconds;
}

/* The spawner's sink: checks every chunk, and once 1.25 MiB came holds the pump. */
static bool lend_b_event(void *ctx, asp_notice_id n, const void *params)
{
	lend *t = ctx;
	pthread_mutex_lock(&t->mu);
	if (n == ASP_NOTICE_EXIT) {
		t->b_exit = true;
		pthread_cond_broadcast(&t->cv);
		pthread_mutex_unlock(&t->mu);
		return true;
	}
	const asp_output_event *ev = params;
	if (strcmp(ev->stream, "stdout") == 0) {
		if (ev->offset != t->b_got ||
		    !seq_bytes_ok(ev->offset, ev->data.data, ev->data.len))
			t->bad++;
		t->b_got = ev->offset + ev->data.len;
	}
	pthread_cond_broadcast(&t->cv);
	if (t->b_got >= 1280u * 1024u && !t->b_release) {
		t->b_blocked = true;
		pthread_cond_broadcast(&t->cv);
		struct timespec dl;
		deadline_in(&dl, 60);
		while (!t->b_release && deadline_wait(&t->cv, &t->mu, &dl))
			;
	}
	pthread_mutex_unlock(&t->mu);
	return true;
}

/*
 * The attacher's sink. Its first (replay) event lets the pump go, and has its connection
 * fail meanwhile (another process's event to it returns false: the pump then no longer
 * waits for this subscriber). It keeps the event while the pump could read more: up to
 * 2 s, or until the spawner has had bytes past what the ring held when the replay began
 * (the pump appended while the replay's bytes were lent). The bytes must still be the
 * right ones when it looks again.
 */
static bool lend_a_event(void *ctx, asp_notice_id n, const void *params)
{
	lend *t = ctx;
	uint64_t proc = n == ASP_NOTICE_EXIT ? ((const asp_exit_event *)params)->proc
	                                     : ((const asp_output_event *)params)->proc;
	pthread_mutex_lock(&t->mu);
	if (proc != t->p1) { /* the other process: this connection fails */
		t->a_failed = true;
		pthread_cond_broadcast(&t->cv);
		pthread_mutex_unlock(&t->mu);
		return false;
	}
	const asp_output_event *ev = params;
	if (n == ASP_NOTICE_OUTPUT && strcmp(ev->stream, "stdout") == 0) {
		if (!seq_bytes_ok(ev->offset, ev->data.data, ev->data.len))
			t->bad++;
		if (!t->a_first_done) {
			t->a_first_off = ev->offset;
			pthread_mutex_unlock(&t->mu);
			asp_arena *ar = asp_arena_new();
			asp_spawn_params sp;
			asp_spawn_params_init(&sp);
			sp.command = "echo x";
			sp.stdin_eof = true;
			asp_spawn_result sr;
			asp_error err;
			asp_status st = asp_local_conn_ops.spawn(t->a, &sp, &sr, ar, &err);
			asp_arena_free(ar);
			pthread_mutex_lock(&t->mu);
			if (st != ASP_OK)
				t->bad++;
			struct timespec dl;
			deadline_in(&dl, 30);
			while (!t->a_failed && deadline_wait(&t->cv, &t->mu, &dl))
				;
			/* The backend marks the connection dead once that sink call has returned:
			 * a bounded poll of its flag (no event says so). */
			for (int i = 0; i < 30000 && !conn_is_dead(t->a); i++)
				nanosleep(&(struct timespec){0, 1000000}, NULL);
			t->b_release = true;
			pthread_cond_broadcast(&t->cv);
			uint64_t past = ev->offset + 1024u * 1024u + 64u * 1024u;
			deadline_in(&dl, 2);
			while (t->b_got <= past && deadline_wait(&t->cv, &t->mu, &dl))
				;
			if (!seq_bytes_ok(ev->offset, ev->data.data, ev->data.len))
				t->bad++;
			t->a_first_done = true;
		}
	}
	pthread_mutex_unlock(&t->mu);
	return true;
}

/*
 * A sink gets a replay's output as events that point into the process's ring, with the
 * process lock released: the pump must not append (and so wrap over, or move, those
 * bytes) until the sink returns, however long it takes, even once the subscriber's
 * connection has failed meanwhile.
 */
static void test_replay_lends_stable_bytes(void)
{
	lend *t = &lend_state;
	asp_local *l = asp_local_new(0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	asp_local_set_shared(l, true);
	asp_conn_sink sb = {.send = frame_ignored, .ctx = t, .event = lend_b_event};
	asp_conn_sink sa = {.send = frame_ignored, .ctx = t, .event = lend_a_event};
	asp_local_conn *b = asp_local_connect(l, &sb), *a = asp_local_connect(l, &sa);
	CU_ASSERT_FATAL(a && b);
	t->a = a;
	asp_arena *ar = asp_arena_new();
	asp_error err;
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = "seq -f %015.0f 1 300000"; /* 4.8 MB */
	sp.stdin_eof = true;
	asp_spawn_result sr;
	pthread_mutex_lock(&t->mu); /* the sinks see p1 set before any event of it */
	CU_ASSERT_EQUAL_FATAL(asp_local_conn_ops.spawn(b, &sp, &sr, ar, &err), ASP_OK);
	t->p1 = sr.proc;
	struct timespec dl;
	deadline_in(&dl, 60);
	while (!t->b_blocked && deadline_wait(&t->cv, &t->mu, &dl))
		;
	bool blocked = t->b_blocked;
	pthread_mutex_unlock(&t->mu);
	CU_ASSERT_TRUE(blocked);

	asp_proc_attach_params ap;
	asp_proc_attach_params_init(&ap);
	ap.proc = sr.proc;
	asp_proc_attach_result attach_r;
	CU_ASSERT_EQUAL(asp_local_conn_ops.proc_attach(a, &ap, &attach_r, ar, &err), ASP_OK);

	deadline_in(&dl, 60);
	pthread_mutex_lock(&t->mu);
	while (!t->b_exit && deadline_wait(&t->cv, &t->mu, &dl))
		;
	CU_ASSERT_TRUE(t->b_exit);
	CU_ASSERT_TRUE(t->a_first_done && t->a_failed);
	CU_ASSERT_TRUE(t->a_first_off > 0); /* the ring had wrapped: the case looked at */
	CU_ASSERT_EQUAL(t->b_got, 300000u * 16u);
	CU_ASSERT_EQUAL(t->bad, 0);
	pthread_mutex_unlock(&t->mu);
	asp_local_disconnect(a);
	asp_local_disconnect(b);
	asp_arena_free(ar);
	asp_local_free(l);
}

/* ---- the edges' one encoder ------------------------------------------------------- */

typedef struct capture {
	uint8_t *data;
	size_t len;
	int sends, sendvs, max_iov;
} capture;

static bool cap_send(void *ctx, const uint8_t *frame, size_t len)
{
	capture *c = ctx;
	c->sends++;
	c->data = realloc(c->data, len);
	memcpy(c->data, frame, len);
	c->len = len;
	return true;
}

static bool cap_sendv(void *ctx, const struct iovec *iov, int n)
{
	capture *c = ctx;
	c->sendvs++;
	c->max_iov = n > c->max_iov ? n : c->max_iov;
	c->len = 0;
	for (int i = 0; i < n; i++) {
		c->data = realloc(c->data, c->len + iov[i].iov_len);
		memcpy(c->data + c->len, iov[i].iov_base, iov[i].iov_len);
		c->len += iov[i].iov_len;
	}
	return true;
}

/*
 * asp_conn_sink_notify writes the frame asp_wire_notify makes, the same bytes whether
 * the sink takes it whole or in pieces; with sendv a full 64 KiB chunk goes out from
 * the event's own memory (a piece of its own), a small one is copied.
 */
static void test_sink_notify_frames(void)
{
	static uint8_t big[64 * 1024];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(i * 131u);
	asp_output_event out = {.proc = 70000,
	                        .stream = "stderr",
	                        .offset = 1u << 20,
	                        .data = {big, sizeof big},
	                        .has_truncated_before = true,
	                        .truncated_before = 1u << 20};
	asp_output_event small = out;
	small.data.len = 100;
	small.has_truncated_before = false;
	asp_exit_event ex = {.proc = 70000, .exit_code = -1, .signal = "KILL", .timed_out = true};
	struct {
		asp_notice_id n;
		const void *ev;
		bool lent;
	} cases[] = {{ASP_NOTICE_OUTPUT, &out, true},
	             {ASP_NOTICE_OUTPUT, &small, false},
	             {ASP_NOTICE_EXIT, &ex, false}};
	asp_reply *scratch = asp_reply_new();
	CU_ASSERT_PTR_NOT_NULL_FATAL(scratch);
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		asp_buf want;
		asp_buf_init(&want);
		CU_ASSERT_EQUAL_FATAL(asp_wire_notify(&want, cases[k].n, cases[k].ev), 0);
		capture whole = {0}, pieces = {0};
		asp_conn_sink s1 = {.send = cap_send, .ctx = &whole};
		asp_conn_sink s2 = {.send = cap_send, .ctx = &pieces, .sendv = cap_sendv};
		CU_ASSERT_TRUE(asp_conn_sink_notify(&s1, NULL, cases[k].n, cases[k].ev));
		CU_ASSERT_TRUE(asp_conn_sink_notify(&s2, scratch, cases[k].n, cases[k].ev));
		CU_ASSERT_TRUE(whole.sends == 1 && whole.len == want.len &&
		               memcmp(whole.data, want.data, want.len) == 0);
		CU_ASSERT_TRUE(pieces.len == want.len &&
		               memcmp(pieces.data, want.data, want.len) == 0);
		CU_ASSERT_EQUAL(pieces.sendvs, cases[k].lent ? 1 : 0);
		CU_ASSERT_EQUAL(pieces.sends, cases[k].lent ? 0 : 1);
		CU_ASSERT_TRUE(!cases[k].lent || pieces.max_iov >= 2);
		free(whole.data);
		free(pieces.data);
		asp_buf_free(&want);
	}
	asp_reply_free(scratch);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		conf_list(stdout);
		return 0;
	}
	backend = asp_local_new(0);
	if (!backend)
		return 2;
	local_ops = asp_local_ops;
	asp_ops_complete(&local_ops);
	/* A careless host: an fd without close-on-exec, which no command may inherit
	 * (exec_no_inherited_fds checks). */
	int careless = open("/dev/null", O_RDONLY);
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite b = NULL;
	const asp_ops *conn_ops = NULL;
	void *conn_self = NULL;
	asp_error err;
	conn_backend = asp_local_new(0);
	if (conn_backend) /* peer_open connects again: hello announces "reattach" */
		asp_local_set_shared(conn_backend, true);
	if (!conn_backend ||
	    asp_local_client_open(conn_backend, true, &conn_ops, &conn_self, &err) != ASP_OK)
		return 2;
	conf_transport_streaming(&conn_streaming, &asp_local_transport);
	conn_streaming.peer_open = peer_open;
	conn_streaming.peer_close = peer_close;
	if (conf_register_cunit("local", &local_ops, backend, tmp) < 0 ||
	    conf_register_cunit_st("local_conn", conn_ops, conn_self, &conn_streaming, tmp) < 0 ||
	    !(b = CU_add_suite("local_backend", backend_init, backend_clean)) ||
	    !CU_add_test(b, "no_fd_leaks", test_no_fd_leaks) ||
	    !CU_add_test(b, "small_max_message", test_small_max_message) ||
	    !CU_add_test(b, "direct_call_checks", test_direct_call_checks) ||
	    !CU_add_test(b, "many_threads", test_many_threads) ||
	    !CU_add_test(b, "replay_lends_stable_bytes", test_replay_lends_stable_bytes) ||
	    !CU_add_test(b, "sink_notify_frames", test_sink_notify_frames) ||
	    !CU_add_test(b, "claims_are_judged", test_claims_are_judged)) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		CU_cleanup_registry();
		asp_local_free(backend);
		if (careless >= 0)
			close(careless);
		return 2;
	}
	int rc = cu_run(argc, argv);
	asp_local_free(backend);
	asp_local_client_close(conn_self); /* frees conn_backend, ending its processes */
	if (careless >= 0)
		close(careless);
	return rc;
}
