/*
 * The listener's connections, output queues and worker threads. Workers decode and
 * serve requests with the local backend and queue the answers; the service thread is
 * told with lws_cancel_service and writes them (http_server.c, ws_server.c).
 */
#include "srv.h"

#include "asp/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Workers run the local backend; its deepest path (recursive remove) fits easily. */
#define WORKER_STACK (1024 * 1024)

/*
 * Set on worker threads. A worker's sends (answers, a proc_attach replay) never wait for
 * a slow client: that would let one client hold every worker. Notifications from a
 * process's pump do wait, which is the backpressure asp_conn_sink asks for.
 */
static __thread bool is_worker;

static void *worker_main(void *arg);

/* ---- connections ------------------------------------------------------------------ */

srv_conn *srv_conn_new(srv *s, struct lws *wsi, bool ws)
{
	srv_conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->s = s;
	c->ws = ws;
	c->wsi = wsi;
	atomic_init(&c->refs, 1);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->out_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (ws) /* an HTTP request logs its peer rarely: looked up then (a syscall saved) */
		lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
	c->next = s->live;
	if (s->live)
		s->live->prev = c;
	s->live = c;
	return c;
}

static void out_free(srv_out *o)
{
	free(o->data);
	free(o);
}

void srv_conn_unref(srv_conn *c)
{
	if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	/* No job and no sink call can be inside it any more: the binding can go. */
	if (c->bound)
		asp_local_disconnect(c->bound);
	for (srv_out *o = c->out_head, *n; o; o = n) {
		n = o->next;
		out_free(o);
	}
	pthread_cond_destroy(&c->out_cv);
	free(c->rx);
	free(c);
}

void srv_conn_detach(srv_conn *c)
{
	srv *s = c->s;
	if (!c->wsi)
		return;
	c->wsi = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		s->live = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	pthread_mutex_lock(&s->mu);
	c->gone = true;
	pthread_cond_broadcast(&c->out_cv); /* a sink waiting for room gives up */
	if (c->ws && c->inflight > c->running)
		pthread_cond_broadcast(&s->work_cv); /* its parked requests are dropped */
	pthread_mutex_unlock(&s->mu);
	srv_conn_unref(c);
}

/* Under mu. Puts `c` on the ready list (one reference) unless it is there. */
static void make_ready_locked(srv_conn *c)
{
	if (c->on_ready)
		return;
	c->on_ready = true;
	atomic_fetch_add(&c->refs, 1);
	c->ready_next = c->s->ready;
	c->s->ready = c;
}

/* Under mu. */
static void push_out_locked(srv_conn *c, srv_out *o)
{
	o->next = NULL;
	if (c->out_tail)
		c->out_tail->next = o;
	else
		c->out_head = o;
	c->out_tail = o;
	c->out_bytes += o->len - o->off;
	make_ready_locked(c);
}

srv_out *srv_out_peek(srv_conn *c)
{
	pthread_mutex_lock(&c->s->mu);
	srv_out *o = c->out_head;
	pthread_mutex_unlock(&c->s->mu);
	return o;
}

void srv_out_pop(srv_conn *c)
{
	pthread_mutex_lock(&c->s->mu);
	srv_out *o = c->out_head;
	if (o) {
		size_t before = c->out_bytes;
		c->out_head = o->next;
		if (!c->out_head)
			c->out_tail = NULL;
		c->out_bytes -= o->len - o->off; /* off was left where it was queued */
		pthread_cond_broadcast(&c->out_cv);
		/*
		 * Its parked requests may run now. Only then: waking every idle worker on each
		 * answer written makes them fight for mu with the worker that has a job.
		 */
		if (c->ws && before > SRV_OUT_HIGH && c->out_bytes <= SRV_OUT_HIGH &&
		    c->inflight > c->running)
			pthread_cond_broadcast(&c->s->work_cv);
	}
	pthread_mutex_unlock(&c->s->mu);
	if (o)
		out_free(o);
}

int srv_close_code(srv_conn *c)
{
	pthread_mutex_lock(&c->s->mu);
	int code = c->close_code;
	pthread_mutex_unlock(&c->s->mu);
	return code;
}

bool srv_respond(srv_conn *c, const srv_out *head, const void *body, size_t len)
{
	srv_out *o = malloc(sizeof *o);
	uint8_t *d = malloc(len ? len : 1);
	if (!o || !d) {
		free(o);
		free(d);
		return false;
	}
	*o = *head;
	memcpy(d, body, len);
	o->data = d;
	o->off = o->sent = 0;
	o->len = len;
	o->started = false;
	pthread_mutex_lock(&c->s->mu);
	push_out_locked(c, o);
	pthread_mutex_unlock(&c->s->mu);
	if (c->ws)
		lws_callback_on_writable(c->wsi); /* we are the service thread */
	else
		srv_wake(c->s); /* written from srv_drain_ready: see http_server.c's http_kick */
	return true;
}

/* ---- the sink: notifications from the backend to a WebSocket ---------------------- */

/*
 * Called from any backend thread with a whole frame. Waits while the client is behind
 * (that backpressure keeps a process's pipe unread); false once the connection is gone.
 */
static bool sink_send(void *ctx, const uint8_t *frame, size_t len)
{
	srv_conn *c = ctx;
	srv *s = c->s;
	if (len < 4)
		return true;
	srv_out *o = calloc(1, sizeof *o);
	uint8_t *d = malloc(len - 4);
	if (!o || !d) {
		free(o);
		free(d);
		return false;
	}
	memcpy(d, frame + 4, len - 4);
	o->data = d;
	o->len = len - 4;
	pthread_mutex_lock(&s->mu);
	while (!is_worker && !c->gone && !c->close_code && c->out_bytes > SRV_SINK_HIGH) {
		struct timespec ts; /* bounded waits: a lost wake-up costs a second, not forever */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&c->out_cv, &s->mu, &ts);
	}
	bool ok = !c->gone && !c->close_code;
	if (ok)
		push_out_locked(c, o);
	pthread_mutex_unlock(&s->mu);
	if (!ok) {
		out_free(o);
		return false;
	}
	srv_wake(s);
	return true;
}

int srv_backend_init(srv *s)
{
	asp_local_set_shared(s->backend, true); /* every connection reaches every process */
	s->http_bound = asp_local_connect(s->backend, NULL);
	if (!s->http_bound) {
		asp_server_log("asp-agent: out of memory");
		return 1;
	}
	return 0;
}

bool srv_backend_free(srv *s)
{
	/* Spawned processes end with the responder (TERM, KILL 2 s later):
	 * docs/design.md, "Concurrency and lifetime". */
	bool ended = asp_local_shutdown(s->backend);
	asp_local_disconnect(s->http_bound);
	if (ended)
		asp_local_free(s->backend);
	return ended;
}

bool srv_conn_bind(srv_conn *c)
{
	asp_conn_sink sink = {.send = sink_send, .ctx = c};
	c->bound = asp_local_connect(c->s->backend, &sink);
	return c->bound != NULL;
}

/* ---- jobs and workers ------------------------------------------------------------- */

bool srv_submit(srv_conn *c, uint8_t *msg, size_t len, asp_request *req)
{
	srv *s = c->s;
	srv_job *j = malloc(sizeof *j);
	if (!j) {
		free(msg);
		asp_request_free(req);
		return false;
	}
	j->next = NULL;
	j->msg = msg;
	j->len = len;
	j->req = req;
	j->c = c;
	atomic_fetch_add(&c->refs, 1);
	pthread_mutex_lock(&s->mu);
	c->inflight++;
	if (s->jobs_tail)
		s->jobs_tail->next = j;
	else
		s->jobs_head = j;
	s->jobs_tail = j;
	s->queued++;
	/* Someone must pick it up: an idle worker, or a new one while there is room. */
	if (s->idle > s->wakeups) {
		s->wakeups++;
		pthread_cond_signal(&s->work_cv);
	} else if (s->nworkers < SRV_MAX_WORKERS) {
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, WORKER_STACK);
		if (pthread_create(&s->workers[s->nworkers], &attr, worker_main, s) == 0)
			s->nworkers++;
		else if (s->nworkers == 0)
			asp_server_log("asp-agent: cannot start a worker thread: %s",
			               strerror(errno));
		pthread_attr_destroy(&attr);
	}
	pthread_mutex_unlock(&s->mu);
	return true;
}

/* An HTTP answer for a message that is no request (400) or could not be served. */
static srv_out *text_out(int status, const char *fmt, const char *detail)
{
	srv_out *o = calloc(1, sizeof *o);
	char *d = malloc(ASP_ERROR_MESSAGE_MAX + 64);
	if (!o || !d) {
		free(o);
		free(d);
		return NULL;
	}
	int n = snprintf(d, ASP_ERROR_MESSAGE_MAX + 64, fmt, detail);
	o->data = (uint8_t *)d;
	o->len = n < 0                            ? 0
	         : n < ASP_ERROR_MESSAGE_MAX + 64 ? (size_t)n
	                                          : ASP_ERROR_MESSAGE_MAX + 63;
	o->status = status;
	o->ctype = "text/plain; charset=utf-8";
	return o;
}

/*
 * Marks a connection to be closed instead of written to: a WebSocket with `code`, an
 * HTTP request that could not even be given an error answer (out of memory).
 */
static void ws_fail(srv_conn *c, int code)
{
	pthread_mutex_lock(&c->s->mu);
	if (!c->close_code)
		c->close_code = code;
	make_ready_locked(c);
	pthread_mutex_unlock(&c->s->mu);
}

/*
 * Serves one request. An HTTP request's answer is returned; a WebSocket's goes through
 * its sink (in order with the notifications it allows) and NULL is returned.
 */
static srv_out *serve(srv *s, srv_job *j, asp_reply *out)
{
	srv_conn *c = j->c;
	asp_error err;
	asp_error_clear(&err);
	asp_request *r = j->req; /* made on the service thread, or from the message here */
	j->req = NULL;
	if (!r)
		asp_request_new(j->msg, j->len, &r, NULL, &err); /* takes the message */
	j->msg = NULL;
	if (!r || (asp_request_decode(r, &err) && !asp_request_has_id(r))) {
		/* Undecodable: 400 over HTTP; a WebSocket closes (1002) without writing. */
		asp_request_free(r);
		if (!c->ws)
			return text_out(400, "protocol_error: %s\n", err.message);
		asp_server_log("asp-agent: %s: protocol_error: %s; closing the WebSocket", c->peer,
		               err.message);
		ws_fail(c, LWS_CLOSE_STATUS_PROTOCOL_ERR);
		return NULL;
	}
	/* A request with an id but wrong params gets its error answer; the connection stays. */
	asp_serve_result rc =
	    out ? asp_local_serve(c->ws ? c->bound : s->http_bound, r, out) : ASP_SERVE_FAILED;
	asp_request_free(r);
	if (c->ws) {
		if (rc == ASP_SERVE_FAILED)
			ws_fail(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION);
		if (out)
			asp_reply_trim(out, SRV_CHUNK); /* a large answer's buffer is not kept */
		return NULL;
	}
	return srv_out_of_reply(rc, out);
}

srv_out *srv_out_of_reply(asp_serve_result rc, asp_reply *out)
{
	size_t len = 0;
	uint8_t *frame = rc == ASP_SERVE_REPLY ? asp_reply_take(out, &len) : NULL;
	srv_out *o = frame ? calloc(1, sizeof *o) : NULL;
	if (!o) {
		free(frame);
		if (out)
			asp_reply_trim(out, 0);
		return text_out(500, "internal: %s\n", "out of memory");
	}
	/* The frame's buffer becomes the answer; its 4-byte length is skipped. */
	o->data = frame;
	o->off = ASP_FRAME_HEADER;
	o->len = len;
	o->status = 200;
	o->ctype = "application/msgpack";
	return o;
}

void srv_push_answer(srv_conn *c, srv_out *o)
{
	pthread_mutex_lock(&c->s->mu);
	if (!c->gone)
		push_out_locked(c, o);
	else
		out_free(o);
	pthread_mutex_unlock(&c->s->mu);
}

/* ---- serving on the service thread ------------------------------------------------- */

/*
 * A small POST stat, read, write or hello is served on the service thread: handing it
 * to a worker and its answer back costs two thread wake-ups, most of such a call's time
 * on a busy machine (docs/benchmarks.md). The service thread must never wait for long,
 * though: every connection waits with it. The backend already never waits on a fifo
 * (O_NONBLOCK), so what remains is the filesystem: only a path whose mount is a local
 * filesystem (by /proc/self/mountinfo, re-read when it changes) is served here; network
 * and FUSE mounts, which can hang, relative paths and paths with ".." go to a worker, as
 * do atomic writes (fsync), requests over SRV_INLINE_MAX and reads of anything but a
 * regular file of at most SRV_INLINE_READ, and paths through a symlink, which may lead
 * into a network mount. The request is decoded once, here; a worker gets it decoded.
 */

/* Filesystems whose calls take bounded time (no network, no user-space server). */
static const char *const local_fs[] = {"ext2",  "ext3",    "ext4",  "xfs", "btrfs",    "tmpfs",
                                       "ramfs", "overlay", "f2fs",  "zfs", "bcachefs", "squashfs",
                                       "erofs", "vfat",    "exfat", "jfs", "reiserfs"};

/*
 * And the kernel's own, which no disk or server backs: a path may lead through them (an
 * exec's cwd or PATH lookup) without a wait that could last, though reading their files
 * (a /proc file that blocks) is another matter.
 */
static const char *const kernel_fs[] = {
    "proc",       "sysfs",   "devtmpfs", "devpts",    "cgroup",     "cgroup2",   "mqueue",
    "securityfs", "debugfs", "tracefs",  "pstore",    "bpf",        "hugetlbfs", "configfs",
    "fusectl",    "nsfs",    "efivarfs", "selinuxfs", "binfmt_misc"};

static bool named_in(const char *type, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(type, names[i]))
			return true;
	return false;
}

struct srv_mount {
	char *dir;
	size_t len;
	bool local;
};

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

static void mounts_clear(srv *s)
{
	s->mounts_bounded = false;
	for (size_t i = 0; i < s->n_mounts; i++)
		free(s->mounts[i].dir);
	free(s->mounts);
	s->mounts = NULL;
	s->n_mounts = 0;
}

/* Reads the mount table; on any failure there is none, and nothing is served inline. */
static void mounts_load(srv *s)
{
	mounts_clear(s);
	if (s->mountinfo_fd < 0 || lseek(s->mountinfo_fd, 0, SEEK_SET) < 0)
		return;
	FILE *f = fdopen(dup(s->mountinfo_fd), "r");
	if (!f)
		return;
	char *line = NULL;
	size_t cap = 0, n = 0, room = 0;
	struct srv_mount *m = NULL;
	bool ok = true, bounded = true;
	while (ok && getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint options [optional...] - fstype source ... */
		char *save = NULL, *dir = NULL, *type = NULL;
		int field = 0;
		bool dash = false;
		for (char *t = strtok_r(line, " \n", &save); t; t = strtok_r(NULL, " \n", &save)) {
			if (++field == 5)
				dir = t;
			else if (dash) {
				type = t;
				break;
			} else if (field > 6 && !strcmp(t, "-"))
				dash = true;
		}
		if (!dir || !type)
			continue;
		if (n == room) {
			room = room ? 2 * room : 32;
			struct srv_mount *g = realloc(m, room * sizeof *m);
			if (!g) {
				ok = false;
				break;
			}
			m = g;
		}
		unescape(dir);
		m[n].dir = strdup(dir);
		if (!m[n].dir) {
			ok = false;
			break;
		}
		m[n].len = strlen(dir);
		m[n].local = named_in(type, local_fs, sizeof local_fs / sizeof local_fs[0]);
		bounded =
		    bounded && (m[n].local ||
		                named_in(type, kernel_fs, sizeof kernel_fs / sizeof kernel_fs[0]));
		n++;
	}
	free(line);
	fclose(f);
	s->mounts = m;
	s->n_mounts = n;
	s->mounts_bounded = ok && n > 0 && bounded;
	if (!ok)
		mounts_clear(s);
}

/* The kernel flags the table as changed (POLLPRI) after a mount or an unmount. */
static void mounts_fresh(srv *s)
{
	struct pollfd pfd = {.fd = s->mountinfo_fd, .events = POLLPRI};
	if (s->mountinfo_fd >= 0 && poll(&pfd, 1, 0) > 0)
		mounts_load(s);
}

bool srv_mounts_bounded(srv *s)
{
	mounts_fresh(s);
	return s->mounts_bounded;
}

void srv_inline_init(srv *s)
{
	s->mountinfo_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	mounts_load(s);
}

void srv_inline_free(srv *s)
{
	mounts_clear(s);
	if (s->mountinfo_fd >= 0)
		close(s->mountinfo_fd);
	s->mountinfo_fd = -1;
	asp_reply_free(s->inline_reply);
	s->inline_reply = NULL;
}

/* Whether `path` (absolute, no "..") lies on a local filesystem: its last mount decides. */
static bool path_is_local(srv *s, const char *path)
{
	mounts_fresh(s);
	const struct srv_mount *best = NULL;
	for (size_t i = 0; i < s->n_mounts; i++) {
		const struct srv_mount *m = &s->mounts[i];
		bool under = !strncmp(path, m->dir, m->len) &&
		             (m->len == 1 || path[m->len] == '/' || path[m->len] == '\0');
		/* Later lines are mounted over earlier ones at the same place. */
		if (under && (!best || m->len >= best->len))
			best = m;
	}
	return best && best->local;
}

/*
 * Whether `path` can be resolved without following a symlink, on a local mount: a
 * symlink could lead into a network mount that hangs, which the mount table does not
 * show. O_PATH opens nothing but the name; with `st` (a read), *st is the file.
 */
static bool path_plain(const char *path, struct stat *st)
{
#ifdef SYS_openat2
	struct {
		uint64_t flags, mode, resolve;
	} how = {O_PATH | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
	if (fd < 0)
		return errno == ENOENT; /* nothing there to hang on: not_found, answered here */
	bool ok = !st || fstat(fd, st) == 0;
	close(fd);
	return ok;
#else
	(void)path, (void)st;
	return false; /* no way to refuse symlinks: every file call goes to a worker */
#endif
}

bool srv_inline_ok(srv *s, const asp_request *r)
{
	static const char *const cheap[] = {"stat", "read", "write", "hello"};
	size_t mlen, plen, m = 0;
	const char *method = asp_request_method(r, &mlen), *p;
	while (method && m < sizeof cheap / sizeof cheap[0] &&
	       !(mlen == strlen(cheap[m]) && !memcmp(method, cheap[m], mlen)))
		m++;
	if (!method || m == sizeof cheap / sizeof cheap[0])
		return false;
	if (m == 3)
		return true; /* hello touches no file */
	if (asp_request_param_true(r, "atomic"))
		return false; /* fsync, which may take long */
	char path[1024];
	if (!asp_request_param_str(r, "path", &p, &plen) || plen >= sizeof path ||
	    memchr(p, '\0', plen))
		return false;
	memcpy(path, p, plen);
	path[plen] = '\0';
	struct stat st;
	st.st_mode = 0;
	if (path[0] != '/' || strstr(path, "/..") || !path_is_local(s, path) ||
	    !path_plain(path, m == 1 ? &st : NULL))
		return false;
	/* A read answers the file: only a small regular one here. */
	return m != 1 || (S_ISREG(st.st_mode) && st.st_size <= SRV_INLINE_READ);
}

static srv_out *serve(srv *s, srv_job *j, asp_reply *out);

bool srv_serve_inline(srv_conn *c, asp_request *r)
{
	srv *s = c->s;
	if (!s->inline_reply)
		s->inline_reply = asp_reply_new(); /* NULL: serve answers 500 */
	srv_job j = {.c = c, .req = r};
	srv_out *o = serve(s, &j, s->inline_reply);
	if (s->inline_reply)
		asp_reply_trim(s->inline_reply, SRV_CHUNK);
	if (!o)
		return false;
	srv_push_answer(c, o);
	return true;
}

/*
 * Under mu. Takes the first job whose connection has room for its answer. A WebSocket
 * whose client is not reading keeps its requests queued, not run: a stalled client costs
 * no worker and no more memory than the answers already made.
 */
static srv_job *take_job_locked(srv *s)
{
	srv_job *prev = NULL;
	for (srv_job *j = s->jobs_head; j; prev = j, j = j->next) {
		srv_conn *c = j->c;
		if (c->ws && (c->out_bytes > SRV_OUT_HIGH || c->running >= SRV_WS_RUNNING) &&
		    !c->gone && !c->close_code)
			continue;
		if (prev)
			prev->next = j->next;
		else
			s->jobs_head = j->next;
		if (s->jobs_tail == j)
			s->jobs_tail = prev;
		c->running++;
		return j;
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	srv *s = arg;
	is_worker = true;
	asp_reply *out = asp_reply_new(); /* NULL: every answer is an out-of-memory one */
	pthread_mutex_lock(&s->mu);
	for (;;) {
		srv_job *j;
		while (!(j = take_job_locked(s)) && !(s->workers_stop && !s->jobs_head)) {
			s->idle++;
			pthread_cond_wait(&s->work_cv, &s->mu);
			s->idle--;
			if (s->wakeups > 0) /* this wake-up, or one a broadcast made redundant */
				s->wakeups--;
		}
		if (!j)
			break; /* stopping and nothing left */
		s->queued--;
		s->running++;
		srv_conn *c = j->c;
		bool skip = c->gone || c->close_code;
		pthread_mutex_unlock(&s->mu);

		srv_out *o = skip ? NULL : serve(s, j, out);
		if (!o && !skip && !c->ws)
			ws_fail(
			    c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION); /* no memory for an answer */
		free(j->msg);
		asp_request_free(j->req); /* skipped: serve did not take it */
		free(j);

		pthread_mutex_lock(&s->mu);
		s->running--;
		c->inflight--;
		c->running--;
		if (o && !c->gone)
			push_out_locked(c, o);
		else if (o)
			out_free(o);
		else
			make_ready_locked(c); /* its in-flight count changed: rx may resume */
		pthread_mutex_unlock(&s->mu);
		srv_wake(s);
		srv_conn_unref(c);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	asp_reply_free(out);
	return NULL;
}

int srv_work_init(srv *s)
{
	if (pthread_mutex_init(&s->mu, NULL) || pthread_cond_init(&s->work_cv, NULL))
		return -1;
	return 0;
}

void srv_work_stop(srv *s)
{
	pthread_mutex_lock(&s->mu);
	s->workers_stop = true;
	pthread_cond_broadcast(&s->work_cv);
	unsigned n = s->nworkers;
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = 0; i < n; i++) /* none is created once workers_stop is set */
		pthread_join(s->workers[i], NULL);
	pthread_cond_destroy(&s->work_cv);
	pthread_mutex_destroy(&s->mu);
}

/* ---- the service thread's side ---------------------------------------------------- */

void srv_update_rx(srv_conn *c)
{
	if (!c->wsi || !c->ws)
		return;
	pthread_mutex_lock(&c->s->mu);
	bool full = c->inflight >= SRV_WS_INFLIGHT || c->out_bytes > SRV_OUT_HIGH;
	pthread_mutex_unlock(&c->s->mu);
	if (full != c->rx_paused) {
		c->rx_paused = full;
		lws_rx_flow_control(c->wsi, !full);
	}
}

void srv_wake(srv *s)
{
	pthread_mutex_lock(&s->ctx_mu);
	if (s->ctx)
		lws_cancel_service(s->ctx);
	pthread_mutex_unlock(&s->ctx_mu);
}

void srv_drain_ready(srv *s)
{
	for (;;) {
		/* One at a time: a worker may put `c` back on the list as soon as it is off. */
		pthread_mutex_lock(&s->mu);
		srv_conn *c = s->ready;
		if (c) {
			s->ready = c->ready_next;
			c->ready_next = NULL;
			c->on_ready = false;
		}
		pthread_mutex_unlock(&s->mu);
		if (!c)
			return;
		if (c->wsi && c->ws) {
			srv_update_rx(c);
			lws_callback_on_writable(c->wsi);
		} else if (c->wsi) {
			s->http_kick(c);
		}
		srv_conn_unref(c);
	}
}

/* Under mu. */
static bool workers_busy_locked(const srv *s)
{
	return s->queued > 0 || s->running > 0;
}

bool srv_workers_busy(srv *s)
{
	pthread_mutex_lock(&s->mu);
	bool busy = workers_busy_locked(s);
	pthread_mutex_unlock(&s->mu);
	return busy;
}

bool srv_idle(srv *s)
{
	pthread_mutex_lock(&s->mu);
	bool idle = !workers_busy_locked(s) && !s->execs;
	for (srv_conn *c = s->live; idle && c; c = c->next)
		idle = c->out_head == NULL && c->inflight == 0;
	pthread_mutex_unlock(&s->mu);
	return idle;
}
