/* Runs registered CUnit tests, all or by name (see cu_run.h). */
#include "cu_run.h"

#include <CUnit/Basic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Runs the suite or every test called `name`; false when there is none. */
static bool run_name(const char *name)
{
	bool found = false;
	for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext) {
		if (strcmp(s->pName, name) == 0) {
			CU_basic_run_suite(s);
			return true;
		}
		CU_pTest t = CU_get_test(s, name);
		if (t) {
			CU_basic_run_test(s, t);
			found = true;
		}
	}
	return found;
}

int cu_run(int argc, char **argv)
{
	CU_basic_set_mode(CU_BRM_VERBOSE);
	bool unknown = false;
	if (argc > 1) {
		for (int i = 1; i < argc; i++) {
			if (!run_name(argv[i])) {
				fprintf(stderr, "no suite or test called %s\n", argv[i]);
				unknown = true;
			}
		}
	} else {
		CU_basic_run_tests();
	}
	unsigned failures = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	return unknown || failures ? 1 : 0;
}
