/* asp, the command line: what the command files share. */
#ifndef ASP_CLI_H
#define ASP_CLI_H

#include <getopt.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "asp/asp.h"

/*
 * Exit codes of every command but exec; exec exits with its command's
 * (docs/design.md, "The `asp` command line").
 */
#define CLI_EXIT_OK   0
#define CLI_EXIT_FAIL 1
/* exec: ASP itself failed, as ssh does. */
#define CLI_EXIT_EXEC_FAIL 255
/* exec: the command timed out, as timeout(1) does. */
#define CLI_EXIT_TIMEOUT 124

/* Transfers move data in chunks of this size, several in flight at once. */
#define CLI_CHUNK_DEFAULT   (4u << 20)
#define CLI_THREADS_DEFAULT 8u

/* The state of one invocation. */
typedef struct cli {
	const char *config_path; /* --config, or NULL for discovery */
	bool json;               /* --json */
	const char *cmd;         /* the command's name, for messages */
	const char *usage;       /* the command's `--help` text, NULL for none */
	int fail_code;           /* exit code when ASP fails: 1, or 255 for exec */
	asp_client *client;      /* opened by cli_client() */
	uint64_t max_message;    /* from hello, 0 until cli_chunk_size() asked */
	/* Set by commands whose errors name sandbox paths only (read, write, stat, ls, mkdir,
	 * rm, mv): a relative path in an error is shown joined to the sandbox's cwd. */
	bool sandbox_paths;
	/* The command's help after `usage`, printed by code (cli_command.usage_more). */
	void (*usage_more)(FILE *f);
} cli;

typedef struct cli_command {
	const char *name;
	int (*run)(cli *c, int argc, char **argv);
	const char *summary; /* one line for `asp --help` */
	const char *usage;   /* the text of `asp NAME --help` */
	/* Prints what the help shows after `usage` that code knows better (NULL: nothing). */
	void (*usage_more)(FILE *f);
} cli_command;

int cmd_hello(cli *c, int argc, char **argv);
int cmd_exec(cli *c, int argc, char **argv);
int cmd_read(cli *c, int argc, char **argv);
int cmd_write(cli *c, int argc, char **argv);
int cmd_stat(cli *c, int argc, char **argv);
int cmd_ls(cli *c, int argc, char **argv);
int cmd_mkdir(cli *c, int argc, char **argv);
int cmd_rm(cli *c, int argc, char **argv);
int cmd_mv(cli *c, int argc, char **argv);
int cmd_cp(cli *c, int argc, char **argv);
int cmd_conformance(cli *c, int argc, char **argv);
int cmd_init(cli *c, int argc, char **argv);
int cmd_ps(cli *c, int argc, char **argv);
int cmd_attach(cli *c, int argc, char **argv);
int cmd_kill(cli *c, int argc, char **argv);
int cmd_mcp(cli *c, int argc, char **argv);
int cmd_tool(cli *c, int argc, char **argv);
int cmd_shell(cli *c, int argc, char **argv);
int cmd_forward(cli *c, int argc, char **argv);
int cmd_watch(cli *c, int argc, char **argv);
int cmd_exec_server(cli *c, int argc, char **argv);
int cmd_bind(cli *c, int argc, char **argv);
int cmd_ui(cli *c, int argc, char **argv);

/* --- opts.c: option parsing shared by every command ----------------------------------------- */

/* The options every command takes, as its help lists them. */
#define CLI_COMMON_HELP                                                                            \
	"\nGlobal options (before or after the command):\n"                                        \
	"  --config FILE   use this .asp.json instead of discovery ($ASP_CONFIG, then\n"           \
	"                  .asp.json in the working directory and its parents)\n"                  \
	"  --json          print results as JSON on stdout\n"                                      \
	"  -h, --help      this help\n"

/* Prints c->usage (the command's help), then the common options, on stdout. */
void cli_print_help(const cli *c);

/* The tools of each vocabulary, for the help of asp mcp and asp tool. */
void cli_print_tools(FILE *f);

/* Long options every command accepts; getopt_long returns these values for them. */
enum { CLI_OPT_CONFIG = 0x100, CLI_OPT_JSON, CLI_OPT_HELP, CLI_OPT_FIRST_PRIVATE };

/* One entry per line; clang-format would read the list as one braced initializer. */
/* clang-format off */
#define CLI_COMMON_LONGOPTS                                                                        \
	{"config", required_argument, NULL, CLI_OPT_CONFIG},                                       \
	{"json", no_argument, NULL, CLI_OPT_JSON},                                                 \
	{"help", no_argument, NULL, 'h'}
/* clang-format on */

/*
 * getopt_long over a command's argv (argv[0] is the command name) with opterr off, so the
 * caller reports problems in the house format. Handles the common options itself: returns
 * 'h' after printing the command's help (the caller exits 0), '?' after reporting an
 * unknown option or a missing argument (the caller exits c->fail_code), -1 at the end.
 */
int cli_getopt(cli *c, int argc, char **argv, const char *shortopts, const struct option *longopts);

/*
 * Prints an option table, one option a line: "SHORT LONG ARG" ("-" for none; ARG 1 when it
 * takes a value), the common options only `with_common`. With ASP_CLI_LIST_OPTIONS set in
 * the environment, cli_getopt prints the command's table so and exits 0: the test that holds
 * the help, the man pages and docs/cli.md to the options that exist reads it.
 */
void cli_list_options(const char *shortopts, const struct option *longopts, bool with_common);

/* Starts a fresh scan (getopt's state is global). */
void cli_getopt_reset(void);

/*
 * Parses a byte count or offset: decimal digits with an optional binary suffix k, M, G or T
 * (KiB...). Reports a usage error naming `opt` and returns -1 when it is not one.
 */
int cli_parse_size(cli *c, const char *opt, const char *s, uint64_t *out);

/* Seconds, with a fraction ("1.5"), as milliseconds; -1 after reporting a usage error. */
int cli_parse_seconds(cli *c, const char *opt, const char *s, uint64_t *out_ms);

/*
 * The session asp mcp, asp tool and asp exec-server tag their commands with (docs/tools.md,
 * "Sessions"): `flag` (--session) when given, "" meaning none (NULL); else the working
 * directory, the harness's project, into `buf`; NULL when that cannot be had.
 */
const char *cli_session_name(const char *flag, char *buf, size_t cap);

/* --env NAME=VALUE into *out, splitting `arg` in place; -1 after reporting a usage error. */
int cli_parse_env(cli *c, char *arg, asp_strmap_entry *out);

/* --- sandbox_info.c: what hello says, below output.c (which names full paths) ------------- */

/* The transfer chunk size the responder's max_message allows (asks hello once). */
size_t cli_chunk_size(cli *c);

/*
 * The directory the sandbox resolves relative paths against (hello's cwd: no round trip
 * on a connection that already said hello) into `out`; false when there is none to ask,
 * or the client is not open.
 */
bool cli_sandbox_cwd(cli *c, char *out, size_t cap);

/* --- output.c: errors, exit codes and binary-safe output ------------------------------------ */

/*
 * Reports a failed ASP call as one line on stderr, "asp: WHAT: CODE: MESSAGE", plus a hint
 * for the codes where the message alone does not say what to do; with --json also
 * {"error": {...}} on stdout. `what` is printf-formatted ("read /w/x"). Returns
 * c->fail_code so callers can `return cli_fail(...)`.
 */
int cli_fail(cli *c, const asp_error *err, const char *what, ...)
    __attribute__((format(printf, 3, 4)));

/* A usage mistake: "asp: CMD: invalid_argument: MESSAGE (see asp CMD --help)". */
int cli_usage(cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A local failure with errno: "asp: WHAT: CODE: strerror" (the code from errno). */
int cli_fail_errno(cli *c, int errnum, const char *what, ...) __attribute__((format(printf, 3, 4)));

/* A warning on stderr that does not change the exit code: "asp: MESSAGE". */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes all `len` bytes to `fd` across short writes and EINTR. 0, or -1 with errno. */
int cli_write_all(int fd, const void *buf, size_t len);

/* Reads `fd` to EOF into a malloc'd buffer (*out; free it). 0, or -1 with errno. */
int cli_read_all(int fd, uint8_t **out, size_t *len);

/* Flushes stdout; on failure reports it and returns c->fail_code, else `code`. */
int cli_finish(cli *c, int code);

/* --- session.c: the client ---------------------------------------------------------------- */

/* The client for the configured sandbox, opened on first use; NULL after reporting why. */
asp_client *cli_client(cli *c);

/* Frees the client. */
void cli_close(cli *c);

/* A new arena, or NULL after reporting out of memory. */
asp_arena *cli_arena(cli *c);

/* --- json.c: a small streaming JSON writer ---------------------------------------------- */

typedef struct jw {
	FILE *f;
	int depth;
	bool need_comma[32];
} jw;

void jw_init(jw *w, FILE *f);
void jw_obj_begin(jw *w);
void jw_obj_end(jw *w);
void jw_arr_begin(jw *w);
void jw_arr_end(jw *w);
/* A key inside an object; the value follows with one of the calls below. */
void jw_key(jw *w, const char *key);
void jw_str(jw *w, const char *s); /* NULL writes null */
void jw_uint(jw *w, uint64_t v);
void jw_int(jw *w, int64_t v);
void jw_bool(jw *w, bool v);
void jw_double(jw *w, double v); /* three decimals: milliseconds */
void jw_null(jw *w);
/* Ends the document with a newline. */
void jw_end(jw *w);

/*
 * A byte payload as `"key": "text"` when it is valid UTF-8, else as
 * `"key": "BASE64", "key_encoding": "base64"` (the documented --json convention).
 */
void jw_bytes_field(jw *w, const char *key, const uint8_t *data, size_t len);

/* Writes `s` (valid UTF-8) as a JSON string literal, outside any jw document. */
void jw_put_string(FILE *f, const char *s);

/* ---- route_info.c: asp hello's account of the way to an SSH sandbox -------------------- */

struct asp_ssh_route;
/* The SSH route of the config (NULL: not SSH, or unresolvable); asp_ssh_route_free it. */
struct asp_ssh_route *cli_route(cli *c);
/* {"hops": [{"role", "name", "host": {"value", "from"}, ...}], "jump_from", "proxy_command"} */
void cli_route_json(jw *w, const struct asp_ssh_route *r);
void cli_route_text(FILE *f, const struct asp_ssh_route *r);

/* True when the bytes are valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
bool cli_utf8_valid(const uint8_t *s, size_t len);

/* --- base64.c ------------------------------------------------------------------------------ */

/* Base64 (RFC 4648, padded). Encode: malloc'd text. Decode `n` chars: false on bad input. */
char *cli_b64_encode(const uint8_t *data, size_t len);
bool cli_b64_decode(const char *text, size_t n, uint8_t **out, size_t *len);

/* --- ws_rx.c ---------------------------------------------------------------------------------- */

/* A WebSocket message being received in fragments; zeroed to start. */
typedef struct cli_ws_rx {
	char *buf; /* malloc'd, len bytes */
	size_t len;
	bool over; /* longer than the max, or out of memory: refuse it */
} cli_ws_rx;

/* Appends a fragment, unless the message would pass `max` bytes (then over is set). */
void cli_ws_rx_add(cli_ws_rx *rx, const void *in, size_t len, size_t max);
/* Frees what was received: ready for the next message. */
void cli_ws_rx_reset(cli_ws_rx *rx);

/* --- path.c: path strings ----------------------------------------------------------------- */

/* malloc'd "DIR/NAME" without a doubled '/'; NULL when out of memory. */
char *path_join(const char *dir, const char *name);

/* The last component of `path` ignoring trailing slashes, malloc'd ("/" stays "/"). */
char *path_base(const char *path);

/* The directory part of `path` ("" for a bare name, "/" for "/x"), malloc'd. */
char *path_dir(const char *path);

/*
 * A temporary name beside `path`: "DIR/.NAME.asp-RANDOM.tmp", malloc'd. Hidden and
 * unlikely to collide, so a crash leaves an obvious leftover rather than a half target.
 */
char *path_temp_beside(const char *path);

/* True for "." and ".." (after stripping trailing slashes). */
bool path_is_dot(const char *base);

/* --- signals.c ---------------------------------------------------------------------------- */

/* The local number of a signal named as exec reports it ("KILL"), or 0 when unknown. */
int cli_signal_number(const char *name);

#define CLI_STOP_SIGNALS 3 /* INT, TERM, HUP */

/*
 * From now on INT, TERM and HUP each write the byte 's' to `fd` (a pipe the command
 * polls), their old actions kept in `old`; SIGPIPE is ignored.
 */
void cli_stop_signals_catch(int fd, struct sigaction old[CLI_STOP_SIGNALS]);

/* INT, TERM and HUP as they were before cli_stop_signals_catch. */
void cli_stop_signals_restore(const struct sigaction old[CLI_STOP_SIGNALS]);

/* --- follow.c: following a spawned process ------------------------------------------------- */

/*
 * 124 on timeout, 128+N for signal N, else the exit status (`cmd` for warnings):
 * docs/design.md, "The `asp` command line".
 */
int cli_exit_code_of(const char *cmd, int64_t exit_code, const char *signal, bool timed_out);

/*
 * asp exec's streaming path: spawn, output as it comes, stdin forwarded live with
 * `forward_stdin` (else closed at once), INT/TERM/HUP forwarded (a second Ctrl-C sends
 * KILL). *fallback when the sandbox cannot spawn (use the exec op; nothing was done).
 * Returns the exit code.
 */
int cli_exec_follow(cli *c, asp_client *client, const asp_spawn_params *p, bool forward_stdin,
                    bool *fallback);

/*
 * asp attach: replay and live output of a process; Ctrl-C detaches. A process on a
 * terminal, attached from one, is shown in raw mode with our keys typed into it and our
 * window's size; Ctrl-] detaches. The exit code.
 */
int cli_attach_follow(cli *c, asp_client *client, const asp_proc_attach_params *p);

/*
 * asp shell, asp exec -t: spawns `p` on a terminal of our window's size and TERM, shows it
 * on ours (raw mode while stdin is a terminal, window changes forwarded), types our
 * stdin into it and exits with its exit code (255 when ASP failed, or when a signal from
 * outside made us hang it up). A sandbox without terminals is an unsupported error.
 */
int cli_tty_follow(cli *c, asp_client *client, const asp_spawn_params *p, const char *what);

/* The sandbox user's login shell, for /bin/sh -c (asp shell, asp ui's terminal). */
extern const char cli_login_script[];

/* --- term.c: the local terminal ------------------------------------------------------------ */

/* The window size of terminal `fd`; else $LINES and $COLUMNS; else 24x80. */
void cli_term_size(int fd, unsigned *rows, unsigned *cols);

/* $TERM, or NULL when unset or empty (the sandbox's default then). */
const char *cli_term_type(void);

/* Saves terminal `fd`'s mode and makes it raw (as cfmakeraw). 0, or -1 with errno. */
int cli_term_raw(int fd);

/* Restores the mode saved by cli_term_raw; a no-op when not raw. Idempotent. */
void cli_term_restore(void);

/* The same, and a message printed next starts on a new line (when it was raw). */
void cli_term_restore_for_message(void);

/* --- client_ops.c ------------------------------------------------------------------------- */

/* An op table whose self is an asp_client *: each op calls asp_<op> on it. */
extern const asp_ops cli_client_ops;

#endif
