/*
 * asp bind pi: pi's own tools on the sandbox (docs/harnesses.md, "pi"). The project's
 * .pi/settings.json lists the extension bindings/pi/index.ts, which pi loads without a
 * prompt; everything else in the file is kept. The extension finds the config as asp does
 * ($ASP_CONFIG, else .asp.json in pi's directory or above).
 */
#include "bind.h"

#include <limits.h>
#include <stdio.h>

static int plan_pi(const bind_ctx *b, bind_plan *plan)
{
	char dir[PATH_MAX], path[PATH_MAX], entry[PATH_MAX + 16];
	if (bind_bindings_dir(b, "pi", "index.ts", "asp-sdk", dir, sizeof dir) != 0)
		return -1;
	snprintf(entry, sizeof entry, "%s/index.ts", dir);
	snprintf(path, sizeof path, "%s/.pi/settings.json", b->project);
	json_t *obj, *before, *ext;
	if (bind_json_load(b, path, &obj, &before) != 0)
		return -1;
	if (!(ext = bind_json_array(b, path, obj, "extensions"))) {
		json_decref(obj);
		json_decref(before);
		return -1;
	}
	bind_json_union(ext, entry);
	return bind_plan_json(b, plan, path, obj, before);
}

const bind_harness bind_pi = {"pi", plan_pi};
