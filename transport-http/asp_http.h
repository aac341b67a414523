/*
 * The HTTP/WebSocket listener and the relay, for asp-agent (docs/design.md,
 * "Wire format", "Concurrency and lifetime"). Built only with the transport_http option;
 * nothing here is part of libasp.
 */
#ifndef ASP_HTTP_H
#define ASP_HTTP_H

#include <stddef.h>

typedef struct asp_http_listen_opts {
	const char *addr;       /* "host:port" (port 0: any free one) or "unix:/path" */
	const char *token_file; /* NULL: the token is $ASP_TOKEN, or there is none */
	const char *tls_cert;   /* PEM files; both or neither */
	const char *tls_key;
	size_t max_message; /* 0: ASP_MAX_MESSAGE_DEFAULT */
} asp_http_listen_opts;

/*
 * Serves POST /v1/rpc, GET /v1/health and GET /v1/ws on `o->addr` until SIGTERM or
 * SIGINT: then it stops accepting, finishes the answers in flight (a second signal
 * stops waiting), ends spawned processes and returns. Prints "asp-agent: listening on
 * URL" to stderr once it accepts connections. Returns the process exit code: 0 after a
 * signal, 2 for a bad option (message on stderr), 1 for other failures.
 */
int asp_http_listen(const asp_http_listen_opts *o);

/*
 * asp-agent --relay unix:PATH: relays stdio frames between stdin/stdout and the
 * WebSocket of the `asp-agent --listen unix:PATH` daemon, one message per frame. On EOF
 * of stdin it waits for the answers in flight, then returns 0. The token, if the daemon
 * wants one, comes as for asp_http_listen.
 */
int asp_http_relay(const char *addr, const char *token_file);

#endif
