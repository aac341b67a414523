/*
 * The Python SDK: package `asp` with dataclasses per params/result/record/notification,
 * the field tables the runtime interprets (asp/_spec.py), asp.Client with one method per
 * op, pyproject.toml and a README. The hand-written runtime (transports, codec, config
 * validator) comes from sdk/runtime/python, embedded in asp-sdkgen at build time.
 *
 * Also home of the helpers both SDK emitters share (declared in spec.h).
 */
#include "spec.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- shared with emit_typescript.c ------------------------------------------------- */

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

/* A long text (the config schema) as adjacent literals, one per line of the text. */
static void string_lines(FILE *o, const char *indent, const char *s, size_t len)
{
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != '\n')
			continue;
		size_t end = i < len ? i + 1 : i;
		if (end > start) {
			fputs(indent, o);
			sdk_string_literal(o, s + start, end - start);
			fputc('\n', o);
		}
		start = end;
	}
}

const char *sdk_stream_proc_from(const char *op)
{
	/* Ops followed by notifications for one process: where its handle comes from. */
	static const char *const table[][2] = {{"spawn", "result"}, {"proc_attach", "params"}};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(op, table[i][0]) == 0)
			return table[i][1];
	return NULL;
}

/* ---- Python --------------------------------------------------------------------------- */

static const char *const py_keywords[] = {
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield",    NULL,
};

/* Members of asp.Client (and ClientBase) an op's method must not replace. */
static const char *const py_reserved_methods[] = {
    "stdio", "http",       "from_config", "load_config", "close",    "config", "cwd",
    "env",   "timeout_ms", "transport",   "max_message", "SDK_NAME", NULL,
};

static bool in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return true;
	return false;
}

/* The Python name of a field: a keyword gets a trailing underscore (from -> from_). */
static const char *py_attr(const char *name, char *buf, size_t cap)
{
	if (!in_list(name, py_keywords))
		return name;
	snprintf(buf, cap, "%s_", name);
	return buf;
}

static void py_class(char *dst, size_t cap, const char *kind, const char *name)
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

static bool required(const field *f)
{
	return !f->optional && !f->has_default && !f->nullable;
}

/* Text escaped for a triple-quoted literal. */
static void py_escape(char *dst, size_t cap, const char *text)
{
	size_t j = 0;
	for (const char *p = text; *p && j + 3 < cap; p++) {
		if (*p == '\\' || *p == '"')
			dst[j++] = '\\';
		dst[j++] = *p;
	}
	dst[j] = '\0';
}

/* A docstring body, wrapped; continuation lines hang by `hang`. */
static void py_doc(FILE *o, const char *indent, const char *hang, const char *text)
{
	char buf[2048];
	py_escape(buf, sizeof buf, text);
	sdk_wrap(o, indent, hang, buf, 88);
}

/* A whole docstring: on one line when it fits, else opening and closing quotes alone. */
static void py_docstring(FILE *o, const char *indent, const char *text)
{
	char buf[2048];
	py_escape(buf, sizeof buf, text);
	if (strlen(indent) + strlen(buf) + 6 <= 88) {
		fprintf(o, "%s\"\"\"%s\"\"\"\n", indent, buf);
		return;
	}
	fprintf(o, "%s\"\"\"\n", indent);
	sdk_wrap(o, indent, "", buf, 88);
	fprintf(o, "%s\"\"\"\n", indent);
}

/* head(a, b, c)tail on one line when it fits in 88 columns, else one item per line. */
static void py_call(FILE *o, const char *indent, const char *head, char (*items)[512], size_t n,
                    const char *tail)
{
	size_t len = strlen(indent) + strlen(head) + strlen(tail) + 2;
	for (size_t i = 0; i < n; i++)
		len += strlen(items[i]) + 2;
	if (len <= 88) {
		fprintf(o, "%s%s(", indent, head);
		for (size_t i = 0; i < n; i++)
			fprintf(o, "%s%s", i ? ", " : "", items[i]);
		fprintf(o, ")%s\n", tail);
		return;
	}
	fprintf(o, "%s%s(\n", indent, head);
	for (size_t i = 0; i < n; i++)
		fprintf(o, "%s    %s,\n", indent, items[i]);
	fprintf(o, "%s)%s\n", indent, tail);
}

static void annotation_str(char *dst, size_t cap, const field *f, bool maybe_none)
{
	char rec[96];
	const char *t;
	if (f->record) {
		py_class(rec, sizeof rec, "record", f->record);
		snprintf(dst, cap, "list[%s]%s", rec, maybe_none ? " | None" : "");
		return;
	}
	if (!strcmp(f->type, "str"))
		t = "str";
	else if (!strcmp(f->type, "bin"))
		t = "bytes";
	else if (!strcmp(f->type, "uint") || !strcmp(f->type, "int"))
		t = "int";
	else if (!strcmp(f->type, "bool"))
		t = "bool";
	else if (!strcmp(f->type, "array<str>"))
		t = "list[str]";
	else
		t = "dict[str, str]";
	snprintf(dst, cap, "%s%s", t, maybe_none ? " | None" : "");
}

static void default_str(char *dst, size_t cap, const field *f)
{
	if (!f->def)
		snprintf(dst, cap, "None");
	else if (json_is_integer(f->def))
		snprintf(dst, cap, "%lld", (long long)json_integer_value(f->def));
	else if (json_is_boolean(f->def))
		snprintf(dst, cap, "%s", json_is_true(f->def) ? "True" : "False");
	else
		snprintf(dst, cap, "b\"\"");
}

static void py_dataclass(FILE *o, const char *cls, const char *doc, const field *fs, size_t n,
                         bool is_params)
{
	fprintf(o, "\n\n@dataclass%s\nclass %s:\n", is_params ? "(kw_only=True)" : "", cls);
	py_docstring(o, "    ", doc);
	if (n == 0)
		fprintf(o, "\n    pass\n");
	for (size_t i = 0; i < n; i++) {
		const field *f = &fs[i];
		char ab[64], ann[128], def[64], note[1536];
		annotation_str(ann, sizeof ann, f, f->optional || f->nullable);
		fprintf(o, "\n    %s: %s", py_attr(f->name, ab, sizeof ab), ann);
		if (is_params && !required(f)) {
			default_str(def, sizeof def, f);
			fprintf(o, " = %s", def);
		}
		fputc('\n', o);
		snprintf(note, sizeof note, "%s%s (since %d)", f->doc,
		         f->optional && !f->has_default ? " Optional." : "", f->since);
		py_docstring(o, "    ", note);
	}
}

static const char *const header_py =
    "# Generated by asp-sdkgen from spec/protocol.json; do not edit.\n";

static int emit_types(const spec *s, const sdk_options *opt)
{
	const char *rel = "asp/types.py";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	fprintf(o,
	        "%s\"\"\"Typed params and results of every ASP operation, records and "
	        "notifications (protocol %d).\n\nParams classes take keyword arguments named "
	        "as the spec's fields; a field whose name\nis a Python keyword gets a trailing "
	        "underscore (rename's ``from`` is ``from_``).\n\"\"\"\n\n"
	        "from __future__ import annotations\n\nfrom dataclasses import dataclass\n",
	        header_py, s->protocol);
	char cls[96];
	for (size_t i = 0; i < s->nrecords; i++) {
		py_class(cls, sizeof cls, "record", s->records[i].name);
		py_dataclass(o, cls, s->records[i].doc, s->records[i].fields, s->records[i].nfields,
		             false);
	}
	for (size_t i = 0; i < s->nops; i++) {
		const record *op = &s->ops[i];
		char doc[1536];
		py_class(cls, sizeof cls, "params", op->name);
		snprintf(doc, sizeof doc, "Params of %s: %s", op->name, op->doc);
		if (op->one_of[0])
			snprintf(doc + strlen(doc), sizeof doc - strlen(doc),
			         " Exactly one of %s and %s must be given.", op->one_of[0],
			         op->one_of[1]);
		py_dataclass(o, cls, doc, op->fields, op->nfields, true);
		py_class(cls, sizeof cls, "result", op->name);
		snprintf(doc, sizeof doc, "Result of %s.", op->name);
		py_dataclass(o, cls, doc, op->results, op->nresults, false);
	}
	for (size_t i = 0; i < s->nnotes; i++) {
		char doc[1536];
		py_class(cls, sizeof cls, "event", s->notes[i].name);
		snprintf(doc, sizeof doc, "Notification %s: %s", s->notes[i].name, s->notes[i].doc);
		py_dataclass(o, cls, doc, s->notes[i].fields, s->notes[i].nfields, false);
	}
	return sdk_close(opt, o, rel);
}

static const char *py_wire_type(const field *f)
{
	if (f->record)
		return "records";
	if (!strcmp(f->type, "array<str>"))
		return "strv";
	if (!strcmp(f->type, "map<str,str>"))
		return "strmap";
	return f->type;
}

static void py_fields(FILE *o, const char *indent, const field *fs, size_t n)
{
	fputs("(", o);
	for (size_t i = 0; i < n; i++) {
		const field *f = &fs[i];
		char ab[64], def[64];
		fprintf(o, "\n%s    Field(\"%s\", \"%s\", \"%s\"", indent, f->name,
		        py_attr(f->name, ab, sizeof ab), py_wire_type(f));
		if (f->optional)
			fputs(", optional=True", o);
		if (f->nullable)
			fputs(", nullable=True", o);
		if (f->def) {
			default_str(def, sizeof def, f);
			fprintf(o, ", default=%s", def);
		}
		if (f->role)
			fprintf(o, ", role=\"%s\"", f->role);
		if (f->record)
			fprintf(o, ", record=_%s", f->record);
		fputs("),", o);
	}
	if (n)
		fprintf(o, "\n%s)", indent);
	else
		fputs(")", o);
}

static int emit_spec_tables(const spec *s, const sdk_options *opt, const char *schema,
                            size_t schema_len, const char *v0, size_t v0_len)
{
	const char *rel = "asp/_spec.py";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	fprintf(o,
	        "%s\"\"\"The spec as tables: every op's fields, types, defaults and roles, "
	        "for asp._codec.\"\"\"\n\n"
	        "from . import types as _t\nfrom ._codec import Field, Op, Record\n\n"
	        "PROTOCOL = %d\nMAX_MESSAGE = %ld\n\nERROR_CODES = (\n",
	        header_py, s->protocol, s->max_message);
	for (size_t i = 0; i < s->nerrors; i++)
		fprintf(o, "    \"%s\",\n", s->errors[i].code);
	fputs(")\n\n# The notification that ends a process's stream.\n"
	      "STREAM_END_CLASS = \"ExitEvent\"\n",
	      o);
	char cls[96], label[128];
	for (size_t i = 0; i < s->nrecords; i++) {
		const record *r = &s->records[i];
		py_class(cls, sizeof cls, "record", r->name);
		fprintf(o, "\n_%s = Record(\"%s\", ", r->name, r->name);
		py_fields(o, "", r->fields, r->nfields);
		fprintf(o, ", _t.%s)\n", cls);
	}
	fputs("\nOPS = {\n", o);
	for (size_t i = 0; i < s->nops; i++) {
		const record *op = &s->ops[i];
		fprintf(o, "    \"%s\": Op(\"%s\", %d, %s,\n", op->name, op->name, op->since,
		        op->streaming ? "True" : "False");
		py_class(cls, sizeof cls, "params", op->name);
		snprintf(label, sizeof label, "%s params", op->name);
		fprintf(o, "        Record(\"%s\", ", label);
		py_fields(o, "        ", op->fields, op->nfields);
		fprintf(o, ", _t.%s", cls);
		if (op->one_of[0])
			fprintf(o, ", one_of=(\"%s\", \"%s\")", op->one_of[0], op->one_of[1]);
		fputs("),\n", o);
		py_class(cls, sizeof cls, "result", op->name);
		snprintf(label, sizeof label, "%s result", op->name);
		fprintf(o, "        Record(\"%s\", ", label);
		py_fields(o, "        ", op->results, op->nresults);
		fprintf(o, ", _t.%s)),\n", cls);
	}
	fputs("}\n\nNOTES = {\n", o);
	for (size_t i = 0; i < s->nnotes; i++) {
		const record *r = &s->notes[i];
		py_class(cls, sizeof cls, "event", r->name);
		fprintf(o, "    \"%s\": Record(\"%s\", ", r->name, r->name);
		py_fields(o, "    ", r->fields, r->nfields);
		fprintf(o, ", _t.%s),\n", cls);
	}
	fputs("}\n\n# spec/asp.schema.json, which asp._config interprets as the C core does.\n"
	      "CONFIG_SCHEMA = (\n",
	      o);
	string_lines(o, "    ", schema, schema_len);
	fputs(")\n\n# spec/asp.v0.schema.json: files of the v0 draft, read as the C core reads "
	      "them.\nCONFIG_V0_SCHEMA = (\n",
	      o);
	string_lines(o, "    ", v0, v0_len);
	fputs(")\n", o);
	return sdk_close(opt, o, rel);
}

/* def NAME(self, required..., *, optional...) -> Result: */
static void py_signature(FILE *o, const record *op, const char *ret, bool aio)
{
	char items[80][512], head[96], tail[128], ab[64], ann[128], def[64];
	size_t n = 0;
	snprintf(items[n++], 512, "self");
	for (size_t i = 0; i < op->nfields && n < 78; i++) {
		const field *f = &op->fields[i];
		if (!required(f))
			continue;
		annotation_str(ann, sizeof ann, f, false);
		snprintf(items[n++], 512, "%s: %s", py_attr(f->name, ab, sizeof ab), ann);
	}
	bool star = false;
	for (size_t i = 0; i < op->nfields && n < 78; i++) {
		const field *f = &op->fields[i];
		if (required(f))
			continue;
		if (!star) {
			snprintf(items[n++], 512, "*");
			star = true;
		}
		annotation_str(ann, sizeof ann, f, !f->has_default);
		default_str(def, sizeof def, f);
		snprintf(items[n++], 512, "%s: %s = %s", py_attr(f->name, ab, sizeof ab), ann, def);
	}
	snprintf(head, sizeof head, "%sdef %s", aio ? "async " : "", op->name);
	snprintf(tail, sizeof tail, " -> %s:", ret);
	fputc('\n', o);
	py_call(o, "    ", head, items, n, tail);
}

/* asp.Client (client.py), or with aio its asyncio twin asp.aio.Client (aio.py): the same
 * methods as coroutines over the runtime's asyncio transports. */
static int emit_client(const spec *s, const sdk_options *opt, bool aio)
{
	const char *rel = aio ? "asp/aio.py" : "asp/client.py";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	if (aio)
		fprintf(
		    o,
		    "%s\"\"\"asp.aio.Client: asp.Client for asyncio, one coroutine per operation "
		    "of ASP\nprotocol %d.\"\"\"\n\n"
		    "from __future__ import annotations\n\n"
		    "from . import _spec\nfrom ._aio_base import AioClientBase as ClientBase\n"
		    "from ._aio_base import AioProcess as Process\nfrom .types import (\n",
		    header_py, s->protocol);
	else
		fprintf(o,
		        "%s\"\"\"asp.Client: one method per operation of ASP protocol %d.\"\"\"\n\n"
		        "from __future__ import annotations\n\n"
		        "from . import _spec\nfrom ._base import ClientBase, Process\n"
		        "from .types import (\n",
		        header_py, s->protocol);
	char cls[96];
	for (size_t i = 0; i < s->nops; i++) {
		py_class(cls, sizeof cls, "params", s->ops[i].name);
		fprintf(o, "    %s,\n", cls);
		if (!sdk_stream_proc_from(s->ops[i].name)) {
			py_class(cls, sizeof cls, "result", s->ops[i].name);
			fprintf(o, "    %s,\n", cls);
		}
	}
	fputs(aio ? ")\n\n__all__ = [\"Client\", \"Process\"]\n\n\nclass Client(ClientBase):\n"
	          : ")\n\n\nclass Client(ClientBase):\n",
	      o);
	if (aio)
		py_docstring(
		    o, "    ",
		    "A connection to one sandbox, for asyncio. Open it with await "
		    "Client.from_config(), await Client.stdio(argv) or Client.http(url, "
		    "token); close it with await close() or an async with block. Every "
		    "method is a coroutine; calls from many tasks are pipelined over one "
		    "connection, with asp.Client's deadlines (call_timeout_ms). spawn "
		    "returns a Process to iterate with async for. Relative paths join the "
		    "config's cwd, the config's env is added to exec and spawn, and its "
		    "timeout_ms applies when a call gives none. Errors raise AspError with "
		    ".code.");
	else
		py_docstring(o, "    ",
		             "A connection to one sandbox. Open it with Client.from_config() (the "
		             "sandbox .asp.json names), Client.stdio(argv) or Client.http(url, "
		             "token); close it with close() or a with block. Every method is "
		             "synchronous and thread-safe: calls from many threads are pipelined "
		             "over one connection. Relative paths join the config's cwd, the "
		             "config's env is added to exec and spawn, and its timeout_ms applies "
		             "when a call gives none. Errors raise AspError with .code.");
	fputs("\n    _spec = _spec\n", o);
	for (size_t i = 0; i < s->nops; i++) {
		const record *op = &s->ops[i];
		const char *from = sdk_stream_proc_from(op->name);
		char ret[96], pcls[96], ab[64], items[80][512];
		py_class(pcls, sizeof pcls, "params", op->name);
		py_class(ret, sizeof ret, "result", op->name);
		py_signature(o, op, from ? "Process" : ret, aio);
		fputs("        \"\"\"\n", o);
		py_doc(o, "        ", "", op->doc);
		if (op->one_of[0])
			fprintf(o, "\n        Give exactly one of ``%s`` and ``%s``.\n",
			        op->one_of[0], op->one_of[1]);
		if (from) {
			fputc('\n', o);
			py_doc(
			    o, "        ", "",
			    !strcmp(from, "result")
			        ? (aio ? "Returns a Process: async for over it yields OutputEvent "
			                 "chunks and the final ExitEvent; .proc is the handle and "
			                 ".result the SpawnResult. Needs stdio (notifications)."
			               : "Returns a Process: iterate it for OutputEvent chunks and "
			                 "the final ExitEvent; .proc is the handle and .result the "
			                 "SpawnResult. Needs stdio (notifications).")
			        : "Returns a Process that yields the replayed and live output "
			          "and the exit of that process; .result is the op's result. "
			          "Needs stdio (notifications).");
		}
		if (op->nfields)
			fputs("\n        Args:\n", o);
		for (size_t j = 0; j < op->nfields; j++) {
			const field *f = &op->fields[j];
			char line[1536];
			snprintf(line, sizeof line, "%s: %s", py_attr(f->name, ab, sizeof ab),
			         f->doc);
			py_doc(o, "            ", "    ", line);
		}
		fputs("        \"\"\"\n", o);
		size_t n = 0;
		for (size_t j = 0; j < op->nfields && n < 80; j++) {
			const char *a = py_attr(op->fields[j].name, ab, sizeof ab);
			snprintf(items[n++], 512, "%s=%s", a, a);
		}
		char head[128];
		snprintf(head, sizeof head, "params = %s", pcls);
		py_call(o, "        ", head, items, n, "");
		if (from)
			fprintf(o, "        return %sself._stream(\"%s\", params, \"%s\")\n",
			        aio ? "await " : "", op->name, from);
		else
			fprintf(o, "        return %sself._call(\"%s\", params)\n",
			        aio ? "await " : "", op->name);
	}
	return sdk_close(opt, o, rel);
}

static int by_text(const void *a, const void *b)
{
	return strcmp(a, b);
}

static int emit_init(const spec *s, const sdk_options *opt)
{
	const char *rel = "asp/__init__.py";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	fprintf(o,
	        "%s\"\"\"ASP client: run exec, read, write and filesystem ops in the sandbox "
	        "that .asp.json names.\n\n"
	        "    import asp\n\n"
	        "    with asp.Client.from_config() as sandbox:\n"
	        "        r = sandbox.exec(command=\"ls -l\")\n"
	        "        print(r.exit_code, r.stdout.decode())\n"
	        "        data = sandbox.read(\"notes.txt\").data\n\n"
	        "Generated by asp-sdkgen from spec/protocol.json (protocol %d).\n\"\"\"\n\n"
	        "from ._base import Process\nfrom ._errors import AspError\n"
	        "from ._spec import ERROR_CODES, MAX_MESSAGE, PROTOCOL\n"
	        "from . import aio\nfrom .client import Client\nfrom .types import (\n",
	        header_py, s->protocol);
	/* every exported class, sorted, for __all__ as well */
	size_t n = s->nrecords + 2 * s->nops + s->nnotes, k = 0;
	char(*names)[96] = calloc(n + 8, sizeof *names);
	if (!names) {
		fclose(o);
		return -1;
	}
	for (size_t i = 0; i < s->nrecords; i++)
		py_class(names[k++], 96, "record", s->records[i].name);
	for (size_t i = 0; i < s->nops; i++) {
		py_class(names[k++], 96, "params", s->ops[i].name);
		py_class(names[k++], 96, "result", s->ops[i].name);
	}
	for (size_t i = 0; i < s->nnotes; i++)
		py_class(names[k++], 96, "event", s->notes[i].name);
	qsort(names, k, sizeof *names, by_text);
	for (size_t i = 0; i < k; i++)
		fprintf(o, "    %s,\n", names[i]);
	fprintf(o, ")\n\n__version__ = \"%s\"\n\n__all__ = [\n", opt->version);
	static const char *const more[] = {"AspError",    "Client",   "ERROR_CODES",
	                                   "MAX_MESSAGE", "PROTOCOL", "Process"};
	for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
		snprintf(names[k++], 96, "%s", more[i]);
	qsort(names, k, sizeof *names, by_text);
	for (size_t i = 0; i < k; i++)
		fprintf(o, "    \"%s\",\n", names[i]);
	fputs("]\n", o);
	free(names);
	return sdk_close(opt, o, rel);
}

static int emit_pyproject(const spec *s, const sdk_options *opt)
{
	const char *rel = "pyproject.toml";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	fprintf(o,
	        "%s[build-system]\nrequires = [\"setuptools>=61\"]\n"
	        "build-backend = \"setuptools.build_meta\"\n\n"
	        "[project]\nname = \"asp-sdk\"\nversion = \"%s\"\n"
	        "description = \"Client for ASP protocol %d: run an agent's tools in the "
	        "sandbox .asp.json names\"\n"
	        "readme = \"README.md\"\nrequires-python = \">=3.10\"\n"
	        "license = {text = \"MIT\"}\ndependencies = [\"msgpack>=1.0\"]\n\n"
	        "[tool.setuptools]\npackages = [\"asp\"]\n\n"
	        "[tool.setuptools.package-data]\nasp = [\"py.typed\"]\n",
	        header_py, opt->version, s->protocol);
	if (sdk_close(opt, o, rel) < 0)
		return -1;
	rel = "asp/py.typed";
	o = sdk_open(opt, rel);
	return o ? sdk_close(opt, o, rel) : -1;
}

static int emit_readme(const spec *s, const sdk_options *opt)
{
	const char *rel = "README.md";
	FILE *o = sdk_open(opt, rel);
	if (!o)
		return -1;
	fprintf(o,
	        "<!-- Generated by asp-sdkgen from spec/protocol.json; do not edit. -->\n"
	        "# asp — Python client for ASP protocol %d\n\n"
	        "Runs an agent's tools (exec, read, write, filesystem ops) in the sandbox that "
	        "`.asp.json` names. Needs Python 3.10+ and `msgpack` (Debian: "
	        "`python3-msgpack`).\n\n"
	        "```python\nimport asp\n\n"
	        "with asp.Client.from_config() as sandbox:      # $ASP_CONFIG, or .asp.json "
	        "here or above\n"
	        "    r = sandbox.exec(command=\"make test\", timeout_ms=60_000)\n"
	        "    print(r.exit_code, r.stdout.decode())\n"
	        "    sandbox.write(\"notes.txt\", b\"hello\\n\", mkdirs=True)\n"
	        "    print(sandbox.read(\"notes.txt\").data)\n"
	        "    for ev in sandbox.spawn(argv=[\"tail\", \"-n\", \"3\", \"log.txt\"]):\n"
	        "        print(ev)                                # OutputEvent..., "
	        "ExitEvent\n```\n\n"
	        "- `asp.Client.stdio(argv)`, `asp.Client.http(url, token=None)`, "
	        "`asp.Client.from_config(path=None)`.\n"
	        "- One method per op, keyword arguments named as the spec's fields (a Python "
	        "keyword gets a trailing underscore: `rename(from_=..., to=...)`); the result "
	        "is a dataclass whose attributes are the spec's result fields.\n"
	        "- Errors raise `asp.AspError` with `.code` (one of `asp.ERROR_CODES`) and "
	        "`.message`.\n"
	        "- Thread-safe and pipelined: many threads may share one client.\n"
	        "- `asp.aio.Client` is the same for asyncio: `c = await "
	        "asp.aio.Client.stdio(argv)` (or `await ...from_config()`, `...http(url, "
	        "token)`), every method a coroutine, `async for ev in await c.spawn(...)`, "
	        "`await c.close()` or `async with`; the same deadlines (`call_timeout_ms`).\n"
	        "- `.asp.json` is found and validated as the C core does it, with the same "
	        "messages; the SDK serves the `stdio` and `http` transports and says so for "
	        "`ssh` (use the `asp` CLI or the C library there).\n"
	        "- HTTP carries no notifications: `spawn` and `proc_attach` need stdio; with "
	        "`\"websocket\": true` the SDK still calls `POST /v1/rpc`.\n\n"
	        "## Operations\n\n| method | returns | what it does |\n|---|---|---|\n",
	        s->protocol);
	for (size_t i = 0; i < s->nops; i++) {
		char ret[96];
		py_class(ret, sizeof ret, "result", s->ops[i].name);
		fprintf(o, "| `%s` | `%s` | %s |\n", s->ops[i].name,
		        sdk_stream_proc_from(s->ops[i].name) ? "Process" : ret, s->ops[i].doc);
	}
	fputs("\nThe fields of each op are in `docs/protocol.md` and in the docstrings.\n", o);
	return sdk_close(opt, o, rel);
}

int emit_python(const spec *s, const sdk_options *opt)
{
	for (size_t i = 0; i < s->nops; i++) {
		if (in_list(s->ops[i].name, py_reserved_methods) ||
		    in_list(s->ops[i].name, py_keywords)) {
			fprintf(stderr,
			        "asp-sdkgen: op %s would clash with a member of asp.Client\n",
			        s->ops[i].name);
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
	int rc = 0;
	if (emit_types(s, opt) < 0 ||
	    emit_spec_tables(s, opt, schema, schema_len, v0, v0_len) < 0 ||
	    emit_client(s, opt, false) < 0 || emit_client(s, opt, true) < 0 ||
	    emit_init(s, opt) < 0 || emit_pyproject(s, opt) < 0 || emit_readme(s, opt) < 0 ||
	    sdk_copy_runtime(opt, "python/", "") < 0)
		rc = -1;
	free(v0);
	free(schema);
	return rc;
}
