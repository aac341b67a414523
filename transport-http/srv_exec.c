/*
 * Execs the service thread runs itself. Through a worker, a POST exec of `true` costs
 * two thread wake-ups more (the worker's for the request, the service thread's for the
 * answer), which is most of what the listener adds to it (docs/benchmarks.md). Here the
 * command is started on the service thread (asp_local_exec_begin) and its pipes and pidfd
 * wait in one epoll set that lws polls as a raw file; its timeout is an lws timer.
 *
 * Starting a command blocks the thread until the command runs (vfork): its cwd and its
 * program are looked up meanwhile. So only where that cannot hang (srv_exec_ok): every
 * mount local or the kernel's own, a request that names no /proc path (a /proc/PID/root
 * could lead into another mount namespace, whose mounts ours does not list), and stdin
 * small enough to be written at once. Other execs go to a worker, as before.
 */
#include "srv.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

/* Events read at most per turn of the loop; the rest stay ready for the next. */
#define EVENTS_PER_TURN 64
/* Without epoll (a set that could not take an fd), how often a command is looked at. */
#define POLL_SELF_US 1000

typedef struct srv_exec srv_exec;

/* What an fd's epoll event points to. */
struct srv_exec_slot {
	srv_exec *e;
	int fd;
};

struct srv_exec {
	srv_exec *prev, *next; /* srv.execs */
	srv_conn *c;           /* a reference */
	asp_local_exec_job *x;
	lws_sorted_usec_list_t sul; /* its next deadline */
	struct srv_exec_slot slot[ASP_LOCAL_EXEC_FDS];
	int nslots;
	struct pollfd ready[ASP_LOCAL_EXEC_FDS]; /* what epoll said, for the next step */
	int nready;
	bool poll_self; /* not in the epoll set: polled on a timer */
	bool to_step;   /* on this turn's list */
	srv_exec *step_next;
};

static srv *srv_of_ctx(struct lws_context *ctx)
{
	return lws_context_user(ctx);
}

void srv_exec_init(srv *s, struct lws_vhost *vh)
{
	s->exec_ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->exec_ep < 0)
		return;
	/* lws gets a dup: whether it closes its fd or not, ours stays ours to close. */
	lws_sock_file_fd_type u;
	u.filefd = fcntl(s->exec_ep, F_DUPFD_CLOEXEC, 0);
	if (u.filefd >= 0)
		s->exec_wsi =
		    lws_adopt_descriptor_vhost(vh, LWS_ADOPT_RAW_FILE_DESC, u, "asp-exec", NULL);
	if (!s->exec_wsi) {
		if (u.filefd >= 0)
			close(u.filefd);
		close(s->exec_ep);
		s->exec_ep = -1;
	}
}

bool srv_exec_ok(srv_conn *c, const asp_request *r, size_t len, bool proc)
{
	size_t mlen;
	const char *method = asp_request_method(r, &mlen);
	return !c->ws && c->s->exec_wsi && len <= PIPE_BUF && !proc && method && mlen == 4 &&
	       !memcmp(method, "exec", 4) && srv_mounts_bounded(c->s);
}

static void on_timer(lws_sorted_usec_list_t *sul);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The exec's timer: at `until`, or soon when it is polled on a timer (n fds to poll). */
static void arm_timer(srv_exec *e, int n, uint64_t until)
{
	srv *s = e->c->s;
	if (e->poll_self && n > 0) {
		uint64_t soon = now_ns() + POLL_SELF_US * 1000u;
		if (soon < until)
			until = soon;
	}
	if (until == UINT64_MAX) {
		lws_sul_cancel(&e->sul);
		return;
	}
	uint64_t now = now_ns();
	lws_usec_t us = until > now ? (lws_usec_t)((until - now + 999) / 1000) : 1;
	lws_sul_schedule(s->ctx, 0, &e->sul, on_timer, us);
}

/* Re-arms what the exec waits for now (EPOLLONESHOT) and its timer. */
static void rearm(srv_exec *e)
{
	srv *s = e->c->s;
	struct pollfd pfd[ASP_LOCAL_EXEC_FDS];
	uint64_t until;
	int n = asp_local_exec_wants(e->x, pfd, &until);
	for (int i = 0; i < n && !e->poll_self; i++) {
		struct srv_exec_slot *slot = NULL;
		for (int k = 0; k < e->nslots && !slot; k++)
			if (e->slot[k].fd == pfd[i].fd)
				slot = &e->slot[k];
		struct epoll_event ev = {.events = (uint32_t)pfd[i].events | EPOLLONESHOT,
		                         .data.ptr = slot};
		if (!slot || epoll_ctl(s->exec_ep, EPOLL_CTL_MOD, pfd[i].fd, &ev) < 0)
			e->poll_self = true;
	}
	arm_timer(e, n, until);
}

/* The answer goes out; the exec is done with. */
static void finish(srv_exec *e)
{
	srv_conn *c = e->c;
	srv *s = c->s;
	lws_sul_cancel(&e->sul);
	srv_out *o = srv_out_of_reply(asp_local_exec_end(e->x, s->inline_reply), s->inline_reply);
	asp_reply_trim(s->inline_reply, SRV_CHUNK);
	if (o)
		srv_push_answer(c, o);
	else if (c->wsi) /* not even a 500 could be made */
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	if (e->prev)
		e->prev->next = e->next;
	else
		s->execs = e->next;
	if (e->next)
		e->next->prev = e->prev;
	free(e);
	srv_drain_ready(s); /* written now, on this thread: no wake-up */
	srv_conn_unref(c);
}

static void step(srv_exec *e)
{
	if (e->poll_self) {
		e->nready = asp_local_exec_wants(e->x, e->ready, &(uint64_t){0});
		if (e->nready > 0 && poll(e->ready, (nfds_t)e->nready, 0) < 0)
			e->nready = 0;
	}
	bool done = asp_local_exec_step(e->x, e->ready, e->nready);
	e->nready = 0;
	if (done)
		finish(e);
	else
		rearm(e);
}

static void on_timer(lws_sorted_usec_list_t *sul)
{
	step(lws_container_of(sul, srv_exec, sul));
}

bool srv_exec_start(srv_conn *c, asp_request *r)
{
	srv *s = c->s;
	if (!s->inline_reply)
		s->inline_reply = asp_reply_new();
	srv_exec *e = s->inline_reply ? calloc(1, sizeof *e) : NULL;
	if (!e) {
		asp_request_free(r);
		return false;
	}
	asp_serve_result rc = asp_local_exec_begin(s->http_bound, r, s->inline_reply, &e->x);
	asp_request_free(r);
	if (rc != ASP_SERVE_RUNNING) { /* answered already: bad params, no such program */
		free(e);
		srv_out *o = srv_out_of_reply(rc, s->inline_reply);
		asp_reply_trim(s->inline_reply, SRV_CHUNK);
		if (!o)
			return false;
		srv_push_answer(c, o);
		srv_drain_ready(s);
		return true;
	}
	e->c = c;
	atomic_fetch_add(&c->refs, 1);
	e->next = s->execs;
	if (s->execs)
		s->execs->prev = e;
	s->execs = e;
	struct pollfd pfd[ASP_LOCAL_EXEC_FDS];
	uint64_t until;
	e->nslots = asp_local_exec_wants(e->x, pfd, &until);
	for (int i = 0; i < e->nslots; i++) {
		e->slot[i] = (struct srv_exec_slot){e, pfd[i].fd};
		/* armed as it is added (as rearm would, without a second call per fd) */
		struct epoll_event ev = {.events = (uint32_t)pfd[i].events | EPOLLONESHOT,
		                         .data.ptr = &e->slot[i]};
		if (epoll_ctl(s->exec_ep, EPOLL_CTL_ADD, pfd[i].fd, &ev) < 0)
			e->poll_self = true; /* no room in the set (max_user_watches) */
	}
	arm_timer(e, e->nslots, until);
	return true;
}

/* The epoll set is readable: each exec with events steps once. */
static void on_events(srv *s)
{
	struct epoll_event ev[EVENTS_PER_TURN];
	int n = epoll_wait(s->exec_ep, ev, EVENTS_PER_TURN, 0);
	srv_exec *todo = NULL;
	for (int i = 0; i < n; i++) {
		struct srv_exec_slot *slot = ev[i].data.ptr;
		srv_exec *e = slot->e;
		if (e->nready < ASP_LOCAL_EXEC_FDS)
			e->ready[e->nready++] = (struct pollfd){slot->fd, 0, (short)ev[i].events};
		if (!e->to_step) {
			e->to_step = true;
			e->step_next = todo;
			todo = e;
		}
	}
	/* Only now: a step may free its exec, whose other events were in this batch. */
	while (todo) {
		srv_exec *e = todo;
		todo = e->step_next;
		e->to_step = false;
		step(e);
	}
}

int srv_exec_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len)
{
	srv *s = srv_of_ctx(lws_get_context(wsi));
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
		if (s->exec_ep >= 0)
			on_events(s);
		return 0;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (wsi == s->exec_wsi) {
			/* lws let go of the set (it is going away): what runs is polled instead */
			s->exec_wsi = NULL;
			for (srv_exec *e = s->execs; e; e = e->next)
				if (!e->poll_self && s->ctx) {
					e->poll_self = true;
					rearm(e);
				}
		}
		return 0;
	default: return lws_callback_http_dummy(wsi, reason, user, in, len);
	}
}

void srv_exec_stop(srv *s)
{
	/* The context is gone, and its timers with it: what still runs is killed and reaped. */
	while (s->execs) {
		srv_exec *e = s->execs;
		s->execs = e->next;
		if (asp_local_exec_end(e->x, s->inline_reply) == ASP_SERVE_REPLY)
			asp_reply_trim(s->inline_reply, 0);
		srv_conn_unref(e->c);
		free(e);
	}
	if (s->exec_ep >= 0)
		close(s->exec_ep);
	s->exec_ep = -1;
}
