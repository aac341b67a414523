/*
 * Stdio connections past half of RLIMIT_NOFILE (transport-stdio/stdio.c): the process
 * lowers its own limit (soft and hard, for good: the test is a process of its own), then
 * opens more connections than three descriptors each would allow. Those past half the
 * limit hold one descriptor each and work as any other: calls from many threads, a
 * transfer both ways, and the child's stderr in the error that explains its death.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "testproc.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Connections opened under a limit of open descriptors + ROOM: 3 each would not fit. */
enum { N = 40, ROOM = 96 };

static const char *agent;

static asp_config_view make_view(const char *const *argv, size_t argc)
{
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.path = "/test/.asp.json";
	v.transport = ASP_TRANSPORT_STDIO;
	v.stdio.argv = argv;
	v.stdio.argc = argc;
	return v;
}

static int open_fds(void)
{
	return t_count_entries("/proc/self/fd") - 1; /* (the directory's own) */
}

/* Open descriptors that are pipes or sockets: what a connection holds. */
static int pipes_and_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[300], target[64];
		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, target, sizeof target - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += strncmp(target, "pipe:", 5) == 0 || strncmp(target, "socket:", 7) == 0;
	}
	closedir(d);
	return n;
}

struct worker {
	asp_client *c;
	int ok;
};

static void *execs(void *v)
{
	struct worker *w = v;
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < 5; i++) {
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = "echo x";
		asp_exec_result r;
		asp_error err;
		if (asp_exec(w->c, &p, &r, a, &err) == ASP_OK && r.exit_code == 0 &&
		    r.stdout_data.len == 2)
			w->ok++;
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return NULL;
}

/* 4 MiB written and read back through `c`, intact. */
static void transfer(asp_client *c)
{
	enum { SIZE = 4 << 20 };
	uint8_t *data = malloc(SIZE);
	CU_ASSERT_PTR_NOT_NULL_FATAL(data);
	for (size_t i = 0; i < SIZE; i++)
		data[i] = (uint8_t)(i * 131 + (i >> 13));
	char path[64];
	snprintf(path, sizeof path, "/tmp/asp-compact-%d", (int)getpid());
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = path;
	wp.data = (asp_bytes){data, SIZE};
	asp_write_result wr;
	CU_ASSERT_EQUAL(asp_write(c, &wp, &wr, a, &err), ASP_OK);
	asp_read_params rp;
	asp_read_params_init(&rp);
	rp.path = path;
	asp_read_result rr;
	CU_ASSERT_EQUAL(asp_read(c, &rp, &rr, a, &err), ASP_OK);
	CU_ASSERT(rr.data.len == SIZE && memcmp(rr.data.data, data, SIZE) == 0);
	unlink(path);
	asp_arena_free(a);
	free(data);
}

static void test_past_half(void)
{
	const char *argv[] = {agent, "--stdio", NULL};
	asp_config_view v = make_view(argv, 2);
	asp_client *first;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(&v, &first, &err), ASP_OK);
	struct worker w0 = {first, 0};
	execs(&w0); /* the client's shared threads and their descriptors start here */
	CU_ASSERT_EQUAL_FATAL(w0.ok, 5);
	int fd0 = open_fds(), ps0 = pipes_and_sockets();
	struct rlimit r = {(rlim_t)fd0 + ROOM, (rlim_t)fd0 + ROOM};
	CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_NOFILE, &r), 0);
	asp_client *c[N];
	int opened = 0;
	for (; opened < N; opened++) {
		asp_status st = asp_client_open_view(&v, &c[opened], &err);
		if (st != ASP_OK) {
			fprintf(stderr, "\n    open %d: %s\n", opened, err.message);
			break;
		}
		/* the first call connects */
		struct worker w = {c[opened], 0};
		execs(&w);
		if (w.ok != 5)
			break;
	}
	CU_ASSERT_EQUAL(opened, N);
	int held = open_fds() - fd0;
	fprintf(stderr, "\n    %d connections hold %d descriptors (limit %d more)\n", opened, held,
	        ROOM);
	CU_ASSERT(held < 3 * N);

	/* every connection at once, from a thread each */
	pthread_t th[N];
	struct worker w[N];
	for (int i = 0; i < opened; i++) {
		w[i] = (struct worker){c[i], 0};
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, execs, &w[i]), 0);
	}
	for (int i = 0; i < opened; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(w[i].ok, 5);
	}
	if (opened == N)
		transfer(c[N - 1]); /* the last one is compact */

	/* a compact child's stderr explains its death, its own lines and its shell's child's */
	const char *dies[] = {"sh", "-c",
	                      "echo first line >&2; sh -c 'echo from a child >&2; sleep 1'; "
	                      "echo 'boom: no sandbox here' >&2; exit 3",
	                      NULL};
	asp_config_view dv = make_view(dies, 3);
	asp_client *dc;
	CU_ASSERT_EQUAL(asp_client_open_view(&dv, &dc, &err), ASP_E_TRANSPORT_ERROR);
	CU_ASSERT(strstr(err.message, "sh exited with status 3") != NULL);
	CU_ASSERT(strstr(err.message, "first line | from a child | boom: no sandbox here") != NULL);
	if (!strstr(err.message, "boom"))
		fprintf(stderr, "\n    %s\n", err.message);

	for (int i = 0; i < opened; i++)
		asp_client_free(c[i]);
	/* the stderr hub's socket pair stays (and the pool may have started a worker, whose
	 * wake eventfd stays with it) */
	CU_ASSERT_EQUAL(pipes_and_sockets() - ps0, 2);
	asp_client_free(first);
	int st;
	CU_ASSERT(waitpid(-1, &st, WNOHANG) < 0 && errno == ECHILD);
}

int main(int argc, char **argv)
{
	agent = t_env("ASP_AGENT");
	if (!agent) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("stdio past half the descriptor limit", NULL, NULL);
	CU_add_test(s, "one descriptor per connection past half", test_past_half);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
