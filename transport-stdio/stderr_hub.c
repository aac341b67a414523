/*
 * The shared stderr of compact stdio connections (stderr_hub.h). The lock orders before
 * any sink's own lock: sinks run under it, and the hub never waits for a connection.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct ucred */
#endif
#include "stderr_hub.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A write bigger than this is cut; a connection keeps only its last 4 KiB anyway. */
#define DGRAM_MAX (64 * 1024)
/* Receive buffer asked for, so that children rarely wait on a busy hub (best effort). */
#define HUB_BUFFER (1024 * 1024)
/* A sender not registered itself: how many parents up to look for one that is. */
#define PARENT_HOPS 8

struct entry {
	pid_t pid;
	stderr_hub_sink sink;
	void *ctx;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int rd = -1, wr = -1;  /* under mu, set once */
static struct entry *entries; /* under mu */
static size_t count, cap;

static struct entry *find_locked(pid_t pid)
{
	for (size_t i = 0; i < count; i++)
		if (entries[i].pid == pid)
			return &entries[i];
	return NULL;
}

/* The parent of `pid` from /proc (0 when it is gone). */
static pid_t parent_of(pid_t pid)
{
	char path[64], text[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, text, sizeof text - 1);
	close(fd);
	if (n <= 0)
		return 0;
	text[n] = '\0';
	const char *p = strrchr(text, ')'); /* after the command name, which may hold anything */
	int ppid = 0;
	return p && sscanf(p + 1, " %*c %d", &ppid) == 1 ? (pid_t)ppid : 0;
}

/*
 * Under mu: whose stderr a datagram from `pid` is. A child's own descendants (a shell's
 * commands) write to the same socket; they are found through their parents while those
 * are alive, and their bytes are dropped otherwise.
 */
static struct entry *owner_locked(pid_t pid)
{
	for (int hop = 0; pid > 1 && hop <= PARENT_HOPS; hop++) {
		struct entry *e = find_locked(pid);
		if (e)
			return e;
		pid = parent_of(pid);
	}
	return NULL;
}

static void drain_locked(void)
{
	static char buf[DGRAM_MAX];
	for (;;) {
		union {
			struct cmsghdr h;
			char space[CMSG_SPACE(sizeof(struct ucred))];
		} ctl;
		struct iovec iov = {buf, sizeof buf};
		struct msghdr m = {.msg_iov = &iov,
		                   .msg_iovlen = 1,
		                   .msg_control = &ctl,
		                   .msg_controllen = sizeof ctl};
		ssize_t n = recvmsg(rd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return;
		pid_t pid = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
				struct ucred u;
				memcpy(&u, CMSG_DATA(c), sizeof u);
				pid = u.pid;
			}
		struct entry *e = n > 0 && pid > 0 ? owner_locked(pid) : NULL;
		if (e)
			e->sink(e->ctx, buf, (size_t)n);
	}
}

static void *hub_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p = {rd, POLLIN, 0};
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return NULL;
		pthread_mutex_lock(&mu);
		drain_locked();
		pthread_mutex_unlock(&mu);
	}
}

/* Under mu: the socket and its thread, once. */
static int start_locked(void)
{
	if (wr >= 0)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	int one = 1, size = HUB_BUFFER;
	if (setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0) {
		int e = errno;
		close(sv[0]);
		close(sv[1]);
		errno = e;
		return -1;
	}
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	/* the thread takes no signals: they belong to the application's threads */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	rd = sv[0];
	int e = pthread_create(&t, &at, hub_main, NULL);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		close(sv[0]);
		close(sv[1]);
		rd = -1;
		errno = e;
		return -1;
	}
	wr = sv[1];
	return 0;
}

int stderr_hub_lock(void)
{
	pthread_mutex_lock(&mu);
	if (start_locked() < 0) {
		int e = errno;
		pthread_mutex_unlock(&mu);
		errno = e;
		return -1;
	}
	return wr;
}

void stderr_hub_unlock(void)
{
	pthread_mutex_unlock(&mu);
}

void stderr_hub_add_locked(pid_t pid, stderr_hub_sink sink, void *ctx)
{
	if (count == cap) {
		size_t ncap = cap ? cap * 2 : 64;
		struct entry *n = realloc(entries, ncap * sizeof *n);
		if (!n)
			return; /* out of memory: this child's stderr is dropped */
		entries = n;
		cap = ncap;
	}
	entries[count++] = (struct entry){pid, sink, ctx};
}

void stderr_hub_remove(pid_t pid)
{
	pthread_mutex_lock(&mu);
	struct entry *e = find_locked(pid);
	if (e)
		*e = entries[--count];
	pthread_mutex_unlock(&mu);
}

void stderr_hub_drain(void)
{
	pthread_mutex_lock(&mu);
	if (rd >= 0)
		drain_locked();
	pthread_mutex_unlock(&mu);
}
