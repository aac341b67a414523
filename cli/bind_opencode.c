/*
 * asp bind opencode: OpenCode's own tools on the sandbox (docs/harnesses.md, "OpenCode").
 * A tool file named after a built-in replaces it, so .opencode/tool/NAME.js gets, for each
 * of bash, read, write, edit, glob, grep and apply_patch, two lines that load the binding
 * (bindings/opencode) with this asp and this config. OpenCode installs its plugin package
 * into a config directory with tool files unless the directory has node_modules/ and a
 * lockfile naming it: the files import nothing of it, so .opencode gets both (an existing
 * lockfile is kept). A tool file that is not ours is never replaced.
 */
#include "bind.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const tools[] = {"bash", "read", "write", "edit", "glob", "grep", "apply_patch"};

#define MARK "Written by asp bind opencode"

static int plan_tool(const bind_ctx *b, bind_plan *plan, const char *dir, const char *tool)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/.opencode/tool/%s.js", b->project, tool);
	char *old;
	if (bind_read(b, path, &old) != 0)
		return -1;
	if (old && !strstr(old, MARK)) {
		free(old);
		return cli_usage(b->c,
		                 "%s is a tool file of your own: it replaces OpenCode's %s as ours "
		                 "would; move it, then run again",
		                 path, tool),
		       -1;
	}
	char *asp = bind_quote(b->asp), *config = bind_quote(b->config);
	size_t cap = strlen(dir) + strlen(asp ? asp : "") + strlen(config ? config : "") + 512;
	char *text = asp && config ? malloc(cap) : NULL;
	if (text)
		snprintf(text, cap,
		         "// " MARK ": OpenCode's %s acts in the sandbox of the config below\n"
		         "// (docs/harnesses.md, \"OpenCode\"). Run asp bind opencode again to "
		         "update it.\n"
		         "import { aspTool } from \"%s/asp.js\";\n\n"
		         "export default await aspTool(\"%s\", { asp: %s, config: %s });\n",
		         tool, dir, tool, asp, config);
	free(asp);
	free(config);
	if (!text) {
		free(old);
		return cli_fail_errno(b->c, ENOMEM, "bind"), -1;
	}
	if (old && !strcmp(old, text)) {
		free(text);
		text = NULL;
	}
	free(old);
	return bind_plan_text(b, plan, path, text);
}

static int plan_opencode(const bind_ctx *b, bind_plan *plan)
{
	char dir[PATH_MAX], path[PATH_MAX];
	if (bind_bindings_dir(b, "opencode", "asp.js", NULL, dir, sizeof dir) != 0)
		return -1;
	for (size_t i = 0; i < sizeof tools / sizeof *tools; i++)
		if (plan_tool(b, plan, dir, tools[i]) != 0)
			return -1;

	snprintf(path, sizeof path, "%s/.opencode/package-lock.json", b->project);
	if (access(path, F_OK) != 0) {
		json_t *lock = json_pack("{s:i, s:{s:{s:{s:s}}}}", "lockfileVersion", 3, "packages",
		                         "", "dependencies", "@opencode-ai/plugin", "*");
		if (bind_plan_json(b, plan, path, lock, NULL) != 0)
			return -1;
	}
	snprintf(path, sizeof path, "%s/.opencode/node_modules", b->project);
	if (access(path, F_OK) != 0) {
		snprintf(path, sizeof path, "%s/.opencode/node_modules/.asp-bind", b->project);
		char *note =
		    strdup("asp bind opencode: this directory tells OpenCode that the tool "
		           "files' dependencies are installed (they import none).\n");
		if (bind_plan_text(b, plan, path, note) != 0)
			return -1;
	}
	return 0;
}

const bind_harness bind_opencode = {"opencode", plan_opencode};
