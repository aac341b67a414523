/*
 * Fault injection against real processes (docs/faults.md): a stopped asp-agent
 * (SIGSTOP), a wedged responder, one answering the wrong id, one answering garbage,
 * through the C client and the `asp` command line. Nothing may hang: every call ends
 * within its deadline, and the next call reconnects.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "lost_conn.h"
#include "testproc.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *agent, *cli, *fake;
static char tmp[64];

/* A stdio view running `argv`, with a short call_timeout_ms. */
static asp_config_view view_of(const char *const *argv, size_t argc, unsigned call_ms)
{
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = ASP_TRANSPORT_STDIO;
	v.stdio.argv = argv;
	v.stdio.argc = argc;
	v.call_timeout_ms = call_ms;
	return v;
}

static asp_status stat_root(asp_client *c, asp_error *err)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "/";
	asp_stat_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_stat(c, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

/*
 * A stopped agent: the first call fails with timeout after call_timeout_ms, naming the
 * op and the limit; the second closes the connection (transport_error); the next call
 * starts a new agent and works.
 */
static void test_stopped_agent(void)
{
	char pidfile[128], script[512];
	snprintf(pidfile, sizeof pidfile, "%s/agent.pid", tmp);
	snprintf(script, sizeof script, "echo $$ > %s; exec %s --stdio", pidfile, agent);
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	asp_config_view v = view_of(argv, 3, 300);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	CU_ASSERT_EQUAL(stat_root(c, &err), ASP_OK);
	pid_t pid = t_pid_from_file(pidfile, 0, 10000);
	CU_ASSERT_FATAL(pid > 0);
	if (!t_stop(pid, 10000)) {
		CU_FAIL("the agent did not stop within 10 s of SIGSTOP");
		kill(pid, SIGCONT);
		asp_client_free(c);
		return;
	}

	int64_t t0 = t_now_ms();
	CU_ASSERT_EQUAL(stat_root(c, &err), ASP_E_TIMEOUT);
	int64_t took = t_now_ms() - t0;
	CU_ASSERT(took >= 290 && took < 5000);
	CU_ASSERT(strstr(err.message, "stat") && strstr(err.message, "300 ms"));
	t0 = t_now_ms();
	CU_ASSERT_EQUAL(stat_root(c, &err), ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(t_now_ms() - t0 < 5000);
	CU_ASSERT(strstr(err.message, "second missed deadline") != NULL);
	kill(pid, SIGCONT); /* the transport sent TERM: let it act */

	asp_status st = stat_root(c, &err); /* a new agent */
	if (st != ASP_OK)
		fprintf(stderr, "\nstat after the reconnect: %s\n", err.message);
	CU_ASSERT_EQUAL(st, ASP_OK);
	pid_t pid2 = t_pid_from_file(pidfile, pid, 10000);
	/* fatal: kill(0, ...) below would stop this test's whole group, a hang till timeout */
	CU_ASSERT_FATAL(pid2 > 0 && pid2 != pid);

	/* a write larger than the pipe to a stopped agent: its send has a deadline too */
	CU_ASSERT(t_stop(pid2, 10000));
	size_t n = 8u << 20;
	uint8_t *data = calloc(1, n);
	asp_write_params wp;
	asp_write_params_init(&wp);
	char path[128];
	snprintf(path, sizeof path, "%s/big", tmp);
	wp.path = path;
	wp.data = (asp_bytes){data, n};
	asp_write_result wr;
	asp_arena *a = asp_arena_new();
	t0 = t_now_ms();
	st = asp_write(c, &wp, &wr, a, &err);
	CU_ASSERT(st == ASP_E_TRANSPORT_ERROR || st == ASP_E_TIMEOUT);
	CU_ASSERT(t_now_ms() - t0 < 5000);
	kill(pid2, SIGCONT);
	asp_arena_free(a);
	free(data);
	asp_client_free(c);
	unlink(pidfile);
	unlink(path);
}

/* An exec without a timeout outlives call_timeout_ms while the agent answers probes. */
static void test_long_exec_probed(void)
{
	const char *argv[] = {agent, "--stdio", NULL};
	asp_config_view v = view_of(argv, 2, 200);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "sleep 0.7";
	asp_exec_result r;
	asp_arena *a = asp_arena_new();
	CU_ASSERT_EQUAL(asp_exec(c, &p, &r, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(r.exit_code, 0);
	asp_arena_free(a);
	asp_client_free(c);
}

/* A responder answering id + 1000, or garbage: protocol_error at once, then a new one. */
static void fake_case(const char *mode, const char *want)
{
	char counter[128];
	snprintf(counter, sizeof counter, "%s/counter-%s", tmp, mode);
	unlink(counter);
	const char *argv[] = {"/usr/bin/python3", fake, counter, mode, NULL};
	asp_config_view v = view_of(argv, 4, 60000);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	int64_t t0 = t_now_ms();
	CU_ASSERT_EQUAL(stat_root(c, &err), ASP_E_PROTOCOL_ERROR);
	CU_ASSERT(t_now_ms() - t0 < 5000);
	if (!strstr(err.message, want))
		fprintf(stderr, "\n%s: wanted '%s' in: %s\n", mode, want, err.message);
	CU_ASSERT(strstr(err.message, want) != NULL);
	/* the next call reconnects; the fake's later processes answer stat "unsupported" */
	CU_ASSERT_EQUAL(stat_root(c, &err), ASP_E_UNSUPPORTED);
	asp_client_free(c);
	unlink(counter);
}

static void test_wrong_id(void)
{
	fake_case("wrongid", "no call is waiting for");
}

static void test_garbage(void)
{
	fake_case("garbage", "undecodable");
}

/*
 * A responder of protocol 1 (no "pty" in its hello) would ignore spawn's tty and run the
 * command on pipes: the client refuses the spawn, naming the missing feature, and a spawn
 * without tty still goes through.
 */
static void test_tty_needs_pty(void)
{
	char counter[128];
	snprintf(counter, sizeof counter, "%s/counter-pty", tmp);
	unlink(counter);
	const char *argv[] = {"/usr/bin/python3", fake, counter, "ok", NULL};
	asp_config_view v = view_of(argv, 4, 60000);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_tty tty = {24, 80, NULL};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "sh";
	p.tty = &tty;
	asp_spawn_result r;
	for (int i = 0; i < 2; i++) { /* the answer is kept for the connection */
		CU_ASSERT_EQUAL(asp_spawn(c, &p, &r, a, &err), ASP_E_UNSUPPORTED);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "no feature \"pty\""));
	}
	p.tty = NULL;
	CU_ASSERT_EQUAL(asp_spawn(c, &p, &r, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(r.proc, 7);
	asp_arena_free(a);
	asp_client_free(c);
	unlink(counter);
}

/* Runs `asp --config CFG ARGS...`; returns its exit status, stderr in `err`. */
static int run_cli(const char *cfg, const char *const *args, char *err, size_t cap, int64_t *ms)
{
	const char *argv[8] = {cli, "--config", cfg};
	int n = 3;
	for (; *args && n < 7; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	int fds[2];
	CU_ASSERT_FATAL(pipe(fds) == 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	pid_t pid;
	int64_t t0 = t_now_ms();
	CU_ASSERT_FATAL(posix_spawn(&pid, cli, &fa, NULL, (char *const *)argv, environ) == 0);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	size_t len;
	bool eof;
	char *out = t_read_until_eof(fds[0], 20000, &len, &eof);
	close(fds[0]);
	snprintf(err, cap, "%s", out ? out : "");
	free(out);
	int st = 0;
	waitpid(pid, &st, 0);
	*ms = t_now_ms() - t0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* `asp stat /` against a wedged responder and a confused one: a one-line error, no hang. */
static void test_cli(void)
{
	static const struct {
		const char *mode, *want;
	} cases[] = {{"silent", "timeout"}, {"wrongid", "protocol_error"}};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char cfg[128], counter[128], text[1024];
		snprintf(cfg, sizeof cfg, "%s/asp-%s.json", tmp, cases[i].mode);
		snprintf(counter, sizeof counter, "%s/cli-counter-%s", tmp, cases[i].mode);
		unlink(counter);
		FILE *f = fopen(cfg, "w");
		CU_ASSERT_PTR_NOT_NULL_FATAL(f);
		fprintf(
		    f,
		    "{\"version\": 1, \"transport\": \"stdio\", \"call_timeout_ms\": 300,\n"
		    " \"stdio\": {\"command\": [\"/usr/bin/python3\", \"%s\", \"%s\", \"%s\"]}}\n",
		    fake, counter, cases[i].mode);
		fclose(f);
		const char *args[] = {"stat", "/", NULL};
		int64_t ms;
		int code = run_cli(cfg, args, text, sizeof text, &ms);
		if (code != 1 || !strstr(text, cases[i].want))
			fprintf(stderr, "\n%s: exit %d: %s\n", cases[i].mode, code, text);
		CU_ASSERT_EQUAL(code, 1);
		CU_ASSERT(strstr(text, cases[i].want) != NULL);
		CU_ASSERT(ms < 10000);
		unlink(cfg);
		unlink(counter);
	}
}

/*
 * Counts the frames in `log` (what a tee in front of the agent saw) and how many of them
 * name `method`: a request is [0, id, method, params], so the name is a msgpack fixstr.
 */
static int count_frames(const char *log, const char *method, int *named)
{
	size_t len = 0;
	uint8_t *b = t_read_file(log, &len);
	int n = 0;
	*named = 0;
	size_t ml = strlen(method);
	for (size_t off = 0; b && off + 4 <= len; n++) {
		size_t fl = (size_t)b[off] << 24 | (size_t)b[off + 1] << 16 |
		            (size_t)b[off + 2] << 8 | b[off + 3];
		off += 4;
		if (fl > len - off)
			break;
		for (size_t i = off; i + 1 + ml <= off + fl; i++)
			if (b[i] == (0xa0 | ml) && memcmp(b + i + 1, method, ml) == 0) {
				(*named)++;
				break;
			}
		off += fl;
	}
	free(b);
	return n;
}

/*
 * `asp exec -- true` on a fresh connection sends the agent two requests: the transport's
 * hello (every later hello comes from the connection's cache) and a spawn that closes
 * stdin itself (stdin_eof), no proc_write. A tee in front of the agent records them.
 */
static void test_exec_requests(void)
{
	char cfg[128], log[128], text[1024];
	snprintf(cfg, sizeof cfg, "%s/asp-tee.json", tmp);
	snprintf(log, sizeof log, "%s/requests.bin", tmp);
	unlink(log);
	FILE *f = fopen(cfg, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fprintf(f,
	        "{\"version\": 1, \"transport\": \"stdio\",\n"
	        " \"stdio\": {\"command\": [\"/bin/sh\", \"-c\", \"tee %s | exec %s --stdio\"]}}\n",
	        log, agent);
	fclose(f);
	const char *args[] = {"exec", "--", "true", NULL};
	int64_t ms;
	int code = run_cli(cfg, args, text, sizeof text, &ms);
	if (code != 0)
		fprintf(stderr, "\nexec: exit %d: %s\n", code, text);
	CU_ASSERT_EQUAL(code, 0);
	int hellos, spawns, writes, waste;
	int n = count_frames(log, "hello", &hellos);
	count_frames(log, "spawn", &spawns);
	count_frames(log, "proc_write", &writes);
	count_frames(log, "exec", &waste);
	if (n != 2)
		fprintf(stderr, "\n%d requests: %d hello, %d spawn, %d proc_write\n", n, hellos,
		        spawns, writes);
	CU_ASSERT_EQUAL(n, 2);
	CU_ASSERT_EQUAL(hellos, 1);
	CU_ASSERT_EQUAL(spawns, 1);
	CU_ASSERT_EQUAL(writes, 0);
	/* and the spawn closed stdin: cat ends at once */
	const char *cat[] = {"exec", "--", "cat", NULL};
	code = run_cli(cfg, cat, text, sizeof text, &ms);
	if (code != 0)
		fprintf(stderr, "\nexec cat: exit %d: %s\n", code, text);
	CU_ASSERT_EQUAL(code, 0);
	unlink(cfg);
	unlink(log);
}

/* SIGKILLs this process's live asp-agent children (the stdio responder): how many. */
static int kill_agents(void *ctx)
{
	(void)ctx;
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char path[300], line[512];
		snprintf(path, sizeof path, "/proc/%.64s/stat", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		size_t len = fread(line, 1, sizeof line - 1, f);
		fclose(f);
		line[len] = '\0';
		char *rp = strrchr(line, ')');
		int ppid = 0;
		char state = 0;
		if (strstr(line, "(asp-agent)") && rp &&
		    sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == (int)getpid() &&
		    state != 'Z' && kill(atoi(de->d_name), SIGKILL) == 0)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* The agent SIGKILLed with each kind of stream open (tests/common/lost_conn.c). */
static void test_lost_streams(void)
{
	const char *argv[] = {agent, "--stdio", NULL};
	asp_config_view v = view_of(argv, 2, 0);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	lost_target t = {.c = c, .kill = kill_agents, .scratch = tmp, .name = "stdio"};
	lost_conn_run_all(&t);
	asp_client_free(c);
}

int main(int argc, char **argv)
{
	agent = t_env("ASP_AGENT");
	cli = t_env("ASP_CLI");
	fake = t_env("ASP_FAKE_RESPONDER");
	if (!agent || !cli || !fake)
		return 77;
	if (access("/usr/bin/python3", X_OK) != 0)
		return 77;
	snprintf(tmp, sizeof tmp, "/tmp/asp-faults-XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	signal(SIGPIPE, SIG_IGN);
	CU_initialize_registry();
	CU_pSuite s = CU_add_suite("faults", NULL, NULL);
	CU_add_test(s, "a stopped agent: timeout, then transport_error, then reconnect",
	            test_stopped_agent);
	CU_add_test(s, "an exec without a timeout outlives call_timeout_ms (probes answered)",
	            test_long_exec_probed);
	CU_add_test(s, "a responder answering the wrong id: protocol_error", test_wrong_id);
	CU_add_test(s, "a responder answering garbage: protocol_error", test_garbage);
	CU_add_test(s, "spawn with tty to a responder without pty: unsupported",
	            test_tty_needs_pty);
	CU_add_test(s, "asp stat against wedged and confused responders", test_cli);
	CU_add_test(s, "asp exec -- true: two requests on a fresh connection", test_exec_requests);
	CU_add_test(s, "a killed agent with each kind of stream open: on_lost, then reconnect",
	            test_lost_streams);
	/* every test, or the suites and tests named as arguments */
	unsigned failures = (unsigned)cu_run(argc, argv);
	rmdir(tmp);
	return failures ? 1 : 0;
}
