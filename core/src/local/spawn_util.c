/*
 * Starting, watching and reaping one child per call: with posix_spawn (vfork-fast), or
 * born in a job cgroup of its own with clone3 where the agent has its cgroup.
 */
#include "spawn_util.h"
#include "asp/server.h"
#include "asp/transport.h"
#include "cgroup.h"
#include "clone_into.h"
#include "pty.h"
#include "thread.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifdef __GLIBC__
/* glibc gained the chdir file action in 2.29; musl has had it since 1.1.24 (2019). */
#if !__GLIBC_PREREQ(2, 29)
#error "posix_spawn_file_actions_addchdir_np is needed: glibc >= 2.29 or musl >= 1.1.24"
#endif
/* Closing inherited fds in the child in one action: glibc >= 2.34. Elsewhere (musl) the
 * fds open at spawn time get one close action each (add_close_inherited). */
#if __GLIBC_PREREQ(2, 34)
#define HAVE_ADDCLOSEFROM 1
#endif
#endif
/* Without setsid the child still gets its own process group, which is what kill needs. */
#ifdef POSIX_SPAWN_SETSID
#define SPAWN_OWN_GROUP POSIX_SPAWN_SETSID
#else
#define SPAWN_OWN_GROUP POSIX_SPAWN_SETPGROUP
#endif

/* 0 unknown, 1 works, -1 the kernel lacks it (before 5.3): then poll and waitid. */
static atomic_int pidfd_state;

static const struct {
	int sig;
	const char *name;
} signals[] = {
    {SIGHUP, "HUP"},       {SIGINT, "INT"},   {SIGQUIT, "QUIT"},   {SIGILL, "ILL"},
    {SIGTRAP, "TRAP"},     {SIGABRT, "ABRT"}, {SIGBUS, "BUS"},     {SIGFPE, "FPE"},
    {SIGKILL, "KILL"},     {SIGUSR1, "USR1"}, {SIGSEGV, "SEGV"},   {SIGUSR2, "USR2"},
    {SIGPIPE, "PIPE"},     {SIGALRM, "ALRM"}, {SIGTERM, "TERM"},   {SIGCHLD, "CHLD"},
    {SIGCONT, "CONT"},     {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"},   {SIGTTIN, "TTIN"},
    {SIGTTOU, "TTOU"},     {SIGURG, "URG"},   {SIGXCPU, "XCPU"},   {SIGXFSZ, "XFSZ"},
    {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"}, {SIGWINCH, "WINCH"}, {SIGIO, "IO"},
    {SIGSYS, "SYS"},
#ifdef SIGPWR
    {SIGPWR, "PWR"},
#endif
#ifdef SIGSTKFLT
    {SIGSTKFLT, "STKFLT"},
#endif
};

const char *local_signal_name(int sig, char buf[16])
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
		if (signals[i].sig == sig)
			return signals[i].name;
	}
#ifdef SIGRTMIN
	if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
		snprintf(buf, 16, "RTMIN+%d", sig - SIGRTMIN);
		return buf;
	}
#endif
	snprintf(buf, 16, "%d", sig);
	return buf;
}

int local_signal_number(const char *name)
{
	if (strncmp(name, "SIG", 3) == 0)
		name += 3;
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
		if (strcmp(signals[i].name, name) == 0)
			return signals[i].sig;
	}
	return 0;
}

/* Keeps pipe ends off 0-2, so the child's dup2s cannot clobber one another when the
 * host process runs with a standard stream closed. */
static int lift_fd(int fd)
{
	if (fd > 2)
		return fd;
	int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd;
}

static int make_pipe(int p[2])
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	if (p[0] > 2 && p[1] > 2)
		return 0;
	p[0] = lift_fd(p[0]);
	p[1] = lift_fd(p[1]);
	if (p[0] >= 0 && p[1] >= 0)
		return 0;
	int e = errno;
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	errno = e;
	return -1;
}

static void close_pair(int p[2])
{
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	p[0] = p[1] = -1;
}

#ifndef HAVE_ADDCLOSEFROM
/*
 * A close action for every fd >= 3 open now. This library's own fds are close-on-exec;
 * this catches what the host process inherited or opened without it (an agent started
 * by `docker exec` may hold a few), which a sandbox command must not see. Without
 * procfs there is nothing to list and nothing is added.
 */
static int add_close_inherited(posix_spawn_file_actions_t *fa)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 0;
	int self = dirfd(d), rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		if (end == de->d_name || *end || fd < 3 || fd == self || fd > INT_MAX)
			continue;
		rc |= posix_spawn_file_actions_addclose(fa, (int)fd);
	}
	closedir(d);
	return rc;
}
#endif

static bool env_name_is(const char *entry, const char *name, size_t len)
{
	return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

/* Every child's environment starts with this entry; see local_child_signal_tree. */
#define JOB_VAR     "ASP_JOB"
#define JOB_VAR_LEN (sizeof JOB_VAR - 1)

/* The next job number: process-wide, so two backends in one process never share one. */
static atomic_uint_fast64_t next_job;

/* "ASP_JOB=<pid>.<job>" (job 0: the "ASP_JOB=<pid>." prefix every job of ours has). */
static void job_entry(char *buf, size_t cap, pid_t pid, uint64_t job)
{
	if (job)
		snprintf(buf, cap, JOB_VAR "=%ld.%llu", (long)pid, (unsigned long long)job);
	else
		snprintf(buf, cap, JOB_VAR "=%ld.", (long)pid);
}

/*
 * environ with the request's entries added or replacing same names (a later duplicate
 * key wins), after `marker` as the first entry; any other ASP_JOB is dropped, so a
 * command cannot disown what it starts. One block holds the pointer array and the "K=V"
 * strings. NULL when out of memory.
 */
static char **build_env(const asp_strmap *env, const char *marker, char **block)
{
	size_t n = 0, bytes = strlen(marker) + 1, count = env ? env->count : 0;
	while (environ[n])
		n++;
	for (size_t i = 0; i < count; i++)
		bytes += strlen(env->items[i].key) + strlen(env->items[i].value) + 2;
	size_t slots = n + count + 2;
	char *mem = malloc(slots * sizeof(char *) + bytes);
	if (!mem)
		return NULL;
	char **envp = (char **)mem;
	char *text = mem + slots * sizeof(char *);
	size_t k = 0;
	envp[k++] = text;
	text += sprintf(text, "%s", marker) + 1;
	for (size_t i = 0; i < n; i++) {
		bool replaced = env_name_is(environ[i], JOB_VAR, JOB_VAR_LEN);
		for (size_t j = 0; j < count && !replaced; j++)
			replaced =
			    env_name_is(environ[i], env->items[j].key, strlen(env->items[j].key));
		if (!replaced)
			envp[k++] = environ[i];
	}
	for (size_t j = 0; j < count; j++) {
		bool later = strcmp(env->items[j].key, JOB_VAR) == 0;
		for (size_t m = j + 1; m < count && !later; m++)
			later = strcmp(env->items[j].key, env->items[m].key) == 0;
		if (later)
			continue;
		envp[k++] = text;
		text += sprintf(text, "%s=%s", env->items[j].key, env->items[j].value) + 1;
	}
	envp[k] = NULL;
	*block = mem;
	return envp;
}

/* The value of PATH that the request sets, or NULL when it leaves PATH alone. */
static const char *request_path(const asp_strmap *env)
{
	const char *v = NULL;
	for (size_t i = 0; i < env->count; i++) {
		if (strcmp(env->items[i].key, "PATH") == 0)
			v = env->items[i].value;
	}
	return v;
}

/*
 * posix_spawnp searches the responder's PATH, not the child's; when the request sets
 * PATH, search that one as execvp in the child would. Returns 0 with a malloc'd path,
 * or ENOENT / EACCES.
 */
static int search_path(const char *path_var, const char *prog, char **out)
{
	size_t plen = strlen(prog);
	int found_noexec = 0;
	const char *p = path_var;
	for (;;) {
		const char *end = strchr(p, ':');
		size_t dlen = end ? (size_t)(end - p) : strlen(p);
		char *cand = malloc(dlen + plen + 3);
		if (!cand)
			return ENOMEM;
		if (dlen == 0)
			memcpy(cand, ".", 2); /* an empty entry is the working directory */
		else
			memcpy(cand, p, dlen), cand[dlen] = '\0';
		strcat(cand, "/");
		strcat(cand, prog);
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(cand, X_OK) == 0) {
				*out = cand;
				return 0;
			}
			found_noexec = 1;
		}
		free(cand);
		if (!end)
			break;
		p = end + 1;
	}
	return found_noexec ? EACCES : ENOENT;
}

static asp_status validate(const local_child_spec *s, asp_error *err)
{
	if ((s->command != NULL) == s->has_argv)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: give exactly one of 'command' and 'argv'", s->op);
	if (s->has_argv && (s->argv.count == 0 || !s->argv.items[0] || !s->argv.items[0][0]))
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: 'argv' needs at least a program name", s->op);
	for (size_t i = 0; s->has_argv && i < s->argv.count; i++) {
		if (!s->argv.items[i])
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "%s: argv[%zu] is missing", s->op, i);
	}
	for (size_t i = 0; s->has_env && i < s->env.count; i++) {
		const char *k = s->env.items[i].key;
		if (!k || !k[0] || strchr(k, '=') || !s->env.items[i].value)
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "%s: env name '%s' is not a variable name (empty or "
			                     "holds '=')",
			                     s->op, k ? k : "");
	}
	return ASP_OK;
}

/* posix_spawn reports a failed chdir and a failed exec alike; tell them apart. */
static asp_status spawn_failed(const local_child_spec *s, const char *prog, int rc, asp_error *err)
{
	if (s->cwd && (rc == ENOENT || rc == ENOTDIR || rc == EACCES)) {
		struct stat st;
		if (stat(s->cwd, &st) < 0)
			return asp_error_errno(err, errno, s->cwd, "%s: cwd %s", s->op, s->cwd);
		if (!S_ISDIR(st.st_mode))
			return asp_error_errno(err, ENOTDIR, s->cwd, "%s: cwd %s", s->op, s->cwd);
		if (rc == EACCES && access(s->cwd, X_OK) < 0)
			return asp_error_errno(err, errno, s->cwd, "%s: cwd %s", s->op, s->cwd);
	}
	if (rc == ENOENT && !s->has_argv)
		return asp_error_set(err, ASP_E_NOT_FOUND, "/bin/sh",
		                     "%s: /bin/sh not found; the sandbox needs a POSIX shell for "
		                     "'command' (or use 'argv')",
		                     s->op);
	if (rc == ENOENT)
		return asp_error_set(err, ASP_E_NOT_FOUND, prog, "%s %s: program not found%s",
		                     s->op, prog, strchr(prog, '/') ? "" : " in PATH");
	if (rc == EAGAIN) /* fork: out of pids or threads (the message names the limits) */
		return asp_error_errno(err, rc, prog, "%s %s: cannot run it%s", s->op, prog,
		                       local_task_limit_hint());
	return asp_error_errno(err, rc, prog, "%s %s: cannot run it", s->op, prog);
}

/* ---- descendants that left the group: markers, the subreaper, the keeper ------------ */

/*
 * Whether /proc/PID/environ holds `entry` as a whole entry (prefix: as the start of
 * one). A process whose memory we may not read, a zombie (empty) or one that is gone
 * is not a match. `buf` is scratch of `cap` bytes; a longer environment is read in
 * pieces that overlap by the entry's length.
 */
static bool environ_has(pid_t pid, const char *entry, bool prefix, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	size_t elen = strlen(entry), have = 0;
	bool found = false, at_start = true;
	for (;;) {
		ssize_t n = read(fd, buf + have, cap - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		for (size_t i = 0; i + elen <= have && !found; i++) {
			if ((i == 0 ? at_start : buf[i - 1] == '\0') &&
			    memcmp(buf + i, entry, elen) == 0 &&
			    (prefix || (i + elen < have ? buf[i + elen] == '\0' : false)))
				found = true;
		}
		if (found || have <= elen)
			break;
		/* keep the tail (and the byte before it) for an entry split across reads */
		memmove(buf, buf + have - elen - 1, elen + 1);
		have = elen + 1;
		at_start = false;
	}
	close(fd);
	return found;
}

/* The parent pid from /proc/PID/stat, or -1. */
static pid_t proc_ppid(pid_t pid, char *state)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	const char *s = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	long ppid;
	char st;
	if (!s || sscanf(s + 1, " %c %ld", &st, &ppid) != 2)
		return -1;
	if (state)
		*state = st;
	return (pid_t)ppid;
}

/* One pid directory of /proc, or 0 for other entries and ourselves. */
static pid_t proc_entry_pid(const struct dirent *de, pid_t self)
{
	char *end;
	long v = strtol(de->d_name, &end, 10);
	if (end == de->d_name || *end || v <= 0 || v > INT_MAX || v == self)
		return 0;
	return (pid_t)v;
}

/*
 * The subreaper's state: the children local_child_start made (their owners reap them),
 * and the reaper thread, which runs only while we have children (the keeper aside) or a
 * start is under way, and ends a second after the last is gone.
 */
static struct {
	pthread_mutex_t mu;
	atomic_bool on;
	bool thread;           /* the reaper thread runs, or has been asked to */
	atomic_bool thread_on; /* the same, for asp_local_reaper_stop (a signal handler) */
	bool thread_failed;    /* said once: it could not be started */
	unsigned starting;     /* local_child_start calls between their start and own listing */
	bool retry;            /* the reaper waits for `starting` to reach 0 (wake_fd) */
	bool busy;             /* commands run: SIGCHLD is looked at every REAPER_BUSY_MS */
	pid_t *own;
	size_t n, cap;
	pid_t keeper;
	int keeper_fd;        /* the write end of the keeper's pipe, -1 without one */
	int status_fd;        /* the keeper's word on our cgroup ('y', 'n'); -1 once heard */
	atomic_bool armed;    /* the keeper was told that a command started */
	int sig_fd;           /* signalfd of SIGCHLD (blocked in every thread) */
	int wake_fd;          /* eventfd: a stop, or `starting` reached 0 after `retry` */
	int lead_fd;          /* timerfd: a start with a watch took too long */
	asp_local_watch lead; /* that start's watch, while lead_set */
	pthread_t lead_owner; /* the thread starting it */
	bool lead_set;
	atomic_int stop_sig; /* asp_local_reaper_stop's signal, 0 before */
	void (*on_stop)(int sig, void *arg);
	void *stop_arg;
} reaper = {.keeper_fd = -1,
            .status_fd = -1,
            .sig_fd = -1,
            .wake_fd = -1,
            .lead_fd = -1,
            .mu = PTHREAD_MUTEX_INITIALIZER};

static bool is_own_locked(pid_t pid)
{
	for (size_t i = 0; i < reaper.n; i++)
		if (reaper.own[i] == pid)
			return true;
	return false; /* the keeper too: if it dies, the reaper takes it */
}

static void *reaper_main(void *arg);

/* Under reaper.mu: makes sure the reaper thread runs (a start or a child needs it). */
static void reaper_thread_locked(void)
{
	if (reaper.thread)
		return;
	int e = local_thread_detached(reaper_main, NULL, 256 * 1024);
	if (e) {
		if (!reaper.thread_failed)
			fprintf(
			    stderr,
			    "asp-agent: cannot start the reaper thread: %s; orphans of commands "
			    "wait for the next command%s\n",
			    strerror(e), e == EAGAIN ? local_task_limit_hint() : "");
		reaper.thread_failed = true;
		return;
	}
	reaper.thread = true;
	atomic_store(&reaper.thread_on, true);
}

/* How long a start with a watch (asp_local_watch_input) may take before it fires. */
#define LEAD_AFTER_NS (20 * 1000 * 1000)

/* This thread's asp_local_watch_input: fd -1 when none (or once it fired). */
static _Thread_local asp_local_watch watch_input = {.fd = -1};

void asp_local_watch_input(const asp_local_watch *w)
{
	watch_input = w && w->ready ? *w : (asp_local_watch){.fd = -1};
}

const asp_local_watch *local_watch_current(void)
{
	return watch_input.fd >= 0 ? &watch_input : NULL;
}

void local_watch_clear(void)
{
	watch_input.fd = -1;
}

/*
 * Before a child starts: counted as starting, so the reaper runs and cannot take its
 * status before reaper_end lists it. A watch of this thread (a lone exec that keeps
 * reading the input) fires from the reaper thread if the start takes longer than
 * LEAD_AFTER_NS: a start cannot watch (the vfork wait: a cwd on a hung mount holds it).
 * False when there is no reaper (not asp-agent).
 */
static bool reaper_begin(void)
{
	if (!atomic_load(&reaper.on))
		return false;
	const asp_local_watch *w = local_watch_current();
	pthread_mutex_lock(&reaper.mu);
	reaper.starting++;
	reaper_thread_locked();
	bool wake = !reaper.busy; /* the reaper leaves SIGCHLD out of its poll from now */
	reaper.busy = true;
	if (w && reaper.thread && !reaper.lead_set && reaper.lead_fd >= 0) {
		struct itimerspec t = {.it_value = {0, LEAD_AFTER_NS}};
		if (timerfd_settime(reaper.lead_fd, 0, &t, NULL) == 0) {
			reaper.lead = *w;
			reaper.lead_owner = pthread_self();
			reaper.lead_set = true;
		}
	}
	pthread_mutex_unlock(&reaper.mu);
	if (wake) {
		uint64_t one = 1;
		ssize_t wr = write(reaper.wake_fd, &one, sizeof one);
		(void)wr;
	}
	return true;
}

/* After the start: lists `pid` (if > 0) as one whose owner reaps it. */
static void reaper_end(pid_t pid)
{
	pthread_mutex_lock(&reaper.mu);
	if (pid > 0) {
		if (reaper.n == reaper.cap) {
			size_t ncap = reaper.cap ? reaper.cap * 2 : 16;
			pid_t *np = realloc(reaper.own, ncap * sizeof *np);
			if (np)
				reaper.own = np, reaper.cap = ncap;
		}
		/* out of memory: unlisted, the reaper may take its status (exit -1) */
		if (reaper.n < reaper.cap)
			reaper.own[reaper.n++] = pid;
	}
	if (reaper.lead_set && pthread_equal(reaper.lead_owner, pthread_self())) {
		struct itimerspec off = {{0, 0}, {0, 0}};
		timerfd_settime(reaper.lead_fd, 0, &off, NULL);
		reaper.lead_set = false;
	}
	bool wake = --reaper.starting == 0 && reaper.retry;
	if (wake)
		reaper.retry = false;
	pthread_mutex_unlock(&reaper.mu);
	if (wake) {
		uint64_t one = 1;
		ssize_t w = write(reaper.wake_fd, &one, sizeof one);
		(void)w;
	}
}

static void reaper_disown(pid_t pid)
{
	if (!atomic_load(&reaper.on) || pid <= 0)
		return;
	pthread_mutex_lock(&reaper.mu);
	for (size_t i = 0; i < reaper.n; i++) {
		if (reaper.own[i] == pid) {
			reaper.own[i] = reaper.own[--reaper.n];
			break;
		}
	}
	pthread_mutex_unlock(&reaper.mu);
}

/*
 * Reaps `pid` if it is a zombie child nobody else reaps: not one of ours, nor (while a
 * start is under way) one that may be about to be listed. Under reaper.mu. False when
 * it was left for a start to end.
 */
static bool reap_stray_locked(pid_t pid)
{
	if (is_own_locked(pid))
		return true;
	if (reaper.starting > 0) {
		reaper.retry = true;
		return false;
	}
	waitpid(pid, NULL, WNOHANG);
	return true;
}

/* Reaps `pid` if it is a zombie child that is not our own. */
static void reap_if_stray(pid_t pid)
{
	char st = 0;
	if (proc_ppid(pid, &st) != getpid() || st != 'Z')
		return;
	pthread_mutex_lock(&reaper.mu);
	reap_stray_locked(pid);
	pthread_mutex_unlock(&reaper.mu);
}

/*
 * Every zombie child of ours that is not our own. The kernel lists each thread's
 * children in /proc/self/task/TID/children (CONFIG_PROC_CHILDREN); without it, every
 * process in /proc is looked at.
 */
/*
 * Calls fn for each child pid the kernel lists in /proc/self/task/TID/children (every
 * thread's). False when no such list could be read (no CONFIG_PROC_CHILDREN).
 */
static bool each_listed_child(void (*fn)(pid_t, void *), void *arg)
{
	DIR *d = opendir("/proc/self/task");
	bool listed = false;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[300];
		snprintf(path, sizeof path, "/proc/self/task/%.64s/children", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		listed = true;
		long v;
		while (fscanf(f, "%ld", &v) == 1)
			fn((pid_t)v, arg);
		fclose(f);
	}
	if (d)
		closedir(d);
	return listed;
}

static void reap_one(pid_t pid, void *arg)
{
	(void)arg;
	reap_if_stray(pid);
}

static void reap_strays(void)
{
	if (each_listed_child(reap_one, NULL))
		return;
	DIR *d = opendir("/proc");
	if (!d)
		return;
	struct dirent *de;
	pid_t self = getpid();
	while ((de = readdir(d))) {
		pid_t pid = proc_entry_pid(de, self);
		if (pid)
			reap_if_stray(pid);
	}
	closedir(d);
}

/* A child of ours other than the keeper: counted in *(unsigned *)arg. */
static void count_child(pid_t pid, void *arg)
{
	if (pid != reaper.keeper)
		(*(unsigned *)arg)++;
}

/* Whether we have a child other than the keeper (and its descendants then). */
static bool have_children(void)
{
	unsigned n = 0;
	if (each_listed_child(count_child, &n))
		return n > 0;
	DIR *d = opendir("/proc"); /* no children lists: by parent pid */
	if (!d)
		return true;
	struct dirent *de;
	pid_t self = getpid();
	while (!n && (de = readdir(d))) {
		pid_t pid = proc_entry_pid(de, self);
		if (pid && pid != reaper.keeper && proc_ppid(pid, NULL) == self)
			n++;
	}
	closedir(d);
	return n > 0;
}

/*
 * Reaps the exited children nobody else reaps. 0: none is left; 1: an owner's zombie (or
 * one a start may be about to list) hides the others, *blocked says which; 2: waiting
 * for the starts to end (wake_fd).
 */
static int reap_exited(pid_t *blocked)
{
	for (;;) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid <= 0)
			return 0;
		pthread_mutex_lock(&reaper.mu);
		bool own = is_own_locked(si.si_pid), taken = !own && reap_stray_locked(si.si_pid);
		pthread_mutex_unlock(&reaper.mu);
		if (own) {
			*blocked = si.si_pid;
			return 1;
		}
		if (!taken)
			return 2;
	}
}

/* Under nothing: whether the thread may end now (nothing to reap, wait for or start). */
static bool reaper_may_end(void)
{
	pthread_mutex_lock(&reaper.mu);
	/* a start takes reaper.mu first, so none can begin until `thread` is false */
	bool end = reaper.starting == 0 && reaper.n == 0 && !reaper.lead_set && !have_children();
	if (end) {
		reaper.thread = false;
		atomic_store(&reaper.thread_on, false);
	}
	pthread_mutex_unlock(&reaper.mu);
	return end;
}

/* The registered stop: ends the processes and the agent (never returns), else nothing. */
static void reaper_stop_now(void)
{
	int sig = atomic_load(&reaper.stop_sig);
	pthread_mutex_lock(&reaper.mu);
	void (*fn)(int, void *) = reaper.on_stop;
	void *arg = reaper.stop_arg;
	pthread_mutex_unlock(&reaper.mu);
	if (sig && fn)
		fn(sig, arg);
}

/* The start that armed lead_fd took too long: its watch fires here, once. */
static void lead_fire(void)
{
	uint64_t n;
	ssize_t r = read(reaper.lead_fd, &n, sizeof n);
	(void)r;
	pthread_mutex_lock(&reaper.mu);
	asp_local_watch w = reaper.lead;
	bool fire = reaper.lead_set;
	reaper.lead_set = false;
	pthread_mutex_unlock(&reaper.mu);
	if (fire)
		w.ready(w.ctx);
}

/* An idle reaper thread ends after this long with nothing to reap or wait for. */
static int64_t local_mono_ms(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

#define REAPER_LINGER_MS 1000

/*
 * While commands run, the reaper looks for exited orphans this often instead of at
 * every SIGCHLD: each exit of a command is its owner's to reap, and a wake-up of the
 * reaper at each one costs every exec a context switch (docs/design.md, "Descendants").
 */
#define REAPER_BUSY_MS 250

/* Whether commands run (or start): `busy` ends at the first look that finds none. */
static bool reaper_busy(void)
{
	pthread_mutex_lock(&reaper.mu);
	if (reaper.busy && reaper.n == 0 && reaper.starting == 0)
		reaper.busy = false;
	bool busy = reaper.busy;
	pthread_mutex_unlock(&reaper.mu);
	return busy;
}

/*
 * The reaper thread: runs while we have children (commands, orphans re-parented to us as
 * the subreaper) or a start is under way. SIGCHLD is blocked in every thread and read
 * here from a signalfd, so nobody else is woken by it (a thread that did not block it
 * would be woken to discard it); while commands run (`busy`) it is looked at every
 * REAPER_BUSY_MS rather than at each exit, which is the command's owner's to see. An
 * orphan is reaped here; one of ours is left to its owner. The kernel reports the oldest zombie
 * first, so while an owner keeps its zombie (exec waits for the pipes' EOF) the others are found
 * through /proc. It also carries out asp_local_reaper_stop while processes run, and fires the watch
 * of a slow start.
 */
static void *reaper_main(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "asp-reaper");
	pid_t blocked = 0;
	int wait_ms = 25, idle_ms = REAPER_LINGER_MS;
	int64_t scan_at = 0;
	for (;;) {
		reaper_stop_now();
		pid_t was = blocked;
		int state = reap_exited(&blocked);
		int timeout = idle_ms;
		if (state == 1) {
			/*
			 * An owner's zombie: usually reaped within moments, so look again soon; if
			 * the same one still blocks the view, look for the others through /proc.
			 */
			int64_t now = local_mono_ms();
			if (blocked != was) {
				wait_ms = 25;
				scan_at = now + wait_ms;
			} else if (now >= scan_at) {
				reap_strays();
				if (wait_ms < 1000)
					wait_ms *= 2;
				scan_at = now + wait_ms;
			}
			timeout = (int)(scan_at - now);
		} else if (state == 2) {
			timeout = -1;
		}
		/* busy: SIGCHLD stays pending (the signalfd level-triggered) for a later look */
		bool busy = reaper_busy();
		if (busy && (timeout < 0 || timeout > REAPER_BUSY_MS))
			timeout = REAPER_BUSY_MS;
		struct pollfd pfd[3] = {{reaper.wake_fd, POLLIN, 0},
		                        {reaper.lead_fd, POLLIN, 0},
		                        {busy ? -1 : reaper.sig_fd, POLLIN, 0}};
		int r = poll(pfd, 3, timeout);
		if (r < 0)
			continue;
		if (r > 0 && pfd[2].revents) {
			struct signalfd_siginfo si[8];
			while (read(reaper.sig_fd, si, sizeof si) == (ssize_t)sizeof si)
				;
		}
		if (r > 0 && pfd[0].revents) {
			uint64_t n;
			ssize_t got = read(reaper.wake_fd, &n, sizeof n);
			(void)got;
		}
		if (r > 0 && pfd[1].revents)
			lead_fire();
		if (r > 0) {
			idle_ms = REAPER_LINGER_MS;
			continue;
		}
		if (state != 0 || busy)
			continue;
		if (reaper_may_end())
			break;
		if (idle_ms < 8 * REAPER_LINGER_MS) /* a daemon runs: look less often */
			idle_ms *= 2;
	}
	/* a stop asked while we were ending: see asp_local_reaper_stop */
	reaper_stop_now();
	return NULL;
}

/*
 * Signals every process (but us and the keeper) whose environment holds `entry`
 * (`prefix`: an entry starting with it), and with `orphans` also every child of ours
 * that is not our own (adopted). Returns how many it signalled.
 */
static unsigned sweep(const char *entry, bool prefix, bool orphans, int sig)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	size_t cap = 64 * 1024;
	char *buf = malloc(cap);
	if (!buf) {
		closedir(d);
		return 0;
	}
	pid_t self = getpid();
	unsigned hit = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		pid_t pid = proc_entry_pid(de, self);
		if (!pid || pid == reaper.keeper)
			continue;
		bool match = environ_has(pid, entry, prefix, buf, cap);
		if (!match && orphans && proc_ppid(pid, NULL) == self) {
			pthread_mutex_lock(&reaper.mu);
			match = !is_own_locked(pid);
			pthread_mutex_unlock(&reaper.mu);
		}
		if (match && kill(pid, sig) == 0)
			hit++;
	}
	closedir(d);
	free(buf);
	return hit;
}

/* SIGKILL passes until one finds nobody (bounded: a fork bomb is stopped, not won). */
static void sweep_kill(const char *entry, bool prefix, bool orphans)
{
	for (int pass = 0; pass < 50 && sweep(entry, prefix, orphans, SIGKILL) > 0; pass++)
		;
}

void local_child_signal_tree(const local_child *c, int sig)
{
	if (sig == SIGKILL && c->cg)
		local_jobcg_kill(c->cg); /* all it started, in one write */
	local_child_signal_group(c, sig);
	if (!c->job)
		return;
	char entry[64];
	job_entry(entry, sizeof entry, getpid(), c->job);
	if (sig == SIGKILL)
		sweep_kill(entry, false, false);
	else
		sweep(entry, false, false, sig);
}

/*
 * The keeper: a child forked before any thread, holding the read end of a pipe whose
 * write end only we hold. First it moves us into a cgroup of our own where it can; our
 * death in any way (exit, SIGKILL) is its EOF on `rfd`; then it ends that cgroup, and
 * kills what carries our markers. Deaf to the signals a terminal or a group kill would
 * send.
 */
static void keeper_main(int rfd, int sfd, pid_t parent)
{
	static const int deaf[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2};
	for (size_t i = 0; i < sizeof deaf / sizeof deaf[0]; i++)
		signal(deaf[i], SIG_IGN);
	int null = open("/dev/null", O_RDWR);
	for (int fd = 0; fd < 3; fd++)
		if (null >= 0 && fd != null)
			dup2(null, fd); /* the client waits for EOF on our stdout and stderr */
	for (int fd = 3; fd < 1024; fd++)
		if (fd != rfd && fd != sfd)
			close(fd);
	prctl(PR_SET_NAME, "asp-keeper");
	/*
	 * Moving a process waits for an RCU grace period (about 10 ms): here, beside the
	 * agent's start, which never waits for it (a cold `asp exec` would pay it per call).
	 * Commands the agent started meanwhile follow it in; what they forked before that
	 * has the markers and the subreaper only (docs/decisions.md). We stay in the cgroup
	 * the agent started in, so its path is ours to find again.
	 */
	char cg[LOCAL_CGROUP_PATH_MAX];
	bool in = getppid() == parent && local_cgroup_path(parent, cg, sizeof cg) &&
	          local_cgroup_enter(cg, parent);
	/* the agent starts its commands in job cgroups below its own from now on */
	ssize_t said = write(sfd, in ? "y" : "n", 1);
	(void)said;
	close(sfd);
	if (in) {
		local_cgroup_adopt_children(cg, parent, getpid());
		local_cgroup_sweep_stale(cg);
	}
	/* 'a': a command was started (armed); 'd': the agent cleaned up itself; EOF: gone */
	bool armed = false, clean = false;
	for (;;) {
		char c;
		ssize_t n = read(rfd, &c, 1);
		if (n == 1 && c == 'a')
			armed = true;
		else if (n == 1 && c == 'd')
			clean = true;
		else if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	/*
	 * Every descendant, whatever it did to its group or environment (a cheap no-op after
	 * a clean exit); nested agents' cgroups below go too. Only one we made: a cgroup of
	 * that name we could not make may be a live agent's of another pid namespace.
	 */
	if (in)
		local_cgroup_end(cg, 2000);
	/* Reading every process's environment costs: only if needed. With a cgroup it
	 * still finds a process that moved itself out to another cgroup. */
	if (armed && !clean) {
		char entry[64];
		job_entry(entry, sizeof entry, parent, 0);
		sweep_kill(entry, true, false);
	}
	_exit(0);
}

/* Subreaper, keeper, SIGCHLD blocked and the reaper's fds, for asp_local_reaper_run. 0, or -1. */
static int reaper_setup(void)
{
#ifdef PR_SET_CHILD_SUBREAPER
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		fprintf(stderr, "asp-agent: cannot become a child subreaper: %s\n",
		        strerror(errno));
		return -1;
	}
	int p[2], q[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	if (pipe2(q, O_CLOEXEC | O_NONBLOCK) < 0) {
		close_pair(p);
		return -1;
	}
	pid_t parent = getpid();
	pid_t k = fork();
	if (k == 0) {
		close(p[1]);
		close(q[0]);
		keeper_main(p[0], q[1], parent);
	}
	close(p[0]);
	close(q[1]);
	if (k < 0) {
		close(p[1]);
		close(q[0]);
		fprintf(stderr, "asp-agent: cannot start the keeper: %s\n", strerror(errno));
	} else {
		reaper.keeper = k; /* p[1] stays open (close-on-exec) until we are gone */
		reaper.keeper_fd = lift_fd(p[1]);
		reaper.status_fd = lift_fd(q[0]);
	}
	/* SIGCHLD blocked here, before any thread: every thread inherits it (reaper_main) */
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &chld, NULL);
	reaper.sig_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	reaper.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	reaper.lead_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (reaper.sig_fd < 0 || reaper.wake_fd < 0) {
		fprintf(stderr, "asp-agent: cannot set up the reaper: %s\n", strerror(errno));
		pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
		return -1;
	}
	reaper.sig_fd = lift_fd(reaper.sig_fd);
	reaper.wake_fd = lift_fd(reaper.wake_fd);
	if (reaper.lead_fd >= 0)
		reaper.lead_fd = lift_fd(reaper.lead_fd);
	return 0;
#else
	return -1;
#endif
}

int asp_local_reaper_run(int (*fn)(void *), void *arg)
{
	if (reaper_setup() < 0)
		return fn(arg);
	atomic_store(&reaper.on, true);
	int code = fn(arg);
	asp_local_reaper_finish();
	return code;
}

void asp_local_reaper_on_stop(void (*fn)(int sig, void *arg), void *arg)
{
	pthread_mutex_lock(&reaper.mu);
	reaper.on_stop = fn;
	reaper.stop_arg = arg;
	pthread_mutex_unlock(&reaper.mu);
}

bool asp_local_reaper_stop(int sig)
{
	/*
	 * Stored first, read by a reaper thread that ends after clearing thread_on: so
	 * either we see it running (and it, or the next one, sees the signal) or it is gone.
	 */
	atomic_store(&reaper.stop_sig, sig);
	if (!atomic_load(&reaper.thread_on))
		return false;
	uint64_t one = 1;
	ssize_t w = write(reaper.wake_fd, &one, sizeof one);
	(void)w;
	return true;
}

const char *local_task_limit_hint(void)
{
	return " (the host is out of processes or threads: see /proc/sys/kernel/pid_max, "
	       "/proc/sys/kernel/threads-max and `ulimit -u`; raise them, e.g. `sysctl -w "
	       "kernel.pid_max=4194304`)";
}

/* Tells the keeper `c` ('a' armed, 'd' done); a lost byte only costs it a sweep. */
static void keeper_say(char c)
{
	if (reaper.keeper_fd >= 0) {
		ssize_t w = write(reaper.keeper_fd, &c, 1);
		(void)w;
	}
}

/*
 * Every process a command started is in our subtree: we are a subreaper, so an orphan
 * comes to us. SIGKILL to every live child of ours (but the keeper), again and again: a
 * killed child's children come to us before it turns zombie, and get the next pass. Until
 * only zombies remain, for at most 2 s.
 */
/* A live child of ours but the keeper: KILLed and counted in *(unsigned *)arg. */
static void kill_one(pid_t pid, void *arg)
{
	char st = 0;
	if (pid != reaper.keeper && proc_ppid(pid, &st) == getpid() && st != 'Z' &&
	    kill(pid, SIGKILL) == 0)
		(*(unsigned *)arg)++;
}

static void kill_subtree(void)
{
	int64_t until = 0;
	for (int pass = 0;; pass++) {
		unsigned live = 0;
		if (!each_listed_child(
		        kill_one,
		        &live)) { /* no children lists: by parent pid, through all of /proc */
			char entry[64];
			job_entry(entry, sizeof entry, getpid(), 0);
			sweep_kill(entry, true, true);
			return;
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
		if (pass == 0)
			until = now_ms + 2000;
		if (live == 0 || now_ms > until)
			return;
		struct timespec pause = {0, 1000 * 1000}; /* let the killed ones turn zombie */
		nanosleep(&pause, NULL);
	}
}

void asp_local_reaper_finish(void)
{
	if (!atomic_load(&reaper.on))
		return;
	kill_subtree();
	keeper_say('d');
}

/* Dispositions a host process commonly sets to SIG_IGN, which exec would keep. */
static const int reset_signals[] = {SIGPIPE, SIGINT,  SIGQUIT, SIGTERM, SIGHUP,  SIGCHLD, SIGUSR1,
                                    SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU, SIGXFSZ};

/*
 * posix_spawn(p) with the child in its own session, the three pipes (or the terminal at
 * tty_path), the request's cwd.
 */
static int start_posix(const local_child_spec *s, const char *prog, bool search, char **argv,
                       char **envp, const int fds[3], const char *tty_path, pid_t *pid)
{
	posix_spawnattr_t attr;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_init(&attr);
	posix_spawn_file_actions_init(&fa);
	short flags = SPAWN_OWN_GROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	posix_spawnattr_setflags(&attr, flags);
	sigset_t none, deflt;
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none); /* the calling thread may block signals */
	sigemptyset(&deflt);
	for (size_t i = 0; i < sizeof reset_signals / sizeof reset_signals[0]; i++)
		sigaddset(&deflt, reset_signals[i]);
	posix_spawnattr_setsigdefault(&attr, &deflt);
	int fa_rc = 0;
	if (s->cwd)
		fa_rc |= posix_spawn_file_actions_addchdir_np(&fa, s->cwd);
	if (tty_path) {
		/* Opened in the child after its setsid (which posix_spawn does before the file
		 * actions) and without O_NOCTTY, the terminal becomes its controlling one. */
		fa_rc |= posix_spawn_file_actions_addopen(&fa, 0, tty_path, O_RDWR, 0);
		fa_rc |= posix_spawn_file_actions_adddup2(&fa, 0, 1);
		fa_rc |= posix_spawn_file_actions_adddup2(&fa, 0, 2);
	} else {
		for (int i = 0; i < 3; i++)
			fa_rc |= posix_spawn_file_actions_adddup2(&fa, fds[i], i);
	}
#ifdef HAVE_ADDCLOSEFROM
	fa_rc |= posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#else
	fa_rc |= add_close_inherited(&fa);
#endif
	int rc;
	if (fa_rc)
		rc = ENOMEM;
	else if (search)
		rc = posix_spawnp(pid, prog, &fa, &attr, argv, envp);
	else
		rc = posix_spawn(pid, prog, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return rc;
}

/* 0 not known yet, 1 commands are born in job cgroups, -1 never (cgroup.h). */
static atomic_int jobcg_state;

/* Whether the keeper moved us into our own cgroup: asked without waiting until it says. */
static bool jobcg_on(void)
{
	int on = atomic_load_explicit(&jobcg_state, memory_order_relaxed);
	if (on)
		return on > 0;
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&mu);
	if (!atomic_load(&jobcg_state)) {
		char said = 0;
		ssize_t n = reaper.status_fd >= 0 ? read(reaper.status_fd, &said, 1) : 0;
		if (n == 1 || n == 0 || (errno != EAGAIN && errno != EINTR)) {
			/* the keeper moves us about 10 ms after start: commands before stay put */
			bool yes =
			    n == 1 && said == 'y' && local_clone_available() && local_jobcg_init();
			atomic_store(&jobcg_state, yes ? 1 : -1);
			if (reaper.status_fd >= 0)
				close(reaper.status_fd);
			reaper.status_fd = -1;
		}
	}
	pthread_mutex_unlock(&mu);
	return atomic_load(&jobcg_state) > 0;
}

/*
 * A job cgroup for the next child (its fd, -1 without one) and, in *progs, the paths
 * its exec tries: `path` alone, or with path NULL `prog` in each directory of our PATH,
 * as posix_spawnp searches.
 */
static int take_job_cgroup(const char *path, const char *prog, char ***progs, unsigned *cg)
{
	const char *dirs = path ? NULL : getenv("PATH");
	if (!path && !dirs)
		dirs = "/bin:/usr/bin"; /* glibc's default for posix_spawnp */
	size_t n = 1, bytes = 0, plen = strlen(prog);
	for (const char *p = dirs; p && *p; p++)
		n += *p == ':';
	bytes = path ? 0 : (dirs ? strlen(dirs) : 0) + n * (plen + 2);
	char **v = malloc((n + 1) * sizeof *v + bytes);
	if (!v)
		return -1;
	if (path) {
		v[0] = (char *)path;
		v[1] = NULL;
	} else {
		char *text = (char *)(v + n + 1);
		size_t k = 0;
		for (const char *p = dirs;;) {
			const char *end = strchr(p, ':');
			size_t dlen = end ? (size_t)(end - p) : strlen(p);
			v[k++] = text;
			memcpy(text, p,
			       dlen); /* an empty entry: the working directory, as execvp */
			text += dlen;
			if (dlen)
				*text++ = '/';
			memcpy(text, prog, plen + 1);
			text += plen + 1;
			if (!end)
				break;
			p = end + 1;
		}
		v[k] = NULL;
	}
	int fd = local_jobcg_take(cg);
	if (fd < 0) {
		free(v);
		return -1;
	}
	*progs = v;
	return fd;
}

asp_status local_child_start(const local_child_spec *s, local_child *c, asp_error *err)
{
	c->pid = -1;
	c->job = 0;
	c->cg = 0;
	c->tty = false;
	c->pidfd = c->in_fd = c->out_fd = c->err_fd = c->out_w = c->err_w = -1;
	asp_status st = validate(s, err);
	if (st != ASP_OK)
		return st;

	const char *sh_argv[] = {"/bin/sh", "-c", s->command, NULL};
	char **argv = (char **)sh_argv;
	const char *prog = "/bin/sh";
	bool search = false;
	char *found = NULL, *env_block = NULL, **argv_block = NULL;
	char **envp = NULL;
	char marker[64];
	uint64_t job = atomic_fetch_add(&next_job, 1) + 1;
	job_entry(marker, sizeof marker, getpid(), job);
	int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
	int pty_m = -1, pty_m2 = -1, pty_s = -1; /* tty: master, its dup, slave */
	char pty_path[64];
	asp_strmap_entry *tty_env = NULL;
	int rc = 0;

	if (s->has_argv) {
		argv_block = malloc((s->argv.count + 1) * sizeof(char *));
		if (!argv_block)
			goto oom;
		memcpy(argv_block, s->argv.items, s->argv.count * sizeof(char *));
		argv_block[s->argv.count] = NULL;
		argv = argv_block;
		prog = argv[0];
		search = strchr(prog, '/') == NULL;
	}
	asp_strmap env = s->has_env ? s->env : (asp_strmap){NULL, 0};
	if (s->tty) { /* TERM after the request's entries: a later duplicate wins */
		tty_env = malloc((env.count + 1) * sizeof *tty_env);
		if (!tty_env)
			goto oom;
		if (env.count)
			memcpy(tty_env, env.items, env.count * sizeof *tty_env);
		tty_env[env.count].key = "TERM";
		tty_env[env.count].value = s->tty->term ? s->tty->term : ASP_TTY_TERM_DEFAULT;
		env = (asp_strmap){tty_env, env.count + 1};
	}
	envp = build_env(env.count ? &env : NULL, marker, &env_block);
	if (!envp)
		goto oom;
	if (s->has_env) {
		const char *path_var = request_path(&s->env);
		if (search && path_var) {
			rc = search_path(path_var, prog, &found);
			if (rc == ENOMEM)
				goto oom;
			if (rc) {
				st = spawn_failed(s, prog, rc, err);
				goto out;
			}
			prog = found;
			search = false;
		}
	}
	if (s->tty) {
		rc = local_pty_open(s->tty->rows, s->tty->cols, &pty_m, &pty_s, pty_path,
		                    sizeof pty_path);
		if (!rc && (pty_m2 = fcntl(pty_m, F_DUPFD_CLOEXEC, 3)) < 0)
			rc = errno;
		if (rc) {
			st = asp_error_errno(err, rc, NULL, "%s: cannot open a pseudo-terminal",
			                     s->op);
			goto out;
		}
	} else if (make_pipe(in) < 0 || make_pipe(out) < 0 || make_pipe(errp) < 0) {
		st = asp_error_errno(err, errno, NULL, "%s: cannot create pipes", s->op);
		goto out;
	}

	pid_t pid = -1;
	unsigned cg = 0;
	char **progs = NULL;
	int cg_fd = jobcg_on() ? take_job_cgroup(search ? NULL : prog, prog, &progs, &cg) : -1;
	int fds[3] = {in[0], out[1], errp[1]};
	if (s->tty)
		fds[0] = fds[1] = fds[2] = pty_s;
	/*
	 * The reaper sees the child as soon as it exits: counted as starting until it is
	 * listed, so the reaper never takes its owner's status; no lock across the start, so
	 * starts on many threads overlap.
	 */
	bool reaping = reaper_begin(), started = false;
	if (cg_fd >= 0) {
		local_clone_spec cs = {progs,
		                       argv,
		                       envp,
		                       s->cwd,
		                       {fds[0], fds[1], fds[2]},
		                       s->tty != NULL,
		                       reset_signals,
		                       sizeof reset_signals / sizeof *reset_signals};
		bool clone_failed = false;
		rc = local_clone_spawn(cg_fd, &cs, &pid, &c->pidfd, &clone_failed);
		started = !clone_failed;
		if (clone_failed && rc != EAGAIN && rc != ENOMEM && rc != EINTR)
			atomic_store(&jobcg_state, -1); /* seccomp, an old kernel: not again */
		if (rc) {
			local_jobcg_release(cg);
			cg = 0;
		}
	}
	if (!started)
		rc = start_posix(s, prog, search, argv, envp, fds, s->tty ? pty_path : NULL, &pid);
	if (reaping)
		reaper_end(rc ? -1 : pid);
	if (reaping && !rc && !atomic_exchange(&reaper.armed, true))
		keeper_say('a');
	free(progs);
	if (rc) {
		st = rc == ENOMEM
		         ? asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: out of memory", s->op)
		         : spawn_failed(s, prog, rc, err);
		goto out;
	}

	c->pid = pid;
	c->job = job;
	c->cg = cg;
	if (s->tty) {
		/* Our slave closes below, so the master's EOF is the child's (and what it
		 * started on the terminal): nothing to hold. */
		c->tty = true;
		c->in_fd = pty_m;
		c->out_fd = pty_m2;
		pty_m = pty_m2 = -1;
	} else {
		c->in_fd = in[1];
		c->out_fd = out[0];
		c->err_fd = errp[0];
		close(in[0]);
		if (s->hold_outputs) {
			c->out_w = out[1];
			c->err_w = errp[1];
		} else {
			close(out[1]);
			close(errp[1]);
		}
	}
	in[0] = in[1] = out[0] = out[1] = errp[0] = errp[1] = -1;
	if (c->pidfd < 0 && atomic_load_explicit(&pidfd_state, memory_order_relaxed) >= 0) {
		/* The child is unreaped, so its pid is still ours even if it already exited. */
		c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (c->pidfd < 0 && errno == ENOSYS)
			atomic_store_explicit(&pidfd_state, -1, memory_order_relaxed);
	}
	st = ASP_OK;
	goto out;

oom:
	st = asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: out of memory", s->op);
out:
	close_pair(in);
	close_pair(out);
	close_pair(errp);
	int ptys[] = {pty_m, pty_m2, pty_s};
	for (size_t i = 0; i < sizeof ptys / sizeof *ptys; i++)
		if (ptys[i] >= 0)
			close(ptys[i]);
	free(tty_env);
	free(found);
	free(env_block);
	free(argv_block);
	return st;
}

bool local_child_exited(const local_child *c)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD; /* reaped behind our back: SIGCHLD is SIG_IGN */
	return si.si_pid != 0;
}

int local_child_reap(local_child *c)
{
	int status = -1;
	pid_t r;
	do
		r = waitpid(c->pid, &status, 0);
	while (r < 0 && errno == EINTR);
	if (c->pidfd >= 0) {
		close(c->pidfd);
		c->pidfd = -1;
	}
	reaper_disown(c->pid);
	c->pid = -1;
	if (c->cg) /* removed once what it left there is gone too */
		local_jobcg_release(c->cg);
	c->cg = 0;
	return r < 0 ? -1 : status;
}

void local_child_signal_group(const local_child *c, int sig)
{
	if (c->pid > 0)
		kill(-c->pid, sig);
}

void local_child_release_outputs(local_child *c)
{
	if (c->out_w >= 0)
		close(c->out_w);
	if (c->err_w >= 0)
		close(c->err_w);
	c->out_w = c->err_w = -1;
}

void local_child_close(local_child *c)
{
	int *fds[] = {&c->in_fd, &c->out_fd, &c->err_fd, &c->pidfd, &c->out_w, &c->err_w};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
	}
}

void local_pipe_guard_on(local_pipe_guard *g)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	g->active = pthread_sigmask(SIG_BLOCK, &s, &g->old) == 0;
	g->was_pending = false;
	if (g->active && sigismember(&g->old, SIGPIPE)) {
		sigset_t pend;
		g->was_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
	}
}

void local_pipe_guard_off(local_pipe_guard *g, bool epipe)
{
	if (!g->active)
		return;
	if (epipe && !g->was_pending) {
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, SIGPIPE);
		struct timespec zero = {0, 0};
		sigtimedwait(&s, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}
