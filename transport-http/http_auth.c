/* Bearer token loading and a constant-time check. */
#include "http_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A token file larger than this is a mistake (a key file, a log), not a token. */
#define TOKEN_MAX 4096

static int bad(char *why, size_t cap, const char *what, const char *where)
{
	snprintf(why, cap, "%s %s", where, what);
	return -1;
}

/* Strips one trailing newline (and a CR before it); rejects empty and control bytes. */
static int check_token(char *t, size_t *len, const char *where, char *why, size_t cap)
{
	size_t n = *len;
	if (n > 0 && t[n - 1] == '\n')
		n--;
	if (n > 0 && t[n - 1] == '\r')
		n--;
	t[n] = '\0';
	if (n == 0)
		return bad(why, cap, "is empty", where);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] < 0x21 || t[i] == 0x7f)
			return bad(
			    why, cap,
			    "holds a space or a control byte (an HTTP header cannot carry it)",
			    where);
	*len = n;
	return 0;
}

int http_token_load(const char *file, char **out, char *why, size_t cap)
{
	*out = NULL;
	if (!file) {
		const char *env = getenv("ASP_TOKEN");
		if (!env)
			return 0;
		size_t n = strlen(env);
		char *t = malloc(n + 1);
		if (!t)
			return bad(why, cap, "out of memory", "ASP_TOKEN:");
		memcpy(t, env, n + 1);
		unsetenv("ASP_TOKEN");
		if (check_token(t, &n, "ASP_TOKEN", why, cap) < 0) {
			free(t);
			return -1;
		}
		*out = t;
		return 0;
	}
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, cap, "--token-file %s: %s", file, strerror(errno));
		return -1;
	}
	char *t = malloc(TOKEN_MAX + 1);
	size_t n = 0;
	while (t && n < TOKEN_MAX) {
		ssize_t r = read(fd, t + n, TOKEN_MAX - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	char where[300];
	snprintf(where, sizeof where, "--token-file %.250s", file);
	if (!t)
		return bad(why, cap, "out of memory", where);
	if (n >= TOKEN_MAX || check_token(t, &n, where, why, cap) < 0) {
		if (n >= TOKEN_MAX)
			bad(why, cap, "is larger than a token can be (4 KiB)", where);
		free(t);
		return -1;
	}
	*out = t;
	return 0;
}

bool http_token_check(const char *token, const char *hdr, size_t hlen)
{
	static const char scheme[] = "bearer ";
	size_t tlen = strlen(token);
	if (!hdr || hlen < sizeof scheme - 1)
		return false;
	/* The scheme is case-insensitive (RFC 7235); it is no secret, so no care for time. */
	for (size_t i = 0; i < sizeof scheme - 1; i++) {
		char c = hdr[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != scheme[i])
			return false;
	}
	const char *given = hdr + sizeof scheme - 1;
	size_t glen = hlen - (sizeof scheme - 1);
	while (glen > 0 && (given[glen - 1] == ' ' || given[glen - 1] == '\t'))
		glen--;
	/* Every byte of the expected token is looked at whatever the given one holds. */
	uint8_t diff = (uint8_t)(glen != tlen);
	for (size_t i = 0; i < tlen; i++) {
		uint8_t g = i < glen ? (uint8_t)given[i] : 0;
		diff |= (uint8_t)(g ^ (uint8_t)token[i]);
	}
	return diff == 0;
}
