/*
 * One jump host (ssh.jump, ProxyJump): a libssh session of its own, connected and
 * authenticated as the sandbox's is (host key first), with one direct-tcpip channel to
 * the next host. The next session runs over a socketpair whose far end a relay thread
 * joins to that channel: the thread alone calls into the hop's session once it is set
 * up, so it needs no lock, and it moves bytes both ways without ever blocking on one
 * direction (both ends non-blocking, one poll), reading from libssh only what the other
 * end has room for, so the channel's window is what holds a fast sender back.
 */
#include "ssh_internal.h"
#include "ssh_via.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define RELAY_BUF (256 * 1024) /* each way */

struct ssh_hop {
	char label[400];
	asp_config_view view; /* the hop's keys, for its sshc */
	sshc c;
	bool connected;
	ssh_channel ch;
	int pair;    /* the relay's end of the socketpair */
	int stop_fd; /* eventfd: the relay ends */
	pthread_t thread;
	bool thread_on;
	pthread_mutex_t mu; /* why */
	char why[600];
	uint8_t *down, *up; /* channel -> pair, pair -> channel */
};

static void set_why(ssh_hop *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_why(ssh_hop *j, const char *fmt, ...)
{
	pthread_mutex_lock(&j->mu);
	if (!j->why[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(j->why, sizeof j->why, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&j->mu);
}

static bool set_nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

/* One relay pass each way; true when anything moved. Sets *done when the relay ends. */
static bool relay_once(ssh_hop *j, size_t *down_len, size_t *down_off, size_t *up_len,
                       size_t *up_off, bool *pair_eof, bool *done)
{
	ssh_session s = j->c.s;
	bool moved = false;
	/* from the hop: read while the socket has more and there is room (libssh takes 4 KiB
	 * per read, so one pass gathers many) */
	if (*down_off == *down_len) {
		*down_len = *down_off = 0;
		while (*down_len < RELAY_BUF) {
			int n = ssh_channel_read_nonblocking(j->ch, j->down + *down_len,
			                                     (uint32_t)(RELAY_BUF - *down_len), 0);
			if (n == SSH_ERROR) {
				set_why(j, "%s: connection lost: %s", j->label, ssh_get_error(s));
				*done = true;
				return true;
			}
			if (n <= 0)
				break;
			*down_len += (size_t)n;
		}
		if (*down_len == 0 && (ssh_channel_is_eof(j->ch) || ssh_channel_is_closed(j->ch))) {
			set_why(j, "%s: the connection it carries was closed at the far end",
			        j->label);
			shutdown(j->pair, SHUT_WR);
			*done = true;
			return true;
		}
	} else {
		ssh_channel_poll(j->ch, 0); /* window adjusts for the other direction */
	}
	while (*down_off < *down_len) {
		ssize_t w = send(j->pair, j->down + *down_off, *down_len - *down_off,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			*down_off += (size_t)w;
			moved = true;
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		*done = true; /* the session over the pair is gone */
		return true;
	}
	/* to the hop: no more than the window takes, so nothing waits in libssh unbounded */
	if (*up_off == *up_len && !*pair_eof) {
		uint32_t win = ssh_channel_window_size(j->ch);
		if (win > 0) {
			ssize_t r =
			    recv(j->pair, j->up, win < RELAY_BUF ? win : RELAY_BUF, MSG_DONTWAIT);
			if (r > 0) {
				*up_len = (size_t)r;
				*up_off = 0;
				moved = true;
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				*pair_eof = true; /* the session over the pair closed: end */
				ssh_channel_send_eof(j->ch);
				*done = true;
				return true;
			}
		}
	}
	if (*up_off < *up_len) {
		int w = ssh_channel_write(j->ch, j->up + *up_off, (uint32_t)(*up_len - *up_off));
		if (w == SSH_ERROR) {
			set_why(j, "%s: connection lost: %s", j->label, ssh_get_error(s));
			*done = true;
			return true;
		}
		if (w > 0) {
			*up_off += (size_t)w;
			moved = true;
		}
	}
	return moved;
}

static void *relay_thread(void *arg)
{
	ssh_hop *j = arg;
	int sock = ssh_get_fd(j->c.s);
	size_t down_len = 0, down_off = 0, up_len = 0, up_off = 0;
	bool pair_eof = false, done = false;
	while (!done) {
		uint64_t seen = j->c.rx.in_packets;
		if (relay_once(j, &down_len, &down_off, &up_len, &up_off, &pair_eof, &done))
			continue;
		bool sending = ssh_blocking_flush(j->c.s, 0) == SSH_AGAIN;
		/* any libssh call may have read packets (a window adjust, data): the socket
		 * would not show them again, so look before sleeping */
		if (j->c.rx.in_packets != seen)
			continue;
		bool want_up = up_off == up_len && ssh_channel_window_size(j->ch) > 0;
		struct pollfd fds[3] = {
		    {.fd = j->stop_fd, .events = POLLIN},
		    {.fd = sock, .events = POLLIN | (sending ? POLLOUT : 0)},
		    {.fd = j->pair,
		     .events = (want_up ? POLLIN : 0) | (down_off < down_len ? POLLOUT : 0)},
		};
		if (poll(fds, 3, -1) < 0 && errno != EINTR)
			break;
		if (fds[0].revents)
			break;
		if (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			/* let libssh read the reason (a disconnect message, the socket's error) */
			ssh_channel_poll(j->ch, 0);
			if (!ssh_is_connected(j->c.s)) {
				set_why(j, "%s: connection lost: %s", j->label,
				        ssh_get_error(j->c.s));
				break;
			}
		}
	}
	/* the session over the pair learns at once: its socket closes */
	shutdown(j->pair, SHUT_RDWR);
	return NULL;
}

/* The jump host's refusal of the channel, in words. */
static asp_status open_failed(ssh_hop *j, const char *host, unsigned port, asp_error *err)
{
	const char *e = ssh_get_error(j->c.s);
	if (!ssh_is_connected(j->c.s))
		return asp_error_set(
		    err, ASP_E_TRANSPORT_ERROR, NULL,
		    "%s: connection lost while asking it to connect to %s port %u: "
		    "%s",
		    j->label, host, port, e);
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
	                     "%s cannot reach %s port %u (%s); check the next host's address "
	                     "and port, and that the jump host allows TCP forwarding "
	                     "(AllowTcpForwarding, PermitOpen)",
	                     j->label, host, port, e);
}

asp_status ssh_hop_open(const asp_ssh_hop *h, const char *config_path, const char *label, int fd,
                        const char *host, unsigned port, ssh_hop **out, int *out_fd, asp_error *err)
{
	*out = NULL;
	*out_fd = -1;
	ssh_hop *j = calloc(1, sizeof *j);
	if (!j) {
		if (fd >= 0)
			close(fd);
		return asp_error_oom(err, "ssh jump host", NULL);
	}
	snprintf(j->label, sizeof j->label, "%s", label);
	j->pair = j->stop_fd = -1;
	pthread_mutex_init(&j->mu, NULL);
	j->view.path = config_path;
	j->view.transport = ASP_TRANSPORT_SSH;
	j->view.ssh = h->ssh;
	asp_status st = sshc_connect_hop(&j->c, &j->view, fd, err);
	if (st != ASP_OK) {
		asp_error_prefix(err, st, "%s", label);
		free(j);
		return st;
	}
	j->connected = true;
	int sv[2] = {-1, -1};
	if (!(j->down = malloc(RELAY_BUF)) || !(j->up = malloc(RELAY_BUF))) {
		st = asp_error_oom(err, "ssh jump host", NULL);
		goto fail;
	}
	if (!(j->ch = ssh_channel_new(j->c.s))) {
		st = asp_error_oom(err, "ssh jump host", "a channel");
		goto fail;
	}
	/* blocking, bounded by the hop's connect_timeout_ms (libssh's timeout option) */
	if (ssh_channel_open_forward(j->ch, host, (int)port, "127.0.0.1", 0) != SSH_OK) {
		st = open_failed(j, host, port, err);
		goto fail;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
	    (j->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0 || !set_nonblocking(sv[0]) ||
	    !set_nonblocking(sv[1])) {
		st = asp_error_errno(err, errno, NULL, "%s: cannot make its socketpair", label);
		goto fail;
	}
	j->pair = sv[0];
	ssh_set_blocking(j->c.s, 0);
	if (pthread_create(&j->thread, NULL, relay_thread, j) != 0) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: cannot start its thread", label);
		goto fail;
	}
	j->thread_on = true;
	*out = j;
	*out_fd = sv[1];
	return ASP_OK;
fail:
	if (sv[1] >= 0)
		close(sv[1]);
	if (sv[0] >= 0 && j->pair < 0)
		close(sv[0]);
	ssh_hop_free(j);
	return st;
}

bool ssh_hop_explain(ssh_hop *j, char *out, size_t cap)
{
	pthread_mutex_lock(&j->mu);
	bool have = j->why[0] != '\0';
	if (have)
		snprintf(out, cap, "%s", j->why);
	pthread_mutex_unlock(&j->mu);
	return have;
}

void ssh_hop_free(ssh_hop *j)
{
	if (!j)
		return;
	if (j->thread_on) {
		uint64_t one = 1;
		(void)!write(j->stop_fd, &one, sizeof one);
		pthread_join(j->thread, NULL);
	}
	if (j->ch) {
		ssh_set_blocking(j->c.s, 0);
		if (ssh_channel_is_open(j->ch))
			ssh_channel_close(j->ch);
		ssh_channel_free(j->ch);
	}
	if (j->connected)
		sshc_close(&j->c);
	if (j->pair >= 0)
		close(j->pair);
	if (j->stop_fd >= 0)
		close(j->stop_fd);
	pthread_mutex_destroy(&j->mu);
	free(j->down);
	free(j->up);
	free(j);
}
