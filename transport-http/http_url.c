/*
 * A client URL (http.url) read by libcurl's URL API, so the host, port and prefix the
 * transport uses are the ones libcurl itself reads from the URL when it sends the POSTs.
 * Only the client library builds it: asp-agent --listen needs no libcurl.
 */
#include "http_addr.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char form[] = "expected http(s)://HOST[:PORT][/PREFIX]";

/* A part of `u` (curl_free it), or NULL when the URL has none. */
static char *part(CURLU *u, CURLUPart what)
{
	char *v = NULL;
	return curl_url_get(u, what, &v, 0) == CURLUE_OK ? v : NULL;
}

/* What the URL gives beyond HOST[:PORT][/PREFIX] (user, password, login options), if any. */
static const char *extra_part(CURLU *u)
{
	static const struct {
		CURLUPart part;
		const char *name;
	} extras[] = {{CURLUPART_USER, "a user name"},
	              {CURLUPART_PASSWORD, "a password"},
	              {CURLUPART_OPTIONS, "login options"}};
	for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++) {
		char *v = part(u, extras[i].part);
		curl_free(v);
		if (v)
			return extras[i].name;
	}
	return NULL;
}

/* Fills `a` from a parsed URL; NULL, or what is wrong with it. */
static const char *fill(CURLU *u, http_addr *a, const char *url, char *why, size_t cap)
{
	char *scheme = part(u, CURLUPART_SCHEME);
	bool http = scheme && strcmp(scheme, "http") == 0;
	a->tls = scheme && strcmp(scheme, "https") == 0;
	curl_free(scheme);
	if (!http && !a->tls) {
		snprintf(why, cap, "'%s' is not an http:// or https:// URL", url);
		return why;
	}
	const char *extra = extra_part(u);
	if (extra) {
		snprintf(why, cap,
		         "'%s' holds %s, which is not used: %s; the token goes in http.token_env "
		         "or http.token_file",
		         url, extra, form);
		return why;
	}
	char *host = part(u, CURLUPART_HOST), *zone = part(u, CURLUPART_ZONEID);
	/* an IPv6 literal comes in [], without its zone */
	const char *h = host ? host : "";
	size_t hl = strlen(h);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']')
		h++, hl -= 2;
	int n = snprintf(a->host, sizeof a->host, "%.*s%s%s", (int)hl, h, zone ? "%" : "",
	                 zone ? zone : "");
	curl_free(host);
	curl_free(zone);
	if (hl == 0 || n < 0 || (size_t)n >= sizeof a->host) {
		snprintf(why, cap, "'%s': %s", url, form);
		return why;
	}
	char *port = part(u, CURLUPART_PORT); /* checked by curl: 0..65535 */
	a->port = port ? atoi(port) : a->tls ? 443 : 80;
	curl_free(port);
	char *path = part(u, CURLUPART_PATH);
	size_t pl = path ? strlen(path) : 0;
	while (pl > 0 && path[pl - 1] == '/')
		pl--;
	bool fits = pl < sizeof a->prefix;
	if (fits) {
		memcpy(a->prefix, path, pl);
		a->prefix[pl] = '\0';
	}
	curl_free(path);
	if (!fits) {
		snprintf(why, cap, "'%s': the path is too long", url);
		return why;
	}
	return NULL;
}

int http_addr_parse_url(const char *url, http_addr *a, char *why, size_t cap)
{
	memset(a, 0, sizeof *a);
	CURLU *u = curl_url();
	if (!u) {
		snprintf(why, cap, "'%s': out of memory", url);
		return -1;
	}
	/* Any scheme parses, so that one other than http(s) is named as such; the path is
	 * taken as written (no ../ folding), as the listener sees it. */
	CURLUcode rc =
	    curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS);
	const char *bad = NULL;
	if (rc != CURLUE_OK) {
		bool http =
		    strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
		if (http)
			snprintf(why, cap, "'%s': %s (%s)", url, form, curl_url_strerror(rc));
		else
			snprintf(why, cap, "'%s' is not an http:// or https:// URL", url);
		bad = why;
	} else {
		bad = fill(u, a, url, why, cap);
	}
	curl_url_cleanup(u);
	if (bad)
		memset(a, 0, sizeof *a);
	return bad ? -1 : 0;
}
