/*
 * The process table of the local backend and the lifetimes of what it holds: processes
 * (found by id, counted when they finish, evicted past the retained finished ones) and
 * their subscribers.
 */
#include "local_proc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the table -------------------------------------------------------------------- */

static void proc_free(local_proc *p)
{
	while (p->subs) {
		local_sub *s = p->subs;
		p->subs = s->next;
		local_sub_unref_locked(s);
	}
	for (int i = 0; i < PROC_STREAM_COUNT; i++)
		proc_ring_free(&p->ring[i]);
	if (p->in_fd >= 0)
		close(p->in_fd);
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	local_child_close(&p->child);
	pthread_mutex_destroy(&p->in_mu);
	pthread_cond_destroy(&p->in_cv);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->tag);
	free(p->command);
	free(p->end_error);
	free(p);
}

void local_proc_unref(local_proc *p)
{
	if (p && atomic_fetch_sub(&p->refs, 1) == 1)
		proc_free(p);
}

/* Under l->mu: index of the process with that id (ids increase along the table). */
static size_t table_index(asp_local *l, uint64_t id, bool *found)
{
	size_t lo = 0, hi = l->nprocs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (l->procs[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < l->nprocs && l->procs[lo]->id == id;
	return lo;
}

local_proc *local_proc_find(asp_local *l, uint64_t id, const char *op, asp_error *err)
{
	pthread_mutex_lock(&l->mu);
	bool found;
	size_t i = table_index(l, id, &found);
	local_proc *p = found ? l->procs[i] : NULL;
	if (p)
		atomic_fetch_add(&p->refs, 1);
	pthread_mutex_unlock(&l->mu);
	if (!p)
		asp_error_set(err, ASP_E_NOT_FOUND, NULL,
		              "%s: no process %llu (never spawned here, or finished and no longer "
		              "retained: the last %d finished ones are); see proc_list",
		              op, (unsigned long long)id, PROC_KEEP_DONE);
	return p;
}

/* Under l->mu: removes index i from the table and returns its process. */
static local_proc *table_take(asp_local *l, size_t i)
{
	local_proc *p = l->procs[i];
	memmove(l->procs + i, l->procs + i + 1, (l->nprocs - i - 1) * sizeof *l->procs);
	l->nprocs--;
	return p;
}

void local_proc_unlist_locked(asp_local *l, uint64_t id)
{
	bool found;
	size_t i = table_index(l, id, &found);
	if (found)
		table_take(l, i);
}

local_proc *local_proc_count_done_locked(local_proc *p)
{
	asp_local *l = p->l;
	local_proc *evicted = NULL;
	p->done_seq = ++l->done_seq;
	l->done++;
	close(p->wake_fd); /* nobody wakes a finished pump: shutdown skips done_seq ones */
	p->wake_fd = -1;
	if (l->done > PROC_KEEP_DONE) {
		size_t oldest = l->nprocs;
		for (size_t i = 0; i < l->nprocs; i++) {
			local_proc *x = l->procs[i];
			if (x->done_seq &&
			    (oldest == l->nprocs || x->done_seq < l->procs[oldest]->done_seq))
				oldest = i;
		}
		if (oldest < l->nprocs) {
			evicted = table_take(l, oldest);
			l->done--;
		}
	}
	return evicted;
}

void local_proc_pump_gone(local_proc *p)
{
	asp_local *l = p->l;
	pthread_mutex_lock(&l->mu);
	l->pumps--;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

/* ---- subscribers ------------------------------------------------------------------ */

local_sub *local_sub_new(asp_local_conn *c)
{
	local_sub *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	local_conn_ref(c);
	s->conn = c;
	s->refs = 1;
	return s;
}

void local_sub_unref_locked(local_sub *s)
{
	if (--s->refs > 0)
		return;
	local_conn_unref(s->conn);
	free(s);
}
