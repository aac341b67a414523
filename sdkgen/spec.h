/* The spec as asp-sdkgen sees it: loaded and checked once, then read by each emitter. */
#ifndef ASP_SDKGEN_SPEC_H
#define ASP_SDKGEN_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct field {
	const char *name, *c_name, *type, *doc, *role;
	const char *record;  /* for array<R>: R (in record_name), else NULL */
	char record_name[64];
	bool optional, nullable, has_default;
	json_t *def;         /* the default value, or NULL */
	int since;
} field;

typedef struct record {
	const char *name, *doc;
	int since;
	bool streaming;
	const char *one_of[2];
	field *fields;
	size_t nfields;
	/* ops only */
	field *results;
	size_t nresults;
} record;

typedef struct spec {
	json_t *root;
	int protocol;
	long max_message;
	const char *doc;
	record *records, *ops, *notes;
	size_t nrecords, nops, nnotes;
	struct {
		const char *code, *doc;
		int status, since;
	} *errors;
	size_t nerrors;
} spec;

/* Loads and checks the spec; prints what is wrong and returns -1. */
int spec_load(const char *path, spec *s);
void spec_free(spec *s);

/* Does the C header + descriptor tables + client glue. */
int emit_c(const spec *s, FILE *header, FILE *source, FILE *client);
/* The Markdown protocol reference. */
int emit_markdown(const spec *s, FILE *out);
/* Compares with a frozen released spec: prints each incompatibility, returns their count. */
int check_compat(const spec *frozen, const spec *current);

#endif
