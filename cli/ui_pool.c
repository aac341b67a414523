/*
 * asp ui's workers: every call on the client runs here, never on the socket thread. A
 * worker is started whenever a job finds none idle, up to UI_POOL_MAX (a download holds
 * one while the browser takes its bytes); idle ones stay.
 */
#include "ui.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define UI_POOL_MAX 32

typedef struct job {
	struct job *next;
	void (*fn)(void *);
	void *arg;
} job;

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv, idle_cv;
	job *head, *tail;
	unsigned threads, idle, busy;
	bool stopping;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pool.mu);
	for (;;) {
		while (!pool.head && !pool.stopping) {
			pool.idle++;
			pthread_cond_wait(&pool.cv, &pool.mu);
			pool.idle--;
		}
		job *j = pool.head;
		if (!j)
			break;
		pool.head = j->next;
		if (!pool.head)
			pool.tail = NULL;
		pool.busy++;
		pthread_mutex_unlock(&pool.mu);
		j->fn(j->arg);
		free(j);
		pthread_mutex_lock(&pool.mu);
		pool.busy--;
		pthread_cond_broadcast(&pool.idle_cv);
	}
	pool.threads--;
	pthread_cond_broadcast(&pool.idle_cv);
	pthread_mutex_unlock(&pool.mu);
	return NULL;
}

bool ui_pool_run(void (*fn)(void *), void *arg)
{
	job *j = malloc(sizeof *j);
	if (!j)
		return false;
	j->next = NULL;
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&pool.mu);
	if (pool.stopping) {
		pthread_mutex_unlock(&pool.mu);
		free(j);
		return false;
	}
	if (pool.tail)
		pool.tail->next = j;
	else
		pool.head = j;
	pool.tail = j;
	if (pool.idle == 0 && pool.threads < UI_POOL_MAX) {
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &at, worker, NULL) == 0)
			pool.threads++;
		pthread_attr_destroy(&at);
	}
	bool ok = pool.threads > 0;
	if (!ok) { /* no thread could start: take the job back */
		pool.head = pool.tail = NULL;
		free(j);
	}
	pthread_cond_signal(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
	return ok;
}

void ui_pool_stop(void)
{
	struct timespec end;
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += 30;
	pthread_mutex_lock(&pool.mu);
	pool.stopping = true;
	pthread_cond_broadcast(&pool.cv);
	/* the queue drains first: a page's cleanup is a job too */
	while ((pool.head || pool.threads) &&
	       pthread_cond_timedwait(&pool.idle_cv, &pool.mu, &end) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&pool.mu);
}
