/*
 * The terminal cases: spawn with tty, proc_write into a terminal, proc_resize
 * (docs/design.md, "Terminals"). Each needs the hello feature "pty"; a responder without it
 * makes them n/a. What a terminal does to the bytes is part of what is checked: the line
 * discipline echoes what is typed and sends "\n" out as "\r\n", and everything the
 * process writes, stderr too, arrives on stream stdout.
 *
 * Typing races the program that reads it, so every case waits for output the program
 * prints once it is ready (a prompt, a marker) before it types; a marker typed as input
 * is split with "" so that its echo never matches the marker.
 */
#include "cases_tty.h"
#include "conf_follow.h"

#include "asp/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEXT_WAIT_MS 15000
#define PROMPT       "asp-conf$ " /* the PS1 of the interactive shells below */

/* ---- helpers ---------------------------------------------------------------------- */

static const asp_tty *tty_of(conf_ctx *ctx, uint64_t rows, uint64_t cols, const char *term)
{
	asp_tty *t = asp_arena_alloc(ctx->a, sizeof *t);
	if (t)
		*t = (asp_tty){rows, cols, term};
	return t;
}

/* A spawn of `command` (or argv, when command is NULL) on a terminal of the default size. */
static void tty_params(conf_ctx *ctx, asp_spawn_params *p, const char *command)
{
	asp_spawn_params_init(p);
	p->command = command;
	p->cwd = ctx->dir;
	p->tty = tty_of(ctx, 24, 80, NULL);
}

/*
 * Waits until stdout, from byte `*from` on, holds `needle`, and moves *from past it;
 * false after `ms` or once the process ended without it.
 */
static bool coll_wait_text(coll *c, size_t *from, const char *needle, int ms)
{
	size_t n = strlen(needle);
	double until = mono_ms() + ms;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		const uint8_t *hit = NULL;
		if (c->len[0] > *from)
			hit = memmem(c->data[0] + *from, c->len[0] - *from, needle, n);
		if (hit) {
			*from = (size_t)(hit - c->data[0]) + n;
			pthread_mutex_unlock(&c->mu);
			return true;
		}
		if (c->ended || mono_ms() >= until)
			break;
		pthread_mutex_unlock(&c->mu);
		usleep(2000);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return false;
}

static bool h_text(conf_ctx *ctx, int line, coll *c, size_t *from, const char *needle)
{
	if (coll_wait_text(c, from, needle, TEXT_WAIT_MS))
		return true;
	pthread_mutex_lock(&c->mu);
	conf_fail(ctx, __FILE__, line, "no '%s' in the terminal's output within %d ms%s: '%s'",
	          needle, TEXT_WAIT_MS, c->ended ? " (the process ended)" : "",
	          coll_show(ctx, c, 0));
	pthread_mutex_unlock(&c->mu);
	return false;
}

/* Waits for `needle` in the output after *from (see coll_wait_text). */
#define TEXT(c, from, needle) CONF_REQ(ctx, h_text(ctx, __LINE__, (c), (from), (needle)))

static bool h_type(conf_ctx *ctx, int line, uint64_t proc, const char *s, bool eof)
{
	asp_error err;
	asp_status st = do_write(ctx, proc, s, strlen(s), eof, &err);
	if (st != ASP_OK)
		conf_fail(ctx, __FILE__, line, "proc_write%s: %s: %s", eof ? " eof" : "",
		          asp_strerror(st), err.message);
	return st == ASP_OK;
}

/* Types `s` into the terminal (and then its VEOF with eof). */
#define TYPE(proc, s, eof) CONF_REQ(ctx, h_type(ctx, __LINE__, (proc), (s), (eof)))

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

/* Whether the sandbox has `prog` on its PATH (asked through exec). */
static bool has_program(conf_ctx *ctx, const char *prog, bool *ok)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
	asp_exec_result r;
	*ok = h_sh(ctx, __LINE__, cmd, &r);
	return *ok && r.exit_code == 0;
}

/* The environment of the interactive shells: PS1, a prompt to wait for. */
static asp_strmap prompt_env(conf_ctx *ctx)
{
	asp_strmap_entry *e = asp_arena_alloc(ctx->a, sizeof *e);
	if (!e)
		return (asp_strmap){NULL, 0};
	*e = (asp_strmap_entry){"PS1", PROMPT};
	return (asp_strmap){e, 1};
}

/* ---- the cases -------------------------------------------------------------------- */

/* The terminal's size as "ROWS COLS": busybox's stty takes LINES and COLUMNS over the
 * kernel's, so a login profile that exported them would be read instead. */
#define STTY_SIZE "unset LINES COLUMNS; stty size"

PROC_CASE(tty_isatty_one_stream)
{
	COLL(c, MIB);
	asp_spawn_params p;
	tty_params(ctx, &p,
	           "if test -t 0 -a -t 1 -a -t 2; then echo all-tty; else echo not-tty; fi; "
	           "echo to-stderr >&2; echo to-stdout");
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, coll_is(c, 0, "all-tty\r\nto-stderr\r\nto-stdout\r\n"),
	            "a terminal's output, '\\n' sent as '\\r\\n', stderr in order with stdout: "
	            "'%s'",
	            coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, c->total[1] == 0, "%llu bytes on stream stderr: a terminal has one stream",
	            (unsigned long long)c->total[1]);
	CONF_CHECKF(ctx, c->ev.exit_code == 0 && !c->ev.signal, "exit %lld",
	            (long long)c->ev.exit_code);
}

PROC_CASE(tty_size_and_term)
{
	/* The requested size and TERM, whatever env says of TERM; env sets other variables. */
	COLL(c, MIB);
	asp_spawn_params p;
	tty_params(ctx, &p, STTY_SIZE "; echo \"T=$TERM X=$ASP_CONF_X\"");
	p.tty = tty_of(ctx, 33, 101, "vt100");
	asp_strmap_entry *e = asp_arena_alloc(ctx->a, 2 * sizeof *e);
	CONF_CHECK(ctx, e != NULL);
	e[0] = (asp_strmap_entry){"TERM", "dumb"};
	e[1] = (asp_strmap_entry){"ASP_CONF_X", "x1"};
	p.has_env = true;
	p.env = (asp_strmap){e, 2};
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, coll_is(c, 0, "33 101\r\nT=vt100 X=x1\r\n"), "'%s'", coll_show(ctx, c, 0));
	/* term absent: xterm-256color; 24 x 80 as the spec's defaults */
	COLL(d, MIB);
	tty_params(ctx, &p, STTY_SIZE "; echo \"T=$TERM\"");
	SPAWN(&p, d, &proc);
	END(d);
	CONF_CHECKF(ctx, coll_is(d, 0, "24 80\r\nT=" ASP_TTY_TERM_DEFAULT "\r\n"), "'%s'",
	            coll_show(ctx, d, 0));
	/*
	 * The extremes of the range: one row is taken, and a terminal of 2 rows and 4096
	 * columns reads as that. (busybox's stty shows any size of 1 as its default, 24 or
	 * 80, whatever the kernel says: `stty size` cannot tell one row apart there.)
	 */
	COLL(e1, MIB);
	tty_params(ctx, &p, "echo one");
	p.tty = tty_of(ctx, 1, ASP_TTY_MAX, NULL);
	SPAWN(&p, e1, &proc);
	END(e1);
	CONF_CHECKF(ctx, coll_is(e1, 0, "one\r\n"), "'%s'", coll_show(ctx, e1, 0));
	COLL(e2, MIB);
	tty_params(ctx, &p, STTY_SIZE);
	p.tty = tty_of(ctx, 2, ASP_TTY_MAX, NULL);
	SPAWN(&p, e2, &proc);
	END(e2);
	CONF_CHECKF(ctx, coll_is(e2, 0, "2 4096\r\n"), "'%s'", coll_show(ctx, e2, 0));
}

PROC_CASE(tty_resize_winch)
{
	COLL(c, MIB);
	asp_spawn_params p;
	/* The trap is set before READY; the loop lets the shell run it between sleeps. */
	tty_params(ctx, &p,
	           "unset LINES COLUMNS; trap 'echo \"winch $(stty size)\"' WINCH; echo READY; "
	           "while :; do sleep 0.05; done");
	uint64_t proc;
	SPAWN(&p, c, &proc);
	size_t at = 0;
	TEXT(c, &at, "READY\r\n");
	asp_error err;
	CONF_OK(ctx, do_resize(ctx, proc, 40, 120, &err), &err);
	TEXT(c, &at, "winch 40 120\r\n");
	CONF_OK(ctx, do_resize(ctx, proc, 30, 90, &err), &err);
	TEXT(c, &at, "winch 30 90\r\n");
	CONF_OK(ctx, do_signal(ctx, proc, "KILL", &err), &err);
	END(c);
	CONF_CHECKF(ctx, c->ev.signal && strcmp(c->ev.signal, "KILL") == 0, "signal %s",
	            c->ev.signal ? c->ev.signal : "nil");
}

PROC_CASE(tty_ctrl_c)
{
	COLL(c, MIB);
	asp_spawn_params p;
	tty_params(ctx, &p, NULL);
	p.has_argv = true;
	p.argv = ARGV("sh", "-i");
	p.has_env = true;
	p.env = prompt_env(ctx);
	uint64_t proc;
	SPAWN(&p, c, &proc);
	size_t at = 0;
	TEXT(c, &at, PROMPT);
	TYPE(proc, "echo ST\"\"ART; sleep 100\n", false);
	TEXT(c, &at, "START\r\n");
	/*
	 * START comes just before the shell starts sleep: a ^C typed before sleep is the
	 * terminal's foreground job reaches the shell, which may ignore it while it waits.
	 * So ^C until the prompt is back, each try with a bound, within TEXT_WAIT_MS in all.
	 */
	bool back = false;
	double until = mono_ms() + TEXT_WAIT_MS;
	while (!back && mono_ms() < until) {
		TYPE(proc, "\x03", false);
		back = coll_wait_text(c, &at, PROMPT, 1000);
	}
	CONF_CHECKF(ctx, back, "^C did not bring the prompt back: '%s'", coll_show(ctx, c, 0));
	TYPE(proc, "echo DO\"\"NE $((6*7))\n", false);
	TEXT(c, &at, "DONE 42\r\n");
	TYPE(proc, "exit 3\n", false);
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == 3 && !c->ev.signal, "exit %lld signal %s",
	            (long long)c->ev.exit_code, c->ev.signal ? c->ev.signal : "nil");
	CONF_CHECK(ctx, c->total[1] == 0);
}

PROC_CASE(tty_repl)
{
	bool ok;
	bool py = has_program(ctx, "python3", &ok);
	CONF_REQ(ctx, ok);
	COLL(c, MIB);
	asp_spawn_params p;
	tty_params(ctx, &p, NULL);
	p.has_argv = true;
	p.has_env = true;
	p.env = prompt_env(ctx);
	/* python3 where the sandbox has it (its line editor on the terminal), else sh. */
	p.argv = py ? ARGV("python3", "-q", "-i") : ARGV("sh", "-i");
	const char *prompt = py ? ">>> " : PROMPT;
	uint64_t proc;
	SPAWN(&p, c, &proc);
	size_t at = 0;
	TEXT(c, &at, prompt);
	TYPE(proc, py ? "print(6*7)\n" : "echo $((6*7))\n", false);
	TEXT(c, &at, "42\r\n");
	TEXT(c, &at, prompt);
	TYPE(proc, py ? "x = 'ab' * 3\n" : "x=ababab\n", false);
	TEXT(c, &at, prompt);
	TYPE(proc, py ? "print(x.upper())\n" : "echo $x | tr a-z A-Z\n", false);
	TEXT(c, &at, "ABABAB\r\n");
	TEXT(c, &at, prompt);
	/* ^D on an empty line ends the REPL */
	TYPE(proc, "", true);
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == 0 && !c->ev.signal, "%s: exit %lld signal %s",
	            py ? "python3" : "sh", (long long)c->ev.exit_code,
	            c->ev.signal ? c->ev.signal : "nil");
}

PROC_CASE(tty_large_output)
{
	bool ok;
	bool seq = has_program(ctx, "seq", &ok);
	CONF_REQ(ctx, ok);
	if (!seq) {
		conf_skip(ctx, "the sandbox has no seq");
		return;
	}
	/* 1..580000, one per line: 3.95 MB from the process, 4.5 MB with the "\r"s. */
	enum { N = 580000 };
	size_t want_len = 0;
	char num[16];
	for (int i = 1; i <= N; i++)
		want_len += (size_t)snprintf(num, sizeof num, "%d\r\n", i);
	COLL(c, want_len + 64);
	asp_spawn_params p;
	tty_params(ctx, &p, "seq 1 580000");
	uint64_t proc;
	SPAWN(&p, c, &proc);
	END(c);
	CONF_CHECKF(ctx, c->len[0] == want_len, "%zu bytes, expected %zu", c->len[0], want_len);
	const char *w = (const char *)c->data[0];
	for (int i = 1; i <= N; i++) {
		int n = snprintf(num, sizeof num, "%d\r\n", i);
		CONF_CHECKF(ctx, memcmp(w, num, (size_t)n) == 0, "line %d is not %d", i, i);
		w += n;
	}
	CONF_CHECK(ctx, c->ev.exit_code == 0 && c->total[1] == 0);
}

PROC_CASE(tty_eof)
{
	COLL(c, MIB);
	asp_spawn_params p;
	tty_params(ctx, &p,
	           "echo READY; cat; echo \"cat-ended $?\"; read x; echo \"read-ended $?\"");
	uint64_t proc;
	SPAWN(&p, c, &proc);
	size_t at = 0;
	TEXT(c, &at, "READY\r\n");
	/* the echo of the line, then cat's copy */
	TYPE(proc, "line\n", false);
	TEXT(c, &at, "line\r\nline\r\n");
	/* eof after a partial line: cat gets "part" at once, then the end at the next ^D;
	 * the terminal stays open, so "\x04" typed as data ends the `read` after it */
	TYPE(proc, "part", true);
	TEXT(c, &at, "partpart");
	asp_error err;
	CONF_ERR(ctx, do_write(ctx, proc, "more", 4, false, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_ERR(ctx, do_write(ctx, proc, NULL, 0, true, &err), ASP_E_INVALID_ARGUMENT, &err);
	/*
	 * The one VEOF was spent on "part": cat still reads. proc_write refuses data now,
	 * so the process ends by a signal; what matters is that cat saw "part" without a
	 * newline, which only the VEOF delivers. A second spawn checks a VEOF alone ends cat.
	 */
	CONF_OK(ctx, do_signal(ctx, proc, "KILL", &err), &err);
	END(c);
	COLL(d, MIB);
	tty_params(ctx, &p, "echo READY; cat; echo \"cat-ended $?\"");
	SPAWN(&p, d, &proc);
	size_t at2 = 0;
	TEXT(d, &at2, "READY\r\n");
	TYPE(proc, "abc\n", true);
	TEXT(d, &at2, "cat-ended 0\r\n");
	END(d);
	CONF_CHECKF(ctx, coll_is(d, 0, "READY\r\nabc\r\nabc\r\ncat-ended 0\r\n"), "'%s'",
	            coll_show(ctx, d, 0));
	CONF_CHECK(ctx, d->ev.exit_code == 0);
}

PROC_CASE(tty_reattach)
{
	COLL(c1, MIB);
	asp_spawn_params p;
	tty_params(ctx, &p, "echo one; read x; echo \"got $x\"");
	uint64_t proc;
	SPAWN(&p, c1, &proc);
	size_t at = 0;
	TEXT(c1, &at, "one\r\n");
	ctx->st->detach(ctx->st->ctx, ctx->self, proc);
	pthread_mutex_lock(&c1->mu);
	c1->followed = false; /* detached: it will not end */
	pthread_mutex_unlock(&c1->mu);
	/* the terminal's output so far is replayed, then it goes on live */
	COLL(c2, MIB);
	asp_error err;
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 0, 0, c2, &err), &err);
	size_t at2 = 0;
	TEXT(c2, &at2, "one\r\n");
	TYPE(proc, "two\n", false);
	END(c2);
	CONF_CHECKF(ctx, c2->first[0] == 0 && coll_is(c2, 0, "one\r\ntwo\r\ngot two\r\n"),
	            "from %llu: '%s'", (unsigned long long)c2->first[0], coll_show(ctx, c2, 0));
	CONF_CHECK(ctx, c2->ev.exit_code == 0 && c2->total[1] == 0);
	/* a finished terminal process replays too, from an offset */
	COLL(c3, MIB);
	CONF_OK(ctx, do_attach(ctx, ctx->self, proc, 5, 0, c3, &err), &err);
	END(c3);
	CONF_CHECKF(ctx, c3->first[0] == 5 && coll_is(c3, 0, "two\r\ngot two\r\n"), "'%s'",
	            coll_show(ctx, c3, 0));
}

/* sh: polls (up to 10 s) until the pid in FILE is dead, then prints its state. */
#define DEAD_SH(file)                                                                              \
	"i=0; while :; do " CONF_PID_STATE_SH(file) " >/dev/null; "                                \
	                                            "if [ \"$st\" = dead ] || [ $i -ge 200 ]; "    \
	                                            "then break; fi; sleep 0.05; i=$((i+1)); "     \
	                                            "done; printf %s \"$st\""

static bool h_dead(conf_ctx *ctx, int line, const char *cmd, const char *file)
{
	asp_exec_result r;
	if (!h_sh(ctx, line, cmd, &r))
		return false;
	if (r.stdout_data.len == 4 && memcmp(r.stdout_data.data, "dead", 4) == 0)
		return true;
	conf_fail(ctx, __FILE__, line, "the process in %s is still running after 10 s", file);
	return false;
}

#define DEAD(file) CONF_REQ(ctx, h_dead(ctx, __LINE__, DEAD_SH(file), (file)))

/* Waits (through exec, up to 10 s) until FILE exists with something in it. */
static bool h_file(conf_ctx *ctx, int line, const char *file)
{
	char cmd[256];
	snprintf(cmd, sizeof cmd,
	         "i=0; while [ ! -s %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
	         "test -s %s",
	         file, file);
	asp_exec_result r;
	if (!h_sh(ctx, line, cmd, &r))
		return false;
	if (r.exit_code != 0)
		conf_fail(ctx, __FILE__, line, "%s did not appear within 10 s", file);
	return r.exit_code == 0;
}

PROC_CASE(tty_exit_codes)
{
	/* No follower: proc_wait gives the ends, so this runs over plain HTTP too. */
	asp_spawn_params p;
	tty_params(ctx, &p, "exit 7");
	uint64_t proc;
	SPAWN(&p, NULL, &proc);
	asp_proc_wait_result w;
	asp_error err;
	CONF_OK(ctx, do_wait(ctx, proc, 15000, &w, &err), &err);
	CONF_CHECKF(ctx, w.exit_code == 7 && !w.signal && !w.timed_out, "exit %lld",
	            (long long)w.exit_code);
	/* signalled: -1 and the name; proc_signal reaches the terminal's whole group */
	tty_params(ctx, &p, "sleep 100 & echo $! > bg.pid; exec sleep 100");
	SPAWN(&p, NULL, &proc);
	CONF_REQ(ctx, h_file(ctx, __LINE__, "bg.pid"));
	CONF_OK(ctx, do_signal(ctx, proc, "KILL", &err), &err);
	CONF_OK(ctx, do_wait(ctx, proc, 15000, &w, &err), &err);
	CONF_CHECKF(ctx, w.exit_code == -1 && w.signal && strcmp(w.signal, "KILL") == 0,
	            "exit %lld signal %s", (long long)w.exit_code, w.signal ? w.signal : "nil");
	DEAD("bg.pid");
	tty_params(ctx, &p, "exec sleep 100");
	SPAWN(&p, NULL, &proc);
	CONF_OK(ctx, do_signal(ctx, proc, "INT", &err), &err);
	CONF_OK(ctx, do_wait(ctx, proc, 15000, &w, &err), &err);
	CONF_CHECKF(ctx, w.exit_code == -1 && w.signal && strcmp(w.signal, "INT") == 0,
	            "exit %lld signal %s", (long long)w.exit_code, w.signal ? w.signal : "nil");
	/* the timeout as for any process */
	tty_params(ctx, &p, "exec sleep 30");
	p.timeout_ms = 300;
	SPAWN(&p, NULL, &proc);
	CONF_OK(ctx, do_wait(ctx, proc, 15000, &w, &err), &err);
	CONF_CHECKF(ctx,
	            w.timed_out && w.exit_code == -1 && w.signal && strcmp(w.signal, "TERM") == 0,
	            "timed_out %d exit %lld signal %s", w.timed_out, (long long)w.exit_code,
	            w.signal ? w.signal : "nil");
}

static bool tagged(const asp_proc_list_result *r, const char *tag)
{
	for (size_t i = 0; i < r->procs.count; i++)
		if (r->procs.items[i].tag && strcmp(r->procs.items[i].tag, tag) == 0)
			return true;
	return false;
}

PROC_CASE(tty_bad_input)
{
	asp_error err;
	/* sizes out of range: spawn starts nothing */
	static const uint64_t sizes[][2] = {
	    {0, 80}, {24, 0}, {100000, 80}, {24, 100000}, {4097, 1}};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		asp_spawn_params p;
		tty_params(ctx, &p, "echo started > bad.txt");
		p.tty = tty_of(ctx, sizes[i][0], sizes[i][1], NULL);
		p.tag = "conf-tty-bad";
		uint64_t proc;
		asp_status st = do_spawn(ctx, f, ctx->self, &p, NULL, &proc, &err);
		CONF_CHECKF(ctx, st == ASP_E_INVALID_ARGUMENT,
		            "spawn with a %llu x %llu terminal: expected invalid_argument, got %s",
		            (unsigned long long)sizes[i][0], (unsigned long long)sizes[i][1],
		            asp_strerror(st));
	}
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CONF_OK(ctx, ctx->ops->proc_list(ctx->self, &lp, &lr, ctx->a, &err), &err);
	CONF_CHECKF(ctx, !tagged(&lr, "conf-tty-bad"), "a refused spawn is listed by proc_list");
	/* resize: an unknown handle, a process without a terminal, a finished one, bad sizes */
	CONF_ERR(ctx, do_resize(ctx, 0x7fffffffffffull, 24, 80, &err), ASP_E_NOT_FOUND, &err);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "exec sleep 100";
	uint64_t plain;
	SPAWN(&p, NULL, &plain);
	CONF_ERR(ctx, do_resize(ctx, plain, 24, 80, &err), ASP_E_INVALID_ARGUMENT, &err);
	tty_params(ctx, &p, "exit 0");
	uint64_t done;
	SPAWN(&p, NULL, &done);
	asp_proc_wait_result w;
	CONF_OK(ctx, do_wait(ctx, done, 15000, &w, &err), &err);
	CONF_ERR(ctx, do_resize(ctx, done, 24, 80, &err), ASP_E_INVALID_ARGUMENT, &err);
	tty_params(ctx, &p, "echo $$ > tty.pid; exec sleep 100");
	uint64_t live;
	SPAWN(&p, NULL, &live);
	CONF_ERR(ctx, do_resize(ctx, live, 0, 80, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_ERR(ctx, do_resize(ctx, live, 24, 100000, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_ERR(ctx, do_resize(ctx, live, 100000, 100000, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_OK(ctx, do_resize(ctx, live, ASP_TTY_MAX, 1, &err), &err);
	/* nothing left running: the processes end, and with them the terminal's */
	CONF_REQ(ctx, h_file(ctx, __LINE__, "tty.pid"));
	CONF_OK(ctx, do_signal(ctx, live, "KILL", &err), &err);
	CONF_OK(ctx, do_signal(ctx, plain, "KILL", &err), &err);
	CONF_OK(ctx, do_wait(ctx, live, 15000, &w, &err), &err);
	CONF_OK(ctx, do_wait(ctx, plain, 15000, &w, &err), &err);
	CONF_ERR(ctx, do_resize(ctx, live, 24, 80, &err), ASP_E_INVALID_ARGUMENT, &err);
	DEAD("tty.pid");
	asp_exec_result r;
	CONF_REQ(ctx, h_sh(ctx, __LINE__, "test ! -e bad.txt", &r));
	CONF_CHECKF(ctx, r.exit_code == 0, "a spawn refused for its terminal size ran");
}
