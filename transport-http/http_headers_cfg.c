/* http.headers, read and checked when the HTTP transport opens (http_headers.h). */
#include "http_headers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the schema refuses in a written value: any control character but a tab. */
static const char *bad_char(const char *v)
{
	for (const char *p = v; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return p;
	}
	return NULL;
}

static void make_hint(const asp_config_view *cfg, http_headers *h)
{
	const char *where = cfg->path ? cfg->path : "the config";
	if (!h->count) {
		snprintf(h->hint, sizeof h->hint,
		         "; if a gateway in front of asp-agent --listen wants a header of its own "
		         "(a service token), set http.headers in %s",
		         where);
		return;
	}
	size_t o = (size_t)snprintf(h->hint, sizeof h->hint, "; check http.headers (");
	for (size_t i = 0; i < cfg->http.header_count && o < sizeof h->hint; i++)
		o += (size_t)snprintf(h->hint + o, sizeof h->hint - o, "%s%s", i ? ", " : "",
		                      cfg->http.headers[i].name);
	if (o < sizeof h->hint)
		snprintf(h->hint + o, sizeof h->hint - o, ") in %s", where);
}

asp_status http_headers_load(const asp_config_view *cfg, http_headers *out, asp_error *err)
{
	memset(out, 0, sizeof *out);
	const char *where = cfg->path ? cfg->path : "the config";
	size_t n = cfg->http.header_count;
	if (n && !(out->lines = calloc(n, sizeof *out->lines)))
		return asp_error_oom(err, "http.headers", NULL);
	for (size_t i = 0; i < n; i++) {
		const asp_config_header *h = &cfg->http.headers[i];
		char *secret = NULL;
		const char *value = h->value;
		if (h->env) {
			asp_status st = asp_config_secret(h->env, NULL, &secret, err);
			if (st != ASP_OK) {
				http_headers_free(out);
				return asp_error_prefix(err, st, "http.headers.%s in %s", h->name,
				                        where);
			}
			value = secret;
			if (bad_char(value)) {
				http_secret_free(secret);
				http_headers_free(out);
				return asp_error_set(
				    err, ASP_E_INVALID_ARGUMENT, cfg->path,
				    "http.headers.%s in %s: the variable %s holds a "
				    "control character (a newline?), which a header "
				    "cannot carry",
				    h->name, where, h->env);
			}
		}
		size_t len = strlen(h->name) + 2 + strlen(value) + 1;
		out->lines[i] = malloc(len);
		if (out->lines[i])
			snprintf(out->lines[i], len, "%s: %s", h->name, value);
		http_secret_free(secret);
		if (!out->lines[i]) {
			http_headers_free(out);
			return asp_error_oom(err, "http.headers", NULL);
		}
		out->count = i + 1;
	}
	make_hint(cfg, out);
	return ASP_OK;
}
