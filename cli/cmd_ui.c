/*
 * asp ui: a page on loopback for the sandbox the config names (docs/design.md, "The
 * page"): its files, processes, changes and a terminal. The sockets are ui_server.c's.
 */
#include "cli.h"
#include "ui.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ADDR:PORT, [ADDR]:PORT or PORT into `l`; only a loopback address. -1 after the usage. */
static int parse_listen(cli *c, const char *arg, ui_listen *l, char *host, size_t cap)
{
	const char *colon = strrchr(arg, ':');
	const char *port = colon ? colon + 1 : arg;
	size_t hl = colon ? (size_t)(colon - arg) : 0;
	const char *h = arg;
	if (hl >= 2 && arg[0] == '[' && arg[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	char *end;
	long n = strtol(port, &end, 10);
	if (!*port || *end || n < 0 || n > 65535 || hl >= cap)
		return cli_usage(
		    c, "--listen takes 127.0.0.1:PORT (PORT 0: any free one), not '%s'", arg);
	memcpy(host, colon ? h : "127.0.0.1", colon ? hl : 10);
	host[colon ? hl : 9] = '\0';
	unsigned char a[16];
	bool loop = inet_pton(AF_INET, host, a) == 1 ? a[0] == 127
	            : inet_pton(AF_INET6, host, a) == 1
	                ? !memcmp(a, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16)
	                : false;
	if (!loop)
		return cli_usage(
		    c,
		    "--listen %s: only a loopback address (127.0.0.1, [::1]) is served: "
		    "the page acts in the sandbox as you",
		    arg);
	l->host = host;
	l->port = (int)n;
	return 0;
}

#ifndef ASP_HAVE_LWS
int ui_serve(asp_client *client, const ui_listen *l, char *why, size_t cap)
{
	(void)client, (void)l;
	snprintf(why, cap, "this asp was built without libwebsockets, which the page needs");
	return -1;
}
#endif

int cmd_ui(cli *c, int argc, char **argv)
{
	enum { OPT_LISTEN = CLI_OPT_FIRST_PRIVATE };
	static const struct option longopts[] = {CLI_COMMON_LONGOPTS,
	                                         {"listen", required_argument, NULL, OPT_LISTEN},
	                                         {NULL, 0, NULL, 0}};
	char host[64];
	ui_listen l = {.host = "127.0.0.1", .port = 0};
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		if (opt != OPT_LISTEN)
			return c->fail_code;
		if (parse_listen(c, optarg, &l, host, sizeof host) != 0)
			return c->fail_code;
	}
	if (optind < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind]);
	uint8_t r[32];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		return cli_fail_errno(c, errno, "ui: a random token");
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(l.token + 2 * i, 3, "%02x", r[i]);
	asp_client *client = cli_client(c);
	if (!client)
		return c->fail_code;
	char why[512];
	if (ui_serve(client, &l, why, sizeof why) != 0) {
		fprintf(stderr, "asp: ui: %s\n", why);
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}
