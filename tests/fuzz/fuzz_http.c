/*
 * Target "http": what the HTTP listener does with bytes a client sent (transport-http/),
 * picked by the first input byte:
 *   0  a POST /v1/rpc body through srv_work.c's serve(): 400 for what does not decode
 *      as a request, else 200 with a response to its id;
 *   1  WebSocket fragments through ws_server.c's on_receive() (reassembly, the binary
 *      and size checks), each whole message then through serve() as on /v1/ws: an
 *      undecodable one closes with 1002 without writing, others are answered;
 *   2  an Authorization header through http_token_check;
 *   3  a URL through http_addr_parse_url, 4 a listen address through
 *      http_addr_parse_listen.
 * lws (the HTTP and WebSocket parsers themselves, not ours) is left out: the two source
 * files are compiled into this target with the lws calls of the receive path replaced
 * by the fragment description in the input, and with the requests dispatched into the
 * guarded backend of fuzz_common.c instead of asp_local_conn_ops.
 */
#include "srv.h"

#include "edge.h"
#include "local/local.h"

#include "fuzz_common.h"
#include "http_addr.h"
#include "http_auth.h"

#include <stdlib.h>
#include <string.h>

/* ---- ws_server.c, receiving from fragments the input describes -------------------- */

static struct {
	bool binary, final;
	size_t rest;
	int close_code;
	uint8_t *msg; /* the message on_receive handed over, and its length */
	size_t len;
} fz;

static bool fz_submit(srv_conn *c, uint8_t *msg, size_t len, asp_request *req)
{
	(void)c;
	FUZZ_CHECK(!req, "a WebSocket message goes undecoded");
	FUZZ_CHECK(!fz.msg, "one message at a time");
	fz.msg = msg;
	fz.len = len;
	return true;
}

#define lws_frame_is_binary(wsi)          ((void)(wsi), fz.binary)
#define lws_remaining_packet_payload(wsi) ((void)(wsi), fz.rest)
#define lws_is_final_fragment(wsi)        ((void)(wsi), fz.final)
#define lws_close_reason(wsi, code, r, n)                                                          \
	((void)(wsi), (void)(r), (void)(n), fz.close_code = (int)(code))
#define srv_submit fz_submit
#include "ws_server.c"
#undef lws_frame_is_binary
#undef lws_remaining_packet_payload
#undef lws_is_final_fragment
#undef lws_close_reason
#undef srv_submit

/* ---- srv_work.c, serving with the guarded backend --------------------------------- */

static asp_ops guarded;
static srv server;
/* Small, so that on_receive's size checks are in reach of small inputs. */
#define FUZZ_MAX_MESSAGE 4096
static asp_serve_result fz_local_serve(asp_local_conn *c, asp_request *r, asp_reply *b);
#define asp_local_serve fz_local_serve
#include "srv_work.c"
#undef asp_local_serve

/*
 * asp_local_serve with the guarded table: a WebSocket's answer goes through its sink
 * (with notifications held meanwhile), a POST's (the sink-less binding) stays in `b`.
 */
static asp_serve_result fz_local_serve(asp_local_conn *c, asp_request *r, asp_reply *b)
{
	asp_buf *out = asp_reply_buf(b);
	void *ws = asp_local_conn_ctx(c);
	asp_error e;
	if (asp_request_decode(r, &e)) {
		if (asp_wire_response_err(out, asp_request_id(r), &e) < 0)
			return ASP_SERVE_FAILED;
	} else {
		if (ws)
			asp_local_conn_hold(c);
		asp_dispatch(&guarded, c, asp_request_msg(r), out, server.max_message);
		if (ws)
			asp_local_conn_release(c);
		if (out->len == 0)
			return ASP_SERVE_FAILED;
	}
	if (!ws)
		return ASP_SERVE_REPLY;
	return sink_send(ws, out->data, out->len) ? ASP_SERVE_SENT : ASP_SERVE_GONE;
}

/* What http_server.c would set as the service thread's HTTP writer: answers stay queued. */
static void http_kick(srv_conn *c)
{
	(void)c;
}

/* ---- the target ------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_scratch_enter();
	server.max_message = FUZZ_MAX_MESSAGE;
	server.http_kick = http_kick;
	server.backend = asp_local_new(0);
	if (!server.backend || srv_work_init(&server) || srv_backend_init(&server))
		abort();
	fuzz_guarded_ops(&asp_local_conn_ops, &guarded); /* WebSockets and POSTs alike */
	asp_ops_complete(&guarded);
	return 0;
}

static srv_conn *conn_new(bool ws)
{
	srv_conn *c = calloc(1, sizeof *c);
	FUZZ_CHECK(c, "calloc");
	c->s = &server;
	c->ws = ws;
	atomic_init(&c->refs, 1);
	pthread_cond_init(&c->out_cv, NULL);
	if (ws)
		FUZZ_CHECK(srv_conn_bind(c), "bind");
	return c;
}

/* serve() on one message; `c` gets its answers queued (WS) or returned (HTTP). */
static srv_out *serve_one(srv_conn *c, uint8_t *msg, size_t len)
{
	srv_job j = {.c = c, .msg = msg, .len = len};
	asp_reply *out = asp_reply_new();
	FUZZ_CHECK(out, "asp_reply_new");
	srv_out *o = serve(&server, &j, out); /* takes the message */
	asp_reply_free(out);
	return o;
}

/* The request id of a message that decodes that far, or -1. */
static int64_t request_id(const uint8_t *msg, size_t len)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	asp_error err;
	asp_status st = asp_wire_decode(msg, len, &u, &m, &err);
	int64_t id = (st == ASP_OK || m.has_id) && m.type == ASP_MSG_REQUEST ? (int64_t)m.id : -1;
	msgpack_unpacked_destroy(&u);
	return id;
}

/* An answer body (no frame header) must decode as a response to `id`. */
static void check_body(const uint8_t *body, size_t len, int64_t id)
{
	FUZZ_CHECK(id >= 0, "only requests are answered");
	uint8_t *frame = malloc(len + 4);
	FUZZ_CHECK(frame, "malloc");
	frame[0] = (uint8_t)(len >> 24), frame[1] = (uint8_t)(len >> 16);
	frame[2] = (uint8_t)(len >> 8), frame[3] = (uint8_t)len;
	memcpy(frame + 4, body, len);
	fuzz_check_response(frame, len + 4, (uint32_t)id);
	free(frame);
}

static void post(const uint8_t *data, size_t size)
{
	srv_conn *c = conn_new(false);
	uint8_t *msg = malloc(size ? size : 1);
	FUZZ_CHECK(msg, "malloc");
	memcpy(msg, data, size);
	int64_t id = request_id(data, size);
	srv_out *o = serve_one(c, msg, size);
	FUZZ_CHECK(o, "every POST gets an answer");
	if (id < 0) {
		FUZZ_CHECK(o->status == 400, "an undecodable body is 400");
	} else {
		FUZZ_CHECK(o->status == 200, "a request is 200, errors included");
		check_body(o->data + o->off, o->len - o->off, id);
	}
	out_free(o);
	srv_conn_unref(c);
}

/*
 * The input after the mode byte: fragments, each [flags][len] then len bytes; flags bit
 * 0 binary, bit 1 final, bits 2-7 how many callbacks lws cuts the fragment into.
 */
static void websocket(const uint8_t *data, size_t size)
{
	srv_conn *c = conn_new(true);
	memset(&fz, 0, sizeof fz);
	size_t at = 0;
	bool closed = false;
	while (!closed && size - at >= 2) {
		uint8_t flags = data[at];
		size_t flen = data[at + 1];
		at += 2;
		if (flen > size - at)
			flen = size - at;
		size_t pieces = (size_t)(flags >> 2) + 1, done = 0;
		fz.binary = flags & 1;
		fz.final = flags & 2;
		/* lws calls back once per piece; an empty fragment once too. */
		for (size_t p = 0; p < pieces && !closed && (p == 0 || done < flen); p++) {
			size_t take = p + 1 == pieces ? flen - done : (flen - done) / 2;
			fz.rest = flen - done - take;
			if (on_receive(&server, NULL, c, data + at + done, take) < 0)
				closed = true;
			done += take;
		}
		at += flen;
		if (closed)
			FUZZ_CHECK(fz.close_code, "a refused message says why");
		if (fz.msg) {
			FUZZ_CHECK(fz.len <= FUZZ_MAX_MESSAGE, "messages stay within max_message");
			int64_t id = request_id(fz.msg, fz.len);
			uint8_t *msg = fz.msg;
			size_t len = fz.len;
			fz.msg = NULL;
			FUZZ_CHECK(!serve_one(c, msg, len), "WebSocket answers are queued");
			if (id < 0) {
				FUZZ_CHECK(c->close_code == LWS_CLOSE_STATUS_PROTOCOL_ERR,
				           "an undecodable message closes with 1002");
				FUZZ_CHECK(!c->out_head, "and writes nothing");
				closed = true;
			}
			for (srv_out *o; (o = srv_out_peek(c));) {
				check_body(o->data + o->off, o->len - o->off, id);
				srv_out_pop(c);
			}
		}
	}
	srv_conn_unref(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0] % 5;
	data++, size--;
	char why[256];
	switch (mode) {
	case 0: post(data, size); break;
	case 1: websocket(data, size); break;
	case 2: {
		static const char token[] = "s3cret-token";
		bool ok = http_token_check(token, (const char *)data, size);
		bool exact = size >= 7 + sizeof token - 1 &&
		             strncasecmp((const char *)data, "bearer ", 7) == 0;
		if (ok)
			FUZZ_CHECK(exact && memcmp(data + 7, token, sizeof token - 1) == 0,
			           "only the token passes");
		break;
	}
	case 3:
	case 4: {
		char *s = malloc(size + 1);
		FUZZ_CHECK(s, "malloc");
		memcpy(s, data, size);
		s[size] = '\0';
		http_addr a;
		int rc = mode == 3 ? http_addr_parse_url(s, &a, why, sizeof why)
		                   : http_addr_parse_listen(s, &a, why, sizeof why);
		if (rc == 0)
			FUZZ_CHECK(memchr(a.host, 0, sizeof a.host) &&
			               memchr(a.path, 0, sizeof a.path) &&
			               memchr(a.prefix, 0, sizeof a.prefix),
			           "terminated fields");
		else
			FUZZ_CHECK(memchr(why, 0, sizeof why), "a terminated reason");
		free(s);
		break;
	}
	}
	fuzz_scratch_clear();
	return 0;
}
