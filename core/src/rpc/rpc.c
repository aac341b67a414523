/*
 * The RPC engine: request ids, pipelined calls, the read role, a dead connection.
 *
 * The read role. One thread at a time reads the channel. On a channel the core can
 * watch (an fd channel whose reader close wakes: the stdio transport's socket) there is
 * no thread per connection. A calling thread that finds nobody reading takes the role and
 * reads until its own answer comes (a leader), handing other callers' answers to them on
 * the way and the role to a waiting caller when it leaves, so a lone call wakes no other
 * thread. A leader never handles a notification: it queues it and gives the role to a
 * worker of the process-wide pool (io_pool.c), which routes it and reads on in order
 * until the connection is quiet, so callbacks run on pool threads only and no answer
 * overtakes a notification read before it (an attach's replay). While nobody reads, the
 * pool's poller watches the fd (and the channel's watch fd, the stdio transport's
 * stderr), so an idle connection still sees EOF and stderr. Any other channel (custom
 * callbacks, a byte stream) gets a reader thread of its own that reads everything.
 */
#include "rpc.h"

#include "io_pool.h"
#include "proc_route.h"
#include "wire.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * A request id is (generation << 16 | slot): the slot finds the waiting caller without a
 * search, the generation tells a late answer for a slot's previous user from the current.
 */
#define SLOT_BITS  16
#define SLOT_MAX   (1u << SLOT_BITS)
#define SLOT_FIRST 8
/* A peer may announce a larger max_message; beyond this we do not follow it. */
#define MAX_MESSAGE_CAP (1u << 30)
/* Messages a pool worker reads from one connection before letting others have a turn. */
#define WORKER_TURN 64
/* What a call that timed out leaves in its slot until its late answer comes (see deliver). */
static char abandoned_mark;
#define ABANDONED ((waiter *)(void *)&abandoned_mark)

/* One call waiting for its response; lives on the caller's stack. */
typedef struct waiter {
	pthread_cond_t cv;
	bool done;
	asp_status st; /* ASP_OK: frame holds the response; else the connection died */
	uint8_t *frame;
	size_t len;
	bool gate;       /* a spawn/attach: notifications wait until its follower is set up */
	bool gate_taken; /* its answer closed the gate: the caller opens it */
	struct waiter *prev, *next; /* in the list of callers blocked on cv (pollable) */
} waiter;

enum { ALIVE, DYING, DEAD };

/* A message a leader read that is not a plain response: a pool worker handles it. */
typedef struct note {
	struct note *next;
	uint8_t *m;
	size_t len;
} note;

struct asp_rpc {
	asp_channel *ch;
	pthread_t reader; /* when !pollable */

	pthread_mutex_t mu;      /* everything below up to send_mu */
	pthread_cond_t state_cv; /* DYING → DEAD, and a slot coming free when all are used */
	atomic_int state;
	bool closing; /* asp_rpc_close asked: no need to explain the death */
	/* why it died, what every later call reports: malloc'd at the death (an asp_error is
	 * 2 KiB, which a live connection need not carry) */
	asp_error *death;
	waiter **slots; /* cap entries; NULL when free */
	uint16_t *gens;
	uint32_t *free_idx;
	size_t nfree, cap, slot_waiters;

	bool suspect;    /* a call missed its deadline and no answer came since (docs/faults.md) */
	size_t decoding; /* bytes of msgpack objects being decoded (decode_budget_take) */
	pthread_cond_t decode_cv;

	pthread_mutex_t send_mu; /* held while one frame is written */
	atomic_size_t max_send, max_recv;
	atomic_uint call_timeout_ms;
	pthread_condattr_t mono; /* waiters' condition variables time out on CLOCK_MONOTONIC */

	asp_rpc_notify_fn notify;
	void *notify_ctx;
	asp_arena *notify_arena; /* on the role's thread, made by the first notification */

	asp_proc_routes *routes; /* followers of spawned processes on this connection */
	pthread_cond_t gate_cv;  /* under mu: gates went to 0, or the connection died */
	unsigned gates;          /* answered spawn/attach calls still setting up */

	/*
	 * The connection's first hello answer, as received (under mu): later hellos are
	 * answered from it without a round trip, since a responder's hello does not change
	 * while a connection lasts. A reconnect is a new engine, which asks anew.
	 */
	uint8_t *hello_frame;
	size_t hello_len;

	/* The read role (see the top), under mu. */
	bool pollable;   /* watched by the pool's poller; callers lead */
	bool reading;    /* a thread holds the role */
	bool armed;      /* the poller watches the fd (nobody reads) */
	uint64_t io_key; /* the pool's registration */
	int io_fd;
	asp_io_job job;  /* a worker's turn on this connection */
	waiter *wq_head; /* callers blocked on their cv, oldest first */
	waiter *wq_tail;
	pthread_cond_t role_cv; /* the role came free after death (asp_rpc_free waits) */
	note *q_head, **q_tail;
};

/* ---- slots ------------------------------------------------------------------------ */

/* Under mu. false when out of memory. */
static bool grow_slots(asp_rpc *rpc)
{
	size_t cap = rpc->cap ? rpc->cap * 2 : SLOT_FIRST;
	waiter **s = realloc(rpc->slots, cap * sizeof *s);
	if (!s)
		return false;
	rpc->slots = s;
	uint16_t *g = realloc(rpc->gens, cap * sizeof *g);
	if (!g)
		return false;
	rpc->gens = g;
	uint32_t *f = realloc(rpc->free_idx, cap * sizeof *f);
	if (!f)
		return false;
	rpc->free_idx = f;
	for (size_t i = rpc->cap; i < cap; i++) {
		s[i] = NULL;
		g[i] = 0;
	}
	/* Hand out low slots first: the free list is a stack, so push high ones first. */
	for (size_t i = cap; i > rpc->cap; i--)
		f[rpc->nfree++] = (uint32_t)(i - 1);
	rpc->cap = cap;
	return true;
}

/* Under mu. Registers w; returns its id, or sets *fail when the engine died or no memory. */
static uint32_t slot_take(asp_rpc *rpc, waiter *w, asp_status *fail)
{
	while (rpc->nfree == 0) {
		if (rpc->cap < SLOT_MAX) {
			if (!grow_slots(rpc)) {
				*fail = ASP_E_INTERNAL;
				return 0;
			}
			continue;
		}
		rpc->slot_waiters++; /* 65536 calls in flight: wait for one to finish */
		pthread_cond_wait(&rpc->state_cv, &rpc->mu);
		rpc->slot_waiters--;
		if (atomic_load(&rpc->state) != ALIVE) {
			*fail = ASP_E_TRANSPORT_ERROR;
			return 0;
		}
	}
	uint32_t idx = rpc->free_idx[--rpc->nfree];
	uint16_t gen = ++rpc->gens[idx];
	rpc->slots[idx] = w;
	*fail = ASP_OK;
	return (uint32_t)gen << SLOT_BITS | idx;
}

/* Under mu. */
static void slot_release(asp_rpc *rpc, uint32_t id)
{
	uint32_t idx = id & (SLOT_MAX - 1);
	rpc->slots[idx] = NULL;
	rpc->free_idx[rpc->nfree++] = idx;
	if (rpc->slot_waiters)
		pthread_cond_broadcast(&rpc->state_cv);
}

/* ---- death ------------------------------------------------------------------------ */

/*
 * The connection is gone: close the channel, let it explain why (unless the client asked
 * for it), then fail every waiting call and every later one. Only the first caller acts.
 */
static void rpc_die(asp_rpc *rpc, const asp_error *why)
{
	pthread_mutex_lock(&rpc->mu);
	if (atomic_load(&rpc->state) != ALIVE) {
		pthread_mutex_unlock(&rpc->mu);
		return;
	}
	atomic_store(&rpc->state, DYING);
	bool closing = rpc->closing;
	pthread_mutex_unlock(&rpc->mu);

	asp_error e = *why;
	asp_channel_close(rpc->ch);
	/* A protocol error is the message every pending call reports, as it is. */
	bool protocol = e.code == ASP_E_PROTOCOL_ERROR;
	if (!closing)
		asp_channel_explain(rpc->ch, &e); /* may wait briefly, outside the lock */
	e.code = protocol ? ASP_E_PROTOCOL_ERROR : ASP_E_TRANSPORT_ERROR;

	asp_error *kept = malloc(sizeof *kept);
	if (kept)
		*kept = e;
	pthread_mutex_lock(&rpc->mu);
	rpc->death = kept;
	atomic_store(&rpc->state, DEAD);
	for (size_t i = 0; i < rpc->cap; i++) {
		waiter *w = rpc->slots[i];
		if (w && w != ABANDONED && !w->done) {
			w->done = true;
			w->st = e.code;
			pthread_cond_signal(&w->cv);
		}
	}
	pthread_cond_broadcast(&rpc->state_cv);
	pthread_cond_broadcast(&rpc->gate_cv);
	pthread_cond_broadcast(&rpc->role_cv);
	pthread_mutex_unlock(&rpc->mu);
	asp_proc_routes_lost(rpc->routes, &e); /* their on_lost, on this thread */
}

/* Under mu, state not ALIVE: waits out DYING and copies the reason. */
static asp_status dead_error(asp_rpc *rpc, asp_error *err)
{
	while (atomic_load(&rpc->state) == DYING)
		pthread_cond_wait(&rpc->state_cv, &rpc->mu);
	if (!rpc->death) /* out of memory at the death */
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "the connection was lost (out of memory to say why)");
	if (err)
		*err = *rpc->death;
	return rpc->death->code;
}

bool asp_rpc_alive(asp_rpc *rpc)
{
	return atomic_load_explicit(&rpc->state, memory_order_relaxed) == ALIVE;
}

void asp_rpc_close(asp_rpc *rpc)
{
	pthread_mutex_lock(&rpc->mu);
	rpc->closing = true;
	pthread_mutex_unlock(&rpc->mu);
	asp_error e;
	asp_error_set(&e, ASP_E_TRANSPORT_ERROR, NULL, "the client closed the connection");
	rpc_die(rpc, &e);
}

/* ---- the reader ------------------------------------------------------------------- */

/*
 * Hands the frame to the caller waiting for `id`. A late answer to a call that timed out
 * is dropped; false when no call of this connection has that id (docs/design.md,
 * "Faults and budgets": the responder is confused, or not ours), with the frame freed and
 * `err` set.
 */
static bool deliver_locked(asp_rpc *rpc, uint32_t id, uint8_t *m, size_t len, asp_error *err)
{
	uint32_t idx = id & (SLOT_MAX - 1);
	bool ok = true;
	waiter *w = idx < rpc->cap ? rpc->slots[idx] : NULL;
	if (!w || rpc->gens[idx] != (uint16_t)(id >> SLOT_BITS) || (w != ABANDONED && w->done)) {
		ok = false;
	} else if (w == ABANDONED) {
		slot_release(rpc, id);
	} else {
		w->frame = m;
		w->len = len;
		w->st = ASP_OK;
		w->done = true;
		rpc->suspect = false; /* the responder answers */
		if (w->gate) { /* hold notifications back until the caller has its follower */
			rpc->gates++;
			w->gate_taken = true;
		}
		m = NULL;
		pthread_cond_signal(&w->cv);
	}
	free(m);
	if (!ok)
		asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		              "the responder answered request id %u, which no call is waiting for; "
		              "closing the connection",
		              id);
	return ok;
}

static bool deliver(asp_rpc *rpc, uint32_t id, uint8_t *m, size_t len, asp_error *err)
{
	pthread_mutex_lock(&rpc->mu);
	bool ok = deliver_locked(rpc, id, m, len, err);
	pthread_mutex_unlock(&rpc->mu);
	return ok;
}

static void notify(asp_rpc *rpc, const asp_msg *msg)
{
	if (!rpc->notify) {
		/* A spawn answered just now: its caller lists the follower before we route. */
		pthread_mutex_lock(&rpc->mu);
		while (rpc->gates > 0 && atomic_load(&rpc->state) == ALIVE)
			pthread_cond_wait(&rpc->gate_cv, &rpc->mu);
		pthread_mutex_unlock(&rpc->mu);
	}
	for (int n = 0; n < ASP_NOTICE_COUNT; n++) {
		const asp_notice_desc *d = &asp_notice_descs[n];
		if (d->name_len != msg->method_len || memcmp(d->name, msg->method, d->name_len))
			continue;
		/* Made by the first notification: most connections never see one. */
		if (!rpc->notify_arena && !(rpc->notify_arena = asp_arena_new()))
			return; /* lost to memory, as a note that cannot be queued */
		asp_arena *a = rpc->notify_arena;
		void *p = asp_arena_alloc(a, d->params->size);
		if (p && asp_record_decode(d->params, msg->params, p, a, NULL) == ASP_OK) {
			if (rpc->notify)
				rpc->notify(rpc->notify_ctx, (asp_notice_id)n, p, a);
			else
				asp_proc_routes_route(rpc->routes, (asp_notice_id)n, p);
		}
		asp_arena_reset(a);
		return;
	}
}

/* A message that is not a plainly encoded response. false: the connection is broken. */
static bool handle_other(asp_rpc *rpc, uint8_t *m, size_t len, asp_error *err)
{
	msgpack_unpacked u;
	asp_wire_unpacked_init(&u);
	asp_msg msg;
	asp_status st = asp_wire_decode(m, len, &u, &msg, err);
	bool ok = false;
	if (st) {
		asp_error_prefix(err, ASP_E_PROTOCOL_ERROR,
		                 "the responder sent an undecodable message");
	} else if (msg.type == ASP_MSG_RESPONSE) {
		asp_wire_unpacked_done(&u);
		return deliver(rpc, msg.id, m, len, err);
	} else if (msg.type == ASP_MSG_NOTIFY) {
		notify(rpc, &msg);
		ok = true;
	} else {
		asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		              "the responder sent a request where a response belongs");
	}
	asp_wire_unpacked_done(&u);
	free(m);
	return ok;
}

/*
 * Holding the read role, mu not held: reads one message if one comes within `ms` (-1:
 * for ever; 0: only what is there) and dispatches it: a response to its caller, anything
 * else to the queue (in order, for a worker). Returns with mu and the role held: 1 a
 * message was read, 0 none came, -1 the connection died.
 */
static int read_one(asp_rpc *rpc, int ms)
{
	asp_error err;
	asp_error_clear(&err);
	uint8_t *m = NULL;
	size_t len = 0;
	asp_status st = ASP_OK;
	int r = asp_channel_ready(rpc->ch, ms, &err);
	if (r > 0) {
		size_t max = atomic_load_explicit(&rpc->max_recv, memory_order_relaxed);
		st = asp_channel_recv(rpc->ch, max, &m, &len, &err);
		if (st == ASP_OK && !m)
			st = asp_error_set(&err, ASP_E_TRANSPORT_ERROR, NULL,
			                   "the responder closed the connection");
	} else if (r < 0) {
		st = err.code ? err.code : ASP_E_TRANSPORT_ERROR;
	}
	uint32_t id = 0;
	bool response = r > 0 && st == ASP_OK && asp_wire_peek_id(m, len, ASP_MSG_RESPONSE, &id);
	pthread_mutex_lock(&rpc->mu);
	/*
	 * Dispatched before the role goes: a spawn's answer must close its gate before a
	 * notification read after it can be routed (see notify).
	 */
	if (response && !deliver_locked(rpc, id, m, len, &err))
		st = err.code;
	if (r > 0 && st == ASP_OK && !response) { /* queued while we hold the role: in order */
		note *n = malloc(sizeof *n);
		if (n) {
			*n = (note){NULL, m, len};
			*rpc->q_tail = n;
			rpc->q_tail = &n->next;
		} else {
			free(m); /* a notification lost to memory; a response would time out */
		}
		m = NULL;
	}
	if (st == ASP_OK)
		return r > 0;
	pthread_mutex_unlock(&rpc->mu);
	rpc_die(rpc, &err);
	pthread_mutex_lock(&rpc->mu);
	return -1;
}

/*
 * Under mu, pollable, holding the role (or finding it free): makes sure somebody reads: queued
 * notifications (and bytes read ahead while no caller waits) go to a worker, else the
 * oldest blocked caller leads, else the poller watches the fd. After death: wakes
 * asp_rpc_free.
 */
static void role_release(asp_rpc *rpc)
{
	if (atomic_load(&rpc->state) != ALIVE) {
		rpc->reading = false;
		pthread_cond_broadcast(&rpc->role_cv);
		return;
	}
	/* Notes, or frames read ahead that no caller waits for: the worker holds the role. */
	if (rpc->q_head || (!rpc->wq_head && asp_fd_channel_buffered(rpc->ch))) {
		rpc->reading = true; /* already, unless a caller that was to lead left instead */
		asp_io_submit(&rpc->job);
		return;
	}
	rpc->reading = false;
	if (rpc->wq_head) {
		pthread_cond_signal(&rpc->wq_head->cv);
		return;
	}
	if (!rpc->armed) {
		asp_fd_channel_trim(rpc->ch); /* an idle connection keeps no read buffer */
		rpc->armed = true;
		asp_io_arm(rpc->io_key, rpc->io_fd);
	}
}

/* Under mu: takes the free role for this thread, from the poller if it watches. */
static void role_take(asp_rpc *rpc)
{
	rpc->reading = true;
	if (rpc->armed) {
		rpc->armed = false;
		asp_io_disarm(rpc->io_key, rpc->io_fd);
	}
}

/*
 * A pool worker's turn on a connection, holding the role: routes the queued
 * notifications, then reads what the connection has until it is quiet, a caller waits
 * (it leads from here) or the turn is over (requeued, so other connections get theirs).
 */
static void worker_run(void *arg)
{
	asp_rpc *rpc = arg;
	int turn = WORKER_TURN;
	pthread_mutex_lock(&rpc->mu);
	for (;;) {
		while (rpc->q_head) {
			note *n = rpc->q_head;
			rpc->q_head = n->next;
			if (!rpc->q_head)
				rpc->q_tail = &rpc->q_head;
			bool alive = atomic_load(&rpc->state) == ALIVE;
			pthread_mutex_unlock(&rpc->mu);
			asp_error err;
			asp_error_clear(&err);
			if (!alive)
				free(n->m); /* after on_lost nothing more is routed */
			else if (!handle_other(rpc, n->m, n->len, &err))
				rpc_die(rpc, &err);
			free(n);
			pthread_mutex_lock(&rpc->mu);
		}
		if (atomic_load(&rpc->state) != ALIVE || rpc->wq_head)
			break;
		if (turn-- == 0) {
			pthread_mutex_unlock(&rpc->mu);
			asp_io_submit(&rpc->job); /* still holding the role */
			return;
		}
		pthread_mutex_unlock(&rpc->mu);
		if (read_one(rpc, 0) <= 0 && !rpc->q_head)
			break;
	}
	role_release(rpc);
	pthread_mutex_unlock(&rpc->mu); /* asp_rpc_free may free rpc from here on */
}

/* The poller saw the idle connection readable (a message, EOF): a worker reads it. */
static void io_fired(void *ctx)
{
	asp_rpc *rpc = ctx;
	pthread_mutex_lock(&rpc->mu);
	rpc->armed = false;
	if (!rpc->reading && atomic_load(&rpc->state) == ALIVE) {
		rpc->reading = true;
		asp_io_submit(&rpc->job);
	}
	pthread_mutex_unlock(&rpc->mu);
}

static bool io_watch(void *ctx)
{
	return asp_fd_channel_run_watch(((asp_rpc *)ctx)->ch);
}

static const asp_io_hooks rpc_io_hooks = {.fired = io_fired, .watch = io_watch};

/* The reader thread of a channel the pool cannot watch: reads everything. */
static void *reader_main(void *arg)
{
	asp_rpc *rpc = arg;
	asp_error err;
	asp_error_clear(&err);
	for (;;) {
		uint8_t *m;
		size_t len;
		size_t max = atomic_load_explicit(&rpc->max_recv, memory_order_relaxed);
		asp_status st = asp_channel_recv(rpc->ch, max, &m, &len, &err);
		if (st)
			break;
		if (!m) {
			asp_error_set(&err, ASP_E_TRANSPORT_ERROR, NULL,
			              "the responder closed the connection");
			break;
		}
		uint32_t id;
		if (asp_wire_peek_id(m, len, ASP_MSG_RESPONSE, &id)
		        ? !deliver(rpc, id, m, len, &err)
		        : !handle_other(rpc, m, len, &err))
			break;
	}
	rpc_die(rpc, &err);
	return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------- */

asp_status asp_rpc_new(asp_channel *ch, size_t max_message, asp_rpc **out, asp_error *err)
{
	*out = NULL;
	asp_rpc *rpc = calloc(1, sizeof *rpc);
	asp_proc_routes *routes = asp_proc_routes_new();
	if (!rpc || !routes) {
		free(rpc);
		asp_proc_routes_free(routes);
		asp_channel_free(ch);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	rpc->ch = ch;
	rpc->routes = routes;
	pthread_cond_init(&rpc->gate_cv, NULL);
	pthread_cond_init(&rpc->decode_cv, NULL);
	rpc->q_tail = &rpc->q_head;
	rpc->job = (asp_io_job){NULL, worker_run, rpc};
	if (!max_message)
		max_message = ASP_MAX_MESSAGE_DEFAULT;
	atomic_init(&rpc->max_send, max_message);
	atomic_init(&rpc->max_recv, max_message);
	atomic_init(&rpc->state, ALIVE);
	atomic_init(&rpc->call_timeout_ms, ASP_CALL_TIMEOUT_DEFAULT);
	pthread_condattr_init(&rpc->mono);
	pthread_condattr_setclock(&rpc->mono, CLOCK_MONOTONIC);
	pthread_mutex_init(&rpc->mu, NULL);
	pthread_mutex_init(&rpc->send_mu, NULL);
	pthread_cond_init(&rpc->state_cv, NULL);
	pthread_cond_init(&rpc->role_cv, NULL);

	/* A channel the pool can watch needs no thread of its own (see the top). */
	int fd = asp_fd_channel_poll_fd(ch);
	if (fd >= 0) {
		asp_error e;
		int watch = asp_fd_channel_take_watch(ch, true);
		rpc->io_fd = fd;
		/* Under mu: a hang-up reported at once waits until the key and state are set. */
		pthread_mutex_lock(&rpc->mu);
		rpc->io_key = asp_io_add(fd, watch, &rpc_io_hooks, rpc, &e);
		if (rpc->io_key) {
			rpc->pollable = true;
			rpc->armed = true;
			asp_io_arm(rpc->io_key, fd);
			pthread_mutex_unlock(&rpc->mu);
			*out = rpc;
			return ASP_OK;
		}
		pthread_mutex_unlock(&rpc->mu);
		asp_fd_channel_take_watch(ch, false); /* no poller: a reader thread, as below */
	}

	/* The reader takes no signals: they belong to the application's threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&rpc->reader, NULL, reader_main, rpc);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		pthread_mutex_destroy(&rpc->mu);
		pthread_mutex_destroy(&rpc->send_mu);
		pthread_cond_destroy(&rpc->state_cv);
		pthread_cond_destroy(&rpc->gate_cv);
		pthread_cond_destroy(&rpc->decode_cv);
		pthread_cond_destroy(&rpc->role_cv);
		pthread_condattr_destroy(&rpc->mono);
		asp_proc_routes_free(routes);
		asp_channel_free(ch);
		free(rpc);
		return asp_error_errno(err, e, NULL, "starting the connection's reader thread");
	}
	*out = rpc;
	return ASP_OK;
}

void asp_rpc_set_call_timeout(asp_rpc *rpc, unsigned ms)
{
	atomic_store_explicit(&rpc->call_timeout_ms, ms ? ms : ASP_CALL_TIMEOUT_DEFAULT,
	                      memory_order_relaxed);
}

void asp_rpc_set_notify(asp_rpc *rpc, asp_rpc_notify_fn fn, void *ctx)
{
	rpc->notify = fn;
	rpc->notify_ctx = ctx;
}

void asp_rpc_free(asp_rpc *rpc)
{
	if (!rpc)
		return;
	asp_rpc_close(rpc);
	if (rpc->pollable) {
		/* Nobody may be inside: wait out a worker's turn or a leader's read (woken). */
		pthread_mutex_lock(&rpc->mu);
		while (atomic_load(&rpc->state) == DYING)
			pthread_cond_wait(&rpc->state_cv, &rpc->mu);
		while (rpc->reading)
			pthread_cond_wait(&rpc->role_cv, &rpc->mu);
		pthread_mutex_unlock(&rpc->mu);
		asp_io_remove(rpc->io_key); /* no hook runs once it returns */
	} else {
		pthread_join(rpc->reader, NULL);
	}
	asp_channel_free(rpc->ch);
	pthread_mutex_destroy(&rpc->mu);
	pthread_mutex_destroy(&rpc->send_mu);
	pthread_cond_destroy(&rpc->state_cv);
	pthread_cond_destroy(&rpc->gate_cv);
	pthread_cond_destroy(&rpc->decode_cv);
	pthread_cond_destroy(&rpc->role_cv);
	pthread_condattr_destroy(&rpc->mono);
	for (note *n = rpc->q_head, *next; n; n = next) {
		next = n->next;
		free(n->m);
		free(n);
	}
	asp_arena_free(rpc->notify_arena);
	asp_proc_routes_free(rpc->routes);
	free(rpc->slots);
	free(rpc->gens);
	free(rpc->free_idx);
	free(rpc->hello_frame);
	free(rpc->death);
	free(rpc);
}

/* ---- calls ------------------------------------------------------------------------ */

/* Bytes the bins of `params` add to the request: reserved up front, so no regrowth. */
static size_t bin_bytes(const asp_record_desc *d, const void *params)
{
	size_t n = 0;
	for (size_t i = 0; i < d->nfields; i++)
		if (d->fields[i].type == ASP_FT_BIN)
			n += ((const asp_bytes *)((const char *)params + d->fields[i].offset))->len;
	return n;
}

static bool has_bins(const asp_record_desc *d)
{
	for (size_t i = 0; i < d->nfields; i++)
		if (d->fields[i].type == ASP_FT_BIN)
			return true;
	return false;
}

/*
 * The client's decoding budget (docs/faults.md): msgpack objects of answers decoded at
 * once, at most DECODE_FACTOR * max_message bytes of them (one answer alone may take
 * more). Answers with fewer than DECODE_MIN bytes of objects are not counted, so the
 * usual call never takes the lock for it.
 */
#define DECODE_FACTOR 4
#define DECODE_MIN    (64 * 1024)

static void decode_budget_take(asp_rpc *rpc, size_t cost)
{
	if (cost < DECODE_MIN)
		return;
	size_t budget = DECODE_FACTOR * atomic_load_explicit(&rpc->max_recv, memory_order_relaxed);
	pthread_mutex_lock(&rpc->mu);
	while (rpc->decoding > 0 && rpc->decoding + cost > budget)
		pthread_cond_wait(&rpc->decode_cv, &rpc->mu);
	rpc->decoding += cost;
	pthread_mutex_unlock(&rpc->mu);
}

static void decode_budget_give(asp_rpc *rpc, size_t cost)
{
	if (cost < DECODE_MIN)
		return;
	pthread_mutex_lock(&rpc->mu);
	rpc->decoding -= cost;
	pthread_cond_broadcast(&rpc->decode_cv);
	pthread_mutex_unlock(&rpc->mu);
}

/* Decodes the response frame into `result`; the frame ends up owned by `a` or freed. */
static asp_status finish(asp_rpc *rpc, asp_op_id op, uint8_t *frame, size_t len, void *result,
                         asp_arena *a, asp_error *err)
{
	msgpack_unpacked u;
	asp_wire_unpacked_init(&u);
	asp_msg msg;
	size_t objects = 0;
	asp_status st = asp_wire_check(frame, len, &objects, &msg, err);
	size_t cost = objects * sizeof(msgpack_object);
	if (st == ASP_OK) {
		decode_budget_take(rpc, cost);
		st = asp_wire_unpack(frame, len, &u, &msg, err);
	}
	if (st) {
		decode_budget_give(rpc, cost);
		asp_error_prefix(err, ASP_E_PROTOCOL_ERROR,
		                 "the responder's answer to %s is undecodable",
		                 asp_op_descs[op].name);
		asp_wire_unpacked_done(&u);
		free(frame);
		rpc_die(rpc, err); /* a responder that sends garbage cannot be trusted further */
		err->code = ASP_E_PROTOCOL_ERROR;
		return ASP_E_PROTOCOL_ERROR;
	}
	st = asp_wire_result_decode(op, &msg, result, a, err);
	asp_wire_unpacked_done(&u);
	decode_budget_give(rpc, cost);
	if (st == ASP_OK && has_bins(asp_op_descs[op].result)) {
		if (asp_arena_adopt(a, frame) < 0) /* frees the frame */
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	} else {
		free(frame);
	}
	if (st == ASP_OK && op == ASP_OP_HELLO) {
		uint64_t m = ((const asp_hello_result *)result)->max_message;
		if (m >= 4096) {
			size_t lim = m > MAX_MESSAGE_CAP ? MAX_MESSAGE_CAP : (size_t)m;
			atomic_store(&rpc->max_send, lim);
			atomic_store(&rpc->max_recv, lim);
		}
	}
	return st;
}

/* Sends a whole frame: in one piece, or with its referenced bins spliced in. */
static asp_status send_buf(asp_channel *ch, const asp_buf *b, asp_error *err)
{
	if (b->nrefs == 0)
		return asp_channel_send(ch, b->data, b->len, err);
	struct iovec stack[8];
	int max = (int)(2 * b->nrefs + 1), n;
	struct iovec *iov = max <= 8 ? stack : malloc((size_t)max * sizeof *iov);
	if (!iov)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory sending a frame");
	n = asp_buf_iov(b, iov, max);
	asp_status st = asp_channel_sendv(ch, iov, n, err);
	if (iov != stack)
		free(iov);
	return st;
}

/* Milliseconds until `deadline`, rounded up; 0 once it passed. */
static int ms_until(const struct timespec *deadline)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	int64_t ns =
	    (int64_t)(deadline->tv_sec - t.tv_sec) * 1000000000 + (deadline->tv_nsec - t.tv_nsec);
	if (ns <= 0)
		return 0;
	int64_t ms = (ns + 999999) / 1000000;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static void wq_add(asp_rpc *rpc, waiter *w)
{
	w->next = NULL;
	w->prev = rpc->wq_tail;
	if (rpc->wq_tail)
		rpc->wq_tail->next = w;
	else
		rpc->wq_head = w;
	rpc->wq_tail = w;
}

static void wq_remove(asp_rpc *rpc, waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		rpc->wq_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		rpc->wq_tail = w->prev;
	w->prev = w->next = NULL;
}

/*
 * Under mu. Waits for w until `deadline` (CLOCK_MONOTONIC); false when it passed first.
 * Reads the channel itself while nobody else does (the leader, see the top).
 */
static bool waiter_wait(asp_rpc *rpc, waiter *w, const struct timespec *deadline)
{
	bool in_time = true, leading = false;
	while (!w->done) {
		if (leading || (rpc->pollable && !rpc->reading && !rpc->q_head &&
		                atomic_load(&rpc->state) == ALIVE)) {
			int ms = ms_until(deadline);
			if (ms == 0) {
				if (leading)
					role_release(rpc);
				in_time = false;
				break;
			}
			if (!leading)
				role_take(rpc);
			pthread_mutex_unlock(&rpc->mu);
			int r = read_one(rpc, ms); /* relocks */
			/* Ours came, a note needs a worker, none came in time, or it died. */
			leading = !(w->done || rpc->q_head || r <= 0);
			if (!leading)
				role_release(rpc);
			if (r == 0 && !w->done) {
				in_time = false;
				break;
			}
			continue;
		}
		if (rpc->pollable)
			wq_add(rpc, w);
		int t = pthread_cond_timedwait(&w->cv, &rpc->mu, deadline);
		if (rpc->pollable)
			wq_remove(rpc, w);
		if (t == ETIMEDOUT) {
			in_time = w->done;
			break;
		}
	}
	/* Told to lead just as it left: the next caller, or the poller, reads instead. */
	if (rpc->pollable && !rpc->reading)
		role_release(rpc);
	return in_time || w->done;
}

static struct timespec deadline_in(uint64_t ms)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t); /* vDSO: no syscall */
	if (ms > (uint64_t)INT32_MAX * 1000)
		ms = (uint64_t)INT32_MAX * 1000;
	t.tv_sec += (time_t)(ms / 1000);
	t.tv_nsec += (long)(ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	return t;
}

/*
 * The time limit `op` has of its own (exec's and proc_wait's timeout_ms), which its
 * deadline adds to call_timeout_ms. *unbounded: it has none (timeout_ms 0), so it may
 * legitimately wait for ever; it then waits call_timeout_ms at a time, probing.
 */
static uint64_t own_limit(asp_op_id op, const void *params, bool *unbounded)
{
	uint64_t t;
	if (op == ASP_OP_EXEC)
		t = ((const asp_exec_params *)params)->timeout_ms;
	else if (op == ASP_OP_PROC_WAIT)
		t = ((const asp_proc_wait_params *)params)->timeout_ms;
	else
		return *unbounded = false, 0;
	*unbounded = t == 0;
	return t;
}

static asp_status rpc_call(asp_rpc *rpc, asp_op_id op, const void *params, void *result,
                           asp_arena *a, unsigned timeout_ms, bool *gate, asp_error *err);

/*
 * A liveness probe, for a call with no limit of its own that has waited call_timeout_ms:
 * ASP_E_TIMEOUT when the responder does not answer a hello within call_timeout_ms.
 */
static asp_status probe(asp_rpc *rpc)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return ASP_E_INTERNAL;
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	asp_error e;
	unsigned ms = atomic_load_explicit(&rpc->call_timeout_ms, memory_order_relaxed);
	asp_status st = rpc_call(rpc, ASP_OP_HELLO, &hp, &hr, a, ms, NULL, &e);
	asp_arena_free(a);
	return st;
}

/* A copy of the cached hello answer (malloc'd), or NULL when there is none yet. */
static uint8_t *hello_cached(asp_rpc *rpc, size_t *len)
{
	uint8_t *m = NULL;
	pthread_mutex_lock(&rpc->mu);
	if (rpc->hello_frame && atomic_load(&rpc->state) == ALIVE) {
		m = malloc(rpc->hello_len);
		if (m) {
			memcpy(m, rpc->hello_frame, rpc->hello_len);
			*len = rpc->hello_len;
		}
	}
	pthread_mutex_unlock(&rpc->mu);
	return m;
}

/* Keeps `frame` (malloc'd, taken) as the hello answer unless one is kept already. */
static void hello_keep(asp_rpc *rpc, uint8_t *frame, size_t len)
{
	pthread_mutex_lock(&rpc->mu);
	if (frame && !rpc->hello_frame) {
		rpc->hello_frame = frame;
		rpc->hello_len = len;
		frame = NULL;
	}
	pthread_mutex_unlock(&rpc->mu);
	free(frame);
}

asp_status asp_rpc_invoke(void *self, asp_op_id op, const void *params, void *result, asp_arena *a,
                          asp_error *err)
{
	asp_rpc *rpc = self;
	if (op == ASP_OP_HELLO) { /* not the liveness probe: that one must ask */
		size_t len = 0;
		uint8_t *m = hello_cached(rpc, &len);
		if (m)
			return finish(rpc, op, m, len, result, a, err);
	}
	return rpc_call(rpc, op, params, result, a, 0, NULL, err);
}

asp_status asp_rpc_call(asp_rpc *rpc, asp_op_id op, const void *params, void *result, asp_arena *a,
                        unsigned timeout_ms, asp_error *err)
{
	return rpc_call(rpc, op, params, result, a, timeout_ms, NULL, err);
}

/*
 * Waits for the answer to `id` (docs/design.md, ".asp.json", docs/faults.md).
 * `timeout_ms` set: that deadline only. Else the deadline is call_timeout_ms plus the
 * op's own limit; missing it fails the call with timeout and makes the connection
 * suspect, and a second miss while suspect (no answer came in between) closes it. A call
 * without a limit of its own probes the responder every call_timeout_ms instead and
 * closes the connection when the probe is not answered. Returns the waiter's status (mu
 * not held).
 */
static asp_status await(asp_rpc *rpc, const asp_op_desc *d, const void *params, waiter *w,
                        uint32_t id, unsigned timeout_ms, asp_error *err)
{
	unsigned call_ms = atomic_load_explicit(&rpc->call_timeout_ms, memory_order_relaxed);
	bool unbounded = false;
	uint64_t own =
	    timeout_ms ? 0 : own_limit((asp_op_id)(d - asp_op_descs), params, &unbounded);
	uint64_t limit = timeout_ms ? timeout_ms : unbounded ? call_ms : own + call_ms;
	struct timespec deadline = deadline_in(limit);
	asp_error why;
	bool timed_out = false, second = false, probe_failed = false;
	pthread_mutex_lock(&rpc->mu);
	for (;;) {
		if (waiter_wait(rpc, w, &deadline))
			break;
		if (!unbounded) {
			/* The slot stays taken, so a late answer is told from a stray id. */
			rpc->slots[id & (SLOT_MAX - 1)] = ABANDONED;
			timed_out = true;
			second = !timeout_ms && rpc->suspect;
			if (!timeout_ms)
				rpc->suspect = true;
			break;
		}
		pthread_mutex_unlock(&rpc->mu);
		probe_failed = probe(rpc) == ASP_E_TIMEOUT;
		pthread_mutex_lock(&rpc->mu);
		if (probe_failed && !w->done) {
			rpc->slots[id & (SLOT_MAX - 1)] = ABANDONED;
			break;
		}
		probe_failed = false;
		deadline = deadline_in(call_ms);
	}
	asp_status st = ASP_OK;
	if (!timed_out && !probe_failed) {
		slot_release(rpc, id);
		st = w->st ? dead_error(rpc, err) : ASP_OK;
		pthread_mutex_unlock(&rpc->mu);
		return st;
	}
	pthread_mutex_unlock(&rpc->mu);
	if (timed_out && !second) {
		if (timeout_ms)
			return asp_error_set(err, ASP_E_TIMEOUT, NULL, "%s: no answer within %u ms",
			                     d->name, timeout_ms);
		if (own)
			return asp_error_set(
			    err, ASP_E_TIMEOUT, NULL,
			    "%s: no answer within %llu ms (its timeout_ms %llu + "
			    "call_timeout_ms %u); the connection is suspect: one more "
			    "missed deadline closes it",
			    d->name, (unsigned long long)limit, (unsigned long long)own, call_ms);
		return asp_error_set(err, ASP_E_TIMEOUT, NULL,
		                     "%s: no answer within call_timeout_ms (%u ms); the connection "
		                     "is suspect: one more missed deadline closes it",
		                     d->name, call_ms);
	}
	if (second)
		asp_error_set(&why, ASP_E_TRANSPORT_ERROR, NULL,
		              "%s: no answer within %llu ms, the second missed deadline in a row: "
		              "the responder is not answering, so the connection is closed (the "
		              "next call reconnects)",
		              d->name, (unsigned long long)limit);
	else
		asp_error_set(&why, ASP_E_TRANSPORT_ERROR, NULL,
		              "%s: the responder did not answer a liveness probe (hello) within "
		              "call_timeout_ms (%u ms), so the connection is closed (the next call "
		              "reconnects)",
		              d->name, call_ms);
	rpc_die(rpc, &why);
	pthread_mutex_lock(&rpc->mu);
	st = dead_error(rpc, err);
	pthread_mutex_unlock(&rpc->mu);
	return st;
}

/*
 * `gate` non-NULL: the answer closes the notification gate (see deliver) and *gate says
 * whether it did; the caller then opens it with gate_open.
 */
static asp_status rpc_call(asp_rpc *rpc, asp_op_id op, const void *params, void *result,
                           asp_arena *a, unsigned timeout_ms, bool *gate, asp_error *err)
{
	if ((unsigned)op >= ASP_OP_COUNT)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "unknown op %d", (int)op);
	const asp_op_desc *d = &asp_op_descs[op];
	waiter w = {.done = false, .gate = gate != NULL};
	asp_status st;
	pthread_cond_init(&w.cv, &rpc->mono); /* before the slot publishes it to the reader */

	pthread_mutex_lock(&rpc->mu);
	uint32_t id = 0;
	if (atomic_load(&rpc->state) != ALIVE) {
		st = dead_error(rpc, err);
	} else {
		id = slot_take(rpc, &w, &st);
		if (st == ASP_E_TRANSPORT_ERROR)
			st = dead_error(rpc, err);
		else if (st)
			asp_error_set(err, st, NULL, "out of memory");
	}
	pthread_mutex_unlock(&rpc->mu);
	if (st) {
		pthread_cond_destroy(&w.cv);
		return st;
	}

	asp_buf b;
	asp_buf_init(&b);
	/* Large bins go out from the caller's memory, which outlives the send. */
	b.ref_min = asp_channel_has_sendv(rpc->ch) ? ASP_BUF_REF_MIN : 0;
	size_t max = atomic_load_explicit(&rpc->max_send, memory_order_relaxed);
	size_t bins = bin_bytes(d->params, params);
	if (bins <= max &&
	    (asp_buf_reserve(&b, b.ref_min && bins >= b.ref_min ? 256 : 256 + bins) < 0 ||
	     asp_wire_request(&b, id, op, params) < 0)) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory encoding %s", d->name);
	} else if (bins > max || asp_buf_frame_len(&b) - ASP_FRAME_HEADER > max) {
		st = asp_error_set(
		    err, ASP_E_TOO_LARGE, NULL,
		    "%s: the request is %zu bytes, more than max_message (%zu); "
		    "send the data in smaller parts",
		    d->name, bins > max ? bins : asp_buf_frame_len(&b) - ASP_FRAME_HEADER, max);
	} else {
		pthread_mutex_lock(&rpc->send_mu);
		st = send_buf(rpc->ch, &b, err);
		pthread_mutex_unlock(&rpc->send_mu);
		asp_buf_free(&b);
		if (st)
			rpc_die(rpc, err); /* fails our waiter too, with the explained reason */
		st = await(rpc, d, params, &w, id, timeout_ms, err);
		if (gate)
			*gate = w.gate_taken;
		pthread_cond_destroy(&w.cv);
		if (st)
			return st;
		if (op != ASP_OP_HELLO)
			return finish(rpc, op, w.frame, w.len, result, a, err);
		uint8_t *copy = malloc(w.len); /* kept only when it decodes as a success */
		if (copy)
			memcpy(copy, w.frame, w.len);
		st = finish(rpc, op, w.frame, w.len, result, a, err);
		if (st != ASP_OK) {
			free(copy);
			copy = NULL;
		}
		hello_keep(rpc, copy, w.len);
		return st;
	}
	/* Not sent: nobody can answer this id. */
	asp_buf_free(&b);
	pthread_mutex_lock(&rpc->mu);
	slot_release(rpc, id);
	pthread_mutex_unlock(&rpc->mu);
	pthread_cond_destroy(&w.cv);
	return st;
}

/* ---- following spawned processes -------------------------------------------------- */

static void gate_open(asp_rpc *rpc)
{
	pthread_mutex_lock(&rpc->mu);
	if (--rpc->gates == 0)
		pthread_cond_broadcast(&rpc->gate_cv);
	pthread_mutex_unlock(&rpc->mu);
}

typedef struct gated_call {
	asp_rpc *rpc;
	bool gate;
} gated_call;

static asp_status call_gated(void *ctx, asp_op_id op, const void *params, void *result,
                             asp_arena *a, asp_error *err)
{
	gated_call *g = ctx;
	return rpc_call(g->rpc, op, params, result, a, 0, &g->gate, err);
}

asp_status asp_rpc_subscribe(void *self, asp_op_id op, const void *params, void *result,
                             asp_arena *a, asp_proc_sub *sub, asp_error *err)
{
	asp_rpc *rpc = self;
	gated_call g = {rpc, false};
	asp_status st =
	    asp_proc_routes_call(rpc->routes, call_gated, &g, op, params, result, a, sub, err);
	if (g.gate)
		gate_open(rpc);
	return st;
}

void asp_rpc_unsubscribe(void *self, uint64_t proc)
{
	asp_proc_routes_remove(((asp_rpc *)self)->routes, proc);
}
