/*
 * The SSH transport against a real OpenSSH server (tests/ssh/sshd_fixture.c): the
 * conformance table over native mode and over agent mode (asp-agent --stdio on one
 * channel), then what only SSH has: host key trust, authentication, hostile quoting
 * through the login shell, a killed session, bulk transfer, many threads, and terminals
 * (tests/ssh/ssh_tty.c) in both modes.
 *
 *   test_ssh              run everything
 *   test_ssh NAME...      run only the named suites or tests
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "asp_ssh.h"
#include "conformance.h"
#include "lost_conn.h"
#include "ssh_backend.h"
#include "ssh_internal.h"
#include "ssh_tty.h"
#include "sshd_fixture.h"
#include "testproc.h"
#include "cu_run.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
	return ssh_backend_config(&fx, agent, extra);
}

typedef ssh_backend backend;

static asp_status open_backend(backend *b, const char *agent, const char *extra, asp_error *err)
{
	return ssh_backend_open(b, &fx, agent, extra, err);
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
		ssh_backend_close(&b);
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
		ssh_backend_close(&b);
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
	ssh_backend_close(&b);
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
	ssh_backend_close(&b);
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
	ssh_backend_close(&b);
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
	ssh_backend_close(&b);
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
			ssh_backend_close(&b);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "CHANGED"));
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, fx.fingerprint));
		/* the entry's name on a port other than 22, which ssh-keygen -R needs */
		char rm[128];
		snprintf(rm, sizeof rm, "ssh-keygen -R '[127.0.0.1]:%u' -f ", fx.port);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, rm));
	}
	/* pinning the new key is the way through */
	char extra[300];
	snprintf(extra, sizeof extra, "\"host_key_sha256\": \"%s\"", fx.fingerprint);
	backend b;
	asp_error err;
	CU_ASSERT_EQUAL(open_backend(&b, NULL, extra, &err), ASP_OK);
	ssh_backend_close(&b);
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
		ssh_backend_close(&b);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "authentication failed"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "identity_file"));
	/* the same message serves a v0 file, whose key is elsewhere */
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "identity.file in a version 0 file"));
	/* a password from an unset variable: named in the message */
	snprintf(extra, sizeof extra,
	         "\"identity_file\": \"%s\", \"password_env\": \"ASP_TEST_NO_SUCH_VAR\"",
	         fx.host_key);
	st = open_backend(&b, NULL, extra, &err);
	CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
	if (st == ASP_OK)
		ssh_backend_close(&b);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "ASP_TEST_NO_SUCH_VAR"));
}

/* Whether /proc/cpuinfo lists the CPU flag `name` (x86 "flags", arm64 "Features"). */
static bool cpu_flag(const char *name)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[4096];
	bool found = false;
	while (f && !found && fgets(line, sizeof line, f)) {
		if (strncmp(line, "flags", 5) != 0 && strncmp(line, "Features", 8) != 0)
			continue;
		for (char *w = strtok(strchr(line, ':') ? strchr(line, ':') + 1 : line, " \t\n"); w;
		     w = strtok(NULL, " \t\n"))
			found = found || strcmp(w, name) == 0;
	}
	if (f)
		fclose(f);
	return found;
}

/*
 * The transport's cipher order, offered to the fixture's OpenSSH (which prefers nothing
 * itself: the client's first common cipher wins), is AES-GCM where the CPU has AES and
 * carry-less multiply, libssh's chacha20-poly1305 otherwise, both ways.
 */
static void test_cipher_order(void)
{
	const char *order = sshc_cipher_order();
	bool aes = cpu_flag("aes") && (cpu_flag("pclmulqdq") || cpu_flag("pmull"));
	CU_ASSERT_EQUAL(order != NULL, aes);
	ssh_session s = ssh_new();
	unsigned port = fx.port;
	int no = 0;
	ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &no);
	ssh_options_set(s, SSH_OPTIONS_HOST, "127.0.0.1");
	ssh_options_set(s, SSH_OPTIONS_PORT, &port);
	ssh_options_set(s, SSH_OPTIONS_USER, fx.user);
	if (order) {
		CU_ASSERT_EQUAL(ssh_options_set(s, SSH_OPTIONS_CIPHERS_C_S, order), SSH_OK);
		CU_ASSERT_EQUAL(ssh_options_set(s, SSH_OPTIONS_CIPHERS_S_C, order), SSH_OK);
	}
	int rc = ssh_connect(s);
	CU_ASSERT_EQUAL(rc, SSH_OK);
	if (rc == SSH_OK) {
		const char *want =
		    order ? "aes128-gcm@openssh.com" : "chacha20-poly1305@openssh.com";
		CU_ASSERT_STRING_EQUAL(ssh_get_cipher_out(s), want);
		CU_ASSERT_STRING_EQUAL(ssh_get_cipher_in(s), want);
		ssh_disconnect(s);
	}
	ssh_free(s);
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
		ssh_backend_close(&b);
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
		ssh_backend_close(&b);
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
			ssh_backend_close(&b);
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
		ssh_backend_close(&b);
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
		                           ("for v in $(seq 0 16); do eval \"printf '%s\\0' "
		                            "\\\"\\$ASP_H$v\\\"\"; done; pwd")};
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

/* The pid a command wrote to a file in scratch, once it is there (0 after 10 s). */
static pid_t read_pid(const char *name)
{
	char path[400];
	snprintf(path, sizeof path, "%s/%s", scratch, name);
	return t_pid_from_file(path, 0, 10000); /* a loaded machine is slow to start it */
}

struct slow_call {
	asp_client *c;
	const char *pidfile; /* in scratch: the sleep's pid, once it runs */
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
	char cmd[400];
	snprintf(cmd, sizeof cmd, "echo $$ > %s; exec sleep 30", s->pidfile);
	p.command = cmd;
	p.cwd = scratch;
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

	struct slow_call s = {.c = c, .pidfile = agent_path ? "slow-agent.pid" : "slow-native.pid"};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, slow_exec, &s), 0);
	CU_ASSERT_TRUE(read_pid(s.pidfile) > 0); /* the sleep is running */
	long long t_kill = now_ms();
	CU_ASSERT_TRUE(sshd_kill_sessions(&fx) > 0);
	pthread_join(th, NULL);
	long long took = now_ms() - t_kill;
	CU_ASSERT_EQUAL(s.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_TRUE(took < 10000); /* promptly, not after the 30 s sleep */
	if (s.st != ASP_E_TRANSPORT_ERROR || took >= 10000)
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

/*
 * A stopped sftp-server: a file call fails with timeout after call_timeout_ms, naming the
 * limit, and once it runs again the next call works (the SFTP channel starts afresh).
 * Before, the limit was a fixed 120 s whatever the config said.
 */
static void test_sftp_stopped(void)
{
	char json[4096], full[4200];
	sshd_config_json(&fx, NULL, NULL, json, sizeof json);
	snprintf(full, sizeof full, "{\"call_timeout_ms\": 500, %s", json + 1);
	asp_config *cfg = NULL;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(full, strlen(full), NULL, &cfg, &err), ASP_OK);
	asp_client *c = NULL;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(asp_config_get(cfg), &c, &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = scratch;
	asp_stat_result r;
	CU_ASSERT_EQUAL(asp_stat(c, &p, &r, a, &err), ASP_OK);
	CU_ASSERT_TRUE(sshd_signal_sftp(&fx, SIGSTOP) > 0);
	long long t0 = now_ms();
	asp_status st = asp_stat(c, &p, &r, a, &err);
	long long took = now_ms() - t0;
	sshd_signal_sftp(&fx, SIGCONT);
	CU_ASSERT_EQUAL(st, ASP_E_TIMEOUT);
	CU_ASSERT_TRUE(took >= 450 && took < 10000);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "call_timeout_ms (500 ms)"));
	if (st != ASP_E_TIMEOUT || !strstr(err.message, "500 ms"))
		fprintf(stderr, "stopped sftp-server: %s after %lld ms: %s\n", asp_strerror(st),
		        took, err.message);
	CU_ASSERT_EQUAL(asp_stat(c, &p, &r, a, &err), ASP_OK);
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
}

/*
 * A server without sftp: sshd refuses the subsystem, or its program exits at once. A
 * file op fails at once with what to do (not after call_timeout_ms), each time, and
 * commands still run.
 */
static void sftp_missing(const char *program)
{
	sshd_fixture nf;
	if (sshd_start_sftp(&nf, program) != 0) {
		fprintf(stderr, "sshd without sftp: %s\n", nf.why);
		CU_FAIL("sshd_start_sftp");
		sshd_stop(&nf);
		return;
	}
	char json[4096];
	sshd_config_json(&nf, NULL, NULL, json, sizeof json);
	asp_config *cfg = NULL;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(json, strlen(json), NULL, &cfg, &err), ASP_OK);
	asp_client *c = NULL;
	CU_ASSERT_EQUAL_FATAL(asp_client_open_view(asp_config_get(cfg), &c, &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < 3; i++) {
		long long t0 = now_ms();
		asp_status st;
		if (i == 1) {
			asp_read_params p;
			asp_read_params_init(&p);
			p.path = "/etc/hostname";
			asp_read_result r;
			st = asp_read(c, &p, &r, a, &err);
		} else {
			asp_stat_params p;
			asp_stat_params_init(&p);
			p.path = "/";
			asp_stat_result r;
			st = asp_stat(c, &p, &r, a, &err);
		}
		long long took = now_ms() - t0;
		CU_ASSERT_EQUAL(st, ASP_E_TRANSPORT_ERROR);
		CU_ASSERT_TRUE(took < 5000);
		bool named = st != ASP_OK && strstr(err.message, "sftp subsystem");
		CU_ASSERT_TRUE(named);
		if (st != ASP_E_TRANSPORT_ERROR || !named || took >= 5000)
			fprintf(stderr, "no sftp (%s), call %d: %s after %lld ms: %s\n",
			        program ? program : "none", i, asp_strerror(st), took,
			        st == ASP_OK ? "" : err.message);
	}
	static const char *const argv[] = {"true"};
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.has_argv = true;
	ep.argv.items = argv;
	ep.argv.count = 1;
	asp_exec_result er;
	CU_ASSERT_EQUAL(asp_exec(c, &ep, &er, a, &err), ASP_OK);
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
	sshd_stop(&nf);
}

static void test_sftp_refused(void)
{
	sftp_missing(NULL);
}

static void test_sftp_exits(void)
{
	sftp_missing("/bin/false");
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
			snprintf(w->why, sizeof w->why, "%s: %s (exit %lld, timed out %d, %llu ms)",
			         want, st ? err.message : "wrong result", (long long)r.exit_code,
			         r.timed_out, (unsigned long long)r.duration_ms);
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
	asp_error err;
	backend b;
	CU_ASSERT_EQUAL_FATAL(ssh_backend_open(&b, &small, NULL, NULL, &err), ASP_OK);
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
	ssh_backend_close(&b);
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
		ssh_backend_close(&b);
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

/* ---- spawned processes over SSH ---------------------------------------------------- */

static double real_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* What one follower saw (asp/proc.h callbacks). */
typedef struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t *data[2];
	size_t len[2], keep;
	uint64_t total[2], next[2];
	int chunks;
	char bad[200];
	bool exited, lost;
	asp_exit_event ev;
	char sig[32];
	asp_error lost_err;
	/* a slow follower: each on_output takes this long */
	int delay_ms;
	/* a follower that does not consume: on_output waits until `release` */
	bool hold, held, release;
	/* "date +%s%N" lines: how late each one arrived, in ms */
	bool stamps;
	double lat[64];
	int nlat;
	char line[64];
	size_t line_len;
} seen;

static void seen_init(seen *w, size_t keep)
{
	memset(w, 0, sizeof *w);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->keep = keep;
}

static void seen_destroy(seen *w)
{
	free(w->data[0]);
	free(w->data[1]);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
}

static void seen_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                        const uint8_t *data, size_t len)
{
	(void)proc;
	seen *w = user;
	double now = real_ms();
	pthread_mutex_lock(&w->mu);
	int s = stream == ASP_STREAM_STDERR;
	if (offset != w->next[s] && !w->bad[0])
		snprintf(w->bad, sizeof w->bad, "stream %d: offset %llu, expected %llu", s,
		         (unsigned long long)offset, (unsigned long long)w->next[s]);
	if (w->exited || w->lost)
		snprintf(w->bad, sizeof w->bad, "output after the end");
	w->next[s] = offset + len;
	w->total[s] += len;
	w->chunks++;
	size_t room = w->keep > w->len[s] ? w->keep - w->len[s] : 0;
	size_t n = len < room ? len : room;
	if (n) {
		uint8_t *nb = realloc(w->data[s], w->len[s] + n);
		if (nb) {
			memcpy(nb + w->len[s], data, n);
			w->data[s] = nb;
			w->len[s] += n;
		}
	}
	for (size_t i = 0; w->stamps && s == 0 && i < len; i++) {
		if (data[i] != '\n') {
			if (w->line_len + 1 < sizeof w->line)
				w->line[w->line_len++] = (char)data[i];
			continue;
		}
		w->line[w->line_len] = '\0';
		w->line_len = 0;
		double stamp = strtod(w->line, NULL) / 1e6; /* ns since the epoch */
		if (w->nlat < 64 && stamp > 0)
			w->lat[w->nlat++] = now - stamp;
	}
	pthread_cond_broadcast(&w->cv);
	if (w->hold) {
		w->held = true;
		pthread_cond_broadcast(&w->cv);
		while (!w->release)
			pthread_cond_wait(&w->cv, &w->mu);
		w->hold = false;
	}
	int delay = w->release ? 0 : w->delay_ms;
	pthread_mutex_unlock(&w->mu);
	if (delay)
		usleep((useconds_t)delay * 1000);
}

static void seen_exit(void *user, const asp_exit_event *ev)
{
	seen *w = user;
	pthread_mutex_lock(&w->mu);
	w->exited = true;
	w->ev = *ev;
	w->ev.signal = NULL;
	if (ev->signal) {
		snprintf(w->sig, sizeof w->sig, "%s", ev->signal);
		w->ev.signal = w->sig;
	}
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void seen_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	seen *w = user;
	pthread_mutex_lock(&w->mu);
	w->lost = true;
	w->lost_err = *err;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static const asp_proc_callbacks seen_cb = {seen_output, seen_exit, seen_lost};

/* Waits until `cond` holds (under w->mu) or `ms` passed; its value then. */
#define SEEN_WAIT(w, cond, ms)                                                                     \
	({                                                                                         \
		long long until_ = now_ms() + (ms);                                                \
		pthread_mutex_lock(&(w)->mu);                                                      \
		while (!(cond) && now_ms() < until_) {                                             \
			struct timespec ts_;                                                       \
			clock_gettime(CLOCK_REALTIME, &ts_);                                       \
			ts_.tv_nsec += 20 * 1000000;                                               \
			if (ts_.tv_nsec >= 1000000000) {                                           \
				ts_.tv_sec++;                                                      \
				ts_.tv_nsec -= 1000000000;                                         \
			}                                                                          \
			pthread_cond_timedwait(&(w)->cv, &(w)->mu, &ts_);                          \
		}                                                                                  \
		bool ok_ = (cond);                                                                 \
		pthread_mutex_unlock(&(w)->mu);                                                    \
		ok_;                                                                               \
	})

/* A client (the public API, reconnects included) on the fixture's sshd. */
static asp_client *client_for(const char *agent_path, asp_config **cfg)
{
	*cfg = config(agent_path, NULL);
	if (!*cfg)
		return NULL;
	asp_client *c = NULL;
	asp_error err;
	if (asp_client_open_view(asp_config_get(*cfg), &c, &err) != ASP_OK) {
		fprintf(stderr, "client: %s\n", err.message);
		asp_config_free(*cfg);
		return NULL;
	}
	return c;
}

static bool pid_alive(pid_t pid)
{
	char p[64], buf[512];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z'; /* a zombie is dead */
}

static size_t log_count(const char *needle)
{
	FILE *f = fopen(fx.log, "r");
	if (!f)
		return 0;
	char line[2048];
	size_t n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

static asp_status wait_proc(backend *b, uint64_t proc, uint64_t ms, asp_proc_wait_result *r,
                            asp_arena *a, asp_error *err)
{
	asp_proc_wait_params p;
	asp_proc_wait_params_init(&p);
	p.proc = proc;
	p.timeout_ms = ms;
	return b->ops->proc_wait(b->self, &p, r, a, err);
}

static asp_status signal_proc(backend *b, uint64_t proc, const char *sig, asp_error *err)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = sig;
	asp_proc_signal_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = b->ops->proc_signal(b->self, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

/*
 * proc_signal as root: sshd refuses the channel's signal request for root logins (its
 * log says so: the request went out), and the group gets the signal from a second
 * channel all the same, background children included.
 */
static void test_spawn_signal_group(void)
{
	/* (not INT or QUIT: sh starts `&` jobs with those ignored) */
	static const char *const sigs[] = {"TERM", "HUP", "USR1", "USR2"};
	asp_arena *a = asp_arena_new();
	asp_error err;
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
		size_t refused = log_count("session_signal_req");
		char pidfile[32];
		snprintf(pidfile, sizeof pidfile, "bg%zu.pid", i);
		char cmd[200];
		snprintf(cmd, sizeof cmd, "sleep 30 & echo $! > %s; wait", pidfile);
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.command = cmd;
		p.cwd = scratch;
		asp_spawn_result r;
		CU_ASSERT_EQUAL_FATAL(native.ops->spawn(native.self, &p, &r, a, &err), ASP_OK);
		pid_t bg = read_pid(pidfile);
		CU_ASSERT_TRUE_FATAL(bg > 0 && pid_alive(bg));
		CU_ASSERT_EQUAL(signal_proc(&native, r.proc, sigs[i], &err), ASP_OK);
		asp_proc_wait_result w;
		CU_ASSERT_EQUAL_FATAL(wait_proc(&native, r.proc, 10000, &w, a, &err), ASP_OK);
		CU_ASSERT_TRUE(w.exit_code == -1 && w.signal && strcmp(w.signal, sigs[i]) == 0);
		bool gone = false;
		for (int k = 0; k < 50 && !gone; k++, usleep(20 * 1000))
			gone = !pid_alive(bg);
		CU_ASSERT_TRUE(gone); /* the whole group got it, not just the leader */
		if (!gone)
			kill(bg, SIGKILL);
		if (geteuid() == 0) /* the channel's request reached sshd, which refused it */
			CU_ASSERT_TRUE(log_count("session_signal_req") > refused);
		/* a finished process: a no-op */
		CU_ASSERT_EQUAL(signal_proc(&native, r.proc, "KILL", &err), ASP_OK);
		asp_arena_reset(a);
	}
	asp_arena_free(a);
}

/* proc_write: every byte value, more than one SSH window in one call, then EOF. */
static void test_spawn_stdin_binary_eof(void)
{
	asp_config *cfg;
	asp_client *c = client_for(NULL, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	size_t n = 256 + 5u * 1024 * 1024; /* sshd's window is 2 MiB */
	uint8_t *in = malloc(n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(in);
	uint32_t x = 7;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		in[i] = i < 256 ? (uint8_t)i : (uint8_t)(x >> 16);
	}
	seen w;
	seen_init(&w, n + 16);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	const char *argv[] = {"sh", "-c", "cat; echo END >&2"};
	p.has_argv = true;
	p.argv = (asp_strv){argv, 3};
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &seen_cb, &w, &proc, &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_proc_write_params wp;
	asp_proc_write_params_init(&wp);
	wp.proc = proc;
	asp_proc_write_result wr;
	wp.data = (asp_bytes){in, 256};
	CU_ASSERT_EQUAL(asp_proc_write(c, &wp, &wr, a, &err), ASP_OK);
	wp.data = (asp_bytes){in + 256, n - 256};
	CU_ASSERT_EQUAL(asp_proc_write(c, &wp, &wr, a, &err), ASP_OK);
	wp.data = (asp_bytes){NULL, 0};
	wp.eof = true;
	CU_ASSERT_EQUAL(asp_proc_write(c, &wp, &wr, a, &err), ASP_OK);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.exited || w.lost, 20000));
	CU_ASSERT_TRUE(w.exited && w.ev.exit_code == 0);
	CU_ASSERT_EQUAL(w.len[0], n);
	CU_ASSERT_TRUE(w.len[0] == n && memcmp(w.data[0], in, n) == 0);
	CU_ASSERT_TRUE(w.len[1] == 4 && memcmp(w.data[1], "END\n", 4) == 0);
	CU_ASSERT_FALSE(w.bad[0]);
	if (w.bad[0])
		fprintf(stderr, "stdin: %s\n", w.bad);
	/* after eof: invalid_argument */
	wp.data = (asp_bytes){(const uint8_t *)"x", 1};
	wp.eof = false;
	CU_ASSERT_EQUAL(asp_proc_write(c, &wp, &wr, a, &err), ASP_E_INVALID_ARGUMENT);
	/* to a process that exited with its stdin open: io_error, as the local backend */
	asp_spawn_params_init(&p);
	p.command = "exit 0";
	asp_spawn_result sr;
	CU_ASSERT_EQUAL_FATAL(asp_spawn(c, &p, &sr, a, &err), ASP_OK);
	asp_proc_wait_params pw;
	asp_proc_wait_params_init(&pw);
	pw.proc = sr.proc;
	asp_proc_wait_result wres;
	CU_ASSERT_EQUAL(asp_proc_wait(c, &pw, &wres, a, &err), ASP_OK);
	wp.proc = sr.proc;
	CU_ASSERT_EQUAL(asp_proc_write(c, &wp, &wr, a, &err), ASP_E_IO_ERROR);
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
	free(in);
}

/* timeout_ms on a group that ignores TERM: KILL 2 s later, from the second channel. */
static void test_spawn_timeout_kill(void)
{
	asp_config *cfg;
	asp_client *c = client_for(NULL, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	seen w;
	seen_init(&w, 4096);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "trap '' TERM; sleep 30 & echo $! > tk.pid; echo started; "
	            "while :; do sleep 1; done";
	p.cwd = scratch;
	p.timeout_ms = 300;
	uint64_t proc;
	asp_error err;
	long long t0 = now_ms();
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &seen_cb, &w, &proc, &err), ASP_OK);
	pid_t bg = read_pid("tk.pid");
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.exited || w.lost, 10000));
	long long took = now_ms() - t0;
	CU_ASSERT_TRUE(w.exited && w.ev.timed_out && w.ev.exit_code == -1 && w.ev.signal &&
	               strcmp(w.ev.signal, "KILL") == 0);
	CU_ASSERT_TRUE(took >= 2000 && took < 12000); /* KILL 2 s after TERM, not 30 s */
	CU_ASSERT_TRUE(w.len[0] == 8 && memcmp(w.data[0], "started\n", 8) == 0);
	CU_ASSERT_TRUE(bg > 0);
	bool gone = false;
	for (int k = 0; k < 100 && !gone && bg > 0; k++, usleep(20 * 1000))
		gone = !pid_alive(bg);
	CU_ASSERT_TRUE(gone);
	if (!gone && bg > 0)
		kill(bg, SIGKILL);
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
}

struct waiter {
	asp_client *c;
	uint64_t proc;
	atomic_int tid; /* set just before the call */
	asp_status st;
	long long done_at;
};

static void *wait_main(void *v)
{
	struct waiter *wt = v;
	asp_arena *a = asp_arena_new();
	asp_proc_wait_params p;
	asp_proc_wait_params_init(&p);
	p.proc = wt->proc; /* timeout 0: for ever */
	asp_proc_wait_result r;
	asp_error err;
	atomic_store(&wt->tid, (int)syscall(SYS_gettid));
	wt->st = asp_proc_wait(wt->c, &p, &r, a, &err);
	wt->done_at = now_ms();
	asp_arena_free(a);
	return NULL;
}

/* The connection dies mid-stream: on_lost promptly, and a pending proc_wait fails. */
static void killed_mid_stream(const char *agent_path)
{
	asp_config *cfg;
	asp_client *c = client_for(agent_path, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	seen w;
	seen_init(&w, 4096);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "while :; do echo tick; sleep 0.05; done";
	uint64_t proc;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &seen_cb, &w, &proc, &err), ASP_OK);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.total[0] >= 15, 5000));
	struct waiter wt = {.c = c, .proc = proc};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, wait_main, &wt), 0);
	/* the wait must be pending when the session dies: a later one is not_found */
	for (long long until = now_ms() + 10000; !atomic_load(&wt.tid) && now_ms() < until;)
		usleep(1000);
	CU_ASSERT_TRUE(t_thread_asleep(atomic_load(&wt.tid), 10000));
	long long t_kill = now_ms();
	CU_ASSERT_TRUE(sshd_kill_sessions(&fx) > 0);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.lost || w.exited, 5000));
	long long lost_after = now_ms() - t_kill;
	pthread_join(th, NULL);
	CU_ASSERT_TRUE(w.lost && !w.exited);
	CU_ASSERT_EQUAL(w.lost_err.code, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_TRUE(lost_after < 3000);
	CU_ASSERT_EQUAL(wt.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_TRUE(wt.done_at - t_kill < 3000);
	CU_ASSERT_FALSE(w.bad[0]);
	/* the next call reconnects; the old connection's processes are not there */
	asp_arena *a = asp_arena_new();
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "echo again";
	asp_exec_result er;
	CU_ASSERT_EQUAL(asp_exec(c, &ep, &er, a, &err), ASP_OK);
	/*
	 * ... and the old handle names nothing on the new one, not even its first process:
	 * numbered from 1 per connection, a wait or a signal for the lost process reached
	 * the new process with its number.
	 */
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = "exec sleep 30";
	asp_spawn_result sr;
	CU_ASSERT_EQUAL_FATAL(asp_spawn(c, &sp, &sr, a, &err), ASP_OK);
	CU_ASSERT_NOT_EQUAL(sr.proc, proc);
	asp_proc_wait_params pw;
	asp_proc_wait_params_init(&pw);
	pw.proc = proc;
	pw.timeout_ms = 100;
	asp_proc_wait_result pr;
	CU_ASSERT_EQUAL(asp_proc_wait(c, &pw, &pr, a, &err), ASP_E_NOT_FOUND);
	if (!agent_path) /* native: the transport's own words (an agent answers for itself) */
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "earlier connection that was lost"));
	asp_proc_signal_params ps;
	asp_proc_signal_params_init(&ps);
	ps.proc = sr.proc;
	ps.signal = "KILL";
	asp_proc_signal_result psr;
	CU_ASSERT_EQUAL(asp_proc_signal(c, &ps, &psr, a, &err), ASP_OK);
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
}

/*
 * The server's process for the connection (and in agent mode the asp-agent) SIGKILLed
 * with each kind of stream open (tests/common/lost_conn.c): the streams end with
 * on_lost, the calls in flight fail, old handles are not_found, the next call works.
 */
static int kill_connection(void *ctx)
{
	sshd_fixture *f = ctx;
	int agents = sshd_kill_agents(f);
	return agents + sshd_kill_sessions(f);
}

static void lost_streams(const char *agent_path, lost_kind k)
{
	asp_config *cfg;
	asp_client *c = client_for(agent_path, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	lost_target t = {.c = c,
	                 .kill = kill_connection,
	                 .ctx = &fx,
	                 .scratch = scratch,
	                 .name = agent_path ? "OpenSSH agent mode" : "OpenSSH native"};
	lost_conn_run(&t, k);
	asp_client_free(c);
	asp_config_free(cfg);
}

#define LOST_TEST(kind, name)                                                                      \
	static void test_lost_##name##_native(void)                                                \
	{                                                                                          \
		lost_streams(NULL, kind);                                                          \
	}                                                                                          \
	static void test_lost_##name##_agent(void)                                                 \
	{                                                                                          \
		lost_streams(getenv("ASP_AGENT"), kind);                                           \
	}
LOST_TEST(LOST_SPAWN, spawn)
LOST_TEST(LOST_TTY, tty)
LOST_TEST(LOST_CONNECT, connect)
LOST_TEST(LOST_WATCH, watch)
LOST_TEST(LOST_EXEC, exec)
LOST_TEST(LOST_WAIT, wait)
#undef LOST_TEST

static void test_killed_mid_stream_native(void)
{
	killed_mid_stream(NULL);
}

static void test_killed_mid_stream_agent(void)
{
	killed_mid_stream(getenv("ASP_AGENT"));
}

static uint64_t self_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = strtoull(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kb;
}

/* Bytes a process has written (its /proc/PID/io wchar); 0 when it cannot tell. */
static uint64_t written_by(pid_t pid)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/%d/io", (int)pid);
	FILE *f = fopen(p, "r");
	uint64_t n = 0;
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "wchar:", 6) == 0)
			n = strtoull(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return n;
}

/*
 * A producer writing 1 GiB to a follower that reads slowly (10 ms a chunk), then not at
 * all: this client's memory stays flat (libssh holds at most a window: sshc_channel_take)
 * and the SSH window holds the producer back, then stops it.
 */
static void unread_follower(const char *agent_path, const char *label)
{
	asp_config *cfg;
	asp_client *c = client_for(agent_path, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	seen w;
	seen_init(&w, 0);
	w.delay_ms = 10;
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "echo $$ > gib-%s.pid; exec head -c 1073741824 /dev/zero", label);
	p.command = cmd;
	p.cwd = scratch;
	uint64_t proc;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &seen_cb, &w, &proc, &err), ASP_OK);
	char pidfile[64];
	snprintf(pidfile, sizeof pidfile, "gib-%s.pid", label);
	pid_t head = read_pid(pidfile);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.total[0] > 0, 5000));
	usleep(500 * 1000);
	uint64_t rss0 = self_rss_kb(), out0 = written_by(head);
	usleep(2000 * 1000);
	uint64_t rss1 = self_rss_kb(), out1 = written_by(head);
	pthread_mutex_lock(&w.mu);
	uint64_t got = w.total[0];
	w.hold = true; /* and now not at all */
	pthread_mutex_unlock(&w.mu);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.held, 5000));
	usleep(1000 * 1000);
	uint64_t out2 = written_by(head);
	usleep(1000 * 1000);
	uint64_t rss3 = self_rss_kb(), out3 = written_by(head);
	fprintf(stderr,
	        "\n    [%s] 1 GiB producer, follower at 10 ms a chunk for 2 s: client RSS %llu -> "
	        "%llu KiB, producer +%llu KiB (follower got %llu KiB in all); then not reading "
	        "for 2 s: RSS %llu KiB, producer +%llu KiB in the last second\n",
	        label, (unsigned long long)rss0, (unsigned long long)rss1,
	        (unsigned long long)(out1 - out0) / 1024, (unsigned long long)got / 1024,
	        (unsigned long long)rss3, (unsigned long long)(out3 - out2) / 1024);
	CU_ASSERT_TRUE(rss1 < rss0 + 16 * 1024);
	CU_ASSERT_TRUE(rss3 < rss0 + 16 * 1024);
	/* held to the follower's pace (6.5 MB/s at most) plus windows, not the gigabyte */
	CU_ASSERT_TRUE(out1 - out0 < 32u * 1024 * 1024);
	CU_ASSERT_TRUE(out3 < 256u * 1024 * 1024);
	CU_ASSERT_TRUE(out3 - out2 < 1024 * 1024); /* stopped */
	/* release it and end the producer: the rest flows, then the exit */
	pthread_mutex_lock(&w.mu);
	w.release = true;
	pthread_cond_broadcast(&w.cv);
	pthread_mutex_unlock(&w.mu);
	asp_arena *a = asp_arena_new();
	asp_proc_signal_params sp;
	asp_proc_signal_params_init(&sp);
	sp.proc = proc;
	sp.signal = "KILL";
	asp_proc_signal_result sr;
	CU_ASSERT_EQUAL(asp_proc_signal(c, &sp, &sr, a, &err), ASP_OK);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.exited || w.lost, 15000));
	CU_ASSERT_TRUE(w.exited && w.ev.signal && strcmp(w.ev.signal, "KILL") == 0);
	CU_ASSERT_FALSE(w.bad[0]);
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
}

static void test_unread_follower_native(void)
{
	unread_follower(NULL, "native");
}

static void test_unread_follower_agent(void)
{
	unread_follower(getenv("ASP_AGENT"), "agent");
}

/* How late live output arrives: lines carrying the sandbox's clock (the same machine). */
static void chunk_latency(const char *agent_path, const char *label)
{
	asp_config *cfg;
	asp_client *c = client_for(agent_path, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	seen w;
	seen_init(&w, 0);
	w.stamps = true;
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "for i in $(seq 20); do date +%s%N; sleep 0.05; done";
	uint64_t proc;
	asp_error err;
	long long t0 = now_ms();
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &seen_cb, &w, &proc, &err), ASP_OK);
	long long spawned = now_ms() - t0;
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.exited || w.lost, 15000));
	CU_ASSERT_EQUAL(w.nlat, 20);
	double lat[64];
	int n = w.nlat;
	memcpy(lat, w.lat, sizeof lat);
	for (int i = 1; i < n; i++) /* insertion sort: 20 values */
		for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
			double t = lat[j];
			lat[j] = lat[j - 1];
			lat[j - 1] = t;
		}
	if (n) {
		fprintf(stderr,
		        "\n    [%s] spawn answered in %lld ms; line latency median %.2f ms, max "
		        "%.2f ms (%d lines)\n",
		        label, spawned, lat[n / 2], lat[n - 1], n);
		CU_ASSERT_TRUE(lat[n - 1] < 500);
	}
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
}

static void test_chunk_latency(void)
{
	chunk_latency(NULL, "native");
	if (getenv("ASP_AGENT"))
		chunk_latency(getenv("ASP_AGENT"), "agent");
}

/* Execs writing both streams, each within 20 s; `done` counts those that finished so. */
struct exec_run {
	asp_client *c;
	int want, done;
	long long worst;
};

static void *exec_runner(void *v)
{
	struct exec_run *x = v;
	asp_arena *a = asp_arena_new();
	for (; x->done < x->want; x->done++) {
		asp_exec_params xp;
		asp_exec_params_init(&xp);
		xp.command = "printf o; printf e >&2";
		asp_exec_result r;
		asp_error err;
		long long t0 = now_ms();
		asp_status st = asp_exec(x->c, &xp, &r, a, &err);
		long long took = now_ms() - t0;
		x->worst = took > x->worst ? took : x->worst;
		asp_arena_reset(a);
		if (st != ASP_OK || took > 20000)
			break;
	}
	asp_arena_free(a);
	return NULL;
}

/*
 * Every wait is woken by what it waits for, never by the backstop: with the backstop at
 * a minute (ASP_SSH_WAIT_SLICE_MS), a thousand one-byte round trips through `cat`, two
 * hundred execs writing both streams, then four threads' execs at once (the socket passes
 * from one waiter to the next; the rest sleep until it reads for them) each finish within
 * seconds. A thread whose own poll of one stream read the other's data (or its EOF) used
 * to sleep on it.
 */
static void no_lost_wakeups(const char *agent_path, const char *label)
{
	setenv("ASP_SSH_WAIT_SLICE_MS", "60000", 1);
	asp_config *cfg;
	asp_client *c = client_for(agent_path, &cfg);
	unsetenv("ASP_SSH_WAIT_SLICE_MS");
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	seen w;
	seen_init(&w, 0);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	const char *argv[] = {"cat"};
	p.has_argv = true;
	p.argv = (asp_strv){argv, 1};
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_spawn_start(c, &p, &seen_cb, &w, &proc, &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_proc_write_params wp;
	asp_proc_write_params_init(&wp);
	wp.proc = proc;
	wp.data = (asp_bytes){(const uint8_t *)"x", 1};
	asp_proc_write_result wr;
	int trips = 0;
	for (; trips < 1000; trips++) {
		if (asp_proc_write(c, &wp, &wr, a, &err) != ASP_OK ||
		    !SEEN_WAIT(&w, w.total[0] == (uint64_t)trips + 1, 20000))
			break;
		asp_arena_reset(a);
	}
	CU_ASSERT_EQUAL(trips, 1000);
	struct exec_run serial = {c, 200, 0, 0};
	exec_runner(&serial);
	CU_ASSERT_EQUAL(serial.done, 200);
	enum { RUNNERS = 4 };
	struct exec_run at_once[RUNNERS];
	pthread_t th[RUNNERS];
	long long worst = serial.worst;
	for (int i = 0; i < RUNNERS; i++) {
		at_once[i] = (struct exec_run){c, 50, 0, 0};
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, exec_runner, &at_once[i]), 0);
	}
	for (int i = 0; i < RUNNERS; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(at_once[i].done, 50);
		worst = at_once[i].worst > worst ? at_once[i].worst : worst;
	}
	fprintf(stderr, "\n    [%s] %d round trips, %d + %d x 50 execs (slowest %lld ms)\n", label,
	        trips, serial.done, RUNNERS, worst);
	wp.data = (asp_bytes){NULL, 0};
	wp.eof = true;
	CU_ASSERT_EQUAL(asp_proc_write(c, &wp, &wr, a, &err), ASP_OK);
	CU_ASSERT_TRUE(SEEN_WAIT(&w, w.exited || w.lost, 20000));
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
}

static void test_no_lost_wakeups(void)
{
	no_lost_wakeups(NULL, "native");
	if (getenv("ASP_AGENT"))
		no_lost_wakeups(getenv("ASP_AGENT"), "agent");
}

/* Whether native mode's hello lists `op`. */
static bool native_lists(const char *op)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	bool found = false;
	if (a && native.ops->hello(native.self, &hp, &hr, a, &err) == ASP_OK)
		for (size_t i = 0; i < hr.ops.count && !found; i++)
			found = strcmp(hr.ops.items[i], op) == 0;
	else
		CU_FAIL("native hello failed");
	asp_arena_free(a);
	return found;
}

/* Native mode lists the streaming ops but proc_attach, which says where it works. */
static void test_attach_unsupported_native(void)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	CU_ASSERT_TRUE(native_lists("spawn") && !native_lists("proc_attach"));
	asp_config *cfg;
	asp_client *c = client_for(NULL, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "echo hi";
	asp_spawn_result r;
	CU_ASSERT_EQUAL_FATAL(asp_spawn(c, &p, &r, a, &err), ASP_OK);
	seen w;
	seen_init(&w, 64);
	asp_proc_attach_params ap;
	asp_proc_attach_params_init(&ap);
	ap.proc = r.proc;
	CU_ASSERT_EQUAL(asp_proc_attach_start(c, &ap, &seen_cb, &w, &err), ASP_E_UNSUPPORTED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "agent mode"));
	usleep(50 * 1000);
	CU_ASSERT_TRUE(!w.chunks && !w.exited && !w.lost);
	/* unknown processes: not_found */
	asp_proc_wait_params pw;
	asp_proc_wait_params_init(&pw);
	pw.proc = 999999;
	asp_proc_wait_result wr;
	CU_ASSERT_EQUAL(asp_proc_wait(c, &pw, &wr, a, &err), ASP_E_NOT_FOUND);
	asp_client_free(c);
	asp_config_free(cfg);
	seen_destroy(&w);
	asp_arena_free(a);
}

/*
 * Native mode has edit (read + atomic write) but not glob and grep: hello leaves them out
 * and a call answers unsupported naming agent mode, the way to get them.
 */
static void test_search_unsupported_native(void)
{
	asp_arena *a = asp_arena_new();
	asp_error err;
	CU_ASSERT_TRUE(native_lists("edit") && !native_lists("glob") && !native_lists("grep"));
	asp_config *cfg;
	asp_client *c = client_for(NULL, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	asp_glob_params gp;
	asp_glob_params_init(&gp);
	gp.path = "/";
	gp.pattern = "*";
	asp_glob_result gr;
	CU_ASSERT_EQUAL(asp_glob(c, &gp, &gr, a, &err), ASP_E_UNSUPPORTED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "agent mode"));
	asp_grep_params rp;
	asp_grep_params_init(&rp);
	rp.path = "/";
	rp.regex = "x";
	asp_grep_result rr;
	CU_ASSERT_EQUAL(asp_grep(c, &rp, &rr, a, &err), ASP_E_UNSUPPORTED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "agent mode"));
	asp_client_free(c);
	asp_config_free(cfg);
	asp_arena_free(a);
}

/*
 * A spawned process holds one of the connection's sessions while it runs. Against a stock
 * sshd (MaxSessions 10) a connection runs at most 8 at once, keeping one session for exec
 * and sftp and one for kills: a 9th spawn gives up after the connect timeout saying why,
 * exec and proc_signal still get through, and a process that ended frees its session.
 */
static void test_spawn_channel_budget(void)
{
	enum { STOCK = 10, MOST = STOCK - 2 };
	sshd_fixture small;
	if (sshd_start_max_sessions(&small, STOCK) < 0) {
		CU_FAIL(small.why);
		sshd_stop(&small);
		return;
	}
	asp_error err;
	backend b;
	CU_ASSERT_EQUAL_FATAL(
	    ssh_backend_open(&b, &small, NULL, "\"connect_timeout_ms\": 1500", &err), ASP_OK);
	asp_arena *a = asp_arena_new();
	asp_stat_params stp;
	asp_stat_params_init(&stp);
	stp.path = "/";
	asp_stat_result str;
	CU_ASSERT_EQUAL(b.ops->stat(b.self, &stp, &str, a, &err), ASP_OK); /* sftp is open */
	uint64_t procs[MOST] = {0};
	for (int i = 0; i < MOST; i++) {
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.command = "exec sleep 30";
		asp_spawn_result r = {0};
		CU_ASSERT_EQUAL(b.ops->spawn(b.self, &p, &r, a, &err), ASP_OK);
		procs[i] = r.proc;
	}
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "exec sleep 30";
	asp_spawn_result r = {0};
	long long t0 = now_ms();
	asp_status st = b.ops->spawn(b.self, &p, &r, a, &err);
	CU_ASSERT_EQUAL(st, ASP_E_TIMEOUT);
	CU_ASSERT_TRUE(now_ms() - t0 >= 1400);
	if (st == ASP_E_TIMEOUT)
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "agent mode"));
	/* exec has the session kept for it, the kill its own */
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "echo hi";
	ep.timeout_ms = 10000;
	asp_exec_result er;
	CU_ASSERT_EQUAL(b.ops->exec(b.self, &ep, &er, a, &err), ASP_OK);
	CU_ASSERT_TRUE(!er.timed_out && bytes_eq(er.stdout_data, "hi\n", 3));
	CU_ASSERT_EQUAL(signal_proc(&b, procs[0], "KILL", &err), ASP_OK);
	asp_proc_wait_result w;
	CU_ASSERT_EQUAL(wait_proc(&b, procs[0], 5000, &w, a, &err), ASP_OK);
	/* its session serves the next spawn */
	CU_ASSERT_EQUAL(b.ops->spawn(b.self, &p, &r, a, &err), ASP_OK);
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CU_ASSERT_EQUAL(b.ops->proc_list(b.self, &lp, &lr, a, &err), ASP_OK);
	size_t running = 0;
	for (size_t i = 0; i < lr.procs.count; i++)
		running += lr.procs.items[i].running;
	CU_ASSERT_EQUAL(running, MOST);
	asp_arena_free(a);
	long long tc = now_ms();
	ssh_backend_close(&b); /* TERMs the groups still running, all in one command */
	CU_ASSERT_TRUE(now_ms() - tc < 3000);
	sshd_stop(&small);
}

/* ---- agent mode: reattaching from another connection -------------------------------- */

static const char *relay_agent; /* a script running asp-agent --relay to one daemon */

static backend *relay_peers[8];

static void *relay_peer_open(void *ctx)
{
	(void)ctx;
	backend *b = calloc(1, sizeof *b);
	asp_error err;
	if (!b || open_backend(b, relay_agent, NULL, &err) != ASP_OK) {
		if (b)
			fprintf(stderr, "relay peer: %s\n", err.message);
		free(b);
		return NULL;
	}
	for (int i = 0; i < 8; i++)
		if (!relay_peers[i]) {
			relay_peers[i] = b;
			return b->self;
		}
	ssh_backend_close(b);
	free(b);
	return NULL;
}

static void relay_peer_close(void *ctx, void *peer)
{
	(void)ctx;
	for (int i = 0; i < 8; i++)
		if (relay_peers[i] && relay_peers[i]->self == peer) {
			ssh_backend_close(relay_peers[i]);
			free(relay_peers[i]);
			relay_peers[i] = NULL;
		}
}

/*
 * With ssh.agent running `asp-agent --relay` to one long-lived daemon (docs/design.md,
 * "Concurrency and lifetime"), a process outlives the SSH connection that spawned it and
 * is reattached from another: the conformance case, over SSH.
 */
static void test_agent_reattach_after_close(void)
{
	const char *agent_path = getenv("ASP_AGENT");
	CU_ASSERT_PTR_NOT_NULL_FATAL(agent_path);
	char dir[400], sock[450], script[450], text[1200];
	snprintf(dir, sizeof dir, "%s/relay", fx.dir);
	mkdir(dir, 0700);
	snprintf(sock, sizeof sock, "unix:%s/d.sock", dir);
	snprintf(script, sizeof script, "%s/agent-relay", dir);
	snprintf(text, sizeof text, "#!/bin/sh\nexec '%s' --relay '%s'\n", agent_path, sock);
	FILE *f = fopen(script, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
	chmod(script, 0755);
	pid_t daemon = fork();
	if (daemon == 0) {
		freopen("/dev/null", "r", stdin);
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execl(agent_path, agent_path, "--listen", sock, (char *)NULL);
		_exit(127);
	}
	CU_ASSERT_TRUE_FATAL(daemon > 0);
	struct stat sb;
	for (int i = 0; i < 100 && stat(sock + 5, &sb) != 0; i++)
		usleep(20 * 1000);
	relay_agent = script;
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, script, NULL, &err);
	CU_ASSERT_EQUAL(st, ASP_OK);
	if (st == ASP_OK) {
		conf_streaming cs;
		conf_transport_streaming(&cs, &asp_transport_ssh);
		cs.peer_open = relay_peer_open;
		cs.peer_close = relay_peer_close;
		const char *names[] = {"proc_attach_after_close", "proc_attach_replay"};
		for (size_t i = 0; i < 2; i++) {
			conf_outcome o;
			conf_run_case_st(conf_find(names[i]), b.ops, b.self, &cs, scratch, &o);
			CU_ASSERT_TRUE(o.passed && !o.skipped); /* ran: not n/a either */
			if (!o.passed || o.skipped)
				fprintf(stderr, "%s over the relay: %s:%d %s\n", names[i],
				        o.file ? o.file : "", o.line, o.msg);
		}
		ssh_backend_close(&b);
	} else {
		fprintf(stderr, "relay: %s\n", err.message);
	}
	kill(daemon, SIGTERM);
	waitpid(daemon, NULL, 0);
}

/* ---- registration ------------------------------------------------------------------- */

/*
 * Terminals (tests/ssh/ssh_tty.c), logged in as whoever runs the tests: native mode (the
 * channel's pty) and agent mode (asp-agent's own, over the one channel).
 */
#define TTY_TEST(name)                                                                             \
	static void test_tty_##name(void)                                                          \
	{                                                                                          \
		ssh_tty_##name(&(ssh_tty_target){native.ops, native.self});                        \
	}                                                                                          \
	static void test_tty_##name##_agent(void)                                                  \
	{                                                                                          \
		ssh_tty_##name(&(ssh_tty_target){agent.ops, agent.self});                          \
	}
TTY_TEST(hello)
TTY_TEST(basics)
TTY_TEST(resize)
TTY_TEST(interrupt)
TTY_TEST(eof)
TTY_TEST(signal_timeout)
TTY_TEST(bad_input)
#undef TTY_TEST

/* authorized_keys' no-pty: sshd refuses the pty-req, spawn with tty is unsupported. */
static void test_tty_refused(void)
{
	char ak[440], saved[4096];
	snprintf(ak, sizeof ak, "%s/authorized_keys", fx.dir);
	CU_ASSERT_EQUAL_FATAL(ssh_tty_key_no_pty(ak, saved, sizeof saved), 0);
	backend b;
	asp_error err;
	asp_status st = open_backend(&b, NULL, NULL, &err);
	ssh_tty_key_restore(ak, saved); /* for every other test */
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	ssh_tty_refused(&(ssh_tty_target){b.ops, b.self});
	ssh_backend_close(&b);
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
	/*
	 * Streaming through the transport's subscribe slots, as the client uses them. What
	 * applies is what hello announces: native mode has no proc_attach (its
	 * `unsupported` answer: ssh/attach_unsupported_native), agent mode over
	 * `asp-agent --stdio` no "reattach" (over a relay it has: agent_reattach_after_close).
	 */
	static conf_streaming native_st, agent_st;
	conf_transport_streaming(&native_st, &asp_transport_ssh);
	conf_transport_streaming(&agent_st, &asp_transport_ssh);
	/* ASP_TEST_ONLY=WORD: only the conformance cases whose names contain WORD, over both
	 * modes, as a table (debugging). */
	const char *only = getenv("ASP_TEST_ONLY");
	if (only) {
		int f =
		    conf_run_filtered_st(native.ops, native.self, &native_st, "/tmp", only, stdout);
		if (have_agent)
			f += conf_run_filtered_st(agent.ops, agent.self, &agent_st, "/tmp", only,
			                          stdout);
		ssh_backend_close(&agent);
		ssh_backend_close(&native);
		sshd_stop(&fx);
		return f ? 1 : 0;
	}
	bool ok =
	    conf_register_cunit_st("ssh_native", native.ops, native.self, &native_st, "/tmp") == 0;
	if (have_agent)
		ok = ok && conf_register_cunit_st("ssh_agent", agent.ops, agent.self, &agent_st,
		                                  "/tmp") == 0;
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
	ok = ok && CU_add_test(s, "cipher_order", test_cipher_order);
	ok = ok && CU_add_test(s, "auth_refused", test_auth_refused);
	ok = ok && CU_add_test(s, "hostkey_unknown_refused", test_hostkey_unknown_refused);
	ok = ok && CU_add_test(s, "hostkey_wrong_pin_refused", test_hostkey_wrong_pin_refused);
	ok = ok && CU_add_test(s, "hostkey_pin_accepted", test_hostkey_pin_accepted);
	ok = ok && CU_add_test(s, "hostkey_accept_new_records", test_hostkey_accept_new_records);
	ok = ok && CU_add_test(s, "hostkey_check_off", test_hostkey_check_off);
	/* spawned processes over SSH */
	ok = ok && CU_add_test(s, "spawn_signal_group", test_spawn_signal_group);
	ok = ok && CU_add_test(s, "spawn_stdin_binary_eof", test_spawn_stdin_binary_eof);
	ok = ok && CU_add_test(s, "spawn_timeout_kill", test_spawn_timeout_kill);
	ok = ok && CU_add_test(s, "attach_unsupported_native", test_attach_unsupported_native);
	/* terminals */
	ok = ok && CU_add_test(s, "tty_hello", test_tty_hello);
	ok = ok && CU_add_test(s, "tty_basics", test_tty_basics);
	ok = ok && CU_add_test(s, "tty_resize", test_tty_resize);
	ok = ok && CU_add_test(s, "tty_interrupt", test_tty_interrupt);
	ok = ok && CU_add_test(s, "tty_eof", test_tty_eof);
	ok = ok && CU_add_test(s, "tty_signal_timeout", test_tty_signal_timeout);
	ok = ok && CU_add_test(s, "tty_bad_input", test_tty_bad_input);
	ok = ok && CU_add_test(s, "tty_refused", test_tty_refused);
	if (have_agent) {
		ok = ok && CU_add_test(s, "tty_hello_agent", test_tty_hello_agent);
		ok = ok && CU_add_test(s, "tty_basics_agent", test_tty_basics_agent);
		ok = ok && CU_add_test(s, "tty_resize_agent", test_tty_resize_agent);
		ok = ok && CU_add_test(s, "tty_interrupt_agent", test_tty_interrupt_agent);
		ok = ok && CU_add_test(s, "tty_eof_agent", test_tty_eof_agent);
		ok =
		    ok && CU_add_test(s, "tty_signal_timeout_agent", test_tty_signal_timeout_agent);
		ok = ok && CU_add_test(s, "tty_bad_input_agent", test_tty_bad_input_agent);
	}
	ok = ok && CU_add_test(s, "search_unsupported_native", test_search_unsupported_native);
	ok = ok && CU_add_test(s, "spawn_channel_budget", test_spawn_channel_budget);
	ok = ok && CU_add_test(s, "chunk_latency", test_chunk_latency);
	ok = ok && CU_add_test(s, "no_lost_wakeups", test_no_lost_wakeups);
	ok = ok && CU_add_test(s, "unread_follower_native", test_unread_follower_native);
	if (have_agent) {
		ok = ok && CU_add_test(s, "unread_follower_agent", test_unread_follower_agent);
		ok = ok &&
		     CU_add_test(s, "agent_reattach_after_close", test_agent_reattach_after_close);
	}
	ok = ok && CU_add_test(s, "killed_session_native", test_killed_session_native);
	ok = ok && CU_add_test(s, "sftp_stopped", test_sftp_stopped);
	ok = ok && CU_add_test(s, "sftp_refused", test_sftp_refused);
	ok = ok && CU_add_test(s, "sftp_exits", test_sftp_exits);
	if (have_agent)
		ok = ok && CU_add_test(s, "killed_session_agent", test_killed_session_agent);
	/* these kill every session of the fixture's sshd (the shared backends' too) */
	ok = ok && CU_add_test(s, "killed_mid_stream_native", test_killed_mid_stream_native);
	if (have_agent)
		ok = ok && CU_add_test(s, "killed_mid_stream_agent", test_killed_mid_stream_agent);
#define LOST_ADD(name)                                                                             \
	ok = ok && CU_add_test(s, "lost_" #name "_native", test_lost_##name##_native) &&           \
	     (!have_agent || CU_add_test(s, "lost_" #name "_agent", test_lost_##name##_agent))
	LOST_ADD(spawn);
	LOST_ADD(tty);
	LOST_ADD(connect);
	LOST_ADD(watch);
	LOST_ADD(exec);
	LOST_ADD(wait);
#undef LOST_ADD

	/* last: restarts sshd with a new host key */
	ok = ok && CU_add_test(s, "hostkey_changed_refused", test_hostkey_changed_refused);
	if (!ok) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		return 2;
	}
	int rc = cu_run(argc, argv);
	ssh_backend_close(&agent);
	ssh_backend_close(&native);
	sshd_stop(&fx);
	return rc;
}
