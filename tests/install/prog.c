/*
 * A program outside the tree: built by install_test.sh with nothing but
 * `cc prog.c $(pkg-config --cflags --libs asp)` against a `meson install --destdir`,
 * it opens the stdio transport on the installed asp-agent and runs one exec.
 *   usage: prog ASP_AGENT
 */
#include <asp/asp.h>
#include <asp/transport.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: prog ASP_AGENT\n");
		return 2;
	}
	const char *agent_argv[] = {argv[1], "--stdio", NULL};
	asp_config_view view = {
	    .transport = ASP_TRANSPORT_STDIO,
	    .stdio = {.argv = agent_argv, .argc = 2},
	};
	asp_error err;
	asp_client *c;
	if (asp_client_open_view(&view, &c, &err)) {
		fprintf(stderr, "prog: open: %s\n", err.message);
		return 1;
	}
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "echo installed";
	asp_exec_result r;
	asp_status st = asp_exec(c, &p, &r, a, &err);
	int rc = 1;
	if (st)
		fprintf(stderr, "prog: exec: %s: %s\n", asp_strerror(st), err.message);
	else if (r.exit_code == 0 && r.stdout_data.len == 10 &&
	         memcmp(r.stdout_data.data, "installed\n", 10) == 0)
		rc = 0;
	else
		fprintf(stderr, "prog: exec answered exit %lld, stdout '%.*s'\n",
		        (long long)r.exit_code, (int)r.stdout_data.len,
		        (const char *)r.stdout_data.data);
	if (rc == 0)
		printf("prog: %.*s", (int)r.stdout_data.len, (const char *)r.stdout_data.data);
	asp_arena_free(a);
	asp_client_free(c);
	return rc;
}
