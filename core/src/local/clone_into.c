/* clone3 into a cgroup, vfork-style: see clone_into.h. */
#include "clone_into.h"
#include "spare.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__linux__) && defined(__x86_64__)
#define HAVE_CLONE_INTO 1
/* The kernel's numbers and struct (a stable ABI), for C libraries without the headers. */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define ASP_CLONE_INTO_CGROUP 0x200000000ULL
#define ASP_CLONE_PIDFD       0x1000ULL

struct asp_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
	    set_tid_size, cgroup;
};
#endif

#ifdef HAVE_CLONE_INTO

/* The child shares our memory: no instrumentation that keeps state of its own there. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
#define CHILD_CODE __attribute__((no_sanitize("address", "undefined")))
#endif
#endif
#ifndef CHILD_CODE
#define CHILD_CODE
#endif

/* The kernel's struct sigaction (rt_sigaction), with its 64-bit mask. */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

#define KSIGSET_SIZE 8
#define NSIGNALS     64

struct child_arg {
	const local_clone_spec *s;
	int rtmin;        /* signals from 32 below it are the C library's own */
	volatile int err; /* written by the child before it exits: we share memory */
};

/* Only system calls from here to execve: the caller's thread is suspended meanwhile. */
CHILD_CODE __attribute__((noreturn)) static void child_fail(struct child_arg *a, int e)
{
	a->err = e ? e : ECHILD;
	for (;;)
		syscall(SYS_exit_group, 127);
}

CHILD_CODE static bool forced_default(const struct child_arg *a, int sig)
{
	const local_clone_spec *s = a->s;
	if (sig >= 32 && sig < a->rtmin)
		return true; /* the command's C library sets its own up: a fresh start */
	for (size_t i = 0; i < s->ndeflt; i++)
		if (s->deflt[i] == sig)
			return true;
	return false;
}

/* The hex mask after `key` ("\nSigCgt:\t") in /proc/PID/status text; all ones if none. */
CHILD_CODE static uint64_t status_mask(const char *buf, long n, const char *key, long klen)
{
	for (long i = 0; i + klen + 16 <= n; i++) {
		long k = 0;
		while (k < klen && buf[i + k] == key[k])
			k++;
		if (k < klen)
			continue;
		uint64_t m = 0;
		for (const char *h = buf + i + k, *end = h + 16; h < end; h++) {
			int d = *h >= '0' && *h <= '9'   ? *h - '0'
			        : *h >= 'a' && *h <= 'f' ? *h - 'a' + 10
			                                 : -1;
			if (d < 0)
				return ~(uint64_t)0;
			m = m << 4 | (uint64_t)d;
		}
		return m;
	}
	return ~(uint64_t)0;
}

/*
 * The signals this process catches and those it ignores (SigCgt, SigIgn in
 * /proc/self/status), or all ones when that cannot be read. The child has its own copy
 * of the handlers from clone3 on (no CLONE_SIGHAND), so what it reads is what it has:
 * three system calls instead of a query per signal (62 of them, most of the cost of
 * starting `true` in a VM).
 */
CHILD_CODE static void signal_masks(uint64_t *caught, uint64_t *ignored)
{
	static const char cgt[] = "\nSigCgt:\t", ign[] = "\nSigIgn:\t";
	char buf[4096];
	*caught = *ignored = ~(uint64_t)0;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	long n = syscall(SYS_read, fd, buf, sizeof buf);
	syscall(SYS_close, fd);
	*ignored = status_mask(buf, n, ign, (long)sizeof ign - 1);
	*caught = status_mask(buf, n, cgt, (long)sizeof cgt - 1);
	if (*ignored == ~(uint64_t)0 || *caught == ~(uint64_t)0)
		*caught = *ignored = ~(uint64_t)0;
}

CHILD_CODE __attribute__((noreturn)) static void child_main(void *p)
{
	struct child_arg *a = p;
	const local_clone_spec *s = a->s;
	/*
	 * Every signal is blocked (the parent did it before clone3). A handler of ours would
	 * run on memory we share: back to SIG_DFL before anything is unblocked, as
	 * posix_spawn does, and those the caller asks for whatever they are (exec keeps
	 * SIG_IGN); a signal already at SIG_DFL is left alone. Where the sets are unknown,
	 * each signal is asked.
	 */
	struct ksigaction dfl = {0}, old; /* SIG_DFL is 0 */
	uint64_t caught, ignored;
	signal_masks(&caught, &ignored);
	bool known = caught != ~(uint64_t)0;
	for (int sig = 1; sig <= NSIGNALS; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		uint64_t bit = (uint64_t)1 << (sig - 1);
		bool reset =
		    known ? (caught & bit) || (forced_default(a, sig) && (ignored & bit))
		          : forced_default(a, sig) ||
		                (syscall(SYS_rt_sigaction, sig, NULL, &old, KSIGSET_SIZE) == 0 &&
		                 old.handler != SIG_DFL && old.handler != SIG_IGN);
		if (reset)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, KSIGSET_SIZE);
	}
	syscall(SYS_setsid); /* its own session and group, as POSIX_SPAWN_SETSID */
	if (s->cwd && syscall(SYS_chdir, s->cwd) != 0)
		child_fail(a, errno);
	for (int i = 0; i < 3; i++)
		if (syscall(SYS_dup3, s->fds[i], i, 0) < 0) /* the fds are > 2: never equal */
			child_fail(a, errno);
	if (s->ctty && syscall(SYS_ioctl, 0, TIOCSCTTY, 0) != 0) /* a session leader now */
		child_fail(a, errno);
	/* Nothing but 0-2 for the command (closefrom in posix_spawn terms). */
	if (syscall(SYS_close_range, 3, ~0U, 0) != 0)
		for (int fd = 3; fd < 65536; fd++)
			syscall(SYS_close, fd);
	uint64_t none = 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, KSIGSET_SIZE);
	/* execvp's rules, as posix_spawnp's: the first EACCES is kept, others stop at once */
	int e = ENOENT;
	bool eacces = false;
	for (char *const *prog = s->progs; *prog; prog++) {
		syscall(SYS_execve, *prog, s->argv, s->envp);
		e = errno;
		if (e == EACCES)
			eacces = true;
		else if (e != ENOENT && e != ESTALE && e != ENOTDIR && e != ENODEV &&
		         e != ETIMEDOUT)
			break;
	}
	child_fail(a, eacces && (e == ENOENT || e == ESTALE || e == ENOTDIR || e == ENODEV ||
	                         e == ETIMEDOUT)
	                  ? EACCES
	                  : e);
}

/*
 * clone3 whose child calls fn(arg) on the stack clone3 gave it (it never returns). The
 * return address of a C wrapper would be on a stack the child no longer uses, so this
 * is asm: rax is 0 in the child, which the jump tells apart.
 */
static long clone3_call(struct asp_clone_args *ca, void (*fn)(void *), void *arg)
{
	long ret;
	register void (*r12)(void *) __asm__("r12") = fn; /* both kept across syscall */
	register void *r13 __asm__("r13") = arg;
	__asm__ volatile("syscall\n\t"
	                 "test %%rax, %%rax\n\t"
	                 "jnz 1f\n\t"
	                 "xor %%ebp, %%ebp\n\t"
	                 "and $-16, %%rsp\n\t"
	                 "mov %%r13, %%rdi\n\t"
	                 "call *%%r12\n\t"
	                 "hlt\n\t"
	                 "1:\n\t"
	                 : "=a"(ret)
	                 : "a"((long)SYS_clone3), "D"(ca), "S"(sizeof *ca), "r"(r12), "r"(r13)
	                 : "rcx", "r11", "memory", "cc");
	return ret;
}

bool local_clone_available(void)
{
	return true;
}

/* The child's own stack: its frames are small (no recursion, no arrays). */
#define CHILD_STACK (32 * 1024)

/* One stack kept between spawns (spare.h). */
static asp_spare spare_stack;

static char *stack_take(void)
{
	char *st = asp_spare_take(&spare_stack);
	return st ? st : malloc(CHILD_STACK); /* 16-byte aligned, as the child's sp must be */
}

int local_clone_spawn(int cg_fd, const local_clone_spec *s, pid_t *pid, int *pidfd,
                      bool *clone_failed)
{
	*clone_failed = false;
	*pidfd = -1;
	char *stack = stack_take();
	if (!stack)
		return ENOMEM;
	struct child_arg a = {.s = s, .rtmin = SIGRTMIN, .err = 0};
	struct asp_clone_args ca;
	memset(&ca, 0, sizeof ca);
	/* the pidfd too, close-on-exec: no pidfd_open after */
	int fd = -1;
	ca.flags = CLONE_VM | CLONE_VFORK | ASP_CLONE_INTO_CGROUP | ASP_CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&fd;
	/* (an exit signal of 0 would not last: execve makes it SIGCHLD again) */
	ca.exit_signal = SIGCHLD;
	ca.stack = (uint64_t)(uintptr_t)stack;
	ca.stack_size = CHILD_STACK;
	ca.cgroup = (uint64_t)cg_fd;
	/*
	 * All signals blocked, glibc's internal ones too (pthread_sigmask would leave them):
	 * no handler may run in the child before it reset them. All but SIGCHLD, which only
	 * the child's own children could send it (it has none yet): while this thread blocks
	 * SIGCHLD, the kernel keeps a default-ignored SIGCHLD and wakes another thread of
	 * ours for it, and a short command often exits before this thread is back from the
	 * vfork wait to unblock it (measured: 4 in 10 execs of `true` woke the stop-signal
	 * thread of asp-agent).
	 */
	uint64_t all = ~(uint64_t)0 & ~((uint64_t)1 << (SIGCHLD - 1)), saved = 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &saved, KSIGSET_SIZE);
	long r = clone3_call(&ca, child_main, &a);
	int e = r < 0 ? (int)-r : 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved, NULL, KSIGSET_SIZE);
	free(asp_spare_keep(&spare_stack, stack)); /* it exec'd or exited: CLONE_VFORK */
	if (r < 0) {
		*clone_failed = true;
		return e;
	}
	if (a.err) {
		int st;
		while (waitpid((pid_t)r, &st, 0) < 0 && errno == EINTR)
			;
		if (fd >= 0)
			close(fd);
		return a.err;
	}
	*pid = (pid_t)r;
	*pidfd = fd;
	return 0;
}

#else

bool local_clone_available(void)
{
	return false;
}

int local_clone_spawn(int cg_fd, const local_clone_spec *s, pid_t *pid, int *pidfd,
                      bool *clone_failed)
{
	(void)cg_fd, (void)s, (void)pid;
	*pidfd = -1;
	*clone_failed = true;
	return ENOSYS;
}

#endif
