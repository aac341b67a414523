/*
 * Protocol compatibility: nothing released may be removed or change meaning. Compares
 * the current spec with a frozen copy of a released one.
 */
#include "spec.h"

#include <string.h>

static const field *find_field(const field *fs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(fs[i].name, name))
			return &fs[i];
	return NULL;
}

static const record *find_record(const record *rs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(rs[i].name, name))
			return &rs[i];
	return NULL;
}

/*
 * Something the frozen protocol lacks must say it came later: a `since` at or below the
 * frozen protocol would claim that old responders have it.
 */
static int check_new(const char *what, const char *name, int since, int frozen_protocol)
{
	if (since > frozen_protocol)
		return 0;
	fprintf(stderr,
	        "incompatible: %s %s is not in protocol %d but says since %d (new entries need "
	        "since %d or later)\n",
	        what, name, frozen_protocol, since, frozen_protocol + 1);
	return 1;
}

/* Params: a receiver must still accept what old senders send. */
static int compare_fields(const char *where, const field *old, size_t nold, const field *cur,
                          size_t ncur, bool is_input, int frozen_protocol)
{
	int bad = 0;
	for (size_t i = 0; i < nold; i++) {
		const field *o = &old[i];
		const field *c = find_field(cur, ncur, o->name);
		if (!c) {
			fprintf(stderr, "incompatible: %s.%s was removed\n", where, o->name);
			bad++;
			continue;
		}
		if (strcmp(o->type, c->type)) {
			fprintf(stderr, "incompatible: %s.%s changed type from %s to %s\n", where,
			        o->name, o->type, c->type);
			bad++;
		}
		if (o->since != c->since) {
			fprintf(stderr, "incompatible: %s.%s changed since from %d to %d\n", where,
			        o->name, o->since, c->since);
			bad++;
		}
		bool o_opt = o->optional || o->has_default || o->nullable;
		bool c_opt = c->optional || c->has_default || c->nullable;
		if (is_input && o_opt && !c_opt) {
			fprintf(stderr, "incompatible: %s.%s became required\n", where, o->name);
			bad++;
		}
		if (!is_input && !o_opt && c_opt) {
			fprintf(stderr, "incompatible: %s.%s may now be absent in results\n", where,
			        o->name);
			bad++;
		}
		if (o->def && (!c->def || !json_equal(o->def, c->def))) {
			fprintf(stderr, "incompatible: %s.%s changed its default\n", where,
			        o->name);
			bad++;
		}
	}
	for (size_t i = 0; i < ncur; i++) {
		const field *c = &cur[i];
		if (find_field(old, nold, c->name))
			continue;
		char name[160];
		snprintf(name, sizeof name, "%s.%s", where, c->name);
		bad += check_new("field", name, c->since, frozen_protocol);
		if (is_input && !(c->optional || c->has_default || c->nullable)) {
			fprintf(stderr, "incompatible: new field %s.%s is required\n", where,
			        c->name);
			bad++;
		}
	}
	return bad;
}

/* Whole ops, notifications or records the frozen protocol lacks, and their fields. */
static int check_new_records(const char *what, const record *old, size_t nold, const record *cur,
                             size_t ncur, int fp)
{
	int bad = 0;
	for (size_t i = 0; i < ncur; i++) {
		const record *c = &cur[i];
		if (find_record(old, nold, c->name))
			continue;
		bad += check_new(what, c->name, c->since, fp);
		char name[160];
		for (size_t k = 0; k < c->nfields; k++) {
			snprintf(name, sizeof name, "%s.%s", c->name, c->fields[k].name);
			bad += check_new("field", name, c->fields[k].since, fp);
		}
		for (size_t k = 0; k < c->nresults; k++) {
			snprintf(name, sizeof name, "%s result.%s", c->name, c->results[k].name);
			bad += check_new("field", name, c->results[k].since, fp);
		}
	}
	return bad;
}

int check_compat(const spec *frozen, const spec *cur)
{
	int bad = 0;
	const int fp = frozen->protocol;
	bad += check_new_records("op", frozen->ops, frozen->nops, cur->ops, cur->nops, fp);
	bad += check_new_records("notification", frozen->notes, frozen->nnotes, cur->notes,
	                         cur->nnotes, fp);
	bad += check_new_records("record", frozen->records, frozen->nrecords, cur->records,
	                         cur->nrecords, fp);
	for (size_t j = 0; j < cur->nerrors; j++) {
		bool known = false;
		for (size_t i = 0; i < frozen->nerrors && !known; i++)
			known = !strcmp(frozen->errors[i].code, cur->errors[j].code);
		if (!known)
			bad +=
			    check_new("error code", cur->errors[j].code, cur->errors[j].since, fp);
	}
	for (size_t i = 0; i < frozen->nops; i++) {
		const record *o = &frozen->ops[i];
		const record *c = find_record(cur->ops, cur->nops, o->name);
		if (!c) {
			fprintf(stderr, "incompatible: op %s was removed\n", o->name);
			bad++;
			continue;
		}
		char where[96];
		snprintf(where, sizeof where, "%s params", o->name);
		bad +=
		    compare_fields(where, o->fields, o->nfields, c->fields, c->nfields, true, fp);
		snprintf(where, sizeof where, "%s result", o->name);
		bad += compare_fields(where, o->results, o->nresults, c->results, c->nresults,
		                      false, fp);
	}
	for (size_t i = 0; i < frozen->nnotes; i++) {
		const record *o = &frozen->notes[i];
		const record *c = find_record(cur->notes, cur->nnotes, o->name);
		if (!c) {
			fprintf(stderr, "incompatible: notification %s was removed\n", o->name);
			bad++;
			continue;
		}
		bad += compare_fields(o->name, o->fields, o->nfields, c->fields, c->nfields, false,
		                      fp);
	}
	for (size_t i = 0; i < frozen->nrecords; i++) {
		const record *o = &frozen->records[i];
		const record *c = find_record(cur->records, cur->nrecords, o->name);
		if (!c) {
			fprintf(stderr, "incompatible: record %s was removed\n", o->name);
			bad++;
			continue;
		}
		bad += compare_fields(o->name, o->fields, o->nfields, c->fields, c->nfields, false,
		                      fp);
	}
	for (size_t i = 0; i < frozen->nerrors; i++) {
		bool found = false;
		for (size_t j = 0; j < cur->nerrors; j++)
			if (!strcmp(frozen->errors[i].code, cur->errors[j].code)) {
				found = true;
				if (frozen->errors[i].status != cur->errors[j].status) {
					fprintf(
					    stderr,
					    "incompatible: error %s changed its status number\n",
					    frozen->errors[i].code);
					bad++;
				}
			}
		if (!found) {
			fprintf(stderr, "incompatible: error code %s was removed\n",
			        frozen->errors[i].code);
			bad++;
		}
	}
	return bad;
}
