/*
 * asp bind codex: $CODEX_HOME/environments.toml (default ~/.codex) gets an environment
 * "asp" whose program is `asp --config CONFIG exec-server`, made the default, with the
 * local environment left out (docs/harnesses.md, "Codex"). The file is edited as text:
 * the [[environments]] block whose id is "asp" is replaced (or appended), the top-level
 * `default` and `include_local` lines are set (or added before the first table), and
 * every other byte stays as it was.
 */
#include "bind.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable text; out of memory leaves `oom` set. */
typedef struct text {
	char *p;
	size_t len, cap;
	bool oom;
} text;

static void add(text *t, const char *s, size_t n)
{
	if (t->oom)
		return;
	if (t->len + n + 1 > t->cap) {
		size_t cap = (t->len + n + 1) * 2;
		char *p = realloc(t->p, cap);
		if (!p) {
			t->oom = true;
			return;
		}
		t->p = p;
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = '\0';
}

static void puts_t(text *t, const char *s)
{
	add(t, s, strlen(s));
}

/* The line's first character that is not a space or tab. */
static const char *skip_ws(const char *s, const char *end)
{
	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	return s;
}

/* Whether the line [s, end) assigns the bare key `key` ("key =" or "key="). */
static bool assigns(const char *s, const char *end, const char *key)
{
	s = skip_ws(s, end);
	size_t n = strlen(key);
	if ((size_t)(end - s) < n || strncmp(s, key, n) != 0)
		return false;
	s = skip_ws(s + n, end);
	return s < end && *s == '=';
}

/* Whether the line is a table header: "[x]" or "[[x]]". */
static bool header(const char *s, const char *end)
{
	s = skip_ws(s, end);
	return s < end && *s == '[';
}

static bool environments_header(const char *s, const char *end)
{
	s = skip_ws(s, end);
	if (end - s < 2 || strncmp(s, "[[", 2) != 0)
		return false;
	s = skip_ws(s + 2, end);
	if ((size_t)(end - s) < 12 || strncmp(s, "environments", 12) != 0)
		return false;
	s = skip_ws(s + 12, end);
	return end - s >= 2 && strncmp(s, "]]", 2) == 0;
}

/* Whether the line sets id = "asp" (or 'asp'). */
static bool id_asp(const char *s, const char *end)
{
	if (!assigns(s, end, "id"))
		return false;
	s = skip_ws(memchr(s, '=', (size_t)(end - s)) + 1, end);
	return (end - s >= 5 && (!strncmp(s, "\"asp\"", 5) || !strncmp(s, "'asp'", 5)));
}

static bool idle(const char *s, const char *end);

/* Whether the assignment's value is one of `vals` (then the line is kept as written). */
static bool value_is(const char *s, const char *end, const char *const *vals)
{
	s = skip_ws(memchr(s, '=', (size_t)(end - s)) + 1, end);
	for (; *vals; vals++) {
		size_t n = strlen(*vals);
		if ((size_t)(end - s) >= n && !strncmp(s, *vals, n) && idle(s + n, end))
			return true;
	}
	return false;
}

/* Only blank or a comment. */
static bool idle(const char *s, const char *end)
{
	s = skip_ws(s, end);
	return s == end || *s == '#' || *s == '\r';
}

typedef struct line {
	const char *s, *end; /* end: before the newline */
	const char *next;    /* after it */
} line;

static size_t split(const char *t, line **out)
{
	size_t n = 0, cap = 64;
	line *v = malloc(cap * sizeof *v);
	while (v && *t) {
		if (n == cap) {
			line *g = realloc(v, (cap *= 2) * sizeof *v);
			if (!g) {
				free(v);
				return (*out = NULL), 0;
			}
			v = g;
		}
		const char *nl = strchr(t, '\n');
		v[n].s = t;
		v[n].end = nl ? nl : t + strlen(t);
		v[n].next = nl ? nl + 1 : v[n].end;
		n++;
		t = v[n - 1].next;
	}
	*out = v;
	return v ? n : 0;
}

static char *edit(const char *old, const char *block)
{
	static const char dflt[] = "default = \"asp\"\n", incl[] = "include_local = false\n";
	static const char *const asp_values[] = {"\"asp\"", "'asp'", NULL};
	static const char *const false_values[] = {"false", NULL};
	text t = {0};
	if (!old) {
		puts_t(
		    &t,
		    "# Codex's execution environments. The \"asp\" one runs Codex's own tools in "
		    "the\n# sandbox .asp.json names (asp bind codex; docs/harnesses.md, "
		    "\"Codex\").\n");
		puts_t(&t, dflt);
		puts_t(&t, incl);
		puts_t(&t, "\n");
		puts_t(&t, block);
		return t.oom ? (free(t.p), NULL) : t.p;
	}
	line *v;
	size_t n = split(old, &v);
	if (!v && *old)
		return NULL;
	/* the top level ends at the first table header */
	size_t top = n;
	for (size_t i = 0; i < n && top == n; i++)
		if (header(v[i].s, v[i].end))
			top = i;
	/* the [[environments]] block with id "asp": [from, to), its trailing idle lines kept */
	size_t from = n, to = n;
	for (size_t i = top; i < n && from == n; i++) {
		if (!environments_header(v[i].s, v[i].end))
			continue;
		size_t j = i + 1;
		bool ours = false;
		for (; j < n && !header(v[j].s, v[j].end); j++)
			ours = ours || id_asp(v[j].s, v[j].end);
		if (ours) {
			from = i;
			to = j;
			while (to > from + 1 && idle(v[to - 1].s, v[to - 1].end))
				to--;
		}
	}
	/* missing top-level keys go after the last top-level line that says something */
	bool have_default = false, have_incl = false;
	for (size_t i = 0; i < top; i++) {
		have_default = have_default || assigns(v[i].s, v[i].end, "default");
		have_incl = have_incl || assigns(v[i].s, v[i].end, "include_local");
	}
	size_t ins = top;
	while (ins > 0 && idle(v[ins - 1].s, v[ins - 1].end))
		ins--;
	for (size_t i = 0; i <= n; i++) {
		if (i == ins && (!have_default || !have_incl)) {
			if (t.len && t.p[t.len - 1] != '\n')
				puts_t(&t, "\n");
			if (!have_default)
				puts_t(&t, dflt);
			if (!have_incl)
				puts_t(&t, incl);
			if (ins == top && top < n)
				puts_t(&t, "\n");
		}
		if (i == n)
			break;
		if (i == from) {
			puts_t(&t, block);
			i = to - 1;
		} else if (i < top && assigns(v[i].s, v[i].end, "default") &&
		           !value_is(v[i].s, v[i].end, asp_values)) {
			puts_t(&t, dflt);
		} else if (i < top && assigns(v[i].s, v[i].end, "include_local") &&
		           !value_is(v[i].s, v[i].end, false_values)) {
			puts_t(&t, incl);
		} else {
			add(&t, v[i].s, (size_t)(v[i].next - v[i].s));
		}
	}
	if (from == n) {
		if (t.len && t.p[t.len - 1] != '\n')
			puts_t(&t, "\n");
		if (t.len)
			puts_t(&t, "\n");
		puts_t(&t, block);
	}
	free(v);
	return t.oom ? (free(t.p), NULL) : t.p;
}

static int plan_codex(const bind_ctx *b, bind_plan *plan)
{
	char path[PATH_MAX];
	const char *home = getenv("CODEX_HOME");
	if (home && *home)
		snprintf(path, sizeof path, "%s/environments.toml", home);
	else if (getenv("HOME") && *getenv("HOME"))
		snprintf(path, sizeof path, "%s/.codex/environments.toml", getenv("HOME"));
	else
		return cli_usage(b->c,
		                 "neither CODEX_HOME nor HOME is set: where is Codex's home?"),
		       -1;
	char *q_asp = bind_quote(b->asp), *q_cfg = bind_quote(b->config);
	char block[3 * PATH_MAX + 256];
	if (q_asp && q_cfg)
		snprintf(block, sizeof block,
		         "[[environments]]\nid = \"asp\"\nprogram = %s\nargs = [\"--config\", %s, "
		         "\"exec-server\"]\n",
		         q_asp, q_cfg);
	free(q_asp);
	free(q_cfg);
	if (!q_asp || !q_cfg)
		return cli_fail_errno(b->c, ENOMEM, "bind"), -1;
	char *old;
	if (bind_read(b, path, &old) != 0)
		return -1;
	char *now = edit(old, block);
	if (!now) {
		free(old);
		return cli_fail_errno(b->c, ENOMEM, "bind"), -1;
	}
	bool same = old && !strcmp(old, now);
	free(old);
	if (same) {
		free(now);
		now = NULL;
	}
	return bind_plan_text(b, plan, path, now);
}

const bind_harness bind_codex = {"codex", plan_codex};
