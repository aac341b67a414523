/*
 * asp bind claude: Claude Code's own configuration in the project (docs/harnesses.md,
 * "Claude Code"). .mcp.json gets the server "asp" (asp mcp --config CONFIG), its tools
 * always loaded: they stand in for the denied built-ins, so they are offered up front as
 * those are, not deferred behind Claude Code's tool search;
 * .claude/settings.json denies the built-in tools that act on this machine and enables
 * the server without a prompt; .claude/settings.local.json allows its tools (Claude Code
 * ignores that allow rule in the shared settings of an untrusted folder). Everything else
 * in those files is kept.
 */
#include "bind.h"

#include <limits.h>
#include <stdio.h>

/* Claude Code 2.1's tools that read, write or run on the machine it runs on. */
static const char *const denied[] = {"Bash",         "Read",    "Edit",          "MultiEdit",
                                     "Write",        "Glob",    "Grep",          "LS",
                                     "NotebookEdit", "Monitor", "EnterWorktree", "ExitWorktree"};

static int plan_claude(const bind_ctx *b, bind_plan *plan)
{
	char path[PATH_MAX];
	json_t *obj, *before, *o;

	snprintf(path, sizeof path, "%s/.mcp.json", b->project);
	if (bind_json_load(b, path, &obj, &before) != 0)
		return -1;
	if (!(o = bind_json_object(b, path, obj, "mcpServers"))) {
		json_decref(obj);
		json_decref(before);
		return -1;
	}
	json_object_set_new(o, "asp",
	                    json_pack("{s:s, s:s, s:[s, s, s], s:b}", "type", "stdio", "command",
	                              b->asp, "args", "mcp", "--config", b->config, "alwaysLoad",
	                              1));
	if (bind_plan_json(b, plan, path, obj, before) != 0)
		return -1;

	snprintf(path, sizeof path, "%s/.claude/settings.json", b->project);
	if (bind_json_load(b, path, &obj, &before) != 0)
		return -1;
	json_t *perms = bind_json_object(b, path, obj, "permissions");
	json_t *deny = perms ? bind_json_array(b, path, perms, "deny") : NULL;
	json_t *enabled = deny ? bind_json_array(b, path, obj, "enabledMcpjsonServers") : NULL;
	if (!enabled) {
		json_decref(obj);
		json_decref(before);
		return -1;
	}
	for (size_t i = 0; i < sizeof denied / sizeof *denied; i++)
		bind_json_union(deny, denied[i]);
	bind_json_union(enabled, "asp");
	if (bind_plan_json(b, plan, path, obj, before) != 0)
		return -1;

	snprintf(path, sizeof path, "%s/.claude/settings.local.json", b->project);
	if (bind_json_load(b, path, &obj, &before) != 0)
		return -1;
	perms = bind_json_object(b, path, obj, "permissions");
	json_t *allow = perms ? bind_json_array(b, path, perms, "allow") : NULL;
	if (!allow) {
		json_decref(obj);
		json_decref(before);
		return -1;
	}
	bind_json_union(allow, "mcp__asp");
	return bind_plan_json(b, plan, path, obj, before);
}

const bind_harness bind_claude = {"claude", plan_claude};
