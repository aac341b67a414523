/* A lost connection with each kind of stream open (lost_conn.h). */
#include "lost_conn.h"
#include "testproc.h"

#include <CUnit/CUnit.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Generous bounds for a loaded 2-core machine: each is a wait on a condition. */
#define UP_MS   20000 /* a stream to start flowing */
#define LOST_MS 20000 /* the loss to reach a follower or a call in flight */

static const char *const kind_names[LOST_KINDS] = {"spawn", "tty",  "connect",
                                                   "watch", "exec", "proc_wait"};

const char *lost_kind_name(lost_kind k)
{
	return (unsigned)k < LOST_KINDS ? kind_names[k] : "?";
}

/* ---- a follower ------------------------------------------------------------------- */

typedef struct fol {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char out[4096];
	size_t len;
	unsigned events; /* fs_events */
	bool exited, lost;
	asp_status lost_code;
	char lost_msg[1024];
} fol;

static void fol_init(fol *f)
{
	memset(f, 0, sizeof *f);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
}

static void fol_destroy(fol *f)
{
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
}

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc, (void)stream, (void)offset;
	fol *f = user;
	pthread_mutex_lock(&f->mu);
	size_t n = sizeof f->out - 1 - f->len;
	if (n > len)
		n = len;
	memcpy(f->out + f->len, data, n);
	f->len += n;
	f->out[f->len] = '\0';
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	(void)ev;
	fol *f = user;
	pthread_mutex_lock(&f->mu);
	f->exited = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	fol *f = user;
	pthread_mutex_lock(&f->mu);
	f->lost = true;
	f->lost_code = err->code;
	snprintf(f->lost_msg, sizeof f->lost_msg, "%s", err->message);
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void on_fs(void *user, const asp_fs_event_event *ev)
{
	(void)ev;
	fol *f = user;
	pthread_mutex_lock(&f->mu);
	f->events++;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static const asp_proc_callbacks fol_cb = {
    .on_output = on_output,
    .on_exit = on_exit_ev,
    .on_lost = on_lost,
    .on_fs_event = on_fs,
};

/* Waits (under f->mu) until `cond` or `ms` passed; its value then. */
#define FOL_WAIT(f, cond, ms)                                                                      \
	({                                                                                         \
		int64_t until_ = t_now_ms() + (ms);                                                \
		pthread_mutex_lock(&(f)->mu);                                                      \
		while (!(cond) && t_now_ms() < until_) {                                           \
			struct timespec ts_;                                                       \
			clock_gettime(CLOCK_REALTIME, &ts_);                                       \
			ts_.tv_nsec += 20 * 1000000;                                               \
			if (ts_.tv_nsec >= 1000000000) {                                           \
				ts_.tv_sec++;                                                      \
				ts_.tv_nsec -= 1000000000;                                         \
			}                                                                          \
			pthread_cond_timedwait(&(f)->cv, &(f)->mu, &ts_);                          \
		}                                                                                  \
		bool ok_ = (cond);                                                                 \
		pthread_mutex_unlock(&(f)->mu);                                                    \
		ok_;                                                                               \
	})

/* ---- a TCP echo server in this process (what connect reaches) ---------------------- */

typedef struct echo_srv {
	int fd;
	int port;
	pthread_t th;
} echo_srv;

static void *echo_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[4096];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		if (t_write_all(fd, buf, (size_t)n) < 0)
			break;
	close(fd);
	return NULL;
}

static void *echo_accept(void *arg)
{
	echo_srv *s = arg;
	for (;;) {
		int fd = accept(s->fd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return NULL; /* shut down */
		}
		pthread_t th;
		if (pthread_create(&th, NULL, echo_conn, (void *)(intptr_t)fd) == 0)
			pthread_detach(th);
		else
			close(fd);
	}
}

static int echo_start(echo_srv *s)
{
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(s->fd, 8) < 0 ||
	    getsockname(s->fd, (struct sockaddr *)&a, &al) < 0) {
		if (s->fd >= 0)
			close(s->fd);
		return -1;
	}
	s->port = ntohs(a.sin_port);
	if (pthread_create(&s->th, NULL, echo_accept, s) != 0) {
		close(s->fd);
		return -1;
	}
	return 0;
}

static void echo_stop(echo_srv *s)
{
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->th, NULL);
	close(s->fd);
}

/* ---- calls in flight --------------------------------------------------------------- */

typedef struct inflight {
	asp_client *c;
	const char *cmd; /* exec */
	uint64_t proc;   /* proc_wait */
	atomic_int tid;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	asp_status st;
	asp_error err;
} inflight;

static void *inflight_main(void *arg)
{
	inflight *f = arg;
	asp_arena *a = asp_arena_new();
	atomic_store(&f->tid, (int)syscall(SYS_gettid));
	asp_status st;
	asp_error err;
	if (f->cmd) {
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = f->cmd;
		asp_exec_result r;
		st = asp_exec(f->c, &p, &r, a, &err);
	} else {
		asp_proc_wait_params p;
		asp_proc_wait_params_init(&p);
		p.proc = f->proc; /* no timeout: for ever */
		asp_proc_wait_result r;
		st = asp_proc_wait(f->c, &p, &r, a, &err);
	}
	asp_arena_free(a);
	pthread_mutex_lock(&f->mu);
	f->st = st;
	f->err = err;
	f->done = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* ---- helpers ----------------------------------------------------------------------- */

/* What hello offers: an op by name, a feature by name. */
static bool hello_has(asp_client *c, const char *op, const char *feature)
{
	asp_arena *a = asp_arena_new();
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	asp_error err;
	bool found = false;
	if (asp_hello(c, &hp, &hr, a, &err) == ASP_OK) {
		for (size_t i = 0; op && i < hr.ops.count; i++)
			found |= strcmp(hr.ops.items[i], op) == 0;
		for (size_t i = 0; feature && hr.has_features && i < hr.features.count; i++)
			found |= strcmp(hr.features.items[i], feature) == 0;
	}
	asp_arena_free(a);
	return found;
}

static void report(const lost_target *t, lost_kind k, const char *what, asp_status st,
                   const asp_error *err)
{
	fprintf(stderr, "\n%s, %s: %s: %s: %s\n", t->name, lost_kind_name(k), what,
	        asp_strerror(st), err ? err->message : "");
}

/*
 * A call that names a lost connection's handle: not_found, or an error saying so; where
 * processes outlive their connection (hello's "reattach": a daemon behind the
 * connection), the handle may name its process still.
 */
static bool names_lost(asp_status st, const asp_error *err, bool reattach)
{
	return st == ASP_E_NOT_FOUND || (reattach && st == ASP_OK) ||
	       (st == ASP_E_TRANSPORT_ERROR &&
	        (strstr(err->message, "lost") || strstr(err->message, "closed")));
}

/* Follows `cmd` (on a terminal with `tty`) until it printed `want`. */
static asp_status spawn_follow(asp_client *c, const char *cmd, bool tty, fol *f, uint64_t *proc,
                               asp_error *err)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = cmd;
	asp_tty tp = {.rows = 24, .cols = 80};
	if (tty)
		p.tty = &tp;
	return asp_spawn_start(c, &p, &fol_cb, f, proc, err);
}

/* The first call after the loss, a different op for each kind; true when it worked. */
static bool next_call(const lost_target *t, lost_kind k, bool can_connect, int echo_port)
{
	asp_client *c = t->c;
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_status st = ASP_OK;
	const char *what = "";
	switch (k) {
	case LOST_SPAWN: {
		what = "stat";
		asp_stat_params p;
		asp_stat_params_init(&p);
		p.path = "/";
		asp_stat_result r;
		st = asp_stat(c, &p, &r, a, &err);
		break;
	}
	case LOST_TTY: {
		what = "exec";
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = "echo after";
		asp_exec_result r;
		st = asp_exec(c, &p, &r, a, &err);
		if (st == ASP_OK &&
		    (r.stdout_data.len != 6 || memcmp(r.stdout_data.data, "after\n", 6) != 0))
			st =
			    asp_error_set(&err, ASP_E_INTERNAL, NULL, "exec gave the wrong output");
		break;
	}
	case LOST_CONNECT: {
		what = "spawn, followed";
		fol f;
		fol_init(&f);
		uint64_t proc;
		st = spawn_follow(c, "echo after", false, &f, &proc, &err);
		if (st == ASP_OK && !FOL_WAIT(&f, f.exited || f.lost, UP_MS))
			st = asp_error_set(&err, ASP_E_TIMEOUT, NULL, "no exit");
		else if (st == ASP_OK && (!f.exited || strcmp(f.out, "after\n") != 0))
			st = asp_error_set(&err, ASP_E_INTERNAL, NULL, "followed: '%s'%s", f.out,
			                   f.lost ? ", lost" : "");
		if (st == ASP_OK || !FOL_WAIT(&f, f.exited || f.lost, 0))
			asp_proc_detach(c, proc);
		fol_destroy(&f);
		break;
	}
	case LOST_WATCH: {
		what = "hello";
		asp_hello_params p;
		asp_hello_params_init(&p);
		asp_hello_result r;
		st = asp_hello(c, &p, &r, a, &err);
		break;
	}
	case LOST_EXEC: {
		if (!can_connect) {
			what = "read";
			asp_read_params p;
			asp_read_params_init(&p);
			p.path = "/etc/hostname";
			asp_read_result r;
			st = asp_read(c, &p, &r, a, &err);
			if (st == ASP_E_NOT_FOUND)
				st = ASP_OK; /* an answer from the sandbox is what counts */
			break;
		}
		what = "connect, followed";
		fol f;
		fol_init(&f);
		asp_connect_params p;
		asp_connect_params_init(&p);
		p.port = (uint64_t)echo_port;
		uint64_t proc = 0;
		st = asp_connect_start(c, &p, &fol_cb, &f, &proc, &err);
		if (st == ASP_OK) {
			asp_proc_write_params wp;
			asp_proc_write_params_init(&wp);
			wp.proc = proc;
			wp.data = (asp_bytes){(const uint8_t *)"again", 5};
			wp.eof = true;
			asp_proc_write_result wr;
			st = asp_proc_write(c, &wp, &wr, a, &err);
		}
		if (st == ASP_OK && !FOL_WAIT(&f, f.exited || f.lost, UP_MS))
			st = asp_error_set(&err, ASP_E_TIMEOUT, NULL, "no end");
		else if (st == ASP_OK && strcmp(f.out, "again") != 0)
			st = asp_error_set(&err, ASP_E_INTERNAL, NULL, "echoed '%s'", f.out);
		if (proc && !FOL_WAIT(&f, f.exited || f.lost, 0))
			asp_proc_detach(c, proc);
		fol_destroy(&f);
		break;
	}
	case LOST_WAIT:
	default: {
		what = "proc_list";
		asp_proc_list_params p;
		asp_proc_list_params_init(&p);
		asp_proc_list_result r;
		st = asp_proc_list(c, &p, &r, a, &err);
		break;
	}
	}
	asp_arena_free(a);
	if (st != ASP_OK)
		report(t, k, what, st, &err);
	return st == ASP_OK;
}

/* ---- one kind --------------------------------------------------------------------- */

void lost_conn_run(const lost_target *t, lost_kind k)
{
	asp_client *c = t->c;
	asp_error err;
	asp_status st;
	bool can_connect = hello_has(c, "connect", NULL);
	bool reattach = hello_has(c, NULL, "reattach");
	bool can = k == LOST_TTY       ? hello_has(c, NULL, "pty")
	           : k == LOST_CONNECT ? can_connect
	           : k == LOST_WATCH   ? hello_has(c, "watch", NULL)
	                               : true;
	if (!can) {
		printf("(%s: no %s here: hello does not offer it) ", t->name, lost_kind_name(k));
		return;
	}
	char pidfile[512];
	snprintf(pidfile, sizeof pidfile, "%s/lost-%s-%d.pid", t->scratch, lost_kind_name(k),
	         (int)getpid());
	unlink(pidfile);
	char cmd[700];
	snprintf(cmd, sizeof cmd, "echo $$ >'%s'; exec sleep 30", pidfile);

	echo_srv echo = {.fd = -1};
	bool echo_on = can_connect && echo_start(&echo) == 0;
	CU_ASSERT_FATAL(!can_connect || echo_on);
	fol f;
	fol_init(&f);
	inflight in = {.c = c};
	pthread_mutex_init(&in.mu, NULL);
	pthread_cond_init(&in.cv, NULL);
	bool thread = false;
	uint64_t proc = 0;
	asp_arena *a = asp_arena_new();

	/* the stream, flowing */
	switch (k) {
	case LOST_SPAWN:
		st = spawn_follow(c, "while :; do echo tick; sleep 0.05; done", false, &f, &proc,
		                  &err);
		CU_ASSERT_EQUAL(st, ASP_OK);
		CU_ASSERT(st == ASP_OK && FOL_WAIT(&f, strstr(f.out, "tick") != NULL, UP_MS));
		break;
	case LOST_TTY:
		st = spawn_follow(c, "echo ready; exec cat", true, &f, &proc, &err);
		CU_ASSERT_EQUAL(st, ASP_OK);
		CU_ASSERT(st == ASP_OK && FOL_WAIT(&f, strstr(f.out, "ready") != NULL, UP_MS));
		break;
	case LOST_CONNECT: {
		asp_connect_params p;
		asp_connect_params_init(&p);
		p.port = (uint64_t)echo.port;
		st = asp_connect_start(c, &p, &fol_cb, &f, &proc, &err);
		CU_ASSERT_EQUAL(st, ASP_OK);
		if (st == ASP_OK) {
			asp_proc_write_params wp;
			asp_proc_write_params_init(&wp);
			wp.proc = proc;
			wp.data = (asp_bytes){(const uint8_t *)"ping", 4};
			asp_proc_write_result wr;
			st = asp_proc_write(c, &wp, &wr, a, &err);
			CU_ASSERT_EQUAL(st, ASP_OK);
		}
		CU_ASSERT(st == ASP_OK && FOL_WAIT(&f, strstr(f.out, "ping") != NULL, UP_MS));
		break;
	}
	case LOST_WATCH: {
		char dir[600], file[700];
		snprintf(dir, sizeof dir, "%s/lost-watch-%d", t->scratch, (int)getpid());
		snprintf(file, sizeof file, "%s/f", dir);
		asp_mkdir_params mp;
		asp_mkdir_params_init(&mp);
		mp.path = dir;
		mp.parents = true;
		asp_mkdir_result mr;
		CU_ASSERT_EQUAL(asp_mkdir(c, &mp, &mr, a, &err), ASP_OK);
		asp_watch_params p;
		asp_watch_params_init(&p);
		p.path = dir;
		st = asp_watch_start(c, &p, &fol_cb, &f, &proc, &err);
		CU_ASSERT_EQUAL(st, ASP_OK);
		if (st == ASP_OK) {
			asp_write_params wp;
			asp_write_params_init(&wp);
			wp.path = file;
			wp.data = (asp_bytes){(const uint8_t *)"x", 1};
			asp_write_result wr;
			CU_ASSERT_EQUAL(asp_write(c, &wp, &wr, a, &err), ASP_OK);
		}
		CU_ASSERT(st == ASP_OK && FOL_WAIT(&f, f.events > 0, UP_MS));
		break;
	}
	case LOST_EXEC:
		in.cmd = cmd;
		thread = pthread_create(&in.th, NULL, inflight_main, &in) == 0;
		CU_ASSERT_FATAL(thread);
		CU_ASSERT(t_pid_from_file(pidfile, 0, UP_MS) > 0);
		break;
	case LOST_WAIT:
	default: {
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.command = cmd;
		asp_spawn_result r;
		st = asp_spawn(c, &p, &r, a, &err);
		CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
		proc = r.proc;
		CU_ASSERT(t_pid_from_file(pidfile, 0, UP_MS) > 0);
		in.proc = proc;
		thread = pthread_create(&in.th, NULL, inflight_main, &in) == 0;
		CU_ASSERT_FATAL(thread);
		/* the wait must be pending when the connection dies */
		for (int64_t until = t_now_ms() + UP_MS;
		     !atomic_load(&in.tid) && t_now_ms() < until;)
			usleep(1000);
		CU_ASSERT(t_thread_asleep(atomic_load(&in.tid), UP_MS));
		break;
	}
	}

	/* the loss */
	CU_ASSERT(t->kill(t->ctx) > 0);
	if (k == LOST_EXEC || k == LOST_WAIT) {
		pthread_mutex_lock(&in.mu);
		for (int64_t until = t_now_ms() + LOST_MS; !in.done && t_now_ms() < until;) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&in.cv, &in.mu, &ts);
		}
		bool done = in.done;
		pthread_mutex_unlock(&in.mu);
		CU_ASSERT(done && in.st == ASP_E_TRANSPORT_ERROR);
		if (!done || in.st != ASP_E_TRANSPORT_ERROR)
			report(t, k, "the call in flight", done ? in.st : ASP_E_TIMEOUT,
			       done ? &in.err : NULL);
	}
	if (k != LOST_EXEC && k != LOST_WAIT) {
		bool ended = FOL_WAIT(&f, f.lost || f.exited, LOST_MS);
		CU_ASSERT(ended && f.lost && !f.exited && f.lost_code == ASP_E_TRANSPORT_ERROR);
		if (!ended || !f.lost || f.lost_code != ASP_E_TRANSPORT_ERROR)
			fprintf(stderr, "\n%s, %s: the follower: %s%s %s: %s\n", t->name,
			        lost_kind_name(k), ended ? "" : "nothing, ",
			        f.exited ? "exited" : "", asp_strerror(f.lost_code), f.lost_msg);
	}

	/* the next call, whichever op, reconnects */
	CU_ASSERT(next_call(t, k, can_connect, echo.port));

	/* the old handle names nothing on the new connection */
	if (proc) {
		asp_proc_signal_params sp;
		asp_proc_signal_params_init(&sp);
		sp.proc = proc;
		sp.signal = "KILL";
		asp_proc_signal_result sr;
		st = asp_proc_signal(c, &sp, &sr, a, &err);
		CU_ASSERT(names_lost(st, &err, reattach));
		if (!names_lost(st, &err, reattach))
			report(t, k, "proc_signal of the old handle", st, &err);
		asp_proc_wait_params wp;
		asp_proc_wait_params_init(&wp);
		wp.proc = proc;
		wp.timeout_ms = 100;
		asp_proc_wait_result wr;
		st = asp_proc_wait(c, &wp, &wr, a, &err);
		CU_ASSERT(names_lost(st, &err, reattach));
		if (!names_lost(st, &err, reattach))
			report(t, k, "proc_wait of the old handle", st, &err);
		asp_proc_detach(c, proc); /* a no-op: it ended with the connection */
	}
	/* and the client goes on */
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "echo again";
	asp_exec_result er;
	st = asp_exec(c, &ep, &er, a, &err);
	CU_ASSERT(st == ASP_OK && er.stdout_data.len == 6 &&
	          memcmp(er.stdout_data.data, "again\n", 6) == 0);
	if (st != ASP_OK)
		report(t, k, "exec after", st, &err);

	if (k == LOST_WATCH) {
		char dir[600];
		snprintf(dir, sizeof dir, "%s/lost-watch-%d", t->scratch, (int)getpid());
		asp_remove_params rp;
		asp_remove_params_init(&rp);
		rp.path = dir;
		rp.recursive = true;
		asp_remove_result rr;
		CU_ASSERT_EQUAL(asp_remove(c, &rp, &rr, a, &err), ASP_OK);
	}
	/* a command of the lost connection may outlive it (native SSH): not ours to keep */
	pid_t left = t_pid_from_file(pidfile, 0, 0);
	if (left > 0)
		kill(left, SIGKILL);
	unlink(pidfile);
	if (thread)
		pthread_join(in.th, NULL); /* (ended above, or by its sleep's end) */
	if (echo_on)
		echo_stop(&echo);
	asp_arena_free(a);
	fol_destroy(&f);
	pthread_mutex_destroy(&in.mu);
	pthread_cond_destroy(&in.cv);
}

void lost_conn_run_all(const lost_target *t)
{
	for (int k = 0; k < LOST_KINDS; k++)
		lost_conn_run(t, (lost_kind)k);
}
