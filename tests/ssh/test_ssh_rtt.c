/*
 * How many times a native SSH call waits for the server, counted on the wire: the client
 * reaches the OpenSSH fixture through bench/wan's delay line (wan_proxy, 150 ms each
 * way), whose trace logs every read with its direction. A call's round trips are the
 * runs of server-to-client traffic while it runs: the client sends again only once it
 * has what it waited for, so each run is one wait. The delay makes the count the
 * protocol's, not the machine's: two requests sent together stay together unless the
 * client stalls for a whole round trip between them.
 *
 *   test_ssh_rtt PATH/TO/wan_proxy
 *
 * What is counted (after one call of each, which opens the spare channel and sftp's):
 * exec 1 (a spare session channel opened ahead: the exec request alone), stat 1, read 1
 * (STAT, OPEN and READ together on the handle sftp-server will give), write 1 (STAT,
 * OPEN, WRITE and CLOSE together), atomic write 2 (LSTAT with the temporary file's OPEN,
 * WRITE, fsync and CLOSE; its mode and the rename), the tools' read and write as their
 * ops. A fifo read and write (sftp-server's open of it would wait for the other end)
 * still answer: empty, and io_error. A fresh connection's first tool call after the login:
 * 2 (the channel's open, the exec; hello is not asked for an absolute cwd). Its first file
 * op: read, stat, list and write 3 (the sftp channel's open; the subsystem request, whose
 * answer brings the channel's window; INIT with the op's requests behind it, not waiting
 * for VERSION), atomic write 4 (its mode and rename follow, as above).
 */
#include "asp/asp.h"
#include "sshd_fixture.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <fcntl.h>

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define DELAY_MS "150"

static sshd_fixture fx;
static const char *proxy_bin;
static pid_t proxy_pid = -1;
static char trace[400], work[400];
static asp_client *client;
static asp_tools *tools;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs of "<" lines (server to client) in the trace between t0 and t1. */
static int server_runs(double t0, double t1)
{
	FILE *f = fopen(trace, "r");
	if (!f)
		return -1;
	char line[256];
	int runs = 0;
	bool in_run = false;
	while (fgets(line, sizeof line, f)) {
		double t;
		char conn[64], dir[4];
		if (sscanf(line, "%lf %63s %3s", &t, conn, dir) != 3 || t < t0 || t > t1)
			continue;
		bool server = dir[0] == '<';
		if (server && !in_run)
			runs++;
		in_run = server;
	}
	fclose(f);
	return runs;
}

typedef int (*call_fn)(void);

/* The round trips of one call of fn, after one call that warms it up. */
static int round_trips(call_fn fn, const char *what)
{
	CU_ASSERT_EQUAL_FATAL(fn(), 0);
	double t0 = now_ms();
	int rc = fn();
	double t1 = now_ms();
	CU_ASSERT_EQUAL(rc, 0);
	int n = server_runs(t0, t1);
	printf("  %s: %d round trip%s (%.0f ms)\n", what, n, n == 1 ? "" : "s", t1 - t0);
	return n;
}

static int c_exec(void)
{
	static const char *const argv[] = {"true"};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 1;
	asp_exec_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_exec(client, &p, &r, a, &err);
	asp_arena_free(a);
	return st == ASP_OK && r.exit_code == 0 ? 0 : -1;
}

static int c_stat(void)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "small.txt";
	asp_stat_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_stat(client, &p, &r, a, &err);
	asp_arena_free(a);
	return st == ASP_OK ? 0 : -1;
}

static int c_read(void)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = "small.txt";
	asp_read_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_read(client, &p, &r, a, &err);
	bool ok = st == ASP_OK && r.data.len == 4096 && r.eof;
	asp_arena_free(a);
	return ok ? 0 : -1;
}

static int write_1k(bool atomic)
{
	static uint8_t kb[1024];
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = atomic ? "wa.bin" : "w.bin";
	p.data.data = kb;
	p.data.len = sizeof kb;
	p.atomic = atomic;
	asp_write_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_write(client, &p, &r, a, &err);
	asp_arena_free(a);
	return st == ASP_OK && r.size == sizeof kb ? 0 : -1;
}

static int c_write(void)
{
	return write_1k(false);
}

static int c_write_atomic(void)
{
	return write_1k(true);
}

static int tool(const char *name, const char *args)
{
	char *text = NULL;
	bool is_error = true;
	asp_status st = asp_tools_call(tools, name, args, &text, &is_error, NULL);
	if (st != ASP_OK || is_error)
		fprintf(stderr, "%s: %s\n", name, text ? text : "(no text)");
	free(text);
	return st == ASP_OK && !is_error ? 0 : -1;
}

static int t_read(void)
{
	return tool("read", "{\"file_path\": \"small.txt\"}");
}

static int t_write(void)
{
	return tool("write", "{\"file_path\": \"t.txt\", \"content\": \"hello\"}");
}

static int c_read_fifo(void)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = "fifo";
	asp_read_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_read(client, &p, &r, a, &err);
	bool ok = st == ASP_OK && r.data.len == 0 && r.eof;
	if (!ok)
		fprintf(stderr, "fifo read: %s\n", st == ASP_OK ? "data or no eof" : err.message);
	asp_arena_free(a);
	return ok ? 0 : -1;
}

static int list_n(const char *path, size_t n)
{
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = path;
	asp_list_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_list(client, &p, &r, a, &err);
	bool ok = st == ASP_OK && r.entries.count == n;
	if (!ok)
		fprintf(stderr, "list %s: %s\n", path,
		        st == ASP_OK ? "a wrong number of entries" : err.message);
	asp_arena_free(a);
	return ok ? 0 : -1;
}

static int c_list(void)
{
	return list_n("dir", 3);
}

static int t_ls(void)
{
	return tool("ls", "{\"path\": \"dir\"}");
}

static int c_write_fifo(void)
{
	static const uint8_t byte[1] = {'x'};
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = "fifo";
	p.data.data = byte;
	p.data.len = 1;
	asp_write_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_write(client, &p, &r, a, &err);
	asp_arena_free(a);
	if (st != ASP_E_IO_ERROR)
		fprintf(stderr, "fifo write: %d %s\n", st, st == ASP_OK ? "" : err.message);
	return st == ASP_E_IO_ERROR ? 0 : -1;
}

/* Makes `name` in the work directory here (no traffic), then removes it through the client. */
static int remove_made(const char *name, bool dir)
{
	char path[500];
	snprintf(path, sizeof path, "%s/%s", work, name);
	if (dir ? mkdir(path, 0755) != 0 : close(open(path, O_CREAT | O_WRONLY, 0644)) != 0)
		return -1;
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = name;
	asp_remove_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_remove(client, &p, &r, a, &err);
	asp_arena_free(a);
	struct stat sb;
	bool ok = st == ASP_OK && lstat(path, &sb) != 0;
	if (!ok)
		fprintf(stderr, "remove %s: %s\n", name,
		        st == ASP_OK ? "still there" : err.message);
	return ok ? 0 : -1;
}

static int c_remove_file(void)
{
	return remove_made("gone.txt", false);
}

static int c_remove_dir(void)
{
	return remove_made("gone.d", true);
}

static void test_native_round_trips(void)
{
	CU_ASSERT(round_trips(c_exec, "exec") <= 1);
	CU_ASSERT(round_trips(c_stat, "stat") <= 1);
	CU_ASSERT(round_trips(c_read, "read 4 KiB") <= 1);
	CU_ASSERT(round_trips(c_write, "write 1 KiB") <= 1);
	CU_ASSERT(round_trips(c_write_atomic, "atomic write 1 KiB") <= 2);
	CU_ASSERT(round_trips(t_read, "tool read") <= 1);
	CU_ASSERT(round_trips(t_write, "tool write") <= 2);
	CU_ASSERT(round_trips(c_list, "list") <= 1);
	CU_ASSERT(round_trips(t_ls, "tool ls") <= 1);
	CU_ASSERT(round_trips(c_remove_file, "remove a file") <= 1);
	CU_ASSERT(round_trips(c_remove_dir, "remove an empty directory") <= 1);
	/* more names than one READDIR answers: the rest after the pipelined two */
	CU_ASSERT_EQUAL(list_n("big", 250), 0);
	CU_ASSERT_EQUAL(c_list(), 0);
	/* what was written is there, whole */
	char path[500];
	snprintf(path, sizeof path, "%s/t.txt", work);
	FILE *f = fopen(path, "r");
	char got[16] = "";
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	CU_ASSERT_PTR_NOT_NULL(fgets(got, sizeof got, f));
	fclose(f);
	CU_ASSERT_STRING_EQUAL(got, "hello");
	/* a fifo without a writer: read answers (empty, at its end), and sftp goes on */
	CU_ASSERT_EQUAL(c_read_fifo(), 0);
	CU_ASSERT_EQUAL(c_read(), 0);
	CU_ASSERT_EQUAL(c_write_fifo(), 0);
	CU_ASSERT_EQUAL(c_write(), 0);
}

static char cfg_json[4096]; /* the suite's config: a client of its own per test below */

/*
 * A first tool call on a fresh connection, after the login: the tools layer asks no
 * hello for an absolute cwd, so bash is the channel's open and the exec, two round trips
 * (hello's exec of its own would make it three).
 */
static void test_first_call(void)
{
	asp_config *cfg;
	asp_client *c = NULL;
	asp_tools *t = NULL;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(cfg_json, strlen(cfg_json), NULL, &cfg, &err),
	                      ASP_OK);
	asp_status st = asp_client_open(cfg, &c, &err);
	asp_config_free(cfg);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	double t0 = now_ms();
	CU_ASSERT_EQUAL(asp_tools_new(c, &t, &err), ASP_OK);
	char *text = NULL;
	bool is_err = true;
	if (t)
		CU_ASSERT_EQUAL(
		    asp_tools_call(t, "bash", "{\"command\": \"true\"}", &text, &is_err, NULL),
		    ASP_OK);
	double t1 = now_ms();
	CU_ASSERT_FALSE(is_err);
	int n = server_runs(t0, t1);
	printf("  first tool call after the login: %d round trips (%.0f ms)\n", n, t1 - t0);
	CU_ASSERT(n <= 2);
	free(text);
	asp_tools_free(t);
	asp_client_free(c);
}

/*
 * The round trips of fn as a fresh connection's first call, after the login: the sftp
 * channel's open, the subsystem request, then INIT with fn's own requests behind it.
 */
static int first_op(call_fn fn, const char *what)
{
	asp_config *cfg;
	asp_client *fresh = NULL;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(cfg_json, strlen(cfg_json), NULL, &cfg, &err),
	                      ASP_OK);
	asp_status st = asp_client_open(cfg, &fresh, &err);
	asp_config_free(cfg);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	asp_client *kept = client;
	client = fresh; /* the c_* calls use `client` */
	double t0 = now_ms();
	int rc = fn();
	double t1 = now_ms();
	client = kept;
	asp_client_free(fresh);
	CU_ASSERT_EQUAL(rc, 0);
	int n = server_runs(t0, t1);
	printf("  %s first on a fresh connection: %d round trip%s (%.0f ms)\n", what, n,
	       n == 1 ? "" : "s", t1 - t0);
	return n;
}

static void test_first_file_op(void)
{
	CU_ASSERT(first_op(c_read, "read 4 KiB") <= 3);
	CU_ASSERT(first_op(c_stat, "stat") <= 3);
	CU_ASSERT(first_op(c_list, "list") <= 3);
	CU_ASSERT(first_op(c_write, "write 1 KiB") <= 3);
	CU_ASSERT(first_op(c_write_atomic, "atomic write 1 KiB") <= 4);
}

static int suite_init(void)
{
	if (sshd_start(&fx) != 0) {
		fprintf(stderr, "sshd: %s\n", fx.why);
		return -1;
	}
	snprintf(work, sizeof work, "%s/work", fx.dir);
	snprintf(trace, sizeof trace, "%s/trace", fx.dir);
	char line[1400], pf[400], target[64];
	snprintf(line, sizeof line,
	         "mkdir -p %s && cd %s && head -c 4096 /dev/zero | tr '\\0' x > small.txt && "
	         "mkfifo fifo && mkdir dir big && touch dir/a dir/b dir/c && cd big && "
	         "seq 1 250 | xargs touch",
	         work, work);
	if (system(line) != 0)
		return -1;
	snprintf(pf, sizeof pf, "%s/proxy.port", fx.dir);
	snprintf(target, sizeof target, "127.0.0.1:%u", fx.port);
	setenv("WAN_PROXY_TRACE", trace, 1);
	const char *argv[] = {proxy_bin, DELAY_MS, "tcp", target, pf, NULL};
	if (posix_spawn(&proxy_pid, proxy_bin, NULL, NULL, (char *const *)argv, environ) != 0)
		return -1;
	unsetenv("WAN_PROXY_TRACE");
	unsigned port = 0;
	for (int i = 0; i < 1000 && !port; i++) {
		FILE *f = fopen(pf, "r");
		if (f) {
			if (fscanf(f, "%u", &port) != 1)
				port = 0;
			fclose(f);
		}
		if (!port)
			usleep(10000); /* waiting for a file another process writes: bounded */
	}
	if (!port)
		return -1;
	char extra[600];
	char *json = cfg_json;
	size_t json_cap = sizeof cfg_json;
	snprintf(extra, sizeof extra,
	         "\"port\": %u, \"host_key_sha256\": \"%s\", \"connect_timeout_ms\": 20000", port,
	         fx.fingerprint);
	sshd_config_json(&fx, NULL, extra, json, json_cap);
	/* the cwd for relative paths */
	char *end = strrchr(json, '}');
	if (!end)
		return -1;
	snprintf(end, json_cap - (size_t)(end - json), ", \"cwd\": \"%s\"}", work);
	asp_config *cfg;
	asp_error err;
	if (asp_config_parse(json, strlen(json), NULL, &cfg, &err) != ASP_OK ||
	    asp_client_open(cfg, &client, &err) != ASP_OK) {
		fprintf(stderr, "client: %s\n", err.message);
		return -1;
	}
	asp_config_free(cfg);
	if (asp_tools_new(client, &tools, &err) != ASP_OK) {
		fprintf(stderr, "tools: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int suite_clean(void)
{
	asp_tools_free(tools);
	asp_client_free(client);
	if (proxy_pid > 0) {
		kill(proxy_pid, SIGTERM);
		waitpid(proxy_pid, NULL, 0);
	}
	sshd_stop(&fx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_ssh_rtt PATH/TO/wan_proxy\n");
		return 2;
	}
	proxy_bin = argv[1];
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("native SSH round trips", suite_init, suite_clean);
	CU_add_test(s,
	            "exec 1, stat 1, read 1, write 1, atomic write 2, list 1, tools read 1, write "
	            "2 and ls 1; a fifo read and write, a list of 250",
	            test_native_round_trips);
	CU_add_test(s, "a first tool call after the login: the channel's open and the exec",
	            test_first_call);
	CU_add_test(s, "a first file op after the login: read, stat, list, write 3, atomic write 4",
	            test_first_file_op);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned fails = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	return fails ? 1 : 0;
}
