/* The local backend's files' small helpers: time, out-of-memory errors, arena hand-over. */
#include "local_util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_COPY 4096 /* results up to this size are copied into the arena */

asp_status local_oom(const char *op, asp_error *err)
{
	return asp_error_oom(err, op, "the responder");
}

uint64_t local_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int local_poll_ms(uint64_t now, uint64_t until)
{
	if (until == UINT64_MAX)
		return -1;
	if (until <= now)
		return 0;
	uint64_t ms = (until - now + NS_PER_MS - 1) / NS_PER_MS;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

void local_deadline(struct timespec *dl, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, dl);
	dl->tv_sec += (time_t)(ms / 1000);
	dl->tv_nsec += (long)(ms % 1000) * 1000000;
	if (dl->tv_nsec >= 1000000000) {
		dl->tv_sec++;
		dl->tv_nsec -= 1000000000;
	}
}

void local_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

int local_bytes_give(asp_arena *a, uint8_t *buf, size_t len, size_t cap, asp_bytes *out)
{
	out->data = NULL;
	out->len = 0;
	if (len == 0) {
		free(buf);
		return 0;
	}
	if (len <= SMALL_COPY) {
		uint8_t *copy = asp_arena_alloc(a, len);
		if (copy)
			memcpy(copy, buf, len);
		free(buf);
		if (!copy)
			return -1;
		out->data = copy;
		out->len = len;
		return 0;
	}
	if (cap - len > len / 4) {
		uint8_t *shrunk = realloc(buf, len); /* give back what a growing buffer overshot */
		if (shrunk)
			buf = shrunk;
	}
	if (asp_arena_adopt(a, buf) < 0)
		return -1;
	out->data = buf;
	out->len = len;
	return 0;
}
