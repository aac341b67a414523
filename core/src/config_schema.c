/*
 * The .asp.json validator: walks the tables asp-sdkgen made from the schemas
 * (config_schema.h). Everything a message says about the schema (what was expected, the
 * known keys, the condition of an "if") comes from the tables; what is said here is only
 * about the document: where, which key, what it holds. asp/_config_check.py and
 * configCheck.ts are the same logic in the SDKs, step for step.
 */
#include "config_schema.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHOW_MAX 48 /* longest key or value quoted in a message, in bytes */

/* A bounded string builder: output past the end is dropped, never overrun. */
struct sbuf {
	char *p;
	size_t cap, len;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_add(struct sbuf *b, const char *fmt, ...)
{
	if (b->len + 1 >= b->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		b->len = (size_t)n < b->cap - b->len ? b->len + (size_t)n : b->cap - 1;
}

/* A string as JSON (quoted, escaped), cut at a character boundary when long. */
static void show_string(struct sbuf *b, const char *s)
{
	json_t *j = json_string(s);
	char *d = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
	json_decref(j);
	if (!d) {
		sb_add(b, "a string");
		return;
	}
	size_t n = strlen(d);
	if (n > SHOW_MAX) {
		n = SHOW_MAX;
		while (n > 1 && ((unsigned char)d[n] & 0xC0) == 0x80)
			n--;
		sb_add(b, "%.*s...\"", (int)n, d);
	} else {
		sb_add(b, "%s", d);
	}
	free(d);
}

/* What a value is, for "got ...": scalars as JSON, containers by kind. */
static void show_value(struct sbuf *b, json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_STRING: show_string(b, json_string_value(v)); break;
	case JSON_INTEGER: sb_add(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
	case JSON_REAL: {
		char *d = json_dumps(v, JSON_ENCODE_ANY);
		sb_add(b, "%s", d ? d : "a number");
		free(d);
		break;
	}
	case JSON_TRUE: sb_add(b, "true"); break;
	case JSON_FALSE: sb_add(b, "false"); break;
	case JSON_NULL: sb_add(b, "null"); break;
	case JSON_OBJECT: sb_add(b, "an object"); break;
	case JSON_ARRAY: sb_add(b, json_array_size(v) ? "an array" : "[]"); break;
	}
}

/* ---- the key path and messages ------------------------------------------------------------ */

void asp_cs_push_key(asp_cs_ctx *v, const char *key)
{
	if (v->depth < ASP_CS_MAX_STEPS)
		v->path[v->depth] = (asp_json_step){.key = key};
	v->depth++;
}

void asp_cs_push_index(asp_cs_ctx *v, size_t index)
{
	if (v->depth < ASP_CS_MAX_STEPS)
		v->path[v->depth] = (asp_json_step){.index = index};
	v->depth++;
}

void asp_cs_pop(asp_cs_ctx *v)
{
	v->depth--;
}

static bool plain_key(const char *k)
{
	if (!*k || strlen(k) > SHOW_MAX)
		return false;
	for (; *k; k++) {
		if (!(*k == '_' || *k == '-' || (*k >= 'a' && *k <= 'z') ||
		      (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9')))
			return false;
	}
	return true;
}

/* "ssh.port", "stdio.command[1]", "env[\"A B\"]". */
static void show_path(struct sbuf *b, const asp_cs_ctx *v)
{
	size_t n = v->depth < ASP_CS_MAX_STEPS ? v->depth : ASP_CS_MAX_STEPS;
	for (size_t i = 0; i < n; i++) {
		const char *k = v->path[i].key;
		if (!k) {
			sb_add(b, "[%zu]", v->path[i].index);
		} else if (plain_key(k)) {
			sb_add(b, "%s%s", i ? "." : "", k);
		} else {
			sb_add(b, "[");
			show_string(b, k);
			sb_add(b, "]");
		}
	}
}

/* The one place an invalid_argument message is made: "FILE:LINE:COL: PATH: what". */
asp_status asp_cs_fail(asp_cs_ctx *v, asp_cs_where w, const char *fmt, ...)
{
	if (v->quiet)
		return ASP_E_INVALID_ARGUMENT;
	size_t depth = v->depth < ASP_CS_MAX_STEPS ? v->depth : ASP_CS_MAX_STEPS;
	if (w == ASP_CS_AT_PARENT && depth > 0)
		depth--;
	unsigned line, col;
	asp_json_locate(v->text, v->len, v->path, depth,
	                w == ASP_CS_AT_KEY ? ASP_JSON_AT_KEY : ASP_JSON_AT_VALUE, &line, &col);
	char path[256], what[ASP_ERROR_MESSAGE_MAX];
	struct sbuf pb = {path, sizeof path, 0};
	path[0] = '\0';
	show_path(&pb, v);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return asp_error_set(v->err, ASP_E_INVALID_ARGUMENT, v->file_path, "%s:%u:%u: %s%s%s",
	                     v->file, line, col, path, *path ? ": " : "", what);
}

static asp_status fail_expected(asp_cs_ctx *v, const asp_cs_node *n, json_t *inst)
{
	if (v->quiet)
		return ASP_E_INVALID_ARGUMENT; /* skip the words nobody will read */
	char got[128];
	struct sbuf gb = {got, sizeof got, 0};
	got[0] = '\0';
	show_value(&gb, inst);
	return asp_cs_fail(v, ASP_CS_AT_VALUE, "expected %s, got %s", n->expected, got);
}

/* ---- the checks ------------------------------------------------------------------------------ */

static unsigned type_of(json_t *inst)
{
	switch (json_typeof(inst)) {
	case JSON_NULL: return ASP_CS_NULL;
	case JSON_TRUE:
	case JSON_FALSE: return ASP_CS_BOOLEAN;
	case JSON_INTEGER: return ASP_CS_INTEGER;
	case JSON_REAL: return 0; /* stricter than JSON Schema: 22.0 is not a port */
	case JSON_STRING: return ASP_CS_STRING;
	case JSON_ARRAY: return ASP_CS_ARRAY;
	case JSON_OBJECT: return ASP_CS_OBJECT;
	}
	return 0;
}

static bool equals(const asp_cs_value *a, json_t *inst)
{
	if (a->type != (int)type_of(inst))
		return false;
	switch (a->type) {
	case ASP_CS_BOOLEAN: return json_is_true(inst) == (a->n != 0);
	case ASP_CS_INTEGER: return json_integer_value(inst) == a->n;
	case ASP_CS_STRING: return strcmp(json_string_value(inst), a->s) == 0;
	default: return true; /* null */
	}
}

static bool matches(const char *pattern, const char *s)
{
	regex_t re;
	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		return false;
	bool ok = regexec(&re, s, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

/* The checks on the value itself, all described by the node's one "expected" phrase. */
static bool value_ok(const asp_cs_schema *s, const asp_cs_node *n, json_t *inst)
{
	if (n->types && !(n->types & type_of(inst)))
		return false;
	if (n->nvalues) {
		bool any = false;
		for (size_t i = 0; i < n->nvalues && !any; i++)
			any = equals(&n->values[i], inst);
		if (!any)
			return false;
	}
	if (json_is_integer(inst)) {
		json_int_t x = json_integer_value(inst);
		if ((n->has_min && x < n->min) || (n->has_max && x > n->max))
			return false;
	}
	if (json_is_string(inst)) {
		const char *str = json_string_value(inst);
		long long chars = 0;
		for (const char *p = str; *p; p++)
			chars +=
			    ((unsigned char)*p & 0xC0) != 0x80; /* JSON Schema counts characters */
		if ((n->has_min_len && chars < n->min_len) ||
		    (n->pattern && !matches(n->pattern, str)))
			return false;
	}
	if (json_is_array(inst) && n->has_min_items &&
	    (long long)json_array_size(inst) < n->min_items)
		return false;
	return !n->not_ || !value_ok(s, &s->nodes[n->not_], inst);
}

static const asp_cs_node *prop(const asp_cs_schema *s, const asp_cs_node *n, const char *key)
{
	for (size_t i = 0; i < n->nprops; i++) {
		if (strcmp(n->props[i].name, key) == 0)
			return &s->nodes[n->props[i].node];
	}
	return NULL;
}

static asp_status validate(asp_cs_ctx *v, const asp_cs_schema *s, const asp_cs_node *n,
                           json_t *inst);

static asp_status validate_object(asp_cs_ctx *v, const asp_cs_schema *s, const asp_cs_node *n,
                                  json_t *inst)
{
	const char *key;
	json_t *val;
	asp_status st = ASP_OK;
	/* Unknown keys first: a typo is the likeliest mistake, and the message lists the keys. */
	json_object_foreach(inst, key, val)
	{
		if (n->closed && !prop(s, n, key)) {
			asp_cs_push_key(v, key);
			st = asp_cs_fail(v, ASP_CS_AT_KEY, "unknown key (expected one of: %s)",
			                 n->keys ? n->keys : "");
			asp_cs_pop(v);
			return st;
		}
	}
	json_object_foreach(inst, key, val)
	{
		asp_cs_push_key(v, key);
		if (n->names) {
			json_t *k = json_string(key);
			if (!k)
				st = asp_error_set(v->err, ASP_E_INTERNAL, NULL, "out of memory");
			else if (!value_ok(s, &s->nodes[n->names], k))
				st = asp_cs_fail(v, ASP_CS_AT_KEY, "invalid key: expected %s",
				                 s->nodes[n->names].expected);
			json_decref(k);
		}
		const asp_cs_node *ps = prop(s, n, key);
		if (st == ASP_OK && ps)
			st = validate(v, s, ps, val);
		else if (st == ASP_OK && n->more)
			st = validate(v, s, &s->nodes[n->more], val);
		asp_cs_pop(v);
		if (st)
			return st;
	}
	for (size_t i = 0; i < n->nrequired; i++) {
		if (!json_object_get(inst, n->required[i])) {
			asp_cs_push_key(v, n->required[i]);
			st = asp_cs_fail(v, ASP_CS_AT_PARENT, "required key missing%s%s",
			                 v->cond && *v->cond ? " when " : "",
			                 v->cond ? v->cond : "");
			asp_cs_pop(v);
			return st;
		}
	}
	return ASP_OK;
}

static asp_status validate_array(asp_cs_ctx *v, const asp_cs_schema *s, const asp_cs_node *n,
                                 json_t *inst)
{
	for (size_t i = 0; i < json_array_size(inst); i++) {
		int sub = i < n->nprefix ? n->prefix[i] : n->items;
		if (!sub)
			continue;
		asp_cs_push_index(v, i);
		asp_status st = validate(v, s, &s->nodes[sub], json_array_get(inst, i));
		asp_cs_pop(v);
		if (st)
			return st;
	}
	return ASP_OK;
}

static asp_status validate(asp_cs_ctx *v, const asp_cs_schema *s, const asp_cs_node *n,
                           json_t *inst)
{
	if (n->never)
		return v->cond && *v->cond
		           ? asp_cs_fail(v, ASP_CS_AT_VALUE, "not allowed when %s", v->cond)
		           : asp_cs_fail(v, ASP_CS_AT_VALUE, "not allowed here");
	if (!value_ok(s, n, inst))
		return fail_expected(v, n, inst);
	asp_status st = ASP_OK;
	if (json_is_object(inst))
		st = validate_object(v, s, n, inst);
	else if (json_is_array(inst))
		st = validate_array(v, s, n, inst);
	for (size_t i = 0; st == ASP_OK && i < n->nall; i++)
		st = validate(v, s, &s->nodes[n->all[i]], inst);
	if (st == ASP_OK && n->if_) {
		bool quiet = v->quiet;
		v->quiet = true;
		bool holds = validate(v, s, &s->nodes[n->if_], inst) == ASP_OK;
		v->quiet = quiet;
		if (holds) {
			const char *saved = v->cond;
			v->cond = n->cond;
			st = validate(v, s, &s->nodes[n->then_], inst);
			v->cond = saved;
		}
	}
	return st;
}

asp_status asp_cs_validate(asp_cs_ctx *v, const asp_cs_schema *s, json_t *doc)
{
	return validate(v, s, &s->nodes[0], doc);
}

const asp_cs_node *asp_cs_walk(const asp_cs_schema *s, const char *dotted)
{
	const asp_cs_node *n = &s->nodes[0];
	while (n && *dotted) {
		char seg[64];
		size_t len = strcspn(dotted, ".");
		if (len >= sizeof seg)
			return NULL;
		memcpy(seg, dotted, len);
		seg[len] = '\0';
		n = prop(s, n, seg);
		dotted += len + (dotted[len] == '.');
	}
	return n;
}
