/*
 * .asp.json files of the public ASP v0 draft ("version": "0"): read with their own strict
 * schema (messages with line:col and the key path, as for version 1) and mapped onto the
 * SSH transport (docs/design.md, ".asp.json"); asp_config_v0_to_v1 writes the version 1
 * text they mean.
 */
#include "cu_run.h"
#include "asp/config.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static asp_config *parse(const char *text, asp_error *err)
{
	asp_config *cfg = NULL;
	if (asp_config_parse(text, strlen(text), "/cfg/.asp.json", &cfg, err) != ASP_OK)
		return NULL;
	return cfg;
}

static void expect_error(const char *text, const char *message)
{
	asp_error err;
	asp_config *cfg = parse(text, &err);
	CU_ASSERT_PTR_NULL(cfg);
	asp_config_free(cfg);
	CU_ASSERT_EQUAL(err.code, ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_STRING_EQUAL(err.message, message);
	if (strcmp(err.message, message) != 0)
		fprintf(stderr, "\n  got:  %s\n  want: %s\n", err.message, message);
}

static void test_full_file_maps_onto_ssh(void)
{
	asp_error err;
	asp_config *cfg = parse("{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": "
	                        "{\"host\": \"box\", \"port\": 2222, \"user\": \"me\", "
	                        "\"identity\": {\"file\": \"keys/id\"}, \"host_key\": "
	                        "\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@box\"}, "
	                        "\"workspace\": \"/workspace\"}",
	                        &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
	const asp_config_view *v = asp_config_get(cfg);
	CU_ASSERT_EQUAL(v->transport, ASP_TRANSPORT_SSH);
	CU_ASSERT_STRING_EQUAL(v->cwd, "/workspace");
	CU_ASSERT_STRING_EQUAL(v->ssh.host, "box");
	CU_ASSERT_EQUAL(v->ssh.port, 2222);
	CU_ASSERT_STRING_EQUAL(v->ssh.user, "me");
	CU_ASSERT_STRING_EQUAL(v->ssh.identity_file, "/cfg/keys/id");
	CU_ASSERT_PTR_NULL(v->ssh.identity_env);
	CU_ASSERT_STRING_EQUAL(v->ssh.host_key, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@box");
	CU_ASSERT_PTR_NULL(v->ssh.host_key_sha256);
	CU_ASSERT_EQUAL(v->ssh.strict_host_key_checking, ASP_HOSTKEY_STRICT);
	asp_config_free(cfg);
}

static void test_minimal_file_trusts_on_first_use(void)
{
	asp_error err;
	asp_config *cfg =
	    parse("{\"version\": \"0\", \"transport\": \"ssh\", "
	          "\"connection\": {\"host\": \"h\", \"identity\": {\"env\": \"K\"}}}",
	          &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
	const asp_config_view *v = asp_config_get(cfg);
	CU_ASSERT_EQUAL(v->ssh.port, 0); /* the transport's 22 */
	CU_ASSERT_STRING_EQUAL(v->ssh.identity_env, "K");
	CU_ASSERT_PTR_NULL(v->ssh.identity_file);
	CU_ASSERT_PTR_NULL(v->ssh.host_key);
	CU_ASSERT_EQUAL(v->ssh.strict_host_key_checking, ASP_HOSTKEY_ACCEPT_NEW);
	CU_ASSERT_PTR_NULL(v->ssh.known_hosts); /* the transport's ~/.ssh/known_hosts */
	CU_ASSERT_PTR_NULL(v->cwd);
	asp_config_free(cfg);
}

static void test_fingerprint_pins(void)
{
	asp_error err;
	asp_config *cfg =
	    parse("{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {\"host\": \"h\", "
	          "\"host_key\": \"SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU\"}}",
	          &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
	const asp_config_view *v = asp_config_get(cfg);
	CU_ASSERT_STRING_EQUAL(v->ssh.host_key_sha256,
	                       "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU");
	CU_ASSERT_PTR_NULL(v->ssh.host_key);
	asp_config_free(cfg);
}

static void test_strict_errors(void)
{
	expect_error("{\"version\": \"0\", \"transport\": \"ssh\",\n \"connection\": {\"host\": "
	             "\"h\", \"identity\": {\"env\": \"K\", \"file\": \"f\"}}}",
	             "/cfg/.asp.json:2:63: connection.identity.file: not allowed when env is "
	             "given");
	expect_error("{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {\"host\": "
	             "\"h\", \"hostkey\": \"x\"}}",
	             "/cfg/.asp.json:1:66: connection.hostkey: unknown key (expected one of: host, "
	             "port, user, identity, host_key)");
	expect_error("{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {\"host\": "
	             "\"h\"}, \"workspace\": \"rel\"}",
	             "/cfg/.asp.json:1:80: workspace: expected a string matching ^/, got \"rel\"");
	expect_error("{\"version\": \"0\", \"transport\": \"stdio\", \"connection\": {\"host\": "
	             "\"h\"}}",
	             "/cfg/.asp.json:1:31: transport: expected \"ssh\", got \"stdio\"");
	expect_error("{\"version\": \"0\", \"transport\": \"ssh\"}",
	             "/cfg/.asp.json:1:1: connection: required key missing");
	/* the draft's version is the string "0": a number 0 beside connection says so */
	expect_error("{\"version\": 0, \"transport\": \"ssh\", \"connection\": {\"host\": \"h\"}}",
	             "/cfg/.asp.json:1:13: version: expected \"0\", got 0");
	expect_error("{\"version\": 0, \"transport\": \"ssh\", \"ssh\": {\"host\": \"h\"}}",
	             "/cfg/.asp.json:1:13: version: expected 1, got 0");
	/* a host_key of neither form: at its place in the file, under its v0 name */
	expect_error("{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {\"host\": "
	             "\"h\",\n \"host_key\": \"SHA256:abc\"}}",
	             "/cfg/.asp.json:2:14: connection.host_key: expected a string matching "
	             "^(SHA256:[A-Za-z0-9+/]{43}=?|[a-z0-9@.-]+ [A-Za-z0-9+/]+=*( .*)?)$, got "
	             "\"SHA256:abc\"");
	/* a version 1 key in a v0 file: a v1 feature needs a v1 file */
	expect_error("{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {\"host\": "
	             "\"h\"}, \"env\": {}}",
	             "/cfg/.asp.json:1:67: env: unknown key (expected one of: version, transport, "
	             "connection, workspace)");
}

static void test_convert_to_v1(void)
{
	const char *v0 = "{\"version\": \"0\", \"transport\": \"ssh\", \"connection\": {\"host\": "
	                 "\"h\", \"port\": 2200, \"identity\": {\"file\": \"id\"}}, "
	                 "\"workspace\": \"/w\"}";
	char *v1 = NULL;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_config_v0_to_v1(v0, strlen(v0), "/cfg/old.json", &v1, &err),
	                      ASP_OK);
	asp_config *cfg = NULL;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(v1, strlen(v1), "/elsewhere/.asp.json", &cfg, &err),
	                      ASP_OK);
	const asp_config_view *v = asp_config_get(cfg);
	CU_ASSERT_STRING_EQUAL(v->cwd, "/w");
	CU_ASSERT_EQUAL(v->ssh.port, 2200);
	/* the key file keeps its place, wherever the new file goes */
	CU_ASSERT_STRING_EQUAL(v->ssh.identity_file, "/cfg/id");
	CU_ASSERT_EQUAL(v->ssh.strict_host_key_checking, ASP_HOSTKEY_ACCEPT_NEW);
	CU_ASSERT_PTR_NOT_NULL(strstr(v1, "\"version\": 1"));
	asp_config_free(cfg);
	free(v1);
	const char *not_v0 = "{\"version\": 1, \"transport\": \"stdio\", \"stdio\": {\"command\": "
	                     "[\"a\"]}}";
	CU_ASSERT_EQUAL(asp_config_v0_to_v1(not_v0, strlen(not_v0), NULL, &v1, &err),
	                ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NULL(v1);
}

int main(int argc, char **argv)
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s = CU_add_suite("config v0", NULL, NULL);
	CU_add_test(s, "a full v0 file maps onto the SSH transport", test_full_file_maps_onto_ssh);
	CU_add_test(s, "without host_key: accept-new", test_minimal_file_trusts_on_first_use);
	CU_add_test(s, "a SHA256 host_key pins the fingerprint", test_fingerprint_pins);
	CU_add_test(s, "strict errors with line:col and key path", test_strict_errors);
	CU_add_test(s, "asp_config_v0_to_v1", test_convert_to_v1);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
