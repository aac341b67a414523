/*
 * The .asp.json rules as tables: each schema (spec/asp.schema.json, spec/asp.v0.schema.json)
 * becomes a flat list of nodes, node 0 the whole file, children after their parent. A node
 * holds what its schema asserts (types, values, range, length, pattern, not, properties,
 * required, items, allOf, if/then) and the texts a message quotes: "expected" (everything
 * it accepts, in words), "keys" (the keys of a closed object) and "cond" (an "if" in
 * words). The validators of the three languages only walk the nodes, so a key added to
 * the schema is checked everywhere without touching them, and their messages agree word for
 * word because the words are made here.
 *
 * The subset of JSON Schema implemented is exactly what `keywords` lists; anything else in
 * a schema stops the build, naming the place, so no rule can be silently ignored. A
 * "$ref" (a JSON pointer into the same schema) is compiled in place, so the validators
 * never see one; a "not" may hold only assertions on the value itself (no properties,
 * items or conditions), which the validators check with the value's other assertions.
 * A node's "title", when it has one, is its "expected" text: the words for what a pattern
 * means.
 */
#include "emit_config.h"

#include <jansson.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SHOW_MAX 48 /* longest string quoted in a message, in bytes (as the validators) */

enum {
	T_NULL = 1,
	T_BOOLEAN = 2,
	T_INTEGER = 4,
	T_STRING = 8,
	T_ARRAY = 16,
	T_OBJECT = 32,
};

static const char *const type_names[] = {"null", "boolean", "integer", "string", "array", "object"};

/* Annotations (no effect on validation; "default" fills the views) and assertions. */
static const char *const keywords[] = {
    "$schema",  "$comment",      "title",       "description", "default",    "examples",
    "type",     "const",         "enum",        "minimum",     "maximum",    "minLength",
    "pattern",  "minItems",      "prefixItems", "items",       "properties", "additionalProperties",
    "required", "propertyNames", "allOf",       "if",          "then",       "not",
    "$ref"};

/* One compiled schema node. Child indexes are 0 when absent: node 0 is nobody's child. */
typedef struct cnode {
	unsigned types; /* T_* bits; 0: any type */
	bool never;     /* the schema `false` */
	json_t *values; /* const (one) or enum values, borrowed; NULL: any */
	json_t *min, *max, *min_len, *min_items, *pattern, *dflt, *required; /* borrowed */
	json_t *props;                                                       /* borrowed */
	int *prop_nodes;
	bool closed; /* additionalProperties: false */
	int more, names, items, if_, then_, not_;
	int *prefix, *all;
	size_t nprefix, nall;
	char *expected, *keys, *cond;
} cnode;

typedef struct compiler {
	const char *file; /* for messages: spec/asp.schema.json */
	json_t *root;     /* the whole schema, for "$ref" */
	int ref_depth;    /* "$ref"s being followed, against a loop */
	cnode *nodes;
	size_t n, cap;
} compiler;

/* ---- words -------------------------------------------------------------------------------- */

/* A growing string. */
typedef struct sbuf {
	char *p;
	size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_add(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (b->len + (size_t)n + 1 > b->cap) {
		size_t cap = (b->len + (size_t)n + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			fputs("asp-sdkgen: out of memory\n", stderr);
			exit(1);
		}
		b->p = p;
		b->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

static char *sb_take(sbuf *b)
{
	if (!b->p)
		sb_add(b, "%s", "");
	return b->p;
}

/* A value as a message shows it: scalars as JSON (long strings cut), containers by kind. */
static void show_value(sbuf *b, json_t *v)
{
	char *d = NULL;
	switch (json_typeof(v)) {
	case JSON_STRING:
		d = json_dumps(v, JSON_ENCODE_ANY);
		if (d && strlen(d) > SHOW_MAX) {
			size_t n = SHOW_MAX;
			while (n > 1 && ((unsigned char)d[n] & 0xC0) == 0x80)
				n--;
			sb_add(b, "%.*s...\"", (int)n, d);
		} else {
			sb_add(b, "%s", d ? d : "a string");
		}
		break;
	case JSON_INTEGER: sb_add(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
	case JSON_REAL:
		d = json_dumps(v, JSON_ENCODE_ANY);
		sb_add(b, "%s", d ? d : "a number");
		break;
	case JSON_TRUE: sb_add(b, "true"); break;
	case JSON_FALSE: sb_add(b, "false"); break;
	case JSON_NULL: sb_add(b, "null"); break;
	case JSON_OBJECT: sb_add(b, "an object"); break;
	case JSON_ARRAY: sb_add(b, json_array_size(v) ? "an array" : "[]"); break;
	}
	free(d);
}

static const char *plural(const char *type)
{
	static const char *const names[][2] = {
	    {"string", "strings"}, {"integer", "integers"}, {"boolean", "booleans"},
	    {"object", "objects"}, {"array", "arrays"},     {"null", "nulls"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcmp(type, names[i][0]) == 0)
			return names[i][1];
	}
	return "values";
}

/* One JSON type as the schema constrains it: "an integer from 1 to 65535". */
static void describe_type(sbuf *b, json_t *s, const char *type)
{
	json_t *lo = json_object_get(s, "minimum"), *hi = json_object_get(s, "maximum");
	json_t *min_len = json_object_get(s, "minLength"), *pattern = json_object_get(s, "pattern");
	json_t *min_items = json_object_get(s, "minItems"), *items = json_object_get(s, "items");
	if (strcmp(type, "null") == 0) {
		sb_add(b, "null");
	} else if (strcmp(type, "boolean") == 0) {
		sb_add(b, "true or false");
	} else if (strcmp(type, "integer") == 0) {
		sb_add(b, "an integer");
		if (lo && hi)
			sb_add(b, " from %" JSON_INTEGER_FORMAT " to %" JSON_INTEGER_FORMAT,
			       json_integer_value(lo), json_integer_value(hi));
		else if (lo)
			sb_add(b, " >= %" JSON_INTEGER_FORMAT, json_integer_value(lo));
		else if (hi)
			sb_add(b, " <= %" JSON_INTEGER_FORMAT, json_integer_value(hi));
	} else if (strcmp(type, "string") == 0) {
		json_int_t n = json_integer_value(min_len);
		if (pattern)
			sb_add(b, "a string matching %s", json_string_value(pattern));
		else if (n == 1)
			sb_add(b, "a non-empty string");
		else if (n > 1)
			sb_add(b, "a string of at least %" JSON_INTEGER_FORMAT " characters", n);
		else
			sb_add(b, "a string");
	} else if (strcmp(type, "array") == 0) {
		json_int_t n = json_integer_value(min_items);
		if (n == 1)
			sb_add(b, "a non-empty array");
		else if (n > 1)
			sb_add(b, "an array of at least %" JSON_INTEGER_FORMAT " items", n);
		else
			sb_add(b, "an array");
		if (json_is_string(json_object_get(items, "type")))
			sb_add(b, " of %s",
			       plural(json_string_value(json_object_get(items, "type"))));
	} else {
		sb_add(b, "an object");
	}
}

/* Everything `s` accepts, in words, for "expected ..." (its title, when it has one). */
static char *describe(json_t *s, bool titled)
{
	sbuf b = {0};
	json_t *c = json_object_get(s, "const"), *e = json_object_get(s, "enum");
	json_t *type = json_object_get(s, "type"), *title = json_object_get(s, "title");
	if (titled && json_is_string(title)) {
		sb_add(&b, "%s", json_string_value(title));
	} else if (c) {
		show_value(&b, c);
	} else if (e) {
		sb_add(&b, "one of ");
		for (size_t i = 0; i < json_array_size(e); i++) {
			sb_add(&b, "%s", i ? ", " : "");
			show_value(&b, json_array_get(e, i));
		}
	} else if (json_is_string(type)) {
		describe_type(&b, s, json_string_value(type));
	} else if (json_is_array(type)) {
		for (size_t i = 0; i < json_array_size(type); i++) {
			sb_add(&b, "%s", i ? " or " : "");
			describe_type(&b, s, json_string_value(json_array_get(type, i)));
		}
	} else if (json_object_get(s, "pattern") || json_object_get(s, "minLength")) {
		describe_type(&b, s, "string"); /* propertyNames: keys are strings anyway */
	} else {
		sb_add(&b, "any value");
	}
	return sb_take(&b);
}

/* An "if" in words, for messages from its "then": `transport is "ssh"`. */
static char *describe_condition(json_t *cond)
{
	sbuf b = {0};
	json_t *props = json_object_get(cond, "properties");
	const char *k;
	json_t *p;
	json_object_foreach(props, k, p)
	{
		json_t *c = json_object_get(p, "const");
		if (json_is_false(p))
			sb_add(&b, "%s%s is absent", b.len ? " and " : "", k);
		if (!c)
			continue;
		sb_add(&b, "%s%s is ", b.len ? " and " : "", k);
		show_value(&b, c);
	}
	/* A required key the "if" does not also pin to a value: its presence is the condition. */
	json_t *req = json_object_get(cond, "required");
	for (size_t i = 0; i < json_array_size(req); i++) {
		const char *name = json_string_value(json_array_get(req, i));
		if (name && !json_object_get(json_object_get(props, name), "const"))
			sb_add(&b, "%s%s is given", b.len ? " and " : "", name);
	}
	return sb_take(&b);
}

/* ---- compiling -------------------------------------------------------------------------- */

static int bug(const compiler *c, const char *ptr, const char *what, const char *name)
{
	fprintf(stderr,
	        "asp-sdkgen: %s at %s: %s%s; the .asp.json validators (sdkgen/emit_config.c and "
	        "the three that read its tables) do not implement it\n",
	        c->file, *ptr ? ptr : "/", what, name ? name : "");
	return -1;
}

static bool in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(s, list[i]) == 0)
			return true;
	}
	return false;
}

static unsigned type_bit(json_t *t)
{
	for (size_t i = 0; json_is_string(t) && i < sizeof type_names / sizeof *type_names; i++) {
		if (strcmp(json_string_value(t), type_names[i]) == 0)
			return 1u << i;
	}
	return 0;
}

static bool scalar(json_t *v)
{
	return json_is_null(v) || json_is_boolean(v) || json_is_integer(v) || json_is_string(v);
}

static int compile(compiler *c, json_t *s, const char *ptr);

static int compile_at(compiler *c, json_t *s, const char *ptr, const char *kw, const char *name)
{
	char sub[512];
	if (name)
		snprintf(sub, sizeof sub, "%s/%s/%s", ptr, kw, name);
	else
		snprintf(sub, sizeof sub, "%s/%s", ptr, kw);
	return compile(c, s, sub);
}

/* The schema a "$ref" points at ("#/properties/ssh/properties/port"), or NULL. */
static json_t *resolve_ref(const compiler *c, const char *ref)
{
	if (ref[0] != '#')
		return NULL;
	json_t *at = c->root;
	for (const char *p = ref + 1; at && *p == '/';) {
		p++;
		size_t n = strcspn(p, "/");
		char seg[128];
		if (n >= sizeof seg || memchr(p, '~', n))
			return NULL; /* escaped segments: not needed by our schemas */
		memcpy(seg, p, n);
		seg[n] = '\0';
		at = json_object_get(at, seg);
		p += n;
	}
	return at;
}

/* A "$ref": its target compiled in place (only annotations may stand beside it). */
static int compile_ref(compiler *c, json_t *s, const char *ptr)
{
	const char *k;
	json_t *v;
	json_object_foreach(s, k, v)
	{
		if (strcmp(k, "$ref") && strcmp(k, "description") && strcmp(k, "$comment"))
			return bug(c, ptr, "a keyword beside $ref: ", k);
	}
	const char *ref = json_string_value(json_object_get(s, "$ref"));
	json_t *target = ref ? resolve_ref(c, ref) : NULL;
	if (!target)
		return bug(c, ptr, "a $ref that does not resolve: ", ref ? ref : "(not a string)");
	if (c->ref_depth >= 8)
		return bug(c, ptr, "$refs nested too deep (a loop?) at ", ref);
	c->ref_depth++;
	int me = compile(c, target, ref + 1);
	c->ref_depth--;
	return me;
}

/* What a "not" may hold: assertions on the value alone, which value_ok checks. */
static bool value_only(json_t *s)
{
	static const char *const ok[] = {"description", "$comment", "title",   "type",
	                                 "const",       "enum",     "minimum", "maximum",
	                                 "minLength",   "pattern",  "minItems"};
	const char *k;
	json_t *v;
	json_object_foreach(s, k, v)
	{
		if (!in_list(k, ok, sizeof ok / sizeof *ok))
			return false;
	}
	return json_is_object(s);
}

/* Compiles `s` into a new node; returns its index, or -1 after saying why. */
static int compile(compiler *c, json_t *s, const char *ptr)
{
	if (json_is_object(s) && json_object_get(s, "$ref"))
		return compile_ref(c, s, ptr);
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 32;
		cnode *p = realloc(c->nodes, cap * sizeof *p);
		if (!p)
			return bug(c, ptr, "out of memory", NULL);
		c->nodes = p;
		c->cap = cap;
	}
	int me = (int)c->n++;
	cnode n = {0};
	c->nodes[me] = n;
	if (json_is_boolean(s)) {
		c->nodes[me].never = json_is_false(s);
		sbuf any = {0};
		sb_add(&any, "any value");
		c->nodes[me].expected = sb_take(&any);
		return me;
	}
	if (!json_is_object(s))
		return bug(c, ptr, "a schema must be an object or a boolean", NULL);
	const char *k;
	json_t *v;
	json_object_foreach(s, k, v)
	{
		if (!in_list(k, keywords, sizeof keywords / sizeof *keywords))
			return bug(c, ptr, "unsupported keyword ", k);
	}
	json_t *type = json_object_get(s, "type");
	if (json_is_string(type)) {
		if (!(n.types = type_bit(type)))
			return bug(c, ptr, "unknown type ", json_string_value(type));
	} else if (json_is_array(type) && json_array_size(type)) {
		for (size_t i = 0; i < json_array_size(type); i++) {
			unsigned bit = type_bit(json_array_get(type, i));
			if (!bit)
				return bug(c, ptr, "malformed or unsupported value of ", "type");
			n.types |= bit;
		}
	} else if (type) {
		return bug(c, ptr, "malformed or unsupported value of ", "type");
	}
	json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
	if (cst && en)
		return bug(c, ptr, "both const and enum", NULL);
	if (cst) {
		n.values = json_array();
		json_array_append(n.values, cst);
	} else if (en) {
		if (!json_is_array(en) || !json_array_size(en))
			return bug(c, ptr, "malformed or unsupported value of ", "enum");
		n.values = json_incref(en);
	}
	for (size_t i = 0; n.values && i < json_array_size(n.values); i++) {
		if (!scalar(json_array_get(n.values, i)))
			return bug(c, ptr, "a const or enum value that is not a scalar", NULL);
	}
	static const char *const ints[] = {"minimum", "maximum", "minLength", "minItems"};
	json_t **slots[] = {&n.min, &n.max, &n.min_len, &n.min_items};
	for (size_t i = 0; i < 4; i++) {
		json_t *x = json_object_get(s, ints[i]);
		if (x && (!json_is_integer(x) || (i >= 2 && json_integer_value(x) < 0)))
			return bug(c, ptr, "malformed or unsupported value of ", ints[i]);
		*slots[i] = x;
	}
	if ((n.pattern = json_object_get(s, "pattern"))) {
		regex_t re;
		if (!json_is_string(n.pattern) ||
		    regcomp(&re, json_string_value(n.pattern), REG_EXTENDED | REG_NOSUB))
			return bug(c, ptr, "malformed or unsupported value of ", "pattern");
		regfree(&re);
	}
	n.dflt = json_object_get(s, "default");
	if (n.dflt && !scalar(n.dflt))
		return bug(c, ptr, "a default that is not a scalar", NULL);
	if ((n.required = json_object_get(s, "required"))) {
		bool bad = !json_is_array(n.required);
		for (size_t i = 0; !bad && i < json_array_size(n.required); i++)
			bad = !json_is_string(json_array_get(n.required, i));
		if (bad)
			return bug(c, ptr, "malformed or unsupported value of ", "required");
	}
	json_t *more = json_object_get(s, "additionalProperties");
	n.closed = json_is_false(more);
	n.expected = describe(s, *ptr != '\0'); /* the root's title names the file */
	if ((n.props = json_object_get(s, "properties"))) {
		if (!json_is_object(n.props))
			return bug(c, ptr, "malformed or unsupported value of ", "properties");
		sbuf keys = {0};
		n.prop_nodes = calloc(json_object_size(n.props) + 1, sizeof *n.prop_nodes);
		size_t i = 0;
		json_object_foreach(n.props, k, v)
		{
			sb_add(&keys, "%s%s", keys.len ? ", " : "", k);
			if ((n.prop_nodes[i++] = compile_at(c, v, ptr, "properties", k)) < 0)
				return -1;
		}
		n.keys = sb_take(&keys);
	}
	if (more && !n.closed &&
	    (n.more = compile_at(c, more, ptr, "additionalProperties", NULL)) < 0)
		return -1;
	if ((v = json_object_get(s, "propertyNames")) &&
	    (n.names = compile_at(c, v, ptr, "propertyNames", NULL)) < 0)
		return -1;
	if ((v = json_object_get(s, "items")) &&
	    (n.items = compile_at(c, v, ptr, "items", NULL)) < 0)
		return -1;
	if ((v = json_object_get(s, "not"))) {
		if (!value_only(v))
			return bug(c, ptr, "a not with more than assertions on the value", NULL);
		if ((n.not_ = compile_at(c, v, ptr, "not", NULL)) < 0)
			return -1;
	}
	static const char *const lists[] = {"prefixItems", "allOf"};
	int **outs[] = {&n.prefix, &n.all};
	size_t *counts[] = {&n.nprefix, &n.nall};
	for (size_t l = 0; l < 2; l++) {
		json_t *arr = json_object_get(s, lists[l]);
		if (!arr)
			continue;
		if (!json_is_array(arr))
			return bug(c, ptr, "malformed or unsupported value of ", lists[l]);
		*outs[l] = calloc(json_array_size(arr) + 1, sizeof **outs[l]);
		*counts[l] = json_array_size(arr);
		for (size_t i = 0; i < json_array_size(arr); i++) {
			char idx[24];
			snprintf(idx, sizeof idx, "%zu", i);
			if (((*outs[l])[i] =
			         compile_at(c, json_array_get(arr, i), ptr, lists[l], idx)) < 0)
				return -1;
		}
	}
	json_t *if_s = json_object_get(s, "if"), *then_s = json_object_get(s, "then");
	if (!if_s != !then_s)
		return bug(c, ptr, "an if without a then, or a then without an if", NULL);
	if (if_s) {
		if ((n.if_ = compile_at(c, if_s, ptr, "if", NULL)) < 0 ||
		    (n.then_ = compile_at(c, then_s, ptr, "then", NULL)) < 0)
			return -1;
		n.cond = describe_condition(if_s);
	}
	c->nodes[me] = n;
	return me;
}

static void free_compiler(compiler *c)
{
	for (size_t i = 0; i < c->n; i++) {
		cnode *n = &c->nodes[i];
		json_decref(n->values);
		free(n->prop_nodes);
		free(n->prefix);
		free(n->all);
		free(n->expected);
		free(n->keys);
		free(n->cond);
	}
	free(c->nodes);
}

/* Parses and compiles a schema text; `file` names it in messages. */
static int compile_text(compiler *c, const char *file, const char *text, size_t len, json_t **doc)
{
	json_error_t je;
	*c = (compiler){.file = file};
	if (!(*doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je))) {
		fprintf(stderr, "asp-sdkgen: %s:%d:%d: %s\n", file, je.line, je.column, je.text);
		return -1;
	}
	c->root = *doc;
	return compile(c, *doc, "") < 0 ? -1 : 0;
}

/* ---- printing ------------------------------------------------------------------------------ */

/* What differs between the three languages' tables. */
typedef struct lang {
	void (*string)(FILE *o, const char *s);
	const char *null_, *true_, *false_;
	const char *list_open, *list_close; /* around a list of indexes, names or values */
	const char *pair_open, *pair_close; /* a property: name, node */
	const char *node_open, *node_close;
	const char *field_fmt; /* a field name: "%s" with its separator */
} lang;

static void py_string(FILE *o, const char *s)
{
	sdk_string_literal(o, s, strlen(s));
}

static void c_string(FILE *o, const char *s)
{
	fputc('"', o);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\' || *p == '?')
			fprintf(o, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			fprintf(o, "\\%03o", *p);
		else
			fputc(*p, o);
	}
	fputc('"', o);
}

static void print_value(const lang *L, FILE *o, json_t *v)
{
	if (json_is_string(v))
		L->string(o, json_string_value(v));
	else if (json_is_integer(v))
		fprintf(o, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		fputs(json_is_true(v) ? L->true_ : json_is_false(v) ? L->false_ : L->null_, o);
}

static void put_field(const lang *L, FILE *o, bool *first, const char *name)
{
	fprintf(o, "%s", *first ? "" : ", ");
	fprintf(o, L->field_fmt, name);
	*first = false;
}

static void print_ints(const lang *L, FILE *o, const int *v, size_t n)
{
	fputs(L->list_open, o);
	for (size_t i = 0; i < n; i++)
		fprintf(o, "%s%d", i ? ", " : "", v[i]);
	fputs(L->list_close, o);
}

/* One node in the SDK languages: only the fields it has, as an object/dict literal. */
static void print_sdk_node(const lang *L, FILE *o, const cnode *n)
{
	bool first = true;
	const char *k;
	json_t *v;
	fputs(L->node_open, o);
	if (n->types)
		put_field(L, o, &first, "types"), fprintf(o, "%u", n->types);
	if (n->never)
		put_field(L, o, &first, "never"), fputs(L->true_, o);
	if (n->values) {
		put_field(L, o, &first, "values");
		fputs(L->list_open, o);
		for (size_t i = 0; i < json_array_size(n->values); i++) {
			fputs(i ? ", " : "", o);
			print_value(L, o, json_array_get(n->values, i));
		}
		fputs(L->list_close, o);
	}
	const char *nums[] = {"min", "max", "min_len", "min_items"};
	json_t *vals[] = {n->min, n->max, n->min_len, n->min_items};
	for (size_t i = 0; i < 4; i++) {
		if (vals[i])
			put_field(L, o, &first, nums[i]), print_value(L, o, vals[i]);
	}
	if (n->pattern)
		put_field(L, o, &first, "pattern"), print_value(L, o, n->pattern);
	if (n->dflt)
		put_field(L, o, &first, "default"), print_value(L, o, n->dflt);
	if (n->props) {
		size_t i = 0;
		put_field(L, o, &first, "props");
		fputs(L->list_open, o);
		json_object_foreach(n->props, k, v)
		{
			fprintf(o, "%s%s", i ? ", " : "", L->pair_open);
			L->string(o, k);
			fprintf(o, ", %d%s", n->prop_nodes[i++], L->pair_close);
		}
		fputs(L->list_close, o);
	}
	if (n->closed)
		put_field(L, o, &first, "closed"), fputs(L->true_, o);
	const char *subs[] = {"more", "names", "items", "if", "then", "not"};
	int idx[] = {n->more, n->names, n->items, n->if_, n->then_, n->not_};
	for (size_t i = 0; i < 6; i++) {
		if (idx[i])
			put_field(L, o, &first, subs[i]), fprintf(o, "%d", idx[i]);
	}
	if (n->required) {
		put_field(L, o, &first, "required");
		fputs(L->list_open, o);
		for (size_t i = 0; i < json_array_size(n->required); i++) {
			fputs(i ? ", " : "", o);
			L->string(o, json_string_value(json_array_get(n->required, i)));
		}
		fputs(L->list_close, o);
	}
	if (n->nprefix)
		put_field(L, o, &first, "prefix"), print_ints(L, o, n->prefix, n->nprefix);
	if (n->nall)
		put_field(L, o, &first, "all"), print_ints(L, o, n->all, n->nall);
	const char *texts[] = {"expected", "keys", "cond"};
	const char *tv[] = {n->expected, n->keys, n->cond};
	for (size_t i = 0; i < 3; i++) {
		if (tv[i])
			put_field(L, o, &first, texts[i]), L->string(o, tv[i]);
	}
	fputs(L->node_close, o);
}

static void print_c_node(FILE *o, const cnode *n)
{
	static const char *const bits[] = {"ASP_CS_NULL",   "ASP_CS_BOOLEAN", "ASP_CS_INTEGER",
	                                   "ASP_CS_STRING", "ASP_CS_ARRAY",   "ASP_CS_OBJECT"};
	fputs("    {", o);
	if (n->types) {
		fputs(".types = ", o);
		for (unsigned i = 0, any = 0; i < 6; i++) {
			if (n->types & (1u << i))
				fprintf(o, "%s%s", any++ ? " | " : "", bits[i]);
		}
		fputs(",\n     ", o);
	}
	if (n->never)
		fputs(".never = true,\n     ", o);
	if (n->values) {
		fputs(".values = (const asp_cs_value[]){", o);
		for (size_t i = 0; i < json_array_size(n->values); i++) {
			json_t *v = json_array_get(n->values, i);
			fputs(i ? ", " : "", o);
			if (json_is_string(v))
				fputs("{ASP_CS_STRING, 0, ", o), c_string(o, json_string_value(v)),
				    fputs("}", o);
			else if (json_is_integer(v))
				fprintf(o, "{ASP_CS_INTEGER, %" JSON_INTEGER_FORMAT ", NULL}",
				        json_integer_value(v));
			else if (json_is_boolean(v))
				fprintf(o, "{ASP_CS_BOOLEAN, %d, NULL}", json_is_true(v));
			else
				fputs("{ASP_CS_NULL, 0, NULL}", o);
		}
		fprintf(o, "},\n     .nvalues = %zu,\n     ", json_array_size(n->values));
	}
	const char *nums[] = {"min", "max", "min_len", "min_items"};
	json_t *vals[] = {n->min, n->max, n->min_len, n->min_items};
	for (size_t i = 0; i < 4; i++) {
		if (vals[i])
			fprintf(o, ".has_%s = true, .%s = %" JSON_INTEGER_FORMAT ",\n     ",
			        nums[i], nums[i], json_integer_value(vals[i]));
	}
	if (n->pattern)
		fputs(".pattern = ", o), c_string(o, json_string_value(n->pattern)),
		    fputs(",\n     ", o);
	if (n->dflt) {
		json_t *v = n->dflt;
		fputs(".dflt = &(const asp_cs_value)", o);
		if (json_is_string(v))
			fputs("{ASP_CS_STRING, 0, ", o), c_string(o, json_string_value(v)),
			    fputs("}", o);
		else if (json_is_integer(v))
			fprintf(o, "{ASP_CS_INTEGER, %" JSON_INTEGER_FORMAT ", NULL}",
			        json_integer_value(v));
		else if (json_is_boolean(v))
			fprintf(o, "{ASP_CS_BOOLEAN, %d, NULL}", json_is_true(v));
		else
			fputs("{ASP_CS_NULL, 0, NULL}", o);
		fputs(",\n     ", o);
	}
	if (n->props) {
		const char *k;
		json_t *v;
		size_t i = 0;
		fputs(".props = (const asp_cs_prop[]){", o);
		json_object_foreach(n->props, k, v)
		{
			fputs(i ? ", {" : "{", o);
			c_string(o, k);
			fprintf(o, ", %d}", n->prop_nodes[i++]);
		}
		fprintf(o, "},\n     .nprops = %zu,\n     ", i);
	}
	if (n->closed)
		fputs(".closed = true,\n     ", o);
	const char *subs[] = {"more", "names", "items", "if_", "then_", "not_"};
	int idx[] = {n->more, n->names, n->items, n->if_, n->then_, n->not_};
	for (size_t i = 0; i < 6; i++) {
		if (idx[i])
			fprintf(o, ".%s = %d,\n     ", subs[i], idx[i]);
	}
	if (n->required) {
		fputs(".required = (const char *const[]){", o);
		for (size_t i = 0; i < json_array_size(n->required); i++) {
			fputs(i ? ", " : "", o);
			c_string(o, json_string_value(json_array_get(n->required, i)));
		}
		fprintf(o, "},\n     .nrequired = %zu,\n     ", json_array_size(n->required));
	}
	if (n->nprefix)
		fputs(".prefix = (const int[])", o),
		    print_ints(&(lang){.list_open = "{", .list_close = "}"}, o, n->prefix,
		               n->nprefix),
		    fprintf(o, ",\n     .nprefix = %zu,\n     ", n->nprefix);
	if (n->nall)
		fputs(".all = (const int[])", o),
		    print_ints(&(lang){.list_open = "{", .list_close = "}"}, o, n->all, n->nall),
		    fprintf(o, ",\n     .nall = %zu,\n     ", n->nall);
	if (n->keys)
		fputs(".keys = ", o), c_string(o, n->keys), fputs(",\n     ", o);
	if (n->cond)
		fputs(".cond = ", o), c_string(o, n->cond), fputs(",\n     ", o);
	fputs(".expected = ", o);
	c_string(o, n->expected);
	fputs("},\n", o);
}

/* Both schemas, compiled; 0 or -1 after saying why. */
static int compile_both(const sdk_options *o, compiler c[2], json_t *docs[2])
{
	size_t len[2];
	char *text[2] = {sdk_schema_text(o, &len[0]), NULL};
	text[1] = text[0] ? sdk_v0_schema_text(o, &len[1]) : NULL;
	int rc = text[1] ? 0 : -1;
	static const char *const names[] = {"spec/asp.schema.json", "spec/asp.v0.schema.json"};
	docs[0] = docs[1] = NULL;
	c[0] = c[1] = (compiler){0};
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = compile_text(&c[i], names[i], text[i], len[i], &docs[i]);
	free(text[0]);
	free(text[1]);
	return rc;
}

static void release(compiler c[2], json_t *docs[2])
{
	for (int i = 0; i < 2; i++) {
		free_compiler(&c[i]);
		json_decref(docs[i]);
	}
}

static const char *const table_names[] = {"v1", "v0"};

int emit_config_c(const sdk_options *o, FILE *out)
{
	compiler c[2];
	json_t *docs[2];
	int rc = compile_both(o, c, docs);
	if (rc == 0) {
		fputs(
		    "/* Generated by asp-sdkgen (sdkgen/emit_config.c) from spec/asp.schema.json "
		    "and\n * spec/asp.v0.schema.json; do not edit. core/src/config_schema.c reads "
		    "it. */\n#include \"config_schema.h\"\n\n#include <stddef.h>\n",
		    out);
		for (int i = 0; i < 2; i++) {
			fprintf(out, "\nstatic const asp_cs_node %s_nodes[] = {\n", table_names[i]);
			for (size_t k = 0; k < c[i].n; k++)
				print_c_node(out, &c[i].nodes[k]);
			fprintf(out,
			        "};\n\nconst asp_cs_schema asp_cs_%s = {\"%s\", %s_nodes, %zu};\n",
			        table_names[i], c[i].file, table_names[i], c[i].n);
		}
	}
	release(c, docs);
	return rc;
}

int emit_config_sdk(const sdk_options *o, const char *lang_name)
{
	static const lang py = {.string = py_string,
	                        .null_ = "None",
	                        .true_ = "True",
	                        .false_ = "False",
	                        .list_open = "[",
	                        .list_close = "]",
	                        .pair_open = "(",
	                        .pair_close = ")",
	                        .node_open = "    {",
	                        .node_close = "},\n",
	                        .field_fmt = "\"%s\": "};
	static const lang ts = {.string = py_string,
	                        .null_ = "null",
	                        .true_ = "true",
	                        .false_ = "false",
	                        .list_open = "[",
	                        .list_close = "]",
	                        .pair_open = "[",
	                        .pair_close = "]",
	                        .node_open = "  { ",
	                        .node_close = " },\n",
	                        .field_fmt = "%s: "};
	bool is_py = strcmp(lang_name, "python") == 0;
	const lang *L = is_py ? &py : &ts;
	const char *rel = is_py ? "asp/_config_tables.py" : "src/configTables.ts";
	compiler c[2];
	json_t *docs[2];
	int rc = compile_both(o, c, docs);
	FILE *f = rc == 0 ? sdk_open(o, rel) : NULL;
	if (f) {
		if (is_py)
			fputs(
			    "\"\"\"The .asp.json rules as tables: generated by asp-sdkgen "
			    "(sdkgen/emit_config.c) from\nspec/asp.schema.json and "
			    "spec/asp.v0.schema.json; do not edit. asp._config_check reads them.\n"
			    "\"\"\"\n",
			    f);
		else
			fputs("// The .asp.json rules as tables: generated by asp-sdkgen "
			      "(sdkgen/emit_config.c) from\n// spec/asp.schema.json and "
			      "spec/asp.v0.schema.json; do not edit. configCheck.ts reads them.\n"
			      "import type { SchemaTable } from \"./configCheck.js\";\n",
			      f);
		for (int i = 0; i < 2; i++) {
			if (is_py)
				fprintf(f, "\n%s = (\"%s\", (\n", i ? "V0" : "V1", c[i].file);
			else
				fprintf(f,
				        "\nexport const %s: SchemaTable = {\n  name: \"%s\",\n  "
				        "nodes: [\n",
				        i ? "V0" : "V1", c[i].file);
			for (size_t k = 0; k < c[i].n; k++)
				print_sdk_node(L, f, &c[i].nodes[k]);
			fputs(is_py ? "))\n" : "  ],\n};\n", f);
		}
		rc = sdk_close(o, f, rel);
	} else {
		rc = -1;
	}
	release(c, docs);
	return rc;
}
