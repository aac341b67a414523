/*
 * Starting a command born in a cgroup of its own: clone3 with CLONE_VM | CLONE_VFORK |
 * CLONE_INTO_CGROUP, as posix_spawn would start it otherwise (glibc 2.36 has neither
 * posix_spawnattr_setcgroup_np nor a public clone3). The child runs on a stack of its
 * own and makes only system calls until execve; the caller is suspended meanwhile.
 */
#ifndef ASP_LOCAL_CLONE_INTO_H
#define ASP_LOCAL_CLONE_INTO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct local_clone_spec {
	char *const *progs; /* paths tried in turn, as execvp does with PATH; NULL-ended */
	char *const *argv;
	char *const *envp;
	const char *cwd;  /* NULL: ours */
	int fds[3];       /* become the child's 0, 1, 2 (all > 2) */
	bool ctty;        /* fd 0 (a terminal) becomes its controlling terminal */
	const int *deflt; /* signals set to SIG_DFL whatever their disposition */
	size_t ndeflt;
} local_clone_spec;

/* Whether this build can start a child this way (x86_64 Linux); posix_spawn elsewhere. */
bool local_clone_available(void);

/*
 * Starts the child in the cgroup open at `cg_fd` (O_PATH of its directory): its own
 * session, the signal mask empty, handlers reset, fds from 3 up closed. Returns 0 with
 * *pid and *pidfd (its pidfd, close-on-exec, the caller's to close); the errno of a
 * failed chdir or exec (the child reaped, as posix_spawn reports it); or, with
 * *clone_failed set, the errno of clone3 itself (nothing started). *pidfd is -1 unless
 * it returns 0.
 */
int local_clone_spawn(int cg_fd, const local_clone_spec *s, pid_t *pid, int *pidfd,
                      bool *clone_failed);

#endif
