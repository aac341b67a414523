/*
 * asp-agent --listen and --relay: their options, handed to transport-http (asp_http.h).
 * Only in the build with HTTP support; the static stdio-only agent never sees this.
 */
#include "listen.h"

#include "asp_http.h"

#include <stdio.h>
#include <string.h>

/* The value of "--name VALUE" or "--name=VALUE" at argv[*i]; NULL if argv[*i] is not it. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

int asp_agent_listen_main(int argc, char **argv)
{
	asp_http_listen_opts o = {0};
	const char *relay = NULL;
	for (int i = 1; i < argc; i++) {
		bool missing = false;
		const char *v;
		if ((v = opt_value(argc, argv, &i, "--listen", &missing)))
			o.addr = v;
		else if ((v = opt_value(argc, argv, &i, "--relay", &missing)))
			relay = v;
		else if ((v = opt_value(argc, argv, &i, "--token-file", &missing)))
			o.token_file = v;
		else if ((v = opt_value(argc, argv, &i, "--tls-cert", &missing)))
			o.tls_cert = v;
		else if ((v = opt_value(argc, argv, &i, "--tls-key", &missing)))
			o.tls_key = v;
		if (missing) {
			fprintf(stderr, "asp-agent: %s needs a value\n", argv[i]);
			return 2;
		}
		if (!v) {
			fprintf(stderr,
			        "asp-agent: unknown option '%s' with --listen/--relay (see "
			        "--help)\n",
			        argv[i]);
			return 2;
		}
	}
	if (!o.addr == !relay) {
		fprintf(stderr, "asp-agent: give one of --listen ADDR and --relay unix:PATH\n");
		return 2;
	}
	if (relay) {
		if (o.tls_cert || o.tls_key) {
			fprintf(stderr, "asp-agent: --tls-cert/--tls-key are for --listen\n");
			return 2;
		}
		return asp_http_relay(relay, o.token_file);
	}
	return asp_http_listen(&o);
}

bool asp_agent_listen_wanted(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "--listen", 8) == 0 || strncmp(argv[i], "--relay", 7) == 0)
			return true;
	return false;
}

bool asp_agent_relay_wanted(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "--relay", 7) == 0)
			return true;
	return false;
}
