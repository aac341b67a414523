/*
 * What a new user does with SSH, against the real sshd fixture: configs written for the
 * public ASP v0 draft (read, mapped onto the SSH transport, converted by asp init
 * --from-v0, and passing asp conformance), and "agent": "upload" from a build tree with
 * no ASP_AGENT_STATIC set.
 *
 *   test_ssh_cli PATH/TO/asp
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "asp_ssh.h"
#include "sshd_fixture.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static sshd_fixture fx;
static const char *asp_cli;
static char work[300];

static int slurp(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(out, 1, cap - 1, f);
	fclose(f);
	out[n] = '\0';
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
		out[--n] = '\0';
	return 0;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
}

/* A v0 file: `identity` and `host_key` are JSON members (or ""), written to `name`. */
static void v0_file(const char *name, const char *identity, const char *host_key, char *path,
                    size_t cap)
{
	char text[8192];
	snprintf(text, sizeof text,
	         "{\n  \"version\": \"0\",\n  \"transport\": \"ssh\",\n  \"connection\": {\n"
	         "    \"host\": \"127.0.0.1\", \"port\": %u, \"user\": \"%s\"%s%s%s%s\n  },\n"
	         "  \"workspace\": \"%s\"\n}\n",
	         fx.port, fx.user, *identity ? ", " : "", identity, *host_key ? ", " : "", host_key,
	         work);
	snprintf(path, cap, "%s/%s", work, name);
	put(path, text);
}

/* Opens `path` and runs `pwd` there: ASP_OK and the output, or the error. */
static asp_status exec_pwd(const char *path, char *out, size_t cap, asp_error *err)
{
	asp_client *c;
	asp_status st = asp_client_open_path(path, &c, err);
	if (st != ASP_OK)
		return st;
	asp_arena *a = asp_arena_new();
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "pwd";
	asp_exec_result r;
	st = asp_exec(c, &p, &r, a, err);
	if (st == ASP_OK)
		snprintf(out, cap, "%.*s", (int)r.stdout_data.len,
		         (const char *)r.stdout_data.data);
	asp_arena_free(a);
	asp_client_free(c);
	return st;
}

static char host_line[1024], client_key_text[8192];

/* Runs asp without ASP_AGENT_STATIC, so that upload finds the static agent itself. */
static int run_found_agent(const char *const argv[], char *out, size_t cap)
{
	char saved[600] = "";
	const char *env = getenv("ASP_AGENT_STATIC");
	if (env)
		snprintf(saved, sizeof saved, "%s", env);
	unsetenv("ASP_AGENT_STATIC");
	int rc = sshd_run(argv, out, cap);
	if (saved[0])
		setenv("ASP_AGENT_STATIC", saved, 1);
	return rc;
}

/* identity.env holding the key's text; host_key as the server's public key line. */
static void test_v0_key_in_env_and_key_line(void)
{
	char idj[128], hkj[1200], path[400], out[512];
	setenv("ASP_TEST_V0_KEY", client_key_text, 1);
	snprintf(idj, sizeof idj, "\"identity\": {\"env\": \"ASP_TEST_V0_KEY\"}");
	snprintf(hkj, sizeof hkj, "\"host_key\": \"%s\"", host_line);
	v0_file("a.json", idj, hkj, path, sizeof path);
	asp_error err;
	CU_ASSERT_EQUAL(exec_pwd(path, out, sizeof out, &err), ASP_OK);
	char want[400];
	snprintf(want, sizeof want, "%s\n", work);
	CU_ASSERT_STRING_EQUAL(out, want); /* workspace became cwd */
}

/* identity.env holding a path; host_key as a SHA256 fingerprint. */
static void test_v0_key_path_in_env_and_fingerprint(void)
{
	char idj[128], hkj[300], path[400], out[512];
	setenv("ASP_TEST_V0_KEY", fx.client_key, 1);
	snprintf(idj, sizeof idj, "\"identity\": {\"env\": \"ASP_TEST_V0_KEY\"}");
	snprintf(hkj, sizeof hkj, "\"host_key\": \"%s\"", fx.fingerprint);
	v0_file("b.json", idj, hkj, path, sizeof path);
	asp_error err;
	CU_ASSERT_EQUAL(exec_pwd(path, out, sizeof out, &err), ASP_OK);
}

/* A pinned key line that is not the server's: refused, naming host_key. */
static void test_v0_wrong_key_line(void)
{
	char idj[600], path[400], out[512];
	snprintf(idj, sizeof idj, "\"identity\": {\"file\": \"%s\"}", fx.client_key);
	v0_file("c.json", idj,
	        "\"host_key\": \"ssh-ed25519 "
	        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x\"",
	        path, sizeof path);
	asp_error err;
	CU_ASSERT_EQUAL(exec_pwd(path, out, sizeof out, &err), ASP_E_UNAUTHORIZED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "host_key"));
}

/* Without host_key: trust on first use, recorded in ~/.ssh/known_hosts. */
static void test_v0_no_host_key_accepts_new(void)
{
	char home[400], kh[450], idj[600], path[400], out[512];
	snprintf(home, sizeof home, "%s/home", work);
	mkdir(home, 0700);
	const char *old = getenv("HOME");
	char saved[400];
	snprintf(saved, sizeof saved, "%s", old ? old : "");
	setenv("HOME", home, 1);
	snprintf(idj, sizeof idj, "\"identity\": {\"file\": \"%s\"}", fx.client_key);
	v0_file("d.json", idj, "", path, sizeof path);
	asp_error err;
	CU_ASSERT_EQUAL(exec_pwd(path, out, sizeof out, &err), ASP_OK);
	snprintf(kh, sizeof kh, "%s/.ssh/known_hosts", home);
	struct stat st;
	CU_ASSERT_EQUAL(stat(kh, &st), 0);
	CU_ASSERT_TRUE(st.st_size > 0);
	CU_ASSERT_EQUAL(exec_pwd(path, out, sizeof out, &err), ASP_OK); /* now known */
	if (old)
		setenv("HOME", saved, 1);
	else
		unsetenv("HOME");
}

/* v0's user is optional: the local user logs in, and messages name that user. */
static void test_v0_no_user_named_in_messages(void)
{
	char home[400], path[400], out[512], hkj[300], want[300];
	snprintf(home, sizeof home, "%s/home-empty", work);
	mkdir(home, 0700);
	const char *old = getenv("HOME");
	char saved[400];
	snprintf(saved, sizeof saved, "%s", old ? old : "");
	setenv("HOME", home, 1); /* no default keys there: authentication fails */
	snprintf(hkj, sizeof hkj, "\"host_key\": \"%s\"", fx.fingerprint);
	char text[1024];
	snprintf(text, sizeof text,
	         "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": "
	         "{\"host\": \"127.0.0.1\", \"port\": %u, %s}}",
	         fx.port, hkj);
	snprintf(path, sizeof path, "%s/nouser.json", work);
	put(path, text);
	asp_error err;
	CU_ASSERT_EQUAL(exec_pwd(path, out, sizeof out, &err), ASP_E_UNAUTHORIZED);
	const struct passwd *pw = getpwuid(getuid());
	CU_ASSERT_PTR_NOT_NULL_FATAL(pw);
	snprintf(want, sizeof want, "ssh %s@127.0.0.1:%u: ", pw->pw_name, fx.port);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, want));
	if (!strstr(err.message, want))
		fprintf(stderr, "want '%s' in: %s\n", want, err.message);
	if (old)
		setenv("HOME", saved, 1);
	else
		unsetenv("HOME");
}

/* asp conformance with a v0 file, then asp init --from-v0 and the v1 file it wrote. */
static void test_v0_cli_conformance_and_convert(void)
{
	static char out[256 * 1024];
	char idj[600], hkj[300], path[400], v1[400];
	snprintf(idj, sizeof idj, "\"identity\": {\"file\": \"%s\"}", fx.client_key);
	snprintf(hkj, sizeof hkj, "\"host_key\": \"%s\"", fx.fingerprint);
	v0_file("e.json", idj, hkj, path, sizeof path);
	const char *conf[] = {asp_cli, "--config", path, "conformance", NULL};
	int rc = sshd_run(conf, out, sizeof out);
	CU_ASSERT_EQUAL(rc, 0);
	if (rc != 0) { /* the failing rows and the summary, not the whole table */
		fprintf(stderr, "asp conformance with a v0 file (exit %d):\n", rc);
		for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
			if (!strstr(line, "PASS") && !strstr(line, "n/a"))
				fprintf(stderr, "%s\n", line);
	}
	snprintf(v1, sizeof v1, "%s/v1.json", work);
	const char *init[] = {asp_cli, "--config", v1, "init", "--from-v0", path, NULL};
	CU_ASSERT_EQUAL(sshd_run(init, out, sizeof out), 0);
	char text[4096];
	CU_ASSERT_EQUAL_FATAL(slurp(v1, text, sizeof text), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"version\": 1"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"host_key_sha256\""));
	asp_error err;
	CU_ASSERT_EQUAL(exec_pwd(v1, out, sizeof out, &err), ASP_OK);
}

/* "agent": "upload" finds asp-agent-static in asp's build tree without ASP_AGENT_STATIC. */
static void test_upload_from_build_tree(void)
{
	char cfg[4096], path[400], out[4096];
	char bin_dir[400];
	snprintf(bin_dir, sizeof bin_dir, "%s", asp_cli);
	char *slash = strrchr(bin_dir, '/');
	CU_ASSERT_PTR_NOT_NULL_FATAL(slash);
	*slash = '\0';
	char static_agent[500];
	snprintf(static_agent, sizeof static_agent, "%s/../sandbox-agent/asp-agent-static",
	         bin_dir);
	if (access(static_agent, R_OK) != 0) {
		fprintf(stderr, "test_ssh_cli: no %s (built without musl-tools?)\n", static_agent);
		CU_FAIL("asp-agent-static is not in the build tree");
		return;
	}
	sshd_config_json(&fx, "upload", NULL, cfg, sizeof cfg);
	snprintf(path, sizeof path, "%s/upload.json", work);
	put(path, cfg);
	const char *argv[] = {asp_cli, "--config", path, "exec", "--", "echo", "uploaded", NULL};
	int rc = run_found_agent(argv, out, sizeof out);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "uploaded"));
	if (rc != 0)
		fprintf(stderr, "asp exec with agent upload:\n%s\n", out);
}

static int copy_file(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
	char buf[65536];
	size_t n;
	int rc = in && out ? 0 : -1;
	while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			rc = -1;
	if (in && ferror(in))
		rc = -1;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		rc = -1;
	return rc == 0 ? chmod(to, 0755) : -1;
}

/*
 * "agent": "upload" from an installed layout: asp and asp-agent-static side by side in a
 * bin/ with no build tree above it (meson install puts both in <prefix>/bin).
 */
static void test_upload_beside_asp(void)
{
	char bin[400], asp_copy[450], agent_copy[450], static_agent[500], cfg[4096], path[400];
	static char out[8192];
	snprintf(static_agent, sizeof static_agent, "%s", asp_cli);
	char *slash = strrchr(static_agent, '/');
	CU_ASSERT_PTR_NOT_NULL_FATAL(slash);
	snprintf(slash, sizeof static_agent - (size_t)(slash - static_agent),
	         "/../sandbox-agent/asp-agent-static");
	snprintf(bin, sizeof bin, "%s/installed/bin", work);
	snprintf(asp_copy, sizeof asp_copy, "%s/asp", bin);
	snprintf(agent_copy, sizeof agent_copy, "%s/asp-agent-static", bin);
	char parent[400];
	snprintf(parent, sizeof parent, "%s/installed", work);
	mkdir(parent, 0755);
	mkdir(bin, 0755);
	CU_ASSERT_EQUAL_FATAL(access(bin, W_OK), 0);
	CU_ASSERT_EQUAL_FATAL(copy_file(asp_cli, asp_copy), 0);
	CU_ASSERT_EQUAL_FATAL(copy_file(static_agent, agent_copy), 0);
	sshd_config_json(&fx, "upload", NULL, cfg, sizeof cfg);
	snprintf(path, sizeof path, "%s/upload-beside.json", work);
	put(path, cfg);
	const char *argv[] = {asp_copy, "--config", path, "exec", "--", "echo", "beside", NULL};
	int rc = run_found_agent(argv, out, sizeof out);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "beside"));
	if (rc != 0)
		fprintf(stderr, "installed asp exec with agent upload:\n%s\n", out);
	/* without the copy beside it there is nothing to upload, and the message says where
	 * it looked, beside asp first */
	CU_ASSERT_EQUAL(unlink(agent_copy), 0);
	const char *json_argv[] = {asp_copy, "--json", "--config", path, "exec",
	                           "--",     "echo",   "beside",   NULL}; /* the error on stdout */
	rc = run_found_agent(json_argv, out, sizeof out);
	CU_ASSERT_NOT_EQUAL(rc, 0);
	char want[500];
	snprintf(want, sizeof want, "tried %s,", agent_copy);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	if (!strstr(out, want))
		fprintf(stderr, "without asp-agent-static beside asp:\n%s\n", out);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		fprintf(stderr, "usage: test_ssh_cli PATH/TO/asp\n");
		return 2;
	}
	asp_cli = argv[1];
	if (sshd_start(&fx) < 0) {
		fprintf(stderr, "test_ssh_cli: %s\n", fx.why);
		sshd_stop(&fx);
		return 1;
	}
	snprintf(work, sizeof work, "%s/cli", fx.dir);
	mkdir(work, 0700);
	char pub[400];
	snprintf(pub, sizeof pub, "%s.pub", fx.host_key);
	if (slurp(pub, host_line, sizeof host_line) < 0 ||
	    slurp(fx.client_key, client_key_text, sizeof client_key_text) < 0) {
		fprintf(stderr, "test_ssh_cli: cannot read the fixture's keys\n");
		sshd_stop(&fx);
		return 1;
	}
	asp_transport_register(&asp_transport_ssh, NULL);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s = CU_add_suite("ssh cli", NULL, NULL);
	CU_add_test(s, "v0: key text in identity.env, host_key as a key line",
	            test_v0_key_in_env_and_key_line);
	CU_add_test(s, "v0: key path in identity.env, host_key as a fingerprint",
	            test_v0_key_path_in_env_and_fingerprint);
	CU_add_test(s, "v0: a host_key line that is not the server's is refused",
	            test_v0_wrong_key_line);
	CU_add_test(s, "v0: no host_key trusts on first use", test_v0_no_host_key_accepts_new);
	CU_add_test(s, "v0: without user, messages name the local user",
	            test_v0_no_user_named_in_messages);
	CU_add_test(s, "v0: asp conformance passes, asp init --from-v0 converts",
	            test_v0_cli_conformance_and_convert);
	CU_add_test(s, "agent upload from the build tree", test_upload_from_build_tree);
	CU_add_test(s, "agent upload beside an installed asp", test_upload_beside_asp);
	/* every test, or the suites and tests named after argv[1] */
	unsigned failed = (unsigned)cu_run(argc - 1, argv + 1);
	sshd_stop(&fx);
	return failed ? 1 : 0;
}
