/*
 * Target "frame": the bytes a responder reads on stdin, as asp-agent --stdio reads them
 * (sandbox-agent/serve.c): the fd channel cuts frames, asp_wire_decode decodes, each
 * request is dispatched into the local backend and every answer must decode as a
 * response to its id. Undecodable input ends the stream, as it closes the connection.
 *
 * The backend is the real one with a guard (fuzz_common.c): file ops run for real in a
 * scratch directory, paths that could leave it are refused, exec and spawn are decoded
 * and checked but never run, and proc_* find no process. So a hostile input can neither
 * touch the machine nor make the run depend on it.
 */
#include "fuzz_common.h"

#include "local/local.h"
#include "rpc/channel.h"
#include "wire.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static asp_local *backend;
static asp_local_conn *conn;
static asp_ops ops;
static int devnull = -1;

/* Notifications: spawn never runs, so none may come. */
static bool sink_send(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	(void)frame;
	(void)len;
	fuzz_fail(__FILE__, __LINE__, "a notification without a spawned process");
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_scratch_enter();
	backend = asp_local_new(ASP_MAX_MESSAGE_DEFAULT);
	asp_conn_sink sink = {.send = sink_send};
	conn = backend ? asp_local_connect(backend, &sink) : NULL;
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (!conn || devnull < 0)
		abort();
	fuzz_guarded_ops(&asp_local_conn_ops, &ops);
	asp_ops_complete(&ops);
	return 0;
}

/* Serves one decoded request as asp_local_conn_serve does, with the guarded table. */
static void serve(const asp_msg *m, asp_buf *out)
{
	asp_arena *a = asp_arena_new();
	FUZZ_CHECK(a, "arena");
	out->ref_min = ASP_BUF_REF_MIN; /* large bins by reference, as with a sendv sink */
	asp_local_conn_hold(conn);
	asp_dispatch_in(&ops, conn, m, out, ASP_MAX_MESSAGE_DEFAULT, a);
	asp_local_conn_release(conn);
	out->ref_min = 0;
	FUZZ_CHECK(out->len > 0, "an answer (out of memory is not fuzzed)");
	struct iovec iov[64];
	int n = asp_buf_iov(out, iov, 64);
	FUZZ_CHECK(n > 0, "the answer in pieces");
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	FUZZ_CHECK(total == asp_buf_frame_len(out), "the pieces add up to the frame");
	uint8_t *flat = malloc(total);
	FUZZ_CHECK(flat, "malloc");
	for (int i = 0, at = 0; i < n; at += (int)iov[i].iov_len, i++)
		memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
	fuzz_check_response(flat, total, m->id);
	free(flat);
	asp_arena_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	asp_channel *ch = NULL;
	asp_error err;
	asp_error_clear(&err);
	FUZZ_CHECK(asp_fd_channel_new(fuzz_stream_fd(data, size), devnull, 0, &ch, &err) == ASP_OK,
	           "channel");
	asp_buf out;
	asp_buf_init(&out);
	for (;;) {
		uint8_t *frame = NULL;
		size_t len = 0;
		asp_status st = asp_channel_recv(ch, ASP_MAX_MESSAGE_DEFAULT, &frame, &len, &err);
		if (st || !frame)
			break; /* hostile framing or the end: the connection closes */
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		asp_msg m;
		asp_error_clear(&err);
		st = asp_wire_decode(frame, len, &u, &m, &err);
		if (st == ASP_OK && m.type != ASP_MSG_REQUEST) {
			m.has_id = false;
			st = ASP_E_PROTOCOL_ERROR;
		}
		bool go_on = !st || m.has_id;
		if (st && m.has_id) {
			/* A request with an id but bad params (or too big): its error, and the
			 * connection stays. */
			FUZZ_CHECK(m.type == ASP_MSG_REQUEST &&
			               (st == ASP_E_INVALID_ARGUMENT || st == ASP_E_TOO_LARGE),
			           "only a request keeps its id when it fails to decode");
			FUZZ_CHECK(asp_wire_response_err(&out, m.id, &err) == 0, "error answer");
			fuzz_check_response(out.data, out.len, m.id);
		} else if (!st) {
			serve(&m, &out);
		}
		msgpack_unpacked_destroy(&u);
		free(frame);
		if (!go_on)
			break;
	}
	asp_buf_free(&out);
	asp_channel_free(ch);
	fuzz_scratch_clear();
	return 0;
}
