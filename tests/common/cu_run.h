/* Running a test program's registered CUnit tests, all or the ones named on its command line. */
#ifndef ASP_TEST_CU_RUN_H
#define ASP_TEST_CU_RUN_H

/*
 * Runs, verbosely, every registered test, or with arguments only the suites and tests they
 * name (a name may be a suite's, a test's in any suite, or SUITE/TEST), then cleans the
 * registry up.
 * 0 when everything run passed, 1 on a failure or a name that matches nothing.
 */
int cu_run(int argc, char **argv);

#endif
