/*
 * asp bind HARNESS: writes a harness's own configuration so that a plain run of it acts in
 * the sandbox (docs/harnesses.md). cmd_bind.c finds the config, runs the harness's planner
 * and writes (or, with --print, shows) the files; one bind_NAME.c per harness computes the
 * files' new contents, merged with what is there.
 */
#ifndef ASP_CLI_BIND_H
#define ASP_CLI_BIND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cli.h"

typedef struct bind_ctx {
	cli *c;
	const char *config;  /* the .asp.json, absolute */
	const char *asp;     /* this asp binary, absolute */
	const char *project; /* the working directory (the harness's project), absolute */
} bind_ctx;

#define BIND_FILES_MAX 16

/* One file of a plan: its path and whole new content (malloc'd; NULL: keep it as it is). */
typedef struct bind_file {
	char *path;
	char *content;
} bind_file;

typedef struct bind_plan {
	bind_file files[BIND_FILES_MAX];
	size_t n;
} bind_plan;

typedef struct bind_harness {
	const char *name;
	/* Fills `plan`; 0, or -1 after reporting why (cli_fail...). */
	int (*plan)(const bind_ctx *b, bind_plan *plan);
} bind_harness;

extern const bind_harness bind_claude;
extern const bind_harness bind_codex;
extern const bind_harness bind_opencode;
extern const bind_harness bind_pi;

/* --- helpers for planners (cmd_bind.c) ----------------------------------------------------- */

/* A file's text (malloc'd, NUL-terminated) or *text NULL when it does not exist. 0, or -1. */
int bind_read(const bind_ctx *b, const char *path, char **text);

/*
 * The JSON object in `path` (a new empty one when the file does not exist) in *obj, and a
 * copy of what was there in *before (NULL when nothing). -1 after reporting a file that
 * is not a JSON object: it is never overwritten.
 */
int bind_json_load(const bind_ctx *b, const char *path, json_t **obj, json_t **before);

/* obj[key] as an object, made when absent; NULL after reporting one of another type. */
json_t *bind_json_object(const bind_ctx *b, const char *path, json_t *obj, const char *key);
/* obj[key] as an array, made when absent; NULL after reporting one of another type. */
json_t *bind_json_array(const bind_ctx *b, const char *path, json_t *obj, const char *key);
/* Appends the string `s` to `arr` unless it is there already. */
void bind_json_union(json_t *arr, const char *s);

/*
 * Adds `path` to the plan with `obj` as its content (2-space indented), or as unchanged
 * when it equals `before`. Takes both references. 0, or -1 after reporting.
 */
int bind_plan_json(const bind_ctx *b, bind_plan *plan, const char *path, json_t *obj,
                   json_t *before);

/* Adds `path` with `content` (taken; NULL: unchanged). 0, or -1 after reporting. */
int bind_plan_text(const bind_ctx *b, bind_plan *plan, const char *path, char *content);

/*
 * The absolute directory of the `harness` binding (holding `entry`) in *out (bind_dir.c):
 * $ASP_BINDINGS_DIR alone when set; else the installed tree beside this asp, this build's
 * copy, the install directory, the source tree. With `module` (an npm package the binding
 * imports, or NULL), only a copy from which Node resolves it. 0, or -1 after reporting what
 * is missing and how to get it.
 */
int bind_bindings_dir(const bind_ctx *b, const char *harness, const char *entry, const char *module,
                      char *out, size_t cap);

/* `s` as a JSON (and TOML basic) string literal, malloc'd. */
char *bind_quote(const char *s);

#endif
