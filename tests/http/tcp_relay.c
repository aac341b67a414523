/* Test helper: a counting, cuttable TCP relay (tcp_relay.h). */
#include "tcp_relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF       (256 * 1024)
#define FIRST_MAX 32
#define MAX_CONNS 512

typedef struct conn {
	tcp_relay *r;
	pthread_t th;
	/* under r->mu */
	int cfd, ufd; /* -1 once closed */
	char first[FIRST_MAX];
	size_t first_len;
	bool ended;
	uint64_t up, down;
} conn;

struct tcp_relay {
	int lfd, upstream_port;
	int stop_pipe[2];
	char url[64];
	pthread_t accept_th;
	pthread_mutex_t mu;
	pthread_cond_t ended_cv; /* a connection ended */
	conn *conns[MAX_CONNS];
	unsigned n;
};

static int connect_upstream(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static void *conn_main(void *arg)
{
	conn *c = arg;
	tcp_relay *r = c->r;
	uint8_t *buf = malloc(BUF);
	pthread_mutex_lock(&r->mu);
	int cfd = c->cfd, ufd = c->ufd;
	pthread_mutex_unlock(&r->mu);
	bool c_open = true, u_open = true; /* still reading from that side */
	while (buf && (c_open || u_open)) {
		struct pollfd p[2] = {{.fd = c_open ? cfd : -1, .events = POLLIN},
		                      {.fd = u_open ? ufd : -1, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		bool failed = false;
		for (int i = 0; i < 2 && !failed; i++) {
			if (!p[i].revents)
				continue;
			int from = i == 0 ? cfd : ufd, to = i == 0 ? ufd : cfd;
			ssize_t n = recv(from, buf, BUF, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) { /* EOF (or a cut): pass the half-close on */
				shutdown(to, SHUT_WR);
				if (i == 0)
					c_open = false;
				else
					u_open = false;
				failed = n < 0;
				continue;
			}
			pthread_mutex_lock(&r->mu);
			if (i == 0) {
				c->up += (uint64_t)n;
				size_t k = FIRST_MAX - c->first_len;
				k = (size_t)n < k ? (size_t)n : k;
				memcpy(c->first + c->first_len, buf, k);
				c->first_len += k;
			} else {
				c->down += (uint64_t)n;
			}
			pthread_mutex_unlock(&r->mu);
			failed = !write_all(to, buf, (size_t)n);
		}
		if (failed)
			break;
	}
	free(buf);
	pthread_mutex_lock(&r->mu);
	close(c->cfd);
	close(c->ufd);
	c->cfd = c->ufd = -1;
	c->ended = true;
	pthread_cond_broadcast(&r->ended_cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

static void *accept_main(void *arg)
{
	tcp_relay *r = arg;
	for (;;) {
		struct pollfd p[2] = {{.fd = r->lfd, .events = POLLIN},
		                      {.fd = r->stop_pipe[0], .events = POLLIN}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return NULL;
		if (p[1].revents)
			return NULL;
		if (!(p[0].revents & POLLIN))
			continue;
		int cfd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			continue;
		int ufd = connect_upstream(r->upstream_port);
		conn *c = calloc(1, sizeof *c);
		pthread_mutex_lock(&r->mu);
		bool room = r->n < MAX_CONNS;
		pthread_mutex_unlock(&r->mu);
		if (ufd < 0 || !c || !room) {
			close(cfd);
			if (ufd >= 0)
				close(ufd);
			free(c);
			continue;
		}
		int one = 1;
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		c->r = r;
		c->cfd = cfd;
		c->ufd = ufd;
		pthread_mutex_lock(&r->mu);
		r->conns[r->n++] = c;
		pthread_mutex_unlock(&r->mu);
		if (pthread_create(&c->th, NULL, conn_main, c) != 0) {
			fprintf(stderr, "tcp_relay: cannot start a thread\n");
			abort();
		}
	}
}

tcp_relay *tcp_relay_start(int upstream_port)
{
	tcp_relay *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->upstream_port = upstream_port;
	pthread_mutex_init(&r->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->ended_cv, &ca);
	pthread_condattr_destroy(&ca);
	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(r->lfd, 64) < 0 || getsockname(r->lfd, (struct sockaddr *)&a, &al) < 0 ||
	    pipe(r->stop_pipe) < 0) {
		perror("tcp_relay");
		if (r->lfd >= 0)
			close(r->lfd);
		free(r);
		return NULL;
	}
	snprintf(r->url, sizeof r->url, "http://127.0.0.1:%d", ntohs(a.sin_port));
	if (pthread_create(&r->accept_th, NULL, accept_main, r) != 0) {
		close(r->lfd);
		close(r->stop_pipe[0]);
		close(r->stop_pipe[1]);
		free(r);
		return NULL;
	}
	return r;
}

const char *tcp_relay_url(const tcp_relay *r)
{
	return r->url;
}

static bool starts(const conn *c, const char *prefix)
{
	size_t n = strlen(prefix);
	return c->first_len >= n && memcmp(c->first, prefix, n) == 0;
}

relay_count tcp_relay_count(tcp_relay *r, const char *prefix)
{
	relay_count k = {0};
	pthread_mutex_lock(&r->mu);
	for (unsigned i = 0; i < r->n; i++) {
		conn *c = r->conns[i];
		if (!starts(c, prefix))
			continue;
		k.conns++;
		k.open += !c->ended;
		k.up += c->up;
		k.down += c->down;
	}
	pthread_mutex_unlock(&r->mu);
	return k;
}

static unsigned open_locked(tcp_relay *r, const char *prefix)
{
	unsigned n = 0;
	for (unsigned i = 0; i < r->n; i++)
		n += !r->conns[i]->ended && starts(r->conns[i], prefix);
	return n;
}

bool tcp_relay_wait_open(tcp_relay *r, const char *prefix, unsigned n, int ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&r->mu);
	bool ok;
	while (!(ok = open_locked(r, prefix) <= n))
		if (pthread_cond_timedwait(&r->ended_cv, &r->mu, &dl) != 0) {
			ok = open_locked(r, prefix) <= n;
			break;
		}
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static unsigned cut_locked(tcp_relay *r, const char *prefix)
{
	unsigned n = 0;
	for (unsigned i = 0; i < r->n; i++) {
		conn *c = r->conns[i];
		if (c->ended || !starts(c, prefix))
			continue;
		/* shutdown, not close: the relay thread owns the numbers until it ends */
		shutdown(c->cfd, SHUT_RDWR);
		shutdown(c->ufd, SHUT_RDWR);
		n++;
	}
	return n;
}

unsigned tcp_relay_cut(tcp_relay *r, const char *prefix)
{
	pthread_mutex_lock(&r->mu);
	unsigned n = cut_locked(r, prefix);
	pthread_mutex_unlock(&r->mu);
	return n;
}

void tcp_relay_stop(tcp_relay *r)
{
	if (!r)
		return;
	if (write(r->stop_pipe[1], "x", 1) != 1)
		perror("tcp_relay: stop");
	pthread_join(r->accept_th, NULL);
	pthread_mutex_lock(&r->mu);
	cut_locked(r, "");
	pthread_mutex_unlock(&r->mu);
	for (unsigned i = 0; i < r->n; i++) {
		pthread_join(r->conns[i]->th, NULL);
		free(r->conns[i]);
	}
	close(r->lfd);
	close(r->stop_pipe[0]);
	close(r->stop_pipe[1]);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->ended_cv);
	free(r);
}
