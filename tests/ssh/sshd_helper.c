/*
 * Gives a script an sshd (the MCP Node test, tests/sdkgen/new_op.sh, the terminal tests
 * in tests/cli): starts the fixture (sshd_fixture.c), writes an .asp.json for it in native
 * mode with the given cwd, prints "ready" on stdout, and stops sshd when its stdin reaches
 * EOF (the test ended or died). A line "kill-sessions" on stdin SIGKILLs every connection's
 * server process (the link dies as if the sandbox did) and answers "killed N".
 * usage: sshd_helper CONFIG_OUT CWD [--agent PATH] [--dropbear] [--root-login]
 *                    [--port-file FILE] [--listen ADDR]
 *   --agent PATH      agent mode: the config runs PATH --stdio over the connection
 *   --dropbear        Dropbear instead of OpenSSH (logging in as root)
 *   --root-login      as the real root with its own startup files (sshd_start_root_login)
 *   --port-file FILE  also write "PORT USER CLIENT_KEY KNOWN_HOSTS" there (for ssh(1))
 *   --listen ADDR     listen on that IPv4 address, not 127.0.0.1 (a test's own interface)
 *   --no-tar          OpenSSH whose commands find no tar (sshd_start_no_tar): trees over SFTP
 */
#include "sshd_fixture.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *agent = NULL, *port_file = NULL, *listen = NULL;
	bool dropbear = false, root_login = false, no_tar = false, bad = argc < 3;
	for (int i = 3; i < argc && !bad; i++) {
		if (strcmp(argv[i], "--agent") == 0 && i + 1 < argc)
			agent = argv[++i];
		else if (strcmp(argv[i], "--port-file") == 0 && i + 1 < argc)
			port_file = argv[++i];
		else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
			listen = argv[++i];
		else if (strcmp(argv[i], "--dropbear") == 0)
			dropbear = true;
		else if (strcmp(argv[i], "--root-login") == 0)
			root_login = true;
		else if (strcmp(argv[i], "--no-tar") == 0)
			no_tar = true;
		else
			bad = true;
	}
	if (bad) {
		fprintf(stderr, "usage: sshd_helper CONFIG_OUT CWD [--agent PATH] [--dropbear] "
		                "[--root-login] [--port-file FILE] [--listen ADDR] [--no-tar]\n");
		return 2;
	}
	sshd_fixture fx;
	memset(&fx, 0, sizeof fx);
	int started = root_login ? sshd_start_root_login(&fx, dropbear)
	              : listen   ? sshd_start_listen(&fx, listen, dropbear)
	              : dropbear ? dropbear_start(&fx, false)
	              : no_tar   ? sshd_start_no_tar(&fx)
	                         : sshd_start(&fx);
	if (started != 0) {
		fprintf(stderr, "sshd_helper: %s\n", fx.why);
		return 1;
	}
	char text[4096];
	sshd_config_json(&fx, agent, NULL, text, sizeof text);
	if (port_file) {
		FILE *pf = fopen(port_file, "w");
		if (!pf ||
		    fprintf(pf, "%u %s %s %s\n", fx.port, fx.user, fx.client_key, fx.known_hosts) <
		        0 ||
		    fclose(pf) != 0) {
			fprintf(stderr, "sshd_helper: cannot write %s\n", port_file);
			sshd_stop(&fx);
			return 1;
		}
	}
	json_t *cfg = json_loads(text, 0, NULL);
	int rc = 1;
	if (cfg && json_object_set_new(cfg, "cwd", json_string(argv[2])) == 0 &&
	    json_dump_file(cfg, argv[1], JSON_INDENT(2)) == 0) {
		printf("ready\n");
		fflush(stdout);
		/* "kill-sessions" on stdin SIGKILLs the server's connections (a dead link) */
		char line[256];
		while (fgets(line, sizeof line, stdin)) {
			if (strcmp(line, "kill-sessions\n") == 0) {
				printf("killed %d\n", sshd_kill_sessions(&fx));
				fflush(stdout);
			}
		}
		rc = 0;
	} else {
		fprintf(stderr, "sshd_helper: cannot write %s\n", argv[1]);
	}
	json_decref(cfg);
	sshd_stop(&fx);
	return rc;
}
