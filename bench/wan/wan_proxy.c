/*
 * A delay line for benchmarks: every byte is held for a fixed one-way delay before it is
 * passed on, in both directions, in order, so a loopback connection behaves like a link
 * with a round trip of twice the delay (latency only: no bandwidth limit, no loss).
 *
 *   wan_proxy DELAY_MS tcp HOST:PORT PORT_FILE
 *       listens on 127.0.0.1 (a free port, written to PORT_FILE once listening) and
 *       relays each connection to HOST:PORT through the delay
 *   wan_proxy DELAY_MS pipe PROGRAM ARG...
 *       runs PROGRAM with its stdin and stdout behind the delay (its stderr is ours), for
 *       the stdio transport; exits with its status once its stdout ended
 *
 * With WAN_PROXY_TRACE=FILE set, each read is logged there ("ms conn >|< bytes", ms on
 * CLOCK_MONOTONIC, > toward the server or the program): which messages wait for which.
 *
 * One thread, epoll, and a timerfd armed for the earliest byte due: the delay holds to
 * within tens of microseconds, which a Python relay's timer jitter would not. C so that
 * what the benchmark measures is the transport, not the proxy.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READ_MAX    (256u * 1024u)
#define QUEUE_LIMIT (32u << 20) /* bytes held per direction before reading stops */

static uint64_t delay_ns;
static int ep, tfd;
static FILE *trace; /* $WAN_PROXY_TRACE: "ms conn direction bytes" per read */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Bytes read at one moment, due at `due`; len 0 is the end of the stream. */
typedef struct chunk {
	struct chunk *next;
	uint64_t due;
	size_t len, off;
	uint8_t data[];
} chunk;

struct conn;

/* One direction: bytes read from `in` go out on `out` `delay_ns` later. */
typedef struct dir {
	struct conn *conn;
	int in, out;
	bool out_is_socket; /* the end: shutdown(SHUT_WR), else close */
	chunk *head, *tail;
	size_t queued;
	bool in_done;  /* read EOF (the end chunk is queued) */
	bool out_done; /* the end was passed on */
	bool blocked;  /* out would block: waiting for EPOLLOUT */
} dir;

/* One descriptor in epoll: what it is read for and written for. */
typedef struct endp {
	int fd;
	dir *rd, *wr;
	uint32_t events;
} endp;

typedef struct conn {
	dir d[2];
	endp e[4];
	int ne;
	bool dead;
	struct conn *next;
} conn;

static conn *conns;
static pid_t child = -1; /* pipe mode */
static int child_status;

static void endp_update(endp *e)
{
	uint32_t ev = 0;
	if (e->rd && !e->rd->in_done && e->rd->queued < QUEUE_LIMIT)
		ev |= EPOLLIN;
	if (e->wr && e->wr->blocked)
		ev |= EPOLLOUT;
	if (ev == e->events)
		return;
	struct epoll_event x = {.events = ev, .data.ptr = e};
	if (e->events == 0)
		epoll_ctl(ep, EPOLL_CTL_ADD, e->fd, &x);
	else if (ev == 0)
		epoll_ctl(ep, EPOLL_CTL_DEL, e->fd, NULL);
	else
		epoll_ctl(ep, EPOLL_CTL_MOD, e->fd, &x);
	e->events = ev;
}

static void conn_update(conn *c)
{
	for (int i = 0; i < c->ne; i++)
		endp_update(&c->e[i]);
}

static void conn_kill(conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	for (int i = 0; i < c->ne; i++) {
		if (c->e[i].events)
			epoll_ctl(ep, EPOLL_CTL_DEL, c->e[i].fd, NULL);
		c->e[i].events = 0;
	}
	int closed[4], nc = 0;
	for (int i = 0; i < c->ne; i++) {
		bool seen = false;
		for (int j = 0; j < nc; j++)
			seen = seen || closed[j] == c->e[i].fd;
		if (!seen && c->e[i].fd > 2)
			close(c->e[i].fd);
		if (!seen)
			closed[nc++] = c->e[i].fd;
	}
	for (int k = 0; k < 2; k++) {
		chunk *q = c->d[k].head;
		while (q) {
			chunk *n = q->next;
			free(q);
			q = n;
		}
		c->d[k].head = c->d[k].tail = NULL;
	}
}

/* Reads what `d->in` has and queues it, due one delay from now. */
static void dir_read(dir *d)
{
	for (;;) {
		if (d->queued >= QUEUE_LIMIT)
			return;
		chunk *q = malloc(sizeof *q + READ_MAX);
		if (!q) {
			conn_kill(d->conn);
			return;
		}
		ssize_t n = read(d->in, q->data, READ_MAX);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			free(q);
			return;
		}
		if (n <= 0) {
			if (n < 0 && errno != ECONNRESET) {
				free(q);
				conn_kill(d->conn);
				return;
			}
			n = 0; /* EOF (a reset counts as one) */
			d->in_done = true;
		} else if ((size_t)n < READ_MAX / 2) {
			chunk *s = realloc(q, sizeof *q + (size_t)n);
			if (s)
				q = s;
		}
		q->next = NULL;
		q->due = now_ns() + delay_ns;
		if (trace)
			fprintf(trace, "%.3f %p %s %zd\n", (double)(q->due - delay_ns) / 1e6,
			        (void *)d->conn, d == &d->conn->d[0] ? ">" : "<", n);
		q->len = (size_t)n;
		q->off = 0;
		if (d->tail)
			d->tail->next = q;
		else
			d->head = q;
		d->tail = q;
		d->queued += (size_t)n;
		if (d->in_done)
			return;
	}
}

/* Passes on what is due; returns the next due time, or 0 when nothing waits on a timer. */
static uint64_t dir_write(dir *d, uint64_t now)
{
	while (d->head && !d->blocked) {
		chunk *q = d->head;
		if (q->due > now)
			return q->due;
		if (q->len == 0) {
			if (d->out_is_socket)
				shutdown(d->out, SHUT_WR);
			else
				close(d->out);
			d->out_done = true;
		} else {
			ssize_t n = write(d->out, q->data + q->off, q->len - q->off);
			if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
				d->blocked = true;
				return 0;
			}
			if (n < 0) {
				conn_kill(d->conn);
				return 0;
			}
			q->off += (size_t)n;
			d->queued -= (size_t)n;
			if (q->off < q->len)
				continue;
		}
		d->head = q->next;
		if (!d->head)
			d->tail = NULL;
		free(q);
	}
	return 0;
}

static void arm_timer(void)
{
	uint64_t now = now_ns(), next = 0;
	for (conn *c = conns; c; c = c->next) {
		if (c->dead)
			continue;
		for (int k = 0; k < 2; k++) {
			uint64_t t = dir_write(&c->d[k], now);
			if (t && (!next || t < next))
				next = t;
		}
		if (!c->dead)
			conn_update(c);
	}
	struct itimerspec its = {0};
	if (next) {
		its.it_value.tv_sec = (time_t)(next / 1000000000u);
		its.it_value.tv_nsec = (long)(next % 1000000000u);
	}
	timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A connection of two directions: a_in → b_out and b_in → a_out. */
static conn *conn_new(int a_in, int a_out, int b_in, int b_out, bool sockets)
{
	conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->d[0] = (dir){.conn = c, .in = a_in, .out = b_out, .out_is_socket = sockets};
	c->d[1] = (dir){.conn = c, .in = b_in, .out = a_out, .out_is_socket = sockets};
	int fds[4] = {a_in, a_out, b_in, b_out};
	for (int i = 0; i < 4; i++) {
		endp *e = NULL;
		for (int j = 0; j < c->ne; j++)
			if (c->e[j].fd == fds[i])
				e = &c->e[j];
		if (!e) {
			e = &c->e[c->ne++];
			e->fd = fds[i];
			nonblock(fds[i]);
		}
		if (fds[i] == a_in)
			e->rd = &c->d[0];
		if (fds[i] == b_in)
			e->rd = &c->d[1];
		if (fds[i] == b_out)
			e->wr = &c->d[0];
		if (fds[i] == a_out)
			e->wr = &c->d[1];
	}
	c->next = conns;
	conns = c;
	conn_update(c);
	return c;
}

static void reap_dead(void)
{
	for (conn **pp = &conns; *pp;) {
		conn *c = *pp;
		if (!c->dead && c->d[0].out_done && c->d[1].out_done)
			conn_kill(c);
		if (c->dead) {
			*pp = c->next;
			free(c);
		} else {
			pp = &c->next;
		}
	}
}

static int listen_tcp(const char *port_file)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 128) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &al) < 0) {
		perror("wan_proxy: listen");
		exit(1);
	}
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "%u\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0 ||
	    rename(tmp, port_file) != 0) {
		perror("wan_proxy: port file");
		exit(1);
	}
	nonblock(s);
	return s;
}

static void accept_all(int ls, const struct sockaddr_in *target)
{
	for (;;) {
		int a = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (a < 0)
			return;
		int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (b < 0 || connect(b, (const struct sockaddr *)target, sizeof *target) < 0) {
			perror("wan_proxy: connect");
			close(a);
			if (b >= 0)
				close(b);
			continue;
		}
		nodelay(a);
		nodelay(b);
		conn_new(a, a, b, b, true);
	}
}

static void run_pipe(char **argv)
{
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
		perror("wan_proxy: pipe");
		exit(1);
	}
	child = fork();
	if (child < 0) {
		perror("wan_proxy: fork");
		exit(1);
	}
	if (child == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execvp(argv[0], argv);
		fprintf(stderr, "wan_proxy: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	/* ours: stdin → the child's stdin; the child's stdout → our stdout */
	conn_new(0, 1, out[0], in[1], false);
}

int main(int argc, char **argv)
{
	if (argc < 4 || (strcmp(argv[2], "tcp") && strcmp(argv[2], "pipe")) ||
	    (!strcmp(argv[2], "tcp") && argc != 5)) {
		fprintf(stderr, "usage: wan_proxy DELAY_MS tcp HOST:PORT PORT_FILE\n"
		                "       wan_proxy DELAY_MS pipe PROGRAM ARG...\n");
		return 2;
	}
	delay_ns = (uint64_t)(strtod(argv[1], NULL) * 1e6);
	if (getenv("WAN_PROXY_TRACE") && *getenv("WAN_PROXY_TRACE")) {
		trace = fopen(getenv("WAN_PROXY_TRACE"), "a");
		if (trace)
			setvbuf(trace, NULL, _IOLBF, 0);
	}
	signal(SIGPIPE, SIG_IGN);
	ep = epoll_create1(EPOLL_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
	int ls = -1;
	static endp lsn;
	struct sockaddr_in target = {.sin_family = AF_INET};
	bool pipe_mode = !strcmp(argv[2], "pipe");
	if (pipe_mode) {
		run_pipe(argv + 3);
	} else {
		char host[256];
		unsigned port = 0;
		if (sscanf(argv[3], "%255[^:]:%u", host, &port) != 2 ||
		    inet_pton(AF_INET, host, &target.sin_addr) != 1) {
			fprintf(stderr, "wan_proxy: bad target %s (IPv4:PORT)\n", argv[3]);
			return 2;
		}
		target.sin_port = htons((uint16_t)port);
		ls = listen_tcp(argv[4]);
		lsn.fd = ls;
		struct epoll_event x = {.events = EPOLLIN, .data.ptr = &lsn};
		epoll_ctl(ep, EPOLL_CTL_ADD, ls, &x);
	}
	for (;;) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, -1);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			endp *e = evs[i].data.ptr;
			if (!e) {
				uint64_t x;
				(void)!read(tfd, &x, sizeof x);
				continue;
			}
			if (e == &lsn) {
				accept_all(ls, &target);
				continue;
			}
			if (e->wr && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
				e->wr->blocked = false;
			if (e->rd && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				dir_read(e->rd);
		}
		arm_timer();
		reap_dead();
		if (pipe_mode && !conns)
			break;
		if (pipe_mode && conns && conns->d[1].out_done)
			break; /* the child's stdout ended and was passed on */
	}
	if (child > 0) {
		for (conn *c = conns; c; c = c->next)
			conn_kill(c); /* the child's stdin ends too */
		close(1);
		while (waitpid(child, &child_status, 0) < 0 && errno == EINTR)
			;
		return WIFEXITED(child_status) ? WEXITSTATUS(child_status) : 1;
	}
	return 0;
}
