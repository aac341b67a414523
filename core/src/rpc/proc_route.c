/* One connection's table of process followers. */
#include "proc_route.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct route {
	uint64_t proc;
	asp_proc_sub *sub; /* a reference */
} route;

struct asp_proc_routes {
	pthread_mutex_t mu;
	route *v;
	size_t n, cap;
	bool lost;
	char *why; /* the loss's message (malloc'd; NULL: out of memory) */
};

asp_proc_routes *asp_proc_routes_new(void)
{
	asp_proc_routes *t = calloc(1, sizeof *t);
	if (t)
		pthread_mutex_init(&t->mu, NULL);
	return t;
}

void asp_proc_routes_free(asp_proc_routes *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++) {
		asp_proc_sub_close(t->v[i].sub);
		asp_proc_sub_unref(t->v[i].sub);
	}
	free(t->v);
	free(t->why);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

/* Under mu: the index of proc's route, or n. */
static size_t find(asp_proc_routes *t, uint64_t proc)
{
	size_t i = 0;
	while (i < t->n && t->v[i].proc != proc)
		i++;
	return i;
}

/* Under mu: unlists index i and returns its sub (the reference passes to the caller). */
static asp_proc_sub *take(asp_proc_routes *t, size_t i)
{
	asp_proc_sub *s = t->v[i].sub;
	t->v[i] = t->v[--t->n];
	return s;
}

/* Unlists `sub` if it is still proc's follower. */
static void unlist(asp_proc_routes *t, uint64_t proc, asp_proc_sub *sub)
{
	pthread_mutex_lock(&t->mu);
	size_t i = find(t, proc);
	asp_proc_sub *s = i < t->n && t->v[i].sub == sub ? take(t, i) : NULL;
	pthread_mutex_unlock(&t->mu);
	asp_proc_sub_unref(s);
}

void asp_proc_routes_route(asp_proc_routes *t, asp_notice_id n, const void *params)
{
	uint64_t proc = n == ASP_NOTICE_OUTPUT     ? ((const asp_output_event *)params)->proc
	                : n == ASP_NOTICE_FS_EVENT ? ((const asp_fs_event_event *)params)->proc
	                                           : ((const asp_exit_event *)params)->proc;
	pthread_mutex_lock(&t->mu);
	size_t i = find(t, proc);
	asp_proc_sub *s = i < t->n ? asp_proc_sub_ref(t->v[i].sub) : NULL;
	pthread_mutex_unlock(&t->mu);
	if (!s)
		return; /* nobody follows it here (detached, or another client's): dropped */
	if (n == ASP_NOTICE_OUTPUT)
		asp_proc_sub_output(s, params);
	else if (n == ASP_NOTICE_FS_EVENT)
		asp_proc_sub_fs_event(s, params);
	else
		asp_proc_sub_exit(s, params);
	if (asp_proc_sub_done(s))
		unlist(t, proc, s);
	asp_proc_sub_unref(s);
}

void asp_proc_routes_lost(asp_proc_routes *t, const asp_error *why)
{
	pthread_mutex_lock(&t->mu);
	if (t->lost) {
		pthread_mutex_unlock(&t->mu);
		return;
	}
	t->lost = true;
	t->why = strdup(why->message);
	route *v = t->v;
	size_t n = t->n;
	t->v = NULL;
	t->n = t->cap = 0;
	pthread_mutex_unlock(&t->mu);
	for (size_t i = 0; i < n; i++) {
		asp_proc_sub_lost(v[i].sub, why);
		asp_proc_sub_unref(v[i].sub);
	}
	free(v);
}

void asp_proc_routes_remove(asp_proc_routes *t, uint64_t proc)
{
	pthread_mutex_lock(&t->mu);
	size_t i = find(t, proc);
	asp_proc_sub *s = i < t->n ? take(t, i) : NULL;
	pthread_mutex_unlock(&t->mu);
	if (s) {
		asp_proc_sub_close(s);
		asp_proc_sub_unref(s);
	}
}

/* Lists sub for proc. A follower that ended makes room; a live one is an error. */
static asp_status add(asp_proc_routes *t, uint64_t proc, asp_proc_sub *sub, asp_error *err)
{
	asp_proc_sub *old = NULL;
	asp_status st = ASP_OK;
	pthread_mutex_lock(&t->mu);
	size_t i = find(t, proc);
	if (t->lost) {
		asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "%s",
		              t->why ? t->why : "the connection was lost");
		st = ASP_E_TRANSPORT_ERROR;
	} else if (i < t->n && !asp_proc_sub_done(t->v[i].sub)) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "process %llu is followed on this connection already; detach "
		                   "first (asp_proc_detach)",
		                   (unsigned long long)proc);
	} else if (i < t->n) {
		old = t->v[i].sub;
		t->v[i].sub = asp_proc_sub_ref(sub);
	} else {
		if (t->n == t->cap) {
			size_t cap = t->cap ? t->cap * 2 : 8;
			route *v = realloc(t->v, cap * sizeof *v);
			if (v) {
				t->v = v;
				t->cap = cap;
			}
		}
		if (t->n < t->cap)
			t->v[t->n++] = (route){proc, asp_proc_sub_ref(sub)};
		else
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	pthread_mutex_unlock(&t->mu);
	asp_proc_sub_unref(old);
	return st;
}

asp_status asp_proc_routes_call(asp_proc_routes *t, asp_proc_call_fn call, void *ctx, asp_op_id op,
                                const void *params, void *result, asp_arena *a, asp_proc_sub *sub,
                                asp_error *err)
{
	uint64_t proc = 0;
	asp_status st;
	if (op == ASP_OP_PROC_ATTACH) {
		const asp_proc_attach_params *ap = params;
		proc = ap->proc;
		asp_proc_sub_expect(sub, ap->stdout_offset, ap->stderr_offset);
		st =
		    add(t, proc, sub, err); /* before the request: the replay precedes the answer */
		if (st) {
			asp_proc_sub_fail(sub);
			return st;
		}
	} else if (op == ASP_OP_SPAWN || op == ASP_OP_CONNECT || op == ASP_OP_WATCH ||
	           op == ASP_OP_TREE_READ) {
		asp_proc_sub_expect(sub, 0, 0);
	} else {
		asp_proc_sub_fail(sub);
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "only spawn, connect, watch, tree_read and proc_attach can be "
		                     "followed");
	}
	st = call(ctx, op, params, result, a, err);
	if (st == ASP_OK && op != ASP_OP_PROC_ATTACH) {
		proc = op == ASP_OP_SPAWN       ? ((const asp_spawn_result *)result)->proc
		       : op == ASP_OP_CONNECT   ? ((const asp_connect_result *)result)->proc
		       : op == ASP_OP_TREE_READ ? ((const asp_tree_read_result *)result)->proc
		                                : ((const asp_watch_result *)result)->proc;
		st = add(t, proc, sub, err);
	}
	if (st) {
		if (op == ASP_OP_PROC_ATTACH)
			unlist(t, proc, sub);
		asp_proc_sub_fail(sub);
		return st;
	}
	asp_proc_sub_start(sub, proc);
	if (asp_proc_sub_done(sub)) /* a finished process: replay and exit came already */
		unlist(t, proc, sub);
	return ASP_OK;
}
