/*
 * Native SSH trees in a sandbox without tar (sshd_start_no_tar: no tar in any command's
 * PATH): tree_write and tree_read go over SFTP, and the conformance table's tree cases,
 * hostile streams and cut ones included, pass there as they do with tar. A case that
 * says n/a fails here: the point is that nothing falls back to "unsupported".
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "asp_ssh.h"
#include "conformance.h"
#include "ssh_backend.h"
#include "sshd_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int count(const char *s, const char *word)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, word)); p += strlen(word))
		n++;
	return n;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	sshd_fixture fx;
	if (sshd_start_no_tar(&fx) < 0) {
		fprintf(stderr, "test_ssh_notar: %s\n", fx.why);
		sshd_stop(&fx);
		return 1;
	}
	asp_transport_register(&asp_transport_ssh, NULL);
	ssh_backend b;
	asp_error err;
	int rc = 1;
	if (ssh_backend_open(&b, &fx, NULL, NULL, &err) != ASP_OK) {
		fprintf(stderr, "test_ssh_notar: native mode: %s\n", err.message);
		goto out;
	}
	/* the fixture does what it says: no tar for a command */
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "command -v tar || echo none";
	asp_exec_result er;
	asp_arena *a = asp_arena_new();
	if (b.ops->exec(b.self, &ep, &er, a, &err) != ASP_OK || er.stdout_data.len < 4 ||
	    memcmp(er.stdout_data.data, "none", 4) != 0) {
		fprintf(stderr, "test_ssh_notar: the sandbox still finds tar (%.*s)\n",
		        (int)er.stdout_data.len, (const char *)er.stdout_data.data);
		asp_arena_free(a);
		goto out;
	}
	asp_arena_free(a);
	static conf_streaming st;
	conf_transport_streaming(&st, &asp_transport_ssh);
	char *report = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&report, &len);
	if (!mem)
		goto out;
	int failed = conf_run_filtered_st(b.ops, b.self, &st, "/tmp", "tree_", mem);
	fclose(mem);
	fputs(report, stdout);
	int passed = count(report, "PASS  tree_"), na = count(report, "n/a   tree_");
	if (failed || na || passed < 7)
		fprintf(stderr, "test_ssh_notar: %d failed, %d n/a, %d passed (7 wanted)\n", failed,
		        na, passed);
	else
		rc = 0;
	free(report);
out:
	ssh_backend_close(&b);
	sshd_stop(&fx);
	return rc;
}
