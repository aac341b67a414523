/*
 * The tools layer (docs/design.md, "The tools layer and the MCP binding"): the tools a
 * coding agent calls — bash, exec_command and write_stdin, read, write, edit, glob, grep,
 * ls, apply_patch — with the arguments, output formats and error texts models are trained
 * on, built on the client API so they work over every transport. Bindings (`asp mcp`,
 * `asp tool`) only expose them. docs/tools.md describes each tool.
 *
 * Threads: one asp_tools may be called from many threads at once.
 */
#ifndef ASP_TOOLS_H
#define ASP_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "asp/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct asp_tools asp_tools;

/* One tool as a binding shows it. Static strings, valid for the life of the program. */
typedef struct asp_tool_desc {
	const char *name;
	const char *description;  /* model-facing: what it does and how to call it */
	const char *input_schema; /* JSON Schema (draft 2020-12 subset) of the arguments, as text */
} asp_tool_desc;

/*
 * Tools over `c` (borrowed: it must outlive the handle). Asks the responder's hello once:
 * here when relative paths need its start directory (a config's cwd or
 * workspace.sandbox that is not absolute), else on the first call that needs its ops or
 * features, so a first command does not wait for it. Free with asp_tools_free.
 */
asp_status asp_tools_new(asp_client *c, asp_tools **out, asp_error *err);

/* Kills nothing: background commands keep running in the sandbox. NULL is a no-op. */
void asp_tools_free(asp_tools *t);

/*
 * Sessions (docs/tools.md, "Sessions"): the harness's name for its work, by default its
 * project directory. Once set, every command the handle starts carries it (in its
 * proc_list tag, " session=NAME", and as $ASP_SESSION in its environment), and bash_list
 * lists the session's commands, those a previous run of the harness started included.
 * Set it before the first call; NULL or "" is none. false when out of memory.
 */
bool asp_tools_set_session(asp_tools *t, const char *session);

/*
 * Rebuilds the table of running commands from proc_list: the session's commands the
 * sandbox still runs are followed again (their output from the start the responder holds),
 * so bash_output and write_stdin read them as if this handle had started them. *found
 * gets their number. A handle without a session adopts nothing.
 */
asp_status asp_tools_resume(asp_tools *t, size_t *found, asp_error *err);

/*
 * NULL where the responder keeps processes for another connection (hello's reattach);
 * else a sentence for the person or model: background commands end with the connection.
 * Static text.
 */
const char *asp_tools_notice(const asp_tools *t);

/* Every tool, in a fixed order; *count gets their number. */
const asp_tool_desc *asp_tools_list(size_t *count);

/* The tool called `name`, or NULL. */
const asp_tool_desc *asp_tools_find(const char *name);

/*
 * A cancellation token: asp_tools_cancel_fire makes the call using it stop soon (a running
 * command's process group is killed) and return a tool error saying so. Firing before the
 * call starts makes it fail at once. Any thread may fire; fire is idempotent.
 */
typedef struct asp_tools_cancel asp_tools_cancel;
asp_tools_cancel *asp_tools_cancel_new(void);
void asp_tools_cancel_fire(asp_tools_cancel *k);
void asp_tools_cancel_free(asp_tools_cancel *k);

/*
 * Runs tool `name` with the JSON object `args_json`. *result_text gets the text for the
 * model (malloc'd, NUL-terminated; the caller frees it) and *is_error whether it reports a
 * tool failure (a bad argument, a missing file, a failed edit: a message telling the model
 * what to do). `cancel` may be NULL. Returns ASP_OK whenever there is a text to show;
 * ASP_E_NOT_FOUND (with a text too) for an unknown tool; ASP_E_INVALID_ARGUMENT when
 * `args_json` is not a JSON object; ASP_E_INTERNAL (no text) when memory ran out.
 */
asp_status asp_tools_call(asp_tools *t, const char *name, const char *args_json, char **result_text,
                          bool *is_error, asp_tools_cancel *cancel);

/*
 * Vocabularies: the same tools under another harness's names and argument spellings, one
 * implementation (docs/tools.md, "Vocabularies"). "claude" (ASP_TOOLS_VOCAB_DEFAULT, also
 * NULL) is the table above: Claude Code's tools and Codex's exec_command, write_stdin and
 * apply_patch. "opencode" is OpenCode's bash, read, write, edit, glob, grep and apply_patch
 * ({filePath, oldString, newString, replaceAll}, {patchText}, ...).
 */
#define ASP_TOOLS_VOCAB_DEFAULT "claude"

/* The tools of vocabulary `vocab` (static, in a fixed order), or NULL when it is unknown. */
const asp_tool_desc *asp_tools_vocab_list(const char *vocab, size_t *count);

/*
 * asp_tools_call with the tool named and its arguments spelt as in `vocab`. A null argument
 * counts as left out. An unknown vocabulary is ASP_E_INVALID_ARGUMENT (with a text).
 */
asp_status asp_tools_call_vocab(asp_tools *t, const char *vocab, const char *name,
                                const char *args_json, char **result_text, bool *is_error,
                                asp_tools_cancel *cancel);

#ifdef __cplusplus
}
#endif

#endif
