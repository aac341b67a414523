/* Status codes and the per-call error struct shared by every ASP API. */
#ifndef ASP_STATUS_H
#define ASP_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One value per protocol error code (spec/protocol.json "errors"). The numbers are
 * part of the ABI: never renumber, never reuse; a retired code keeps its slot.
 */
typedef enum asp_status {
	ASP_OK = 0,
	ASP_E_NOT_FOUND = 1,
	ASP_E_PERMISSION_DENIED = 2,
	ASP_E_ALREADY_EXISTS = 3,
	ASP_E_NOT_A_DIRECTORY = 4,
	ASP_E_IS_A_DIRECTORY = 5,
	ASP_E_NOT_EMPTY = 6,
	ASP_E_INVALID_ARGUMENT = 7,
	ASP_E_TOO_LARGE = 8,
	ASP_E_TIMEOUT = 9,
	ASP_E_UNSUPPORTED = 10,
	ASP_E_IO_ERROR = 11,
	ASP_E_PROTOCOL_ERROR = 12,
	ASP_E_TRANSPORT_ERROR = 13,
	ASP_E_UNAUTHORIZED = 14,
	ASP_E_INTERNAL = 15,
} asp_status;

#define ASP_STATUS_COUNT 16

/* Sizes of the fixed buffers in asp_error; longer text is truncated with "...". */
#define ASP_ERROR_MESSAGE_MAX 1024
#define ASP_ERROR_PATH_MAX    1024

/*
 * The detail of a failed call, filled by the callee. Caller-owned (usually on the
 * stack); it holds no pointers, so there is nothing to free. `message` says what
 * failed, on which path or host, and what to do about it.
 */
typedef struct asp_error {
	asp_status code;
	int sys_errno;                       /* errno behind an io_error, else 0 */
	char message[ASP_ERROR_MESSAGE_MAX]; /* NUL-terminated, never empty on error */
	char path[ASP_ERROR_PATH_MAX];       /* the path concerned, or "" */
} asp_error;

/* The protocol's name of a status ("not_found", ...); "unknown" if out of range. */
const char *asp_strerror(asp_status code);

/* The status named by a protocol error code, or ASP_E_INTERNAL if unknown. */
asp_status asp_status_from_name(const char *name, size_t len);

/*
 * Fill `err` (may be NULL) and return `code`. The message is printf-formatted;
 * `path` may be NULL. The arguments may point into `err` itself (err->message, err->path):
 * the message is formatted before anything in `err` changes.
 */
asp_status asp_error_set(asp_error *err, asp_status code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Puts "WHAT: " (printf-formatted) before err's message and sets its code; keeps the
 * path and errno. For adding context to an error a callee filled. NULL err: no-op.
 */
asp_status asp_error_prefix(asp_error *err, asp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As asp_error_set, for an errno: maps it (docs/design.md, "Operations") and records
 * it in sys_errno. */
asp_status asp_error_errno(asp_error *err, int errnum, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The protocol's mapping of an errno to a status. */
asp_status asp_status_from_errno(int errnum);

/* Reset to ASP_OK with empty strings. */
void asp_error_clear(asp_error *err);

/*
 * Appends "; HINT" to err's message (what the person can do about it) when it fits; the
 * code, path and errno stay. NULL err: no-op.
 */
void asp_error_hint(asp_error *err, const char *hint);

/* internal "OP: out of memory", or "OP: out of memory in WHERE" when `where` is given
 * (`err` first, as in asp_error_set). */
asp_status asp_error_oom(asp_error *err, const char *op, const char *where);

#ifdef __cplusplus
}
#endif

#endif
