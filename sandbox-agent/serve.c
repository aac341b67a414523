/*
 * The stdio server. Leader/followers: one thread at a time (the leader) reads a frame;
 * once it has decoded it, it hands leadership to an idle thread and serves the request
 * itself, so a request never waits for a thread hop and a slow exec never blocks the
 * reading of the next request. Threads are created on demand up to MAX_WORKERS; when
 * all are busy nobody reads, and requests wait in the pipe.
 */
#include "serve.h"

#include "local/local.h"
#include "rpc/channel.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Threads serving requests at most, this one included. */
#define MAX_WORKERS 64
/* Workers run the local backend; its deepest path (recursive remove) fits easily. */
#define WORKER_STACK (1024 * 1024)
/* A response buffer grown past this is released after use rather than kept. */
#define KEEP_BUF (256 * 1024)

typedef struct server {
	asp_ops ops;
	asp_local *backend;
	asp_channel *in;
	int out_fd;
	size_t max_message;

	pthread_mutex_t mu; /* the fields below up to out_mu */
	pthread_cond_t idle_cv;
	bool reading; /* a leader is reading */
	bool stop;    /* EOF or a fatal error: nobody reads any more */
	int exit_code;
	unsigned idle, nthreads; /* threads created; the calling thread is one more */
	pthread_t threads[MAX_WORKERS - 1];

	pthread_mutex_t out_mu; /* one frame at a time on out_fd */
	bool out_dead;          /* closed after a protocol error, or the reader went away */
} server;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	char line[1200];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	ssize_t w = write(2, line, (size_t)n); /* one write: lines from threads do not mix */
	(void)w;
}

static void write_frame(server *s, const asp_buf *b)
{
	pthread_mutex_lock(&s->out_mu);
	size_t done = 0;
	while (!s->out_dead && done < b->len) {
		ssize_t n = write(s->out_fd, b->data + done, b->len - done);
		if (n > 0) {
			done += (size_t)n;
		} else if (n < 0 && errno != EINTR) {
			logf_("asp-agent: writing a response: %s; no more answers", strerror(errno));
			s->out_dead = true;
		}
	}
	pthread_mutex_unlock(&s->out_mu);
}

/* After a protocol error: the client gets EOF and not one more byte. */
static void close_output(server *s)
{
	pthread_mutex_lock(&s->out_mu);
	if (!s->out_dead) {
		shutdown(s->out_fd, SHUT_WR); /* a socket: EOF now, though fd 0 keeps it open */
		int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (devnull >= 0) { /* dup2, not close: the fd number must not be reused */
			dup2(devnull, s->out_fd);
			close(devnull);
		}
		s->out_dead = true;
	}
	pthread_mutex_unlock(&s->out_mu);
}

/* A message read by the leader, decoded and ready to serve. */
typedef struct job {
	uint8_t *frame;
	msgpack_unpacked u;
	asp_msg msg;
	asp_status st; /* ASP_OK, or the error to answer msg.id with */
	asp_error err;
} job;

static void serve(server *s, job *j, asp_buf *out)
{
	if (j->st) {
		if (asp_wire_response_err(out, j->msg.id, &j->err) < 0)
			out->len = 0;
	} else {
		asp_dispatch(&s->ops, s->backend, &j->msg, out, s->max_message);
	}
	if (out->len == 0) {
		logf_("asp-agent: out of memory answering request %u; closing", j->msg.id);
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		s->exit_code = 1;
		pthread_cond_broadcast(&s->idle_cv);
		pthread_mutex_unlock(&s->mu);
		close_output(s);
	} else {
		write_frame(s, out);
	}
	if (out->cap > KEEP_BUF)
		asp_buf_free(out);
	msgpack_unpacked_destroy(&j->u);
	free(j->frame);
}

/*
 * Reads and decodes one message. 1: `j` holds a request to serve (or to answer with an
 * error); 0: end of input; -1: a protocol or I/O error, logged.
 */
static int lead(server *s, job *j)
{
	size_t len;
	asp_error err;
	asp_error_clear(&err);
	msgpack_unpacked_init(&j->u);
	j->frame = NULL;
	asp_status st = asp_channel_recv(s->in, s->max_message, &j->frame, &len, &err);
	if (st == ASP_OK && !j->frame)
		return 0;
	if (st) {
		logf_("asp-agent: %s: %s; closing", asp_strerror(st), err.message);
		return -1;
	}
	asp_error_clear(&j->err);
	j->st = asp_wire_decode(j->frame, len, &j->u, &j->msg, &j->err);
	if (j->st == ASP_OK && j->msg.type != ASP_MSG_REQUEST) {
		j->msg.has_id = false;
		j->st = asp_error_set(&j->err, ASP_E_PROTOCOL_ERROR, NULL,
		                      "expected a request, got a message of type %d", j->msg.type);
	}
	if (j->st && !j->msg.has_id) {
		logf_("asp-agent: protocol_error: %s; closing", j->err.message);
		msgpack_unpacked_destroy(&j->u);
		free(j->frame);
		return -1;
	}
	return 1;
}

static void *worker(void *arg);

/* Under mu. Makes sure someone will read next: an idle thread, or a new one. */
static void promote(server *s)
{
	if (s->idle > 0) {
		pthread_cond_signal(&s->idle_cv);
		return;
	}
	if (s->nthreads + 1 >= MAX_WORKERS)
		return; /* all busy: the next request waits in the pipe for one to finish */
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, WORKER_STACK);
	if (pthread_create(&s->threads[s->nthreads], &attr, worker, s) == 0)
		s->nthreads++;
	else if (s->nthreads == 0)
		logf_("asp-agent: cannot start a worker thread");
	pthread_attr_destroy(&attr);
}

static void *worker(void *arg)
{
	server *s = arg;
	asp_buf out;
	asp_buf_init(&out);
	bool failed = false;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		if (s->reading) {
			s->idle++;
			pthread_cond_wait(&s->idle_cv, &s->mu);
			s->idle--;
			continue;
		}
		s->reading = true;
		pthread_mutex_unlock(&s->mu);
		job j;
		int got = lead(s, &j);
		pthread_mutex_lock(&s->mu);
		s->reading = false;
		if (got > 0 && s->stop) { /* stopped meanwhile (out of memory): drop it */
			msgpack_unpacked_destroy(&j.u);
			free(j.frame);
		}
		if (got <= 0 || s->stop) {
			s->stop = true;
			failed = got < 0;
			if (failed)
				s->exit_code = 1;
			pthread_cond_broadcast(&s->idle_cv);
			break;
		}
		promote(s);
		pthread_mutex_unlock(&s->mu);
		serve(s, &j, &out);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	if (failed)
		close_output(s); /* outside mu: a writer may hold out_mu on a full pipe */
	asp_buf_free(&out);
	return NULL;
}

int asp_agent_serve_stdio(int in, int out, size_t max_message)
{
	server *s = calloc(1, sizeof *s);
	if (!s) {
		logf_("asp-agent: out of memory");
		return 1;
	}
	s->max_message = max_message ? max_message : ASP_MAX_MESSAGE_DEFAULT;
	s->out_fd = out;
	s->ops = asp_local_ops;
	asp_ops_complete(&s->ops);
	s->backend = asp_local_new(s->max_message);
	asp_error err;
	if (!s->backend || asp_fd_channel_new(in, out, 0, &s->in, &err)) {
		logf_("asp-agent: out of memory");
		asp_local_free(s->backend);
		free(s);
		return 1;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->out_mu, NULL);
	pthread_cond_init(&s->idle_cv, NULL);

	/* The first leader is this thread; the others are created as requests arrive. */
	worker(s);

	pthread_mutex_lock(&s->mu);
	unsigned n = s->nthreads;
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = 0; i < n; i++) /* no thread is created once stop is set */
		pthread_join(s->threads[i], NULL);
	int code = s->exit_code;
	asp_local_free(s->backend); /* ends what the backend still runs */
	asp_channel_free(s->in);
	pthread_cond_destroy(&s->idle_cv);
	pthread_mutex_destroy(&s->out_mu);
	pthread_mutex_destroy(&s->mu);
	free(s);
	return code;
}
