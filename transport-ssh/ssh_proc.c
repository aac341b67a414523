/*
 * Spawned processes in native mode (docs/design.md, "Over SSH without a responder"): one exec
 * channel per process, running exec's wrapper, whose output goes out as `output`
 * notifications as it is read and whose end is an `exit`.
 *
 * Threads. Every field here is under the connection's lock (sshc.mu), as every libssh
 * call is. One delivery thread per connection, started by the first spawn, wakes on the
 * connection's condition variable (the pump broadcasts whenever libssh read something).
 * For each process whose output taken before has all gone out it takes all that libssh
 * holds for the channel, runs the timeouts, and then delivers what it took (in
 * notifications of at most 64 KiB) with the lock released: a follower's callback may call
 * back into the client. So a slow follower leaves its channel unread, libssh holds one
 * window of it at most (sshc_channel_take says why that needs care), and the SSH window
 * stops sshd, whose full pipe stops the process: per process about two windows (~2.6 MB)
 * at most, libssh's and ours (8 MiB for a tree read, whose window is 4 MiB:
 * ssh_proc_widen). A follower that blocks holds up the connection's others.
 *
 * Connections (connect, ssh_proc_connect) are handles of the same table on a direct-tcpip
 * channel (ssh_tcp.c): one stream, stdout; no wrapper, pid or kill command. The same
 * delivery serves them, so their flow control is the processes': a follower that stalls
 * leaves the channel unread and the window stops sshd, whose socket buffer then fills and
 * TCP stops the peer.
 *
 * Lifetime. A process is listed from its spawn until 64 processes that finished after it
 * have finished too. Its channel (one slot of the connection's channel budget) goes when
 * it finishes. Only the delivery thread frees processes; a call that releases the lock
 * while it uses one counts itself in `users`.
 */
#include "ssh_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROC_CHUNK     (64u * 1024u)             /* bytes per output notification, at most */
#define PROC_KEEP_DONE 64                        /* finished processes still listed */
#define KILL_GRACE_NS  (2000ull * SSH_NS_PER_MS) /* timeout: KILL 2 s after TERM */
/* After the KILL, stop waiting for pipes held by processes that left the group. */
#define GIVE_UP_NS (2000ull * SSH_NS_PER_MS)
/* A kill that found no free channel is tried again this much later. */
#define KILL_RETRY_NS (200ull * SSH_NS_PER_MS)
/* proc_signal and close wait this long at most for their kill command to finish. */
#define KILL_WAIT_NS (5000ull * SSH_NS_PER_MS)

static const char *const stream_names[2] = {"stdout", "stderr"};

/* Bytes read but not delivered yet. */
typedef struct pend {
	uint8_t *p;
	size_t len, cap;
	uint64_t lost; /* bytes dropped for want of memory: the next chunk's offset skips them */
} pend;

typedef struct sproc {
	struct sproc *next; /* the table, in spawn (id) order */
	uint64_t id;
	char *tag, *command;
	ssh_channel ch; /* until it finished */
	struct ssh_channel_callbacks_struct cb;
	ssh_exit_info xi;
	ssh_marker mk[2];
	char marker[2][40];
	long pid, pgid;
	bool relayed; /* the wrapper stays as the channel's process (ssh_quote.c) */
	/* its wrapper ends when told (ssh_wrap.hold, sshc.fragile_open): told, and counted
	 * in sshc.exiting until the server reports the end */
	bool hold, go_sent, exiting;
	bool tty;     /* on a pseudo-terminal: one stream (stdout), writes are typed */
	bool started; /* the exec request went out: a process may run (ssh_exit_settle) */
	/* a connection (connect): a direct-tcpip channel, not a session */
	bool sock;
	bool opening;      /* its open timed out: the channel waits for the server's answer */
	bool got_eof;      /* the server sent the channel's EOF: the peer shut its sending side */
	bool got_close;    /* the server closed the channel */
	bool eof_noted;    /* that EOF went out as an empty output with eof */
	char close_sig[8]; /* proc_signal closed it: "KILL" or "TERM" */
	char *why;         /* how it failed (exit_code 1), for the exit's error */
	pend pend[2];
	uint64_t sent[2]; /* bytes of each stream delivered (or being delivered) */
	bool eof[2];
	bool held;       /* the spawn's answer is not out yet: deliver nothing */
	bool listed;     /* proc_* and proc_list see it */
	bool finished;   /* dead, its output at EOF: the exit fields hold */
	bool exit_sent;  /* its exit was handed to the followers */
	bool final_kill; /* timed out and ended at TERM: KILL the group anyway, once */
	int64_t exit_code;
	char signal[32]; /* "" when it exited */
	bool timed_out;
	uint64_t term_at, kill_at, give_up_at, retry_at;
	uint64_t kill_ran_by; /* the KILL goes through a login shell: how long it may take */
	bool term_sent, kill_sent;
	ssh_channel killer, killer2; /* the timeout's TERM and KILL commands */
	bool stdin_eof, writing;
	unsigned users; /* calls using it with the lock released: not freed meanwhile */
	uint64_t done_seq;
	uint32_t window; /* stdout's window when wider than libssh's (ssh_proc_widen) */
} sproc;

struct ssh_procs {
	sshc *c;
	asp_proc_routes *routes; /* the followers; its own lock, never held with c->mu */
	sproc *head, **tail;
	uint64_t last_id;  /* from asp_proc_first_id(): not reused by the next connection */
	uint64_t done_seq; /* finishing order */
	unsigned done;     /* listed processes that finished */
	pthread_t thread;
	bool thread_on, stop;
	uint8_t *buf; /* the delivery thread's read buffer (before a stream's marker) */
	size_t cap;
};

/* One delivery, made under the lock and handed out without it. */
typedef struct item {
	uint64_t proc;
	int stream; /* 0, 1, or -1 for the exit */
	uint64_t offset;
	uint8_t *data;
	size_t len;
	int64_t exit_code;
	char signal[32];
	bool timed_out;
	bool eof;    /* a connection's end of stdout: empty data */
	char *error; /* a connection's failure (malloc'd) */
} item;

typedef struct batch {
	item *v;
	size_t n, cap;
} batch;

/* ---- processes -------------------------------------------------------------------- */

static void put_pend(void *ctx, const uint8_t *p, size_t n)
{
	pend *b = ctx;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : PROC_CHUNK;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np) {
			b->lost += n;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

/*
 * Under the lock: tells a holding wrapper to end (its channel's USR1), which may be done
 * only while no channel is between its open and its command's start; from then until
 * the server reports the end no channel opens (sshc.fragile_open). False while the gate
 * is busy.
 */
static bool let_go(sshc *c, sproc *p)
{
	if (!p->hold || p->go_sent)
		return true;
	if (c->gate_busy)
		return false;
	if (p->ch && ssh_channel_is_open(p->ch) && !atomic_load(&c->dead))
		ssh_channel_request_send_signal(p->ch, "USR1");
	p->go_sent = p->exiting = true;
	sshc_exit_begin(c);
	return true;
}

/* Under the lock: gives the channel (and its slot) back. */
static void drop_channel(sshc *c, sproc *p)
{
	if (!p->ch)
		return;
	if (p->sock) { /* no session slot: ssh_tcp.c */
		ssh_remove_channel_callbacks(p->ch, &p->cb);
		ssh_channel_free(p->ch);
		p->ch = NULL;
		pthread_cond_broadcast(&c->cv);
		return;
	}
	if (p->started) { /* (a refused pty-req started nothing: no exit to wait for) */
		/* a wrapper still holding is told to end first: the gate may be busy a while */
		for (uint64_t dl = sshc_setup_deadline(c); !let_go(c, p);)
			if (ssh_now_ns() >= dl || !sshc_wait(c, dl))
				break;
		ssh_exit_settle(c, p->ch, &p->xi);
	}
	if (p->exiting) {
		p->exiting = false;
		sshc_exit_done(c);
	}
	ssh_remove_channel_callbacks(p->ch, &p->cb);
	sshc_channel_free(c, p->ch, SSHC_COMMAND);
	p->ch = NULL;
}

/* Under the lock: frees everything of `p` (unlinked, or never linked). */
static void proc_free(sshc *c, sproc *p)
{
	if (!p)
		return;
	ssh_killer_reap(c, &p->killer, true);
	ssh_killer_reap(c, &p->killer2, true);
	drop_channel(c, p);
	for (int s = 0; s < 2; s++) {
		free(p->pend[s].p);
		sstr_free(&p->mk[s].pre);
	}
	free(p->tag);
	free(p->command);
	free(p->why);
	free(p);
}

/* Under the lock: a listed process, or NULL with not_found in `err`. */
static sproc *find(ssh_procs *ps, uint64_t id, const char *op, asp_error *err)
{
	for (sproc *p = ps->head; p; p = p->next)
		if (p->id == id && p->listed)
			return p;
	asp_error_set(err, ASP_E_NOT_FOUND, NULL,
	              "%s: no process %llu on this connection: never spawned on it, finished and "
	              "no longer retained (the last %d finished ones are), or started on an "
	              "earlier connection that was lost (over plain SSH a connection's processes "
	              "end with it); see proc_list",
	              op, (unsigned long long)id, PROC_KEEP_DONE);
	return NULL;
}

/* Under the lock: the exit is known (or given up on). Lists it among the finished. */
static void finish(ssh_procs *ps, sproc *p)
{
	p->finished = true;
	p->exit_code = -1; /* as exec: a signal, or a channel that closed without a status */
	p->signal[0] = '\0';
	if (p->sock) { /* closed by request, failed (why), or both sides ended */
		p->exit_code = p->close_sig[0] ? -1 : p->why ? 1 : 0;
		snprintf(p->signal, sizeof p->signal, "%s", p->close_sig);
	} else if (p->xi.has_signal)
		snprintf(p->signal, sizeof p->signal, "%s", p->xi.signal);
	else if (p->xi.has_status)
		p->exit_code = p->xi.status;
	/* none of a timed-out group may survive (as exec), even when TERM ended the leader */
	p->final_kill = p->timed_out && !p->kill_sent;
	p->done_seq = ++ps->done_seq;
	ps->done++;
	if (ps->done > PROC_KEEP_DONE) {
		sproc *oldest = NULL;
		for (sproc *x = ps->head; x; x = x->next)
			if (x->listed && x->finished && (!oldest || x->done_seq < oldest->done_seq))
				oldest = x;
		if (oldest) {
			oldest->listed = false;
			ps->done--;
		}
	}
	for (int s = 0; s < 2; s++)
		sstr_free(&p->mk[s].pre);
	if (!p->users)
		drop_channel(ps->c, p);
	pthread_cond_broadcast(&ps->c->cv); /* proc_wait */
}

/* ---- the delivery thread ---------------------------------------------------------- */

static item *batch_add(batch *b)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 16;
		item *v = realloc(b->v, cap * sizeof *v);
		if (!v)
			return NULL;
		b->v = v;
		b->cap = cap;
	}
	item *it = &b->v[b->n++];
	memset(it, 0, sizeof *it);
	return it;
}

/*
 * Under the lock: once everything read before went out, takes all that libssh holds for
 * both streams (sshc_channel_take says why all of it, and why only then).
 */
static bool read_some(ssh_procs *ps, sproc *p)
{
	if (!p->ch || p->pend[0].len || p->pend[1].len)
		return false; /* the follower is behind: read nothing more (backpressure) */
	bool busy = false;
	for (int s = 0; s < 2; s++) {
		if (p->eof[s])
			continue;
		pend *b = &p->pend[s];
		uint32_t win = s == 0 ? p->window : 0;
		int n = p->mk[s].marked ? sshc_channel_take(p->ch, s, win, &b->p, &b->cap)
		                        : sshc_channel_take(p->ch, s, win, &ps->buf, &ps->cap);
		if (n == 0)
			continue;
		busy = true;
		if (n < 0) {
			if (!sshc_check(ps->c))
				return busy;
			p->eof[s] = true; /* SSH_EOF, or the channel went away */
			continue;
		}
		if (p->mk[s].marked) {
			b->len = (size_t)n;
			continue;
		}
		char line[64];
		bool got;
		ssh_marker_feed(&p->mk[s], ps->buf, (size_t)n, p->marker[s], line, sizeof line,
		                &got, put_pend, b);
	}
	return busy;
}

/* Under the lock (released while a kill command starts): timeout_ms, as exec runs it. */
static bool run_timeout(ssh_procs *ps, sproc *p, uint64_t *wake)
{
	sshc *c = ps->c;
	bool busy = false;
	uint64_t now = ssh_now_ns();
	if (!p->timed_out && now >= p->term_at) {
		p->timed_out = true;
		p->kill_at = now + KILL_GRACE_NS;
		/* honoured for non-root; not where the wrapper relays (see proc_signal) */
		if (p->ch && ssh_channel_is_open(p->ch) && !p->relayed)
			ssh_channel_request_send_signal(p->ch, "TERM");
		busy = true;
	}
	if (p->timed_out && !p->term_sent && now >= p->retry_at) {
		p->killer = ssh_killer_start(c, p->pid, p->pgid, "TERM", true);
		p->term_sent = p->killer != NULL;
		p->retry_at = now + KILL_RETRY_NS;
		busy = true;
	}
	if (p->timed_out && !p->kill_sent && now >= p->kill_at && now >= p->retry_at) {
		ssh_killer_reap(c, &p->killer2, true);
		p->killer2 = ssh_killer_start(c, p->pid, p->pgid, "KILL", false);
		p->kill_sent = p->killer2 != NULL || now >= p->kill_at + GIVE_UP_NS;
		p->give_up_at = now + GIVE_UP_NS;
		p->kill_ran_by = sshc_setup_deadline(c);
		p->retry_at = now + KILL_RETRY_NS;
		busy = true;
	}
	/* killed (the KILL ran, or had its login shell's time) and its pipes still open
	 * (escapees hold them): stop waiting, unless our follower is what is behind */
	bool killing = p->killer2 && now < p->kill_ran_by;
	if (p->timed_out && !p->pend[0].len && !p->pend[1].len &&
	    (p->kill_sent ? now >= p->give_up_at && !killing : now >= p->kill_at + GIVE_UP_NS)) {
		finish(ps, p);
		return true;
	}
	uint64_t next = !p->timed_out ? p->term_at
	                : p->kill_sent
	                    ? (now < p->give_up_at || !killing ? p->give_up_at : p->kill_ran_by)
	                    : (p->kill_at < p->retry_at ? p->retry_at : p->kill_at);
	if (p->timed_out && !p->term_sent && p->retry_at < next)
		next = p->retry_at;
	if (next < *wake)
		*wake = next;
	return busy;
}

/*
 * Under the lock: a connection whose open timed out holds its channel until the server
 * answers, then frees it (closing it, when the open succeeded late), so that nothing is
 * left open in the sandbox. It was never listed; sweep frees it then.
 */
static bool open_settled(ssh_procs *ps, sproc *p)
{
	if (ssh_tcp_open_poll(ps->c, p->ch) == SSH_AGAIN && !atomic_load(&ps->c->dead))
		return false;
	p->opening = false;
	drop_channel(ps->c, p);
	return true;
}

/*
 * Under the lock, its output all out: whether a connection has ended, and how. Both
 * directions ended (the server's EOF read to the end, ours sent): exit 0. The server
 * closed the channel before our EOF: it could not write to the peer (reset, or closed
 * while we sent), a failure. SSH carries no reason, and a reset peer reads as an EOF.
 */
static bool sock_ended(ssh_procs *ps, sproc *p)
{
	if (!p->eof[0] || !(p->got_eof || p->got_close))
		return false;
	if (!p->stdin_eof && !p->got_close)
		return false; /* half-closed by the peer: we may still send */
	if (!p->stdin_eof)
		p->why = strdup("the connection ended in the sandbox before this end's eof: the "
		                "SSH server closed the channel (the peer reset the connection or "
		                "stopped taking data; SSH does not say which)");
	finish(ps, p);
	return true;
}

/* Under the lock: moves `p` along and adds what it has for the followers to `b`. */
static bool step(ssh_procs *ps, sproc *p, batch *b, uint64_t *wake)
{
	sshc *c = ps->c;
	bool busy = false;
	ssh_killer_reap(c, &p->killer, false);
	bool killing = p->killer2 != NULL;
	ssh_killer_reap(c, &p->killer2, false);
	if (killing && !p->killer2 && p->give_up_at < ssh_now_ns() + GIVE_UP_NS)
		p->give_up_at = ssh_now_ns() + GIVE_UP_NS; /* the KILL ran just now */
	if (p->opening)
		return open_settled(ps, p);
	if (!p->finished) {
		busy |= read_some(ps, p);
		if (atomic_load(&c->dead))
			return busy;
		if (!p->sock)
			busy |= run_timeout(ps, p, wake);
		/* the command's output all read: its wrapper holds for our word to end */
		if (!p->finished && p->hold && !p->go_sent && p->eof[0] && p->eof[1])
			busy |= let_go(c, p);
	}
	if (!p->finished && !p->sock && p->eof[0] && p->eof[1] && !p->pend[0].len &&
	    !p->pend[1].len &&
	    (p->xi.has_status || p->xi.has_signal || !p->ch || ssh_channel_is_closed(p->ch))) {
		finish(ps, p);
		busy = true;
	}
	if (!p->finished && p->sock && !p->pend[0].len)
		busy |= sock_ended(ps, p);
	if (p->held)
		return busy;
	for (int s = 0; s < 2; s++) {
		if (!p->pend[s].len)
			continue;
		item *it = batch_add(b);
		if (!it)
			return busy; /* out of memory: try again next round */
		p->sent[s] += p->pend[s].lost;
		it->proc = p->id;
		it->stream = s;
		it->offset = p->sent[s];
		it->data = p->pend[s].p;
		it->len = p->pend[s].len;
		p->sent[s] += p->pend[s].len;
		p->pend[s] = (pend){0};
		busy = true;
	}
	if (p->sock && p->got_eof && p->eof[0] && !p->eof_noted && !p->pend[0].len) {
		item *it = batch_add(b); /* the peer shut its sending side: said on its own */
		if (!it)
			return busy;
		it->proc = p->id;
		it->offset = p->sent[0];
		it->eof = true;
		p->eof_noted = true;
		busy = true;
	}
	if (p->finished && !p->exit_sent && !p->pend[0].len && !p->pend[1].len) {
		item *it = batch_add(b);
		if (!it)
			return busy;
		it->proc = p->id;
		it->stream = -1;
		it->exit_code = p->exit_code;
		snprintf(it->signal, sizeof it->signal, "%s", p->signal);
		it->timed_out = p->timed_out;
		it->error = p->why ? strdup(p->why) : NULL; /* (none, out of memory: still out) */
		p->exit_sent = true;
		busy = true;
	} else if (p->exit_sent && p->final_kill) {
		/* after the exit went out: a kill command costs a round trip */
		p->final_kill = false;
		ssh_killer_reap(c, &p->killer2, true);
		p->killer2 = ssh_killer_start(c, p->pid, p->pgid, "KILL", false);
	}
	return busy;
}

/* Under the lock: channels of finished processes, and processes nobody can reach. */
static void sweep(ssh_procs *ps)
{
	for (sproc **pp = &ps->head; *pp;) {
		sproc *p = *pp;
		if (p->finished && p->ch && !p->users && !p->opening)
			drop_channel(ps->c, p);
		if (!p->listed && p->exit_sent && !p->users && !p->final_kill && !p->killer &&
		    !p->killer2 && !p->opening) {
			*pp = p->next;
			if (ps->tail == &p->next)
				ps->tail = pp;
			proc_free(ps->c, p);
			continue;
		}
		pp = &p->next;
	}
}

/* Without the lock: to the followers, in order. */
static void deliver(ssh_procs *ps, batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		item *it = &b->v[i];
		if (it->eof) {
			asp_output_event ev = {
			    .proc = it->proc,
			    .stream = stream_names[0],
			    .offset = it->offset,
			    .eof = true,
			};
			asp_proc_routes_route(ps->routes, ASP_NOTICE_OUTPUT, &ev);
		} else if (it->stream >= 0) {
			/* what one read took (up to a window) goes out in chunks of 64 KiB */
			for (size_t at = 0; at < it->len; at += PROC_CHUNK) {
				size_t n = it->len - at < PROC_CHUNK ? it->len - at : PROC_CHUNK;
				asp_output_event ev = {
				    .proc = it->proc,
				    .stream = stream_names[it->stream],
				    .offset = it->offset + at,
				    .data = {it->data + at, n},
				};
				asp_proc_routes_route(ps->routes, ASP_NOTICE_OUTPUT, &ev);
			}
			free(it->data);
		} else {
			asp_exit_event ev = {
			    .proc = it->proc,
			    .exit_code = it->exit_code,
			    .signal = it->signal[0] ? it->signal : NULL,
			    .timed_out = it->timed_out,
			    .error = it->error,
			};
			asp_proc_routes_route(ps->routes, ASP_NOTICE_EXIT, &ev);
			free(it->error);
		}
	}
	b->n = 0;
}

static void *deliver_main(void *arg)
{
	ssh_procs *ps = arg;
	sshc *c = ps->c;
	batch b = {0};
	sshc_lock(c);
	while (!ps->stop && sshc_check(c)) {
		uint64_t wake = SSH_NO_DEADLINE;
		bool busy = false;
		/* a kill command releases the lock: others may append, only we unlink */
		for (sproc *p = ps->head; p && !ps->stop; p = p->next)
			busy |= step(ps, p, &b, &wake);
		sweep(ps);
		if (b.n) {
			sshc_unlock(c);
			deliver(ps, &b);
			sshc_lock(c);
			continue;
		}
		if (!busy && !ps->stop)
			sshc_wait(c, wake);
	}
	bool lost = !ps->stop;
	asp_error why;
	if (lost)
		sshc_dead_error(c, "spawn", &why);
	sshc_unlock(c);
	for (size_t i = 0; i < b.n; i++) {
		free(b.v[i].data);
		free(b.v[i].error);
	}
	free(b.v);
	if (lost) /* the connection died: every follower hears of it */
		asp_proc_routes_lost(ps->routes, &why);
	return NULL;
}

/* Under the lock: the delivery thread, at the first spawn. */
static asp_status start_thread(ssh_procs *ps, asp_error *err)
{
	if (ps->thread_on)
		return ASP_OK;
	/* it takes no signals: they belong to the application's threads */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&ps->thread, NULL, deliver_main, ps);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return asp_error_errno(err, rc, NULL, "spawn: cannot start a thread");
	ps->thread_on = true;
	return ASP_OK;
}

/* ---- the table -------------------------------------------------------------------- */

ssh_procs *ssh_procs_new(sshc *c)
{
	ssh_procs *ps = calloc(1, sizeof *ps);
	if (!ps)
		return NULL;
	ps->c = c;
	ps->tail = &ps->head;
	ps->last_id = asp_proc_first_id() - 1; /* the first is ++last_id */
	ps->routes = asp_proc_routes_new();
	if (!ps->routes) {
		free(ps);
		return NULL;
	}
	return ps;
}

/* Under the lock: TERMs every group still running, KILL 2 s later in the sandbox. */
static void end_running(ssh_procs *ps)
{
	sshc *c = ps->c;
	sstr targets = {0};
	for (sproc *p = ps->head; p; p = p->next) {
		if (p->finished || p->pid <= 0)
			continue;
		char t[32];
		if (p->pgid == p->pid)
			snprintf(t, sizeof t, " -%ld", p->pgid);
		else
			snprintf(t, sizeof t, " %ld", p->pid);
		if (sstr_adds(&targets, t) < 0)
			return;
	}
	if (!targets.len)
		return;
	sstr cmd = {0};
	if (sstr_adds(&cmd, "kill -s TERM --") == 0 && sstr_adds(&cmd, targets.p) == 0 &&
	    sstr_adds(&cmd, " 2>/dev/null; (sleep 2; kill -s KILL --") == 0 &&
	    sstr_adds(&cmd, targets.p) == 0 &&
	    sstr_adds(&cmd, ") </dev/null >/dev/null 2>&1 &") == 0) {
		ssh_channel k = ssh_killer_exec(c, cmd.p);
		for (uint64_t dl = ssh_now_ns() + KILL_WAIT_NS; k;) {
			ssh_killer_reap(c, &k, false);
			if (k && (ssh_now_ns() >= dl || !sshc_wait(c, dl)))
				break;
		}
		ssh_killer_reap(c, &k, true);
	}
	sstr_free(&cmd);
	sstr_free(&targets);
}

void ssh_procs_free(ssh_procs *ps)
{
	if (!ps)
		return;
	sshc *c = ps->c;
	sshc_lock(c);
	ps->stop = true;
	sshc_unlock(c); /* wakes the delivery thread */
	if (ps->thread_on)
		pthread_join(ps->thread, NULL);
	asp_error why;
	asp_error_set(&why, ASP_E_TRANSPORT_ERROR, NULL, "the client closed the connection");
	asp_proc_routes_lost(ps->routes, &why); /* a no-op when it died first */
	asp_proc_routes_free(ps->routes);
	sshc_lock(c);
	if (!atomic_load(&c->dead))
		end_running(ps); /* as a responder does at its end */
	while (ps->head) {
		sproc *p = ps->head;
		ps->head = p->next;
		proc_free(c, p);
	}
	sshc_unlock(c);
	free(ps->buf);
	free(ps);
}

static void release(ssh_procs *ps, uint64_t id)
{
	sshc_lock(ps->c);
	for (sproc *p = ps->head; p; p = p->next)
		if (p->id == id)
			p->held = false;
	sshc_unlock(ps->c); /* wakes the delivery thread */
}

/* ---- spawn ------------------------------------------------------------------------ */

/* Under the lock: how many processes hold a channel. */
static unsigned running(ssh_procs *ps)
{
	unsigned n = 0;
	for (sproc *p = ps->head; p; p = p->next)
		n += p->ch != NULL && !p->sock; /* a connection's channel is not a session */
	return n;
}

/*
 * Under the lock: how many spawned processes may hold a channel at once. They hold it as
 * long as they run, so they must never take the whole budget: one session stays for exec
 * and sftp, one for the kill command that proc_signal and a timeout need. The budget is
 * the server's, once a refusal taught it, and until then OpenSSH's default (we assume 32
 * for short commands, which give theirs back; a wrong guess for long ones would leave
 * nothing to kill them with).
 */
static unsigned spawn_cap(const sshc *c)
{
	unsigned n = c->chan_limit < SSH_STOCK_SESSIONS ? c->chan_limit : SSH_STOCK_SESSIONS;
	return n > 3 ? n - 2 : 1;
}

/*
 * Under the lock: reads until the wrapper's line on stdout. The bytes after it (output
 * already) stay in p->pend; the stream that found its marker is read no further here.
 */
static asp_status await_wrapper(ssh_procs *ps, sproc *p, const asp_exec_params *ep,
                                uint64_t deadline, uint8_t *buf, asp_error *err)
{
	sshc *c = ps->c;
	for (;;) {
		bool progress = false;
		for (int s = 0; s < 2; s++) {
			if (p->eof[s] || p->mk[s].marked)
				continue;
			int n = ssh_channel_read_nonblocking(p->ch, buf, PROC_CHUNK, s);
			if (n == 0)
				continue;
			progress = true;
			if (n < 0) {
				if (!sshc_check(c))
					return sshc_dead_error(c, "spawn", err);
				p->eof[s] = true;
				continue;
			}
			char line[64];
			bool got;
			ssh_marker_feed(&p->mk[s], buf, (size_t)n, p->marker[s], line, sizeof line,
			                &got, put_pend, &p->pend[s]);
			if (!got || s != 0)
				continue;
			/* on a terminal the line discipline ended the line with "\r\n" */
			size_t ll = strlen(line);
			if (ll && line[ll - 1] == '\r')
				line[ll - 1] = '\0';
			char how[16] = "";
			if (sscanf(line, "ok %ld %ld %15s", &p->pid, &p->pgid, how) >= 2 &&
			    p->pid > 0) {
				p->relayed = strcmp(how, "relay") == 0;
				return ASP_OK;
			}
			return ssh_cmd_refused(
			    "spawn", ep, strncmp(line, "err ", 4) == 0 ? line + 4 : "bad", err);
		}
		if (!sshc_check(c))
			return sshc_dead_error(c, "spawn", err);
		if (p->eof[0] || p->mk[0].marked) {
			/* stdout ended (or 64 KiB of it went by) without the wrapper's line: the
			 * login shell's complaint is on stderr, its status follows closely */
			uint64_t dl = ssh_now_ns() + 500ull * SSH_NS_PER_MS;
			while ((!p->eof[1] || !p->xi.has_status) && ssh_now_ns() < dl) {
				int n = p->eof[1]
				            ? 0
				            : ssh_channel_read_nonblocking(p->ch, buf, 4096, 1);
				if (n > 0 && !p->mk[1].marked && p->mk[1].pre.len < 4096) {
					sstr_add(&p->mk[1].pre, (const char *)buf, (size_t)n);
					continue;
				}
				if (n < 0)
					p->eof[1] = true;
				if (n == 0 && (ssh_now_ns() >= dl || ssh_channel_is_closed(p->ch) ||
				               !sshc_wait(c, dl)))
					break;
			}
			/* (on a terminal the shell's complaint came on stdout, the one stream) */
			const sstr *why = &p->mk[p->tty ? 0 : 1].pre;
			return ssh_cmd_no_wrapper(c, "spawn", p->xi.has_status ? p->xi.status : -1,
			                          why->p, why->len, err);
		}
		if (ssh_now_ns() >= deadline)
			return asp_error_set(
			    err, ASP_E_TIMEOUT, NULL,
			    "spawn: ssh %s: the login shell did not start the command "
			    "within the connect timeout",
			    c->target);
		if (!progress && !sshc_wait(c, deadline))
			return sshc_dead_error(c, "spawn", err);
	}
}

/*
 * spawn's tty: its size and TERM checked (invalid_argument), and the env the wrapper
 * exports with TERM set to the terminal's type, whatever the request's env says (sshd and
 * Dropbear set TERM from pty-req, but a login shell's startup files may change it).
 * *env is malloc'd (NULL without tty).
 */
static asp_status tty_env(const asp_spawn_params *sp, sshc_pty *t, asp_strmap_entry **env,
                          asp_exec_params *ep, asp_error *err)
{
	*env = NULL;
	if (!sp->tty)
		return ASP_OK;
	asp_status st = asp_check_tty_size("spawn", sp->tty->rows, sp->tty->cols, err);
	if (st != ASP_OK)
		return st;
	t->term = sp->tty->term ? sp->tty->term : ASP_TTY_TERM_DEFAULT;
	t->rows = (int)sp->tty->rows;
	t->cols = (int)sp->tty->cols;
	/* as the local backend: any bytes (the wrapper quotes them), 1 to 128 */
	size_t tl = strlen(t->term);
	if (tl == 0 || tl > 128)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "spawn: tty.term must be 1 to 128 bytes, got %zu", tl);
	size_t n = sp->has_env ? sp->env.count : 0, k = 0;
	*env = malloc((n + 1) * sizeof **env);
	if (!*env)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "spawn: out of memory");
	for (size_t i = 0; i < n; i++)
		if (!sp->env.items[i].key || strcmp(sp->env.items[i].key, "TERM") != 0)
			(*env)[k++] = sp->env.items[i];
	(*env)[k++] = (asp_strmap_entry){"TERM", t->term};
	ep->has_env = true;
	ep->env = (asp_strmap){*env, k};
	return ASP_OK;
}

asp_status ssh_proc_spawn(ssh_procs *ps, const asp_spawn_params *sp, asp_spawn_result *r, bool hold,
                          asp_error *err)
{
	sshc *c = ps->c;
	r->proc = 0;
	asp_exec_params ep; /* what the wrapper needs is exec's */
	asp_exec_params_init(&ep);
	ep.command = sp->command;
	ep.has_argv = sp->has_argv;
	ep.argv = sp->argv;
	ep.cwd = sp->cwd;
	ep.has_env = sp->has_env;
	ep.env = sp->env;
	sshc_pty pty = {0};
	asp_strmap_entry *env = NULL;
	asp_status st = tty_env(sp, &pty, &env, &ep, err);
	if (st != ASP_OK)
		return st;
	char nonce[17];
	sstr cmd = {0};
	st = ssh_cmd_build("spawn", &ep, c->fragile_open, nonce, &cmd, err);
	free(env); /* the command line holds its words now */
	if (st != ASP_OK)
		return st;
	sproc *p = calloc(1, sizeof *p);
	uint8_t *buf = malloc(PROC_CHUNK);
	if (p) {
		p->tag = sp->tag ? strdup(sp->tag) : NULL;
		p->command = sp->command ? strdup(sp->command)
		                         : ssh_quote_argv(sp->argv.items, sp->argv.count);
	}
	sshc_lock(c);
	if (!p || !buf || !p->command || (sp->tag && !p->tag)) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "spawn: out of memory");
		goto fail;
	}
	ssh_markers(nonce, p->marker[0], p->marker[1]);
	p->term_at = ssh_deadline_ms(sp->timeout_ms);
	p->kill_at = p->give_up_at = SSH_NO_DEADLINE;
	p->held = hold;
	if (sp->tty) {
		/*
		 * A pty merges stderr into stdout: the server sends no extended data, and the
		 * wrapper's lines (and the login shell's noise) all come on stdout, where the
		 * stdout marker still finds the "ok" line (ended "\r\n" by the line discipline).
		 */
		p->tty = true;
		p->eof[1] = true;
		p->mk[1].marked = true;
	}
	if (!sshc_check(c)) {
		st = sshc_dead_error(c, "spawn", err);
		goto fail;
	}
	st = start_thread(ps, err);
	if (st != ASP_OK)
		goto fail;
	/* a running process holds its channel: wait a while for one to end, not for ever */
	uint64_t setup = sshc_setup_deadline(c);
	while (running(ps) >= spawn_cap(c)) {
		if (ssh_now_ns() >= setup) {
			st = asp_error_set(
			    err, ASP_E_TIMEOUT, NULL,
			    "spawn: ssh %s: %u spawned processes are running on this connection, "
			    "the most it runs at once: each holds an SSH session while it runs, "
			    "and "
			    "of the %u sessions counted on (OpenSSH's default MaxSessions, or what "
			    "the server allowed) one stays for exec and sftp, one for kills. Wait "
			    "for one to end, or use agent mode (ssh.agent), which runs every "
			    "process on one session",
			    c->target, running(ps), spawn_cap(c) + 2);
			goto fail;
		}
		if (!sshc_wait(c, setup)) {
			st = sshc_dead_error(c, "spawn", err);
			goto fail;
		}
	}
	st = sshc_channel_open(c, SSHC_COMMAND, setup, SSH_NO_DEADLINE, &p->ch, err);
	if (st == ASP_E_TIMEOUT) {
		unsigned busy = running(ps);
		asp_error e = *err;
		st =
		    asp_error_set(err, ASP_E_TIMEOUT, NULL,
		                  "spawn: %s (%u of them held by running spawned processes, one "
		                  "channel each): wait for one to end, or raise sshd's MaxSessions",
		                  e.message, busy);
	}
	if (st != ASP_OK)
		goto fail;
	ssh_exit_watch(p->ch, &p->cb, &p->xi);
	if (p->tty)
		st = sshc_channel_pty(c, p->ch, &pty, setup, err);
	if (st == ASP_OK) {
		p->started = true;
		/* (a wrapper that refuses ends at once: not while another channel opens) */
		sshc_gate_keep(c, p->ch);
		st = sshc_channel_exec(c, p->ch, cmd.p, false, setup, err);
	}
	if (st == ASP_OK)
		st = await_wrapper(ps, p, &ep, setup, buf, err);
	if (st != ASP_OK)
		goto fail; /* (the gate opens once the channel went) */
	sshc_gate_done(c, p->ch);
	p->hold = p->relayed && c->fragile_open;
	if (sp->stdin_eof) { /* the command runs: nothing will be written, say so now */
		p->stdin_eof = true;
		if (p->tty) /* typed: see proc_write's eof */
			sshc_channel_write(c, p->ch, "\x04", 1, setup);
		else
			ssh_channel_send_eof(p->ch);
	}
	p->id = ++ps->last_id;
	p->listed = true;
	*ps->tail = p;
	ps->tail = &p->next;
	r->proc = p->id;
	sshc_unlock(c); /* wakes the delivery thread */
	free(buf);
	sstr_free(&cmd);
	return ASP_OK;
fail:
	proc_free(c, p);
	sshc_unlock(c);
	free(buf);
	sstr_free(&cmd);
	return st;
}

/* ---- connect ---------------------------------------------------------------------- */

#define CONNECT_TIMEOUT_MS 10000u           /* connect's timeout_ms 0, as the local backend */
#define CONNECT_MAX_MS     (86400u * 1000u) /* longer waits are a day */
#define HOST_MAX           253u             /* the longest DNS name */

static void on_eof(ssh_session s, ssh_channel ch, void *user)
{
	(void)s, (void)ch;
	((sproc *)user)->got_eof = true;
}

static void on_close(ssh_session s, ssh_channel ch, void *user)
{
	(void)s, (void)ch;
	((sproc *)user)->got_close = true;
}

asp_status ssh_proc_connect(ssh_procs *ps, const asp_connect_params *cp, asp_connect_result *r,
                            bool hold, asp_error *err)
{
	sshc *c = ps->c;
	r->proc = 0;
	if (cp->port < 1 || cp->port > 65535)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "connect: 'port' must be 1 to 65535, got %llu",
		                     (unsigned long long)cp->port);
	const char *host = cp->host ? cp->host : "127.0.0.1";
	if (!host[0] || strlen(host) > HOST_MAX)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "connect: 'host' must be 1 to %u bytes", HOST_MAX);
	uint64_t timeout = cp->timeout_ms ? cp->timeout_ms : CONNECT_TIMEOUT_MS;
	if (timeout > CONNECT_MAX_MS)
		timeout = CONNECT_MAX_MS;
	sproc *p = calloc(1, sizeof *p);
	if (p) {
		p->tag = cp->tag ? strdup(cp->tag) : NULL;
		size_t n = strlen(host) + 16;
		p->command = malloc(n);
		if (p->command)
			snprintf(p->command, n, "connect %s:%u", host, (unsigned)cp->port);
	}
	asp_status st = ASP_OK;
	sshc_lock(c);
	if (!p || !p->command || (cp->tag && !p->tag)) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "connect: out of memory");
		goto fail;
	}
	p->sock = true;
	p->held = hold;
	p->mk[0].marked = p->mk[1].marked = true; /* no wrapper: every byte is the peer's */
	p->eof[1] = true;                         /* one stream */
	p->term_at = p->kill_at = p->give_up_at = SSH_NO_DEADLINE;
	if (!sshc_check(c)) {
		st = sshc_dead_error(c, "connect", err);
		goto fail;
	}
	st = start_thread(ps, err);
	if (st != ASP_OK)
		goto fail;
	p->ch = ssh_channel_new(c->s);
	if (!p->ch) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "connect: out of memory");
		goto fail;
	}
	ssh_callbacks_init(&p->cb);
	p->cb.userdata = p;
	p->cb.channel_eof_function = on_eof;
	p->cb.channel_close_function = on_close;
	ssh_add_channel_callbacks(p->ch, &p->cb);
	st = ssh_tcp_open(c, p->ch, host, (unsigned)cp->port, timeout, err);
	if (st == ASP_E_TIMEOUT && !atomic_load(&c->dead)) {
		/* the server may still connect: the delivery thread closes it then */
		p->opening = p->finished = p->exit_sent = true;
		*ps->tail = p;
		ps->tail = &p->next;
		sshc_unlock(c);
		return st;
	}
	if (st != ASP_OK)
		goto fail;
	p->id = ++ps->last_id;
	p->listed = true;
	*ps->tail = p;
	ps->tail = &p->next;
	r->proc = p->id;
	sshc_unlock(c); /* wakes the delivery thread */
	return ASP_OK;
fail:
	proc_free(c, p);
	sshc_unlock(c);
	return st;
}

/* ---- proc_write, proc_signal, proc_wait, proc_list -------------------------------- */

asp_status ssh_proc_write(ssh_procs *ps, const asp_proc_write_params *w, asp_error *err)
{
	sshc *c = ps->c;
	if (w->data.len && !w->data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "proc_write: 'data' has no bytes");
	asp_status st = ASP_OK;
	sshc_lock(c);
	sproc *p = find(ps, w->proc, "proc_write", err);
	if (!p) {
		sshc_unlock(c);
		return err->code;
	}
	p->users++;
	while (p->writing && !p->stdin_eof && sshc_wait(c, SSH_NO_DEADLINE))
		; /* one proc_write at a time, in order */
	if (!sshc_check(c)) {
		st = sshc_dead_error(c, "proc_write", err);
		goto out;
	}
	if (p->stdin_eof) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_write: the stdin of process %llu was closed by an earlier "
		                   "eof",
		                   (unsigned long long)w->proc);
		goto out;
	}
	p->writing = true;
	size_t done = 0;
	while (done < w->data.len) {
		if (!sshc_check(c)) {
			st = sshc_dead_error(c, "proc_write", err);
			break;
		}
		/* a process that is dead reads nothing more; its channel may linger a while */
		if (p->finished || p->xi.has_status || p->xi.has_signal || !p->ch ||
		    !ssh_channel_is_open(p->ch)) {
			st = asp_error_set(err, ASP_E_IO_ERROR, NULL,
			                   "proc_write: %s %llu has %s (%zu of %zu bytes written)",
			                   p->sock ? "connection" : "process",
			                   (unsigned long long)w->proc,
			                   p->sock ? "closed" : "exited", done, w->data.len);
			break;
		}
		uint32_t win = ssh_channel_window_size(p->ch);
		if (win == 0) {
			/* the process reads slowly: the pump wakes us when sshd widens the window
			 */
			sshc_wait(c, SSH_NO_DEADLINE);
			continue;
		}
		size_t n = w->data.len - done;
		if (n > win)
			n = win;
		if (n > PROC_CHUNK)
			n = PROC_CHUNK;
		int k = ssh_channel_write(p->ch, w->data.data + done, (uint32_t)n);
		if (k < 0) {
			if (!sshc_check(c)) {
				st = sshc_dead_error(c, "proc_write", err);
				break;
			}
			st = asp_error_set(
			    err, ASP_E_IO_ERROR, NULL,
			    "proc_write: process %llu no longer reads its stdin (%zu of "
			    "%zu bytes written): %s",
			    (unsigned long long)w->proc, done, w->data.len, ssh_get_error(c->s));
			break;
		}
		done += (size_t)k;
	}
	if (w->eof && p->tty) {
		/*
		 * A terminal's end of input is its VEOF character, typed. We cannot read the
		 * remote termios (no responder there), so it is Ctrl-D, the default that sshd's
		 * and Dropbear's ptys start with (we send no terminal modes). The channel's EOF
		 * is not sent: neither server passes it on to a pty session (sshd closes only a
		 * dup of the pty master; Dropbear 2022.83 leaves the pty as it is: `cat` keeps
		 * reading on both, tested), and libssh refuses every write after it, so
		 * the Ctrl-D could not even follow it.
		 */
		p->stdin_eof = true;
		if (st == ASP_OK && sshc_channel_write(c, p->ch, "\x04", 1, SSH_NO_DEADLINE) != 1)
			st = atomic_load(&c->dead)
			         ? sshc_dead_error(c, "proc_write", err)
			         : asp_error_set(err, ASP_E_IO_ERROR, NULL,
			                         "proc_write: process %llu has exited before its "
			                         "end of input was typed",
			                         (unsigned long long)w->proc);
	} else if (w->eof) { /* even after a failed write: the caller asked for the end */
		p->stdin_eof = true;
		if (p->ch && ssh_channel_is_open(p->ch) && !atomic_load(&c->dead))
			ssh_channel_send_eof(p->ch);
	}
	p->writing = false;
out:
	p->users--;
	sshc_unlock(c);
	return st;
}

asp_status ssh_proc_resize(ssh_procs *ps, const asp_proc_resize_params *rp, asp_error *err)
{
	sshc *c = ps->c;
	asp_status st = asp_check_tty_size("proc_resize", rp->rows, rp->cols, err);
	if (st != ASP_OK)
		return st; /* before the handle, as the local backend checks */
	sshc_lock(c);
	sproc *p = find(ps, rp->proc, "proc_resize", err);
	if (!p) {
		st = err->code;
		goto out;
	}
	if (!p->tty) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_resize: process %llu has no terminal (spawn it with tty)",
		                   (unsigned long long)rp->proc);
		goto out;
	}
	if (!sshc_check(c)) {
		st = sshc_dead_error(c, "proc_resize", err);
		goto out;
	}
	if (p->finished || p->xi.has_status || p->xi.has_signal || !p->ch ||
	    !ssh_channel_is_open(p->ch)) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_resize: process %llu has finished",
		                   (unsigned long long)rp->proc);
		goto out;
	}
	/* "window-change" (no reply): the server sets the pty's size (TIOCSWINSZ), and the
	 * kernel sends SIGWINCH to the terminal's foreground process group */
	if (ssh_channel_change_pty_size(p->ch, (int)rp->cols, (int)rp->rows) != SSH_OK)
		st = !sshc_check(c) ? sshc_dead_error(c, "proc_resize", err)
		                    : asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                                    "proc_resize: ssh %s: window-change failed: %s",
		                                    c->target, ssh_get_error(c->s));
out:
	sshc_unlock(c);
	return st;
}

static const char *const allowed_signals[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"};

void ssh_proc_widen(ssh_procs *ps, uint64_t id, uint32_t window)
{
	asp_error ignore;
	sshc_lock(ps->c);
	sproc *p = find(ps, id, "widen", &ignore);
	if (p)
		p->window = window;
	sshc_unlock(ps->c);
}

asp_status ssh_proc_signal(ssh_procs *ps, const asp_proc_signal_params *sp, asp_error *err)
{
	sshc *c = ps->c;
	const char *sig = NULL;
	for (size_t i = 0; sp->signal && i < sizeof allowed_signals / sizeof *allowed_signals; i++)
		if (strcmp(sp->signal, allowed_signals[i]) == 0)
			sig = allowed_signals[i];
	if (!sig)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "proc_signal: signal '%.32s' is not one of TERM, KILL, INT, "
		                     "HUP, QUIT, USR1, USR2",
		                     sp->signal ? sp->signal : "");
	asp_status st = ASP_OK;
	sshc_lock(c);
	sproc *p = find(ps, sp->proc, "proc_signal", err);
	if (!p) {
		sshc_unlock(c);
		return err->code;
	}
	if (p->sock) {
		/* a connection closes (the server then closes its socket: a FIN, not the
		 * reset the local backend sends; SSH has no way to ask for one) */
		if (strcmp(sig, "KILL") != 0 && strcmp(sig, "TERM") != 0)
			st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                   "proc_signal: %llu is a connection, which KILL or TERM "
			                   "closes; %s means nothing to it",
			                   (unsigned long long)sp->proc, sig);
		else if (!p->finished) {
			snprintf(p->close_sig, sizeof p->close_sig, "%s", sig);
			finish(ps, p); /* frees the channel: its close goes out */
		}
		sshc_unlock(c);
		return st;
	}
	if (p->finished) { /* a no-op (docs/design.md, "Operations") */
		sshc_unlock(c);
		return ASP_OK;
	}
	if (!sshc_check(c)) {
		st = sshc_dead_error(c, "proc_signal", err);
		sshc_unlock(c);
		return st;
	}
	p->users++;
	/* sshd honours the channel's request for non-root logins while the leader lives
	 * (where the wrapper relays, the request would reach it, not the command)... */
	if (p->ch && ssh_channel_is_open(p->ch) && !p->relayed)
		ssh_channel_request_send_signal(p->ch, sig);
	/* ...so the group gets it from a second channel too; we return once kill(1) ran */
	ssh_channel k = ssh_killer_start(c, p->pid, p->pgid, sig, false);
	if (!k)
		st = atomic_load(&c->dead)
		         ? sshc_dead_error(c, "proc_signal", err)
		         : asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                         "proc_signal: ssh %s: no channel for the kill command "
		                         "within 5 s; the channel's own signal request was sent "
		                         "(sshd honours it for non-root logins only)",
		                         c->target);
	for (uint64_t dl = ssh_now_ns() + KILL_WAIT_NS; k;) {
		ssh_killer_reap(c, &k, false);
		if (k && (ssh_now_ns() >= dl || !sshc_wait(c, dl)))
			break;
	}
	ssh_killer_reap(c, &k, true);
	p->users--;
	sshc_unlock(c);
	return st;
}

asp_status ssh_proc_wait(ssh_procs *ps, const asp_proc_wait_params *wp, asp_proc_wait_result *r,
                         asp_arena *a, asp_error *err)
{
	sshc *c = ps->c;
	uint64_t dl = ssh_deadline_ms(wp->timeout_ms);
	asp_status st = ASP_OK;
	sshc_lock(c);
	sproc *p = find(ps, wp->proc, "proc_wait", err);
	if (!p) {
		sshc_unlock(c);
		return err->code;
	}
	p->users++;
	while (!p->finished) {
		if (ssh_now_ns() >= dl) {
			st = asp_error_set(err, ASP_E_TIMEOUT, NULL,
			                   "proc_wait: process %llu is still running after %llu ms",
			                   (unsigned long long)wp->proc,
			                   (unsigned long long)wp->timeout_ms);
			break;
		}
		if (!sshc_wait(c, dl)) {
			st = sshc_dead_error(c, "proc_wait", err);
			break;
		}
	}
	if (st == ASP_OK) {
		r->exit_code = p->exit_code;
		r->timed_out = p->timed_out;
		r->signal =
		    p->signal[0] ? asp_arena_strndup(a, p->signal, strlen(p->signal)) : NULL;
		if (p->signal[0] && !r->signal)
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "proc_wait: out of memory");
	}
	p->users--;
	sshc_unlock(c);
	return st;
}

asp_status ssh_proc_list(ssh_procs *ps, asp_proc_list_result *r, asp_arena *a, asp_error *err)
{
	sshc *c = ps->c;
	asp_status st = ASP_OK;
	sshc_lock(c);
	size_t n = 0;
	for (sproc *p = ps->head; p; p = p->next)
		n += p->listed;
	asp_proc_info *items = n ? asp_arena_alloc(a, n * sizeof *items) : NULL;
	size_t i = 0;
	for (sproc *p = ps->head; p && (items || !n); p = p->next) {
		if (!p->listed)
			continue;
		asp_proc_info *e = &items[i++];
		memset(e, 0, sizeof *e);
		e->proc = p->id;
		e->tag = p->tag ? asp_arena_strndup(a, p->tag, strlen(p->tag)) : NULL;
		e->command = asp_arena_strndup(a, p->command, strlen(p->command));
		e->running = !p->finished;
		e->has_exit_code = p->finished;
		e->exit_code = p->exit_code;
		if (p->finished && p->signal[0])
			e->signal = asp_arena_strndup(a, p->signal, strlen(p->signal));
		if ((p->tag && !e->tag) || !e->command)
			st = ASP_E_INTERNAL;
	}
	if (n && !items)
		st = ASP_E_INTERNAL;
	r->procs.items = items;
	r->procs.count = st == ASP_OK ? n : 0;
	sshc_unlock(c);
	if (st != ASP_OK)
		return asp_error_set(err, st, NULL, "proc_list: out of memory");
	return ASP_OK;
}

/* ---- following ---------------------------------------------------------------------- */

asp_status ssh_proc_attach_unsupported(asp_error *err)
{
	return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
	                     "proc_attach: plain SSH cannot reattach to a process: its output has "
	                     "one way out, the exec channel of the connection that spawned it, "
	                     "which follows it already. Set ssh.agent (agent mode) to attach, also "
	                     "from another connection");
}

/* The call asp_proc_routes_call makes: a spawn held back until the follower is listed. */
static asp_status call_held(void *ctx, asp_op_id op, const void *params, void *result, asp_arena *a,
                            asp_error *err)
{
	(void)a;
	if (op == ASP_OP_SPAWN)
		return ssh_proc_spawn(ctx, params, result, true, err);
	if (op == ASP_OP_CONNECT)
		return ssh_proc_connect(ctx, params, result, true, err);
	return ssh_proc_attach_unsupported(err);
}

asp_status ssh_procs_subscribe(ssh_procs *ps, asp_op_id op, const void *params, void *result,
                               asp_arena *a, asp_proc_sub *sub, asp_error *err)
{
	asp_status st =
	    asp_proc_routes_call(ps->routes, call_held, ps, op, params, result, a, sub, err);
	if (op == ASP_OP_SPAWN && ((asp_spawn_result *)result)->proc)
		release(ps, ((asp_spawn_result *)result)->proc); /* followed now, or never */
	if (op == ASP_OP_CONNECT && ((asp_connect_result *)result)->proc)
		release(ps, ((asp_connect_result *)result)->proc);
	return st;
}

void ssh_procs_unsubscribe(ssh_procs *ps, uint64_t proc)
{
	asp_proc_routes_remove(ps->routes, proc);
}
