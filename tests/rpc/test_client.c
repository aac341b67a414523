/*
 * The client handle over the stdio transport (a real asp-agent child) and the local
 * transport: config applied to calls, respawn, prompt failure of pending calls, the
 * child's stderr in errors, threads, and no child left unreaped.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "testproc.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *agent; /* the binary the stdio suites spawn */
static const char *dynamic_agent, *static_agent;
static char scratch[PATH_MAX];

static const asp_config_env test_env[] = {
    {"ASP_TEST_A", "cfg-a"},
    {"ASP_TEST_B", "cfg-b"},
};

/* A view like a loaded .asp.json would give: stdio, cwd = scratch, env, timeout. */
static asp_config_view make_view(asp_transport_kind kind, const char *const *argv, size_t argc)
{
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.path = "/test/.asp.json";
	v.transport = kind;
	v.cwd = scratch;
	v.env = test_env;
	v.env_count = 2;
	v.stdio.argv = argv;
	v.stdio.argc = argc;
	return v;
}

static asp_client *open_agent(uint64_t timeout_ms)
{
	const char *argv[] = {agent, "--stdio", NULL};
	asp_config_view v = make_view(ASP_TRANSPORT_STDIO, argv, 2);
	v.timeout_ms = timeout_ms;
	asp_client *c;
	asp_error err;
	asp_status st = asp_client_open_view(&v, &c, &err);
	if (st)
		fprintf(stderr, "\nopen: %s\n", err.message);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	return c;
}

/* No child of ours is left: every agent was reaped. */
static void assert_no_children(void)
{
	int st;
	pid_t r = waitpid(-1, &st, WNOHANG);
	CU_ASSERT(r < 0 && errno == ECHILD);
}

/* exec `command`; returns its stdout (malloc'd) or NULL. */
static char *sh(asp_client *c, const char *command, const char *cwd, const asp_strmap *env,
                asp_status *st, asp_error *err)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = command;
	p.cwd = cwd;
	if (env) {
		p.has_env = true;
		p.env = *env;
	}
	asp_exec_result r;
	asp_arena *a = asp_arena_new();
	*st = asp_exec(c, &p, &r, a, err);
	char *out = NULL;
	if (*st == ASP_OK) {
		out = malloc(r.stdout_data.len + 1);
		memcpy(out, r.stdout_data.data, r.stdout_data.len);
		out[r.stdout_data.len] = '\0';
		char *nl = strrchr(out, '\n');
		if (nl && nl[1] == '\0')
			*nl = '\0';
	}
	asp_arena_free(a);
	return out;
}

static pid_t agent_pid(asp_client *c)
{
	asp_status st;
	asp_error err;
	char *s = sh(c, "echo $PPID", NULL, NULL, &st, &err);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	pid_t pid = (pid_t)atoi(s);
	free(s);
	return pid;
}

/* ---- config applied to calls ------------------------------------------------------ */

static void check_config_applied(asp_client *c)
{
	asp_error err;
	asp_status st;
	asp_arena *a = asp_arena_new();
	/* a relative path lands under the config's cwd */
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = "sub/f.txt";
	wp.mkdirs = true;
	wp.data.data = (const uint8_t *)"hello";
	wp.data.len = 5;
	asp_write_result wr;
	CU_ASSERT_EQUAL_FATAL(asp_write(c, &wp, &wr, a, &err), ASP_OK);
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/sub/f.txt", scratch);
	struct stat sb;
	CU_ASSERT(stat(path, &sb) == 0 && sb.st_size == 5);
	asp_read_params rp;
	asp_read_params_init(&rp);
	rp.path = "sub/f.txt";
	asp_read_result rr;
	CU_ASSERT_EQUAL(asp_read(c, &rp, &rr, a, &err), ASP_OK);
	CU_ASSERT(rr.data.len == 5 && memcmp(rr.data.data, "hello", 5) == 0);
	asp_list_params lp;
	asp_list_params_init(&lp);
	lp.path = "sub";
	asp_list_result lr;
	CU_ASSERT_EQUAL(asp_list(c, &lp, &lr, a, &err), ASP_OK);
	CU_ASSERT(lr.entries.count == 1 && strcmp(lr.entries.items[0].name, "f.txt") == 0);
	/* an absolute path is left alone */
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = "/";
	asp_stat_result sr;
	CU_ASSERT_EQUAL(asp_stat(c, &sp, &sr, a, &err), ASP_OK);

	/* no cwd: the config's; a relative one: joined with it */
	char *out = sh(c, "pwd", NULL, NULL, &st, &err);
	CU_ASSERT(out && strcmp(out, scratch) == 0);
	free(out);
	out = sh(c, "pwd", "sub", NULL, &st, &err);
	CU_ASSERT(out && strcmp(out + strlen(scratch), "/sub") == 0);
	free(out);
	/* env: the config's under the call's */
	asp_strmap_entry e[] = {{"ASP_TEST_B", "call-b"}, {"ASP_TEST_C", "call-c"}};
	asp_strmap env = {e, 2};
	out = sh(c, "echo $ASP_TEST_A,$ASP_TEST_B,$ASP_TEST_C", NULL, &env, &st, &err);
	CU_ASSERT_STRING_EQUAL(out ? out : "", "cfg-a,call-b,call-c");
	free(out);
	out = sh(c, "echo $ASP_TEST_A,$ASP_TEST_B", NULL, NULL, &st, &err);
	CU_ASSERT_STRING_EQUAL(out ? out : "", "cfg-a,cfg-b");
	free(out);
	asp_arena_free(a);
}

static void test_config_applied(void)
{
	asp_client *c = open_agent(0);
	check_config_applied(c);
	asp_client_free(c);
	assert_no_children();
}

static void test_default_timeout(void)
{
	asp_client *c = open_agent(300);
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "sleep 5";
	asp_exec_result r;
	asp_arena *a = asp_arena_new();
	asp_error err;
	int64_t t0 = t_now_ms();
	CU_ASSERT_EQUAL(asp_exec(c, &p, &r, a, &err), ASP_OK);
	CU_ASSERT(r.timed_out);
	CU_ASSERT(t_now_ms() - t0 < 3000);
	/* an explicit timeout wins over the default */
	p.command = "sleep 0.5; echo ok";
	p.timeout_ms = 5000;
	CU_ASSERT_EQUAL(asp_exec(c, &p, &r, a, &err), ASP_OK);
	CU_ASSERT(!r.timed_out && r.stdout_data.len == 3);
	asp_arena_free(a);
	asp_client_free(c);
	assert_no_children();
}

static void test_local_transport(void)
{
	asp_config_view v = make_view(ASP_TRANSPORT_LOCAL, NULL, 0);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(asp_client_config(c)->cwd, scratch);
	check_config_applied(c);
	/* the streaming ops work in process too (a bound connection) */
	asp_proc_list_params pp;
	asp_proc_list_params_init(&pp);
	asp_proc_list_result pr;
	asp_arena *a = asp_arena_new();
	CU_ASSERT_EQUAL(asp_proc_list(c, &pp, &pr, a, &err), ASP_OK);
	CU_ASSERT_EQUAL(pr.procs.count, 0);
	asp_arena_free(a);
	asp_client_free(c);
}

/* ---- the child's life ------------------------------------------------------------- */

static void test_respawn_after_kill(void)
{
	asp_client *c = open_agent(0);
	pid_t first = agent_pid(c);
	CU_ASSERT_FATAL(first > 1);
	kill(first, SIGKILL);
	/* Reaped once the client noticed the death: wait for that, not a fixed time. */
	for (int64_t until = t_now_ms() + 20000; t_now_ms() < until; usleep(10 * 1000))
		if (kill(first, 0) != 0 && errno == ESRCH)
			break;
	/* the death was noticed while idle: the next call reconnects instead of failing */
	pid_t second = agent_pid(c);
	CU_ASSERT(second > 1 && second != first);
	/* killed again, and called at once: at most one call fails, then it respawns */
	kill(second, SIGKILL);
	asp_status st;
	asp_error err;
	char *out = sh(c, "echo hi", NULL, NULL, &st, &err);
	CU_ASSERT(st == ASP_OK || st == ASP_E_TRANSPORT_ERROR);
	free(out);
	out = sh(c, "echo hi", NULL, NULL, &st, &err);
	CU_ASSERT_EQUAL(st, ASP_OK);
	free(out);
	asp_client_free(c);
	assert_no_children();
}

typedef struct call_arg {
	asp_client *c;
	const char *command;
	asp_status st;
	asp_error err;
	int64_t done_ms;
	int ok, calls;
} call_arg;

static void *exec_thread(void *v)
{
	call_arg *t = v;
	for (int i = 0; i < (t->calls ? t->calls : 1); i++) {
		char *out = sh(t->c, t->command, NULL, NULL, &t->st, &t->err);
		t->ok += t->st == ASP_OK;
		free(out);
	}
	t->done_ms = t_now_ms();
	return NULL;
}

/* Waits (20 s at most: a loaded machine) until `pid` has `n` children. */
static bool wait_children(pid_t pid, int n)
{
	for (int64_t until = t_now_ms() + 20000; t_now_ms() < until; usleep(10 * 1000))
		if (t_children_of(pid) >= n)
			return true;
	return false;
}

static void test_pending_fail_promptly(void)
{
	asp_client *c = open_agent(0);
	pid_t pid = agent_pid(c);
	pthread_t th[3];
	call_arg ta[3];
	for (int i = 0; i < 3; i++) {
		ta[i] = (call_arg){.c = c, .command = "sleep 10"};
		pthread_create(&th[i], NULL, exec_thread, &ta[i]);
	}
	CU_ASSERT(wait_children(pid, 3)); /* the three calls are in flight */
	int64_t t0 = t_now_ms();
	kill(pid, SIGKILL);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(ta[i].st, ASP_E_TRANSPORT_ERROR);
		CU_ASSERT(ta[i].done_ms - t0 < 5000); /* not the 10 s of the sleep */
		if (!strstr(ta[i].err.message, "killed by signal 9"))
			fprintf(stderr, "\nmessage: %s\n", ta[i].err.message);
		CU_ASSERT(strstr(ta[i].err.message, "killed by signal 9") != NULL);
	}
	asp_status st;
	asp_error err;
	char *out = sh(c, "echo again", NULL, NULL, &st, &err);
	CU_ASSERT_STRING_EQUAL(out ? out : "", "again");
	free(out);
	asp_client_free(c);
	assert_no_children();
}

static void test_stderr_in_error(void)
{
	const char *argv[] = {
	    "sh", "-c", "echo first line >&2; echo 'boom: no sandbox here' >&2; exit 3", NULL};
	asp_config_view v = make_view(ASP_TRANSPORT_STDIO, argv, 3);
	asp_client *c;
	asp_error err;
	int64_t t0 = t_now_ms();
	CU_ASSERT_EQUAL(asp_client_open_view(&v, &c, &err), ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(t_now_ms() - t0 < 2000);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT(strstr(err.message, "sh exited with status 3") != NULL);
	CU_ASSERT(strstr(err.message, "first line | boom: no sandbox here") != NULL);
	CU_ASSERT(strstr(err.message, "check stdio.command in /test/.asp.json") != NULL);
	assert_no_children();
}

static void test_nonexistent_command(void)
{
	const char *argv[] = {"/nonexistent/asp-agent", "--stdio", NULL};
	asp_config_view v = make_view(ASP_TRANSPORT_STDIO, argv, 2);
	asp_client *c;
	asp_error err;
	CU_ASSERT_EQUAL(asp_client_open_view(&v, &c, &err), ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(strstr(err.message, "cannot run /nonexistent/asp-agent") != NULL);
	CU_ASSERT(strstr(err.message, "No such file") != NULL);
	const char *argv2[] = {"no-such-program-asp", NULL};
	v = make_view(ASP_TRANSPORT_STDIO, argv2, 1);
	CU_ASSERT_EQUAL(asp_client_open_view(&v, &c, &err), ASP_E_TRANSPORT_ERROR);
	/* no command at all */
	v = make_view(ASP_TRANSPORT_STDIO, NULL, 0);
	CU_ASSERT_EQUAL(asp_client_open_view(&v, &c, &err), ASP_E_INVALID_ARGUMENT);
	assert_no_children();
}

/* A command that is not an ASP responder fails at open, and is not left running. */
static void test_not_an_agent(void)
{
	const char *argv[] = {"cat", NULL};
	asp_config_view v = make_view(ASP_TRANSPORT_STDIO, argv, 1);
	asp_client *c;
	asp_error err;
	int64_t t0 = t_now_ms();
	CU_ASSERT_NOT_EQUAL(asp_client_open_view(&v, &c, &err), ASP_OK);
	CU_ASSERT(strstr(err.message, "asp-agent --stdio") != NULL);
	CU_ASSERT(t_now_ms() - t0 < 2000);
	assert_no_children();
}

static void test_threads(void)
{
	asp_client *c = open_agent(0);
	enum { N = 8 };
	pthread_t th[N];
	call_arg ta[N];
	for (int i = 0; i < N; i++) {
		ta[i] = (call_arg){.c = c, .command = i % 2 ? "true" : "echo x", .calls = 100};
		pthread_create(&th[i], NULL, exec_thread, &ta[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(ta[i].ok, 100);
	}
	asp_client_free(c);
	assert_no_children();
}

/*
 * Many connections at once (bench/scale's shape, small): each holds at most 3 of the
 * client's descriptors and no thread of its own (the shared pool has at most 8 workers),
 * and every one works from many threads at once.
 */
static void test_many_connections(void)
{
	enum { N = 48 };
	asp_client *first = open_agent(0); /* the pool's threads start with the first one */
	asp_status st;
	asp_error err;
	free(sh(first, "true", NULL, NULL, &st, &err));
	int fd0 = t_count_entries("/proc/self/fd"), th0 = t_count_entries("/proc/self/task");
	asp_client *c[N];
	for (int i = 0; i < N; i++)
		c[i] = open_agent(0);
	int fd1 = t_count_entries("/proc/self/fd"), th1 = t_count_entries("/proc/self/task");
	CU_ASSERT(fd1 - fd0 <= 3 * N);
	CU_ASSERT(th1 - th0 <= 8);
	pthread_t th[N];
	call_arg ta[N];
	for (int i = 0; i < N; i++) {
		ta[i] = (call_arg){.c = c[i], .command = "true", .calls = 3};
		pthread_create(&th[i], NULL, exec_thread, &ta[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(ta[i].ok, 3);
	}
	for (int i = 0; i < N; i++)
		asp_client_free(c[i]);
	CU_ASSERT_EQUAL(t_count_entries("/proc/self/fd"), fd0);
	asp_client_free(first);
	assert_no_children();
}

/* Freeing the client fails a call in flight promptly and reaps the agent. */
static void test_free_with_call_in_flight(void)
{
	asp_client *c = open_agent(0);
	pid_t pid = agent_pid(c);
	pthread_t th;
	call_arg ta = {.c = c, .command = "sleep 10"};
	pthread_create(&th, NULL, exec_thread, &ta);
	CU_ASSERT(wait_children(pid, 1)); /* the call is in flight */
	int64_t t0 = t_now_ms();
	asp_client_free(c);
	int64_t freed = t_now_ms();
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(ta.st, ASP_E_TRANSPORT_ERROR);
	/* Bounds far below the sleep's 10 s, which a loaded machine meets. */
	CU_ASSERT(ta.done_ms - t0 < 3000);
	CU_ASSERT(freed - t0 < 5000);
	assert_no_children();
}

/* ---- fixtures and registration ---------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static int use_dynamic(void)
{
	agent = dynamic_agent;
	return 0;
}

static int use_static(void)
{
	agent = static_agent;
	return 0;
}

static void scratch_setup(void)
{
	char tmpl[] = "/tmp/asp-client-XXXXXX";
	if (!mkdtemp(tmpl) || !realpath(tmpl, scratch))
		abort();
}

static void scratch_teardown(void)
{
	nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- spawned processes and the client's end --------------------------------------- */

typedef struct lines {
	pthread_mutex_t mu;
	char buf[PATH_MAX + 64];
	size_t len;
	int exits, losts;
} lines;

static void ln_out(void *u, uint64_t proc, asp_stream s, uint64_t off, const uint8_t *d, size_t n)
{
	(void)proc;
	(void)s;
	(void)off;
	lines *l = u;
	pthread_mutex_lock(&l->mu);
	if (l->len + n < sizeof l->buf) {
		memcpy(l->buf + l->len, d, n);
		l->len += n;
	}
	pthread_mutex_unlock(&l->mu);
}

static void ln_exit(void *u, const asp_exit_event *ev)
{
	(void)ev;
	lines *l = u;
	pthread_mutex_lock(&l->mu);
	l->exits++;
	pthread_mutex_unlock(&l->mu);
}

static void ln_lost(void *u, uint64_t proc, const asp_error *err)
{
	(void)proc;
	(void)err;
	lines *l = u;
	pthread_mutex_lock(&l->mu);
	l->losts++;
	pthread_mutex_unlock(&l->mu);
}

/*
 * Spawned processes follow the client's config (cwd, env) and live output reaches the
 * callbacks; freeing the client ends them, one ignoring TERM too (the agent KILLs its
 * groups when it is terminated), and a follower still running hears on_lost.
 */
static void test_spawn_and_free(void)
{
	asp_client *c = open_agent(0);
	static const asp_proc_callbacks cb = {ln_out, ln_exit, ln_lost};
	static lines done, running; /* big enough for the cwd */
	memset(&done, 0, sizeof done);
	memset(&running, 0, sizeof running);
	pthread_mutex_init(&done.mu, NULL);
	pthread_mutex_init(&running.mu, NULL);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "pwd; echo \"$ASP_TEST_A\"";
	uint64_t proc;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &cb, &done, &proc, &err), ASP_OK);
	for (int i = 0; i < 500 && !done.exits; i++)
		usleep(10 * 1000);
	char want[PATH_MAX + 16];
	snprintf(want, sizeof want, "%s\ncfg-a\n", scratch);
	pthread_mutex_lock(&done.mu);
	CU_ASSERT(done.exits == 1 && done.len == strlen(want) && !memcmp(done.buf, want, done.len));
	pthread_mutex_unlock(&done.mu);
	/* a failed spawn: an error, never a callback */
	lines none = {.len = 0};
	pthread_mutex_init(&none.mu, NULL);
	asp_spawn_params_init(&p);
	p.has_argv = true;
	static const char *const missing[] = {"/no/such/program"};
	p.argv.items = missing;
	p.argv.count = 1;
	CU_ASSERT_EQUAL(asp_spawn_start(c, &p, &cb, &none, &proc, &err), ASP_E_NOT_FOUND);
	asp_spawn_params_init(&p);
	p.command = "trap '' TERM; echo $$; sleep 60";
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &cb, &running, &proc, &err), ASP_OK);
	pid_t pid = 0;
	for (int i = 0; i < 500 && !pid; i++) {
		usleep(10 * 1000);
		pthread_mutex_lock(&running.mu);
		if (running.len && running.buf[running.len - 1] == '\n')
			pid = (pid_t)atoi(running.buf);
		pthread_mutex_unlock(&running.mu);
	}
	CU_ASSERT_FATAL(pid > 0 && t_pid_alive(pid));
	asp_client_free(c);
	for (int64_t until = t_now_ms() + 20000; t_pid_alive(pid) && t_now_ms() < until;)
		usleep(10 * 1000); /* the agent ends it as its input closes */
	CU_ASSERT(!t_pid_alive(pid));
	CU_ASSERT(running.losts == 1 && running.exits == 0);
	CU_ASSERT(none.len == 0 && none.exits == 0 && none.losts == 0);
	pthread_mutex_destroy(&done.mu);
	pthread_mutex_destroy(&running.mu);
	pthread_mutex_destroy(&none.mu);
	assert_no_children();
}

static void add_stdio_suite(const char *name, int (*init)(void))
{
	CU_pSuite s =
	    CU_add_suite_with_setup_and_teardown(name, init, NULL, scratch_setup, scratch_teardown);
	CU_add_test(s, "cwd, paths and env from the config", test_config_applied);
	CU_add_test(s, "config timeout_ms is the exec default", test_default_timeout);
	CU_add_test(s, "respawn after kill -9", test_respawn_after_kill);
	CU_add_test(s, "pending calls fail promptly", test_pending_fail_promptly);
	CU_add_test(s, "8 threads x 100 execs", test_threads);
	CU_add_test(s, "48 connections: no thread and at most 3 fds each", test_many_connections);
	CU_add_test(s, "free with a call in flight", test_free_with_call_in_flight);
	CU_add_test(s, "spawn follows the config; free ends what runs", test_spawn_and_free);
}

int main(int argc, char **argv)
{
	dynamic_agent = t_env("ASP_AGENT");
	static_agent = t_env("ASP_AGENT_STATIC");
	if (!dynamic_agent) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	add_stdio_suite("client over stdio, asp-agent", use_dynamic);
	if (static_agent)
		add_stdio_suite("client over stdio, asp-agent-static", use_static);
	CU_pSuite s = CU_add_suite_with_setup_and_teardown("client, failures and local", NULL, NULL,
	                                                   scratch_setup, scratch_teardown);
	CU_add_test(s, "the child's stderr is in the error", test_stderr_in_error);
	CU_add_test(s, "a command that does not exist", test_nonexistent_command);
	CU_add_test(s, "a command that is not an agent", test_not_an_agent);
	CU_add_test(s, "local transport", test_local_transport);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
