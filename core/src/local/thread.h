/* Detached helper threads of the local backend (pumps, the reaper, the cgroup keeper). */
#ifndef ASP_LOCAL_THREAD_H
#define ASP_LOCAL_THREAD_H

#include <stddef.h>

/* Starts fn(arg) on a detached thread with a stack of `stack` bytes: pthread_create's 0 or
 * error. */
int local_thread_detached(void *(*fn)(void *), void *arg, size_t stack);

#endif
