/*
 * ssh.proxy_command (docs/design.md, ".asp.json"): a local command whose stdin and
 * stdout carry the SSH connection (ssh -W, socat, websocat, a cloud tunnel). It runs
 * here, not through libssh's ProxyCommand, so its end is ours to see and say: one end of
 * a socketpair is its stdin and stdout, the other is the session's socket; a thread
 * keeps the last 4 KiB of its stderr and reaps it, so a failed connection names the
 * command, how it ended and its stderr's last line. It runs in a process group of its
 * own, which is terminated (then killed) when the connection is freed.
 */
#include "ssh_via.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define ERR_RING      4096
#define TERM_GRACE_MS 1000 /* after SIGTERM, before SIGKILL */
#define REAP_SLICE_MS 20   /* how often a wait for the exit looks at waitpid */

struct ssh_proxy {
	char label[200]; /* the command as messages quote it */
	pid_t pid;
	int err_r;   /* its stderr */
	int stop_fd; /* eventfd: the stderr thread ends */
	pthread_t thread;
	bool thread_on;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; signalled at stderr's EOF */
	bool err_eof;
	bool exited; /* seen through waitid(WNOWAIT): reaped only once its group is gone */
	bool waited; /* an explanation waited for the exit already: later ones do not */
	siginfo_t how;
	size_t err_total;
	char ring[ERR_RING];
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Under mu: whether the command has exited, without reaping it (its pid names its group). */
static bool exited_locked(ssh_proxy *p)
{
	if (p->exited || p->pid <= 0)
		return true;
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid) {
		p->exited = true;
		p->how = si;
	}
	return p->exited;
}

/* Keeps the tail of stderr until its EOF, or until stopped. */
static void *stderr_thread(void *arg)
{
	ssh_proxy *p = arg;
	for (;;) {
		struct pollfd fds[2] = {{.fd = p->stop_fd, .events = POLLIN},
		                        {.fd = p->err_r, .events = POLLIN}};
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		if (fds[0].revents)
			break;
		if (!fds[1].revents)
			continue;
		char buf[4096];
		ssize_t n = read(p->err_r, buf, sizeof buf);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		pthread_mutex_lock(&p->mu);
		for (ssize_t i = 0; i < n; i++)
			p->ring[(p->err_total + (size_t)i) % ERR_RING] = buf[i];
		if (n > 0)
			p->err_total += (size_t)n;
		else
			p->err_eof = true;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		if (n <= 0)
			break;
	}
	return NULL;
}

/* Under mu: the last line of stderr (control bytes as '?'), or "" when it printed none. */
static void last_line_locked(const ssh_proxy *p, char *out, size_t cap)
{
	size_t have = p->err_total < ERR_RING ? p->err_total : ERR_RING;
	size_t start = p->err_total - have;
	char text[ERR_RING];
	for (size_t i = 0; i < have; i++)
		text[i] = p->ring[(start + i) % ERR_RING];
	while (have > 0 && (text[have - 1] == '\n' || text[have - 1] == '\r' ||
	                    text[have - 1] == ' ' || text[have - 1] == '\t'))
		have--;
	size_t from = have;
	while (from > 0 && text[from - 1] != '\n')
		from--;
	size_t o = 0;
	for (size_t i = from; i < have && o + 1 < cap; i++) {
		unsigned char ch = (unsigned char)text[i];
		out[o++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	out[o] = '\0';
}

/* "ssh -W %h:%p bastion" with its arguments joined, cut to fit. */
static void make_label(const char *const *argv, char *out, size_t cap)
{
	size_t o = 0;
	out[0] = '\0';
	for (size_t i = 0; argv[i] && o + 1 < cap; i++) {
		int n = snprintf(out + o, cap - o, "%s%s", i ? " " : "", argv[i]);
		if (n < 0)
			break;
		o += (size_t)n < cap - o ? (size_t)n : cap - o - 1;
	}
	if (o + 1 >= cap && cap > 4)
		memcpy(out + cap - 4, "...", 4);
}

static int spawn(ssh_proxy *p, const char *const *argv, int io, int err_w)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	if (posix_spawn_file_actions_init(&fa))
		return ENOMEM;
	if (posix_spawnattr_init(&attr)) {
		posix_spawn_file_actions_destroy(&fa);
		return ENOMEM;
	}
	posix_spawn_file_actions_adddup2(&fa, io, 0);
	posix_spawn_file_actions_adddup2(&fa, io, 1);
	posix_spawn_file_actions_adddup2(&fa, err_w, 2);
	/* its own group, no blocked signals, the usual ones at their defaults */
	sigset_t none, def;
	sigemptyset(&none);
	sigemptyset(&def);
	int defaults[] = {SIGPIPE, SIGCHLD, SIGINT, SIGQUIT, SIGTERM, SIGHUP};
	for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
		sigaddset(&def, defaults[i]);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &def);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
	                                    POSIX_SPAWN_SETPGROUP);
	int e = posix_spawnp(&p->pid, argv[0], &fa, &attr, (char *const *)argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	return e;
}

asp_status ssh_proxy_start(const char *const *argv, ssh_proxy **out, int *fd, asp_error *err)
{
	*out = NULL;
	*fd = -1;
	ssh_proxy *p = calloc(1, sizeof *p);
	if (!p)
		return asp_error_oom(err, "ssh.proxy_command", NULL);
	make_label(argv, p->label, sizeof p->label);
	p->err_r = p->stop_fd = -1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	int sv[2] = {-1, -1}, ev[2] = {-1, -1};
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
	    pipe2(ev, O_CLOEXEC) != 0 || (p->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0) {
		int e = errno;
		for (int i = 0; i < 2; i++) {
			if (sv[i] >= 0)
				close(sv[i]);
			if (ev[i] >= 0)
				close(ev[i]);
		}
		ssh_proxy_free(p);
		return asp_error_errno(err, e, NULL, "ssh.proxy_command: cannot make its pipes");
	}
	int e = spawn(p, argv, sv[1], ev[1]);
	close(sv[1]);
	close(ev[1]);
	p->err_r = ev[0];
	if (e != 0) {
		close(sv[0]);
		p->pid = 0;
		ssh_proxy_free(p);
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "ssh.proxy_command: cannot run %s: %s%s", argv[0], strerror(e),
		                     e == ENOENT ? " (is it installed, and in PATH?)" : "");
	}
	if (pthread_create(&p->thread, NULL, stderr_thread, p) != 0) {
		close(sv[0]);
		ssh_proxy_free(p);
		return asp_error_set(err, ASP_E_INTERNAL, NULL,
		                     "ssh.proxy_command: cannot start a thread");
	}
	p->thread_on = true;
	*out = p;
	*fd = sv[0];
	return ASP_OK;
}

/* Under mu: waits for the stderr thread's signal, REAP_SLICE_MS at most. */
static void wait_slice_locked(ssh_proxy *p)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + REAP_SLICE_MS * 1000000ull;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

void ssh_proxy_explain(ssh_proxy *p, unsigned wait_ms, char *out, size_t cap)
{
	/* a closed socket usually means the command is exiting: give it a moment, first for
	 * its stderr's EOF (its last words), then for the exit itself */
	pthread_mutex_lock(&p->mu);
	uint64_t until = now_ms() + (p->waited ? 0 : wait_ms);
	p->waited = p->waited || wait_ms > 0;
	while (!p->err_eof && !exited_locked(p) && now_ms() < until) {
		wait_slice_locked(p);
	}
	while (!exited_locked(p) && now_ms() < until) {
		pthread_mutex_unlock(&p->mu);
		poll(NULL, 0, 5);
		pthread_mutex_lock(&p->mu);
	}
	/* it exited before the stderr thread read its last words: they are in the pipe */
	uint64_t eof_by = now_ms() + 500;
	while (p->exited && !p->err_eof && now_ms() < eof_by) {
		wait_slice_locked(p);
	}
	char line[300], how[96];
	last_line_locked(p, line, sizeof line);
	if (!p->exited)
		snprintf(how, sizeof how, "is still running");
	else if (p->how.si_code == CLD_EXITED)
		snprintf(how, sizeof how, "exited with status %d", p->how.si_status);
	else
		snprintf(how, sizeof how, "was killed by signal %d (%s)", p->how.si_status,
		         strsignal(p->how.si_status));
	pthread_mutex_unlock(&p->mu);
	snprintf(out, cap, "proxy_command `%s` %s; its stderr's last line: %s", p->label, how,
	         line[0] ? line : "(nothing)");
}

/* Waits up to `ms` for the command to exit (not reaping it). */
static bool wait_exit(ssh_proxy *p, unsigned ms)
{
	uint64_t until = now_ms() + ms;
	pthread_mutex_lock(&p->mu);
	bool done;
	while (!(done = exited_locked(p)) && now_ms() < until) {
		pthread_mutex_unlock(&p->mu);
		poll(NULL, 0, REAP_SLICE_MS);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return done;
}

void ssh_proxy_free(ssh_proxy *p)
{
	if (!p)
		return;
	if (p->pid > 0) {
		/* the group's id stays its own until the leader is reaped: signal it first */
		kill(-p->pid, SIGTERM);
		if (!wait_exit(p, TERM_GRACE_MS))
			kill(-p->pid, SIGKILL);
		kill(-p->pid, SIGKILL); /* what it left in its group (a backgrounded child) */
		while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (p->thread_on) {
		uint64_t one = 1;
		(void)!write(p->stop_fd, &one, sizeof one);
		pthread_join(p->thread, NULL);
	}
	if (p->err_r >= 0)
		close(p->err_r);
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}
