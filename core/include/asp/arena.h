/* A bump allocator that owns everything a decoded message or an op result points at. */
#ifndef ASP_ARENA_H
#define ASP_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Results of every op are written into caller-provided structs whose strings and
 * byte buffers live in an arena. Free the arena once to release all of them.
 */
typedef struct asp_arena asp_arena;

/* A new, empty arena; NULL when out of memory. Free with asp_arena_free. */
asp_arena *asp_arena_new(void);

/* Releases the arena and everything allocated in or adopted by it. NULL is a no-op. */
void asp_arena_free(asp_arena *a);

/* Releases everything but keeps the arena usable (and its first block) for reuse. */
void asp_arena_reset(asp_arena *a);

/* `size` bytes aligned for any type, or NULL when out of memory. Zero-filled. */
void *asp_arena_alloc(asp_arena *a, size_t size);

/* A NUL-terminated copy of `len` bytes of `s`, or NULL when out of memory. */
char *asp_arena_strndup(asp_arena *a, const char *s, size_t len);

/*
 * Hands a malloc'd block to the arena, which frees it with free() when the arena is
 * freed or reset. Lets a decoded message point into the frame it came from. On
 * failure (out of memory) `ptr` is freed here and -1 returned.
 */
int asp_arena_adopt(asp_arena *a, void *ptr);

#ifdef __cplusplus
}
#endif

#endif
