/* tree_read's exclude patterns (asp/tree.h): glob's patterns, one patset each. */
#include "asp/tree.h"
#include "glob_match.h"

#include <stdlib.h>

struct asp_tree_exclude {
	size_t n;
	patset ps[];
};

asp_status asp_tree_exclude_new(const char *const *patterns, size_t n, asp_tree_exclude **out,
                                asp_error *err)
{
	*out = NULL;
	asp_tree_exclude *x = calloc(1, sizeof *x + n * sizeof x->ps[0]);
	if (!x)
		return asp_error_oom(err, "tree_read", "exclude patterns");
	for (size_t i = 0; i < n; i++) {
		asp_status st = !patterns[i] || !patterns[i][0]
		                    ? asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                                    "tree_read: exclude pattern %zu is empty", i)
		                    : patset_init(&x->ps[i], "tree_read", patterns[i], err);
		if (st != ASP_OK) {
			asp_tree_exclude_free(x);
			return st;
		}
		x->n++;
	}
	*out = x;
	return ASP_OK;
}

bool asp_tree_exclude_match(const asp_tree_exclude *x, const char *rel)
{
	for (size_t i = 0; x && i < x->n; i++)
		if (patset_match(&x->ps[i], rel))
			return true;
	return false;
}

void asp_tree_exclude_free(asp_tree_exclude *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->n; i++)
		patset_free(&x->ps[i]);
	free(x);
}
