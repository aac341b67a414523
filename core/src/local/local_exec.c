/*
 * exec: run one child to completion, feeding stdin and draining stdout/stderr in one
 * poll loop (so large input and large output cannot deadlock), with the timeout's
 * TERM-then-KILL to the whole process group.
 */
#include "local_exec.h"

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
static void stream_read(struct local_stream *s, uint8_t **scratch)
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

static void feed_write(struct local_feed *f)
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

asp_status local_exec_begin(asp_local *l, const asp_exec_params *p,
                            bool (*path_ok)(void *ctx, const char *path), void *ctx,
                            local_exec_run *x, asp_error *err)
{
	memset(x, 0, sizeof *x);
	x->l = l;
	/*
	 * Holding the write ends of stdout and stderr until the command has exited: its exit
	 * then wakes this thread once (the pidfd), not twice (the pipes' EOF first: the
	 * kernel closes a process's files a few steps before it turns zombie, and 4 in 10
	 * execs of `true` woke for each).
	 */
	local_child_spec spec = {
	    "exec", p->command,           p->has_argv,        p->argv,        p->cwd, p->has_env,
	    p->env, .hold_outputs = true, .path_ok = path_ok, .path_ctx = ctx};
	if (p->stdin_data.len && !p->stdin_data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "exec: 'stdin' has no bytes");
	x->t0 = local_now_ns();
	asp_status st = local_child_start(&spec, &x->c, err);
	if (st != ASP_OK)
		return st;

	size_t keep = p->max_output < l->payload_budget ? (size_t)p->max_output : l->payload_budget;
	x->out = (struct local_stream){.fd = x->c.out_fd, .keep = keep};
	x->errs = (struct local_stream){.fd = x->c.err_fd, .keep = keep};
	x->in = (struct local_feed){
	    .fd = x->c.in_fd, .data = p->stdin_data.data, .len = p->stdin_data.len};
	x->c.out_fd = x->c.err_fd = x->c.in_fd = -1;

	if (x->in.len == 0) {
		close_fd(&x->in.fd);
	} else {
		local_pipe_guard_on(&x->guard);
		if (x->in.len <= PIPE_BUF)
			feed_write(&x->in); /* fits a fresh pipe at once: no poll round needed */
		else if (fcntl(x->in.fd, F_SETFL, O_NONBLOCK) < 0)
			close_fd(&x->in.fd);
	}

	uint64_t timeout = p->timeout_ms < MAX_TIMEOUT_MS ? p->timeout_ms : MAX_TIMEOUT_MS;
	x->term_at = timeout ? x->t0 + timeout * NS_PER_MS : UINT64_MAX;
	x->kill_at = x->give_up_at = UINT64_MAX;
	x->backoff_ms = 1;
	return ASP_OK;
}

static uint64_t next_due(const local_exec_run *x)
{
	return !x->timed_out ? x->term_at : !x->killed ? x->kill_at : x->give_up_at;
}

int local_exec_due_ms(const local_exec_run *x)
{
	int ms = local_poll_ms(local_now_ns(), next_due(x));
	if (!x->exited && x->c.pidfd < 0 && (ms < 0 || ms > x->backoff_ms))
		ms = x->backoff_ms; /* no pidfd: look for the exit again soon */
	return ms;
}

bool local_exec_pass(local_exec_run *x, bool block)
{
	local_child *c = &x->c;
	if (!x->exited && c->pidfd < 0)
		x->exited = local_child_exited(c);
	if (x->exited)
		local_child_release_outputs(c); /* from now on EOF can come */
	uint64_t now = local_now_ns();
	if (x->exited && x->out.fd < 0 && x->errs.fd < 0) {
		x->t_end = now;
		return true;
	}
	if (!x->timed_out && now >= x->term_at) {
		x->timed_out = true;
		local_child_signal_tree(c, SIGTERM);
		x->kill_at = now + KILL_GRACE_NS;
	}
	if (x->timed_out && !x->killed && now >= x->kill_at) {
		x->killed = true;
		local_child_signal_tree(c, SIGKILL);
		x->give_up_at = now + GIVE_UP_NS;
	}
	if (x->exited && x->killed && now >= x->give_up_at) {
		x->t_end = now;
		return true;
	}

	int ms = local_poll_ms(now, next_due(x));
	if (!x->exited && c->pidfd < 0) {
		/* no pidfd: look for the exit again soon, less often as time goes by */
		if (ms < 0 || ms > x->backoff_ms)
			ms = x->backoff_ms;
		if (x->backoff_ms < 50)
			x->backoff_ms *= 2;
	}
	if (!block)
		ms = 0;
	struct pollfd pfd[5];
	int n = 0, i_out = -1, i_err = -1, i_in = -1, i_pid = -1, i_watch = -1;
	if (x->out.fd >= 0)
		i_out = n, pfd[n++] = (struct pollfd){x->out.fd, POLLIN, 0};
	if (x->errs.fd >= 0)
		i_err = n, pfd[n++] = (struct pollfd){x->errs.fd, POLLIN, 0};
	if (x->in.fd >= 0)
		i_in = n, pfd[n++] = (struct pollfd){x->in.fd, POLLOUT, 0};
	if (!x->exited && c->pidfd >= 0)
		i_pid = n, pfd[n++] = (struct pollfd){c->pidfd, POLLIN, 0};
	if (block && watch.fd >= 0)
		i_watch = n, pfd[n++] = (struct pollfd){watch.fd, POLLIN, 0};
	if (poll(pfd, (nfds_t)n, ms) <= 0)
		return false; /* timer or EINTR: the checks above run again */
	if (i_watch >= 0 && pfd[i_watch].revents) {
		asp_local_watch w = watch;
		watch.fd = -1; /* once */
		w.ready(w.ctx);
	}
	if (i_out >= 0 && pfd[i_out].revents)
		stream_read(&x->out, &x->scratch);
	if (i_err >= 0 && pfd[i_err].revents)
		stream_read(&x->errs, &x->scratch);
	if (i_in >= 0 && pfd[i_in].revents)
		feed_write(&x->in);
	if (i_pid >= 0 && pfd[i_pid].revents)
		x->exited = true;
	return false;
}

asp_status local_exec_end(local_exec_run *x, asp_exec_result *r, asp_arena *a, asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = ASP_OK;
	if (x->timed_out)
		local_child_signal_tree(&x->c, SIGKILL); /* nothing it started survives a timeout */
	close_fd(&x->in.fd);
	close_fd(&x->out.fd);
	close_fd(&x->errs.fd);
	int status = local_child_reap(&x->c);
	local_child_close(&x->c);
	if (x->in.len)
		local_pipe_guard_off(&x->guard, x->in.epipe);
	free(x->scratch);
	x->scratch = NULL;
	if (!x->t_end)
		x->t_end = local_now_ns();

	r->timed_out = x->timed_out;
	r->duration_ms = (x->t_end - x->t0) / NS_PER_MS;
	r->stdout_bytes = x->out.total;
	r->stderr_bytes = x->errs.total;
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
	fit_budget(&x->out.len, &x->errs.len, x->l->payload_budget);
	if (local_bytes_give(a, x->out.buf, x->out.len, x->out.cap, &r->stdout_data) < 0)
		st = ASP_E_INTERNAL;
	if (local_bytes_give(a, x->errs.buf, x->errs.len, x->errs.cap, &r->stderr_data) < 0)
		st = ASP_E_INTERNAL;
	x->out.buf = x->errs.buf = NULL;
	if (st != ASP_OK)
		return local_oom("exec", err);
	return ASP_OK;
}

asp_status asp_local_exec(void *self, const asp_exec_params *p, asp_exec_result *r, asp_arena *a,
                          asp_error *err)
{
	local_exec_run x;
	memset(r, 0, sizeof *r);
	asp_status st = local_exec_begin(self, p, NULL, NULL, &x, err);
	if (st != ASP_OK)
		return st;
	while (!local_exec_pass(&x, true))
		;
	return local_exec_end(&x, r, a, err);
}
