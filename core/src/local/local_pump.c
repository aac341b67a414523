/*
 * The pump of a spawned process (one thread each, see local_proc.h): reads its output
 * into the replay rings, delivers each chunk to the subscribers (as typed events lending
 * the ring's bytes; the connection's edge encodes them) before reading more,
 * applies the timeout (TERM to the group, KILL 2 s later) and the responder's shutdown,
 * and once the process is dead and its output at EOF, reaps it and sends `exit`.
 */
#include "local_proc.h"
#include "thread.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PUMP_STACK (256u * 1024u)

static const char *const stream_names[PROC_STREAM_COUNT] = {"stdout", "stderr"};

static bool conn_dead(asp_local_conn *c)
{
	pthread_mutex_lock(&c->mu);
	bool dead = c->dead;
	pthread_mutex_unlock(&c->mu);
	return dead;
}

static bool sub_live(local_sub *s)
{
	return !s->removed && !s->exit_sent && !conn_dead(s->conn);
}

static bool sub_pending(const local_proc *p, const local_sub *s, bool with_exit)
{
	for (int i = 0; i < PROC_STREAM_COUNT; i++)
		if (s->sent[i] < p->ring[i].total || (p->eof[i] && !s->eof_sent[i]))
			return true;
	return with_exit && p->finished && !s->exit_sent;
}

bool local_proc_followed_locked(local_proc *p)
{
	for (local_sub *x = p->subs; x; x = x->next)
		if (sub_live(x))
			return true;
	return false;
}

/* The next event of one subscriber: an output chunk or the exit. */
typedef struct next_event {
	asp_notice_id n;
	int stream; /* 0, 1, or -1 for the exit */
	asp_output_event out;
	asp_exit_event exit;
} next_event;

/*
 * Under p->mu: the next event `s` is due, output (stdout's before stderr's) before the
 * exit. The output's bytes point into the ring: the pump appends to it only while no
 * subscriber is sending (pump_read), so they stay put while p->mu is released for the
 * sink.
 */
static void next_event_of(local_proc *p, local_sub *s, next_event *e)
{
	for (int i = 0; i < PROC_STREAM_COUNT; i++) {
		if (s->sent[i] >= p->ring[i].total && p->eof[i] && !s->eof_sent[i]) {
			e->n = ASP_NOTICE_OUTPUT;
			e->stream = i;
			e->out = (asp_output_event){
			    .proc = p->id,
			    .stream = stream_names[i],
			    .offset = s->sent[i],
			    .eof = true,
			};
			return;
		}
		if (s->sent[i] >= p->ring[i].total)
			continue;
		uint64_t start = proc_ring_start(&p->ring[i]);
		if (s->sent[i] < start) { /* cannot happen while it keeps up; say so if it did */
			s->sent[i] = start;
			s->trunc[i] = true;
		}
		size_t max = PROC_CHUNK < p->l->payload_budget ? PROC_CHUNK : p->l->payload_budget;
		const uint8_t *data;
		size_t len = proc_ring_span(&p->ring[i], s->sent[i], max, &data);
		e->n = ASP_NOTICE_OUTPUT;
		e->stream = i;
		e->out = (asp_output_event){
		    .proc = p->id,
		    .stream = stream_names[i],
		    .offset = s->sent[i],
		    .data = {data, len},
		    .has_truncated_before = s->trunc[i],
		    .truncated_before = s->sent[i],
		};
		return;
	}
	e->n = ASP_NOTICE_EXIT;
	e->stream = -1;
	e->exit = (asp_exit_event){
	    .proc = p->id,
	    .exit_code = p->exit_code,
	    .signal = p->signal[0] ? p->signal : NULL, /* set once, before `finished` */
	    .timed_out = p->timed_out,
	    .error = p->end_error,
	    .error_code = p->end_code != ASP_OK ? asp_strerror(p->end_code) : NULL,
	    .has_entries = p->has_counts,
	    .entries = p->entries,
	    .has_bytes = p->has_counts,
	    .bytes = p->bytes,
	};
}

/* Under p->mu: whether a thread is sending to one of its subscribers. */
static bool any_sending(const local_proc *p)
{
	for (const local_sub *x = p->subs; x; x = x->next)
		if (x->sending)
			return true;
	return false;
}

/* Under p->mu: the next listed subscriber the pump can serve now; *wait when one that
 * has something pending is gated or busy (its turn comes when that ends). */
static local_sub *pick(local_proc *p, bool *wait)
{
	*wait = false;
	for (local_sub *x = p->subs; x; x = x->next) {
		if (!sub_live(x) || !sub_pending(p, x, true))
			continue;
		if (x->gated || x->sending) {
			*wait = true;
			continue;
		}
		return x;
	}
	return NULL;
}

/* Under p->mu: unlists subscribers that will never get anything again. */
static void prune(local_proc *p)
{
	local_sub **pp = &p->subs;
	while (*pp) {
		local_sub *x = *pp;
		if (!x->sending && !x->gated && !sub_live(x)) {
			*pp = x->next;
			local_sub_unref_locked(x);
		} else {
			pp = &x->next;
		}
	}
}

void local_deliver_locked(local_proc *p, local_sub *only, bool with_exit, asp_buf *b)
{
	for (;;) {
		local_sub *s;
		if (only) {
			while (only->sending) /* the pump is sending to it (no hold): its turn */
				pthread_cond_wait(&p->cv, &p->mu);
			if (only->removed || only->exit_sent || conn_dead(only->conn) ||
			    !sub_pending(p, only, with_exit))
				break;
			s = only;
		} else {
			bool wait;
			s = pick(p, &wait);
			if (!s) {
				if (!wait)
					break;
				pthread_cond_wait(&p->cv, &p->mu);
				continue;
			}
		}
		next_event e;
		next_event_of(p, s, &e);
		s->sending = true;
		pthread_mutex_unlock(&p->mu);
		int rc = local_conn_event(
		    s->conn, e.n, e.stream < 0 ? (const void *)&e.exit : (const void *)&e.out, b);
		pthread_mutex_lock(&p->mu);
		s->sending = false;
		pthread_cond_broadcast(&p->cv);
		if (rc < 0)
			s->removed = true; /* out of memory: this subscriber cannot be served */
		if (rc <= 0)
			continue; /* dead now (sub_live says so), or removed */
		if (e.stream < 0) {
			s->exit_sent = true;
		} else {
			s->sent[e.stream] += e.out.data.len;
			s->trunc[e.stream] = false;
			s->eof_sent[e.stream] |= e.out.eof;
		}
	}
	if (!only)
		prune(p);
	if (b->cap > 4 * PROC_CHUNK) /* a big frame once: do not keep its buffer */
		asp_buf_free(b);
}

/* ---- the pump thread -------------------------------------------------------------- */

static void signal_group(local_proc *p, int sig)
{
	pthread_mutex_lock(&p->mu);
	if (!p->reaped)
		local_child_signal_tree(&p->child, sig);
	pthread_mutex_unlock(&p->mu);
}

void local_pump_wake(local_proc *p)
{
	uint64_t one = 1;
	ssize_t w = write(p->wake_fd, &one, sizeof one);
	(void)w; /* a full counter (impossible here) means a wake is pending anyway */
}

void local_pump_chunk(local_proc *p, int i, const uint8_t *buf, size_t n, asp_buf *b)
{
	pthread_mutex_lock(&p->mu);
	/* An attach's replay may be sending from the ring (events lend its bytes): an append
	 * could move them (growth) or overwrite them (wrap), so it waits for the send. */
	while (any_sending(p))
		pthread_cond_wait(&p->cv, &p->mu);
	proc_ring_append(&p->ring[i], buf, n);
	local_deliver_locked(p, NULL, false, b);
	pthread_mutex_unlock(&p->mu);
}

void local_pump_eof(local_proc *p, int i, asp_buf *b)
{
	pthread_mutex_lock(&p->mu);
	p->eof[i] = true;
	local_deliver_locked(p, NULL, false, b);
	pthread_mutex_unlock(&p->mu);
}

/* One read from a stream into its ring, delivered before the next. false at EOF. */
static bool pump_read(local_proc *p, int i, int fd, uint8_t *buf, size_t cap, asp_buf *b)
{
	ssize_t n = read(fd, buf, cap);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false; /* EOF, or an error that ends the stream just the same */
	/* A terminal's master hands over at most its line discipline's 4 KiB a read: gather
	 * what is already there (non-blocking), so bulk output goes out in PROC_CHUNK
	 * pieces, not sixteen times as many notifications. EAGAIN or the end (EIO) stop
	 * the gathering; the next poll sees the end again. */
	while (p->tty && (size_t)n < cap) {
		ssize_t m = read(fd, buf + n, cap - (size_t)n);
		if (m <= 0)
			break;
		n += m;
	}
	local_pump_chunk(p, i, buf, (size_t)n, b);
	uint64_t total = p->ring[i].total; /* only this thread appends */
#ifdef F_SETPIPE_SZ
	if (total > BIG_OUTPUT && total - (uint64_t)n <= BIG_OUTPUT)
		fcntl(fd, F_SETPIPE_SZ, 1 << 20); /* a hint; the limit may refuse it */
#else
	(void)total;
#endif
	return true;
}

static void *pump_main(void *arg)
{
	local_proc *p = arg;
	uint8_t small[4096];
	uint8_t *buf = malloc(PROC_CHUNK);
	size_t cap = buf ? PROC_CHUNK : sizeof small;
	if (!buf)
		buf = small;
	asp_buf b;
	asp_buf_init(&b);
	int fds[PROC_STREAM_COUNT] = {p->child.out_fd, p->child.err_fd};
	int pidfd = p->child.pidfd;

	uint64_t t0 = local_now_ns();
	uint64_t timeout = p->timeout_ms < MAX_TIMEOUT_MS ? p->timeout_ms : MAX_TIMEOUT_MS;
	uint64_t term_at = timeout ? t0 + timeout * NS_PER_MS : UINT64_MAX;
	uint64_t kill_at = UINT64_MAX, give_up_at = UINT64_MAX;
	bool exited = false, termed = false, killed = false, timed_out = false;
	int backoff_ms = 1;
	for (;;) {
		if (!exited && pidfd < 0)
			exited = local_child_exited(&p->child);
		uint64_t now = local_now_ns();
		if (exited && fds[0] < 0 && fds[1] < 0)
			break;
		pthread_mutex_lock(&p->mu);
		bool ending = p->ending;
		uint64_t end_kill_at = now + (uint64_t)p->end_grace_ms * NS_PER_MS;
		pthread_mutex_unlock(&p->mu);
		if (!termed && (now >= term_at || ending)) {
			termed = true;
			timed_out = now >= term_at;
			signal_group(p, SIGTERM);
			kill_at = now + KILL_GRACE_NS;
		}
		if (ending && !killed && end_kill_at < kill_at)
			kill_at = end_kill_at; /* a shutdown that cannot wait 2 s */
		if (termed && !killed && now >= kill_at) {
			killed = true;
			signal_group(p, SIGKILL);
			give_up_at = now + GIVE_UP_NS;
		}
		if (exited && killed && now >= give_up_at)
			break;

		uint64_t until = !termed ? term_at : !killed ? kill_at : give_up_at;
		int ms = local_poll_ms(now, until);
		if (!exited && pidfd < 0) {
			/* no pidfd: look for the exit again soon, less often as time goes by */
			if (ms < 0 || ms > backoff_ms)
				ms = backoff_ms;
			if (backoff_ms < 50)
				backoff_ms *= 2;
		}
		struct pollfd pfd[4];
		int n = 0, at[PROC_STREAM_COUNT] = {-1, -1}, i_pid = -1, i_wake = -1;
		for (int i = 0; i < PROC_STREAM_COUNT; i++)
			if (fds[i] >= 0)
				at[i] = n, pfd[n++] = (struct pollfd){fds[i], POLLIN, 0};
		if (!exited && pidfd >= 0)
			i_pid = n, pfd[n++] = (struct pollfd){pidfd, POLLIN, 0};
		if (!killed)
			i_wake = n, pfd[n++] = (struct pollfd){p->wake_fd, POLLIN, 0};
		if (poll(pfd, (nfds_t)n, ms) <= 0)
			continue; /* a timer or EINTR: the checks above run again */
		for (int i = 0; i < PROC_STREAM_COUNT; i++) {
			if (at[i] >= 0 && pfd[at[i]].revents &&
			    !pump_read(p, i, fds[i], buf, cap, &b)) {
				close(fds[i]);
				fds[i] = -1;
			}
		}
		if (i_pid >= 0 && pfd[i_pid].revents)
			exited = true;
		if (i_wake >= 0 && pfd[i_wake].revents) {
			uint64_t v;
			ssize_t r = read(p->wake_fd, &v, sizeof v);
			(void)r;
		}
	}
	if (termed)
		signal_group(p, SIGKILL); /* nothing it started survives a timeout or shutdown */
	for (int i = 0; i < PROC_STREAM_COUNT; i++)
		if (fds[i] >= 0)
			close(fds[i]);

	pthread_mutex_lock(&p->mu);
	p->child.out_fd = p->child.err_fd = -1; /* closed above */
	int status = local_child_reap(&p->child);
	p->reaped = true;
	p->timed_out = timed_out;
	pthread_mutex_unlock(&p->mu);
	int64_t exit_code = -1;
	const char *sig = NULL;
	char nb[16];
	if (status != -1 && WIFEXITED(status))
		exit_code = WEXITSTATUS(status);
	else if (status != -1 && WIFSIGNALED(status))
		sig = local_signal_name(WTERMSIG(status), nb);
	if (buf != small)
		free(buf);
	local_pump_end(p, exit_code, sig, NULL, &b);
	return NULL;
}

void local_pump_end(local_proc *p, int64_t exit_code, const char *signal, char *error, asp_buf *b)
{
	/* The table's lock too: finishing and counting among the finished are one step. */
	pthread_mutex_lock(&p->l->mu);
	pthread_mutex_lock(&p->mu);
	p->exit_code = exit_code;
	p->signal[0] = '\0';
	if (signal)
		strncpy(p->signal, signal, sizeof p->signal - 1);
	free(p->end_error);
	p->end_error = error;
	p->finished = true;
	local_proc *evicted = local_proc_count_done_locked(p);
	pthread_mutex_unlock(&p->l->mu); /* not held while a sink may block */
	pthread_cond_broadcast(&p->cv);
	local_deliver_locked(p, NULL, true, b);
	pthread_mutex_unlock(&p->mu);
	local_proc_unref(evicted);

	asp_buf_free(b);
	/* Retained for up to 64 more exits: without fds. A proc_write now fails. */
	pthread_mutex_lock(&p->in_mu);
	if (p->in_fd >= 0) {
		close(p->in_fd);
		p->in_fd = -1;
	}
	pthread_cond_broadcast(&p->in_cv); /* writes waiting for their turn see the end */
	pthread_mutex_unlock(&p->in_mu);
	local_proc_pump_gone(p);
	local_proc_unref(p);
}

int local_pump_start(local_proc *p)
{
	return local_pump_start_fn(p, pump_main);
}

int local_pump_start_fn(local_proc *p, void *(*fn)(void *))
{
	/* The pump takes no signals: they belong to the host's threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = local_thread_detached(fn, p, PUMP_STACK);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}
