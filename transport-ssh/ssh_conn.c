/*
 * The connection's concurrency: the session lock, waiting without holding it, the pump
 * thread that reads the socket for everyone, and channel plumbing done in non-blocking
 * steps so that no thread holds the lock across a network round trip.
 */
#include "ssh_internal.h"
#include "ssh_via.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/*
 * Waiters re-check at least this often: a backstop, never needed for progress. The
 * tests raise it (ASP_SSH_WAIT_SLICE_MS) so that a wakeup lost shows as a stall.
 */
#define WAIT_SLICE_NS (250ull * SSH_NS_PER_MS)
/* The pump reads at most this many times (4 KiB each, libssh's read size) per wakeup. */
#define PUMP_BATCH  64
#define LIBSSH_READ 4096
/* After the server refused a channel: wait this long (doubling) before asking again. */
#define REFUSED_PAUSE_MIN (20ull * SSH_NS_PER_MS)
#define REFUSED_PAUSE_MAX (500ull * SSH_NS_PER_MS)

uint64_t ssh_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ssh_deadline_ms(uint64_t ms)
{
	if (ms == 0 || ms > UINT64_MAX / SSH_NS_PER_MS / 2)
		return SSH_NO_DEADLINE;
	return ssh_now_ns() + ms * SSH_NS_PER_MS;
}

/*
 * This thread's view of the connection it last locked: the packets libssh had read when
 * it took the lock or last woke from a wait. A thread holds one connection's lock at a
 * time; a wait on another connection than the one recorded simply returns once.
 */
static _Thread_local const sshc *seen_conn;
static _Thread_local uint64_t seen_packets;

static void seen_now(const sshc *c)
{
	seen_conn = c;
	seen_packets = c->rx.in_packets;
}

/* Whether libssh read packets since this thread last looked (or it looks at another). */
static bool read_since_look(const sshc *c)
{
	return seen_conn != c || seen_packets != c->rx.in_packets;
}

uint64_t sshc_wait_slice_ns(void)
{
	const char *v = getenv("ASP_SSH_WAIT_SLICE_MS");
	unsigned long ms = v ? strtoul(v, NULL, 10) : 0;
	return ms > 0 && ms <= 3600000 ? ms * SSH_NS_PER_MS : WAIT_SLICE_NS;
}

void sshc_lock(sshc *c)
{
	pthread_mutex_lock(&c->mu);
	seen_now(c);
}

static void kick(int fd)
{
	uint64_t one = 1;
	(void)!write(fd, &one, sizeof one);
}

/* Under the lock: a change of state the waiter polling the socket must look at. */
static void kick_leader(sshc *c)
{
	if (c->lead_polls && !c->lead_kicked) {
		c->lead_kicked = true;
		kick(c->lead_fd);
	}
}

/* Under the lock: tells the polling waiter when someone else read packets meanwhile. */
static void kick_leader_if_read(sshc *c)
{
	if (c->lead_polls && c->rx.in_packets != c->lead_seen)
		kick_leader(c);
}

/*
 * Under the lock: lets libssh read and handle what the socket holds, up to PUMP_BATCH
 * reads. libssh 0.10 has no public "process what arrived" call; polling a channel that
 * is never opened (so never has data or EOF) with timeout 0 runs exactly one
 * non-blocking round of packet handling for the whole session.
 */
static void read_socket(sshc *c)
{
	for (int i = 0; i < PUMP_BATCH; i++) {
		uint64_t before = c->io.in_bytes;
		ssh_channel_poll_timeout(c->idle, 0, 0);
		if (!sshc_check(c))
			break;
		/* a read short of libssh's buffer emptied the socket */
		if (c->io.in_bytes - before < LIBSSH_READ)
			break;
	}
}

/*
 * Under the lock: sends what libssh queued. libssh writes a packet at once only while
 * its own poll last saw the socket writable, and each write clears that: a window adjust
 * made while handling packets, a close, an EOF wait in its buffer until the next libssh
 * call that polls. Ours are few (the pump polls only for input), so before anyone sleeps
 * what is queued goes out; what the socket cannot take now, the pump sends once it can.
 */
static void flush_queued(sshc *c)
{
	if (!c->pump_on || atomic_load(&c->dead))
		return;
	if (ssh_blocking_flush(c->s, 0) == SSH_AGAIN && !c->pump_sends) {
		c->pump_sends = true;
		pthread_cond_signal(&c->pump_cv); /* standing by: it must poll for output now */
		kick(c->wake_fd);
	}
}

void sshc_unlock(sshc *c)
{
	flush_queued(c);
	pthread_cond_broadcast(&c->cv);
	kick_leader(c);
	pthread_mutex_unlock(&c->mu);
}

void sshc_unlock_after_write(sshc *c)
{
	flush_queued(c);
	if (read_since_look(c))
		pthread_cond_broadcast(&c->cv);
	kick_leader_if_read(c);
	pthread_mutex_unlock(&c->mu);
}

/*
 * Under the lock: polls the socket (and lead_fd) without the lock until something
 * arrives, someone kicks, or `until`; then reads what arrived. Only while no other
 * waiter polls and the pump need not send.
 */
static void lead(sshc *c, uint64_t now, uint64_t until)
{
	c->lead_polls = true;
	c->lead_kicked = false;
	c->lead_seen = c->rx.in_packets;
	pthread_mutex_unlock(&c->mu);
	struct pollfd p[2] = {{c->fd, POLLIN, 0}, {c->lead_fd, POLLIN, 0}};
	uint64_t ms = (until - now + SSH_NS_PER_MS - 1) / SSH_NS_PER_MS;
	int n = poll(p, 2, ms > INT32_MAX ? INT32_MAX : (int)ms);
	if (n > 0 && (p[1].revents & POLLIN)) {
		uint64_t v;
		(void)!read(c->lead_fd, &v, sizeof v);
	}
	pthread_mutex_lock(&c->mu);
	c->lead_polls = false;
	if (atomic_load(&c->dead)) {
		sshc_mark_dead(c, "connection aborted"); /* (sshc_abort; the first reason stays) */
	} else if (n > 0 && p[0].revents) {
		read_socket(c);
		flush_queued(c);
	}
	/* what it read may be another waiter's; and one of them polls next */
	if (c->rx.in_packets != c->lead_seen || c->cv_sleepers)
		pthread_cond_broadcast(&c->cv);
}

bool sshc_wait(sshc *c, uint64_t deadline)
{
	if (atomic_load(&c->dead))
		return false;
	flush_queued(c); /* (it may read packets too) */
	if (read_since_look(c)) {
		/*
		 * Our own calls read packets since we last looked (a poll of stderr can read
		 * stdout's data, a process's poll another channel's answer): the socket they
		 * came from is drained, so the pump will not wake, and a wait releases the
		 * lock without a word. Wake the others, and look again before sleeping.
		 */
		pthread_cond_broadcast(&c->cv);
		kick_leader_if_read(c);
		seen_now(c);
		return true;
	}
	uint64_t now = ssh_now_ns();
	uint64_t until = now + c->slice_ns;
	if (deadline < until)
		until = deadline;
	if (until > now && c->pump_on && !c->lead_polls && !c->pump_sends) {
		lead(c, now, until);
	} else if (until > now) {
		struct timespec ts = {(time_t)(until / 1000000000ull),
		                      (long)(until % 1000000000ull)};
		c->cv_sleepers++;
		pthread_cond_timedwait(&c->cv, &c->mu, &ts);
		c->cv_sleepers--;
	}
	seen_now(c);
	return !atomic_load(&c->dead);
}

void sshc_mark_dead(sshc *c, const char *fmt, ...)
{
	if (!c->why[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->why, sizeof c->why, fmt, ap);
		va_end(ap);
	}
	atomic_store(&c->dead, true);
	pthread_cond_broadcast(&c->cv);
	kick_leader(c);
}

bool sshc_check(sshc *c)
{
	if (atomic_load(&c->dead))
		return false;
	int st = ssh_get_status(c->s);
	if (!ssh_is_connected(c->s) || (st & (SSH_CLOSED | SSH_CLOSED_ERROR))) {
		const char *e = ssh_get_error(c->s);
		sshc_mark_dead(c, "connection lost%s%s", e && e[0] ? ": " : "", e ? e : "");
		return false;
	}
	return true;
}

asp_status sshc_dead_error(sshc *c, const char *what, asp_error *err)
{
	char via[800]; /* a jump host's or the proxy command's account of the end */
	ssh_via_explain(c->via, VIA_EXPLAIN_WAIT_MS, via, sizeof via);
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
	                     "%s: ssh %s: %s%s%s; the next call reconnects", what, c->target,
	                     c->why[0] ? c->why : "connection closed", via[0] ? "; " : "", via);
}

void sshc_abort(sshc *c)
{
	atomic_store(&c->dead, true);
	/* Any libssh call blocked on the socket fails at once; the pump sees the hangup. */
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
	sshc_wake(c);
}

void sshc_wake(sshc *c)
{
	if (c->wake_fd >= 0)
		kick(c->wake_fd);
	if (c->lead_fd >= 0)
		kick(c->lead_fd);
}

/* Under the lock: the pump stands by while a waiter polls (and nothing waits to be sent). */
static bool pump_stands_by(const sshc *c)
{
	return c->lead_polls && !c->pump_sends && !atomic_load(&c->stop);
}

static void *pump_main(void *arg)
{
	sshc *c = arg;
	pthread_mutex_lock(&c->mu);
	while (!atomic_load(&c->stop)) {
		if (pump_stands_by(c)) {
			/*
			 * Nothing hands the socket back when the waiter is done: every waiter
			 * polls in turn, and a hand-back would cost each call a wake-up of the
			 * pump. What arrives for nobody (a keepalive, a window adjust) is read
			 * within the backstop, once the pump looks again and finds no one polling.
			 */
			uint64_t until = ssh_now_ns() + c->slice_ns;
			struct timespec ts = {(time_t)(until / 1000000000ull),
			                      (long)(until % 1000000000ull)};
			pthread_cond_timedwait(&c->pump_cv, &c->mu, &ts);
			continue;
		}
		bool sending = c->pump_sends; /* libssh holds output the socket would not take */
		pthread_mutex_unlock(&c->mu);
		short ev = sending ? POLLIN | POLLOUT : POLLIN;
		struct pollfd p[2] = {{c->fd, ev, 0}, {c->wake_fd, POLLIN, 0}};
		int n = poll(p, 2, -1);
		if (n > 0 && (p[1].revents & POLLIN)) {
			uint64_t v;
			(void)!read(c->wake_fd, &v, sizeof v);
		}
		pthread_mutex_lock(&c->mu);
		if ((n < 0 && errno != EINTR) || atomic_load(&c->stop))
			break;
		if (atomic_load(&c->dead)) {
			sshc_mark_dead(c, "connection aborted");
			break;
		}
		uint64_t seen = c->rx.in_packets;
		/* a waiter that started polling meanwhile reads what arrived */
		if (n > 0 && p[0].revents && !pump_stands_by(c))
			read_socket(c);
		/* what handling packets queued (window adjusts, replies) goes out now */
		c->pump_sends = !atomic_load(&c->dead) && ssh_blocking_flush(c->s, 0) == SSH_AGAIN;
		pthread_cond_broadcast(&c->cv); /* (a wake_fd kick asks for it, too) */
		if (c->rx.in_packets != seen)
			kick_leader_if_read(c);
		if (atomic_load(&c->dead))
			break;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

asp_status sshc_pump_start(sshc *c, asp_error *err)
{
	c->idle = ssh_channel_new(c->s);
	if (!c->idle)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "ssh %s: out of memory", c->target);
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake_fd < 0)
		return asp_error_errno(err, errno, NULL, "ssh %s: eventfd", c->target);
	c->lead_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->lead_fd < 0)
		return asp_error_errno(err, errno, NULL, "ssh %s: eventfd", c->target);
	/* the pump takes no signals: they belong to the application's threads */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&c->pump, NULL, pump_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return asp_error_errno(err, rc, NULL, "ssh %s: cannot start a thread", c->target);
	c->pump_on = true;
	return ASP_OK;
}

void sshc_close(sshc *c)
{
	if (c->pump_on) {
		pthread_mutex_lock(&c->mu);
		atomic_store(&c->stop, true);
		pthread_cond_signal(&c->pump_cv);
		pthread_mutex_unlock(&c->mu);
		kick(c->wake_fd);
		pthread_join(c->pump, NULL);
		c->pump_on = false;
	}
	if (c->kill_line) {
		ssh_channel_free(c->kill_line);
		c->kill_line = NULL;
	}
	if (c->idle) {
		ssh_channel_free(c->idle);
		c->idle = NULL;
	}
	if (c->spare) {
		ssh_channel_free(c->spare);
		c->spare = NULL;
	}
	if (c->s) {
		if (!atomic_load(&c->dead) && ssh_is_connected(c->s))
			ssh_disconnect(c->s); /* a goodbye to the server; bounded by the timeout */
		ssh_free(c->s);
		c->s = NULL;
	}
	ssh_via_free(c->via); /* after the session: its socket is the way's far end */
	c->via = NULL;
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	if (c->lead_fd >= 0)
		close(c->lead_fd);
	c->wake_fd = c->lead_fd = -1;
	c->fd = -1;
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	pthread_cond_destroy(&c->pump_cv);
}

int sshc_run_steps(sshc *c, ssh_channel ch, sshc_step_fn fn, const void *arg, uint64_t deadline,
                   bool *timed_out)
{
	*timed_out = false;
	for (;;) {
		ssh_set_blocking(c->s, 0);
		int rc = fn(ch, arg);
		ssh_set_blocking(c->s, 1);
		if (rc != SSH_AGAIN)
			return rc;
		/* what non-blocking mode queued must reach the server before we sleep */
		if (ssh_blocking_flush(c->s, 10000) == SSH_ERROR || !sshc_check(c))
			return SSH_ERROR;
		if (ssh_now_ns() >= deadline) {
			*timed_out = true;
			return SSH_ERROR;
		}
		if (!sshc_wait(c, deadline))
			return SSH_ERROR;
	}
}

static int step_open(ssh_channel ch, const void *arg)
{
	(void)arg;
	return ssh_channel_open_session(ch);
}

static int step_exec(ssh_channel ch, const void *arg)
{
	return ssh_channel_request_exec(ch, arg);
}

static int step_subsystem(ssh_channel ch, const void *arg)
{
	return ssh_channel_request_subsystem(ch, arg);
}

static int step_pty(ssh_channel ch, const void *arg)
{
	const sshc_pty *t = arg;
	/* libssh 0.10 sends no terminal modes (an empty list): the server's pty gets the
	 * kernel's defaults, as a local openpty does, whatever terminal this process has */
	return ssh_channel_request_pty_size(ch, t->term, t->cols, t->rows);
}

/* Under the lock: takes `w` out of the queue for channel slots. */
static void slot_leave(sshc *c, struct slot_waiter *w)
{
	struct slot_waiter **pp = &c->slot_queue;
	while (*pp && *pp != w)
		pp = &(*pp)->next;
	if (*pp)
		*pp = w->next;
	pthread_cond_broadcast(&c->cv);
}

uint64_t sshc_setup_deadline(const sshc *c)
{
	unsigned ms = c->cfg->ssh.connect_timeout_ms ? c->cfg->ssh.connect_timeout_ms : 10000;
	return ssh_now_ns() + (uint64_t)ms * SSH_NS_PER_MS;
}

/* How many channels a class may have open in all (its own and the others'). */
static unsigned class_limit(const sshc *c, enum sshc_class k)
{
	unsigned n = c->chan_limit;
	unsigned keep = 1; /* for the timeout's kill */
	if (k == SSHC_COMMAND && c->by_class[SSHC_SFTP] == 0)
		keep++; /* and for the sftp channel, until it is open */
	/*
	 * A kill may always try one more than the limit we learned: a limit learned while
	 * the server was still freeing a closed session counts low, and spawned processes
	 * hold theirs for as long as they run, so waiting for one might wait for ever. The
	 * server has the last word (a refusal is retried after a pause).
	 */
	if (k == SSHC_URGENT)
		return n + 1;
	if (n <= keep)
		return n;
	return n - keep;
}

/*
 * Under the lock: waits for a free channel slot. Commands take slots first come, first
 * served, so a caller is not starved by threads that run one exec after another; the
 * sftp channel and the timeout's kill skip the queue and have a slot kept for them, so
 * long commands never hold up file ops or a kill.
 */
static asp_status slot_wait(sshc *c, enum sshc_class k, uint64_t deadline, asp_error *err)
{
	struct slot_waiter w = {NULL};
	bool queued = k == SSHC_COMMAND;
	if (queued) {
		struct slot_waiter **tail = &c->slot_queue;
		while (*tail)
			tail = &(*tail)->next;
		*tail = &w;
	}
	asp_status st = ASP_OK;
	for (;;) {
		if (!sshc_check(c)) {
			st = sshc_dead_error(c, "open a channel", err);
			break;
		}
		/* (a kill never waits: it is what ends a running exec; the one sftp channel
		 * waits for no exec, so file ops are not held up by a long command) */
		bool gated =
		    c->fragile_open && k != SSHC_URGENT &&
		    (c->gate_busy || c->exiting > 0 || (k == SSHC_COMMAND && c->execs > 0));
		if ((c->chans < class_limit(c, k) || c->spare) &&
		    (!queued || c->slot_queue == &w) && !gated)
			break;
		if (ssh_now_ns() >= deadline) {
			st = asp_error_set(err, ASP_E_TIMEOUT, NULL,
			                   "ssh %s: no free channel in time: the server allows %u "
			                   "sessions on one connection and all are busy",
			                   c->target, c->chan_limit);
			break;
		}
		sshc_wait(c, deadline);
	}
	if (queued)
		slot_leave(c, &w);
	return st;
}

/* Under the lock: the open of a spare goes out (not awaited) when none is held and there is room.
 */
static void spare_refill(sshc *c)
{
	if (!c->spares || c->spare || c->spare_off || c->fragile_open || c->slot_queue ||
	    atomic_load(&c->dead) || c->chans >= class_limit(c, SSHC_COMMAND))
		return;
	ssh_channel ch = ssh_channel_new(c->s);
	if (!ch)
		return;
	ssh_set_blocking(c->s, 0);
	int rc = ssh_channel_open_session(ch);
	ssh_set_blocking(c->s, 1);
	if (rc == SSH_ERROR) {
		ssh_channel_free(ch);
		sshc_check(c);
		return;
	}
	c->spare = ch;
	c->chans++;
	c->by_class[SSHC_COMMAND]++;
}

/*
 * Under the lock, for a caller that slot_wait let through: the spare for class k, once
 * the server confirmed it; NULL when there is none, or it was refused or closed (then
 * freed, and a refusal lowers the limit as sshc_channel_open's would).
 */
static ssh_channel spare_take(sshc *c, enum sshc_class k, uint64_t deadline)
{
	if (!c->spare)
		return NULL;
	ssh_channel ch = c->spare;
	c->spare = NULL;
	c->by_class[SSHC_COMMAND]--;
	c->by_class[k]++;
	bool late;
	int rc = sshc_run_steps(c, ch, step_open, NULL, deadline, &late);
	if (rc == SSH_OK) {
		c->opened++;
		if (c->opened > c->peak)
			c->peak = c->opened;
		if (c->opened > c->chan_limit)
			c->chan_limit = c->opened;
		return ch;
	}
	c->opened++; /* undone by the free: it was never open */
	sshc_channel_free(c, ch, k);
	if (!late && sshc_check(c)) {
		unsigned floor = c->peak > 3 ? c->peak : 3;
		if (c->chan_limit > c->opened)
			c->chan_limit = c->opened < floor ? floor : c->opened;
		c->spare_off = true;
	}
	return NULL;
}

asp_status sshc_channel_open(sshc *c, enum sshc_class k, uint64_t slot_deadline, uint64_t deadline,
                             ssh_channel *out, asp_error *err)
{
	*out = NULL;
	uint64_t pause = REFUSED_PAUSE_MIN;
	uint64_t refused_until = 0; /* refusals with none of ours open: until then, lag */
	for (;;) {
		asp_status st = slot_wait(c, k, slot_deadline, err);
		if (st != ASP_OK)
			return st;
		uint64_t step = sshc_setup_deadline(c); /* counted from now, not from the wait */
		uint64_t open_by = step < deadline ? step : deadline;
		ssh_channel spare = spare_take(c, k, open_by);
		if (spare) {
			spare_refill(c);
			*out = spare;
			return ASP_OK;
		}
		if (c->chans >= class_limit(c, k))
			continue; /* the spare held the slot, and it is gone: wait again */
		ssh_channel ch = ssh_channel_new(c->s);
		if (!ch)
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "ssh %s: out of memory",
			                     c->target);
		c->chans++;
		c->by_class[k]++;
		bool gate = c->fragile_open && k != SSHC_URGENT;
		if (gate)
			c->gate_busy = true; /* until its command started (sshc_channel_exec) */
		bool late;
		int rc = sshc_run_steps(c, ch, step_open, NULL, open_by, &late);
		if (gate && rc == SSH_OK)
			c->gate = ch;
		else if (gate)
			c->gate_busy = false;
		if (rc == SSH_OK) {
			c->opened++;
			if (c->opened > c->peak)
				c->peak = c->opened;
			if (c->opened > c->chan_limit)
				c->chan_limit =
				    c->opened; /* learned low: the server allows this many */
			spare_refill(c);
			*out = ch;
			return ASP_OK;
		}
		char msg[256];
		snprintf(msg, sizeof msg, "%s", ssh_get_error(c->s));
		c->opened++; /* undone by the free: it was never open */
		sshc_channel_free(c, ch, k);
		if (late)
			return asp_error_set(err, ASP_E_TIMEOUT, NULL,
			                     "ssh %s: opening a channel timed out", c->target);
		if (!sshc_check(c))
			return sshc_dead_error(c, "open a channel", err);
		/*
		 * Refused with none of ours open: a server that never gave us a session will
		 * not; one that did is still freeing those we closed (a round trip after our
		 * close, and only once their processes are gone), so ask again for a while.
		 */
		uint64_t now = ssh_now_ns();
		if (c->chans == 0 && !refused_until)
			refused_until = step;
		if (c->chans == 0 && (c->peak == 0 || now >= refused_until))
			return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			                     "ssh %s: the server refused a session channel: %s",
			                     c->target, msg);
		/*
		 * Refused while others are open: the server's MaxSessions (OpenSSH: "open
		 * failed", reason 2) is lower than we assumed. Use about what it allowed: the
		 * channels open now, not those still opening (the server frees a session a
		 * round trip after our close, so this may count low: never below 3, a command,
		 * sftp and a kill, nor below the most it ever had open at once, which a
		 * refusal during that round trip cannot undo). Ask again once one of ours
		 * closed or after a pause that grows with each refusal in a row.
		 */
		unsigned seen = c->chans;
		unsigned floor = c->peak > 3 ? c->peak : 3;
		if (c->chan_limit > c->opened)
			c->chan_limit = c->opened < floor ? floor : c->opened;
		if (now >= slot_deadline)
			return asp_error_set(
			    err, ASP_E_TIMEOUT, NULL,
			    "ssh %s: no free channel in time: the server allows %u "
			    "sessions on one connection and all are busy",
			    c->target, c->chan_limit);
		uint64_t until = now + pause;
		if (until > slot_deadline)
			until = slot_deadline;
		pause = pause * 2 > REFUSED_PAUSE_MAX ? REFUSED_PAUSE_MAX : pause * 2;
		while (c->chans >= seen && ssh_now_ns() < until) {
			if (!sshc_wait(c, until))
				return sshc_dead_error(c, "open a channel", err);
		}
	}
}

/* The command of the channel holding the gate started (or the channel went): let others. */
static void gate_open(sshc *c, ssh_channel ch)
{
	if (c->gate != ch)
		return;
	c->gate = NULL;
	c->gate_busy = false;
	pthread_cond_broadcast(&c->cv);
}

void sshc_gate_keep(sshc *c, ssh_channel ch)
{
	if (c->gate == ch)
		c->gate_kept = ch;
}

void sshc_gate_done(sshc *c, ssh_channel ch)
{
	if (!ch)
		return;
	if (c->gate_kept == ch)
		c->gate_kept = NULL;
	gate_open(c, ch);
}

void sshc_exit_begin(sshc *c)
{
	c->exiting++;
}

void sshc_exit_done(sshc *c)
{
	if (c->exiting > 0)
		c->exiting--;
	pthread_cond_broadcast(&c->cv);
}

asp_status sshc_channel_pty(sshc *c, ssh_channel ch, const sshc_pty *t, uint64_t deadline,
                            asp_error *err)
{
	bool late;
	int rc = sshc_run_steps(c, ch, step_pty, t, deadline, &late);
	if (rc == SSH_OK)
		return ASP_OK;
	if (late)
		return asp_error_set(
		    err, ASP_E_TIMEOUT, NULL,
		    "ssh %s: the server did not answer the terminal request in time", c->target);
	if (!sshc_check(c))
		return sshc_dead_error(c, "spawn", err);
	return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
	                     "spawn: ssh %s: the server refused a terminal (pty-req): %s; sshd's "
	                     "PermitTTY or a no-pty option in authorized_keys forbids it",
	                     c->target, ssh_get_error(c->s));
}

asp_status sshc_channel_exec(sshc *c, ssh_channel ch, const char *cmd, bool subsystem,
                             uint64_t deadline, asp_error *err)
{
	bool late;
	int rc =
	    sshc_run_steps(c, ch, subsystem ? step_subsystem : step_exec, cmd, deadline, &late);
	if (c->gate_kept != ch || rc != SSH_OK)
		sshc_gate_done(c, ch);
	if (rc == SSH_OK)
		return ASP_OK;
	if (late)
		return asp_error_set(err, ASP_E_TIMEOUT, NULL,
		                     "ssh %s: the server did not start %s in time", c->target,
		                     subsystem ? "the subsystem" : "the command");
	if (!sshc_check(c))
		return sshc_dead_error(c, subsystem ? "start sftp" : "exec", err);
	return asp_error_set(
	    err, ASP_E_TRANSPORT_ERROR, NULL, "ssh %s: the server refused to %s: %s", c->target,
	    subsystem ? "start the sftp subsystem" : "run a command", ssh_get_error(c->s));
}

int sshc_channel_exec_step(sshc *c, ssh_channel ch, const char *cmd, bool subsystem, asp_error *err)
{
	ssh_set_blocking(c->s, 0);
	/* the first call sends, later ones look */
	int rc =
	    subsystem ? ssh_channel_request_subsystem(ch, cmd) : ssh_channel_request_exec(ch, cmd);
	ssh_set_blocking(c->s, 1);
	if (rc == SSH_AGAIN)
		return rc;
	gate_open(c, ch);
	if (rc == SSH_OK)
		return rc;
	if (!sshc_check(c))
		sshc_dead_error(c, subsystem ? "start sftp" : "exec", err);
	else
		asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		              "ssh %s: the server refused to %s: %s", c->target,
		              subsystem ? "start the sftp subsystem" : "run a command",
		              ssh_get_error(c->s));
	return SSH_ERROR;
}

size_t sshc_channel_write(sshc *c, ssh_channel ch, const void *data, size_t len, uint64_t deadline)
{
	const uint8_t *p = data;
	size_t done = 0;
	while (done < len) {
		if (!sshc_check(c) || !ssh_channel_is_open(ch))
			break;
		uint32_t win = ssh_channel_window_size(ch);
		if (win == 0) {
			/* the pump wakes us when a window adjust arrives */
			if (ssh_now_ns() >= deadline || !sshc_wait(c, deadline))
				break;
			continue;
		}
		size_t n = len - done;
		if (n > win)
			n = win;
		if (n > 1u << 20)
			n = 1u << 20;
		int w = ssh_channel_write(ch, p + done, (uint32_t)n);
		if (w < 0) {
			sshc_check(c);
			break;
		}
		done += (size_t)w;
	}
	return done;
}

void sshc_channel_free(sshc *c, ssh_channel ch, enum sshc_class k)
{
	if (!ch)
		return;
	sshc_gate_done(c, ch);
	/* ssh_channel_free sends the close without waiting; libssh drops it on the reply */
	ssh_channel_free(ch);
	c->spare_off = false; /* a slot came free: the server may take a spare again */
	if (c->chans > 0)
		c->chans--;
	if (c->opened > 0)
		c->opened--;
	if (c->by_class[k] > 0)
		c->by_class[k]--;
	pthread_cond_broadcast(&c->cv);
}

size_t sshc_bulk_room(int held, uint32_t window)
{
	/* a trickle needs no more than libssh's window (nor a buffer of `window`) */
	if ((size_t)held < SSHC_BULK_FROM)
		window = 0;
	return window > (uint32_t)held ? window : (size_t)held;
}

int sshc_channel_read_held(ssh_channel ch, int stream, int held, uint32_t window, uint8_t *dst)
{
	if ((size_t)held < SSHC_BULK_FROM)
		window = 0;
	if (window > (uint32_t)held) {
		/*
		 * A read of more than libssh holds plus the window widens the window to the
		 * count less what it holds; with bytes held it returns them without reading
		 * the socket (at most `window`, which dst has room for).
		 */
		return ssh_channel_read_timeout(ch, dst, window, stream, 0);
	}
	/* count == what is buffered: libssh's read never widens the window for the count */
	return ssh_channel_read_nonblocking(ch, dst, (uint32_t)held, stream);
}

int sshc_channel_take(ssh_channel ch, int stream, uint32_t window, uint8_t **buf, size_t *cap)
{
	int n = ssh_channel_poll(ch, stream);
	if (n <= 0)
		return n; /* nothing yet, SSH_EOF or SSH_ERROR */
	size_t need = sshc_bulk_room(n, window);
	if (need > *cap) {
		size_t ncap = *cap ? *cap : 64u * 1024u;
		while (ncap < need)
			ncap *= 2;
		uint8_t *nb = realloc(*buf, ncap);
		if (!nb)
			return SSH_ERROR;
		*buf = nb;
		*cap = ncap;
	}
	return sshc_channel_read_held(ch, stream, n, window, *buf);
}
