/*
 * The tools handle's table of running commands: what bash's background runs and the
 * exec_command sessions share. One entry per spawned process: its unread output (both
 * streams, in the order they arrive), whether it exited and how, and the subscription
 * that feeds it. bash_output and write_stdin read from it; they differ only in how they
 * show what they read (bash.c, unified_exec.c).
 */
#include "shared.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Unread output beyond this is dropped from the front (the tail is what matters). */
#define UNREAD_MAX (8u << 20)
/* Finished exec_command sessions remembered (as unknown) before the oldest go. */
#define REPORTED_KEEP 1024u

static void tp_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	tools_proc *p = user;
	unsigned s = stream == ASP_STREAM_STDERR;
	pthread_mutex_lock(&p->t->mu);
	if (offset + len > p->offset[s]) {
		/* a replay may repeat what was seen: keep only what is new */
		size_t skip = offset < p->offset[s] ? (size_t)(p->offset[s] - offset) : 0;
		tb_add(&p->unread, (const char *)data + skip, len - skip);
		p->offset[s] = offset + len;
		if (p->unread.len > UNREAD_MAX) {
			size_t cut = p->unread.len - UNREAD_MAX / 2;
			memmove(p->unread.p, p->unread.p + cut, p->unread.len - cut + 1);
			p->unread.len -= cut;
			p->dropped += cut;
		}
		pthread_cond_broadcast(&p->t->cv);
	}
	pthread_mutex_unlock(&p->t->mu);
}

static void tp_exit(void *user, const asp_exit_event *ev)
{
	tools_proc *p = user;
	pthread_mutex_lock(&p->t->mu);
	p->done = true;
	p->following = false;
	p->exit_code = ev->exit_code;
	snprintf(p->signal, sizeof p->signal, "%s", ev->signal ? ev->signal : "");
	p->timed_out = ev->timed_out;
	pthread_cond_broadcast(&p->t->cv);
	pthread_mutex_unlock(&p->t->mu);
}

static void tp_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc, (void)err;
	tools_proc *p = user;
	pthread_mutex_lock(&p->t->mu);
	p->following = false;
	pthread_cond_broadcast(&p->t->cv);
	pthread_mutex_unlock(&p->t->mu);
}

static const asp_proc_callbacks tp_cb = {
    .on_output = tp_output, .on_exit = tp_exit, .on_lost = tp_lost};

static tools_proc *tp_find(asp_tools *t, uint64_t proc)
{
	for (tools_proc *p = t->procs; p; p = p->next)
		if (p->proc == proc)
			return p;
	return NULL;
}

static void tp_free(tools_proc *p)
{
	tb_free(&p->unread);
	free(p);
}

/*
 * Frees the oldest finished sessions whose exit was reported, past REPORTED_KEEP; t->mu
 * held. Their subscription ended with the exit, so no callback can reach them.
 */
static void tp_prune(asp_tools *t)
{
	size_t n = 0;
	for (tools_proc **pp = &t->procs; *pp;) {
		tools_proc *p = *pp;
		if (p->reported && !p->busy && ++n > REPORTED_KEEP) {
			*pp = p->next;
			tp_free(p);
		} else {
			pp = &p->next;
		}
	}
}

asp_status tools_proc_spawn(asp_tools *t, const asp_spawn_params *sp, bool session,
                            tools_proc **out, asp_error *err)
{
	tools_proc *p = calloc(1, sizeof *p);
	if (!p)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	p->t = t;
	p->tty = sp->tty != NULL;
	p->session = session;
	p->following = true;
	p->busy = 1;
	uint64_t proc;
	/*
	 * Not under t->mu: the reader thread that must deliver the spawn's answer may be
	 * waiting for that lock in another process's callback. Callbacks reach `p` through
	 * their user pointer, so linking it afterwards is safe.
	 */
	asp_status st = asp_spawn_start(t->c, sp, &tp_cb, p, &proc, err);
	if (st != ASP_OK) {
		free(p);
		return st;
	}
	pthread_mutex_lock(&t->mu);
	p->proc = proc;
	p->next = t->procs;
	t->procs = p;
	tp_prune(t);
	pthread_mutex_unlock(&t->mu);
	*out = p;
	return ASP_OK;
}

asp_status tools_proc_get(asp_tools *t, uint64_t proc, bool session, tools_proc **out,
                          asp_error *err)
{
	*out = NULL;
	pthread_mutex_lock(&t->mu);
	tools_proc *p = tp_find(t, proc);
	if (p && p->reported) {
		/* an exec_command session whose exit the model saw: gone, as in Codex */
		pthread_mutex_unlock(&t->mu);
		return asp_error_set(err, ASP_E_NOT_FOUND, NULL, "unknown process %llu",
		                     (unsigned long long)proc);
	}
	bool follow = !p || (!p->following && !p->done);
	if (!p) {
		/* started by another client (another `asp tool`, a reconnect): follow from the
		 * start */
		p = calloc(1, sizeof *p);
		if (!p) {
			pthread_mutex_unlock(&t->mu);
			return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		}
		p->t = t;
		p->proc = proc;
		p->session = session;
		p->next = t->procs;
		t->procs = p;
	}
	p->busy++;
	asp_proc_attach_params ap;
	asp_proc_attach_params_init(&ap);
	ap.proc = proc;
	ap.stdout_offset = p->offset[0];
	ap.stderr_offset = p->offset[1];
	pthread_mutex_unlock(&t->mu);
	if (follow) {
		/* attach replays what the responder holds from the offsets before it returns */
		asp_status st = asp_proc_attach_start(t->c, &ap, &tp_cb, p, err);
		if (st == ASP_OK) {
			pthread_mutex_lock(&t->mu);
			if (!p->done)
				p->following = true;
			pthread_mutex_unlock(&t->mu);
		} else if (st != ASP_E_INVALID_ARGUMENT) {
			/* invalid_argument: this client follows it already */
			tools_proc_put(p);
			return st;
		}
	}
	*out = p;
	return ASP_OK;
}

void tools_proc_put(tools_proc *p)
{
	pthread_mutex_lock(&p->t->mu);
	p->busy--;
	pthread_mutex_unlock(&p->t->mu);
}

/* Called by asp_tools_cancel_fire with the token's lock held: only the table's lock here. */
static void tp_wake(void *user)
{
	tools_proc_wait_state *w = user;
	pthread_mutex_lock(&w->t->mu);
	w->cancelled = true;
	pthread_cond_broadcast(&w->t->cv);
	pthread_mutex_unlock(&w->t->mu);
}

bool tools_proc_wait(tools_proc *p, uint64_t ms, asp_tools_cancel *k)
{
	asp_tools *t = p->t;
	tools_proc_wait_state w = {.t = t};
	if (!tools_cancel_arm(k, tp_wake, &w))
		return false;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(ms / 1000);
	until.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&t->mu);
	/* a lost subscription ends the wait too: nothing more will come on it */
	while (!p->done && p->following && !w.cancelled)
		if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&t->mu);
	/* once this returns no wake runs (it runs under the token's lock): `w` may go */
	tools_cancel_arm(k, NULL, NULL);
	return !w.cancelled;
}

void tools_proc_take(tools_proc *p, tbuf *out, tools_proc_state *st)
{
	asp_tools *t = p->t;
	pthread_mutex_lock(&t->mu);
	st->dropped = p->dropped;
	tb_add(out, p->unread.p ? p->unread.p : "", p->unread.len);
	p->unread.len = 0;
	p->dropped = 0;
	st->done = p->done;
	st->following = p->following;
	st->exit_code = p->exit_code;
	snprintf(st->signal, sizeof st->signal, "%s", p->signal);
	st->timed_out = p->timed_out;
	st->tty = p->tty;
	if (p->done && p->session) {
		/* the exit is about to be shown: the session is over */
		p->reported = true;
		tb_free(&p->unread);
	}
	pthread_mutex_unlock(&t->mu);
}

asp_status tools_proc_signal(asp_tools *t, uint64_t proc, const char *sig, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = sig;
	asp_proc_signal_result r;
	asp_status st = asp_proc_signal(t->c, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

asp_status tools_proc_write(asp_tools *t, uint64_t proc, const char *data, size_t len,
                            asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = proc;
	p.data.data = (const uint8_t *)data;
	p.data.len = len;
	asp_proc_write_result r;
	asp_status st = asp_proc_write(t->c, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

void tools_procs_free(asp_tools *t)
{
	pthread_mutex_lock(&t->mu);
	tools_proc *list = t->procs;
	t->procs = NULL;
	pthread_mutex_unlock(&t->mu);
	/* detach outside the lock: a callback in progress may be waiting for it */
	for (tools_proc *p = list; p; p = p->next)
		asp_proc_detach(t->c, p->proc);
	while (list) {
		tools_proc *n = list->next;
		tp_free(list);
		list = n;
	}
}
