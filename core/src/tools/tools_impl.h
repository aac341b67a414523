/* What the files of the tools layer share: the handle, text buffers, arguments, paths. */
#ifndef ASP_TOOLS_IMPL_H
#define ASP_TOOLS_IMPL_H

#include "asp/asp.h"
#include "asp/tools.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* bash: the output kept for the model, head and tail around a note of what was cut. */
#define TOOLS_OUTPUT_MAX           30000
#define TOOLS_BASH_TIMEOUT_DEFAULT 120000u
#define TOOLS_BASH_TIMEOUT_MAX     600000u
#define TOOLS_READ_LIMIT_DEFAULT   2000u
#define TOOLS_READ_LINE_MAX        2000u
/* Files larger than this are not read whole: edit refuses them, read reads them in pieces. */
#define TOOLS_FILE_MAX (64u << 20)
#define TOOLS_GLOB_MAX 100u

/* A growable NUL-terminated text. On out of memory `oom` is set and appends stop. */
typedef struct tbuf {
	char *p;
	size_t len, cap;
	bool oom;
} tbuf;

void tb_add(tbuf *b, const char *s, size_t n);
void tb_puts(tbuf *b, const char *s);
void tb_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tb_free(tbuf *b);

/*
 * Characters are counted as UTF-8 sequences: every byte but a continuation byte
 * (10xxxxxx) starts one, so a cut before such a byte splits no character.
 */
static inline bool tools_char_start(char c)
{
	return ((unsigned char)c & 0xC0) != 0x80;
}
/* The characters of s[0..n), and in *cut the bytes of the first `max` of them (n if fewer). */
size_t tools_chars(const char *s, size_t n, size_t max, size_t *cut);
/* Gives the text away (never NULL unless oom). */
char *tb_take(tbuf *b);

struct bg_shell;

struct asp_tools {
	asp_client *c;
	char *base; /* absolute directory relative paths resolve against */
	char **ops; /* the responder's ops from hello */
	size_t n_ops;
	bool grep_ere;      /* hello says the grep op speaks POSIX ERE (grep-ere), not PCRE2 */
	pthread_mutex_t mu; /* guards the background shells */
	struct bg_shell *bg;
};

struct asp_tools_cancel {
	pthread_mutex_t mu;
	bool fired;
	void (*wake)(void *user); /* set by the call in progress */
	void *wake_user;
};

/* Whether the responder's hello listed `op`. */
bool tools_has_op(const asp_tools *t, const char *op);

/* Sets (or clears with NULL) the function the token calls when fired; false when already fired. */
bool tools_cancel_arm(asp_tools_cancel *k, void (*wake)(void *), void *user);
bool tools_cancelled(asp_tools_cancel *k);

/* The absolute, lexically normalised form of `path` (malloc'd). */
char *tools_abs(const asp_tools *t, const char *path);

/* One tool's result: text and whether it is an error. */
typedef struct tresult {
	tbuf text;
	bool is_error;
} tresult;

/* Sets the result to an error message; returns false for `return tools_fail(...)`. */
bool tools_fail(tresult *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An ASP call failed: the message for the model, from `what` and err. */
bool tools_fail_asp(tresult *r, const asp_error *err, const char *what, const char *path);

/* Arguments. Each returns false after setting the error result when mistyped. */
bool arg_str(tresult *r, json_t *args, const char *key, bool required, const char **out);
bool arg_uint(tresult *r, json_t *args, const char *key, uint64_t dflt, uint64_t *out);
bool arg_bool(tresult *r, json_t *args, const char *key, bool dflt, bool *out);

/* Reads a whole file (at most TOOLS_FILE_MAX bytes). false with `err` filled on failure. */
bool tools_read_file(asp_tools *t, const char *abs, char **data, size_t *len, asp_error *err);
/* Writes a whole file, atomically, making its parent folders. */
asp_status tools_write_file(asp_tools *t, const char *abs, const char *data, size_t len,
                            asp_error *err);

/* Runs argv to completion in the sandbox (stdout, stderr and exit code kept in `a`). */
asp_status tools_exec_argv(asp_tools *t, const char *const *argv, size_t argc, const char *cwd,
                           asp_exec_result *res, asp_arena *a, asp_error *err);

/* The tools, one per file family. */
typedef bool (*tool_fn)(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_bash(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_bash_output(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_kill_bash(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_read(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_write(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_edit(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_ls(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_glob(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_grep(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_apply_patch(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);

/* Frees the background shells' bookkeeping (bash.c). */
void tools_bg_free(asp_tools *t);

/* Shell-style glob match of `pattern` against a relative path: *, ?, [..], ** across dirs, {a,b}.
 */
bool tools_glob_match(const char *pattern, const char *path);

#endif
