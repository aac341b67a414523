/* A streaming JSON writer for --json output: no tree, so big payloads are not copied. */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

void jw_init(jw *w, FILE *f)
{
	memset(w, 0, sizeof *w);
	w->f = f;
}

/* A comma before every value but the first of its container. */
static void sep(jw *w)
{
	if (w->need_comma[w->depth])
		fputc(',', w->f);
	w->need_comma[w->depth] = true;
}

static void open_c(jw *w, char ch)
{
	sep(w);
	fputc(ch, w->f);
	if (w->depth + 1 < (int)(sizeof w->need_comma / sizeof w->need_comma[0]))
		w->depth++;
	w->need_comma[w->depth] = false;
}

static void close_c(jw *w, char ch)
{
	fputc(ch, w->f);
	if (w->depth > 0)
		w->depth--;
}

void jw_obj_begin(jw *w)
{
	open_c(w, '{');
}

void jw_obj_end(jw *w)
{
	close_c(w, '}');
}

void jw_arr_begin(jw *w)
{
	open_c(w, '[');
}

void jw_arr_end(jw *w)
{
	close_c(w, ']');
}

/* Escapes valid UTF-8 text; control characters become \uXXXX. */
static void put_escaped(FILE *f, const uint8_t *s, size_t len)
{
	fputc('"', f);
	size_t run = 0; /* bytes of s[i - run, i) that need no escaping */
	for (size_t i = 0; i < len; i++) {
		uint8_t ch = s[i];
		if (ch >= 0x20 && ch != '"' && ch != '\\') {
			run++;
			continue;
		}
		fwrite(s + i - run, 1, run, f);
		run = 0;
		switch (ch) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		default: fprintf(f, "\\u%04x", ch); break;
		}
	}
	fwrite(s + len - run, 1, run, f);
	fputc('"', f);
}

void jw_put_string(FILE *f, const char *s)
{
	put_escaped(f, (const uint8_t *)s, strlen(s));
}

void jw_key(jw *w, const char *key)
{
	sep(w);
	put_escaped(w->f, (const uint8_t *)key, strlen(key));
	fputc(':', w->f);
	w->need_comma[w->depth] = false; /* the value that follows takes no comma */
}

/* The value after a key resets need_comma; restore it so the next key gets one. */
static void value_done(jw *w)
{
	w->need_comma[w->depth] = true;
}

void jw_str(jw *w, const char *s)
{
	if (!s) {
		jw_null(w);
		return;
	}
	sep(w);
	size_t len = strlen(s);
	if (cli_utf8_valid((const uint8_t *)s, len)) {
		put_escaped(w->f, (const uint8_t *)s, len);
	} else {
		/* Not text: keep the string JSON-valid; exact bytes go through jw_bytes_field. */
		fputc('"', w->f);
		for (size_t i = 0; i < len; i++) {
			uint8_t ch = (uint8_t)s[i];
			if (ch >= 0x80 || ch < 0x20 || ch == '"' || ch == '\\')
				fprintf(w->f, "\\u%04x", ch);
			else
				fputc(ch, w->f);
		}
		fputc('"', w->f);
	}
	value_done(w);
}

void jw_uint(jw *w, uint64_t v)
{
	sep(w);
	fprintf(w->f, "%" PRIu64, v);
	value_done(w);
}

void jw_int(jw *w, int64_t v)
{
	sep(w);
	fprintf(w->f, "%" PRId64, v);
	value_done(w);
}

void jw_double(jw *w, double v)
{
	sep(w);
	fprintf(w->f, "%.3f", v);
	value_done(w);
}

void jw_bool(jw *w, bool v)
{
	sep(w);
	fputs(v ? "true" : "false", w->f);
	value_done(w);
}

void jw_null(jw *w)
{
	sep(w);
	fputs("null", w->f);
	value_done(w);
}

void jw_end(jw *w)
{
	fputc('\n', w->f);
}

static void put_base64(FILE *f, const uint8_t *d, size_t len)
{
	static const char tab[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char out[4096];
	size_t o = 0;
	fputc('"', f);
	size_t i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
		out[o++] = tab[v >> 18];
		out[o++] = tab[(v >> 12) & 63];
		out[o++] = tab[(v >> 6) & 63];
		out[o++] = tab[v & 63];
		if (o == sizeof out) {
			fwrite(out, 1, o, f);
			o = 0;
		}
	}
	fwrite(out, 1, o, f);
	if (len - i == 1) {
		uint32_t v = (uint32_t)d[i] << 16;
		fprintf(f, "%c%c==", tab[v >> 18], tab[(v >> 12) & 63]);
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8;
		fprintf(f, "%c%c%c=", tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63]);
	}
	fputc('"', f);
}

void jw_bytes_field(jw *w, const char *key, const uint8_t *data, size_t len)
{
	static const uint8_t empty[1];
	if (!data)
		data = empty;
	jw_key(w, key);
	sep(w);
	if (cli_utf8_valid(data, len)) {
		put_escaped(w->f, data, len);
		value_done(w);
		return;
	}
	put_base64(w->f, data, len);
	value_done(w);
	char enc[128];
	snprintf(enc, sizeof enc, "%s_encoding", key);
	jw_key(w, enc);
	jw_str(w, "base64");
}

bool cli_utf8_valid(const uint8_t *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		uint8_t c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t n;
		uint32_t cp, min;
		if ((c & 0xe0) == 0xc0) {
			n = 1, cp = c & 0x1f, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			n = 2, cp = c & 0x0f, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			n = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return false;
		}
		if (len - i <= n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}
