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
#include "conf_follow.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
	/* what survived: its stat line (state, parent, group) and command line */
	asp_exec_result r;
	bool shown = h_sh(ctx, line,
	                  "p=$(cat bg.pid); printf '%s; ' \"$(cat /proc/$p/stat)\"; "
	                  "tr '\\0' ' ' < /proc/$p/cmdline",
	                  &r);
	conf_fail(ctx, __FILE__, line, "a process of the timed-out group survived: %.*s",
	          shown ? (int)r.stdout_data.len : 0,
	          shown ? (const char *)r.stdout_data.data : "");
	return false;
}

/*
 * As exec's timeout case: the timeout counts from the spawn, and a sandbox whose login
 * shell reads slow startup files (seconds, under load) may TERM the command before it
 * recorded its background child, which is no verdict: the case runs again with twice the
 * time, up to 6 times (0.3 s to 9.6 s). Nothing can end a command before it started, so
 * how soon the end came is measured from its first line.
 */
#define SPAWN_TIMEOUT_FIRST_MS 300
#define SPAWN_TIMEOUT_TRIES    6

PROC_CASE(spawn_timeout_kills_group)
{
	asp_spawn_params p;
	coll *c = NULL;
	uint64_t proc = 0;
	double took = 0;
	bool ready = false;
	for (int i = 0; i < SPAWN_TIMEOUT_TRIES && !ready; i++) {
		c = fx_coll(f, MIB);
		CONF_CHECK(ctx, c != NULL);
		asp_spawn_params_init(&p);
		p.command = "rm -f bg.pid; echo up; sleep 60 & echo $! > bg.pid; sleep 60";
		p.cwd = ctx->dir;
		p.timeout_ms = (uint64_t)SPAWN_TIMEOUT_FIRST_MS << i;
		double t0 = mono_ms();
		SPAWN(&p, c, &proc);
		END(c);
		took = c->t_end - t0;
		asp_exec_result r;
		CONF_REQ(ctx, h_sh(ctx, __LINE__, "[ -s bg.pid ] && printf y || :", &r));
		ready = r.stdout_data.len == 1;
	}
	CONF_CHECKF(ctx, ready, "the command had not started its background child after %d ms",
	            SPAWN_TIMEOUT_FIRST_MS << (SPAWN_TIMEOUT_TRIES - 1));
	CONF_CHECKF(ctx,
	            c->ev.timed_out && c->ev.exit_code == -1 && c->ev.signal &&
	                strcmp(c->ev.signal, "TERM") == 0,
	            "timed_out %d exit %lld signal %s", c->ev.timed_out, (long long)c->ev.exit_code,
	            c->ev.signal ? c->ev.signal : "nil");
	double ran = c->got[0] ? c->t_end - c->t_first : took;
	CONF_CHECKF(ctx, took >= p.timeout_ms - 50 && ran < p.timeout_ms + CONF_SLOW_MS,
	            "ended %.0f ms after the spawn, %.0f ms after the command started, with a "
	            "%llu ms timeout",
	            took, ran, (unsigned long long)p.timeout_ms);
	asp_proc_wait_result w;
	asp_error err;
	CONF_OK(ctx, do_wait(ctx, proc, 5000, &w, &err), &err);
	CONF_CHECK(ctx, w.timed_out);
	CONF_REQ(ctx, h_pid_dead(ctx, __LINE__));
}

/*
 * Whether the sandbox starts commands with signal `num` ignored (Linux: SigIgn in
 * /proc/self/status of a command it starts), so that a proc_signal cannot end them.
 */
static bool h_starts_ignoring(conf_ctx *ctx, int num)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("sed", "-n", "s/^SigIgn:[[:space:]]*//p", "/proc/self/status");
	p.timeout_ms = 10000;
	asp_exec_result r;
	asp_error err;
	if (ctx->ops->exec(ctx->self, &p, &r, ctx->a, &err) != ASP_OK || r.stdout_data.len == 0)
		return false;
	char hex[40];
	snprintf(hex, sizeof hex, "%.*s", (int)r.stdout_data.len, (const char *)r.stdout_data.data);
	unsigned long long mask = strtoull(hex, NULL, 16);
	return num >= 1 && num <= 64 && (mask >> (num - 1) & 1);
}

PROC_CASE(proc_signal_each)
{
	static const char *const names[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"};
	static const int nums[] = {15, 9, 2, 1, 3, 10, 12}; /* Linux's, for the reason below */
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
		asp_status st = do_wait(ctx, proc, 10000, &w, &err);
		if (st == ASP_E_TIMEOUT && h_starts_ignoring(ctx, nums[i])) {
			conf_fail(
			    ctx, __FILE__, __LINE__,
			    "%s: the sandbox starts commands with SIG%s ignored (inherited from "
			    "how its server was started, and nothing there resets it), so the "
			    "signal cannot end them",
			    names[i], names[i]);
			return;
		}
		CONF_CHECKF(ctx, st == ASP_OK, "%s: expected ok, got %s: %s", names[i],
		            asp_strerror(st), err.message);
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
	/* Past the usual safety limit: up to 48 MiB at 3 MB/s may come before the wait's
	 * answer, slower on a starved machine, and the case ends the process itself. */
	p.timeout_ms = 120000;
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
	 * (pipes, sockets, queues: 1-3 MiB over each transport, and each relay such as a
	 * gateway in front of asp-agent --listen adds two sockets' buffers, which Linux
	 * grows to 4 MiB sent plus 6 MiB received). Counted in bytes, not time: a starved
	 * machine slows the slow reader further, while an unbounded queue would hold
	 * hundreds of MiB by now.
	 */
	asp_status st = do_wait(ctx, proc, 1, &w, &err);
	pthread_mutex_lock(&c->mu);
	uint64_t ahead = c->total[0] - got;
	pthread_mutex_unlock(&c->mu);
	CONF_CHECKF(ctx, ahead < 48ull * MIB,
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
