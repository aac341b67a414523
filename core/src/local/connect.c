/*
 * connect: a TCP connection opened from inside the sandbox, as a handle of the process
 * table (docs/design.md, "Ports and changes"). Its pump reads the socket into the stdout
 * ring and delivers each chunk before reading more, as a process's pump does, so a
 * reader that stalls closes the TCP window instead of growing memory; proc_write sends
 * (local_proc.c), its eof is shutdown(SHUT_WR); proc_signal KILL or TERM closes it.
 */
#include "local_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 10000u /* connect's timeout_ms 0 */
/* A connection's replay ring: reattaching matters less than for a process's log, and a
 * forwarder opens many connections. */
#define SOCK_RING_BYTES (256u * 1024u)
#define HOST_MAX        253u /* the longest DNS name */

/* The cause in words, for the errnos a connect commonly ends with. */
static const char *connect_cause(int e)
{
	switch (e) {
	case ECONNREFUSED: return "connection refused: nothing listens on that port in the sandbox";
	case ENETUNREACH: return "network unreachable from the sandbox (no route to that network)";
	case EHOSTUNREACH: return "no route to host from the sandbox";
	case EADDRNOTAVAIL: return "address not available in the sandbox";
	default: return NULL;
	}
}

/*
 * One non-blocking connect to `ai`, waiting until `deadline` (local_now_ns). The
 * connected socket, or -1 with *e the errno (ETIMEDOUT when the deadline passed).
 */
static int connect_one(const struct addrinfo *ai, uint64_t deadline, int *e)
{
	int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0) {
		*e = errno;
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		*e = errno;
		close(fd);
		return -1;
	}
	for (;;) {
		uint64_t now = local_now_ns();
		if (now >= deadline) {
			*e = ETIMEDOUT;
			break;
		}
		struct pollfd pfd = {fd, POLLOUT, 0};
		int n = poll(&pfd, 1, local_poll_ms(now, deadline));
		if (n < 0 && errno != EINTR) {
			*e = errno;
			break;
		}
		if (n <= 0)
			continue;
		int soerr = 0;
		socklen_t len = sizeof soerr;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
			soerr = errno;
		if (soerr == 0)
			return fd;
		*e = soerr;
		break;
	}
	close(fd);
	return -1;
}

/* Resolves and connects: the socket, or -1 with err set naming the cause. */
static int open_socket(const char *host, uint64_t port, uint64_t timeout_ms, asp_error *err)
{
	char service[8];
	snprintf(service, sizeof service, "%u", (unsigned)port);
	struct addrinfo hints = {0}, *res = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	int g = getaddrinfo(host, service, &hints, &res);
	if (g != 0) {
		if (g == EAI_SYSTEM)
			asp_error_errno(err, errno, NULL, "connect: cannot resolve '%s'", host);
		else
			asp_error_set(err,
			              g == EAI_NONAME || g == EAI_NODATA || g == EAI_FAIL
			                  ? ASP_E_NOT_FOUND
			                  : ASP_E_IO_ERROR,
			              NULL, "connect: the sandbox cannot resolve '%s': %s", host,
			              gai_strerror(g));
		return -1;
	}
	uint64_t deadline = local_now_ns() + timeout_ms * NS_PER_MS;
	int fd = -1, e = 0;
	for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
		fd = connect_one(ai, deadline, &e);
	freeaddrinfo(res);
	if (fd >= 0)
		return fd;
	if (e == ETIMEDOUT) {
		asp_error_set(err, ASP_E_TIMEOUT, NULL,
		              "connect: %s port %u: timed out after %llu ms (the host does not "
		              "answer: a firewall dropping packets, or a host that is down)",
		              host, (unsigned)port, (unsigned long long)timeout_ms);
	} else {
		const char *cause = connect_cause(e);
		asp_error_errno(err, e, NULL, "connect: %s port %u%s%s", host, (unsigned)port,
		                cause ? ": " : "", cause ? cause : "");
	}
	return -1;
}

/* Under p->mu: whether the pump must stop, and with which signal ("" none). */
static bool must_close(local_proc *p, const char **sig)
{
	if (p->close_sig[0]) {
		*sig = p->close_sig;
		return true;
	}
	if (p->ending) {
		*sig = "TERM"; /* the responder shuts down */
		return true;
	}
	return false;
}

static void *sock_pump(void *arg)
{
	local_proc *p = arg;
	int fd = p->child.out_fd; /* the pump's; in_fd is a dup for proc_write */
	uint8_t small[4096];
	uint8_t *buf = malloc(PROC_CHUNK);
	size_t cap = buf ? PROC_CHUNK : sizeof small;
	if (!buf)
		buf = small;
	asp_buf b;
	asp_buf_init(&b);
	bool rd_eof = false;
	int fail = 0;
	const char *sig = NULL;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		bool stop = must_close(p, &sig);
		pthread_mutex_unlock(&p->mu);
		if (stop)
			break;
		struct pollfd pfd[2] = {{fd, rd_eof ? 0 : POLLIN, 0}, {p->wake_fd, POLLIN, 0}};
		if (poll(pfd, 2, -1) < 0)
			continue; /* EINTR */
		if (pfd[1].revents) {
			uint64_t v;
			ssize_t r = read(p->wake_fd, &v, sizeof v);
			(void)r;
		}
		short re = pfd[0].revents;
		if (!re)
			continue;
		if (!rd_eof && (re & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(fd, buf, cap);
			if (n > 0) {
				local_pump_chunk(p, 0, buf, (size_t)n, &b);
				continue;
			}
			if (n == 0) {
				rd_eof = true;
				local_pump_eof(p, 0, &b); /* the peer is done sending */
				continue;
			}
			if (errno == EINTR || errno == EAGAIN)
				continue;
			fail = errno;
			break;
		}
		if (re & POLLERR) {
			socklen_t len = sizeof fail;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &fail, &len) < 0 || !fail)
				fail = EIO;
			break;
		}
		if (re & POLLHUP) /* read EOF and our side shut: both directions ended */
			break;
	}
	if (sig) {
		/* Closed by request: a reset tells the peer at once, as a killed process
		 * holding the socket would not be mistaken for a clean end. */
		struct linger lg = {1, 0};
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	}
	pthread_mutex_lock(&p->in_mu); /* no proc_write is on the socket once in_fd is shut */
	if (p->in_fd >= 0) {
		close(p->in_fd);
		p->in_fd = -1;
	}
	pthread_cond_broadcast(&p->in_cv);
	pthread_mutex_unlock(&p->in_mu);
	close(fd);
	pthread_mutex_lock(&p->mu);
	p->child.out_fd = -1;
	pthread_mutex_unlock(&p->mu);
	if (buf != small)
		free(buf);
	char *why = NULL;
	if (fail && !sig) {
		const char *s = strerror(fail);
		why = strdup(s);
		if (why && why[0] >= 'A' && why[0] <= 'Z')
			why[0] = (char)(why[0] - 'A' + 'a');
	}
	local_pump_end(p, sig ? -1 : fail ? 1 : 0, sig, why, &b);
	return NULL;
}

asp_status local_op_connect(void *self, const asp_connect_params *p, asp_connect_result *r,
                            asp_arena *a, asp_error *err)
{
	(void)a;
	asp_local_conn *c = self;
	r->proc = 0;
	if (p->port < 1 || p->port > 65535)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "connect: 'port' must be 1 to 65535, got %llu",
		                     (unsigned long long)p->port);
	const char *host = p->host ? p->host : "127.0.0.1";
	if (!host[0] || strlen(host) > HOST_MAX)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "connect: 'host' must be 1 to %u bytes", HOST_MAX);
	uint64_t timeout = p->timeout_ms ? p->timeout_ms : CONNECT_TIMEOUT_MS;
	if (timeout > MAX_TIMEOUT_MS)
		timeout = MAX_TIMEOUT_MS;
	char command[HOST_MAX + 32];
	snprintf(command, sizeof command, "connect %s:%u", host, (unsigned)p->port);
	int fd = open_socket(host, p->port, timeout, err);
	if (fd < 0)
		return err->code;
	int one = 1; /* small requests go out at once, as ssh -L's do */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int in = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	local_proc *pr = in < 0 ? NULL
	                        : local_proc_alloc(c->l, LOCAL_PROC_SOCK, SOCK_RING_BYTES, p->tag,
	                                           command, "connect", err);
	local_sub *sub = pr && c->has_sink ? local_sub_new(c) : NULL;
	if (!pr || (c->has_sink && !sub)) {
		if (in < 0)
			asp_error_errno(err, errno, NULL, "connect: cannot duplicate the socket");
		else if (pr)
			local_oom("connect", err);
		if (pr)
			local_proc_discard(pr);
		if (in >= 0)
			close(in);
		close(fd);
		return err->code;
	}
	pr->child.out_fd = fd;
	pr->in_fd = in; /* non-blocking already: proc_write polls a full send buffer */
	asp_status st = local_proc_list_start(pr, sub, sock_pump, "connect", err);
	if (st != ASP_OK)
		return st; /* the socket went with the handle */
	r->proc = pr->id;
	return ASP_OK;
}
