/*
 * Test helper: a real `asp-agent --listen` child ($ASP_AGENT) on a free loopback port,
 * its stderr in a file, its URL read from the "listening on URL" line it prints.
 */
#ifndef ASP_TEST_LISTENER_H
#define ASP_TEST_LISTENER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct listener {
	pid_t pid;
	char url[256]; /* "http://127.0.0.1:PORT" (or https, or http+unix:PATH) */
	int port;
	char log[128]; /* its stderr */
} listener;

/*
 * Starts $ASP_AGENT --listen ADDR followed by `args` (NULL-terminated, may be NULL), with
 * the environment minus ASP_TOKEN plus `token` as ASP_TOKEN when non-NULL. Waits up to
 * 10 s for the listening line. 0, or -1 (the agent exited or never said it; its log is
 * printed).
 */
int listener_start(listener *l, const char *addr, const char *const *args, const char *token);

/* Starts it and waits for its exit instead (a refused start): the exit status, or -1. */
int listener_run_to_exit(listener *l, const char *addr, const char *const *args, const char *token,
                         int wait_ms);

/* Sends `sig` and waits up to `ms` for the exit (then SIGKILL): the wait status or -1. */
int listener_stop(listener *l, int sig, int ms);

/* The agent's stderr so far (malloc'd, NUL-terminated; "" when unreadable). */
char *listener_log_text(const listener *l);

/* A scratch directory made for this test run (mkdtemp), removed by rm -rf at exit. */
const char *test_tmpdir(void);

/* Runs `cmd` with /bin/sh; its exit status (-1 when it could not run). */
int test_sh(const char *cmd);

#endif
