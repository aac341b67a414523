/* The tools layer's handle, its table of tools and the call that dispatches to them. */
#include "shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --- the handle ------------------------------------------------------------------------- */

/*
 * Under hello_mu: asks hello and keeps its ops, protocol and features; *start_dir (when
 * not NULL) gets its start directory, malloc'd.
 */
static asp_status hello_ask(asp_tools *t, char **start_dir, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "asp-tools";
	asp_hello_result hr;
	asp_status st = asp_hello(t->c, &hp, &hr, a, err);
	if (st == ASP_OK) {
		t->protocol = hr.protocol;
		t->ops = calloc(hr.ops.count + 1, sizeof *t->ops);
		for (size_t i = 0; t->ops && i < hr.ops.count; i++)
			if ((t->ops[t->n_ops] = strdup(hr.ops.items[i])))
				t->n_ops++;
		for (size_t i = 0; hr.has_features && i < hr.features.count; i++) {
			const char *f = hr.features.items[i];
			t->grep_ere = t->grep_ere || !strcmp(f, "grep-ere");
			t->pty = t->pty || !strcmp(f, "pty");
			t->reattach = t->reattach || !strcmp(f, "reattach");
		}
		if (start_dir)
			*start_dir = hr.cwd ? strdup(hr.cwd) : NULL;
		if (!t->ops || (start_dir && hr.cwd && !*start_dir))
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		else
			t->hello_done = true;
	}
	asp_arena_free(a);
	return st;
}

asp_status tools_hello(asp_tools *t, asp_error *err)
{
	pthread_mutex_lock(&t->hello_mu);
	asp_status st = t->hello_done ? ASP_OK : hello_ask(t, NULL, err);
	pthread_mutex_unlock(&t->hello_mu);
	return st;
}

/*
 * Whether the handle needs the responder's start directory now: for a cwd that is not
 * absolute, or a workspace's sandbox directory that is not (asp_workspace_from_config).
 */
static bool needs_start_dir(const asp_config_view *cfg)
{
	const char *sb = cfg->workspace.sandbox;
	return !cfg->cwd || cfg->cwd[0] != '/' || (sb && sb[0] != '/');
}

asp_status asp_tools_new(asp_client *c, asp_tools **out, asp_error *err)
{
	*out = NULL;
	asp_tools *t = calloc(1, sizeof *t);
	if (!t)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	t->c = c;
	pthread_mutex_init(&t->mu, NULL);
	pthread_mutex_init(&t->hello_mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	/*
	 * hello is asked here only when relative paths need its start directory; otherwise
	 * on the first call that needs its ops or features, so a first command does not
	 * wait a round trip for it (over native SSH, an exec of its own).
	 */
	const asp_config_view *cfg = asp_client_config(c);
	char *start = NULL;
	if (needs_start_dir(cfg)) {
		asp_status st = hello_ask(t, &start, err);
		if (st != ASP_OK) {
			asp_tools_free(t);
			return st;
		}
	}
	/* Relative paths: the config's cwd, itself relative to the responder's start directory. */
	const char *ccwd = cfg->cwd;
	tbuf base = {0};
	if (!ccwd || ccwd[0] != '/')
		tb_puts(&base, start && start[0] == '/' ? start : "/");
	if (ccwd) {
		tb_puts(&base, "/");
		tb_puts(&base, ccwd);
	}
	t->base = tb_take(&base);
	char *norm = t->base ? tools_abs(t, t->base) : NULL;
	free(t->base);
	t->base = norm;
	/* The harness's paths (docs/design.md, ".asp.json"): when it works under the local
	 * directory, its relative paths mean the same place under the sandbox's. */
	asp_status st = t->base ? asp_workspace_from_config(cfg, start, &t->ws, err) : ASP_OK;
	free(start);
	if (st != ASP_OK) {
		asp_tools_free(t);
		return st;
	}
	char here[4096];
	if (t->ws && getcwd(here, sizeof here)) {
		char *mapped = asp_workspace_to_sandbox(t->ws, here, NULL);
		if (mapped && strcmp(mapped, here) != 0) {
			free(t->base);
			t->base = mapped;
		} else {
			free(mapped);
		}
	}
	if (!t->base) {
		asp_tools_free(t);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	*out = t;
	return ASP_OK;
}

void asp_tools_free(asp_tools *t)
{
	if (!t)
		return;
	tools_procs_free(t);
	for (size_t i = 0; i < t->n_ops; i++)
		free(t->ops[i]);
	free(t->ops);
	free(t->base);
	free(t->session);
	asp_workspace_free(t->ws);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	pthread_mutex_destroy(&t->hello_mu);
	free(t);
}

/* --- the table --------------------------------------------------------------------------- */

typedef struct tool_entry {
	asp_tool_desc desc;
	tool_fn fn;
} tool_entry;

/* clang-format off */
static const tool_entry tools_table[] = {
    {{"bash",
      "Executes a bash command in the sandbox and returns its combined stdout and stderr, "
      "with the exit code when it is not zero. Each call is a fresh shell: use absolute "
      "paths or `cd DIR && ...`. Default timeout 120000 ms (2 minutes), at most 600000. "
      "Output over 30000 characters keeps its head and tail with a note of what was cut. "
      "Set run_in_background to start a long-running command: the result is its bash_id, "
      "for bash_output (new output since the last read) and kill_bash. Prefer the read, "
      "grep, glob and ls tools over cat, grep, find and ls in bash.",
      "{\"type\":\"object\",\"properties\":{"
      "\"command\":{\"type\":\"string\",\"description\":\"The command to execute\"},"
      "\"timeout\":{\"type\":\"number\",\"description\":\"Optional timeout in milliseconds (max 600000)\"},"
      "\"description\":{\"type\":\"string\",\"description\":\"Clear, concise description of what this command does in 5-10 words\"},"
      "\"run_in_background\":{\"type\":\"boolean\",\"description\":\"Set to true to run this command in the background; read its output later with bash_output\"}},"
      "\"required\":[\"command\"],\"additionalProperties\":false}"},
     tool_bash},
    {{"bash_output",
      "Returns the output a background bash command (started with run_in_background) "
      "produced since the last bash_output call for it, and whether it is still running "
      "or its exit code.",
      "{\"type\":\"object\",\"properties\":{"
      "\"bash_id\":{\"type\":\"string\",\"description\":\"The id of the background shell, from bash\"}},"
      "\"required\":[\"bash_id\"],\"additionalProperties\":false}"},
     tool_bash_output},
    {{"kill_bash",
      "Kills a background bash command (its whole process group) by its bash_id.",
      "{\"type\":\"object\",\"properties\":{"
      "\"bash_id\":{\"type\":\"string\",\"description\":\"The id of the background shell to kill\"}},"
      "\"required\":[\"bash_id\"],\"additionalProperties\":false}"},
     tool_kill_bash},
    {{"bash_list",
      "Lists the commands of the current session that the sandbox still knows: background bash "
      "commands (bash_N) and exec_command sessions, running or finished, those started "
      "before the tool server restarted included, each with its state and command. Use it "
      "to find a command whose id you no longer have; bash_output then reads its output.",
      "{\"type\":\"object\",\"properties\":{},\"required\":[],\"additionalProperties\":false}"},
     tool_bash_list},
    {{"exec_command",
      "Runs a command in a PTY, returning output or a session ID for ongoing interaction. "
      "The command runs in the sandbox as `shell -lc cmd`; the call waits up to "
      "yield_time_ms for it to finish. If it is still running, the answer carries a "
      "session ID: use write_stdin to send it input (tty: true for programs that need a "
      "terminal, such as REPLs) or to poll for more output.",
      "{\"type\":\"object\",\"properties\":{"
      "\"cmd\":{\"type\":\"string\",\"description\":\"Shell command to execute.\"},"
      "\"workdir\":{\"type\":\"string\",\"description\":\"Working directory for the command. Defaults to the sandbox's working directory.\"},"
      "\"shell\":{\"type\":\"string\",\"description\":\"Shell binary to launch. Defaults to bash (/bin/sh where the sandbox has no bash).\"},"
      "\"login\":{\"type\":\"boolean\",\"description\":\"True runs the shell with -l/-i semantics; false disables them. Defaults to true.\"},"
      "\"tty\":{\"type\":\"boolean\",\"description\":\"True allocates a PTY for the command; false or omitted uses plain pipes.\"},"
      "\"yield_time_ms\":{\"type\":\"number\",\"description\":\"Wait before yielding output. Defaults to 10000 ms; effective range is 250-30000 ms.\"},"
      "\"max_output_tokens\":{\"type\":\"number\",\"description\":\"Output token budget. Defaults to 10000 tokens.\"}},"
      "\"required\":[\"cmd\"],\"additionalProperties\":false}"},
     tool_exec_command},
    {{"write_stdin",
      "Writes characters to an existing unified exec session and returns recent output.",
      "{\"type\":\"object\",\"properties\":{"
      "\"session_id\":{\"type\":\"number\",\"description\":\"Identifier of the running unified exec session.\"},"
      "\"chars\":{\"type\":\"string\",\"description\":\"Bytes to write to stdin. Defaults to empty, which polls without writing.\"},"
      "\"yield_time_ms\":{\"type\":\"number\",\"description\":\"Wait before yielding output. Non-empty writes default to 250 ms and cap at 30000 ms; empty polls wait 5000-300000 ms.\"},"
      "\"max_output_tokens\":{\"type\":\"number\",\"description\":\"Output token budget. Defaults to 10000 tokens.\"}},"
      "\"required\":[\"session_id\"],\"additionalProperties\":false}"},
     tool_write_stdin},
    {{"read",
      "Reads a file in the sandbox. Returns up to 2000 lines from the start (or from "
      "`offset`, a 1-based line number, `limit` lines), in cat -n format: the line number "
      "right-aligned, a tab, the line. Lines longer than 2000 characters are cut. Relative "
      "paths resolve against the sandbox's working directory; prefer absolute paths. "
      "Directories are refused (use ls); binary files are described, not dumped.",
      "{\"type\":\"object\",\"properties\":{"
      "\"file_path\":{\"type\":\"string\",\"description\":\"The path of the file to read\"},"
      "\"offset\":{\"type\":\"number\",\"description\":\"The line number to start reading from (1-based)\"},"
      "\"limit\":{\"type\":\"number\",\"description\":\"The number of lines to read\"}},"
      "\"required\":[\"file_path\"],\"additionalProperties\":false}"},
     tool_read},
    {{"write",
      "Writes a file in the sandbox, replacing it if it exists, creating missing parent "
      "directories. The write is atomic: readers see the old or the new file. Prefer edit "
      "for changing part of an existing file.",
      "{\"type\":\"object\",\"properties\":{"
      "\"file_path\":{\"type\":\"string\",\"description\":\"The path of the file to write\"},"
      "\"content\":{\"type\":\"string\",\"description\":\"The content to write to the file\"}},"
      "\"required\":[\"file_path\",\"content\"],\"additionalProperties\":false}"},
     tool_write},
    {{"edit",
      "Replaces exact text in a file in the sandbox. old_string must appear exactly once "
      "(give more surrounding context to make it unique) unless replace_all is true, which "
      "replaces every occurrence. Match the file's text exactly, indentation included, "
      "without the line-number prefix of read's output. An empty old_string creates a new "
      "file with new_string as its content.",
      "{\"type\":\"object\",\"properties\":{"
      "\"file_path\":{\"type\":\"string\",\"description\":\"The path of the file to modify\"},"
      "\"old_string\":{\"type\":\"string\",\"description\":\"The text to replace\"},"
      "\"new_string\":{\"type\":\"string\",\"description\":\"The text to replace it with (must be different from old_string)\"},"
      "\"replace_all\":{\"type\":\"boolean\",\"default\":false,\"description\":\"Replace all occurrences of old_string\"}},"
      "\"required\":[\"file_path\",\"old_string\",\"new_string\"],\"additionalProperties\":false}"},
     tool_edit},
    {{"glob",
      "Finds files in the sandbox by glob pattern (\"**/*.c\", \"src/**/*.{h,c}\"), "
      "newest first, at most 100 paths, one per line. `path` is the directory to search "
      "(default: the working directory). .git is skipped.",
      "{\"type\":\"object\",\"properties\":{"
      "\"pattern\":{\"type\":\"string\",\"description\":\"The glob pattern to match files against\"},"
      "\"path\":{\"type\":\"string\",\"description\":\"The directory to search in (default: the working directory)\"}},"
      "\"required\":[\"pattern\"],\"additionalProperties\":false}"},
     tool_glob},
    {{"grep",
      "Searches file contents in the sandbox with a Perl-compatible regular expression. "
      "output_mode: \"files_with_matches\" (default: the paths, one per line), \"content\" "
      "(path:line:text; -A/-B/-C context lines, -n line numbers, on by default) or "
      "\"count\" (path:count). `glob` filters file names (\"*.js\", \"*.{ts,tsx}\"); `-i` "
      "ignores case; head_limit keeps the first N lines or entries; multiline lets . and "
      "patterns span lines. Binary files and .git are skipped.",
      "{\"type\":\"object\",\"properties\":{"
      "\"pattern\":{\"type\":\"string\",\"description\":\"The regular expression to search for\"},"
      "\"path\":{\"type\":\"string\",\"description\":\"File or directory to search in (default: the working directory)\"},"
      "\"glob\":{\"type\":\"string\",\"description\":\"Glob to filter files (e.g. \\\"*.js\\\", \\\"*.{ts,tsx}\\\")\"},"
      "\"output_mode\":{\"type\":\"string\",\"enum\":[\"content\",\"files_with_matches\",\"count\"],\"description\":\"What to show (default files_with_matches)\"},"
      "\"-i\":{\"type\":\"boolean\",\"description\":\"Case insensitive search\"},"
      "\"-n\":{\"type\":\"boolean\",\"description\":\"Show line numbers (content mode)\"},"
      "\"-A\":{\"type\":\"number\",\"description\":\"Lines to show after each match (content mode)\"},"
      "\"-B\":{\"type\":\"number\",\"description\":\"Lines to show before each match (content mode)\"},"
      "\"-C\":{\"type\":\"number\",\"description\":\"Lines to show before and after each match (content mode)\"},"
      "\"head_limit\":{\"type\":\"number\",\"description\":\"Keep only the first N lines or entries\"},"
      "\"multiline\":{\"type\":\"boolean\",\"description\":\"Let patterns span lines (. matches newlines)\"}},"
      "\"required\":[\"pattern\"],\"additionalProperties\":false}"},
     tool_grep},
    {{"ls",
      "Lists a directory in the sandbox: one entry per line, directories with a trailing "
      "slash. `path` should be absolute; `ignore` is a list of glob patterns of names to "
      "leave out.",
      "{\"type\":\"object\",\"properties\":{"
      "\"path\":{\"type\":\"string\",\"description\":\"The directory to list\"},"
      "\"ignore\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":\"Glob patterns of names to ignore\"}},"
      "\"required\":[\"path\"],\"additionalProperties\":false}"},
     tool_ls},
    {{"apply_patch",
      TOOLS_PATCH_DESCRIPTION,
      "{\"type\":\"object\",\"properties\":{"
      "\"input\":{\"type\":\"string\",\"description\":\"The entire contents of the apply_patch command\"}},"
      "\"required\":[\"input\"],\"additionalProperties\":false}"},
     tool_apply_patch},
};
/* clang-format on */

#define N_TOOLS (sizeof tools_table / sizeof tools_table[0])

static asp_tool_desc descs[N_TOOLS];
static pthread_once_t descs_once = PTHREAD_ONCE_INIT;

static void descs_fill(void)
{
	for (size_t i = 0; i < N_TOOLS; i++)
		descs[i] = tools_table[i].desc;
}

const asp_tool_desc *asp_tools_list(size_t *count)
{
	pthread_once(&descs_once, descs_fill);
	*count = N_TOOLS;
	return descs;
}

static const tool_entry *find_entry(const char *name)
{
	for (size_t i = 0; i < N_TOOLS; i++)
		if (!strcmp(tools_table[i].desc.name, name))
			return &tools_table[i];
	return NULL;
}

const asp_tool_desc *asp_tools_find(const char *name)
{
	size_t n;
	const asp_tool_desc *d = asp_tools_list(&n);
	const tool_entry *e = find_entry(name);
	return e ? &d[e - tools_table] : NULL;
}

const asp_tool_desc *asp_tools_vocab_list(const char *vocab, size_t *count)
{
	if (!vocab || !strcmp(vocab, ASP_TOOLS_VOCAB_DEFAULT))
		return asp_tools_list(count);
	return tools_vocab_list(vocab, count);
}

asp_status asp_tools_call(asp_tools *t, const char *name, const char *args_json, char **result_text,
                          bool *is_error, asp_tools_cancel *cancel)
{
	return asp_tools_call_vocab(t, NULL, name, args_json, result_text, is_error, cancel);
}

asp_status asp_tools_call_vocab(asp_tools *t, const char *vocab, const char *name,
                                const char *args_json, char **result_text, bool *is_error,
                                asp_tools_cancel *cancel)
{
	tresult r = {0};
	asp_status st = ASP_OK;
	*result_text = NULL;
	*is_error = true;
	bool plain = !vocab || !strcmp(vocab, ASP_TOOLS_VOCAB_DEFAULT);
	const tool_entry *e = plain ? find_entry(name) : NULL;
	json_t *args = NULL;
	if (!plain && !tools_vocab_known(vocab)) {
		tools_fail(&r,
		           "Error: no vocabulary is called `%s` (there are claude and opencode).",
		           vocab);
		st = ASP_E_INVALID_ARGUMENT;
		goto out;
	}
	if (plain && !e) {
		tools_fail(&r, "Error: no tool is called `%s`.", name);
		st = ASP_E_NOT_FOUND;
		goto out;
	}
	json_error_t jerr;
	args = json_loads(args_json && *args_json ? args_json : "{}", 0, &jerr);
	if (!args || !json_is_object(args)) {
		tools_fail(&r, "Error: the arguments of %s must be a JSON object.", name);
		st = ASP_E_INVALID_ARGUMENT;
		goto out;
	}
	if (!plain) {
		const char *target = NULL;
		json_t *mapped = tools_vocab_translate(vocab, name, args, &target, &r);
		if (!target) {
			st = ASP_E_NOT_FOUND;
			goto out;
		}
		json_decref(args);
		args = mapped;
		if (!args)
			goto out;
		e = find_entry(target);
	}
	if (tools_cancelled(cancel)) {
		tools_fail(&r, "The %s call was cancelled before it started.", name);
		goto out;
	}
	e->fn(t, args, &r, cancel);
out:
	json_decref(args);
	*is_error = r.is_error;
	tools_utf8_fix(&r.text);
	*result_text = tb_take(&r.text);
	if (!*result_text)
		return ASP_E_INTERNAL;
	return st;
}
