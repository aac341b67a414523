/* glob's patterns (glob_match.h), shared by glob, grep's filter and tree_read's exclude. */
#include "glob_match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether some component of p starts with a literal '.' (but "." and ".."). */
static bool names_hidden(const char *p)
{
	for (const char *c = p; c; c = strchr(c, '/'), c = c ? c + 1 : NULL)
		if (c[0] == '.' && c[1] && c[1] != '/' && !(c[1] == '.' && (!c[2] || c[2] == '/')))
			return true;
	return false;
}

/* Whether some component of a relative path starts with a dot. */
static bool rel_hidden(const char *rel)
{
	for (const char *c = rel; c; c = strchr(c, '/'), c = c ? c + 1 : NULL)
		if (c[0] == '.')
			return true;
	return false;
}

void patset_free(patset *ps)
{
	for (size_t i = 0; i < ps->n; i++)
		free(ps->pat[i]);
	ps->n = 0;
}

/* Expands the first {a,b,...} of `p` (recursively); -1 too many or out of memory. */
static int expand(patset *ps, const char *p)
{
	const char *open = NULL;
	int depth = 0;
	for (const char *q = p; *q; q++) {
		if (*q == '{' && depth++ == 0)
			open = q;
		else if (*q == '}' && depth > 0 && --depth == 0) {
			size_t pre = (size_t)(open - p);
			const char *alt = open + 1;
			int d = 0;
			for (const char *r = alt;; r++) {
				if (*r == '{')
					d++;
				else if (*r == '}' && d > 0)
					d--;
				else if ((*r == ',' && d == 0) || r == q) {
					size_t alen = (size_t)(r - alt), post = strlen(q + 1);
					char *s = malloc(pre + alen + post + 1);
					if (!s)
						return -1;
					memcpy(s, p, pre);
					memcpy(s + pre, alt, alen);
					memcpy(s + pre + alen, q + 1, post + 1);
					int rc = expand(ps, s);
					free(s);
					if (rc < 0)
						return -1;
					alt = r + 1;
					if (r == q)
						break;
				}
			}
			return 0;
		}
	}
	if (ps->n == MAX_PATTERNS)
		return -1;
	/* no '/' in it: the name at any depth */
	size_t len = strlen(p);
	bool any = !strchr(p, '/');
	char *s = malloc(len + 4);
	if (!s)
		return -1;
	snprintf(s, len + 4, "%s%s", any ? "**/" : "", p);
	ps->hid[ps->n] = names_hidden(p);
	ps->any_hid |= ps->hid[ps->n];
	ps->pat[ps->n++] = s;
	return 0;
}

/* [...] at *pp against c; advances *pp past the class. */
static bool match_class(const char **pp, char c)
{
	const char *p = *pp + 1;
	bool neg = *p == '!' || *p == '^', hit = false;
	if (neg)
		p++;
	const char *first = p;
	while (*p && (*p != ']' || p == first)) {
		if (p[1] == '-' && p[2] && p[2] != ']') {
			if ((unsigned char)c >= (unsigned char)p[0] &&
			    (unsigned char)c <= (unsigned char)p[2])
				hit = true;
			p += 3;
		} else {
			if (*p == c)
				hit = true;
			p++;
		}
	}
	if (!*p) { /* no closing bracket: a literal '[' */
		*pp += 1;
		return c == '[';
	}
	*pp = p + 1;
	return hit != neg && c != '/';
}

static bool gmatch(const char *base, const char *p, const char *s)
{
	for (;;) {
		if (p[0] == '*' && p[1] == '*' && (p == base || p[-1] == '/') &&
		    (p[2] == '/' || p[2] == '\0')) {
			if (p[2] == '\0')
				return true;
			for (const char *t = s;;) {
				if (gmatch(base, p + 3, t))
					return true;
				t = strchr(t, '/');
				if (!t)
					return false;
				t++;
			}
		}
		switch (*p) {
		case '\0': return *s == '\0';
		case '*':
			while (*p == '*')
				p++;
			for (;;) {
				if (gmatch(base, p, s))
					return true;
				if (!*s || *s == '/')
					return false;
				s++;
			}
		case '?':
			if (!*s || *s == '/')
				return false;
			p++, s++;
			break;
		case '[':
			if (!*s || !match_class(&p, *s))
				return false;
			s++;
			break;
		default:
			if (*p != *s)
				return false;
			p++, s++;
		}
	}
}

bool patset_match(const patset *ps, const char *rel)
{
	for (size_t i = 0; i < ps->n; i++)
		if (gmatch(ps->pat[i], ps->pat[i], rel))
			return true;
	return false;
}

/* grep's filter: a path with a hidden name passes only a pattern that names one. */
bool patset_match_grep(const patset *ps, const char *rel)
{
	bool hidden = ps->any_hid && rel_hidden(rel);
	for (size_t i = 0; i < ps->n; i++)
		if ((!hidden || ps->hid[i]) && gmatch(ps->pat[i], ps->pat[i], rel))
			return true;
	return false;
}

asp_status patset_init(patset *ps, const char *op, const char *pattern, asp_error *err)
{
	ps->n = 0;
	ps->any_hid = false;
	if (expand(ps, pattern) < 0) {
		patset_free(ps);
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: the pattern expands to more than %d alternatives", op,
		                     MAX_PATTERNS);
	}
	return ASP_OK;
}
