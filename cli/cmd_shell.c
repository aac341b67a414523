/*
 * asp shell: an interactive login shell in the sandbox on a terminal, as `ssh HOST` gives;
 * `asp shell -- ARGV...` runs ARGV on one instead. The terminal itself is follow.c's.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_CWD = CLI_OPT_FIRST_PRIVATE, OPT_ENV };

/*
 * The sandbox user's login shell: $SHELL as the sandbox has it, else bash, else sh,
 * started with -l (every common shell takes it) and exec'd, so it is the terminal's
 * session leader and runs job control. The user's own startup files set the prompt.
 */
const char cli_login_script[] =
    "s=${SHELL:-}; [ -x \"$s\" ] || s=$(command -v bash) || s=/bin/sh; exec \"$s\" -l";

int cmd_shell(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"cwd", required_argument, NULL, OPT_CWD},
	    {"env", required_argument, NULL, OPT_ENV},
	    {NULL, 0, NULL, 0},
	};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	asp_strmap_entry *env = calloc((size_t)argc, sizeof *env); /* at most one per arg */
	if (!env)
		return cli_fail_errno(c, ENOMEM, "shell");
	int rc = c->fail_code;
	int opt;
	/* '+': options end at the first ARGV word. */
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		switch (opt) {
		case 'h': rc = cli_finish(c, CLI_EXIT_OK); goto out;
		case OPT_CWD: p.cwd = optarg; break;
		case OPT_ENV:
			if (cli_parse_env(c, optarg, &env[p.env.count]) < 0)
				goto out;
			p.env.count++;
			p.has_env = true;
			break;
		default: goto out;
		}
	}
	p.env.items = env;
	static const char *const login[] = {"/bin/sh", "-c", cli_login_script};
	p.has_argv = true;
	if (optind < argc) {
		p.argv.items = (const char *const *)(argv + optind);
		p.argv.count = (size_t)(argc - optind);
		p.tag = "tty";
	} else {
		p.argv.items = login;
		p.argv.count = 3;
		p.tag = "shell";
	}
	asp_client *client = cli_client(c);
	if (client)
		rc = cli_tty_follow(c, client, &p, "shell");
out:
	free(env);
	return rc;
}
