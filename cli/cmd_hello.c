/* asp hello: who answers, and how fast. */
#include "cli.h"

#include "asp/ssh_route.h"

#include <time.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

/* Round trips timed after the first call, which also connects; the fastest is reported. */
#define RTT_SAMPLES 5

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cmd_hello(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		return c->fail_code;
	}
	if (optind < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind]);

	/* where each value came from, before connecting: most useful when that fails */
	asp_ssh_route *route = cli_route(c);
	if (route && !c->json)
		cli_route_text(stdout, route);
	fflush(stdout);
	double t0 = now_ms();
	asp_client *client = cli_client(c);
	if (!client) {
		asp_ssh_route_free(route);
		return c->fail_code;
	}
	asp_arena *a = cli_arena(c), *scratch = cli_arena(c);
	if (!a || !scratch) {
		asp_arena_free(a);
		asp_arena_free(scratch);
		asp_ssh_route_free(route);
		return c->fail_code;
	}
	asp_hello_params p;
	asp_hello_params_init(&p);
	p.client = "asp/" ASP_VERSION;
	p.has_protocol = true;
	p.protocol = ASP_PROTOCOL;
	asp_hello_result r;
	asp_error err;
	int rc = CLI_EXIT_OK;
	if (asp_hello(client, &p, &r, a, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "hello");
		goto out;
	}
	double connect_ms = now_ms() - t0, rtt_ms = 0;
	/* A later hello is answered from the connection's cache: time a stat of / instead. */
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = "/";
	for (int i = 0; i < RTT_SAMPLES; i++) {
		asp_stat_result r2;
		double t = now_ms();
		if (asp_stat(client, &sp, &r2, scratch, &err) != ASP_OK) {
			rc = cli_fail(c, &err, "stat /");
			goto out;
		}
		double d = now_ms() - t;
		if (i == 0 || d < rtt_ms)
			rtt_ms = d;
		asp_arena_reset(scratch);
	}

	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "protocol");
		jw_uint(&w, r.protocol);
		jw_key(&w, "agent");
		jw_str(&w, r.agent);
		jw_key(&w, "os");
		jw_str(&w, r.os);
		jw_key(&w, "arch");
		jw_str(&w, r.arch);
		jw_key(&w, "cwd");
		jw_str(&w, r.cwd);
		jw_key(&w, "max_message");
		jw_uint(&w, r.max_message);
		jw_key(&w, "ops");
		jw_arr_begin(&w);
		for (size_t i = 0; i < r.ops.count; i++)
			jw_str(&w, r.ops.items[i]);
		jw_arr_end(&w);
		if (r.has_features) {
			jw_key(&w, "features");
			jw_arr_begin(&w);
			for (size_t i = 0; i < r.features.count; i++)
				jw_str(&w, r.features.items[i]);
			jw_arr_end(&w);
		}
		jw_key(&w, "connect_ms");
		jw_double(&w, connect_ms);
		jw_key(&w, "rtt_ms");
		jw_double(&w, rtt_ms);
		if (route) {
			jw_key(&w, "route");
			cli_route_json(&w, route);
		}
		jw_obj_end(&w);
		jw_end(&w);
	} else {
		printf("agent:       %s\n", r.agent ? r.agent : "?");
		printf("protocol:    %llu\n", (unsigned long long)r.protocol);
		printf("os/arch:     %s/%s\n", r.os ? r.os : "?", r.arch ? r.arch : "?");
		printf("cwd:         %s\n", r.cwd ? r.cwd : "?");
		printf("max_message: %llu\n", (unsigned long long)r.max_message);
		printf("ops:        ");
		for (size_t i = 0; i < r.ops.count; i++)
			printf(" %s", r.ops.items[i]);
		if (r.has_features) {
			printf("\nfeatures:   ");
			for (size_t i = 0; i < r.features.count; i++)
				printf(" %s", r.features.items[i]);
		}
		printf("\nconnect:     %.3f ms (open and first hello)\n", connect_ms);
		printf("rtt:         %.3f ms (stat /, fastest of %d)\n", rtt_ms, RTT_SAMPLES);
	}
	rc = cli_finish(c, CLI_EXIT_OK);
out:
	asp_arena_free(a);
	asp_arena_free(scratch);
	asp_ssh_route_free(route);
	return rc;
}
