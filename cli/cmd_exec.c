/*
 * asp exec: run a command in the sandbox; its output becomes ours, its exit code too.
 * Streams (spawn, follow.c) when the sandbox can; the exec op when it cannot, and for
 * --json and --max-output, which describe exec's one answer.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OPT_CWD = CLI_OPT_FIRST_PRIVATE, OPT_ENV, OPT_TIMEOUT, OPT_STDIN, OPT_MAX_OUTPUT };

/*
 * 124 on timeout, 128+N for signal N, else the exit status
 * (docs/design.md, "The `asp` command line").
 */
static int exit_code_of(const asp_exec_result *r)
{
	return cli_exit_code_of("exec", r->exit_code, r->signal, r->timed_out);
}

/* exec's params as spawn's: what streaming needs of them. */
static void spawn_params_of(const asp_exec_params *e, asp_spawn_params *s)
{
	asp_spawn_params_init(s);
	s->command = e->command;
	s->has_argv = e->has_argv;
	s->argv = e->argv;
	s->cwd = e->cwd;
	s->has_env = e->has_env;
	s->env = e->env;
	s->timeout_ms = e->timeout_ms;
}

static void print_json(const asp_exec_result *r)
{
	jw w;
	jw_init(&w, stdout);
	jw_obj_begin(&w);
	jw_key(&w, "exit_code");
	jw_int(&w, r->exit_code);
	jw_key(&w, "signal");
	jw_str(&w, r->signal);
	jw_bytes_field(&w, "stdout", r->stdout_data.data, r->stdout_data.len);
	jw_bytes_field(&w, "stderr", r->stderr_data.data, r->stderr_data.len);
	jw_key(&w, "stdout_bytes");
	jw_uint(&w, r->stdout_bytes);
	jw_key(&w, "stderr_bytes");
	jw_uint(&w, r->stderr_bytes);
	jw_key(&w, "timed_out");
	jw_bool(&w, r->timed_out);
	jw_key(&w, "duration_ms");
	jw_uint(&w, r->duration_ms);
	jw_obj_end(&w);
	jw_end(&w);
}

/* Streams beyond max_output were cut by the sandbox: say so rather than pass it off whole. */
static void warn_truncated(const char *name, uint64_t kept, uint64_t total)
{
	if (total > kept)
		cli_warn("exec: %s truncated: kept %llu of %llu bytes (raise --max-output)", name,
		         (unsigned long long)kept, (unsigned long long)total);
}

int cmd_exec(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"command", required_argument, NULL, 'c'},
	    {"cwd", required_argument, NULL, OPT_CWD},
	    {"env", required_argument, NULL, OPT_ENV},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"stdin", no_argument, NULL, OPT_STDIN},
	    {"max-output", required_argument, NULL, OPT_MAX_OUTPUT},
	    {"tty", no_argument, NULL, 't'},
	    {NULL, 0, NULL, 0},
	};
	asp_exec_params p;
	asp_exec_params_init(&p);
	bool want_stdin = false, max_output_given = false, want_tty = false;
	int rc = c->fail_code;
	asp_strmap_entry *env = calloc((size_t)argc, sizeof *env); /* at most one per arg */
	uint8_t *in = NULL;
	asp_arena *a = NULL;
	if (!env)
		return cli_fail_errno(c, ENOMEM, "exec");

	int opt;
	/* '+': options end at the first ARGV word, so `asp exec ls -l` needs no "--". */
	while ((opt = cli_getopt(c, argc, argv, "+hc:t", longopts)) != -1) {
		switch (opt) {
		case 'h': rc = cli_finish(c, CLI_EXIT_OK); goto out;
		case 'c': p.command = optarg; break;
		case OPT_CWD: p.cwd = optarg; break;
		case OPT_ENV:
			if (cli_parse_env(c, optarg, &env[p.env.count]) < 0)
				goto out;
			p.env.count++;
			p.has_env = true;
			break;
		case OPT_TIMEOUT:
			if (cli_parse_seconds(c, "--timeout", optarg, &p.timeout_ms) < 0)
				goto out;
			break;
		case OPT_STDIN: want_stdin = true; break;
		case 't': want_tty = true; break;
		case OPT_MAX_OUTPUT:
			if (cli_parse_size(c, "--max-output", optarg, &p.max_output) < 0)
				goto out;
			max_output_given = true;
			break;
		default: goto out;
		}
	}
	p.env.items = env;
	if (p.command && optind < argc) {
		rc = cli_usage(c, "give either -c 'COMMAND' or ARGV, not both (got '%s')",
		               argv[optind]);
		goto out;
	}
	if (!p.command) {
		if (optind >= argc) {
			rc = cli_usage(c, "nothing to run: give ARGV after -- or -c 'COMMAND'");
			goto out;
		}
		p.has_argv = true;
		p.argv.items = (const char *const *)(argv + optind);
		p.argv.count = (size_t)(argc - optind);
	}
	if (want_tty && (c->json || max_output_given)) {
		rc = cli_usage(c, "-t shows the command on a terminal; --json and --max-output "
		                  "describe one answer at the end: give one or the other");
		goto out;
	}
	asp_client *client = cli_client(c);
	if (!client)
		goto out;
	if (want_tty) {
		/* Like ssh -tt: a terminal whether or not ours is one; stdin always goes to it. */
		asp_spawn_params sp;
		spawn_params_of(&p, &sp);
		sp.tag = "tty"; /* asp ps tells it from a plain exec */
		char label[256];
		snprintf(label, sizeof label, "exec %s", p.command ? p.command : p.argv.items[0]);
		rc = cli_tty_follow(c, client, &sp, label);
		goto out;
	}
	if (!c->json && !max_output_given) {
		asp_spawn_params sp;
		spawn_params_of(&p, &sp);
		bool fallback;
		rc = cli_exec_follow(c, client, &sp, want_stdin, &fallback);
		if (!fallback)
			goto out;
		rc = c->fail_code;
	}
	if (want_stdin) {
		size_t len;
		if (cli_read_all(STDIN_FILENO, &in, &len) < 0) {
			rc = cli_fail_errno(c, errno, "exec: read stdin");
			goto out;
		}
		p.stdin_data.data = in;
		p.stdin_data.len = len;
	}

	if (!(a = cli_arena(c)))
		goto out;
	asp_exec_result r;
	asp_error err;
	if (asp_exec(client, &p, &r, a, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "exec %s", p.command ? p.command : p.argv.items[0]);
		goto out;
	}
	if (c->json) {
		print_json(&r);
		rc = cli_finish(c, exit_code_of(&r));
		goto out;
	}
	fflush(stdout);
	if (cli_write_all(STDOUT_FILENO, r.stdout_data.data, r.stdout_data.len) < 0) {
		rc = cli_fail_errno(c, errno, "exec: write stdout");
		goto out;
	}
	if (cli_write_all(STDERR_FILENO, r.stderr_data.data, r.stderr_data.len) < 0) {
		rc = cli_fail_errno(c, errno, "exec: write stderr");
		goto out;
	}
	warn_truncated("stdout", r.stdout_data.len, r.stdout_bytes);
	warn_truncated("stderr", r.stderr_data.len, r.stderr_bytes);
	rc = exit_code_of(&r);
out:
	asp_arena_free(a);
	free(in);
	free(env);
	return rc;
}
