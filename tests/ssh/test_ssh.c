/*
 * The SSH transport against a real OpenSSH server (tests/ssh/sshd_fixture.c): the
 * conformance table over native mode and over agent mode (asp-agent --stdio on one
 * channel), then what only SSH has: host key trust, authentication, hostile quoting
 * through the login shell, a killed session, bulk transfer and many threads.
 *
 *   test_ssh              run everything
 *   test_ssh NAME...      run only the named suites or tests
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "asp_ssh.h"
#include "conformance.h"
#include "sshd_fixture.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static sshd_fixture fx;
static char scratch[300]; /* a local folder the sandbox (this machine) also sees */

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A config for the fixture's server; `extra` adds or overrides ssh keys (later wins). */
static asp_config *config(const char *agent, const char *extra)
{
	char json[4096];
	sshd_config_json(&fx, agent, extra, json, sizeof json);
	asp_config *cfg = NULL;
	asp_error err;
	if (asp_config_parse(json, strlen(json), NULL, &cfg, &err) != ASP_OK) {
		fprintf(stderr, "config: %s\n%s\n", err.message, json);
		return NULL;
	}
	return cfg;
}

typedef struct backend {
	asp_config *cfg;
	const asp_ops *ops;
	void *self;
} backend;

static asp_status open_backend(backend *b, const char *agent, const char *extra, asp_error *err)
{
	memset(b, 0, sizeof *b);
	b->cfg = config(agent, extra);
	if (!b->cfg)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "bad test config");
	asp_status st = asp_transport_ssh.open(asp_config_get(b->cfg), &b->ops, &b->self, err);
	if (st != ASP_OK) {
		asp_config_free(b->cfg);
		b->cfg = NULL;
	}
	return st;
}

static void close_backend(backend *b)
{
	if (b->self)
		asp_transport_ssh.close(b->self);
	asp_config_free(b->cfg);
	memset(b, 0, sizeof *b);
}

static backend native, agent;

static asp_status sh(backend *b, const char *cmd, asp_exec_result *r, asp_arena *a, asp_error *err)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	p.timeout_ms = 20000;
	return b->ops->exec(b->self, &p, r, a, err);
}

static bool bytes_eq(asp_bytes b, const char *s, size_t n)
{
	return b.len == n && (n == 0 || memcmp(b.data, s, n) == 0);
}

/* ---- host keys and authentication -------------------------------------------------- */

static void test_hostkey_unknown_refused(void)
{
	char extra[600];
	snprintf(extra, sizeof extra, "\"known_hosts\": \"%s\"", fx.empty_known_hosts);
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, NULL, extra, &err);
	CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
	if (st == ASP_OK)
		close_backend(&b);
	/* the fingerprint, and what to do about it */
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, fx.fingerprint));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "accept-new"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "host_key_sha256"));
}

static void test_hostkey_wrong_pin_refused(void)
{
	/* a well-formed pin of another key: refused even though known_hosts knows the host */
	const char *pin = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
	char extra[600];
	snprintf(extra, sizeof extra, "\"host_key_sha256\": \"%s\"", pin);
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, NULL, extra, &err);
	CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
	if (st == ASP_OK)
		close_backend(&b);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, fx.fingerprint));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "mismatch"));
}

static void test_hostkey_pin_accepted(void)
{
	/* the right pin: accepted without any known_hosts entry */
	char extra[800];
	snprintf(extra, sizeof extra, "\"host_key_sha256\": \"%s\", \"known_hosts\": \"%s\"",
	         fx.fingerprint, fx.empty_known_hosts);
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, NULL, extra, &err);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	CU_ASSERT_EQUAL(sh(&b, "echo pinned", &r, a, &err), ASP_OK);
	CU_ASSERT_TRUE(bytes_eq(r.stdout_data, "pinned\n", 7));
	asp_arena_free(a);
	close_backend(&b);
}

static void test_hostkey_accept_new_records(void)
{
	char kh[400], extra[800];
	snprintf(kh, sizeof kh, "%s/sub/known_hosts_new", scratch);
	snprintf(extra, sizeof extra,
	         "\"known_hosts\": \"%s\", \"strict_host_key_checking\": \"accept-new\"", kh);
	backend b;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(open_backend(&b, NULL, extra, &err), ASP_OK);
	close_backend(&b);
	FILE *f = fopen(kh, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	char line[1024] = "";
	char want[64];
	snprintf(want, sizeof want, "[127.0.0.1]:%u", fx.port);
	bool found = false;
	while (fgets(line, sizeof line, f))
		found = found || strstr(line, want) != NULL;
	fclose(f);
	CU_ASSERT_TRUE(found);
	/* recorded: a strict connection now trusts it */
	snprintf(extra, sizeof extra, "\"known_hosts\": \"%s\"", kh);
	CU_ASSERT_EQUAL(open_backend(&b, NULL, extra, &err), ASP_OK);
	close_backend(&b);
}

static void test_hostkey_check_off(void)
{
	char extra[600];
	snprintf(extra, sizeof extra,
	         "\"known_hosts\": \"%s\", \"strict_host_key_checking\": false",
	         fx.empty_known_hosts);
	backend b;
	asp_error err;
	CU_ASSERT_EQUAL(open_backend(&b, NULL, extra, &err), ASP_OK);
	close_backend(&b);
	struct stat sb;
	CU_ASSERT_NOT_EQUAL(stat(fx.empty_known_hosts, &sb), 0); /* nothing recorded */
}

/* Last of its suite: it restarts sshd with a new host key. */
static void test_hostkey_changed_refused(void)
{
	char old_fp[128];
	snprintf(old_fp, sizeof old_fp, "%s", fx.fingerprint);
	CU_ASSERT_EQUAL_FATAL(sshd_rekey(&fx), 0);
	CU_ASSERT_STRING_NOT_EQUAL(old_fp, fx.fingerprint);
	const char *modes[] = {NULL, "\"strict_host_key_checking\": \"accept-new\""};
	for (int i = 0; i < 2; i++) {
		backend b;
		asp_error err;
		asp_status st = open_backend(&b, NULL, modes[i], &err);
		CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
		if (st == ASP_OK)
			close_backend(&b);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "CHANGED"));
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, fx.fingerprint));
	}
	/* pinning the new key is the way through */
	char extra[300];
	snprintf(extra, sizeof extra, "\"host_key_sha256\": \"%s\"", fx.fingerprint);
	backend b;
	asp_error err;
	CU_ASSERT_EQUAL(open_backend(&b, NULL, extra, &err), ASP_OK);
	close_backend(&b);
}

static void test_auth_refused(void)
{
	/* a key the server does not know (its own host key) */
	char extra[600];
	snprintf(extra, sizeof extra, "\"identity_file\": \"%s\"", fx.host_key);
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, NULL, extra, &err);
	CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
	if (st == ASP_OK)
		close_backend(&b);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "authentication failed"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "identity_file"));
	/* a password from an unset variable: named in the message */
	snprintf(extra, sizeof extra,
	         "\"identity_file\": \"%s\", \"password_env\": \"ASP_TEST_NO_SUCH_VAR\"",
	         fx.host_key);
	st = open_backend(&b, NULL, extra, &err);
	CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
	if (st == ASP_OK)
		close_backend(&b);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "ASP_TEST_NO_SUCH_VAR"));
}

static void test_connect_refused_fast(void)
{
	/* nothing listens on port 1 of loopback: an error at once, not a hang */
	backend b;
	asp_error err;
	long long t0 = now_ms();
	asp_status st = open_backend(&b, NULL, "\"port\": 1", &err);
	CU_ASSERT_EQUAL(st, ASP_E_TRANSPORT_ERROR);
	if (st == ASP_OK)
		close_backend(&b);
	CU_ASSERT_TRUE(now_ms() - t0 < 3000);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "cannot connect"));
}

static void test_agent_missing(void)
{
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, "/nonexistent/asp-agent", NULL, &err);
	CU_ASSERT_EQUAL(st, ASP_E_NOT_FOUND);
	if (st == ASP_OK)
		close_backend(&b);
	CU_ASSERT_PTR_NOT_NULL(
	    strstr(err.message, "asp-agent not found at /nonexistent/asp-agent"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "set ssh.agent to null"));
}

/* "agent": "upload" copies asp-agent-static in once, then runs it. */
static void test_agent_upload(void)
{
	const char *stat_agent = getenv("ASP_AGENT_STATIC");
	backend b;
	asp_error err;
	if (!stat_agent) {
		/* no static build here (musl-tools missing): the error says what to do */
		setenv("ASP_AGENT_STATIC", "/nonexistent/asp-agent-static", 1);
		asp_status st = open_backend(&b, "upload", NULL, &err);
		unsetenv("ASP_AGENT_STATIC");
		CU_ASSERT_EQUAL(st, ASP_E_NOT_FOUND);
		if (st == ASP_OK)
			close_backend(&b);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "ASP_AGENT_STATIC"));
		return;
	}
	asp_arena *sa = asp_arena_new();
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = ".cache";
	asp_stat_result sr;
	bool had_cache = native.ops->stat(native.self, &sp, &sr, sa, &err) == ASP_OK;
	asp_arena_free(sa);
	for (int round = 0; round < 2; round++) { /* the second finds the copy in place */
		CU_ASSERT_EQUAL_FATAL(open_backend(&b, "upload", NULL, &err), ASP_OK);
		asp_arena *a = asp_arena_new();
		asp_hello_params hp;
		asp_hello_params_init(&hp);
		asp_hello_result hr;
		CU_ASSERT_EQUAL(b.ops->hello(b.self, &hp, &hr, a, &err), ASP_OK);
		CU_ASSERT_PTR_NOT_NULL(strstr(hr.agent, "asp-agent"));
		asp_exec_result r;
		CU_ASSERT_EQUAL(sh(&b, "echo uploaded", &r, a, &err), ASP_OK);
		CU_ASSERT_TRUE(bytes_eq(r.stdout_data, "uploaded\n", 9));
		asp_arena_free(a);
		close_backend(&b);
	}
	/* tidy the login directory: the copy lives in .cache/asp */
	asp_arena *a = asp_arena_new();
	asp_list_params lp = {.path = ".cache/asp"};
	asp_list_result lr;
	CU_ASSERT_EQUAL_FATAL(native.ops->list(native.self, &lp, &lr, a, &err), ASP_OK);
	for (size_t i = 0; i < lr.entries.count; i++) {
		char path[300];
		snprintf(path, sizeof path, ".cache/asp/%s", lr.entries.items[i].name);
		asp_remove_params rp;
		asp_remove_params_init(&rp);
		rp.path = path;
		asp_remove_result rr;
		CU_ASSERT_EQUAL(native.ops->remove(native.self, &rp, &rr, a, &err), ASP_OK);
	}
	asp_remove_params rp;
	asp_remove_params_init(&rp);
	rp.path = ".cache/asp"; /* only when empty: it may hold a real installation's copy */
	asp_remove_result rr;
	(void)native.ops->remove(native.self, &rp, &rr, a, &err);
	if (!had_cache) {
		rp.path = ".cache";
		(void)native.ops->remove(native.self, &rp, &rr, a, &err);
	}
	asp_arena_free(a);
}

/* ---- hostile values through the login shell ------------------------------------------ */

static const char *const hostile[] = {
    "plain",
    "two words",
    "'single' \"double\"",
    "it's",
    "; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    "${HOME}$HOME$$ $0 $1 $@",
    "line1\nline2\n",
    "\\ back\\\\slash\\",
    "*",
    "-n",
    "--",
    "| tee CANARY &",
    "\t tab ~ ! # % ^ & ( ) { } [ ] < > ?",
    "\xff\xfe raw bytes \x01\x7f",
    "",
};
#define NHOSTILE (sizeof hostile / sizeof hostile[0])

/* Where the output and the expected bytes part ways, for the log. */
static void dump_diff(const asp_exec_result *r, const char *want, size_t wl)
{
	size_t i = 0;
	while (i < r->stdout_data.len && i < wl && r->stdout_data.data[i] == (uint8_t)want[i])
		i++;
	fprintf(stderr, "output differs at byte %zu of %zu (want %zu): got ", i, r->stdout_data.len,
	        wl);
	for (size_t k = i; k < r->stdout_data.len && k < i + 40; k++)
		fprintf(stderr, "%02x", r->stdout_data.data[k]);
	fprintf(stderr, " want ");
	for (size_t k = i; k < wl && k < i + 40; k++)
		fprintf(stderr, "%02x", (uint8_t)want[k]);
	fprintf(stderr, "; stderr %.*s\n", (int)r->stderr_data.len, r->stderr_data.data);
}

static void hostile_in(backend *b)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	/* a cwd whose name is itself hostile, made through SFTP */
	char cwd[600];
	snprintf(cwd, sizeof cwd, "%s/d $(touch CANARY) ';`x`\nz", scratch);
	asp_mkdir_params mp;
	asp_mkdir_params_init(&mp);
	mp.path = cwd;
	mp.parents = true;
	asp_mkdir_result mr;
	CU_ASSERT_EQUAL_FATAL(b->ops->mkdir(b->self, &mp, &mr, a, &err), ASP_OK);

	/* argv: printf prints each word back, NUL-separated */
	const char *argv[NHOSTILE + 2];
	argv[0] = "printf";
	argv[1] = "%s\\0";
	size_t want_len = 0;
	char want[2048];
	for (size_t i = 0; i < NHOSTILE; i++) {
		argv[i + 2] = hostile[i];
		size_t l = strlen(hostile[i]);
		memcpy(want + want_len, hostile[i], l + 1);
		want_len += l + 1;
	}
	/* env: each value verbatim, under plain names and names a shell cannot export */
	asp_strmap_entry env[NHOSTILE + 2];
	char names[NHOSTILE][16];
	for (size_t i = 0; i < NHOSTILE; i++) {
		snprintf(names[i], sizeof names[i], "ASP_H%zu", i);
		env[i] = (asp_strmap_entry){names[i], hostile[i]};
	}
	env[NHOSTILE] = (asp_strmap_entry){"ODD-NAME", "$(touch CANARY)"};
	env[NHOSTILE + 1] = (asp_strmap_entry){"PATH", "/usr/local/bin:/usr/bin:/bin"};
	for (int with_odd = 0; with_odd < 2; with_odd++) {
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.has_argv = true;
		p.argv = (asp_strv){argv, NHOSTILE + 2};
		p.cwd = cwd;
		p.has_env = true;
		p.env = (asp_strmap){env, with_odd ? NHOSTILE + 2 : NHOSTILE};
		asp_exec_result r;
		CU_ASSERT_EQUAL_FATAL(b->ops->exec(b->self, &p, &r, a, &err), ASP_OK);
		CU_ASSERT_EQUAL(r.exit_code, 0);
		CU_ASSERT_TRUE(bytes_eq(r.stdout_data, want, want_len));

		/* the environment, and the working directory, as the command sees them */
		const char *envp_argv[] = {"/bin/sh", "-c",
		                           "for v in $(seq 0 16); do eval \"printf '%s\\0' "
		                           "\\\"\\$ASP_H$v\\\"\"; done; pwd"};
		p.argv = (asp_strv){envp_argv, 3};
		CU_ASSERT_EQUAL_FATAL(b->ops->exec(b->self, &p, &r, a, &err), ASP_OK);
		char want2[4096];
		memcpy(want2, want, want_len);
		int n = snprintf(want2 + want_len, sizeof want2 - want_len, "%s\n", cwd);
		CU_ASSERT_TRUE(bytes_eq(r.stdout_data, want2, want_len + (size_t)n));
		if (!bytes_eq(r.stdout_data, want2, want_len + (size_t)n))
			dump_diff(&r, want2, want_len + (size_t)n);
		/* a name no shell can hold still reaches a program started directly */
		const char *env_argv[] = {"env"};
		p.argv = (asp_strv){env_argv, 1};
		CU_ASSERT_EQUAL_FATAL(b->ops->exec(b->self, &p, &r, a, &err), ASP_OK);
		char *z = strndup((const char *)r.stdout_data.data, r.stdout_data.len);
		CU_ASSERT_EQUAL(z && strstr(z, "\nODD-NAME=$(touch CANARY)\n") != NULL, with_odd);
		free(z);
	}
	/* a command string runs through /bin/sh on purpose; its cwd and env still do not */
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "printf '%s' \"$ASP_H5\"";
	p.cwd = cwd;
	p.has_env = true;
	p.env = (asp_strmap){env, NHOSTILE};
	asp_exec_result r;
	CU_ASSERT_EQUAL(b->ops->exec(b->self, &p, &r, a, &err), ASP_OK);
	CU_ASSERT_TRUE(bytes_eq(r.stdout_data, hostile[5], strlen(hostile[5])));

	/* paths: files named by every hostile word, listed back exactly */
	for (size_t i = 0; i < NHOSTILE; i++) {
		if (!hostile[i][0] || strcmp(hostile[i], "-n") == 0 || strchr(hostile[i], '/'))
			continue;
		char path[700];
		snprintf(path, sizeof path, "%s/%s", cwd, hostile[i]);
		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = path;
		wp.data = (asp_bytes){(const uint8_t *)hostile[i], strlen(hostile[i])};
		asp_write_result wr;
		CU_ASSERT_EQUAL(b->ops->write(b->self, &wp, &wr, a, &err), ASP_OK);
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = path;
		asp_read_result rr;
		CU_ASSERT_EQUAL(b->ops->read(b->self, &rp, &rr, a, &err), ASP_OK);
		CU_ASSERT_TRUE(bytes_eq(rr.data, hostile[i], strlen(hostile[i])));
	}
	/* nothing ran: no CANARY anywhere it could have landed */
	char canary[700];
	snprintf(canary, sizeof canary, "%s/CANARY", cwd);
	CU_ASSERT_NOT_EQUAL(access(canary, F_OK), 0);
	CU_ASSERT_NOT_EQUAL(access("/root/CANARY", F_OK), 0);
	snprintf(canary, sizeof canary, "%s/CANARY", scratch);
	CU_ASSERT_NOT_EQUAL(access(canary, F_OK), 0);

	asp_remove_params rm;
	asp_remove_params_init(&rm);
	rm.path = cwd;
	rm.recursive = true;
	asp_remove_result rmr;
	CU_ASSERT_EQUAL(b->ops->remove(b->self, &rm, &rmr, a, &err), ASP_OK);
	asp_arena_free(a);
}

static void test_hostile_native(void)
{
	hostile_in(&native);
}

static void test_hostile_agent(void)
{
	hostile_in(&agent);
}

/* ---- a dropped connection ---------------------------------------------------------- */

struct slow_call {
	asp_client *c;
	asp_status st;
	long long ms;
	asp_error err;
};

static void *slow_exec(void *v)
{
	struct slow_call *s = v;
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "sleep 30";
	asp_exec_result r;
	long long t0 = now_ms();
	s->st = asp_exec(s->c, &p, &r, a, &s->err);
	s->ms = now_ms() - t0;
	asp_arena_free(a);
	return NULL;
}

static void killed_session(const char *agent_path)
{
	asp_config *cfg = config(agent_path, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
	asp_error err;
	asp_client *c = NULL;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(asp_config_get(cfg), &c, &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "echo before";
	asp_exec_result r;
	CU_ASSERT_EQUAL_FATAL(asp_exec(c, &p, &r, a, &err), ASP_OK);

	struct slow_call s = {.c = c};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, slow_exec, &s), 0);
	usleep(700 * 1000); /* the sleep is running */
	long long t_kill = now_ms();
	CU_ASSERT_TRUE(sshd_kill_sessions(&fx) > 0);
	pthread_join(th, NULL);
	long long took = now_ms() - t_kill;
	CU_ASSERT_EQUAL(s.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_TRUE(took < 3000); /* promptly, not after the 30 s sleep */
	if (s.st != ASP_E_TRANSPORT_ERROR || took >= 3000)
		fprintf(stderr, "killed session: %s after %lld ms: %s\n", asp_strerror(s.st), took,
		        s.err.message);
	/* the next call reconnects */
	p.command = "echo after";
	asp_status st = asp_exec(c, &p, &r, a, &err);
	CU_ASSERT_EQUAL(st, ASP_OK);
	if (st == ASP_OK) {
		CU_ASSERT_TRUE(bytes_eq(r.stdout_data, "after\n", 6));
	} else {
		fprintf(stderr, "reconnect: %s\n", err.message);
	}
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
}

static void test_killed_session_native(void)
{
	killed_session(NULL);
}

static void test_killed_session_agent(void)
{
	killed_session(getenv("ASP_AGENT"));
}

/* ---- bulk and threads -------------------------------------------------------------- */

static void test_bulk_roundtrip(void)
{
	size_t n = 12u * 1024 * 1024 + 12345; /* not a multiple of any chunk size */
	uint8_t *buf = malloc(n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	uint32_t x = 12345;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
	}
	char path[400];
	snprintf(path, sizeof path, "%s/bulk.bin", scratch);
	asp_arena *a = asp_arena_new();
	asp_error err;
	for (int atomic = 0; atomic < 2; atomic++) {
		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = path;
		wp.data = (asp_bytes){buf, n};
		wp.atomic = atomic;
		asp_write_result wr;
		CU_ASSERT_EQUAL_FATAL(native.ops->write(native.self, &wp, &wr, a, &err), ASP_OK);
		CU_ASSERT_EQUAL(wr.size, n);
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = path;
		asp_read_result rr;
		CU_ASSERT_EQUAL_FATAL(native.ops->read(native.self, &rp, &rr, a, &err), ASP_OK);
		CU_ASSERT_EQUAL(rr.data.len, n);
		CU_ASSERT_TRUE(rr.eof);
		CU_ASSERT_TRUE(rr.data.len == n && memcmp(rr.data.data, buf, n) == 0);
		/* a middle range */
		rp.offset = 3 * 1024 * 1024 + 7;
		rp.has_length = true;
		rp.length = 5 * 1024 * 1024;
		CU_ASSERT_EQUAL_FATAL(native.ops->read(native.self, &rp, &rr, a, &err), ASP_OK);
		CU_ASSERT_EQUAL(rr.data.len, rp.length);
		CU_ASSERT_FALSE(rr.eof);
		CU_ASSERT_TRUE(memcmp(rr.data.data, buf + rp.offset, (size_t)rp.length) == 0);
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	free(buf);
}

struct mix {
	int id, failures;
	char why[1100];
};

static void *mix_worker(void *v)
{
	struct mix *m = v;
	asp_arena *a = asp_arena_new();
	size_t n = 300000 + (size_t)m->id * 1000;
	uint8_t *buf = malloc(n);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(i * 31 + (size_t)m->id);
	char path[400];
	snprintf(path, sizeof path, "%s/mix-%d", scratch, m->id);
	for (int j = 0; j < 4 && a && buf; j++) {
		asp_error err;
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = "cat";
		p.stdin_data = (asp_bytes){buf, n};
		p.timeout_ms = 30000;
		asp_exec_result r;
		asp_status st = native.ops->exec(native.self, &p, &r, a, &err);
		if (st != ASP_OK || !bytes_eq(r.stdout_data, (const char *)buf, n)) {
			m->failures++;
			snprintf(m->why, sizeof m->why, "exec: %s",
			         st ? err.message : "wrong output");
		}
		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = path;
		wp.data = (asp_bytes){buf, n};
		asp_write_result wr;
		st = native.ops->write(native.self, &wp, &wr, a, &err);
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = path;
		asp_read_result rr;
		if (st == ASP_OK)
			st = native.ops->read(native.self, &rp, &rr, a, &err);
		if (st != ASP_OK || !bytes_eq(rr.data, (const char *)buf, n)) {
			m->failures++;
			snprintf(m->why, sizeof m->why, "file: %s",
			         st ? err.message : "wrong data");
		}
		asp_arena_reset(a);
	}
	free(buf);
	asp_arena_free(a);
	return NULL;
}

/* Execs with stdin and file transfers from many threads at once on one connection. */
static void test_many_threads(void)
{
	enum { T = 12 };
	pthread_t th[T];
	struct mix m[T];
	for (int i = 0; i < T; i++) {
		m[i] = (struct mix){.id = i};
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, mix_worker, &m[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(m[i].failures, 0);
		if (m[i].failures)
			fprintf(stderr, "thread %d: %s\n", i, m[i].why);
	}
}

struct burst {
	backend *b;
	int id, failures;
	char why[1100];
};

static void *burst_worker(void *v)
{
	struct burst *w = v;
	asp_arena *a = asp_arena_new();
	for (int j = 0; j < 3 && a; j++) {
		asp_error err;
		char want[32];
		snprintf(want, sizeof want, "w%d-%d", w->id, j);
		const char *argv[] = {"printf", "%s", want};
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.has_argv = true;
		p.argv = (asp_strv){argv, 3};
		p.timeout_ms = j == 2 && w->id % 4 == 0 ? 200 : 30000;
		if (p.timeout_ms == 200) /* some time out: their kill needs a channel too */
			argv[0] = "sleep", argv[1] = "5", p.argv.count = 2;
		asp_exec_result r;
		asp_status st = w->b->ops->exec(w->b->self, &p, &r, a, &err);
		bool ok = st == ASP_OK &&
		          (p.timeout_ms == 200 ? r.timed_out
		                               : bytes_eq(r.stdout_data, want, strlen(want)));
		asp_stat_params sp;
		asp_stat_params_init(&sp);
		sp.path = "/";
		asp_stat_result sr;
		if (ok)
			st = w->b->ops->stat(w->b->self, &sp, &sr, a, &err);
		if (!ok || st != ASP_OK) {
			w->failures++;
			snprintf(w->why, sizeof w->why, "%s: %s (exit %lld, timed out %d, %llu ms)", want,
			         st ? err.message : "wrong result", (long long)r.exit_code, r.timed_out,
			         (unsigned long long)r.duration_ms);
		}
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return NULL;
}

/*
 * A stock-like server allowing 3 sessions per connection: 12 threads of commands (some
 * timing out, whose kill needs a channel of its own) and file ops all get through, the
 * transport learning the limit from the first refusal and queueing the rest.
 */
static void test_few_sessions(void)
{
	sshd_fixture small;
	if (sshd_start_max_sessions(&small, 3) < 0) {
		CU_FAIL(small.why);
		sshd_stop(&small);
		return;
	}
	char json[4096];
	sshd_config_json(&small, NULL, NULL, json, sizeof json);
	asp_config *cfg = NULL;
	asp_error err;
	backend b = {0};
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(json, strlen(json), NULL, &cfg, &err), ASP_OK);
	b.cfg = cfg;
	CU_ASSERT_EQUAL_FATAL(asp_transport_ssh.open(asp_config_get(cfg), &b.ops, &b.self, &err),
	                      ASP_OK);
	enum { T = 12 };
	pthread_t th[T];
	struct burst w[T];
	for (int i = 0; i < T; i++) {
		w[i] = (struct burst){.b = &b, .id = i};
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, burst_worker, &w[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(w[i].failures, 0);
		if (w[i].failures)
			fprintf(stderr, "thread %d: %s\n", i, w[i].why);
	}
	close_backend(&b);
	sshd_stop(&small);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Connections come and go without leaking fds or threads. */
static void test_open_close_no_leaks(void)
{
	int before = count_fds();
	for (int i = 0; i < 6; i++) {
		backend b;
		asp_error err;
		CU_ASSERT_EQUAL_FATAL(
		    open_backend(&b, i % 2 ? getenv("ASP_AGENT") : NULL, NULL, &err), ASP_OK);
		asp_arena *a = asp_arena_new();
		asp_stat_params sp;
		asp_stat_params_init(&sp);
		sp.path = "/";
		asp_stat_result sr;
		CU_ASSERT_EQUAL(b.ops->stat(b.self, &sp, &sr, a, &err), ASP_OK);
		asp_arena_free(a);
		close_backend(&b);
	}
	CU_ASSERT_EQUAL(count_fds(), before);
}

/* exec keeps the wrapper's marker lines and a noisy login shell out of the output. */
static void test_exec_output_exact(void)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_exec_result r;
	CU_ASSERT_EQUAL_FATAL(sh(&native, "printf 'a\\001ASP\\n'; printf b >&2", &r, a, &err),
	                      ASP_OK);
	CU_ASSERT_TRUE(bytes_eq(r.stdout_data, "a\001ASP\n", 6));
	CU_ASSERT_TRUE(bytes_eq(r.stderr_data, "b", 1));
	CU_ASSERT_EQUAL(r.stdout_bytes, 6);
	CU_ASSERT_EQUAL(r.stderr_bytes, 1);
	asp_arena_free(a);
}

/* ---- registration ------------------------------------------------------------------- */

static int run_named(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		bool found = false;
		for (CU_pSuite s = CU_get_registry()->pSuite; s && !found; s = s->pNext) {
			if (strcmp(s->pName, argv[i]) == 0) {
				CU_basic_run_suite(s);
				found = true;
				break;
			}
			CU_pTest t = CU_get_test(s, argv[i]);
			if (t) {
				CU_basic_run_test(s, t);
				found = true;
			}
		}
		if (!found) {
			fprintf(stderr, "no test called %s\n", argv[i]);
			return -1;
		}
	}
	return 0;
}

static void test_agent_available(void)
{
	CU_FAIL("ASP_AGENT is not set or agent mode did not open; see the message above");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (sshd_start(&fx) < 0) {
		fprintf(stderr, "test_ssh: %s\n", fx.why);
		sshd_stop(&fx);
		return 1; /* no skipping: CI must run these */
	}
	snprintf(scratch, sizeof scratch, "%s/scratch", fx.dir);
	mkdir(scratch, 0700);
	asp_error err;
	asp_transport_register(&asp_transport_ssh, NULL);
	if (open_backend(&native, NULL, NULL, &err) != ASP_OK) {
		fprintf(stderr, "test_ssh: native mode: %s\n", err.message);
		sshd_stop(&fx);
		return 1;
	}
	const char *agent_path = getenv("ASP_AGENT");
	bool have_agent = false;
	if (!agent_path)
		fprintf(stderr, "test_ssh: ASP_AGENT (the built asp-agent) is not set\n");
	else if (open_backend(&agent, agent_path, NULL, &err) != ASP_OK)
		fprintf(stderr, "test_ssh: agent mode: %s\n", err.message);
	else
		have_agent = true;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s;
	bool ok = conf_register_cunit("ssh_native", native.ops, native.self, "/tmp") == 0;
	if (have_agent)
		ok = ok && conf_register_cunit("ssh_agent", agent.ops, agent.self, "/tmp") == 0;
	ok = ok && (s = CU_add_suite("ssh", NULL, NULL)) != NULL;
	ok = ok && CU_add_test(s, "exec_output_exact", test_exec_output_exact);
	ok = ok && CU_add_test(s, "hostile_native", test_hostile_native);
	if (have_agent)
		ok = ok && CU_add_test(s, "hostile_agent", test_hostile_agent);
	else
		ok = ok && CU_add_test(s, "agent_available", test_agent_available);
	ok = ok && CU_add_test(s, "bulk_roundtrip", test_bulk_roundtrip);
	ok = ok && CU_add_test(s, "many_threads", test_many_threads);
	ok = ok && CU_add_test(s, "few_sessions", test_few_sessions);
	ok = ok && CU_add_test(s, "open_close_no_leaks", test_open_close_no_leaks);
	ok = ok && CU_add_test(s, "agent_missing", test_agent_missing);
	ok = ok && CU_add_test(s, "agent_upload", test_agent_upload);
	ok = ok && CU_add_test(s, "connect_refused_fast", test_connect_refused_fast);
	ok = ok && CU_add_test(s, "auth_refused", test_auth_refused);
	ok = ok && CU_add_test(s, "hostkey_unknown_refused", test_hostkey_unknown_refused);
	ok = ok && CU_add_test(s, "hostkey_wrong_pin_refused", test_hostkey_wrong_pin_refused);
	ok = ok && CU_add_test(s, "hostkey_pin_accepted", test_hostkey_pin_accepted);
	ok = ok && CU_add_test(s, "hostkey_accept_new_records", test_hostkey_accept_new_records);
	ok = ok && CU_add_test(s, "hostkey_check_off", test_hostkey_check_off);
	ok = ok && CU_add_test(s, "killed_session_native", test_killed_session_native);
	if (have_agent)
		ok = ok && CU_add_test(s, "killed_session_agent", test_killed_session_agent);
	/* last: restarts sshd with a new host key */
	ok = ok && CU_add_test(s, "hostkey_changed_refused", test_hostkey_changed_refused);
	if (!ok) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		return 2;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	int rc = 0;
	if (argc > 1)
		rc = run_named(argc, argv);
	else
		CU_basic_run_tests();
	unsigned failures = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	close_backend(&agent);
	close_backend(&native);
	sshd_stop(&fx);
	return rc < 0 || failures ? 1 : 0;
}
