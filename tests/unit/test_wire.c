/*
 * The generated codecs and the wire layer: round trips of every op's params and result
 * and of every notification, the exact bytes of a request, hostile vectors, and dispatch.
 */
#include "cu_run.h"
#include "wire.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

static asp_arena *arena;

/* ---- generic fill and compare through the descriptors ------------------------------ */

static void fill(const asp_record_desc *d, void *rec, int seed);

static void fill_field(const asp_field_desc *f, void *rec, int seed)
{
	char *p = (char *)rec + f->offset;
	char buf[64];
	if (f->has_offset >= 0)
		*(bool *)((char *)rec + f->has_offset) = true;
	switch (f->type) {
	case ASP_FT_STR:
		snprintf(buf, sizeof buf, "v-%s-%d-\xff\x01 $(x)", f->name, seed);
		*(const char **)p = asp_arena_strndup(arena, buf, strlen(buf));
		break;
	case ASP_FT_BIN: {
		uint8_t *b = asp_arena_alloc(arena, 300);
		for (int i = 0; i < 300; i++)
			b[i] = (uint8_t)(i + seed);
		((asp_bytes *)p)->data = b;
		((asp_bytes *)p)->len = 300;
		break;
	}
	case ASP_FT_UINT: *(uint64_t *)p = UINT64_C(0x100000001) * (uint64_t)(seed + 1); break;
	case ASP_FT_INT: *(int64_t *)p = -5 - seed; break;
	case ASP_FT_BOOL: *(bool *)p = !(f->flags & ASP_FF_DEFAULT && f->def); break;
	case ASP_FT_STRV: {
		const char **v = asp_arena_alloc(arena, 3 * sizeof *v);
		v[0] = "a", v[1] = "", v[2] = "b c";
		((asp_strv *)p)->items = v;
		((asp_strv *)p)->count = 3;
		break;
	}
	case ASP_FT_STRMAP: {
		asp_strmap_entry *m = asp_arena_alloc(arena, 2 * sizeof *m);
		m[0] = (asp_strmap_entry){"K", "v"};
		m[1] = (asp_strmap_entry){"EMPTY", ""};
		((asp_strmap *)p)->items = m;
		((asp_strmap *)p)->count = 2;
		break;
	}
	case ASP_FT_RECORDS: {
		char *items = asp_arena_alloc(arena, 2 * f->record->size);
		fill(f->record, items, seed + 1);
		fill(f->record, items + f->record->size, seed + 2);
		struct {
			void *items;
			size_t count;
		} arr = {items, 2};
		memcpy(p, &arr, sizeof arr);
		break;
	}
	case ASP_FT_RECORD: {
		void *rec = asp_arena_alloc(arena, f->record->size);
		fill(f->record, rec, seed + 1);
		memcpy(p, &rec, sizeof rec);
		break;
	}
	}
}

static void fill(const asp_record_desc *d, void *rec, int seed)
{
	asp_record_init(d, rec);
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		/* one_of: fill only the first of the pair, as a valid sender would */
		if (d->one_of[1] && !strcmp(f->name, d->one_of[1]))
			continue;
		fill_field(f, rec, seed + (int)i);
	}
}

static int same(const asp_record_desc *d, const void *x, const void *y)
{
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		const char *a = (const char *)x + f->offset, *b = (const char *)y + f->offset;
		if (f->has_offset >= 0 && *(const bool *)((const char *)x + f->has_offset) !=
		                              *(const bool *)((const char *)y + f->has_offset))
			return 0;
		switch (f->type) {
		case ASP_FT_STR: {
			const char *s = *(const char *const *)a, *t = *(const char *const *)b;
			if ((!s) != (!t) || (s && strcmp(s, t)))
				return 0;
			break;
		}
		case ASP_FT_BIN: {
			const asp_bytes *s = (const asp_bytes *)a, *t = (const asp_bytes *)b;
			if (s->len != t->len || (s->len && memcmp(s->data, t->data, s->len)))
				return 0;
			break;
		}
		case ASP_FT_UINT:
		case ASP_FT_INT:
			if (memcmp(a, b, 8))
				return 0;
			break;
		case ASP_FT_BOOL:
			if (*(const bool *)a != *(const bool *)b)
				return 0;
			break;
		case ASP_FT_STRV: {
			const asp_strv *s = (const asp_strv *)a, *t = (const asp_strv *)b;
			if (s->count != t->count)
				return 0;
			for (size_t k = 0; k < s->count; k++)
				if (strcmp(s->items[k], t->items[k]))
					return 0;
			break;
		}
		case ASP_FT_STRMAP: {
			const asp_strmap *s = (const asp_strmap *)a, *t = (const asp_strmap *)b;
			if (s->count != t->count)
				return 0;
			for (size_t k = 0; k < s->count; k++)
				if (strcmp(s->items[k].key, t->items[k].key) ||
				    strcmp(s->items[k].value, t->items[k].value))
					return 0;
			break;
		}
		case ASP_FT_RECORDS: {
			struct {
				char *items;
				size_t count;
			} s, t;
			memcpy(&s, a, sizeof s);
			memcpy(&t, b, sizeof t);
			if (s.count != t.count)
				return 0;
			for (size_t k = 0; k < s.count; k++)
				if (!same(f->record, s.items + k * f->record->size,
				          t.items + k * f->record->size))
					return 0;
			break;
		}
		case ASP_FT_RECORD: {
			const void *s, *t;
			memcpy(&s, a, sizeof s);
			memcpy(&t, b, sizeof t);
			if ((!s) != (!t) || (s && !same(f->record, s, t)))
				return 0;
			break;
		}
		}
	}
	return 1;
}

/* Encodes `in` as a bare map, decodes it back through prescan and msgpack, compares. */
static void round_trip(const asp_record_desc *d, int seed)
{
	void *in = asp_arena_alloc(arena, d->size), *out = asp_arena_alloc(arena, d->size);
	fill(d, in, seed);
	asp_buf b;
	asp_buf_init(&b);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &b, asp_buf_write);
	CU_ASSERT_EQUAL_FATAL(asp_record_encode(d, &pk, in), 0);
	asp_error err;
	CU_ASSERT_EQUAL(asp_wire_prescan(b.data, b.len, &err), ASP_OK);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	CU_ASSERT_EQUAL(msgpack_unpack_next(&u, (const char *)b.data, b.len, &off),
	                MSGPACK_UNPACK_SUCCESS);
	asp_status st = asp_record_decode(d, &u.data, out, arena, &err);
	if (st)
		fprintf(stderr, "\n%s: %s\n", d->name, err.message);
	CU_ASSERT_EQUAL(st, ASP_OK);
	if (!same(d, in, out))
		fprintf(stderr, "\n%s: round trip changed a field\n", d->name);
	CU_ASSERT_TRUE(same(d, in, out));
	msgpack_unpacked_destroy(&u);
	asp_buf_free(&b);
}

static void test_round_trip_every_type(void)
{
	int n = 0;
	for (int i = 0; i < ASP_OP_COUNT; i++) {
		round_trip(asp_op_descs[i].params, i);
		round_trip(asp_op_descs[i].result, i);
		n += 2;
	}
	for (int i = 0; i < ASP_NOTICE_COUNT; i++, n++)
		round_trip(asp_notice_descs[i].params, i);
	CU_ASSERT_EQUAL(n, 2 * ASP_OP_COUNT + ASP_NOTICE_COUNT);
	asp_arena_reset(arena);
}

static void test_defaults_absent_and_omitted(void)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	CU_ASSERT_EQUAL(p.max_output, 8u << 20);
	CU_ASSERT_EQUAL(p.timeout_ms, 0);
	CU_ASSERT_PTR_NULL(p.command);
	CU_ASSERT_FALSE(p.has_argv);
	asp_write_params w;
	asp_write_params_init(&w);
	CU_ASSERT_EQUAL(w.mode, 0644);
	asp_stat_params s;
	asp_stat_params_init(&s);
	CU_ASSERT_TRUE(s.follow);
	asp_mkdir_params m;
	asp_mkdir_params_init(&m);
	CU_ASSERT_EQUAL(m.mode, 0755);
	asp_rename_params r;
	asp_rename_params_init(&r);
	CU_ASSERT_TRUE(r.overwrite);
}

/* The wire bytes of a request are a contract with every SDK: pin one exactly. */
static void test_request_bytes(void)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "true";
	p.timeout_ms = 5; /* non-default: sent; max_output left at its default: omitted */
	asp_buf b;
	asp_buf_init(&b);
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&b, 7, ASP_OP_EXEC, &p), 0);
	static const uint8_t want[] = {
	    0x00, 0x00, 0x00, 0x22,                                           /* frame length 34 */
	    0x94, 0x00, 0x07, 0xa4, 'e', 'x', 'e', 'c',                       /* [0, 7, "exec", */
	    0x82, 0xa7, 'c',  'o',  'm', 'm', 'a', 'n', 'd',                  /* {"command": */
	    0xa4, 't',  'r',  'u',  'e',                                      /*  "true", */
	    0xaa, 't',  'i',  'm',  'e', 'o', 'u', 't', '_', 'm', 's', 0x05}; /* "timeout_ms": 5} */
	CU_ASSERT_EQUAL(b.len, sizeof want);
	CU_ASSERT_EQUAL(memcmp(b.data, want, sizeof want < b.len ? sizeof want : b.len), 0);
	asp_buf_free(&b);
}

static void test_error_response_round_trip(void)
{
	asp_error e, back;
	asp_error_errno(&e, ENOTEMPTY, "/w/d", "remove /w/d");
	asp_buf b;
	asp_buf_init(&b);
	CU_ASSERT_EQUAL_FATAL(asp_wire_response_err(&b, 42, &e), 0);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	CU_ASSERT_EQUAL_FATAL(asp_wire_decode(b.data + 4, b.len - 4, &u, &m, &back), ASP_OK);
	CU_ASSERT_EQUAL(m.type, ASP_MSG_RESPONSE);
	CU_ASSERT_EQUAL(m.id, 42);
	CU_ASSERT_PTR_NOT_NULL_FATAL(m.error);
	CU_ASSERT_EQUAL(asp_wire_error_decode(m.error, &back), ASP_E_NOT_EMPTY);
	CU_ASSERT_STRING_EQUAL(back.message, e.message);
	CU_ASSERT_STRING_EQUAL(back.path, "/w/d");
	CU_ASSERT_EQUAL(back.sys_errno, ENOTEMPTY);
	msgpack_unpacked_destroy(&u);
	asp_buf_free(&b);
}

static void test_depth_limit(void)
{
	uint8_t msg[40];
	asp_error err;
	memset(msg, 0x91, 31);
	msg[31] = 0x90; /* 32 levels: the outermost is depth 1, this empty one depth 32 */
	CU_ASSERT_EQUAL(asp_wire_prescan(msg, 32, &err), ASP_OK);
	memset(msg, 0x91, 32);
	msg[32] = 0x90; /* 33 levels */
	CU_ASSERT_EQUAL(asp_wire_prescan(msg, 33, &err), ASP_E_PROTOCOL_ERROR);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "deeper than 32"));
}

static void test_decode_names_field(void)
{
	/* {"path": 42} as read params */
	const uint8_t bad[] = {0x81, 0xa4, 'p', 'a', 't', 'h', 0x2a};
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	msgpack_unpack_next(&u, (const char *)bad, sizeof bad, &off);
	asp_read_params p;
	asp_error err;
	CU_ASSERT_EQUAL(
	    asp_record_decode(asp_op_descs[ASP_OP_READ].params, &u.data, &p, arena, &err),
	    ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(err.message, "read params: field 'path': expected str, got uint");
	msgpack_unpacked_destroy(&u);
	asp_arena_reset(arena);
}

/* msgpack for the pair "command": "x" */
#define COMMAND_X 0xa7, 'c', 'o', 'm', 'm', 'a', 'n', 'd', 0xa1, 'x'

/* Decodes the msgpack map in `bytes` as spawn params. */
static asp_status decode_spawn(const uint8_t *bytes, size_t len, asp_spawn_params *p,
                               asp_error *err)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	asp_status st = ASP_E_PROTOCOL_ERROR;
	if (msgpack_unpack_next(&u, (const char *)bytes, len, &off) == MSGPACK_UNPACK_SUCCESS)
		st = asp_record_decode(asp_op_descs[ASP_OP_SPAWN].params, &u.data, p, arena, err);
	msgpack_unpacked_destroy(&u);
	return st;
}

/* spawn's tty, the one nested record: through a request and back, absent, defaults. */
static void test_tty_record(void)
{
	asp_tty tty = {40, 132, "screen"};
	asp_spawn_params in, out;
	asp_spawn_params_init(&in);
	in.command = "sh";
	in.tty = &tty;
	asp_buf b;
	asp_buf_init(&b);
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&b, 9, ASP_OP_SPAWN, &in), 0);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_wire_decode(b.data + 4, b.len - 4, &u, &m, &err), ASP_OK);
	CU_ASSERT_EQUAL_FATAL(
	    asp_record_decode(asp_op_descs[ASP_OP_SPAWN].params, m.params, &out, arena, &err),
	    ASP_OK);
	CU_ASSERT_STRING_EQUAL(out.command, "sh");
	CU_ASSERT_PTR_NOT_NULL_FATAL(out.tty);
	CU_ASSERT_PTR_NOT_EQUAL(out.tty, &tty);
	CU_ASSERT_EQUAL(out.tty->rows, 40);
	CU_ASSERT_EQUAL(out.tty->cols, 132);
	CU_ASSERT_STRING_EQUAL(out.tty->term, "screen");
	asp_wire_unpacked_done(&u);
	asp_buf_free(&b);

	/* absent: NULL, and the key is not sent */
	asp_spawn_params_init(&in);
	in.command = "sh";
	asp_buf_init(&b);
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&b, 9, ASP_OP_SPAWN, &in), 0);
	CU_ASSERT_PTR_NULL(memmem(b.data, b.len, "tty", 3));
	msgpack_unpacked_init(&u);
	CU_ASSERT_EQUAL_FATAL(asp_wire_decode(b.data + 4, b.len - 4, &u, &m, &err), ASP_OK);
	CU_ASSERT_EQUAL(
	    asp_record_decode(asp_op_descs[ASP_OP_SPAWN].params, m.params, &out, arena, &err),
	    ASP_OK);
	CU_ASSERT_PTR_NULL(out.tty);
	asp_wire_unpacked_done(&u);
	asp_buf_free(&b);

	/* {"command": "x", "tty": {}}: the spec's defaults, 24 x 80, term absent */
	const uint8_t empty[] = {0x82, COMMAND_X, 0xa3, 't', 't', 'y', 0x80};
	CU_ASSERT_EQUAL_FATAL(decode_spawn(empty, sizeof empty, &out, &err), ASP_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(out.tty);
	CU_ASSERT_EQUAL(out.tty->rows, 24);
	CU_ASSERT_EQUAL(out.tty->cols, 80);
	CU_ASSERT_PTR_NULL(out.tty->term);
	asp_arena_reset(arena);
}

/* A tty of the wrong type, or with a field of the wrong type, is refused by name. */
static void test_tty_wrong_types(void)
{
	asp_spawn_params p;
	asp_error err;
	/* {"command": "x", "tty": "big"} */
	const uint8_t str[] = {0x82, COMMAND_X, 0xa3, 't', 't', 'y', 0xa3, 'b', 'i', 'g'};
	CU_ASSERT_EQUAL(decode_spawn(str, sizeof str, &p, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(err.message, "spawn params: field 'tty': expected map, got str");
	/* {"command": "x", "tty": [24, 80]} */
	const uint8_t arr[] = {0x82, COMMAND_X, 0xa3, 't', 't', 'y', 0x92, 0x18, 0x50};
	CU_ASSERT_EQUAL(decode_spawn(arr, sizeof arr, &p, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(err.message, "spawn params: field 'tty': expected map, got array");
	/* {"command": "x", "tty": {"rows": "24"}} */
	const uint8_t rows[] = {0x82, COMMAND_X, 0xa3, 't', 't',  'y', 0x81, 0xa4,
	                        'r',  'o',       'w',  's', 0xa2, '2', '4'};
	CU_ASSERT_EQUAL(decode_spawn(rows, sizeof rows, &p, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "'rows': expected uint, got str"));
	/* {"command": "x", "tty": {"term": 7}} */
	const uint8_t term[] = {0x82, COMMAND_X, 0xa3, 't', 't', 'y', 0x81,
	                        0xa4, 't',       'e',  'r', 'm', 0x07};
	CU_ASSERT_EQUAL(decode_spawn(term, sizeof term, &p, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "'term': expected str, got uint"));
	/* nil: absent, as for every optional field */
	const uint8_t nil[] = {0x82, COMMAND_X, 0xa3, 't', 't', 'y', 0xc0};
	CU_ASSERT_EQUAL(decode_spawn(nil, sizeof nil, &p, &err), ASP_OK);
	CU_ASSERT_PTR_NULL(p.tty);
	asp_arena_reset(arena);
}

/* ---- hostile vectors --------------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	uint8_t *buf = malloc(1 << 16);
	*len = fread(buf, 1, 1 << 16, f);
	fclose(f);
	return buf;
}

/* A backend whose every op fails, so a request that decodes shows its decode result. */
static asp_status stat_ok(void *self, const asp_stat_params *p, asp_stat_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)self, (void)p, (void)a, (void)err;
	r->type = "file";
	return ASP_OK;
}

static asp_status read_huge(void *self, const asp_read_params *p, asp_read_result *r, asp_arena *a,
                            asp_error *err)
{
	(void)self, (void)p, (void)err;
	r->data.len = 2048;
	r->data.data = asp_arena_alloc(a, r->data.len);
	return ASP_OK;
}

static asp_ops test_ops = {.stat = stat_ok, .read = read_huge};

/* Serves one message body the way a responder does; returns the answer's code or -1. */
static int serve(const uint8_t *body, size_t len, size_t max_message, asp_error *got)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	asp_error err;
	asp_buf out;
	asp_buf_init(&out);
	int code;
	asp_status st = asp_wire_decode(body, len, &u, &m, &err);
	if (st && !m.has_id) {
		*got = err;
		code = -(int)st; /* closes: no answer */
	} else if (st) {
		asp_wire_response_err(&out, m.id, &err);
		code = (int)st;
		*got = err;
		CU_ASSERT_EQUAL(m.id, 5);
	} else {
		asp_dispatch(&test_ops, NULL, &m, &out, max_message);
		msgpack_unpacked r;
		msgpack_unpacked_init(&r);
		asp_msg rm;
		CU_ASSERT_EQUAL_FATAL(asp_wire_decode(out.data + 4, out.len - 4, &r, &rm, &err), 0);
		CU_ASSERT_EQUAL(rm.id, m.id);
		code = rm.error ? (int)asp_wire_error_decode(rm.error, got) : 0;
		msgpack_unpacked_destroy(&r);
	}
	asp_buf_free(&out);
	msgpack_unpacked_destroy(&u);
	return code;
}

static const struct {
	const char *file;
	int code; /* negative: closes with that status; positive: answered with it */
} expected[] = {
    {"req-method-not-str.bin", ASP_E_INVALID_ARGUMENT},
    {"req-params-not-map.bin", ASP_E_INVALID_ARGUMENT},
    {"req-path-wrong-type.bin", ASP_E_INVALID_ARGUMENT},
    {"req-missing-path.bin", ASP_E_INVALID_ARGUMENT},
    {"req-path-with-nul.bin", ASP_E_INVALID_ARGUMENT},
    {"req-unknown-method.bin", ASP_E_UNSUPPORTED},
    {"req-exec-both.bin", ASP_E_INVALID_ARGUMENT},
    {"req-uint-negative.bin", ASP_E_INVALID_ARGUMENT},
};

/*
 * The object limit (docs/faults.md): a request with more than 2^20 objects is too_large
 * for its id before msgpack-c allocates; a response that size is a protocol_error.
 */
static void test_object_limit(void)
{
	size_t nils = ASP_WIRE_MAX_OBJECTS_REQUEST; /* + the outer objects: one too many */
	size_t cap = 32 + nils;
	uint8_t *m = malloc(cap);
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);
	for (int kind = 0; kind < 2; kind++) {
		size_t at = 0;
		static const uint8_t head[] = {0x94, 0x00, 0xcd, 0x12, 0x34, 0xa4, 's', 't', 'a',
		                               't',  0x81, 0xa4, 'p',  'a',  't',  'h', 0xdd};
		memcpy(m, head, sizeof head);
		if (kind)
			m[1] = 0x01; /* a response's shape does not matter: the count comes first */
		at = sizeof head;
		m[at++] = (uint8_t)(nils >> 24), m[at++] = (uint8_t)(nils >> 16);
		m[at++] = (uint8_t)(nils >> 8), m[at++] = (uint8_t)nils;
		memset(m + at, 0xc0, nils);
		at += nils;
		size_t objects = 0;
		asp_msg msg;
		asp_error err;
		asp_status st = asp_wire_check(m, at, &objects, &msg, &err);
		if (kind == 0) {
			CU_ASSERT_EQUAL(st, ASP_E_TOO_LARGE);
			CU_ASSERT(msg.has_id && msg.id == 0x1234);
			CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "request 4660"));
		} else {
			/* under the response limit: counted, for the caller's budget */
			CU_ASSERT_EQUAL(st, ASP_OK);
			CU_ASSERT_EQUAL(objects, nils + 7);
		}
	}
	free(m);
}

/* asp_error_set may be given err's own message or path as arguments. */
static void test_error_aliasing(void)
{
	asp_error e;
	asp_error_set(&e, ASP_E_IO_ERROR, "/some/path", "inner detail");
	asp_error_set(&e, ASP_E_PROTOCOL_ERROR, e.path, "outer context (%s) at %s", e.message,
	              e.path);
	CU_ASSERT_STRING_EQUAL(e.message, "outer context (inner detail) at /some/path");
	CU_ASSERT_STRING_EQUAL(e.path, "/some/path");
	asp_error_set(&e, ASP_E_IO_ERROR, NULL, "inner");
	e.sys_errno = 5;
	asp_error_prefix(&e, ASP_E_TRANSPORT_ERROR, "writing %s", "x");
	CU_ASSERT_STRING_EQUAL(e.message, "writing x: inner");
	CU_ASSERT_EQUAL(e.code, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_EQUAL(e.sys_errno, 5);
}

static void test_vectors(void)
{
	const char *dir = getenv("ASP_VECTORS");
	CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
	DIR *d = opendir(dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	int seen = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (strncmp(e->d_name, "msg-", 4) && strncmp(e->d_name, "req-", 4))
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		size_t len = 0;
		uint8_t *body = slurp(path, &len);
		CU_ASSERT_PTR_NOT_NULL_FATAL(body);
		asp_error err;
		int code = serve(body, len, 1 << 20, &err);
		int want = -ASP_E_PROTOCOL_ERROR;
		for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
			if (!strcmp(expected[i].file, e->d_name))
				want = expected[i].code;
		if (code != want)
			fprintf(stderr, "\n%s: got %d (%s), want %d\n", e->d_name, code,
			        err.message, want);
		CU_ASSERT_EQUAL(code, want);
		CU_ASSERT_NOT_EQUAL(err.message[0], '\0');
		free(body);
		seen++;
	}
	closedir(d);
	CU_ASSERT_TRUE(seen >= 20);
}

static void test_dispatch_too_large(void)
{
	/* [0, 9, "read", {"path": "x"}] with max_message 1024: the 2 KiB result is refused */
	const uint8_t req[] = {0x94, 0x00, 0x09, 0xa4, 'r', 'e', 'a',  'd',
	                       0x81, 0xa4, 'p',  'a',  't', 'h', 0xa1, 'x'};
	asp_error err;
	CU_ASSERT_EQUAL(serve(req, sizeof req, 1024, &err), ASP_E_TOO_LARGE);
	CU_ASSERT_EQUAL(serve(req, sizeof req, 1 << 20, &err), 0);
	/* an op the backend lacks answers unsupported, not a crash */
	const uint8_t mk[] = {0x94, 0x00, 0x09, 0xa5, 'm', 'k', 'd',  'i', 'r',
	                      0x81, 0xa4, 'p',  'a',  't', 'h', 0xa1, 'x'};
	CU_ASSERT_EQUAL(serve(mk, sizeof mk, 1 << 20, &err), ASP_E_UNSUPPORTED);
}

/* A frame with large bins kept by reference is byte for byte the copied frame. */
static void test_refs_same_bytes(void)
{
	static uint8_t big[200000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)(i * 7);
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = "/w/big";
	p.data.data = big;
	p.data.len = sizeof big;
	asp_buf copied, ref;
	asp_buf_init(&copied);
	asp_buf_init(&ref);
	ref.ref_min = 65536;
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&copied, 3, ASP_OP_WRITE, &p), 0);
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&ref, 3, ASP_OP_WRITE, &p), 0);
	CU_ASSERT_EQUAL(ref.nrefs, 1);
	CU_ASSERT_TRUE(ref.len < 100); /* the data was not copied */
	CU_ASSERT_EQUAL(asp_buf_frame_len(&ref), copied.len);
	struct iovec iov[8];
	int n = asp_buf_iov(&ref, iov, 8);
	CU_ASSERT_EQUAL_FATAL(n, 2);
	uint8_t *flat = malloc(asp_buf_frame_len(&ref));
	size_t at = 0;
	for (int i = 0; i < n; i++) {
		memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	CU_ASSERT_EQUAL(at, copied.len);
	CU_ASSERT_EQUAL(memcmp(flat, copied.data, copied.len), 0);
	CU_ASSERT_EQUAL(asp_buf_iov(&ref, iov, 1), -1);
	/* the buffer is reused for a small frame: no stale reference survives */
	asp_stat_params s;
	asp_stat_params_init(&s);
	s.path = "x";
	CU_ASSERT_EQUAL(asp_wire_request(&ref, 4, ASP_OP_STAT, &s), 0);
	CU_ASSERT_EQUAL(ref.nrefs, 0);
	CU_ASSERT_EQUAL(asp_buf_frame_len(&ref), ref.len);
	free(flat);
	asp_buf_free(&copied);
	asp_buf_free(&ref);
}

/*
 * The zone asp_wire_unpacked_done keeps serves the next message, and a message that
 * needed more than its first chunk leaves it a working zone (spare.h).
 */
static void test_kept_zone(void)
{
	static const char *argv[3000];
	for (size_t i = 0; i < sizeof argv / sizeof argv[0]; i++)
		argv[i] = "x";
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = sizeof argv / sizeof argv[0]; /* 3,000 objects: past 8 KiB of them */
	asp_buf big, small;
	asp_buf_init(&big);
	asp_buf_init(&small);
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&big, 1, ASP_OP_EXEC, &p), 0);
	asp_exec_params_init(&p);
	p.command = "true";
	CU_ASSERT_EQUAL_FATAL(asp_wire_request(&small, 2, ASP_OP_EXEC, &p), 0);

	msgpack_unpacked u;
	asp_msg m;
	asp_error err;
	asp_wire_unpacked_init(&u);
	msgpack_zone *z = u.zone;
	CU_ASSERT_PTR_NOT_NULL_FATAL(z);
	CU_ASSERT_EQUAL_FATAL(asp_wire_decode(big.data + 4, big.len - 4, &u, &m, &err), ASP_OK);
	CU_ASSERT_EQUAL(m.id, 1);
	CU_ASSERT_PTR_EQUAL(u.zone, z); /* unpacked into it, not into one of msgpack's */
	asp_wire_unpacked_done(&u);
	CU_ASSERT_PTR_NULL(u.zone);

	void *decoy = malloc(8192); /* would take a freed zone's chunk */
	asp_wire_unpacked_init(&u);
	CU_ASSERT_PTR_EQUAL(u.zone, z);
	CU_ASSERT_EQUAL_FATAL(asp_wire_decode(small.data + 4, small.len - 4, &u, &m, &err), 0);
	CU_ASSERT_EQUAL(m.id, 2);
	CU_ASSERT_EQUAL(m.method_len, 4);
	asp_wire_unpacked_done(&u);
	free(decoy);
	asp_buf_free(&big);
	asp_buf_free(&small);
}

int main(int argc, char **argv)
{
	asp_ops_complete(&test_ops);
	arena = asp_arena_new();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("wire", NULL, NULL);
	CU_add_test(s, "round trip of every generated type", test_round_trip_every_type);
	CU_add_test(s, "defaults and absent fields", test_defaults_absent_and_omitted);
	CU_add_test(s, "exact request bytes", test_request_bytes);
	CU_add_test(s, "error response round trip", test_error_response_round_trip);
	CU_add_test(s, "nesting limit of 32", test_depth_limit);
	CU_add_test(s, "decode errors name the field", test_decode_names_field);
	CU_add_test(s, "spawn's tty: a nested record through the codec", test_tty_record);
	CU_add_test(s, "spawn's tty: wrong types are invalid_argument naming the field",
	            test_tty_wrong_types);
	CU_add_test(s, "hostile vectors", test_vectors);
	CU_add_test(s, "object limit: too_large for a request, counted for a response",
	            test_object_limit);
	CU_add_test(s, "asp_error_set with err's own message as an argument", test_error_aliasing);
	CU_add_test(s, "dispatch: too large, unsupported", test_dispatch_too_large);
	CU_add_test(s, "large bins by reference", test_refs_same_bytes);
	CU_add_test(s, "a message's zone is kept for the next", test_kept_zone);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	asp_arena_free(arena);
	return failed ? 1 : 0;
}
