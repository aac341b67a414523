/*
 * The stdio server. Leader/followers: one thread at a time (the leader) reads a frame;
 * once it has decoded it, it hands leadership to an idle thread and serves the request
 * itself, so a request never waits for a thread hop and a slow exec never blocks the
 * reading of the next request. Threads are created on demand up to MAX_WORKERS; when
 * all are busy nobody reads, and requests wait in the pipe. A thread idle for LINGER_MS
 * ends, and the first thread (the caller's) takes the reading back from a leader that
 * waited that long for input: at rest only the caller's thread is left, so thousands of
 * idle agents on one host hold one task each (and the keeper).
 *
 * A lone exec (nothing else being served, nothing more read ahead) keeps leadership:
 * the exec watches the input while it waits for its command and hands leadership over
 * only if more input comes (asp_local_watch_input). Handing it over before every exec
 * cost two sleeps per exec: the follower's wake-up and the leader's wait once it found
 * someone else reading; with the commands' own sleeps, most of an exec's time on two
 * busy cores is waiting for a core after a wake-up. The exec cannot watch while its
 * command starts (the vfork wait: a cwd or program on a hung network mount would hold
 * it), so the local backend's reaper thread fires the watch if the start takes more than
 * 20 ms (asp_local_watch_input): a slow exec never blocks the reading of the next
 * request for longer.
 *
 * The connection is bound to the local backend (asp_local_connect) with write_frame as
 * its sink, so spawned processes' notifications and the responses share one writer; a
 * pump blocked on a client that does not read leaves its process's pipe unread.
 */
#include "serve.h"

#include "asp/channel.h"
#include "asp/server.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Threads serving requests at most, this one included. */
#define MAX_WORKERS 64
/* Workers run the local backend; its deepest path (recursive remove) fits easily. */
#define WORKER_STACK (1024 * 1024)
/* A response buffer grown past this is released after use rather than kept. */
#define KEEP_BUF (256 * 1024)
/*
 * The decoding budget of a connection (docs/faults.md): frames and msgpack objects of
 * the requests being served at once, at most BUDGET_FACTOR * max_message (one request
 * alone may take it all). Requests costing less than BUDGET_MIN are not counted: 64
 * workers at most hold 4 MiB of them.
 */
#define BUDGET_FACTOR 4
#define BUDGET_MIN    (64 * 1024)
/*
 * How long an idle thread lingers before it ends: bursts reuse threads rather than
 * making one per request.
 */
#define LINGER_MS 1000

typedef struct server {
	asp_local *backend;
	asp_local_conn *conn;
	asp_channel *in;
	int in_fd;
	int out_fd;
	size_t max_message;

	sigset_t mask; /* the caller's signal mask, for the workers */

	pthread_mutex_t mu; /* the fields below up to out_mu */
	pthread_cond_t idle_cv;
	pthread_cond_t first_cv; /* the first thread waits here when idle: it reads next */
	pthread_cond_t gone_cv;  /* a worker ended */
	bool first_idle;
	bool reading; /* a leader is reading */
	bool stop;    /* EOF or a fatal error: nobody reads any more */
	bool failed;  /* a protocol error: the output closes once the requests read are answered */
	int exit_code;
	bool ended;              /* asp_local_shutdown's answer, from the thread that saw the end */
	unsigned idle, nthreads; /* workers alive; the calling thread is one more */
	unsigned serving;        /* threads serving a request now */
	size_t budget, in_use;   /* decoding budget, and what the requests being served hold */
	pthread_cond_t budget_cv; /* in_use went down, or stop */

	pthread_mutex_t out_mu; /* one frame at a time on out_fd */
	bool out_dead;          /* closed after a protocol error, or the reader went away */
} server;

/* After a short writev of `done` bytes from iov[at..n): the new `at`, iov[at] trimmed. */
static int iov_advance(struct iovec *iov, int n, int at, size_t done)
{
	while (at < n && done >= iov[at].iov_len)
		done -= iov[at++].iov_len;
	if (at < n) {
		iov[at].iov_base = (char *)iov[at].iov_base + done;
		iov[at].iov_len -= done;
	}
	return at;
}

/* Writes one frame given in pieces (advanced in place); false once the output is dead. */
static bool write_frame_v(server *s, struct iovec *iov, int n)
{
	pthread_mutex_lock(&s->out_mu);
	int at = 0;
	while (!s->out_dead && at < n) {
		ssize_t w = writev(s->out_fd, iov + at, n - at);
		if (w < 0) {
			if (errno != EINTR) {
				asp_server_log("asp-agent: writing a response: %s; no more answers",
				               strerror(errno));
				s->out_dead = true;
			}
			continue;
		}
		at = iov_advance(iov, n, at, (size_t)w);
	}
	bool ok = !s->out_dead;
	pthread_mutex_unlock(&s->out_mu);
	return ok;
}

static bool write_frame(server *s, const uint8_t *frame, size_t len)
{
	struct iovec one = {(void *)frame, len};
	return write_frame_v(s, &one, 1);
}

/* The connection's sink: notifications go out through the same writer. */
static bool sink_send(void *ctx, const uint8_t *frame, size_t len)
{
	return write_frame(ctx, frame, len);
}

/* Responses with large bins (reads) go out without first being copied into one buffer. */
static bool sink_sendv(void *ctx, const struct iovec *iov, int n)
{
	struct iovec stack[8]; /* a private copy: write_frame_v advances it */
	struct iovec *v = n <= 8 ? stack : malloc((size_t)n * sizeof *v);
	if (!v)
		return false;
	memcpy(v, iov, (size_t)n * sizeof *iov);
	bool ok = write_frame_v(ctx, v, n);
	if (v != stack)
		free(v);
	return ok;
}

/* After a protocol error: the client gets EOF and not one more byte. */
static void close_output(server *s)
{
	pthread_mutex_lock(&s->out_mu);
	if (!s->out_dead) {
		shutdown(s->out_fd, SHUT_WR); /* a socket: EOF now, though fd 0 keeps it open */
		int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (devnull >= 0) { /* dup2, not close: the fd number must not be reused */
			dup2(devnull, s->out_fd);
			close(devnull);
		}
		s->out_dead = true;
	}
	pthread_mutex_unlock(&s->out_mu);
}

/*
 * Under mu: nobody reads any more (EOF, a protocol error, out of memory); wakes the idle
 * workers so they exit. True for the one caller that must then call end_processes:
 * whichever thread saw the end, since another one (the first thread too) may be waiting
 * on one of those processes (proc_wait) and would otherwise wait forever.
 */
static bool stop_locked(server *s, int exit_code)
{
	if (exit_code)
		s->exit_code = exit_code;
	pthread_cond_broadcast(&s->idle_cv);
	pthread_cond_broadcast(&s->first_cv);
	pthread_cond_broadcast(&s->budget_cv);
	if (s->stop)
		return false;
	s->stop = true;
	return true;
}

/*
 * End of input (docs/design.md, "Concurrency and lifetime"): end the spawned processes
 * (TERM, KILL 2 s later) while the requests in flight finish, so a proc_wait among them
 * is answered too. Outside mu.
 */
static void end_processes(server *s)
{
	bool ended = asp_local_shutdown(s->backend);
	pthread_mutex_lock(&s->mu);
	s->ended = ended;
	pthread_mutex_unlock(&s->mu);
}

/* A message read by the leader, decoded and ready to serve. */
typedef struct job {
	asp_request *req; /* decoded, or refused with an id (serving answers the refusal) */
	size_t cost;      /* taken from the budget; 0 when not counted */
} job;

/* Frees what `j` holds and gives its cost back to the budget. */
static void job_release(server *s, job *j)
{
	asp_request_free(j->req);
	j->req = NULL;
	if (j->cost) {
		pthread_mutex_lock(&s->mu);
		s->in_use -= j->cost;
		pthread_cond_broadcast(&s->budget_cv);
		pthread_mutex_unlock(&s->mu);
		j->cost = 0;
	}
}

/*
 * Takes `cost` from the budget, waiting while the requests being served hold too much
 * (they finish without us). The reader waits here, so nothing more is read meanwhile.
 */
static void budget_take(server *s, job *j, size_t cost)
{
	if (cost < BUDGET_MIN)
		return;
	pthread_mutex_lock(&s->mu);
	while (!s->stop && s->in_use > 0 && s->in_use + cost > s->budget)
		pthread_cond_wait(&s->budget_cv, &s->mu);
	s->in_use += cost;
	j->cost = cost;
	pthread_mutex_unlock(&s->mu);
}

static void serve(server *s, job *j, asp_reply *out)
{
	/* Runs the op (or takes the refusal) and writes its answer before the notifications
	 * it allows. */
	asp_serve_result rc = out ? asp_local_serve(s->conn, j->req, out) : ASP_SERVE_FAILED;
	if (rc == ASP_SERVE_FAILED) {
		asp_server_log("asp-agent: out of memory answering request %u; closing",
		               asp_request_id(j->req));
		pthread_mutex_lock(&s->mu);
		bool first = stop_locked(s, 1);
		pthread_mutex_unlock(&s->mu);
		close_output(s);
		if (first)
			end_processes(s);
	}
	if (out)
		asp_reply_trim(out, KEEP_BUF);
	job_release(s, j);
}

/*
 * Reads and decodes one message. 1: `j` holds a request to serve (or to answer with an
 * error); 0: end of input; -1: a protocol or I/O error, logged.
 */
static int lead(server *s, job *j)
{
	size_t len;
	uint8_t *frame = NULL;
	asp_error err;
	asp_error_clear(&err);
	j->req = NULL;
	j->cost = 0;
	asp_status st = asp_channel_recv(s->in, s->max_message, &frame, &len, &err);
	if (st == ASP_OK && !frame)
		return 0;
	if (st) {
		asp_server_log("asp-agent: %s: %s; closing", asp_strerror(st), err.message);
		return -1;
	}
	size_t cost = 0;
	asp_request_new(frame, len, &j->req, &cost, &err); /* takes the frame */
	if (!j->req) {
		asp_server_log("asp-agent: protocol_error: %s; closing", err.message);
		return -1;
	}
	budget_take(s, j, cost);
	if (asp_request_decode(j->req, &err) && !asp_request_has_id(j->req)) {
		asp_server_log("asp-agent: protocol_error: %s; closing", err.message);
		job_release(s, j);
		return -1;
	}
	return 1;
}

static void *worker(void *arg);
static void promote(server *s);

/* More input came while a lone exec kept leadership: someone must read it. */
static void input_ready(void *ctx)
{
	server *s = ctx;
	pthread_mutex_lock(&s->mu);
	if (!s->reading && !s->stop)
		promote(s);
	pthread_mutex_unlock(&s->mu);
}

/* Under mu: whether `j` is a lone exec, which keeps leadership while it runs. */
static bool keeps_lead(server *s, const job *j)
{
	size_t len;
	const char *m = asp_request_method(j->req, &len);
	return s->serving == 0 && m && len == 4 && memcmp(m, "exec", 4) == 0 &&
	       !asp_fd_channel_buffered(s->in);
}

/* Under mu. Makes sure someone will read next: the first thread if it is idle, another
 * idle thread, or a new one. */
static void promote(server *s)
{
	if (s->first_idle) {
		pthread_cond_signal(&s->first_cv);
		return;
	}
	if (s->idle > 0) {
		pthread_cond_signal(&s->idle_cv);
		return;
	}
	if (s->nthreads + 1 >= MAX_WORKERS)
		return; /* all busy: the next request waits in the pipe for one to finish */
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, WORKER_STACK);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	int e = pthread_create(&t, &attr, worker, s);
	if (e == 0)
		s->nthreads++;
	else if (s->nthreads == 0)
		asp_server_log("asp-agent: cannot start a worker thread: %s%s", strerror(e),
		               e == EAGAIN
		                   ? " (the host is out of threads: see "
		                     "/proc/sys/kernel/threads-max, pid_max and `ulimit -u`)"
		                   : "");
	pthread_attr_destroy(&attr);
}

/* An absolute CLOCK_REALTIME deadline `ms` from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(int ms)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (long)(ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000)
		t.tv_sec++, t.tv_nsec -= 1000000000;
	return t;
}

/*
 * A leader other than the first thread: waits for input before reading it. False when
 * none came for LINGER_MS while the first thread is idle: it reads from now on.
 */
static bool await_input(server *s)
{
	if (asp_fd_channel_buffered(s->in))
		return true;
	for (;;) {
		struct pollfd p = {s->in_fd, POLLIN, 0};
		int r = poll(&p, 1, LINGER_MS);
		if (r != 0)
			return true; /* input, EOF, an error: lead() sees which */
		pthread_mutex_lock(&s->mu);
		bool hand = s->first_idle || s->stop;
		pthread_mutex_unlock(&s->mu);
		if (hand)
			return false;
	}
}

/*
 * Serves requests as leader and follower until the input ends. `first`: the calling
 * thread of serve_conn, which stays to the end; the others end after LINGER_MS idle.
 */
static void work(server *s, bool first)
{
	/* names per role for /proc and bench_stdio; the main thread keeps the process's */
	if ((pid_t)syscall(SYS_gettid) != getpid())
		prctl(PR_SET_NAME, "asp-serve");
	asp_reply *out = asp_reply_new();
	bool ender = false;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		if (s->reading && first) {
			s->first_idle = true;
			pthread_cond_wait(&s->first_cv, &s->mu);
			s->first_idle = false;
			continue;
		}
		if (s->reading) {
			s->idle++;
			struct timespec dl = deadline_in(LINGER_MS);
			int rc = pthread_cond_timedwait(&s->idle_cv, &s->mu, &dl);
			s->idle--;
			if (rc == ETIMEDOUT && s->reading && !s->stop)
				break; /* idle that long: end */
			continue;
		}
		s->reading = true;
		pthread_mutex_unlock(&s->mu);
		if (!first && !await_input(s)) {
			pthread_mutex_lock(&s->mu);
			s->reading = false;
			pthread_cond_signal(&s->first_cv);
			break; /* the first thread reads on: end */
		}
		job j;
		int got = lead(s, &j);
		pthread_mutex_lock(&s->mu);
		s->reading = false;
		if (got > 0 && s->stop) { /* stopped meanwhile (out of memory): drop it */
			pthread_mutex_unlock(&s->mu);
			job_release(s, &j);
			pthread_mutex_lock(&s->mu);
		}
		if (got <= 0 || s->stop) {
			if (got < 0)
				s->failed = true;
			ender = stop_locked(s, got < 0 ? 1 : 0);
			break;
		}
		bool keep = keeps_lead(s, &j);
		if (!keep)
			promote(s);
		s->serving++;
		pthread_mutex_unlock(&s->mu);
		if (keep) {
			asp_local_watch w = {s->in_fd, input_ready, s};
			asp_local_watch_input(&w);
		}
		serve(s, &j, out); /* out NULL (no memory): closes like a failed answer */
		if (keep)
			asp_local_watch_input(NULL);
		pthread_mutex_lock(&s->mu);
		s->serving--;
	}
	pthread_mutex_unlock(&s->mu);
	if (ender)
		end_processes(s);
	asp_reply_free(out);
}

static void *worker(void *arg)
{
	server *s = arg;
	/* the caller's mask: a worker may be started by a thread that blocks everything */
	pthread_sigmask(SIG_SETMASK, &s->mask, NULL);
	work(s, false);
	pthread_mutex_lock(&s->mu);
	s->nthreads--;
	pthread_cond_broadcast(&s->gone_cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Serves the connection until EOF or a fatal error, then ends the backend's processes. */
static int serve_conn(asp_local *backend, int in, int out, size_t max_message, bool *stuck)
{
	*stuck = false;
	server *s = calloc(1, sizeof *s);
	if (!s) {
		asp_server_log("asp-agent: out of memory");
		return 1;
	}
	s->max_message = max_message ? max_message : ASP_MAX_MESSAGE_DEFAULT;
	s->budget = BUDGET_FACTOR * s->max_message;
	s->in_fd = in;
	s->out_fd = out;
	s->backend = backend;
	asp_conn_sink sink = {.send = sink_send, .ctx = s, .sendv = sink_sendv};
	s->conn = s->backend ? asp_local_connect(s->backend, &sink) : NULL;
	asp_error err;
	if (!s->conn || asp_fd_channel_new(in, out, 0, &s->in, &err)) {
		asp_server_log("asp-agent: out of memory");
		asp_local_disconnect(s->conn);
		free(s);
		return 1;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->out_mu, NULL);
	pthread_cond_init(&s->idle_cv, NULL);
	pthread_cond_init(&s->first_cv, NULL);
	pthread_cond_init(&s->gone_cv, NULL);
	pthread_cond_init(&s->budget_cv, NULL);
	pthread_sigmask(SIG_SETMASK, NULL, &s->mask);

	/*
	 * The first leader is this thread; the others are created as requests arrive. The
	 * thread that sees the end of input ends the spawned processes (end_processes).
	 */
	work(s, true);
	pthread_mutex_lock(&s->mu);
	while (s->nthreads > 0) /* no thread is created once stop is set */
		pthread_cond_wait(&s->gone_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	/*
	 * After a protocol error (docs/design.md, "Faults and budgets") the requests read
	 * before the bad frame have been answered by now; only then does the client see
	 * EOF, and not one byte more.
	 */
	if (s->failed)
		close_output(s);
	bool ended = s->ended;
	int code = s->exit_code;
	if (!ended) {
		/* A process's output is stuck in a write to a client that does not read: the
		 * process exits now rather than waiting for it. */
		asp_server_log(
		    "asp-agent: a client stopped reading; exiting without waiting for it");
		*stuck = true;
		return code;
	}
	asp_local_disconnect(s->conn);
	asp_channel_free(s->in);
	pthread_cond_destroy(&s->idle_cv);
	pthread_cond_destroy(&s->first_cv);
	pthread_cond_destroy(&s->gone_cv);
	pthread_cond_destroy(&s->budget_cv);
	pthread_mutex_destroy(&s->out_mu);
	pthread_mutex_destroy(&s->mu);
	free(s);
	return code;
}

/*
 * TERM, HUP or INT (the stdio client closing us after 500 ms, an orchestrator, a
 * terminal): the spawned groups must not outlive us, and a KILL may follow soon (the
 * stdio client sends it 200 ms later), so they get 100 ms between TERM and KILL. No
 * thread waits for these signals: the handler runs on whichever thread they reach; with
 * no process running it exits at once, else the local backend's reaper thread (which
 * runs while processes do) ends them and exits (asp_local_reaper_stop).
 */
#define STOP_GRACE_MS 100

static const int stop_sigs[] = {SIGTERM, SIGHUP, SIGINT};

/* On the reaper thread: never returns. */
static void stop_now(int sig, void *arg)
{
	asp_server_log("asp-agent: signal %d: ending the spawned processes", sig);
	asp_local_shutdown_grace(arg, STOP_GRACE_MS);
	_exit(0); /* the other threads may be blocked in I/O: do not wait for them */
}

static void on_stop_signal(int sig)
{
	if (asp_local_reaper_stop(sig))
		return;
	/* nothing runs: async-signal-safe from here */
	char msg[] = "asp-agent: signal 00: exiting\n";
	msg[18] = (char)('0' + sig / 10 % 10);
	msg[19] = (char)('0' + sig % 10);
	ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
	(void)w;
	_exit(0);
}

int asp_agent_serve_stdio(int in, int out, size_t max_message)
{
	size_t max = max_message ? max_message : ASP_MAX_MESSAGE_DEFAULT;
	asp_local *backend = asp_local_new(max);
	if (!backend) {
		asp_server_log("asp-agent: out of memory");
		return 1;
	}
	asp_local_reaper_on_stop(stop_now, backend);
	/* handled, not blocked: children get the default back at exec (and an empty mask) */
	struct sigaction sa, old[3];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sa.sa_flags = SA_RESTART;
	sigfillset(&sa.sa_mask); /* one stop at a time */
	for (int i = 0; i < 3; i++)
		sigaction(stop_sigs[i], &sa, &old[i]);
	bool stuck;
	int code = serve_conn(backend, in, out, max, &stuck);
	for (int i = 0; i < 3; i++)
		sigaction(stop_sigs[i], &old[i], NULL);
	asp_local_reaper_on_stop(NULL, NULL);
	if (!stuck)
		asp_local_free(backend); /* else the process exits with the pump blocked */
	return code;
}
