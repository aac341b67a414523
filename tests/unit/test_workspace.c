/*
 * The workspace path mapping (asp/workspace.h, docs/design.md, ".asp.json"): prefixes
 * match whole components, ".." and trailing slashes are normalised first, relative paths
 * join the harness's directory, a nested sandbox is not mapped twice, and the config's
 * defaults (the file's directory; cwd, else the start directory); then the table both SDKs'
 * tests read (tests/vectors/workspace/cases.json, the path in argv[1]).
 */
#include "cu_run.h"
#include "asp/workspace.h"

#include <CUnit/Basic.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect(char *got, const char *want)
{
	CU_ASSERT_PTR_NOT_NULL_FATAL(got);
	CU_ASSERT_STRING_EQUAL(got, want);
	if (strcmp(got, want) != 0)
		fprintf(stderr, "\n  got:  %s\n  want: %s\n", got, want);
	free(got);
}

static asp_workspace *make(const char *local, const char *sandbox)
{
	asp_workspace *w = NULL;
	asp_error err;
	CU_ASSERT_EQUAL(asp_workspace_new(local, sandbox, &w, &err), ASP_OK);
	return w;
}

static void test_normalize(void)
{
	expect(asp_path_normalize("/a/./b//c/"), "/a/b/c");
	expect(asp_path_normalize("/a/../../b"), "/b");
	expect(asp_path_normalize("/.."), "/");
	expect(asp_path_normalize("/"), "/");
	expect(asp_path_normalize("a/../.."), "..");
	expect(asp_path_normalize("../x/../y"), "../y");
	expect(asp_path_normalize(""), ".");
	expect(asp_path_normalize("./"), ".");
}

static void test_to_sandbox(void)
{
	asp_workspace *w = make("/home/me/proj/", "/workspace");
	expect(asp_workspace_to_sandbox(w, "/home/me/proj", NULL), "/workspace");
	expect(asp_workspace_to_sandbox(w, "/home/me/proj/", NULL), "/workspace");
	expect(asp_workspace_to_sandbox(w, "/home/me/proj/src/a.c", NULL), "/workspace/src/a.c");
	/* a sibling with the same prefix is not under it */
	expect(asp_workspace_to_sandbox(w, "/home/me/proj2/a.c", NULL), "/home/me/proj2/a.c");
	/* ".." is resolved before matching, both ways */
	expect(asp_workspace_to_sandbox(w, "/home/me/proj/../proj2/a", NULL), "/home/me/proj2/a");
	expect(asp_workspace_to_sandbox(w, "/home/me/x/../proj/a", NULL), "/workspace/a");
	expect(asp_workspace_to_sandbox(w, "/home/me/proj/..", NULL), "/home/me");
	/* other paths go unchanged: /etc, the sandbox's own paths */
	expect(asp_workspace_to_sandbox(w, "/etc/hosts", NULL), "/etc/hosts");
	expect(asp_workspace_to_sandbox(w, "/workspace/b", NULL), "/workspace/b");
	/* relative: joined to the harness's directory, then mapped */
	expect(asp_workspace_to_sandbox(w, "src/a.c", "/home/me/proj"), "/workspace/src/a.c");
	expect(asp_workspace_to_sandbox(w, "../../proj/a", "/home/me/proj/src"), "/workspace/a");
	expect(asp_workspace_to_sandbox(w, "a", "/tmp"), "/tmp/a");
	expect(asp_workspace_to_sandbox(w, "./a/../b", NULL), "b");
	/* back */
	expect(asp_workspace_to_local(w, "/workspace/src"), "/home/me/proj/src");
	expect(asp_workspace_to_local(w, "/workspace"), "/home/me/proj");
	expect(asp_workspace_to_local(w, "/workspace2"), "/workspace2");
	expect(asp_workspace_to_local(w, "/usr/bin"), "/usr/bin");
	CU_ASSERT_STRING_EQUAL(asp_workspace_local(w), "/home/me/proj");
	asp_workspace_free(w);
	/* no mapping: only the normalisation */
	expect(asp_workspace_to_sandbox(NULL, "/a//b/", NULL), "/a/b");
	expect(asp_workspace_to_local(NULL, "/a/./b"), "/a/b");
}

static void test_roots(void)
{
	asp_workspace *w = make("/", "/srv/box");
	expect(asp_workspace_to_sandbox(w, "/etc/x", NULL), "/srv/box/etc/x");
	expect(asp_workspace_to_sandbox(w, "/", NULL), "/srv/box");
	/* the sandbox lies inside "/": its paths are the harness's already */
	expect(asp_workspace_to_local(w, "/srv/box/etc"), "/srv/box/etc");
	asp_workspace_free(w);
	w = make("/home/me", "/");
	expect(asp_workspace_to_sandbox(w, "/home/me/a", NULL), "/a");
	expect(asp_workspace_to_sandbox(w, "/home/me", NULL), "/");
	expect(asp_workspace_to_local(w, "/a"), "/home/me/a");
	asp_workspace_free(w);
}

static void test_nested(void)
{
	/* the sandbox inside the harness's directory (one machine): its paths stay */
	asp_workspace *w = make("/t", "/t/box");
	expect(asp_workspace_to_sandbox(w, "/t/a", NULL), "/t/box/a");
	expect(asp_workspace_to_sandbox(w, "/t/box/a", NULL), "/t/box/a");
	expect(asp_workspace_to_local(w, "/t/box/a"), "/t/box/a"); /* already the harness's */
	expect(asp_workspace_to_local(w, "/etc"), "/etc");
	asp_workspace_free(w);
	/* the harness's directory inside the sandbox's */
	w = make("/w/proj", "/w");
	expect(asp_workspace_to_sandbox(w, "/w/proj/a", NULL), "/w/a");
	expect(asp_workspace_to_local(w, "/w/a"), "/w/proj/a");
	expect(asp_workspace_to_local(w, "/w/proj/a"), "/w/proj/a");
	asp_workspace_free(w);
}

static void test_bad(void)
{
	asp_workspace *w = NULL;
	asp_error err;
	CU_ASSERT_EQUAL(asp_workspace_new("rel", "/x", &w, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NULL(w);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "absolute"));
	CU_ASSERT_EQUAL(asp_workspace_new("/x", NULL, &w, &err), ASP_E_INVALID_ARGUMENT);
}

static asp_workspace *from(const char *text, const char *file, const char *start)
{
	asp_config *cfg = NULL;
	asp_error err;
	asp_workspace *w = NULL;
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(text, strlen(text), file, &cfg, &err), ASP_OK);
	CU_ASSERT_EQUAL(asp_workspace_from_config(asp_config_get(cfg), start, &w, &err), ASP_OK);
	asp_config_free(cfg);
	return w;
}

static void test_from_config(void)
{
	const char *base =
	    "{\"version\": 1, \"transport\": \"stdio\", \"stdio\": {\"command\": [\"a\"]}";
	char text[512];
	/* defaults: the file's directory onto the start directory */
	snprintf(text, sizeof text, "%s}", base);
	asp_workspace *w = from(text, "/home/me/proj/.asp.json", "/srv");
	CU_ASSERT_PTR_NOT_NULL_FATAL(w);
	CU_ASSERT_STRING_EQUAL(asp_workspace_local(w), "/home/me/proj");
	CU_ASSERT_STRING_EQUAL(asp_workspace_sandbox(w), "/srv");
	asp_workspace_free(w);
	/* cwd, relative to the start directory */
	snprintf(text, sizeof text, "%s, \"cwd\": \"box/./w\"}", base);
	w = from(text, "/home/me/proj/.asp.json", "/srv");
	CU_ASSERT_STRING_EQUAL(asp_workspace_sandbox(w), "/srv/box/w");
	asp_workspace_free(w);
	/* both given; local relative to the file's directory */
	snprintf(text, sizeof text,
	         "%s, \"cwd\": \"/c\", \"workspace\": {\"local\": \"sub/\", \"sandbox\": \"/s\"}}",
	         base);
	w = from(text, "/home/me/proj/.asp.json", "/srv");
	CU_ASSERT_STRING_EQUAL(asp_workspace_local(w), "/home/me/proj/sub");
	CU_ASSERT_STRING_EQUAL(asp_workspace_sandbox(w), "/s");
	asp_workspace_free(w);
	/* the same directory: nothing to map */
	snprintf(text, sizeof text, "%s, \"cwd\": \"/home/me/proj/\"}", base);
	CU_ASSERT_PTR_NULL(from(text, "/home/me/proj/.asp.json", "/srv"));
	/* from memory: nothing says where the harness is */
	snprintf(text, sizeof text, "%s, \"cwd\": \"/w\"}", base);
	CU_ASSERT_PTR_NULL(from(text, NULL, "/srv"));
	/* strict: unknown keys and wrong types are refused */
	asp_config *cfg = NULL;
	asp_error err;
	snprintf(text, sizeof text, "%s, \"workspace\": {\"remote\": \"/x\"}}", base);
	CU_ASSERT_EQUAL(asp_config_parse(text, strlen(text), NULL, &cfg, &err),
	                ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "workspace"));
	snprintf(text, sizeof text, "%s, \"workspace\": {\"local\": 3}}", base);
	CU_ASSERT_EQUAL(asp_config_parse(text, strlen(text), NULL, &cfg, &err),
	                ASP_E_INVALID_ARGUMENT);
	/* a relative sandbox with no start directory to join: a clear error */
	snprintf(text, sizeof text, "%s, \"cwd\": \"rel\"}", base);
	CU_ASSERT_EQUAL_FATAL(asp_config_parse(text, strlen(text), "/p/.asp.json", &cfg, &err),
	                      ASP_OK);
	asp_workspace *none = NULL;
	CU_ASSERT_EQUAL(asp_workspace_from_config(asp_config_get(cfg), NULL, &none, &err),
	                ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "workspace.sandbox"));
	asp_config_free(cfg);
}

static const char *cases_path;

static const char *str(json_t *arr, size_t i)
{
	return json_string_value(json_array_get(arr, i)); /* NULL for JSON null */
}

static void table_maps(json_t *maps)
{
	size_t i, j;
	json_t *m, *c;
	json_array_foreach(maps, i, m)
	{
		asp_workspace *w = make(json_string_value(json_object_get(m, "local")),
		                        json_string_value(json_object_get(m, "sandbox")));
		CU_ASSERT_PTR_NOT_NULL_FATAL(w);
		json_t *normal = json_object_get(m, "normal");
		CU_ASSERT_STRING_EQUAL(asp_workspace_local(w), str(normal, 0));
		CU_ASSERT_STRING_EQUAL(asp_workspace_sandbox(w), str(normal, 1));
		json_array_foreach(json_object_get(m, "to_sandbox"), j, c)
		    expect(asp_workspace_to_sandbox(w, str(c, 0), str(c, 1)), str(c, 2));
		json_array_foreach(json_object_get(m, "to_local"), j, c)
		    expect(asp_workspace_to_local(w, str(c, 0)), str(c, 1));
		asp_workspace_free(w);
	}
}

static void table_from_config(json_t *cases)
{
	size_t i;
	json_t *c;
	json_array_foreach(cases, i, c)
	{
		char *text = json_dumps(json_object_get(c, "config"), 0);
		CU_ASSERT_PTR_NOT_NULL_FATAL(text);
		const char *file = json_string_value(json_object_get(c, "file"));
		const char *start = json_string_value(json_object_get(c, "start_dir"));
		const char *message = json_string_value(json_object_get(c, "message"));
		asp_config *cfg = NULL;
		asp_workspace *w = NULL;
		asp_error err;
		unsigned before = CU_get_number_of_failures();
		CU_ASSERT_EQUAL_FATAL(asp_config_parse(text, strlen(text), file, &cfg, &err),
		                      ASP_OK);
		asp_status st = asp_workspace_from_config(asp_config_get(cfg), start, &w, &err);
		if (message) {
			CU_ASSERT_EQUAL(st, ASP_E_INVALID_ARGUMENT);
			CU_ASSERT_PTR_NOT_NULL(st != ASP_OK ? strstr(err.message, message) : NULL);
		} else if (json_is_true(json_object_get(c, "none"))) {
			CU_ASSERT_EQUAL(st, ASP_OK);
			CU_ASSERT_PTR_NULL(w);
		} else {
			CU_ASSERT_EQUAL(st, ASP_OK);
			CU_ASSERT_PTR_NOT_NULL(w);
			if (w) {
				CU_ASSERT_STRING_EQUAL(
				    asp_workspace_local(w),
				    json_string_value(json_object_get(c, "local")));
				CU_ASSERT_STRING_EQUAL(
				    asp_workspace_sandbox(w),
				    json_string_value(json_object_get(c, "sandbox")));
			}
		}
		if (CU_get_number_of_failures() > before)
			fprintf(stderr, "\n  from_config case: %s\n",
			        json_string_value(json_object_get(c, "name")));
		asp_workspace_free(w);
		asp_config_free(cfg);
		free(text);
	}
}

static void test_table(void)
{
	json_error_t je;
	json_t *root = json_load_file(cases_path, 0, &je);
	if (!root)
		fprintf(stderr, "\n  %s:%d: %s\n", cases_path, je.line, je.text);
	CU_ASSERT_PTR_NOT_NULL_FATAL(root);
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(root, "normalize"), i, c)
	    expect(asp_path_normalize(str(c, 0)), str(c, 1));
	table_maps(json_object_get(root, "maps"));
	json_array_foreach(json_object_get(root, "bad"), i, c)
	{
		asp_workspace *w = NULL;
		asp_error err;
		CU_ASSERT_EQUAL(asp_workspace_new(json_string_value(json_object_get(c, "local")),
		                                  json_string_value(json_object_get(c, "sandbox")),
		                                  &w, &err),
		                ASP_E_INVALID_ARGUMENT);
		CU_ASSERT_PTR_NOT_NULL(
		    strstr(err.message, json_string_value(json_object_get(c, "message"))));
	}
	table_from_config(json_object_get(root, "from_config"));
	json_decref(root);
}

int main(int argc, char **argv)
{
	cases_path = argc > 1 ? argv[1] : NULL;
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("workspace", NULL, NULL);
	CU_add_test(s, "lexical normalisation", test_normalize);
	CU_add_test(s, "harness paths onto the sandbox and back", test_to_sandbox);
	CU_add_test(s, "/ as either side", test_roots);
	CU_add_test(s, "nested directories are not mapped twice", test_nested);
	CU_add_test(s, "relative or missing directories are refused", test_bad);
	CU_add_test(s, "defaults from the config", test_from_config);
	if (cases_path)
		CU_add_test(s, "the shared table (tests/vectors/workspace)", test_table);
	/* every test, or the suites and tests named after argv[1] */
	unsigned failed = (unsigned)cu_run(argc - 1, argv + 1);
	return failed ? 1 : 0;
}
