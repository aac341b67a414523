/*
 * Holding a request's notifications until its response is out: a subscriber created
 * while a request of its connection is served is gated, and the gates open after the
 * response has been sent (local_proc.h, "Ordering").
 */
#include "local_proc.h"

#include <stdlib.h>

struct local_hold_entry {
	struct local_hold_entry *next;
	local_proc *p;
	local_sub *s;
};

/* The request this thread is serving; one at a time per thread. */
static _Thread_local local_hold *tls_hold;
/* asp_local_conn_hold's, for callers that cannot keep one on their stack. */
static _Thread_local local_hold tls_direct;

bool local_hold_add(asp_local_conn *c, local_proc *p, local_sub *s)
{
	local_hold *h = tls_hold;
	if (!h || h->c != c)
		return false;
	local_hold_entry *e = malloc(sizeof *e);
	if (!e)
		return false;
	atomic_fetch_add(&p->refs, 1);
	s->refs++; /* under p->mu: the caller holds it */
	e->p = p;
	e->s = s;
	e->next = h->list;
	h->list = e;
	return true;
}

void local_hold_begin(local_hold *h, asp_local_conn *c)
{
	h->c = c;
	h->list = NULL;
	tls_hold = h;
}

/* Opens the gates this request closed, and lets the pumps go on. */
void local_hold_end(local_hold *h)
{
	tls_hold = NULL;
	local_hold_entry *e = h->list;
	h->list = NULL;
	while (e) {
		local_hold_entry *next = e->next;
		pthread_mutex_lock(&e->p->mu);
		e->s->gated = false;
		pthread_cond_broadcast(&e->p->cv);
		local_sub_unref_locked(e->s);
		pthread_mutex_unlock(&e->p->mu);
		local_proc_unref(e->p);
		free(e);
		e = next;
	}
}

void asp_local_conn_hold(asp_local_conn *c)
{
	local_hold_begin(&tls_direct, c);
}

void asp_local_conn_release(asp_local_conn *c)
{
	if (tls_hold == &tls_direct && tls_direct.c == c)
		local_hold_end(&tls_direct);
}
