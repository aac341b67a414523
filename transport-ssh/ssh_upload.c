/*
 * "agent": "upload": copies the local static responder (asp-agent-static) into the
 * sandbox over SFTP, once per content, and runs it there in agent mode. The copy goes to
 * LOGIN_DIR/.cache/asp/asp-agent-HASH (named by its content, so a changed binary is a new
 * file and an unchanged one is not sent again), written atomically with mode 0755.
 */
#include "ssh_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#ifndef ASP_AGENT_STATIC_PATH
#define ASP_AGENT_STATIC_PATH "/usr/local/libexec/asp/asp-agent-static"
#endif

#define UPLOAD_MAX (64u * 1024 * 1024) /* a responder is ~100 KB; anything this big is wrong */

static uint8_t *slurp(const char *path, size_t *len, int *e)
{
	*e = 0;
	FILE *f = fopen(path, "rb");
	if (!f) {
		*e = errno;
		return NULL;
	}
	size_t cap = 256 * 1024, n = 0;
	uint8_t *buf = malloc(cap);
	while (buf) {
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (n < cap)
			break;
		if (cap >= UPLOAD_MAX) {
			*e = EFBIG;
			free(buf);
			buf = NULL;
			break;
		}
		uint8_t *nb = realloc(buf, cap * 2);
		if (!nb) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = nb;
		cap *= 2;
	}
	if (!buf && !*e)
		*e = ENOMEM;
	fclose(f);
	*len = n;
	return buf;
}

/* FNV-1a: names the copy by its content (not a security property: sshd auth is). */
static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

asp_status ssh_agent_upload(sshc *c, sftpc *f, char *remote, size_t cap, asp_error *err)
{
	const char *local = getenv("ASP_AGENT_STATIC");
	if (!local || !local[0])
		local = ASP_AGENT_STATIC_PATH;
	size_t len = 0;
	int e;
	uint8_t *bin = slurp(local, &len, &e);
	if (!bin)
		return asp_error_set(
		    err, ASP_E_NOT_FOUND, local,
		    "ssh.agent \"upload\": cannot read the static responder %s: %s; "
		    "build asp-agent-static (musl-tools) and point ASP_AGENT_STATIC "
		    "at it, or install asp-agent in the sandbox and set ssh.agent "
		    "to its path",
		    local, strerror(e));
	/* a static binary runs anywhere with the same CPU: check that first */
	struct utsname u;
	asp_exec_params p;
	asp_exec_params_init(&p);
	const char *argv[] = {"uname", "-m"};
	p.has_argv = true;
	p.argv = (asp_strv){argv, 2};
	p.timeout_ms = 30000;
	p.max_output = 4096;
	asp_exec_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = a ? ssh_exec_run(c, &p, 4096, &r, a, err)
	                  : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	if (st == ASP_OK && uname(&u) == 0) {
		size_t ml = strlen(u.machine);
		bool same =
		    r.stdout_data.len == ml + 1 && memcmp(r.stdout_data.data, u.machine, ml) == 0;
		if (!same)
			st = asp_error_set(
			    err, ASP_E_UNSUPPORTED, NULL,
			    "ssh.agent \"upload\": %s is built for %s but the sandbox "
			    "(%s) is %.*s; install a matching asp-agent there and set "
			    "ssh.agent to its path",
			    local, u.machine, c->target,
			    (int)(r.stdout_data.len ? r.stdout_data.len - 1 : 0),
			    (const char *)r.stdout_data.data);
	}
	asp_arena_free(a);
	if (st != ASP_OK) {
		free(bin);
		return st;
	}
	/* relative: SFTP and exec both start in the login directory */
	snprintf(remote, cap, ".cache/asp/asp-agent-%016llx", (unsigned long long)fnv1a(bin, len));
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = remote;
	asp_stat_result sr;
	asp_arena *sa = asp_arena_new();
	bool have = sa && ssh_sftp_stat(f, &sp, &sr, sa, err) == ASP_OK && sr.size == len &&
	            (sr.mode & 0100);
	asp_arena_free(sa);
	if (!have) {
		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = remote;
		wp.data = (asp_bytes){bin, len};
		wp.mkdirs = true;
		wp.atomic = true;
		wp.mode = 0755;
		asp_write_result wr;
		st = ssh_sftp_write(f, &wp, &wr, err);
	}
	free(bin);
	if (st != ASP_OK && err)
		asp_error_prefix(err, err->code,
		                 "ssh.agent \"upload\": copying the responder to %s in the sandbox",
		                 remote);
	return st;
}
