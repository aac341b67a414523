/*
 * Table-driven msgpack codec. asp-sdkgen emits one asp_record_desc per params, result,
 * notification and record type of the spec; this file's functions interpret them.
 */
#ifndef ASP_CODEC_H
#define ASP_CODEC_H

#include "asp/arena.h"
#include "asp/status.h"
#include "asp/types.h"

#include <msgpack.h>

enum asp_field_type {
	ASP_FT_STR,
	ASP_FT_BIN,
	ASP_FT_UINT,
	ASP_FT_INT,
	ASP_FT_BOOL,
	ASP_FT_STRV,
	ASP_FT_STRMAP,
	ASP_FT_RECORDS, /* array of `record`, stored as {T *items; size_t count;} */
	ASP_FT_RECORD,  /* one `record`, stored as const T * (NULL: absent; always optional) */
};

enum asp_field_flags {
	ASP_FF_OPTIONAL = 1 << 0, /* may be absent (str: NULL; others: has_ flag false) */
	ASP_FF_NULLABLE = 1 << 1, /* encoded as nil when absent, never omitted */
	ASP_FF_DEFAULT = 1 << 2,  /* absent means `def` */
	ASP_FF_PATH = 1 << 3,     /* a sandbox path: the client joins it with config cwd */
	ASP_FF_ENV = 1 << 4,      /* the env map: the client merges config env into it */
	ASP_FF_TIMEOUT = 1 << 5,  /* timeout_ms: 0 takes the config default */
};

typedef struct asp_record_desc asp_record_desc;

typedef struct asp_field_desc {
	const char *name;
	uint8_t name_len;
	uint8_t type;  /* enum asp_field_type */
	uint8_t flags; /* enum asp_field_flags */
	uint16_t offset;
	int32_t has_offset; /* offset of `bool has_<name>`, or -1 */
	uint64_t def;       /* default of uint/int/bool fields (int as two's complement) */
	const asp_record_desc *record;
} asp_field_desc;

struct asp_record_desc {
	const char *name; /* "exec params", "list_entry", ... for messages */
	size_t size;
	size_t nfields;
	const asp_field_desc *fields;
	const char *one_of[2]; /* exactly one of these two fields must be present, or NULLs */
};

/* Sets every field of `out` to its default (absent / zero when it has none). */
void asp_record_init(const asp_record_desc *d, void *out);

/*
 * Decodes a msgpack map into `out` (which it initializes first). Unknown keys are
 * ignored; nil for an optional field means absent. Strings are copied into `a` with a
 * NUL (a NUL inside one is invalid_argument); bins point into the frame. Errors are
 * invalid_argument naming the field.
 */
asp_status asp_record_decode(const asp_record_desc *d, const msgpack_object *o, void *out,
                             asp_arena *a, asp_error *err);

/* Encodes `in` as a msgpack map. Fields equal to their default are left out. 0 or -1. */
int asp_record_encode(const asp_record_desc *d, msgpack_packer *pk, const void *in);

#endif
