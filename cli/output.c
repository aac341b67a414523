/* Error lines, exit codes and binary-safe I/O on the CLI's own descriptors. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What to do, for codes whose message (often a bare strerror from the sandbox) cannot say. */
static const char *hint(asp_status code)
{
	switch (code) {
	case ASP_E_TRANSPORT_ERROR:
		return "check that the sandbox is up and the config's transport reaches it; "
		       "asp hello tests it";
	case ASP_E_UNAUTHORIZED: return "check the credentials the config names";
	case ASP_E_PROTOCOL_ERROR:
		return "the other end does not speak ASP; check the config's command or URL";
	case ASP_E_INTERNAL: return "this is a bug in ASP; please report it";
	default: return NULL;
	}
}

/* Writes `s` on one line: a newline inside a message would break line-based callers. */
static void put_line_part(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
}

/*
 * Messages from the sandbox often start with the op and path ("read /w/x: ..."), which our
 * own prefix already says; drop the repeat so the line reads "asp: read /w/x: CODE: why".
 */
static const char *without_repeat(const char *msg, const char *what, const char *path)
{
	size_t pl = path ? strlen(path) : 0;
	if (pl == 0 || !strstr(what, path))
		return msg;
	if (strncmp(msg, path, pl) == 0 && strncmp(msg + pl, ": ", 2) == 0 && msg[pl + 2])
		return msg + pl + 2;
	const char *sp = strchr(msg, ' ');
	if (sp && strncmp(sp + 1, path, pl) == 0 && strncmp(sp + 1 + pl, ": ", 2) == 0 &&
	    sp[pl + 3])
		return sp + 1 + pl + 2;
	return msg;
}

/*
 * A message that starts with a process op's name ("proc_signal: no process 9") names the
 * protocol's call; the prefix "asp: kill 9 TERM:" already says what the command did.
 */
static const char *without_op_name(const char *msg)
{
	static const char *const ops[] = {
	    "proc_signal: ", "proc_attach: ", "proc_wait: ", "proc_write: ", "proc_list: "};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		size_t n = strlen(ops[i]);
		if (strncmp(msg, ops[i], n) == 0 && msg[n])
			return msg + n;
	}
	return msg;
}

static void report(cli *c, asp_status code, const char *message, const char *what)
{
	const char *h = hint(code);
	fflush(stdout);
	fputs("asp: ", stderr);
	put_line_part(stderr, what);
	fprintf(stderr, ": %s: ", asp_strerror(code));
	put_line_part(stderr, message);
	/* A message that already says what to check or set, or asks, needs no second opinion. */
	if (h && !strstr(message, "check") && !strstr(message, "try ") && !strchr(message, '?') &&
	    !strstr(message, " set ") && !strstr(message, " Set "))
		fprintf(stderr, " (%s)", h);
	fputc('\n', stderr);
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "error");
		jw_obj_begin(&w);
		jw_key(&w, "code");
		jw_str(&w, asp_strerror(code));
		jw_key(&w, "message");
		jw_str(&w, message);
		jw_key(&w, "what");
		jw_str(&w, what);
		jw_obj_end(&w);
		jw_obj_end(&w);
		jw_end(&w);
		fflush(stdout);
	}
}

/*
 * Hints from the sandbox name the protocol's fields ("'mkdirs' creates it"); on the
 * command line the words are the flags. The SDKs keep the field names.
 */
static const struct {
	const char *field, *cli;
} cli_words[] = {
    {"'mkdirs' creates it", "asp write --mkdirs creates it"},
    {"'parents' creates it", "asp mkdir -p creates it"},
    {"'recursive' removes", "asp rm -r removes"},
    {"'overwrite' is false", "-n forbids replacing it"},
    {"see proc_list", "see asp ps"},
};

/* `msg` with every field word replaced by the CLI's, into `out`. */
static const char *in_cli_words(const char *msg, char *out, size_t cap)
{
	size_t n = 0;
	const char *p = msg;
	while (*p && n + 1 < cap) {
		size_t i;
		for (i = 0; i < sizeof cli_words / sizeof cli_words[0]; i++) {
			size_t fl = strlen(cli_words[i].field);
			if (strncmp(p, cli_words[i].field, fl) == 0)
				break;
		}
		if (i < sizeof cli_words / sizeof cli_words[0]) {
			n += (size_t)snprintf(out + n, cap - n, "%s", cli_words[i].cli);
			if (n >= cap)
				n = cap - 1;
			p += strlen(cli_words[i].field);
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = '\0';
	return out;
}

int cli_fail(cli *c, const asp_error *err, const char *what, ...)
{
	char buf[2048], words[ASP_ERROR_MESSAGE_MAX + 256], cwd[4096],
	    full[sizeof cwd + ASP_ERROR_PATH_MAX + 2], withpath[sizeof words + sizeof full + 4];
	va_list ap;
	va_start(ap, what);
	vsnprintf(buf, sizeof buf, what, ap);
	va_end(ap);
	asp_status code = err->code == ASP_OK ? ASP_E_INTERNAL : err->code;
	const char *msg = err->message[0] ? without_repeat(err->message, buf, err->path) : "failed";
	msg = without_op_name(msg);
	msg = in_cli_words(msg, words, sizeof words);
	/* Every file error names the full path, even when the sandbox's message left it out;
	 * a relative one is joined to the directory the sandbox resolved it against. */
	const char *path = err->path;
	if (c->sandbox_paths && path[0] && path[0] != '/' && cli_sandbox_cwd(c, cwd, sizeof cwd)) {
		size_t n = strlen(cwd);
		snprintf(full, sizeof full, "%s%s%s", cwd, n && cwd[n - 1] == '/' ? "" : "/", path);
		path = full;
	}
	if (path[0] && !strstr(msg, path) && !strstr(buf, path)) {
		snprintf(withpath, sizeof withpath, "%s: %s", path, msg);
		msg = withpath;
	}
	report(c, code, msg, buf);
	return c->fail_code;
}

int cli_usage(cli *c, const char *fmt, ...)
{
	char msg[1024], full[1200], what[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	bool top = strcmp(c->cmd, "asp") == 0;
	snprintf(what, sizeof what, "%s", top ? "usage" : c->cmd);
	/* A message ending in its own "(...)" takes the pointer inside it: one bracket. */
	size_t n = strlen(msg);
	bool bracketed = n > 0 && msg[n - 1] == ')';
	if (bracketed)
		msg[n - 1] = '\0';
	snprintf(full, sizeof full, "%s%s%s%s --help)", msg, bracketed ? "; see asp" : " (see asp",
	         top ? "" : " ", top ? "" : c->cmd);
	report(c, ASP_E_INVALID_ARGUMENT, full, what);
	return c->fail_code;
}

int cli_fail_errno(cli *c, int errnum, const char *what, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, what);
	vsnprintf(buf, sizeof buf, what, ap);
	va_end(ap);
	report(c, asp_status_from_errno(errnum), strerror(errnum), buf);
	return c->fail_code;
}

void cli_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fflush(stdout);
	fputs("asp: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int cli_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len > 0) {
		/* Linux moves at most ~2 GiB per write; ask for less to keep every call valid. */
		size_t n = len > (1u << 30) ? (1u << 30) : len;
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int cli_read_all(int fd, uint8_t **out, size_t *len)
{
	size_t cap = 64 * 1024, n = 0;
	uint8_t *buf = malloc(cap);
	if (!buf)
		return -1;
	for (;;) {
		if (n == cap) {
			uint8_t *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				errno = ENOMEM;
				return -1;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			free(buf);
			errno = e;
			return -1;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*out = buf;
	*len = n;
	return 0;
}

int cli_finish(cli *c, int code)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		int e = errno ? errno : EIO;
		clearerr(stdout);
		bool json = c->json;
		c->json = false; /* stdout is what failed */
		cli_fail_errno(c, e, "%s: write stdout", c->cmd);
		c->json = json;
		return c->fail_code;
	}
	return code;
}
