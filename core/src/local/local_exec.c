/*
 * exec: run one child to completion, feeding stdin and draining stdout/stderr in one
 * poll loop (so large input and large output cannot deadlock), with the timeout's
 * TERM-then-KILL to the whole process group.
 */
#include "local_impl.h"
#include "spawn_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FIRST_BUF (16u * 1024)
#define SCRATCH   (64u * 1024)

struct stream {
	int fd; /* -1 at EOF */
	uint8_t *buf;
	size_t len, cap, keep;
	uint64_t total;
	bool big_pipe;
};

struct feed {
	int fd; /* -1 once all written or the reader went away */
	const uint8_t *data;
	size_t len, off;
	bool epipe;
};

/* This thread's asp_local_watch_input: fd -1 when none (or once it fired). */
static _Thread_local asp_local_watch watch = {.fd = -1};

void asp_local_watch_input(const asp_local_watch *w)
{
	watch = w && w->ready ? *w : (asp_local_watch){.fd = -1};
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* One read of what is available. Bytes past `keep` are counted and dropped. */
static void stream_read(struct stream *s, uint8_t **scratch)
{
	uint8_t small[512];
	uint8_t *dst;
	size_t room;
	if (s->len < s->keep && s->len == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : FIRST_BUF;
		if (ncap > s->keep)
			ncap = s->keep;
		uint8_t *nb = realloc(s->buf, ncap);
		if (nb) {
			s->buf = nb;
			s->cap = ncap;
		} else {
			s->keep = s->len; /* out of memory: keep what we have, count the rest */
		}
	}
	if (s->len < s->keep) {
		dst = s->buf + s->len;
		room = s->cap - s->len;
	} else {
		if (!*scratch)
			*scratch = malloc(SCRATCH);
		dst = *scratch ? *scratch : small;
		room = *scratch ? SCRATCH : sizeof small;
	}
	ssize_t n = read(s->fd, dst, room);
	if (n > 0) {
		if (dst == s->buf + s->len)
			s->len += (size_t)n;
		s->total += (uint64_t)n;
#ifdef F_SETPIPE_SZ
		if (!s->big_pipe && s->total > BIG_OUTPUT) {
			s->big_pipe = true;
			fcntl(s->fd, F_SETPIPE_SZ, 1 << 20); /* a hint; the limit may refuse it */
		}
#endif
		return;
	}
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	close_fd(&s->fd); /* EOF, or an error that ends the stream just the same */
}

static void feed_write(struct feed *f)
{
	ssize_t n = write(f->fd, f->data + f->off, f->len - f->off);
	if (n > 0) {
		f->off += (size_t)n;
		if (f->off == f->len)
			close_fd(&f->fd); /* all written: the child sees EOF */
		return;
	}
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n < 0 && errno == EPIPE)
		f->epipe = true;
	close_fd(&f->fd); /* nobody reads stdin any more: the rest is dropped */
}

/*
 * Trims the two streams so that together they fit `budget`, keeping each one's first
 * bytes; a stream under half the budget keeps all of its share.
 */
static void fit_budget(size_t *a, size_t *b, size_t budget)
{
	if (*a + *b <= budget)
		return;
	size_t half = budget / 2;
	if (*a <= half)
		*b = budget - *a;
	else if (*b <= half)
		*a = budget - *b;
	else
		*a = half, *b = budget - half;
}

asp_status asp_local_exec(void *self, const asp_exec_params *p, asp_exec_result *r, asp_arena *a,
                          asp_error *err)
{
	asp_local *l = self;
	memset(r, 0, sizeof *r);
	/*
	 * Holding the write ends of stdout and stderr until the command has exited: its exit
	 * then wakes this thread once (the pidfd), not twice (the pipes' EOF first: the
	 * kernel closes a process's files a few steps before it turns zombie, and 4 in 10
	 * execs of `true` woke for each).
	 */
	local_child_spec spec = {"exec", p->command, p->has_argv, p->argv,
	                         p->cwd, p->has_env, p->env,      .hold_outputs = true};
	if (p->stdin_data.len && !p->stdin_data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "exec: 'stdin' has no bytes");
	uint64_t t0 = local_now_ns();
	local_child c;
	asp_status st = local_child_start(&spec, &c, err);
	if (st != ASP_OK)
		return st;

	size_t keep = p->max_output < l->payload_budget ? (size_t)p->max_output : l->payload_budget;
	struct stream out = {.fd = c.out_fd, .keep = keep};
	struct stream errs = {.fd = c.err_fd, .keep = keep};
	struct feed in = {.fd = c.in_fd, .data = p->stdin_data.data, .len = p->stdin_data.len};
	c.out_fd = c.err_fd = c.in_fd = -1;
	uint8_t *scratch = NULL;
	local_pipe_guard guard = {0};

	if (in.len == 0) {
		close_fd(&in.fd);
	} else {
		local_pipe_guard_on(&guard);
		if (in.len <= PIPE_BUF)
			feed_write(&in); /* fits a fresh pipe at once: no poll round needed */
		else if (fcntl(in.fd, F_SETFL, O_NONBLOCK) < 0)
			close_fd(&in.fd);
	}

	uint64_t timeout = p->timeout_ms < MAX_TIMEOUT_MS ? p->timeout_ms : MAX_TIMEOUT_MS;
	uint64_t term_at = timeout ? t0 + timeout * NS_PER_MS : UINT64_MAX;
	uint64_t kill_at = UINT64_MAX, give_up_at = UINT64_MAX, t_end = 0;
	bool exited = false, timed_out = false, killed = false;
	int backoff_ms = 1;
	for (;;) {
		if (!exited && c.pidfd < 0)
			exited = local_child_exited(&c);
		if (exited)
			local_child_release_outputs(&c); /* from now on EOF can come */
		uint64_t now = local_now_ns();
		if (exited && out.fd < 0 && errs.fd < 0) {
			t_end = now;
			break;
		}
		if (!timed_out && now >= term_at) {
			timed_out = true;
			local_child_signal_tree(&c, SIGTERM);
			kill_at = now + KILL_GRACE_NS;
		}
		if (timed_out && !killed && now >= kill_at) {
			killed = true;
			local_child_signal_tree(&c, SIGKILL);
			give_up_at = now + GIVE_UP_NS;
		}
		if (exited && killed && now >= give_up_at) {
			t_end = now;
			break;
		}

		uint64_t until = !timed_out ? term_at : !killed ? kill_at : give_up_at;
		int ms = local_poll_ms(now, until);
		if (!exited && c.pidfd < 0) {
			/* no pidfd: look for the exit again soon, less often as time goes by */
			if (ms < 0 || ms > backoff_ms)
				ms = backoff_ms;
			if (backoff_ms < 50)
				backoff_ms *= 2;
		}
		struct pollfd pfd[5];
		int n = 0, i_out = -1, i_err = -1, i_in = -1, i_pid = -1, i_watch = -1;
		if (out.fd >= 0)
			i_out = n, pfd[n++] = (struct pollfd){out.fd, POLLIN, 0};
		if (errs.fd >= 0)
			i_err = n, pfd[n++] = (struct pollfd){errs.fd, POLLIN, 0};
		if (in.fd >= 0)
			i_in = n, pfd[n++] = (struct pollfd){in.fd, POLLOUT, 0};
		if (!exited && c.pidfd >= 0)
			i_pid = n, pfd[n++] = (struct pollfd){c.pidfd, POLLIN, 0};
		if (watch.fd >= 0)
			i_watch = n, pfd[n++] = (struct pollfd){watch.fd, POLLIN, 0};
		if (poll(pfd, (nfds_t)n, ms) <= 0)
			continue; /* timer or EINTR: the checks above run again */
		if (i_watch >= 0 && pfd[i_watch].revents) {
			asp_local_watch w = watch;
			watch.fd = -1; /* once */
			w.ready(w.ctx);
		}
		if (i_out >= 0 && pfd[i_out].revents)
			stream_read(&out, &scratch);
		if (i_err >= 0 && pfd[i_err].revents)
			stream_read(&errs, &scratch);
		if (i_in >= 0 && pfd[i_in].revents)
			feed_write(&in);
		if (i_pid >= 0 && pfd[i_pid].revents)
			exited = true;
	}
	if (timed_out)
		local_child_signal_tree(&c, SIGKILL); /* nothing it started survives a timeout */
	close_fd(&in.fd);
	close_fd(&out.fd);
	close_fd(&errs.fd);
	int status = local_child_reap(&c);
	local_child_close(&c);
	if (in.len)
		local_pipe_guard_off(&guard, in.epipe);
	free(scratch);

	r->timed_out = timed_out;
	r->duration_ms = (t_end - t0) / NS_PER_MS;
	r->stdout_bytes = out.total;
	r->stderr_bytes = errs.total;
	r->exit_code = -1;
	if (status != -1 && WIFEXITED(status)) {
		r->exit_code = WEXITSTATUS(status);
	} else if (status != -1 && WIFSIGNALED(status)) {
		char buf[16];
		const char *name = local_signal_name(WTERMSIG(status), buf);
		r->signal = asp_arena_strndup(a, name, strlen(name));
		if (!r->signal)
			st = ASP_E_INTERNAL;
	}
	fit_budget(&out.len, &errs.len, l->payload_budget);
	if (local_bytes_give(a, out.buf, out.len, out.cap, &r->stdout_data) < 0)
		st = ASP_E_INTERNAL;
	if (local_bytes_give(a, errs.buf, errs.len, errs.cap, &r->stderr_data) < 0)
		st = ASP_E_INTERNAL;
	if (st != ASP_OK)
		return local_oom("exec", err);
	return ASP_OK;
}
