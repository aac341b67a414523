/* The listener's bearer token: where it comes from and how a request's is checked. */
#ifndef ASP_HTTP_AUTH_H
#define ASP_HTTP_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The token from `file` when given (one trailing newline stripped), else from
 * $ASP_TOKEN, which is then removed from the environment so the commands the agent
 * runs do not inherit it. *out is malloc'd, or NULL when there is no token. 0, or -1
 * with a reason in `why` (unreadable file, empty token, a NUL or a control byte in it).
 */
int http_token_load(const char *file, char **out, char *why, size_t cap);

/*
 * Whether an Authorization header value (`hdr`, `hlen` bytes, may be NULL) is
 * "Bearer TOKEN" with the expected token. The comparison takes the same time whatever
 * the header holds, so it leaks neither the token nor how much of it matched.
 */
bool http_token_check(const char *token, const char *hdr, size_t hlen);

#endif
