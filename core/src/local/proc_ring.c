/* The replay ring of one output stream. */
#include "proc_ring.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_CAP 4096

void proc_ring_init(proc_ring *r, size_t limit)
{
	memset(r, 0, sizeof *r);
	r->limit = limit;
}

void proc_ring_free(proc_ring *r)
{
	free(r->buf);
	r->buf = NULL;
	r->cap = 0;
}

/* Grows while nothing has wrapped yet: then offset o sits at o in both the old and the
 * new buffer, so realloc keeps the mapping. */
static void grow(proc_ring *r, uint64_t need)
{
	if (r->cap >= r->limit || r->total > r->cap)
		return;
	size_t cap = r->cap ? r->cap : FIRST_CAP;
	while (cap < need && cap < r->limit)
		cap *= 2;
	if (cap > r->limit)
		cap = r->limit;
	if (cap == r->cap)
		return;
	uint8_t *nb = realloc(r->buf, cap);
	if (!nb)
		return;
	r->buf = nb;
	r->cap = cap;
}

void proc_ring_append(proc_ring *r, const uint8_t *data, size_t n)
{
	if (n == 0)
		return;
	if (r->total + n > r->cap)
		grow(r, r->total + n);
	if (r->cap == 0) { /* no memory at all: count the bytes, hold none */
		r->total += n;
		return;
	}
	if (n > r->cap) { /* only the last cap bytes can be held */
		r->total += n - r->cap;
		data += n - r->cap;
		n = r->cap;
	}
	size_t at = (size_t)(r->total % r->cap);
	size_t first = r->cap - at < n ? r->cap - at : n;
	memcpy(r->buf + at, data, first);
	memcpy(r->buf, data + first, n - first);
	r->total += n;
}

uint64_t proc_ring_start(const proc_ring *r)
{
	return r->total > r->cap ? r->total - r->cap : 0;
}

size_t proc_ring_span(const proc_ring *r, uint64_t off, size_t max, const uint8_t **data)
{
	*data = NULL;
	if (off >= r->total || off < proc_ring_start(r) || r->cap == 0)
		return 0;
	size_t at = (size_t)(off % r->cap);
	uint64_t left = r->total - off;
	size_t n = r->cap - at;
	if (n > left)
		n = (size_t)left;
	if (n > max)
		n = max;
	*data = r->buf + at;
	return n;
}
