/*
 * exec: run one child to completion, feeding stdin and draining stdout/stderr in one
 * poll loop (so large input and large output cannot deadlock), with the timeout's
 * TERM-then-KILL to the whole process group.
 */
#include "edge.h"
#include "local_impl.h"
#include "local_proc.h"
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

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/*
 * A stream's first read goes onto the stack: most commands' output fits, and an EOF
 * allocates nothing (musl unmaps a freed 16 KiB buffer at once: two per exec of a quiet
 * command). The buffer is made for the bytes that came.
 */
#define FIRST_READ 4096

/* The first `n` bytes of a stream that keeps some, read into `first`: into a new buffer. */
static void stream_start(struct stream *s, const uint8_t *first, size_t n)
{
	size_t cap = FIRST_BUF < s->keep ? FIRST_BUF : s->keep;
	s->buf = malloc(cap);
	if (!s->buf) {
		s->keep = 0; /* out of memory: the rest is counted only */
		return;
	}
	s->cap = cap;
	s->len = n < cap ? n : cap;
	memcpy(s->buf, first, s->len);
}

/* One read of what is available. Bytes past `keep` are counted and dropped. */
static void stream_read(struct stream *s, uint8_t **scratch)
{
	uint8_t small[FIRST_READ];
	uint8_t *dst;
	size_t room;
	bool first = s->cap == 0 && s->keep > 0;
	if (!first && s->len < s->keep && s->len == s->cap) {
		size_t ncap = s->cap * 2;
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
	if (first) {
		dst = small;
		room = sizeof small;
	} else if (s->len < s->keep) {
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
		if (first)
			stream_start(s, small, (size_t)n);
		else if (dst == s->buf + s->len)
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

/* One exec: its child, its streams and where its timeout stands. */
typedef struct exec_job {
	local_child c;
	struct stream out, errs;
	struct feed in;
	uint8_t *scratch;
	local_pipe_guard guard;
	size_t payload_budget;
	uint64_t t0, term_at, kill_at, give_up_at, t_end;
	bool exited, timed_out, killed, done;
	int backoff_ms;
} exec_job;

static asp_status job_start(asp_local *l, const asp_exec_params *p, exec_job *j, asp_error *err)
{
	memset(j, 0, sizeof *j);
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
	j->t0 = local_now_ns();
	asp_status st = local_child_start(&spec, &j->c, err);
	if (st != ASP_OK)
		return st;

	size_t keep = p->max_output < l->payload_budget ? (size_t)p->max_output : l->payload_budget;
	j->payload_budget = l->payload_budget;
	j->out = (struct stream){.fd = j->c.out_fd, .keep = keep};
	j->errs = (struct stream){.fd = j->c.err_fd, .keep = keep};
	j->in =
	    (struct feed){.fd = j->c.in_fd, .data = p->stdin_data.data, .len = p->stdin_data.len};
	j->c.out_fd = j->c.err_fd = j->c.in_fd = -1;
	if (j->in.len == 0) {
		close_fd(&j->in.fd);
	} else {
		local_pipe_guard_on(&j->guard);
		if (j->in.len <= PIPE_BUF)
			feed_write(&j->in); /* fits a fresh pipe at once: no poll round needed */
		else if (fcntl(j->in.fd, F_SETFL, O_NONBLOCK) < 0)
			close_fd(&j->in.fd);
	}
	uint64_t timeout = p->timeout_ms < MAX_TIMEOUT_MS ? p->timeout_ms : MAX_TIMEOUT_MS;
	j->term_at = timeout ? j->t0 + timeout * NS_PER_MS : UINT64_MAX;
	j->kill_at = j->give_up_at = UINT64_MAX;
	j->backoff_ms = 1;
	return ASP_OK;
}

/* Moves the job on at `now` (the exit, the timeout's signals); true once it has ended. */
static bool job_tick(exec_job *j, uint64_t now)
{
	if (j->done)
		return true;
	if (!j->exited && j->c.pidfd < 0)
		j->exited = local_child_exited(&j->c);
	if (j->exited)
		local_child_release_outputs(&j->c); /* from now on EOF can come */
	if (j->exited && j->out.fd < 0 && j->errs.fd < 0)
		goto done;
	if (!j->timed_out && now >= j->term_at) {
		j->timed_out = true;
		local_child_signal_tree(&j->c, SIGTERM);
		j->kill_at = now + KILL_GRACE_NS;
	}
	if (j->timed_out && !j->killed && now >= j->kill_at) {
		j->killed = true;
		local_child_signal_tree(&j->c, SIGKILL);
		j->give_up_at = now + GIVE_UP_NS;
	}
	if (j->exited && j->killed && now >= j->give_up_at)
		goto done;
	return false;
done:
	j->t_end = now;
	j->done = true;
	return true;
}

/* When job_tick must run again without an event (UINT64_MAX: only on events). */
static uint64_t job_until(exec_job *j, uint64_t now)
{
	uint64_t until = !j->timed_out ? j->term_at : !j->killed ? j->kill_at : j->give_up_at;
	if (!j->exited && j->c.pidfd < 0) {
		/* no pidfd: look for the exit again soon, less often as time goes by */
		uint64_t soon = now + (uint64_t)j->backoff_ms * NS_PER_MS;
		if (soon < until)
			until = soon;
		if (j->backoff_ms < 50)
			j->backoff_ms *= 2;
	}
	return until;
}

/* The fds the job waits on now (at most EXEC_FDS), with their events. */
#define EXEC_FDS 4
static int job_fds(const exec_job *j, struct pollfd *pfd)
{
	int n = 0;
	if (j->out.fd >= 0)
		pfd[n++] = (struct pollfd){j->out.fd, POLLIN, 0};
	if (j->errs.fd >= 0)
		pfd[n++] = (struct pollfd){j->errs.fd, POLLIN, 0};
	if (j->in.fd >= 0)
		pfd[n++] = (struct pollfd){j->in.fd, POLLOUT, 0};
	if (!j->exited && j->c.pidfd >= 0)
		pfd[n++] = (struct pollfd){j->c.pidfd, POLLIN, 0};
	return n;
}

/* Serves what `pfd` (from job_fds, revents filled) says is ready. */
static void job_serve(exec_job *j, const struct pollfd *pfd, int n)
{
	for (int i = 0; i < n; i++) {
		if (!pfd[i].revents)
			continue;
		int fd = pfd[i].fd;
		if (fd == j->out.fd)
			stream_read(&j->out, &j->scratch);
		else if (fd == j->errs.fd)
			stream_read(&j->errs, &j->scratch);
		else if (fd == j->in.fd)
			feed_write(&j->in);
		else if (fd == j->c.pidfd && !j->exited)
			j->exited = true;
	}
}

/* Reaps the child, fills `r` and frees what the job holds. */
static asp_status job_end(exec_job *j, asp_exec_result *r, asp_arena *a, asp_error *err)
{
	asp_status st = ASP_OK;
	memset(r, 0, sizeof *r);
	if (j->timed_out || !j->done)
		local_child_signal_tree(&j->c, SIGKILL); /* nothing it started survives a timeout */
	close_fd(&j->in.fd);
	close_fd(&j->out.fd);
	close_fd(&j->errs.fd);
	int status = local_child_reap(&j->c);
	local_child_close(&j->c);
	if (j->in.len)
		local_pipe_guard_off(&j->guard, j->in.epipe);
	free(j->scratch);
	j->scratch = NULL;
	if (!j->done)
		j->t_end = local_now_ns();

	r->timed_out = j->timed_out;
	r->duration_ms = (j->t_end - j->t0) / NS_PER_MS;
	r->stdout_bytes = j->out.total;
	r->stderr_bytes = j->errs.total;
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
	fit_budget(&j->out.len, &j->errs.len, j->payload_budget);
	if (local_bytes_give(a, j->out.buf, j->out.len, j->out.cap, &r->stdout_data) < 0)
		st = ASP_E_INTERNAL;
	if (local_bytes_give(a, j->errs.buf, j->errs.len, j->errs.cap, &r->stderr_data) < 0)
		st = ASP_E_INTERNAL;
	j->out.buf = j->errs.buf = NULL;
	if (st != ASP_OK)
		return local_oom("exec", err);
	return ASP_OK;
}

asp_status asp_local_exec(void *self, const asp_exec_params *p, asp_exec_result *r, asp_arena *a,
                          asp_error *err)
{
	exec_job j;
	asp_status st = job_start(self, p, &j, err);
	if (st != ASP_OK) {
		memset(r, 0, sizeof *r);
		return st;
	}
	for (;;) {
		uint64_t now = local_now_ns();
		if (job_tick(&j, now))
			break;
		struct pollfd pfd[EXEC_FDS + 1];
		int nj = job_fds(&j, pfd), n = nj, i_watch = -1;
		int ms = local_poll_ms(now, job_until(&j, now));
		const asp_local_watch *watch = local_watch_current();
		if (watch)
			i_watch = n, pfd[n++] = (struct pollfd){watch->fd, POLLIN, 0};
		if (poll(pfd, (nfds_t)n, ms) <= 0)
			continue; /* timer or EINTR: the checks above run again */
		if (i_watch >= 0 && pfd[i_watch].revents) {
			asp_local_watch w = *watch;
			local_watch_clear(); /* once */
			w.ready(w.ctx);
		}
		job_serve(&j, pfd, nj);
	}
	return job_end(&j, r, a, err);
}

/* ---- an exec driven by a server's event loop (asp/server.h) ----------------------- */

struct asp_local_exec_job {
	exec_job j;
	asp_arena *a; /* the params, the result */
	asp_exec_result *r;
	const asp_op_desc *d;
	uint32_t id;
	size_t max_message;
};

asp_serve_result asp_local_exec_begin(asp_local_conn *c, asp_request *r, asp_reply *b,
                                      asp_local_exec_job **out)
{
	*out = NULL;
	const asp_msg *m = c->has_sink ? NULL : asp_request_msg(r);
	int op = m ? asp_op_lookup(m->method, m->method_len) : -1;
	if (op != ASP_OP_EXEC)
		return asp_local_serve(c, r, b); /* not an exec for us: served as any request */
	asp_local_exec_job *x = calloc(1, sizeof *x);
	asp_arena *a = x ? asp_arena_new() : NULL;
	asp_exec_params *p = a ? asp_arena_alloc(a, sizeof *p) : NULL;
	if (p)
		x->r = asp_arena_alloc(a, sizeof *x->r);
	if (!p || !x->r) {
		asp_arena_free(a);
		free(x);
		return asp_local_serve(c, r, b); /* answers the out of memory itself */
	}
	x->a = a;
	x->d = &asp_op_descs[op];
	x->id = m->id;
	x->max_message = c->l->max_message;
	asp_error err;
	asp_error_clear(&err);
	asp_status st = asp_dispatch_params(x->d, m, p, a, &err);
	if (!st && p->stdin_data.len > PIPE_BUF) {
		st = asp_local_exec(c->l, p, x->r, a, &err); /* feeding it takes polls: here */
	} else if (!st) {
		st = job_start(c->l, p, &x->j, &err);
		if (!st) {
			if (x->j.in.len) /* written at once (or refused): the SIGPIPE guard ends */
				local_pipe_guard_off(&x->j.guard, x->j.in.epipe);
			x->j.in.len = 0;
			*out = x;
			return ASP_SERVE_RUNNING;
		}
	}
	asp_buf *buf = asp_reply_buf(b);
	asp_dispatch_answer(buf, x->id, x->d, x->r, st, &err, x->max_message);
	asp_arena_free(a);
	free(x);
	return buf->len > ASP_FRAME_HEADER ? ASP_SERVE_REPLY : ASP_SERVE_FAILED;
}

int asp_local_exec_wants(asp_local_exec_job *x, struct pollfd *pfd, uint64_t *until)
{
	*until = x->j.done ? 0 : job_until(&x->j, local_now_ns());
	return x->j.done ? 0 : job_fds(&x->j, pfd);
}

bool asp_local_exec_step(asp_local_exec_job *x, const struct pollfd *pfd, int n)
{
	job_serve(&x->j, pfd, n);
	/*
	 * After the exit the pipes' EOF is due at once (the job held their write ends till
	 * then): read it here rather than on another turn of the caller's loop. A few
	 * rounds at most: a process the command left behind may still be writing.
	 */
	for (int round = 0; round < 4; round++) {
		if (job_tick(&x->j, local_now_ns()) || !x->j.exited)
			return x->j.done;
		struct pollfd now[EXEC_FDS];
		int k = job_fds(&x->j, now);
		if (k == 0 || poll(now, (nfds_t)k, 0) <= 0)
			return false;
		job_serve(&x->j, now, k);
	}
	return job_tick(&x->j, local_now_ns());
}

asp_serve_result asp_local_exec_end(asp_local_exec_job *x, asp_reply *b)
{
	asp_error err;
	asp_error_clear(&err);
	asp_status st = job_end(&x->j, x->r, x->a, &err);
	asp_buf *buf = asp_reply_buf(b);
	asp_dispatch_answer(buf, x->id, x->d, x->r, st, &err, x->max_message);
	asp_arena_free(x->a);
	free(x);
	return buf->len > ASP_FRAME_HEADER ? ASP_SERVE_REPLY : ASP_SERVE_FAILED;
}
