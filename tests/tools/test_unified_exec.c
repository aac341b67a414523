/*
 * exec_command and write_stdin (Codex's unified exec) against a real asp-agent over
 * stdio: the answer's format, exit codes, a session continued by write_stdin (into cat's
 * stdin, polls, ^C), the table shared with bash_output and kill_bash, truncation, how
 * long a call waits, unknown sessions, and a terminal (or its refusal where the agent's
 * hello lists no pty).
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "tools/shared.h"

#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static asp_client *client;
static asp_tools *tools;
static char root[256];

static char *call(const char *name, const char *args, bool *is_error)
{
	char *text = NULL;
	bool err = true;
	CU_ASSERT_EQUAL(asp_tools_call(tools, name, args, &text, &err, NULL), ASP_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(text);
	if (is_error)
		*is_error = err;
	return text;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The parts of an answer; false when it is not in Codex's format. */
typedef struct answer {
	char chunk[16];
	double wall;
	bool exited;
	long long code;
	uint64_t session;
	unsigned long long tokens;
	const char *output; /* into the text */
} answer;

static bool parse(const char *text, answer *a)
{
	memset(a, 0, sizeof *a);
	int n = 0;
	if (sscanf(text, "Chunk ID: %15[0-9a-f]\nWall time: %lf seconds\n%n", a->chunk, &a->wall,
	           &n) != 2 ||
	    strlen(a->chunk) != 6)
		return false;
	const char *s = text + n;
	int m = 0;
	if (sscanf(s, "Process exited with code %lld\n%n", &a->code, &m) == 1 && m) {
		a->exited = true;
	} else if (sscanf(s, "Process running with session ID %" SCNu64 "\n%n", &a->session, &m) !=
	               1 ||
	           !m) {
		return false;
	}
	s += m;
	m = 0;
	if (sscanf(s, "Original token count: %llu\nOutput:\n%n", &a->tokens, &m) != 1 || !m)
		return false;
	a->output = s + m;
	return true;
}

static int suite_init(void)
{
	const char *agent = getenv("ASP_AGENT");
	if (!agent)
		return -1;
	snprintf(root, sizeof root, "/tmp/asp-uexec-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	char cfg[1024];
	snprintf(cfg, sizeof cfg,
	         "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s\", "
	         "\"stdio\": {\"command\": [\"%s\", \"--stdio\"]}}",
	         root, agent);
	asp_config *c;
	asp_error err;
	if (asp_config_parse(cfg, strlen(cfg), NULL, &c, &err) != ASP_OK)
		return -1;
	asp_status st = asp_client_open(c, &client, &err);
	asp_config_free(c);
	if (st != ASP_OK || asp_tools_new(client, &tools, &err) != ASP_OK) {
		fprintf(stderr, "open: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int suite_clean(void)
{
	asp_tools_free(tools);
	asp_client_free(client);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_exit_code(void)
{
	bool e;
	char *t = call("exec_command",
	               "{\"cmd\": \"echo out; echo err >&2; exit 3\", \"login\": false}", &e);
	answer a;
	CU_ASSERT_FALSE(e); /* a failing command is an answer, not a tool failure */
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT(a.exited);
	CU_ASSERT_EQUAL(a.code, 3);
	CU_ASSERT(strstr(a.output, "out\n") && strstr(a.output, "err\n"));
	CU_ASSERT_EQUAL(a.tokens, 2); /* 8 bytes, 4 to a token */
	free(t);
	/* workdir, relative to the working directory */
	char args[512];
	snprintf(args, sizeof args, "{\"cmd\": \"pwd\", \"workdir\": \"%s\", \"login\": false}",
	         root);
	t = call("exec_command", args, &e);
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT_PTR_NOT_NULL(strstr(a.output, root));
	CU_ASSERT_EQUAL(a.code, 0);
	free(t);
	/* Codex's environment: no colours, no pager */
	t = call("exec_command", "{\"cmd\": \"echo $NO_COLOR:$PAGER:$TERM\", \"login\": false}",
	         &e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "1:cat:dumb"));
	free(t);
	/* a signal is the shell's 128 + N */
	t = call("exec_command", "{\"cmd\": \"kill -TERM $$\", \"login\": false}", &e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "Process exited with code 143"));
	free(t);
	t = call("exec_command", "{\"workdir\": \"/\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "`cmd`"));
	free(t);
}

/* Polls the session until its output holds `want` (bounded); returns all output seen. */
static char *poll_for(uint64_t sid, const char *want, answer *last)
{
	size_t cap = 1 << 16, len = 0;
	char *all = calloc(1, cap);
	double end = now_s() + 30;
	while (now_s() < end) {
		char args[128];
		snprintf(args, sizeof args,
		         "{\"session_id\": %" PRIu64 ", \"yield_time_ms\": 5000}", sid);
		char *t = call("write_stdin", args, NULL);
		CU_ASSERT_FATAL(parse(t, last));
		size_t n = strlen(last->output);
		if (len + n < cap) {
			memcpy(all + len, last->output, n + 1);
			len += n;
		}
		free(t);
		if (strstr(all, want) || last->exited)
			break;
	}
	return all;
}

static void test_session(void)
{
	bool e;
	char *t = call("exec_command",
	               "{\"cmd\": \"echo start; read x; echo got $x; sleep 1; echo end\", "
	               "\"login\": false, \"yield_time_ms\": 250}",
	               &e);
	answer a;
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT_FALSE_FATAL(a.exited);
	uint64_t sid = a.session;
	CU_ASSERT(sid > 0);
	bool started = strstr(a.output, "start") != NULL;
	free(t);
	char args[256];
	snprintf(args, sizeof args, "{\"session_id\": %" PRIu64 ", \"chars\": \"abc\\n\"}", sid);
	t = call("write_stdin", args, &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_FATAL(parse(t, &a));
	started = started || strstr(a.output, "start");
	free(t);
	char *all = poll_for(sid, "end", &a);
	CU_ASSERT(started || strstr(all, "start"));
	CU_ASSERT_PTR_NOT_NULL(strstr(all, "end"));
	free(all);
	if (!a.exited) {
		all = poll_for(sid, "\x01", &a);
		free(all);
	}
	CU_ASSERT(a.exited);
	CU_ASSERT_EQUAL(a.code, 0);
	/* over: the session is unknown now, as in Codex */
	snprintf(args, sizeof args, "{\"session_id\": %" PRIu64 "}", sid);
	t = call("write_stdin", args, &e);
	CU_ASSERT(e);
	char want[128];
	snprintf(want, sizeof want, "write_stdin failed: Unknown process id %" PRIu64, sid);
	CU_ASSERT_STRING_EQUAL(t, want);
	free(t);
}

static void test_cat_shared_table(void)
{
	bool e;
	char *t = call("exec_command",
	               "{\"cmd\": \"cat\", \"login\": false, \"yield_time_ms\": 250}", &e);
	answer a;
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT_FALSE_FATAL(a.exited);
	uint64_t sid = a.session;
	free(t);
	char args[256];
	snprintf(args, sizeof args, "{\"session_id\": %" PRIu64 ", \"chars\": \"ping\\n\"}", sid);
	t = call("write_stdin", args, &e);
	CU_ASSERT_FATAL(parse(t, &a));
	char *all = strstr(a.output, "ping") ? strdup("ping") : poll_for(sid, "ping", &a);
	CU_ASSERT_PTR_NOT_NULL(strstr(all, "ping"));
	free(all);
	free(t);
	/* the same table as bash's background runs: bash_output and kill_bash take the id */
	snprintf(args, sizeof args, "{\"bash_id\": \"%" PRIu64 "\"}", sid);
	t = call("bash_output", args, &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "<status>running</status>"));
	free(t);
	/* ^C on a pipe interrupts the group */
	snprintf(args, sizeof args, "{\"session_id\": %" PRIu64 ", \"chars\": \"\\u0003\"}", sid);
	t = call("write_stdin", args, &e);
	CU_ASSERT_FATAL(parse(t, &a));
	free(t);
	if (!a.exited) {
		all = poll_for(sid, "\x01", &a);
		free(all);
	}
	CU_ASSERT(a.exited);
	CU_ASSERT_EQUAL(a.code, 130);

	t = call("exec_command",
	         "{\"cmd\": \"sleep 300\", \"login\": false, \"yield_time_ms\": 250}", &e);
	CU_ASSERT_FATAL(parse(t, &a));
	sid = a.session;
	free(t);
	snprintf(args, sizeof args, "{\"bash_id\": \"bash_%" PRIu64 "\"}", sid);
	t = call("kill_bash", args, &e);
	CU_ASSERT_FALSE(e);
	free(t);
	all = poll_for(sid, "\x01", &a);
	free(all);
	CU_ASSERT(a.exited);
	CU_ASSERT_EQUAL(a.code, 137);
}

static void test_truncation(void)
{
	bool e;
	char *t =
	    call("exec_command",
	         "{\"cmd\": \"seq 1 2000\", \"login\": false, \"max_output_tokens\": 10}", &e);
	answer a;
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT_EQUAL(a.tokens, 2224); /* 8893 bytes */
	CU_ASSERT_STRING_EQUAL(a.output, "Total output lines: 2000\n\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10"
	                                 "\u20262214 tokens truncated\u2026"
	                                 "1997\n1998\n1999\n2000\n");
	free(t);
	/* within the budget: whole */
	tbuf b = {0};
	tools_codex_truncate("abcdefgh", 8, 2, &b);
	CU_ASSERT_STRING_EQUAL(b.p, "abcdefgh");
	tb_free(&b);
	/* cuts fall between characters: "é" (2 bytes) straddling either edge goes */
	tools_codex_truncate("a\xc3\xa9xxxxxxxx\xc3\xa9z", 14, 1, &b);
	CU_ASSERT_STRING_EQUAL(b.p, "Total output lines: 1\n\na\u20263 tokens truncated\u2026z");
	tb_free(&b);
	tools_codex_truncate("x\n", 2, 0, &b);
	CU_ASSERT_STRING_EQUAL(b.p, "Total output lines: 1\n\n\u20261 tokens truncated\u2026");
	tb_free(&b);
}

static void test_yield_bounds(void)
{
	bool e;
	/* yield_time_ms below Codex's 250 ms floor waits the floor */
	double t0 = now_s();
	char *t = call("exec_command",
	               "{\"cmd\": \"sleep 60\", \"login\": false, \"yield_time_ms\": 1}", &e);
	double took = now_s() - t0;
	answer a;
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT_FALSE(a.exited);
	CU_ASSERT(a.wall >= 0.249);
	CU_ASSERT(took < 10);
	free(t);
	uint64_t sid = a.session;
	/* an empty write_stdin is a poll: at least 5 s */
	char args[128];
	snprintf(args, sizeof args, "{\"session_id\": %" PRIu64 ", \"yield_time_ms\": 1}", sid);
	t0 = now_s();
	t = call("write_stdin", args, &e);
	took = now_s() - t0;
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT(a.wall >= 4.99);
	CU_ASSERT(took < 20);
	free(t);
	/* a command that ends returns at its exit, not at the yield time */
	t0 = now_s();
	t = call("exec_command", "{\"cmd\": \"true\", \"login\": false, \"yield_time_ms\": 30000}",
	         &e);
	CU_ASSERT(now_s() - t0 < 15);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "Process exited with code 0"));
	free(t);
	snprintf(args, sizeof args, "{\"bash_id\": \"%" PRIu64 "\"}", sid);
	t = call("kill_bash", args, &e);
	free(t);
}

static void test_unknown_session(void)
{
	bool e;
	char *t = call("write_stdin", "{\"session_id\": 4242424242, \"chars\": \"x\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_STRING_EQUAL(t, "write_stdin failed: Unknown process id 4242424242");
	free(t);
	t = call("write_stdin", "{\"chars\": \"x\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "session_id"));
	free(t);
}

static void test_tty(void)
{
	bool e;
	char *t = call(
	    "exec_command",
	    "{\"cmd\": \"tty; stty size; echo T=$TERM\", \"login\": false, \"tty\": true}", &e);
	if (e && strstr(t, "no terminals")) {
		printf("n/a (the agent's hello lists no pty) ");
		CU_ASSERT_PTR_NOT_NULL(strstr(t, "tty=false"));
		free(t);
		return;
	}
	answer a;
	CU_ASSERT_FATAL(parse(t, &a));
	CU_ASSERT(a.exited);
	CU_ASSERT_EQUAL(a.code, 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(a.output, "/dev/pts/"));
	CU_ASSERT_PTR_NOT_NULL(strstr(a.output, "24 80"));
	CU_ASSERT_PTR_NOT_NULL(strstr(a.output, "T=dumb"));
	free(t);
	/* a terminal session: typed lines reach `read`, echoed by the line discipline */
	t = call("exec_command",
	         "{\"cmd\": \"read x; echo got:$x\", \"login\": false, \"tty\": true, "
	         "\"yield_time_ms\": 250}",
	         &e);
	CU_ASSERT_FATAL(parse(t, &a));
	free(t);
	if (a.exited)
		return;
	uint64_t sid = a.session;
	char args[256];
	snprintf(args, sizeof args, "{\"session_id\": %" PRIu64 ", \"chars\": \"hi\\r\"}", sid);
	t = call("write_stdin", args, &e);
	CU_ASSERT_FATAL(parse(t, &a));
	char *all = strstr(a.output, "got:hi") ? strdup("got:hi") : poll_for(sid, "got:hi", &a);
	free(t);
	CU_ASSERT_PTR_NOT_NULL(strstr(all, "got:hi"));
	free(all);
}

int main(int argc, char **argv)
{
	if (!getenv("ASP_AGENT")) {
		fprintf(stderr, "ASP_AGENT is not set\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("unified exec", suite_init, suite_clean);
	CU_add_test(s, "exec_command: format, exit code, workdir, environment", test_exit_code);
	CU_add_test(s, "a session continued by write_stdin until its exit, then unknown",
	            test_session);
	CU_add_test(s, "write_stdin into cat; ^C; bash_output and kill_bash on a session",
	            test_cat_shared_table);
	CU_add_test(s, "Codex's head and tail truncation", test_truncation);
	CU_add_test(s, "yield time: floors, early return at exit", test_yield_bounds);
	CU_add_test(s, "unknown or missing session_id", test_unknown_session);
	CU_add_test(s, "tty: a terminal of 24x80, typed input", test_tty);
	/* every test, or the suites and tests named as arguments */
	unsigned fails = (unsigned)cu_run(argc, argv);
	return fails ? 1 : 0;
}
