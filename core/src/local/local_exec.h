/*
 * exec's run, in steps (local_exec.c): started, then advanced by passes until over,
 * then ended into a result. asp_local_exec does it all on the calling thread, blocking;
 * asp_local_exec_start (asp/server.h) lets a server's own event loop do the waiting.
 */
#ifndef ASP_LOCAL_EXEC_H
#define ASP_LOCAL_EXEC_H

#include "local_impl.h"
#include "spawn_util.h"

#include <stdbool.h>
#include <stdint.h>

struct local_stream {
	int fd; /* -1 at EOF */
	uint8_t *buf;
	size_t len, cap, keep;
	uint64_t total;
	bool big_pipe;
};

struct local_feed {
	int fd; /* -1 once all written or the reader went away */
	const uint8_t *data;
	size_t len, off;
	bool epipe;
};

typedef struct local_exec_run {
	asp_local *l;
	local_child c;
	struct local_stream out, errs;
	struct local_feed in;
	uint8_t *scratch;
	local_pipe_guard guard;
	uint64_t t0, term_at, kill_at, give_up_at, t_end;
	bool exited, timed_out, killed;
	int backoff_ms;
} local_exec_run;

/*
 * Validates `p` and starts its command (`path_ok`, `ctx`: as in local_child_spec; NULL
 * for none). On ASP_OK `x` must be ended with local_exec_end. On failure nothing is left
 * to end; x->c.refused says the path check refused it. stdin bytes, if any, must stay
 * valid until the end.
 */
asp_status local_exec_begin(asp_local *l, const asp_exec_params *p,
                            bool (*path_ok)(void *ctx, const char *path), void *ctx,
                            local_exec_run *x, asp_error *err);

/*
 * One turn of the loop: the timeout's signals, a poll of the pipes and the exit (for as
 * long as the next deadline with `block`, else not at all), and what it found read or
 * written. With `block` this thread's asp_local_watch is polled too. true once the run
 * is over; it takes a few turns without `block` (the exit, then the output's EOF).
 */
bool local_exec_pass(local_exec_run *x, bool block);

/* ms until a pass is due even if nothing happens (a timeout's TERM or KILL), -1 none. */
int local_exec_due_ms(const local_exec_run *x);

/* After the run is over (or to give up on it, with a KILL first): the result. */
asp_status local_exec_end(local_exec_run *x, asp_exec_result *r, asp_arena *a, asp_error *err);

#endif
