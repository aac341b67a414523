/*
 * Round-trip latency of one call through the client: stdio to $ASP_AGENT (and
 * $ASP_AGENT_STATIC), and the local transport for reference. Prints medians and p99 in
 * microseconds. `meson test --benchmark` runs it.
 */
#include "asp/asp.h"
#include "asp/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

typedef asp_status (*one_call)(asp_client *c, asp_arena *a, asp_error *err);

static asp_status call_hello(asp_client *c, asp_arena *a, asp_error *err)
{
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	return asp_hello(c, &p, &r, a, err);
}

static asp_status call_stat(asp_client *c, asp_arena *a, asp_error *err)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "/";
	asp_stat_result r;
	return asp_stat(c, &p, &r, a, err);
}

static asp_status call_exec_true(asp_client *c, asp_arena *a, asp_error *err)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	static const char *const argv[] = {"true"};
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 1;
	asp_exec_result r;
	return asp_exec(c, &p, &r, a, err);
}

/* 8 MiB one way and the other: throughput more than latency. */
static asp_status call_read_8m(asp_client *c, asp_arena *a, asp_error *err)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = "/tmp/asp-bench-8m";
	asp_read_result r;
	asp_status st = asp_read(c, &p, &r, a, err);
	if (!st && r.data.len != 8 << 20)
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "short read");
	return st;
}

static asp_status call_write_8m(asp_client *c, asp_arena *a, asp_error *err)
{
	static uint8_t data[8 << 20];
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = "/tmp/asp-bench-8m";
	p.data.data = data;
	p.data.len = sizeof data;
	asp_write_result r;
	return asp_write(c, &p, &r, a, err);
}

static void measure(const char *label, asp_client *c, const char *what, one_call fn, int n)
{
	double *t = malloc(n * sizeof *t);
	asp_arena *a = asp_arena_new();
	asp_error err;
	for (int i = 0; i < n / 10 + 1; i++) { /* warm up */
		fn(c, a, &err);
		asp_arena_reset(a);
	}
	for (int i = 0; i < n; i++) {
		double t0 = now_us();
		if (fn(c, a, &err)) {
			fprintf(stderr, "%s %s: %s\n", label, what, err.message);
			exit(1);
		}
		t[i] = now_us() - t0;
		asp_arena_reset(a);
	}
	qsort(t, n, sizeof *t, cmp);
	printf("%-22s %-9s median %7.1f us   p99 %7.1f us   (n=%d)\n", label, what, t[n / 2],
	       t[n * 99 / 100], n);
	asp_arena_free(a);
	free(t);
}

static void bench(const char *label, asp_transport_kind kind, const char *agent)
{
	const char *argv[] = {agent, "--stdio", NULL};
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = kind;
	v.stdio.argv = argv;
	v.stdio.argc = 2;
	asp_client *c;
	asp_error err;
	if (asp_client_open_view(&v, &c, &err)) {
		fprintf(stderr, "%s: %s\n", label, err.message);
		exit(1);
	}
	measure(label, c, "hello", call_hello, 20000);
	measure(label, c, "stat /", call_stat, 20000);
	measure(label, c, "exec true", call_exec_true, 2000);
	measure(label, c, "write 8M", call_write_8m, 100);
	measure(label, c, "read 8M", call_read_8m, 100);
	asp_client_free(c);
}

int main(void)
{
	const char *agent = getenv("ASP_AGENT"), *agent_static = getenv("ASP_AGENT_STATIC");
	if (agent && agent[0])
		bench("stdio asp-agent", ASP_TRANSPORT_STDIO, agent);
	if (agent_static && agent_static[0])
		bench("stdio asp-agent-static", ASP_TRANSPORT_STDIO, agent_static);
	bench("local (in process)", ASP_TRANSPORT_LOCAL, NULL);
	return 0;
}
