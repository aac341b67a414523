/*
 * http.headers (docs/design.md, ".asp.json"): the extra headers every POST and the
 * WebSocket upgrade carry, for a gateway in front of asp-agent --listen. Read once when
 * the transport opens: a value from its environment variable, checked for what a header
 * cannot hold.
 */
#ifndef ASP_HTTP_HEADERS_H
#define ASP_HTTP_HEADERS_H

#include "asp/config.h"
#include "asp/status.h"

#include <stddef.h>

/* "Name: value" lines, malloc'd; the values may be secrets (wiped when freed). */
typedef struct http_headers {
	char **lines;
	size_t count;
	char hint[600]; /* for a refusal (401, 403): what to check in the config */
} http_headers;

/*
 * The lines of cfg->http.headers. Errors: not_found (a variable unset), invalid_argument
 * (a variable's value holding a control character), naming the header and the config.
 */
asp_status http_headers_load(const asp_config_view *cfg, http_headers *out, asp_error *err);
/* A copy of `src`'s lines into `dst`; false when out of memory (dst then holds nothing). */
bool http_headers_copy(const http_headers *src, http_headers *dst);
void http_headers_free(http_headers *h);
/* Zeroes a malloc'd secret and frees it; NULL: no-op. */
void http_secret_free(char *s);

#endif
