/*
 * The emitter core of the Python and TypeScript SDKs: the files they both write, walked
 * once here, each piece of text taken from the language's vocabulary (emit_sdk.h); and
 * the helpers both use (spec.h).
 */
#include "emit_sdk.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- files, text ---------------------------------------------------------------------- */

static int mkdirs(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return -1;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
			perror(buf);
			return -1;
		}
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
		perror(buf);
		return -1;
	}
	return 0;
}

FILE *sdk_open(const sdk_options *o, const char *rel)
{
	char path[4096], dir[4096];
	if (snprintf(path, sizeof path, "%s/%s", o->out_dir, rel) >= (int)sizeof path) {
		fprintf(stderr, "asp-sdkgen: path too long: %s/%s\n", o->out_dir, rel);
		return NULL;
	}
	memcpy(dir, path, sizeof dir);
	char *slash = strrchr(dir, '/');
	*slash = '\0';
	if (mkdirs(dir) < 0)
		return NULL;
	FILE *f = fopen(path, "w");
	if (!f)
		perror(path);
	return f;
}

int sdk_close(const sdk_options *o, FILE *f, const char *rel)
{
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "asp-sdkgen: cannot write %s/%s\n", o->out_dir, rel);
		return -1;
	}
	if (o->stamp)
		fprintf(o->stamp, "%s\n", rel);
	return 0;
}

int sdk_copy_runtime(const sdk_options *o, const char *prefix, const char *dest)
{
	size_t plen = strlen(prefix);
	int n = 0;
	for (const sdk_file *r = sdk_runtime_files; r->path; r++) {
		if (strncmp(r->path, prefix, plen) != 0)
			continue;
		char rel[1024];
		snprintf(rel, sizeof rel, "%s%s", dest, r->path + plen);
		FILE *f = sdk_open(o, rel);
		if (!f)
			return -1;
		fwrite(r->data, 1, r->len, f);
		if (sdk_close(o, f, rel) < 0)
			return -1;
		n++;
	}
	if (n == 0) {
		fprintf(stderr, "asp-sdkgen: no runtime files under %s were embedded\n", prefix);
		return -1;
	}
	return 0;
}

static char *builtin_spec_text(const char *name, size_t *len)
{
	const sdk_file *f = sdk_spec_file(name);
	char *buf = f ? malloc(f->len + 1) : NULL;
	if (!buf) {
		fprintf(stderr, "asp-sdkgen: no built-in %s\n", name);
		return NULL;
	}
	memcpy(buf, f->data, f->len);
	buf[f->len] = '\0';
	*len = f->len;
	return buf;
}

char *sdk_schema_text(const sdk_options *o, size_t *len)
{
	if (o->schema_path)
		return sdk_read_file(o->schema_path, len);
	return builtin_spec_text("asp.schema.json", len);
}

char *sdk_v0_schema_text(const sdk_options *o, size_t *len)
{
	if (!o->schema_path)
		return builtin_spec_text("asp.v0.schema.json", len);
	/* The v0 schema lives beside the version 1 one (spec/), as the C core embeds both. */
	const char *slash = strrchr(o->schema_path, '/');
	int dir = slash ? (int)(slash - o->schema_path) : 1;
	char path[4096];
	if (snprintf(path, sizeof path, "%.*s/asp.v0.schema.json", dir,
	             slash ? o->schema_path : ".") >= (int)sizeof path) {
		fprintf(stderr, "asp-sdkgen: path too long: %s\n", o->schema_path);
		return NULL;
	}
	return sdk_read_file(path, len);
}

char *sdk_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return NULL;
	}
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap + 1);
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap)
			break;
		char *bigger = realloc(buf, cap * 2 + 1);
		if (!bigger) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = bigger;
		cap *= 2;
	}
	if (!buf || ferror(f)) {
		fprintf(stderr, "asp-sdkgen: cannot read %s\n", path);
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

void sdk_camel(char *dst, size_t cap, const char *name, const char *suffix)
{
	size_t i = 0;
	bool up = true;
	for (const char *p = name; *p && i + 1 < cap; p++) {
		if (*p == '_') {
			up = true;
			continue;
		}
		dst[i++] = up ? (char)toupper((unsigned char)*p) : *p;
		up = false;
	}
	for (const char *p = suffix; *p && i + 1 < cap; p++)
		dst[i++] = *p;
	dst[i] = '\0';
}

void sdk_wrap(FILE *o, const char *indent, const char *hang, const char *text, int width)
{
	int col = 0;
	const char *p = text;
	while (*p) {
		while (*p == ' ')
			p++;
		size_t w = strcspn(p, " ");
		if (w == 0)
			break;
		if (col == 0) {
			col = fprintf(o, "%s%.*s", indent, (int)w, p);
		} else if (col + 1 + (int)w > width) {
			col = fprintf(o, "\n%s%s%.*s", indent, hang, (int)w, p) - 1;
		} else {
			col += fprintf(o, " %.*s", (int)w, p);
		}
		p += w;
	}
	if (col)
		fputc('\n', o);
}

void sdk_string_literal(FILE *o, const char *s, size_t len)
{
	fputc('"', o);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(o, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", o);
		else if (c == '\t')
			fputs("\\t", o);
		else if (c < 0x20 || c == 0x7f)
			fprintf(o, "\\u%04x", c);
		else
			fputc(c, o);
	}
	fputc('"', o);
}

const char *sdk_stream_proc_from(const char *op)
{
	/* Ops followed by notifications for one process: where its handle comes from. */
	static const char *const table[][2] = {{"spawn", "result"},
	                                       {"proc_attach", "params"},
	                                       {"connect", "result"},
	                                       {"watch", "result"},
	                                       {"tree_read", "result"}};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(op, table[i][0]) == 0)
			return table[i][1];
	return NULL;
}

/* ---- names and literals -------------------------------------------------------------- */

void sdk_class(char *dst, size_t cap, const char *kind, const char *name)
{
	if (strcmp(kind, "params") == 0)
		sdk_camel(dst, cap, name, "Params");
	else if (strcmp(kind, "result") == 0)
		sdk_camel(dst, cap, name, "Result");
	else if (strcmp(kind, "event") == 0)
		sdk_camel(dst, cap, name, "Event");
	else
		sdk_camel(dst, cap, name, "");
}

bool sdk_required(const field *f)
{
	return !f->optional && !f->has_default && !f->nullable;
}

const char *sdk_wire_type(const field *f)
{
	if (f->record)
		return f->one_record ? "record" : "records";
	if (!strcmp(f->type, "array<str>"))
		return "strv";
	if (!strcmp(f->type, "map<str,str>"))
		return "strmap";
	return f->type;
}

void sdk_default(const sdk_lang *L, char *dst, size_t cap, const field *f)
{
	if (!f->def)
		snprintf(dst, cap, "%s", L->none);
	else if (json_is_integer(f->def))
		snprintf(dst, cap, "%lld", (long long)json_integer_value(f->def));
	else if (json_is_boolean(f->def))
		snprintf(dst, cap, "%s", json_is_true(f->def) ? L->yes : L->no);
	else
		snprintf(dst, cap, "%s", L->empty_bin);
}

bool sdk_in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return true;
	return false;
}

void sdk_field_table(const sdk_lang *L, FILE *o, const char *indent, const field *fs, size_t n)
{
	fputs(L->list_open, o);
	for (size_t i = 0; i < n; i++) {
		const field *f = &fs[i];
		fprintf(o, "\n%s%s", indent, L->indent);
		L->field_open(o, f);
		if (f->optional)
			fprintf(o, ", optional%s%s", L->kv, L->yes);
		if (f->nullable)
			fprintf(o, ", nullable%s%s", L->kv, L->yes);
		if (f->def) {
			char def[64];
			sdk_default(L, def, sizeof def, f);
			fprintf(o, ", default%s%s", L->kv, def);
		}
		if (f->role)
			fprintf(o, ", role%s\"%s\"", L->kv, f->role);
		if (f->record)
			fprintf(o, ", record%s%s%s", L->kv, L->record_ref, f->record);
		fputs(L->field_close, o);
	}
	if (n)
		fprintf(o, "\n%s%s", indent, L->list_close);
	else
		fputs(L->list_close, o);
}

/* A long text (a config schema) as string literals, one per line of it. */
static void text_lines(const sdk_lang *L, FILE *o, const char *text, size_t len)
{
	size_t start = 0;
	bool first = true;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && text[i] != '\n')
			continue;
		size_t end = i < len ? i + 1 : i;
		if (end > start) {
			fprintf(o, "%s%s", first ? "" : L->line_sep, L->indent);
			sdk_string_literal(o, text + start, end - start);
			fputs(L->line_end, o);
			first = false;
		}
		start = end;
	}
	if (first)
		fputs(L->no_lines, o);
}

/* ---- the files every SDK has ---------------------------------------------------------- */

/* Whether an op takes the record as a param (spawn's tty): then callers build it, and it
 * is declared as params are, with defaults. */
static bool record_is_param(const spec *s, const char *name)
{
	for (size_t i = 0; i < s->nops; i++)
		for (size_t j = 0; j < s->ops[i].nfields; j++)
			if (s->ops[i].fields[j].one_record &&
			    strcmp(s->ops[i].fields[j].record, name) == 0)
				return true;
	return false;
}

static int emit_types(const sdk_lang *L, const spec *s, const sdk_options *opt)
{
	FILE *o = sdk_open(opt, L->types_path);
	if (!o)
		return -1;
	L->types_head(o, s);
	char name[96], doc[1536];
	for (size_t i = 0; i < s->nrecords; i++) {
		const record *r = &s->records[i];
		sdk_class(name, sizeof name, "record", r->name);
		L->type_decl(o, name, r->doc, r->fields, r->nfields, record_is_param(s, r->name),
		             NULL);
	}
	for (size_t i = 0; i < s->nops; i++) {
		const record *op = &s->ops[i];
		sdk_class(name, sizeof name, "params", op->name);
		snprintf(doc, sizeof doc, "Params of %s: %s", op->name, op->doc);
		if (op->one_of[0])
			snprintf(doc + strlen(doc), sizeof doc - strlen(doc),
			         " Exactly one of %s and %s must be given.", op->one_of[0],
			         op->one_of[1]);
		L->type_decl(o, name, doc, op->fields, op->nfields, true, NULL);
		sdk_class(name, sizeof name, "result", op->name);
		snprintf(doc, sizeof doc, "Result of %s.", op->name);
		L->type_decl(o, name, doc, op->results, op->nresults, false, NULL);
	}
	for (size_t i = 0; i < s->nnotes; i++) {
		const record *r = &s->notes[i];
		sdk_class(name, sizeof name, "event", r->name);
		snprintf(doc, sizeof doc, "Notification %s: %s", r->name, r->doc);
		L->type_decl(o, name, doc, r->fields, r->nfields, false, r->name);
	}
	if (L->types_tail)
		L->types_tail(o, s);
	return sdk_close(opt, o, L->types_path);
}

static int emit_tables(const sdk_lang *L, const spec *s, const sdk_options *opt, const char *schema,
                       size_t schema_len, const char *v0, size_t v0_len)
{
	FILE *o = sdk_open(opt, L->tables_path);
	if (!o)
		return -1;
	L->tables_head(o, s);
	for (size_t i = 0; i < s->nerrors; i++)
		fprintf(o, "%s\"%s\",\n", L->indent, s->errors[i].code);
	fputs(L->errors_tail, o);
	for (size_t i = 0; i < s->nrecords; i++)
		L->record_desc(o, &s->records[i]);
	fputs(L->ops_head, o);
	for (size_t i = 0; i < s->nops; i++)
		L->op_desc(o, &s->ops[i]);
	fputs(L->notes_head, o);
	for (size_t i = 0; i < s->nnotes; i++)
		L->note_desc(o, &s->notes[i]);
	fputs(L->schema_head, o);
	text_lines(L, o, schema, schema_len);
	fputs(L->v0_head, o);
	text_lines(L, o, v0, v0_len);
	fputs(L->tables_tail, o);
	return sdk_close(opt, o, L->tables_path);
}

static int emit_client(const sdk_lang *L, const spec *s, const sdk_options *opt, int variant)
{
	const char *rel = L->client_path(variant);
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	L->client_head(o, s, variant);
	char pcls[96], rcls[96];
	for (size_t i = 0; i < s->nops; i++) {
		sdk_class(pcls, sizeof pcls, "params", s->ops[i].name);
		fprintf(o, "%s%s,\n", L->indent, pcls);
		if (!sdk_stream_proc_from(s->ops[i].name)) {
			sdk_class(rcls, sizeof rcls, "result", s->ops[i].name);
			fprintf(o, "%s%s,\n", L->indent, rcls);
		}
	}
	L->client_open(o, variant);
	for (size_t i = 0; i < s->nops; i++) {
		const record *op = &s->ops[i];
		sdk_class(pcls, sizeof pcls, "params", op->name);
		sdk_class(rcls, sizeof rcls, "result", op->name);
		L->method(o, op, sdk_stream_proc_from(op->name), pcls, rcls, variant);
	}
	fputs(L->client_tail, o);
	return sdk_close(opt, o, rel);
}

static int emit_readme(const sdk_lang *L, const spec *s, const sdk_options *opt)
{
	const char *rel = "README.md";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	L->readme_head(o, s);
	for (size_t i = 0; i < s->nops; i++) {
		char ret[96];
		sdk_class(ret, sizeof ret, "result", s->ops[i].name);
		fprintf(o, "| `%s` | `%s` | %s |\n", s->ops[i].name,
		        sdk_stream_proc_from(s->ops[i].name) ? "Process" : ret, s->ops[i].doc);
	}
	fprintf(o, "\nThe fields of each op are in `docs/protocol.md` and in %s.\n", L->fields_doc);
	return sdk_close(opt, o, rel);
}

int sdk_emit(const sdk_lang *L, const spec *s, const sdk_options *opt)
{
	for (size_t i = 0; i < s->nops; i++) {
		if (L->clashes(s->ops[i].name)) {
			fprintf(stderr, "asp-sdkgen: op %s would clash with a member of %s\n",
			        s->ops[i].name, L->client);
			return -1;
		}
	}
	size_t schema_len, v0_len;
	char *schema = sdk_schema_text(opt, &schema_len);
	char *v0 = schema ? sdk_v0_schema_text(opt, &v0_len) : NULL;
	if (!v0) {
		free(schema);
		return -1;
	}
	/* in this order, which the stamp lists */
	int rc = 0;
	if (emit_types(L, s, opt) < 0 || emit_tables(L, s, opt, schema, schema_len, v0, v0_len) < 0)
		rc = -1;
	for (int v = 0; rc == 0 && v < L->nclients; v++)
		rc = emit_client(L, s, opt, v);
	if (rc == 0 && (L->more(s, opt) < 0 || emit_readme(L, s, opt) < 0 ||
	                sdk_copy_runtime(opt, L->runtime, "") < 0))
		rc = -1;
	free(v0);
	free(schema);
	return rc;
}

void sdk_readme_transports(FILE *o)
{
	fputs("## Transports\n\n"
	      "| transport | calls | notifications: `spawn` output, `proc_attach` |\n"
	      "|---|---|---|\n"
	      "| `stdio` (`asp-agent --stdio`, also through `docker exec -i ...`) | framed "
	      "msgpack on the child's stdin/stdout, pipelined | yes |\n"
	      "| `http`, `websocket` absent (the default) | `POST /v1/rpc`, one per call | "
	      "yes: over one WebSocket (`GET /v1/ws`, subprotocol `asp.v1`) opened by the "
	      "first `spawn` or `proc_attach` and shared by later ones |\n"
	      "| `http`, `\"websocket\": true` | all over one WebSocket, pipelined | yes |\n"
	      "| `http`, `\"websocket\": false` | `POST /v1/rpc`, one per call | no: "
	      "`spawn` and `proc_attach` fail `unsupported` naming `http.websocket` (run with "
	      "`exec`, poll with `proc_wait`) |\n"
	      "| `ssh` | not served by this SDK: use the `asp` CLI or the C library | |\n\n"
	      "The WebSocket client is the SDK's own (RFC 6455, no dependency): the bearer "
	      "token goes with the upgrade, a refused upgrade names its HTTP status "
	      "(`unauthorized` for 401), messages above `max_message` are refused, and when "
	      "the WebSocket drops, the calls on it and the processes followed over it fail "
	      "with `transport_error` (the processes keep running: attach again with the "
	      "offsets seen); the next stream opens a new one.\n\n",
	      o);
}
