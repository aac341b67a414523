/*
 * The stdio transport: spawns stdio.command (an argv, no shell) and speaks the RPC over
 * its stdin/stdout pipes. The client keeps three descriptors per connection (those two
 * pipes and the stderr one): closing wakes a waiting reader through the thread's own wake
 * fd (ASP_FDCH_WAKEABLE), not one per connection, and the child's exit shows without a
 * pidfd. The channel is a plain fd channel, so the engine watches an idle connection from
 * its shared poller instead of a thread (asp_rpc_new); that poller drains the child's
 * stderr into a ring whose tail explains the child's death. The child is always reaped.
 *
 * Past half of RLIMIT_NOFILE a connection is compact: one descriptor, a socketpair end
 * that is the child's stdin and stdout, and the child's stderr goes to a datagram socket
 * all compact children share (stderr_hub.c). Pipes stay the rule below that: a stat
 * round trip over a socketpair measured 44–47 µs against 37–44 µs over pipes
 * (docs/decisions.md).
 */
#include "asp/channel.h"
#include "asp/transport.h"
#include "stderr_hub.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifndef ASP_VERSION
#define ASP_VERSION "dev"
#endif

/* Bytes of the child's stderr kept for error messages. */
#define ERR_RING 4096
/* Bytes of that tail quoted in a message (asp_error's message holds 1024). */
#define ERR_QUOTE 600
/* How long a connection's end waits for the child to exit before reporting anyway. */
#define EXIT_WAIT_MS 500
/* After closing the child's stdin: how long it may take to exit, then TERM, then KILL. */
#define CLOSE_GRACE_MS 500
#define TERM_GRACE_MS  200
/* How long the first hello may take (an ssh or docker command may be slow to connect). */
#define CONNECT_TIMEOUT_MS 20000
/* Pipe capacity asked for (Linux allows up to /proc/sys/fs/pipe-max-size, 1 MiB). */
#define PIPE_BYTES (1024 * 1024)

typedef struct stdio_conn {
	int in_w, out_r, err_r; /* the child's stdin, stdout and stderr */
	bool compact;           /* in_w == out_r, a socket; err_r -1: the stderr hub */
	pid_t pid;
	const char *prog;        /* argv[0]; the config view outlives the connection */
	const char *config_path; /* for "check stdio.command in ..." */

	pthread_mutex_t mu; /* the fields below: the poller drains, anyone may explain */
	bool reaped, err_eof;
	int status;
	size_t err_total; /* bytes of stderr seen; the ring holds the last ERR_RING */
	char *ring;       /* ERR_RING bytes, made when the child first writes to stderr */
} stdio_conn;

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Under mu: stderr bytes into the ring, made on first use (out of memory: dropped). */
static void ring_put_locked(stdio_conn *s, const char *buf, size_t n)
{
	if (!s->ring && !(s->ring = malloc(ERR_RING)))
		return;
	for (size_t i = 0; i < n; i++)
		s->ring[(s->err_total + i) % ERR_RING] = buf[i];
	s->err_total += n;
}

/* The stderr hub's sink for a compact connection (under the hub's lock). */
static void from_hub(void *ctx, const char *buf, size_t n)
{
	stdio_conn *s = ctx;
	pthread_mutex_lock(&s->mu);
	ring_put_locked(s, buf, n);
	pthread_mutex_unlock(&s->mu);
}

/*
 * Under mu. Reads what stderr has (non-blocking) into the ring, at most 256 KiB at a time
 * so a child flooding it cannot hold the shared poller (or a deadline) for ever; false
 * at EOF or error.
 */
static bool drain_stderr_locked(stdio_conn *s)
{
	char buf[4096];
	for (int reads = 0; !s->err_eof; reads++) {
		if (reads == 64)
			return true; /* the poller comes back: the fd is still readable */
		ssize_t n = read(s->err_r, buf, sizeof buf);
		if (n > 0) {
			ring_put_locked(s, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return true;
		s->err_eof = true;
	}
	return false;
}

static bool on_stderr(void *ctx, int fd)
{
	(void)fd;
	stdio_conn *s = ctx;
	pthread_mutex_lock(&s->mu);
	bool more = drain_stderr_locked(s);
	pthread_mutex_unlock(&s->mu);
	return more;
}

/* Under mu. Reaps the child if it has exited. */
static bool try_reap_locked(stdio_conn *s)
{
	if (s->reaped)
		return true;
	int status;
	pid_t r = waitpid(s->pid, &status, WNOHANG);
	if (r == s->pid || (r < 0 && errno == ECHILD)) {
		s->reaped = true;
		s->status = r == s->pid ? status : 0;
	}
	return s->reaped;
}

/*
 * Waits up to `ms` for the child to exit, draining stderr meanwhile; with `until_eof` also
 * for stderr's EOF (so the last lines are in). True once reaped. Takes mu only to drain
 * and reap, so the poller draining stderr meanwhile never waits long for it. Without a
 * pidfd (one descriptor less per connection) an exit shows as stderr's EOF, or as a
 * waitpid looked at every few ms (every 10 ms while stderr stays open).
 */
static bool wait_exit(stdio_conn *s, int ms, bool until_eof)
{
	int64_t deadline = now_ms() + ms;
	int nap = 1;
	for (;;) {
		if (s->compact)
			stderr_hub_drain(); /* (before mu: the hub's lock comes first) */
		pthread_mutex_lock(&s->mu);
		drain_stderr_locked(s);
		bool reaped = try_reap_locked(s), eof = s->err_eof;
		pthread_mutex_unlock(&s->mu);
		if (reaped && (!until_eof || eof))
			return true;
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return reaped;
		/* stderr may outlive the child (a descendant holding it): look at waitpid too */
		struct pollfd p = {.fd = s->err_r, .events = POLLIN};
		if (left > (eof ? nap : 10))
			left = eof ? nap : 10;
		if (eof)
			nap = nap < 8 ? nap * 2 : 8;
		poll(&p, eof ? 0 : 1, (int)left);
	}
}

/* The tail of stderr, one line per " | ", control bytes shown as '?'. */
static void stderr_tail_locked(stdio_conn *s, char *out, size_t cap)
{
	size_t have = !s->ring ? 0 : s->err_total < ERR_RING ? s->err_total : ERR_RING;
	size_t start = s->err_total - have;
	char text[ERR_RING];
	for (size_t i = 0; i < have; i++)
		text[i] = s->ring[(start + i) % ERR_RING];
	while (have > 0 &&
	       (text[have - 1] == '\n' || text[have - 1] == '\r' || text[have - 1] == ' '))
		have--;
	size_t from = have > ERR_QUOTE ? have - ERR_QUOTE : 0;
	size_t o = 0;
	if (from > 0 && o + 3 < cap) {
		memcpy(out, "...", 3);
		o = 3;
	}
	for (size_t i = from; i < have && o + 4 < cap; i++) {
		unsigned char ch = (unsigned char)text[i];
		if (ch == '\n') {
			memcpy(out + o, " | ", 3);
			o += 3;
		} else {
			out[o++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
		}
	}
	out[o] = '\0';
}

static void stdio_explain(void *ctx, asp_error *err)
{
	stdio_conn *s = ctx;
	char tail[ERR_QUOTE + 64], what[ASP_ERROR_MESSAGE_MAX];
	/* An end of stream usually means the child is exiting: give it a moment. */
	wait_exit(s, err->code == ASP_E_TRANSPORT_ERROR ? EXIT_WAIT_MS : 0, true);
	pthread_mutex_lock(&s->mu);
	stderr_tail_locked(s, tail, sizeof tail);
	bool reaped = s->reaped;
	int status = s->status;
	pthread_mutex_unlock(&s->mu);

	if (err->code == ASP_E_PROTOCOL_ERROR) /* it answered, but not in frames */
		snprintf(what, sizeof what,
		         "%.300s: is %.64s an ASP responder (asp-agent --stdio), and does nothing "
		         "else (a banner, a shell startup file) write to its stdout?",
		         err->message, s->prog);
	else if (!reaped)
		snprintf(what, sizeof what, "%.300s (%.64s is still running)", err->message,
		         s->prog);
	else if (WIFEXITED(status))
		snprintf(what, sizeof what, "%.64s exited with status %d", s->prog,
		         WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(what, sizeof what, "%.64s was killed by signal %d (%s)", s->prog,
		         WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(what, sizeof what, "%.64s ended", s->prog);
	asp_status code = err->code;
	asp_error_set(err, code, s->config_path, "%s: %s; check stdio.command in %s", what,
	              tail[0] ? tail : "(nothing on stderr)",
	              s->config_path ? s->config_path : "the config");
}

/*
 * asp_channel_free's release: EOF on the child's stdin asks it to exit; a child that does
 * not is terminated.
 */
static void stdio_free(void *ch)
{
	stdio_conn *s = (stdio_conn *)ch;
	if (s->compact) {
		/* forgotten before the reap: a pid reused afterwards is someone else's */
		stderr_hub_remove(s->pid);
		shutdown(s->in_w, SHUT_WR); /* the child's stdin ends; its stdout stays ours */
	} else {
		close(s->in_w);
	}
	if (!wait_exit(s, CLOSE_GRACE_MS, false)) {
		kill(s->pid, SIGTERM);
		if (!wait_exit(s, TERM_GRACE_MS, false)) {
			kill(s->pid, SIGKILL);
			while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
				;
		}
	}
	close(s->out_r);
	if (!s->compact)
		close(s->err_r);
	pthread_mutex_destroy(&s->mu);
	free(s->ring);
	free(s);
}

/* ---- spawning --------------------------------------------------------------------- */

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static int spawn_child(char *const argv[], int in_r, int out_w, int err_w, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	if (posix_spawn_file_actions_init(&fa))
		return ENOMEM;
	if (posix_spawnattr_init(&attr)) {
		posix_spawn_file_actions_destroy(&fa);
		return ENOMEM;
	}
	posix_spawn_file_actions_adddup2(&fa, in_r, 0);
	posix_spawn_file_actions_adddup2(&fa, out_w, 1);
	posix_spawn_file_actions_adddup2(&fa, err_w, 2);
	/* The child starts with no blocked signals and SIGPIPE & co. at their defaults, even
	 * when the application blocks or ignores them. */
	sigset_t none, def;
	sigemptyset(&none);
	sigemptyset(&def);
	sigaddset(&def, SIGPIPE);
	sigaddset(&def, SIGCHLD);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGQUIT);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGHUP);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &def);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	int e = posix_spawnp(pid, argv[0], &fa, &attr, argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	return e;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s && s[1] ? s + 1 : p;
}

/*
 * The first time a connection finds the process's descriptor limit reached, the soft
 * RLIMIT_NOFILE is raised to the hard one (once per process; it is never lowered again).
 */
static void raise_nofile_once(void)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static bool raised;
	pthread_mutex_lock(&mu);
	struct rlimit r;
	if (!raised && getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
		raised = true;
	}
	pthread_mutex_unlock(&mu);
}

/* Which limit stopped a pipe, and how to raise it. */
static asp_status fds_error(int e, asp_error *err)
{
	struct rlimit r = {0, 0};
	getrlimit(RLIMIT_NOFILE, &r);
	if (e == EMFILE)
		return asp_error_set(
		    err, ASP_E_TRANSPORT_ERROR, NULL,
		    "stdio transport: this process has as many open files as RLIMIT_NOFILE allows "
		    "(soft %llu, hard %llu; the client raised the soft limit to the hard one "
		    "once): each stdio connection holds 3, or 1 past half the limit; raise the "
		    "hard limit (ulimit -Hn as root, LimitNOFILE= for a systemd unit, nofile in "
		    "limits.conf)",
		    (unsigned long long)r.rlim_cur, (unsigned long long)r.rlim_max);
	if (e == ENFILE)
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "stdio transport: the system's open-file table is full "
		                     "(fs.file-max): raise it with sysctl fs.file-max=N");
	asp_error_errno(err, e, NULL, "stdio transport: creating the child's stdio");
	return err->code = ASP_E_TRANSPORT_ERROR;
}

/* The child's stdin, stdout and stderr pipes: fds[1], fds[2], fds[4] are ours. */
static int make_fds(int fds[6])
{
	for (int attempt = 0;; attempt++) {
		int e = 0;
		for (int i = 0; i < 6 && !e; i += 2)
			if (pipe2(fds + i, O_CLOEXEC) < 0)
				e = errno;
		if (!e)
			return 0;
		close_all(fds, 6);
		for (int i = 0; i < 6; i++)
			fds[i] = -1;
		if (e != EMFILE || attempt > 0)
			return e;
		raise_nofile_once(); /* then once more: another thread may have raised it */
	}
}

/*
 * Whether the pipes just made sit past half of RLIMIT_NOFILE (descriptors are numbered
 * lowest free first, so the highest tells how many are open), the soft limit raised to
 * the hard one first.
 */
static bool past_half(const int fds[6])
{
	int top = 0;
	for (int i = 0; i < 6; i++)
		top = fds[i] > top ? fds[i] : top;
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) < 0 || r.rlim_cur == RLIM_INFINITY ||
	    (rlim_t)top < r.rlim_cur / 2)
		return false;
	raise_nofile_once();
	return getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
	       (rlim_t)top >= r.rlim_cur / 2;
}

static asp_status spawn_error(const asp_config_view *cfg, int e, asp_error *err)
{
	const char *where = cfg->path ? cfg->path : "the config";
	if (e == EAGAIN) /* fork: the host's or this user's process limit */
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, cfg->path,
		                     "cannot run %s: %s: the host is out of processes or threads "
		                     "(each idle asp-agent is 2: see /proc/sys/kernel/pid_max, "
		                     "/proc/sys/kernel/threads-max and `ulimit -u`; raise them, "
		                     "e.g. `sysctl -w kernel.pid_max=4194304`)",
		                     cfg->stdio.argv[0], strerror(e));
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, cfg->path,
	                     "cannot run %s: %s; check stdio.command in %s", cfg->stdio.argv[0],
	                     strerror(e), where);
}

/* A connection's state before its child runs (pid 0 until then). */
static stdio_conn *conn_new(const asp_config_view *cfg)
{
	stdio_conn *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->prog = base_name(cfg->stdio.argv[0]);
	s->config_path = cfg->path;
	pthread_mutex_init(&s->mu, NULL);
	return s;
}

/* A compact connection: one socketpair end for stdin and stdout, stderr to the hub. */
static asp_status open_compact(const asp_config_view *cfg, stdio_conn **out, asp_error *err)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return fds_error(errno, err);
	int size = PIPE_BYTES; /* as the pipes: a large read or write in fewer wake-ups */
	for (int i = 0; i < 2; i++) {
		setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
		setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	}
	/* allocated first: once the child runs, its sink must exist */
	stdio_conn *s = conn_new(cfg);
	if (!s) {
		close_all(sv, 2);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	int hub = stderr_hub_lock();
	if (hub < 0) {
		int e = errno;
		close_all(sv, 2);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return fds_error(e, err);
	}
	int e = spawn_child((char *const *)cfg->stdio.argv, sv[1], sv[1], hub, &s->pid);
	if (!e)
		stderr_hub_add_locked(s->pid, from_hub, s);
	stderr_hub_unlock();
	close(sv[1]);
	if (e) {
		close(sv[0]);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return spawn_error(cfg, e, err);
	}
	s->compact = true;
	s->in_w = s->out_r = sv[0];
	s->err_r = -1;
	s->err_eof = true; /* nothing to wait for: the hub has no end per child */
	fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	*out = s;
	return ASP_OK;
}

static asp_status open_conn(const asp_config_view *cfg, stdio_conn **out, asp_error *err)
{
	const char *where = cfg->path ? cfg->path : "the config";
	if (!cfg->stdio.argv || cfg->stdio.argc == 0 || !cfg->stdio.argv[0])
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, cfg->path,
		                     "the stdio transport needs stdio.command (an argv, e.g. "
		                     "[\"asp-agent\", \"--stdio\"]) in %s",
		                     where);
	int fds[6] = {-1, -1, -1, -1, -1, -1}; /* in_r in_w out_r out_w err_r err_w */
	int e = make_fds(fds);
	if (e == EMFILE) /* three pipes do not fit: one socketpair may */
		return open_compact(cfg, out, err);
	if (e)
		return fds_error(e, err);
	if (past_half(fds)) {
		close_all(fds, 6);
		return open_compact(cfg, out, err);
	}
	/* Bigger pipes: a large read or write moves in fewer wake-ups (best effort). */
	fcntl(fds[1], F_SETPIPE_SZ, PIPE_BYTES);
	fcntl(fds[3], F_SETPIPE_SZ, PIPE_BYTES);
	stdio_conn *s = conn_new(cfg);
	if (!s) {
		close_all(fds, 6);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	e = spawn_child((char *const *)cfg->stdio.argv, fds[0], fds[3], fds[5], &s->pid);
	close(fds[0]);
	close(fds[3]);
	close(fds[5]);
	if (e) {
		close(fds[1]);
		close(fds[2]);
		close(fds[4]);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return spawn_error(cfg, e, err);
	}
	s->in_w = fds[1];
	s->out_r = fds[2];
	s->err_r = fds[4];
	fcntl(s->err_r, F_SETFL, fcntl(s->err_r, F_GETFL) | O_NONBLOCK);
	/* The channel reads first and polls on EAGAIN: one poll per answer, not two. */
	fcntl(s->out_r, F_SETFL, fcntl(s->out_r, F_GETFL) | O_NONBLOCK);
	*out = s;
	return ASP_OK;
}

/*
 * The backend is the RPC engine itself. One hello on connect: it checks that the command
 * is an ASP responder (a wrong one fails here with its stderr, not on a later call) and
 * tells the engine the responder's max_message.
 */
static asp_status stdio_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                             asp_error *err)
{
	stdio_conn *s = NULL;
	asp_status st = open_conn(cfg, &s, err);
	if (st)
		return st;
	/* Non-blocking stdin (PRIVATE_WFD): a send stuck on a full pipe also wakes on close. */
	asp_channel *ch;
	st = asp_fd_channel_new(s->out_r, s->in_w, ASP_FDCH_WAKEABLE | ASP_FDCH_PRIVATE_WFD, &ch,
	                        err);
	if (st) {
		stdio_free(s); /* closes the fds, reaps the child */
		return st;
	}
	asp_fd_channel_set_owner(ch, stdio_explain, stdio_free, s);
	if (!s->compact)
		asp_fd_channel_watch(ch, s->err_r, on_stderr, s);
	asp_rpc *rpc;
	st = asp_rpc_new(ch, 0, &rpc, err);
	if (st)
		return st;
	unsigned call_ms = cfg->call_timeout_ms ? cfg->call_timeout_ms : ASP_CALL_TIMEOUT_DEFAULT;
	asp_rpc_set_call_timeout(rpc, call_ms);
	asp_fd_channel_set_stall(ch, call_ms); /* a stopped agent fails a big write too */
	asp_arena *a = asp_arena_new();
	if (!a) {
		asp_rpc_free(rpc);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "libasp/" ASP_VERSION;
	hp.has_protocol = true;
	hp.protocol = ASP_PROTOCOL;
	asp_hello_result hr;
	st = asp_rpc_call(rpc, ASP_OP_HELLO, &hp, &hr, a, CONNECT_TIMEOUT_MS, err);
	if (st == ASP_E_TIMEOUT) { /* a command that never answers must not hang the open */
		char tail[ERR_QUOTE + 64];
		if (s->compact)
			stderr_hub_drain();
		pthread_mutex_lock(&s->mu);
		drain_stderr_locked(s);
		stderr_tail_locked(s, tail, sizeof tail);
		pthread_mutex_unlock(&s->mu);
		st = asp_error_set(err, ASP_E_TRANSPORT_ERROR, cfg->path,
		                   "%s did not answer hello within %d s: %s; is it asp-agent "
		                   "--stdio? check stdio.command in %s",
		                   s->prog, CONNECT_TIMEOUT_MS / 1000,
		                   tail[0] ? tail : "(nothing on stderr)",
		                   cfg->path ? cfg->path : "the config");
	}
	if (st == ASP_OK && hr.protocol < 1)
		st = asp_error_set(err, ASP_E_PROTOCOL_ERROR, cfg->path,
		                   "%s speaks protocol %llu, this client needs 1", s->prog,
		                   (unsigned long long)hr.protocol);
	asp_arena_free(a);
	if (st) {
		asp_rpc_free(rpc);
		return st;
	}
	*ops = &asp_rpc_ops;
	*self = rpc;
	return ASP_OK;
}

static void stdio_abort(void *self)
{
	asp_rpc_close(self);
}

static void stdio_close_backend(void *self)
{
	asp_rpc_free(self);
}

static bool stdio_alive(void *self)
{
	return asp_rpc_alive(self);
}

const asp_transport asp_transport_stdio = {
    .kind = ASP_TRANSPORT_STDIO,
    .name = "stdio",
    .open = stdio_open,
    .abort = stdio_abort,
    .close = stdio_close_backend,
    .alive = stdio_alive,
    .subscribe = asp_rpc_subscribe,
    .unsubscribe = asp_rpc_unsubscribe,
};
