/*
 * What every part of asp exec-server answers with: replies, errors and notifications,
 * file URIs and paths through the workspace mapping, base64 (see exec_server.h).
 */
#include "exec_server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- answers ------------------------------------------------------------------------------ */

/* Sends `msg` (stolen) as compact JSON; the caller holds s->mu. */
static void send_locked(xs_session *s, json_t *msg)
{
	char *text = msg ? json_dumps(msg, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	if (text)
		s->send(s->send_user, text, strlen(text));
	free(text);
	json_decref(msg);
}

void xs_reply_locked(xs_session *s, json_t *id, json_t *result)
{
	json_t *msg = json_object();
	json_object_set(msg, "id", id);
	json_object_set_new(msg, "result", result ? result : json_object());
	send_locked(s, msg);
}

bool xs_reply(xs_session *s, json_t *id, json_t *result)
{
	pthread_mutex_lock(&s->mu);
	xs_reply_locked(s, id, result);
	pthread_mutex_unlock(&s->mu);
	return true;
}

static void error_v(xs_session *s, json_t *id, int code, json_t *data, const char *fmt, va_list ap)
{
	char text[1200];
	vsnprintf(text, sizeof text, fmt, ap);
	json_t *e = json_pack("{s:i, s:s}", "code", code, "message", text);
	if (data)
		json_object_set_new(e, "data", data);
	json_t *msg = json_object();
	json_object_set_new(msg, "error", e);
	json_object_set(msg, "id", id);
	pthread_mutex_lock(&s->mu);
	send_locked(s, msg);
	pthread_mutex_unlock(&s->mu);
}

bool xs_error(xs_session *s, json_t *id, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_v(s, id, code, NULL, fmt, ap);
	va_end(ap);
	return false;
}

bool xs_error_data(xs_session *s, json_t *id, int code, json_t *data, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_v(s, id, code, data, fmt, ap);
	va_end(ap);
	return false;
}

bool xs_error_asp(xs_session *s, json_t *id, const asp_error *err, const char *what)
{
	int code = err->code == ASP_E_NOT_FOUND ? XS_NOT_FOUND : XS_INTERNAL;
	return xs_error_data(s, id, code, json_pack("{s:s}", "aspCode", asp_strerror(err->code)),
	                     "%s: %s", what, err->message);
}

void xs_notify_locked(xs_session *s, const char *method, json_t *params)
{
	json_t *msg = json_object();
	json_object_set_new(msg, "method", json_string(method));
	json_object_set_new(msg, "params", params);
	send_locked(s, msg);
}

/* --- paths -------------------------------------------------------------------------------- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The absolute path a file:// URI or a plain path names (malloc'd), or NULL when neither. */
static char *path_of(const char *v)
{
	if (strncmp(v, "file:", 5) != 0)
		return v[0] == '/' ? strdup(v) : NULL;
	const char *p = v + 5;
	if (strncmp(p, "//", 2) == 0) {
		p += 2;
		/* an authority: empty or localhost only (the file is on this side) */
		if (strncmp(p, "localhost/", 10) == 0)
			p += 9;
		else if (*p != '/')
			return NULL;
	}
	if (*p != '/')
		return NULL;
	size_t n = strcspn(p, "?#");
	char *out = malloc(n + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (p[i] == '%' && i + 2 < n + 1 && (hi = hexval(p[i + 1])) >= 0 &&
		    (lo = hexval(p[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = p[i];
		}
	}
	out[o] = '\0';
	if (memchr(out, '\0', o)) { /* a %00 */
		free(out);
		return NULL;
	}
	return out;
}

char *xs_path_param(xs_session *s, json_t *id, json_t *params, const char *key)
{
	json_t *v = json_object_get(params, key);
	if (!json_is_string(v)) {
		xs_error(s, id, XS_INVALID_PARAMS,
		         "missing field `%s` (a file:// URI or an absolute path)", key);
		return NULL;
	}
	char *local = path_of(json_string_value(v));
	if (!local) {
		xs_error(s, id, XS_INVALID_PARAMS,
		         "`%s`: %s is neither a file:// URI nor an absolute path", key,
		         json_string_value(v));
		return NULL;
	}
	char *mapped = asp_workspace_to_sandbox(s->ws, local, NULL);
	free(local);
	if (!mapped)
		xs_error(s, id, XS_INTERNAL, "out of memory");
	return mapped;
}

json_t *xs_uri(xs_session *s, const char *path)
{
	static const char keep[] = "-._~/!$&'()*+,;=:@";
	char *local = asp_workspace_to_local(s->ws, path);
	if (!local)
		return json_null();
	size_t n = strlen(local);
	char *out = malloc(7 + 3 * n + 1);
	if (!out) {
		free(local);
		return json_null();
	}
	size_t o = (size_t)sprintf(out, "file://");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)local[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    (c && strchr(keep, c)))
			out[o++] = (char)c;
		else
			o += (size_t)sprintf(out + o, "%%%02X", c);
	}
	out[o] = '\0';
	json_t *v = json_string(out);
	free(out);
	free(local);
	return v ? v : json_null();
}
