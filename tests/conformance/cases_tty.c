/*
 * The terminal conformance cases: spawn with tty, typing into the terminal, proc_resize
 * (docs/design.md, "Terminals"). Each needs the feature "pty" (and "follow"), so they are
 * n/a where hello does not announce terminals.
 *
 * A terminal echoes what is typed as soon as it is written, before the program has read
 * it: the cases wait for what the program prints after reading (a marker split by quotes
 * the echo does not contain) before typing what depends on it.
 */
#include "cases_tty.h"
#include "proc_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP (4u * MIB)

static asp_tty *tty_of(conf_ctx *ctx, uint64_t rows, uint64_t cols, const char *term)
{
	asp_tty *t = asp_arena_alloc(ctx->a, sizeof *t);
	if (t) {
		t->rows = rows;
		t->cols = cols;
		t->term = term;
	}
	return t;
}

/* Whether stream 0 of `c` holds `want` anywhere. */
static bool coll_has(coll *c, const char *want)
{
	pthread_mutex_lock(&c->mu);
	size_t n = strlen(want);
	bool found = false;
	for (size_t i = 0; !found && c->len[0] >= n && i + n <= c->len[0]; i++)
		found = memcmp(c->data[0] + i, want, n) == 0;
	pthread_mutex_unlock(&c->mu);
	return found;
}

/* Waits until stream 0 holds `want`; false after `ms` or at the end without it. */
static bool coll_wait_text(coll *c, const char *want, int ms)
{
	double until = fx_mono_ms() + ms;
	for (;;) {
		if (coll_has(c, want))
			return true;
		pthread_mutex_lock(&c->mu);
		bool ended = c->ended;
		pthread_mutex_unlock(&c->mu);
		if (ended || fx_mono_ms() >= until)
			return coll_has(c, want);
		coll_wait_bytes(c, 0, c->total[0] + 1, 50);
	}
}

static bool h_text(conf_ctx *ctx, int line, coll *c, const char *want)
{
	if (coll_wait_text(c, want, END_WAIT_MS))
		return true;
	conf_fail(ctx, __FILE__, line, "no '%s' on the terminal within %d ms: '%s'", want,
	          END_WAIT_MS, coll_show(ctx, c, 0));
	return false;
}

#define TEXT(c, want) CONF_REQ(ctx, h_text(ctx, __LINE__, (c), (want)))

static bool h_type(conf_ctx *ctx, int line, uint64_t proc, const char *s, bool eof)
{
	asp_error err;
	asp_status st = fx_write(ctx, proc, s, strlen(s), eof, &err);
	if (st != ASP_OK)
		conf_fail(ctx, __FILE__, line, "proc_write: %s: %s", asp_strerror(st), err.message);
	return st == ASP_OK;
}

#define TYPE(proc, s) CONF_REQ(ctx, h_type(ctx, __LINE__, (proc), (s), false))

static asp_status do_resize(conf_ctx *ctx, uint64_t proc, uint64_t rows, uint64_t cols,
                            asp_error *err)
{
	asp_proc_resize_params p;
	asp_proc_resize_params_init(&p);
	p.proc = proc;
	p.rows = rows;
	p.cols = cols;
	asp_proc_resize_result r;
	return ctx->ops->proc_resize(ctx->self, &p, &r, ctx->a, err);
}

/* The error code of `st` must be `want`. */
#define EXPECT_CODE(st, want, what)                                                                \
	do {                                                                                       \
		asp_status got_ = (st);                                                            \
		CONF_CHECKF(ctx, got_ == (want), "%s: expected %s, got %s: %s", (what),            \
		            asp_strerror(want), asp_strerror(got_), got_ ? err.message : "");      \
	} while (0)

PROC_CASE(tty_spawn_basics)
{
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "test -t 0 && test -t 1 && test -t 2 && echo IS-A-TTY; stty size; "
	            "echo \"T=$TERM\"; echo to-stderr >&2; exit 7";
	p.tty = tty_of(ctx, 33, 101, "vt100");
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, coll_has(c, "IS-A-TTY"), "stdin, stdout, stderr not all a terminal: '%s'",
	            coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, coll_has(c, "33 101"), "stty size is not the 33x101 asked: '%s'",
	            coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, coll_has(c, "T=vt100"), "TERM is not the term asked: '%s'",
	            coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, coll_has(c, "to-stderr"), "stderr did not arrive on stdout: '%s'",
	            coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, c->total[1] == 0, "%llu bytes on stderr: a terminal has one stream",
	            (unsigned long long)c->total[1]);
	CONF_CHECKF(ctx, c->ev.exit_code == 7 && !c->ev.signal, "exit %lld, expected 7",
	            (long long)c->ev.exit_code);

	/* The defaults: 24x80, xterm-256color. */
	COLL(d, KEEP);
	asp_spawn_params q;
	asp_spawn_params_init(&q);
	q.command = "stty size; echo \"T=$TERM\"";
	q.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, q.tty != NULL);
	SPAWN(&q, d, &proc);
	END(d);
	CONF_CHECKF(ctx, coll_has(d, "24 80") && coll_has(d, "T=xterm-256color"), "defaults: '%s'",
	            coll_show(ctx, d, 0));
	CONF_CHECKF(ctx, d->ev.exit_code == 0, "exit %lld", (long long)d->ev.exit_code);
}

PROC_CASE(tty_resize_winch)
{
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	/* sh runs a trap between commands: a loop of short sleeps gives it the chance. */
	p.command = "trap 'echo \"WINCH $(stty size)\"' WINCH; echo RE\"\"ADY; "
	            "while :; do sleep 0.05; done";
	p.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	TEXT(c, "READY");
	asp_error err;
	CONF_OK(ctx, do_resize(ctx, proc, 40, 120, &err), &err);
	TEXT(c, "WINCH 40 120");
	CONF_OK(ctx, do_resize(ctx, proc, 10, 33, &err), &err);
	TEXT(c, "WINCH 10 33");
}

PROC_CASE(tty_ctrl_c)
{
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.argv = ARGV("sh", "-i");
	p.has_argv = true;
	asp_strmap_entry env[] = {{"PS1", "PROMPT$ "}, {"ENV", ""}};
	p.env = (asp_strmap){env, 2};
	p.has_env = true;
	p.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	TEXT(c, "PROMPT$ ");
	/* START comes from the foreground job itself, so the terminal's foreground group is
	 * its own by then and Ctrl-C reaches it, not the shell between two commands. */
	TYPE(proc, "sh -c 'echo ST\"\"ART; exec sleep 100'; echo NOT-\"\"INTERRUPTED\n");
	TEXT(c, "START");
	double t0 = fx_mono_ms();
	TYPE(proc, "\x03");
	/* The interrupted command line ends; the shell answers the next one. */
	TYPE(proc, "echo AL\"\"IVE-$((6*7))\n");
	TEXT(c, "ALIVE-42");
	CONF_CHECKF(ctx, fx_mono_ms() - t0 < CONF_SLOW_MS, "Ctrl-C took %.0f ms to end sleep",
	            fx_mono_ms() - t0);
	CONF_CHECKF(ctx, !coll_has(c, "NOT-INTERRUPTED"), "Ctrl-C did not interrupt: '%s'",
	            coll_show(ctx, c, 0));
	TYPE(proc, "exit 5\n");
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == 5, "the shell exited %lld, expected 5",
	            (long long)c->ev.exit_code);
}

PROC_CASE(tty_repl)
{
	asp_exec_result x;
	CONF_REQ(ctx, fx_sh(ctx, __LINE__, "command -v python3 >/dev/null && echo yes", &x));
	if (x.stdout_data.len < 3) {
		conf_skip(ctx, "python3 is not installed in the sandbox");
		return;
	}
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.argv = ARGV("python3", "-q", "-i");
	p.has_argv = true;
	p.tty = tty_of(ctx, 24, 80, "dumb");
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	TEXT(c, ">>> ");
	TYPE(proc, "print('ans', 6*7)\n");
	TEXT(c, "ans 42");
	TYPE(proc, "import sys; sys.exit(3)\n");
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == 3, "python3 exited %lld, expected 3",
	            (long long)c->ev.exit_code);
}

PROC_CASE(tty_large_output)
{
	COLL(c, 64 * 1024);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	/* 200000 lines of 8 bytes ("%07d\n"): the terminal adds a \r to each. */
	p.command = "awk 'BEGIN { for (i = 1; i <= 200000; i++) printf \"%07d\\n\", i }'";
	p.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, c->total[0] == 200000u * 9, "%llu bytes, expected %u",
	            (unsigned long long)c->total[0], 200000u * 9);
	CONF_CHECKF(ctx, c->ev.exit_code == 0, "exit %lld", (long long)c->ev.exit_code);
}

PROC_CASE(tty_exit_and_signal)
{
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "kill -TERM $$; sleep 5";
	p.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == -1 && c->ev.signal && !strcmp(c->ev.signal, "TERM"),
	            "exit %lld signal %s, expected -1 TERM", (long long)c->ev.exit_code,
	            c->ev.signal ? c->ev.signal : "none");
}

PROC_CASE(tty_eof)
{
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "cat; echo CAT-END\"\"ED";
	p.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	TYPE(proc, "abc\n");
	TEXT(c, "abc\r\nabc\r\n"); /* the echo, then cat's copy */
	CONF_REQ(ctx, h_type(ctx, __LINE__, proc, "", true));
	TEXT(c, "CAT-ENDED");
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == 0, "exit %lld", (long long)c->ev.exit_code);
	asp_error err;
	EXPECT_CODE(fx_write(ctx, proc, "x", 1, false, &err), ASP_E_INVALID_ARGUMENT,
	            "proc_write after eof");
}

PROC_CASE(tty_reattach)
{
	COLL(c, KEEP);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "echo FIRST-LINE; read x; echo \"GOT $x\"";
	p.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, p.tty != NULL);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	TEXT(c, "FIRST-LINE");
	/* Detached, then followed again from offset 0: the terminal's output replayed, then
	 * live. */
	ctx->st->detach(ctx->st->ctx, ctx->self, proc);
	pthread_mutex_lock(&c->mu);
	c->followed = false; /* detached: it will not end */
	pthread_mutex_unlock(&c->mu);
	COLL(d, KEEP);
	asp_error err;
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 0, 0, d, &err), &err);
	TEXT(d, "FIRST-LINE");
	TYPE(proc, "hello\n");
	TEXT(d, "GOT hello");
	END(d);
	CONF_CHECKF(ctx, d->first[0] == 0, "the replay started at %llu",
	            (unsigned long long)d->first[0]);
}

PROC_CASE(tty_bad_input)
{
	asp_error err;
	EXPECT_CODE(do_resize(ctx, UINT64_C(0x7fffffffffff), 24, 80, &err), ASP_E_NOT_FOUND,
	            "proc_resize of an unknown process");
	/* A process without a terminal. */
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "exec sleep 30";
	uint64_t proc;
	SPAWN(&p, NULL, &proc);
	EXPECT_CODE(do_resize(ctx, proc, 24, 80, &err), ASP_E_INVALID_ARGUMENT,
	            "proc_resize of a process without a terminal");
	/* Absurd sizes, for spawn and for proc_resize. */
	asp_spawn_params q;
	asp_spawn_params_init(&q);
	q.command = "echo SHOULD-NOT-RUN > started";
	q.cwd = ctx->dir;
	q.tty = tty_of(ctx, 0, 80, NULL);
	CONF_CHECK(ctx, q.tty != NULL);
	asp_spawn_result sr;
	EXPECT_CODE(ctx->ops->spawn(ctx->self, &q, &sr, ctx->a, &err), ASP_E_INVALID_ARGUMENT,
	            "spawn with 0 rows");
	q.tty = tty_of(ctx, 24, 100000, NULL);
	CONF_CHECK(ctx, q.tty != NULL);
	EXPECT_CODE(ctx->ops->spawn(ctx->self, &q, &sr, ctx->a, &err), ASP_E_INVALID_ARGUMENT,
	            "spawn with 100000 cols");
	COLL(c, KEEP);
	asp_spawn_params t;
	asp_spawn_params_init(&t);
	t.command = "read x";
	t.tty = tty_of(ctx, 24, 80, NULL);
	CONF_CHECK(ctx, t.tty != NULL);
	uint64_t tp;
	SPAWN(&t, c, &tp);
	EXPECT_CODE(do_resize(ctx, tp, 0, 80, &err), ASP_E_INVALID_ARGUMENT,
	            "proc_resize to 0 rows");
	EXPECT_CODE(do_resize(ctx, tp, 24, 4097, &err), ASP_E_INVALID_ARGUMENT,
	            "proc_resize to 4097 cols");
	/* A finished process's terminal is gone. */
	TYPE(tp, "done\n");
	END(c);
	EXPECT_CODE(do_resize(ctx, tp, 30, 90, &err), ASP_E_INVALID_ARGUMENT,
	            "proc_resize of a finished process");
	/* The refused spawns started nothing. */
	asp_exec_result x;
	CONF_REQ(ctx, fx_sh(ctx, __LINE__, "test -e started && echo yes || echo no", &x));
	CONF_CHECKF(ctx, x.stdout_data.len >= 2 && !memcmp(x.stdout_data.data, "no", 2),
	            "a refused spawn ran its command");
}
