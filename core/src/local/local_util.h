/* The local backend's small helpers (local_util.c): time and its limits, errors, arenas. */
#ifndef ASP_LOCAL_UTIL_H
#define ASP_LOCAL_UTIL_H

#include "asp/proto.h"
#include "asp/transport.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* ---- time, for exec and the pumps of spawned processes --------------------------- */

#define NS_PER_MS     1000000ull
#define KILL_GRACE_NS (2000ull * NS_PER_MS) /* KILL 2 s after TERM (design.md, "Operations") */
/* After the KILL, pipes still open belong to processes that left the group (setsid):
 * stop waiting for them. */
#define GIVE_UP_NS     (500ull * NS_PER_MS)
#define MAX_TIMEOUT_MS (1000ull * 1000 * 1000 * 10) /* ~115 days: as good as none */
#define BIG_OUTPUT     (256u * 1024u)               /* past this, a bigger pipe saves wakeups */

/* CLOCK_MONOTONIC in ns. */
uint64_t local_now_ns(void);

/* poll's timeout from now until `until` (UINT64_MAX: none, -1), rounded up to a ms. */
int local_poll_ms(uint64_t now, uint64_t until);

/* `ms` from now on CLOCK_MONOTONIC, for a condition variable made by local_cond_init. */
void local_deadline(struct timespec *dl, uint64_t ms);

/* A condition variable whose timed waits use CLOCK_MONOTONIC. */
void local_cond_init(pthread_cond_t *cv);

/* internal "OP: out of memory in the responder" (asp_error_oom). */
asp_status local_oom(const char *op, asp_error *err);

/*
 * Hands a malloc'd buffer of `len` used bytes (`cap` allocated) to the arena as `out`:
 * small ones are copied (so the arena does not hold a mostly empty block), large ones
 * adopted without a copy. `buf` is consumed either way. 0, or -1 when out of memory.
 */
int local_bytes_give(asp_arena *a, uint8_t *buf, size_t len, size_t cap, asp_bytes *out);

#endif
