/* Interprets the generated record descriptors: init, decode from msgpack, encode. */
#include "codec.h"

#include <string.h>

/* The layout every generated record array has: {T *items; size_t count;}. */
struct any_array {
	void *items;
	size_t count;
};

static const char *type_name(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL: return "nil";
	case MSGPACK_OBJECT_BOOLEAN: return "bool";
	case MSGPACK_OBJECT_POSITIVE_INTEGER: return "uint";
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "negative int";
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: return "float";
	case MSGPACK_OBJECT_STR: return "str";
	case MSGPACK_OBJECT_BIN: return "bin";
	case MSGPACK_OBJECT_ARRAY: return "array";
	case MSGPACK_OBJECT_MAP: return "map";
	case MSGPACK_OBJECT_EXT: return "ext";
	}
	return "unknown";
}

static const char *const expected_names[] = {
    [ASP_FT_STR] = "str",
    [ASP_FT_BIN] = "bin",
    [ASP_FT_UINT] = "uint",
    [ASP_FT_INT] = "int",
    [ASP_FT_BOOL] = "bool",
    [ASP_FT_STRV] = "array of str",
    [ASP_FT_STRMAP] = "map of str to str",
    [ASP_FT_RECORDS] = "array of maps",
    [ASP_FT_RECORD] = "map",
};

static void set_has(const asp_field_desc *f, void *out, bool v)
{
	if (f->has_offset >= 0)
		*(bool *)((char *)out + f->has_offset) = v;
}

void asp_record_init(const asp_record_desc *d, void *out)
{
	memset(out, 0, d->size);
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		if (!(f->flags & ASP_FF_DEFAULT))
			continue;
		char *p = (char *)out + f->offset;
		switch (f->type) {
		case ASP_FT_UINT: *(uint64_t *)p = f->def; break;
		case ASP_FT_INT: *(int64_t *)p = (int64_t)f->def; break;
		case ASP_FT_BOOL: *(bool *)p = f->def != 0; break;
		default: break; /* str/bin/array defaults are empty, which zero already is */
		}
	}
}

static asp_status bad_type(const asp_record_desc *d, const asp_field_desc *f, const char *sub,
                           const msgpack_object *o, asp_error *err)
{
	return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
	                     "%s: field '%s'%s: expected %s, got %s", d->name, f->name, sub,
	                     sub[0] ? "str" : expected_names[f->type], type_name(o));
}

static asp_status copy_str(const asp_record_desc *d, const asp_field_desc *f,
                           const msgpack_object *o, const char **dst, asp_arena *a, asp_error *err)
{
	const char *s = o->via.str.ptr;
	uint32_t n = o->via.str.size;
	if (n && memchr(s, '\0', n))
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: field '%s': string contains a NUL byte", d->name,
		                     f->name);
	char *c = asp_arena_strndup(a, s, n);
	if (!c)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	*dst = c;
	return ASP_OK;
}

static asp_status decode_field(const asp_record_desc *d, const asp_field_desc *f,
                               const msgpack_object *o, void *out, asp_arena *a, asp_error *err)
{
	char *p = (char *)out + f->offset;
	switch (f->type) {
	case ASP_FT_STR:
		if (o->type != MSGPACK_OBJECT_STR)
			return bad_type(d, f, "", o, err);
		return copy_str(d, f, o, (const char **)p, a, err);
	case ASP_FT_BIN:
		if (o->type != MSGPACK_OBJECT_BIN)
			return bad_type(d, f, "", o, err);
		((asp_bytes *)p)->data = (const uint8_t *)o->via.bin.ptr;
		((asp_bytes *)p)->len = o->via.bin.size;
		return ASP_OK;
	case ASP_FT_UINT:
		if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return bad_type(d, f, "", o, err);
		*(uint64_t *)p = o->via.u64;
		return ASP_OK;
	case ASP_FT_INT:
		if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
			if (o->via.u64 > INT64_MAX)
				return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
				                     "%s: field '%s': value out of int64 range",
				                     d->name, f->name);
			*(int64_t *)p = (int64_t)o->via.u64;
		} else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
			*(int64_t *)p = o->via.i64;
		} else {
			return bad_type(d, f, "", o, err);
		}
		return ASP_OK;
	case ASP_FT_BOOL:
		if (o->type != MSGPACK_OBJECT_BOOLEAN)
			return bad_type(d, f, "", o, err);
		*(bool *)p = o->via.boolean;
		return ASP_OK;
	case ASP_FT_STRV: {
		if (o->type != MSGPACK_OBJECT_ARRAY)
			return bad_type(d, f, "", o, err);
		uint32_t n = o->via.array.size;
		const char **items = asp_arena_alloc(a, (n ? n : 1) * sizeof *items);
		if (!items)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		for (uint32_t i = 0; i < n; i++) {
			const msgpack_object *e = &o->via.array.ptr[i];
			if (e->type != MSGPACK_OBJECT_STR)
				return bad_type(d, f, " item", e, err);
			asp_status st = copy_str(d, f, e, &items[i], a, err);
			if (st)
				return st;
		}
		((asp_strv *)p)->items = items;
		((asp_strv *)p)->count = n;
		return ASP_OK;
	}
	case ASP_FT_STRMAP: {
		if (o->type != MSGPACK_OBJECT_MAP)
			return bad_type(d, f, "", o, err);
		uint32_t n = o->via.map.size;
		asp_strmap_entry *items = asp_arena_alloc(a, (n ? n : 1) * sizeof *items);
		if (!items)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		for (uint32_t i = 0; i < n; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];
			if (kv->key.type != MSGPACK_OBJECT_STR)
				return bad_type(d, f, " key", &kv->key, err);
			if (kv->val.type != MSGPACK_OBJECT_STR)
				return bad_type(d, f, " value", &kv->val, err);
			asp_status st = copy_str(d, f, &kv->key, &items[i].key, a, err);
			if (!st)
				st = copy_str(d, f, &kv->val, &items[i].value, a, err);
			if (st)
				return st;
		}
		((asp_strmap *)p)->items = items;
		((asp_strmap *)p)->count = n;
		return ASP_OK;
	}
	case ASP_FT_RECORDS: {
		if (o->type != MSGPACK_OBJECT_ARRAY)
			return bad_type(d, f, "", o, err);
		uint32_t n = o->via.array.size;
		const asp_record_desc *rd = f->record;
		char *items = asp_arena_alloc(a, (n ? n : 1) * rd->size);
		if (!items)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		for (uint32_t i = 0; i < n; i++) {
			asp_status st = asp_record_decode(rd, &o->via.array.ptr[i],
			                                  items + (size_t)i * rd->size, a, err);
			if (st)
				return st;
		}
		struct any_array arr = {items, n};
		memcpy(p, &arr, sizeof arr);
		return ASP_OK;
	}
	case ASP_FT_RECORD: {
		if (o->type != MSGPACK_OBJECT_MAP)
			return bad_type(d, f, "", o, err);
		void *rec = asp_arena_alloc(a, f->record->size);
		if (!rec)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		asp_status st = asp_record_decode(f->record, o, rec, a, err);
		if (st)
			return st;
		memcpy(p, &rec, sizeof rec);
		return ASP_OK;
	}
	}
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "unknown field type");
}

static int find_field(const asp_record_desc *d, const char *key, uint32_t len)
{
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		if (f->name_len == len && memcmp(f->name, key, len) == 0)
			return (int)i;
	}
	return -1;
}

static bool is_present(const asp_record_desc *d, const char *name, const void *rec, uint64_t seen)
{
	(void)rec;
	int i = find_field(d, name, (uint32_t)strlen(name));
	return i >= 0 && (seen >> i & 1);
}

asp_status asp_record_decode(const asp_record_desc *d, const msgpack_object *o, void *out,
                             asp_arena *a, asp_error *err)
{
	asp_record_init(d, out);
	if (o->type != MSGPACK_OBJECT_MAP)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: expected a map, got %s", d->name, type_name(o));
	uint64_t seen = 0; /* generated records have at most 64 fields (sdkgen checks) */
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];
		if (kv->key.type != MSGPACK_OBJECT_STR)
			continue; /* receivers ignore what they do not know */
		int fi = find_field(d, kv->key.via.str.ptr, kv->key.via.str.size);
		if (fi < 0)
			continue;
		const asp_field_desc *f = &d->fields[fi];
		if (kv->val.type == MSGPACK_OBJECT_NIL &&
		    (f->flags & (ASP_FF_OPTIONAL | ASP_FF_NULLABLE | ASP_FF_DEFAULT)))
			continue;
		asp_status st = decode_field(d, f, &kv->val, out, a, err);
		if (st)
			return st;
		set_has(f, out, true);
		seen |= UINT64_C(1) << fi;
	}
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		if (!(seen >> i & 1) &&
		    !(f->flags & (ASP_FF_OPTIONAL | ASP_FF_NULLABLE | ASP_FF_DEFAULT)))
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "%s: missing field '%s'", d->name, f->name);
	}
	if (d->one_of[0]) {
		bool x = is_present(d, d->one_of[0], out, seen);
		bool y = is_present(d, d->one_of[1], out, seen);
		if (x == y)
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "%s: give exactly one of fields '%s' and '%s'",
			                     d->name, d->one_of[0], d->one_of[1]);
	}
	return ASP_OK;
}

/* Whether an encoder leaves the field out: absent optional, or equal to its default. */
static bool omit_field(const asp_field_desc *f, const void *in)
{
	const char *p = (const char *)in + f->offset;
	if (f->flags & ASP_FF_NULLABLE)
		return false;
	if (f->has_offset >= 0)
		return !*(const bool *)((const char *)in + f->has_offset);
	if ((f->type == ASP_FT_STR || f->type == ASP_FT_RECORD) && (f->flags & ASP_FF_OPTIONAL))
		return *(const void *const *)p == NULL;
	if (!(f->flags & ASP_FF_DEFAULT))
		return false;
	switch (f->type) {
	case ASP_FT_UINT: return *(const uint64_t *)p == f->def;
	case ASP_FT_INT: return *(const int64_t *)p == (int64_t)f->def;
	case ASP_FT_BOOL: return *(const bool *)p == (f->def != 0);
	case ASP_FT_BIN: return ((const asp_bytes *)p)->len == 0;
	default: return false;
	}
}

static int pack_str(msgpack_packer *pk, const char *s)
{
	if (!s)
		s = "";
	size_t n = strlen(s);
	return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static int encode_field(const asp_field_desc *f, msgpack_packer *pk, const void *in)
{
	const char *p = (const char *)in + f->offset;
	switch (f->type) {
	case ASP_FT_STR: {
		const char *s = *(const char *const *)p;
		if (!s && (f->flags & ASP_FF_NULLABLE))
			return msgpack_pack_nil(pk);
		return pack_str(pk, s);
	}
	case ASP_FT_BIN: {
		const asp_bytes *b = (const asp_bytes *)p;
		return msgpack_pack_bin(pk, b->len) || msgpack_pack_bin_body(pk, b->data, b->len);
	}
	case ASP_FT_UINT: return msgpack_pack_uint64(pk, *(const uint64_t *)p);
	case ASP_FT_INT: return msgpack_pack_int64(pk, *(const int64_t *)p);
	case ASP_FT_BOOL: return *(const bool *)p ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	case ASP_FT_STRV: {
		const asp_strv *v = (const asp_strv *)p;
		if (msgpack_pack_array(pk, v->count))
			return -1;
		for (size_t i = 0; i < v->count; i++)
			if (pack_str(pk, v->items[i]))
				return -1;
		return 0;
	}
	case ASP_FT_STRMAP: {
		const asp_strmap *m = (const asp_strmap *)p;
		if (msgpack_pack_map(pk, m->count))
			return -1;
		for (size_t i = 0; i < m->count; i++)
			if (pack_str(pk, m->items[i].key) || pack_str(pk, m->items[i].value))
				return -1;
		return 0;
	}
	case ASP_FT_RECORDS: {
		struct any_array arr;
		memcpy(&arr, p, sizeof arr);
		if (msgpack_pack_array(pk, arr.count))
			return -1;
		for (size_t i = 0; i < arr.count; i++)
			if (asp_record_encode(f->record, pk,
			                      (const char *)arr.items + i * f->record->size))
				return -1;
		return 0;
	}
	case ASP_FT_RECORD: {
		const void *rec;
		memcpy(&rec, p, sizeof rec);
		return asp_record_encode(f->record, pk, rec);
	}
	}
	return -1;
}

int asp_record_encode(const asp_record_desc *d, msgpack_packer *pk, const void *in)
{
	size_t n = 0;
	for (size_t i = 0; i < d->nfields; i++)
		n += !omit_field(&d->fields[i], in);
	if (msgpack_pack_map(pk, n))
		return -1;
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		if (omit_field(f, in))
			continue;
		if (msgpack_pack_str(pk, f->name_len) ||
		    msgpack_pack_str_body(pk, f->name, f->name_len) || encode_field(f, pk, in))
			return -1;
	}
	return 0;
}
