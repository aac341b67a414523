/* Deep copies of a config view: what a client keeps of the config, and a parsed config. */
#ifndef ASP_CONFIG_COPY_H
#define ASP_CONFIG_COPY_H

#include "asp/arena.h"
#include "asp/config.h"

#include <stdbool.h>
#include <stddef.h>

/* Copies `src` and every string and list it points to into `a`; false when out of memory. */
bool asp_config_view_copy(asp_arena *a, const asp_config_view *src, asp_config_view *dst);

/*
 * The same into a new arena of about the copy's size, with `extra` bytes more for the
 * caller (a connection keeps it as long as it lives, so no 4 KiB first block). NULL
 * when out of memory. Free with asp_arena_free.
 */
asp_arena *asp_config_view_dup(const asp_config_view *src, asp_config_view *dst, size_t extra);

#endif
