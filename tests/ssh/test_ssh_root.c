/*
 * The conformance table against servers that log in as the real root, with root's own
 * login shell and startup files (sshd_start_root_login): OpenSSH and Dropbear, native
 * and agent mode, each through a client (a dropped connection fails the case in flight,
 * the next reconnects). The servers start as a script's background job starts them (SIGINT
 * and SIGQUIT ignored), so what a sandbox run that way gives its commands is tested too.
 *
 *   test_ssh_root                  run everything
 *   test_ssh_root NAME...          run only the named suites or tests
 *   ASP_TEST_ONLY=WORD             only the cases whose names contain WORD, as a table
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "asp_ssh.h"
#include "conformance.h"
#include "sshd_fixture.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OPENSSH, DROPBEAR, NSERVERS };

static sshd_fixture fxs[NSERVERS];

/*
 * Each registration goes through a client, as a harness would use it: a connection the
 * server dropped fails the case in flight, and the next case reconnects.
 */
typedef struct backend {
	asp_config *cfg;
	asp_client *c;
} backend;

static backend natives[NSERVERS], agents[NSERVERS];

static asp_status open_backend(backend *b, const sshd_fixture *fx, const char *agent,
                               asp_error *err)
{
	memset(b, 0, sizeof *b);
	char json[4096];
	/* root's startup files may take seconds on a loaded machine: spawn waits this long
	 * for the login shell to start the command */
	sshd_config_json(fx, agent, "\"connect_timeout_ms\": 30000", json, sizeof json);
	asp_status st = asp_config_parse(json, strlen(json), NULL, &b->cfg, err);
	if (st == ASP_OK)
		st = asp_client_open_view(asp_config_get(b->cfg), &b->c, err);
	if (st != ASP_OK) {
		asp_config_free(b->cfg);
		b->cfg = NULL;
	}
	return st;
}

static void close_backend(backend *b)
{
	asp_client_free(b->c);
	asp_config_free(b->cfg);
	memset(b, 0, sizeof *b);
}

static void stop_all(void)
{
	for (int i = 0; i < NSERVERS; i++) {
		close_backend(&agents[i]);
		close_backend(&natives[i]);
		sshd_stop(&fxs[i]);
	}
}

static int run_named(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		bool found = false;
		for (CU_pSuite s = CU_get_registry()->pSuite; s && !found; s = s->pNext) {
			CU_pTest t =
			    strcmp(s->pName, argv[i]) == 0 ? NULL : CU_get_test(s, argv[i]);
			if (!t && strcmp(s->pName, argv[i]) != 0)
				continue;
			if (t)
				CU_basic_run_test(s, t);
			else
				CU_basic_run_suite(s);
			found = true;
		}
		if (!found) {
			fprintf(stderr, "no test called %s\n", argv[i]);
			return -1;
		}
	}
	return 0;
}

/* A server's own word on a dropped connection (its log goes with the folder). */
static void dump_logs(void)
{
	for (int i = 0; i < NSERVERS; i++) {
		FILE *f = fopen(fxs[i].log, "r");
		char line[2048];
		while (f && fgets(line, sizeof line, f))
			fprintf(stderr, "%s: %s", i == DROPBEAR ? "dropbear" : "sshd", line);
		if (f)
			fclose(f);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	asp_transport_register(&asp_transport_ssh, NULL);
	const char *agent = getenv("ASP_AGENT");
	if (!agent) {
		fprintf(stderr, "test_ssh_root: ASP_AGENT (the built asp-agent) is not set\n");
		return 1;
	}
	for (int i = 0; i < NSERVERS; i++) {
		asp_error err;
		if (sshd_start_root_login(&fxs[i], i == DROPBEAR) < 0) {
			fprintf(stderr, "test_ssh_root: %s\n", fxs[i].why);
			stop_all();
			return 1; /* no skipping: CI runs as root */
		}
		if (open_backend(&natives[i], &fxs[i], NULL, &err) != ASP_OK ||
		    open_backend(&agents[i], &fxs[i], agent, &err) != ASP_OK) {
			fprintf(stderr, "test_ssh_root: %s, %s mode: %s\n(log %s)\n",
			        i == DROPBEAR ? "Dropbear" : "OpenSSH",
			        natives[i].c ? "agent" : "native", err.message, fxs[i].log);
			stop_all();
			return 1;
		}
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	const conf_streaming *st = &conf_client_streaming;
	const char *only = getenv("ASP_TEST_ONLY");
	if (only) {
		int f = 0;
		for (int i = 0; i < NSERVERS; i++) {
			f += conf_run_filtered_st(&conf_client_ops, natives[i].c, st, "/tmp", only,
			                          stdout);
			f += conf_run_filtered_st(&conf_client_ops, agents[i].c, st, "/tmp", only,
			                          stdout);
		}
		if (f)
			dump_logs();
		stop_all();
		return f ? 1 : 0;
	}
	static const char *const names[NSERVERS][2] = {
	    {"root_openssh_native", "root_openssh_agent"},
	    {"root_dropbear_native", "root_dropbear_agent"},
	};
	bool ok = true;
	for (int i = 0; i < NSERVERS && ok; i++)
		ok = conf_register_cunit_st(names[i][0], &conf_client_ops, natives[i].c, st,
		                            "/tmp") == 0 &&
		     conf_register_cunit_st(names[i][1], &conf_client_ops, agents[i].c, st,
		                            "/tmp") == 0;
	if (!ok) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		return 2;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	int rc = argc > 1 ? run_named(argc, argv) : (CU_basic_run_tests(), 0);
	unsigned failures = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	if (rc < 0 || failures)
		dump_logs();
	stop_all();
	return rc < 0 || failures ? 1 : 0;
}
