/*
 * Streaming figures through the client: how long a line a spawned process writes takes
 * to reach the on_output callback (the process stamps each line with CLOCK_MONOTONIC;
 * same machine, same clock), spawn-to-exit of `true`, and output throughput. Over stdio
 * to $ASP_AGENT and in process. `meson test --benchmark` runs it.
 *
 *   bench_stream --produce N MS    (the producer: N stamped lines, MS apart)
 */
#include "asp/asp.h"
#include "asp/transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINES 200

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

typedef struct run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool ended;
	char line[64];
	size_t llen;
	double lat_us[LINES];
	int n;
	uint64_t bytes;
} run;

static void on_output(void *user, uint64_t proc, asp_stream s, uint64_t off, const uint8_t *d,
                      size_t len)
{
	(void)proc;
	(void)s;
	(void)off;
	run *r = user;
	int64_t now = mono_ns();
	pthread_mutex_lock(&r->mu);
	r->bytes += len;
	for (size_t i = 0; i < len && r->n < LINES; i++) {
		if (d[i] != '\n') {
			if (r->llen < sizeof r->line - 1)
				r->line[r->llen++] = (char)d[i];
			continue;
		}
		r->line[r->llen] = '\0';
		r->llen = 0;
		long long stamp = atoll(r->line);
		if (stamp > 0)
			r->lat_us[r->n++] = (double)(now - stamp) / 1e3;
	}
	pthread_mutex_unlock(&r->mu);
}

static void on_end(run *r)
{
	pthread_mutex_lock(&r->mu);
	r->ended = true;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	(void)ev;
	on_end(user);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	fprintf(stderr, "lost: %s\n", err->message);
	on_end(user);
}

static const asp_proc_callbacks cb = {on_output, on_exit_ev, on_lost};

/* Spawns argv and waits for its exit; the run collects what came. */
static void follow(asp_client *c, const char *label, const char *const *argv, size_t argc, run *r)
{
	memset(r, 0, sizeof *r);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = argc;
	uint64_t proc;
	asp_error err;
	if (asp_spawn_start(c, &p, &cb, r, &proc, &err)) {
		fprintf(stderr, "%s: spawn: %s\n", label, err.message);
		exit(1);
	}
	pthread_mutex_lock(&r->mu);
	while (!r->ended)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
}

static void bench(const char *label, asp_transport_kind kind, const char *agent, const char *self)
{
	const char *cargv[] = {agent, "--stdio", NULL};
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = kind;
	v.stdio.argv = cargv;
	v.stdio.argc = 2;
	asp_client *c;
	asp_error err;
	if (asp_client_open_view(&v, &c, &err)) {
		fprintf(stderr, "%s: %s\n", label, err.message);
		exit(1);
	}
	static run r; /* big: not on the stack */
	char n[16];
	snprintf(n, sizeof n, "%d", LINES);
	const char *produce[] = {self, "--produce", n, "5"};
	follow(c, label, produce, 4, &r);
	qsort(r.lat_us, (size_t)r.n, sizeof *r.lat_us, cmp);
	if (r.n > 0)
		printf("%-22s line latency  median %7.1f us   p99 %7.1f us   (n=%d)\n", label,
		       r.lat_us[r.n / 2], r.lat_us[r.n * 99 / 100], r.n);

	const char *t[] = {"true"};
	double spawn_us[200];
	for (int i = 0; i < 200; i++) {
		int64_t t0 = mono_ns();
		follow(c, label, t, 1, &r);
		spawn_us[i] = (double)(mono_ns() - t0) / 1e3;
	}
	qsort(spawn_us, 200, sizeof *spawn_us, cmp);
	printf("%-22s spawn->exit   median %7.1f us   p99 %7.1f us   (n=200, true)\n", label,
	       spawn_us[100], spawn_us[198]);

	const char *big[] = {"head", "-c", "268435456", "/dev/zero"};
	int64_t t0 = mono_ns();
	follow(c, label, big, 4, &r);
	double s = (double)(mono_ns() - t0) / 1e9;
	printf("%-22s output        %7.0f MB/s  (256 MiB through on_output)\n", label,
	       (double)r.bytes / s / 1e6);
	asp_client_free(c);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--produce") == 0) {
		int n = atoi(argv[2]), ms = atoi(argv[3]);
		for (int i = 0; i < n; i++) {
			printf("%lld\n", (long long)mono_ns());
			fflush(stdout);
			usleep((useconds_t)ms * 1000);
		}
		return 0;
	}
	char self[4096];
	ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
	if (k <= 0)
		return 77;
	self[k] = '\0';
	const char *agent = getenv("ASP_AGENT");
	if (agent && agent[0])
		bench("stdio asp-agent", ASP_TRANSPORT_STDIO, agent, self);
	bench("local (in process)", ASP_TRANSPORT_LOCAL, NULL, self);
	return 0;
}
