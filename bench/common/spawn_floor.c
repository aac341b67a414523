/* The spawn floors of spawn_floor.h. */
#include "spawn_floor.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void fail(const char *what)
{
	perror(what);
	exit(1);
}

void spawn_floor_true(void)
{
	char *argv[] = {"true", NULL};
	pid_t pid;
	if (posix_spawnp(&pid, "true", NULL, NULL, argv, environ) != 0)
		fail("posix_spawnp true");
	waitpid(pid, NULL, 0);
}

void spawn_start_floor_true(void)
{
	int in[2], out[2], errp[2];
	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC))
		fail("pipe2");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
	posix_spawnattr_t attr;
	posix_spawnattr_init(&attr);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
	char *argv[] = {"true", NULL};
	pid_t pid;
	if (posix_spawnp(&pid, "true", &fa, &attr, argv, environ) != 0)
		fail("posix_spawnp true");
	close(in[0]);
	close(in[1]); /* no stdin: EOF at once */
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd pfd[3] = {{out[0], POLLIN, 0}, {errp[0], POLLIN, 0}, {pidfd, POLLIN, 0}};
	char buf[256];
	while (pidfd >= 0 && !pfd[2].revents && poll(pfd, 3, -1) >= 0)
		for (int i = 0; i < 2; i++)
			if (pfd[i].revents && read(pfd[i].fd, buf, sizeof buf) <= 0)
				pfd[i].fd = -1;
	close(out[1]);
	close(errp[1]);
	while (read(out[0], buf, sizeof buf) > 0)
		;
	while (read(errp[0], buf, sizeof buf) > 0)
		;
	waitpid(pid, NULL, 0);
	close(out[0]);
	close(errp[0]);
	if (pidfd >= 0)
		close(pidfd);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
}

void spawn_relay_start(spawn_relay *r)
{
	int req[2], ans[2];
	if (pipe2(req, O_CLOEXEC) || pipe2(ans, O_CLOEXEC))
		fail("pipe2");
	pid_t pid = fork();
	if (pid < 0)
		fail("fork");
	if (pid == 0) {
		close(req[1]);
		close(ans[0]);
		char b;
		while (read(req[0], &b, 1) == 1) {
			spawn_start_floor_true();
			if (write(ans[1], &b, 1) != 1)
				break;
		}
		_exit(0);
	}
	close(req[0]);
	close(ans[1]);
	r->pid = pid;
	r->to = req[1];
	r->from = ans[0];
}

void spawn_relay_true(spawn_relay *r)
{
	char b = 'x';
	if (write(r->to, &b, 1) != 1 || read(r->from, &b, 1) != 1)
		fail("the relay floor's process");
}

void spawn_relay_stop(spawn_relay *r)
{
	close(r->to); /* its read sees EOF: it exits */
	close(r->from);
	waitpid(r->pid, NULL, 0);
}
