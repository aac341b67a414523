/*
 * apply_patch: Codex's patch format. The whole patch is parsed and every hunk located in
 * the current files before anything is written, so a patch that does not fit changes
 * nothing; only an I/O failure while writing can leave part of it applied (the message
 * then says which files changed).
 */
#include "shared.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct line {
	const char *s;
	size_t n;
} line;

typedef struct lines {
	line *v;
	size_t n, cap;
} lines;

static bool lines_push(lines *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		line *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return false;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (line){s, n};
	return true;
}

/* Splits text at '\n'; a final newline makes no empty last line. */
static bool split_lines(const char *text, size_t len, lines *out)
{
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
		if (!lines_push(out, text + i, n))
			return false;
		i += n + (nl ? 1 : 0);
	}
	return true;
}

typedef enum op_kind { OP_ADD, OP_DELETE, OP_UPDATE } op_kind;

typedef struct chunk {
	line ctx; /* the text after "@@ ", or n == 0 */
	lines old_l, new_l;
	bool at_eof; /* "*** End of File" */
} chunk;

typedef struct fileop {
	op_kind kind;
	char *path;    /* absolute */
	char *move_to; /* absolute, or NULL */
	lines add;     /* OP_ADD: the content lines */
	chunk *chunks;
	size_t n_chunks;
	tbuf result; /* the new content, computed before anything is written */
} fileop;

typedef struct patch {
	fileop *ops;
	size_t n;
} patch;

static void patch_free(patch *p)
{
	for (size_t i = 0; i < p->n; i++) {
		fileop *o = &p->ops[i];
		free(o->path);
		free(o->move_to);
		free(o->add.v);
		for (size_t j = 0; j < o->n_chunks; j++) {
			free(o->chunks[j].old_l.v);
			free(o->chunks[j].new_l.v);
		}
		free(o->chunks);
		tb_free(&o->result);
	}
	free(p->ops);
}

static bool starts(const line *l, const char *prefix)
{
	size_t n = strlen(prefix);
	return l->n >= n && !memcmp(l->s, prefix, n);
}

/* The text after `prefix`, trimmed, as a malloc'd absolute path. */
static char *header_path(asp_tools *t, const line *l, const char *prefix)
{
	size_t k = strlen(prefix);
	const char *s = l->s + k;
	size_t n = l->n - k;
	while (n && isspace((unsigned char)*s))
		s++, n--;
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (!n)
		return NULL;
	char *rel = strndup(s, n);
	char *abs = rel ? tools_abs(t, rel) : NULL;
	free(rel);
	return abs;
}

#define SYNTAX_HELP                                                                                \
	" The patch must start with \"*** Begin Patch\", end with \"*** End Patch\", and hold "    \
	"sections \"*** Add File: PATH\" (lines starting with +), \"*** Delete File: PATH\" or "   \
	"\"*** Update File: PATH\" (optionally \"*** Move to: PATH\", then hunks: \"@@\" lines "   \
	"followed by lines starting with space, - or +)."

static bool parse_patch(asp_tools *t, const char *input, lines *all, patch *p, tresult *r)
{
	if (!split_lines(input, strlen(input), all))
		return tools_fail(r, "Error: out of memory.");
	size_t i = 0, n = all->n;
	/* tolerate blank lines and a heredoc wrapper's trailing whitespace around the markers */
	while (i < n && all->v[i].n == 0)
		i++;
	while (n > i && all->v[n - 1].n == 0)
		n--;
	for (size_t k = 0; k < all->n; k++)
		if (all->v[k].n && all->v[k].s[all->v[k].n - 1] == '\r')
			all->v[k].n--;
	if (i >= n || !starts(&all->v[i], "*** Begin Patch"))
		return tools_fail(
		    r,
		    "Error: the first line of the patch must be \"*** Begin Patch\"." SYNTAX_HELP);
	if (!starts(&all->v[n - 1], "*** End Patch"))
		return tools_fail(
		    r, "Error: the last line of the patch must be \"*** End Patch\"." SYNTAX_HELP);
	i++;
	n--;
	size_t cap = 0;
	while (i < n) {
		line *l = &all->v[i];
		if (p->n == cap) {
			cap = cap ? cap * 2 : 8;
			fileop *v = realloc(p->ops, cap * sizeof *v);
			if (!v)
				return tools_fail(r, "Error: out of memory.");
			p->ops = v;
		}
		fileop *o = &p->ops[p->n];
		memset(o, 0, sizeof *o);
		const char *pre;
		if (starts(l, "*** Add File:"))
			o->kind = OP_ADD, pre = "*** Add File:";
		else if (starts(l, "*** Delete File:"))
			o->kind = OP_DELETE, pre = "*** Delete File:";
		else if (starts(l, "*** Update File:"))
			o->kind = OP_UPDATE, pre = "*** Update File:";
		else
			return tools_fail(
			    r,
			    "Error: line %zu of the patch, \"%.*s\", is not a file header "
			    "(\"*** Add File:\", \"*** Update File:\" or \"*** Delete "
			    "File:\")." SYNTAX_HELP,
			    i + 1, (int)(l->n > 200 ? 200 : l->n), l->s);
		p->n++;
		o->path = header_path(t, l, pre);
		if (!o->path)
			return tools_fail(r, "Error: line %zu of the patch names no file.", i + 1);
		for (size_t k = 0; k + 1 < p->n; k++)
			if (!strcmp(p->ops[k].path, o->path))
				return tools_fail(
				    r,
				    "Error: %s appears in two sections of the patch; put all of "
				    "its changes in one.",
				    o->path);
		i++;
		if (o->kind == OP_DELETE)
			continue;
		if (o->kind == OP_ADD) {
			while (i < n && !starts(&all->v[i], "*** ")) {
				line *a = &all->v[i];
				if (a->n == 0 || a->s[0] != '+')
					return tools_fail(
					    r,
					    "Error: line %zu of the patch: every line of an added "
					    "file (%s) must start with +.",
					    i + 1, o->path);
				if (!lines_push(&o->add, a->s + 1, a->n - 1))
					return tools_fail(r, "Error: out of memory.");
				i++;
			}
			continue;
		}
		if (i < n && starts(&all->v[i], "*** Move to:")) {
			o->move_to = header_path(t, &all->v[i], "*** Move to:");
			if (!o->move_to)
				return tools_fail(
				    r,
				    "Error: line %zu of the patch: \"*** Move to:\" names no "
				    "file.",
				    i + 1);
			i++;
		}
		size_t ccap = 0;
		while (i < n &&
		       !(starts(&all->v[i], "*** ") && !starts(&all->v[i], "*** End of File"))) {
			line *h = &all->v[i];
			bool header = starts(h, "@@");
			if (!header && o->n_chunks > 0 && !starts(h, "*** End of File"))
				return tools_fail(
				    r, "Error: line %zu of the patch: \"%.*s\" is outside a hunk.",
				    i + 1, (int)(h->n > 200 ? 200 : h->n), h->s);
			if (o->n_chunks == ccap) {
				ccap = ccap ? ccap * 2 : 4;
				chunk *v = realloc(o->chunks, ccap * sizeof *v);
				if (!v)
					return tools_fail(r, "Error: out of memory.");
				o->chunks = v;
			}
			chunk *c = &o->chunks[o->n_chunks++];
			memset(c, 0, sizeof *c);
			if (header) {
				const char *s = h->s + 2;
				size_t k = h->n - 2;
				while (k && *s == ' ')
					s++, k--;
				c->ctx = (line){s, k};
				i++;
			}
			/* the first hunk may omit its "@@" */
			while (i < n && !starts(&all->v[i], "@@") && !starts(&all->v[i], "*** ")) {
				line *b = &all->v[i];
				char tag = b->n ? b->s[0] : ' ';
				const char *s = b->n ? b->s + 1 : b->s;
				size_t k = b->n ? b->n - 1 : 0;
				bool ok = true;
				if (tag == ' ')
					ok = lines_push(&c->old_l, s, k) &&
					     lines_push(&c->new_l, s, k);
				else if (tag == '-')
					ok = lines_push(&c->old_l, s, k);
				else if (tag == '+')
					ok = lines_push(&c->new_l, s, k);
				else
					return tools_fail(
					    r,
					    "Error: line %zu of the patch: a hunk line must start "
					    "with space, - or +, not \"%c\".",
					    i + 1, tag);
				if (!ok)
					return tools_fail(r, "Error: out of memory.");
				i++;
			}
			if (i < n && starts(&all->v[i], "*** End of File")) {
				c->at_eof = true;
				i++;
			}
			if (!c->old_l.n && !c->new_l.n && !c->ctx.n)
				return tools_fail(
				    r, "Error: line %zu of the patch: an empty hunk in %s.", i,
				    o->path);
		}
		if (o->n_chunks == 0 && !o->move_to)
			return tools_fail(r, "Error: the update of %s has no hunks.", o->path);
	}
	if (p->n == 0)
		return tools_fail(r, "Error: the patch changes no file." SYNTAX_HELP);
	return true;
}

/* Compares two lines: 0 exact, 1 ignoring trailing blanks, 2 ignoring both ends. */
static bool line_eq(const line *a, const line *b, int level)
{
	const char *x = a->s, *y = b->s;
	size_t m = a->n, n = b->n;
	if (level >= 1) {
		while (m && isspace((unsigned char)x[m - 1]))
			m--;
		while (n && isspace((unsigned char)y[n - 1]))
			n--;
	}
	if (level >= 2) {
		while (m && isspace((unsigned char)*x))
			x++, m--;
		while (n && isspace((unsigned char)*y))
			y++, n--;
	}
	return m == n && !memcmp(x, y, m);
}

/* Where `pat` occurs in `file` at or after `from`; SIZE_MAX when nowhere. */
static size_t seek(const lines *file, size_t from, const lines *pat, bool at_eof)
{
	if (pat->n > file->n)
		return SIZE_MAX;
	for (int level = 0; level < 3; level++) {
		size_t first = from, last = file->n - pat->n;
		if (at_eof && last >= from)
			first = last;
		for (size_t s = first; s <= last && s != SIZE_MAX; s++) {
			size_t k = 0;
			while (k < pat->n && line_eq(&file->v[s + k], &pat->v[k], level))
				k++;
			if (k == pat->n)
				return s;
		}
	}
	return SIZE_MAX;
}

static bool compute_update(asp_tools *t, fileop *o, tresult *r)
{
	asp_error err;
	char *data = NULL;
	size_t len = 0;
	if (!tools_read_file(t, o->path, &data, &len, NULL, &err)) {
		if (err.code == ASP_E_NOT_FOUND)
			return tools_fail(
			    r,
			    "Error: cannot update %s: it does not exist (use \"*** Add "
			    "File:\" to create it). Nothing was changed.",
			    o->path);
		return tools_fail_asp(r, &err, "reading", o->path);
	}
	lines file = {0};
	bool ok = false;
	if (!split_lines(data, len, &file)) {
		tools_fail(r, "Error: out of memory.");
		goto out;
	}
	size_t pos = 0;
	for (size_t j = 0; j < o->n_chunks; j++) {
		chunk *c = &o->chunks[j];
		if (c->ctx.n) {
			lines one = {&c->ctx, 1, 1};
			size_t at = seek(&file, pos, &one, false);
			if (at == SIZE_MAX) {
				tools_fail(r,
				           "Error: in %s, the hunk context \"@@ %.*s\" was not "
				           "found. Read the "
				           "file and give a line it contains. Nothing was changed.",
				           o->path, (int)c->ctx.n, c->ctx.s);
				goto out;
			}
			pos = at + 1;
		}
		size_t at;
		if (c->old_l.n == 0) {
			at = c->ctx.n ? pos : file.n;
		} else {
			at = seek(&file, pos, &c->old_l, c->at_eof);
			if (at == SIZE_MAX) {
				tbuf want = {0};
				for (size_t k = 0; k < c->old_l.n && k < 8; k++) {
					tb_add(&want, c->old_l.v[k].s, c->old_l.v[k].n);
					tb_puts(&want, "\n");
				}
				tools_fail(
				    r,
				    "Error: in %s, hunk %zu does not match the file: these lines "
				    "(context and -) were not found in order:\n%sRead the file "
				    "again "
				    "and make the context and removed lines match it exactly. "
				    "Nothing "
				    "was changed.",
				    o->path, j + 1, want.p ? want.p : "");
				tb_free(&want);
				goto out;
			}
		}
		/* replace file[at .. at+old) by new, in place of the line array */
		size_t old_n = c->old_l.n, new_n = c->new_l.n;
		size_t total = file.n - old_n + new_n;
		line *v = malloc((total ? total : 1) * sizeof *v);
		if (!v) {
			tools_fail(r, "Error: out of memory.");
			goto out;
		}
		memcpy(v, file.v, at * sizeof *v);
		memcpy(v + at, c->new_l.v, new_n * sizeof *v);
		memcpy(v + at + new_n, file.v + at + old_n, (file.n - at - old_n) * sizeof *v);
		free(file.v);
		file.v = v;
		file.n = file.cap = total;
		pos = at + new_n;
	}
	for (size_t k = 0; k < file.n; k++) {
		tb_add(&o->result, file.v[k].s, file.v[k].n);
		tb_puts(&o->result, "\n");
	}
	if (!o->result.p)
		tb_add(&o->result, "", 0);
	/* the result points into `data` only through copies: safe to free now */
	ok = !o->result.oom || tools_fail(r, "Error: out of memory.");
out:
	free(file.v);
	free(data);
	return ok;
}

static bool exists(asp_tools *t, const char *abs)
{
	asp_arena *a = asp_arena_new();
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = abs;
	p.follow = false;
	asp_stat_result res;
	asp_error err;
	bool e = a && asp_stat(t->c, &p, &res, a, &err) == ASP_OK;
	asp_arena_free(a);
	return e;
}

static asp_status remove_file(asp_tools *t, const char *abs, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, abs, "out of memory");
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = abs;
	asp_remove_result res;
	asp_status st = asp_remove(t->c, &p, &res, a, err);
	asp_arena_free(a);
	return st;
}

bool tool_apply_patch(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	const char *input;
	if (!arg_str(r, args, "input", false, &input))
		return false;
	if (!input && !arg_str(r, args, "patch", true, &input))
		return false;
	lines all = {0};
	patch p = {0};
	bool ok = false;
	if (!parse_patch(t, input, &all, &p, r))
		goto out;
	/* check everything first */
	for (size_t i = 0; i < p.n; i++) {
		fileop *o = &p.ops[i];
		if (o->kind == OP_ADD) {
			if (exists(t, o->path)) {
				tools_fail(r,
				           "Error: cannot add %s: it already exists (use \"*** "
				           "Update File:\" "
				           "to change it). Nothing was changed.",
				           o->path);
				goto out;
			}
			for (size_t j = 0; j < o->add.n; j++) {
				tb_add(&o->result, o->add.v[j].s, o->add.v[j].n);
				tb_puts(&o->result, "\n");
			}
			if (!o->result.p)
				tb_add(&o->result, "", 0);
		} else if (o->kind == OP_DELETE) {
			if (!exists(t, o->path)) {
				tools_fail(r,
				           "Error: cannot delete %s: it does not exist. Nothing "
				           "was changed.",
				           o->path);
				goto out;
			}
		} else {
			if (!compute_update(t, o, r))
				goto out;
			if (o->move_to && strcmp(o->move_to, o->path) && exists(t, o->move_to)) {
				tools_fail(
				    r,
				    "Error: cannot move %s to %s: the target exists. Nothing was "
				    "changed.",
				    o->path, o->move_to);
				goto out;
			}
		}
	}
	/* then apply */
	tbuf done = {0};
	for (size_t i = 0; i < p.n; i++) {
		fileop *o = &p.ops[i];
		asp_error err;
		asp_status st;
		const char *what;
		char letter;
		const char *shown = o->path;
		if (o->kind == OP_DELETE) {
			st = remove_file(t, o->path, &err);
			what = "deleting", letter = 'D';
		} else if (o->kind == OP_ADD) {
			st = tools_write_file(t, o->path, o->result.p, o->result.len, NULL, &err);
			what = "writing", letter = 'A';
		} else {
			const char *dst = o->move_to ? o->move_to : o->path;
			st = tools_write_file(t, dst, o->result.p, o->result.len, NULL, &err);
			if (st == ASP_OK && o->move_to && strcmp(o->move_to, o->path))
				st = remove_file(t, o->path, &err);
			what = "writing", letter = 'M';
			shown = dst;
		}
		if (st != ASP_OK) {
			tools_fail(r,
			           "Error: %s %s failed (%s): %s. Changed before the failure:\n%s",
			           what, o->path, asp_strerror(err.code), err.message,
			           done.p ? done.p : "(nothing)\n");
			tb_free(&done);
			goto out;
		}
		tb_printf(&done, "%c %s\n", letter, shown);
	}
	tb_puts(&r->text, "Success. Updated the following files:\n");
	tb_add(&r->text, done.p, done.len - 1);
	tb_free(&done);
	ok = true;
out:
	patch_free(&p);
	free(all.v);
	return ok;
}
