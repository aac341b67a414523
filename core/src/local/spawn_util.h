/*
 * Starting a child for exec (and later spawn): its own session and process group, three
 * pipes, the cwd and env of the request. No global state: no SIGCHLD handler, no
 * waitpid(-1); each caller reaps exactly its own child, so many threads may run children
 * at once.
 */
#ifndef ASP_LOCAL_SPAWN_UTIL_H
#define ASP_LOCAL_SPAWN_UTIL_H

#include "asp/proto.h"
#include "asp/server.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct local_child_spec {
	const char *op;      /* "exec", "spawn": starts error messages */
	const char *command; /* runs as /bin/sh -c command; or NULL and argv */
	bool has_argv;
	asp_strv argv;   /* argv[0] found through PATH (the request's PATH if env sets one) */
	const char *cwd; /* NULL: the responder's */
	bool has_env;
	asp_strmap env; /* added to the responder's environment, overriding same names */
	/* keep our copies of stdout's and stderr's write ends (out_w, err_w) until
	 * local_child_release_outputs, so their EOF comes only after that */
	bool hold_outputs;
	/* NULL, or a pseudo-terminal of this size for stdin, stdout and stderr, which is also
	 * the child's controlling terminal; TERM is set to its term (hold_outputs unused) */
	const asp_tty *tty;
} local_child_spec;

typedef struct local_child {
	pid_t pid;    /* also its session and process group id */
	uint64_t job; /* its environment's ASP_JOB=<our pid>.<job> marks all it starts */
	int pidfd;    /* readable once the child exited; -1 where the kernel has no pidfd */
	int in_fd;    /* write end of its stdin (close-on-exec, blocking); tty: the master */
	int out_fd;   /* read end of its stdout (close-on-exec, blocking); tty: the master
	               * again (a dup, non-blocking: one open file for both) */
	int err_fd;   /* read end of its stderr (close-on-exec, blocking); tty: -1 */
	int out_w;    /* with hold_outputs: our copy of stdout's write end, else -1 */
	int err_w;    /* the same for stderr */
	unsigned cg;  /* the job cgroup it was born in (cgroup.h), 0 for none */
	bool tty;     /* it runs on a pseudo-terminal (in_fd, out_fd: its master) */
} local_child;

/*
 * Validates the spec (exactly one of command and argv, a non-empty argv, env names
 * without '=') and starts the child. Errors: invalid_argument; not_found for a missing
 * program or cwd; not_a_directory for a cwd that is not one; permission_denied; io_error.
 * On failure nothing is left open and *c holds -1s.
 */
asp_status local_child_start(const local_child_spec *s, local_child *c, asp_error *err);

/*
 * True once the child has exited. It is not reaped, so its pid (and so its process
 * group id) cannot be reused until local_child_reap: signalling the group stays safe.
 */
bool local_child_exited(const local_child *c);

/* Reaps the child (blocking until it exits). Returns its wait status, or -1 if it was
 * reaped elsewhere (SIGCHLD ignored). Closes the pidfd. */
int local_child_reap(local_child *c);

/* Sends `sig` to the child's whole process group. Only before local_child_reap. */
void local_child_signal_group(const local_child *c, int sig);

/*
 * Sends `sig` to the group and to every process whose environment still holds the
 * child's ASP_JOB marker: descendants that left the group (setsid, double fork) too.
 * With SIGKILL it repeats until none is found (a forking process cannot outrun it for
 * long), and first kills the child's job cgroup (everything it started, markers or
 * not) while it is not reaped. Safe after local_child_reap: the marker, unlike a pid, is
 * never reused.
 */
void local_child_signal_tree(const local_child *c, int sig);

/* asp_local_reaper_run, _stop and _finish are in asp/server.h. */

/* The calling thread's asp_local_watch_input, or NULL (none, or it has fired). */
const asp_local_watch *local_watch_current(void);

/* The calling thread's watch has fired: local_watch_current is NULL from now on. */
void local_watch_clear(void);

/* " (...)": what to raise when fork or pthread_create fails with EAGAIN, for a message. */
const char *local_task_limit_hint(void);

/*
 * Closes out_w and err_w (hold_outputs): once the child has exited, or to see EOF on its
 * output when the exit cannot be watched. Idempotent.
 */
void local_child_release_outputs(local_child *c);

/* Closes whichever of the child's fds are still open. Idempotent. */
void local_child_close(local_child *c);

/* "KILL", "TERM", ... without the SIG prefix; "RTMIN+n" or the number for others. */
const char *local_signal_name(int sig, char buf[16]);

/* The number of a signal named as local_signal_name does (with or without "SIG"), or 0. */
int local_signal_number(const char *name);

/*
 * Writing to a pipe whose reader exited raises SIGPIPE, which would kill a host process
 * that has not ignored it. on blocks it in this thread while feeding a child's stdin;
 * off (with `epipe`: a write failed with EPIPE) takes back a SIGPIPE we caused, then
 * restores the mask.
 */
typedef struct local_pipe_guard {
	bool active, was_pending;
	sigset_t old;
} local_pipe_guard;

void local_pipe_guard_on(local_pipe_guard *g);
void local_pipe_guard_off(local_pipe_guard *g, bool epipe);

#endif
