/* Private to libasp: where a key or value sits in JSON text, which jansson does not record. */
#ifndef ASP_CONFIG_LOCATE_H
#define ASP_CONFIG_LOCATE_H

#include <stdbool.h>
#include <stddef.h>

/* One step of a key path: an object key, or (key NULL) an array index. */
typedef struct asp_json_step {
	const char *key;
	size_t index;
} asp_json_step;

typedef enum asp_json_locate_what {
	ASP_JSON_AT_VALUE, /* the first byte of the value at the path */
	ASP_JSON_AT_KEY,   /* the key's string token, when the last step is a key */
} asp_json_locate_what;

/*
 * Finds the path in `text` (`len` bytes of JSON that jansson accepted, so well formed and
 * free of duplicate keys) and sets *line and *col, both from 1; columns count characters,
 * as jansson's do. Returns false when the path is not there, leaving the position of the
 * deepest value found. Never reads past `len`, whatever the text holds.
 */
bool asp_json_locate(const char *text, size_t len, const asp_json_step *path, size_t depth,
                     asp_json_locate_what what, unsigned *line, unsigned *col);

#endif
