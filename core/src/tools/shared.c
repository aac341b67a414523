/*
 * What every tool shares, below the tools and the table: text buffers, failures and
 * arguments, sandbox paths and file I/O, cancel tokens, character counts and UTF-8.
 */
#include "shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- text buffers ------------------------------------------------------------------------ */

void tb_add(tbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void tb_puts(tbuf *b, const char *s)
{
	tb_add(b, s, strlen(s));
}

void tb_printf(tbuf *b, const char *fmt, ...)
{
	char small[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof small) {
		tb_add(b, small, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (!big) {
		b->oom = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	tb_add(b, big, (size_t)n);
	free(big);
}

void tb_free(tbuf *b)
{
	free(b->p);
	*b = (tbuf){0};
}

char *tb_take(tbuf *b)
{
	if (b->oom) {
		tb_free(b);
		return NULL;
	}
	if (!b->p)
		tb_add(b, "", 0);
	char *p = b->p;
	*b = (tbuf){0};
	return p;
}

/* --- results and arguments --------------------------------------------------------------- */

bool tools_fail(tresult *r, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->text.len = 0;
	tb_puts(&r->text, msg);
	r->is_error = true;
	return false;
}

bool tools_fail_asp(tresult *r, const asp_error *err, const char *what, const char *path)
{
	const char *hint = "";
	switch (err->code) {
	case ASP_E_NOT_FOUND: hint = " Check the path (ls or glob can show what exists)."; break;
	case ASP_E_IS_A_DIRECTORY: hint = " It is a directory: use ls to list it."; break;
	case ASP_E_NOT_A_DIRECTORY: hint = " A component of the path is not a directory."; break;
	case ASP_E_PERMISSION_DENIED: hint = " The sandbox user may not access it."; break;
	case ASP_E_TRANSPORT_ERROR:
		hint = " The connection to the sandbox failed; retrying may work.";
		break;
	default: break;
	}
	return tools_fail(r, "Error: %s %s failed (%s): %s.%s", what, path ? path : "",
	                  asp_strerror(err->code), err->message, hint);
}

bool arg_str(tresult *r, json_t *args, const char *key, bool required, const char **out)
{
	json_t *v = json_object_get(args, key);
	if (!v || json_is_null(v)) {
		*out = NULL;
		if (required)
			return tools_fail(r, "Error: the required parameter `%s` is missing.", key);
		return true;
	}
	if (!json_is_string(v))
		return tools_fail(r, "Error: the parameter `%s` must be a string.", key);
	*out = json_string_value(v);
	return true;
}

bool arg_uint(tresult *r, json_t *args, const char *key, uint64_t dflt, uint64_t *out)
{
	json_t *v = json_object_get(args, key);
	*out = dflt;
	if (!v || json_is_null(v))
		return true;
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return true;
	}
	if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 1e18) {
		*out = (uint64_t)json_real_value(v);
		return true;
	}
	/* Some clients send numbers as strings. */
	if (json_is_string(v)) {
		char *end;
		const char *s = json_string_value(v);
		unsigned long long n = strtoull(s, &end, 10);
		if (*s && !*end && *s != '-') {
			*out = n;
			return true;
		}
	}
	return tools_fail(r, "Error: the parameter `%s` must be a non-negative integer.", key);
}

bool arg_bool(tresult *r, json_t *args, const char *key, bool dflt, bool *out)
{
	json_t *v = json_object_get(args, key);
	*out = dflt;
	if (!v || json_is_null(v))
		return true;
	if (json_is_boolean(v)) {
		*out = json_is_true(v);
		return true;
	}
	if (json_is_string(v) &&
	    (!strcmp(json_string_value(v), "true") || !strcmp(json_string_value(v), "false"))) {
		*out = !strcmp(json_string_value(v), "true");
		return true;
	}
	return tools_fail(r, "Error: the parameter `%s` must be true or false.", key);
}

/* --- paths ------------------------------------------------------------------------------- */

char *tools_abs(const asp_tools *t, const char *path)
{
	/* A relative path joins the base, already a sandbox path; an absolute one is the
	 * harness's and goes through the workspace mapping. */
	if (path[0] != '/')
		return asp_workspace_to_sandbox(NULL, path, t->base);
	return asp_workspace_to_sandbox(t->ws, path, NULL);
}

/* --- sandbox helpers --------------------------------------------------------------------- */

bool tools_read_file(asp_tools *t, const char *abs, char **data, size_t *len, uint64_t *size,
                     asp_error *err)
{
	asp_arena *a = asp_arena_new();
	tbuf b = {0};
	uint64_t off = 0;
	bool ok = false;
	if (!a) {
		asp_error_set(err, ASP_E_INTERNAL, abs, "out of memory");
		return false;
	}
	for (;;) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = abs;
		p.offset = off;
		/* the first 1 MiB, then the rest: a huge file is refused without moving it */
		p.has_length = off == 0;
		p.length = TOOLS_READ_FIRST;
		asp_read_result res;
		if (asp_read(t->c, &p, &res, a, err) != ASP_OK)
			goto out;
		if (res.size > TOOLS_FILE_MAX) {
			if (size)
				*size = res.size;
			asp_error_set(
			    err, ASP_E_TOO_LARGE, abs,
			    "the file has %llu bytes, more than the %u MiB the tools read whole",
			    (unsigned long long)res.size, TOOLS_FILE_MAX >> 20);
			goto out;
		}
		tb_add(&b, (const char *)res.data.data, res.data.len);
		off += res.data.len;
		asp_arena_reset(a);
		if (res.eof || res.data.len == 0)
			break;
	}
	if (b.oom) {
		asp_error_set(err, ASP_E_INTERNAL, abs, "out of memory");
		goto out;
	}
	*len = b.len;
	*data = tb_take(&b);
	ok = *data != NULL;
out:
	tb_free(&b);
	asp_arena_free(a);
	return ok;
}

asp_status tools_write_file(asp_tools *t, const char *abs, const char *data, size_t len,
                            bool *created, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, abs, "out of memory");
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = abs;
	p.data.data = (const uint8_t *)data;
	p.data.len = len;
	p.mkdirs = true;
	p.atomic = true;
	asp_write_result res;
	asp_status st = asp_write(t->c, &p, &res, a, err);
	if (created)
		*created = st == ASP_OK && res.has_created && res.created;
	asp_arena_free(a);
	return st;
}

asp_status tools_exec_argv(asp_tools *t, const char *const *argv, size_t argc, const char *cwd,
                           asp_exec_result *res, asp_arena *a, asp_error *err)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = argc;
	p.cwd = cwd;
	return asp_exec(t->c, &p, res, a, err);
}

/* --- what the sandbox offers --------------------------------------------------------- */

bool tools_has_op(asp_tools *t, const char *op)
{
	asp_error err;
	if (tools_hello(t, &err) != ASP_OK)
		return false;
	for (size_t i = 0; i < t->n_ops; i++)
		if (!strcmp(t->ops[i], op))
			return true;
	return false;
}

/* --- cancellation ------------------------------------------------------------------------ */

asp_tools_cancel *asp_tools_cancel_new(void)
{
	asp_tools_cancel *k = calloc(1, sizeof *k);
	if (k)
		pthread_mutex_init(&k->mu, NULL);
	return k;
}

void asp_tools_cancel_fire(asp_tools_cancel *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->mu);
	k->fired = true;
	if (k->wake)
		k->wake(k->wake_user);
	pthread_mutex_unlock(&k->mu);
}

void asp_tools_cancel_free(asp_tools_cancel *k)
{
	if (!k)
		return;
	pthread_mutex_destroy(&k->mu);
	free(k);
}

bool tools_cancel_arm(asp_tools_cancel *k, void (*wake)(void *), void *user)
{
	if (!k)
		return true;
	pthread_mutex_lock(&k->mu);
	k->wake = wake;
	k->wake_user = user;
	bool ok = !k->fired;
	pthread_mutex_unlock(&k->mu);
	return ok;
}

bool tools_cancelled(asp_tools_cancel *k)
{
	if (!k)
		return false;
	pthread_mutex_lock(&k->mu);
	bool f = k->fired;
	pthread_mutex_unlock(&k->mu);
	return f;
}

/* --- characters ------------------------------------------------------------------------ */

size_t tools_chars(const char *s, size_t n, size_t max, size_t *cut)
{
	size_t chars = 0;
	*cut = n;
	for (size_t i = 0; i < n; i++)
		if (tools_char_start(s[i]) && chars++ == max)
			*cut = i;
	return chars;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	if (s[0] < 0x80)
		return 1;
	size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
	if (s[0] >= 0xF5 || len == 0 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0)))
		return 0;
	if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
		return 0;
	return len;
}

/* Texts go into JSON strings: invalid UTF-8 (binary output, a cut sequence) becomes U+FFFD. */
void tools_utf8_fix(tbuf *b)
{
	size_t i = 0;
	while (i < b->len && utf8_seq((const unsigned char *)b->p + i, b->len - i))
		i += utf8_seq((const unsigned char *)b->p + i, b->len - i);
	if (i == b->len)
		return;
	tbuf out = {0};
	tb_add(&out, b->p, i);
	while (i < b->len) {
		size_t n = utf8_seq((const unsigned char *)b->p + i, b->len - i);
		if (n) {
			tb_add(&out, b->p + i, n);
			i += n;
		} else {
			tb_add(&out, "\xEF\xBF\xBD", 3);
			i++;
		}
	}
	tb_free(b);
	*b = out;
}
