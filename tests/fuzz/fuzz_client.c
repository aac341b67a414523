/*
 * Target "client": the bytes a client reads from a responder, handled as the RPC engine's
 * reader does (core/src/rpc/rpc.c: reader_main, handle_other, finish, notify): the fd
 * channel cuts frames, asp_wire_decode decodes, a response's result is decoded with its
 * op's descriptor (asp_wire_result_decode) and a notification's params with theirs, then
 * routed to the followers of spawned processes (proc_route.c, proc_sub.c).
 *
 * The engine's thread and id bookkeeping are left out so that a run is deterministic:
 * the stream answers a spawn first, then a proc_attach of process 7 (the replay before
 * the answer, as a responder sends it), then any responses, the op of each picked by
 * its id. Checks: a decoded result encodes and decodes again, followers never see the
 * same bytes twice, and nothing reaches them after their last event.
 */
#include "fuzz_common.h"

#include "rpc/channel.h"
#include "rpc/proc_route.h"
#include "wire.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int devnull = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0)
		abort();
	return 0;
}

/* What one follower saw; its callbacks check the promises of asp/proc.h. */
typedef struct follower {
	uint64_t next[2]; /* first byte not delivered yet, per stream (saturating) */
	bool ended;
} follower;

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	follower *f = user;
	FUZZ_CHECK(!f->ended, "output after the last event");
	FUZZ_CHECK(stream == ASP_STREAM_STDOUT || stream == ASP_STREAM_STDERR, "a known stream");
	FUZZ_CHECK(len > 0 && data, "a chunk has bytes");
	FUZZ_CHECK(offset >= f->next[stream], "bytes delivered twice");
	f->next[stream] = offset > UINT64_MAX - len ? UINT64_MAX : offset + len;
	volatile uint8_t sum = 0; /* the bytes must be readable */
	for (size_t i = 0; i < len; i++)
		sum ^= data[i];
	(void)sum;
}

static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	follower *f = user;
	FUZZ_CHECK(!f->ended, "two last events");
	FUZZ_CHECK(!ev->signal || strlen(ev->signal) < 4096, "a readable signal name");
	f->ended = true;
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	follower *f = user;
	FUZZ_CHECK(!f->ended, "two last events");
	FUZZ_CHECK(err->code != ASP_OK, "lost says why");
	f->ended = true;
}

static const asp_proc_callbacks callbacks = {on_output, on_exit_cb, on_lost};

typedef struct reader {
	asp_channel *ch;
	asp_proc_routes *routes;
	asp_arena *notify_arena;
	bool broken; /* the connection is unusable: rpc_die */
} reader;

/* A decoded result must survive a trip through our own encoder and decoder. */
static void check_roundtrip(asp_op_id op, uint32_t id, const void *result)
{
	const asp_record_desc *d = asp_op_descs[op].result;
	asp_buf b;
	asp_buf_init(&b);
	FUZZ_CHECK(asp_wire_response_ok(&b, id, d, result) == 0, "encode a decoded result");
	fuzz_check_response(b.data, b.len, id);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	asp_error err;
	FUZZ_CHECK(asp_wire_decode(b.data + ASP_FRAME_HEADER, b.len - ASP_FRAME_HEADER, &u, &m,
	                           &err) == ASP_OK,
	           "decode our encoding");
	asp_arena *a = asp_arena_new();
	void *again = a ? asp_arena_alloc(a, d->size) : NULL;
	FUZZ_CHECK(again, "arena");
	FUZZ_CHECK(asp_wire_result_decode(op, &m, again, a, &err) == ASP_OK,
	           "a result we encoded decodes");
	asp_arena_free(a);
	msgpack_unpacked_destroy(&u);
	asp_buf_free(&b);
}

/* notify(): the params decoded with the notification's descriptor, then routed. */
static void notify(reader *r, const asp_msg *m)
{
	for (int n = 0; n < ASP_NOTICE_COUNT; n++) {
		const asp_notice_desc *d = &asp_notice_descs[n];
		if (d->name_len != m->method_len || memcmp(d->name, m->method, d->name_len))
			continue;
		void *p = asp_arena_alloc(r->notify_arena, d->params->size);
		if (p &&
		    asp_record_decode(d->params, m->params, p, r->notify_arena, NULL) == ASP_OK)
			asp_proc_routes_route(r->routes, (asp_notice_id)n, p);
		asp_arena_reset(r->notify_arena);
		return;
	}
}

/*
 * Reads frames until a response comes: it is decoded as the answer to `op` (`want`
 * given) or, with `op` negative, to the op its id picks. Notifications before it are
 * routed. false at the end of the stream or when the connection broke.
 */
static bool read_until_response(reader *r, int op, void *want, asp_arena *a, asp_status *st)
{
	while (!r->broken) {
		uint8_t *frame = NULL;
		size_t len = 0;
		asp_error err;
		asp_error_clear(&err);
		if (asp_channel_recv(r->ch, ASP_MAX_MESSAGE_DEFAULT, &frame, &len, &err) ||
		    !frame) {
			r->broken = true;
			return false;
		}
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		asp_msg m;
		bool answered = false;
		if (asp_wire_decode(frame, len, &u, &m, &err) != ASP_OK ||
		    m.type == ASP_MSG_REQUEST) {
			r->broken = true; /* garbage, or a request where a response belongs */
		} else if (m.type == ASP_MSG_NOTIFY) {
			notify(r, &m);
		} else {
			asp_op_id o = op >= 0 ? (asp_op_id)op : (asp_op_id)(m.id % ASP_OP_COUNT);
			const asp_record_desc *d = asp_op_descs[o].result;
			void *res = want ? want : asp_arena_alloc(a, d->size);
			FUZZ_CHECK(res, "arena");
			*st = asp_wire_result_decode(o, &m, res, a, &err);
			FUZZ_CHECK(*st == ASP_OK || err.code == *st, "an error says what");
			FUZZ_CHECK(m.error || *st == ASP_OK || *st == ASP_E_PROTOCOL_ERROR,
			           "a result we cannot read is the responder's protocol error");
			if (*st == ASP_OK)
				check_roundtrip(o, m.id, res);
			answered = true;
		}
		msgpack_unpacked_destroy(&u);
		free(frame);
		if (answered)
			return true;
	}
	return false;
}

/* The asp_proc_call_fn of the follow protocol: the answer comes from the stream. */
typedef struct call_ctx {
	reader *r;
} call_ctx;

static asp_status call_from_stream(void *ctx, asp_op_id op, const void *params, void *result,
                                   asp_arena *a, asp_error *err)
{
	(void)params;
	reader *r = ((call_ctx *)ctx)->r;
	asp_status st = ASP_OK;
	if (!read_until_response(r, (int)op, result, a, &st))
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "the stream ended");
	if (st)
		asp_error_set(err, st, NULL, "the answer was an error");
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	reader r = {0};
	asp_error err;
	asp_error_clear(&err);
	FUZZ_CHECK(asp_fd_channel_new(fuzz_stream_fd(data, size), devnull, 0, &r.ch, &err) ==
	               ASP_OK,
	           "channel");
	r.routes = asp_proc_routes_new();
	r.notify_arena = asp_arena_new();
	asp_arena *a = asp_arena_new();
	FUZZ_CHECK(r.routes && r.notify_arena && a, "memory");

	/* The attach asks for stdout from byte 3: nothing before it may be delivered. */
	follower fs = {{0, 0}, false}, fa = {{3, 0}, false};
	asp_proc_sub *spawned = asp_proc_sub_new(&callbacks, &fs);
	asp_proc_sub *attached = asp_proc_sub_new(&callbacks, &fa);
	FUZZ_CHECK(spawned && attached, "memory");
	call_ctx cc = {&r};

	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = "true";
	asp_spawn_result sr = {0};
	asp_proc_routes_call(r.routes, call_from_stream, &cc, ASP_OP_SPAWN, &sp, &sr, a, spawned,
	                     &err);

	asp_proc_attach_params ap = {.proc = 7, .stdout_offset = 3, .stderr_offset = 0};
	asp_proc_attach_result ar;
	asp_error_clear(&err);
	asp_proc_routes_call(r.routes, call_from_stream, &cc, ASP_OP_PROC_ATTACH, &ap, &ar, a,
	                     attached, &err);

	asp_status st;
	while (read_until_response(&r, -1, NULL, a, &st))
		asp_arena_reset(a);

	asp_error_set(&err, ASP_E_TRANSPORT_ERROR, NULL, "the responder closed the connection");
	asp_proc_routes_lost(r.routes, &err);
	asp_proc_sub_unref(spawned);
	asp_proc_sub_unref(attached);
	asp_proc_routes_free(r.routes);
	asp_arena_free(r.notify_arena);
	asp_arena_free(a);
	asp_channel_free(r.ch);
	return 0;
}
