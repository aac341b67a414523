/* Value types the generated op structs are built from. */
#ifndef ASP_TYPES_H
#define ASP_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes (msgpack bin). In a decoded message they may point into the received frame. */
typedef struct asp_bytes {
	const uint8_t *data;
	size_t len;
} asp_bytes;

/* An array of NUL-terminated strings (msgpack array of str). */
typedef struct asp_strv {
	const char *const *items;
	size_t count;
} asp_strv;

typedef struct asp_strmap_entry {
	const char *key;
	const char *value;
} asp_strmap_entry;

/* A string-to-string map (msgpack map of str → str), in wire order. */
typedef struct asp_strmap {
	const asp_strmap_entry *items;
	size_t count;
} asp_strmap;

#ifdef __cplusplus
}
#endif

#endif
