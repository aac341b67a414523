/* Starting, watching and reaping one child per call, with posix_spawn (vfork-fast). */
#include "spawn_util.h"

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
#include <sys/stat.h>
#include <sys/syscall.h>
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

/*
 * environ with the request's entries added or replacing same names; a later duplicate
 * key wins. One block holds the pointer array and the "K=V" strings. environ itself when
 * there is nothing to add. NULL when out of memory.
 */
static char **build_env(const asp_strmap *env, char **block)
{
	*block = NULL;
	if (env->count == 0)
		return environ;
	size_t n = 0, bytes = 0;
	while (environ[n])
		n++;
	for (size_t i = 0; i < env->count; i++)
		bytes += strlen(env->items[i].key) + strlen(env->items[i].value) + 2;
	size_t slots = n + env->count + 1;
	char *mem = malloc(slots * sizeof(char *) + bytes);
	if (!mem)
		return NULL;
	char **envp = (char **)mem;
	char *text = mem + slots * sizeof(char *);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		bool replaced = false;
		for (size_t j = 0; j < env->count && !replaced; j++)
			replaced =
			    env_name_is(environ[i], env->items[j].key, strlen(env->items[j].key));
		if (!replaced)
			envp[k++] = environ[i];
	}
	for (size_t j = 0; j < env->count; j++) {
		bool later = false;
		for (size_t m = j + 1; m < env->count && !later; m++)
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
	return asp_error_errno(err, rc, prog, "%s %s: cannot run it", s->op, prog);
}

asp_status local_child_start(const local_child_spec *s, local_child *c, asp_error *err)
{
	c->pid = -1;
	c->pidfd = c->in_fd = c->out_fd = c->err_fd = -1;
	asp_status st = validate(s, err);
	if (st != ASP_OK)
		return st;

	const char *sh_argv[] = {"/bin/sh", "-c", s->command, NULL};
	char **argv = (char **)sh_argv;
	const char *prog = "/bin/sh";
	bool search = false;
	char *found = NULL, *env_block = NULL, **argv_block = NULL;
	char **envp = environ;
	int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
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
	if (s->has_env) {
		envp = build_env(&s->env, &env_block);
		if (!envp)
			goto oom;
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
	if (make_pipe(in) < 0 || make_pipe(out) < 0 || make_pipe(errp) < 0) {
		st = asp_error_errno(err, errno, NULL, "%s: cannot create pipes", s->op);
		goto out;
	}

	posix_spawnattr_t attr;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_init(&attr);
	posix_spawn_file_actions_init(&fa);
	short flags = SPAWN_OWN_GROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	posix_spawnattr_setflags(&attr, flags);
	sigset_t none, deflt;
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none); /* the calling thread may block signals */
	/* Dispositions a host process commonly sets to SIG_IGN, which exec would keep. */
	static const int reset[] = {SIGPIPE, SIGINT,  SIGQUIT, SIGTERM, SIGHUP,  SIGCHLD, SIGUSR1,
	                            SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU, SIGXFSZ};
	sigemptyset(&deflt);
	for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
		sigaddset(&deflt, reset[i]);
	posix_spawnattr_setsigdefault(&attr, &deflt);
	int fa_rc = 0;
	if (s->cwd)
		fa_rc |= posix_spawn_file_actions_addchdir_np(&fa, s->cwd);
	fa_rc |= posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	fa_rc |= posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	fa_rc |= posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
#ifdef HAVE_ADDCLOSEFROM
	fa_rc |= posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#else
	fa_rc |= add_close_inherited(&fa);
#endif
	pid_t pid = -1;
	if (fa_rc)
		rc = ENOMEM;
	else if (search)
		rc = posix_spawnp(&pid, prog, &fa, &attr, argv, envp);
	else
		rc = posix_spawn(&pid, prog, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc) {
		st = rc == ENOMEM
		         ? asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: out of memory", s->op)
		         : spawn_failed(s, prog, rc, err);
		goto out;
	}

	c->pid = pid;
	c->in_fd = in[1];
	c->out_fd = out[0];
	c->err_fd = errp[0];
	close(in[0]);
	close(out[1]);
	close(errp[1]);
	in[0] = in[1] = out[0] = out[1] = errp[0] = errp[1] = -1;
	if (atomic_load_explicit(&pidfd_state, memory_order_relaxed) >= 0) {
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
	c->pid = -1;
	return r < 0 ? -1 : status;
}

void local_child_signal_group(const local_child *c, int sig)
{
	if (c->pid > 0)
		kill(-c->pid, sig);
}

void local_child_close(local_child *c)
{
	int *fds[] = {&c->in_fd, &c->out_fd, &c->err_fd, &c->pidfd};
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
