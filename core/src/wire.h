/*
 * The wire format (docs/design.md, "Wire format"): msgpack-rpc messages in 4-byte big-endian
 * length-prefixed frames. Decoding checks a message before msgpack-c allocates.
 */
#ifndef ASP_WIRE_H
#define ASP_WIRE_H

#include "proto_desc.h"

#include <msgpack.h>

/* Nesting allowed in a message; the outermost container is depth 1. */
#define ASP_WIRE_MAX_DEPTH 32
/* Bytes of the frame header. */
#define ASP_FRAME_HEADER 4

/*
 * The decoding budget (docs/faults.md). msgpack-c spends sizeof(msgpack_object) (24
 * bytes) per object whatever the bytes say, so a 16 MiB frame of nils would cost 384 MiB.
 * The prescan counts objects and refuses a message with more than these, before msgpack-c
 * allocates: a request needs few (its params are a handful of fields), a response may be
 * a long directory listing.
 */
#define ASP_WIRE_MAX_OBJECTS_REQUEST  (1u << 20)
#define ASP_WIRE_MAX_OBJECTS_RESPONSE (1u << 22)
/* What decoding `len` bytes holding `objects` costs: the frame and msgpack-c's objects. */
#define ASP_WIRE_DECODE_COST(len, objects) ((len) + (objects) * sizeof(msgpack_object))

/* A piece of a frame that stays in the caller's memory instead of being copied. */
typedef struct asp_buf_ref {
	size_t at; /* the piece goes before data[at] */
	const uint8_t *data;
	size_t len;
} asp_buf_ref;

/*
 * A growable byte buffer; frames are built in place with the header reserved up front.
 * With `ref_min` set, writes of at least that many bytes (the bodies of large bins) are
 * kept by reference in `refs` rather than copied: the frame is then data[] with the
 * pieces spliced in (asp_buf_iov), and the referenced memory must outlive the send.
 * ref_min 0 (asp_buf_init's) copies everything.
 */
typedef struct asp_buf {
	uint8_t *data;
	size_t len, cap;
	size_t ref_min;
	asp_buf_ref *refs;
	size_t nrefs, refcap;
	size_t ref_bytes; /* sum of refs[].len */
} asp_buf;

/*
 * The ref_min senders use where the channel or sink can write a frame in pieces: below
 * it, copying is cheaper than one more piece; above it, the copy costs more than the
 * syscall it saves.
 */
#define ASP_BUF_REF_MIN (64u * 1024u)

void asp_buf_init(asp_buf *b);
void asp_buf_free(asp_buf *b);
/* Bytes of the whole frame, header and referenced pieces included. */
static inline size_t asp_buf_frame_len(const asp_buf *b)
{
	return b->len + b->ref_bytes;
}
/*
 * The frame as iovecs (2 * nrefs + 1 at most); returns how many were filled, or -1 when
 * `max` is too small.
 */
struct iovec;
int asp_buf_iov(const asp_buf *b, struct iovec *iov, int max);
/*
 * After a short writev of `done` bytes from iov[at..cnt): skips the pieces written
 * whole, trims the one written in part (in place) and returns the new `at`.
 */
int asp_iov_advance(struct iovec *iov, int cnt, int at, size_t done);
/* Makes room for `extra` more bytes. 0, or -1 when out of memory. */
int asp_buf_reserve(asp_buf *b, size_t extra);
/* msgpack_packer write callback appending to an asp_buf. */
int asp_buf_write(void *b, const char *data, size_t len);

enum asp_msg_type { ASP_MSG_REQUEST = 0, ASP_MSG_RESPONSE = 1, ASP_MSG_NOTIFY = 2 };

/* A decoded message; the objects point into the msgpack_unpacked and the frame bytes. */
typedef struct asp_msg {
	int type;    /* enum asp_msg_type */
	bool has_id; /* request/response: the id decoded */
	uint32_t id;
	const char *method; /* request/notification; not NUL-terminated */
	size_t method_len;
	const msgpack_object *params; /* request/notification: a map */
	const msgpack_object *error;  /* response: the error map, or NULL on success */
	const msgpack_object *result; /* response: the result map, or NULL on error */
} asp_msg;

/*
 * Walks one msgpack message without allocating: rejects truncation, trailing bytes,
 * a container count larger than the bytes left, and nesting deeper than 32
 * (protocol_error), and more than `max_objects` objects in all (too_large). *objects
 * (may be NULL) gets the count.
 */
asp_status asp_wire_scan(const uint8_t *data, size_t len, size_t max_objects, size_t *objects,
                         asp_error *err);
/* asp_wire_scan with the response limit, ASP_WIRE_MAX_OBJECTS_RESPONSE. */
asp_status asp_wire_prescan(const uint8_t *data, size_t len, asp_error *err);

/*
 * The id of a request or response ([type, id, ...]) read from its first bytes without
 * decoding; false when the message does not start that way.
 */
bool asp_wire_peek_id(const uint8_t *m, size_t len, int type, uint32_t *id);

/*
 * The first half of asp_wire_decode: the prescan, with the object limit of the
 * message's kind. A request over its limit is too_large with msg->has_id and msg->id
 * set (answer that id; nothing was allocated); any other failure is protocol_error.
 * *objects gets the count, for the caller's budget (ASP_WIRE_DECODE_COST).
 */
asp_status asp_wire_check(const uint8_t *data, size_t len, size_t *objects, asp_msg *msg,
                          asp_error *err);

/* The second half: unpacks a message asp_wire_check passed, as asp_wire_decode. */
asp_status asp_wire_unpack(const uint8_t *data, size_t len, msgpack_unpacked *u, asp_msg *msg,
                           asp_error *err);

/*
 * For the `u` of asp_wire_unpack and asp_wire_decode, in place of msgpack_unpacked_init
 * and msgpack_unpacked_destroy: the zone its objects live in is kept between messages
 * (spare.h), cleared back to its first 8 KiB chunk. (With a `u` from
 * msgpack_unpacked_init the unpack makes a zone of its own, for msgpack_unpacked_destroy.)
 */
void asp_wire_unpacked_init(msgpack_unpacked *u);
void asp_wire_unpacked_done(msgpack_unpacked *u);

/*
 * Prescans, unpacks into `u` (asp_wire_unpacked_init'ed by the caller, done by the
 * caller after use) and checks the message's shape. protocol_error when it cannot be
 * decoded as far as a request id; a request with a valid id but a bad method or params
 * gives invalid_argument with msg->has_id set, so the caller can answer that id.
 */
asp_status asp_wire_decode(const uint8_t *data, size_t len, msgpack_unpacked *u, asp_msg *msg,
                           asp_error *err);

/* Starts a frame in `b` (emptied) with the header reserved; `pk` packs into it. */
void asp_wire_begin(asp_buf *b, msgpack_packer *pk);
/* Writes the header; the frame is b->data[0 .. b->len). */
void asp_wire_finish(asp_buf *b);

/* Whole frames. Each returns 0, or -1 when out of memory. */
int asp_wire_request(asp_buf *b, uint32_t id, asp_op_id op, const void *params);
int asp_wire_response_ok(asp_buf *b, uint32_t id, const asp_record_desc *d, const void *result);
int asp_wire_response_err(asp_buf *b, uint32_t id, const asp_error *err);
int asp_wire_notify(asp_buf *b, asp_notice_id n, const void *params);

/* Fills `err` from a response's error map; returns its status. */
asp_status asp_wire_error_decode(const msgpack_object *e, asp_error *err);

/* The op named by a method, or -1. */
int asp_op_lookup(const char *name, size_t len);

/*
 * Serves one request: decodes its params, calls the op through `ops` with `self`, and
 * builds the response frame (a result or an error, never nothing) in `out`. A result
 * larger than `max_message` becomes a too_large error.
 */
void asp_dispatch(const asp_ops *ops, void *self, const asp_msg *req, asp_buf *out,
                  size_t max_message);

/*
 * An arena for one request's params and result, kept between requests (spare.h):
 * asp_dispatch_arena_done resets it for the next one. NULL when out of memory.
 */
asp_arena *asp_dispatch_arena(void);
void asp_dispatch_arena_done(asp_arena *a);

/*
 * As asp_dispatch, with the caller's arena (NULL: out of memory is answered) for the
 * params and the result. With out->ref_min set, the frame may reference the result's
 * bytes in `a`: keep `a` until the frame is sent, then reset or free it.
 */
void asp_dispatch_in(const asp_ops *ops, void *self, const asp_msg *req, asp_buf *out,
                     size_t max_message, asp_arena *a);

/*
 * asp_dispatch_in's two halves, for a server that runs an op itself (an exec driven by
 * an event loop): decoding `req`'s params for `d` into `p`; and the answer `out` to
 * request `id` once the op returned `st`: its result `r`, or `err` (which a result too
 * large for `max_message` becomes).
 */
asp_status asp_dispatch_params(const asp_op_desc *d, const asp_msg *req, void *p, asp_arena *a,
                               asp_error *err);
void asp_dispatch_answer(asp_buf *out, uint32_t id, const asp_op_desc *d, const void *r,
                         asp_status st, asp_error *err, size_t max_message);

/* Decodes a response's result map into `result` with the op's descriptor. */
asp_status asp_wire_result_decode(asp_op_id op, const asp_msg *resp, void *result, asp_arena *a,
                                  asp_error *err);

#endif
