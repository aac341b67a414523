/* read, write, edit, ls: the file tools, on the read/write/stat/list ops. */
#include "shared.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* How much of the start of a file decides whether it is binary (a NUL byte in it). */
#define BINARY_PROBE 8192

static asp_status stat_path(asp_tools *t, const char *abs, char *type, size_t cap, uint64_t *size,
                            asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, abs, "out of memory");
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = abs;
	p.follow = true;
	asp_stat_result r;
	asp_status st = asp_stat(t->c, &p, &r, a, err);
	if (st == ASP_OK) {
		snprintf(type, cap, "%s", r.type ? r.type : "");
		if (size)
			*size = r.size;
	}
	asp_arena_free(a);
	return st;
}

/* One line of read's output: its number, its text (cut past TOOLS_READ_LINE_MAX). */
static void read_line_out(tresult *r, uint64_t line, const char *s, size_t n, size_t chars)
{
	size_t keep = n;
	if (chars > TOOLS_READ_LINE_MAX)
		tools_chars(s, n, TOOLS_READ_LINE_MAX, &keep);
	if (keep && s[keep - 1] == '\r')
		keep--;
	tb_printf(&r->text, "%6" PRIu64 "\t", line);
	tb_add(&r->text, s, keep);
	if (chars > TOOLS_READ_LINE_MAX)
		tb_printf(&r->text, "... [line cut: %zu characters in all]", chars);
	tb_puts(&r->text, "\n");
}

/* Bytes of a line kept while reading in pieces: TOOLS_READ_LINE_MAX characters of up to 4. */
#define READ_LINE_KEEP (4 * TOOLS_READ_LINE_MAX + 4)
#define READ_PIECE     (1u << 20)

/*
 * A file too large to read whole: read in pieces from the start, counting lines, until
 * `limit` lines from `offset` are shown and one more byte is seen (or the end).
 */
static bool read_in_pieces(asp_tools *t, const char *abs, uint64_t size, uint64_t offset,
                           uint64_t limit, tresult *r)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	tbuf cur = {0};       /* the start of the current line, when it is shown */
	size_t cur_chars = 0; /* its characters so far */
	bool pending = false; /* bytes of the current line seen */
	uint64_t line = 1, shown = 0, pos = 0;
	bool more = false, ok = true;
	for (;;) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = abs;
		p.offset = pos;
		p.has_length = true;
		p.length = READ_PIECE;
		asp_read_result res;
		asp_error err;
		if (asp_read(t->c, &p, &res, a, &err) != ASP_OK) {
			ok = tools_fail_asp(r, &err, "reading", abs);
			goto out;
		}
		const char *d = (const char *)res.data.data;
		size_t n = res.data.len;
		if (pos == 0 && memchr(d, '\0', n < BINARY_PROBE ? n : BINARY_PROBE)) {
			tb_printf(&r->text,
			          "(%s is a binary file of %" PRIu64
			          " bytes; it is not shown. Use bash, e.g. "
			          "`file` or `xxd | head`, to inspect it.)",
			          abs, size);
			goto out;
		}
		pos += n;
		for (size_t i = 0; i < n && !more;) {
			if (shown == limit) {
				more = true; /* a byte past the last line shown */
				break;
			}
			const char *nl = memchr(d + i, '\n', n - i);
			size_t e = nl ? (size_t)(nl - d) : n;
			pending = pending || e > i;
			if (line >= offset) {
				size_t room = READ_LINE_KEEP - cur.len;
				tb_add(&cur, d + i, e - i < room ? e - i : room);
				size_t all;
				cur_chars += tools_chars(d + i, e - i, SIZE_MAX, &all);
			}
			i = e;
			if (nl) {
				if (line >= offset) {
					read_line_out(r, line, cur.p ? cur.p : "", cur.len,
					              cur_chars);
					shown++;
				}
				cur.len = 0;
				cur_chars = 0;
				pending = false;
				line++;
				i++;
			}
		}
		asp_arena_reset(a);
		if (more || res.eof || n == 0)
			break;
	}
	if (!more && pending && line >= offset && shown < limit) {
		read_line_out(r, line, cur.p ? cur.p : "", cur.len, cur_chars);
		shown++;
	}
	uint64_t total = line - 1 + (pending ? 1 : 0);
	if (more)
		tb_printf(&r->text,
		          "(Showed lines %" PRIu64 "-%" PRIu64 " of a file of %" PRIu64
		          " bytes, more follow; use offset=%" PRIu64 " to read on.)",
		          offset, offset - 1 + shown, size, offset + shown);
	else if (offset > total)
		tb_printf(&r->text,
		          "(%s has %" PRIu64 " lines; offset %" PRIu64 " is past its end.)", abs,
		          total, offset);
	else if (r->text.len && r->text.p[r->text.len - 1] == '\n')
		r->text.p[--r->text.len] = '\0';
out:
	tb_free(&cur);
	asp_arena_free(a);
	return ok;
}

bool tool_read(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	const char *path;
	uint64_t offset, limit;
	if (!arg_str(r, args, "file_path", true, &path) ||
	    !arg_uint(r, args, "offset", 1, &offset) ||
	    !arg_uint(r, args, "limit", TOOLS_READ_LIMIT_DEFAULT, &limit))
		return false;
	if (offset == 0)
		offset = 1;
	if (limit == 0)
		limit = TOOLS_READ_LIMIT_DEFAULT;
	char *abs = tools_abs(t, path);
	if (!abs)
		return tools_fail(r, "Error: out of memory.");
	asp_error err;
	uint64_t size = 0;
	char *data = NULL;
	size_t len = 0;
	bool ok = false;
	/* the read alone: one round trip; what it refuses says what the path is */
	if (!tools_read_file(t, abs, &data, &len, &size, &err)) {
		if (err.code == ASP_E_TOO_LARGE && size > TOOLS_FILE_MAX)
			ok = read_in_pieces(t, abs, size, offset, limit, r);
		else if (err.code == ASP_E_NOT_FOUND)
			tools_fail(
			    r,
			    "Error: file does not exist: %s. Check the path; glob or ls show "
			    "what exists.",
			    abs);
		else if (err.code == ASP_E_IS_A_DIRECTORY)
			tools_fail(r, "Error: %s is a directory, not a file. Use ls to list it.",
			           abs);
		else
			tools_fail_asp(r, &err, "reading", abs);
		goto out;
	}
	if (len == 0) {
		tb_printf(&r->text, "(The file %s exists but is empty.)", abs);
		ok = true;
		goto out;
	}
	if (memchr(data, '\0', len < BINARY_PROBE ? len : BINARY_PROBE)) {
		tb_printf(&r->text,
		          "(%s is a binary file of %zu bytes; it is not shown. Use bash, e.g. "
		          "`file` or `xxd | head`, to inspect it.)",
		          abs, len);
		ok = true;
		goto out;
	}
	uint64_t line = 1, shown = 0, total = 0;
	size_t pos = 0;
	while (pos < len) {
		const char *s = data + pos;
		const char *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		pos += n + (nl ? 1 : 0);
		total++;
		if (line >= offset && shown < limit) {
			size_t chars = n, cut;
			if (n > TOOLS_READ_LINE_MAX)
				chars = tools_chars(s, n, TOOLS_READ_LINE_MAX, &cut);
			read_line_out(r, line, s, n, chars);
			shown++;
		}
		line++;
	}
	if (offset > total) {
		tb_printf(&r->text,
		          "(%s has %" PRIu64 " lines; offset %" PRIu64 " is past its end.)", abs,
		          total, offset);
	} else if (offset - 1 + shown < total) {
		tb_printf(&r->text,
		          "(Showed lines %" PRIu64 "-%" PRIu64 " of %" PRIu64
		          "; use offset=%" PRIu64 " to read on.)",
		          offset, offset - 1 + shown, total, offset + shown);
	} else if (r->text.len && r->text.p[r->text.len - 1] == '\n') {
		r->text.p[--r->text.len] = '\0';
	}
	ok = true;
out:
	free(data);
	free(abs);
	return ok;
}

bool tool_write(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	const char *path;
	if (!arg_str(r, args, "file_path", true, &path))
		return false;
	json_t *cv = json_object_get(args, "content");
	if (!cv || !json_is_string(cv))
		return tools_fail(r, "Error: the required parameter `content` is missing or not a "
		                     "string.");
	char *abs = tools_abs(t, path);
	if (!abs)
		return tools_fail(r, "Error: out of memory.");
	asp_error err;
	char type[16];
	bool ok = false, created = false;
	/* a responder of protocol 2 says whether the write made the file: no stat first */
	if (tools_hello(t, &err) != ASP_OK) {
		free(abs);
		return tools_fail(r, "Error: the sandbox's hello failed (%s): %s.",
		                  asp_strerror(err.code), err.message);
	}
	bool ask = t->protocol < 2;
	bool existed = ask && stat_path(t, abs, type, sizeof type, NULL, &err) == ASP_OK;
	if (existed && !strcmp(type, "dir")) {
		tools_fail(r, "Error: %s is a directory; give the path of a file.", abs);
	} else if (tools_write_file(t, abs, json_string_value(cv), json_string_length(cv), &created,
	                            &err) != ASP_OK) {
		if (err.code == ASP_E_IS_A_DIRECTORY)
			tools_fail(r, "Error: %s is a directory; give the path of a file.", abs);
		else
			tools_fail_asp(r, &err, "writing", abs);
	} else {
		if (ask ? existed : !created)
			tb_printf(&r->text, "The file %s has been updated.", abs);
		else
			tb_printf(&r->text, "File created successfully at: %s", abs);
		ok = true;
	}
	free(abs);
	return ok;
}

/* --- edit -------------------------------------------------------------------------------- */

static size_t count_occurrences(const char *hay, size_t hlen, const char *needle, size_t nlen)
{
	size_t n = 0;
	for (const char *p = hay; (size_t)(p - hay) + nlen <= hlen;) {
		const char *m = memmem(p, hlen - (size_t)(p - hay), needle, nlen);
		if (!m)
			break;
		n++;
		p = m + nlen;
	}
	return n;
}

static bool fail_missing(tresult *r, const char *abs)
{
	return tools_fail(r,
	                  "Error: file does not exist: %s. Check the path; to create a "
	                  "file use write (or edit with an empty old_string).",
	                  abs);
}

static bool fail_not_found_in(tresult *r, const char *abs)
{
	return tools_fail(r,
	                  "Error: old_string was not found in %s. It must match the file exactly, "
	                  "whitespace and indentation included, without the line-number prefix of "
	                  "read's output. Read the file again to see its current text.",
	                  abs);
}

static bool fail_not_unique(tresult *r, const char *abs, size_t n)
{
	return tools_fail(
	    r,
	    "Error: old_string occurs %zu times in %s, but replace_all is false. Add "
	    "surrounding lines to old_string so that it matches exactly one place, or "
	    "set replace_all to true to replace every occurrence.",
	    n, abs);
}

/*
 * The `edit` op: the responder finds, counts and replaces, and writes atomically, in one
 * round trip. *done is false when the op is not there after all (unsupported): then the
 * caller falls back.
 */
static bool edit_op(asp_tools *t, const char *abs, const char *old, const char *new,
                    bool replace_all, size_t *count, tresult *r, bool *done)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	asp_edit_params p;
	asp_edit_params_init(&p);
	p.path = abs;
	p.old = old;
	p.new_text = new;
	p.replace_all = replace_all;
	asp_edit_result res;
	asp_error err;
	asp_status st = asp_edit(t->c, &p, &res, a, &err);
	asp_arena_free(a);
	*done = true;
	if (st == ASP_OK) {
		*count = (size_t)res.replacements;
		return true;
	}
	switch (err.code) {
	case ASP_E_UNSUPPORTED: *done = false; return false;
	case ASP_E_NOT_FOUND: {
		/* the file or the text: the same code, so ask which */
		char type[16];
		asp_error e2;
		if (stat_path(t, abs, type, sizeof type, NULL, &e2) != ASP_OK &&
		    e2.code == ASP_E_NOT_FOUND)
			return fail_missing(r, abs);
		return fail_not_found_in(r, abs);
	}
	case ASP_E_INVALID_ARGUMENT: {
		/* "... found N times ...": the count for the model */
		const char *f = strstr(err.message, "found ");
		unsigned long long n = 0;
		if (f && sscanf(f, "found %llu times", &n) == 1 && n > 1)
			return fail_not_unique(r, abs, (size_t)n);
		return tools_fail_asp(r, &err, "editing", abs);
	}
	case ASP_E_IS_A_DIRECTORY:
		return tools_fail(r, "Error: %s is a directory, not a file.", abs);
	default: return tools_fail_asp(r, &err, "editing", abs);
	}
}

/*
 * The edit itself: the `edit` op when the responder has it; otherwise (and for an empty
 * old_string, which creates a file) read, check the count, write atomically.
 * Returns true when edited; otherwise the error is in `r`.
 */
static bool edit_backend(asp_tools *t, const char *abs, const char *old, size_t olen,
                         const char *new, size_t nlen, bool replace_all, size_t *count, tresult *r)
{
	/* the op takes C strings: text with a NUL byte goes the long way */
	if (olen && tools_has_op(t, "edit") && strlen(old) == olen && strlen(new) == nlen) {
		bool done = false;
		bool ok = edit_op(t, abs, old, new, replace_all, count, r, &done);
		if (done)
			return ok;
	}
	asp_error err;
	char *data = NULL;
	size_t len = 0;
	if (!tools_read_file(t, abs, &data, &len, NULL, &err)) {
		if (err.code == ASP_E_NOT_FOUND && olen == 0) {
			/* an empty old_string creates the file */
			if (tools_write_file(t, abs, new, nlen, NULL, &err) != ASP_OK)
				return tools_fail_asp(r, &err, "creating", abs);
			*count = 1;
			return true;
		}
		if (err.code == ASP_E_NOT_FOUND)
			return fail_missing(r, abs);
		if (err.code == ASP_E_IS_A_DIRECTORY)
			return tools_fail(r, "Error: %s is a directory, not a file.", abs);
		return tools_fail_asp(r, &err, "reading", abs);
	}
	bool ok = false;
	if (olen == 0) {
		if (len != 0) {
			tools_fail(
			    r,
			    "Error: old_string is empty but %s is not: give the exact text to "
			    "replace, or use write to replace the whole file.",
			    abs);
			goto out;
		}
		if (tools_write_file(t, abs, new, nlen, NULL, &err) != ASP_OK) {
			tools_fail_asp(r, &err, "writing", abs);
			goto out;
		}
		*count = 1;
		ok = true;
		goto out;
	}
	size_t n = count_occurrences(data, len, old, olen);
	if (n == 0) {
		fail_not_found_in(r, abs);
		goto out;
	}
	if (n > 1 && !replace_all) {
		fail_not_unique(r, abs, n);
		goto out;
	}
	tbuf out = {0};
	const char *p = data;
	for (size_t i = 0; i < n; i++) {
		const char *m = memmem(p, len - (size_t)(p - data), old, olen);
		tb_add(&out, p, (size_t)(m - p));
		tb_add(&out, new, nlen);
		p = m + olen;
	}
	tb_add(&out, p, len - (size_t)(p - data));
	if (out.oom) {
		tb_free(&out);
		tools_fail(r, "Error: out of memory.");
		goto out;
	}
	if (tools_write_file(t, abs, out.p, out.len, NULL, &err) != ASP_OK) {
		tb_free(&out);
		tools_fail_asp(r, &err, "writing", abs);
		goto out;
	}
	tb_free(&out);
	*count = n;
	ok = true;
out:
	free(data);
	return ok;
}

bool tool_edit(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	const char *path;
	bool all;
	if (!arg_str(r, args, "file_path", true, &path) ||
	    !arg_bool(r, args, "replace_all", false, &all))
		return false;
	json_t *ov = json_object_get(args, "old_string"), *nv = json_object_get(args, "new_string");
	if (!ov || !json_is_string(ov))
		return tools_fail(r,
		                  "Error: the required parameter `old_string` is missing or not a "
		                  "string.");
	if (!nv || !json_is_string(nv))
		return tools_fail(r,
		                  "Error: the required parameter `new_string` is missing or not a "
		                  "string.");
	size_t olen = json_string_length(ov), nlen = json_string_length(nv);
	if (olen == nlen && !memcmp(json_string_value(ov), json_string_value(nv), olen))
		return tools_fail(r,
		                  "Error: old_string and new_string are the same: there is nothing "
		                  "to change.");
	char *abs = tools_abs(t, path);
	if (!abs)
		return tools_fail(r, "Error: out of memory.");
	size_t n = 0;
	bool ok = edit_backend(t, abs, json_string_value(ov), olen, json_string_value(nv), nlen,
	                       all, &n, r);
	if (ok) {
		if (olen == 0)
			tb_printf(&r->text, "File created successfully at: %s", abs);
		else if (n == 1)
			tb_printf(&r->text, "The file %s has been updated (1 replacement).", abs);
		else
			tb_printf(&r->text, "The file %s has been updated (%zu replacements).", abs,
			          n);
	}
	free(abs);
	return ok;
}

/* --- ls ---------------------------------------------------------------------------------- */

bool tool_ls(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)k;
	const char *path;
	if (!arg_str(r, args, "path", false, &path))
		return false;
	json_t *ign = json_object_get(args, "ignore");
	if (ign && !json_is_null(ign) && !json_is_array(ign))
		return tools_fail(r, "Error: `ignore` must be a list of glob patterns.");
	char *abs = tools_abs(t, path ? path : ".");
	asp_arena *a = asp_arena_new();
	if (!abs || !a) {
		free(abs);
		asp_arena_free(a);
		return tools_fail(r, "Error: out of memory.");
	}
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = abs;
	asp_list_result res;
	asp_error err;
	bool ok = false;
	if (asp_list(t->c, &p, &res, a, &err) != ASP_OK) {
		if (err.code == ASP_E_NOT_A_DIRECTORY)
			tools_fail(r, "Error: %s is not a directory. Use read for a file.", abs);
		else if (err.code == ASP_E_NOT_FOUND)
			tools_fail(r, "Error: directory does not exist: %s.", abs);
		else
			tools_fail_asp(r, &err, "listing", abs);
		goto out;
	}
	tb_printf(&r->text, "- %s%s\n", abs, strcmp(abs, "/") ? "/" : "");
	size_t shown = 0;
	for (size_t i = 0; i < res.entries.count; i++) {
		const asp_list_entry *e = &res.entries.items[i];
		bool skip = false;
		for (size_t j = 0; ign && j < json_array_size(ign); j++) {
			const char *pat = json_string_value(json_array_get(ign, j));
			if (pat && fnmatch(pat, e->name, 0) == 0)
				skip = true;
		}
		if (skip)
			continue;
		bool dir = e->type && !strcmp(e->type, "dir");
		tb_printf(&r->text, "  - %s%s\n", e->name, dir ? "/" : "");
		shown++;
	}
	if (!shown)
		tb_puts(&r->text, "  (empty directory)\n");
	r->text.p[--r->text.len] = '\0';
	ok = true;
out:
	asp_arena_free(a);
	free(abs);
	return ok;
}
