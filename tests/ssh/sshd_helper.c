/*
 * Gives a script an sshd (the MCP Node test, tests/sdkgen/new_op.sh): starts the fixture
 * (sshd_fixture.c), writes an .asp.json for it in native mode with the given cwd, prints
 * "ready" on stdout, and stops sshd when its stdin reaches EOF (the test ended or died).
 * usage: sshd_helper CONFIG_OUT CWD
 */
#include "sshd_fixture.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: sshd_helper CONFIG_OUT CWD\n");
		return 2;
	}
	sshd_fixture fx;
	memset(&fx, 0, sizeof fx);
	if (sshd_start(&fx) != 0) {
		fprintf(stderr, "sshd_helper: %s\n", fx.why);
		return 1;
	}
	char text[4096];
	sshd_config_json(&fx, NULL, NULL, text, sizeof text);
	json_t *cfg = json_loads(text, 0, NULL);
	int rc = 1;
	if (cfg && json_object_set_new(cfg, "cwd", json_string(argv[2])) == 0 &&
	    json_dump_file(cfg, argv[1], JSON_INDENT(2)) == 0) {
		printf("ready\n");
		fflush(stdout);
		char buf[256];
		while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
		}
		rc = 0;
	} else {
		fprintf(stderr, "sshd_helper: cannot write %s\n", argv[1]);
	}
	json_decref(cfg);
	sshd_stop(&fx);
	return rc;
}
