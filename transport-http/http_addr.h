/* Addresses: a listen address ("host:port", "unix:/path") and a client URL, parsed. */
#ifndef ASP_HTTP_ADDR_H
#define ASP_HTTP_ADDR_H

#include <stdbool.h>
#include <stddef.h>

typedef struct http_addr {
	bool unix_sock; /* path holds the socket; host and port are unused */
	bool tls;       /* URL: https */
	char host[256]; /* without [] around an IPv6 literal; "" = every interface */
	int port;
	char path[108];   /* unix socket path (sun_path's size) */
	char prefix[512]; /* URL: the path before /v1/..., without a trailing '/' */
} http_addr;

/*
 * "host:port", "[v6addr]:port", ":port" (every interface) or "unix:/path". Port 0 asks
 * for any free port. 0, or -1 with a reason in `why`.
 */
int http_addr_parse_listen(const char *s, http_addr *a, char *why, size_t cap);

/*
 * "http://host[:port][/prefix]" or https, read by libcurl's URL API (http_url.c, in the
 * client library only). 0, or -1 with a reason in `why`.
 */
int http_addr_parse_url(const char *url, http_addr *a, char *why, size_t cap);

/*
 * Resolves a listen address's host to one numeric address (`numeric`, "" for every
 * interface) and says whether it is a loopback address; a unix socket counts as one
 * (its file mode guards it). 0, or -1 with a reason.
 */
int http_addr_resolve(const http_addr *a, char *numeric, size_t ncap, bool *loopback, bool *v6,
                      char *why, size_t cap);

#endif
