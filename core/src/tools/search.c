/*
 * glob and grep. Each has one backend function, the only place to change when the
 * protocol's `glob` and `grep` ops land (call them when tools_has_op says so); until
 * then they exec find and grep in the sandbox, in argv form, `--` before user text.
 */
#include "tools_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* --- glob matching ----------------------------------------------------------------------- */

/* [...] at p (p[0] == '['): whether c matches; *next gets the text after ']'. */
static bool class_match(const char *p, char c, const char **next, bool *valid)
{
	const char *q = p + 1;
	bool neg = false, hit = false;
	if (*q == '!' || *q == '^') {
		neg = true;
		q++;
	}
	const char *start = q;
	while (*q && (*q != ']' || q == start)) {
		if (q[1] == '-' && q[2] && q[2] != ']') {
			if ((unsigned char)c >= (unsigned char)q[0] &&
			    (unsigned char)c <= (unsigned char)q[2])
				hit = true;
			q += 3;
		} else {
			if (*q == c)
				hit = true;
			q++;
		}
	}
	*valid = *q == ']';
	*next = *valid ? q + 1 : p + 1;
	return hit != neg;
}

static bool match_here(const char *p, const char *s)
{
	for (;;) {
		if (p[0] == '*' && p[1] == '*' && (p[2] == '/' || p[2] == '\0')) {
			if (p[2] == '\0')
				return true;
			/* "**" + "/": zero or more whole directories */
			if (match_here(p + 3, s))
				return true;
			for (const char *q = s; *q; q++)
				if (*q == '/' && match_here(p + 3, q + 1))
					return true;
			return false;
		}
		switch (*p) {
		case '\0': return *s == '\0';
		case '*':
			for (const char *q = s;; q++) {
				if (match_here(p + 1, q))
					return true;
				if (!*q || *q == '/')
					return false;
			}
		case '?':
			if (!*s || *s == '/')
				return false;
			p++, s++;
			break;
		case '[': {
			const char *next;
			bool valid;
			if (!*s || *s == '/')
				return false;
			bool m = class_match(p, *s, &next, &valid);
			if (!valid) {
				if (*s != '[')
					return false;
			} else if (!m) {
				return false;
			}
			p = next, s++;
			break;
		}
		case '\\':
			if (p[1])
				p++;
			/* fall through */
		default:
			if (*p != *s)
				return false;
			p++, s++;
		}
	}
}

/* Expands the first top-level {a,b,...} and matches each alternative. */
bool tools_glob_match(const char *pattern, const char *path)
{
	const char *open = NULL;
	int depth = 0;
	for (const char *q = pattern; *q; q++) {
		if (*q == '\\' && q[1]) {
			q++;
			continue;
		}
		if (*q == '{') {
			if (depth++ == 0)
				open = q;
		} else if (*q == '}' && depth > 0 && --depth == 0) {
			size_t pre = (size_t)(open - pattern), tail = strlen(q + 1);
			const char *alt = open + 1;
			int d = 0;
			for (const char *e = alt;; e++) {
				if (*e == '{')
					d++;
				else if (*e == '}' && d > 0)
					d--;
				else if ((*e == ',' && d == 0) || e == q) {
					size_t alen = (size_t)(e - alt);
					char *one = malloc(pre + alen + tail + 1);
					if (!one)
						return false;
					memcpy(one, pattern, pre);
					memcpy(one + pre, alt, alen);
					memcpy(one + pre + alen, q + 1, tail + 1);
					bool m = tools_glob_match(one, path);
					free(one);
					if (m)
						return true;
					alt = e + 1;
					if (e == q)
						break;
				}
			}
			return false;
		}
	}
	return match_here(pattern, path);
}

/* --- glob -------------------------------------------------------------------------------- */

typedef struct found {
	double mtime;
	const char *rel;
} found;

static int found_cmp(const void *a, const void *b)
{
	const found *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime < y->mtime ? 1 : -1;
	return strcmp(x->rel, y->rel);
}

/*
 * Files under `dir` matching `pattern`, newest first, as absolute paths one per line.
 * The place for the `glob` op.
 */
static bool glob_backend(asp_tools *t, const char *dir, const char *pattern, tresult *r)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	/* -printf '%T@ %P\0': mtime, then the path relative to dir; NUL-terminated records */
	const char *argv[] = {"find",  dir, "-name", ".git",    "-prune",
	                      "-o",    "(", "-type", "f",       "-o",
	                      "-type", "l", ")",     "-printf", "%T@ %P\\0"};
	asp_exec_result res;
	asp_error err;
	if (tools_exec_argv(t, argv, sizeof argv / sizeof argv[0], NULL, &res, a, &err) != ASP_OK) {
		asp_arena_free(a);
		return tools_fail_asp(r, &err, "searching", dir);
	}
	if (res.exit_code != 0 && res.stdout_data.len == 0) {
		tools_fail(r, "Error: searching %s failed: %.*s", dir, (int)res.stderr_data.len,
		           (const char *)res.stderr_data.data);
		asp_arena_free(a);
		return false;
	}
	const char *p = (const char *)res.stdout_data.data, *end = p + res.stdout_data.len;
	size_t n = 0, cap = 64;
	found *f = malloc(cap * sizeof *f);
	while (f && p < end) {
		const char *z = memchr(p, '\0', (size_t)(end - p));
		if (!z)
			break;
		const char *sp = memchr(p, ' ', (size_t)(z - p));
		if (sp && sp[1] && tools_glob_match(pattern, sp + 1)) {
			if (n == cap) {
				found *g = realloc(f, (cap *= 2) * sizeof *f);
				if (!g)
					break;
				f = g;
			}
			f[n].mtime = strtod(p, NULL);
			f[n].rel = sp + 1;
			n++;
		}
		p = z + 1;
	}
	if (!f) {
		asp_arena_free(a);
		return tools_fail(r, "Error: out of memory.");
	}
	qsort(f, n, sizeof *f, found_cmp);
	size_t shown = n < TOOLS_GLOB_MAX ? n : TOOLS_GLOB_MAX;
	for (size_t i = 0; i < shown; i++)
		tb_printf(&r->text, "%s%s%s%s", i ? "\n" : "", dir, strcmp(dir, "/") ? "/" : "",
		          f[i].rel);
	if (n == 0)
		tb_puts(&r->text, "No files found");
	else if (n > shown)
		tb_printf(&r->text,
		          "\n(Results are truncated: %zu of %zu files shown. Use a more "
		          "specific path or pattern.)",
		          shown, n);
	free(f);
	asp_arena_free(a);
	return true;
}

static bool is_dir(asp_tools *t, const char *abs, tresult *r)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = abs;
	p.follow = true;
	asp_stat_result res;
	asp_error err;
	bool ok = true;
	if (asp_stat(t->c, &p, &res, a, &err) != ASP_OK) {
		if (err.code == ASP_E_NOT_FOUND)
			ok = tools_fail(r, "Error: directory does not exist: %s.", abs);
		else
			ok = tools_fail_asp(r, &err, "searching", abs);
	} else if (strcmp(res.type, "dir")) {
		ok = tools_fail(r, "Error: %s is not a directory; give the directory to search in.",
		                abs);
	}
	asp_arena_free(a);
	return ok;
}

bool tool_glob(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	const char *pattern, *path;
	if (!arg_str(r, args, "pattern", true, &pattern) || !arg_str(r, args, "path", false, &path))
		return false;
	if (!*pattern)
		return tools_fail(r, "Error: pattern is empty.");
	char *dir = NULL;
	/* an absolute pattern: its leading directories without wildcards become the path */
	if (pattern[0] == '/') {
		size_t cut = 0;
		for (size_t i = 0; pattern[i] && !strchr("*?[{\\", pattern[i]); i++)
			if (pattern[i] == '/')
				cut = i;
		char *d = strndup(pattern, cut ? cut : 1);
		dir = d ? tools_abs(t, d) : NULL;
		free(d);
		pattern += cut + 1;
	} else {
		dir = tools_abs(t, path && *path ? path : ".");
	}
	if (!dir)
		return tools_fail(r, "Error: out of memory.");
	bool ok = is_dir(t, dir, r) && glob_backend(t, dir, pattern, r);
	free(dir);
	return ok;
}

/* --- grep -------------------------------------------------------------------------------- */

typedef enum grep_mode { MODE_FILES, MODE_CONTENT, MODE_COUNT } grep_mode;

typedef struct grep_opts {
	const char *pattern;
	const char *glob;
	grep_mode mode;
	bool icase, lineno, multiline;
	uint64_t before, after;
} grep_opts;

/* One line of output attributed to a file, for sorting by file. */
typedef struct gline {
	const char *path;
	size_t plen;
	char *text; /* malloc'd: the line as shown */
	size_t seq;
} gline;

static int gline_cmp(const void *a, const void *b)
{
	const gline *x = a, *y = b;
	size_t n = x->plen < y->plen ? x->plen : y->plen;
	int c = memcmp(x->path, y->path, n);
	if (c)
		return c;
	if (x->plen != y->plen)
		return x->plen < y->plen ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static asp_status run_grep(asp_tools *t, const char *abs, const grep_opts *o, bool pcre,
                           asp_exec_result *res, asp_arena *a, asp_error *err)
{
	const char *argv[64];
	size_t n = 0;
	char inc[16][512];
	char ctx_a[32], ctx_b[32];
	argv[n++] = "grep";
	argv[n++] = "-r";
	argv[n++] = "-I";
	argv[n++] = "-H";
	argv[n++] = "-Z";
	argv[n++] = "--exclude-dir=.git";
	argv[n++] = pcre ? "-P" : "-E";
	if (o->icase)
		argv[n++] = "-i";
	if (o->multiline)
		argv[n++] = "-z";
	if (o->mode == MODE_FILES)
		argv[n++] = "-l";
	else if (o->mode == MODE_COUNT)
		argv[n++] = "-c";
	else if (o->multiline)
		argv[n++] = "-o";
	else {
		if (o->lineno)
			argv[n++] = "-n";
		if (o->before) {
			snprintf(ctx_b, sizeof ctx_b, "-B%" PRIu64, o->before);
			argv[n++] = ctx_b;
		}
		if (o->after) {
			snprintf(ctx_a, sizeof ctx_a, "-A%" PRIu64, o->after);
			argv[n++] = ctx_a;
		}
	}
	/* a glob without '/' names files: --include per {a,b} alternative is grep's own filter */
	if (o->glob && !strchr(o->glob, '/')) {
		const char *g = o->glob, *open = strchr(g, '{'),
		           *close = open ? strchr(open, '}') : NULL;
		if (open && close) {
			const char *alt = open + 1;
			size_t k = 0;
			for (const char *e = alt; e <= close && k < 16; e++) {
				if (*e == ',' || e == close) {
					snprintf(inc[k], sizeof inc[k], "--include=%.*s%.*s%s",
					         (int)(open - g), g, (int)(e - alt), alt,
					         close + 1);
					argv[n++] = inc[k++];
					alt = e + 1;
				}
			}
		} else {
			snprintf(inc[0], sizeof inc[0], "--include=%s", g);
			argv[n++] = inc[0];
		}
	}
	char *pat = NULL;
	if (o->multiline && pcre) {
		size_t len = strlen(o->pattern);
		pat = asp_arena_alloc(a, len + 5);
		if (pat) {
			memcpy(pat, "(?s)", 4);
			memcpy(pat + 4, o->pattern, len + 1);
		}
	}
	argv[n++] = "--";
	argv[n++] = pat ? pat : o->pattern;
	argv[n++] = abs;
	return tools_exec_argv(t, argv, n, NULL, res, a, err);
}

/*
 * Matches of `o` under `abs` in Claude Code's formats. The place for the `grep` op.
 */
static bool grep_backend(asp_tools *t, const char *abs, const grep_opts *o, uint64_t head_limit,
                         tresult *r)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	asp_exec_result res;
	asp_error err;
	asp_status st = run_grep(t, abs, o, true, &res, a, &err);
	/*
	 * A grep without PCRE (built without it, busybox) says so in words of its own: after
	 * any failure try POSIX extended expressions, and keep the first message if that
	 * fails too (a bad pattern, a missing path).
	 */
	if (st == ASP_OK && res.exit_code == 2 && res.stdout_data.len == 0) {
		asp_exec_result ere;
		if (run_grep(t, abs, o, false, &ere, a, &err) == ASP_OK && ere.exit_code != 2)
			res = ere;
	}
	if (st != ASP_OK) {
		asp_arena_free(a);
		if (err.code == ASP_E_NOT_FOUND)
			return tools_fail(r, "Error: grep is not installed in the sandbox.");
		return tools_fail_asp(r, &err, "searching", abs);
	}
	if (res.exit_code == 2 && res.stdout_data.len == 0) {
		size_t el = res.stderr_data.len;
		while (el && res.stderr_data.data[el - 1] == '\n')
			el--;
		tools_fail(r, "Error: the search failed: %.*s", (int)el,
		           (const char *)res.stderr_data.data);
		asp_arena_free(a);
		return false;
	}
	/* records: PATH \0 REST \n (with -z: PATH \0 REST \0); "--" alone separates context groups
	 */
	const char *p = (const char *)res.stdout_data.data, *end = p + res.stdout_data.len;
	size_t n = 0, cap = 64, seq = 0;
	gline *g = malloc(cap * sizeof *g);
	const char *last_path = NULL;
	size_t last_plen = 0;
	bool pending_sep = false;
	char rec_end = o->multiline ? '\0' : '\n';
	while (g && p < end) {
		const char *z = memchr(p, '\0', (size_t)(end - p));
		const char *nl = memchr(p, rec_end, (size_t)(end - p));
		if (!o->multiline && o->mode != MODE_FILES && nl && (!z || nl < z)) {
			/* no NUL before the newline: a "--" group separator */
			pending_sep = true;
			p = nl + 1;
			continue;
		}
		if (!z)
			break;
		const char *path = p;
		size_t plen = (size_t)(z - p);
		const char *rest = z + 1, *rend;
		if (o->mode == MODE_FILES) {
			/* -l -Z: the name ends with its NUL */
			rend = rest;
			p = rest;
		} else {
			rend = memchr(rest, rec_end, (size_t)(end - rest));
			if (!rend)
				rend = end;
			p = rend < end ? rend + 1 : end;
		}
		if (o->glob && strchr(o->glob, '/')) {
			size_t al = strlen(abs);
			const char *rel =
			    plen > al && !memcmp(path, abs, al) ? path + al + 1 : path;
			char *relz = strndup(rel, (size_t)(path + plen - rel));
			bool m = relz && tools_glob_match(o->glob, relz);
			free(relz);
			if (!m)
				continue;
		}
		tbuf line = {0};
		if (o->mode == MODE_COUNT && rend - rest == 1 && rest[0] == '0')
			continue;
		bool same = last_path && last_plen == plen && !memcmp(last_path, path, plen);
		if (pending_sep && same) {
			if (n == cap) {
				gline *h = realloc(g, (cap *= 2) * sizeof *g);
				if (!h)
					break;
				g = h;
			}
			g[n++] = (gline){path, plen, strdup("--"), seq++};
		}
		pending_sep = false;
		last_path = path;
		last_plen = plen;
		tb_add(&line, path, plen);
		if (o->mode != MODE_FILES) {
			/* content with -n: "N:text" or "N-text" (context); the separator after the
			 * path follows */
			char sepc = ':';
			if (o->mode == MODE_CONTENT && o->lineno && !o->multiline) {
				const char *q = rest;
				while (q < rend && *q >= '0' && *q <= '9')
					q++;
				if (q < rend && *q == '-')
					sepc = '-';
			}
			tb_add(&line, &sepc, 1);
			tb_add(&line, rest, (size_t)(rend - rest));
		}
		if (n == cap) {
			gline *h = realloc(g, (cap *= 2) * sizeof *g);
			if (!h) {
				tb_free(&line);
				break;
			}
			g = h;
		}
		g[n++] = (gline){path, plen, tb_take(&line), seq++};
	}
	if (!g) {
		asp_arena_free(a);
		return tools_fail(r, "Error: out of memory.");
	}
	/* grep walks in directory order: sort by file (stable within one) for a steady answer */
	qsort(g, n, sizeof *g, gline_cmp);
	size_t shown = 0;
	const char *prev = NULL;
	size_t prevlen = 0;
	bool ctx = o->mode == MODE_CONTENT && (o->before || o->after);
	for (size_t i = 0; i < n; i++) {
		if (head_limit && shown >= head_limit)
			break;
		if (ctx && prev && (prevlen != g[i].plen || memcmp(prev, g[i].path, prevlen)))
			tb_puts(&r->text, "\n--");
		tb_printf(&r->text, "%s%s", r->text.len ? "\n" : "", g[i].text ? g[i].text : "");
		prev = g[i].path;
		prevlen = g[i].plen;
		shown++;
	}
	if (n == 0)
		tb_puts(&r->text, o->mode == MODE_FILES ? "No files found" : "No matches found");
	else if (head_limit && n > shown)
		tb_printf(&r->text, "\n(%zu more not shown: head_limit is %" PRIu64 ")", n - shown,
		          head_limit);
	if (res.stdout_bytes > res.stdout_data.len)
		tb_puts(&r->text, "\n(The output was cut: narrow the pattern, path or glob.)");
	for (size_t i = 0; i < n; i++)
		free(g[i].text);
	free(g);
	asp_arena_free(a);
	return true;
}

bool tool_grep(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	grep_opts o = {0};
	const char *path, *mode;
	uint64_t c, head_limit;
	if (!arg_str(r, args, "pattern", true, &o.pattern) ||
	    !arg_str(r, args, "path", false, &path) || !arg_str(r, args, "glob", false, &o.glob) ||
	    !arg_str(r, args, "output_mode", false, &mode) ||
	    !arg_bool(r, args, "-i", false, &o.icase) ||
	    !arg_bool(r, args, "-n", true, &o.lineno) || !arg_uint(r, args, "-A", 0, &o.after) ||
	    !arg_uint(r, args, "-B", 0, &o.before) || !arg_uint(r, args, "-C", 0, &c) ||
	    !arg_uint(r, args, "head_limit", 0, &head_limit) ||
	    !arg_bool(r, args, "multiline", false, &o.multiline))
		return false;
	if (!mode || !strcmp(mode, "files_with_matches"))
		o.mode = MODE_FILES;
	else if (!strcmp(mode, "content"))
		o.mode = MODE_CONTENT;
	else if (!strcmp(mode, "count"))
		o.mode = MODE_COUNT;
	else
		return tools_fail(
		    r,
		    "Error: output_mode must be \"files_with_matches\", \"content\" or "
		    "\"count\", not \"%s\".",
		    mode);
	if (c) {
		if (!o.after)
			o.after = c;
		if (!o.before)
			o.before = c;
	}
	if (o.glob && !*o.glob)
		o.glob = NULL;
	char *abs = tools_abs(t, path && *path ? path : ".");
	if (!abs)
		return tools_fail(r, "Error: out of memory.");
	bool ok = grep_backend(t, abs, &o, head_limit, r);
	free(abs);
	return ok;
}
