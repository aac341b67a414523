/*
 * An OpenSSH client config file, read as ssh(1) reads it for one host: lines before the
 * first Host or Match apply to every host; a Host line applies what follows when one of
 * its patterns (* and ?, case-insensitive) matches and none of its !patterns does; Match
 * understands `all`, `host` and `originalhost` (both against the name as given) and
 * counts any other criterion (exec, user, localnetwork, ...) as not matching, so such a
 * block is skipped; Include reads files (globs; relative ones beside the including file)
 * at that point, under the enclosing block's condition. The first value of a key wins.
 */
#include "ssh_config_file.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define FILE_MAX      (1024 * 1024)
#define INCLUDE_DEPTH 16 /* OpenSSH's own limit */
#define MAX_ARGS      64 /* patterns on one Host line */

static const char *const keywords[SSH_CF_KEYS] = {
    [SSH_CF_HOSTNAME] = "HostName",
    [SSH_CF_PORT] = "Port",
    [SSH_CF_USER] = "User",
    [SSH_CF_IDENTITY_FILE] = "IdentityFile",
    [SSH_CF_KNOWN_HOSTS] = "UserKnownHostsFile",
    [SSH_CF_PROXY_COMMAND] = "ProxyCommand",
    [SSH_CF_PROXY_JUMP] = "ProxyJump",
};

const char *ssh_cf_keyword(enum ssh_cf_key k)
{
	return k < SSH_CF_KEYS ? keywords[k] : "?";
}

typedef struct reader {
	const char *name; /* the host looked up */
	asp_arena *a;
	ssh_cf_host *out;
	asp_error *err;
} reader;

/* Splits `s` in place into words (whitespace between; "..." or '...' keep spaces).
 * The count, or -1 for an unterminated quote. */
static int split(char *s, char **argv, int max)
{
	int n = 0;
	while (*s) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s)
			break;
		char *w = s, *o = s;
		while (*s && *s != ' ' && *s != '\t') {
			if (*s == '"' || *s == '\'') {
				char q = *s++;
				while (*s && *s != q)
					*o++ = *s++;
				if (*s != q)
					return -1;
				s++;
			} else {
				*o++ = *s++;
			}
		}
		if (*s)
			s++;
		*o = '\0';
		if (n < max)
			argv[n++] = w;
	}
	return n;
}

/* One pattern list (Host's words, or Match host's comma list): +1 matches, 0 not. */
static bool patterns_match(char *const *pats, int n, const char *name)
{
	bool yes = false;
	for (int i = 0; i < n; i++) {
		bool neg = pats[i][0] == '!';
		if (fnmatch(pats[i] + neg, name, FNM_CASEFOLD) != 0)
			continue;
		if (neg)
			return false; /* a negated match wins over every other pattern */
		yes = true;
	}
	return yes;
}

static bool only_star(char *const *pats, int n)
{
	for (int i = 0; i < n; i++) {
		if (strcmp(pats[i], "*") != 0)
			return false;
	}
	return true;
}

/* "a,b,!c" against the name. */
static bool list_matches(char *list, const char *name)
{
	char *pats[MAX_ARGS], *save = NULL;
	int n = 0;
	for (char *p = strtok_r(list, ",", &save); p && n < MAX_ARGS;
	     p = strtok_r(NULL, ",", &save))
		pats[n++] = p;
	return patterns_match(pats, n, name);
}

/* A Match line: all, host and originalhost (each may be negated); anything else fails. */
static bool match_line(reader *r, char **argv, int n, bool *named)
{
	if (n == 1 && strcasecmp(argv[0], "all") == 0)
		return true;
	for (int i = 0; i < n; i++) {
		const char *crit = argv[i];
		bool neg = crit[0] == '!';
		crit += neg;
		if ((strcasecmp(crit, "host") != 0 && strcasecmp(crit, "originalhost") != 0) ||
		    i + 1 >= n)
			return false;
		bool yes = list_matches(argv[++i], r->name);
		if (yes == neg)
			return false;
		*named = true;
	}
	return n > 0;
}

static asp_status read_file(reader *r, const char *path, int depth, bool active_outer);

/* Include FILES: each glob, relative to the including file's directory. */
static asp_status include(reader *r, const char *from, char **argv, int n, int depth, bool active,
                          const char *at)
{
	if (depth >= INCLUDE_DEPTH)
		return asp_error_set(r->err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: Include nested more than %d deep (a loop?)", at,
		                     INCLUDE_DEPTH);
	for (int i = 0; i < n; i++) {
		char pat[4096];
		const char *home = getenv("HOME");
		if (argv[i][0] == '~' && argv[i][1] == '/' && home)
			snprintf(pat, sizeof pat, "%s/%s", home, argv[i] + 2);
		else if (argv[i][0] == '/')
			snprintf(pat, sizeof pat, "%s", argv[i]);
		else
			snprintf(pat, sizeof pat, "%.*s/%s",
			         (int)(strrchr(from, '/') ? strrchr(from, '/') - from : 0), from,
			         argv[i]);
		glob_t g;
		int rc = glob(pat, 0, NULL, &g);
		asp_status st = ASP_OK;
		for (size_t k = 0; rc == 0 && st == ASP_OK && k < g.gl_pathc; k++)
			st = read_file(r, g.gl_pathv[k], depth + 1, active);
		if (rc == 0)
			globfree(&g);
		if (st != ASP_OK)
			return st;
	}
	return ASP_OK;
}

/* Records the first value of one of our keys. */
static asp_status keep(reader *r, enum ssh_cf_key k, const char *text, const char *at)
{
	/* ProxyCommand and ProxyJump exclude each other: the first one seen is the route */
	if (r->out->v[k].text || (k == SSH_CF_PROXY_COMMAND && r->out->v[SSH_CF_PROXY_JUMP].text) ||
	    (k == SSH_CF_PROXY_JUMP && r->out->v[SSH_CF_PROXY_COMMAND].text))
		return ASP_OK;
	r->out->v[k].text = asp_arena_strndup(r->a, text, strlen(text));
	r->out->v[k].at = asp_arena_strndup(r->a, at, strlen(at));
	if (!r->out->v[k].text || !r->out->v[k].at)
		return asp_error_oom(r->err, "ssh config file", NULL);
	return ASP_OK;
}

static asp_status read_line(reader *r, const char *path, char *line, unsigned lineno, int depth,
                            bool active_outer, bool *active)
{
	char at[4200];
	snprintf(at, sizeof at, "%s:%u", path, lineno);
	while (*line == ' ' || *line == '\t')
		line++;
	size_t len = strlen(line);
	while (len > 0 && isspace((unsigned char)line[len - 1]))
		line[--len] = '\0';
	if (!*line || *line == '#')
		return ASP_OK;
	/* "Keyword value", "Keyword=value" or "Keyword = value" */
	char *kw = line, *rest = line + strcspn(line, " \t=");
	if (*rest) {
		bool eq = *rest == '=';
		*rest++ = '\0';
		while (*rest == ' ' || *rest == '\t')
			rest++;
		if (!eq && *rest == '=')
			rest++;
		while (*rest == ' ' || *rest == '\t')
			rest++;
	}
	if (strcasecmp(kw, "ProxyCommand") == 0) { /* the rest of the line, not words */
		if (*active)
			return keep(r, SSH_CF_PROXY_COMMAND, rest, at);
		return ASP_OK;
	}
	char words[4096];
	snprintf(words, sizeof words, "%s", rest);
	char *argv[MAX_ARGS];
	int n = split(words, argv, MAX_ARGS);
	if (n < 0)
		return asp_error_set(r->err, ASP_E_INVALID_ARGUMENT, path,
		                     "%s: %s: a quote is not closed", at, kw);
	if (strcasecmp(kw, "Host") == 0) {
		*active = active_outer && patterns_match(argv, n, r->name);
		if (*active && !only_star(argv, n))
			r->out->named = true;
		return ASP_OK;
	}
	if (strcasecmp(kw, "Match") == 0) {
		bool named = false;
		*active = active_outer && match_line(r, argv, n, &named);
		if (*active && named)
			r->out->named = true;
		return ASP_OK;
	}
	if (!*active || n == 0)
		return ASP_OK;
	if (strcasecmp(kw, "Include") == 0)
		return include(r, path, argv, n, depth, *active, at);
	for (int k = 0; k < SSH_CF_KEYS; k++) {
		if (k != SSH_CF_PROXY_COMMAND && strcasecmp(kw, keywords[k]) == 0)
			return keep(r, (enum ssh_cf_key)k, argv[0], at);
	}
	return ASP_OK;
}

static asp_status read_file(reader *r, const char *path, int depth, bool active_outer)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		if (errno == ENOENT)
			return ASP_OK; /* no file (or an Include's, gone meanwhile): nothing set */
		return asp_error_errno(r->err, errno, path, "cannot open the SSH config file %s",
		                       path);
	}
	struct stat sb;
	if (fstat(fileno(f), &sb) == 0 && sb.st_size > FILE_MAX) {
		fclose(f);
		return asp_error_set(r->err, ASP_E_TOO_LARGE, path,
		                     "the SSH config file %s is larger than %d bytes", path,
		                     FILE_MAX);
	}
	if (depth == 0)
		r->out->exists = true;
	bool active = active_outer;
	char line[4096];
	unsigned lineno = 0;
	asp_status st = ASP_OK;
	while (st == ASP_OK && fgets(line, sizeof line, f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			st = asp_error_set(r->err, ASP_E_INVALID_ARGUMENT, path,
			                   "%s:%u: a line longer than %zu bytes", path, lineno,
			                   sizeof line - 2);
			break;
		}
		st = read_line(r, path, line, lineno, depth, active_outer, &active);
	}
	if (st == ASP_OK && ferror(f))
		st = asp_error_errno(r->err, errno ? errno : EIO, path,
		                     "cannot read the SSH config file %s", path);
	fclose(f);
	return st;
}

asp_status ssh_cf_lookup(const char *path, const char *name, asp_arena *a, ssh_cf_host *out,
                         asp_error *err)
{
	memset(out, 0, sizeof *out);
	reader r = {.name = name, .a = a, .out = out, .err = err};
	return read_file(&r, path, 0, true);
}

int ssh_hop_parse(const char *z, asp_arena *a, const char **user, const char **host, unsigned *port,
                  const char **why)
{
	const char *at = strrchr(z, '@'), *h = at ? at + 1 : z, *end, *colon;
	*user = NULL;
	*host = NULL;
	*port = 0;
	if (*h == '[') {
		end = strchr(++h, ']');
		colon = end && end[1] == ':' ? end + 1 : NULL;
		if (!end || (end[1] && !colon)) {
			*why = "an address in [] must be followed by nothing or :PORT";
			return -1;
		}
	} else {
		colon = strchr(h, ':');
		end = colon ? colon : h + strlen(h);
	}
	if (end == h) {
		*why = "no host name";
		return -1;
	}
	if (colon) {
		char *stop;
		unsigned long p = strtoul(colon + 1, &stop, 10);
		if (*stop || p < 1 || p > 65535) {
			*why = "the port is not a number from 1 to 65535";
			return -1;
		}
		*port = (unsigned)p;
	}
	if ((at && !(*user = asp_arena_strndup(a, z, (size_t)(at - z)))) ||
	    !(*host = asp_arena_strndup(a, h, (size_t)(end - h)))) {
		*why = "out of memory";
		return -1;
	}
	return 0;
}
