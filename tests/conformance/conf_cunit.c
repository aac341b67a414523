/* The conformance table as a CUnit suite: one registration per transport. */
#include "conformance.h"

#include <CUnit/CUnit.h>
#include <CUnit/TestRun.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_REGS 16

/* CUnit test and init functions take no argument: find the registration by suite. */
struct reg {
	CU_pSuite suite;
	const asp_ops *ops;
	void *self;
	const conf_streaming *st;
	char parent[1024];
	char *root;
	asp_arena *a;
};

static struct reg regs[MAX_REGS];
static size_t nregs;

static struct reg *current(void)
{
	CU_pSuite s = CU_get_current_suite();
	for (size_t i = 0; i < nregs; i++) {
		if (regs[i].suite == s)
			return &regs[i];
	}
	return NULL;
}

/* mkdtemp through the ops: a fresh 0700 directory with a unique name. */
static int suite_init(void)
{
	struct reg *r = current();
	if (!r || !(r->a = asp_arena_new()))
		return -1;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	size_t n = strlen(r->parent) + 64;
	r->root = malloc(n);
	if (!r->root)
		return -1;
	for (int i = 0; i < 100; i++) {
		snprintf(r->root, n, "%s/asp-conf-%ld-%lx-%d", r->parent, (long)getpid(),
		         (unsigned long)ts.tv_nsec, i);
		asp_mkdir_params p;
		asp_mkdir_params_init(&p);
		p.path = r->root;
		p.mode = 0700;
		asp_mkdir_result res;
		asp_error err;
		asp_status st = r->ops->mkdir(r->self, &p, &res, r->a, &err);
		if (st == ASP_OK)
			return 0;
		if (st != ASP_E_ALREADY_EXISTS) {
			fprintf(stderr, "conformance: cannot create %s: %s\n", r->root,
			        err.message);
			break;
		}
	}
	free(r->root);
	r->root = NULL;
	return -1;
}

static int suite_clean(void)
{
	struct reg *r = current();
	if (!r)
		return -1;
	int rc = 0;
	if (r->root) {
		asp_remove_params p;
		asp_remove_params_init(&p);
		p.path = r->root;
		p.recursive = true;
		asp_remove_result res;
		asp_error err;
		if (r->ops->remove(r->self, &p, &res, r->a, &err) != ASP_OK) {
			fprintf(stderr, "conformance: cannot remove %s: %s\n", r->root,
			        err.message);
			rc = -1;
		}
	}
	free(r->root);
	r->root = NULL;
	asp_arena_free(r->a);
	r->a = NULL;
	return rc;
}

static void run_case(void)
{
	struct reg *r = current();
	CU_pTest t = CU_get_current_test();
	const conf_case *c = r && t ? conf_find(t->pName) : NULL;
	if (!c || !r->root) {
		CU_FAIL("conformance: no registration or scratch directory for this test");
		return;
	}
	conf_outcome o;
	conf_run_case_st(c, r->ops, r->self, r->st, r->root, &o);
	if (o.skipped)
		fprintf(stderr, "\n    %s: %s\n", o.na ? "n/a" : "skipped", o.msg);
	CU_assertImplementation(o.passed ? CU_TRUE : CU_FALSE,
	                        o.passed ? (unsigned)__LINE__ : (unsigned)o.line,
	                        o.passed ? "case passed" : o.msg,
	                        o.passed || !o.file ? __FILE__ : o.file, "", CU_FALSE);
}

int conf_register_cunit(const char *suite, const asp_ops *ops, void *self, const char *parent)
{
	return conf_register_cunit_st(suite, ops, self, NULL, parent);
}

int conf_register_cunit_st(const char *suite, const asp_ops *ops, void *self,
                           const conf_streaming *st, const char *parent)
{
	if (nregs == MAX_REGS)
		return -1;
	struct reg *r = &regs[nregs];
	memset(r, 0, sizeof *r);
	r->ops = ops;
	r->self = self;
	r->st = st;
	if (strlen(parent) >= sizeof r->parent)
		return -1;
	strcpy(r->parent, parent);
	r->suite = CU_add_suite(suite, suite_init, suite_clean);
	if (!r->suite)
		return -1;
	for (size_t i = 0; i < conf_case_count; i++) {
		if (!CU_add_test(r->suite, conf_cases[i].name, run_case))
			return -1;
	}
	nregs++;
	return 0;
}
