/*
 * The streaming ops of the local backend: spawn, proc_write, proc_signal, proc_resize,
 * proc_wait, proc_list, proc_attach; and the shutdown that ends them all.
 */
#include "local_proc.h"
#include "pty.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* proc_write waits for a full stdin pipe in slices this long, checking for the exit. */
#define STDIN_SLICE_MS 100
/* asp_local_shutdown waits for the KILL, the 0.5 s for escapees' pipes, and this margin. */
#define SHUTDOWN_MARGIN_MS 1500

/* ---- proc_list's command of an argv spawn ----------------------------------------- */

static bool plain_word(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_@%+=:,./-", c)))
			return false;
	}
	return true;
}

static char *quote_argv(const asp_strv *argv)
{
	size_t n = 1;
	for (size_t i = 0; i < argv->count; i++)
		n += strlen(argv->items[i]) * 4 + 3;
	char *out = malloc(n), *w = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < argv->count; i++) {
		const char *a = argv->items[i];
		if (i)
			*w++ = ' ';
		if (plain_word(a)) {
			size_t l = strlen(a);
			memcpy(w, a, l);
			w += l;
			continue;
		}
		*w++ = '\'';
		for (; *a; a++) {
			if (*a == '\'') {
				memcpy(w, "'\\''", 4);
				w += 4;
			} else {
				*w++ = *a;
			}
		}
		*w++ = '\'';
	}
	*w = '\0';
	return out;
}

/* ---- spawn ------------------------------------------------------------------------ */

/* A subscriber never listed: back to nothing. */
static void sub_drop(asp_local_conn *c, local_sub *s)
{
	if (s) {
		free(s);
		local_conn_unref(c);
	}
}

/* A spawn counted in l->starting did not get as far as the table. */
static void starting_done(asp_local *l)
{
	pthread_mutex_lock(&l->mu);
	l->starting--;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

asp_status asp_local_spawn(void *self, const asp_spawn_params *p, asp_spawn_result *r, asp_arena *a,
                           asp_error *err)
{
	(void)a;
	asp_local_conn *c = self;
	asp_local *l = c->l;
	r->proc = 0;
	local_child_spec spec = {"spawn",    p->command, p->has_argv, p->argv, p->cwd,
	                         p->has_env, p->env,     false,       p->tty};
	if (p->tty) {
		asp_status st = asp_check_tty_size("spawn", p->tty->rows, p->tty->cols, err);
		if (st != ASP_OK)
			return st;
		if (p->tty->term && (!p->tty->term[0] || strlen(p->tty->term) > 128))
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "spawn: tty.term must be 1 to 128 bytes, got %zu",
			                     strlen(p->tty->term));
	}
	if (!p->command && !p->has_argv)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "spawn: give exactly one of 'command' and 'argv'");
	char *quoted = p->command ? NULL : quote_argv(&p->argv);
	if (!p->command && !quoted)
		return local_oom("spawn", err);
	local_sub *sub = NULL;
	if (c->has_sink && !(sub = local_sub_new(c))) {
		free(quoted);
		return local_oom("spawn", err);
	}
	local_proc *pr = local_proc_alloc(l, LOCAL_PROC_CHILD, PROC_RING_BYTES, p->tag,
	                                  p->command ? p->command : quoted, "spawn", err);
	free(quoted);
	if (!pr) {
		sub_drop(c, sub);
		return err->code;
	}
	pr->timeout_ms = p->timeout_ms;
	asp_status st = ASP_OK;
	if (st == ASP_OK) {
		/* Counted from here until it is in the table: a shutdown waits for it too. */
		pthread_mutex_lock(&l->mu);
		if (l->shutting_down)
			st = asp_error_set(err, ASP_E_IO_ERROR, NULL,
			                   "spawn: the responder is shutting down");
		else
			l->starting++;
		pthread_mutex_unlock(&l->mu);
		if (st == ASP_OK) {
			st = local_child_start(&spec, &pr->child, err);
			if (st != ASP_OK)
				starting_done(l);
		}
	}
	if (st != ASP_OK) {
		sub_drop(c, sub);
		local_proc_unref(pr); /* the only reference: never listed */
		return st;
	}
	/* stdin is the requests' to feed, without blocking a thread for ever. */
	pr->in_fd = pr->child.in_fd;
	pr->child.in_fd = -1;
	pr->tty = pr->child.tty;
	fcntl(pr->in_fd, F_SETFL, fcntl(pr->in_fd, F_GETFL) | O_NONBLOCK);
	if (p->stdin_eof && pr->tty) { /* a terminal is not closed: see proc_write */
		unsigned char veof = local_pty_veof(pr->in_fd);
		ssize_t w = write(pr->in_fd, &veof, 1);
		(void)w; /* an empty terminal's input always takes one byte */
		pr->stdin_eof = true;
	} else if (p->stdin_eof) { /* nothing to send: saves the caller a proc_write(eof) */
		close(pr->in_fd);
		pr->in_fd = -1;
		pr->stdin_eof = true;
	}

	pthread_mutex_lock(&l->mu);
	local_proc **np = l->procs;
	if (l->nprocs == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		np = realloc(l->procs, cap * sizeof *np);
		if (np) {
			l->procs = np;
			l->cap = cap;
		}
	}
	l->starting--;
	pthread_cond_broadcast(&l->cv);
	if (!np) {
		pthread_mutex_unlock(&l->mu);
		st = local_oom("spawn", err);
		goto kill_it;
	}
	if (l->shutting_down) {
		/*
		 * The shutdown began while the process was starting: it has run, so it is
		 * answered as spawned, and ends with the others (TERM now, KILL when theirs is
		 * due), which the shutdown waits for as it counts the pumps.
		 */
		uint64_t now = local_now_ns();
		pr->ending = true;
		pr->end_grace_ms =
		    l->end_kill_ns > now ? (unsigned)((l->end_kill_ns - now) / NS_PER_MS) : 0;
	}
	pr->id = ++l->last_id;
	l->procs[l->nprocs++] = pr;     /* the table's reference */
	atomic_fetch_add(&pr->refs, 1); /* the pump's */
	l->pumps++;
	pthread_mutex_unlock(&l->mu);

	if (sub) {
		pthread_mutex_lock(&pr->mu);
		sub->gated = local_hold_add(c, pr, sub);
		sub->next = pr->subs;
		pr->subs = sub;
		pthread_mutex_unlock(&pr->mu);
		sub = NULL;
	}
	int e = local_pump_start(pr);
	if (e == 0) {
		r->proc = pr->id;
		return ASP_OK;
	}
	st = asp_error_errno(err, e, NULL, "spawn: cannot start a thread for the process");
	pthread_mutex_lock(&l->mu);
	local_proc_unlist_locked(l, pr->id);
	l->pumps--;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	atomic_fetch_sub(&pr->refs, 1); /* the pump's; the table's is ours again */
kill_it:
	sub_drop(c, sub);
	pthread_mutex_lock(&pr->mu);
	local_child_signal_tree(&pr->child, SIGKILL);
	local_child_reap(&pr->child);
	pr->reaped = pr->finished = true;
	pr->exit_code = -1;
	strcpy(pr->signal, "KILL");
	pthread_cond_broadcast(&pr->cv);
	pthread_mutex_unlock(&pr->mu);
	local_proc_unref(pr);
	return st;
}

/* ---- proc_write ------------------------------------------------------------------- */

static bool proc_finished(local_proc *p)
{
	pthread_mutex_lock(&p->mu);
	bool done = p->finished || p->ending;
	pthread_mutex_unlock(&p->mu);
	return done;
}

/* A write whose offset is ahead waits this long for the writes before it. */
#define OFFSET_WAIT_MS 60000

/*
 * A tree_write handle whose unpacker stopped: waits (bounded) for it to finish, then its
 * own error, which says more than a closed pipe. false for other kinds, or when it has
 * not finished in time.
 */
static bool tree_failure(local_proc *pr, asp_error *err)
{
	if (pr->kind != LOCAL_PROC_TREE_IN)
		return false;
	struct timespec dl;
	local_deadline(&dl, 5000);
	pthread_mutex_lock(&pr->mu);
	while (!pr->finished && pthread_cond_timedwait(&pr->cv, &pr->mu, &dl) != ETIMEDOUT)
		;
	bool said = pr->finished;
	if (pr->finished && pr->end_code != ASP_OK)
		asp_error_set(err, pr->end_code, NULL, "%s", pr->end_error ? pr->end_error : "");
	else if (pr->finished)
		asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		              "proc_write: tree stream %llu has ended", (unsigned long long)pr->id);
	pthread_mutex_unlock(&pr->mu);
	return said;
}

/* Under pr->in_mu: waits until the input has taken `offset` bytes; ASP_OK or why not. */
static asp_status wait_turn(local_proc *pr, uint64_t offset, asp_error *err)
{
	if (offset < pr->in_off)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "proc_write: offset %llu of handle %llu is before the %llu "
		                     "bytes already written: a write sent twice?",
		                     (unsigned long long)offset, (unsigned long long)pr->id,
		                     (unsigned long long)pr->in_off);
	struct timespec dl;
	local_deadline(&dl, OFFSET_WAIT_MS);
	while (offset > pr->in_off && !pr->stdin_eof && pr->in_fd >= 0) {
		if (pthread_cond_timedwait(&pr->in_cv, &pr->in_mu, &dl) == ETIMEDOUT &&
		    offset > pr->in_off)
			return asp_error_set(
			    err, ASP_E_INVALID_ARGUMENT, NULL,
			    "proc_write: offset %llu of handle %llu: the %llu bytes "
			    "before it did not come within %d s",
			    (unsigned long long)offset, (unsigned long long)pr->id,
			    (unsigned long long)(offset - pr->in_off), OFFSET_WAIT_MS / 1000);
	}
	return ASP_OK;
}

asp_status local_proc_feed(local_proc *pr, const uint8_t *data, size_t len, bool has_offset,
                           uint64_t offset, bool eof, asp_error *err)
{
	uint64_t id = pr->id;
	asp_status st = ASP_OK;
	pthread_mutex_lock(&pr->in_mu);
	if (pr->kind == LOCAL_PROC_WATCH || pr->kind == LOCAL_PROC_TREE_OUT) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_write: %llu is a %s, which takes no input",
		                   (unsigned long long)id,
		                   pr->kind == LOCAL_PROC_WATCH ? "watch" : "tree_read stream");
		goto out;
	}
	if (has_offset && (st = wait_turn(pr, offset, err)) != ASP_OK)
		goto out;
	if (pr->stdin_eof) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_write: the stdin of process %llu was closed by an earlier "
		                   "eof",
		                   (unsigned long long)id);
		goto out;
	}
	if (pr->in_fd < 0) {
		if (!tree_failure(pr, err))
			asp_error_set(err, ASP_E_IO_ERROR, NULL,
			              "proc_write: process %llu has exited",
			              (unsigned long long)id);
		st = err->code;
		goto out;
	}
	local_pipe_guard guard;
	local_pipe_guard_on(&guard);
	size_t off = 0;
	bool epipe = false;
	while (off < len) {
		ssize_t n = write(pr->in_fd, data + off, len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			/* A full pipe: the process reads slowly. Wait, unless it is gone. */
			if (proc_finished(pr)) {
				st = asp_error_set(
				    err, ASP_E_IO_ERROR, NULL,
				    "proc_write: process %llu ended before reading its "
				    "stdin (%zu of %zu bytes written)",
				    (unsigned long long)id, off, len);
				break;
			}
			struct pollfd pfd = {pr->in_fd, POLLOUT, 0};
			poll(&pfd, 1, STDIN_SLICE_MS);
			continue;
		}
		epipe = n < 0 && errno == EPIPE;
		st = asp_error_errno(err, n < 0 ? errno : EIO, NULL,
		                     "proc_write: process %llu no longer reads its stdin (%zu of "
		                     "%zu bytes written)",
		                     (unsigned long long)id, off, len);
		break;
	}
	local_pipe_guard_off(&guard, epipe);
	pr->in_off += off;
	if (st != ASP_OK && tree_failure(pr, err)) /* the unpacker stopped reading: why */
		st = err->code;
	if (eof && pr->tty) {
		/* A terminal has no end of input to close: its EOF character ends a reading
		 * program's input, as Ctrl-D typed by a person does; the master stays open
		 * for proc_resize and the output. */
		unsigned char veof = local_pty_veof(pr->in_fd);
		struct pollfd pfd = {pr->in_fd, POLLOUT, 0};
		while (st == ASP_OK && write(pr->in_fd, &veof, 1) != 1) {
			if (errno != EAGAIN && errno != EINTR) {
				st = asp_error_errno(
				    err, errno, NULL,
				    "proc_write: cannot type EOF into process %llu's "
				    "terminal",
				    (unsigned long long)id);
				break;
			}
			if (proc_finished(pr))
				break;
			poll(&pfd, 1, STDIN_SLICE_MS);
		}
		pr->stdin_eof = true;
	} else if (eof) { /* even after a failed write: the caller asked for the end */
		if (pr->kind == LOCAL_PROC_SOCK) /* a half-close: the pump still reads */
			shutdown(pr->in_fd, SHUT_WR);
		close(pr->in_fd);
		pr->in_fd = -1;
		pr->stdin_eof = true;
	}
out:
	pthread_cond_broadcast(&pr->in_cv);
	pthread_mutex_unlock(&pr->in_mu);
	return st;
}

asp_status asp_local_proc_write(void *self, const asp_proc_write_params *p,
                                asp_proc_write_result *r, asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_local_conn *c = self;
	if (p->data.len && !p->data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "proc_write: 'data' has no bytes");
	local_proc *pr = local_proc_find(c->l, p->proc, "proc_write", err);
	if (!pr)
		return err->code;
	asp_status st =
	    local_proc_feed(pr, p->data.data, p->data.len, p->has_offset, p->offset, p->eof, err);
	local_proc_unref(pr);
	return st;
}

/* ---- proc_signal ------------------------------------------------------------------ */

static const char *const allowed_signals[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"};

asp_status asp_local_proc_signal(void *self, const asp_proc_signal_params *p,
                                 asp_proc_signal_result *r, asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_local_conn *c = self;
	int sig = 0;
	for (size_t i = 0; p->signal && i < sizeof allowed_signals / sizeof *allowed_signals; i++)
		if (strcmp(p->signal, allowed_signals[i]) == 0)
			sig = local_signal_number(p->signal);
	if (!sig)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "proc_signal: signal '%.32s' is not one of TERM, KILL, INT, "
		                     "HUP, QUIT, USR1, USR2",
		                     p->signal ? p->signal : "");
	local_proc *pr = local_proc_find(c->l, p->proc, "proc_signal", err);
	if (!pr)
		return err->code;
	if (pr->kind != LOCAL_PROC_CHILD) {
		asp_status st = local_proc_close_signal(pr, p->signal, err);
		local_proc_unref(pr);
		return st;
	}
	pthread_mutex_lock(&pr->mu);
	/* KILL reaches what left the group too (docs/design.md,
	 * "Concurrency and lifetime"); the others go to the group, as sshd does.
	 * Finished: a no-op (docs/design.md, "Operations"). */
	if (!pr->reaped && sig == SIGKILL)
		local_child_signal_tree(&pr->child, sig);
	else if (!pr->reaped)
		local_child_signal_group(&pr->child, sig);
	pthread_mutex_unlock(&pr->mu);
	local_proc_unref(pr);
	return ASP_OK;
}

/* ---- proc_resize ------------------------------------------------------------------ */

asp_status asp_local_proc_resize(void *self, const asp_proc_resize_params *p,
                                 asp_proc_resize_result *r, asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_local_conn *c = self;
	asp_status st = asp_check_tty_size("proc_resize", p->rows, p->cols, err);
	if (st != ASP_OK)
		return st;
	local_proc *pr = local_proc_find(c->l, p->proc, "proc_resize", err);
	if (!pr)
		return err->code;
	pthread_mutex_lock(&pr->in_mu);
	if (!pr->tty) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_resize: process %llu has no terminal (spawn it with tty)",
		                   (unsigned long long)p->proc);
	} else if (pr->in_fd < 0 || proc_finished(pr)) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_resize: process %llu has finished: its terminal is gone",
		                   (unsigned long long)p->proc);
	} else {
		int e = local_pty_resize(pr->in_fd, p->rows, p->cols);
		if (e)
			st = asp_error_errno(err, e, NULL,
			                     "proc_resize: cannot resize process %llu's terminal",
			                     (unsigned long long)p->proc);
	}
	pthread_mutex_unlock(&pr->in_mu);
	local_proc_unref(pr);
	return st;
}

/* ---- proc_wait -------------------------------------------------------------------- */

asp_status asp_local_proc_wait(void *self, const asp_proc_wait_params *p, asp_proc_wait_result *r,
                               asp_arena *a, asp_error *err)
{
	asp_local_conn *c = self;
	local_proc *pr = local_proc_find(c->l, p->proc, "proc_wait", err);
	if (!pr)
		return err->code;
	struct timespec dl;
	if (p->timeout_ms)
		local_deadline(&dl,
		               p->timeout_ms < MAX_TIMEOUT_MS ? p->timeout_ms : MAX_TIMEOUT_MS);
	asp_status st = ASP_OK;
	pthread_mutex_lock(&pr->mu);
	while (!pr->finished) {
		if (!p->timeout_ms) {
			pthread_cond_wait(&pr->cv, &pr->mu);
		} else if (pthread_cond_timedwait(&pr->cv, &pr->mu, &dl) == ETIMEDOUT &&
		           !pr->finished) {
			st = asp_error_set(err, ASP_E_TIMEOUT, NULL,
			                   "proc_wait: process %llu is still running after %llu ms",
			                   (unsigned long long)p->proc,
			                   (unsigned long long)p->timeout_ms);
			break;
		}
	}
	if (st == ASP_OK) {
		r->exit_code = pr->exit_code;
		r->timed_out = pr->timed_out;
		r->signal =
		    pr->signal[0] ? asp_arena_strndup(a, pr->signal, strlen(pr->signal)) : NULL;
		if (pr->end_error)
			r->error = asp_arena_strndup(a, pr->end_error, strlen(pr->end_error));
		if (pr->end_code != ASP_OK)
			r->error_code = asp_strerror(pr->end_code);
		r->has_entries = r->has_bytes = pr->has_counts;
		r->entries = pr->entries;
		r->bytes = pr->bytes;
		if ((pr->signal[0] && !r->signal) || (pr->end_error && !r->error))
			st = local_oom("proc_wait", err);
	}
	pthread_mutex_unlock(&pr->mu);
	local_proc_unref(pr);
	return st;
}

/* ---- proc_list -------------------------------------------------------------------- */

asp_status asp_local_proc_list(void *self, const asp_proc_list_params *p, asp_proc_list_result *r,
                               asp_arena *a, asp_error *err)
{
	(void)p;
	asp_local *l = ((asp_local_conn *)self)->l;
	asp_status st = ASP_OK;
	pthread_mutex_lock(&l->mu);
	asp_proc_info *items = l->nprocs ? asp_arena_alloc(a, l->nprocs * sizeof *items) : NULL;
	if (l->nprocs && !items)
		st = local_oom("proc_list", err);
	for (size_t i = 0; st == ASP_OK && i < l->nprocs; i++) {
		local_proc *x = l->procs[i];
		asp_proc_info *e = &items[i];
		e->proc = x->id;
		e->tag = x->tag ? asp_arena_strndup(a, x->tag, strlen(x->tag)) : NULL;
		e->command = asp_arena_strndup(a, x->command, strlen(x->command));
		pthread_mutex_lock(&x->mu);
		e->running = !x->finished;
		e->has_exit_code = x->finished;
		e->exit_code = x->exit_code;
		if (x->finished && x->signal[0])
			e->signal = asp_arena_strndup(a, x->signal, strlen(x->signal));
		pthread_mutex_unlock(&x->mu);
		if ((x->tag && !e->tag) || !e->command)
			st = local_oom("proc_list", err);
	}
	r->procs.items = items;
	r->procs.count = st == ASP_OK ? l->nprocs : 0;
	pthread_mutex_unlock(&l->mu);
	return st;
}

/* ---- proc_attach ------------------------------------------------------------------ */

asp_status asp_local_proc_attach(void *self, const asp_proc_attach_params *p,
                                 asp_proc_attach_result *r, asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_local_conn *c = self;
	if (!c->has_sink)
		return asp_error_set(
		    err, ASP_E_UNSUPPORTED, NULL,
		    "proc_attach: this connection cannot carry notifications (plain "
		    "HTTP); attach over a WebSocket, stdio or SSH agent mode");
	local_proc *pr = local_proc_find(c->l, p->proc, "proc_attach", err);
	if (!pr)
		return err->code;
	uint64_t want[PROC_STREAM_COUNT] = {p->stdout_offset, p->stderr_offset};
	local_sub *s = local_sub_new(c);
	asp_buf b;
	asp_buf_init(&b);
	asp_status st = ASP_OK;
	pthread_mutex_lock(&pr->mu);
	for (int i = 0; i < PROC_STREAM_COUNT && st == ASP_OK; i++) {
		if (want[i] > pr->ring[i].total)
			st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                   "proc_attach: %s_offset %llu is past the %llu bytes the "
			                   "process has written there",
			                   i ? "stderr" : "stdout", (unsigned long long)want[i],
			                   (unsigned long long)pr->ring[i].total);
	}
	if (st == ASP_OK && !s)
		st = local_oom("proc_attach", err);
	if (st != ASP_OK) {
		pthread_mutex_unlock(&pr->mu);
		sub_drop(c, s);
		local_proc_unref(pr);
		return st;
	}
	for (int i = 0; i < PROC_STREAM_COUNT; i++) {
		uint64_t start = proc_ring_start(&pr->ring[i]);
		s->sent[i] = want[i] < start ? start : want[i];
		s->trunc[i] = want[i] < start;
	}
	/* One subscription per connection: a second attach replaces the first. */
	for (;;) {
		local_sub *x = pr->subs;
		while (x && (x->conn != c || x->removed))
			x = x->next;
		if (!x)
			break;
		if (x->sending) { /* let its frame finish; the pump may unlist it meanwhile */
			x->refs++;
			pthread_cond_wait(&pr->cv, &pr->mu);
			local_sub_unref_locked(x);
			continue;
		}
		x->removed = true;
	}
	bool listed = !pr->finished;
	if (listed) {
		s->gated = local_hold_add(c, pr, s);
		s->refs++;
		s->next = pr->subs;
		pr->subs = s;
	}
	/* The replay, before the response; a finished process's exit with it. */
	local_deliver_locked(pr, s, !listed, &b);
	local_sub_unref_locked(s);
	pthread_mutex_unlock(&pr->mu);
	asp_buf_free(&b);
	local_proc_unref(pr);
	return ASP_OK;
}

/* ---- shutdown --------------------------------------------------------------------- */

bool asp_local_shutdown(asp_local *l)
{
	return asp_local_shutdown_grace(l, 2000);
}

bool asp_local_shutdown_grace(asp_local *l, unsigned kill_after_ms)
{
	pthread_mutex_lock(&l->mu);
	uint64_t kill_ns = local_now_ns() + (uint64_t)kill_after_ms * NS_PER_MS;
	if (!l->shutting_down || kill_ns < l->end_kill_ns)
		l->end_kill_ns = kill_ns;
	l->shutting_down = true;
	for (size_t i = 0; i < l->nprocs; i++) {
		local_proc *p = l->procs[i];
		if (p->done_seq)
			continue;
		pthread_mutex_lock(&p->mu);
		if (!p->ending || kill_after_ms < p->end_grace_ms)
			p->end_grace_ms = kill_after_ms;
		p->ending = true; /* the pump sends TERM, then KILL that much later */
		pthread_mutex_unlock(&p->mu);
		local_pump_wake(p);
	}
	/* The KILL, the pumps' 0.5 s for escapees holding pipes, and a margin. */
	uint64_t ms = (uint64_t)kill_after_ms + SHUTDOWN_MARGIN_MS;
	struct timespec dl;
	local_deadline(&dl, ms);
	while ((l->pumps > 0 || l->starting > 0) &&
	       pthread_cond_timedwait(&l->cv, &l->mu, &dl) != ETIMEDOUT)
		;
	bool ok = l->pumps == 0 && l->starting == 0;
	pthread_mutex_unlock(&l->mu);
	return ok;
}
