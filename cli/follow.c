/*
 * Following a spawned process from the command line (asp exec's streaming path, asp
 * attach): its output to our stdout/stderr as it comes, our stdin to it, our signals to
 * it, and the exit code at the end.
 *
 * Threads: the client's reader thread writes the output (a slow stdout holds the remote
 * process back, as a pipe would); the stdin thread forwards stdin with proc_write; the
 * main thread waits on a self-pipe for the end or a signal and forwards the signal.
 *
 * A process on a terminal (asp shell, asp exec -t, asp attach of one) is shown on ours:
 * raw mode while our stdin is a terminal (term.c), so every key, Ctrl-C included, is a
 * byte typed into the remote terminal; window-size changes are forwarded (SIGWINCH,
 * coalesced by the self-pipe); a signal from outside hangs the remote terminal up (HUP,
 * as a closing terminal does) and ends asp with 255. Raw mode is left before anything is
 * printed and before every return.
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

/* asp attach on a terminal: typing this byte (Ctrl-], as telnet has it) detaches. */
#define DETACH_KEY 0x1d

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
	/* terminals */
	bool tty;          /* the process is on a terminal: eof types VEOF, HUP ends it */
	bool raw;          /* our stdin is a terminal in raw mode */
	bool detach_key;   /* DETACH_KEY typed detaches (attach) */
	bool stdin_detach; /* ... and it was typed */
	bool stdin_hangup; /* our terminal went away (read gave EOF in raw mode) */
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

/*
 * Forwards stdin in chunks as it comes, eof at its end; stops when woken. What read()
 * returned goes out at once: no waiting to fill a chunk, so a key typed into a terminal
 * costs one proc_write (keys typed during that write go together in the next one).
 */
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
		bool detach = false;
		if (n > 0 && f->detach_key) {
			uint8_t *k = memchr(buf, DETACH_KEY, (size_t)n);
			if (k) {
				detach = true;
				n = k - buf;
			}
		}
		if (n <= 0 && f->raw) {
			/* EOF (or EIO) on a terminal in raw mode: it hung up. */
			pthread_mutex_lock(&f->mu);
			f->stdin_hangup = !detach;
			f->stdin_detach = detach;
			pthread_mutex_unlock(&f->mu);
			wake();
			break;
		}
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
		if (detach) {
			pthread_mutex_lock(&f->mu);
			f->stdin_detach = true;
			pthread_mutex_unlock(&f->mu);
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
	if (a && asp_proc_signal(f->client, &p, &r, a, &err) != ASP_OK) {
		cli_term_restore_for_message();
		cli_warn("%s: could not forward %s: %s: %s", f->c->cmd, name,
		         asp_strerror(err.code), err.message);
	}
	asp_arena_free(a);
}

/* Gives the remote terminal our window's size (after SIGWINCH). */
static void send_resize(follow *f)
{
	unsigned rows, cols;
	cli_term_size(STDIN_FILENO, &rows, &cols);
	asp_arena *a = asp_arena_new();
	asp_proc_resize_params p;
	asp_proc_resize_params_init(&p);
	p.proc = f->proc;
	p.rows = rows;
	p.cols = cols;
	asp_proc_resize_result r;
	asp_error err;
	/* A process that just finished is invalid_argument: its exit is on the way. */
	if (a && asp_proc_resize(f->client, &p, &r, a, &err) != ASP_OK &&
	    err.code != ASP_E_INVALID_ARGUMENT && err.code != ASP_E_NOT_FOUND) {
		/* The session goes on in raw mode: a line of its own, carriage returns added. */
		fprintf(stderr, "\r\nasp: %s: could not resize the terminal: %s: %s\r\n", f->c->cmd,
		        asp_strerror(err.code), err.message);
	}
	asp_arena_free(a);
}

static const char *forwarded_name(int sig)
{
	return sig == SIGINT    ? "INT"
	       : sig == SIGTERM ? "TERM"
	       : sig == SIGHUP  ? "HUP"
	       : sig == SIGQUIT ? "QUIT"
	                        : NULL;
}

/*
 * Runs one follow: `start` spawns or attaches (with the callbacks); then waits for the
 * end, forwarding signals (or, with `detach_on_int`, detaching on the first Ctrl-C).
 * Returns the exit code for the command line.
 */
typedef asp_status (*follow_start_fn)(void *ctx, asp_client *client, const asp_proc_callbacks *cb,
                                      void *user, uint64_t *proc, asp_error *err);

typedef struct follow_opts {
	const char *what;      /* for messages: "exec ls", "attach 5" */
	const uint64_t *asked; /* attach: the offsets asked for (stdout, stderr) */
	bool forward_stdin;    /* our stdin to the process */
	bool detach_on_int;    /* attach: Ctrl-C detaches */
	bool tty;              /* the process is on a terminal */
	bool raw;              /* ... shown on ours: raw mode, window size, tty signals */
	bool detach_key;       /* attach on a terminal: Ctrl-] detaches */
	bool *unsupported;     /* exec: spawn unsupported is reported here, quietly */
} follow_opts;

static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};
#define NSIGS (sizeof sigs / sizeof sigs[0])

static int follow_run(cli *c, asp_client *client, follow_start_fn start, void *ctx,
                      const follow_opts *o)
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
	f.asked[0] = o->asked ? o->asked[0] : 0;
	f.asked[1] = o->asked ? o->asked[1] : 0;
	f.tty = o->tty;
	f.detach_key = o->detach_key;
	pthread_mutex_init(&f.mu, NULL);

	/* Signals first: a Ctrl-C right after the spawn must not kill us and orphan it. */
	struct sigaction sa, old[NSIGS];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	/* QUIT and WINCH only for a terminal: plain exec keeps their defaults. */
	size_t nsigs = o->tty ? NSIGS : NSIGS - 2;
	for (size_t i = 0; i < nsigs; i++)
		sigaction(sigs[i], &sa, &old[i]);
	/*
	 * Raw before the start, so output replayed by an attach (on this thread, before it
	 * returns) and the first prompt are drawn as the remote terminal meant them.
	 */
	f.raw = o->raw && cli_term_raw(STDIN_FILENO) == 0;

	int rc = c->fail_code;
	asp_error err;
	asp_error_clear(&err);
	asp_status st = start(ctx, client, &callbacks, &f, &f.proc, &err);
	pthread_t stdin_thread;
	bool have_stdin = false;
	if (st == ASP_E_UNSUPPORTED && o->unsupported) {
		*o->unsupported = true; /* the caller does it another way, quietly */
		goto out;
	}
	if (st != ASP_OK) {
		cli_term_restore();
		rc = cli_fail(c, &err, "%s", o->what);
		goto out;
	}
	if (o->forward_stdin && pipe2(stdin_fds, O_CLOEXEC) == 0) {
		f.stdin_wake_r = stdin_fds[0];
		f.stdin_wake_w = stdin_fds[1];
		have_stdin = pthread_create(&stdin_thread, NULL, stdin_main, &f) == 0;
	}

	/*
	 * A message for the way out: printed once we have let go of the process, so no
	 * late output of it (a shell's last redraw on HUP) lands in the middle of the line.
	 */
	char note[256] = "";
	bool in_failed_note = false;
	bool forwarded_int = false;
	for (;;) {
		pthread_mutex_lock(&f.mu);
		bool ended = f.ended, gone = f.out_gone, in_failed = f.stdin_failed;
		bool hangup = f.stdin_hangup, detach = f.stdin_detach;
		pthread_mutex_unlock(&f.mu);
		if (ended)
			break;
		if (in_failed) {
			in_failed_note = true;
			goto out_detach;
		}
		if (gone) {
			/* Nobody reads our output (`| head`): end the process, as a pipe would. */
			send_signal(&f, f.tty ? "HUP" : "TERM");
			rc = 128 + SIGPIPE;
			goto out_detach;
		}
		if (detach) {
			snprintf(note, sizeof note, "%s: detached; process %llu keeps running",
			         c->cmd, (unsigned long long)f.proc);
			rc = CLI_EXIT_OK;
			goto out_detach;
		}
		if (hangup) {
			/* Our terminal is gone: so is the remote one, as with ssh (an attach
			 * only lets go of it). */
			cli_term_restore();
			if (!o->detach_on_int)
				send_signal(&f, "HUP");
			rc = c->fail_code;
			goto out_detach;
		}
		struct pollfd p = {wake_r, POLLIN, 0};
		poll(&p, 1, -1);
		unsigned char b[64];
		ssize_t n = read(wake_r, b, sizeof b);
		bool winch = false;
		for (ssize_t i = 0; i < n; i++) {
			if (b[i] == SIGWINCH) {
				winch = true; /* once per batch: a drag of the window is many */
				continue;
			}
			const char *name = forwarded_name(b[i]);
			if (!name)
				continue;
			if (o->detach_on_int) {
				snprintf(note, sizeof note,
				         "%s: detached; process %llu keeps running", c->cmd,
				         (unsigned long long)f.proc);
				rc = 128 + b[i];
				goto out_detach;
			}
			if (f.tty && (f.raw || b[i] != SIGINT)) {
				/*
				 * From outside (keys are bytes in raw mode): what a terminal's
				 * closing does, which ends an interactive shell that ignores TERM.
				 */
				send_signal(&f, "HUP");
				snprintf(note, sizeof note,
				         "%s: got %s: hung up the remote terminal (process %llu)",
				         c->cmd, name, (unsigned long long)f.proc);
				rc = c->fail_code;
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
		if (winch && f.raw)
			send_resize(&f);
	}
	if (f.lost) {
		cli_term_restore_for_message();
		rc = cli_fail(c, &f.err,
		              "%s: lost the connection (process %llu may still run; asp "
		              "attach %llu)",
		              o->what, (unsigned long long)f.proc, (unsigned long long)f.proc);
		goto out;
	}
	cli_term_restore();
	rc = cli_finish(c, cli_exit_code_of(c->cmd, f.ev.exit_code, f.ev.signal, f.ev.timed_out));
	goto out;
out_detach:
	asp_proc_detach(client, f.proc);
	if (note[0] || in_failed_note)
		cli_term_restore_for_message();
	if (note[0])
		cli_warn("%s", note);
	if (in_failed_note)
		rc = cli_fail(c, &f.stdin_err, "%s: forwarding stdin", o->what);
out:
	cli_term_restore();
	if (have_stdin) {
		ssize_t w = write(f.stdin_wake_w, "x", 1);
		(void)w;
		pthread_join(stdin_thread, NULL);
	}
	if (stdin_fds[0] >= 0) {
		close(stdin_fds[0]);
		close(stdin_fds[1]);
	}
	for (size_t i = 0; i < nsigs; i++)
		sigaction(sigs[i], &old[i], NULL);
	pthread_mutex_destroy(&f.mu);
	return rc;
}

/* ---- exec: spawn and follow ------------------------------------------------------- */

/* What the responder's hello offers (the client's cached hello: no round trip). */
typedef struct hello_caps {
	bool spawn;     /* hello lists spawn */
	bool eof_param; /* protocol 2: spawn takes stdin_eof */
	bool pty;       /* the feature "pty": spawn takes tty */
	char agent[96];
} hello_caps;

static void hello_caps_of(asp_client *client, hello_caps *h)
{
	memset(h, 0, sizeof *h);
	asp_arena *a = asp_arena_new();
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	asp_error err;
	if (a && asp_hello(client, &p, &r, a, &err) == ASP_OK) {
		for (size_t i = 0; i < r.ops.count && !h->spawn; i++)
			h->spawn = strcmp(r.ops.items[i], "spawn") == 0;
		for (size_t i = 0; i < r.features.count && !h->pty; i++)
			h->pty = strcmp(r.features.items[i], "pty") == 0;
		h->eof_param = r.protocol >= 2;
		snprintf(h->agent, sizeof h->agent, "%s", r.agent ? r.agent : "?");
	}
	asp_arena_free(a);
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
	hello_caps h;
	hello_caps_of(client, &h);
	if (!h.spawn) {
		*fallback = true;
		return 0;
	}
	char label[256];
	snprintf(label, sizeof label, "exec %s", p->command ? p->command : p->argv.items[0]);
	spawn_start s = {p, !forward_stdin, h.eof_param};
	/* A transport that cannot follow (spawn answers unsupported) falls back to exec. */
	follow_opts o = {.what = label, .forward_stdin = forward_stdin, .unsupported = fallback};
	return follow_run(c, client, start_spawn, &s, &o);
}

/* ---- a terminal: asp shell, asp exec -t -------------------------------------------- */

int cli_tty_follow(cli *c, asp_client *client, const asp_spawn_params *p, const char *what)
{
	hello_caps h;
	hello_caps_of(client, &h);
	if (!h.pty) {
		asp_error err;
		asp_error_set(&err, ASP_E_UNSUPPORTED, NULL,
		              "the sandbox has no terminals: its hello lacks the feature \"pty\" "
		              "(agent %s); asp exec without -t runs commands without one",
		              h.agent);
		return cli_fail(c, &err, "%s", what);
	}
	bool raw = isatty(STDIN_FILENO);
	unsigned rows, cols;
	cli_term_size(STDIN_FILENO, &rows, &cols);
	asp_tty tty = {.rows = rows, .cols = cols, .term = cli_term_type()};
	asp_spawn_params sp = *p;
	sp.tty = &tty;
	spawn_start s = {&sp, false, h.eof_param};
	follow_opts o = {.what = what, .forward_stdin = true, .tty = true, .raw = raw};
	return follow_run(c, client, start_spawn, &s, &o);
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

/*
 * Whether `proc` runs on a terminal, found by giving it our window's size: proc_resize
 * works only on a running terminal process (invalid_argument otherwise, unsupported
 * from a responder without terminals). The size is what we show it in anyway.
 */
static bool attach_on_terminal(asp_client *client, uint64_t proc)
{
	unsigned rows, cols;
	cli_term_size(STDIN_FILENO, &rows, &cols);
	asp_arena *a = asp_arena_new();
	asp_proc_resize_params p;
	asp_proc_resize_params_init(&p);
	p.proc = proc;
	p.rows = rows;
	p.cols = cols;
	asp_proc_resize_result r;
	asp_error err;
	bool ok = a && asp_proc_resize(client, &p, &r, a, &err) == ASP_OK;
	asp_arena_free(a);
	return ok;
}

int cli_attach_follow(cli *c, asp_client *client, const asp_proc_attach_params *p)
{
	char label[64];
	snprintf(label, sizeof label, "attach %llu", (unsigned long long)p->proc);
	uint64_t asked[2] = {p->stdout_offset, p->stderr_offset};
	follow_opts o = {.what = label, .asked = asked, .detach_on_int = true};
	if (isatty(STDIN_FILENO) && attach_on_terminal(client, p->proc)) {
		/* A terminal shown on ours: keys go to it, so Ctrl-] is the way out. */
		o.forward_stdin = o.tty = o.raw = o.detach_key = true;
	}
	return follow_run(c, client, start_attach, (void *)p, &o);
}
