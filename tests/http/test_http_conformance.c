/*
 * The conformance table over the http transport against a real `asp-agent --listen
 * 127.0.0.1:0`: suite "http" (one POST /v1/rpc per call), suite "websocket" (the RPC
 * engine over /v1/ws, with streaming, and a second connection for the reattach case) and
 * suite "http-both" (the default: POST, and a WebSocket for the streams).
 */
#include "cu_run.h"
#include "asp/transport.h"
#include "conformance.h"
#include "listener.h"

#include <CUnit/Basic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct backend {
	asp_config_view view;
	const asp_transport *t;
	const asp_ops *ops;
	void *self;
	conf_streaming st;
} backend;

static int open_backend(backend *b, const char *url, asp_http_websocket websocket)
{
	memset(b, 0, sizeof *b);
	b->view.transport = ASP_TRANSPORT_HTTP;
	b->view.http.url = url;
	b->view.http.websocket = websocket;
	b->t = asp_transport_find(ASP_TRANSPORT_HTTP);
	asp_error err;
	if (!b->t || b->t->open(&b->view, &b->ops, &b->self, &err)) {
		fprintf(stderr, "http transport: %s\n", b->t ? err.message : "not built");
		return -1;
	}
	return 0;
}

/* ---- streaming through the transport's slots, and a peer connection -------------- */

static asp_status follow(backend *b, void *self, asp_op_id op, const void *params, void *result,
                         const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	asp_proc_sub *sub = asp_proc_sub_new(cb, user);
	asp_arena *a = asp_arena_new();
	asp_status st = !sub || !a ? asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory")
	                           : b->t->subscribe(self, op, params, result, a, sub, err);
	asp_proc_sub_unref(sub);
	asp_arena_free(a);
	return st;
}

static asp_status st_spawn(void *ctx, void *self, const asp_spawn_params *p,
                           const asp_proc_callbacks *cb, void *user, uint64_t *proc, asp_error *err)
{
	asp_spawn_result r = {0};
	asp_status st = follow(ctx, self, ASP_OP_SPAWN, p, &r, cb, user, err);
	*proc = st == ASP_OK ? r.proc : 0;
	return st;
}

static asp_status st_attach(void *ctx, void *self, const asp_proc_attach_params *p,
                            const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	asp_proc_attach_result r;
	return follow(ctx, self, ASP_OP_PROC_ATTACH, p, &r, cb, user, err);
}

static void st_detach(void *ctx, void *self, uint64_t proc)
{
	backend *b = ctx;
	b->t->unsubscribe(self, proc);
}

static void *st_peer_open(void *ctx)
{
	backend *b = ctx;
	const asp_ops *ops;
	void *self;
	asp_error err;
	if (b->t->open(&b->view, &ops, &self, &err)) {
		fprintf(stderr, "second connection: %s\n", err.message);
		return NULL;
	}
	return self;
}

static void st_peer_close(void *ctx, void *peer)
{
	backend *b = ctx;
	if (peer)
		b->t->close(peer);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	listener l;
	if (listener_start(&l, "127.0.0.1:0", NULL, NULL) < 0)
		return 1;
	backend http, ws, both;
	if (open_backend(&http, l.url, ASP_HTTP_WS_NEVER) < 0 ||
	    open_backend(&ws, l.url, ASP_HTTP_WS_ONLY) < 0 ||
	    open_backend(&both, l.url, ASP_HTTP_WS_BOTH) < 0) {
		listener_stop(&l, SIGKILL, 1000);
		return 1;
	}
	ws.st = (conf_streaming){.spawn = st_spawn,
	                         .attach = st_attach,
	                         .detach = st_detach,
	                         .peer_open = st_peer_open,
	                         .peer_close = st_peer_close,
	                         .ctx = &ws};
	both.st = ws.st;
	both.st.ctx = &both;
	/* ASP_TEST_ONLY=WORD: only the cases whose names contain WORD, as a table (debugging). */
	const char *only = getenv("ASP_TEST_ONLY");
	if (only) {
		int f = conf_run_filtered(http.ops, http.self, "/tmp", only, stdout) +
		        conf_run_filtered_st(ws.ops, ws.self, &ws.st, "/tmp", only, stdout) +
		        conf_run_filtered_st(both.ops, both.self, &both.st, "/tmp", only, stdout);
		http.t->close(http.self);
		ws.t->close(ws.self);
		both.t->close(both.self);
		listener_stop(&l, SIGTERM, 10000);
		return f ? 1 : 0;
	}
	if (CU_initialize_registry() != CUE_SUCCESS ||
	    conf_register_cunit("http", http.ops, http.self, "/tmp") < 0 ||
	    conf_register_cunit_st("websocket", ws.ops, ws.self, &ws.st, "/tmp") < 0 ||
	    conf_register_cunit_st("http-both", both.ops, both.self, &both.st, "/tmp") < 0)
		return 1;
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	http.t->close(http.self);
	ws.t->close(ws.self);
	both.t->close(both.self);
	int st = listener_stop(&l, SIGTERM, 10000);
	if (st != 0) {
		char *log = listener_log_text(&l);
		fprintf(stderr, "asp-agent --listen did not exit 0 on SIGTERM (%d): %s\n", st,
		        log ? log : "");
		free(log);
		failed++;
	}
	return failed ? 1 : 0;
}
