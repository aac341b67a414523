/*
 * The process-wide I/O pool behind the RPC engine (io_pool.h).
 *
 * Registrations live in a table indexed by the low bits of their key; epoll carries the
 * key (index, generation, which fd), never a pointer, so an event the poller took out
 * just before asp_io_remove finds a stale generation instead of freed memory. The
 * poller runs the hooks under reg_mu, which asp_io_remove also takes: once it returns,
 * no hook is running or will run. Both fds are EPOLLONESHOT: one event each, then
 * disabled until armed again, so one connection never wakes the poller twice.
 */
#include "io_pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Workers at most: enough that a slow callback on one connection does not stall others. */
#define IO_WORKERS_MAX  8
#define EVENTS_PER_WAIT 64

typedef struct reg {
	const asp_io_hooks *hooks;
	void *ctx;
	int fd, watch_fd;
	uint32_t gen;
	bool live;
} reg;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int epfd = -1;
static int start_errno;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER; /* the table; held by hooks */
static reg *regs;
static uint32_t nregs, cap_regs;
static uint32_t *free_regs;
static uint32_t nfree_regs;

static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER; /* a leaf lock */
static pthread_cond_t job_cv = PTHREAD_COND_INITIALIZER;
static asp_io_job *job_head, **job_tail = &job_head;
static unsigned workers, idle_workers;

/* Key: generation (32 bits) | index (31 bits) | 1 for the watch fd. */
static uint64_t make_key(uint32_t idx, uint32_t gen)
{
	return (uint64_t)gen << 32 | (uint64_t)idx << 1;
}

/* Threads of the pool take no signals: they belong to the application's threads. */
static int start_thread(void *(*fn)(void *))
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	int e = pthread_create(&t, &at, fn, NULL);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}

static void *poller_main(void *arg)
{
	(void)arg;
	struct epoll_event ev[EVENTS_PER_WAIT];
	for (;;) {
		int n = epoll_wait(epfd, ev, EVENTS_PER_WAIT, -1);
		if (n < 0)
			continue; /* EINTR only: the fd and the buffer are ours */
		pthread_mutex_lock(&reg_mu);
		for (int i = 0; i < n; i++) {
			uint64_t key = ev[i].data.u64;
			uint32_t idx = (uint32_t)(key & 0xffffffffu) >> 1,
			         gen = (uint32_t)(key >> 32);
			if (idx >= nregs || !regs[idx].live || regs[idx].gen != gen)
				continue; /* removed since epoll_wait returned */
			reg *r = &regs[idx];
			if (!(key & 1)) {
				r->hooks->fired(r->ctx);
			} else if (r->watch_fd >= 0) {
				if (r->hooks->watch(r->ctx)) {
					struct epoll_event e = {.events = EPOLLIN | EPOLLONESHOT,
					                        .data.u64 = key};
					epoll_ctl(epfd, EPOLL_CTL_MOD, r->watch_fd, &e);
				} else {
					epoll_ctl(epfd, EPOLL_CTL_DEL, r->watch_fd, NULL);
					r->watch_fd = -1;
				}
			}
		}
		pthread_mutex_unlock(&reg_mu);
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&job_mu);
	for (;;) {
		while (!job_head) {
			idle_workers++;
			pthread_cond_wait(&job_cv, &job_mu);
			idle_workers--;
		}
		asp_io_job *j = job_head;
		job_head = j->next;
		if (!job_head)
			job_tail = &job_head;
		j->next = NULL;
		pthread_mutex_unlock(&job_mu);
		j->run(j->ctx); /* may requeue j, or free its owner: not touched after */
		pthread_mutex_lock(&job_mu);
	}
	return NULL;
}

/* The poller and the first worker, so a submitted job always has a thread to run it. */
static void start(void)
{
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0) {
		start_errno = errno;
		return;
	}
	int e = start_thread(worker_main);
	if (e == 0) {
		workers = 1;
		e = start_thread(poller_main);
	}
	if (e) { /* a worker that started only ever waits for jobs: harmless */
		close(epfd);
		epfd = -1;
		start_errno = e;
	}
}

uint64_t asp_io_add(int fd, int watch_fd, const asp_io_hooks *hooks, void *ctx, asp_error *err)
{
	pthread_once(&once, start);
	if (epfd < 0) {
		asp_error_errno(err, start_errno, NULL, "starting the connections' poller");
		return 0;
	}
	pthread_mutex_lock(&reg_mu);
	uint32_t idx;
	if (nfree_regs) {
		idx = free_regs[--nfree_regs];
	} else {
		if (nregs == cap_regs) {
			uint32_t cap = cap_regs ? cap_regs * 2 : 64;
			reg *r = realloc(regs, cap * sizeof *r);
			uint32_t *f = r ? realloc(free_regs, cap * sizeof *f) : NULL;
			if (r)
				regs = r;
			if (!f) {
				pthread_mutex_unlock(&reg_mu);
				asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
				return 0;
			}
			free_regs = f;
			cap_regs = cap;
		}
		idx = nregs++;
		regs[idx].gen = 0;
	}
	reg *r = &regs[idx];
	r->gen++;
	if (r->gen == 0)
		r->gen = 1; /* key 0 means failure */
	r->hooks = hooks;
	r->ctx = ctx;
	r->fd = fd;
	r->watch_fd = -1;
	r->live = true;
	uint64_t key = make_key(idx, r->gen);
	struct epoll_event e = {.events = EPOLLONESHOT, .data.u64 = key};
	int rc = epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
	if (rc == 0 && watch_fd >= 0) {
		struct epoll_event w = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = key | 1};
		rc = epoll_ctl(epfd, EPOLL_CTL_ADD, watch_fd, &w);
		if (rc == 0)
			r->watch_fd = watch_fd;
		else
			epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
	}
	if (rc) {
		int en = errno;
		r->live = false;
		free_regs[nfree_regs++] = idx;
		pthread_mutex_unlock(&reg_mu);
		if (en == ENOSPC)
			asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			              "epoll_ctl: the per-user limit of watched descriptors "
			              "(/proc/sys/fs/epoll/max_user_watches) is reached");
		else
			asp_error_errno(err, en, NULL, "epoll_ctl on a connection");
		return 0;
	}
	pthread_mutex_unlock(&reg_mu);
	return key;
}

void asp_io_arm(uint64_t key, int fd)
{
	struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.u64 = key};
	epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e);
}

void asp_io_disarm(uint64_t key, int fd)
{
	struct epoll_event e = {.events = EPOLLONESHOT, .data.u64 = key};
	epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e);
}

void asp_io_remove(uint64_t key)
{
	if (!key)
		return;
	uint32_t idx = (uint32_t)(key & 0xffffffffu) >> 1;
	pthread_mutex_lock(&reg_mu);
	reg *r = &regs[idx];
	if (r->live && r->gen == (uint32_t)(key >> 32)) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, r->fd, NULL);
		if (r->watch_fd >= 0)
			epoll_ctl(epfd, EPOLL_CTL_DEL, r->watch_fd, NULL);
		r->live = false;
		r->hooks = NULL;
		r->ctx = NULL;
		free_regs[nfree_regs++] = idx;
	}
	pthread_mutex_unlock(&reg_mu);
}

void asp_io_submit(asp_io_job *j)
{
	pthread_mutex_lock(&job_mu);
	j->next = NULL;
	*job_tail = j;
	job_tail = &j->next;
	/* A busy pool grows to IO_WORKERS_MAX; one that cannot grow still has its first. */
	if (idle_workers == 0 && workers < IO_WORKERS_MAX && start_thread(worker_main) == 0)
		workers++;
	pthread_cond_signal(&job_cv);
	pthread_mutex_unlock(&job_mu);
}
