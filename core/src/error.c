/* asp_error: status names, errno mapping and message formatting. */
#include "asp/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[ASP_STATUS_COUNT] = {
    [ASP_OK] = "ok",
    [ASP_E_NOT_FOUND] = "not_found",
    [ASP_E_PERMISSION_DENIED] = "permission_denied",
    [ASP_E_ALREADY_EXISTS] = "already_exists",
    [ASP_E_NOT_A_DIRECTORY] = "not_a_directory",
    [ASP_E_IS_A_DIRECTORY] = "is_a_directory",
    [ASP_E_NOT_EMPTY] = "not_empty",
    [ASP_E_INVALID_ARGUMENT] = "invalid_argument",
    [ASP_E_TOO_LARGE] = "too_large",
    [ASP_E_TIMEOUT] = "timeout",
    [ASP_E_UNSUPPORTED] = "unsupported",
    [ASP_E_IO_ERROR] = "io_error",
    [ASP_E_PROTOCOL_ERROR] = "protocol_error",
    [ASP_E_TRANSPORT_ERROR] = "transport_error",
    [ASP_E_UNAUTHORIZED] = "unauthorized",
    [ASP_E_INTERNAL] = "internal",
};

const char *asp_strerror(asp_status code)
{
	if ((unsigned)code >= ASP_STATUS_COUNT)
		return "unknown";
	return status_names[code];
}

asp_status asp_status_from_name(const char *name, size_t len)
{
	for (int i = 1; i < ASP_STATUS_COUNT; i++) {
		if (strlen(status_names[i]) == len && memcmp(status_names[i], name, len) == 0)
			return (asp_status)i;
	}
	return ASP_E_INTERNAL;
}

asp_status asp_status_from_errno(int errnum)
{
	switch (errnum) {
	case 0: return ASP_OK;
	case ENOENT: return ASP_E_NOT_FOUND;
	case EACCES:
	case EPERM: return ASP_E_PERMISSION_DENIED;
	case EEXIST: return ASP_E_ALREADY_EXISTS;
	case ENOTDIR: return ASP_E_NOT_A_DIRECTORY;
	case EISDIR: return ASP_E_IS_A_DIRECTORY;
	case ENOTEMPTY: return ASP_E_NOT_EMPTY;
	case EINVAL: return ASP_E_INVALID_ARGUMENT;
	default: return ASP_E_IO_ERROR;
	}
}

/*
 * Copies with truncation, marking a cut with "..." so nobody mistakes it for whole.
 * memmove: `src` may be (a part of) `dst`, as in asp_error_set(err, .., err->path, ..).
 */
static void copy_truncated(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n < cap) {
		memmove(dst, src, n + 1);
		return;
	}
	memmove(dst, src, cap - 4);
	memcpy(dst + cap - 4, "...", 4);
}

/*
 * Formats into a private buffer first: an argument may be err->message or err->path
 * itself ("... (%s)", err->message), which vsnprintf must not read while it writes.
 */
static void vset(asp_error *err, asp_status code, int errnum, const char *path, const char *fmt,
                 va_list ap)
{
	char msg[ASP_ERROR_MESSAGE_MAX];
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	if (n < 0)
		msg[0] = '\0';
	else if (n >= (int)sizeof msg)
		memcpy(msg + sizeof msg - 4, "...", 4);
	err->code = code;
	err->sys_errno = errnum;
	copy_truncated(err->path, sizeof err->path, path ? path : "");
	if (msg[0] == '\0')
		snprintf(err->message, sizeof err->message, "%s", asp_strerror(code));
	else
		memcpy(err->message, msg, strlen(msg) + 1);
}

asp_status asp_error_set(asp_error *err, asp_status code, const char *path, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vset(err, code, 0, path, fmt, ap);
		va_end(ap);
	}
	return code;
}

asp_status asp_error_prefix(asp_error *err, asp_status code, const char *fmt, ...)
{
	if (!err)
		return code;
	char what[ASP_ERROR_MESSAGE_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (n < 0)
		what[0] = '\0';
	int errnum = err->sys_errno;
	if (err->message[0])
		asp_error_set(err, code, err->path, "%s: %s", what, err->message);
	else
		asp_error_set(err, code, err->path, "%s", what);
	err->sys_errno = errnum;
	return code;
}

asp_status asp_error_errno(asp_error *err, int errnum, const char *path, const char *fmt, ...)
{
	asp_status code = asp_status_from_errno(errnum);
	if (err) {
		char what[ASP_ERROR_MESSAGE_MAX];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(what, sizeof what, fmt, ap);
		va_end(ap);
		asp_error_set(err, code, path, "%s: %s", what, strerror(errnum));
		err->sys_errno = errnum;
	}
	return code;
}

void asp_error_clear(asp_error *err)
{
	if (!err)
		return;
	err->code = ASP_OK;
	err->sys_errno = 0;
	err->message[0] = '\0';
	err->path[0] = '\0';
}

void asp_error_hint(asp_error *err, const char *hint)
{
	if (!err)
		return;
	size_t used = strlen(err->message), need = strlen(hint) + 3;
	if (used + need <= sizeof err->message)
		memcpy(err->message + used, "; ", 2),
		    memcpy(err->message + used + 2, hint, need - 2);
}

asp_status asp_error_oom(asp_error *err, const char *op, const char *where)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: out of memory%s%s", op,
	                     where ? " in " : "", where ? where : "");
}
