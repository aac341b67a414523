/* asp ps, asp attach, asp kill: the sandbox's spawned processes. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_STDOUT_OFFSET = CLI_OPT_FIRST_PRIVATE, OPT_STDERR_OFFSET };

/* A process handle from the command line; -1 after a usage error. */
static int parse_proc(cli *c, const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || s[0] == '-' || v == 0)
		return cli_usage(c, "'%s' is not a process handle (asp ps lists them)", s), -1;
	*out = v;
	return 0;
}

int cmd_ps(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		return c->fail_code;
	}
	if (optind < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind]);
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;
	asp_proc_list_params p;
	asp_proc_list_params_init(&p);
	asp_proc_list_result r;
	asp_error err;
	int rc;
	if (asp_proc_list(client, &p, &r, a, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "ps");
		asp_arena_free(a);
		return rc;
	}
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "procs");
		jw_arr_begin(&w);
		for (size_t i = 0; i < r.procs.count; i++) {
			const asp_proc_info *e = &r.procs.items[i];
			jw_obj_begin(&w);
			jw_key(&w, "proc");
			jw_uint(&w, e->proc);
			jw_key(&w, "tag");
			jw_str(&w, e->tag);
			jw_bytes_field(&w, "command", (const uint8_t *)e->command,
			               strlen(e->command));
			jw_key(&w, "running");
			jw_bool(&w, e->running);
			jw_key(&w, "exit_code");
			if (e->has_exit_code)
				jw_int(&w, e->exit_code);
			else
				jw_null(&w);
			jw_key(&w, "signal");
			if (e->signal)
				jw_str(&w, e->signal);
			else
				jw_null(&w);
			jw_obj_end(&w);
		}
		jw_arr_end(&w);
		jw_obj_end(&w);
		jw_end(&w);
	} else {
		/* handles reach 2^30 + 2^16 (docs/decisions.md): ten digits */
		printf("%-10s %-8s %-12s %s\n", "PROC", "STATE", "TAG", "COMMAND");
		for (size_t i = 0; i < r.procs.count; i++) {
			const asp_proc_info *e = &r.procs.items[i];
			char state[24];
			if (e->running)
				snprintf(state, sizeof state, "running");
			else if (e->signal)
				snprintf(state, sizeof state, "%s", e->signal);
			else
				snprintf(state, sizeof state, "exit %lld", (long long)e->exit_code);
			printf("%-10llu %-8s %-12s ", (unsigned long long)e->proc, state,
			       e->tag ? e->tag : "-");
			/* One line per process whatever the command holds. */
			for (const char *s = e->command; *s; s++)
				putchar(*s == '\n' || *s == '\r' || *s == '\t' ? ' ' : *s);
			putchar('\n');
		}
	}
	asp_arena_free(a);
	return cli_finish(c, CLI_EXIT_OK);
}

int cmd_attach(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"stdout-offset", required_argument, NULL, OPT_STDOUT_OFFSET},
	    {"stderr-offset", required_argument, NULL, OPT_STDERR_OFFSET},
	    {NULL, 0, NULL, 0},
	};
	asp_proc_attach_params p;
	asp_proc_attach_params_init(&p);
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case OPT_STDOUT_OFFSET:
			if (cli_parse_size(c, "--stdout-offset", optarg, &p.stdout_offset) < 0)
				return c->fail_code;
			break;
		case OPT_STDERR_OFFSET:
			if (cli_parse_size(c, "--stderr-offset", optarg, &p.stderr_offset) < 0)
				return c->fail_code;
			break;
		default: return c->fail_code;
		}
	}
	if (optind + 1 != argc)
		return cli_usage(c, "give one PROC (asp ps lists them)");
	if (parse_proc(c, argv[optind], &p.proc) < 0)
		return c->fail_code;
	asp_client *client = cli_client(c);
	if (!client)
		return c->fail_code;
	return cli_attach_follow(c, client, &p);
}

int cmd_kill(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		return c->fail_code;
	}
	if (optind >= argc || argc - optind > 2)
		return cli_usage(c, "give PROC and optionally a SIGNAL (TERM by default)");
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	if (parse_proc(c, argv[optind], &p.proc) < 0)
		return c->fail_code;
	/* "int", "SIGINT", "INT" and "2" all name INT. */
	char name[16] = "TERM";
	if (optind + 1 < argc) {
		const char *s = argv[optind + 1];
		if (strncasecmp(s, "SIG", 3) == 0)
			s += 3;
		size_t n = strlen(s);
		if (n == 0 || n >= sizeof name)
			return cli_usage(c, "'%s' is not a signal name", argv[optind + 1]);
		for (size_t i = 0; i <= n; i++)
			name[i] = (char)toupper((unsigned char)s[i]);
		if (isdigit((unsigned char)name[0])) {
			static const char *const by_number[] = {"INT",  "QUIT", "KILL", "USR1",
			                                        "USR2", "TERM", "HUP"};
			int num = atoi(name);
			bool found = false;
			for (size_t i = 0; i < sizeof by_number / sizeof *by_number && !found; i++)
				if (cli_signal_number(by_number[i]) == num) {
					snprintf(name, sizeof name, "%s", by_number[i]);
					found = true;
				}
			if (!found)
				return cli_usage(c,
				                 "signal %s is not one the sandbox forwards (TERM, "
				                 "KILL, INT, HUP, QUIT, USR1, USR2)",
				                 argv[optind + 1]);
		}
	}
	p.signal = name;
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;
	asp_proc_signal_result r;
	asp_error err;
	int rc = CLI_EXIT_OK;
	if (asp_proc_signal(client, &p, &r, a, &err) != ASP_OK)
		rc = cli_fail(c, &err, "kill %llu %s", (unsigned long long)p.proc, name);
	asp_arena_free(a);
	return rc == CLI_EXIT_OK ? cli_finish(c, rc) : rc;
}
