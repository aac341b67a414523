/* Test helper: asp-agent --listen children. */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char tmpdir[128];

static void rm_tmpdir(void)
{
	char cmd[200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (tmpdir[0] && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

const char *test_tmpdir(void)
{
	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof tmpdir, "/tmp/asp-http-test-XXXXXX");
		if (!mkdtemp(tmpdir)) {
			perror("mkdtemp");
			exit(1);
		}
		atexit(rm_tmpdir);
	}
	return tmpdir;
}

int test_sh(const char *cmd)
{
	int st = system(cmd);
	return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

char *listener_log_text(const listener *l)
{
	FILE *f = fopen(l->log, "r");
	char *buf = calloc(1, 65537);
	if (f && buf) {
		size_t n = fread(buf, 1, 65536, f);
		buf[n] = '\0';
	}
	if (f)
		fclose(f);
	return buf;
}

static int spawn(listener *l, const char *addr, const char *const *args, const char *token)
{
	static int seq;
	const char *agent = getenv("ASP_AGENT");
	if (!agent || !agent[0]) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return -1;
	}
	memset(l, 0, sizeof *l);
	snprintf(l->log, sizeof l->log, "%s/agent-%d-%d.log", test_tmpdir(), (int)getpid(), seq++);
	const char *argv[32] = {agent, "--listen", addr};
	int n = 3;
	for (int i = 0; args && args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	/* The environment without ASP_TOKEN, plus the one given. */
	size_t ne = 0;
	while (environ[ne])
		ne++;
	char **env = calloc(ne + 2, sizeof *env);
	char tok[4200];
	size_t k = 0;
	for (size_t i = 0; i < ne; i++)
		if (strncmp(environ[i], "ASP_TOKEN=", 10) != 0)
			env[k++] = environ[i];
	if (token) {
		snprintf(tok, sizeof tok, "ASP_TOKEN=%s", token);
		env[k++] = tok;
	}
	env[k] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, l->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int e = posix_spawn(&l->pid, agent, &fa, NULL, (char *const *)argv, env);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	if (e) {
		fprintf(stderr, "cannot run %s: %s\n", agent, strerror(e));
		return -1;
	}
	return 0;
}

int listener_start(listener *l, const char *addr, const char *const *args, const char *token)
{
	if (spawn(l, addr, args, token) < 0)
		return -1;
	for (int waited = 0; waited < 10000; waited += 10) {
		char *text = listener_log_text(l);
		char *p = text ? strstr(text, "listening on ") : NULL;
		if (p) {
			p += strlen("listening on ");
			size_t n = strcspn(p, " \n");
			snprintf(l->url, sizeof l->url, "%.*s", (int)n, p);
			const char *colon = strrchr(l->url, ':');
			l->port = colon ? atoi(colon + 1) : 0;
			free(text);
			return 0;
		}
		free(text);
		int st;
		if (waitpid(l->pid, &st, WNOHANG) == l->pid) {
			char *log = listener_log_text(l);
			fprintf(stderr, "asp-agent --listen %s exited: %s\n", addr, log ? log : "");
			free(log);
			l->pid = 0;
			return -1;
		}
		sleep_ms(10);
	}
	fprintf(stderr, "asp-agent --listen %s did not say it listens\n", addr);
	listener_stop(l, SIGKILL, 1000);
	return -1;
}

int listener_run_to_exit(listener *l, const char *addr, const char *const *args, const char *token,
                         int wait_ms)
{
	if (spawn(l, addr, args, token) < 0)
		return -1;
	for (int waited = 0; waited < wait_ms; waited += 10) {
		int st;
		if (waitpid(l->pid, &st, WNOHANG) == l->pid) {
			l->pid = 0;
			return st;
		}
		sleep_ms(10);
	}
	listener_stop(l, SIGKILL, 1000);
	return -1;
}

int listener_stop(listener *l, int sig, int ms)
{
	if (l->pid <= 0)
		return -1;
	kill(l->pid, sig);
	for (int waited = 0;; waited += 5) {
		int st;
		pid_t r = waitpid(l->pid, &st, WNOHANG);
		if (r == l->pid) {
			l->pid = 0;
			return st;
		}
		if (r < 0 && errno != EINTR) {
			l->pid = 0;
			return -1;
		}
		if (waited >= ms) {
			kill(l->pid, SIGKILL);
			waitpid(l->pid, &st, 0);
			l->pid = 0;
			return -1;
		}
		sleep_ms(5);
	}
}
