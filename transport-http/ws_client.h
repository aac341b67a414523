/*
 * A frame channel (rpc/channel.h) over the WebSocket of asp-agent --listen (/v1/ws,
 * subprotocol asp.v1): one binary message per frame, the 4-byte length dropped on the
 * way out and added back by the reader. The RPC engine drives it for the client
 * ("websocket": true); the relay (asp-agent --relay) uses it on a unix socket.
 */
#ifndef ASP_WS_CLIENT_H
#define ASP_WS_CLIENT_H

#include "asp/channel.h"
#include "http_headers.h"

#include <stdbool.h>

typedef struct ws_target {
	const char *address; /* host name or address, or "+/path" for a unix socket */
	int port;
	bool tls;
	const char *ca_file;         /* NULL: the system's CAs */
	const char *host_header;     /* "host:port" */
	const char *path;            /* ".../v1/ws" */
	const char *token;           /* NULL: no Authorization header */
	const char *url;             /* how messages name the server */
	const char *hint;            /* appended to a 401's message (where the token comes from) */
	const http_headers *headers; /* http.headers for the upgrade; NULL: none */
} ws_target;

/*
 * Connects (waits up to `timeout_ms`) and returns the channel. Errors: unauthorized for a
 * 401 or 403 (a gateway's refusal); transport_error naming the URL for a refused connection, a TLS
 * failure, any other answer than the upgrade, or the timeout. Every string of `t` is copied.
 */
asp_status ws_channel_open(const ws_target *t, unsigned timeout_ms, asp_channel **out,
                           asp_error *err);

#endif
