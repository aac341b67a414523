/*
 * asp exec-server: Codex's exec-server protocol backed by the configured sandbox
 * (docs/harnesses.md, "Codex"). One session on stdin/stdout, one message a line; or, with
 * --listen ws://IP:PORT, one session per WebSocket connection (exec_server_ws.c).
 */
#include "cli.h"
#include "exec_server.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A longer line is refused (and skipped to its end) rather than held in memory. */
#define XS_LINE_MAX (96u << 20)

static void send_stdout(void *user, const char *msg, size_t len)
{
	bool *broken = user;
	if (*broken)
		return;
	/* one write for message and newline where it fits: a line is never split by another */
	char small[8192];
	if (len < sizeof small) {
		memcpy(small, msg, len);
		small[len] = '\n';
		*broken = cli_write_all(STDOUT_FILENO, small, len + 1) != 0;
	} else {
		*broken = cli_write_all(STDOUT_FILENO, msg, len) != 0 ||
		          cli_write_all(STDOUT_FILENO, "\n", 1) != 0;
	}
}

/* Reads stdin line by line into the session until EOF. */
static int serve_stdio(cli *c, asp_client *client, const char *session)
{
	bool broken = false;
	asp_error err;
	xs_session *s = xs_session_new(client, session, send_stdout, &broken, &err);
	if (!s)
		return cli_fail(c, &err, "exec-server");
	size_t cap = 65536, len = 0, scan = 0;
	char *buf = malloc(cap);
	bool skipping = false;
	int rc = CLI_EXIT_OK;
	while (buf && !broken) {
		char *nl = memchr(buf + scan, '\n', len - scan);
		if (nl) {
			size_t n = (size_t)(nl - buf);
			if (skipping)
				skipping = false;
			else if (n > 0 && !(n == 1 && buf[0] == '\r'))
				xs_session_handle(s, buf, n);
			memmove(buf, nl + 1, len - n - 1);
			len -= n + 1;
			scan = 0;
			continue;
		}
		scan = len;
		if (len == cap) {
			if (cap >= XS_LINE_MAX) {
				if (!skipping)
					xs_error(s, json_null(), XS_INVALID_REQUEST,
					         "a message longer than %u bytes was refused",
					         XS_LINE_MAX);
				skipping = true;
				len = scan = 0;
			} else {
				char *grown = realloc(buf, cap * 2);
				if (!grown)
					break;
				buf = grown;
				cap *= 2;
			}
		}
		ssize_t got = read(STDIN_FILENO, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			if (got < 0)
				rc = cli_fail_errno(c, errno, "exec-server: read stdin");
			break;
		}
		len += (size_t)got;
	}
	if (!buf)
		rc = cli_fail_errno(c, ENOMEM, "exec-server");
	free(buf);
	xs_session_free(s);
	return rc;
}

#ifndef ASP_HAVE_LWS
int xs_ws_serve(asp_client *client, const char *session, const char *url, char *why, size_t cap)
{
	(void)client, (void)session;
	snprintf(why, cap, "--listen %s: this asp was built without libwebsockets", url);
	return -1;
}
#endif

int cmd_exec_server(cli *c, int argc, char **argv)
{
	enum { OPT_LISTEN = CLI_OPT_FIRST_PRIVATE, OPT_SESSION };
	static const struct option longopts[] = {CLI_COMMON_LONGOPTS,
	                                         {"listen", required_argument, NULL, OPT_LISTEN},
	                                         {"session", required_argument, NULL, OPT_SESSION},
	                                         {NULL, 0, NULL, 0}};
	const char *listen = NULL, *session_flag = NULL;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		if (opt == OPT_LISTEN) {
			listen = optarg;
			continue;
		}
		if (opt == OPT_SESSION) {
			session_flag = optarg;
			continue;
		}
		return c->fail_code;
	}
	if (optind < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind]);
	if (listen && (!strcmp(listen, "stdio") || !strcmp(listen, "stdio://")))
		listen = NULL;
	if (listen && strncmp(listen, "ws://", 5) != 0)
		return cli_usage(c, "--listen takes ws://IP:PORT or stdio, not '%s'", listen);
	signal(SIGPIPE, SIG_IGN);
	asp_client *client = cli_client(c);
	if (!client)
		return c->fail_code;
	char here[4096];
	const char *session = cli_session_name(session_flag, here, sizeof here);
	if (!listen)
		return serve_stdio(c, client, session);
	char why[512];
	if (xs_ws_serve(client, session, listen, why, sizeof why) != 0) {
		fprintf(stderr, "asp: exec-server: %s\n", why);
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}
