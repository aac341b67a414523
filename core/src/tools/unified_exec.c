/*
 * exec_command and write_stdin: Codex's unified exec, as a vocabulary over the table of
 * running commands that bash's background runs use too (procs.c). Names, arguments,
 * defaults, clamps, answer text and truncation follow Codex (openai/codex, codex-rs:
 * core/src/unified_exec/, core/src/tools/handlers/shell_spec.rs and unified_exec*,
 * utils/string/src/truncate.rs); docs/tools.md lists where we differ and why.
 */
#include "shared.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Codex's bounds on how long a call waits for output (core/src/unified_exec/mod.rs). */
#define YIELD_MIN_MS              250u
#define YIELD_MAX_MS              30000u
#define YIELD_EMPTY_MIN_MS        5000u   /* an empty write_stdin is a poll: it waits longer */
#define YIELD_EMPTY_MAX_MS        300000u /* background_terminal_max_timeout's default */
#define EXEC_YIELD_DEFAULT_MS     10000u
#define STDIN_YIELD_DEFAULT_MS    250u
#define MAX_OUTPUT_TOKENS_DEFAULT 10000u
/* Codex estimates a token as 4 bytes. */
#define BYTES_PER_TOKEN 4u
/* After typing, a short pause before collecting, so the echo and answer are caught. */
#define AFTER_WRITE_MS 100u

/* Codex's environment for these commands: plain output, no pagers. */
static const asp_strmap_entry exec_env[] = {
    {"NO_COLOR", "1"},       {"TERM", "dumb"},      {"LANG", "C.UTF-8"},
    {"LC_CTYPE", "C.UTF-8"}, {"LC_ALL", "C.UTF-8"}, {"COLORTERM", ""},
    {"PAGER", "cat"},        {"GIT_PAGER", "cat"},  {"GH_PAGER", "cat"},
};

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Six hex digits, fresh per answer, as Codex's chunk ids. */
static void chunk_id(char out[7])
{
	uint8_t r[3] = {0};
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
		uint64_t n = now_ns() ^ (uint64_t)getpid();
		memcpy(r, &n, sizeof r);
	}
	snprintf(out, 7, "%02x%02x%02x", r[0], r[1], r[2]);
}

/* A signal's name as the protocol gives it, as the shell's exit code (128 + number). */
static int64_t signal_code(const char *name)
{
	static const struct {
		const char *name;
		int num;
	} sigs[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},
	            {"TRAP", SIGTRAP}, {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},
	            {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
	            {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}};
	if (!strncmp(name, "SIG", 3))
		name += 3;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (!strcmp(sigs[i].name, name))
			return 128 + sigs[i].num;
	return -1;
}

/*
 * Codex's truncation of the output to `max_tokens` (4 bytes each): text within the budget
 * is kept whole; longer text keeps the characters within the first half of the budget's
 * bytes and those starting in the last half, around "…N tokens truncated…" (N the cut
 * bytes over 4, rounded up), after a line "Total output lines: L" and a blank line.
 */
void tools_codex_truncate(const char *s, size_t len, uint64_t max_tokens, tbuf *out)
{
	uint64_t budget =
	    max_tokens > UINT64_MAX / BYTES_PER_TOKEN ? UINT64_MAX : max_tokens * BYTES_PER_TOKEN;
	if (len <= budget) {
		tb_add(out, s, len);
		return;
	}
	size_t lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += s[i] == '\n';
	lines += s[len - 1] != '\n';
	tb_printf(out, "Total output lines: %zu\n\n", lines);
	size_t left = (size_t)(budget / 2), right = (size_t)budget - left;
	uint64_t cut = len - budget;
	if (budget == 0) {
		tb_printf(out, "\u2026%" PRIu64 " tokens truncated\u2026",
		          (cut + BYTES_PER_TOKEN - 1) / BYTES_PER_TOKEN);
		return;
	}
	/* the head ends before the first character that does not fit in `left` bytes */
	size_t head = left;
	while (head > 0 && !tools_char_start(s[head]))
		head--;
	/* the tail starts at the first character at or after len - right */
	size_t tail = len - right;
	while (tail < len && !tools_char_start(s[tail]))
		tail++;
	if (tail < head)
		tail = head;
	tb_add(out, s, head);
	tb_printf(out, "\u2026%" PRIu64 " tokens truncated\u2026",
	          (cut + BYTES_PER_TOKEN - 1) / BYTES_PER_TOKEN);
	tb_add(out, s + tail, len - tail);
}

/*
 * Codex's answer: the chunk id, the wall time, then the exit code or the session id to
 * continue with, the token estimate of the output and the output.
 */
static void answer(tresult *r, tools_proc *p, uint64_t started_ns, uint64_t max_tokens)
{
	tbuf raw = {0};
	tools_proc_state ps;
	tools_proc_take(p, &raw, &ps);
	double wall = (double)(now_ns() - started_ns) / 1e9;
	/* counted and cut on valid UTF-8, as Codex does after its lossy decoding */
	tools_utf8_fix(&raw);
	char id[7];
	chunk_id(id);
	tb_printf(&r->text, "Chunk ID: %s\nWall time: %.4f seconds\n", id, wall);
	if (ps.done)
		tb_printf(&r->text, "Process exited with code %" PRId64 "\n",
		          ps.signal[0] ? signal_code(ps.signal) : ps.exit_code);
	else
		tb_printf(&r->text, "Process running with session ID %" PRIu64 "\n", p->proc);
	tb_printf(&r->text, "Original token count: %zu\nOutput:\n",
	          (raw.len + ps.dropped + BYTES_PER_TOKEN - 1) / BYTES_PER_TOKEN);
	tools_codex_truncate(raw.p ? raw.p : "", raw.len, max_tokens, &r->text);
	tb_free(&raw);
	if (!ps.done && !ps.following)
		/* the connection went: the process may run on, but nothing more comes here */
		tb_puts(&r->text, "\n(The connection to the sandbox was lost; write_stdin with "
		                  "the same session ID re-attaches where the transport allows.)");
}

bool tool_exec_command(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	const char *cmd, *workdir, *shell;
	bool login, tty;
	uint64_t yield, max_tokens;
	if (!arg_str(r, args, "cmd", true, &cmd) || !arg_str(r, args, "workdir", false, &workdir) ||
	    !arg_str(r, args, "shell", false, &shell) ||
	    !arg_bool(r, args, "login", true, &login) || !arg_bool(r, args, "tty", false, &tty) ||
	    !arg_uint(r, args, "yield_time_ms", EXEC_YIELD_DEFAULT_MS, &yield) ||
	    !arg_uint(r, args, "max_output_tokens", MAX_OUTPUT_TOKENS_DEFAULT, &max_tokens))
		return false;
	yield = clamp_u64(yield, YIELD_MIN_MS, YIELD_MAX_MS);
	/* a responder without terminals might ignore tty: ask its hello first */
	asp_error herr;
	if (tty && tools_hello(t, &herr) != ASP_OK)
		return tools_fail(r, "Error: the sandbox's hello failed (%s): %s.",
		                  asp_strerror(herr.code), herr.message);
	if (tty && !t->pty)
		return tools_fail(
		    r, "exec_command failed: CreateProcess { message: \"this sandbox has "
		       "no terminals (its hello lists no pty feature); rerun exec_command "
		       "with tty=false\" }");
	char *cwd = workdir && *workdir ? tools_abs(t, workdir) : NULL;
	if (workdir && *workdir && !cwd)
		return tools_fail(r, "Error: out of memory.");
	/* no shell named: bash, else /bin/sh where the sandbox has no bash */
	const char *shells[2] = {shell && *shell ? shell : "bash", "/bin/sh"};
	size_t n_shells = shell && *shell ? 1 : 2;
	asp_tty term = {.rows = 24, .cols = 80, .term = "dumb"};
	asp_strmap_entry env[sizeof exec_env / sizeof exec_env[0] + 1];
	size_t n_env = tools_env(t, exec_env, sizeof exec_env / sizeof exec_env[0], env);
	char *tag = tools_tag(t, TOOLS_TAG_EXEC);
	if (!tag) {
		free(cwd);
		return tools_fail(r, "Error: out of memory.");
	}
	asp_error err;
	asp_error_clear(&err);
	asp_status st = ASP_E_INTERNAL;
	tools_proc *p = NULL;
	for (size_t i = 0; i < n_shells; i++) {
		const char *argv[] = {shells[i], login ? "-lc" : "-c", cmd};
		asp_spawn_params sp;
		asp_spawn_params_init(&sp);
		sp.has_argv = true;
		sp.argv.items = argv;
		sp.argv.count = 3;
		sp.cwd = cwd ? cwd : t->base;
		sp.has_env = true;
		sp.env.items = env;
		sp.env.count = n_env;
		sp.tag = tag;
		sp.tty = tty ? &term : NULL;
		st = tools_proc_spawn(t, &sp, true, &p, &err);
		if (st != ASP_E_NOT_FOUND)
			break;
	}
	free(cwd);
	free(tag);
	if (st != ASP_OK) {
		const char *why = err.message[0] ? err.message : asp_strerror(st);
		if (st == ASP_E_UNSUPPORTED && tty)
			return tools_fail(
			    r,
			    "exec_command failed: CreateProcess { message: \"this "
			    "sandbox has no terminals (%s); rerun exec_command without "
			    "tty\" }",
			    why);
		if (st == ASP_E_UNSUPPORTED)
			return tools_fail(r,
			                  "exec_command failed: CreateProcess { message: \"this "
			                  "sandbox's transport cannot keep a process running (%s); "
			                  "use the bash tool\" }",
			                  why);
		return tools_fail(r, "exec_command failed: CreateProcess { message: \"%s: %s\" }",
		                  asp_strerror(st), why);
	}
	uint64_t started = now_ns();
	bool waited = tools_proc_wait(p, yield, k);
	if (!waited) {
		/* cancelled: the command goes with the call */
		tools_proc_signal(t, p->proc, "KILL", &err);
		tools_proc_wait(p, 15000, NULL);
	}
	answer(r, p, started, max_tokens);
	tools_proc_put(p);
	if (!waited) {
		tb_puts(&r->text, "\nThe call was cancelled; the process group was killed.");
		r->is_error = true;
	}
	return true;
}

bool tool_write_stdin(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	const char *chars;
	uint64_t sid, yield, max_tokens;
	json_t *sv = json_object_get(args, "session_id");
	if (!sv || json_is_null(sv))
		return tools_fail(r,
		                  "failed to parse function arguments: missing field `session_id`");
	if (!arg_uint(r, args, "session_id", 0, &sid) ||
	    !arg_str(r, args, "chars", false, &chars) ||
	    !arg_uint(r, args, "yield_time_ms", STDIN_YIELD_DEFAULT_MS, &yield) ||
	    !arg_uint(r, args, "max_output_tokens", MAX_OUTPUT_TOKENS_DEFAULT, &max_tokens))
		return false;
	if (!chars)
		chars = "";
	size_t n = strlen(chars);
	yield = n ? clamp_u64(yield, YIELD_MIN_MS, YIELD_MAX_MS)
	          : clamp_u64(yield, YIELD_EMPTY_MIN_MS, YIELD_EMPTY_MAX_MS);
	tools_proc *p;
	asp_error err;
	asp_error_clear(&err);
	asp_status st = tools_proc_get(t, sid, true, &p, &err);
	if (st == ASP_E_NOT_FOUND)
		return tools_fail(r, "write_stdin failed: Unknown process id %" PRIu64, sid);
	if (st != ASP_OK)
		return tools_fail(r, "write_stdin failed: %s: %s", asp_strerror(st), err.message);
	if (n) {
		/* on a pipe nothing reads ^C: it interrupts the process group, as on a terminal */
		if (!p->tty && n == 1 && chars[0] == '\x03')
			st = tools_proc_signal(t, sid, "INT", &err);
		else
			st = tools_proc_write(t, sid, chars, n, &err);
		if (st != ASP_OK) {
			pthread_mutex_lock(&t->mu);
			bool done = p->done;
			pthread_mutex_unlock(&t->mu);
			if (!done) {
				tools_proc_put(p);
				return tools_fail(
				    r, "write_stdin failed: failed to write to stdin (%s)",
				    err.message);
			}
			/* it exited before the write: its exit and last output are the answer */
		} else {
			sleep_ms(AFTER_WRITE_MS);
		}
	}
	uint64_t started = now_ns();
	bool waited = tools_proc_wait(p, yield, k);
	answer(r, p, started, max_tokens);
	tools_proc_put(p);
	if (!waited) {
		tb_puts(&r->text, "\nThe call was cancelled; the process keeps running.");
		r->is_error = true;
	}
	return true;
}
