/*
 * asp-agent: the responder that runs inside the sandbox (docs/design.md,
 * "Parts and where they live", "Concurrency and lifetime").
 */
#include "serve.h"
#ifdef ASP_AGENT_HTTP
#include "listen.h"
#endif

#include "asp/proto.h"
#include "asp/server.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef ASP_VERSION
#define ASP_VERSION "dev"
#endif

static const char usage[] =
    "usage: asp-agent [--stdio]\n"
    "       asp-agent --listen ADDR [--token-file FILE] [--tls-cert FILE --tls-key FILE]\n"
    "       asp-agent --relay unix:PATH [--token-file FILE]\n"
    "       asp-agent --version | --help\n"
    "\n"
    "Serves ASP requests with this machine's files and processes: the responder that runs\n"
    "inside the sandbox (docs/design.md, \"Parts and where they live\").\n"
    "\n"
    "  --stdio            frames on stdin, answers on stdout, logs on stderr (the default);\n"
    "                     exits 0 at the end of stdin once every request in flight is\n"
    "                     answered, and the processes it spawned end with it\n"
    "  --listen ADDR      serve HTTP and WebSocket on ADDR: HOST:PORT, [V6ADDR]:PORT, :PORT\n"
    "                     or unix:/path, port 0 any free one (a build with HTTP support;\n"
    "                     docs/http.md); spawned processes outlive their connection\n"
    "  --token-file FILE  the bearer token clients must send (else $ASP_TOKEN, removed from\n"
    "                     the environment); --listen off loopback refuses to start without\n"
    "                     one; --relay sends it to the daemon\n"
    "  --tls-cert FILE    with --tls-key, serve HTTPS and WSS (PEM)\n"
    "  --tls-key FILE     the certificate's private key (PEM)\n"
    "  --relay unix:PATH  relay frames on stdin and stdout to asp-agent --listen unix:PATH,\n"
    "                     so processes outlive this connection (docs/http.md)\n"
    "  --version          print the version and protocol, then exit\n"
    "  -h, --help         print this help, then exit\n";

/*
 * A handled SIGPIPE makes writes to a vanished client fail with EPIPE instead of killing
 * us; unlike SIG_IGN, a handler is reset to the default in every program we exec.
 */
static void on_sigpipe(int sig)
{
	(void)sig;
}

static int serve_stdio(void *arg)
{
	(void)arg;
	return asp_agent_serve_stdio(STDIN_FILENO, STDOUT_FILENO, ASP_MAX_MESSAGE_DEFAULT);
}

#ifdef ASP_AGENT_HTTP
struct args {
	int argc;
	char **argv;
};

static int serve_listen(void *arg)
{
	struct args *a = arg;
	return asp_agent_listen_main(a->argc, a->argv);
}
#endif

int main(int argc, char **argv)
{
	/* First, so --listen and --relay have it too. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigpipe;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);
#ifdef ASP_AGENT_HTTP
	if (asp_agent_listen_wanted(argc, argv)) {
		/*
		 * --relay runs no command; --listen does (nothing outlives us: docs/design.md,
		 * "Concurrency and lifetime").
		 */
		struct args a = {argc, argv};
		if (!asp_agent_relay_wanted(argc, argv))
			return asp_local_reaper_run(serve_listen, &a);
		return asp_agent_listen_main(argc, argv);
	}
#endif
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--stdio") == 0) {
			continue;
		} else if (strcmp(a, "--version") == 0) {
			printf("asp-agent %s (protocol %d)\n", ASP_VERSION, ASP_PROTOCOL);
			return 0;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage, stdout);
			return 0;
		} else if (strcmp(a, "--listen") == 0 || strncmp(a, "--listen=", 9) == 0) {
			fprintf(stderr, "asp-agent: --listen: not built with HTTP support; use "
			                "--stdio, or rebuild with -Dtransport_http=enabled\n");
			return 2;
		} else {
			fprintf(stderr, "asp-agent: unknown option '%s'\n%s", a, usage);
			return 2;
		}
	}
	/*
	 * Process-wide, so here and not in the backend (which tests and `asp` also run in
	 * their own process): orphans of commands come to us, and a keeper process kills
	 * our cgroup and what carries our marker once we are gone, even by SIGKILL
	 * (docs/decisions.md). This thread reaps the orphans; the serving runs on another.
	 */
	return asp_local_reaper_run(serve_stdio, NULL);
}
