/*
 * bash, bash_output, kill_bash. A command runs as a spawned process (its own process
 * group) so that cancellation and kill_bash can kill the whole group; where the transport
 * cannot stream (plain HTTP) a foreground command falls back to exec.
 */
#include "shared.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Output kept while a command runs: the first HEAD_KEEP bytes and the last TAIL_KEEP, each
 * enough for TOOLS_OUTPUT_MAX / 2 characters of up to 4 bytes.
 */
#define HEAD_KEEP (64u << 10)
#define TAIL_KEEP (64u << 10)
/* After a kill, how long to wait for the exit before giving up on it. */
#define KILL_WAIT_MS 15000
/* Slack over the command's own timeout (the responder enforces that one). */
#define TIMEOUT_SLACK_MS 30000

/* head and tail of a stream, and its total in bytes and in characters */
typedef struct keep {
	tbuf head, tail;
	uint64_t total, chars;
} keep;

/* Where the last n characters of s[0..len) start (0 when it has no more than n). */
static size_t last_chars(const char *s, size_t len, size_t n, size_t *got)
{
	size_t i = len;
	*got = 0;
	while (i > 0 && *got < n)
		if (tools_char_start(s[--i]))
			++*got;
	return i;
}

static void keep_add(keep *k, const uint8_t *data, size_t len)
{
	k->total += len;
	size_t all;
	k->chars += tools_chars((const char *)data, len, SIZE_MAX, &all);
	if (k->head.len < HEAD_KEEP) {
		size_t n = HEAD_KEEP - k->head.len;
		if (n > len)
			n = len;
		tb_add(&k->head, (const char *)data, n);
		data += n;
		len -= n;
	}
	if (!len)
		return;
	tb_add(&k->tail, (const char *)data, len);
	if (k->tail.len > 2 * TAIL_KEEP) {
		memmove(k->tail.p, k->tail.p + k->tail.len - TAIL_KEEP, TAIL_KEEP);
		k->tail.len = TAIL_KEEP;
		k->tail.p[TAIL_KEEP] = '\0';
	}
}

/*
 * The text for the model: everything when it fits TOOLS_OUTPUT_MAX, else its head and
 * tail around a note saying how much was cut.
 */
static void keep_render(const keep *k, tbuf *out)
{
	const size_t half = TOOLS_OUTPUT_MAX / 2;
	if (k->chars <= TOOLS_OUTPUT_MAX) {
		/* at most 4 * TOOLS_OUTPUT_MAX bytes: nothing was discarded */
		tb_add(out, k->head.p ? k->head.p : "", k->head.len);
		tb_add(out, k->tail.p ? k->tail.p : "", k->tail.len);
		return;
	}
	size_t head;
	tools_chars(k->head.p, k->head.len, half, &head);
	tb_add(out, k->head.p, head);
	tb_printf(out,
	          "\n\n... [%" PRIu64 " characters of output cut from the middle, of %" PRIu64
	          " in all: redirect the output to a file and read parts of it to see more] "
	          "...\n\n",
	          k->chars - 2 * half, k->chars);
	size_t got;
	size_t at = last_chars(k->tail.p ? k->tail.p : "", k->tail.len, half, &got);
	if (got < half) {
		/* nothing was discarded yet (a full tail holds more): the rest is the head's end */
		size_t from = last_chars(k->head.p, k->head.len, half - got, &got);
		tb_add(out, k->head.p + from, k->head.len - from);
	}
	tb_add(out, k->tail.p ? k->tail.p + at : "", k->tail.len - at);
}

static void keep_free(keep *k)
{
	tb_free(&k->head);
	tb_free(&k->tail);
}

/* "exec 2>&1" first: one stream, in the order the command wrote it. */
static char *shell_script(const char *command)
{
	tbuf b = {0};
	tb_puts(&b, "exec 2>&1\n");
	tb_puts(&b, command);
	return tb_take(&b);
}

/* The model sees no trailing newlines (a note, if any, follows on the next line). */
static void trim_newlines(tbuf *out)
{
	while (out->len && out->p[out->len - 1] == '\n')
		out->p[--out->len] = '\0';
}

static void add_exit_note(tbuf *out, int64_t code, const char *sig, bool timed_out,
                          uint64_t timeout)
{
	if (timed_out)
		tb_printf(out, "%sCommand timed out after %" PRIu64 " ms and was killed.",
		          out->len ? "\n" : "", timeout);
	else if (sig)
		tb_printf(out, "%sKilled by signal %s.", out->len ? "\n" : "", sig);
	else if (code != 0)
		tb_printf(out, "%sExit code %" PRId64, out->len ? "\n" : "", code);
}

/* --- foreground -------------------------------------------------------------------------- */

typedef struct fg_run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	keep out;
	bool done, lost, cancelled;
	int64_t exit_code;
	char signal[16];
	bool timed_out;
	asp_error lost_err;
} fg_run;

static void fg_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc, (void)stream, (void)offset;
	fg_run *f = user;
	pthread_mutex_lock(&f->mu);
	keep_add(&f->out, data, len);
	pthread_mutex_unlock(&f->mu);
}

static void fg_exit(void *user, const asp_exit_event *ev)
{
	fg_run *f = user;
	pthread_mutex_lock(&f->mu);
	f->done = true;
	f->exit_code = ev->exit_code;
	snprintf(f->signal, sizeof f->signal, "%s", ev->signal ? ev->signal : "");
	f->timed_out = ev->timed_out;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void fg_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	fg_run *f = user;
	pthread_mutex_lock(&f->mu);
	f->lost = true;
	f->lost_err = *err;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

/* Called by asp_tools_cancel_fire with the token's lock held: only our own lock here. */
static void fg_wake(void *user)
{
	fg_run *f = user;
	pthread_mutex_lock(&f->mu);
	f->cancelled = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static struct timespec deadline_in(uint64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Waits until the run ends or `until`; true when it ended (exit or lost). f->mu held. */
static bool fg_wait(fg_run *f, const struct timespec *until, bool stop_on_cancel)
{
	while (!f->done && !f->lost && !(stop_on_cancel && f->cancelled))
		if (pthread_cond_timedwait(&f->cv, &f->mu, until) == ETIMEDOUT)
			break;
	return f->done || f->lost;
}

static void kill_group(asp_tools *t, uint64_t proc)
{
	asp_error err;
	tools_proc_signal(t, proc, "KILL", &err);
}

static asp_status start_shell(asp_tools *t, const char *script, const char *cwd, uint64_t timeout,
                              const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                              asp_error *err)
{
	static const char *const shells[] = {"bash", "/bin/sh"};
	char *tag = tools_tag(t, TOOLS_TAG_BASH);
	if (!tag)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_strmap_entry env[1];
	size_t n_env = tools_env(t, NULL, 0, env);
	asp_status st = ASP_E_INTERNAL;
	for (size_t i = 0; i < 2; i++) {
		const char *argv[] = {shells[i], "-c", script};
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.has_argv = true;
		p.argv.items = argv;
		p.argv.count = 3;
		p.cwd = cwd ? cwd : t->base;
		p.timeout_ms = timeout;
		p.tag = tag;
		p.has_env = n_env > 0;
		p.env = (asp_strmap){env, n_env};
		st = asp_spawn_start(t->c, &p, cb, user, proc, err);
		if (st != ASP_E_NOT_FOUND)
			break;
	}
	free(tag);
	return st;
}

/* exec where spawn cannot stream: no cancellation, the responder's timeout still applies. */
static bool bash_exec(asp_tools *t, const char *script, const char *cwd, uint64_t timeout,
                      tresult *r)
{
	asp_arena *a = asp_arena_new();
	asp_exec_result res;
	asp_error err;
	asp_status st = ASP_E_INTERNAL;
	static const char *const shells[] = {"bash", "/bin/sh"};
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	asp_strmap_entry env[1];
	size_t n_env = tools_env(t, NULL, 0, env);
	for (size_t i = 0; i < 2; i++) {
		const char *argv[] = {shells[i], "-c", script};
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.has_argv = true;
		p.argv.items = argv;
		p.argv.count = 3;
		p.cwd = cwd ? cwd : t->base;
		p.timeout_ms = timeout;
		p.has_env = n_env > 0;
		p.env = (asp_strmap){env, n_env};
		st = asp_exec(t->c, &p, &res, a, &err);
		if (st != ASP_E_NOT_FOUND)
			break;
	}
	if (st != ASP_OK) {
		asp_arena_free(a);
		return tools_fail_asp(r, &err, "running the command:", cwd ? cwd : "");
	}
	keep k = {0};
	keep_add(&k, res.stdout_data.data, res.stdout_data.len);
	keep_render(&k, &r->text);
	trim_newlines(&r->text);
	keep_free(&k);
	add_exit_note(&r->text, res.exit_code, res.signal, res.timed_out, timeout);
	r->is_error = res.exit_code != 0 || res.timed_out;
	asp_arena_free(a);
	return true;
}

static bool bash_foreground(asp_tools *t, const char *command, const char *cwd, uint64_t timeout,
                            tresult *r, asp_tools_cancel *k)
{
	char *script = shell_script(command);
	fg_run *f = calloc(1, sizeof *f);
	if (!script || !f) {
		free(script);
		free(f);
		return tools_fail(r, "Error: out of memory.");
	}
	pthread_mutex_init(&f->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	asp_proc_callbacks cb = {.on_output = fg_output, .on_exit = fg_exit, .on_lost = fg_lost};
	uint64_t proc = 0;
	asp_error err;
	bool ok = true;
	asp_status st = start_shell(t, script, cwd, timeout, &cb, f, &proc, &err);
	if (st == ASP_E_UNSUPPORTED) {
		ok = bash_exec(t, script, cwd, timeout, r);
		goto out;
	}
	if (st != ASP_OK) {
		ok = tools_fail_asp(r, &err, "starting the command:", cwd ? cwd : "");
		goto out;
	}
	if (!tools_cancel_arm(k, fg_wake, f))
		f->cancelled = true;
	struct timespec until = deadline_in(timeout + TIMEOUT_SLACK_MS);
	pthread_mutex_lock(&f->mu);
	bool ended = fg_wait(f, &until, true);
	bool cancelled = !ended && f->cancelled;
	pthread_mutex_unlock(&f->mu);
	tools_cancel_arm(k, NULL, NULL);
	if (!ended) {
		/* cancelled, or the responder missed its own timeout: kill the group, wait a little
		 */
		kill_group(t, proc);
		until = deadline_in(KILL_WAIT_MS);
		pthread_mutex_lock(&f->mu);
		fg_wait(f, &until, false);
		pthread_mutex_unlock(&f->mu);
	}
	asp_proc_detach(t->c, proc);
	keep_render(&f->out, &r->text);
	trim_newlines(&r->text);
	if (cancelled) {
		tb_printf(&r->text, "%sThe command was cancelled; its processes were killed.",
		          r->text.len ? "\n" : "");
		r->is_error = true;
	} else if (f->lost && !f->done) {
		tb_printf(&r->text,
		          "%sError: the connection to the sandbox was lost (%s); the "
		          "command may still be running there.",
		          r->text.len ? "\n" : "", f->lost_err.message);
		r->is_error = true;
	} else if (!f->done) {
		tb_printf(&r->text, "%sCommand timed out after %" PRIu64 " ms and was killed.",
		          r->text.len ? "\n" : "", timeout);
		r->is_error = true;
	} else {
		add_exit_note(&r->text, f->exit_code, f->signal[0] ? f->signal : NULL, f->timed_out,
		              timeout);
		r->is_error = f->exit_code != 0 || f->timed_out || f->signal[0];
	}
	if (!r->text.len)
		tb_puts(&r->text, "(no output)");
out:
	keep_free(&f->out);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
	free(script);
	return ok;
}

/* --- background -------------------------------------------------------------------------- */

/* A background run is an entry of the tools handle's table of running commands (procs.c). */
static bool bash_background(asp_tools *t, const char *command, const char *cwd, tresult *r)
{
	char *script = shell_script(command);
	char *tag = tools_tag(t, TOOLS_TAG_BACKGROUND);
	if (!script || !tag) {
		free(script);
		free(tag);
		return tools_fail(r, "Error: out of memory.");
	}
	asp_strmap_entry env[1];
	size_t n_env = tools_env(t, NULL, 0, env);
	static const char *const shells[] = {"bash", "/bin/sh"};
	asp_error err;
	asp_error_clear(&err);
	asp_status st = ASP_E_INTERNAL;
	tools_proc *p = NULL;
	for (size_t i = 0; i < 2; i++) {
		const char *argv[] = {shells[i], "-c", script};
		asp_spawn_params sp;
		asp_spawn_params_init(&sp);
		sp.has_argv = true;
		sp.argv.items = argv;
		sp.argv.count = 3;
		sp.cwd = cwd ? cwd : t->base;
		sp.tag = tag;
		sp.has_env = n_env > 0;
		sp.env = (asp_strmap){env, n_env};
		st = tools_proc_spawn(t, &sp, false, &p, &err);
		if (st != ASP_E_NOT_FOUND)
			break;
	}
	free(script);
	free(tag);
	if (st != ASP_OK) {
		if (st == ASP_E_UNSUPPORTED)
			return tools_fail(r,
			                  "Error: this sandbox's transport cannot run background "
			                  "commands; run it in the foreground instead.");
		return tools_fail_asp(r, &err, "starting the command:", cwd ? cwd : "");
	}
	tb_printf(&r->text,
	          "Command running in the background with ID: bash_%" PRIu64
	          "\nUse bash_output with this bash_id to read its output, kill_bash to stop it.",
	          p->proc);
	const char *note = asp_tools_notice(t);
	if (note)
		tb_printf(&r->text, "\nNote: %s", note);
	tools_proc_put(p);
	return true;
}

bool tool_bash(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	const char *command, *desc, *workdir;
	uint64_t timeout;
	bool bg;
	/* workdir is not in bash's schema: vocabularies whose shell takes one (OpenCode's) pass it.
	 */
	if (!arg_str(r, args, "command", true, &command) ||
	    !arg_str(r, args, "description", false, &desc) ||
	    !arg_str(r, args, "workdir", false, &workdir) ||
	    !arg_uint(r, args, "timeout", TOOLS_BASH_TIMEOUT_DEFAULT, &timeout) ||
	    !arg_bool(r, args, "run_in_background", false, &bg))
		return false;
	if (timeout == 0)
		timeout = TOOLS_BASH_TIMEOUT_DEFAULT;
	if (timeout > TOOLS_BASH_TIMEOUT_MAX)
		return tools_fail(r,
		                  "Error: timeout must be at most %u ms (10 minutes); run longer "
		                  "commands with run_in_background.",
		                  TOOLS_BASH_TIMEOUT_MAX);
	if (!*command)
		return tools_fail(r, "Error: command is empty.");
	char *cwd = NULL;
	if (workdir && *workdir && !(cwd = tools_abs(t, workdir)))
		return tools_fail(r, "Error: out of memory.");
	bool ok = bg ? bash_background(t, command, cwd, r)
	             : bash_foreground(t, command, cwd, timeout, r, k);
	free(cwd);
	return ok;
}

/* "bash_12" or "12" → 12. */
static bool parse_bash_id(const char *s, uint64_t *out)
{
	if (!strncmp(s, "bash_", 5))
		s += 5;
	if (!*s || *s < '0' || *s > '9')
		return false;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno)
		return false;
	*out = v;
	return true;
}

static bool arg_bash_id(tresult *r, json_t *args, uint64_t *proc)
{
	const char *id;
	if (!arg_str(r, args, "bash_id", false, &id))
		return false;
	if (!id && !arg_str(r, args, "shell_id", false, &id))
		return false;
	if (!id)
		return tools_fail(r, "Error: the required parameter `bash_id` is missing.");
	if (!parse_bash_id(id, proc))
		return tools_fail(r,
		                  "Error: `%s` is not a bash_id; use the ID that bash returned "
		                  "for a run_in_background command (bash_N).",
		                  id);
	return true;
}

bool tool_bash_output(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	uint64_t proc;
	if (!arg_bash_id(r, args, &proc))
		return false;
	tools_proc *p;
	asp_error err;
	asp_status st = tools_proc_get(t, proc, false, &p, &err);
	if (st == ASP_E_NOT_FOUND)
		return tools_fail(r,
		                  "Error: no background shell bash_%" PRIu64
		                  " in the sandbox (finished long ago, or never started).",
		                  proc);
	if (st != ASP_OK)
		return tools_fail_asp(r, &err, "following the background command", "");
	tbuf out = {0};
	tools_proc_state ps;
	tools_proc_take(p, &out, &ps);
	tools_proc_put(p);
	if (ps.dropped)
		tb_printf(&r->text, "[%" PRIu64 " earlier bytes of output were dropped]\n",
		          ps.dropped);
	keep kp = {0};
	keep_add(&kp, (const uint8_t *)(out.p ? out.p : ""), out.len);
	tb_free(&out);
	keep_render(&kp, &r->text);
	trim_newlines(&r->text);
	keep_free(&kp);
	if (!r->text.len)
		tb_puts(&r->text, "(no new output)");
	if (!ps.done)
		tb_puts(&r->text, "\n<status>running</status>");
	else if (ps.timed_out)
		tb_puts(&r->text, "\n<status>timed out and killed</status>");
	else if (ps.signal[0])
		tb_printf(&r->text, "\n<status>killed by signal %s</status>", ps.signal);
	else
		tb_printf(&r->text, "\n<status>exited with code %" PRId64 "</status>",
		          ps.exit_code);
	return true;
}

bool tool_kill_bash(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	uint64_t proc;
	if (!arg_bash_id(r, args, &proc))
		return false;
	asp_error err;
	asp_status st = tools_proc_signal(t, proc, "KILL", &err);
	if (st == ASP_E_NOT_FOUND)
		return tools_fail(r, "Error: no background shell bash_%" PRIu64 " in the sandbox.",
		                  proc);
	if (st != ASP_OK)
		return tools_fail_asp(r, &err, "killing", "");
	tb_printf(&r->text, "Killed background shell bash_%" PRIu64 " (its whole process group).",
	          proc);
	return true;
}
