/*
 * Handles of the process table that are not children: connect's connections (connect.c)
 * and watch's watchers (watch.c). Made, listed and started here; each kind's pump ends
 * them with local_pump_end, and proc_signal closes them (local_proc_close_signal).
 */
#include "local_proc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static char *handle_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

local_proc *local_proc_alloc(asp_local *l, local_proc_kind kind, size_t ring_limit, const char *tag,
                             const char *command, const char *op, asp_error *err)
{
	local_proc *pr = calloc(1, sizeof *pr);
	if (!pr) {
		local_oom(op, err);
		return NULL;
	}
	pr->l = l;
	pr->kind = kind;
	pr->in_fd = pr->wake_fd = -1;
	pr->child.pid = -1;
	pr->child.pidfd = pr->child.in_fd = pr->child.out_fd = pr->child.err_fd = -1;
	pr->child.out_w = pr->child.err_w = -1;
	atomic_init(&pr->refs, 1);
	pthread_mutex_init(&pr->mu, NULL);
	pthread_mutex_init(&pr->in_mu, NULL);
	local_cond_init(&pr->in_cv);
	local_cond_init(&pr->cv);
	for (int i = 0; i < PROC_STREAM_COUNT; i++)
		proc_ring_init(&pr->ring[i], ring_limit);
	pr->tag = handle_strdup(tag);
	pr->command = handle_strdup(command);
	pr->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if ((tag && !pr->tag) || !pr->command) {
		local_oom(op, err);
		local_proc_unref(pr);
		return NULL;
	}
	if (pr->wake_fd < 0) {
		asp_error_errno(err, errno, NULL, "%s: cannot create an eventfd", op);
		local_proc_unref(pr);
		return NULL;
	}
	return pr;
}

void local_proc_discard(local_proc *p)
{
	local_proc_unref(p); /* the only reference: frees it */
}

asp_status local_proc_list_start(local_proc *pr, local_sub *sub, void *(*pump)(void *),
                                 const char *op, asp_error *err)
{
	asp_local *l = pr->l;
	asp_status st = ASP_OK;
	pthread_mutex_lock(&l->mu);
	if (l->shutting_down) {
		st = asp_error_set(err, ASP_E_IO_ERROR, NULL, "%s: the responder is shutting down",
		                   op);
	} else if (l->nprocs == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		local_proc **np = realloc(l->procs, cap * sizeof *np);
		if (np) {
			l->procs = np;
			l->cap = cap;
		} else {
			st = local_oom(op, err);
		}
	}
	if (st != ASP_OK) {
		pthread_mutex_unlock(&l->mu);
		if (sub)
			local_sub_unref_locked(sub); /* never listed: no lock to hold */
		local_proc_unref(pr);
		return st;
	}
	pr->id = ++l->last_id;
	l->procs[l->nprocs++] = pr;     /* the table's reference */
	atomic_fetch_add(&pr->refs, 1); /* the pump's */
	l->pumps++;
	pthread_mutex_unlock(&l->mu);
	if (sub) {
		pthread_mutex_lock(&pr->mu);
		sub->gated = local_hold_add(sub->conn, pr, sub);
		sub->next = pr->subs;
		pr->subs = sub;
		pthread_mutex_unlock(&pr->mu);
	}
	int e = local_pump_start_fn(pr, pump);
	if (e == 0)
		return ASP_OK;
	st = asp_error_errno(err, e, NULL, "%s: cannot start a thread for it", op);
	pthread_mutex_lock(&l->mu);
	local_proc_unlist_locked(l, pr->id);
	l->pumps--;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_mutex_lock(&pr->mu);
	pr->finished = true; /* a gate's hold may still name it: it ends at once */
	pr->exit_code = -1;
	strcpy(pr->signal, "KILL");
	pthread_cond_broadcast(&pr->cv);
	pthread_mutex_unlock(&pr->mu);
	atomic_fetch_sub(&pr->refs, 1); /* the pump's */
	local_proc_unref(pr);           /* the table's */
	return st;
}

asp_status local_proc_close_signal(local_proc *p, const char *sig, asp_error *err)
{
	if (strcmp(sig, "KILL") != 0 && strcmp(sig, "TERM") != 0)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "proc_signal: %llu is a %s, which KILL or TERM closes; %s "
		                     "means nothing to it",
		                     (unsigned long long)p->id,
		                     p->kind == LOCAL_PROC_SOCK    ? "connection"
		                     : p->kind == LOCAL_PROC_WATCH ? "watch"
		                                                   : "tree stream",
		                     sig);
	pthread_mutex_lock(&p->mu);
	if (!p->finished && !p->close_sig[0]) { /* finished: a no-op, as for a process */
		strcpy(p->close_sig, sig);
		local_pump_wake(p); /* wake_fd lives until finished, which p->mu orders */
	}
	pthread_mutex_unlock(&p->mu);
	return ASP_OK;
}
