/* The streaming cases' collector, fixture and helpers: see conf_follow.h. */
#include "conf_follow.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void coll_init(coll *c, size_t keep)
{
	memset(c, 0, sizeof *c);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->keep = keep;
}

void coll_destroy(coll *c)
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
		/* doubling: a terminal's output comes in small chunks, and copying the whole
		 * buffer for each (as realloc does under ASan) is quadratic */
		size_t cap = c->cap[s];
		while (cap < c->len[s] + n + 1)
			cap = cap ? 2 * cap : 4096;
		uint8_t *nb = cap == c->cap[s] ? c->data[s] : realloc(c->data[s], cap);
		if (nb) {
			memcpy(nb + c->len[s], data, n);
			c->data[s] = nb;
			c->cap[s] = cap;
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

static void on_eof(void *user, uint64_t proc, asp_stream stream)
{
	(void)proc;
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	if (stream == ASP_STREAM_STDOUT)
		c->eof_seen = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void on_fs(void *user, const asp_fs_event_event *ev)
{
	coll *c = user;
	pthread_mutex_lock(&c->mu);
	if (c->ended)
		coll_bad(c, "an fs_event (%s %s) after the end", ev->kind, ev->path);
	int n =
	    snprintf(c->fs + c->fs_len, sizeof c->fs - c->fs_len, "%s %s\n", ev->kind, ev->path);
	if (n > 0 && (size_t)n < sizeof c->fs - c->fs_len)
		c->fs_len += (size_t)n;
	else
		c->fs[c->fs_len] = '\0'; /* full: the rest is only counted */
	c->fs_count++;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static const asp_proc_callbacks coll_cb = {
    .on_output = on_output,
    .on_exit = on_exit_ev,
    .on_lost = on_lost,
    .on_fs_event = on_fs,
    .on_eof = on_eof,
};

bool coll_wait_fs(coll *c, const char *line, int ms)
{
	char want[1100];
	snprintf(want, sizeof want, "%s\n", line);
	double until = mono_ms() + ms;
	pthread_mutex_lock(&c->mu);
	bool hit;
	for (;;) {
		hit = (c->fs_len && !strncmp(c->fs, want, strlen(want))) ||
		      strstr(c->fs, want) != NULL;
		if (hit || c->ended)
			break;
		double left = until - mono_ms();
		if (left <= 0)
			break;
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		long ns = dl.tv_nsec + (long)(left < 100 ? left : 100) * 1000000L;
		dl.tv_sec += ns / 1000000000L;
		dl.tv_nsec = ns % 1000000000L;
		pthread_cond_timedwait(&c->cv, &c->mu, &dl);
	}
	pthread_mutex_unlock(&c->mu);
	return hit;
}

/* Waits until the follower ended; false after `ms`. */
bool coll_wait_end(coll *c, int ms)
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
bool coll_wait_bytes(coll *c, int s, uint64_t n, int ms)
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

bool coll_is(coll *c, int s, const char *want)
{
	size_t n = strlen(want);
	return c->len[s] == n && (n == 0 || memcmp(c->data[s], want, n) == 0);
}

const char *coll_show(conf_ctx *ctx, coll *c, int s)
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

coll *fx_coll(fx *f, size_t keep)
{
	if (f->ncoll == MAX_COLL)
		return NULL;
	coll *c = &f->c[f->ncoll++];
	coll_init(c, keep);
	return c;
}

void kill_proc(conf_ctx *ctx, void *self, uint64_t proc)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = "KILL";
	asp_proc_signal_result r;
	asp_error err;
	ctx->ops->proc_signal(self, &p, &r, ctx->a, &err);
}

void fx_done(fx *f)
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

/* ---- helpers: each records a failure at the caller's line ------------------------- */

/* A process (or connection) started: the fixture KILLs it at the end; `c` follows it. */
static void track(fx *f, void *self, coll *c, uint64_t proc)
{
	if (f->nprocs < MAX_PROCS)
		f->procs[f->nprocs++] = proc;
	if (c) {
		pthread_mutex_lock(&c->mu);
		c->self = self;
		c->proc = proc;
		c->followed = true;
		pthread_mutex_unlock(&c->mu);
	}
}

asp_status do_spawn(conf_ctx *ctx, fx *f, void *self, asp_spawn_params *p, coll *c, uint64_t *proc,
                    asp_error *err)
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
	if (st == ASP_OK)
		track(f, self, c, *proc);
	return st;
}

asp_status do_connect(conf_ctx *ctx, fx *f, void *self, const asp_connect_params *p, coll *c,
                      uint64_t *proc, asp_error *err)
{
	*proc = 0;
	asp_status st;
	if (c) {
		st = ctx->st->connect(ctx->st->ctx, self, p, &coll_cb, c, proc, err);
	} else {
		asp_connect_result r;
		st = ctx->ops->connect(self, p, &r, ctx->a, err);
		if (st == ASP_OK)
			*proc = r.proc;
	}
	if (st == ASP_OK)
		track(f, self, c, *proc);
	return st;
}

asp_status do_tree_read(conf_ctx *ctx, fx *f, void *self, const asp_tree_read_params *p, coll *c,
                        uint64_t *proc, asp_error *err)
{
	*proc = 0;
	asp_status st;
	if (ctx->st && ctx->st->tree_read) {
		st = ctx->st->tree_read(ctx->st->ctx, self, p, &coll_cb, c, proc, err);
	} else {
		asp_tree_read_result r;
		st = ctx->ops->tree_read(self, p, &r, ctx->a, err);
		if (st == ASP_OK) {
			*proc = r.proc;
			st = ctx->st && ctx->st->attach
			         ? do_attach(ctx, self, r.proc, 0, 0, c, err)
			         : asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
			                         "the registration cannot follow a stream");
		}
	}
	if (st == ASP_OK)
		track(f, self, c, *proc);
	return st;
}

bool h_spawn(conf_ctx *ctx, fx *f, int line, asp_spawn_params *p, coll *c, uint64_t *proc)
{
	asp_error err;
	asp_status st = do_spawn(ctx, f, ctx->self, p, c, proc, &err);
	if (st != ASP_OK)
		conf_fail(ctx, __FILE__, line, "spawn %s: %s: %s",
		          p->command ? p->command : "(argv)", asp_strerror(st), err.message);
	return st == ASP_OK;
}

/* A collector's end within END_WAIT_MS, with no broken promise. */
bool h_end(conf_ctx *ctx, int line, coll *c)
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

asp_status do_wait(conf_ctx *ctx, uint64_t proc, uint64_t ms, asp_proc_wait_result *r,
                   asp_error *err)
{
	asp_proc_wait_params p;
	asp_proc_wait_params_init(&p);
	p.proc = proc;
	p.timeout_ms = ms;
	return ctx->ops->proc_wait(ctx->self, &p, r, ctx->a, err);
}

asp_status do_signal(conf_ctx *ctx, uint64_t proc, const char *sig, asp_error *err)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = sig;
	asp_proc_signal_result r;
	return ctx->ops->proc_signal(ctx->self, &p, &r, ctx->a, err);
}

asp_status do_write(conf_ctx *ctx, uint64_t proc, const void *data, size_t len, bool eof,
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

asp_status do_attach(conf_ctx *ctx, void *self, uint64_t proc, uint64_t out_off, uint64_t err_off,
                     coll *c, asp_error *err)
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

asp_strv strv_of(conf_ctx *ctx, const char *const *items, size_t n)
{
	const char **v = asp_arena_alloc(ctx->a, n * sizeof *v);
	if (v)
		memcpy(v, items, n * sizeof *v);
	return (asp_strv){v, v ? n : 0};
}

bool h_sh(conf_ctx *ctx, int line, const char *cmd, asp_exec_result *r)
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
