/*
 * A JSON scanner just big enough to find where a key path lives in the text, so config
 * errors can say line and column. It only skips over values (iteratively, so nesting
 * depth costs no stack) and decodes keys to compare them.
 */
#include "config_locate.h"

#include <stdint.h>
#include <string.h>

#define NOT_FOUND SIZE_MAX

static size_t skip_ws(const char *t, size_t len, size_t p)
{
	while (p < len && (t[p] == ' ' || t[p] == '\t' || t[p] == '\n' || t[p] == '\r'))
		p++;
	return p;
}

/* `p` is at the opening quote; returns the offset after the closing one. */
static size_t skip_string(const char *t, size_t len, size_t p)
{
	for (p++; p < len; p++) {
		if (t[p] == '\\')
			p++;
		else if (t[p] == '"')
			return p + 1;
	}
	return len;
}

static size_t skip_value(const char *t, size_t len, size_t p)
{
	if (p >= len)
		return len;
	if (t[p] == '"')
		return skip_string(t, len, p);
	if (t[p] == '{' || t[p] == '[') {
		size_t depth = 0;
		while (p < len) {
			char c = t[p];
			if (c == '"') {
				p = skip_string(t, len, p);
				continue;
			}
			if (c == '{' || c == '[')
				depth++;
			else if ((c == '}' || c == ']') && --depth == 0)
				return p + 1;
			p++;
		}
		return len;
	}
	while (p < len && t[p] != ',' && t[p] != ']' && t[p] != '}' && t[p] != ' ' &&
	       t[p] != '\t' && t[p] != '\n' && t[p] != '\r')
		p++;
	return p;
}

static int hex4(const char *t, size_t len, size_t p, uint32_t *out)
{
	if (p > len || len - p < 4)
		return 0;
	uint32_t v = 0;
	for (size_t i = 0; i < 4; i++) {
		char c = t[p + i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return 0;
	}
	*out = v;
	return 1;
}

static size_t utf8_encode(uint32_t cp, unsigned char *b)
{
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | cp >> 6);
		b[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		b[0] = (unsigned char)(0xE0 | cp >> 12);
		b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	b[0] = (unsigned char)(0xF0 | cp >> 18);
	b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
	b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
	b[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Whether the string token at `p` (its opening quote) decodes to exactly `key`. */
static int string_equals(const char *t, size_t len, size_t p, const char *key)
{
	size_t k = 0, klen = strlen(key);
	for (p++; p < len && t[p] != '"';) {
		unsigned char b[4];
		size_t n = 1;
		if (t[p] != '\\') {
			b[0] = (unsigned char)t[p++];
		} else if (p + 1 >= len) {
			return 0;
		} else {
			char e = t[p + 1];
			p += 2;
			switch (e) {
			case 'b': b[0] = '\b'; break;
			case 'f': b[0] = '\f'; break;
			case 'n': b[0] = '\n'; break;
			case 'r': b[0] = '\r'; break;
			case 't': b[0] = '\t'; break;
			case 'u': {
				uint32_t cp, lo;
				if (!hex4(t, len, p, &cp))
					return 0;
				p += 4;
				if (cp >= 0xD800 && cp < 0xDC00 && p + 1 < len && t[p] == '\\' &&
				    t[p + 1] == 'u' && hex4(t, len, p + 2, &lo) && lo >= 0xDC00 &&
				    lo < 0xE000) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					p += 6;
				}
				n = utf8_encode(cp, b);
				break;
			}
			default: b[0] = (unsigned char)e; break; /* \" \\ \/ */
			}
		}
		if (n > klen - k || memcmp(key + k, b, n) != 0)
			return 0;
		k += n;
	}
	return k == klen;
}

/* `p` is at '{': the offset of the member's value, with its key's offset in *key_at. */
static size_t find_member(const char *t, size_t len, size_t p, const char *key, size_t *key_at)
{
	for (p++;;) {
		p = skip_ws(t, len, p);
		if (p >= len || t[p] != '"')
			return NOT_FOUND;
		size_t k = p;
		int match = string_equals(t, len, p, key);
		p = skip_ws(t, len, skip_string(t, len, p));
		if (p >= len || t[p] != ':')
			return NOT_FOUND;
		p = skip_ws(t, len, p + 1);
		if (match) {
			*key_at = k;
			return p;
		}
		p = skip_ws(t, len, skip_value(t, len, p));
		if (p >= len || t[p] != ',')
			return NOT_FOUND;
		p++;
	}
}

/* `p` is at '[': the offset of element `index`. */
static size_t find_element(const char *t, size_t len, size_t p, size_t index)
{
	for (size_t i = 0, q = p + 1;; i++) {
		q = skip_ws(t, len, q);
		if (q >= len || t[q] == ']')
			return NOT_FOUND;
		if (i == index)
			return q;
		q = skip_ws(t, len, skip_value(t, len, q));
		if (q >= len || t[q] != ',')
			return NOT_FOUND;
		q++;
	}
}

bool asp_json_locate(const char *text, size_t len, const asp_json_step *path, size_t depth,
                     asp_json_locate_what what, unsigned *line, unsigned *col)
{
	size_t p = skip_ws(text, len, 0), key_at = NOT_FOUND;
	bool found = true;
	for (size_t i = 0; i < depth && found; i++) {
		size_t next = NOT_FOUND;
		if (p < len && path[i].key && text[p] == '{')
			next = find_member(text, len, p, path[i].key, &key_at);
		else if (p < len && !path[i].key && text[p] == '[')
			next = find_element(text, len, p, path[i].index);
		if (next == NOT_FOUND)
			found = false;
		else
			p = next;
	}
	if (found && what == ASP_JSON_AT_KEY && depth > 0 && path[depth - 1].key)
		p = key_at;
	if (p > len)
		p = len;
	unsigned l = 1, c = 1;
	for (size_t q = 0; q < p; q++) {
		if (text[q] == '\n') {
			l++;
			c = 1;
		} else if (((unsigned char)text[q] & 0xC0) != 0x80) {
			c++; /* count characters, not UTF-8 continuation bytes */
		}
	}
	*line = l;
	*col = c;
	return found;
}
