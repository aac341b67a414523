/* Loads spec/protocol.json and refuses anything the emitters could get wrong. */
#include "spec.h"

#include <stdlib.h>
#include <string.h>

static const char *const scalar_types[] = {"str",  "bin",        "uint",         "int",
                                           "bool", "array<str>", "map<str,str>", NULL};

static const char *str_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool known_record(const spec *s, const char *name)
{
	for (size_t i = 0; i < s->nrecords; i++)
		if (strcmp(s->records[i].name, name) == 0)
			return true;
	return false;
}

static int load_fields(const spec *s, const char *where, json_t *arr, field **out, size_t *n)
{
	if (!json_is_array(arr)) {
		fprintf(stderr, "asp-sdkgen: %s: expected an array of fields\n", where);
		return -1;
	}
	*n = json_array_size(arr);
	if (*n > 64) {
		fprintf(stderr, "asp-sdkgen: %s: more than 64 fields\n", where);
		return -1;
	}
	*out = calloc(*n ? *n : 1, sizeof **out);
	for (size_t i = 0; i < *n; i++) {
		json_t *j = json_array_get(arr, i);
		field *f = &(*out)[i];
		f->name = str_of(j, "name");
		f->type = str_of(j, "type");
		f->doc = str_of(j, "doc");
		f->c_name = str_of(j, "c_name");
		f->role = str_of(j, "role");
		if (!f->c_name)
			f->c_name = f->name;
		json_t *since = json_object_get(j, "since");
		if (!f->name || !f->type || !f->doc) {
			fprintf(stderr, "asp-sdkgen: %s field %zu: needs name, type and doc\n",
			        where, i);
			return -1;
		}
		if (!json_is_integer(since) || json_integer_value(since) < 1) {
			fprintf(stderr,
			        "asp-sdkgen: %s.%s: no \"since\": every field must say "
			        "which protocol version added it\n",
			        where, f->name);
			return -1;
		}
		f->since = (int)json_integer_value(since);
		if (f->since > s->protocol) {
			fprintf(stderr, "asp-sdkgen: %s.%s: since %d is after protocol %d\n", where,
			        f->name, f->since, s->protocol);
			return -1;
		}
		f->optional = json_is_true(json_object_get(j, "optional"));
		f->nullable = json_is_true(json_object_get(j, "nullable"));
		f->def = json_object_get(j, "default");
		f->has_default = f->def != NULL;
		bool ok = false;
		for (int t = 0; scalar_types[t]; t++)
			ok |= strcmp(f->type, scalar_types[t]) == 0;
		if (!ok && strncmp(f->type, "array<", 6) == 0) {
			size_t len = strlen(f->type);
			if (len < 8 || len - 7 >= sizeof f->record_name ||
			    f->type[len - 1] != '>') {
				fprintf(stderr, "asp-sdkgen: %s.%s: bad type %s\n", where, f->name,
				        f->type);
				return -1;
			}
			char *r = f->record_name;
			memcpy(r, f->type + 6, len - 7);
			r[len - 7] = '\0';
			f->record = r;
			ok = known_record(s, r);
		} else if (!ok && known_record(s, f->type)) {
			if (strlen(f->type) >= sizeof f->record_name) {
				fprintf(stderr, "asp-sdkgen: %s.%s: bad type %s\n", where, f->name,
				        f->type);
				return -1;
			}
			strcpy(f->record_name, f->type);
			f->record = f->record_name;
			f->one_record = ok = true;
			if (!f->optional) {
				fprintf(stderr,
				        "asp-sdkgen: %s.%s: a nested record must be optional\n",
				        where, f->name);
				return -1;
			}
		}
		if (!ok) {
			fprintf(stderr, "asp-sdkgen: %s.%s: unknown type %s\n", where, f->name,
			        f->type);
			return -1;
		}
		if (f->has_default && strcmp(f->type, "uint") && strcmp(f->type, "int") &&
		    strcmp(f->type, "bool") && strcmp(f->type, "bin")) {
			fprintf(stderr,
			        "asp-sdkgen: %s.%s: defaults only for uint, int, bool, bin\n",
			        where, f->name);
			return -1;
		}
		if (f->has_default && strcmp(f->type, "bin") == 0 &&
		    !(json_is_string(f->def) && json_string_length(f->def) == 0)) {
			fprintf(stderr, "asp-sdkgen: %s.%s: a bin default must be \"\"\n", where,
			        f->name);
			return -1;
		}
		if (f->role && strcmp(f->role, "path") && strcmp(f->role, "env") &&
		    strcmp(f->role, "timeout")) {
			fprintf(stderr, "asp-sdkgen: %s.%s: unknown role %s\n", where, f->name,
			        f->role);
			return -1;
		}
	}
	return 0;
}

static int load_records(spec *s, const char *key, record **out, size_t *n, bool is_op)
{
	json_t *arr = json_object_get(s->root, key);
	if (!json_is_array(arr)) {
		fprintf(stderr, "asp-sdkgen: \"%s\" must be an array\n", key);
		return -1;
	}
	*n = json_array_size(arr);
	*out = calloc(*n ? *n : 1, sizeof **out);
	for (size_t i = 0; i < *n; i++) {
		json_t *j = json_array_get(arr, i);
		record *r = &(*out)[i];
		r->name = str_of(j, "name");
		r->doc = str_of(j, "doc");
		json_t *since = json_object_get(j, "since");
		if (!r->name || !r->doc) {
			fprintf(stderr, "asp-sdkgen: %s[%zu]: needs name and doc\n", key, i);
			return -1;
		}
		if (!json_is_integer(since) || json_integer_value(since) < 1) {
			fprintf(stderr,
			        "asp-sdkgen: %s: no \"since\": every op, record and "
			        "notification must say which protocol version added it\n",
			        r->name);
			return -1;
		}
		r->since = (int)json_integer_value(since);
		r->streaming = json_is_true(json_object_get(j, "streaming"));
		json_t *one = json_array_get(json_object_get(j, "one_of"), 0);
		if (one) {
			r->one_of[0] = json_string_value(json_array_get(one, 0));
			r->one_of[1] = json_string_value(json_array_get(one, 1));
		}
		char where[128];
		snprintf(where, sizeof where, "%s", r->name);
		if (load_fields(s, where, json_object_get(j, is_op ? "params" : "fields"),
		                &r->fields, &r->nfields) < 0)
			return -1;
		if (is_op) {
			snprintf(where, sizeof where, "%s result", r->name);
			if (load_fields(s, where, json_object_get(j, "result"), &r->results,
			                &r->nresults) < 0)
				return -1;
		}
	}
	return 0;
}

const sdk_file *sdk_spec_file(const char *name)
{
	for (const sdk_file *f = sdk_spec_files; f->path; f++) {
		if (strcmp(f->path, name) == 0)
			return f;
	}
	return NULL;
}

int spec_load(const char *path, spec *s)
{
	memset(s, 0, sizeof *s);
	json_error_t je;
	const sdk_file *builtin = path ? NULL : sdk_spec_file("protocol.json");
	if (!path && !builtin) {
		fprintf(stderr, "asp-sdkgen: no built-in spec; give --spec\n");
		return -1;
	}
	if (builtin)
		path = "<built-in protocol.json>";
	s->root = builtin ? json_loadb((const char *)builtin->data, builtin->len,
	                               JSON_REJECT_DUPLICATES, &je)
	                  : json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!s->root) {
		fprintf(stderr, "asp-sdkgen: %s:%d:%d: %s\n", path, je.line, je.column, je.text);
		return -1;
	}
	s->protocol = (int)json_integer_value(json_object_get(s->root, "protocol"));
	s->max_message = (long)json_integer_value(json_object_get(s->root, "max_message"));
	s->doc = str_of(s->root, "doc");
	if (s->protocol < 1 || s->max_message < 1024 || !s->doc) {
		fprintf(stderr, "asp-sdkgen: %s: needs protocol, max_message and doc\n", path);
		return -1;
	}
	if (load_records(s, "records", &s->records, &s->nrecords, false) < 0 ||
	    load_records(s, "ops", &s->ops, &s->nops, true) < 0)
		return -1;
	/* notifications use "params" like ops but have no result */
	json_t *arr = json_object_get(s->root, "notifications");
	s->nnotes = json_array_size(arr);
	s->notes = calloc(s->nnotes ? s->nnotes : 1, sizeof *s->notes);
	for (size_t i = 0; i < s->nnotes; i++) {
		json_t *j = json_array_get(arr, i);
		record *r = &s->notes[i];
		r->name = str_of(j, "name");
		r->doc = str_of(j, "doc");
		json_t *since = json_object_get(j, "since");
		if (!r->name || !r->doc || !json_is_integer(since)) {
			fprintf(stderr, "asp-sdkgen: notification %zu: needs name, doc and since\n",
			        i);
			return -1;
		}
		r->since = (int)json_integer_value(since);
		if (load_fields(s, r->name, json_object_get(j, "params"), &r->fields, &r->nfields) <
		    0)
			return -1;
	}
	arr = json_object_get(s->root, "errors");
	s->nerrors = json_array_size(arr);
	s->errors = calloc(s->nerrors ? s->nerrors : 1, sizeof *s->errors);
	for (size_t i = 0; i < s->nerrors; i++) {
		json_t *j = json_array_get(arr, i);
		s->errors[i].code = str_of(j, "code");
		s->errors[i].doc = str_of(j, "doc");
		s->errors[i].status = (int)json_integer_value(json_object_get(j, "status"));
		s->errors[i].since = (int)json_integer_value(json_object_get(j, "since"));
		if (!s->errors[i].code || !s->errors[i].doc || s->errors[i].status < 1 ||
		    s->errors[i].since < 1) {
			fprintf(stderr, "asp-sdkgen: errors[%zu]: needs code, status, since, doc\n",
			        i);
			return -1;
		}
	}
	for (size_t i = 0; i < s->nops; i++) {
		record *op = &s->ops[i];
		for (int k = 0; k < 2 && op->one_of[0]; k++) {
			bool found = false;
			for (size_t f = 0; f < op->nfields; f++)
				found |= strcmp(op->fields[f].name, op->one_of[k]) == 0 &&
				         op->fields[f].optional;
			if (!found) {
				fprintf(stderr,
				        "asp-sdkgen: %s: one_of names %s, which is not an "
				        "optional field\n",
				        op->name, op->one_of[k]);
				return -1;
			}
		}
	}
	return 0;
}

void spec_free(spec *s)
{
	for (size_t i = 0; i < s->nrecords; i++)
		free(s->records[i].fields);
	for (size_t i = 0; i < s->nops; i++) {
		free(s->ops[i].fields);
		free(s->ops[i].results);
	}
	for (size_t i = 0; i < s->nnotes; i++)
		free(s->notes[i].fields);
	free(s->records);
	free(s->ops);
	free(s->notes);
	free(s->errors);
	json_decref(s->root);
}
