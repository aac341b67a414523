/* http.headers' lines: copies and their end (http_headers.h). */
#include "http_headers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void http_secret_free(char *s)
{
	if (s) {
		memset(s, 0, strlen(s));
		free(s);
	}
}

bool http_headers_copy(const http_headers *src, http_headers *dst)
{
	memset(dst, 0, sizeof *dst);
	memcpy(dst->hint, src->hint, sizeof dst->hint);
	if (!src->count)
		return true;
	if (!(dst->lines = calloc(src->count, sizeof *dst->lines)))
		return false;
	for (size_t i = 0; i < src->count; i++) {
		if (!(dst->lines[i] = strdup(src->lines[i]))) {
			http_headers_free(dst);
			return false;
		}
		dst->count = i + 1;
	}
	return true;
}

void http_headers_free(http_headers *h)
{
	for (size_t i = 0; i < h->count; i++)
		http_secret_free(h->lines[i]);
	free(h->lines);
	h->lines = NULL;
	h->count = 0;
}
