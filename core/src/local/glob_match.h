/*
 * The pattern syntax of glob (spec/protocol.json, glob): `*`, `?`, `[...]`, `{a,b}` and
 * `**` as a whole component; a pattern without '/' matches the name at any depth. Used by
 * glob, grep's glob filter and tree_read's exclude.
 */
#ifndef ASP_LOCAL_GLOB_MATCH_H
#define ASP_LOCAL_GLOB_MATCH_H

#include "asp/status.h"

#include <stdbool.h>
#include <stddef.h>

#define MAX_PATTERNS 256 /* after {a,b} expansion */

/* One pattern expanded into its alternatives. */
typedef struct patset {
	char *pat[MAX_PATTERNS];
	bool hid[MAX_PATTERNS]; /* the pattern names a hidden name */
	bool any_hid;
	size_t n;
} patset;

/* Expands `pattern` into *ps; invalid_argument (naming `op`) when it expands too far. */
asp_status patset_init(patset *ps, const char *op, const char *pattern, asp_error *err);

/* Whether the path `rel` (below the search root) matches. */
bool patset_match(const patset *ps, const char *rel);

/* grep's filter: a path with a hidden name passes only a pattern that names one. */
bool patset_match_grep(const patset *ps, const char *rel);

void patset_free(patset *ps);

#endif
