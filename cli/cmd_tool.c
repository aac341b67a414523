/* asp tool: one call of the tools layer (asp/tools.h) for scripts. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_tool(cli *c, int argc, char **argv)
{
	enum { OPT_VOCABULARY = CLI_OPT_FIRST_PRIVATE, OPT_SESSION };
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"vocabulary", required_argument, NULL, OPT_VOCABULARY},
	    {"session", required_argument, NULL, OPT_SESSION},
	    {NULL, 0, NULL, 0}};
	const char *vocab = NULL, *session = NULL;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		if (opt == OPT_VOCABULARY) {
			vocab = optarg;
			continue;
		}
		if (opt == OPT_SESSION) {
			session = optarg;
			continue;
		}
		return c->fail_code;
	}
	size_t n;
	const asp_tool_desc *d = asp_tools_vocab_list(vocab, &n);
	if (!d)
		return cli_usage(c, "--vocabulary: no vocabulary is called '%s' (claude, opencode)",
		                 vocab);
	if (optind >= argc) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", d[i].name);
		return cli_finish(c, CLI_EXIT_OK);
	}
	const char *name = argv[optind];
	size_t i = 0;
	while (i < n && strcmp(d[i].name, name))
		i++;
	if (i == n)
		return cli_usage(c, "no tool is called '%s' (asp tool lists them)", name);
	if (optind + 2 < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind + 2]);
	char *args = NULL;
	if (optind + 1 < argc && strcmp(argv[optind + 1], "-") != 0) {
		args = strdup(argv[optind + 1]);
	} else if (optind + 1 < argc) {
		uint8_t *data;
		size_t len;
		if (cli_read_all(STDIN_FILENO, &data, &len) != 0)
			return cli_fail_errno(c, errno, "read stdin");
		args = realloc(data, len + 1);
		if (args)
			args[len] = '\0';
		else
			free(data);
	} else {
		args = strdup("{}");
	}
	if (!args)
		return cli_fail_errno(c, ENOMEM, "tool");
	asp_client *client = cli_client(c);
	if (!client) {
		free(args);
		return c->fail_code;
	}
	asp_tools *t;
	asp_error err;
	if (asp_tools_new(client, &t, &err) != ASP_OK) {
		free(args);
		return cli_fail(c, &err, "tool %s", name);
	}
	char here[4096];
	const char *name_of_session = cli_session_name(session, here, sizeof here);
	if (name_of_session && !asp_tools_set_session(t, name_of_session)) {
		free(args);
		asp_tools_free(t);
		return cli_fail_errno(c, ENOMEM, "tool %s", name);
	}
	char *text = NULL;
	bool is_error = true;
	asp_status st = asp_tools_call_vocab(t, vocab, name, args, &text, &is_error, NULL);
	free(args);
	int rc = CLI_EXIT_OK;
	if (st == ASP_E_INVALID_ARGUMENT) {
		rc = cli_usage(c, "ARGS must be a JSON object, e.g. '{\"file_path\": \"/w/a.c\"}'");
	} else if (!text) {
		rc = cli_fail_errno(c, ENOMEM, "tool %s", name);
	} else {
		fputs(text, stdout);
		if (!*text || text[strlen(text) - 1] != '\n')
			fputc('\n', stdout);
		rc = cli_finish(c, is_error ? CLI_EXIT_FAIL : CLI_EXIT_OK);
	}
	free(text);
	asp_tools_free(t);
	return rc;
}
