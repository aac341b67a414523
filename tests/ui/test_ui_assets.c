/*
 * asp ui's assets as a build without npm makes them (tests/ui/meson.build runs
 * web/xterm/fetch.sh with no npm on its PATH): the terminal is unavailable, the reason is
 * the build's, and the page still loads the stub as a script without an error.
 */
#include "ui.h"

#include <CUnit/Basic.h>
#include <string.h>

static void test_terminal_unavailable(void)
{
	const char *why = "unset";
	CU_ASSERT_FALSE(ui_terminal_built(&why));
	CU_ASSERT_PTR_NOT_NULL_FATAL(why);
	CU_ASSERT_STRING_EQUAL(why, "npm was not found when asp was built");
}

static void test_stub_served(void)
{
	static const char *const paths[] = {"/xterm/xterm.js", "/xterm/xterm.css",
	                                    "/xterm/addon-fit.js"};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		const ui_asset *a = ui_asset_find(paths[i]);
		CU_ASSERT_PTR_NOT_NULL_FATAL(a);
		/* one comment: nothing that runs, nothing that fails to parse */
		CU_ASSERT(a->len > 4 && !strncmp(a->data, "/* ", 3));
		CU_ASSERT(!strncmp(a->data + a->len - 4, " */\n", 4));
		CU_ASSERT_PTR_NULL(memchr(a->data, '\n', a->len - 1));
	}
	/* the page itself is the same as in any build */
	const ui_asset *page = ui_asset_find("/");
	CU_ASSERT_PTR_NOT_NULL_FATAL(page);
	CU_ASSERT_PTR_NOT_NULL(strstr(page->data, "/xterm/xterm.js"));
}

int main(void)
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("ui assets without npm", NULL, NULL);
	CU_add_test(s, "the terminal is unavailable, with the build's reason",
	            test_terminal_unavailable);
	CU_add_test(s, "the stub is served in xterm.js's place", test_stub_served);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
