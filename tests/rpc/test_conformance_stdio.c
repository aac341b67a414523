/*
 * The conformance table over the stdio transport: the RPC engine driving a real
 * asp-agent child ($ASP_AGENT, suite "stdio"), and the static build ($ASP_AGENT_STATIC,
 * suite "stdio_static") when it was built.
 */
#include "asp/transport.h"
#include "conformance.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct backend {
	const char *argv[3];
	asp_config_view view;
	const asp_transport *t;
	const asp_ops *ops;
	void *self;
} backend;

static int open_backend(backend *b, const char *agent)
{
	b->argv[0] = agent;
	b->argv[1] = "--stdio";
	b->argv[2] = NULL;
	memset(&b->view, 0, sizeof b->view);
	b->view.transport = ASP_TRANSPORT_STDIO;
	b->view.stdio.argv = b->argv;
	b->view.stdio.argc = 2;
	b->t = asp_transport_find(ASP_TRANSPORT_STDIO);
	asp_error err;
	if (!b->t || b->t->open(&b->view, &b->ops, &b->self, &err)) {
		fprintf(stderr, "stdio transport: %s\n", b->t ? err.message : "not built");
		return -1;
	}
	return 0;
}

int main(void)
{
	const char *agent = getenv("ASP_AGENT"), *agent_static = getenv("ASP_AGENT_STATIC");
	if (!agent || !agent[0]) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	backend dyn, sta;
	bool have_static = agent_static && agent_static[0];
	if (open_backend(&dyn, agent) < 0 || (have_static && open_backend(&sta, agent_static) < 0))
		return 1;
	if (CU_initialize_registry() != CUE_SUCCESS ||
	    conf_register_cunit("stdio", dyn.ops, dyn.self, "/tmp") < 0 ||
	    (have_static && conf_register_cunit("stdio_static", sta.ops, sta.self, "/tmp") < 0))
		return 1;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures();
	CU_cleanup_registry();
	dyn.t->close(dyn.self);
	if (have_static)
		sta.t->close(sta.self);
	return failed ? 1 : 0;
}
