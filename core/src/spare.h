/*
 * One allocation kept between uses of a per-request path, process-wide: a child's stack,
 * a request's bookkeeping, its msgpack zone, its arena. musl's allocator returns a freed
 * block of a few KiB to the kernel at once, so without this the static agent paid an
 * mmap, a munmap (or madvise) and the page faults between for each of them on every
 * request. One is enough for requests served one after another; calls that overlap
 * allocate the rest as before.
 */
#ifndef ASP_SPARE_H
#define ASP_SPARE_H

#include <stdatomic.h>

typedef struct asp_spare {
	_Atomic(void *) p;
} asp_spare;

/* The kept allocation, or NULL when none is kept (the caller allocates). */
static inline void *asp_spare_take(asp_spare *s)
{
	return atomic_exchange(&s->p, NULL);
}

/* Keeps `p` (ready for the next taker); returns the one it displaced, for the caller to
 * free, or NULL. */
static inline void *asp_spare_keep(asp_spare *s, void *p)
{
	return atomic_exchange(&s->p, p);
}

#endif
