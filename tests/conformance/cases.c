/*
 * The conformance cases: the semantics and error codes of every unary op (docs/design.md,
 * "Operations"), checked only through the op table (the streaming ones, listed in the
 * same table, are in cases_proc.c). Each case works in its own directory ctx->dir; shell
 * tools it relies on (sh, cat, printf, head, tr, sleep, kill, ln, mkfifo, touch, umask,
 * id) are POSIX and exist in any sandbox image that can run an agent's commands.
 */
#include "cases_proc.h"
#include "cases_ports.h"
#include "cases_tree.h"
#include "cases_tty.h"
#include "conformance.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SAFETY_TIMEOUT_MS 20000 /* so a broken transport fails a case instead of hanging */
#define MIB               (1024u * 1024u)

/* ---- helpers: each records a failure at the caller's line and returns false ---- */

static const char *path_in(conf_ctx *ctx, const char *dir, const char *rel)
{
	size_t n = strlen(dir) + strlen(rel) + 2;
	char *p = asp_arena_alloc(ctx->a, n);
	if (p)
		snprintf(p, n, "%s/%s", dir, rel);
	return p ? p : "/nonexistent-out-of-memory";
}

/* A path in the case's directory. */
#define P(rel) path_in(ctx, ctx->dir, (rel))

static bool bytes_eq(asp_bytes b, const void *data, size_t len)
{
	return b.len == len && (len == 0 || memcmp(b.data, data, len) == 0);
}

static bool bytes_is(asp_bytes b, const char *s)
{
	return bytes_eq(b, s, strlen(s));
}

/* Printable excerpt of bytes for messages. */
static const char *show(conf_ctx *ctx, asp_bytes b)
{
	size_t n = b.len < 200 ? b.len : 200;
	char *s = asp_arena_alloc(ctx->a, n * 4 + 8);
	if (!s)
		return "?";
	char *w = s;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = b.data[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			*w++ = (char)c;
		else
			w += sprintf(w, "\\x%02x", c);
	}
	if (n < b.len)
		w += sprintf(w, "...");
	*w = '\0';
	return s;
}

static bool h_write(conf_ctx *ctx, int line, const char *path, const void *data, size_t len,
                    uint64_t mode)
{
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = path;
	p.data.data = data;
	p.data.len = len;
	p.mkdirs = true; /* setup: make the directories a case needs */
	if (mode)
		p.mode = mode;
	asp_write_result r;
	asp_error err;
	asp_status st = ctx->ops->write(ctx->self, &p, &r, ctx->a, &err);
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, line, "setup: write %s: %s: %s", path, asp_strerror(st),
		          err.message);
		return false;
	}
	return true;
}

#define PUT(path, data, len) CONF_REQ(ctx, h_write(ctx, __LINE__, (path), (data), (len), 0))
#define PUTS(path, s)        PUT((path), (s), strlen(s))
#define PUT_MODE(path, s, mode)                                                                    \
	CONF_REQ(ctx, h_write(ctx, __LINE__, (path), (s), strlen(s), (mode)))

/* Reads the whole file, in as many calls as the transport's max_message needs. */
static bool h_read_all(conf_ctx *ctx, int line, const char *path, asp_bytes *out)
{
	uint8_t *acc = NULL;
	size_t len = 0;
	for (int calls = 0; calls < 4096; calls++) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = path;
		p.offset = len;
		asp_read_result r;
		asp_error err;
		asp_status st = ctx->ops->read(ctx->self, &p, &r, ctx->a, &err);
		if (st != ASP_OK) {
			conf_fail(ctx, __FILE__, line, "read %s: %s: %s", path, asp_strerror(st),
			          err.message);
			return false;
		}
		if (calls == 0 && r.eof) {
			*out = r.data;
			return true;
		}
		uint8_t *n = asp_arena_alloc(ctx->a, len + r.data.len + 1);
		if (!n) {
			conf_fail(ctx, __FILE__, line, "out of memory");
			return false;
		}
		if (len)
			memcpy(n, acc, len);
		if (r.data.len)
			memcpy(n + len, r.data.data, r.data.len);
		acc = n;
		len += r.data.len;
		if (r.eof) {
			out->data = acc;
			out->len = len;
			return true;
		}
		if (r.data.len == 0) {
			conf_fail(ctx, __FILE__, line, "read %s: no data and no eof at %zu", path,
			          len);
			return false;
		}
	}
	conf_fail(ctx, __FILE__, line, "read %s: too many calls", path);
	return false;
}

#define READ_ALL(path, out) CONF_REQ(ctx, h_read_all(ctx, __LINE__, (path), (out)))

/* Runs a shell command in the case directory; it must exit 0. */
static bool h_sh(conf_ctx *ctx, int line, const char *cmd, asp_exec_result *r)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	p.cwd = ctx->dir;
	p.timeout_ms = SAFETY_TIMEOUT_MS;
	asp_error err;
	asp_status st = ctx->ops->exec(ctx->self, &p, r, ctx->a, &err);
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, line, "exec %s: %s: %s", cmd, asp_strerror(st),
		          err.message);
		return false;
	}
	if (r->exit_code != 0) {
		conf_fail(ctx, __FILE__, line, "exec %s: exit %lld signal %s: %s", cmd,
		          (long long)r->exit_code, r->signal ? r->signal : "-",
		          show(ctx, r->stderr_data));
		return false;
	}
	return true;
}

#define SH(cmd, r) CONF_REQ(ctx, h_sh(ctx, __LINE__, (cmd), (r)))

/* stat with follow=false; *exists false on not_found. */
static bool h_exists(conf_ctx *ctx, int line, const char *path, bool *exists)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	p.follow = false;
	asp_stat_result r;
	asp_error err;
	asp_status st = ctx->ops->stat(ctx->self, &p, &r, ctx->a, &err);
	*exists = st == ASP_OK;
	if (st != ASP_OK && st != ASP_E_NOT_FOUND) {
		conf_fail(ctx, __FILE__, line, "stat %s: %s: %s", path, asp_strerror(st),
		          err.message);
		return false;
	}
	return true;
}

#define EXPECT_EXISTS(path, want)                                                                  \
	do {                                                                                       \
		bool ex_;                                                                          \
		CONF_REQ(ctx, h_exists(ctx, __LINE__, (path), &ex_));                              \
		CONF_CHECKF(ctx, ex_ == (want), "%s should %sexist", (path),                       \
		            (want) ? "" : "not ");                                                 \
	} while (0)

static bool h_stat(conf_ctx *ctx, int line, const char *path, bool follow, asp_stat_result *r)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	p.follow = follow;
	asp_error err;
	asp_status st = ctx->ops->stat(ctx->self, &p, r, ctx->a, &err);
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, line, "stat %s: %s: %s", path, asp_strerror(st),
		          err.message);
		return false;
	}
	return true;
}

#define STAT(path, follow, r) CONF_REQ(ctx, h_stat(ctx, __LINE__, (path), (follow), (r)))

static bool h_list(conf_ctx *ctx, int line, const char *path, asp_list_result *r)
{
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = path;
	asp_error err;
	asp_status st = ctx->ops->list(ctx->self, &p, r, ctx->a, &err);
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, line, "list %s: %s: %s", path, asp_strerror(st),
		          err.message);
		return false;
	}
	return true;
}

#define LIST(path, r) CONF_REQ(ctx, h_list(ctx, __LINE__, (path), (r)))

/* The umask the sandbox's responder creates files under (a fresh shell inherits it). */
static bool h_umask(conf_ctx *ctx, int line, unsigned *mask)
{
	asp_exec_result r;
	if (!h_sh(ctx, line, "umask", &r))
		return false;
	char buf[16] = {0};
	memcpy(buf, r.stdout_data.data, r.stdout_data.len < 15 ? r.stdout_data.len : 15);
	char *end;
	unsigned long m = strtoul(buf, &end, 8);
	if (end == buf || m > 0777) {
		conf_fail(ctx, __FILE__, line, "cannot parse umask output '%s'", buf);
		return false;
	}
	*mask = (unsigned)m;
	return true;
}

#define UMASK(m) CONF_REQ(ctx, h_umask(ctx, __LINE__, (m)))

static asp_status do_exec(conf_ctx *ctx, asp_exec_params *p, asp_exec_result *r, asp_error *err)
{
	if (!p->timeout_ms)
		p->timeout_ms = SAFETY_TIMEOUT_MS;
	return ctx->ops->exec(ctx->self, p, r, ctx->a, err);
}

static asp_strv strv(conf_ctx *ctx, const char *const *items, size_t n)
{
	const char **v = asp_arena_alloc(ctx->a, (n ? n : 1) * sizeof *v);
	if (v)
		memcpy(v, items, n * sizeof *v);
	return (asp_strv){v, v ? n : 0};
}

#define ARGV(...)                                                                                  \
	strv(ctx, (const char *const[]){__VA_ARGS__},                                              \
	     sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define PID_STATE_SH(file) CONF_PID_STATE_SH(file)

/* The process whose pid is in `file` must be gone: the KILL may take a while to land on a
 * loaded machine, but far less than the 30 s the process would otherwise live. */
static bool h_pid_dead(conf_ctx *ctx, int line, const char *cmd)
{
	for (int i = 0; i < 10; i++) {
		asp_exec_result r;
		if (!h_sh(ctx, line, cmd, &r))
			return false;
		if (bytes_is(r.stdout_data, "dead"))
			return true;
		nanosleep(&(struct timespec){0, 500 * 1000 * 1000}, NULL);
	}
	conf_fail(ctx, __FILE__, line, "a process of the timed-out group survived");
	return false;
}

/* ---- hello ---- */

static void hello_fields(conf_ctx *ctx)
{
	asp_hello_params p;
	asp_hello_params_init(&p);
	p.client = "asp-conformance/1";
	p.has_protocol = true;
	p.protocol = 1;
	asp_hello_result r;
	asp_error err;
	CONF_OK(ctx, ctx->ops->hello(ctx->self, &p, &r, ctx->a, &err), &err);
	CONF_CHECK(ctx, r.protocol >= 1); /* a newer responder may speak a later protocol */
	CONF_CHECK(ctx, r.agent && r.agent[0]);
	static const char *const need[] = {"hello", "exec",  "read",   "write", "stat",
	                                   "list",  "mkdir", "remove", "rename"};
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		bool found = false;
		for (size_t k = 0; k < r.ops.count && !found; k++)
			found = strcmp(r.ops.items[k], need[i]) == 0;
		CONF_CHECKF(ctx, found, "hello ops lacks '%s'", need[i]);
	}
	CONF_CHECK(ctx, r.os && r.os[0]);
	for (const char *c = r.os; *c; c++)
		CONF_CHECKF(ctx, !(*c >= 'A' && *c <= 'Z'), "os '%s' is not lower case", r.os);
	CONF_CHECK(ctx, r.arch && r.arch[0]);
	CONF_CHECKF(ctx, r.cwd && r.cwd[0] == '/', "cwd '%s' is not absolute", r.cwd);
	CONF_CHECKF(ctx, r.max_message >= MIB, "max_message %llu is below 1 MiB",
	            (unsigned long long)r.max_message);
}

/* ---- exec ---- */

static void exec_command_shell(conf_ctx *ctx)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "x=hello; echo \"$x\"; echo err >&2";
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "hello\n"), "stdout '%s'",
	            show(ctx, r.stdout_data));
	CONF_CHECKF(ctx, bytes_is(r.stderr_data, "err\n"), "stderr '%s'", show(ctx, r.stderr_data));
	CONF_CHECK(ctx, r.exit_code == 0);
	CONF_CHECK(ctx, r.signal == NULL);
	CONF_CHECK(ctx, !r.timed_out);
	CONF_CHECK(ctx, r.stdout_bytes == 6 && r.stderr_bytes == 4);
}

static void exec_argv_direct(conf_ctx *ctx)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("printf", "%s|", "a b", "$HOME", "'q'", "`x`", "*");
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "a b|$HOME|'q'|`x`|*|"),
	            "argv went through a shell: '%s'", show(ctx, r.stdout_data));
	CONF_CHECK(ctx, r.exit_code == 0);
}

static void exec_invalid_params(conf_ctx *ctx)
{
	asp_exec_params p;
	asp_exec_result r;
	asp_error err;
	asp_exec_params_init(&p);
	p.command = "true";
	p.has_argv = true;
	p.argv = ARGV("true");
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
	asp_exec_params_init(&p);
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = (asp_strv){NULL, 0};
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
}

static void exec_missing_program(conf_ctx *ctx)
{
	asp_exec_params p;
	asp_exec_result r;
	asp_error err;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("asp-conformance-no-such-program", "x");
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_NOT_FOUND, &err);
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV(P("no-such-file"));
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_NOT_FOUND, &err);
	/* Through the shell a missing command is the shell's exit 127: a result. */
	asp_exec_params_init(&p);
	p.command = "asp-conformance-no-such-program";
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.exit_code == 127, "exit %lld", (long long)r.exit_code);
}

static void exec_exit_codes(conf_ctx *ctx)
{
	static const int codes[] = {0, 1, 42, 255};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		char cmd[32];
		snprintf(cmd, sizeof cmd, "exit %d", codes[i]);
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = cmd;
		asp_exec_result r;
		asp_error err;
		CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
		CONF_CHECKF(ctx, r.exit_code == codes[i], "%s gave %lld", cmd,
		            (long long)r.exit_code);
		CONF_CHECK(ctx, r.signal == NULL);
	}
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("sh", "-c", "exit 3");
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.exit_code == 3);
}

static void exec_signal_name(conf_ctx *ctx)
{
	static const char *const sigs[] = {"KILL", "TERM", "SEGV", "INT"};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		char cmd[64];
		snprintf(cmd, sizeof cmd, "kill -%s $$; sleep 5", sigs[i]);
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = cmd;
		asp_exec_result r;
		asp_error err;
		CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
		CONF_CHECKF(ctx, r.exit_code == -1, "%s: exit_code %lld, want -1", cmd,
		            (long long)r.exit_code);
		CONF_CHECKF(ctx, r.signal && strcmp(r.signal, sigs[i]) == 0, "%s: signal %s", cmd,
		            r.signal ? r.signal : "nil");
		CONF_CHECK(ctx, !r.timed_out);
	}
}

static void fill_pattern(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i * 131u + seed + (i >> 9)) & 0xff);
}

static void exec_stdin_binary(conf_ctx *ctx)
{
	size_t n = 256 * 1024;
	uint8_t *data = asp_arena_alloc(ctx->a, n);
	CONF_CHECK(ctx, data != NULL);
	fill_pattern(data, n, 7);
	data[0] = 0; /* NUL bytes throughout, and at the start */
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "cat";
	p.stdin_data.data = data;
	p.stdin_data.len = n;
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.exit_code == 0);
	CONF_CHECKF(ctx, bytes_eq(r.stdout_data, data, n), "round trip: %zu bytes back of %zu",
	            r.stdout_data.len, n);
	CONF_CHECK(ctx, r.stdout_bytes == n);
}

static void exec_stdin_closed(conf_ctx *ctx)
{
	/* Without stdin data the process sees EOF at once (it must not wait for input). */
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "cat; if read x; then echo got; else echo eof; fi";
	p.timeout_ms = SAFETY_TIMEOUT_MS; /* returns at once unless it waits for input */
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, !r.timed_out);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "eof\n"), "stdout '%s'", show(ctx, r.stdout_data));
	/* Input the process never reads is no error (and does not kill the responder). */
	size_t n = 1 * MIB;
	uint8_t *data = asp_arena_alloc(ctx->a, n);
	CONF_CHECK(ctx, data != NULL);
	asp_exec_params_init(&p);
	p.command = "exec 0<&-; echo done";
	p.stdin_data.data = data;
	p.stdin_data.len = n;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.exit_code == 0);
	CONF_CHECK(ctx, bytes_is(r.stdout_data, "done\n"));
}

static void exec_large_io(conf_ctx *ctx)
{
	/* stdin, stdout and stderr all busy at once: a backend that writes all of stdin
	 * before reading would deadlock here. */
	size_t n = 4 * MIB;
	uint8_t *data = asp_arena_alloc(ctx->a, n);
	CONF_CHECK(ctx, data != NULL);
	fill_pattern(data, n, 3);
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "head -c 1048576 /dev/zero >&2 & cat; wait";
	p.stdin_data.data = data;
	p.stdin_data.len = n;
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, !r.timed_out);
	CONF_CHECK(ctx, r.exit_code == 0);
	CONF_CHECKF(ctx, bytes_eq(r.stdout_data, data, n), "stdout %zu bytes, want %zu",
	            r.stdout_data.len, n);
	CONF_CHECK(ctx, r.stderr_bytes == MIB && r.stderr_data.len == MIB);
}

static void exec_large_output(conf_ctx *ctx)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "head -c 6000000 /dev/zero | tr '\\000' x";
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.exit_code == 0);
	CONF_CHECKF(ctx, r.stdout_bytes == 6000000, "stdout_bytes %llu",
	            (unsigned long long)r.stdout_bytes);
	CONF_CHECKF(ctx, r.stdout_data.len == 6000000, "stdout %zu bytes", r.stdout_data.len);
	for (size_t i = 0; i < r.stdout_data.len; i += 4093)
		CONF_CHECKF(ctx, r.stdout_data.data[i] == 'x', "byte %zu is %#x", i,
		            r.stdout_data.data[i]);
}

static void exec_max_output(conf_ctx *ctx)
{
	/* The first bytes are kept; everything is counted. 0..1999, one per line: 8890. */
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "i=0; while [ $i -lt 2000 ]; do echo $i; i=$((i+1)); done; "
	            "head -c 70000 /dev/zero >&2";
	p.max_output = 10;
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.exit_code == 0);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "0\n1\n2\n3\n4\n"), "stdout '%s'",
	            show(ctx, r.stdout_data));
	CONF_CHECKF(ctx, r.stdout_bytes == 8890, "stdout_bytes %llu",
	            (unsigned long long)r.stdout_bytes);
	CONF_CHECK(ctx, r.stderr_data.len == 10);
	CONF_CHECKF(ctx, r.stderr_bytes == 70000, "stderr_bytes %llu",
	            (unsigned long long)r.stderr_bytes);
	/* max_output 0 keeps nothing but still counts */
	asp_exec_params_init(&p);
	p.command = "printf abc";
	p.max_output = 0;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.stdout_data.len == 0 && r.stdout_bytes == 3);
}

static void exec_env(conf_ctx *ctx)
{
	asp_strmap_entry e[] = {
	    {"ASP_CONF_A", "a b$c 'q'"}, {"HOME", "/asp-home"}, {"ASP_CONF_EMPTY", ""}};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "printf '%s|%s|%s' \"$ASP_CONF_A\" \"$HOME\" \"${ASP_CONF_EMPTY-unset}\"";
	p.has_env = true;
	p.env = (asp_strmap){e, 3};
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "a b$c 'q'|/asp-home|"), "stdout '%s'",
	            show(ctx, r.stdout_data));
	/* the override replaces the variable: one HOME in the environment, not two */
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("env");
	p.has_env = true;
	p.env = (asp_strmap){e, 3};
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	int homes = 0;
	bool home_ok = false;
	for (size_t i = 0; i + 5 <= r.stdout_data.len; i++) {
		if ((i == 0 || r.stdout_data.data[i - 1] == '\n') &&
		    memcmp(r.stdout_data.data + i, "HOME=", 5) == 0) {
			homes++;
			home_ok = r.stdout_data.len - i >= 15 &&
			          memcmp(r.stdout_data.data + i, "HOME=/asp-home\n", 15) == 0;
		}
	}
	CONF_CHECKF(ctx, homes == 1 && home_ok, "env shows %d HOME entries%s", homes,
	            home_ok ? "" : ", the last not HOME=/asp-home");
	/* argv mode gets the env too, and a PATH set there finds the program */
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = P("bin/asp-conf-tool");
	static const char script[] = "#!/bin/sh\nprintf 'from-path %s %s' \"$1\" \"$ASP_CONF_A\"\n";
	wp.data.data = (const uint8_t *)script;
	wp.data.len = strlen(script);
	wp.mode = 0755;
	wp.mkdirs = true;
	asp_write_result wr;
	CONF_OK(ctx, ctx->ops->write(ctx->self, &wp, &wr, ctx->a, &err), &err);
	char *path_val = asp_arena_alloc(ctx->a, strlen(ctx->dir) + 32);
	CONF_CHECK(ctx, path_val != NULL);
	sprintf(path_val, "%s/bin:/usr/bin:/bin", ctx->dir);
	asp_strmap_entry e2[] = {{"PATH", path_val}, {"ASP_CONF_A", "v"}};
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("asp-conf-tool", "x y");
	p.has_env = true;
	p.env = (asp_strmap){e2, 2};
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "from-path x y v"), "stdout '%s' stderr '%s'",
	            show(ctx, r.stdout_data), show(ctx, r.stderr_data));
}

static void exec_fresh_process(conf_ctx *ctx)
{
	asp_exec_result r;
	SH("export ASP_CONF_STATE=1; cd /", &r);
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "printf '%s' \"${ASP_CONF_STATE-unset}\"";
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "unset"), "shell state carried over: '%s'",
	            show(ctx, r.stdout_data));
}

static void exec_cwd(conf_ctx *ctx)
{
	PUTS(P("marker"), "here");
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("cat", "marker");
	p.cwd = ctx->dir;
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "here"), "stdout '%s' stderr '%s'",
	            show(ctx, r.stdout_data), show(ctx, r.stderr_data));
	asp_exec_params_init(&p);
	p.command = "cat marker";
	p.cwd = ctx->dir;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, bytes_is(r.stdout_data, "here"));
}

static void exec_cwd_errors(conf_ctx *ctx)
{
	PUTS(P("file"), "x");
	asp_exec_params p;
	asp_exec_result r;
	asp_error err;
	asp_exec_params_init(&p);
	p.command = "true";
	p.cwd = P("missing");
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_NOT_FOUND, &err);
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("true");
	p.cwd = P("missing");
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_NOT_FOUND, &err);
	asp_exec_params_init(&p);
	p.command = "true";
	p.cwd = P("file");
	CONF_ERR(ctx, do_exec(ctx, &p, &r, &err), ASP_E_NOT_A_DIRECTORY, &err);
}

/*
 * The timeout cases need the command's shell to have reached a point (the background
 * child started, the trap set) before TERM comes, and how long a sandbox takes to start a
 * command is its own (native SSH runs it through the login shell and its startup files).
 * So the command marks that point in a file, and a TERM that came before it is no
 * verdict: the case runs again with twice the time, up to 4 times (1.5 s to 12 s).
 */
#define TIMEOUT_FIRST_MS 1500
#define TIMEOUT_TRIES    4

static void exec_timeout_kills_group(conf_ctx *ctx)
{
	asp_exec_params p;
	asp_exec_result r;
	asp_error err;
	double took = 0;
	bool ready = false;
	for (int i = 0; i < TIMEOUT_TRIES && !ready; i++) {
		asp_exec_params_init(&p);
		p.command = "rm -f bg.pid; sleep 30 & echo $! > bg.pid; sleep 30";
		p.cwd = ctx->dir;
		p.timeout_ms = (uint64_t)TIMEOUT_FIRST_MS << i;
		double t0 = mono_ms();
		CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
		took = mono_ms() - t0;
		CONF_REQ(ctx, h_exists(ctx, __LINE__, P("bg.pid"), &ready));
	}
	CONF_CHECKF(ctx, ready, "the command had not started its background child after %d ms",
	            TIMEOUT_FIRST_MS << (TIMEOUT_TRIES - 1));
	CONF_CHECK(ctx, r.timed_out);
	CONF_CHECKF(ctx, took < p.timeout_ms + CONF_SLOW_MS,
	            "took %.0f ms; TERM should have ended it", took);
	CONF_CHECKF(ctx, r.exit_code == -1 && r.signal && strcmp(r.signal, "TERM") == 0,
	            "exit %lld signal %s", (long long)r.exit_code, r.signal ? r.signal : "nil");
	CONF_CHECKF(ctx, r.duration_ms >= 250 && r.duration_ms < p.timeout_ms + CONF_SLOW_MS,
	            "duration_ms %llu", (unsigned long long)r.duration_ms);
	CONF_REQ(ctx, h_pid_dead(ctx, __LINE__, PID_STATE_SH("bg.pid")));
}

static void exec_timeout_escalates_to_kill(conf_ctx *ctx)
{
	/* The group ignores TERM: KILL must follow 2 s later and end all of it. */
	asp_exec_params p;
	asp_exec_result r;
	asp_error err;
	bool trapped = false;
	double took = 0;
	for (int i = 0; i < TIMEOUT_TRIES && !trapped; i++) {
		asp_exec_params_init(&p);
		p.command =
		    "rm -f trapped; trap '' TERM; : > trapped; sleep 30 & echo $! > bg.pid; "
		    "sleep 30";
		p.cwd = ctx->dir;
		p.timeout_ms = (uint64_t)TIMEOUT_FIRST_MS << i;
		double t0 = mono_ms();
		CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
		took = mono_ms() - t0;
		CONF_REQ(ctx, h_exists(ctx, __LINE__, P("trapped"), &trapped));
	}
	CONF_CHECKF(ctx, trapped, "the command had not set its trap after %d ms",
	            TIMEOUT_FIRST_MS << (TIMEOUT_TRIES - 1));
	CONF_CHECK(ctx, r.timed_out);
	CONF_CHECKF(ctx, r.signal && strcmp(r.signal, "KILL") == 0, "signal %s",
	            r.signal ? r.signal : "nil");
	/* the timeout counts from the request; duration_ms from the command's start, which a
	 * login shell's startup files delay: the lower bound is the caller's clock */
	CONF_CHECKF(ctx,
	            took + 100 >= p.timeout_ms + 2000 &&
	                r.duration_ms < p.timeout_ms + 2000 + CONF_SLOW_MS,
	            "took %.0f ms, duration_ms %llu: KILL should come 2 s after TERM", took,
	            (unsigned long long)r.duration_ms);
	CONF_REQ(ctx, h_pid_dead(ctx, __LINE__, PID_STATE_SH("bg.pid")));
}

static void exec_background_holds_output(conf_ctx *ctx)
{
	/* exec ends when the process exited AND its output reached EOF, as over SSH */
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "(sleep 1; echo late) & echo early";
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "early\nlate\n"), "stdout '%s'",
	            show(ctx, r.stdout_data));
	CONF_CHECKF(ctx, r.duration_ms >= 900, "duration_ms %llu",
	            (unsigned long long)r.duration_ms);
	CONF_CHECK(ctx, !r.timed_out && r.exit_code == 0);
}

static void exec_background_timeout(conf_ctx *ctx)
{
	/* The leader exits at once, a background child keeps stdout: the timeout ends it.
	 * Nothing on stdout: the timeout came before the command started (see above). */
	asp_exec_params p;
	asp_exec_result r;
	asp_error err;
	double took = 0;
	r.stdout_data.len = 0;
	for (int i = 0; i < TIMEOUT_TRIES + 2 && !r.stdout_data.len; i++) {
		asp_exec_params_init(&p);
		p.command = "sleep 30 & echo started";
		p.timeout_ms = (uint64_t)400 << i;
		double t0 = mono_ms();
		CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
		took = mono_ms() - t0;
	}
	CONF_CHECK(ctx, r.timed_out);
	CONF_CHECKF(ctx, took + 50 >= p.timeout_ms && took < p.timeout_ms + CONF_SLOW_MS,
	            "took %.0f ms", took);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "started\n"), "stdout '%s'",
	            show(ctx, r.stdout_data));
}

static void exec_background_detached(conf_ctx *ctx)
{
	/* A child that let go of stdout/stderr does not hold exec up. */
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "sleep 30 >/dev/null 2>&1 </dev/null & echo $! > bg.pid";
	p.cwd = ctx->dir;
	asp_exec_result r;
	asp_error err;
	double t0 = mono_ms();
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	double took = mono_ms() - t0;
	asp_exec_result k;
	SH("kill $(cat bg.pid)", &k);
	CONF_CHECKF(ctx, took < CONF_SLOW_MS, "took %.0f ms", took);
	CONF_CHECK(ctx, !r.timed_out && r.exit_code == 0);
}

static void exec_own_process_group(conf_ctx *ctx)
{
	asp_exec_result r;
	SH("if [ -r /proc/$$/stat ]; then set -- $(sed 's/.*) //' /proc/$$/stat); "
	   "echo \"$$ $3 $4\"; else echo noproc; fi",
	   &r);
	if (bytes_is(r.stdout_data, "noproc\n")) {
		conf_skip(ctx, "no /proc in the sandbox");
		return;
	}
	char buf[96] = {0};
	memcpy(buf, r.stdout_data.data, r.stdout_data.len < 95 ? r.stdout_data.len : 95);
	long pid = 0, pgrp = 0, sid = 0;
	CONF_CHECKF(ctx, sscanf(buf, "%ld %ld %ld", &pid, &pgrp, &sid) == 3, "output '%s'", buf);
	CONF_CHECKF(ctx, pid == pgrp && pid == sid,
	            "shell %ld is in group %ld, session %ld: want its own", pid, pgrp, sid);
}

static void exec_no_inherited_fds(conf_ctx *ctx)
{
	asp_exec_result r;
	SH("[ -d /proc/self/fd ] && echo yes || echo no", &r);
	if (!bytes_is(r.stdout_data, "yes\n")) {
		conf_skip(ctx, "no /proc/self/fd in the sandbox");
		return;
	}
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = ARGV("ls", "/proc/self/fd");
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	/* 0-2 and the directory ls itself opened; anything else leaked from the responder */
	char buf[512] = {0};
	memcpy(buf, r.stdout_data.data, r.stdout_data.len < 511 ? r.stdout_data.len : 511);
	int count = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, "\n", &save); tok; tok = strtok_r(NULL, "\n", &save)) {
		long fd = strtol(tok, NULL, 10);
		CONF_CHECKF(ctx, fd <= 3, "the command inherited fd %ld ('%s')", fd,
		            show(ctx, r.stdout_data));
		count++;
	}
	CONF_CHECKF(ctx, count >= 3, "ls saw %d fds", count);
}

/* Many logins at once may queue behind each other in a sandbox's startup files (a lock
 * they take): a bound for a hang, not a speed. */
#define CONC_TIMEOUT_MS 60000

struct conc_arg {
	conf_ctx *ctx;
	int id;
	int failures;
	atomic_bool done;
	char why[1200];
};

static void *conc_worker(void *v)
{
	struct conc_arg *c = v;
	asp_arena *a = asp_arena_new();
	for (int j = 0; j < 6 && a; j++) {
		char want[32];
		snprintf(want, sizeof want, "t%d-%d", c->id, j);
		const char *argv[] = {"printf", "%s", want};
		asp_exec_params p;
		asp_exec_params_init(&p);
		char cmd[64];
		if (j % 2) {
			p.has_argv = true;
			p.argv = (asp_strv){argv, 3};
		} else {
			snprintf(cmd, sizeof cmd, "printf %%s %s", want);
			p.command = cmd;
		}
		p.timeout_ms = CONC_TIMEOUT_MS;
		asp_exec_result r;
		asp_error err;
		asp_status st = c->ctx->ops->exec(c->ctx->self, &p, &r, a, &err);
		if (st != ASP_OK || !bytes_is(r.stdout_data, want)) {
			c->failures++;
			snprintf(c->why, sizeof c->why, "%s: %s %s", want, asp_strerror(st),
			         st ? err.message : "wrong output");
		}
		asp_arena_reset(a);
	}
	if (!a)
		c->failures++;
	asp_arena_free(a);
	return NULL;
}

/* In flight until the case writes `release`: whether the quick calls waited for it is then an
 * order, not a time, and holds on a machine of any speed. */
#define SLOW_SH "touch started; while [ ! -e release ]; do sleep 0.02; done"

static void *slow_worker(void *v)
{
	struct conc_arg *c = v;
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = SLOW_SH;
	p.cwd = c->ctx->dir;
	p.timeout_ms = 2 * CONC_TIMEOUT_MS; /* it waits for the others */
	asp_exec_result r;
	asp_error err;
	if (!a || c->ctx->ops->exec(c->ctx->self, &p, &r, a, &err) != ASP_OK || r.exit_code ||
	    r.timed_out)
		c->failures++;
	asp_arena_free(a);
	atomic_store(&c->done, true);
	return NULL;
}

static void exec_concurrent(conf_ctx *ctx)
{
	/* A slow exec in flight must not hold up other calls; parallel execs keep apart. */
	enum { N = 8 };
	PUTS(P("f"), "data");
	pthread_t slow, th[N];
	struct conc_arg sa = {.ctx = ctx, .id = -1}, args[N];
	CONF_CHECK(ctx, pthread_create(&slow, NULL, slow_worker, &sa) == 0);
	/* From here every path joins the threads before a check can return. */
	bool in_flight = false, seen_ok = true;
	double until = mono_ms() + SAFETY_TIMEOUT_MS / 2;
	while (seen_ok && !in_flight && !atomic_load(&sa.done) && mono_ms() < until) {
		seen_ok = h_exists(ctx, __LINE__, P("started"), &in_flight);
		if (!in_flight)
			nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
	int started = 0;
	for (int i = 0; i < N; i++) {
		args[i] = (struct conc_arg){.ctx = ctx, .id = i};
		if (pthread_create(&th[i], NULL, conc_worker, &args[i]) != 0)
			break;
		started++;
	}
	bool quick_ok = true;
	for (int i = 0; i < 3 && quick_ok; i++) {
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = P("f");
		asp_read_result rr;
		asp_error err;
		quick_ok = ctx->ops->read(ctx->self, &rp, &rr, ctx->a, &err) == ASP_OK &&
		           bytes_is(rr.data, "data");
	}
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "echo quick";
	p.timeout_ms = CONC_TIMEOUT_MS;
	asp_exec_result r;
	asp_error err;
	asp_status qst = do_exec(ctx, &p, &r, &err);
	bool waited = atomic_load(&sa.done);
	bool released = h_write(ctx, __LINE__, P("release"), "", 0, 0);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_join(slow, NULL);
	CONF_CHECKF(ctx, in_flight, "the slow exec never created 'started'");
	CONF_CHECK(ctx, released);
	CONF_CHECK(ctx, started == N);
	CONF_CHECK(ctx, quick_ok);
	CONF_OK(ctx, qst, &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, "quick\n"),
	            "stdout '%s' stderr '%s' exit %lld timed_out %d after %llu ms",
	            show(ctx, r.stdout_data), show(ctx, r.stderr_data), (long long)r.exit_code,
	            r.timed_out, (unsigned long long)r.duration_ms);
	CONF_CHECKF(ctx, !waited, "3 reads and an exec waited for a slow exec to end");
	CONF_CHECKF(ctx, sa.failures == 0, "the slow exec failed or timed out");
	for (int i = 0; i < N; i++)
		CONF_CHECKF(ctx, args[i].failures == 0, "thread %d: %d failures, last %s", i,
		            args[i].failures, args[i].why);
}

/* ---- read ---- */

static asp_status do_read(conf_ctx *ctx, const char *path, uint64_t off, bool has_len, uint64_t len,
                          asp_read_result *r, asp_error *err)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = path;
	p.offset = off;
	p.has_length = has_len;
	p.length = len;
	return ctx->ops->read(ctx->self, &p, r, ctx->a, err);
}

static void read_ranges(conf_ctx *ctx)
{
	const char *f = P("digits");
	PUTS(f, "0123456789");
	asp_read_result r;
	asp_error err;
	CONF_OK(ctx, do_read(ctx, f, 3, true, 4, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.data, "3456"), "data '%s'", show(ctx, r.data));
	CONF_CHECK(ctx, r.size == 10 && !r.eof);
	CONF_OK(ctx, do_read(ctx, f, 6, true, 4, &r, &err), &err);
	CONF_CHECK(ctx, bytes_is(r.data, "6789"));
	CONF_CHECKF(ctx, r.eof, "data ending at the end of the file is eof");
	CONF_OK(ctx, do_read(ctx, f, 8, false, 0, &r, &err), &err);
	CONF_CHECK(ctx, bytes_is(r.data, "89") && r.eof && r.size == 10);
	CONF_OK(ctx, do_read(ctx, f, 5, true, 100, &r, &err), &err);
	CONF_CHECK(ctx, bytes_is(r.data, "56789") && r.eof);
	CONF_OK(ctx, do_read(ctx, f, 10, false, 0, &r, &err), &err);
	CONF_CHECK(ctx, r.data.len == 0 && r.eof);
	CONF_OK(ctx, do_read(ctx, f, 20, true, 5, &r, &err), &err);
	CONF_CHECK(ctx, r.data.len == 0 && r.eof && r.size == 10);
	CONF_OK(ctx, do_read(ctx, f, 0, true, 0, &r, &err), &err);
	CONF_CHECK(ctx, r.data.len == 0 && !r.eof && r.size == 10);
}

static void read_whole_binary(conf_ctx *ctx)
{
	size_t n = 300 * 256;
	uint8_t *data = asp_arena_alloc(ctx->a, n);
	CONF_CHECK(ctx, data != NULL);
	fill_pattern(data, n, 11);
	PUT(P("bin"), data, n);
	asp_read_result r;
	asp_error err;
	CONF_OK(ctx, do_read(ctx, P("bin"), 0, false, 0, &r, &err), &err);
	CONF_CHECK(ctx, bytes_eq(r.data, data, n));
	CONF_CHECK(ctx, r.size == n && r.eof);
	PUT(P("empty"), "", 0);
	CONF_OK(ctx, do_read(ctx, P("empty"), 0, false, 0, &r, &err), &err);
	CONF_CHECK(ctx, r.data.len == 0 && r.size == 0 && r.eof);
}

static void read_large(conf_ctx *ctx)
{
	size_t n = 3 * MIB + 17;
	uint8_t *data = asp_arena_alloc(ctx->a, n);
	CONF_CHECK(ctx, data != NULL);
	fill_pattern(data, n, 5);
	PUT(P("big"), data, n);
	asp_bytes got;
	READ_ALL(P("big"), &got);
	CONF_CHECKF(ctx, bytes_eq(got, data, n), "read back %zu bytes of %zu", got.len, n);
}

static void read_errors(conf_ctx *ctx)
{
	PUTS(P("file"), "x");
	asp_read_result r;
	asp_error err;
	CONF_ERR(ctx, do_read(ctx, P("missing"), 0, false, 0, &r, &err), ASP_E_NOT_FOUND, &err);
	CONF_CHECKF(ctx, strstr(err.message, "missing") != NULL,
	            "the message should name the path: '%s'", err.message);
	CONF_ERR(ctx, do_read(ctx, ctx->dir, 0, false, 0, &r, &err), ASP_E_IS_A_DIRECTORY, &err);
	CONF_ERR(ctx, do_read(ctx, P("file/x"), 0, false, 0, &r, &err), ASP_E_NOT_A_DIRECTORY,
	         &err);
}

/* ---- write ---- */

static asp_status do_write(conf_ctx *ctx, asp_write_params *p, asp_write_result *r, asp_error *err)
{
	return ctx->ops->write(ctx->self, p, r, ctx->a, err);
}

static void wparams(asp_write_params *p, const char *path, const char *s)
{
	asp_write_params_init(p);
	p->path = path;
	p->data.data = (const uint8_t *)s;
	p->data.len = strlen(s);
}

static void write_replace(conf_ctx *ctx)
{
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("f"), "hello world");
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.written == 11 && r.size == 11);
	wparams(&p, P("f"), "bye");
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.written == 3 && r.size == 3, "written %llu size %llu: not truncated?",
	            (unsigned long long)r.written, (unsigned long long)r.size);
	asp_bytes got;
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "bye"), "content '%s'", show(ctx, got));
}

/* write says whether it made the file, whatever the way of writing */
static void write_created(conf_ctx *ctx)
{
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	static const struct {
		const char *name;
		bool atomic, append, offset, created;
	} steps[] = {
	    {"f", false, false, false, true}, {"f", false, false, false, false},
	    {"a", true, false, false, true},  {"a", true, false, false, false},
	    {"f", true, false, false, false}, {"g", false, true, false, true},
	    {"g", false, true, false, false}, {"f", false, false, true, false},
	    {"h", false, false, true, true},
	};
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		wparams(&p, P(steps[i].name), "xy");
		p.atomic = steps[i].atomic;
		p.append = steps[i].append;
		p.has_offset = steps[i].offset;
		p.offset = 1;
		CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
		CONF_CHECKF(ctx, r.has_created && r.created == steps[i].created,
		            "step %zu (%s%s%s): created %s, want %s", i, steps[i].name,
		            steps[i].atomic ? ", atomic" : "", steps[i].append ? ", append" : "",
		            !r.has_created ? "absent"
		            : r.created    ? "true"
		                           : "false",
		            steps[i].created ? "true" : "false");
	}
	/* through a symlink: the file it names */
	asp_exec_result sh;
	SH("ln -s f l", &sh);
	wparams(&p, P("l"), "z");
	p.atomic = true;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.has_created && !r.created, "atomic through a link to a file: created");
	wparams(&p, P("l"), "z");
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.has_created && !r.created, "through a link to a file: created");
}

static void write_offset(conf_ctx *ctx)
{
	PUTS(P("f"), "abcdef");
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("f"), "XY");
	p.has_offset = true;
	p.offset = 2;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.written == 2 && r.size == 6);
	asp_bytes got;
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "abXYef"), "content '%s'", show(ctx, got));
	wparams(&p, P("f"), "Z");
	p.has_offset = true;
	p.offset = 8;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.size == 9);
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_eq(got, "abXYef\0\0Z", 9), "content '%s'", show(ctx, got));
}

static void write_append(conf_ctx *ctx)
{
	PUTS(P("f"), "abc");
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("f"), "def");
	p.append = true;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.written == 3 && r.size == 6);
	asp_bytes got;
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "abcdef"), "content '%s'", show(ctx, got));
	wparams(&p, P("new"), "x");
	p.append = true;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	READ_ALL(P("new"), &got);
	CONF_CHECK(ctx, bytes_is(got, "x"));
}

static void write_mkdirs(conf_ctx *ctx)
{
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("a/b/c.txt"), "deep");
	CONF_ERR(ctx, do_write(ctx, &p, &r, &err), ASP_E_NOT_FOUND, &err);
	p.mkdirs = true;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	asp_bytes got;
	READ_ALL(P("a/b/c.txt"), &got);
	CONF_CHECK(ctx, bytes_is(got, "deep"));
	asp_stat_result s;
	STAT(P("a/b"), true, &s);
	CONF_CHECK(ctx, strcmp(s.type, "dir") == 0);
}

static void write_mode(conf_ctx *ctx)
{
	unsigned um;
	UMASK(&um);
	asp_stat_result s;
	PUTS(P("default"), "x");
	STAT(P("default"), true, &s);
	CONF_CHECKF(ctx, s.mode == (0644u & ~um), "default mode %llo, want %o",
	            (unsigned long long)s.mode, 0644u & ~um);
	PUT_MODE(P("private"), "x", 0600);
	STAT(P("private"), true, &s);
	CONF_CHECKF(ctx, s.mode == (0600u & ~um), "mode %llo", (unsigned long long)s.mode);
	/* mode applies to new files only */
	PUT_MODE(P("private"), "y", 0666);
	STAT(P("private"), true, &s);
	CONF_CHECKF(ctx, s.mode == (0600u & ~um), "an existing file's mode changed to %llo",
	            (unsigned long long)s.mode);
}

static void write_atomic(conf_ctx *ctx)
{
	unsigned um;
	UMASK(&um);
	PUT_MODE(P("f"), "old content", 0640);
	asp_stat_result s;
	STAT(P("f"), true, &s);
	uint64_t mode_before = s.mode;
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("f"), "new");
	p.atomic = true;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.written == 3 && r.size == 3);
	asp_bytes got;
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "new"), "content '%s'", show(ctx, got));
	STAT(P("f"), true, &s);
	CONF_CHECKF(ctx, s.mode == mode_before, "atomic write changed mode %llo -> %llo",
	            (unsigned long long)mode_before, (unsigned long long)s.mode);
	asp_list_result l;
	LIST(ctx->dir, &l);
	CONF_CHECKF(ctx, l.entries.count == 1 && strcmp(l.entries.items[0].name, "f") == 0,
	            "%zu entries (a temp file left behind: '%s')", l.entries.count,
	            l.entries.count ? l.entries.items[0].name : "");
	/* a new file gets `mode` */
	wparams(&p, P("n"), "fresh");
	p.atomic = true;
	p.mode = 0600;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	STAT(P("n"), true, &s);
	CONF_CHECKF(ctx, s.mode == (0600u & ~um), "mode %llo", (unsigned long long)s.mode);
	wparams(&p, P("x/y/z"), "deep");
	p.atomic = true;
	p.mkdirs = true;
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	READ_ALL(P("x/y/z"), &got);
	CONF_CHECK(ctx, bytes_is(got, "deep"));
	asp_mkdir_result mr;
	asp_mkdir_params mp;
	asp_mkdir_params_init(&mp);
	mp.path = P("dir");
	CONF_OK(ctx, ctx->ops->mkdir(ctx->self, &mp, &mr, ctx->a, &err), &err);
	wparams(&p, P("dir"), "x");
	p.atomic = true;
	CONF_ERR(ctx, do_write(ctx, &p, &r, &err), ASP_E_IS_A_DIRECTORY, &err);
}

static void write_invalid_combos(conf_ctx *ctx)
{
	PUTS(P("f"), "orig");
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("f"), "zz");
	p.has_offset = true;
	p.offset = 1;
	p.append = true;
	CONF_ERR(ctx, do_write(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
	wparams(&p, P("f"), "zz");
	p.has_offset = true;
	p.offset = 1;
	p.atomic = true;
	CONF_ERR(ctx, do_write(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
	asp_bytes got;
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "orig"), "a refused write changed the file: '%s'",
	            show(ctx, got));
}

static void write_binary(conf_ctx *ctx)
{
	uint8_t data[1024];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(255 - i % 256);
	PUT(P("bin"), data, sizeof data);
	asp_bytes got;
	READ_ALL(P("bin"), &got);
	CONF_CHECK(ctx, bytes_eq(got, data, sizeof data));
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, P("empty"), "");
	CONF_OK(ctx, do_write(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.written == 0 && r.size == 0);
	asp_stat_result s;
	STAT(P("empty"), true, &s);
	CONF_CHECK(ctx, strcmp(s.type, "file") == 0 && s.size == 0);
}

static void write_errors(conf_ctx *ctx)
{
	PUTS(P("file"), "x");
	asp_write_params p;
	asp_write_result r;
	asp_error err;
	wparams(&p, ctx->dir, "x");
	CONF_ERR(ctx, do_write(ctx, &p, &r, &err), ASP_E_IS_A_DIRECTORY, &err);
	wparams(&p, P("file/x"), "x");
	CONF_ERR(ctx, do_write(ctx, &p, &r, &err), ASP_E_NOT_A_DIRECTORY, &err);
}

/* ---- stat ---- */

static void stat_file_dir(conf_ctx *ctx)
{
	unsigned um;
	UMASK(&um);
	PUT_MODE(P("f"), "12345", 0600);
	asp_mkdir_params mp;
	asp_mkdir_params_init(&mp);
	mp.path = P("d");
	mp.mode = 0700;
	asp_mkdir_result mr;
	asp_error err;
	CONF_OK(ctx, ctx->ops->mkdir(ctx->self, &mp, &mr, ctx->a, &err), &err);
	asp_exec_result ids;
	SH("printf '%s %s' \"$(id -u)\" \"$(id -g)\"", &ids);
	char buf[64] = {0};
	memcpy(buf, ids.stdout_data.data, ids.stdout_data.len < 63 ? ids.stdout_data.len : 63);
	unsigned long long uid = 0, gid = 0;
	CONF_CHECK(ctx, sscanf(buf, "%llu %llu", &uid, &gid) == 2);
	asp_stat_result s;
	STAT(P("f"), true, &s);
	CONF_CHECKF(ctx, strcmp(s.type, "file") == 0, "type %s", s.type);
	CONF_CHECK(ctx, s.size == 5);
	CONF_CHECKF(ctx, s.mode == (0600u & ~um), "mode %llo", (unsigned long long)s.mode);
	CONF_CHECKF(ctx, s.uid == uid && s.gid == gid, "owner %llu:%llu, id says %llu:%llu",
	            (unsigned long long)s.uid, (unsigned long long)s.gid, uid, gid);
	CONF_CHECK(ctx, s.target == NULL);
	STAT(P("d"), true, &s);
	CONF_CHECKF(ctx, strcmp(s.type, "dir") == 0, "type %s", s.type);
	CONF_CHECKF(ctx, s.mode == (0700u & ~um), "mode %llo", (unsigned long long)s.mode);
}

static void stat_symlink(conf_ctx *ctx)
{
	PUTS(P("t.txt"), "12345");
	asp_exec_result r;
	SH("ln -s t.txt link && ln -s missing-target dangling", &r);
	asp_stat_result s;
	STAT(P("link"), false, &s);
	CONF_CHECKF(ctx, strcmp(s.type, "symlink") == 0, "type %s", s.type);
	CONF_CHECKF(ctx, s.target && strcmp(s.target, "t.txt") == 0, "target %s",
	            s.target ? s.target : "nil");
	STAT(P("link"), true, &s);
	CONF_CHECKF(ctx, strcmp(s.type, "file") == 0 && s.size == 5, "followed: %s %llu", s.type,
	            (unsigned long long)s.size);
	/* follow is the default */
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = P("link");
	asp_error err;
	CONF_OK(ctx, ctx->ops->stat(ctx->self, &p, &s, ctx->a, &err), &err);
	CONF_CHECK(ctx, strcmp(s.type, "file") == 0);
	STAT(P("dangling"), false, &s);
	CONF_CHECK(ctx, strcmp(s.type, "symlink") == 0);
	CONF_CHECK(ctx, s.target && strcmp(s.target, "missing-target") == 0);
	p.path = P("dangling");
	CONF_ERR(ctx, ctx->ops->stat(ctx->self, &p, &s, ctx->a, &err), ASP_E_NOT_FOUND, &err);
}

static void stat_special(conf_ctx *ctx)
{
	asp_exec_result r;
	SH("mkfifo fifo", &r);
	asp_stat_result s;
	STAT(P("fifo"), true, &s);
	CONF_CHECKF(ctx, strcmp(s.type, "fifo") == 0, "type %s", s.type);
	STAT("/dev/null", true, &s);
	CONF_CHECKF(ctx, strcmp(s.type, "char") == 0, "/dev/null: type %s", s.type);
	/* sockets and block devices only where the sandbox can show one */
	SH("if command -v python3 >/dev/null 2>&1; then python3 -c 'import socket; "
	   "socket.socket(socket.AF_UNIX).bind(\"sock\")' && echo yes; fi",
	   &r);
	if (bytes_is(r.stdout_data, "yes\n")) {
		STAT(P("sock"), true, &s);
		CONF_CHECKF(ctx, strcmp(s.type, "socket") == 0, "type %s", s.type);
	}
	SH("for f in /dev/*; do if [ -b \"$f\" ] && [ ! -L \"$f\" ]; then printf %s \"$f\"; "
	   "break; fi; done",
	   &r);
	if (r.stdout_data.len) {
		char *dev =
		    asp_arena_strndup(ctx->a, (const char *)r.stdout_data.data, r.stdout_data.len);
		STAT(dev, false, &s);
		CONF_CHECKF(ctx, strcmp(s.type, "block") == 0, "%s: type %s", dev, s.type);
	}
}

static void stat_mtime(conf_ctx *ctx)
{
	PUTS(P("f"), "x");
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "touch -t 202001020304.05 f";
	p.cwd = ctx->dir;
	asp_strmap_entry tz[] = {{"TZ", "UTC0"}};
	p.has_env = true;
	p.env = (asp_strmap){tz, 1};
	asp_exec_result r;
	asp_error err;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.exit_code == 0, "touch: %s", show(ctx, r.stderr_data));
	asp_stat_result s;
	STAT(P("f"), true, &s);
	/* whole seconds: SFTP carries no more */
	CONF_CHECKF(ctx, s.mtime_ns / 1000000000 == 1577934245, "mtime_ns %lld",
	            (long long)s.mtime_ns);
	asp_list_result l;
	LIST(ctx->dir, &l);
	CONF_CHECK(ctx, l.entries.count == 1 && l.entries.items[0].mtime_ns == s.mtime_ns);
}

static void stat_errors(conf_ctx *ctx)
{
	PUTS(P("file"), "x");
	asp_stat_params p;
	asp_stat_params_init(&p);
	asp_stat_result s;
	asp_error err;
	p.path = P("missing");
	CONF_ERR(ctx, ctx->ops->stat(ctx->self, &p, &s, ctx->a, &err), ASP_E_NOT_FOUND, &err);
	p.follow = false;
	CONF_ERR(ctx, ctx->ops->stat(ctx->self, &p, &s, ctx->a, &err), ASP_E_NOT_FOUND, &err);
	p.path = P("file/x");
	CONF_ERR(ctx, ctx->ops->stat(ctx->self, &p, &s, ctx->a, &err), ASP_E_NOT_A_DIRECTORY, &err);
}

/* ---- list ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void list_sorted_bytewise(conf_ctx *ctx)
{
	/* expected order: by unsigned bytes, not by locale */
	static const char *const want[] = {"B", "_", "a", "a b", "b", "\xc3\xa9", "\xff"};
	static const char *const create[] = {"b", "\xff", "a b", "B", "\xc3\xa9", "_", "a"};
	size_t n = sizeof want / sizeof want[0];
	for (size_t i = 0; i < n; i++)
		PUTS(P(create[i]), create[i]);
	const char *sorted[sizeof want / sizeof want[0]];
	memcpy(sorted, create, sizeof sorted);
	qsort(sorted, n, sizeof sorted[0], cmp_str);
	for (size_t i = 0; i < n; i++)
		CONF_CHECK(ctx, strcmp(sorted[i], want[i]) == 0); /* the test's own premise */
	asp_list_result l;
	LIST(ctx->dir, &l);
	CONF_CHECKF(ctx, l.entries.count == n, "%zu entries, want %zu", l.entries.count, n);
	for (size_t i = 0; i < n; i++) {
		const char *got = l.entries.items[i].name;
		CONF_CHECKF(ctx, strcmp(got, want[i]) == 0, "entry %zu is '%s', want '%s'", i, got,
		            want[i]);
		CONF_CHECK(ctx, strcmp(l.entries.items[i].type, "file") == 0);
		CONF_CHECK(ctx, l.entries.items[i].size == strlen(want[i]));
	}
}

static const asp_list_entry *find_entry(const asp_list_result *l, const char *name)
{
	for (size_t i = 0; i < l->entries.count; i++) {
		if (strcmp(l->entries.items[i].name, name) == 0)
			return &l->entries.items[i];
	}
	return NULL;
}

static void list_types(conf_ctx *ctx)
{
	PUT_MODE(P("file"), "abc", 0600);
	asp_exec_result r;
	SH("mkdir sub && ln -s sub ldir && ln -s file lfile && mkfifo fifo", &r);
	asp_list_result l;
	LIST(ctx->dir, &l);
	CONF_CHECKF(ctx, l.entries.count == 5, "%zu entries", l.entries.count);
	for (size_t i = 0; i < l.entries.count; i++) {
		const char *nm = l.entries.items[i].name;
		CONF_CHECKF(ctx, strcmp(nm, ".") != 0 && strcmp(nm, "..") != 0, "lists '%s'", nm);
	}
	const asp_list_entry *e = find_entry(&l, "file");
	CONF_CHECK(ctx, e && strcmp(e->type, "file") == 0 && e->size == 3);
	CONF_CHECKF(ctx, (e->mode & 0700) == 0600 && !(e->mode & 077), "mode %llo",
	            (unsigned long long)e->mode);
	e = find_entry(&l, "sub");
	CONF_CHECK(ctx, e && strcmp(e->type, "dir") == 0);
	e = find_entry(&l, "ldir");
	CONF_CHECKF(ctx, e && strcmp(e->type, "symlink") == 0, "symlink to dir shown as %s",
	            e ? e->type : "absent");
	e = find_entry(&l, "lfile");
	CONF_CHECK(ctx, e && strcmp(e->type, "symlink") == 0);
	e = find_entry(&l, "fifo");
	CONF_CHECK(ctx, e && strcmp(e->type, "fifo") == 0);
	LIST(P("sub"), &l);
	CONF_CHECK(ctx, l.entries.count == 0);
}

static void list_errors(conf_ctx *ctx)
{
	PUTS(P("file"), "x");
	asp_list_params p;
	asp_list_params_init(&p);
	asp_list_result l;
	asp_error err;
	p.path = P("file");
	CONF_ERR(ctx, ctx->ops->list(ctx->self, &p, &l, ctx->a, &err), ASP_E_NOT_A_DIRECTORY, &err);
	p.path = P("missing");
	CONF_ERR(ctx, ctx->ops->list(ctx->self, &p, &l, ctx->a, &err), ASP_E_NOT_FOUND, &err);
}

/* ---- mkdir ---- */

static asp_status do_mkdir(conf_ctx *ctx, const char *path, bool parents, uint64_t mode,
                           asp_error *err)
{
	asp_mkdir_params p;
	asp_mkdir_params_init(&p);
	p.path = path;
	p.parents = parents;
	if (mode)
		p.mode = mode;
	asp_mkdir_result r;
	return ctx->ops->mkdir(ctx->self, &p, &r, ctx->a, err);
}

static void mkdir_basic(conf_ctx *ctx)
{
	asp_error err;
	CONF_OK(ctx, do_mkdir(ctx, P("d"), false, 0, &err), &err);
	asp_stat_result s;
	STAT(P("d"), true, &s);
	CONF_CHECK(ctx, strcmp(s.type, "dir") == 0);
	CONF_ERR(ctx, do_mkdir(ctx, P("d"), false, 0, &err), ASP_E_ALREADY_EXISTS, &err);
	CONF_OK(ctx, do_mkdir(ctx, P("d"), true, 0, &err), &err);
	unsigned um;
	UMASK(&um);
	CONF_OK(ctx, do_mkdir(ctx, P("private"), false, 0700, &err), &err);
	STAT(P("private"), true, &s);
	CONF_CHECKF(ctx, s.mode == (0700u & ~um), "mode %llo", (unsigned long long)s.mode);
}

static void mkdir_parents(conf_ctx *ctx)
{
	asp_error err;
	CONF_ERR(ctx, do_mkdir(ctx, P("x/y"), false, 0, &err), ASP_E_NOT_FOUND, &err);
	CONF_OK(ctx, do_mkdir(ctx, P("a/b/c"), true, 0, &err), &err);
	asp_stat_result s;
	STAT(P("a"), true, &s);
	CONF_CHECK(ctx, strcmp(s.type, "dir") == 0);
	STAT(P("a/b/c"), true, &s);
	CONF_CHECK(ctx, strcmp(s.type, "dir") == 0);
	CONF_OK(ctx, do_mkdir(ctx, P("a/b/c"), true, 0, &err), &err);
	CONF_OK(ctx, do_mkdir(ctx, P("a/b/c/"), true, 0, &err), &err);
}

static void mkdir_errors(conf_ctx *ctx)
{
	PUTS(P("file"), "x");
	asp_error err;
	CONF_ERR(ctx, do_mkdir(ctx, P("file"), false, 0, &err), ASP_E_ALREADY_EXISTS, &err);
	/* an existing non-directory stays already_exists with parents */
	CONF_ERR(ctx, do_mkdir(ctx, P("file"), true, 0, &err), ASP_E_ALREADY_EXISTS, &err);
	CONF_ERR(ctx, do_mkdir(ctx, P("file/sub"), false, 0, &err), ASP_E_NOT_A_DIRECTORY, &err);
	CONF_ERR(ctx, do_mkdir(ctx, P("file/sub/deeper"), true, 0, &err), ASP_E_NOT_A_DIRECTORY,
	         &err);
}

/* ---- remove ---- */

static asp_status do_remove(conf_ctx *ctx, const char *path, bool recursive, asp_error *err)
{
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = path;
	p.recursive = recursive;
	asp_remove_result r;
	return ctx->ops->remove(ctx->self, &p, &r, ctx->a, err);
}

static void remove_file_and_dir(conf_ctx *ctx)
{
	PUTS(P("f"), "x");
	asp_error err;
	CONF_OK(ctx, do_remove(ctx, P("f"), false, &err), &err);
	EXPECT_EXISTS(P("f"), false);
	CONF_OK(ctx, do_mkdir(ctx, P("d"), false, 0, &err), &err);
	CONF_OK(ctx, do_remove(ctx, P("d"), false, &err), &err);
	EXPECT_EXISTS(P("d"), false);
	CONF_ERR(ctx, do_remove(ctx, P("missing"), false, &err), ASP_E_NOT_FOUND, &err);
	CONF_ERR(ctx, do_remove(ctx, P("missing"), true, &err), ASP_E_NOT_FOUND, &err);
}

static void remove_not_empty(conf_ctx *ctx)
{
	PUTS(P("d/f"), "x");
	asp_error err;
	CONF_ERR(ctx, do_remove(ctx, P("d"), false, &err), ASP_E_NOT_EMPTY, &err);
	EXPECT_EXISTS(P("d/f"), true);
}

static void remove_recursive(conf_ctx *ctx)
{
	PUTS(P("outside/keep"), "keep");
	asp_exec_result r;
	SH("mkdir -p t/a/b/c t/e && echo 1 > t/a/b/c/f && echo 2 > t/a/g && "
	   "echo 3 > 't/sp ace' && echo 4 > 't/$(q)' && ln -s ../outside t/a/lnk && "
	   "ln -s ../outside/keep t/flink && mkfifo t/a/fifo",
	   &r);
	asp_error err;
	CONF_ERR(ctx, do_remove(ctx, P("t"), false, &err), ASP_E_NOT_EMPTY, &err);
	CONF_OK(ctx, do_remove(ctx, P("t"), true, &err), &err);
	EXPECT_EXISTS(P("t"), false);
	asp_bytes got;
	READ_ALL(P("outside/keep"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "keep"), "a symlink inside was followed");
}

static void remove_symlink_to_dir(conf_ctx *ctx)
{
	PUTS(P("target/file"), "precious");
	asp_exec_result r;
	SH("ln -s target l1 && ln -s target l2", &r);
	asp_error err;
	CONF_OK(ctx, do_remove(ctx, P("l1"), false, &err), &err);
	CONF_OK(ctx, do_remove(ctx, P("l2"), true, &err), &err);
	EXPECT_EXISTS(P("l1"), false);
	EXPECT_EXISTS(P("l2"), false);
	asp_bytes got;
	READ_ALL(P("target/file"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "precious"), "removing a symlink touched its target");
}

/* ---- rename ---- */

static asp_status do_rename(conf_ctx *ctx, const char *from, const char *to, bool overwrite,
                            asp_error *err)
{
	asp_rename_params p;
	asp_rename_params_init(&p);
	p.from = from;
	p.to = to;
	p.overwrite = overwrite;
	asp_rename_result r;
	return ctx->ops->rename(ctx->self, &p, &r, ctx->a, err);
}

static void rename_overwrite(conf_ctx *ctx)
{
	PUTS(P("a"), "A");
	PUTS(P("b"), "B");
	asp_rename_params p;
	asp_rename_params_init(&p);
	CONF_CHECK(ctx, p.overwrite); /* the default */
	p.from = P("a");
	p.to = P("b");
	asp_rename_result r;
	asp_error err;
	CONF_OK(ctx, ctx->ops->rename(ctx->self, &p, &r, ctx->a, &err), &err);
	EXPECT_EXISTS(P("a"), false);
	asp_bytes got;
	READ_ALL(P("b"), &got);
	CONF_CHECK(ctx, bytes_is(got, "A"));
}

static void rename_no_overwrite(conf_ctx *ctx)
{
	PUTS(P("a"), "A");
	PUTS(P("b"), "B");
	asp_error err;
	CONF_ERR(ctx, do_rename(ctx, P("a"), P("b"), false, &err), ASP_E_ALREADY_EXISTS, &err);
	asp_bytes got;
	READ_ALL(P("a"), &got);
	CONF_CHECK(ctx, bytes_is(got, "A"));
	READ_ALL(P("b"), &got);
	CONF_CHECK(ctx, bytes_is(got, "B"));
	CONF_OK(ctx, do_rename(ctx, P("a"), P("c"), false, &err), &err);
	EXPECT_EXISTS(P("a"), false);
	READ_ALL(P("c"), &got);
	CONF_CHECK(ctx, bytes_is(got, "A"));
	/* directories too */
	CONF_OK(ctx, do_mkdir(ctx, P("d1"), false, 0, &err), &err);
	CONF_OK(ctx, do_mkdir(ctx, P("d2"), false, 0, &err), &err);
	CONF_ERR(ctx, do_rename(ctx, P("d1"), P("d2"), false, &err), ASP_E_ALREADY_EXISTS, &err);
	EXPECT_EXISTS(P("d1"), true);
}

static void rename_errors_and_dirs(conf_ctx *ctx)
{
	asp_error err;
	CONF_ERR(ctx, do_rename(ctx, P("missing"), P("x"), true, &err), ASP_E_NOT_FOUND, &err);
	CONF_ERR(ctx, do_rename(ctx, P("missing"), P("x"), false, &err), ASP_E_NOT_FOUND, &err);
	PUTS(P("d/inner"), "in");
	CONF_OK(ctx, do_rename(ctx, P("d"), P("e"), true, &err), &err);
	EXPECT_EXISTS(P("d"), false);
	asp_bytes got;
	READ_ALL(P("e/inner"), &got);
	CONF_CHECK(ctx, bytes_is(got, "in"));
}

/* ---- hostile paths and arguments ---- */

static const char *const hostile[] = {
    "with space",  "quote'single",  "dq\"x",  "$(touch pwned)",      "`touch pwned2`",
    "new\nline",   "-leading-dash", "--",     "semi;colon&amp|pipe", "tab\tx",
    "back\\slash", "*glob?[a]",     "~tilde", "percent%s%n",         "\xff\xfe raw",
};
#define N_HOSTILE (sizeof hostile / sizeof hostile[0])

static void hostile_names(conf_ctx *ctx)
{
	for (size_t i = 0; i < N_HOSTILE; i++)
		PUTS(P(hostile[i]), hostile[i]);
	asp_list_result l;
	LIST(ctx->dir, &l);
	CONF_CHECKF(ctx, l.entries.count == N_HOSTILE,
	            "%zu entries, want %zu (a name split or "
	            "ran as a command?)",
	            l.entries.count, N_HOSTILE);
	for (size_t i = 0; i < N_HOSTILE; i++) {
		CONF_CHECKF(ctx, find_entry(&l, hostile[i]) != NULL, "'%s' not listed verbatim",
		            hostile[i]);
		asp_bytes got;
		READ_ALL(P(hostile[i]), &got);
		CONF_CHECKF(ctx, bytes_is(got, hostile[i]), "'%s' read back '%s'", hostile[i],
		            show(ctx, got));
		asp_stat_result s;
		STAT(P(hostile[i]), false, &s);
		CONF_CHECK(ctx, s.size == strlen(hostile[i]));
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.has_argv = true;
		p.argv = ARGV("cat", "--", P(hostile[i]));
		asp_exec_result r;
		asp_error err;
		CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
		CONF_CHECKF(ctx, bytes_is(r.stdout_data, hostile[i]), "cat '%s' gave '%s' / '%s'",
		            hostile[i], show(ctx, r.stdout_data), show(ctx, r.stderr_data));
	}
	asp_error err;
	CONF_OK(ctx, do_rename(ctx, P(hostile[3]), P(hostile[4]), true, &err), &err);
	for (size_t i = 0; i < N_HOSTILE; i++) {
		if (i == 3)
			continue;
		CONF_OK(ctx, do_remove(ctx, P(hostile[i]), false, &err), &err);
	}
	LIST(ctx->dir, &l);
	CONF_CHECKF(ctx, l.entries.count == 0, "%zu entries left, first '%s'", l.entries.count,
	            l.entries.count ? l.entries.items[0].name : "");
}

static void hostile_exec_args(conf_ctx *ctx)
{
	/* argv, cwd and env values arrive verbatim: nothing is re-parsed by a shell */
	const char *argv[N_HOSTILE + 3];
	argv[0] = "printf";
	argv[1] = "%s|";
	size_t want_len = 0;
	for (size_t i = 0; i < N_HOSTILE; i++) {
		argv[i + 2] = hostile[i];
		want_len += strlen(hostile[i]) + 1;
	}
	argv[N_HOSTILE + 2] = "";
	want_len += 1;
	char *want = asp_arena_alloc(ctx->a, want_len + 1);
	CONF_CHECK(ctx, want != NULL);
	for (size_t i = 0; i < N_HOSTILE; i++) {
		strcat(want, hostile[i]);
		strcat(want, "|");
	}
	strcat(want, "|");
	const char *dir = P("d $(touch pwned) 'q' `x`");
	asp_error err;
	CONF_OK(ctx, do_mkdir(ctx, dir, false, 0, &err), &err);
	PUTS(path_in(ctx, dir, "marker"), "in-hostile-dir");
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = strv(ctx, argv, N_HOSTILE + 3);
	p.cwd = dir;
	asp_exec_result r;
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, bytes_is(r.stdout_data, want), "got '%s'", show(ctx, r.stdout_data));
	asp_strmap_entry e[] = {{"ASP_CONF_V", "$(touch pwned) `touch pwned` 'q' \"dq\"\n;x"}};
	asp_exec_params_init(&p);
	p.command = "cat marker; printf '|%s' \"$ASP_CONF_V\"";
	p.cwd = dir;
	p.has_env = true;
	p.env = (asp_strmap){e, 1};
	CONF_OK(ctx, do_exec(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx,
	            bytes_is(r.stdout_data, "in-hostile-dir|$(touch pwned) `touch pwned` "
	                                    "'q' \"dq\"\n;x"),
	            "got '%s'", show(ctx, r.stdout_data));
	EXPECT_EXISTS(P("pwned"), false);
	EXPECT_EXISTS(path_in(ctx, dir, "pwned"), false);
}

/* ---- glob, grep, edit (protocol 2) ---- */

static bool strv_is(asp_strv v, const char *const *want, size_t n)
{
	if (v.count != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (strcmp(v.items[i], want[i]) != 0)
			return false;
	return true;
}

static const char *strv_show(conf_ctx *ctx, asp_strv v)
{
	size_t len = 1;
	for (size_t i = 0; i < v.count; i++)
		len += strlen(v.items[i]) + 1;
	char *s = asp_arena_alloc(ctx->a, len);
	if (!s)
		return "?";
	s[0] = '\0';
	for (size_t i = 0; i < v.count; i++)
		strcat(strcat(s, v.items[i]), i + 1 < v.count ? "," : "");
	return s;
}

/* A small tree: a.c (oldest) b.c sub/c.c sub/deep/d.h (newest), .hid/e.c, .git/f.c */
static void search_tree(conf_ctx *ctx)
{
	asp_exec_result r;
	SH("mkdir -p sub/deep .hid .git && printf 'int main;\\nfoo bar\\nFOO\\n' > a.c && "
	   "printf 'one\\nfoo\\ntwo\\nthree\\n' > b.c && printf 'nothing\\n' > sub/c.c && "
	   "printf 'foo\\n' > sub/deep/d.h && printf 'foo\\n' > .hid/e.c && "
	   "printf 'foo\\n' > .git/f.c && printf 'foo\\0bin' > sub/bin.c && "
	   "touch -d '2020-01-01 00:00:00' a.c && touch -d '2020-01-02 00:00:00' b.c sub/bin.c && "
	   "touch -d '2020-01-03 00:00:00' sub/c.c && touch -d '2020-01-04 00:00:00' sub/deep/d.h",
	   &r);
	CONF_REQ(ctx, r.exit_code == 0);
}

static asp_status do_glob(conf_ctx *ctx, const char *pattern, bool hidden, uint64_t max,
                          asp_glob_result *r, asp_error *err)
{
	asp_glob_params p;
	asp_glob_params_init(&p);
	p.path = ctx->dir;
	p.pattern = pattern;
	p.hidden = hidden;
	if (max)
		p.max_results = max;
	return ctx->ops->glob(ctx->self, &p, r, ctx->a, err);
}

static void glob_order_and_patterns(conf_ctx *ctx)
{
	search_tree(ctx);
	asp_glob_result r;
	asp_error err;
	CONF_OK(ctx, do_glob(ctx, "*.c", false, 0, &r, &err), &err);
	/* newest first, ties by path; .hid and .git not entered */
	const char *all_c[] = {P("sub/c.c"), P("b.c"), P("sub/bin.c"), P("a.c")};
	CONF_CHECKF(ctx, strv_is(r.paths, all_c, 4) && !r.truncated, "got %s",
	            strv_show(ctx, r.paths));
	CONF_OK(ctx, do_glob(ctx, "sub/**/*.{c,h}", false, 0, &r, &err), &err);
	const char *sub[] = {P("sub/deep/d.h"), P("sub/c.c"), P("sub/bin.c")};
	CONF_CHECKF(ctx, strv_is(r.paths, sub, 3), "got %s", strv_show(ctx, r.paths));
	CONF_OK(ctx, do_glob(ctx, "[ab].?", false, 0, &r, &err), &err);
	const char *ab[] = {P("b.c"), P("a.c")};
	CONF_CHECKF(ctx, strv_is(r.paths, ab, 2), "got %s", strv_show(ctx, r.paths));
	CONF_OK(ctx, do_glob(ctx, "*.c", false, 2, &r, &err), &err);
	CONF_CHECKF(ctx, r.paths.count == 2 && r.truncated, "%zu, truncated %d", r.paths.count,
	            r.truncated);
	CONF_OK(ctx, do_glob(ctx, "**/e.c", true, 0, &r, &err), &err);
	const char *hid[] = {P(".hid/e.c")};
	CONF_CHECKF(ctx, strv_is(r.paths, hid, 1), "hidden: got %s", strv_show(ctx, r.paths));
	CONF_OK(ctx, do_glob(ctx, "**/f.c", true, 0, &r, &err), &err);
	CONF_CHECKF(ctx, r.paths.count == 0, ".git entered: %s", strv_show(ctx, r.paths));
	CONF_ERR(ctx, do_glob(ctx, "", false, 0, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
}

static asp_status do_grep(conf_ctx *ctx, asp_grep_params *p, asp_grep_result *r, asp_error *err)
{
	if (!p->path)
		p->path = ctx->dir;
	return ctx->ops->grep(ctx->self, p, r, ctx->a, err);
}

static void grep_modes(conf_ctx *ctx)
{
	search_tree(ctx);
	asp_grep_params p;
	asp_grep_result r;
	asp_error err;
	asp_grep_params_init(&p);
	p.regex = "fo+";
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	/* bytewise path order; binary, hidden and .git skipped */
	const char *files[] = {P("a.c"), P("b.c"), P("sub/deep/d.h")};
	CONF_CHECKF(ctx, r.has_files && strv_is(r.files, files, 3), "files: %s",
	            strv_show(ctx, r.files));
	p.ignore_case = true;
	p.mode = "count";
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx,
	            r.has_counts && r.counts.count == 3 && r.counts.items[0].count == 2 &&
	                r.counts.items[1].count == 1,
	            "counts: %zu", r.counts.count);
	asp_grep_params_init(&p);
	p.regex = "foo";
	p.mode = "content";
	p.glob = "b.c";
	p.before = 1;
	p.after = 5;
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	CONF_REQ(ctx, r.has_matches && r.matches.count == 1);
	const asp_grep_match *m = &r.matches.items[0];
	const char *before[] = {"one"}, *after[] = {"two", "three"};
	CONF_CHECKF(ctx,
	            strcmp(m->path, P("b.c")) == 0 && m->line == 2 && strcmp(m->text, "foo") == 0 &&
	                strv_is(m->before, before, 1) && strv_is(m->after, after, 2),
	            "match %s:%llu '%s' before %s after %s", m->path, (unsigned long long)m->line,
	            m->text, strv_show(ctx, m->before), strv_show(ctx, m->after));
	asp_grep_params_init(&p);
	p.regex = "foo";
	p.max_matches = 2;
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	CONF_CHECK(ctx, r.files.count == 2 && r.truncated);
	asp_grep_params_init(&p);
	p.regex = "foo";
	p.path = P("a.c");
	p.mode = "content";
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.matches.count == 1 && strcmp(r.matches.items[0].path, P("a.c")) == 0,
	            "one file: %zu", r.matches.count);
	asp_grep_params_init(&p);
	p.regex = "(";
	CONF_ERR(ctx, do_grep(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
	p.regex = "x";
	p.mode = "lines";
	CONF_ERR(ctx, do_grep(ctx, &p, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
}

static void grep_pcre2(conf_ctx *ctx)
{
	search_tree(ctx);
	asp_grep_params p;
	asp_grep_result r;
	asp_error err;
	asp_grep_params_init(&p);
	p.regex = "\\bfoo(?= bar)"; /* \b and a lookahead: Perl, not ERE */
	p.mode = "content";
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx, r.matches.count == 1 && r.matches.items[0].line == 2, "%zu matches",
	            r.matches.count);
	p.regex = "bar\\nFOO";
	p.multiline = true;
	CONF_OK(ctx, do_grep(ctx, &p, &r, &err), &err);
	CONF_CHECKF(ctx,
	            r.matches.count == 1 && r.matches.items[0].line == 2 &&
	                strcmp(r.matches.items[0].text, "foo bar\nFOO") == 0,
	            "%zu multiline matches", r.matches.count);
}

static asp_status do_edit(conf_ctx *ctx, const char *path, const char *old, const char *new_text,
                          bool all, asp_edit_result *r, asp_error *err)
{
	asp_edit_params p;
	asp_edit_params_init(&p);
	p.path = path;
	p.old = old;
	p.new_text = new_text;
	p.replace_all = all;
	return ctx->ops->edit(ctx->self, &p, r, ctx->a, err);
}

static void edit_cases(conf_ctx *ctx)
{
	PUT_MODE(P("f"), "alpha beta alpha gamma", 0640);
	asp_edit_result r;
	asp_error err;
	CONF_OK(ctx, do_edit(ctx, P("f"), "beta", "BETA", false, &r, &err), &err);
	CONF_CHECK(ctx, r.replacements == 1);
	asp_bytes got;
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, "alpha BETA alpha gamma"), "'%s'", show(ctx, got));
	CONF_ERR(ctx, do_edit(ctx, P("f"), "alpha", "x", false, &r, &err), ASP_E_INVALID_ARGUMENT,
	         &err);
	CONF_CHECKF(ctx, strstr(err.message, "2 times") != NULL, "message '%s'", err.message);
	CONF_ERR(ctx, do_edit(ctx, P("f"), "delta", "x", false, &r, &err), ASP_E_NOT_FOUND, &err);
	CONF_ERR(ctx, do_edit(ctx, P("f"), "", "x", false, &r, &err), ASP_E_INVALID_ARGUMENT, &err);
	CONF_ERR(ctx, do_edit(ctx, P("missing"), "a", "x", false, &r, &err), ASP_E_NOT_FOUND, &err);
	CONF_OK(ctx, do_edit(ctx, P("f"), "alpha", "", true, &r, &err), &err);
	CONF_CHECK(ctx, r.replacements == 2);
	READ_ALL(P("f"), &got);
	CONF_CHECKF(ctx, bytes_is(got, " BETA  gamma"), "'%s'", show(ctx, got));
	/* atomic like write atomic: the mode kept, no temporary left */
	asp_stat_result s;
	STAT(P("f"), true, &s);
	CONF_CHECKF(ctx, s.mode == 0640, "mode %llo", (unsigned long long)s.mode);
	asp_list_result l;
	LIST(ctx->dir, &l);
	CONF_CHECKF(ctx, l.entries.count == 1, "%zu entries (a temp file left behind?)",
	            l.entries.count);
	/* any name: a space, a newline, quotes, $ and a byte that is not UTF-8 */
	const char *odd = P("we ird\n'q'$x\xff");
	PUT_MODE(odd, "one two", 0600);
	CONF_OK(ctx, do_edit(ctx, odd, "two", "2", false, &r, &err), &err);
	READ_ALL(odd, &got);
	CONF_CHECKF(ctx, bytes_is(got, "one 2"), "'%s'", show(ctx, got));
}

#define CASE(name, what)                                                                           \
	{                                                                                          \
#name, name, what, NULL, NULL                                                      \
	}
/* A case needing ops beyond the unary ones and hello features (NULL: none). */
#define CASE_NEEDS(name, ops, features, what)                                                      \
	{                                                                                          \
#name, name, what, ops, features                                                   \
	}

const conf_case conf_cases[] = {
    CASE(hello_fields, "hello: protocol 1, the unary ops, os, arch, absolute cwd"),
    CASE(exec_command_shell, "exec command runs through /bin/sh -c; stdout/stderr apart"),
    CASE(exec_argv_direct, "exec argv runs without a shell"),
    CASE(exec_invalid_params, "exec needs exactly one of command and argv"),
    CASE(exec_missing_program, "exec argv of a missing program is not_found"),
    CASE(exec_exit_codes, "exec returns non-zero exits as results"),
    CASE(exec_signal_name, "exec: a signalled process gives exit -1 and the signal name"),
    CASE(exec_stdin_binary, "exec stdin round trip with every byte value"),
    CASE(exec_stdin_closed, "exec stdin is closed after the data; unread input is fine"),
    CASE(exec_large_io, "exec with 4 MiB in and out at once does not deadlock"),
    CASE(exec_large_output, "exec returns 6 MB of output whole"),
    CASE(exec_max_output, "exec keeps the first max_output bytes and counts the rest"),
    CASE(exec_env, "exec env adds and overrides variables, PATH included"),
    CASE(exec_fresh_process, "exec: no shell state carries over between calls"),
    CASE(exec_cwd, "exec runs in cwd"),
    CASE(exec_cwd_errors, "exec cwd missing is not_found, a file is not_a_directory"),
    CASE(exec_timeout_kills_group, "exec timeout TERMs the whole group"),
    CASE(exec_timeout_escalates_to_kill, "exec timeout KILLs 2 s later what ignores TERM"),
    CASE(exec_background_holds_output, "exec waits for a background child holding stdout"),
    CASE(exec_background_timeout, "exec timeout ends a background child holding stdout"),
    CASE(exec_background_detached, "exec does not wait for a child that let go of output"),
    CASE(exec_own_process_group, "exec gives the command its own session and group"),
    CASE(exec_no_inherited_fds, "exec: the command inherits only fds 0-2"),
    CASE_NEEDS(exec_concurrent, "exec", "concurrent",
               "exec: parallel calls stay apart; a slow one blocks nothing"),
    CASE(read_ranges, "read offset/length, size and eof"),
    CASE(read_whole_binary, "read the whole file, binary and empty"),
    CASE(read_large, "read a 3 MiB file back whole"),
    CASE(read_errors, "read missing, a directory, through a file"),
    CASE(write_replace, "write replaces the whole file by default"),
    CASE(write_created, "write says whether it made the file (plain, atomic, append, offset)"),
    CASE(write_offset, "write at an offset keeps the rest; past the end leaves a hole"),
    CASE(write_append, "write append adds to the end"),
    CASE(write_mkdirs, "write mkdirs creates parents; without it not_found"),
    CASE(write_mode, "write mode applies to new files only, under the umask"),
    CASE(write_atomic, "write atomic replaces whole, keeps the mode, leaves no temp"),
    CASE(write_invalid_combos, "write offset with append or atomic is invalid_argument"),
    CASE(write_binary, "write binary and empty data"),
    CASE(write_errors, "write to a directory, through a file"),
    CASE(stat_file_dir, "stat file and dir: type, size, mode, owner"),
    CASE(stat_symlink, "stat symlink with follow true/false, target, dangling"),
    CASE(stat_special, "stat fifo, char device, socket and block device where present"),
    CASE(stat_mtime, "stat and list mtime_ns"),
    CASE(stat_errors, "stat missing, through a file"),
    CASE(list_sorted_bytewise, "list sorts bytewise, high bytes last"),
    CASE(list_types, "list types; symlinks not followed; no . and .."),
    CASE(list_errors, "list a file, missing"),
    CASE(mkdir_basic, "mkdir, already_exists, mode"),
    CASE(mkdir_parents, "mkdir parents, and not_found without"),
    CASE(mkdir_errors, "mkdir over a file, through a file"),
    CASE(remove_file_and_dir, "remove a file, an empty dir; missing is not_found"),
    CASE(remove_not_empty, "remove a non-empty dir without recursive is not_empty"),
    CASE(remove_recursive, "remove recursive, never following symlinks inside"),
    CASE(remove_symlink_to_dir, "remove a symlink to a dir leaves the dir alone"),
    CASE(rename_overwrite, "rename replaces the target by default"),
    CASE(rename_no_overwrite, "rename overwrite=false is already_exists on a target"),
    CASE(rename_errors_and_dirs, "rename missing is not_found; directories move"),
    CASE(hostile_names, "names with shell metacharacters, newlines, raw bytes"),
    CASE(hostile_exec_args, "argv, cwd and env values with shell metacharacters"),
    CASE_NEEDS(glob_order_and_patterns, "glob", NULL,
               "glob: newest first, **, {a,b}, [..], hidden, .git skipped, truncation"),
    CASE_NEEDS(grep_modes, "grep", NULL,
               "grep files/count/content, context, glob filter, binary/.git/hidden skipped"),
    CASE_NEEDS(grep_pcre2, "grep", "grep-pcre2", "grep with PCRE2: \\b, lookahead, multiline"),
    CASE_NEEDS(edit_cases, "edit", NULL,
               "edit: unique, missing, ambiguous (count in message), replace_all, atomic"),
    CASE_NEEDS(spawn_output_live, "spawn", "follow",
               "spawn: output arrives as it is produced, not at the exit"),
    CASE_NEEDS(spawn_output_order, "spawn proc_wait", "follow",
               "spawn: both streams whole, contiguous offsets, exit last"),
    CASE_NEEDS(spawn_stdin_binary, "spawn proc_write", "follow",
               "spawn + proc_write: binary stdin, eof, then invalid_argument"),
    CASE_NEEDS(spawn_timeout_kills_group, "spawn proc_wait", "follow",
               "spawn timeout TERMs the whole group, timed_out"),
    CASE_NEEDS(spawn_slow_reader_bounded, "spawn proc_wait proc_signal", "follow",
               "spawn: a slow client holds a 1 GiB producer back"),
    CASE_NEEDS(spawn_errors, "spawn", NULL,
               "spawn errors: not_found, invalid_argument, no callbacks"),
    CASE_NEEDS(proc_signal_each, "spawn proc_signal proc_wait", NULL,
               "proc_signal: each signal name; finished is a no-op"),
    CASE_NEEDS(proc_wait_timeout, "spawn proc_wait proc_signal", NULL,
               "proc_wait: timeout error, then the exit"),
    CASE_NEEDS(proc_list_fields, "spawn proc_wait proc_signal proc_list", NULL,
               "proc_list: tag, command (argv quoted), running, exit_code"),
    CASE_NEEDS(proc_list_retains_64, "spawn proc_wait proc_list", NULL,
               "proc_list: the last 64 finished stay, older ones go"),
    CASE_NEEDS(proc_attach_retained, "spawn proc_wait proc_attach", "follow",
               "proc_attach: a process 55 finished ones later, its output and exit"),
    CASE_NEEDS(proc_attach_replay, "spawn proc_attach", "follow",
               "proc_attach: replay from offsets, then live, then exit"),
    CASE_NEEDS(proc_attach_truncated, "spawn proc_wait proc_attach", "follow",
               "proc_attach: the last 1 MiB, starting later than asked"),
    CASE_NEEDS(proc_attach_after_close, "spawn proc_attach", "follow reattach",
               "proc_attach from another connection after a close"),
    CASE_NEEDS(tty_isatty_one_stream, "spawn", "follow pty",
               "spawn tty: stdin, stdout, stderr are the terminal; all output on stdout"),
    CASE_NEEDS(tty_size_and_term, "spawn", "follow pty",
               "spawn tty: stty size and TERM as asked, 24x80 and xterm-256color by default"),
    CASE_NEEDS(tty_resize_winch, "spawn proc_resize proc_signal", "follow pty",
               "proc_resize: the process gets SIGWINCH and sees the new size"),
    CASE_NEEDS(tty_ctrl_c, "spawn proc_write", "follow pty",
               "tty: ^C ends sleep in an interactive sh, which answers the next command"),
    CASE_NEEDS(tty_repl, "spawn proc_write", "follow pty",
               "tty: a REPL (python3, else sh -i) round trip, ^D ends it"),
    CASE_NEEDS(tty_large_output, "spawn", "follow pty",
               "tty: 4.5 MB of output through the terminal, every byte in order"),
    CASE_NEEDS(tty_eof, "spawn proc_write proc_signal", "follow pty",
               "tty: proc_write eof types VEOF (cat sees the end), then invalid_argument"),
    CASE_NEEDS(tty_reattach, "spawn proc_write proc_attach", "follow pty",
               "tty: proc_attach replays the terminal's output, then live"),
    CASE_NEEDS(tty_exit_codes, "spawn proc_wait proc_signal", "pty",
               "tty: exit codes, signals to the whole group, timeout"),
    CASE_NEEDS(tty_bad_input, "spawn proc_resize proc_wait proc_signal proc_list", "pty",
               "tty: bad sizes, resize of unknown, plain, finished; nothing left running"),
    CASE_NEEDS(connect_echo_and_half_close, "spawn connect proc_write proc_list", "follow connect",
               "connect: bytes both ways, eof half-closes, the peer's close as eof, exit 0"),
    CASE_NEEDS(connect_large_round_trip, "spawn connect proc_write", "follow connect",
               "connect: 4 MiB through an echo server, intact"),
    CASE_NEEDS(connect_kill_and_errors, "spawn connect proc_signal proc_wait", "follow connect",
               "connect: refused names the cause, bad ports, INT refused, KILL closes"),
    CASE_NEEDS(watch_changes, "watch proc_attach proc_signal", "follow watch",
               "watch: created, a new subdirectory's file, renamed, removed; KILL ends it"),
    CASE_NEEDS(watch_bad_input, "watch proc_write proc_signal proc_wait", "watch",
               "watch: a missing path, proc_write refused, KILL ends it"),
    CASE_NEEDS(tree_write_small, "tree_write", NULL,
               "tree_write: one message with eof; kinds, modes, mtimes, links, counts"),
    CASE_NEEDS(tree_write_chunked, "tree_write proc_write proc_wait", NULL,
               "tree_write: 3 MiB in writes sent at once, taken in offset order"),
    CASE_NEEDS(tree_write_merge, "tree_write", NULL,
               "tree_write: into an existing directory; a conflict moves nothing"),
    CASE_NEEDS(tree_write_hostile, "tree_write", NULL,
               "tree_write: escaping names, links, devices, pax lies, cut streams refused"),
    CASE_NEEDS(tree_write_cancel, "tree_write proc_write proc_wait proc_signal", NULL,
               "tree_write: KILL and a cut end leave nothing; a stale offset is refused"),
    CASE_NEEDS(tree_write_empty_path, "tree_write proc_signal", NULL,
               "tree_write: an empty path is not_found, not the working directory"),
    CASE_NEEDS(tree_read_roundtrip, "tree_write tree_read", "follow",
               "tree_read: the tree as a stream, in order, with exclude"),
    CASE_NEEDS(tree_read_errors, "tree_write tree_read", NULL, "tree_read: a missing path, a file"),
    CASE_NEEDS(tree_read_empty_path, "tree_read", NULL,
               "tree_read: an empty path is not_found, not the working directory"),
};

const size_t conf_case_count = sizeof conf_cases / sizeof conf_cases[0];
