/*
 * .asp.json: discovery, strict validation, and the view transports read (DESIGN §4).
 *
 * The rules live in one place, spec/asp.schema.json, embedded at build time. The
 * validator interprets the subset of JSON Schema that file uses and refuses (internal)
 * any keyword it does not implement; the view is filled from a table of the schema's
 * leaf properties that is checked against the schema on every load. So a change to the
 * schema either takes effect or fails every load: the two cannot silently disagree.
 */
#include "asp/config.h"

#include "asp/arena.h"
#include "config_locate.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Generated from spec/asp.schema.json by gen_embed. */
extern const char asp_config_schema_json[];
extern const size_t asp_config_schema_json_len;
/* Generated from spec/asp.v0.schema.json: the public v0 draft's format. */
extern const char asp_config_v0_schema_json[];
extern const size_t asp_config_v0_schema_json_len;

#define SECRET_MAX_BYTES (64 * 1024)
#define MAX_STEPS        8  /* deeper than any path the schema describes */
#define SHOW_MAX         48 /* longest key or value quoted in a message, in bytes */

struct asp_config {
	asp_arena *arena;
	asp_config_view view;
};

static asp_status out_of_memory(asp_error *err)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
}

/* ---- text for messages ---------------------------------------------------------------- */

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
static void describe_type(struct sbuf *b, json_t *s, const char *type)
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

/* Everything `s` accepts, in words, for "expected ...". */
static void describe(struct sbuf *b, json_t *s)
{
	json_t *c = json_object_get(s, "const"), *e = json_object_get(s, "enum");
	json_t *type = json_object_get(s, "type");
	if (c) {
		show_value(b, c);
	} else if (e) {
		sb_add(b, "one of ");
		for (size_t i = 0; i < json_array_size(e); i++) {
			sb_add(b, "%s", i ? ", " : "");
			show_value(b, json_array_get(e, i));
		}
	} else if (json_is_string(type)) {
		describe_type(b, s, json_string_value(type));
	} else if (json_is_array(type)) {
		for (size_t i = 0; i < json_array_size(type); i++) {
			sb_add(b, "%s", i ? " or " : "");
			describe_type(b, s, json_string_value(json_array_get(type, i)));
		}
	} else if (json_object_get(s, "pattern") || json_object_get(s, "minLength")) {
		describe_type(b, s, "string"); /* propertyNames: keys are strings anyway */
	} else {
		sb_add(b, "any value");
	}
}

/* ---- the schema and the checks that keep it and this file in step ---------------------- */

/* Annotations: no effect on validation (the view builder reads "default"). */
static const char *const annotations[] = {"$schema",     "$comment", "title",
                                          "description", "default",  "examples"};

/* What the validator implements. */
static const char *const assertions[] = {
    "type",     "const",         "enum",        "minimum", "maximum",    "minLength",
    "pattern",  "minItems",      "prefixItems", "items",   "properties", "additionalProperties",
    "required", "propertyNames", "allOf",       "if",      "then"};

static const char *const type_names[] = {"null", "boolean", "integer", "string", "array", "object"};

static bool in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(s, list[i]) == 0)
			return true;
	}
	return false;
}

static asp_status schema_bug(asp_error *err, const char *ptr, const char *what, const char *name)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL,
	                     "spec/asp.schema.json at %s: %s%s; the validator in core/src/config.c "
	                     "must learn it",
	                     *ptr ? ptr : "/", what, name ? name : "");
}

static bool valid_type(json_t *t)
{
	if (json_is_string(t))
		return in_list(json_string_value(t), type_names,
		               sizeof type_names / sizeof *type_names);
	if (!json_is_array(t) || json_array_size(t) == 0)
		return false;
	for (size_t i = 0; i < json_array_size(t); i++) {
		if (!valid_type(json_array_get(t, i)) || json_is_array(json_array_get(t, i)))
			return false;
	}
	return true;
}

static bool pattern_compiles(json_t *p)
{
	regex_t re;
	if (!json_is_string(p) || regcomp(&re, json_string_value(p), REG_EXTENDED | REG_NOSUB))
		return false;
	regfree(&re);
	return true;
}

/* Refuses any schema construct the validator would not honour. `ptr` is a JSON pointer. */
static asp_status check_schema(json_t *s, const char *ptr, asp_error *err)
{
	if (json_is_boolean(s))
		return ASP_OK;
	if (!json_is_object(s))
		return schema_bug(err, ptr, "a schema must be an object or a boolean", NULL);
	for (void *it = json_object_iter(s); it; it = json_object_iter_next(s, it)) {
		const char *k = json_object_iter_key(it);
		json_t *v = json_object_iter_value(it);
		char sub[256];
		bool bad = false;
		asp_status st = ASP_OK;
		if (!in_list(k, annotations, sizeof annotations / sizeof *annotations) &&
		    !in_list(k, assertions, sizeof assertions / sizeof *assertions))
			return schema_bug(err, ptr, "unsupported keyword ", k);
		if (strcmp(k, "type") == 0) {
			bad = !valid_type(v);
		} else if (strcmp(k, "minimum") == 0 || strcmp(k, "maximum") == 0) {
			bad = !json_is_integer(v);
		} else if (strcmp(k, "minLength") == 0 || strcmp(k, "minItems") == 0) {
			bad = !json_is_integer(v) || json_integer_value(v) < 0;
		} else if (strcmp(k, "pattern") == 0) {
			bad = !pattern_compiles(v);
		} else if (strcmp(k, "enum") == 0) {
			bad = !json_is_array(v) || json_array_size(v) == 0;
		} else if (strcmp(k, "required") == 0) {
			bad = !json_is_array(v);
			for (size_t i = 0; !bad && i < json_array_size(v); i++)
				bad = !json_is_string(json_array_get(v, i));
		} else if (strcmp(k, "properties") == 0) {
			bad = !json_is_object(v);
			for (void *i = json_object_iter(v); i; i = json_object_iter_next(v, i)) {
				const char *name = json_object_iter_key(i);
				snprintf(sub, sizeof sub, "%s/properties/%s", ptr, name);
				if ((st = check_schema(json_object_iter_value(i), sub, err)) !=
				    ASP_OK)
					return st;
			}
		} else if (strcmp(k, "prefixItems") == 0 || strcmp(k, "allOf") == 0) {
			bad = !json_is_array(v);
			for (size_t i = 0; !bad && i < json_array_size(v); i++) {
				snprintf(sub, sizeof sub, "%s/%s/%zu", ptr, k, i);
				if ((st = check_schema(json_array_get(v, i), sub, err)) != ASP_OK)
					return st;
			}
		} else if (strcmp(k, "additionalProperties") == 0 || strcmp(k, "items") == 0 ||
		           strcmp(k, "propertyNames") == 0 || strcmp(k, "if") == 0 ||
		           strcmp(k, "then") == 0) {
			snprintf(sub, sizeof sub, "%s/%s", ptr, k);
			if ((st = check_schema(v, sub, err)) != ASP_OK)
				return st;
		}
		if (bad)
			return schema_bug(err, ptr, "malformed or unsupported value of ", k);
	}
	return ASP_OK;
}

/* The node at a dotted path ("ssh.port"): through "properties" in the schema, directly in
 * a document. NULL when absent. */
static json_t *walk(json_t *node, const char *dotted, bool schema)
{
	while (node && *dotted) {
		char seg[64];
		size_t n = strcspn(dotted, ".");
		if (n >= sizeof seg)
			return NULL;
		memcpy(seg, dotted, n);
		seg[n] = '\0';
		node = json_object_get(schema ? json_object_get(node, "properties") : node, seg);
		dotted += n + (dotted[n] == '.');
	}
	return node;
}

/* How each leaf property of the schema lands in asp_config_view. */
enum field_kind {
	F_SKIP,       /* checked by the schema, not exposed (version) */
	F_TRANSPORT,  /* asp_transport_kind */
	F_STRING,     /* const char *, as written */
	F_LOCAL_PATH, /* const char *, made absolute */
	F_UINT,       /* unsigned */
	F_U64,        /* uint64_t */
	F_WEBSOCKET,  /* asp_http_websocket: true, false, or absent (left 0) */
	F_HOSTKEY,    /* asp_hostkey_check */
	F_ENV,        /* env, env_count */
	F_ARGV,       /* stdio.argv, stdio.argc */
};

#define AT(member) offsetof(asp_config_view, member)

static const struct field {
	const char *path;
	enum field_kind kind;
	size_t offset;
} fields[] = {
    {"version", F_SKIP, 0},
    {"transport", F_TRANSPORT, AT(transport)},
    {"cwd", F_STRING, AT(cwd)},
    {"env", F_ENV, 0},
    {"timeout_ms", F_U64, AT(timeout_ms)},
    {"call_timeout_ms", F_UINT, AT(call_timeout_ms)},
    {"ssh.host", F_STRING, AT(ssh.host)},
    {"ssh.port", F_UINT, AT(ssh.port)},
    {"ssh.user", F_STRING, AT(ssh.user)},
    {"ssh.identity_file", F_LOCAL_PATH, AT(ssh.identity_file)},
    {"ssh.identity_env", F_STRING, AT(ssh.identity_env)},
    {"ssh.password_env", F_STRING, AT(ssh.password_env)},
    {"ssh.known_hosts", F_LOCAL_PATH, AT(ssh.known_hosts)},
    {"ssh.host_key_sha256", F_STRING, AT(ssh.host_key_sha256)},
    {"ssh.host_key", F_STRING, AT(ssh.host_key)},
    {"ssh.strict_host_key_checking", F_HOSTKEY, AT(ssh.strict_host_key_checking)},
    {"ssh.connect_timeout_ms", F_UINT, AT(ssh.connect_timeout_ms)},
    {"ssh.agent", F_STRING, AT(ssh.agent)},
    {"stdio.command", F_ARGV, 0},
    {"http.url", F_STRING, AT(http.url)},
    {"http.token_env", F_STRING, AT(http.token_env)},
    {"http.token_file", F_LOCAL_PATH, AT(http.token_file)},
    {"http.ca_file", F_LOCAL_PATH, AT(http.ca_file)},
    {"http.websocket", F_WEBSOCKET, AT(http.websocket)},
};

static const struct {
	const char *name;
	asp_transport_kind kind;
} transports[] = {
    {"stdio", ASP_TRANSPORT_STDIO},
    {"ssh", ASP_TRANSPORT_SSH},
    {"http", ASP_TRANSPORT_HTTP},
};

static bool has_field(const char *path)
{
	for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
		if (strcmp(fields[i].path, path) == 0)
			return true;
	}
	return false;
}

/* Every leaf property under `props` must have a field, so none is validated then lost. */
static asp_status check_leaves(json_t *props, const char *prefix, asp_error *err)
{
	for (void *it = json_object_iter(props); it; it = json_object_iter_next(props, it)) {
		const char *name = json_object_iter_key(it);
		json_t *p = json_object_iter_value(it);
		char path[128];
		snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", name);
		json_t *sub = json_object_get(p, "properties");
		asp_status st = ASP_OK;
		if (sub)
			st = check_leaves(sub, path, err);
		else if (!has_field(path))
			st = asp_error_set(
			    err, ASP_E_INTERNAL, NULL,
			    "spec/asp.schema.json defines %s but asp_config_view has no "
			    "place for it (fields[] in core/src/config.c)",
			    path);
		if (st)
			return st;
	}
	return ASP_OK;
}

static asp_status check_fields(json_t *schema, asp_error *err)
{
	for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
		if (!walk(schema, fields[i].path, true))
			return asp_error_set(
			    err, ASP_E_INTERNAL, NULL,
			    "asp_config_view reads %s, which spec/asp.schema.json does "
			    "not define",
			    fields[i].path);
	}
	json_t *tenum = json_object_get(walk(schema, "transport", true), "enum");
	for (size_t i = 0; i < json_array_size(tenum); i++) {
		const char *name = json_string_value(json_array_get(tenum, i));
		bool known = false;
		for (size_t j = 0; name && j < sizeof transports / sizeof *transports; j++)
			known = known || strcmp(name, transports[j].name) == 0;
		if (!known)
			return asp_error_set(
			    err, ASP_E_INTERNAL, NULL,
			    "spec/asp.schema.json names a transport libasp does not "
			    "know: %s",
			    name ? name : "(not a string)");
	}
	return check_leaves(json_object_get(schema, "properties"), "", err);
}

static asp_status load_schema_text(const char *text, size_t len, const char *name, bool v1,
                                   json_t **out, asp_error *err)
{
	json_error_t je;
	json_t *s = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!s)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "%s:%d:%d: %s", name, je.line,
		                     je.column, je.text);
	asp_status st = check_schema(s, "", err);
	/* Only version 1 lands in the view directly; a v0 file is mapped onto version 1. */
	if (st == ASP_OK && v1)
		st = check_fields(s, err);
	if (st != ASP_OK) {
		json_decref(s);
		return st;
	}
	*out = s;
	return ASP_OK;
}

static asp_status load_schema(json_t **out, asp_error *err)
{
	return load_schema_text(asp_config_schema_json, asp_config_schema_json_len,
	                        "spec/asp.schema.json", true, out, err);
}

const char *asp_config_schema(void)
{
	return asp_config_schema_json;
}

/* ---- the validator ---------------------------------------------------------------------- */

struct vctx {
	const char *text; /* the config as read, to find positions in */
	size_t len;
	const char *file;      /* for messages: the absolute path, or "<memory>" */
	const char *file_path; /* for asp_error.path: the same, or NULL */
	asp_json_step path[MAX_STEPS];
	size_t depth;   /* may exceed MAX_STEPS; only the first MAX_STEPS steps are kept */
	char cond[128]; /* inside a "then": the "if" in words ("transport is \"ssh\"") */
	bool quiet;     /* evaluating an "if": failures are answers, not errors */
	asp_error *err;
};

static void push_key(struct vctx *v, const char *key)
{
	if (v->depth < MAX_STEPS)
		v->path[v->depth] = (asp_json_step){.key = key};
	v->depth++;
}

static void push_index(struct vctx *v, size_t index)
{
	if (v->depth < MAX_STEPS)
		v->path[v->depth] = (asp_json_step){.index = index};
	v->depth++;
}

static void pop(struct vctx *v)
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
static void show_path(struct sbuf *b, const struct vctx *v)
{
	size_t n = v->depth < MAX_STEPS ? v->depth : MAX_STEPS;
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

enum where {
	AT_VALUE,  /* the value at the path */
	AT_KEY,    /* the key at the end of the path */
	AT_PARENT, /* the object holding the (missing) key at the end of the path */
};

static asp_status fail(struct vctx *v, enum where w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The one place an invalid_argument message is made: "FILE:LINE:COL: PATH: what". */
static asp_status fail(struct vctx *v, enum where w, const char *fmt, ...)
{
	if (v->quiet)
		return ASP_E_INVALID_ARGUMENT;
	size_t depth = v->depth < MAX_STEPS ? v->depth : MAX_STEPS;
	if (w == AT_PARENT && depth > 0)
		depth--;
	unsigned line, col;
	asp_json_locate(v->text, v->len, v->path, depth,
	                w == AT_KEY ? ASP_JSON_AT_KEY : ASP_JSON_AT_VALUE, &line, &col);
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

static asp_status fail_expected(struct vctx *v, json_t *s, json_t *inst)
{
	if (v->quiet)
		return ASP_E_INVALID_ARGUMENT; /* skip the words nobody will read */
	char want[512], got[128];
	struct sbuf wb = {want, sizeof want, 0}, gb = {got, sizeof got, 0};
	want[0] = got[0] = '\0';
	describe(&wb, s);
	show_value(&gb, inst);
	return fail(v, AT_VALUE, "expected %s, got %s", want, got);
}

static asp_status fail_key_name(struct vctx *v, json_t *s)
{
	char want[512];
	struct sbuf wb = {want, sizeof want, 0};
	want[0] = '\0';
	describe(&wb, s);
	return fail(v, AT_KEY, "invalid key: expected %s", want);
}

static bool type_matches(const char *type, json_t *inst)
{
	switch (json_typeof(inst)) {
	case JSON_NULL: return strcmp(type, "null") == 0;
	case JSON_TRUE:
	case JSON_FALSE: return strcmp(type, "boolean") == 0;
	case JSON_INTEGER: return strcmp(type, "integer") == 0;
	case JSON_REAL: return false; /* stricter than JSON Schema: 22.0 is not a port */
	case JSON_STRING: return strcmp(type, "string") == 0;
	case JSON_ARRAY: return strcmp(type, "array") == 0;
	case JSON_OBJECT: return strcmp(type, "object") == 0;
	}
	return false;
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

/* The checks on the value itself, all described by one "expected ..." phrase. */
static bool value_ok(json_t *s, json_t *inst)
{
	json_t *type = json_object_get(s, "type"), *c = json_object_get(s, "const");
	json_t *e = json_object_get(s, "enum"), *kw;
	if (json_is_string(type) && !type_matches(json_string_value(type), inst))
		return false;
	if (json_is_array(type)) {
		bool any = false;
		for (size_t i = 0; i < json_array_size(type) && !any; i++)
			any = type_matches(json_string_value(json_array_get(type, i)), inst);
		if (!any)
			return false;
	}
	if (c && !json_equal(c, inst))
		return false;
	if (e) {
		bool any = false;
		for (size_t i = 0; i < json_array_size(e) && !any; i++)
			any = json_equal(json_array_get(e, i), inst);
		if (!any)
			return false;
	}
	if (json_is_integer(inst)) {
		json_int_t n = json_integer_value(inst);
		if ((kw = json_object_get(s, "minimum")) && n < json_integer_value(kw))
			return false;
		if ((kw = json_object_get(s, "maximum")) && n > json_integer_value(kw))
			return false;
	}
	if (json_is_string(inst)) {
		const char *str = json_string_value(inst);
		json_int_t chars = 0;
		for (const char *p = str; *p; p++)
			chars +=
			    ((unsigned char)*p & 0xC0) != 0x80; /* JSON Schema counts characters */
		if ((kw = json_object_get(s, "minLength")) && chars < json_integer_value(kw))
			return false;
		if ((kw = json_object_get(s, "pattern")) && !matches(json_string_value(kw), str))
			return false;
	}
	if (json_is_array(inst) && (kw = json_object_get(s, "minItems")) &&
	    (json_int_t)json_array_size(inst) < json_integer_value(kw))
		return false;
	return true;
}

static asp_status validate(struct vctx *v, json_t *s, json_t *inst);

static asp_status fail_unknown_key(struct vctx *v, json_t *props, const char *key)
{
	char list[512];
	struct sbuf b = {list, sizeof list, 0};
	list[0] = '\0';
	for (void *it = json_object_iter(props); it; it = json_object_iter_next(props, it))
		sb_add(&b, "%s%s", b.len ? ", " : "", json_object_iter_key(it));
	push_key(v, key);
	asp_status st = fail(v, AT_KEY, "unknown key (expected one of: %s)", list);
	pop(v);
	return st;
}

static asp_status validate_object(struct vctx *v, json_t *s, json_t *inst)
{
	json_t *props = json_object_get(s, "properties");
	json_t *more = json_object_get(s, "additionalProperties");
	json_t *names = json_object_get(s, "propertyNames");
	json_t *required = json_object_get(s, "required");
	asp_status st = ASP_OK;
	/* Unknown keys first: a typo is the likeliest mistake, and the message lists the keys. */
	for (void *it = json_object_iter(inst); it; it = json_object_iter_next(inst, it)) {
		if (json_is_false(more) && !json_object_get(props, json_object_iter_key(it)))
			return fail_unknown_key(v, props, json_object_iter_key(it));
	}
	for (void *it = json_object_iter(inst); it; it = json_object_iter_next(inst, it)) {
		const char *key = json_object_iter_key(it);
		json_t *val = json_object_iter_value(it);
		push_key(v, key);
		if (names) {
			json_t *k = json_string(key);
			if (!k)
				st = out_of_memory(v->err);
			else if (!value_ok(names, k))
				st = fail_key_name(v, names);
			json_decref(k);
		}
		json_t *ps = json_object_get(props, key);
		if (st == ASP_OK && ps)
			st = validate(v, ps, val);
		else if (st == ASP_OK && json_is_object(more))
			st = validate(v, more, val);
		pop(v);
		if (st)
			return st;
	}
	for (size_t i = 0; i < json_array_size(required); i++) {
		const char *name = json_string_value(json_array_get(required, i));
		if (!json_object_get(inst, name)) {
			push_key(v, name);
			st = fail(v, AT_PARENT, "required key missing%s%s",
			          *v->cond ? " when " : "", v->cond);
			pop(v);
			return st;
		}
	}
	return ASP_OK;
}

static asp_status validate_array(struct vctx *v, json_t *s, json_t *inst)
{
	json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
	for (size_t i = 0; i < json_array_size(inst); i++) {
		json_t *sub = i < json_array_size(prefix) ? json_array_get(prefix, i) : items;
		if (!sub)
			continue;
		push_index(v, i);
		asp_status st = validate(v, sub, json_array_get(inst, i));
		pop(v);
		if (st)
			return st;
	}
	return ASP_OK;
}

/* An "if" in words, for messages from its "then": `transport is "ssh"`. */
static void describe_condition(json_t *cond, char *out, size_t cap)
{
	struct sbuf b = {out, cap, 0};
	out[0] = '\0';
	json_t *props = json_object_get(cond, "properties");
	for (void *it = json_object_iter(props); it; it = json_object_iter_next(props, it)) {
		json_t *c = json_object_get(json_object_iter_value(it), "const");
		if (!c)
			continue;
		sb_add(&b, "%s%s is ", b.len ? " and " : "", json_object_iter_key(it));
		show_value(&b, c);
	}
	/* A required key the "if" does not also pin to a value: its presence is the condition. */
	json_t *req = json_object_get(cond, "required");
	for (size_t i = 0; i < json_array_size(req); i++) {
		const char *k = json_string_value(json_array_get(req, i));
		if (k && !json_object_get(json_object_get(props, k), "const"))
			sb_add(&b, "%s%s is given", b.len ? " and " : "", k);
	}
}

static asp_status validate(struct vctx *v, json_t *s, json_t *inst)
{
	if (json_is_true(s))
		return ASP_OK;
	if (json_is_false(s))
		return v->cond[0] ? fail(v, AT_VALUE, "not allowed when %s", v->cond)
		                  : fail(v, AT_VALUE, "not allowed here");
	if (!value_ok(s, inst))
		return fail_expected(v, s, inst);
	asp_status st = ASP_OK;
	if (json_is_object(inst))
		st = validate_object(v, s, inst);
	else if (json_is_array(inst))
		st = validate_array(v, s, inst);
	json_t *all = json_object_get(s, "allOf");
	for (size_t i = 0; st == ASP_OK && i < json_array_size(all); i++)
		st = validate(v, json_array_get(all, i), inst);
	json_t *if_s = json_object_get(s, "if"), *then_s = json_object_get(s, "then");
	if (st == ASP_OK && if_s && then_s) {
		bool quiet = v->quiet;
		v->quiet = true;
		bool holds = validate(v, if_s, inst) == ASP_OK;
		v->quiet = quiet;
		if (holds) {
			char saved[sizeof v->cond];
			memcpy(saved, v->cond, sizeof saved);
			describe_condition(if_s, v->cond, sizeof v->cond);
			st = validate(v, then_s, inst);
			memcpy(v->cond, saved, sizeof saved);
		}
	}
	return st;
}

/* ---- paths -------------------------------------------------------------------------------- */

/* `dir` + "/" + `name` into `out`; false when it does not fit. A leading "./" is dropped. */
static bool join(char *out, size_t cap, const char *dir, const char *name)
{
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (strcmp(name, ".") == 0)
		name = "";
	size_t dl = strlen(dir);
	bool slash = dl > 0 && dir[dl - 1] == '/';
	int n = *name ? snprintf(out, cap, "%s%s%s", dir, slash ? "" : "/", name)
	              : snprintf(out, cap, "%s", dir);
	return n >= 0 && (size_t)n < cap;
}

static asp_status absolute(const char *path, char *out, size_t cap, asp_error *err)
{
	char cwd[PATH_MAX];
	if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
		return asp_error_errno(err, errno, NULL, "cannot get the working directory");
	if (path[0] == '/' ? snprintf(out, cap, "%s", path) >= (int)cap
	                   : !join(out, cap, cwd, path))
		return asp_error_set(err, ASP_E_TOO_LARGE, path, "path too long: %s", path);
	return ASP_OK;
}

static const char *home_dir(char *buf, size_t cap)
{
	const char *home = getenv("HOME");
	if (home && *home)
		return home;
	struct passwd pw, *res = NULL;
	if (getpwuid_r(getuid(), &pw, buf, cap, &res) == 0 && res && res->pw_dir && *res->pw_dir)
		return res->pw_dir;
	return NULL;
}

/* A local path from the config made absolute, in the arena; fails at the value on v. */
static asp_status local_path(struct vctx *v, asp_arena *a, const char *base, const char *p,
                             const char **out)
{
	char buf[PATH_MAX], pwbuf[4096];
	bool ok;
	if (p[0] == '~') {
		if (p[1] != '\0' && p[1] != '/')
			return fail(v, AT_VALUE,
			            "only ~/ is expanded, not ~user/; write the full path");
		const char *home = home_dir(pwbuf, sizeof pwbuf);
		if (!home)
			return fail(v, AT_VALUE, "cannot expand ~: $HOME is not set");
		ok = join(buf, sizeof buf, home, p[1] ? p + 2 : "");
	} else if (p[0] == '/') {
		ok = snprintf(buf, sizeof buf, "%s", p) < (int)sizeof buf;
	} else {
		ok = join(buf, sizeof buf, base, p);
	}
	if (!ok)
		return fail(v, AT_VALUE, "path longer than %d bytes", PATH_MAX - 1);
	*out = asp_arena_strndup(a, buf, strlen(buf));
	return *out ? ASP_OK : out_of_memory(v->err);
}

/* ---- the view ----------------------------------------------------------------------------- */

static asp_status view_bug(asp_error *err, const char *path)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL,
	                     "spec/asp.schema.json lets %s hold a value asp_config_view cannot "
	                     "represent (fields[] in core/src/config.c)",
	                     path);
}

static const char *copy(asp_arena *a, json_t *s)
{
	return asp_arena_strndup(a, json_string_value(s), json_string_length(s));
}

/* Points v's path at a dotted field path, for messages about its value. */
static void set_path(struct vctx *v, const char *dotted, char segs[][64])
{
	v->depth = 0;
	while (*dotted && v->depth < MAX_STEPS) {
		size_t n = strcspn(dotted, ".");
		if (n >= 64)
			n = 63;
		memcpy(segs[v->depth], dotted, n);
		segs[v->depth][n] = '\0';
		push_key(v, segs[v->depth]);
		dotted += strcspn(dotted, ".");
		dotted += *dotted == '.';
	}
}

static asp_status build_argv(struct vctx *v, asp_config *cfg, json_t *arr, const char *base)
{
	size_t n = json_array_size(arr);
	const char **argv = asp_arena_alloc(cfg->arena, (n + 1) * sizeof *argv);
	if (!argv)
		return out_of_memory(v->err);
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_array_get(arr, i);
		if (!json_is_string(s))
			return view_bug(v->err, "stdio.command");
		const char *str = json_string_value(s);
		/* A program path (not a name looked up in PATH) is local: resolve it. */
		if (i == 0 && (strchr(str, '/') || str[0] == '~')) {
			push_index(v, 0);
			asp_status st = local_path(v, cfg->arena, base, str, &argv[0]);
			pop(v);
			if (st)
				return st;
		} else if (!(argv[i] = copy(cfg->arena, s))) {
			return out_of_memory(v->err);
		}
	}
	cfg->view.stdio.argv = argv;
	cfg->view.stdio.argc = n;
	return ASP_OK;
}

static asp_status build_env(struct vctx *v, asp_config *cfg, json_t *obj)
{
	size_t n = json_object_size(obj), i = 0;
	asp_config_env *env = asp_arena_alloc(cfg->arena, (n ? n : 1) * sizeof *env);
	if (!env)
		return out_of_memory(v->err);
	for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
		const char *key = json_object_iter_key(it);
		json_t *val = json_object_iter_value(it);
		if (!json_is_string(val))
			return view_bug(v->err, "env");
		env[i].key = asp_arena_strndup(cfg->arena, key, strlen(key));
		env[i].value = copy(cfg->arena, val);
		if (!env[i].key || !env[i].value)
			return out_of_memory(v->err);
		i++;
	}
	cfg->view.env = env;
	cfg->view.env_count = n;
	return ASP_OK;
}

/* One field: the value from the document, else the schema's default, into the view. */
static asp_status build_field(struct vctx *v, const struct field *f, json_t *schema, json_t *doc,
                              asp_config *cfg, const char *base)
{
	char segs[MAX_STEPS][64];
	json_t *val = walk(doc, f->path, false);
	if (!val)
		val = json_object_get(walk(schema, f->path, true), "default");
	if (!val || json_is_null(val) || f->kind == F_SKIP)
		return ASP_OK;
	set_path(v, f->path, segs);
	void *dst = (char *)&cfg->view + f->offset;
	json_int_t n = json_integer_value(val);
	switch (f->kind) {
	case F_SKIP: return ASP_OK;
	case F_TRANSPORT:
		for (size_t i = 0; i < sizeof transports / sizeof *transports; i++) {
			if (json_is_string(val) &&
			    strcmp(json_string_value(val), transports[i].name) == 0) {
				*(asp_transport_kind *)dst = transports[i].kind;
				return ASP_OK;
			}
		}
		return view_bug(v->err, f->path);
	case F_STRING:
		if (!json_is_string(val))
			return view_bug(v->err, f->path);
		*(const char **)dst = copy(cfg->arena, val);
		return *(const char **)dst ? ASP_OK : out_of_memory(v->err);
	case F_LOCAL_PATH:
		if (!json_is_string(val))
			return view_bug(v->err, f->path);
		return local_path(v, cfg->arena, base, json_string_value(val), (const char **)dst);
	case F_UINT:
		if (!json_is_integer(val) || n < 0 || (unsigned long long)n > UINT_MAX)
			return view_bug(v->err, f->path);
		*(unsigned *)dst = (unsigned)n;
		return ASP_OK;
	case F_U64:
		if (!json_is_integer(val) || n < 0)
			return view_bug(v->err, f->path);
		*(uint64_t *)dst = (uint64_t)n;
		return ASP_OK;
	case F_WEBSOCKET:
		if (!json_is_boolean(val))
			return view_bug(v->err, f->path);
		*(asp_http_websocket *)dst =
		    json_is_true(val) ? ASP_HTTP_WS_ONLY : ASP_HTTP_WS_NEVER;
		return ASP_OK;
	case F_HOSTKEY:
		if (json_is_boolean(val))
			*(asp_hostkey_check *)dst =
			    json_is_true(val) ? ASP_HOSTKEY_STRICT : ASP_HOSTKEY_ANY;
		else if (json_is_string(val) && strcmp(json_string_value(val), "accept-new") == 0)
			*(asp_hostkey_check *)dst = ASP_HOSTKEY_ACCEPT_NEW;
		else
			return view_bug(v->err, f->path);
		return ASP_OK;
	case F_ENV: return json_is_object(val) ? build_env(v, cfg, val) : view_bug(v->err, f->path);
	case F_ARGV:
		return json_is_array(val) ? build_argv(v, cfg, val, base)
		                          : view_bug(v->err, f->path);
	}
	return view_bug(v->err, f->path);
}

/* ---- public entry points ------------------------------------------------------------------ */

/* A jansson syntax error as "FILE:LINE:COL: invalid JSON: ...", in our words where clearer. */
static asp_status syntax_error(const char *file, const char *file_path, const json_error_t *je,
                               asp_error *err)
{
	static const struct {
		const char *jansson, *ours;
	} words[] = {
	    {"\\u0000 is not allowed without JSON_ALLOW_NUL", "strings may not contain \\u0000"},
	    {"NUL byte in object key not supported", "keys may not contain \\u0000"},
	};
	const char *text = je->text, *rest = "";
	for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
		size_t n = strlen(words[i].jansson);
		if (strncmp(text, words[i].jansson, n) == 0) {
			rest = text + n;
			text = words[i].ours;
			break;
		}
	}
	return asp_error_set(err, ASP_E_INVALID_ARGUMENT, file_path, "%s:%d:%d: invalid JSON: %s%s",
	                     file, je->line > 0 ? je->line : 1, je->column > 0 ? je->column : 1,
	                     text, rest);
}

/* ---- version 0 ------------------------------------------------------------------------- */

/*
 * A v0 file: "version": "0". Also "version": 0 beside v0's "connection", so that the v0
 * schema's answer names the version (expected "0") rather than calling the v0 keys
 * unknown ones of version 1.
 */
static bool is_v0(json_t *doc)
{
	json_t *ver = json_object_get(doc, "version");
	const char *v = json_string_value(ver);
	if (v)
		return strcmp(v, "0") == 0;
	return json_is_integer(ver) && json_integer_value(ver) == 0 &&
	       json_object_get(doc, "connection");
}

static int set_copy(json_t *dst, const char *key, json_t *src)
{
	return src ? json_object_set(dst, key, src) : 0;
}

/*
 * The version 1 document a valid v0 document means (DESIGN §4): workspace -> cwd,
 * identity.file -> identity_file, identity.env -> identity_env, host_key -> host_key_sha256
 * or host_key, and without host_key trust on first use (accept-new).
 */
static json_t *v0_to_v1(json_t *v0)
{
	json_t *conn = json_object_get(v0, "connection");
	json_t *id = json_object_get(conn, "identity");
	json_t *hk = json_object_get(conn, "host_key");
	json_t *v1 = json_object(), *ssh = json_object();
	if (!v1 || !ssh)
		goto fail;
	if (json_object_set_new(v1, "version", json_integer(1)) ||
	    json_object_set_new(v1, "transport", json_string("ssh")) ||
	    set_copy(v1, "cwd", json_object_get(v0, "workspace")) ||
	    set_copy(ssh, "host", json_object_get(conn, "host")) ||
	    set_copy(ssh, "port", json_object_get(conn, "port")) ||
	    set_copy(ssh, "user", json_object_get(conn, "user")) ||
	    set_copy(ssh, "identity_file", json_object_get(id, "file")) ||
	    set_copy(ssh, "identity_env", json_object_get(id, "env")))
		goto fail;
	if (!hk) {
		if (json_object_set_new(ssh, "strict_host_key_checking", json_string("accept-new")))
			goto fail;
	} else if (json_object_set(ssh,
	                           strncmp(json_string_value(hk), "SHA256:", 7) == 0
	                               ? "host_key_sha256"
	                               : "host_key",
	                           hk)) {
		goto fail;
	}
	if (json_object_set(v1, "ssh", ssh))
		goto fail;
	json_decref(ssh);
	return v1;
fail:
	json_decref(ssh);
	json_decref(v1);
	return NULL;
}

/* Validates a v0 document (messages point into its text) and replaces it by its v1 form. */
static asp_status map_v0(struct vctx *v, json_t **doc)
{
	json_t *schema = NULL;
	asp_status st = load_schema_text(asp_config_v0_schema_json, asp_config_v0_schema_json_len,
	                                 "spec/asp.v0.schema.json", false, &schema, v->err);
	if (st == ASP_OK)
		st = validate(v, schema, *doc);
	json_decref(schema);
	if (st != ASP_OK)
		return st;
	json_t *v1 = v0_to_v1(*doc);
	if (!v1)
		return out_of_memory(v->err);
	json_decref(*doc);
	*doc = v1;
	return ASP_OK;
}

asp_status asp_config_v0_to_v1(const char *text, size_t len, const char *filename, char **out,
                               asp_error *err)
{
	*out = NULL;
	asp_config *cfg;
	/* Parsing checks it whole, the v1 mapping included; then the mapping is redone as text. */
	asp_status st = asp_config_parse(text, len, filename, &cfg, err);
	if (st != ASP_OK)
		return st;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *v1 = doc && is_v0(doc) ? v0_to_v1(doc) : NULL;
	json_t *ssh = json_object_get(v1, "ssh");
	/* The new file may live elsewhere: the key file keeps the place it had. */
	const char *key = cfg->view.ssh.identity_file;
	if (!doc || !is_v0(doc))
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, cfg->view.path,
		                   "%s: not a version 0 file (\"version\": \"0\")",
		                   cfg->view.path ? cfg->view.path : "<memory>");
	else if (!v1 || (key && json_object_set_new(ssh, "identity_file", json_string(key))) ||
	         !(*out = json_dumps(v1, JSON_INDENT(2) | JSON_PRESERVE_ORDER)))
		st = out_of_memory(err);
	json_decref(v1);
	json_decref(doc);
	asp_config_free(cfg);
	return st;
}

asp_status asp_config_parse(const char *text, size_t len, const char *filename, asp_config **out,
                            asp_error *err)
{
	*out = NULL;
	char file[PATH_MAX] = "<memory>", base[PATH_MAX];
	asp_status st;
	if (filename) {
		if ((st = absolute(filename, file, sizeof file, err)) != ASP_OK)
			return st;
		memcpy(base, file, sizeof base);
		char *slash = strrchr(base, '/');
		slash[slash == base] = '\0'; /* "/x.json" keeps "/" */
	} else if (!getcwd(base, sizeof base)) {
		return asp_error_errno(err, errno, NULL, "cannot get the working directory");
	}
	if (len > ASP_CONFIG_MAX_BYTES)
		return asp_error_set(err, ASP_E_TOO_LARGE, filename ? file : NULL,
		                     "%s: %zu bytes, more than a config may hold (%d); is it the "
		                     "right file?",
		                     file, len, ASP_CONFIG_MAX_BYTES);
	json_t *schema = NULL, *doc = NULL;
	if ((st = load_schema(&schema, err)) != ASP_OK)
		return st;
	json_error_t je;
	/* No JSON_ALLOW_NUL: a \u0000 would cut a string short in C, so it is refused. */
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!doc) {
		json_decref(schema);
		return syntax_error(file, filename ? file : NULL, &je, err);
	}
	struct vctx v = {.text = text,
	                 .len = len,
	                 .file = file,
	                 .file_path = filename ? file : NULL,
	                 .err = err};
	asp_config *cfg = NULL;
	st = is_v0(doc) ? map_v0(&v, &doc) : ASP_OK;
	if (st == ASP_OK)
		st = validate(&v, schema, doc);
	if (st == ASP_OK) {
		cfg = calloc(1, sizeof *cfg);
		if (!cfg || !(cfg->arena = asp_arena_new()))
			st = out_of_memory(err);
	}
	if (st == ASP_OK && filename &&
	    !(cfg->view.path = asp_arena_strndup(cfg->arena, file, strlen(file))))
		st = out_of_memory(err);
	for (size_t i = 0; st == ASP_OK && i < sizeof fields / sizeof *fields; i++)
		st = build_field(&v, &fields[i], schema, doc, cfg, base);
	json_decref(doc);
	json_decref(schema);
	if (st != ASP_OK) {
		asp_config_free(cfg);
		return st;
	}
	*out = cfg;
	return ASP_OK;
}

void asp_config_free(asp_config *cfg)
{
	if (!cfg)
		return;
	asp_arena_free(cfg->arena);
	free(cfg);
}

const asp_config_view *asp_config_get(const asp_config *cfg)
{
	return cfg ? &cfg->view : NULL;
}

/* The whole file, NUL-terminated, in a malloc'd *out; too_large past `max` bytes. */
static asp_status read_file(const char *path, size_t max, const char *what, char **out,
                            size_t *out_len, asp_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return asp_error_errno(err, errno, path, "cannot open %s %s", what, path);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap + 1);
	asp_status st = buf ? ASP_OK : out_of_memory(err);
	while (st == ASP_OK) {
		if (len == cap) {
			if (cap > max)
				break; /* len > max: too large, said below */
			char *bigger = realloc(buf, cap * 2 + 1);
			if (!bigger) {
				st = out_of_memory(err);
				break;
			}
			buf = bigger;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			st = asp_error_errno(err, errno, path, "cannot read %s %s", what, path);
		else if (n == 0)
			break;
		else
			len += (size_t)n;
	}
	close(fd);
	if (st == ASP_OK && len > max)
		st = asp_error_set(err, ASP_E_TOO_LARGE, path,
		                   "%s %s is larger than %zu bytes; is it the right file?", what,
		                   path, max);
	if (st != ASP_OK) {
		if (buf)
			explicit_bzero(buf, cap + 1); /* it may be a secret */
		free(buf);
		return st;
	}
	buf[len] = '\0';
	*out = buf;
	*out_len = len;
	return ASP_OK;
}

asp_status asp_config_find(const char *start_dir, char *out, size_t cap, asp_error *err)
{
	const char *env = getenv("ASP_CONFIG");
	struct stat sb;
	if (env && *env) {
		if (stat(env, &sb) != 0) {
			if (errno == ENOENT)
				return asp_error_set(
				    err, ASP_E_NOT_FOUND, env,
				    "ASP_CONFIG names %s, which does not exist; point it at "
				    "a .asp.json or unset it",
				    env);
			return asp_error_errno(err, errno, env, "cannot use ASP_CONFIG=%s", env);
		}
		if (S_ISDIR(sb.st_mode))
			return asp_error_set(
			    err, ASP_E_IS_A_DIRECTORY, env,
			    "ASP_CONFIG names %s, a directory; point it at a .asp.json "
			    "file",
			    env);
		return absolute(env, out, cap, err);
	}
	char start[PATH_MAX], dir[PATH_MAX], cand[PATH_MAX];
	asp_status st = absolute(start_dir ? start_dir : ".", start, sizeof start, err);
	if (st)
		return st;
	size_t n = strlen(start);
	while (n > 1 && start[n - 1] == '/')
		start[--n] = '\0';
	memcpy(dir, start, n + 1);
	for (;;) {
		if (!join(cand, sizeof cand, dir, ".asp.json"))
			return asp_error_set(err, ASP_E_TOO_LARGE, dir, "path too long: %s", dir);
		if (stat(cand, &sb) == 0) {
			/* A directory of that name is not a config: keep looking. */
			if (!S_ISDIR(sb.st_mode)) {
				if (snprintf(out, cap, "%s", cand) >= (int)cap)
					return asp_error_set(err, ASP_E_TOO_LARGE, cand,
					                     "%s does not fit in %zu bytes", cand,
					                     cap);
				return ASP_OK;
			}
		} else if (errno != ENOENT && errno != ENOTDIR) {
			/* Only "not there" moves on: never skip a config we could not look at. */
			return asp_error_errno(err, errno, cand, "cannot look for %s", cand);
		}
		if (strcmp(dir, "/") == 0)
			break;
		char *slash = strrchr(dir, '/');
		slash[slash == dir] = '\0'; /* "/a" becomes "/" */
	}
	return asp_error_set(err, ASP_E_NOT_FOUND, start,
	                     "no .asp.json in %s or any parent directory; create one with `asp "
	                     "init`, or set ASP_CONFIG to its path",
	                     start);
}

asp_status asp_config_load(const char *path, asp_config **out, asp_error *err)
{
	*out = NULL;
	char found[PATH_MAX];
	asp_status st;
	if (!path) {
		if ((st = asp_config_find(NULL, found, sizeof found, err)) != ASP_OK)
			return st;
		path = found;
	}
	char *text;
	size_t len;
	if ((st = read_file(path, ASP_CONFIG_MAX_BYTES, "config", &text, &len, err)) != ASP_OK)
		return st;
	st = asp_config_parse(text, len, path, out, err);
	free(text);
	return st;
}

asp_status asp_config_secret(const char *env_name, const char *file_path, char **out,
                             asp_error *err)
{
	*out = NULL;
	const char *value = env_name ? getenv(env_name) : NULL;
	char *s;
	size_t len;
	asp_status st;
	if (value) {
		len = strlen(value);
		if (!(s = strdup(value)))
			return out_of_memory(err);
	} else if (file_path) {
		if ((st = read_file(file_path, SECRET_MAX_BYTES, "secret file", &s, &len, err)))
			return st;
		if (memchr(s, '\0', len)) {
			explicit_bzero(s, len);
			free(s);
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, file_path,
			                     "secret file %s holds a NUL byte", file_path);
		}
	} else if (env_name) {
		return asp_error_set(
		    err, ASP_E_NOT_FOUND, NULL,
		    "environment variable %s is not set; export it with the secret "
		    "or name a file in the config's *_file key",
		    env_name);
	} else {
		return ASP_OK;
	}
	if (len > 0 && s[len - 1] == '\n')
		s[--len] = '\0';
	if (len > 0 && s[len - 1] == '\r')
		s[--len] = '\0';
	if (len == 0) {
		free(s);
		return value ? asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                             "environment variable %s is empty", env_name)
		             : asp_error_set(err, ASP_E_INVALID_ARGUMENT, file_path,
		                             "secret file %s is empty", file_path);
	}
	*out = s;
	return ASP_OK;
}
