/*
 * Streaming a spawned process's output: a spawn of `head -c N
 * /dev/zero` followed with asp_spawn_start, from the call to on_exit with every byte
 * counted, through the in-process local backend and over stdio (asp-agent), against the
 * floor: the same command spawned here and its pipe read to EOF. Interleaved rounds,
 * medians. The in-process figure is also given as this process's CPU time (all its
 * threads, user + system) per round, which load elsewhere on the machine disturbs less
 * than the wall clock. (tests/rpc/bench_stream gives single-run latency and throughput
 * figures through the client; this one compares builds.)
 *
 *   bench_stream ASP_AGENT [MiB [rounds]]
 *
 * Prints one line (for interleaved runs of two builds) and a Markdown row.
 */
#include "asp/asp.h"
#include "asp/proc.h"
#include "asp/transport.h"
#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void die(const char *what, const asp_error *err)
{
	fprintf(stderr, "bench_stream: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(1);
}

typedef struct follow {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t bytes;
	bool done;
	int64_t code;
} follow;

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	(void)offset;
	(void)data;
	follow *f = user;
	if (stream == ASP_STREAM_STDOUT)
		f->bytes += len; /* one callback at a time: no lock needed for the count */
}

static void on_end(follow *f, int64_t code)
{
	pthread_mutex_lock(&f->mu);
	f->done = true;
	f->code = code;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	on_end(user, ev->exit_code);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	(void)err;
	on_end(user, -2);
}

/* Seconds for one followed spawn that writes `bytes`. */
static double stream_once(asp_client *c, const char *count, uint64_t bytes)
{
	follow f = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	const char *argv[] = {"head", "-c", count, "/dev/zero"};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv = (asp_strv){argv, 4};
	p.stdin_eof = true;
	asp_proc_callbacks cb = {.on_output = on_output, .on_exit = on_exit_cb, .on_lost = on_lost};
	uint64_t proc;
	asp_error err;
	double t0 = now_us();
	if (asp_spawn_start(c, &p, &cb, &f, &proc, &err))
		die("spawn", &err);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 120; /* a generous bound: the machine may be loaded */
	pthread_mutex_lock(&f.mu);
	while (!f.done)
		if (pthread_cond_timedwait(&f.cv, &f.mu, &dl) == ETIMEDOUT)
			die("no exit within 120 s", NULL);
	pthread_mutex_unlock(&f.mu);
	double s = (now_us() - t0) / 1e6;
	if (f.code != 0 || f.bytes != bytes) {
		fprintf(stderr, "bench_stream: exit %lld, %llu of %llu bytes\n", (long long)f.code,
		        (unsigned long long)f.bytes, (unsigned long long)bytes);
		exit(1);
	}
	return s;
}

/* User + system CPU seconds of this process so far (every thread). */
static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

/* The floor: the same command here, its pipe read to EOF 64 KiB at a time. */
static double floor_once(const char *count, uint64_t bytes)
{
	static char buf[64 * 1024];
	int fds[2];
	if (pipe(fds))
		die("pipe", NULL);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	posix_spawn_file_actions_addclose(&fa, fds[1]);
	char *argv[] = {"head", "-c", (char *)count, "/dev/zero", NULL};
	double t0 = now_us();
	pid_t pid;
	if (posix_spawnp(&pid, "head", &fa, NULL, argv, environ))
		die("posix_spawnp", NULL);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	uint64_t got = 0;
	for (;;) {
		ssize_t n = read(fds[0], buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (uint64_t)n;
	}
	close(fds[0]);
	int status;
	waitpid(pid, &status, 0);
	double s = (now_us() - t0) / 1e6;
	if (got != bytes)
		die("floor: short read", NULL);
	return s;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_stream ASP_AGENT [MiB [rounds]]\n");
		return 2;
	}
	const char *agent = argv[1];
	int mib = argc > 2 ? atoi(argv[2]) : 64;
	int rounds = argc > 3 ? atoi(argv[3]) : 15;
	if (mib <= 0 || rounds <= 0)
		return 2;
	uint64_t bytes = (uint64_t)mib << 20;
	char count[32];
	snprintf(count, sizeof count, "%llu", (unsigned long long)bytes);

	asp_error err;
	asp_config_view lv = {.transport = ASP_TRANSPORT_LOCAL};
	asp_client *local;
	if (asp_client_open_view(&lv, &local, &err))
		die("open local client", &err);
	const char *cmd[] = {agent, "--stdio", NULL};
	asp_config_view sv = {.transport = ASP_TRANSPORT_STDIO};
	sv.stdio.argv = cmd;
	sv.stdio.argc = 2;
	asp_client *stdio;
	if (asp_client_open_view(&sv, &stdio, &err))
		die("open stdio client", &err);

	stream_once(local, count, bytes); /* warm up: start the agent, fault pages in */
	stream_once(stdio, count, bytes);
	double *vl = calloc((size_t)rounds, sizeof *vl), *vs = calloc((size_t)rounds, sizeof *vs);
	double *vf = calloc((size_t)rounds, sizeof *vf), *vc = calloc((size_t)rounds, sizeof *vc);
	for (int i = 0; i < rounds; i++) { /* interleaved: load elsewhere hits all three */
		vf[i] = floor_once(count, bytes);
		double c0 = cpu_s();
		vl[i] = stream_once(local, count, bytes);
		vc[i] = cpu_s() - c0;
		vs[i] = stream_once(stdio, count, bytes);
	}
	double fl = median(vf, rounds), lo = median(vl, rounds), st = median(vs, rounds);
	double lc = median(vc, rounds);
	printf("stream %d MiB: local %.1f ms (%.0f MiB/s, cpu %.1f ms) stdio %.1f ms (%.0f "
	       "MiB/s) floor %.1f ms (%.0f MiB/s)\n",
	       mib, lo * 1e3, mib / lo, lc * 1e3, st * 1e3, mib / st, fl * 1e3, mib / fl);
	printf("| spawn streaming %d MiB to callbacks, median of %d | local %.0f MiB/s (%.1f ms "
	       "CPU) | stdio %.0f MiB/s | floor (pipe read here) %.0f MiB/s |\n",
	       mib, rounds, mib / lo, lc * 1e3, mib / st, mib / fl);
	free(vl);
	free(vs);
	free(vf);
	free(vc);
	asp_client_free(stdio);
	asp_client_free(local);
	return 0;
}
