/* Runs registered CUnit tests, all or by name (see cu_run.h). */
#include "cu_run.h"

#include <CUnit/Basic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/*
 * Runs the suite or every test called `name`, or with "SUITE/TEST" that one test; adds the
 * failures to *failures (each run resets CUnit's counts). False when there is none.
 */
static bool run_name(const char *name, unsigned *failures)
{
	bool found = false;
	const char *slash = strchr(name, '/');
	size_t suite_len = slash ? (size_t)(slash - name) : 0;
	for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext) {
		if (slash && (strlen(s->pName) != suite_len || strncmp(s->pName, name, suite_len)))
			continue;
		if (!slash && strcmp(s->pName, name) == 0) {
			CU_basic_run_suite(s);
			*failures += CU_get_number_of_failures() + CU_get_number_of_suites_failed();
			return true;
		}
		CU_pTest t = CU_get_test(s, slash ? slash + 1 : name);
		if (t) {
			CU_basic_run_test(s, t);
			*failures += CU_get_number_of_failures() + CU_get_number_of_suites_failed();
			found = true;
		}
	}
	return found;
}

int cu_run(int argc, char **argv)
{
	CU_basic_set_mode(CU_BRM_VERBOSE);
	bool unknown = false;
	unsigned failures = 0;
	if (argc > 1) {
		for (int i = 1; i < argc; i++) {
			if (!run_name(argv[i], &failures)) {
				fprintf(stderr, "no suite or test called %s\n", argv[i]);
				unknown = true;
			}
		}
	} else {
		CU_basic_run_tests();
		failures = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
	}
	CU_cleanup_registry();
	return unknown || failures ? 1 : 0;
}
