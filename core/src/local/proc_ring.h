/*
 * The last bytes of one output stream of a spawned process, for proc_attach replays:
 * grows by doubling up to its limit (a quiet process costs little), then wraps. Offsets
 * are stream offsets (bytes produced before), so a reader asks for "from offset N".
 * Not thread-safe: the process's lock guards it.
 */
#ifndef ASP_LOCAL_PROC_RING_H
#define ASP_LOCAL_PROC_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct proc_ring {
	uint8_t *buf;
	size_t cap;     /* allocated; the byte at offset o sits at buf[o % cap] */
	size_t limit;   /* cap never grows past it */
	uint64_t total; /* bytes appended so far: the stream's end offset */
} proc_ring;

void proc_ring_init(proc_ring *r, size_t limit);
void proc_ring_free(proc_ring *r);

/*
 * Appends `n` bytes (n <= limit). When growing fails the ring keeps its size and wraps
 * earlier: fewer bytes held, never a failure.
 */
void proc_ring_append(proc_ring *r, const uint8_t *data, size_t n);

/* The oldest offset still held. */
uint64_t proc_ring_start(const proc_ring *r);

/*
 * The held bytes from `off` (start <= off <= total) that lie contiguously in memory, at
 * most `max`: *data and the count returned. 0 at the end.
 */
size_t proc_ring_span(const proc_ring *r, uint64_t off, size_t max, const uint8_t **data);

#endif
