/*
 * Private to the listener: what http_server.c (the context, the loop, HTTP routes),
 * ws_server.c (the asp.v1 WebSocket) and srv_work.c (connections, workers, output
 * queues) share.
 *
 * Threads: one lws service thread owns every struct lws and every lws call except
 * lws_cancel_service. Requests run on worker threads (srv_work.c); their answers are
 * queued on the connection under srv.mu and the service thread, woken with
 * lws_cancel_service, asks for WRITEABLE and writes one chunk per callback.
 */
#ifndef ASP_HTTP_SRV_H
#define ASP_HTTP_SRV_H

#include "asp/server.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bytes handed to one lws_write: big enough for bulk, small enough to stay fair. */
#define SRV_CHUNK (256 * 1024)
/* Room for the headers in front of an HTTP answer's first chunk. */
#define SRV_HEADROOM 1024
/* Threads running requests at most; more requests wait in the queue. */
#define SRV_MAX_WORKERS 64
/* A WebSocket with this many requests queued or running is not read until one finishes. */
#define SRV_WS_INFLIGHT 128
/*
 * Requests of one WebSocket running at once; its others wait in the queue. Bounds what a
 * client that pipelines large reads and does not read the answers can make us hold
 * (16 answers of up to max_message), and how many workers one client can occupy.
 */
#define SRV_WS_RUNNING 16
/* Output queued for one connection above which it is not read (no new requests). */
#define SRV_OUT_HIGH (8u * 1024 * 1024)
/*
 * Queued output above which a process's notifications wait (the backpressure of
 * asp_conn_sink, as a full pipe is over stdio): small, so an answer queued behind a
 * process's output is not far behind it.
 */
#define SRV_SINK_HIGH (256u * 1024)
/* TCP_NOTSENT_LOWAT of a WebSocket (see ws_server.c). */
#define SRV_NOTSENT_LOWAT (128 * 1024)

typedef struct srv srv;
typedef struct srv_conn srv_conn;

/* One queued answer: an HTTP response or a WebSocket message. */
typedef struct srv_out {
	struct srv_out *next;
	uint8_t *data; /* malloc'd; bytes to send are data[off .. len) */
	size_t off, len;
	int status;        /* HTTP status; 0 for a WebSocket message */
	const char *ctype; /* HTTP Content-Type (static string) */
	const char *allow; /* HTTP 405: the Allow header */
	size_t sent;       /* service thread: bytes of data[off .. len) written */
	bool conn_close;   /* HTTP: "Connection: close" and close after it */
	bool started;      /* service thread: the headers (HTTP) or first fragment went */
} srv_out;

enum srv_http_state {
	HS_NONE,    /* no request yet */
	HS_BODY,    /* reading a POST body into rx */
	HS_DISCARD, /* answered already (401, 413, ...): the body is ignored */
	HS_BUSY,    /* a worker serves it */
	HS_ANSWER,  /* the answer is queued or being written */
};

/*
 * A WebSocket connection, or one HTTP request (lws frees an HTTP connection's user data
 * between keep-alive requests, so a request is the natural unit). Reference counted:
 * the lws side holds one until the connection closes (or the HTTP answer went), every
 * job and the ready list one each.
 */
struct srv_conn {
	srv *s;
	bool ws;
	atomic_uint refs;

	/* service thread only */
	struct lws *wsi;       /* NULL once lws closed it or the HTTP request finished */
	srv_conn *prev, *next; /* srv.live */
	bool rx_paused;
	bool going_away; /* shutdown: close with 1001 once the output is written */
	enum srv_http_state hs;
	uint8_t *rx; /* HTTP body or WebSocket message being assembled */
	size_t rx_len, rx_cap;
	bool rx_binary;
	char peer[64]; /* WebSocket: from the start; HTTP: filled when logged */

	/* under srv.mu */
	srv_conn *ready_next; /* srv.ready */
	bool on_ready;
	srv_out *out_head, *out_tail;
	size_t out_bytes;
	unsigned inflight;     /* jobs queued or running */
	unsigned running;      /* jobs running */
	bool gone;             /* closed: the sink refuses, jobs are answered into the void */
	int close_code;        /* WebSocket: close with this (1002, ...) instead of writing */
	pthread_cond_t out_cv; /* a sink waiting for out_bytes to drop */
	asp_local_conn *bound; /* WebSocket: this connection's binding to the backend */
};

/* A request for a worker. */
typedef struct srv_job {
	struct srv_job *next;
	srv_conn *c;  /* a reference */
	uint8_t *msg; /* the request message (no length prefix), owned */
	size_t len;
	asp_request *req; /* or the request made from it, owned */
} srv_job;

struct srv {
	struct lws_context *ctx;
	asp_local *backend;
	asp_local_conn *http_bound; /* the one NULL-sink binding every POST shares */
	size_t max_message;
	uint8_t *stage;           /* the service thread's: LWS_PRE, headers, one chunk to write */
	asp_reply *inline_reply;  /* the service thread's, for srv_serve_inline */
	int mountinfo_fd;         /* /proc/self/mountinfo, polled for changes */
	struct srv_mount *mounts; /* its lines, for srv_inline_ok */
	size_t n_mounts;
	bool mounts_bounded;    /* every one local or the kernel's own: for srv_exec_ok */
	int exec_ep;            /* srv_exec.c: the epoll fd of its execs, -1 for none */
	struct lws *exec_wsi;   /* lws's raw-file wsi over a dup of it */
	struct srv_exec *execs; /* the execs it runs */
	const char *token;      /* NULL: no auth */
	char url[300];          /* what we listen on, for messages */

	pthread_mutex_t ctx_mu; /* ctx, for lws_cancel_service from other threads */
	/*
	 * Service thread: writes an HTTP request's queued output (http_server.c sets it). A
	 * hook, so that the queues here reach the HTTP writer without depending on the file
	 * of routes above them.
	 */
	void (*http_kick)(srv_conn *c);

	/* service thread only */
	srv_conn *live; /* connections lws still has */
	bool stopping;  /* no new work; drain then exit */
	bool finished;  /* leave the service loop */
	bool forced;    /* left with requests still running */
	int64_t drain_deadline_ms, goodbye_deadline_ms;
	lws_sorted_usec_list_t tick;

	atomic_int signals; /* SIGTERM/SIGINT seen */
	atomic_bool quit_sig_thread;
	pthread_t sig_thread;
	bool sig_thread_started;

	pthread_mutex_t mu; /* everything below, and the srv_conn fields marked so */
	pthread_cond_t work_cv;
	srv_job *jobs_head, *jobs_tail;
	srv_conn *ready;  /* connections with new output or a state change */
	unsigned running; /* jobs being served */
	unsigned queued;  /* jobs waiting */
	unsigned idle, nworkers;
	/*
	 * Idle workers signalled but not yet awake: a worker counts as idle until it runs
	 * again, so without this a second job submitted before the first signalled worker
	 * woke would signal the same worker and wait behind the first job.
	 */
	unsigned wakeups;
	bool workers_stop;
	pthread_t workers[SRV_MAX_WORKERS];
};

/* ---- srv_work.c ------------------------------------------------------------------- */

int srv_work_init(srv *s);
/* Lets the workers finish what is queued, then joins them. */
void srv_work_stop(srv *s);
/* lws_cancel_service from any thread, unless the context is gone. */
void srv_wake(srv *s);

/* A new connection with one reference (the lws side's), on the live list. */
srv_conn *srv_conn_new(srv *s, struct lws *wsi, bool ws);
/* The lws side is done with it: off the live list, gone for the workers, unreferenced. */
void srv_conn_detach(srv_conn *c);
void srv_conn_unref(srv_conn *c);

/* Requests at most this large may be served on the service thread (srv_inline_ok). */
#define SRV_INLINE_MAX (64 * 1024)
/* Files at most this large may be read there. */
#define SRV_INLINE_READ (1024 * 1024)
/* Service thread: whether the decoded request `r` may be served there (see srv_work.c). */
bool srv_inline_ok(srv *s, const asp_request *r);
/* The mount table srv_inline_ok reads; and its release. */
void srv_inline_init(srv *s);
void srv_inline_free(srv *s);
/* Serves `r` (taken) on the service thread and queues the answer; false: none made. */
bool srv_serve_inline(srv_conn *c, asp_request *r);

/*
 * Queues `msg` (taken), or the request `req` made from it already (taken; msg NULL),
 * for a worker; false when out of memory (both are freed).
 */
bool srv_submit(srv_conn *c, uint8_t *msg, size_t len, asp_request *req);

/*
 * Queues an answer made on the service thread (a status page): `head`'s status, ctype,
 * allow and conn_close with a copy of `body`.
 */
bool srv_respond(srv_conn *c, const srv_out *head, const void *body, size_t len);

/* The first queued answer, or NULL; and dropping it once written. */
srv_out *srv_out_peek(srv_conn *c);
void srv_out_pop(srv_conn *c);
/* Whether `c` wants to be closed with a code (1002, ...); 0 if not. */
int srv_close_code(srv_conn *c);

/* Service thread: handles connections workers made ready (asks for WRITEABLE...). */
void srv_drain_ready(srv *s);
/* Service thread: pauses or resumes reading `c` by its queue and requests in flight. */
void srv_update_rx(srv_conn *c);
/* Jobs queued or running, and output not yet written, over every connection. */
bool srv_idle(srv *s);
/* Whether a worker holds or will take a request (which then keeps `s` alive). */
bool srv_workers_busy(srv *s);

/* Binds a WebSocket to the backend (notifications reach it). false: out of memory. */
bool srv_conn_bind(srv_conn *c);

/* The op table and the shared binding of POST requests; 0, or 1 (logged). */
int srv_backend_init(srv *s);
/*
 * Ends what the backend still runs, unbinds and frees it; false when a process's output
 * is stuck in a sink (then the backend is left for the process's exit to end).
 */
bool srv_backend_free(srv *s);

/* The answer asp_local_serve left in `out` (rc) as an HTTP answer (a 500 without one). */
srv_out *srv_out_of_reply(asp_serve_result rc, asp_reply *out);
/* Queues an HTTP answer made on the service thread (freed if `c` is gone). */
void srv_push_answer(srv_conn *c, srv_out *o);
/* Whether every mount is local or the kernel's own (the table re-read if it changed). */
bool srv_mounts_bounded(srv *s);

/* ---- srv_exec.c ------------------------------------------------------------------- */

/*
 * Execs the service thread runs itself. srv_exec_init (after the vhost is made; on
 * failure there are none) and srv_exec_stop (after the context is gone: ends what
 * still runs, killing it). srv_exec_ok: whether request `r` of `c`, whose message of
 * `len` bytes names /proc or not (`proc`), may run so. srv_exec_start takes `r`; false
 * when out of memory (no answer was made).
 */
void srv_exec_init(srv *s, struct lws_vhost *vh);
void srv_exec_stop(srv *s);
bool srv_exec_ok(srv_conn *c, const asp_request *r, size_t len, bool proc);
bool srv_exec_start(srv_conn *c, asp_request *r);
int srv_exec_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len);

/* ---- ws_server.c ------------------------------------------------------------------ */

int srv_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len);

#endif
