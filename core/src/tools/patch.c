/* apply_patch: Codex's patch format, checked whole before any file changes. */
#include "tools_impl.h"

bool tool_apply_patch(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)t, (void)args, (void)k;
	return tools_fail(r, "Error: apply_patch is not available yet.");
}
