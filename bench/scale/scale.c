/*
 * Many stdio sandboxes in one harness process: for each N,
 * opens N clients, each with its own `asp-agent-static --stdio` child, from T threads;
 * execs `true` once in each from the same T threads; then closes them all. Prints the
 * open, call and close rates, and what the client holds per idle sandbox: RSS delta / N,
 * and file descriptors and threads counted in /proc/self/fd and /proc/self/task.
 *
 *   bench_scale ASP_AGENT [N ...] [-t THREADS] [-c]
 *
 * Defaults: N = 100 1000 5000, 64 threads. With -c each sandbox is opened from a config
 * of its own (asp_config_parse of its .asp.json text), kept until it closes, as a harness
 * with one config per sandbox does; the config counts as the sandbox's. The children's
 * memory is theirs, not counted.
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "bench_util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *agent;
static asp_client **clients;
static asp_config **configs; /* -c: each client's own */
static bool per_config;
static int nclients;
static atomic_int next_index;
static atomic_int failures;
static char first_error[ASP_ERROR_MESSAGE_MAX + 16];
static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, const asp_error *err)
{
	pthread_mutex_lock(&err_mu);
	if (!first_error[0])
		snprintf(first_error, sizeof first_error, "%.8s: %s", what, err->message);
	pthread_mutex_unlock(&err_mu);
	atomic_fetch_add(&failures, 1);
}

/* Entries of a /proc/self directory, "." and ".." aside. */
static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - (strcmp(path, "/proc/self/fd") == 0); /* the DIR's own fd */
}

/* VmRSS in KiB. */
static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

typedef enum { OPEN, CALL, CLOSE } phase;

static void *worker(void *arg)
{
	phase ph = *(phase *)arg;
	asp_arena *a = asp_arena_new();
	const char *argv[] = {agent, "--stdio", NULL};
	static const char *const cmd[] = {"true"};
	for (;;) {
		int i = atomic_fetch_add(&next_index, 1);
		if (i >= nclients)
			break;
		asp_error err;
		if (ph == OPEN && per_config) {
			char json[1024];
			snprintf(json, sizeof json,
			         "{\"version\": 1, \"transport\": \"stdio\", \"stdio\": "
			         "{\"command\": [\"%s\", \"--stdio\"]}}",
			         agent);
			if (asp_config_parse(json, strlen(json), NULL, &configs[i], &err) ||
			    asp_client_open(configs[i], &clients[i], &err)) {
				clients[i] = NULL;
				fail("open", &err);
			}
		} else if (ph == OPEN) {
			asp_config_view v;
			memset(&v, 0, sizeof v);
			v.transport = ASP_TRANSPORT_STDIO;
			v.stdio.argv = argv;
			v.stdio.argc = 2;
			if (asp_client_open_view(&v, &clients[i], &err)) {
				clients[i] = NULL;
				fail("open", &err);
			}
		} else if (ph == CALL) {
			if (!clients[i])
				continue;
			asp_exec_params p;
			asp_exec_params_init(&p);
			p.has_argv = true;
			p.argv.items = cmd;
			p.argv.count = 1;
			asp_exec_result r;
			if (asp_exec(clients[i], &p, &r, a, &err))
				fail("exec", &err);
			else if (r.exit_code != 0)
				atomic_fetch_add(&failures, 1);
			asp_arena_reset(a);
		} else {
			asp_client_free(clients[i]);
			clients[i] = NULL;
			asp_config_free(configs[i]);
			configs[i] = NULL;
		}
	}
	asp_arena_free(a);
	return NULL;
}

/* Runs `ph` over all clients from `threads` threads; seconds taken. */
static double run(phase ph, int threads)
{
	atomic_store(&next_index, 0);
	pthread_t *t = calloc((size_t)threads, sizeof *t);
	double t0 = now_ms();
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, worker, &ph)) {
			fprintf(stderr, "bench_scale: pthread_create failed\n");
			exit(1);
		}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	free(t);
	return (now_ms() - t0) / 1000;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_scale ASP_AGENT [N ...] [-t THREADS] [-c]\n");
		return 2;
	}
	agent = argv[1];
	int threads = 64, sizes[16], nsizes = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (strcmp(argv[i], "-c") == 0)
			per_config = true;
		else if (nsizes < 16)
			sizes[nsizes++] = atoi(argv[i]);
	}
	if (nsizes == 0) {
		sizes[0] = 100, sizes[1] = 1000, sizes[2] = 5000;
		nsizes = 3;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	printf("agent %s, %d threads, %s, RLIMIT_NOFILE soft %llu hard %llu at start\n", agent,
	       threads, per_config ? "a config per sandbox" : "one view for all",
	       (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);

	/* A round of `threads` sandboxes first, closed again: the pool's poller and first
	 * worker, libc's per-thread malloc arenas of that many threads and the transports'
	 * registration are there before the baseline, so what is measured is per sandbox. */
	nclients = threads;
	clients = calloc((size_t)nclients, sizeof *clients);
	configs = calloc((size_t)nclients, sizeof *configs);
	run(OPEN, threads);
	run(CALL, threads);
	run(CLOSE, threads);
	free(clients);
	free(configs);

	printf(
	    "\n| sandboxes | open /s | exec /s | close /s | RSS / sandbox idle | fds / sandbox | "
	    "threads (total) | failures |\n|---|---|---|---|---|---|---|---|\n");
	for (int s = 0; s < nsizes; s++) {
		nclients = sizes[s];
		clients = calloc((size_t)nclients, sizeof *clients);
		configs = calloc((size_t)nclients, sizeof *configs);
		atomic_store(&failures, 0);
		long rss0 = rss_kib();
		int fd0 = count_dir("/proc/self/fd"), th0 = count_dir("/proc/self/task");
		double t_open = run(OPEN, threads);
		double t_call = run(CALL, threads);
		/* All idle now (after one exec each): what each costs the client at rest. */
		long rss1 = rss_kib();
		int fd1 = count_dir("/proc/self/fd"), th1 = count_dir("/proc/self/task");
		double t_close = run(CLOSE, threads);
		int open_failures = atomic_load(&failures);
		printf("| %d | %.0f | %.0f | %.0f | %.1f KiB | %.2f | %d (%+d) | %d |\n", nclients,
		       nclients / t_open, nclients / t_call, nclients / t_close,
		       (double)(rss1 - rss0) / nclients, (double)(fd1 - fd0) / nclients, th1,
		       th1 - th0, open_failures);
		fflush(stdout);
		free(clients);
		free(configs);
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	printf("\nRLIMIT_NOFILE soft %llu hard %llu at the end\n", (unsigned long long)rl.rlim_cur,
	       (unsigned long long)rl.rlim_max);
	if (first_error[0])
		printf("first failure: %s\n", first_error);
	return first_error[0] ? 1 : 0;
}
