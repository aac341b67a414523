/*
 * glob and grep. When the responder's hello lists the `glob` / `grep` op, one call does
 * the search in the sandbox; otherwise (native SSH: a plain POSIX server) they exec find
 * and grep there, in argv form, `--` before user text. Both paths give the same text.
 */
#include "shared.h"

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

/* The list for the model: the newest TOOLS_GLOB_MAX of n (f sorted), `more` when n is a floor. */
static void glob_emit(tresult *r, const char *dir, const found *f, size_t n, bool more)
{
	size_t shown = n < TOOLS_GLOB_MAX ? n : TOOLS_GLOB_MAX;
	for (size_t i = 0; i < shown; i++)
		tb_printf(&r->text, "%s%s%s%s", i ? "\n" : "", dir, strcmp(dir, "/") ? "/" : "",
		          f[i].rel);
	if (n == 0 && !more)
		tb_puts(&r->text, "No files found");
	else if (n > shown || more)
		tb_printf(&r->text,
		          "%s(Results are truncated: %zu of %s%zu files shown. Use a more "
		          "specific path or pattern.)",
		          shown ? "\n" : "", shown, more ? "more than " : "", n);
}

/*
 * The `glob` op: one round trip. Its matching is the same syntax but a pattern without
 * '/' there matches names at any depth, and hidden names need `hidden`: so it is asked
 * for a superset (hidden on, escapes loosened to `?`) that tools_glob_match then narrows
 * to exactly what the find fallback gives. false with *done false: no op after all.
 */
static bool glob_op(asp_tools *t, const char *dir, const char *pattern, tresult *r, bool *done)
{
	*done = true;
	asp_arena *a = asp_arena_new();
	size_t plen = strlen(pattern);
	char *loose = a ? asp_arena_alloc(a, plen + 1) : NULL;
	if (!loose) {
		asp_arena_free(a);
		return tools_fail(r, "Error: out of memory.");
	}
	size_t k = 0;
	for (size_t i = 0; i < plen; i++) {
		if (pattern[i] == '\\' && pattern[i + 1]) {
			i++;
			loose[k++] = pattern[i] == '/' ? '/' : '?';
		} else {
			loose[k++] = pattern[i];
		}
	}
	loose[k] = '\0';
	asp_glob_params p;
	asp_glob_params_init(&p);
	p.path = dir;
	p.pattern = loose;
	p.hidden = true; /* find lists dot files too */
	p.max_results =
	    UINT32_MAX; /* all of them (the message size bounds it): the count is shown */
	asp_glob_result res;
	asp_error err;
	if (asp_glob(t->c, &p, &res, a, &err) != ASP_OK) {
		asp_arena_free(a);
		if (err.code == ASP_E_UNSUPPORTED) {
			*done = false;
			return false;
		}
		if (err.code == ASP_E_NOT_FOUND)
			return tools_fail(r, "Error: directory does not exist: %s.", dir);
		if (err.code == ASP_E_NOT_A_DIRECTORY)
			return tools_fail(
			    r, "Error: %s is not a directory; give the directory to search in.",
			    dir);
		return tools_fail_asp(r, &err, "searching", dir);
	}
	/* paths come newest first; keep that order, narrowed to the tools' own matcher */
	size_t dlen = strlen(dir), n = 0;
	found *f = malloc((res.paths.count ? res.paths.count : 1) * sizeof *f);
	if (!f) {
		asp_arena_free(a);
		return tools_fail(r, "Error: out of memory.");
	}
	for (size_t i = 0; i < res.paths.count; i++) {
		const char *q = res.paths.items[i];
		if (strncmp(q, dir, dlen))
			continue;
		q += dlen;
		if (*q == '/')
			q++;
		if (*q && tools_glob_match(pattern, q))
			f[n++] = (found){0, q};
	}
	glob_emit(r, dir, f, n, res.truncated);
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

/* Files under `dir` matching `pattern` from `find` in the sandbox, matched here. */
static bool glob_exec(asp_tools *t, const char *dir, const char *pattern, tresult *r)
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
	/*
	 * find alone, one exec: the path is asked about only when find failed or printed
	 * nothing but (perhaps) the path itself, which is then not a directory (the start of
	 * a directory is never -type f or l): the words of the answer are the stat's.
	 */
	bool self = false, any = false;
	for (const char *q = (const char *)res.stdout_data.data, *qe = q + res.stdout_data.len;
	     q < qe;) {
		const char *z = memchr(q, '\0', (size_t)(qe - q));
		const char *sp = z ? memchr(q, ' ', (size_t)(z - q)) : NULL;
		if (!z)
			break;
		any = true;
		self = self || (sp && sp + 1 == z);
		q = z + 1;
	}
	if ((res.exit_code != 0 && res.stdout_data.len == 0) || self || !any) {
		if (!is_dir(t, dir, r)) {
			asp_arena_free(a);
			return false;
		}
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
	glob_emit(r, dir, f, n, false);
	free(f);
	asp_arena_free(a);
	return true;
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
	bool ok = false, done = false;
	if (tools_has_op(t, "glob"))
		ok = glob_op(t, dir, pattern, r, &done);
	if (!done)
		ok = glob_exec(t, dir, pattern, r);
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
	/* ERE has no inline flags; the leading (?i) models write is -i */
	const char *pattern = o->pattern;
	bool icase = o->icase;
	if (!pcre && !strncmp(pattern, "(?i)", 4)) {
		pattern += 4;
		icase = true;
	}
	if (icase)
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
	argv[n++] = pat ? pat : pattern;
	argv[n++] = abs;
	return tools_exec_argv(t, argv, n, NULL, res, a, err);
}

/* The lines of a grep's answer, before sorting by file: from the op or from grep(1). */
typedef struct glines {
	gline *v;
	size_t n, cap;
	bool oom;
} glines;

/* Adds a line (text malloc'd, taken over; NULL is out of memory). */
static void gl_push(glines *gs, const char *path, size_t plen, char *text)
{
	if (!text)
		gs->oom = true;
	if (gs->oom) {
		free(text);
		return;
	}
	if (gs->n == gs->cap) {
		size_t nc = gs->cap ? 2 * gs->cap : 64;
		gline *v = realloc(gs->v, nc * sizeof *v);
		if (!v) {
			free(text);
			gs->oom = true;
			return;
		}
		gs->v = v;
		gs->cap = nc;
	}
	gs->v[gs->n] = (gline){path, plen, text, gs->n};
	gs->n++;
}

/* "PATH" SEP "REST" as one malloc'd line (sep 0: the path alone). */
static char *gl_line(const char *path, size_t plen, char sep, const char *rest, size_t rlen)
{
	tbuf b = {0};
	tb_add(&b, path, plen);
	if (sep) {
		tb_add(&b, &sep, 1);
		tb_add(&b, rest, rlen);
	}
	return tb_take(&b);
}

static void gl_free(glines *gs)
{
	for (size_t i = 0; i < gs->n; i++)
		free(gs->v[i].text);
	free(gs->v);
	*gs = (glines){0};
}

/* Sorted by file, cut at head_limit, with the notes: what the model sees. */
static bool grep_emit(tresult *r, glines *gs, const grep_opts *o, uint64_t head_limit, bool cut)
{
	if (gs->oom)
		return tools_fail(r, "Error: out of memory.");
	gline *g = gs->v;
	size_t n = gs->n;
	/* grep walks in directory order: sort by file (stable within one) for a steady answer */
	if (n > 1)
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
	if (cut)
		tb_puts(&r->text, "\n(The output was cut: narrow the pattern, path or glob.)");
	return true;
}

/* Lines in a text: 1 + its newlines. */
static size_t count_lines(const char *s)
{
	size_t n = 1;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/*
 * One file's matches (m[0..n), by line) as grep(1) prints them with context: each line
 * once, a line some match spans with ':' and a context line with '-' after its number,
 * and a "--" line between runs that do not touch.
 */
static void grep_file_lines(glines *gs, const asp_grep_match *m, size_t n, const grep_opts *o)
{
	const char *path = m[0].path;
	size_t plen = strlen(path);
	uint64_t last = 0; /* the last line shown; 0: none yet */
	size_t j = 0;      /* the first match whose span may still hold a line to come */
	bool ctx = o->before || o->after;
	for (size_t i = 0; i < n && !gs->oom; i++) {
		/* before lines past the first line (a responder's slip) are dropped */
		uint64_t line = m[i].line ? m[i].line : 1;
		size_t skip = m[i].before.count >= line ? m[i].before.count - (line - 1) : 0;
		size_t nb = m[i].before.count - skip, nt = count_lines(m[i].text);
		uint64_t first = line - nb;
		size_t total = nb + nt + m[i].after.count;
		const char *t = m[i].text;
		for (size_t k = 0; k < total && !gs->oom; k++) {
			uint64_t ln = first + k;
			const char *s;
			size_t len;
			if (k < nb) {
				s = m[i].before.items[skip + k];
				len = strlen(s);
			} else if (k < nb + nt) {
				const char *e = strchr(t, '\n');
				s = t;
				len = e ? (size_t)(e - t) : strlen(t);
				t = e ? e + 1 : t + len;
			} else {
				s = m[i].after.items[k - nb - nt];
				len = strlen(s);
			}
			if (ln <= last)
				continue;
			/* ':' when some match's span holds this line */
			while (j < n && m[j].line + count_lines(m[j].text) - 1 < ln)
				j++;
			bool hit = j < n && m[j].line <= ln;
			if (ctx && last && ln > last + 1)
				gl_push(gs, path, plen, strdup("--"));
			char num[32];
			tbuf b = {0};
			tb_add(&b, path, plen);
			tb_add(&b, hit ? ":" : "-", 1);
			if (o->lineno) {
				snprintf(num, sizeof num, "%" PRIu64 "%c", ln, hit ? ':' : '-');
				tb_puts(&b, num);
			}
			tb_add(&b, s, len);
			gl_push(gs, path, plen, tb_take(&b));
			last = ln;
		}
	}
}

/*
 * The regex error of the op as grep(1) words it ("grep: missing closing parenthesis"): the
 * responder's "grep: regex at offset N: ... (PCRE2 syntax)" less what grep does not say.
 */
static bool grep_fail_regex(tresult *r, const char *msg)
{
	const char *s = msg;
	if (!strncmp(s, "grep: ", 6))
		s += 6;
	if (!strncmp(s, "regex", 5)) {
		const char *c = strstr(s, ": ");
		if (c)
			s = c + 2;
	}
	size_t len = strlen(s);
	const char *paren = strrchr(s, '(');
	if (paren && paren > s && paren[-1] == ' ' && strstr(paren, " syntax)") &&
	    paren[strlen(paren) - 1] == ')')
		len = (size_t)(paren - 1 - s);
	/* the model wrote Perl (the tool says so): tell it what this responder lacks */
	const char *hint = strstr(msg, "(POSIX extended syntax)")
	                       ? " (this sandbox's grep speaks POSIX extended regular expressions, "
	                         "not Perl's: no lookaround, no inline flags but a leading (?i), "
	                         "no possessive quantifiers)"
	                       : "";
	return tools_fail(r, "Error: the search failed: grep: %.*s%s", (int)len, s, hint);
}

/* Up to ten of the n paths after `lead`, then "and N more", then `tail`. */
static void grep_note(tresult *r, const asp_strv *v, bool has, const char *lead, const char *tail)
{
	enum { NAMED = 10 };
	size_t n = has ? v->count : 0;
	if (!n)
		return;
	tb_printf(&r->text, "\n(%s", lead);
	for (size_t i = 0; i < n && i < NAMED; i++)
		tb_printf(&r->text, "%s%s", i ? ", " : "", v->items[i]);
	if (n > NAMED)
		tb_printf(&r->text, " and %zu more", n - NAMED);
	tb_puts(&r->text, tail);
}

/*
 * The files the op could not search, after the answer: without this the model would
 * take "No matches found" as true of them.
 */
static void grep_note_unsearched(tresult *r, const asp_grep_result *res)
{
	grep_note(r, &res->too_large, res->has_too_large,
	          "Not searched, over 64 MiB: ", ". Search them with grep through the bash tool.)");
	grep_note(r, &res->undecided, res->has_undecided,
	          "Not decided, the pattern hit the regex engine's backtracking limit on a line "
	          "of: ",
	          ". Simplify the pattern (fewer nested quantifiers) to search them.)");
}

/*
 * The `grep` op: the search runs in the sandbox in one round trip, and its answer is laid
 * out as grep(1)'s would be. false with *done false: no op after all.
 */
static bool grep_op(asp_tools *t, const char *abs, const grep_opts *o, uint64_t head_limit,
                    tresult *r, bool *done)
{
	*done = true;
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	asp_grep_params p;
	asp_grep_params_init(&p);
	p.path = abs;
	p.regex = o->pattern;
	p.glob = o->glob;
	p.ignore_case = o->icase;
	if (t->grep_ere && !strncmp(p.regex, "(?i)", 4)) {
		/* ERE has no inline flags; the leading (?i) models write is ignore_case */
		p.regex += 4;
		p.ignore_case = true;
	}
	p.multiline = o->multiline;
	p.mode = o->mode == MODE_FILES ? "files" : o->mode == MODE_CONTENT ? "content" : "count";
	if (o->mode == MODE_CONTENT) {
		p.before = o->before;
		p.after = o->after;
	}
	p.max_matches = UINT32_MAX; /* all (the message size bounds it): head_limit counts them */
	asp_grep_result res;
	asp_error err;
	if (asp_grep(t->c, &p, &res, a, &err) != ASP_OK) {
		asp_arena_free(a);
		switch (err.code) {
		case ASP_E_UNSUPPORTED: *done = false; return false;
		case ASP_E_INVALID_ARGUMENT: return grep_fail_regex(r, err.message);
		case ASP_E_NOT_FOUND:
			return tools_fail(r,
			                  "Error: the search failed: grep: %s: No such file or "
			                  "directory",
			                  abs);
		default: return tools_fail_asp(r, &err, "searching", abs);
		}
	}
	glines gs = {0};
	bool slash_glob = o->glob && strchr(o->glob, '/');
	size_t alen = strlen(abs);
	if (o->mode == MODE_FILES) {
		for (size_t i = 0; i < res.files.count; i++)
			gl_push(&gs, res.files.items[i], strlen(res.files.items[i]),
			        strdup(res.files.items[i]));
	} else if (o->mode == MODE_COUNT) {
		for (size_t i = 0; i < res.counts.count; i++) {
			const asp_grep_count *c = &res.counts.items[i];
			char num[32];
			int k = snprintf(num, sizeof num, "%" PRIu64, c->count);
			gl_push(&gs, c->path, strlen(c->path),
			        gl_line(c->path, strlen(c->path), ':', num, (size_t)k));
		}
	} else {
		for (size_t i = 0; i < res.matches.count;) {
			size_t j = i + 1;
			while (j < res.matches.count &&
			       !strcmp(res.matches.items[j].path, res.matches.items[i].path))
				j++;
			grep_file_lines(&gs, res.matches.items + i, j - i, o);
			i = j;
		}
	}
	/* a glob with '/' is matched here too, as for grep(1), so both give the same files */
	if (slash_glob) {
		size_t k = 0;
		for (size_t i = 0; i < gs.n; i++) {
			const char *path = gs.v[i].path;
			const char *rel = strlen(path) > alen && !strncmp(path, abs, alen)
			                      ? path + alen + (path[alen] == '/')
			                      : path;
			if (tools_glob_match(o->glob, rel))
				gs.v[k++] = gs.v[i];
			else
				free(gs.v[i].text);
		}
		gs.n = k;
	}
	bool ok = grep_emit(r, &gs, o, head_limit, res.truncated);
	if (ok)
		grep_note_unsearched(r, &res);
	gl_free(&gs);
	asp_arena_free(a);
	return ok;
}

/* Matches of `o` under `abs` from grep(1) in the sandbox, in Claude Code's formats. */
static bool grep_exec(asp_tools *t, const char *abs, const grep_opts *o, uint64_t head_limit,
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
	glines gs = {0};
	const char *last_path = NULL;
	size_t last_plen = 0;
	bool pending_sep = false;
	char rec_end = o->multiline ? '\0' : '\n';
	while (!gs.oom && p < end) {
		const char *z = memchr(p, '\0', (size_t)(end - p));
		const char *nl = memchr(p, rec_end, (size_t)(end - p));
		if (!o->multiline && o->mode != MODE_FILES && nl && (!z || nl < z) && nl - p == 2 &&
		    p[0] == '-' && p[1] == '-') {
			/* a "--" group separator; anything else before a NUL is a path, newlines
			 * included (paths are absolute, so none is "--") */
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
		if (o->mode == MODE_COUNT && rend - rest == 1 && rest[0] == '0')
			continue;
		bool same = last_path && last_plen == plen && !memcmp(last_path, path, plen);
		if (pending_sep && same)
			gl_push(&gs, path, plen, strdup("--"));
		pending_sep = false;
		last_path = path;
		last_plen = plen;
		char sepc = 0;
		if (o->mode != MODE_FILES) {
			/* content with -n: "N:text" or "N-text" (context); the separator after the
			 * path follows */
			sepc = ':';
			if (o->mode == MODE_CONTENT && o->lineno && !o->multiline) {
				const char *q = rest;
				while (q < rend && *q >= '0' && *q <= '9')
					q++;
				if (q < rend && *q == '-')
					sepc = '-';
			}
		}
		gl_push(&gs, path, plen, gl_line(path, plen, sepc, rest, (size_t)(rend - rest)));
	}
	bool ok = grep_emit(r, &gs, o, head_limit, res.stdout_bytes > res.stdout_data.len);
	gl_free(&gs);
	asp_arena_free(a);
	return ok;
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
	bool ok = false, done = false;
	if (tools_has_op(t, "grep"))
		ok = grep_op(t, abs, &o, head_limit, r, &done);
	if (!done)
		ok = grep_exec(t, abs, &o, head_limit, r);
	free(abs);
	return ok;
}
