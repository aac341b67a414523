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
#include <unistd.h>

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

/*
 * Where the static responder is: $ASP_AGENT_STATIC when set; else beside the running
 * program (an installed bin/ or a copy), then in the build tree the program runs from
 * (build/cli/asp -> build/sandbox-agent/), then the install path. Writes the first that
 * exists into `out`; with none, the list tried (for the message) and false.
 */
static bool find_static_agent(char *out, size_t cap, char *tried, size_t tcap)
{
	const char *env = getenv("ASP_AGENT_STATIC");
	if (env && env[0]) {
		snprintf(out, cap, "%s", env);
		snprintf(tried, tcap, "%s ($ASP_AGENT_STATIC)", env);
		return true; /* what the user named, even if missing: say so, don't guess */
	}
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	char cand[3][4200];
	int k = 0;
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(cand[k++], sizeof cand[0], "%s/asp-agent-static", exe);
			snprintf(cand[k++], sizeof cand[0], "%s/../sandbox-agent/asp-agent-static",
			         exe);
		}
	}
	snprintf(cand[k++], sizeof cand[0], "%s", ASP_AGENT_STATIC_PATH);
	size_t used = 0;
	tried[0] = '\0';
	for (int i = 0; i < k; i++) {
		size_t cl = strlen(cand[i]);
		if (cl < cap && access(cand[i], R_OK) == 0) {
			memcpy(out, cand[i], cl + 1);
			return true;
		}
		int w = snprintf(tried + used, tcap - used, "%s%s", i ? ", " : "", cand[i]);
		if (w > 0 && (size_t)w < tcap - used)
			used += (size_t)w;
	}
	return false;
}

asp_status ssh_agent_upload(sshc *c, sftpc *f, char *remote, size_t cap, asp_error *err)
{
	char local[4200], tried[3 * 4200 + 64];
	if (!find_static_agent(local, sizeof local, tried, sizeof tried))
		return asp_error_set(
		    err, ASP_E_NOT_FOUND, NULL,
		    "ssh.agent \"upload\": no static responder (tried %s); build "
		    "asp-agent-static (musl-tools) and point ASP_AGENT_STATIC at it, or install "
		    "asp-agent in the sandbox and set ssh.agent to its path",
		    tried);
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
