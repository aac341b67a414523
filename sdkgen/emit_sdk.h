/*
 * The emitter core of the other-language SDKs (emit_sdk.c): one walk over the spec per
 * generated file, written once, and a vocabulary per language (emit_python.c,
 * emit_typescript.c) holding only what differs: literals, names, and the pieces of text
 * whose shape is the language's own.
 */
#ifndef ASP_SDKGEN_EMIT_SDK_H
#define ASP_SDKGEN_EMIT_SDK_H

#include "spec.h"

typedef struct sdk_lang {
	const char *runtime; /* prefix of its files in sdk_runtime_files: "python/" */
	const char *client;  /* the client class, for the clash message: "asp.Client" */
	/* An op name that cannot be a method of the client (a keyword, a member). */
	bool (*clashes)(const char *op);

	/* Literals, and one level of indentation. */
	const char *indent;
	const char *yes, *no, *none; /* true, false, and no default (Python's None) */
	const char *empty_bin;       /* the default of a bin field (only "" occurs) */

	/* The field tables of the spec file: LIST_OPEN, then per field FIELD_OPEN
	 * (field_open), ", KEY<kv>VALUE" per option, FIELD_CLOSE, then LIST_CLOSE. */
	const char *kv;
	const char *list_open, *list_close, *field_close;
	const char *record_ref; /* before a record's name in a field's `record` option */
	void (*field_open)(FILE *o, const field *f);

	/* Long text (the config schemas) as string literals, one per line of the text:
	 * LINE_SEP between them, each INDENT LITERAL LINE_END; NO_LINES for an empty text. */
	const char *line_sep, *line_end, *no_lines;

	/* The types file: records, each op's params and result, notifications. */
	const char *types_path;
	void (*types_head)(FILE *o, const spec *s);
	/* One type; `params` for an op's params, `event` a notification's name or NULL. */
	void (*type_decl)(FILE *o, const char *cls, const char *doc, const field *fs, size_t n,
	                  bool params, const char *event);
	void (*types_tail)(FILE *o, const spec *s); /* NULL: nothing */

	/* The spec tables file: head (through the error codes' opening), the error codes,
	 * ERRORS_TAIL, records, OPS_HEAD, ops, NOTES_HEAD, notifications, SCHEMA_HEAD, the
	 * config schema, V0_HEAD, the v0 schema, TABLES_TAIL. */
	const char *tables_path;
	void (*tables_head)(FILE *o, const spec *s);
	const char *errors_tail, *ops_head, *notes_head, *schema_head, *v0_head, *tables_tail;
	void (*record_desc)(FILE *o, const record *r);
	void (*op_desc)(FILE *o, const record *op);
	void (*note_desc)(FILE *o, const record *r);

	/* The clients (`nclients` variants, Python's sync and asyncio): head (through the
	 * imports' opening), each op's params and result class imported, client_open (to the
	 * class body), a method per op, CLIENT_TAIL. */
	int nclients;
	const char *(*client_path)(int variant);
	void (*client_head)(FILE *o, const spec *s, int variant);
	void (*client_open)(FILE *o, int variant);
	/* `from`: sdk_stream_proc_from(op->name); pcls, rcls: the params and result class. */
	void (*method)(FILE *o, const record *op, const char *from, const char *pcls,
	               const char *rcls, int variant);
	const char *client_tail;

	/* The package's other files (index, manifest). */
	int (*more)(const spec *s, const sdk_options *opt);

	/* README.md: head (through the ops table's header), a row per op, then a line
	 * saying the fields are in docs/protocol.md and in FIELDS_DOC. */
	void (*readme_head)(FILE *o, const spec *s);
	const char *fields_doc;
} sdk_lang;

/* The whole package for `L` into opt->out_dir; 0, or -1 after saying why. */
int sdk_emit(const sdk_lang *L, const spec *s, const sdk_options *opt);

/* Class names: kind "params" -> "ExecParams", "result" -> "ExecResult", "event" ->
 * "OutputEvent", "record" -> "DirEntry". */
void sdk_class(char *dst, size_t cap, const char *kind, const char *name);
/* A param the caller must give: not optional, no default, not nullable. */
bool sdk_required(const field *f);
/* The codec's name of a field's type: "records", "strv", "strmap", or the spec's. */
const char *sdk_wire_type(const field *f);
/* A field's default as a literal of L ("None" without one). */
void sdk_default(const sdk_lang *L, char *dst, size_t cap, const field *f);
/* Whether `s` is in the NULL-terminated `list`. */
bool sdk_in_list(const char *s, const char *const *list);
/* A field table (see sdk_lang), its lines indented by `indent` plus one level. */
void sdk_field_table(const sdk_lang *L, FILE *o, const char *indent, const field *fs, size_t n);
/* The README's "Transports" section: what each transport carries, the same for every
 * SDK (their runtimes share the design: docs/http.md). */
void sdk_readme_transports(FILE *o);
/* What an op followed by notifications needs, for its doc comment. */
#define SDK_NEEDS_NOTIFICATIONS                                                                    \
	"Needs notifications: stdio, or HTTP with its WebSocket (not http.websocket false)."

#endif
