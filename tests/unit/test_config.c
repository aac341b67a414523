/*
 * .asp.json: discovery, strict validation (exact messages with line:col and key path),
 * defaults, path resolution and secrets. Each test gets a fresh scratch directory, a
 * $HOME inside it and no $ASP_CONFIG; the working directory is restored after it.
 */
#include "cu_run.h"
#include "asp/config.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[PATH_MAX]; /* physical path, so it compares equal to getcwd() results */
static char saved_cwd[PATH_MAX];
static char *saved_home;

/* ---- fixtures ----------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void setup(void)
{
	char tmpl[] = "/tmp/asp-config-XXXXXX";
	if (!mkdtemp(tmpl) || !realpath(tmpl, scratch) || !getcwd(saved_cwd, sizeof saved_cwd))
		abort();
	const char *home = getenv("HOME");
	saved_home = home ? strdup(home) : NULL;
	char h[PATH_MAX + 8];
	snprintf(h, sizeof h, "%s/home", scratch);
	mkdir(h, 0755);
	setenv("HOME", h, 1);
	unsetenv("ASP_CONFIG");
	unsetenv("ASP_TEST_SECRET");
}

static void teardown(void)
{
	if (chdir(saved_cwd) != 0)
		abort();
	nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (saved_home)
		setenv("HOME", saved_home, 1);
	else
		unsetenv("HOME");
	free(saved_home);
	unsetenv("ASP_CONFIG");
	unsetenv("ASP_TEST_SECRET");
}

/* scratch + "/" + rel, in a rotating buffer so a few can be alive at once. */
static const char *at(const char *rel)
{
	static char bufs[4][PATH_MAX + 64];
	static int next;
	char *b = bufs[next++ % 4];
	snprintf(b, sizeof bufs[0], "%s%s%s", scratch, *rel ? "/" : "", rel);
	return b;
}

static void mkdirs(const char *rel)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s", at(rel));
	for (char *s = p + strlen(scratch) + 1; *s; s++) {
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
	}
	mkdir(p, 0755);
}

static void write_bytes(const char *rel, const char *data, size_t len)
{
	FILE *f = fopen(at(rel), "wb");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	CU_ASSERT_EQUAL(fwrite(data, 1, len, f), len);
	fclose(f);
}

/* Test documents are written with ' for " so they stay readable here. */
static char *dq(const char *doc)
{
	char *s = strdup(doc);
	for (char *p = s; *p; p++) {
		if (*p == '\'')
			*p = '"';
	}
	return s;
}

static void write_doc(const char *rel, const char *doc)
{
	char *s = dq(doc);
	write_bytes(rel, s, strlen(s));
	free(s);
}

static asp_status parse_len(const char *text, size_t len, asp_config **cfg, asp_error *err)
{
	asp_error_clear(err);
	return asp_config_parse(text, len, "/w/.asp.json", cfg, err);
}

/* Parses `doc` as /w/.asp.json and requires invalid_argument with exactly `msg`. */
static void expect_invalid_at(const char *doc, const char *msg, unsigned line)
{
	char *text = dq(doc);
	asp_config *cfg = NULL;
	asp_error err;
	asp_status st = parse_len(text, strlen(text), &cfg, &err);
	CU_assertImplementation(st == ASP_E_INVALID_ARGUMENT, line, "status is invalid_argument",
	                        __FILE__, "", CU_FALSE);
	CU_assertImplementation(cfg == NULL, line, "no config on error", __FILE__, "", CU_FALSE);
	bool same = strcmp(err.message, msg) == 0;
	if (!same)
		fprintf(stderr, "\n  line %u\n  got:  %s\n  want: %s\n", line, err.message, msg);
	CU_assertImplementation(same, line, "exact message", __FILE__, "", CU_FALSE);
	CU_assertImplementation(strcmp(err.path, "/w/.asp.json") == 0, line, "err.path is the file",
	                        __FILE__, "", CU_FALSE);
	asp_config_free(cfg);
	free(text);
}
#define expect_invalid(doc, msg) expect_invalid_at(doc, msg, __LINE__)

/* As expect_invalid, for messages (jansson's wording) checked by prefix and a substring. */
static void expect_syntax_at(const char *text, size_t len, const char *prefix, const char *part,
                             unsigned line)
{
	asp_config *cfg = NULL;
	asp_error err;
	asp_status st = parse_len(text, len, &cfg, &err);
	CU_assertImplementation(st == ASP_E_INVALID_ARGUMENT, line, "status is invalid_argument",
	                        __FILE__, "", CU_FALSE);
	bool ok = strncmp(err.message, prefix, strlen(prefix)) == 0 &&
	          (!part || strstr(err.message, part));
	if (!ok)
		fprintf(stderr, "\n  line %u\n  got:  %s\n  want: %s...%s\n", line, err.message,
		        prefix, part ? part : "");
	CU_assertImplementation(ok, line, "message", __FILE__, "", CU_FALSE);
	asp_config_free(cfg);
}
#define expect_syntax(text, prefix, part)                                                          \
	expect_syntax_at(text, strlen(text), prefix, part, __LINE__)

static asp_config *parse_ok_at(const char *doc, unsigned line)
{
	char *text = dq(doc);
	asp_config *cfg = NULL;
	asp_error err;
	asp_status st = parse_len(text, strlen(text), &cfg, &err);
	if (st != ASP_OK)
		fprintf(stderr, "\n  line %u: %s\n", line, err.message);
	CU_assertImplementation(st == ASP_OK && cfg, line, "parses", __FILE__, "", CU_TRUE);
	free(text);
	return cfg;
}
#define parse_ok(doc) parse_ok_at(doc, __LINE__)

/* ---- discovery ---------------------------------------------------------------------------- */

static const char *const MINIMAL =
    "{'version': 1, 'transport': 'stdio', 'stdio': {'command': ['a']}}";

static void test_find_asp_config_env(void)
{
	char out[PATH_MAX];
	asp_error err;
	mkdirs("elsewhere");
	write_doc("elsewhere/my.json", MINIMAL);
	write_doc(".asp.json", MINIMAL); /* must not win over $ASP_CONFIG */
	CU_ASSERT_EQUAL_FATAL(chdir(scratch), 0);
	setenv("ASP_CONFIG", at("elsewhere/my.json"), 1);
	CU_ASSERT_EQUAL(asp_config_find(NULL, out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at("elsewhere/my.json"));
	/* A relative $ASP_CONFIG comes back absolute. */
	setenv("ASP_CONFIG", "elsewhere/my.json", 1);
	CU_ASSERT_EQUAL(asp_config_find(at("elsewhere"), out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at("elsewhere/my.json"));
	/* An empty $ASP_CONFIG counts as unset. */
	setenv("ASP_CONFIG", "", 1);
	CU_ASSERT_EQUAL(asp_config_find(NULL, out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at(".asp.json"));
}

static void test_find_asp_config_missing(void)
{
	char out[PATH_MAX], want[PATH_MAX * 2];
	asp_error err;
	write_doc(".asp.json", MINIMAL); /* no fallback to discovery */
	CU_ASSERT_EQUAL_FATAL(chdir(scratch), 0);
	setenv("ASP_CONFIG", at("nope.json"), 1);
	CU_ASSERT_EQUAL(asp_config_find(NULL, out, sizeof out, &err), ASP_E_NOT_FOUND);
	snprintf(want, sizeof want,
	         "ASP_CONFIG names %s, which does not exist; point it at a .asp.json or unset it",
	         at("nope.json"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	CU_ASSERT_STRING_EQUAL(err.path, at("nope.json"));
	/* asp_config_load(NULL) reports the same. */
	asp_config *cfg = (asp_config *)&err;
	CU_ASSERT_EQUAL(asp_config_load(NULL, &cfg, &err), ASP_E_NOT_FOUND);
	CU_ASSERT_PTR_NULL(cfg);
	CU_ASSERT_STRING_EQUAL(err.message, want);
	/* A directory is not a config. */
	setenv("ASP_CONFIG", scratch, 1);
	CU_ASSERT_EQUAL(asp_config_find(NULL, out, sizeof out, &err), ASP_E_IS_A_DIRECTORY);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "a directory"));
}

static void test_find_in_cwd(void)
{
	char out[PATH_MAX];
	asp_error err;
	write_doc(".asp.json", MINIMAL);
	CU_ASSERT_EQUAL_FATAL(chdir(scratch), 0);
	CU_ASSERT_EQUAL(asp_config_find(NULL, out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at(".asp.json"));
	/* load(NULL) discovers too, and the view names the file. */
	asp_config *cfg = NULL;
	CU_ASSERT_EQUAL_FATAL(asp_config_load(NULL, &cfg, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->path, at(".asp.json"));
	CU_ASSERT_EQUAL(asp_config_get(cfg)->transport, ASP_TRANSPORT_STDIO);
	asp_config_free(cfg);
	/* Too small a buffer is an error, not a truncated path. */
	CU_ASSERT_EQUAL(asp_config_find(NULL, out, 8, &err), ASP_E_TOO_LARGE);
}

static void test_find_two_levels_up(void)
{
	char out[PATH_MAX];
	asp_error err;
	mkdirs("a/b");
	write_doc(".asp.json", MINIMAL);
	CU_ASSERT_EQUAL(asp_config_find(at("a/b"), out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at(".asp.json"));
	/* Trailing slashes and a relative start directory work the same. */
	CU_ASSERT_EQUAL_FATAL(chdir(scratch), 0);
	CU_ASSERT_EQUAL(asp_config_find("a/b/", out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at(".asp.json"));
	/* The nearest one wins; a directory named .asp.json is passed over. */
	mkdirs("a/b/.asp.json");
	write_doc("a/.asp.json", MINIMAL);
	CU_ASSERT_EQUAL(asp_config_find(at("a/b"), out, sizeof out, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(out, at("a/.asp.json"));
}

static void test_find_none(void)
{
	char out[PATH_MAX], want[PATH_MAX * 2];
	asp_error err;
	struct stat sb;
	/* Only meaningful when no ancestor of the scratch directory has one. */
	if (stat("/tmp/.asp.json", &sb) == 0 || stat("/.asp.json", &sb) == 0)
		CU_FAIL("a stray /.asp.json or /tmp/.asp.json exists on this machine");
	mkdirs("a/b");
	CU_ASSERT_EQUAL(asp_config_find(at("a/b"), out, sizeof out, &err), ASP_E_NOT_FOUND);
	snprintf(want, sizeof want,
	         "no .asp.json in %s or any parent directory; create one with `asp init`, or set "
	         "ASP_CONFIG to its path",
	         at("a/b"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
}

/* ---- validation: exact messages --------------------------------------------------------- */

static void test_syntax_errors(void)
{
	expect_syntax("{\n  \"version\": 1,\n}", "/w/.asp.json:3:1: invalid JSON: ", NULL);
	expect_syntax("", "/w/.asp.json:1:1: invalid JSON: ", NULL);
	expect_syntax("{\"version\": 1, \"version\": 1}",
	              "/w/.asp.json:1:", ": invalid JSON: duplicate object key");
	expect_syntax("{\"cwd\": \"a\\u0000b\"}",
	              "/w/.asp.json:1:", ": invalid JSON: strings may not contain \\u0000");
	expect_syntax("{\"cw\\u0000d\": \"a\"}",
	              "/w/.asp.json:1:", ": invalid JSON: keys may not contain \\u0000");
	expect_syntax("{\"cwd\": \"\xff\"}", "/w/.asp.json:1:", "invalid JSON: unable to decode");
	expect_syntax("{\"timeout_ms\": 99999999999999999999}",
	              "/w/.asp.json:1:", "invalid JSON: too big integer");
	expect_syntax("{\"timeout_ms\": 1e400}", "/w/.asp.json:1:", "invalid JSON: ");
	expect_syntax("{} {}", "/w/.asp.json:1:", "invalid JSON: end of file expected");
	/* A raw NUL byte inside the text. */
	static const char nul[] = "{\"version\": 1,\0 \"transport\": \"ssh\"}";
	expect_syntax_at(nul, sizeof nul - 1, "/w/.asp.json:1:", "invalid JSON: ", __LINE__);
	/* Nesting deeper than jansson's limit fails cleanly. */
	size_t deep = 200000;
	char *d = malloc(deep);
	memset(d, '[', deep);
	expect_syntax_at(d, deep, "/w/.asp.json:1:", "invalid JSON: ", __LINE__);
	free(d);
}

static void test_root_errors(void)
{
	expect_invalid("[1]", "/w/.asp.json:1:1: expected an object, got an array");
	expect_invalid("  {'transport': 'stdio', 'stdio': {'command': ['a']}}",
	               "/w/.asp.json:1:3: version: required key missing");
	expect_invalid("{'version': 1}", "/w/.asp.json:1:1: transport: required key missing");
	expect_invalid(
	    "{\n  'version': 2,\n  'transport': 'stdio',\n  'stdio': {'command': ['a']}\n}",
	    "/w/.asp.json:2:14: version: expected 1, got 2");
	expect_invalid("{\n  'version': '1',\n  'transport': 'stdio'\n}",
	               "/w/.asp.json:2:14: version: expected 1, got \"1\"");
	expect_invalid("{\n  'version': 1.0,\n  'transport': 'stdio'\n}",
	               "/w/.asp.json:2:14: version: expected 1, got 1.0");
	expect_invalid(
	    "{\n  'version': 1,\n  'transport': 'ftp'\n}",
	    "/w/.asp.json:3:16: transport: expected one of \"ssh\", \"stdio\", \"http\", "
	    "got \"ftp\"");
	expect_invalid(
	    "{\n  'version': 1,\n  'transport': 'stdio',\n  'stdio': {'command': ['a']},\n"
	    "  'transprt': 'ssh'\n}",
	    "/w/.asp.json:5:3: transprt: unknown key (expected one of: version, "
	    "transport, cwd, env, workspace, timeout_ms, call_timeout_ms, ssh, stdio, http)");
}

/* A valid stdio config with `line` as its fifth line, starting at column 3. */
#define ROOT(line)                                                                                 \
	"{\n  'version': 1,\n  'transport': 'stdio',\n  'stdio': {'command': ['a']},\n  " line "\n}"

static void test_top_level_fields(void)
{
	expect_invalid(ROOT("'cwd': 5"),
	               "/w/.asp.json:5:10: cwd: expected a non-empty string, got 5");
	expect_invalid(ROOT("'cwd': ''"),
	               "/w/.asp.json:5:10: cwd: expected a non-empty string, got \"\"");
	expect_invalid(ROOT("'env': []"), "/w/.asp.json:5:10: env: expected an object, got []");
	expect_invalid(ROOT("'env': {'A': 1}"),
	               "/w/.asp.json:5:16: env.A: expected a string, got 1");
	expect_invalid(
	    ROOT("'env': {'A=B': 'x'}"),
	    "/w/.asp.json:5:11: env[\"A=B\"]: invalid key: expected a string matching ^[^=]+$");
	expect_invalid(
	    ROOT("'env': {'': 'x'}"),
	    "/w/.asp.json:5:11: env[\"\"]: invalid key: expected a string matching ^[^=]+$");
	expect_invalid(ROOT("'timeout_ms': -1"),
	               "/w/.asp.json:5:17: timeout_ms: expected an integer >= 0, got -1");
	expect_invalid(ROOT("'timeout_ms': 1.5"),
	               "/w/.asp.json:5:17: timeout_ms: expected an integer >= 0, got 1.5");
	expect_invalid(ROOT("'timeout_ms': '5'"),
	               "/w/.asp.json:5:17: timeout_ms: expected an integer >= 0, got \"5\"");
	expect_invalid(ROOT("'ssh': 5"), "/w/.asp.json:5:10: ssh: expected an object, got 5");
	expect_invalid(ROOT("'http': null"),
	               "/w/.asp.json:5:11: http: expected an object, got null");
}

/* A valid ssh config with `line` as its sixth line (inside "ssh"), starting at column 5. */
#define SSH(line)                                                                                  \
	"{\n  'version': 1,\n  'transport': 'ssh',\n  'ssh': {\n    'host': 'h',\n    " line       \
	"\n  }\n}"

static void test_ssh_fields(void)
{
	expect_invalid(
	    SSH("'port': '22'"),
	    "/w/.asp.json:6:13: ssh.port: expected an integer from 1 to 65535, got \"22\"");
	expect_invalid(SSH("'port': 0"),
	               "/w/.asp.json:6:13: ssh.port: expected an integer from 1 to 65535, got 0");
	expect_invalid(
	    SSH("'port': 65536"),
	    "/w/.asp.json:6:13: ssh.port: expected an integer from 1 to 65535, got 65536");
	expect_invalid(SSH("'user': ''"),
	               "/w/.asp.json:6:13: ssh.user: expected a non-empty string, got \"\"");
	expect_invalid(SSH("'known_hosts': 5"),
	               "/w/.asp.json:6:20: ssh.known_hosts: expected a non-empty string, got 5");
	expect_invalid(SSH("'host_key_sha256': 'SHA256:abc'"),
	               "/w/.asp.json:6:24: ssh.host_key_sha256: expected a string matching "
	               "^SHA256:[A-Za-z0-9+/]{43}=?$, got \"SHA256:abc\"");
	expect_invalid(
	    SSH("'host_key_sha256': 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'"),
	    "/w/.asp.json:6:24: ssh.host_key_sha256: expected a string matching "
	    "^SHA256:[A-Za-z0-9+/]{43}=?$, got "
	    "\"SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA...\"");
	expect_invalid(
	    SSH("'strict_host_key_checking': 'yes'"),
	    "/w/.asp.json:6:33: ssh.strict_host_key_checking: expected one of true, false, "
	    "\"accept-new\", got \"yes\"");
	expect_invalid(SSH("'connect_timeout_ms': 0"),
	               "/w/.asp.json:6:27: ssh.connect_timeout_ms: expected an integer from 1 to "
	               "2147483647, got 0");
	expect_invalid(SSH("'agent': 5"),
	               "/w/.asp.json:6:14: ssh.agent: expected null or a non-empty string, got 5");
	expect_invalid(
	    SSH("'agent': ''"),
	    "/w/.asp.json:6:14: ssh.agent: expected null or a non-empty string, got \"\"");
	expect_invalid(
	    SSH("'hostname': 'x'"),
	    "/w/.asp.json:6:5: ssh.hostname: unknown key (expected one of: host, port, user, "
	    "identity_file, identity_env, password_env, known_hosts, host_key_sha256, "
	    "host_key, strict_host_key_checking, connect_timeout_ms, agent, proxy_command, jump, "
	    "config_host, config_file)");
	expect_invalid(
	    "{\n  'version': 1,\n  'transport': 'ssh',\n  'ssh': {\n    'port': 22\n  }\n}",
	    "/w/.asp.json:4:10: ssh.host: required key missing when config_host is absent");
	expect_invalid("{'version': 1, 'transport': 'ssh'}",
	               "/w/.asp.json:1:1: ssh: required key missing when transport is \"ssh\"");
	/* The fingerprint pattern accepts both forms ssh-keygen prints. */
	asp_config_free(parse_ok(
	    SSH("'host_key_sha256': 'SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8'")));
	asp_config_free(parse_ok(
	    SSH("'host_key_sha256': 'SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8='")));
}

/* A stdio config with `line` as its fifth line (inside "stdio"), starting at column 5. */
#define STDIO(line)                                                                                \
	"{\n  'version': 1,\n  'transport': 'stdio',\n  'stdio': {\n    " line "\n  }\n}"

static void test_stdio_fields(void)
{
	expect_invalid(
	    STDIO("'command': []"),
	    "/w/.asp.json:5:16: stdio.command: expected a non-empty array of strings, got []");
	expect_invalid(
	    STDIO("'command': 'asp-agent --stdio'"),
	    "/w/.asp.json:5:16: stdio.command: expected a non-empty array of strings, got "
	    "\"asp-agent --stdio\"");
	expect_invalid(
	    STDIO("'command': ['']"),
	    "/w/.asp.json:5:17: stdio.command[0]: expected a non-empty string, got \"\"");
	expect_invalid(STDIO("'command': ['a', 5]"),
	               "/w/.asp.json:5:22: stdio.command[1]: expected a string, got 5");
	expect_invalid(STDIO("'comand': ['a']"),
	               "/w/.asp.json:5:5: stdio.comand: unknown key (expected one of: command)");
	expect_invalid("{'version': 1, 'transport': 'stdio', 'stdio': {}}",
	               "/w/.asp.json:1:47: stdio.command: required key missing when transport is "
	               "\"stdio\"");
	/* An empty argument after the program is fine. */
	asp_config_free(parse_ok(STDIO("'command': ['sh', '-c', '']")));
}

/* An http config with `line` as its sixth line (inside "http"), starting at column 5. */
#define HTTP(line)                                                                                 \
	"{\n  'version': 1,\n  'transport': 'http',\n  'http': {\n    'url': "                     \
	"'http://127.0.0.1:8722',\n    " line "\n  }\n}"

static void test_http_fields(void)
{
	expect_invalid(HTTP("'websocket': 'yes'"),
	               "/w/.asp.json:6:18: http.websocket: expected true or false, got \"yes\"");
	expect_invalid(HTTP("'token_env': ''"),
	               "/w/.asp.json:6:18: http.token_env: expected a non-empty string, got \"\"");
	expect_invalid(HTTP("'tokenfile': 'x'"),
	               "/w/.asp.json:6:5: http.tokenfile: unknown key (expected one of: url, "
	               "token_env, token_file, ca_file, websocket, headers)");
	expect_invalid(
	    "{\n  'version': 1,\n  'transport': 'http',\n  'http': {\n    'url': 'ftp://x'\n  }\n}",
	    "/w/.asp.json:5:12: http.url: expected a string matching ^https?://[^ ]+$, got "
	    "\"ftp://x\"");
	expect_invalid(
	    "{'version': 1, 'transport': 'http', 'http': {'websocket': true}}",
	    "/w/.asp.json:1:45: http.url: required key missing when transport is \"http\"");
}

/* ---- gateways: proxy_command, jump, config_host, http.headers ------------------------------ */

/* What http.headers' names must be, as the schema's title says it. */
#define HEADER_NAME                                                                                \
	"an HTTP header name (letters, digits and !#$%&'*+-.^_`|~) that the transport does not "   \
	"set itself (not Authorization, Host, Connection, Proxy-Connection, Keep-Alive, "          \
	"Upgrade, TE, Trailer, Transfer-Encoding, Content-Length, Content-Type or "                \
	"Sec-WebSocket-*)"

static void test_gateway_fields(void)
{
	expect_invalid(
	    SSH("'proxy_command': []"),
	    "/w/.asp.json:6:22: ssh.proxy_command: expected a non-empty array of strings, got []");
	expect_invalid(SSH("'proxy_command': ['ssh', '-W', '%h:%x']"),
	               "/w/.asp.json:6:36: ssh.proxy_command[2]: expected a string whose only % "
	               "escapes are %h, %p, %r, %n and %%, got \"%h:%x\"");
	expect_invalid(SSH("'proxy_command': ['nc', '%']"),
	               "/w/.asp.json:6:29: ssh.proxy_command[1]: expected a string whose only % "
	               "escapes are %h, %p, %r, %n and %%, got \"%\"");
	expect_invalid(SSH("'jump': []"),
	               "/w/.asp.json:6:13: ssh.jump: expected a non-empty array, got []");
	expect_invalid(SSH("'jump': ['a@b@c']"),
	               "/w/.asp.json:6:14: ssh.jump[0]: expected a jump host: "
	               "\"[user@]host[:port]\" (host may name a Host of the SSH config file) or an "
	               "object with host and the other connection keys, got \"a@b@c\"");
	expect_invalid(SSH("'jump': ['bastion:99999']"),
	               "/w/.asp.json:6:14: ssh.jump[0]: the port is not a number from 1 to 65535 "
	               "in \"bastion:99999\"");
	expect_invalid(SSH("'jump': [{'port': 22}]"),
	               "/w/.asp.json:6:14: ssh.jump[0].host: required key missing");
	expect_invalid(SSH("'jump': [{'host': 'b', 'agent': '/x'}]"),
	               "/w/.asp.json:6:28: ssh.jump[0].agent: unknown key (expected one of: host, "
	               "port, user, identity_file, identity_env, password_env, known_hosts, "
	               "host_key_sha256, host_key, strict_host_key_checking, connect_timeout_ms)");
	expect_invalid(
	    SSH("'jump': [{'host': 'b', 'port': 0}]"),
	    "/w/.asp.json:6:36: ssh.jump[0].port: expected an integer from 1 to 65535, got 0");
	expect_invalid(SSH("'config_host': ''"),
	               "/w/.asp.json:6:20: ssh.config_host: expected a non-empty string, got \"\"");
	expect_invalid(
	    "{'version': 1, 'transport': 'ssh', 'ssh': {'config_file': 'c'}}",
	    "/w/.asp.json:1:43: ssh.host: required key missing when config_host is absent");
	expect_invalid(
	    HTTP("'headers': {'Authorization': 'x'}"),
	    "/w/.asp.json:6:17: http.headers.Authorization: invalid key: expected " HEADER_NAME "");
	expect_invalid(HTTP("'headers': {'sec-websocket-protocol': 'x'}"),
	               "/w/.asp.json:6:17: http.headers.sec-websocket-protocol: invalid key: "
	               "expected " HEADER_NAME "");
	expect_invalid(
	    HTTP("'headers': {'X Token': 'x'}"),
	    "/w/.asp.json:6:17: http.headers[\"X Token\"]: invalid key: expected " HEADER_NAME "");
	expect_invalid(HTTP("'headers': {'X-Token': 'a\\r\\nHost: evil'}"),
	               "/w/.asp.json:6:28: http.headers.X-Token: expected a header value (text "
	               "without control characters) or {\"env\": NAME}, got \"a\\r\\nHost: evil\"");
	expect_invalid(
	    HTTP("'headers': {'X-Token': {'file': 'x'}}"),
	    "/w/.asp.json:6:29: http.headers.X-Token.file: unknown key (expected one of: env)");
	expect_invalid(HTTP("'headers': {'X-Token': {}}"),
	               "/w/.asp.json:6:28: http.headers.X-Token.env: required key missing");
	expect_invalid(HTTP("'headers': {'X-Token': 5}"),
	               "/w/.asp.json:6:28: http.headers.X-Token: expected a header value (text "
	               "without control characters) or {\"env\": NAME}, got 5");
	/* What each accepts. */
	asp_config_free(parse_ok(SSH("'proxy_command': ['sh', '-c', 'nc %h %p # 100%% %r %n']")));
	asp_config_free(parse_ok(SSH("'jump': ['u@[::1]:2222', 'b', {'host': 'c'}]")));
	asp_config_free(
	    parse_ok("{'version': 1, 'transport': 'ssh', 'ssh': {'config_host': 'c'}}"));
	asp_config_free(parse_ok(HTTP("'headers': {'X-Gateway-Token': {'env': 'T'}, "
	                              "'Proxy-Authorization': 'Bearer x', 'Hostname': ''}")));
}

static void test_gateway_view(void)
{
	asp_config *cfg = parse_ok(
	    "{'version': 1, 'transport': 'ssh', 'ssh': {'host': 't', 'identity_file': 'k', "
	    "'connect_timeout_ms': 700, 'strict_host_key_checking': 'accept-new', "
	    "'proxy_command': ['ssh', '-W', '%h:%p', 'gw'], 'config_host': 'alias', "
	    "'config_file': 'sshconf', "
	    "'jump': ['ops@bastion:2200', '[fe80::1]', {'host': 'inner', 'user': 'u', 'port': 22, "
	    "'known_hosts': 'kh2', 'strict_host_key_checking': false}]}, "
	    "'http': {'url': 'http://x', 'headers': {'X-A': 'one', 'X-B': {'env': 'B_TOKEN'}}}}");
	const asp_config_view *v = asp_config_get(cfg);
	CU_ASSERT_EQUAL_FATAL(v->ssh.proxy_command_argc, 4);
	CU_ASSERT_STRING_EQUAL(v->ssh.proxy_command[2], "%h:%p"); /* expanded when connecting */
	CU_ASSERT_PTR_NULL(v->ssh.proxy_command[4]);
	CU_ASSERT_STRING_EQUAL(v->ssh.config_host, "alias");
	CU_ASSERT_STRING_EQUAL(v->ssh.config_file, "/w/sshconf");
	CU_ASSERT_EQUAL_FATAL(v->ssh.jump_count, 3);
	const asp_config_ssh *j = v->ssh.jump;
	CU_ASSERT_STRING_EQUAL(j[0].config_host, "bastion");
	CU_ASSERT_PTR_NULL(j[0].host);
	CU_ASSERT_STRING_EQUAL(j[0].user, "ops");
	CU_ASSERT_EQUAL(j[0].port, 2200);
	CU_ASSERT_STRING_EQUAL(j[0].identity_file, "/w/k"); /* inherited */
	CU_ASSERT_EQUAL(j[0].connect_timeout_ms, 700);
	CU_ASSERT_EQUAL(j[0].strict_host_key_checking, ASP_HOSTKEY_ACCEPT_NEW);
	CU_ASSERT_STRING_EQUAL(j[1].config_host, "fe80::1");
	CU_ASSERT_PTR_NULL(j[1].user);
	CU_ASSERT_EQUAL(j[1].port, 0);
	CU_ASSERT_PTR_NULL(j[2].config_host);
	CU_ASSERT_STRING_EQUAL(j[2].host, "inner");
	CU_ASSERT_STRING_EQUAL(j[2].user, "u");
	CU_ASSERT_EQUAL(j[2].port, 22);
	CU_ASSERT_STRING_EQUAL(j[2].known_hosts, "/w/kh2");
	CU_ASSERT_EQUAL(j[2].strict_host_key_checking, ASP_HOSTKEY_ANY);
	CU_ASSERT_STRING_EQUAL(j[2].identity_file, "/w/k");
	CU_ASSERT_EQUAL(j[2].jump_count, 0);
	CU_ASSERT_EQUAL_FATAL(v->http.header_count, 2);
	CU_ASSERT_STRING_EQUAL(v->http.headers[0].name, "X-A");
	CU_ASSERT_STRING_EQUAL(v->http.headers[0].value, "one");
	CU_ASSERT_PTR_NULL(v->http.headers[0].env);
	CU_ASSERT_STRING_EQUAL(v->http.headers[1].name, "X-B");
	CU_ASSERT_PTR_NULL(v->http.headers[1].value);
	CU_ASSERT_STRING_EQUAL(v->http.headers[1].env, "B_TOKEN");
	asp_config_free(cfg);
}

static void test_positions(void)
{
	/* An escaped key is found by what it decodes to. */
	expect_invalid("{'version': 1, 'transport': 'stdio', 'stdio': {'comm\\u0061nd': [7]}}",
	               "/w/.asp.json:1:65: stdio.command[0]: expected a non-empty string, got 7");
	/* Columns count characters, not bytes. */
	expect_invalid(
	    "{'version': 1, 'transport': 'stdio', 'stdio': {'command': ['\xc3\xa9', 7]}}",
	    "/w/.asp.json:1:65: stdio.command[1]: expected a string, got 7");
	/* The same key name nested earlier, or inside a string, is not mistaken for the one. */
	expect_invalid(
	    "{'env': {'stdio': '\\'stdio\\': {'}, 'version': 1, 'transport': 'stdio', "
	    "'stdio': {'command': 'port'}}",
	    "/w/.asp.json:1:93: stdio.command: expected a non-empty array of strings, got "
	    "\"port\"");
	/* Tabs and CRLF line ends. */
	expect_invalid(
	    "{\r\n\t'version': 1,\r\n\t'transport': 7\r\n}",
	    "/w/.asp.json:3:15: transport: expected one of \"ssh\", \"stdio\", \"http\", got 7");
}

static void test_hostile_values(void)
{
	/* Deep nesting inside a value: rejected where it starts, without descending. */
	size_t depth = 1500;
	char *doc = malloc(2 * depth + 128);
	char *p = doc + sprintf(doc, "{'version': 1, 'transport': 'stdio', 'env': {'A': ");
	memset(p, '[', depth);
	memset(p + depth, ']', depth);
	strcpy(p + 2 * depth, "}}");
	expect_invalid(doc, "/w/.asp.json:1:51: env.A: expected a string, got an array");
	free(doc);
	/* A long unknown key is quoted, cut short, and the message still fits. */
	char key[5000];
	memset(key, 'k', sizeof key - 1);
	key[sizeof key - 1] = '\0';
	char *text = malloc(sizeof key + 64);
	CU_ASSERT_PTR_NOT_NULL_FATAL(text);
	snprintf(text, sizeof key + 64, "{\"%s\": 1}", key);
	asp_config *cfg = NULL;
	asp_error err;
	CU_ASSERT_EQUAL(parse_len(text, strlen(text), &cfg, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(
	    err.message,
	    "/w/.asp.json:1:2: [\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\"]"
	    ": unknown key (expected one of: version, transport, cwd, env, "
	    "workspace, timeout_ms, call_timeout_ms, ssh, stdio, http)");
	free(text);
	/* Too big to be a config: refused before parsing. */
	size_t big = ASP_CONFIG_MAX_BYTES + 1;
	text = malloc(big);
	memset(text, ' ', big);
	text[0] = '{';
	text[big - 1] = '}';
	CU_ASSERT_EQUAL(parse_len(text, big, &cfg, &err), ASP_E_TOO_LARGE);
	CU_ASSERT_PTR_NULL(cfg);
	write_bytes("big.json", text, big);
	CU_ASSERT_EQUAL(asp_config_load(at("big.json"), &cfg, &err), ASP_E_TOO_LARGE);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, at("big.json")));
	free(text);
}

static void test_load_errors(void)
{
	asp_config *cfg = NULL;
	asp_error err;
	char want[PATH_MAX * 2];
	CU_ASSERT_EQUAL(asp_config_load(at("missing.json"), &cfg, &err), ASP_E_NOT_FOUND);
	snprintf(want, sizeof want, "cannot open config %s: No such file or directory",
	         at("missing.json"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	CU_ASSERT_EQUAL(asp_config_load(scratch, &cfg, &err), ASP_E_IS_A_DIRECTORY);
	CU_ASSERT_PTR_NULL(cfg);
	/* Validation errors from a file name the absolute path of the file. */
	mkdirs("d");
	write_doc("d/.asp.json",
	          "{\n  'version': 1,\n  'transport': 'ssh',\n  'ssh': {'port': 22}\n}");
	CU_ASSERT_EQUAL_FATAL(chdir(scratch), 0);
	CU_ASSERT_EQUAL(asp_config_load("d/.asp.json", &cfg, &err), ASP_E_INVALID_ARGUMENT);
	snprintf(want, sizeof want,
	         "%s:4:10: ssh.host: required key missing when config_host is absent",
	         at("d/.asp.json"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	CU_ASSERT_STRING_EQUAL(err.path, at("d/.asp.json"));
	/* From memory without a name. */
	CU_ASSERT_EQUAL(asp_config_parse("{\"version\": 3}", 14, NULL, &cfg, &err),
	                ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(err.message, "<memory>:1:13: version: expected 1, got 3");
	CU_ASSERT_STRING_EQUAL(err.path, "");
}

/* ---- the view ----------------------------------------------------------------------------- */

static void test_defaults(void)
{
	asp_config *cfg = parse_ok("{'version': 1, 'transport': 'ssh', 'ssh': {'host': 'box'}}");
	const asp_config_view *v = asp_config_get(cfg);
	char kh[PATH_MAX + 64];
	snprintf(kh, sizeof kh, "%s/.ssh/known_hosts", getenv("HOME"));
	CU_ASSERT_STRING_EQUAL(v->path, "/w/.asp.json");
	CU_ASSERT_EQUAL(v->transport, ASP_TRANSPORT_SSH);
	CU_ASSERT_PTR_NULL(v->cwd);
	CU_ASSERT_EQUAL(v->env_count, 0);
	CU_ASSERT_EQUAL(v->timeout_ms, 0);
	CU_ASSERT_STRING_EQUAL(v->ssh.host, "box");
	CU_ASSERT_EQUAL(v->ssh.port, 0); /* 22 unless config_host's file says otherwise */
	CU_ASSERT_PTR_NULL(v->ssh.user);
	CU_ASSERT_PTR_NULL(v->ssh.identity_file);
	CU_ASSERT_PTR_NULL(v->ssh.password_env);
	CU_ASSERT_PTR_NULL(v->ssh.known_hosts); /* ~/.ssh/known_hosts, as for port */
	CU_ASSERT_PTR_NULL(v->ssh.host_key_sha256);
	CU_ASSERT_EQUAL(v->ssh.strict_host_key_checking, ASP_HOSTKEY_STRICT);
	CU_ASSERT_EQUAL(v->ssh.connect_timeout_ms, 10000);
	CU_ASSERT_PTR_NULL(v->ssh.agent);
	CU_ASSERT_PTR_NULL(v->ssh.proxy_command);
	CU_ASSERT_EQUAL(v->ssh.jump_count, 0);
	CU_ASSERT_PTR_NULL(v->ssh.config_host);
	snprintf(kh, sizeof kh, "%s/.ssh/config", getenv("HOME"));
	CU_ASSERT_STRING_EQUAL(v->ssh.config_file, kh);
	CU_ASSERT_EQUAL(v->http.header_count, 0);
	CU_ASSERT_PTR_NULL(v->stdio.argv);
	CU_ASSERT_EQUAL(v->stdio.argc, 0);
	CU_ASSERT_PTR_NULL(v->http.url);
	CU_ASSERT_EQUAL(v->http.websocket, ASP_HTTP_WS_BOTH); /* absent: both ways */
	asp_config_free(cfg);

	/* The numbers above are the schema's own defaults. */
	json_t *schema = json_loads(asp_config_schema(), 0, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(schema);
	json_t *ssh = json_object_get(json_object_get(schema, "properties"), "ssh");
	json_t *props = json_object_get(ssh, "properties");
#define DEFAULT(name) json_object_get(json_object_get(props, name), "default")
	CU_ASSERT_PTR_NULL(DEFAULT("port"));
	CU_ASSERT_EQUAL(json_integer_value(DEFAULT("connect_timeout_ms")), 10000);
	CU_ASSERT_PTR_NULL(DEFAULT("known_hosts"));
	CU_ASSERT_STRING_EQUAL(json_string_value(DEFAULT("config_file")), "~/.ssh/config");
	CU_ASSERT_TRUE(json_is_true(DEFAULT("strict_host_key_checking")));
	CU_ASSERT_TRUE(json_is_null(DEFAULT("agent")));
#undef DEFAULT
	json_decref(schema);

	/* Sections other than the transport's may be partial; their values still load. */
	cfg = parse_ok("{'version': 1, 'transport': 'stdio', 'stdio': {'command': ['a']}, "
	               "'ssh': {'port': 2222}, 'http': {'websocket': false}}");
	v = asp_config_get(cfg);
	CU_ASSERT_EQUAL(v->transport, ASP_TRANSPORT_STDIO);
	CU_ASSERT_PTR_NULL(v->ssh.host);
	CU_ASSERT_EQUAL(v->ssh.port, 2222);
	CU_ASSERT_EQUAL(v->http.websocket, ASP_HTTP_WS_NEVER);
	CU_ASSERT_PTR_NULL(v->http.url);
	asp_config_free(cfg);
}

static void test_full_view(void)
{
	mkdirs("conf");
	write_doc(
	    "conf/.asp.json",
	    "{\n"
	    "  'version': 1,\n"
	    "  'transport': 'ssh',\n"
	    "  'cwd': 'work',\n"
	    "  'env': {'LANG': 'C.UTF-8', 'B': '', 'A': 'x=y'},\n"
	    "  'timeout_ms': 120000,\n"
	    "  'ssh': {\n"
	    "    'host': 'sandbox.local', 'port': 2222, 'user': 'agent',\n"
	    "    'identity_file': 'keys/id_ed25519', 'password_env': 'SSH_PW',\n"
	    "    'known_hosts': './kh', 'strict_host_key_checking': 'accept-new',\n"
	    "    'connect_timeout_ms': 1, 'agent': 'upload',\n"
	    "    'host_key_sha256': 'SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8'\n"
	    "  },\n"
	    "  'stdio': {'command': ['./bin/asp-agent', '--stdio', './kept']},\n"
	    "  'http': {'url': 'https://h:1/', 'token_env': 'TOK', 'token_file': '/abs/token',\n"
	    "           'ca_file': '../ca.pem', 'websocket': true}\n"
	    "}\n");
	asp_config *cfg = NULL;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_load(at("conf/.asp.json"), &cfg, &err), ASP_OK);
	const asp_config_view *v = asp_config_get(cfg);
	CU_ASSERT_STRING_EQUAL(v->path, at("conf/.asp.json"));
	CU_ASSERT_EQUAL(v->transport, ASP_TRANSPORT_SSH);
	CU_ASSERT_STRING_EQUAL(v->cwd, "work"); /* a sandbox path: kept as written */
	CU_ASSERT_EQUAL_FATAL(v->env_count, 3);
	CU_ASSERT_STRING_EQUAL(v->env[0].key, "LANG");
	CU_ASSERT_STRING_EQUAL(v->env[0].value, "C.UTF-8");
	CU_ASSERT_STRING_EQUAL(v->env[1].key, "B");
	CU_ASSERT_STRING_EQUAL(v->env[1].value, "");
	CU_ASSERT_STRING_EQUAL(v->env[2].key, "A");
	CU_ASSERT_STRING_EQUAL(v->env[2].value, "x=y");
	CU_ASSERT_EQUAL(v->timeout_ms, 120000);
	CU_ASSERT_STRING_EQUAL(v->ssh.host, "sandbox.local");
	CU_ASSERT_EQUAL(v->ssh.port, 2222);
	CU_ASSERT_STRING_EQUAL(v->ssh.user, "agent");
	CU_ASSERT_STRING_EQUAL(v->ssh.identity_file, at("conf/keys/id_ed25519"));
	CU_ASSERT_STRING_EQUAL(v->ssh.password_env, "SSH_PW");
	CU_ASSERT_STRING_EQUAL(v->ssh.known_hosts, at("conf/kh"));
	CU_ASSERT_STRING_EQUAL(v->ssh.host_key_sha256,
	                       "SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8");
	CU_ASSERT_EQUAL(v->ssh.strict_host_key_checking, ASP_HOSTKEY_ACCEPT_NEW);
	CU_ASSERT_EQUAL(v->ssh.connect_timeout_ms, 1);
	CU_ASSERT_STRING_EQUAL(v->ssh.agent, "upload");
	CU_ASSERT_EQUAL_FATAL(v->stdio.argc, 3);
	CU_ASSERT_STRING_EQUAL(v->stdio.argv[0], at("conf/bin/asp-agent"));
	CU_ASSERT_STRING_EQUAL(v->stdio.argv[1], "--stdio");
	CU_ASSERT_STRING_EQUAL(v->stdio.argv[2], "./kept"); /* only the program is resolved */
	CU_ASSERT_PTR_NULL(v->stdio.argv[3]);
	CU_ASSERT_STRING_EQUAL(v->http.url, "https://h:1/");
	CU_ASSERT_STRING_EQUAL(v->http.token_env, "TOK");
	CU_ASSERT_STRING_EQUAL(v->http.token_file, "/abs/token");
	CU_ASSERT_STRING_EQUAL(v->http.ca_file, at("conf/../ca.pem"));
	CU_ASSERT_EQUAL(v->http.websocket, ASP_HTTP_WS_ONLY);
	asp_config_free(cfg);

	cfg = parse_ok("{'version': 1, 'transport': 'ssh', 'ssh': {'host': 'h', "
	               "'strict_host_key_checking': false, 'agent': null}}");
	CU_ASSERT_EQUAL(asp_config_get(cfg)->ssh.strict_host_key_checking, ASP_HOSTKEY_ANY);
	CU_ASSERT_PTR_NULL(asp_config_get(cfg)->ssh.agent);
	asp_config_free(cfg);
	cfg = parse_ok("{'version': 1, 'transport': 'ssh', 'ssh': {'host': 'h', "
	               "'strict_host_key_checking': true, 'agent': '/opt/asp-agent'}}");
	CU_ASSERT_EQUAL(asp_config_get(cfg)->ssh.strict_host_key_checking, ASP_HOSTKEY_STRICT);
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->ssh.agent, "/opt/asp-agent");
	asp_config_free(cfg);
	CU_ASSERT_PTR_NULL(asp_config_get(NULL));
	asp_config_free(NULL);
}

static void test_paths(void)
{
	const char *home = getenv("HOME");
	char want[PATH_MAX + 64];
	/* ~/ expands with $HOME; "~" alone is $HOME. */
	asp_config *cfg = parse_ok("{'version': 1, 'transport': 'ssh', 'ssh': {'host': 'h', "
	                           "'identity_file': '~/.ssh/id', 'known_hosts': '~'}}");
	snprintf(want, sizeof want, "%s/.ssh/id", home);
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->ssh.identity_file, want);
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->ssh.known_hosts, home);
	asp_config_free(cfg);
	setenv("HOME", "/home/someone/", 1);
	cfg = parse_ok("{'version': 1, 'transport': 'http', 'http': {'url': 'http://x', "
	               "'token_file': '~/tok', 'ca_file': 'ca.pem'}}");
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->http.token_file, "/home/someone/tok");
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->http.ca_file, "/w/ca.pem");
	asp_config_free(cfg);
	/* A program name without '/' is looked up in PATH later: untouched. */
	cfg =
	    parse_ok("{'version': 1, 'transport': 'stdio', 'stdio': {'command': ['docker', 'x']}}");
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->stdio.argv[0], "docker");
	asp_config_free(cfg);
	cfg = parse_ok("{'version': 1, 'transport': 'stdio', 'stdio': {'command': ['~/bin/a']}}");
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->stdio.argv[0], "/home/someone/bin/a");
	asp_config_free(cfg);
	expect_invalid(
	    "{\n  'version': 1,\n  'transport': 'ssh',\n  'ssh': {\n    'host': 'h',\n"
	    "    'identity_file': '~bob/id'\n  }\n}",
	    "/w/.asp.json:6:22: ssh.identity_file: only ~/ is expanded, not ~user/; write "
	    "the full path");
	/* Relative to the file's directory, for a relative file name too. */
	mkdirs("sub");
	CU_ASSERT_EQUAL_FATAL(chdir(scratch), 0);
	char *text =
	    dq("{'version': 1, 'transport': 'stdio', 'stdio': {'command': ['tools/agent']}}");
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(text, strlen(text), "sub/x.json", &cfg, &err),
	                      ASP_OK);
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->path, at("sub/x.json"));
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->stdio.argv[0], at("sub/tools/agent"));
	asp_config_free(cfg);
	/* From memory: the working directory is the base, and there is no path. */
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(text, strlen(text), NULL, &cfg, &err), ASP_OK);
	CU_ASSERT_PTR_NULL(asp_config_get(cfg)->path);
	CU_ASSERT_STRING_EQUAL(asp_config_get(cfg)->stdio.argv[0], at("tools/agent"));
	asp_config_free(cfg);
	free(text);
}

/* ---- secrets ------------------------------------------------------------------------------ */

static void test_secret_env(void)
{
	char *s = (char *)"unchanged";
	asp_error err;
	setenv("ASP_TEST_SECRET", "s3cret\n", 1);
	CU_ASSERT_EQUAL(asp_config_secret("ASP_TEST_SECRET", NULL, &s, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(s, "s3cret");
	free(s);
	/* The variable wins over the file when set. */
	write_bytes("tok", "from-file\n", 10);
	CU_ASSERT_EQUAL(asp_config_secret("ASP_TEST_SECRET", at("tok"), &s, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(s, "s3cret");
	free(s);
	unsetenv("ASP_TEST_SECRET");
	CU_ASSERT_EQUAL(asp_config_secret("ASP_TEST_SECRET", at("tok"), &s, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(s, "from-file");
	free(s);
	/* Unset, and no file to fall back on. */
	s = (char *)"unchanged";
	CU_ASSERT_EQUAL(asp_config_secret("ASP_TEST_SECRET", NULL, &s, &err), ASP_E_NOT_FOUND);
	CU_ASSERT_PTR_NULL(s);
	CU_ASSERT_STRING_EQUAL(
	    err.message, "environment variable ASP_TEST_SECRET is not set; export it with the "
	                 "secret or name a file in the config's *_file key");
	setenv("ASP_TEST_SECRET", "", 1);
	CU_ASSERT_EQUAL(asp_config_secret("ASP_TEST_SECRET", NULL, &s, &err),
	                ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(err.message, "environment variable ASP_TEST_SECRET is empty");
	/* Nothing configured is not an error. */
	s = (char *)"unchanged";
	CU_ASSERT_EQUAL(asp_config_secret(NULL, NULL, &s, &err), ASP_OK);
	CU_ASSERT_PTR_NULL(s);
}

static void test_secret_file(void)
{
	char *s = NULL;
	asp_error err;
	char want[PATH_MAX * 2];
	write_bytes("crlf", "tok\r\n", 5);
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("crlf"), &s, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(s, "tok");
	free(s);
	write_bytes("two", "a\n\n", 3); /* only one newline is the file's end */
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("two"), &s, &err), ASP_OK);
	CU_ASSERT_STRING_EQUAL(s, "a\n");
	free(s);
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("none"), &s, &err), ASP_E_NOT_FOUND);
	snprintf(want, sizeof want, "cannot open secret file %s: No such file or directory",
	         at("none"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	CU_ASSERT_STRING_EQUAL(err.path, at("none"));
	/* Unreadable: a directory for anyone; mode 000 too unless we are root. */
	mkdirs("adir");
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("adir"), &s, &err), ASP_E_IS_A_DIRECTORY);
	snprintf(want, sizeof want, "cannot read secret file %s: Is a directory", at("adir"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	write_bytes("locked", "x", 1);
	chmod(at("locked"), 0);
	if (geteuid() != 0) {
		CU_ASSERT_EQUAL(asp_config_secret(NULL, at("locked"), &s, &err),
		                ASP_E_PERMISSION_DENIED);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.message, at("locked")));
	}
	write_bytes("empty", "\n", 1);
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("empty"), &s, &err), ASP_E_INVALID_ARGUMENT);
	snprintf(want, sizeof want, "secret file %s is empty", at("empty"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	write_bytes("nul", "ab\0c", 4);
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("nul"), &s, &err), ASP_E_INVALID_ARGUMENT);
	snprintf(want, sizeof want, "secret file %s holds a NUL byte", at("nul"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	char *big = malloc(70000);
	memset(big, 'x', 70000);
	write_bytes("big", big, 70000);
	free(big);
	CU_ASSERT_EQUAL(asp_config_secret(NULL, at("big"), &s, &err), ASP_E_TOO_LARGE);
	CU_ASSERT_PTR_NULL(s);
}

/* ---- the schema itself ------------------------------------------------------------------- */

/*
 * Every property is described (a "$ref" by what it points at) and every object with fixed
 * keys refuses others.
 */
static void check_schema_node(json_t *s, const char *where)
{
	if (!json_is_object(s))
		return;
	json_t *props = json_object_get(s, "properties");
	json_t *more = json_object_get(s, "additionalProperties");
	bool structural = props && json_object_get(s, "type");
	if (structural && !json_is_false(more)) {
		fprintf(stderr, "\n  %s: additionalProperties is not false\n", where);
		CU_FAIL("additionalProperties false");
	}
	for (void *it = json_object_iter(props); it; it = json_object_iter_next(props, it)) {
		const char *name = json_object_iter_key(it);
		json_t *p = json_object_iter_value(it);
		char sub[512];
		snprintf(sub, sizeof sub, "%s.%s", where, name);
		if (structural && !json_is_string(json_object_get(p, "description")) &&
		    !json_is_string(json_object_get(p, "$ref"))) {
			fprintf(stderr, "\n  %s has no description\n", sub);
			CU_FAIL("description");
		}
		check_schema_node(p, sub);
	}
	check_schema_node(json_object_get(s, "items"), where);
	check_schema_node(more, where);
}

static void test_schema(void)
{
	json_error_t je;
	json_t *s = json_loads(asp_config_schema(), JSON_REJECT_DUPLICATES, &je);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(s, "$schema")),
	                       "https://json-schema.org/draft/2020-12/schema");
	check_schema_node(s, "(root)");
	json_decref(s);
#ifdef ASP_SOURCE_DIR
	/* The embedded copy is the checked-in file, byte for byte. */
	FILE *f = fopen(ASP_SOURCE_DIR "/spec/asp.schema.json", "rb");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	static char buf[65536];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	CU_ASSERT_STRING_EQUAL(buf, asp_config_schema());
#endif
}

int main(int argc, char **argv)
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s = CU_add_suite_with_setup_and_teardown("config", NULL, NULL, setup, teardown);
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"find: $ASP_CONFIG", test_find_asp_config_env},
	    {"find: $ASP_CONFIG missing", test_find_asp_config_missing},
	    {"find: working directory", test_find_in_cwd},
	    {"find: two levels up", test_find_two_levels_up},
	    {"find: none", test_find_none},
	    {"syntax errors", test_syntax_errors},
	    {"root errors", test_root_errors},
	    {"top-level fields", test_top_level_fields},
	    {"ssh fields", test_ssh_fields},
	    {"stdio fields", test_stdio_fields},
	    {"http fields", test_http_fields},
	    {"gateway fields", test_gateway_fields},
	    {"gateway view", test_gateway_view},
	    {"positions", test_positions},
	    {"hostile values", test_hostile_values},
	    {"load errors", test_load_errors},
	    {"defaults", test_defaults},
	    {"full view", test_full_view},
	    {"paths", test_paths},
	    {"secret: env", test_secret_env},
	    {"secret: file", test_secret_file},
	    {"schema", test_schema},
	};
	for (size_t i = 0; s && i < sizeof tests / sizeof *tests; i++) {
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			s = NULL;
	}
	if (!s) {
		CU_cleanup_registry();
		return 2;
	}
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
