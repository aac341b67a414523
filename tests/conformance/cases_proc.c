/*
 * The streaming conformance cases: spawn with live output, proc_write, proc_signal,
 * proc_wait, proc_list, proc_attach (docs/design.md, "Operations"). The table (cases.c)
 * says which ops and hello features each needs; the runner makes a case n/a when hello
 * does not announce them, so a case that runs may use them: "follow" means ctx->st can
 * follow, "reattach" that ctx->st->peer_open opens a second connection.
 *
 * Every case runs inside a fixture that, whatever happened, KILLs the processes it
 * spawned and detaches what it follows before the collectors on its stack go away.
 */
#include "cases_proc.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SAFETY_TIMEOUT_MS 30000 /* every spawn ends by then even if a case fails */
#define END_WAIT_MS       15000
#define MIB               (1024u * 1024u)

/* ---- a collector: what one follower received ------------------------------------- */

typedef struct coll {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	void *self;    /* the connection it follows on */
	uint64_t proc; /* set once followed */
	bool followed;
	uint8_t *data[2];
	size_t len[2], keep; /* bytes kept per stream (the rest only counted) */
	uint64_t total[2], first[2], next[2];
	bool got[2];
	uint64_t seen_proc; /* the proc the callbacks named */
	int chunks[2];
	double t_first, t_last, t_end;
	char bad[256]; /* the first broken promise */
	bool ended, exited, lost;
	asp_exit_event ev;
	char sig[16];
	int delay_ms;      /* a slow reader: sleep this long per chunk ... */
	bool slow;         /* ... while this holds ... */
	double slow_until; /* ... and until then (a case that failed must not crawl) */
} coll;

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void coll_init(coll *c, size_t keep)
{
	memset(c, 0, sizeof *c);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->keep = keep;
}

static void coll_destroy(coll *c)
{
	free(c->data[0]);
	free(c->data[1]);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
}

static void coll_bad(coll *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void coll_bad(coll *c, const char *fmt, ...)
{
	if (c->bad[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->bad, sizeof c->bad, fmt, ap);
	va_end(ap);
}

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	int s = stream == ASP_STREAM_STDERR;
	double now = mono_ms();
	if (c->ended)
		coll_bad(c, "output (offset %llu, %zu bytes) after the end",
		         (unsigned long long)offset, len);
	if (c->seen_proc && c->seen_proc != proc)
		coll_bad(c, "output of process %llu, expected %llu", (unsigned long long)proc,
		         (unsigned long long)c->seen_proc);
	c->seen_proc = proc;
	if (c->got[s] && offset != c->next[s])
		coll_bad(c, "%s offset %llu where %llu was next", s ? "stderr" : "stdout",
		         (unsigned long long)offset, (unsigned long long)c->next[s]);
	if (!c->got[s])
		c->first[s] = offset;
	c->got[s] = true;
	c->next[s] = offset + len;
	c->total[s] += len;
	if (!c->chunks[0] && !c->chunks[1])
		c->t_first = now;
	c->t_last = now;
	c->chunks[s]++;
	if (c->len[s] < c->keep) {
		size_t n = c->keep - c->len[s] < len ? c->keep - c->len[s] : len;
		uint8_t *nb = realloc(c->data[s], c->len[s] + n + 1);
		if (nb) {
			memcpy(nb + c->len[s], data, n);
			c->data[s] = nb;
			c->len[s] += n;
		}
	}
	pthread_cond_broadcast(&c->cv);
	bool slow = c->slow && c->chunks[0] + c->chunks[1] > 1 && now < c->slow_until;
	int delay = c->delay_ms;
	pthread_mutex_unlock(&c->mu);
	if (slow)
		usleep((useconds_t)delay * 1000); /* a client that reads slowly */
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	if (c->ended)
		coll_bad(c, "a second end (an exit after %s)", c->lost ? "lost" : "the exit");
	c->ended = c->exited = true;
	c->t_end = mono_ms();
	c->ev = *ev;
	c->ev.signal = NULL;
	if (ev->signal) {
		snprintf(c->sig, sizeof c->sig, "%s", ev->signal);
		c->ev.signal = c->sig;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	(void)err;
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	if (c->ended)
		coll_bad(c, "a second end (lost after %s)", c->lost ? "lost" : "the exit");
	c->ended = c->lost = true;
	c->t_end = mono_ms();
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static const asp_proc_callbacks coll_cb = {on_output, on_exit_ev, on_lost};

/* Waits until the follower ended; false after `ms`. */
static bool coll_wait_end(coll *c, int ms)
{
	double until = mono_ms() + ms;
	pthread_mutex_lock(&c->mu);
	while (!c->ended && mono_ms() < until) {
		pthread_mutex_unlock(&c->mu);
		usleep(2000);
		pthread_mutex_lock(&c->mu);
	}
	bool ended = c->ended;
	pthread_mutex_unlock(&c->mu);
	return ended;
}

/* Waits until stream `s` has at least `n` bytes; false after `ms`. */
static bool coll_wait_bytes(coll *c, int s, uint64_t n, int ms)
{
	double until = mono_ms() + ms;
	pthread_mutex_lock(&c->mu);
	while (c->total[s] < n && !c->ended && mono_ms() < until) {
		pthread_mutex_unlock(&c->mu);
		usleep(2000);
		pthread_mutex_lock(&c->mu);
	}
	bool ok = c->total[s] >= n;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

static bool coll_is(coll *c, int s, const char *want)
{
	size_t n = strlen(want);
	return c->len[s] == n && (n == 0 || memcmp(c->data[s], want, n) == 0);
}

static const char *coll_show(conf_ctx *ctx, coll *c, int s)
{
	size_t n = c->len[s] < 120 ? c->len[s] : 120;
	char *out = asp_arena_alloc(ctx->a, n * 4 + 8);
	if (!out)
		return "?";
	char *w = out;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = c->data[s][i];
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			*w++ = (char)ch;
		else
			w += sprintf(w, "\\x%02x", ch);
	}
	if (n < c->len[s])
		w += sprintf(w, "...");
	*w = '\0';
	return out;
}

/* ---- the fixture ------------------------------------------------------------------ */

#define MAX_COLL  6
#define MAX_PROCS 16

typedef struct fx {
	conf_ctx *ctx;
	coll c[MAX_COLL];
	int ncoll;
	uint64_t procs[MAX_PROCS];
	int nprocs;
	void *peer;
} fx;

static coll *fx_coll(fx *f, size_t keep)
{
	if (f->ncoll == MAX_COLL)
		return NULL;
	coll *c = &f->c[f->ncoll++];
	coll_init(c, keep);
	return c;
}

static void kill_proc(conf_ctx *ctx, void *self, uint64_t proc)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = "KILL";
	asp_proc_signal_result r;
	asp_error err;
	ctx->ops->proc_signal(self, &p, &r, ctx->a, &err);
}

static void fx_done(fx *f)
{
	conf_ctx *ctx = f->ctx;
	for (int i = 0; i < f->nprocs; i++)
		kill_proc(ctx, ctx->self, f->procs[i]);
	for (int i = 0; i < f->ncoll; i++) {
		coll *c = &f->c[i];
		pthread_mutex_lock(&c->mu);
		c->slow = false;
		bool live = c->followed && !c->ended;
		pthread_mutex_unlock(&c->mu);
		if (live && !coll_wait_end(c, 5000) && ctx->st)
			ctx->st->detach(ctx->st->ctx, c->self, c->proc);
	}
	if (f->peer)
		ctx->st->peer_close(ctx->st->ctx, f->peer);
	for (int i = 0; i < f->ncoll; i++)
		coll_destroy(&f->c[i]);
}

#define PROC_CASE(name)                                                                            \
	static void name##_body(conf_ctx *ctx, fx *f);                                             \
	void name(conf_ctx *ctx)                                                                   \
	{                                                                                          \
		fx f = {.ctx = ctx};                                                               \
		name##_body(ctx, &f);                                                              \
		fx_done(&f);                                                                       \
	}                                                                                          \
	static void name##_body(conf_ctx *ctx, fx *f)

/* ---- helpers: each records a failure at the caller's line ------------------------- */

static asp_status do_spawn(conf_ctx *ctx, fx *f, void *self, asp_spawn_params *p, coll *c,
                           uint64_t *proc, asp_error *err)
{
	if (!p->timeout_ms)
		p->timeout_ms = SAFETY_TIMEOUT_MS;
	*proc = 0;
	asp_status st;
	if (c) {
		st = ctx->st->spawn(ctx->st->ctx, self, p, &coll_cb, c, proc, err);
	} else {
		asp_spawn_result r;
		st = ctx->ops->spawn(self, p, &r, ctx->a, err);
		if (st == ASP_OK)
			*proc = r.proc;
	}
	if (st == ASP_OK) {
		if (f->nprocs < MAX_PROCS)
			f->procs[f->nprocs++] = *proc;
		if (c) {
			pthread_mutex_lock(&c->mu);
			c->self = self;
			c->proc = *proc;
			c->followed = true;
			pthread_mutex_unlock(&c->mu);
		}
	}
	return st;
}

static bool h_spawn(conf_ctx *ctx, fx *f, int line, asp_spawn_params *p, coll *c, uint64_t *proc)
{
	asp_error err;
	asp_status st = do_spawn(ctx, f, ctx->self, p, c, proc, &err);
	if (st != ASP_OK)
		conf_fail(ctx, __FILE__, line, "spawn %s: %s: %s",
		          p->command ? p->command : "(argv)", asp_strerror(st), err.message);
	return st == ASP_OK;
}

#define SPAWN(p, c, proc) CONF_REQ(ctx, h_spawn(ctx, f, __LINE__, (p), (c), (proc)))

/* A collector's end within END_WAIT_MS, with no broken promise. */
static bool h_end(conf_ctx *ctx, int line, coll *c)
{
	if (!c)
		return conf_fail(ctx, __FILE__, line, "out of collectors"), false;
	if (!coll_wait_end(c, END_WAIT_MS)) {
		conf_fail(ctx, __FILE__, line, "no exit within %d ms (%llu+%llu bytes came)",
		          END_WAIT_MS, (unsigned long long)c->total[0],
		          (unsigned long long)c->total[1]);
		return false;
	}
	if (c->bad[0]) {
		conf_fail(ctx, __FILE__, line, "%s", c->bad);
		return false;
	}
	if (!c->exited) {
		conf_fail(ctx, __FILE__, line, "the follower was lost instead of seeing the exit");
		return false;
	}
	return true;
}

#define END(c) CONF_REQ(ctx, h_end(ctx, __LINE__, (c)))
#define COLL(var, keep)                                                                            \
	coll *var = fx_coll(f, (keep));                                                            \
	CONF_CHECK(ctx, var != NULL)

static asp_status do_wait(conf_ctx *ctx, uint64_t proc, uint64_t ms, asp_proc_wait_result *r,
                          asp_error *err)
{
	asp_proc_wait_params p;
	asp_proc_wait_params_init(&p);
	p.proc = proc;
	p.timeout_ms = ms;
	return ctx->ops->proc_wait(ctx->self, &p, r, ctx->a, err);
}

static asp_status do_signal(conf_ctx *ctx, uint64_t proc, const char *sig, asp_error *err)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = sig;
	asp_proc_signal_result r;
	return ctx->ops->proc_signal(ctx->self, &p, &r, ctx->a, err);
}

static asp_status do_write(conf_ctx *ctx, uint64_t proc, const void *data, size_t len, bool eof,
                           asp_error *err)
{
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = proc;
	p.data = (asp_bytes){data, len};
	p.eof = eof;
	asp_proc_write_result r;
	return ctx->ops->proc_write(ctx->self, &p, &r, ctx->a, err);
}

static asp_status do_attach(conf_ctx *ctx, void *self, uint64_t proc, uint64_t out_off,
                            uint64_t err_off, coll *c, asp_error *err)
{
	asp_proc_attach_params p;
	asp_proc_attach_params_init(&p);
	p.proc = proc;
	p.stdout_offset = out_off;
	p.stderr_offset = err_off;
	asp_status st = ctx->st->attach(ctx->st->ctx, self, &p, &coll_cb, c, err);
	if (st == ASP_OK) {
		pthread_mutex_lock(&c->mu);
		c->self = self;
		c->proc = proc;
		c->followed = true;
		pthread_mutex_unlock(&c->mu);
	}
	return st;
}

static asp_strv strv_of(conf_ctx *ctx, const char *const *items, size_t n)
{
	const char **v = asp_arena_alloc(ctx->a, n * sizeof *v);
	if (v)
		memcpy(v, items, n * sizeof *v);
	return (asp_strv){v, v ? n : 0};
}

#define ARGV(...)                                                                                  \
	strv_of(ctx, (const char *const[]){__VA_ARGS__},                                           \
	        sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static bool h_sh(conf_ctx *ctx, int line, const char *cmd, asp_exec_result *r)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	p.cwd = ctx->dir;
	p.timeout_ms = SAFETY_TIMEOUT_MS;
	asp_error err;
	asp_status st = ctx->ops->exec(ctx->self, &p, r, ctx->a, &err);
	if (st != ASP_OK)
		conf_fail(ctx, __FILE__, line, "exec %s: %s: %s", cmd, asp_strerror(st),
		          err.message);
	return st == ASP_OK;
}

/* ---- the cases -------------------------------------------------------------------- */

PROC_CASE(spawn_output_live)
{
	COLL(c, MIB);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done";
	uint64_t proc;
	double t0 = mono_ms();
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, coll_is(c, 0, "line1\nline2\nline3\nline4\nline5\n"), "stdout '%s'",
	            coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, c->ev.exit_code == 0 && !c->ev.signal, "exit %lld",
	            (long long)c->ev.exit_code);
	CONF_CHECKF(ctx, c->chunks[0] >= 4, "%d chunks: the output came in one piece, not live",
	            c->chunks[0]);
	/* Live: the first line well before the exit (~0.8 s later), the lines spread out. */
	CONF_CHECKF(ctx, c->t_end - c->t_first >= 500,
	            "first chunk %.0f ms after the spawn, exit %.0f ms after: not live",
	            c->t_first - t0, c->t_end - t0);
	CONF_CHECKF(ctx, c->t_last - c->t_first >= 600, "chunks spread over %.0f ms only",
	            c->t_last - c->t_first);
	CONF_CHECKF(ctx, c->seen_proc == proc, "notifications named process %llu, spawn %llu",
	            (unsigned long long)c->seen_proc, (unsigned long long)proc);
}

PROC_CASE(spawn_output_order)
{
	COLL(c, 4 * MIB);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	/* Output at once (before the client can have seen the response, unless it comes
	 * first), a lot of it, both streams, then a non-zero exit. */
	p.command = "printf out1; printf err1 >&2; head -c 2097152 /dev/zero | tr '\\000' x; "
	            "printf err2 >&2; printf end; exit 5";
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, c->first[0] == 0 && c->first[1] == 0, "first offsets %llu %llu",
	            (unsigned long long)c->first[0], (unsigned long long)c->first[1]);
	CONF_CHECKF(ctx, c->len[0] == 4 + 2 * MIB + 3, "stdout %zu bytes", c->len[0]);
	CONF_CHECK(ctx, memcmp(c->data[0], "out1", 4) == 0);
	CONF_CHECK(ctx, memcmp(c->data[0] + 4 + 2 * MIB, "end", 3) == 0);
	bool xs = true;
	for (size_t i = 4; i < 4 + 2 * MIB && xs; i++)
		xs = c->data[0][i] == 'x';
	CONF_CHECK(ctx, xs);
	CONF_CHECKF(ctx, coll_is(c, 1, "err1err2"), "stderr '%s'", coll_show(ctx, c, 1));
	CONF_CHECKF(ctx, c->ev.exit_code == 5 && !c->ev.timed_out, "exit %lld",
	            (long long)c->ev.exit_code);
	CONF_CHECK(ctx, c->ev.proc == proc);
	/* proc_wait after the end gives the same */
	asp_proc_wait_result w;
	asp_error err;
	CONF_OK(ctx, do_wait(ctx, proc, 5000, &w, &err), &err);
	CONF_CHECK(ctx, w.exit_code == 5 && !w.signal);
}

PROC_CASE(spawn_stdin_binary)
{
	COLL(c, MIB);
	size_t n = 256 + 300 * 1024;
	uint8_t *in = asp_arena_alloc(ctx->a, n);
	CONF_CHECK(ctx, in != NULL);
	for (size_t i = 0; i < n; i++)
		in[i] = i < 256 ? (uint8_t)i : (uint8_t)(i * 7 + (i >> 9));
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("cat");
	uint64_t proc;
	SPAWN(&p, c, &proc);
	asp_error err;
	CONF_OK(ctx, do_write(ctx, proc, in, 256, false, &err), &err);
	CONF_OK(ctx, do_write(ctx, proc, in + 256, 100 * 1024, false, &err), &err);
	CONF_OK(ctx, do_write(ctx, proc, in + 256 + 100 * 1024, n - 256 - 100 * 1024, true, &err),
	        &err);
	END(c);
	CONF_CHECKF(ctx, c->len[0] == n && memcmp(c->data[0], in, n) == 0,
	            "cat gave back %zu of %zu bytes, or other bytes", c->len[0], n);
	CONF_CHECK(ctx, c->ev.exit_code == 0);
	/* after eof, and on a finished process: invalid_argument */
	CONF_ERR(ctx, do_write(ctx, proc, "x", 1, false, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_ERR(ctx, do_write(ctx, proc, NULL, 0, true, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_ERR(ctx, do_write(ctx, 0x7fffffffffffull, "x", 1, false, &err), ASP_E_NOT_FOUND, &err);
}

static bool h_pid_dead(conf_ctx *ctx, int line)
{
	for (int i = 0; i < 20; i++) {
		asp_exec_result r;
		if (!h_sh(ctx, line, CONF_PID_STATE_SH("bg.pid"), &r))
			return false;
		if (r.stdout_data.len == 4 && memcmp(r.stdout_data.data, "dead", 4) == 0)
			return true;
		usleep(500 * 1000);
	}
	conf_fail(ctx, __FILE__, line, "a process of the timed-out group survived");
	return false;
}

PROC_CASE(spawn_timeout_kills_group)
{
	COLL(c, MIB);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "sleep 30 & echo $! > bg.pid; sleep 30";
	p.cwd = ctx->dir;
	p.timeout_ms = 300;
	uint64_t proc;
	double t0 = mono_ms();
	SPAWN(&p, c, &proc);
	END(c);
	double took = c->t_end - t0;
	CONF_CHECKF(ctx,
	            c->ev.timed_out && c->ev.exit_code == -1 && c->ev.signal &&
	                strcmp(c->ev.signal, "TERM") == 0,
	            "timed_out %d exit %lld signal %s", c->ev.timed_out, (long long)c->ev.exit_code,
	            c->ev.signal ? c->ev.signal : "nil");
	CONF_CHECKF(ctx, took >= 250 && took < CONF_SLOW_MS, "ended after %.0f ms", took);
	asp_proc_wait_result w;
	asp_error err;
	CONF_OK(ctx, do_wait(ctx, proc, 5000, &w, &err), &err);
	CONF_CHECK(ctx, w.timed_out);
	CONF_REQ(ctx, h_pid_dead(ctx, __LINE__));
}

PROC_CASE(proc_signal_each)
{
	static const char *const names[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"};
	asp_error err;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.command =
		    "ulimit -c 0 2>/dev/null; exec sleep 30"; /* exec: the signal hits sleep */
		p.cwd = ctx->dir;
		uint64_t proc;
		SPAWN(&p, NULL, &proc);
		CONF_OK(ctx, do_signal(ctx, proc, names[i], &err), &err);
		asp_proc_wait_result w;
		CONF_OK(ctx, do_wait(ctx, proc, 10000, &w, &err), &err);
		CONF_CHECKF(ctx, w.exit_code == -1 && w.signal && strcmp(w.signal, names[i]) == 0,
		            "%s: exit %lld signal %s", names[i], (long long)w.exit_code,
		            w.signal ? w.signal : "nil");
		/* a finished process: a no-op */
		CONF_OK(ctx, do_signal(ctx, proc, names[i], &err), &err);
		if (i == 0) {
			CONF_ERR(ctx, do_signal(ctx, proc, "FOO", &err), ASP_E_INVALID_ARGUMENT,
			         &err);
			CONF_ERR(ctx, do_signal(ctx, proc, "STOP", &err), ASP_E_INVALID_ARGUMENT,
			         &err);
		}
	}
	CONF_ERR(ctx, do_signal(ctx, 0x7fffffffffffull, "TERM", &err), ASP_E_NOT_FOUND, &err);
}

PROC_CASE(proc_wait_timeout)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "exec sleep 30";
	uint64_t proc;
	SPAWN(&p, NULL, &proc);
	asp_proc_wait_result w;
	asp_error err;
	double t0 = mono_ms();
	CONF_ERR(ctx, do_wait(ctx, proc, 300, &w, &err), ASP_E_TIMEOUT, &err);
	double took = mono_ms() - t0;
	CONF_CHECKF(ctx, took >= 250 && took < CONF_SLOW_MS, "the timeout came after %.0f ms",
	            took);
	CONF_OK(ctx, do_signal(ctx, proc, "KILL", &err), &err);
	CONF_OK(ctx, do_wait(ctx, proc, 0, &w, &err), &err);
	CONF_CHECKF(ctx, w.signal && strcmp(w.signal, "KILL") == 0 && !w.timed_out, "signal %s",
	            w.signal ? w.signal : "nil");
	CONF_ERR(ctx, do_wait(ctx, 0x7fffffffffffull, 10, &w, &err), ASP_E_NOT_FOUND, &err);
}

static const asp_proc_info *find_proc(const asp_proc_list_result *r, uint64_t proc)
{
	for (size_t i = 0; i < r->procs.count; i++)
		if (r->procs.items[i].proc == proc)
			return &r->procs.items[i];
	return NULL;
}

PROC_CASE(proc_list_fields)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("sh", "-c", "exit 3");
	p.tag = "conf-done";
	uint64_t done, running;
	SPAWN(&p, NULL, &done);
	asp_proc_wait_result w;
	asp_error err;
	CONF_OK(ctx, do_wait(ctx, done, 10000, &w, &err), &err);
	asp_spawn_params_init(&p);
	p.command = "exec sleep 30";
	p.tag = "conf-running";
	SPAWN(&p, NULL, &running);
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CONF_OK(ctx, ctx->ops->proc_list(ctx->self, &lp, &lr, ctx->a, &err), &err);
	const asp_proc_info *d = find_proc(&lr, done), *r = find_proc(&lr, running);
	CONF_CHECKF(ctx, d && r, "proc_list lacks %s", d ? "the running one" : "the finished one");
	CONF_CHECKF(ctx, d->tag && strcmp(d->tag, "conf-done") == 0, "tag %s",
	            d->tag ? d->tag : "nil");
	CONF_CHECKF(ctx, strcmp(d->command, "sh -c 'exit 3'") == 0, "argv shown as [%s]",
	            d->command);
	CONF_CHECK(ctx, !d->running && d->has_exit_code && d->exit_code == 3);
	CONF_CHECKF(ctx, strcmp(r->command, "exec sleep 30") == 0, "command [%s]", r->command);
	CONF_CHECK(ctx, r->running && !r->has_exit_code);
	CONF_CHECK(ctx, r->tag && strcmp(r->tag, "conf-running") == 0);
	/* Finished now, not in 30 s while a later case counts finished processes. */
	CONF_OK(ctx, do_signal(ctx, running, "KILL", &err), &err);
	CONF_OK(ctx, do_wait(ctx, running, 10000, &w, &err), &err);
}

PROC_CASE(proc_list_retains_64)
{
	/* 66 finish in turn: the first two are forgotten, the last 64 stay with their exit. */
	enum { N = 66, KEEP = 64, SLACK = 8 };
	(void)f; /* each has finished before the next starts: none to clean up */
	uint64_t procs[N];
	asp_error err;
	asp_proc_wait_result w;
	for (int i = 0; i < N; i++) {
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.has_argv = true;
		p.argv = ARGV("sh", "-c", "exit 7");
		asp_spawn_result r;
		CONF_OK(ctx, ctx->ops->spawn(ctx->self, &p, &r, ctx->a, &err), &err);
		procs[i] = r.proc;
		CONF_OK(ctx, do_wait(ctx, procs[i], 10000, &w, &err), &err);
	}
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CONF_OK(ctx, ctx->ops->proc_list(ctx->self, &lp, &lr, ctx->a, &err), &err);
	/*
	 * Exactly 64 finished ones are listed. A process of an earlier case that finished
	 * meanwhile takes one of the places, so only ours that finished last are sure to stay.
	 */
	size_t finished = 0;
	for (size_t i = 0; i < lr.procs.count; i++)
		finished += !lr.procs.items[i].running;
	CONF_CHECKF(ctx, finished == KEEP, "%zu finished processes listed", finished);
	for (int i = 0; i < N; i++) {
		const asp_proc_info *e = find_proc(&lr, procs[i]);
		if (i < N - KEEP) {
			CONF_CHECKF(ctx, !e, "process %d of %d is still listed", i + 1, N);
			CONF_ERR(ctx, do_wait(ctx, procs[i], 10, &w, &err), ASP_E_NOT_FOUND, &err);
		} else if (i >= N - KEEP + SLACK) {
			CONF_CHECKF(ctx, e && !e->running && e->exit_code == 7,
			            "process %d of %d is not listed with its exit", i + 1, N);
		}
	}
}

PROC_CASE(proc_attach_retained)
{
	/*
	 * A process, then 55 more finish in turn: it is still among the last 64 finished
	 * (8 places spare for processes of earlier cases finishing meanwhile), so attaching
	 * replays its output and gives its exit.
	 */
	enum { NEWER = 64 - 1 - 8 };
	asp_error err;
	asp_proc_wait_result w;
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "printf kept; exit 7";
	uint64_t proc;
	SPAWN(&p, NULL, &proc);
	CONF_OK(ctx, do_wait(ctx, proc, 10000, &w, &err), &err);
	for (int i = 0; i < NEWER; i++) {
		asp_spawn_params_init(&p);
		p.has_argv = true;
		p.argv = ARGV("true");
		uint64_t newer;
		SPAWN(&p, NULL, &newer);
		CONF_OK(ctx, do_wait(ctx, newer, 10000, &w, &err), &err);
	}
	COLL(c, 64);
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 0, 0, c, &err), &err);
	END(c);
	CONF_CHECKF(ctx, coll_is(c, 0, "kept"), "replayed '%s'", coll_show(ctx, c, 0));
	CONF_CHECK(ctx, c->ev.exit_code == 7 && c->ev.proc == proc);
}

PROC_CASE(proc_attach_replay)
{
	COLL(c1, MIB);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "printf 0123456789; printf ab >&2; sleep 0.3; printf tail";
	uint64_t proc;
	SPAWN(&p, c1, &proc);
	END(c1);
	CONF_CHECKF(ctx, coll_is(c1, 0, "0123456789tail"), "stdout '%s'", coll_show(ctx, c1, 0));
	/* a finished process: replay from the offsets, then the exit, before the answer */
	COLL(c2, MIB);
	asp_error err;
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 4, 1, c2, &err), &err);
	CONF_CHECKF(ctx, c2->ended, "attach to a finished process returned before its exit");
	END(c2);
	CONF_CHECKF(ctx, c2->first[0] == 4 && coll_is(c2, 0, "456789tail"),
	            "replay from %llu: '%s'", (unsigned long long)c2->first[0],
	            coll_show(ctx, c2, 0));
	CONF_CHECKF(ctx, c2->first[1] == 1 && coll_is(c2, 1, "b"), "stderr replay '%s'",
	            coll_show(ctx, c2, 1));
	CONF_CHECK(ctx, c2->ev.exit_code == 0 && c2->ev.proc == proc);
	/* errors never call back */
	COLL(c3, MIB);
	CONF_ERR(ctx, do_attach(ctx, ctx->self, proc, 15, 0, c3, &err), ASP_E_INVALID_ARGUMENT,
	         &err);
	CONF_ERR(ctx, do_attach(ctx, ctx->self, 0x7fffffffffffull, 0, 0, c3, &err), ASP_E_NOT_FOUND,
	         &err);
	/* a running process, again on this connection after a detach: replay, then live */
	COLL(c4, MIB);
	asp_spawn_params_init(&p);
	p.command = "printf start; sleep 0.6; printf end";
	uint64_t live;
	SPAWN(&p, c4, &live);
	CONF_CHECKF(ctx, coll_wait_bytes(c4, 0, 5, 5000), "no output within 5 s");
	ctx->st->detach(ctx->st->ctx, ctx->self, live);
	pthread_mutex_lock(&c4->mu);
	c4->followed = false; /* detached: it will not end */
	pthread_mutex_unlock(&c4->mu);
	COLL(c5, MIB);
	CONF_OK(ctx, do_attach(ctx, ctx->self, live, 0, 0, c5, &err), &err);
	END(c5);
	CONF_CHECKF(ctx, c5->first[0] == 0 && coll_is(c5, 0, "startend"), "got '%s' from %llu",
	            coll_show(ctx, c5, 0), (unsigned long long)c5->first[0]);
	usleep(100 * 1000);
	CONF_CHECKF(ctx, !c4->ended && !c3->chunks[0] && !c3->ended,
	            "a detached or failed follower was called");
}

PROC_CASE(proc_attach_truncated)
{
	/* 3 MiB + 1: the responder holds the last 1 MiB. Spawned without a follower: the
	 * notifications the client drops must do no harm. */
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "head -c 3145728 /dev/zero | tr '\\000' y; printf Z";
	uint64_t proc;
	SPAWN(&p, NULL, &proc);
	asp_proc_wait_result w;
	asp_error err;
	CONF_OK(ctx, do_wait(ctx, proc, 20000, &w, &err), &err);
	COLL(c, 2 * MIB);
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 0, 0, c, &err), &err);
	END(c);
	uint64_t total = 3 * MIB + 1;
	CONF_CHECKF(ctx, c->first[0] == total - MIB, "replay starts at %llu, expected %llu",
	            (unsigned long long)c->first[0], (unsigned long long)(total - MIB));
	CONF_CHECKF(ctx, c->len[0] == MIB && c->data[0][MIB - 1] == 'Z' && c->data[0][0] == 'y',
	            "replayed %zu bytes", c->len[0]);
}

PROC_CASE(proc_attach_after_close)
{
	f->peer = ctx->st->peer_open(ctx->st->ctx);
	CONF_CHECKF(ctx, f->peer != NULL, "cannot open a second connection");
	COLL(a, MIB);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "for i in 1 2 3 4 5 6; do echo n$i; sleep 0.2; done";
	uint64_t proc;
	asp_error err;
	CONF_OK(ctx, do_spawn(ctx, f, f->peer, &p, a, &proc, &err), &err);
	CONF_CHECKF(ctx, coll_wait_bytes(a, 0, 3, 5000), "no output within 5 s");
	/* The connection that spawned it closes; the process goes on. */
	ctx->st->peer_close(ctx->st->ctx, f->peer);
	f->peer = NULL;
	CONF_CHECKF(ctx, coll_wait_end(a, 5000) && a->lost,
	            "the closed connection's follower "
	            "was not told it was lost");
	COLL(b, MIB);
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 0, 0, b, &err), &err);
	END(b);
	CONF_CHECKF(ctx, b->first[0] == 0 && coll_is(b, 0, "n1\nn2\nn3\nn4\nn5\nn6\n"),
	            "after reattaching: '%s'", coll_show(ctx, b, 0));
	CONF_CHECK(ctx, b->ev.exit_code == 0);
}

/* The responder's resident memory in KiB, read through exec; 0 when it cannot tell. */
static uint64_t responder_rss_kb(conf_ctx *ctx, unsigned long pid)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "sed -n 's/^VmRSS:[^0-9]*\\([0-9]*\\).*/\\1/p' /proc/%lu/status",
	         pid);
	asp_exec_result r;
	if (!h_sh(ctx, __LINE__, cmd, &r) || r.stdout_data.len == 0)
		return 0;
	return strtoull((const char *)r.stdout_data.data, NULL, 10);
}

PROC_CASE(spawn_slow_reader_bounded)
{
	COLL(c, 64);
	c->delay_ms = 20; /* ~3 MB/s: far slower than the producer */
	c->slow = true;
	/* Generous: on a loaded machine each call below waits seconds behind the output. */
	c->slow_until = mono_ms() + 30000;
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "echo $PPID; exec head -c 1073741824 /dev/zero";
	uint64_t proc;
	SPAWN(&p, c, &proc);
	CONF_CHECKF(ctx, coll_wait_bytes(c, 0, 2, 20000), "no output within 20 s");
	pthread_mutex_lock(&c->mu);
	unsigned long pid = strtoul((const char *)c->data[0], NULL, 10);
	pthread_mutex_unlock(&c->mu);
	usleep(1000 * 1000);
	uint64_t rss1 = pid ? responder_rss_kb(ctx, pid) : 0;
	usleep(2000 * 1000);
	uint64_t rss2 = pid ? responder_rss_kb(ctx, pid) : 0;
	pthread_mutex_lock(&c->mu);
	uint64_t got = c->total[0];
	pthread_mutex_unlock(&c->mu);
	asp_proc_wait_result w;
	asp_error err;
	/*
	 * The answer comes behind at most the buffers between the process and this client
	 * (pipes, sockets, queues: 1-3 MiB over each transport). Counted in bytes, not time:
	 * a starved machine slows the slow reader further, while an unbounded queue would
	 * hold hundreds of MiB by now.
	 */
	asp_status st = do_wait(ctx, proc, 1, &w, &err);
	pthread_mutex_lock(&c->mu);
	uint64_t ahead = c->total[0] - got;
	pthread_mutex_unlock(&c->mu);
	CONF_CHECKF(ctx, ahead < 16ull * MIB,
	            "the answer to a proc_wait came behind %llu bytes of output: something "
	            "between the process and this client queues its output without bound",
	            (unsigned long long)ahead);
	CONF_ERR(ctx, st, ASP_E_TIMEOUT, &err);
	/* The producer is held back by the client: it cannot have written 1 GiB. */
	CONF_CHECKF(ctx, got < 256ull * MIB, "the client got %llu bytes reading at 3 MB/s",
	            (unsigned long long)got);
	/* And the responder holds no more than its buffers (an unbounded queue would have
	 * grown by hundreds of MiB in those 2 s). */
	CONF_CHECKF(ctx, !rss1 || !rss2 || rss2 < rss1 + 32 * 1024,
	            "the responder grew from %llu to %llu KiB while the client read slowly",
	            (unsigned long long)rss1, (unsigned long long)rss2);
	pthread_mutex_lock(&c->mu);
	c->slow = false;
	pthread_mutex_unlock(&c->mu);
	CONF_OK(ctx, do_signal(ctx, proc, "KILL", &err), &err);
	CONF_REQ(ctx, coll_wait_end(c, END_WAIT_MS));
	CONF_CHECKF(ctx, !c->bad[0], "%s", c->bad);
	CONF_CHECKF(ctx, c->exited && c->ev.signal && strcmp(c->ev.signal, "KILL") == 0,
	            "exit signal %s", c->ev.signal ? c->ev.signal : "nil");
}

PROC_CASE(spawn_errors)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("/nonexistent/asp-conf-prog");
	asp_error err;
	uint64_t proc;
	coll *c = ctx->follow ? fx_coll(f, 64) : NULL; /* where it can: with callbacks */
	CONF_ERR(ctx, do_spawn(ctx, f, ctx->self, &p, c, &proc, &err), ASP_E_NOT_FOUND, &err);
	asp_spawn_params_init(&p);
	p.command = "true";
	p.cwd = "/nonexistent/asp-conf-dir";
	CONF_ERR(ctx, do_spawn(ctx, f, ctx->self, &p, c, &proc, &err), ASP_E_NOT_FOUND, &err);
	asp_spawn_params_init(&p);
	p.command = "true";
	p.has_argv = true;
	p.argv = ARGV("true");
	CONF_ERR(ctx, do_spawn(ctx, f, ctx->self, &p, c, &proc, &err), ASP_E_INVALID_ARGUMENT,
	         &err);
	if (c) {
		usleep(100 * 1000);
		CONF_CHECKF(ctx, !c->ended && !c->chunks[0] && !c->chunks[1],
		            "a spawn that failed called its callbacks");
	}
}
