/*
 * A follower of one spawned process: the user's callbacks behind the checks that make
 * asp/proc.h's promises hold whatever the transport does — nothing before the call
 * succeeded, nothing after the end or a detach, one callback at a time, each stream's
 * bytes exactly once and in order.
 */
#include "asp/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* What an attach may replay before its answer is at most 1 MiB a stream; beyond this
 * (a misbehaving responder) chunks are dropped rather than kept. */
#define KEEP_MAX (8u * 1024u * 1024u)

enum { PENDING, LIVE, DONE };
enum { EV_OUTPUT, EV_EXIT, EV_LOST };

/* An event that came before the call's answer. */
typedef struct kept {
	struct kept *next;
	int kind;
	asp_stream stream;
	uint64_t offset;
	bool truncated;
	bool eof;
	asp_exit_event exit;
	char signal[32];
	char error[256]; /* exit's error */
	asp_error err;
	size_t len;
	uint8_t data[];
} kept;

struct asp_proc_sub {
	atomic_uint refs;
	asp_proc_callbacks cb;
	void *user;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* a callback returned */
	int state;
	uint64_t proc;
	uint64_t next[2]; /* next offset expected per stream */
	bool eof_done[2]; /* on_eof called */
	bool in_cb;       /* a callback runs, on cb_thread */
	pthread_t cb_thread;
	kept *head, **tail;
	size_t kept_bytes;
};

asp_proc_sub *asp_proc_sub_new(const asp_proc_callbacks *cb, void *user)
{
	asp_proc_sub *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	atomic_init(&s->refs, 1);
	if (cb)
		s->cb = *cb;
	s->user = user;
	s->state = PENDING;
	s->tail = &s->head;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	return s;
}

asp_proc_sub *asp_proc_sub_ref(asp_proc_sub *s)
{
	atomic_fetch_add(&s->refs, 1);
	return s;
}

static void drop_kept(asp_proc_sub *s)
{
	kept *k = s->head;
	while (k) {
		kept *n = k->next;
		free(k);
		k = n;
	}
	s->head = NULL;
	s->tail = &s->head;
	s->kept_bytes = 0;
}

void asp_proc_sub_unref(asp_proc_sub *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	drop_kept(s);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

void asp_proc_sub_expect(asp_proc_sub *s, uint64_t stdout_offset, uint64_t stderr_offset)
{
	pthread_mutex_lock(&s->mu);
	s->next[0] = stdout_offset;
	s->next[1] = stderr_offset;
	pthread_mutex_unlock(&s->mu);
}

/* ---- running callbacks one at a time ---------------------------------------------- */

/* Under mu: waits for another thread's callback; true when this one may call back. */
static bool enter(asp_proc_sub *s)
{
	while (s->in_cb && !pthread_equal(s->cb_thread, pthread_self()))
		pthread_cond_wait(&s->cv, &s->mu);
	if (s->state != LIVE)
		return false;
	s->in_cb = true;
	s->cb_thread = pthread_self();
	return true;
}

static void leave(asp_proc_sub *s)
{
	s->in_cb = false;
	pthread_cond_broadcast(&s->cv);
}

/*
 * Under mu, entered: calls on_output for the part of the chunk not delivered yet
 * (mu released meanwhile). A chunk after a gap is delivered as it is: a replay that
 * starts later than asked (truncated_before) looks the same.
 */
static void emit_output(asp_proc_sub *s, asp_stream st, uint64_t off, const uint8_t *data,
                        size_t len)
{
	uint64_t *next = &s->next[st];
	if (len == 0 || off + len <= *next)
		return; /* nothing new */
	if (off < *next) {
		size_t skip = (size_t)(*next - off);
		data += skip;
		len -= skip;
		off = *next;
	}
	*next = off + len;
	if (!s->cb.on_output)
		return;
	uint64_t proc = s->proc;
	pthread_mutex_unlock(&s->mu);
	s->cb.on_output(s->user, proc, st, off, data, len);
	pthread_mutex_lock(&s->mu);
}

/* Under mu, entered: a stream's end before the exit, once. */
static void emit_eof(asp_proc_sub *s, asp_stream st)
{
	if (s->eof_done[st])
		return;
	s->eof_done[st] = true;
	if (!s->cb.on_eof)
		return;
	uint64_t proc = s->proc;
	pthread_mutex_unlock(&s->mu);
	s->cb.on_eof(s->user, proc, st);
	pthread_mutex_lock(&s->mu);
}

/* Under mu, entered: the last callback. */
static void emit_end(asp_proc_sub *s, const asp_exit_event *ev, const asp_error *why)
{
	s->state = DONE;
	uint64_t proc = s->proc;
	pthread_mutex_unlock(&s->mu);
	if (ev && s->cb.on_exit)
		s->cb.on_exit(s->user, ev);
	else if (!ev && s->cb.on_lost)
		s->cb.on_lost(s->user, proc, why);
	pthread_mutex_lock(&s->mu);
}

/* Under mu, PENDING: keeps an event for start. */
static void keep(asp_proc_sub *s, int kind, const asp_output_event *o, const asp_exit_event *x,
                 const asp_error *why)
{
	size_t len = o ? o->data.len : 0;
	if (o && s->kept_bytes + len > KEEP_MAX)
		return;
	kept *k = calloc(1, sizeof *k + len);
	if (!k)
		return;
	k->kind = kind;
	if (o) {
		k->stream = o->stream && strcmp(o->stream, "stderr") == 0 ? ASP_STREAM_STDERR
		                                                          : ASP_STREAM_STDOUT;
		k->offset = o->offset;
		k->truncated = o->has_truncated_before;
		k->eof = o->eof;
		k->len = len;
		if (len)
			memcpy(k->data, o->data.data, len);
		s->kept_bytes += len;
	}
	if (x) {
		k->exit = *x;
		if (x->signal) {
			strncpy(k->signal, x->signal, sizeof k->signal - 1);
			k->exit.signal = k->signal;
		}
		if (x->error) {
			strncpy(k->error, x->error, sizeof k->error - 1);
			k->exit.error = k->error;
		}
	}
	if (why)
		k->err = *why;
	*s->tail = k;
	s->tail = &k->next;
}

/* ---- deliveries ------------------------------------------------------------------- */

static int stream_of(const char *name)
{
	if (name && strcmp(name, "stdout") == 0)
		return ASP_STREAM_STDOUT;
	if (name && strcmp(name, "stderr") == 0)
		return ASP_STREAM_STDERR;
	return -1;
}

void asp_proc_sub_output(asp_proc_sub *s, const asp_output_event *ev)
{
	int st = stream_of(ev->stream);
	if (st < 0 || (ev->data.len && !ev->data.data))
		return; /* a stream this client does not know: not ours to guess */
	pthread_mutex_lock(&s->mu);
	if (s->state == PENDING) {
		keep(s, EV_OUTPUT, ev, NULL, NULL);
	} else if (enter(s)) {
		emit_output(s, (asp_stream)st, ev->offset, ev->data.data, ev->data.len);
		if (ev->eof)
			emit_eof(s, (asp_stream)st);
		leave(s);
	}
	pthread_mutex_unlock(&s->mu);
}

void asp_proc_sub_exit(asp_proc_sub *s, const asp_exit_event *ev)
{
	pthread_mutex_lock(&s->mu);
	if (s->state == PENDING) {
		keep(s, EV_EXIT, NULL, ev, NULL);
	} else if (enter(s)) {
		emit_end(s, ev, NULL);
		leave(s);
	}
	pthread_mutex_unlock(&s->mu);
}

void asp_proc_sub_fs_event(asp_proc_sub *s, const asp_fs_event_event *ev)
{
	pthread_mutex_lock(&s->mu);
	if (s->state == LIVE && s->cb.on_fs_event && enter(s)) {
		pthread_mutex_unlock(&s->mu);
		s->cb.on_fs_event(s->user, ev);
		pthread_mutex_lock(&s->mu);
		leave(s);
	}
	pthread_mutex_unlock(&s->mu);
}

void asp_proc_sub_lost(asp_proc_sub *s, const asp_error *why)
{
	pthread_mutex_lock(&s->mu);
	if (s->state == PENDING) {
		keep(s, EV_LOST, NULL, NULL, why); /* reported after the replay, if the call wins */
	} else if (enter(s)) {
		emit_end(s, NULL, why);
		leave(s);
	}
	pthread_mutex_unlock(&s->mu);
}

void asp_proc_sub_start(asp_proc_sub *s, uint64_t proc)
{
	pthread_mutex_lock(&s->mu);
	if (s->state != PENDING) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	s->proc = proc;
	s->state = LIVE;
	kept *list = s->head;
	s->head = NULL;
	s->tail = &s->head;
	s->kept_bytes = 0;
	if (!enter(s)) {
		pthread_mutex_unlock(&s->mu);
		while (list) {
			kept *n = list->next;
			free(list);
			list = n;
		}
		return;
	}
	/*
	 * In arrival order, but a chunk past a gap waits for a second pass: on a connection
	 * that followed this process before, live chunks sent then may precede the replay.
	 * The second pass drops what the replay covered. The end comes last.
	 */
	kept *end = NULL, *later = NULL, **later_tail = &later;
	for (int pass = 0; pass < 2; pass++) {
		kept *k = pass == 0 ? list : later;
		if (pass == 1)
			later = NULL;
		while (k) {
			kept *n = k->next;
			if (k->kind != EV_OUTPUT) {
				if (!end)
					end = k;
				else
					free(k);
			} else if (pass == 0 && !k->truncated && k->offset > s->next[k->stream]) {
				k->next = NULL;
				*later_tail = k;
				later_tail = &k->next;
			} else {
				if (s->state == LIVE)
					emit_output(s, k->stream, k->offset, k->data, k->len);
				if (s->state == LIVE && k->eof)
					emit_eof(s, k->stream);
				free(k);
			}
			k = n;
		}
	}
	if (end && s->state == LIVE)
		emit_end(s, end->kind == EV_EXIT ? &end->exit : NULL, &end->err);
	free(end);
	leave(s);
	pthread_mutex_unlock(&s->mu);
}

void asp_proc_sub_close(asp_proc_sub *s)
{
	pthread_mutex_lock(&s->mu);
	s->state = DONE;
	drop_kept(s);
	while (s->in_cb && !pthread_equal(s->cb_thread, pthread_self()))
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

void asp_proc_sub_fail(asp_proc_sub *s)
{
	asp_proc_sub_close(s);
}

bool asp_proc_sub_done(asp_proc_sub *s)
{
	pthread_mutex_lock(&s->mu);
	bool done = s->state == DONE;
	pthread_mutex_unlock(&s->mu);
	return done;
}
