/* What the files of the tools layer share (shared.c), and each tool's entry point. */
#ifndef ASP_TOOLS_SHARED_H
#define ASP_TOOLS_SHARED_H

#include "asp/asp.h"
#include "asp/tools.h"
#include "asp/workspace.h"

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
/* What a whole-file read asks for first: most files in one round trip, a huge one not moved. */
#define TOOLS_READ_FIRST (1u << 20)
#define TOOLS_GLOB_MAX   100u

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

struct tools_proc;

struct asp_tools {
	asp_client *c;
	char *base;        /* absolute sandbox directory relative paths resolve against */
	asp_workspace *ws; /* the harness's paths onto the sandbox's; NULL: none */
	/* From hello, asked once, when first needed (tools_hello): read only after it. */
	pthread_mutex_t hello_mu;
	bool hello_done;
	char **ops; /* the responder's ops from hello */
	size_t n_ops;
	uint64_t protocol;  /* hello's: from 2, write says whether it created the file */
	bool grep_ere;      /* hello says the grep op speaks POSIX ERE (grep-ere), not PCRE2 */
	bool pty;           /* hello lists the feature pty: spawn takes tty */
	bool reattach;      /* hello lists reattach: processes outlive the connection */
	char *session;      /* asp_tools_set_session's name, or NULL */
	pthread_mutex_t mu; /* guards the table of running commands */
	pthread_cond_t cv;  /* broadcast when a command in the table has output or ends */
	struct tools_proc *procs;
};

struct asp_tools_cancel {
	pthread_mutex_t mu;
	bool fired;
	void (*wake)(void *user); /* set by the call in progress */
	void *wake_user;
};

/* The responder's hello, asked the first time (tools.c): ops, protocol and features. */
asp_status tools_hello(asp_tools *t, asp_error *err);
/* Whether the responder's hello listed `op` (false when hello failed: the call's own
 * fallback then meets the same trouble and says so). */
bool tools_has_op(asp_tools *t, const char *op);

/* Sets (or clears with NULL) the function the token calls when fired; false when already fired. */
bool tools_cancel_arm(asp_tools_cancel *k, void (*wake)(void *), void *user);
bool tools_cancelled(asp_tools_cancel *k);

/* The sandbox's absolute, lexically normalised path for the harness's `path` (malloc'd). */
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

/*
 * Reads a whole file (at most TOOLS_FILE_MAX bytes). false with `err` filled on failure:
 * too_large with *size set when the file is larger (*size may be NULL).
 */
bool tools_read_file(asp_tools *t, const char *abs, char **data, size_t *len, uint64_t *size,
                     asp_error *err);
/*
 * Writes a whole file, atomically, making its parent folders. *created (may be NULL) gets
 * whether the write made the file; false when the responder does not say (protocol 1).
 */
asp_status tools_write_file(asp_tools *t, const char *abs, const char *data, size_t len,
                            bool *created, asp_error *err);

/* Runs argv to completion in the sandbox (stdout, stderr and exit code kept in `a`). */
asp_status tools_exec_argv(asp_tools *t, const char *const *argv, size_t argc, const char *cwd,
                           asp_exec_result *res, asp_arena *a, asp_error *err);

/* The tools, one per file family. */
typedef bool (*tool_fn)(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_bash(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_bash_output(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_kill_bash(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_bash_list(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_read(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_write(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_edit(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_ls(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_glob(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_grep(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_apply_patch(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);

bool tool_exec_command(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);
bool tool_write_stdin(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k);

/*
 * The table of running commands (procs.c): bash's background runs and exec_command's
 * sessions, one implementation. An entry is found by the responder's process handle, is
 * fed by its subscription (stdout and stderr into one unread buffer, in arrival order)
 * and stays until the handle is freed, except an exec_command session, which is over
 * once its exit was shown (tools_proc_take) and later lookups treat as unknown.
 */
typedef struct tools_proc {
	struct tools_proc *next;
	asp_tools *t;
	uint64_t proc;
	bool tty;           /* runs on a terminal */
	bool session;       /* an exec_command session */
	bool reported;      /* a session whose exit was shown: unknown from now on */
	unsigned busy;      /* calls using the entry: not pruned meanwhile */
	tbuf unread;        /* output not yet shown */
	uint64_t dropped;   /* unread bytes dropped from the front for the cap */
	uint64_t offset[2]; /* bytes seen of stdout, stderr (where an attach resumes) */
	bool following;     /* a subscription is live */
	bool done;
	int64_t exit_code;
	char signal[16];
	bool timed_out;
} tools_proc;

/* What tools_proc_take saw besides the output. */
typedef struct tools_proc_state {
	uint64_t dropped;
	bool done, following, tty, timed_out;
	int64_t exit_code;
	char signal[16];
} tools_proc_state;

/* One tools_proc_wait's cancellation flag (the token's wake sets it). */
typedef struct tools_proc_wait_state {
	asp_tools *t;
	bool cancelled;
} tools_proc_wait_state;

/* Spawns `sp` with the table's callbacks and enters it; *out is held (tools_proc_put it). */
asp_status tools_proc_spawn(asp_tools *t, const asp_spawn_params *sp, bool session,
                            tools_proc **out, asp_error *err);
/*
 * The entry for `proc`, held (tools_proc_put it). One this handle does not know (started by
 * another client, or before a reconnect) is followed with proc_attach from the start;
 * not_found when the responder does not know it either, or when it is a session that
 * is over. `session`: one found that way is an exec_command session (write_stdin asks).
 */
asp_status tools_proc_get(asp_tools *t, uint64_t proc, bool session, tools_proc **out,
                          asp_error *err);
void tools_proc_put(tools_proc *p);
/* Waits up to `ms` for the exit (or the subscription's loss); false when cancelled. */
bool tools_proc_wait(tools_proc *p, uint64_t ms, asp_tools_cancel *k);
/* Moves the unread output to `out` and reports the state. */
void tools_proc_take(tools_proc *p, tbuf *out, tools_proc_state *st);
asp_status tools_proc_write(asp_tools *t, uint64_t proc, const char *data, size_t len,
                            asp_error *err);
asp_status tools_proc_signal(asp_tools *t, uint64_t proc, const char *sig, asp_error *err);
/* Codex's head and tail truncation of `s` to `max_tokens` (unified_exec.c), onto `out`. */
void tools_codex_truncate(const char *s, size_t len, uint64_t max_tokens, tbuf *out);
/* Replaces invalid UTF-8 in `b` by U+FFFD. */
void tools_utf8_fix(tbuf *b);

/* Vocabularies (vocab.c): another harness's names and argument spellings over these tools. */
bool tools_vocab_known(const char *name);
const asp_tool_desc *tools_vocab_list(const char *name, size_t *count);
json_t *tools_vocab_translate(const char *vname, const char *name, json_t *args,
                              const char **target, tresult *r);

/*
 * Sessions (session.c). The tag of a command of kind `what` (TOOLS_TAG_*), with the
 * session when there is one; malloc'd, NULL when out of memory.
 */
#define TOOLS_TAG_BASH       "asp-tools bash"
#define TOOLS_TAG_BACKGROUND "asp-tools bash (background)"
#define TOOLS_TAG_EXEC       "asp-tools exec_command"
char *tools_tag(const asp_tools *t, const char *what);
/*
 * `base` (n entries) and, with a session, ASP_SESSION into `out` (room for n + 1); the
 * count. Set sp->env from it.
 */
size_t tools_env(const asp_tools *t, const asp_strmap_entry *base, size_t n, asp_strmap_entry *out);

/* Frees the table (at asp_tools_free): the processes keep running. */
void tools_procs_free(asp_tools *t);

/* Shell-style glob match of `pattern` against a relative path: *, ?, [..], ** across dirs, {a,b}.
 */
bool tools_glob_match(const char *pattern, const char *path);

/* apply_patch's description: the same tool under every vocabulary's argument name. */
/* clang-format off */
#define TOOLS_PATCH_DESCRIPTION \
  "Applies a patch to files in the sandbox, all or nothing: every hunk is checked " \
  "before any file changes. The format:\n" \
  "*** Begin Patch\n" \
  "*** Add File: path/new.txt\n+line of the new file\n" \
  "*** Update File: path/old.c\n*** Move to: path/renamed.c   (optional)\n" \
  "@@ context line (optional, e.g. a function header)\n line kept\n-line removed\n+line added\n" \
  "*** Delete File: path/gone.txt\n" \
  "*** End Patch\n" \
  "Give about three lines of context before and after each change; paths are relative " \
  "to the working directory or absolute."
/* clang-format on */

#endif
