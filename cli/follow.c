/*
 * Following a spawned process from the command line (asp exec's streaming path, asp
 * attach): its output to our stdout/stderr as it comes, our stdin to it, our signals to
 * it, and the exit code at the end.
 *
 * Threads: the client's reader thread writes the output (a slow stdout holds the remote
 * process back, as a pipe would); the stdin thread forwards stdin with proc_write; the
 * main thread waits on a self-pipe for the end or a signal and forwards the signal.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STDIN_CHUNK (256u * 1024u)

/*
 * The self-pipe: signal handlers and callbacks write one byte. Made once and never
 * closed, so a late handler or callback can never write into a reused fd.
 */
static int wake_r = -1, wake_w = -1;

static void on_signal(int sig)
{
	int e = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(wake_w, &b, 1);
	(void)w;
	errno = e;
}

static void wake(void)
{
	on_signal(0);
}

typedef struct follow {
	cli *c;
	asp_client *client;
	uint64_t proc;
	pthread_mutex_t mu;
	bool ended, lost, out_gone;
	asp_exit_event ev;
	char sig[16];
	asp_error err;
	bool seen[2];
	uint64_t asked[2];
	/* stdin forwarding */
	int stdin_wake_r, stdin_wake_w;
	bool stdin_failed;
	asp_error stdin_err;
} follow;

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	follow *f = user;
	int s = stream == ASP_STREAM_STDERR;
	pthread_mutex_lock(&f->mu);
	bool gone = f->out_gone, first = !f->seen[s];
	f->seen[s] = true;
	pthread_mutex_unlock(&f->mu);
	if (first && offset > f->asked[s])
		cli_warn("%s: the first %llu bytes of %s are no longer held by the sandbox",
		         f->c->cmd, (unsigned long long)offset, s ? "stderr" : "stdout");
	if (gone)
		return;
	if (cli_write_all(s ? STDERR_FILENO : STDOUT_FILENO, data, len) < 0 && errno == EPIPE) {
		pthread_mutex_lock(&f->mu);
		f->out_gone = true; /* a reader like `head` went away: see follow_run */
		pthread_mutex_unlock(&f->mu);
		wake();
	}
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	follow *f = user;
	pthread_mutex_lock(&f->mu);
	f->ended = true;
	f->ev = *ev;
	f->ev.signal = NULL;
	if (ev->signal) {
		snprintf(f->sig, sizeof f->sig, "%s", ev->signal);
		f->ev.signal = f->sig;
	}
	pthread_mutex_unlock(&f->mu);
	wake();
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	follow *f = user;
	pthread_mutex_lock(&f->mu);
	f->ended = f->lost = true;
	f->err = *err;
	pthread_mutex_unlock(&f->mu);
	wake();
}

static const asp_proc_callbacks callbacks = {on_output, on_exit_ev, on_lost};

/* ---- stdin ------------------------------------------------------------------------ */

static asp_status write_stdin(follow *f, const uint8_t *data, size_t len, bool eof)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(&f->stdin_err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = f->proc;
	p.data = (asp_bytes){data, len};
	p.eof = eof;
	asp_proc_write_result r;
	asp_status st = asp_proc_write(f->client, &p, &r, a, &f->stdin_err);
	asp_arena_free(a);
	return st;
}

/* Forwards stdin in chunks as it comes, eof at its end; stops when woken. */
static void *stdin_main(void *arg)
{
	follow *f = arg;
	uint8_t *buf = malloc(STDIN_CHUNK);
	if (!buf)
		return NULL;
	for (;;) {
		struct pollfd p[2] = {{STDIN_FILENO, POLLIN, 0}, {f->stdin_wake_r, POLLIN, 0}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break; /* the process ended: nothing more to forward */
		if (!p[0].revents)
			continue;
		ssize_t n = read(STDIN_FILENO, buf, STDIN_CHUNK);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		asp_status st = write_stdin(f, buf, n > 0 ? (size_t)n : 0, n <= 0);
		if (st != ASP_OK) {
			/* The process exiting first is normal: its exit decides the outcome. */
			pthread_mutex_lock(&f->mu);
			f->stdin_failed =
			    !f->ended && st != ASP_E_IO_ERROR && st != ASP_E_INVALID_ARGUMENT;
			pthread_mutex_unlock(&f->mu);
			if (f->stdin_failed)
				wake();
			break;
		}
		if (n <= 0)
			break;
	}
	free(buf);
	return NULL;
}

/* ---- the main loop ---------------------------------------------------------------- */

/*
 * 124 on timeout, 128+N for signal N, else the exit status
 * (docs/design.md, "The `asp` command line").
 */
int cli_exit_code_of(const char *cmd, int64_t exit_code, const char *signal, bool timed_out)
{
	if (timed_out) {
		/* 124 alone reads like the command's own status: say what happened. */
		cli_warn("%s: the command timed out and was killed (with its process group)", cmd);
		return CLI_EXIT_TIMEOUT;
	}
	if (signal) {
		int n = cli_signal_number(signal);
		if (n > 0 && n < 127)
			return 128 + n;
		cli_warn("%s: the command died of signal %s, unknown here", cmd, signal);
		return CLI_EXIT_EXEC_FAIL;
	}
	if (exit_code < 0 || exit_code > 255)
		return (int)(exit_code & 0xff);
	return (int)exit_code;
}

static void send_signal(follow *f, const char *name)
{
	asp_arena *a = asp_arena_new();
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = f->proc;
	p.signal = name;
	asp_proc_signal_result r;
	asp_error err;
	if (a && asp_proc_signal(f->client, &p, &r, a, &err) != ASP_OK)
		cli_warn("%s: could not forward %s: %s: %s", f->c->cmd, name,
		         asp_strerror(err.code), err.message);
	asp_arena_free(a);
}

static const char *forwarded_name(int sig)
{
	return sig == SIGINT ? "INT" : sig == SIGTERM ? "TERM" : sig == SIGHUP ? "HUP" : NULL;
}

/*
 * Runs one follow: `start` spawns or attaches (with the callbacks); then waits for the
 * end, forwarding signals (or, with `detach_on_int`, detaching on the first Ctrl-C).
 * Returns the exit code for the command line.
 */
typedef asp_status (*follow_start_fn)(void *ctx, asp_client *client, const asp_proc_callbacks *cb,
                                      void *user, uint64_t *proc, asp_error *err);

static int follow_run(cli *c, asp_client *client, follow_start_fn start, void *ctx,
                      const uint64_t asked[2], bool forward_stdin, bool detach_on_int,
                      const char *what, bool *unsupported)
{
	int stdin_fds[2] = {-1, -1};
	if (wake_w < 0) {
		int fds[2];
		if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
			return cli_fail_errno(c, errno, "%s", c->cmd);
		wake_r = fds[0];
		wake_w = fds[1];
	}
	follow f = {.c = c, .client = client, .stdin_wake_r = -1, .stdin_wake_w = -1};
	f.asked[0] = asked ? asked[0] : 0;
	f.asked[1] = asked ? asked[1] : 0;
	pthread_mutex_init(&f.mu, NULL);

	/* Signals first: a Ctrl-C right after the spawn must not kill us and orphan it. */
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa, old[3];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);

	int rc = c->fail_code;
	asp_error err;
	asp_error_clear(&err);
	asp_status st = start(ctx, client, &callbacks, &f, &f.proc, &err);
	pthread_t stdin_thread;
	bool have_stdin = false;
	if (st == ASP_E_UNSUPPORTED && unsupported) {
		*unsupported = true; /* the caller does it another way, quietly */
		goto out;
	}
	if (st != ASP_OK) {
		rc = cli_fail(c, &err, "%s", what);
		goto out;
	}
	if (forward_stdin && pipe2(stdin_fds, O_CLOEXEC) == 0) {
		f.stdin_wake_r = stdin_fds[0];
		f.stdin_wake_w = stdin_fds[1];
		have_stdin = pthread_create(&stdin_thread, NULL, stdin_main, &f) == 0;
	}

	bool forwarded_int = false;
	for (;;) {
		pthread_mutex_lock(&f.mu);
		bool ended = f.ended, gone = f.out_gone, in_failed = f.stdin_failed;
		pthread_mutex_unlock(&f.mu);
		if (ended)
			break;
		if (in_failed) {
			rc = cli_fail(c, &f.stdin_err, "%s: forwarding stdin", what);
			goto out_detach;
		}
		if (gone) {
			/* Nobody reads our output (`| head`): end the process, as a pipe would. */
			send_signal(&f, "TERM");
			rc = 128 + SIGPIPE;
			goto out_detach;
		}
		struct pollfd p = {wake_r, POLLIN, 0};
		poll(&p, 1, -1);
		unsigned char b[16];
		ssize_t n = read(wake_r, b, sizeof b);
		for (ssize_t i = 0; i < n; i++) {
			const char *name = forwarded_name(b[i]);
			if (!name)
				continue;
			if (detach_on_int) {
				cli_warn("%s: detached; process %llu keeps running", c->cmd,
				         (unsigned long long)f.proc);
				rc = 128 + b[i];
				goto out_detach;
			}
			if (b[i] == SIGINT && forwarded_int) {
				/* A second Ctrl-C: the user means it. */
				send_signal(&f, "KILL");
				continue;
			}
			forwarded_int = forwarded_int || b[i] == SIGINT;
			send_signal(&f, name);
		}
	}
	if (f.lost) {
		rc = cli_fail(c, &f.err,
		              "%s: lost the connection (process %llu may still run; asp "
		              "attach %llu)",
		              what, (unsigned long long)f.proc, (unsigned long long)f.proc);
		goto out;
	}
	rc = cli_finish(c, cli_exit_code_of(c->cmd, f.ev.exit_code, f.ev.signal, f.ev.timed_out));
	goto out;
out_detach:
	asp_proc_detach(client, f.proc);
out:
	if (have_stdin) {
		ssize_t w = write(f.stdin_wake_w, "x", 1);
		(void)w;
		pthread_join(stdin_thread, NULL);
	}
	if (stdin_fds[0] >= 0) {
		close(stdin_fds[0]);
		close(stdin_fds[1]);
	}
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
	pthread_mutex_destroy(&f.mu);
	return rc;
}

/* ---- exec: spawn and follow ------------------------------------------------------- */

/*
 * Whether the responder's hello lists spawn; *eof_param: it speaks protocol 2, whose
 * spawn takes stdin_eof (the hello is the client's cached one: no round trip).
 */
static bool has_spawn(asp_client *client, bool *eof_param)
{
	asp_arena *a = asp_arena_new();
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	asp_error err;
	bool found = false;
	*eof_param = false;
	if (a && asp_hello(client, &p, &r, a, &err) == ASP_OK) {
		for (size_t i = 0; i < r.ops.count && !found; i++)
			found = strcmp(r.ops.items[i], "spawn") == 0;
		*eof_param = r.protocol >= 2;
	}
	asp_arena_free(a);
	return found;
}

typedef struct spawn_start {
	const asp_spawn_params *p;
	bool close_stdin; /* without --stdin: an empty stdin, as exec gives */
	bool eof_param;   /* the responder's spawn closes it itself (stdin_eof, protocol 2) */
} spawn_start;

static asp_status start_spawn(void *ctx, asp_client *client, const asp_proc_callbacks *cb,
                              void *user, uint64_t *proc, asp_error *err)
{
	spawn_start *s = ctx;
	asp_spawn_params p = *s->p;
	p.stdin_eof = s->close_stdin && s->eof_param;
	asp_status st = asp_spawn_start(client, &p, cb, user, proc, err);
	if (st != ASP_OK || !s->close_stdin || p.stdin_eof)
		return st; /* an older responder ignores stdin_eof: then proc_write(eof) */
	follow *f = user;
	if (write_stdin(f, NULL, 0, true) != ASP_OK && f->stdin_err.code != ASP_E_IO_ERROR)
		cli_warn("%s: could not close the process's stdin: %s", f->c->cmd,
		         f->stdin_err.message); /* io_error: it exited already */
	return ASP_OK;
}

int cli_exec_follow(cli *c, asp_client *client, const asp_spawn_params *p, bool forward_stdin,
                    bool *fallback)
{
	*fallback = false;
	bool eof_param;
	if (!has_spawn(client, &eof_param)) {
		*fallback = true;
		return 0;
	}
	char label[256];
	snprintf(label, sizeof label, "exec %s", p->command ? p->command : p->argv.items[0]);
	spawn_start s = {p, !forward_stdin, eof_param};
	/* A transport that cannot follow (spawn answers unsupported) falls back to exec. */
	return follow_run(c, client, start_spawn, &s, NULL, forward_stdin, false, label, fallback);
}

/* ---- attach ----------------------------------------------------------------------- */

static asp_status start_attach(void *ctx, asp_client *client, const asp_proc_callbacks *cb,
                               void *user, uint64_t *proc, asp_error *err)
{
	const asp_proc_attach_params *p = ctx;
	*proc = p->proc;
	((follow *)user)->proc = p->proc;
	return asp_proc_attach_start(client, p, cb, user, err);
}

int cli_attach_follow(cli *c, asp_client *client, const asp_proc_attach_params *p)
{
	char label[64];
	snprintf(label, sizeof label, "attach %llu", (unsigned long long)p->proc);
	uint64_t asked[2] = {p->stdout_offset, p->stderr_offset};
	return follow_run(c, client, start_attach, (void *)p, asked, false, true, label, NULL);
}
