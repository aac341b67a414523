/*
 * Private to the core: the RPC engine's process-wide I/O pool. One poller thread watches
 * every idle connection's file descriptors with epoll, and a few worker threads (at most
 * IO_WORKERS_MAX, started as needed) read the connections it finds readable, so the
 * number of threads does not grow with the number of connections.
 */
#ifndef ASP_RPC_IO_POOL_H
#define ASP_RPC_IO_POOL_H

#include "asp/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct asp_io_hooks {
	/* On the poller: `fd` became readable (or hung up); it is disarmed now. */
	void (*fired)(void *ctx);
	/* On the poller: `watch_fd` is readable. Must not block; false stops the watch. */
	bool (*watch)(void *ctx);
} asp_io_hooks;

/* A job for a worker; embedded in its owner, which is queued at most once at a time. */
typedef struct asp_io_job {
	struct asp_io_job *next;
	void (*run)(void *ctx);
	void *ctx;
} asp_io_job;

/*
 * Registers `fd` (disarmed) and `watch_fd` (armed; -1: none) with `hooks` and `ctx`, and
 * starts the poller and a first worker on first use. The key names the registration; 0 on failure,
 * with `err` set.
 */
uint64_t asp_io_add(int fd, int watch_fd, const asp_io_hooks *hooks, void *ctx, asp_error *err);

/* The next readability of the registration's fd calls hooks->fired (once). Any thread. */
void asp_io_arm(uint64_t key, int fd);
/* Undoes asp_io_arm, so readability goes to whoever reads the fd itself. Any thread. */
void asp_io_disarm(uint64_t key, int fd);

/*
 * Ends the registration: when it returns, no hook runs for it any more (one running now
 * has returned). The caller must not hold a lock a hook takes.
 */
void asp_io_remove(uint64_t key);

/* Queues `j` for a worker thread. Only after a successful asp_io_add. */
void asp_io_submit(asp_io_job *j);

#endif
