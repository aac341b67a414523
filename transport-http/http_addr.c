/* Parsing listen addresses, and telling a loopback address from others (URLs: http_url.c). */
#include "http_addr.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int fail(char *why, size_t cap, const char *fmt, const char *arg)
{
	snprintf(why, cap, fmt, arg);
	return -1;
}

/* A decimal port 0..65535 filling all of s[0..n). */
static int parse_port(const char *s, size_t n, int *port)
{
	if (n == 0 || n > 5)
		return -1;
	int v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v > 65535)
		return -1;
	*port = v;
	return 0;
}

/* "host:port" / "[v6]:port" / ":port" from s[0..n). */
static int split_host_port(const char *s, size_t n, http_addr *a)
{
	const char *colon;
	size_t hl;
	if (n > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close)
			return -1;
		hl = (size_t)(close - s - 1);
		if (hl == 0 || hl >= sizeof a->host)
			return -1;
		memcpy(a->host, s + 1, hl);
		a->host[hl] = '\0';
		colon = close + 1 < s + n ? close + 1 : NULL;
		if (colon && *colon != ':')
			return -1;
	} else {
		colon = memrchr(s, ':', n);
		hl = colon ? (size_t)(colon - s) : n;
		if (hl >= sizeof a->host || memchr(s, ':', hl))
			return -1; /* an IPv6 literal needs [] */
		memcpy(a->host, s, hl);
		a->host[hl] = '\0';
	}
	if (!colon)
		return -1;
	return parse_port(colon + 1, (size_t)(s + n - colon - 1), &a->port);
}

int http_addr_parse_listen(const char *s, http_addr *a, char *why, size_t cap)
{
	memset(a, 0, sizeof *a);
	if (strncmp(s, "unix:", 5) == 0) {
		const char *p = s + 5;
		if (!p[0])
			return fail(why, cap, "'%s': unix: needs a path, e.g. unix:/run/asp.sock",
			            s);
		if (strlen(p) >= sizeof a->path)
			return fail(why, cap, "'%s': the socket path is too long", s);
		a->unix_sock = true;
		strcpy(a->path, p);
		return 0;
	}
	if (split_host_port(s, strlen(s), a) < 0)
		return fail(why, cap,
		            "'%s' is not HOST:PORT (e.g. 127.0.0.1:8722, [::1]:8722, :8722) or "
		            "unix:/path",
		            s);
	return 0;
}

static bool sa_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a6))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127;
	}
	return false;
}

int http_addr_resolve(const http_addr *a, char *numeric, size_t ncap, bool *loopback, bool *v6,
                      char *why, size_t cap)
{
	numeric[0] = '\0';
	*v6 = false;
	if (a->unix_sock) {
		*loopback = true;
		return 0;
	}
	*loopback = false;
	if (!a->host[0] || strcmp(a->host, "0.0.0.0") == 0 || strcmp(a->host, "::") == 0) {
		*v6 = strcmp(a->host, "::") == 0;
		return 0; /* every interface */
	}
	struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	int e = getaddrinfo(a->host, NULL, &hints, &res);
	if (e || !res)
		return fail(why, cap, "cannot resolve '%s'", a->host);
	/* The first address is the one bound; "localhost" may also give ::1 after it. */
	*loopback = sa_loopback(res->ai_addr);
	*v6 = res->ai_family == AF_INET6;
	const void *bytes = res->ai_family == AF_INET6
	                        ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
	                        : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
	if (!inet_ntop(res->ai_family, bytes, numeric, (socklen_t)ncap)) {
		freeaddrinfo(res);
		return fail(why, cap, "cannot use the address of '%s'", a->host);
	}
	freeaddrinfo(res);
	return 0;
}
