/*
 * The other end of asp_unix.c: listens on a Unix socket and runs `AGENT --stdio` on
 * each connection, the socket as its stdin and stdout (asp-agent serves a socket as it
 * serves pipes). Returns once the socket listens, printing the listener's pid, so a
 * script can connect at once and stop it later.
 *
 *   cc -o serve_unix serve_unix.c
 *   pid=$(./serve_unix /tmp/asp.sock /usr/local/bin/asp-agent)
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: serve_unix SOCKET AGENT\n");
		return 2;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(argv[1]) >= sizeof sa.sun_path) {
		fprintf(stderr, "serve_unix: socket path too long\n");
		return 2;
	}
	memcpy(sa.sun_path, argv[1], strlen(argv[1]) + 1);
	int ls = socket(AF_UNIX, SOCK_STREAM, 0);
	unlink(argv[1]);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 16) < 0) {
		perror("serve_unix: listening");
		return 1;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("serve_unix: fork");
		return 1;
	}
	if (pid > 0) { /* listening already: the caller may connect as soon as we return */
		printf("%ld\n", (long)pid);
		return 0;
	}
	/* The daemon: stdout must not keep the caller's pipe open. */
	int null = open("/dev/null", O_WRONLY);
	if (null >= 0) {
		dup2(null, STDOUT_FILENO);
		close(null);
	}
	signal(SIGCHLD, SIG_IGN); /* agents are reaped by the kernel */
	for (;;) {
		int c = accept(ls, NULL, NULL);
		if (c < 0)
			continue;
		if (fork() == 0) {
			close(ls);
			signal(SIGCHLD, SIG_DFL);
			dup2(c, STDIN_FILENO);
			dup2(c, STDOUT_FILENO);
			if (c > STDOUT_FILENO)
				close(c);
			execl(argv[2], argv[2], "--stdio", (char *)NULL);
			perror("serve_unix: exec");
			_exit(127);
		}
		close(c);
	}
}
