/* Detached helper threads: see thread.h. */
#include "thread.h"

#include <pthread.h>

int local_thread_detached(void *(*fn)(void *), void *arg, size_t stack)
{
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, stack);
	int e = pthread_create(&t, &at, fn, arg);
	pthread_attr_destroy(&at);
	return e;
}
