/*
 * Private to libasp: the .asp.json validator. asp-sdkgen compiles spec/asp.schema.json and
 * spec/asp.v0.schema.json into the tables below (config_tables.c, generated at build
 * time; sdkgen/emit_config.c says what each field means); config_schema.c walks them. The
 * Python and TypeScript SDKs walk the same tables with the same logic, so a file gets the
 * same message, "FILE:LINE:COL: KEY.PATH: what was expected, got what", in every language.
 */
#ifndef ASP_CONFIG_SCHEMA_H
#define ASP_CONFIG_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "asp/status.h"
#include "config_locate.h"

/* JSON types, as bits of asp_cs_node.types. */
enum {
	ASP_CS_NULL = 1,
	ASP_CS_BOOLEAN = 2,
	ASP_CS_INTEGER = 4,
	ASP_CS_STRING = 8,
	ASP_CS_ARRAY = 16,
	ASP_CS_OBJECT = 32,
};

/* A scalar from the schema (a const, an enum member, a default): n holds an integer or a
 * boolean (0/1), s a string. */
typedef struct asp_cs_value {
	int type;
	long long n;
	const char *s;
} asp_cs_value;

typedef struct asp_cs_prop {
	const char *name;
	int node;
} asp_cs_prop;

/* One schema; node indexes are into the same table and 0 means none (node 0 is the root). */
typedef struct asp_cs_node {
	unsigned types;             /* ASP_CS_* bits; 0: any type */
	bool never;                 /* the schema `false`: no value is allowed */
	const asp_cs_value *values; /* const or enum: the value must be one of them */
	size_t nvalues;             /* 0: any value */
	bool has_min, has_max, has_min_len, has_min_items;
	long long min, max, min_len, min_items;
	const char *pattern;      /* POSIX extended regex a string must match, or NULL */
	const asp_cs_value *dflt; /* "default", for the view; NULL when none */
	const asp_cs_prop *props; /* "properties", in schema order */
	size_t nprops;
	bool closed;            /* "additionalProperties": false */
	int more, names, items; /* additionalProperties, propertyNames, items */
	int if_, then_;
	int not_; /* "not": value assertions the value must fail */
	const char *const *required;
	size_t nrequired;
	const int *prefix, *all; /* prefixItems, allOf */
	size_t nprefix, nall;
	const char *keys;     /* closed: the known keys, for "unknown key" */
	const char *cond;     /* with if_: the "if" in words ("transport is \"ssh\"") */
	const char *expected; /* everything the node accepts, in words */
} asp_cs_node;

typedef struct asp_cs_schema {
	const char *name; /* "spec/asp.schema.json", for messages about the schema itself */
	const asp_cs_node *nodes;
	size_t count;
} asp_cs_schema;

/* Generated: version 1 and the public v0 draft's format. */
extern const asp_cs_schema asp_cs_v1, asp_cs_v0;

#define ASP_CS_MAX_STEPS 8 /* deeper than any path the schemas describe */

/* Where in the file a message points. */
typedef enum asp_cs_where {
	ASP_CS_AT_VALUE,  /* the value at the path */
	ASP_CS_AT_KEY,    /* the key at the end of the path */
	ASP_CS_AT_PARENT, /* the object holding the (missing) key at the end of the path */
} asp_cs_where;

/* A document being checked and the key path to the value at hand. */
typedef struct asp_cs_ctx {
	const char *text; /* the config as read, to find positions in */
	size_t len;
	const char *file;      /* for messages: the absolute path, or "<memory>" */
	const char *file_path; /* for asp_error.path: the same, or NULL */
	asp_json_step path[ASP_CS_MAX_STEPS];
	size_t depth;     /* may exceed ASP_CS_MAX_STEPS; only that many steps are kept */
	const char *cond; /* inside a "then": the "if" in words; NULL elsewhere */
	bool quiet;       /* evaluating an "if": failures are answers, not errors */
	asp_error *err;
} asp_cs_ctx;

void asp_cs_push_key(asp_cs_ctx *v, const char *key);
void asp_cs_push_index(asp_cs_ctx *v, size_t index);
void asp_cs_pop(asp_cs_ctx *v);

/* invalid_argument with "FILE:LINE:COL: PATH: what" for the path on v. */
asp_status asp_cs_fail(asp_cs_ctx *v, asp_cs_where w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks `doc` against the schema; invalid_argument pointing into v->text on the first
 * problem. */
asp_status asp_cs_validate(asp_cs_ctx *v, const asp_cs_schema *s, json_t *doc);

/* The node at a dotted path of properties ("ssh.port"), or NULL. */
const asp_cs_node *asp_cs_walk(const asp_cs_schema *s, const char *dotted);

#endif
