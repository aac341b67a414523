/*
 * Unary calls over libcurl: one POST /v1/rpc per call, from any number of threads at
 * once. Each call takes an easy handle from a pool (so its kept-alive connection is
 * reused) and gives it back; DNS and TLS sessions are shared between them.
 */
#ifndef ASP_HTTP_CLIENT_H
#define ASP_HTTP_CLIENT_H

#include "asp/status.h"
#include "http_headers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct http_client http_client;

typedef struct http_client_cfg {
	const char *base_url;        /* as configured, for messages */
	const char *rpc_url;         /* the endpoint */
	const char *token;           /* NULL: no Authorization header */
	const char *ca_file;         /* NULL: the system's CAs */
	const char *hint;            /* appended to a 401's message: where the token comes from */
	const char *ca_hint;         /* appended to a TLS failure's message */
	const http_headers *headers; /* http.headers for every POST; NULL: none */
} http_client_cfg;

/* Copies every string of `cfg`. */
asp_status http_client_new(const http_client_cfg *cfg, http_client **out, asp_error *err);

/*
 * What bounds a call (docs/faults.md "Deadlines"). Connecting, sending and receiving must
 * each make progress within call_ms; the answer must start within own_ms + call_ms of
 * the end of the send (timeout, naming `op` and the limit), unless `probe` is set: a call
 * with no limit of its own then waits on while the listener answers `probe` (a hello
 * request, POSTed on another connection) every call_ms, and fails with transport_error
 * when it does not. Checked when libcurl reports progress, at least once a second.
 */
typedef struct http_deadline {
	const char *op;
	unsigned call_ms;
	uint64_t own_ms;
	const uint8_t *probe; /* NULL: no probing */
	size_t probe_len;
} http_deadline;

/*
 * POSTs `body` (one msgpack request) and returns the 200 answer's body in *resp
 * (malloc'd, the caller's), within `dl` (NULL: no deadline but the connect's). Errors:
 * unauthorized (401), too_large (413), protocol_error (400, or an answer that is not
 * msgpack or larger than `max_resp`), unauthorized (403: a gateway's refusal), timeout (past dl),
 * transport_error (no connection, TLS, the listener went away or stalled, other statuses, abort).
 */
asp_status http_client_post(http_client *c, const uint8_t *body, size_t len, size_t max_resp,
                            const http_deadline *dl, uint8_t **resp, size_t *rlen, asp_error *err);

/* Makes the calls in flight fail promptly, and later ones at once. Never blocks. */
void http_client_abort(http_client *c);

/* Whether abort was called. */
bool http_client_aborted(http_client *c);

/* No call may be in flight. NULL is a no-op. */
void http_client_free(http_client *c);

#endif
