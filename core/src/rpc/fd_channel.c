/* The fd-pair frame channel: buffered frame reads, whole-frame writes, a wakeable reader. */
#include "channel.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Read buffer: big enough that a burst of pipelined small frames takes one read(). */
#define RBUF 65536
/* Pieces one writev takes at most (Linux UIO_MAXIOV). */
#define MAX_IOV 1024

typedef struct fd_channel {
	asp_channel base;
	int rfd, wfd;
	bool wakeable;           /* ASP_FDCH_WAKEABLE: close writes the waiting threads' wake fds */
	pthread_mutex_t wake_mu; /* wait_fd: close never writes to an fd its thread let go */
	int wait_fd[2];          /* the wake fd of the thread waiting to read, to write; or -1 */
	unsigned flags;
	bool wsock;        /* wfd is a socket: send(MSG_NOSIGNAL) */
	bool rsock;        /* rfd is a socket: close shuts it down, which wakes a reader */
	bool rnb;          /* rfd is non-blocking: read first, poll on EAGAIN */
	bool mask_sigpipe; /* a pipe in a process where SIGPIPE would kill */
	atomic_bool closed;
	int stall_ms; /* a send with no progress for this long fails (-1: waits for ever) */
	int watch_fd; /* -1: none, or the RPC engine's poller watches it (watch_taken) */
	bool watch_taken;
	bool (*watch_fn)(void *ctx, int fd);
	void *watch_ctx;
	void (*owner_explain)(void *ctx, asp_error *err);
	void (*owner_release)(void *ctx);
	void *owner_ctx;
	size_t start, end; /* unread bytes are buf[start .. end) */
	uint8_t *buf;      /* RBUF bytes, allocated by the first read, freed when idle (trim) */
} fd_channel;

/*
 * Read buffers of idle connections (asp_fd_channel_trim) are kept one per thread rather
 * than freed: the next connection this thread reads takes it, so a call pays neither a
 * 64 KiB malloc nor its page faults, and idle connections still hold none.
 */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static bool spare_ok;

static void spare_init(void)
{
	spare_ok = pthread_key_create(&spare_key, free) == 0;
}

static uint8_t *buf_take(void)
{
	pthread_once(&spare_once, spare_init);
	uint8_t *b = spare_ok ? pthread_getspecific(spare_key) : NULL;
	if (b) {
		pthread_setspecific(spare_key, NULL);
		return b;
	}
	return malloc(RBUF);
}

static void buf_give(uint8_t *b)
{
	pthread_once(&spare_once, spare_init);
	if (spare_ok && !pthread_getspecific(spare_key) && pthread_setspecific(spare_key, b) == 0)
		return;
	free(b);
}

/*
 * What close() writes to wake a thread that waits in poll() on a wakeable channel: an
 * eventfd of the waiting thread's own, not one per channel, so a process with thousands
 * of connections holds one per thread that reads. A write meant for a wait on another
 * channel (the thread moved on) only makes the next poll return early; it is drained and
 * the wait goes on.
 */
static pthread_key_t wake_key;
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static bool wake_ok;

static void wake_close(void *v)
{
	close((int)(intptr_t)v - 1);
}

static void wake_init(void)
{
	wake_ok = pthread_key_create(&wake_key, wake_close) == 0;
}

/* This thread's wake fd, made on first use; -1 when none can be made. */
static int thread_wakefd(void)
{
	pthread_once(&wake_once, wake_init);
	if (!wake_ok)
		return -1;
	intptr_t v = (intptr_t)pthread_getspecific(wake_key);
	if (v)
		return (int)v - 1;
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fd >= 0 && pthread_setspecific(wake_key, (void *)(intptr_t)(fd + 1))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void wake_drain(int fd)
{
	uint64_t v;
	ssize_t r = read(fd, &v, sizeof v);
	(void)r; /* EAGAIN: somebody drained it already */
}

/*
 * Before a wait: publishes this thread's wake fd in slot `which` (0 reading, 1 writing) of
 * a wakeable channel and returns it; -1 when the channel is closed already; -2 when there
 * is none (not wakeable, or no fd could be made: EMFILE; then *slice is 50 and the wait
 * looks at `closed` every 50 ms).
 */
static int wait_begin(fd_channel *c, int which, int *slice)
{
	*slice = -1;
	if (!c->wakeable)
		return -2;
	int fd = thread_wakefd();
	if (fd < 0) {
		fd = -2;
		*slice = 50;
	}
	pthread_mutex_lock(&c->wake_mu);
	bool closed = atomic_load(&c->closed); /* close sets it, then looks under wake_mu */
	c->wait_fd[which] = closed ? -1 : fd;
	pthread_mutex_unlock(&c->wake_mu);
	return closed ? -1 : fd;
}

static void wait_end(fd_channel *c, int which)
{
	if (!c->wakeable)
		return;
	pthread_mutex_lock(&c->wake_mu);
	c->wait_fd[which] = -1;
	pthread_mutex_unlock(&c->wake_mu);
}

static asp_status closed_error(asp_error *err)
{
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "the connection was closed");
}

/*
 * Waits until rfd is readable, at most `ms` (-1: for ever). 0 readable, 1 timed out, -1
 * when the channel was closed (or poll failed), with `err` filled. Runs the watch
 * callback on the way.
 */
static int wait_readable(fd_channel *c, int ms, asp_error *err)
{
	struct timespec t0;
	if (ms > 0)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	int slice, wfd = wait_begin(c, 0, &slice);
	if (wfd == -1) {
		closed_error(err);
		return -1;
	}
	int rc;
	for (;;) {
		if (atomic_load_explicit(&c->closed, memory_order_acquire)) {
			closed_error(err);
			rc = -1;
			break;
		}
		struct pollfd p[3];
		nfds_t n = 0;
		p[n++] = (struct pollfd){.fd = c->rfd, .events = POLLIN};
		nfds_t wake = 0, watch = 0; /* 0: not polled (p[0] is rfd) */
		if (wfd >= 0)
			p[wake = n++] = (struct pollfd){.fd = wfd, .events = POLLIN};
		if (c->watch_fd >= 0 && !c->watch_taken)
			p[watch = n++] = (struct pollfd){.fd = c->watch_fd, .events = POLLIN};
		int left = ms;
		if (ms > 0) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			long gone = (long)(t.tv_sec - t0.tv_sec) * 1000 +
			            (t.tv_nsec - t0.tv_nsec) / 1000000;
			left = gone >= ms ? 0 : ms - (int)gone;
		}
		bool sliced = slice > 0 && (left < 0 || left > slice);
		int pr = poll(p, n, sliced ? slice : left);
		if (pr == 0 && sliced)
			continue;
		if (pr == 0) {
			rc = 1;
			break;
		}
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			asp_error_errno(err, errno, NULL, "poll on the connection");
			err->code = ASP_E_TRANSPORT_ERROR;
			rc = -1;
			break;
		}
		if (wake > 0 && p[wake].revents)
			wake_drain(wfd); /* closed (checked above on the next turn), or stale */
		if (watch > 0 && p[watch].revents && !c->watch_fn(c->watch_ctx, c->watch_fd))
			c->watch_fd = -1;
		if (p[0].revents && !atomic_load_explicit(&c->closed, memory_order_acquire)) {
			rc = 0;
			break;
		}
	}
	wait_end(c, 0);
	return rc;
}

/*
 * Reads what is available (at least one byte) into dst. >0 bytes, 0 at EOF, -1 error.
 * `mid`: inside a frame, where a peer that sends nothing for stall_ms has stopped.
 */
static ssize_t read_some(fd_channel *c, uint8_t *dst, size_t cap, bool mid, asp_error *err)
{
	bool waits = c->wakeable || c->rsock; /* close wakes a poll: wait in one */
	bool try_first = c->rnb;
	for (;;) {
		int w = waits && !try_first ? wait_readable(c, mid ? c->stall_ms : -1, err) : 0;
		try_first = false;
		if (w < 0)
			return -1;
		if (w > 0) {
			asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			              "the responder sent nothing for %d ms inside a frame",
			              c->stall_ms);
			return -1;
		}
		if (atomic_load_explicit(&c->closed, memory_order_acquire)) {
			closed_error(err);
			return -1;
		}
		ssize_t n = read(c->rfd, dst, cap);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN && !waits) { /* someone made it non-blocking */
			struct pollfd p = {.fd = c->rfd, .events = POLLIN};
			poll(&p, 1, -1);
			continue;
		}
		if (errno == EAGAIN)
			continue;
		if (atomic_load_explicit(&c->closed, memory_order_acquire))
			return closed_error(err), -1;
		asp_error_errno(err, errno, NULL, "reading from the connection");
		err->code = ASP_E_TRANSPORT_ERROR;
		return -1;
	}
}

/* Makes at least `need` bytes available in buf (`body`: in a frame's body). 1 ok, 0 EOF,
 * -1 error. */
static int fill(fd_channel *c, size_t need, bool body, asp_error *err)
{
	if (!c->buf && !(c->buf = buf_take())) {
		asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory for a read buffer");
		return -1;
	}
	while (c->end - c->start < need) {
		if (c->start > 0) { /* keep the partial frame at the front */
			memmove(c->buf, c->buf + c->start, c->end - c->start);
			c->end -= c->start;
			c->start = 0;
		}
		ssize_t n =
		    read_some(c, c->buf + c->end, RBUF - c->end, body || c->end > c->start, err);
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		c->end += (size_t)n;
	}
	return 1;
}

static asp_status eof_inside(asp_error *err, size_t got, size_t want)
{
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
	                     "the connection ended inside a frame (%zu of %zu bytes)", got, want);
}

static asp_status fd_recv(void *ch, size_t max, uint8_t **msg, size_t *len, asp_error *err)
{
	fd_channel *c = (fd_channel *)ch;
	*msg = NULL;
	*len = 0;
	int r = fill(c, 4, false, err);
	if (r < 0)
		return err->code;
	if (r == 0) {
		if (c->end == c->start)
			return ASP_OK; /* clean end of stream */
		return eof_inside(err, c->end - c->start, 4);
	}
	const uint8_t *h = c->buf + c->start;
	size_t n = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
	if (n > max)
		return asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                     "a frame of %zu bytes is larger than max_message (%zu)", n,
		                     max);
	c->start += 4;
	uint8_t *m = malloc(n ? n : 1);
	if (!m)
		return asp_error_set(err, ASP_E_INTERNAL, NULL,
		                     "out of memory for a %zu-byte message", n);
	size_t have = c->end - c->start < n ? c->end - c->start : n;
	memcpy(m, c->buf + c->start, have);
	c->start += have;
	while (have < n) {
		size_t rest = n - have;
		ssize_t got;
		if (rest >= RBUF / 2) { /* large body: straight into the message, no copy */
			got = read_some(c, m + have, rest, true, err);
		} else {
			int fr = fill(c, rest, true, err);
			got = fr < 0 ? -1 : (ssize_t)(c->end - c->start);
			if (got > (ssize_t)rest)
				got = (ssize_t)rest;
			memcpy(m + have, c->buf + c->start, got > 0 ? (size_t)got : 0);
			c->start += got > 0 ? (size_t)got : 0;
		}
		if (got < 0) {
			free(m);
			return err->code;
		}
		if (got == 0) {
			free(m);
			return eof_inside(err, have + 4, n + 4);
		}
		have += (size_t)got;
	}
	*msg = m;
	*len = n;
	return ASP_OK;
}

/*
 * Waits until wfd is writable again or the channel closes. 0, -1 when closed, -2 when
 * nothing could be written for stall_ms (the peer stopped reading).
 */
static int wait_writable(fd_channel *c)
{
	int slice, wfd = wait_begin(c, 1, &slice);
	if (wfd == -1)
		return -1;
	int rc, waited = 0;
	for (;;) {
		struct pollfd p[2] = {
		    {.fd = c->wfd, .events = POLLOUT},
		    {.fd = wfd, .events = POLLIN},
		};
		int ms = c->stall_ms < 0 ? -1 : c->stall_ms - waited;
		bool sliced = slice > 0 && (ms < 0 || ms > slice);
		int n = poll(p, wfd >= 0 ? 2 : 1, sliced ? slice : ms);
		if (n < 0 && errno != EINTR) {
			rc = -1;
			break;
		}
		if (atomic_load_explicit(&c->closed, memory_order_acquire)) {
			rc = -1;
			break;
		}
		if (n == 0 && sliced) {
			waited += slice;
			continue;
		}
		if (n == 0) {
			rc = -2;
			break;
		}
		if (n > 0 && wfd >= 0 && p[1].revents)
			wake_drain(wfd);
		if (n > 0 && p[0].revents) {
			rc = 0;
			break;
		}
	}
	wait_end(c, 1);
	return rc;
}

/* One writev/sendmsg of what is left; sockets never raise SIGPIPE. */
static ssize_t write_iov(fd_channel *c, struct iovec *iov, int n)
{
	if (!c->wsock)
		return writev(c->wfd, iov, n);
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
	return sendmsg(c->wfd, &m, MSG_NOSIGNAL);
}

static asp_status fd_sendv(void *ch, const struct iovec *in, int iovcnt, asp_error *err)
{
	fd_channel *c = (fd_channel *)ch;
	if (atomic_load_explicit(&c->closed, memory_order_acquire))
		return closed_error(err);
	struct iovec local[8], *iov = local;
	if (iovcnt > (int)(sizeof local / sizeof local[0])) {
		iov = malloc((size_t)iovcnt * sizeof *iov);
		if (!iov)
			return asp_error_set(err, ASP_E_INTERNAL, NULL,
			                     "out of memory sending a frame");
	}
	memcpy(iov, in, (size_t)iovcnt * sizeof *iov); /* advanced in place on short writes */
	sigset_t pipe_set, old;
	if (c->mask_sigpipe) {
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	}
	asp_status st = ASP_OK;
	int at = 0;
	while (at < iovcnt) {
		if (iov[at].iov_len == 0) {
			at++;
			continue;
		}
		int cnt = iovcnt - at < MAX_IOV ? iovcnt - at : MAX_IOV;
		ssize_t n = write_iov(c, iov + at, cnt);
		if (n >= 0) {
			at = asp_iov_advance(iov, iovcnt, at, (size_t)n);
			continue;
		}
		int e = errno;
		if (e == EINTR)
			continue;
		int w = e == EAGAIN ? wait_writable(c) : -1;
		if (w == 0)
			continue;
		if (w == -2) {
			st = asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			                   "the responder read nothing of a request for %d ms "
			                   "(call_timeout_ms): it is stopped or wedged",
			                   c->stall_ms);
			break;
		}
		/*
		 * Swallow the SIGPIPE our write raised before anything else: the reader may
		 * have closed the channel meanwhile (it saw the same peer die), and a SIGPIPE
		 * left pending would kill the process when the mask is restored.
		 */
		if (e == EPIPE && c->mask_sigpipe) {
			static const struct timespec zero = {0, 0};
			sigset_t pending;
			if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) &&
			    !sigismember(&old, SIGPIPE))
				sigtimedwait(&pipe_set, NULL, &zero);
		}
		if (e == EAGAIN || atomic_load_explicit(&c->closed, memory_order_acquire)) {
			st = closed_error(err);
			break;
		}
		asp_error_errno(err, e, NULL, "writing to the connection");
		st = err->code = ASP_E_TRANSPORT_ERROR;
		break;
	}
	if (c->mask_sigpipe)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (iov != local)
		free(iov);
	return st;
}

static asp_status fd_send(void *ch, const uint8_t *frame, size_t len, asp_error *err)
{
	struct iovec one = {(void *)frame, len};
	return fd_sendv(ch, &one, 1, err);
}

static void fd_close(void *ch)
{
	fd_channel *c = (fd_channel *)ch;
	if (atomic_exchange(&c->closed, true))
		return;
	if (c->wakeable) {
		pthread_mutex_lock(&c->wake_mu);
		for (int i = 0; i < 2; i++) {
			uint64_t one = 1;
			ssize_t r = c->wait_fd[i] >= 0 ? write(c->wait_fd[i], &one, sizeof one) : 0;
			(void)r; /* an eventfd write only fails on overflow, and one is enough */
		}
		pthread_mutex_unlock(&c->wake_mu);
	} else if (c->rsock || c->wsock) {
		shutdown(c->rsock ? c->rfd : c->wfd, SHUT_RDWR);
	}
}

static void fd_free(void *ch)
{
	fd_channel *c = (fd_channel *)ch;
	if (c->flags & ASP_FDCH_OWN_FDS) {
		close(c->rfd);
		if (c->wfd != c->rfd)
			close(c->wfd);
	}
	if (c->buf)
		buf_give(c->buf);
	pthread_mutex_destroy(&c->wake_mu);
	void (*release)(void *) = c->owner_release;
	void *ctx = c->owner_ctx;
	free(c);
	if (release)
		release(ctx);
}

static void fd_explain(void *ch, asp_error *err)
{
	fd_channel *c = (fd_channel *)ch;
	if (c->owner_explain)
		c->owner_explain(c->owner_ctx, err);
}

static int fd_ready(void *ch, int ms, asp_error *err)
{
	fd_channel *c = (fd_channel *)ch;
	if (c->end > c->start)
		return 1;
	int w = wait_readable(c, ms, err);
	return w < 0 ? -1 : w == 0;
}

static const asp_channel_ops fd_channel_ops = {
    .send = fd_send,
    .sendv = fd_sendv,
    .recv = fd_recv,
    .explain = fd_explain,
    .close = fd_close,
    .free = fd_free,
};

/* One that close wakes (an eventfd, or a socket it shuts down) can also wait with a time
 * limit (ready). */
static const asp_channel_ops fd_channel_wake_ops = {
    .send = fd_send,
    .sendv = fd_sendv,
    .recv = fd_recv,
    .ready = fd_ready,
    .explain = fd_explain,
    .close = fd_close,
    .free = fd_free,
};

static bool is_socket(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Whether a write to a closed pipe would kill the process: SIGPIPE at its default. */
static bool sigpipe_kills(void)
{
	struct sigaction sa;
	if (sigaction(SIGPIPE, NULL, &sa) < 0)
		return true;
	return !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL;
}

asp_status asp_fd_channel_new(int rfd, int wfd, unsigned flags, asp_channel **out, asp_error *err)
{
	*out = NULL;
	fd_channel *c = calloc(1, sizeof *c);
	if (!c)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	c->base.ctx = c;
	c->base.boxed = false;
	c->rfd = rfd;
	c->wfd = wfd;
	c->flags = flags;
	c->watch_fd = -1;
	c->stall_ms = -1;
	c->wakeable = flags & ASP_FDCH_WAKEABLE;
	c->wait_fd[0] = c->wait_fd[1] = -1;
	pthread_mutex_init(&c->wake_mu, NULL);
	atomic_init(&c->closed, false);
	c->wsock = is_socket(wfd);
	c->rsock = rfd == wfd ? c->wsock : is_socket(rfd);
	c->mask_sigpipe = !c->wsock && sigpipe_kills();
	if (flags & ASP_FDCH_PRIVATE_WFD) {
		int fl = fcntl(wfd, F_GETFL);
		if (fl >= 0)
			fcntl(wfd, F_SETFL, fl | O_NONBLOCK);
	}
	int rfl = fcntl(rfd, F_GETFL);
	c->rnb = rfl >= 0 && (rfl & O_NONBLOCK);
	c->base.ops = c->wakeable || c->rsock ? &fd_channel_wake_ops : &fd_channel_ops;
	*out = &c->base;
	return ASP_OK;
}

void asp_fd_channel_set_stall(asp_channel *ch, unsigned ms)
{
	((fd_channel *)ch)->stall_ms = ms && ms <= INT_MAX ? (int)ms : -1;
}

void asp_fd_channel_watch(asp_channel *ch, int fd, bool (*fn)(void *ctx, int fd), void *ctx)
{
	fd_channel *c = (fd_channel *)ch;
	if (ch->ops != &fd_channel_wake_ops)
		return;
	c->watch_fd = fd;
	c->watch_fn = fn;
	c->watch_ctx = ctx;
}

void asp_fd_channel_set_owner(asp_channel *ch, void (*explain)(void *ctx, asp_error *err),
                              void (*release)(void *ctx), void *ctx)
{
	fd_channel *c = (fd_channel *)ch;
	c->owner_explain = explain;
	c->owner_release = release;
	c->owner_ctx = ctx;
}

/* ---- for the RPC engine (channel.h) ------------------------------------------------ */

static bool is_fd_channel(const asp_channel *ch)
{
	return ch->ops == &fd_channel_wake_ops || ch->ops == &fd_channel_ops;
}

int asp_fd_channel_poll_fd(asp_channel *ch)
{
	return ch->ops == &fd_channel_wake_ops ? ((fd_channel *)ch)->rfd : -1;
}

int asp_fd_channel_take_watch(asp_channel *ch, bool take)
{
	if (!is_fd_channel(ch))
		return -1;
	fd_channel *c = (fd_channel *)ch;
	c->watch_taken = take && c->watch_fd >= 0;
	return c->watch_fd;
}

bool asp_fd_channel_run_watch(asp_channel *ch)
{
	fd_channel *c = (fd_channel *)ch;
	return c->watch_fd >= 0 && c->watch_fn(c->watch_ctx, c->watch_fd);
}

bool asp_fd_channel_buffered(asp_channel *ch)
{
	if (!is_fd_channel(ch))
		return false;
	fd_channel *c = (fd_channel *)ch;
	return c->end > c->start;
}

void asp_fd_channel_trim(asp_channel *ch)
{
	if (!is_fd_channel(ch))
		return;
	fd_channel *c = (fd_channel *)ch;
	if (c->buf && c->start == c->end) {
		buf_give(c->buf);
		c->buf = NULL;
		c->start = c->end = 0;
	}
}
