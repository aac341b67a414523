/* asp_arena: chained blocks plus a list of adopted malloc'd pointers. */
#include "asp/arena.h"
#include "arena_cap.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_BLOCK 4096

struct block {
	struct block *next;
	size_t cap, used;
	alignas(max_align_t) unsigned char data[];
};

struct adopted {
	struct adopted *next;
	void *ptr;
};

struct asp_arena {
	struct block *blocks; /* newest first; the last one is the first block, kept on reset */
	struct adopted *adopted;
};

static struct block *block_new(size_t cap)
{
	struct block *b = malloc(sizeof *b + cap);
	if (!b)
		return NULL;
	b->next = NULL;
	b->cap = cap;
	b->used = 0;
	return b;
}

asp_arena *asp_arena_new_cap(size_t cap)
{
	asp_arena *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	a->blocks = block_new(cap);
	if (!a->blocks) {
		free(a);
		return NULL;
	}
	return a;
}

asp_arena *asp_arena_new(void)
{
	return asp_arena_new_cap(FIRST_BLOCK);
}

size_t asp_arena_used(const asp_arena *a)
{
	size_t n = 0;
	for (const struct block *b = a->blocks; b; b = b->next)
		n += b->used;
	return n;
}

static void free_adopted(asp_arena *a)
{
	for (struct adopted *d = a->adopted, *next; d; d = next) {
		next = d->next;
		free(d->ptr);
		free(d);
	}
	a->adopted = NULL;
}

void asp_arena_reset(asp_arena *a)
{
	if (!a)
		return;
	free_adopted(a);
	struct block *b = a->blocks;
	while (b->next) {
		struct block *next = b->next;
		free(b);
		b = next;
	}
	b->used = 0;
	a->blocks = b;
}

void asp_arena_free(asp_arena *a)
{
	if (!a)
		return;
	free_adopted(a);
	for (struct block *b = a->blocks, *next; b; b = next) {
		next = b->next;
		free(b);
	}
	free(a);
}

void *asp_arena_alloc(asp_arena *a, size_t size)
{
	const size_t align = alignof(max_align_t);
	size_t need = (size + align - 1) & ~(align - 1);
	if (need < size)
		return NULL;
	struct block *b = a->blocks;
	if (b->cap - b->used < need) {
		size_t cap = b->cap * 2;
		if (cap < need)
			cap = need;
		struct block *nb = block_new(cap);
		if (!nb)
			return NULL;
		nb->next = b;
		a->blocks = nb;
		b = nb;
	}
	void *p = b->data + b->used;
	b->used += need;
	memset(p, 0, size);
	return p;
}

char *asp_arena_strndup(asp_arena *a, const char *s, size_t len)
{
	if (len == (size_t)-1)
		return NULL;
	char *p = asp_arena_alloc(a, len + 1);
	if (!p)
		return NULL;
	if (len)
		memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

int asp_arena_adopt(asp_arena *a, void *ptr)
{
	struct adopted *d = malloc(sizeof *d);
	if (!d) {
		free(ptr);
		return -1;
	}
	d->ptr = ptr;
	d->next = a->adopted;
	a->adopted = d;
	return 0;
}
