/*
 * Arenas sized for what they hold (core only): a connection keeps its copy of the config
 * for as long as it lives, and asp_arena_new's first block (4 KiB) would be most of what
 * an idle connection costs.
 */
#ifndef ASP_ARENA_CAP_H
#define ASP_ARENA_CAP_H

#include "asp/arena.h"

#include <stddef.h>

/* As asp_arena_new, with a first block of `cap` bytes. */
asp_arena *asp_arena_new_cap(size_t cap);

/* The bytes handed out so far (alignment included): what a block of that size holds. */
size_t asp_arena_used(const asp_arena *a);

#endif
