/* Frames and messages (docs/design.md, "Wire format"): prescan, decode, and the frame builders. */
#include "wire.h"
#include "spare.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

void asp_buf_init(asp_buf *b)
{
	memset(b, 0, sizeof *b);
}

void asp_buf_free(asp_buf *b)
{
	size_t ref_min = b->ref_min;
	free(b->data);
	free(b->refs);
	asp_buf_init(b);
	b->ref_min = ref_min;
}

static int add_ref(asp_buf *b, const char *data, size_t len)
{
	if (b->nrefs == b->refcap) {
		size_t cap = b->refcap ? b->refcap * 2 : 4;
		asp_buf_ref *r = realloc(b->refs, cap * sizeof *r);
		if (!r)
			return -1;
		b->refs = r;
		b->refcap = cap;
	}
	b->refs[b->nrefs++] = (asp_buf_ref){b->len, (const uint8_t *)data, len};
	b->ref_bytes += len;
	return 0;
}

int asp_buf_iov(const asp_buf *b, struct iovec *iov, int max)
{
	int n = 0;
	size_t from = 0;
	for (size_t i = 0; i <= b->nrefs; i++) {
		size_t to = i < b->nrefs ? b->refs[i].at : b->len;
		if (to > from) {
			if (n == max)
				return -1;
			iov[n++] = (struct iovec){b->data + from, to - from};
		}
		from = to;
		if (i < b->nrefs && b->refs[i].len) {
			if (n == max)
				return -1;
			iov[n++] = (struct iovec){(void *)b->refs[i].data, b->refs[i].len};
		}
	}
	return n;
}

int asp_iov_advance(struct iovec *iov, int cnt, int at, size_t done)
{
	while (at < cnt && done >= iov[at].iov_len)
		done -= iov[at++].iov_len;
	if (done) {
		iov[at].iov_base = (uint8_t *)iov[at].iov_base + done;
		iov[at].iov_len -= done;
	}
	return at;
}

int asp_buf_reserve(asp_buf *b, size_t extra)
{
	if (b->cap - b->len >= extra)
		return 0;
	size_t need = b->len + extra;
	if (need < b->len)
		return -1;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap * 2 > cap ? cap * 2 : need;
	uint8_t *p = realloc(b->data, cap);
	if (!p)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

int asp_buf_write(void *vb, const char *data, size_t len)
{
	asp_buf *b = vb;
	if (len == 0) /* an empty str/bin body may come with a NULL pointer */
		return 0;
	if (b->ref_min && len >= b->ref_min)
		return add_ref(b, data, len);
	if (asp_buf_reserve(b, len) < 0)
		return -1;
	memcpy(b->data + b->len, data, len);
	b->len += len;
	return 0;
}

/* ---- prescan ---------------------------------------------------------------------- */

static uint64_t be(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static asp_status malformed(asp_error *err, const char *why, size_t at)
{
	return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL, "malformed message: %s at byte %zu",
	                     why, at);
}

/*
 * Iterative walk: `pending[d]` counts the objects still to read at depth d. A container
 * claiming more elements than bytes remain is refused before anything is allocated,
 * since every element takes at least one byte.
 */
asp_status asp_wire_scan(const uint8_t *data, size_t len, size_t max_objects, size_t *objects,
                         asp_error *err)
{
	uint64_t pending[ASP_WIRE_MAX_DEPTH + 1];
	int depth = 0;
	pending[0] = 1;
	size_t pos = 0, count_all = 0;
	while (depth > 0 || pending[0] > 0) {
		if (pending[depth] == 0) {
			depth--;
			continue;
		}
		pending[depth]--;
		if (++count_all > max_objects)
			return asp_error_set(err, ASP_E_TOO_LARGE, NULL,
			                     "the message holds more than %zu msgpack objects, the "
			                     "decoding budget's limit",
			                     max_objects);
		if (pos >= len)
			return malformed(err, "truncated", pos);
		uint8_t t = data[pos++];
		uint64_t skip = 0, count = 0;
		int hdr = 0;
		bool container = false;
		if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
			/* fixint, nil, bool */
		} else if (t >= 0x80 && t <= 0x8f) {
			count = (uint64_t)(t & 0x0f) * 2, container = true;
		} else if (t >= 0x90 && t <= 0x9f) {
			count = t & 0x0f, container = true;
		} else if (t >= 0xa0 && t <= 0xbf) {
			skip = t & 0x1f;
		} else {
			/* clang-format off: one line per msgpack type byte */
			switch (t) {
			case 0xc4:
			case 0xd9: hdr = 1; break; /* bin8, str8 */
			case 0xc5:
			case 0xda: hdr = 2; break; /* bin16, str16 */
			case 0xc6:
			case 0xdb: hdr = 4; break;           /* bin32, str32 */
			case 0xc7: hdr = 1, skip = 1; break; /* ext8 */
			case 0xc8: hdr = 2, skip = 1; break; /* ext16 */
			case 0xc9: hdr = 4, skip = 1; break; /* ext32 */
			case 0xca: skip = 4; break;          /* float32 */
			case 0xcb: skip = 8; break;          /* float64 */
			case 0xcc:
			case 0xd0: skip = 1; break;
			case 0xcd:
			case 0xd1: skip = 2; break;
			case 0xce:
			case 0xd2: skip = 4; break;
			case 0xcf:
			case 0xd3: skip = 8; break;
			case 0xd4: skip = 2; break; /* fixext */
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			case 0xdc:
			case 0xde: hdr = 2, container = true; break; /* array16, map16 */
			case 0xdd:
			case 0xdf: hdr = 4, container = true; break; /* array32, map32 */
			default: return malformed(err, "invalid type byte", pos - 1); /* 0xc1 */
			}
			/* clang-format on */
			if (hdr) {
				if (len - pos < (size_t)hdr)
					return malformed(err, "truncated", pos);
				uint64_t n = be(data + pos, hdr);
				pos += hdr;
				if (container)
					count = (t == 0xde || t == 0xdf) ? n * 2 : n;
				else
					skip += n;
			}
		}
		if (container) {
			if (depth + 1 > ASP_WIRE_MAX_DEPTH)
				return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
				                     "malformed message: nested deeper than %d",
				                     ASP_WIRE_MAX_DEPTH);
			if (count > len - pos)
				return asp_error_set(
				    err, ASP_E_PROTOCOL_ERROR, NULL,
				    "malformed message: a container at byte %zu claims "
				    "%llu elements but only %zu bytes remain",
				    pos, (unsigned long long)count, len - pos);
			if (count > 0)
				pending[++depth] = count;
			continue;
		}
		if (skip > len - pos)
			return malformed(err, "truncated", pos);
		pos += skip;
	}
	if (pos != len)
		return malformed(err, "trailing bytes", pos);
	if (objects)
		*objects = count_all;
	return ASP_OK;
}

asp_status asp_wire_prescan(const uint8_t *data, size_t len, asp_error *err)
{
	return asp_wire_scan(data, len, ASP_WIRE_MAX_OBJECTS_RESPONSE, NULL, err);
}

bool asp_wire_peek_id(const uint8_t *m, size_t len, int type, uint32_t *id)
{
	if (len < 4 || m[0] != 0x94 || m[1] != type)
		return false;
	uint8_t t = m[2];
	if (t <= 0x7f) {
		*id = t;
	} else if (t == 0xcc && len >= 5) {
		*id = m[3];
	} else if (t == 0xcd && len >= 6) {
		*id = (uint32_t)m[3] << 8 | m[4];
	} else if (t == 0xce && len >= 8) {
		*id = (uint32_t)m[3] << 24 | (uint32_t)m[4] << 16 | (uint32_t)m[5] << 8 | m[6];
	} else {
		return false;
	}
	return true;
}

/* ---- decode ----------------------------------------------------------------------- */

static bool get_u32(const msgpack_object *o, uint32_t *out)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > UINT32_MAX)
		return false;
	*out = (uint32_t)o->via.u64;
	return true;
}

asp_status asp_wire_check(const uint8_t *data, size_t len, size_t *objects, asp_msg *msg,
                          asp_error *err)
{
	memset(msg, 0, sizeof *msg);
	uint32_t id;
	bool request = asp_wire_peek_id(data, len, ASP_MSG_REQUEST, &id);
	asp_status st = asp_wire_scan(
	    data, len, request ? ASP_WIRE_MAX_OBJECTS_REQUEST : ASP_WIRE_MAX_OBJECTS_RESPONSE,
	    objects, err);
	if (st == ASP_E_TOO_LARGE && request) {
		msg->type = ASP_MSG_REQUEST;
		msg->has_id = true;
		msg->id = id;
		return asp_error_prefix(err, ASP_E_TOO_LARGE, "request %u", id);
	}
	if (st)
		err->code = st = ASP_E_PROTOCOL_ERROR;
	return st;
}

asp_status asp_wire_decode(const uint8_t *data, size_t len, msgpack_unpacked *u, asp_msg *msg,
                           asp_error *err)
{
	size_t objects;
	asp_status st = asp_wire_check(data, len, &objects, msg, err);
	if (st)
		return st;
	return asp_wire_unpack(data, len, u, msg, err);
}

static asp_spare spare_zone;

void asp_wire_unpacked_init(msgpack_unpacked *u)
{
	msgpack_unpacked_init(u);
	u->zone = asp_spare_take(&spare_zone);
	if (!u->zone) /* NULL (out of memory): msgpack_unpack_next makes its own */
		u->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
}

void asp_wire_unpacked_done(msgpack_unpacked *u)
{
	msgpack_zone *z = u->zone;
	u->zone = NULL;
	if (!z)
		return;
	msgpack_zone_clear(z); /* frees all but its first chunk: what it keeps is bounded */
	z = asp_spare_keep(&spare_zone, z);
	if (z)
		msgpack_zone_free(z);
}

asp_status asp_wire_unpack(const uint8_t *data, size_t len, msgpack_unpacked *u, asp_msg *msg,
                           asp_error *err)
{
	memset(msg, 0, sizeof *msg);
	size_t off = 0;
	/*
	 * Into the zone asp_wire_unpacked_init gave `u`: msgpack_unpack_next would free it
	 * and make a new one.
	 */
	msgpack_unpack_return r =
	    u->zone ? msgpack_unpack((const char *)data, len, &off, u->zone, &u->data)
	            : msgpack_unpack_next(u, (const char *)data, len, &off);
	if (r != MSGPACK_UNPACK_SUCCESS || off != len)
		return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                     "malformed message: msgpack could not decode it");
	const msgpack_object *o = &u->data;
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 3 ||
	    o->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                     "not an ASP message: expected [type, ...] array");
	const msgpack_object *a = o->via.array.ptr;
	uint32_t n = o->via.array.size;
	msg->type = (int)a[0].via.u64;
	switch (a[0].via.u64) {
	case ASP_MSG_REQUEST:
		if (n != 4 || !get_u32(&a[1], &msg->id))
			return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
			                     "malformed request: expected [0, uint32 id, method, "
			                     "params]");
		msg->has_id = true;
		if (a[2].type != MSGPACK_OBJECT_STR)
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "request %u: method must be a str", msg->id);
		msg->method = a[2].via.str.ptr;
		msg->method_len = a[2].via.str.size;
		if (a[3].type == MSGPACK_OBJECT_MAP) {
			msg->params = &a[3];
		} else if (a[3].type != MSGPACK_OBJECT_NIL) {
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "request %u: params must be a map", msg->id);
		}
		return ASP_OK;
	case ASP_MSG_RESPONSE:
		if (n != 4 || !get_u32(&a[1], &msg->id))
			return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
			                     "malformed response: expected [1, uint32 id, error, "
			                     "result]");
		/* has_id only once it is a response: a responder answers nothing malformed */
		if (a[2].type == MSGPACK_OBJECT_MAP)
			msg->error = &a[2];
		else if (a[2].type != MSGPACK_OBJECT_NIL)
			return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
			                     "malformed response %u: error must be nil or a map",
			                     msg->id);
		if (a[3].type == MSGPACK_OBJECT_MAP)
			msg->result = &a[3];
		else if (a[3].type != MSGPACK_OBJECT_NIL || !msg->error)
			return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
			                     "malformed response %u: result must be a map",
			                     msg->id);
		msg->has_id = true;
		return ASP_OK;
	case ASP_MSG_NOTIFY:
		if (n != 3 || a[1].type != MSGPACK_OBJECT_STR || a[2].type != MSGPACK_OBJECT_MAP)
			return asp_error_set(
			    err, ASP_E_PROTOCOL_ERROR, NULL,
			    "malformed notification: expected [2, method, params]");
		msg->method = a[1].via.str.ptr;
		msg->method_len = a[1].via.str.size;
		msg->params = &a[2];
		return ASP_OK;
	}
	return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
	                     "not an ASP message: unknown type %llu",
	                     (unsigned long long)a[0].via.u64);
}

/* ---- encode ----------------------------------------------------------------------- */

void asp_wire_begin(asp_buf *b, msgpack_packer *pk)
{
	b->len = 0;
	b->nrefs = 0;
	b->ref_bytes = 0;
	if (asp_buf_reserve(b, 256) == 0)
		b->len = ASP_FRAME_HEADER;
	msgpack_packer_init(pk, b, asp_buf_write);
}

void asp_wire_finish(asp_buf *b)
{
	uint32_t n = (uint32_t)(asp_buf_frame_len(b) - ASP_FRAME_HEADER);
	b->data[0] = (uint8_t)(n >> 24);
	b->data[1] = (uint8_t)(n >> 16);
	b->data[2] = (uint8_t)(n >> 8);
	b->data[3] = (uint8_t)n;
}

static int pack_cstr(msgpack_packer *pk, const char *s, size_t n)
{
	return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

int asp_wire_request(asp_buf *b, uint32_t id, asp_op_id op, const void *params)
{
	msgpack_packer pk;
	asp_wire_begin(b, &pk);
	const asp_op_desc *d = &asp_op_descs[op];
	if (b->len == 0 || msgpack_pack_array(&pk, 4) || msgpack_pack_uint8(&pk, ASP_MSG_REQUEST) ||
	    msgpack_pack_uint32(&pk, id) || pack_cstr(&pk, d->name, d->name_len) ||
	    asp_record_encode(d->params, &pk, params))
		return -1;
	asp_wire_finish(b);
	return 0;
}

int asp_wire_response_ok(asp_buf *b, uint32_t id, const asp_record_desc *d, const void *result)
{
	msgpack_packer pk;
	asp_wire_begin(b, &pk);
	if (b->len == 0 || msgpack_pack_array(&pk, 4) ||
	    msgpack_pack_uint8(&pk, ASP_MSG_RESPONSE) || msgpack_pack_uint32(&pk, id) ||
	    msgpack_pack_nil(&pk) || asp_record_encode(d, &pk, result))
		return -1;
	asp_wire_finish(b);
	return 0;
}

int asp_wire_response_err(asp_buf *b, uint32_t id, const asp_error *err)
{
	msgpack_packer pk;
	asp_wire_begin(b, &pk);
	const char *code = asp_strerror(err->code);
	size_t fields = 2 + (err->sys_errno != 0) + (err->path[0] != '\0');
	if (b->len == 0 || msgpack_pack_array(&pk, 4) ||
	    msgpack_pack_uint8(&pk, ASP_MSG_RESPONSE) || msgpack_pack_uint32(&pk, id) ||
	    msgpack_pack_map(&pk, fields) || pack_cstr(&pk, "code", 4) ||
	    pack_cstr(&pk, code, strlen(code)) || pack_cstr(&pk, "message", 7) ||
	    pack_cstr(&pk, err->message, strlen(err->message)))
		return -1;
	if (err->sys_errno && (pack_cstr(&pk, "errno", 5) || msgpack_pack_int(&pk, err->sys_errno)))
		return -1;
	if (err->path[0] &&
	    (pack_cstr(&pk, "path", 4) || pack_cstr(&pk, err->path, strlen(err->path))))
		return -1;
	if (msgpack_pack_nil(&pk))
		return -1;
	asp_wire_finish(b);
	return 0;
}

int asp_wire_notify(asp_buf *b, asp_notice_id n, const void *params)
{
	msgpack_packer pk;
	asp_wire_begin(b, &pk);
	const asp_notice_desc *d = &asp_notice_descs[n];
	if (b->len == 0 || msgpack_pack_array(&pk, 3) || msgpack_pack_uint8(&pk, ASP_MSG_NOTIFY) ||
	    pack_cstr(&pk, d->name, d->name_len) || asp_record_encode(d->params, &pk, params))
		return -1;
	asp_wire_finish(b);
	return 0;
}

static bool key_is(const msgpack_object *k, const char *s)
{
	size_t n = strlen(s);
	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	       memcmp(k->via.str.ptr, s, n) == 0;
}

static void copy_obj_str(char *dst, size_t cap, const msgpack_object *v)
{
	size_t n = v->via.str.size < cap - 1 ? v->via.str.size : cap - 1;
	memcpy(dst, v->via.str.ptr, n);
	dst[n] = '\0';
	for (size_t i = 0; i < n; i++) /* a hostile message must not cut our string short */
		if (dst[i] == '\0')
			dst[i] = '?';
}

asp_status asp_wire_error_decode(const msgpack_object *e, asp_error *err)
{
	asp_error tmp;
	if (!err)
		err = &tmp;
	asp_error_clear(err);
	err->code = ASP_E_INTERNAL;
	for (uint32_t i = 0; i < e->via.map.size; i++) {
		const msgpack_object *k = &e->via.map.ptr[i].key, *v = &e->via.map.ptr[i].val;
		if (key_is(k, "code") && v->type == MSGPACK_OBJECT_STR)
			err->code = asp_status_from_name(v->via.str.ptr, v->via.str.size);
		else if (key_is(k, "message") && v->type == MSGPACK_OBJECT_STR)
			copy_obj_str(err->message, sizeof err->message, v);
		else if (key_is(k, "path") && v->type == MSGPACK_OBJECT_STR)
			copy_obj_str(err->path, sizeof err->path, v);
		else if (key_is(k, "errno") && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
		                                v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER))
			err->sys_errno = (int)v->via.i64;
	}
	if (err->code == ASP_OK)
		err->code = ASP_E_INTERNAL;
	if (!err->message[0])
		snprintf(err->message, sizeof err->message, "%s (the responder gave no message)",
		         asp_strerror(err->code));
	return err->code;
}

int asp_op_lookup(const char *name, size_t len)
{
	for (int i = 0; i < ASP_OP_COUNT; i++)
		if (asp_op_descs[i].name_len == len && memcmp(asp_op_descs[i].name, name, len) == 0)
			return i;
	return -1;
}

asp_status asp_wire_result_decode(asp_op_id op, const asp_msg *resp, void *result, asp_arena *a,
                                  asp_error *err)
{
	if (resp->error)
		return asp_wire_error_decode(resp->error, err);
	asp_status st = asp_record_decode(asp_op_descs[op].result, resp->result, result, a, err);
	if (st) /* the responder sent a result we cannot read: that is its protocol's fault */
		err->code = st = ASP_E_PROTOCOL_ERROR;
	return st;
}
