/*
 * tree_write and tree_read (docs/design.md, "Trees as one stream"): handles of the process
 * table whose pump is an unpacker or a packer (asp/tree.h).
 *
 * tree_write's input is a pipe, as a process's stdin: proc_write fills it (in offset
 * order, several in flight) and the pump unpacks what it reads, so a slow disk fills the
 * pipe and slows the writes, and memory is the pipe plus one read. tree_read's pump packs
 * into the stdout ring and delivers each chunk before it packs more, as a process's pump
 * does, so a reader that stops stops the packing.
 */
#include "asp/tree.h"
#include "local_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TREE_IDLE_MS   120000u        /* a tree_write that receives nothing this long fails */
#define TREE_PIPE      (1u << 20)     /* its pipe, where the system lets it be that large */
#define TREE_READ_SIZE (256u * 1024u) /* what the unpacker takes at a time */
#define TREE_RING      (256u * 1024u) /* tree_read's ring: the stream is followed, not replayed */

/* Under no lock: whether the pump must stop, and with which signal ("" none). */
static bool must_stop(local_proc *p, const char **sig)
{
	pthread_mutex_lock(&p->mu);
	bool stop = p->close_sig[0] || p->ending;
	*sig = p->close_sig[0] ? p->close_sig : NULL;
	pthread_mutex_unlock(&p->mu);
	return stop;
}

/* The handle's end: success with counts, a failure with its error, or cancelled. */
static void tree_end(local_proc *p, asp_status st, const asp_error *err, const char *sig,
                     const asp_tree_counts *c, asp_buf *b)
{
	char *why = NULL;
	pthread_mutex_lock(&p->mu);
	if (sig) {
		p->end_code = ASP_OK;
	} else if (st != ASP_OK) {
		p->end_code = st;
		why = strdup(err->message);
	} else {
		p->has_counts = true;
		p->entries = c->entries;
		p->bytes = c->bytes;
	}
	pthread_mutex_unlock(&p->mu);
	local_pump_end(p, sig ? -1 : st != ASP_OK ? 1 : 0, sig, why, b);
}

/* ---- tree_write ------------------------------------------------------------------- */

static void *unpack_pump(void *arg)
{
	local_proc *p = arg;
	asp_tree_unpack *u = p->ext;
	int fd = p->child.out_fd;
	asp_buf b;
	asp_buf_init(&b);
	uint8_t *buf = malloc(TREE_READ_SIZE);
	asp_error err;
	asp_status st = buf ? ASP_OK : local_oom("tree_write", &err);
	asp_tree_counts counts = {0};
	const char *sig = NULL;
	bool ended = false;
	while (st == ASP_OK && !ended) {
		if (must_stop(p, &sig)) {
			if (!sig)
				st = asp_error_set(&err, ASP_E_IO_ERROR, NULL,
				                   "tree_write: the responder is shutting down");
			break;
		}
		struct pollfd pfd[2] = {{fd, POLLIN, 0}, {p->wake_fd, POLLIN, 0}};
		int n = poll(pfd, 2, (int)TREE_IDLE_MS);
		if (n < 0)
			continue; /* EINTR */
		if (n == 0) {
			st = asp_error_set(&err, ASP_E_TIMEOUT, NULL,
			                   "tree_write: nothing arrived for %u s: the stream was "
			                   "abandoned, and nothing of it is left",
			                   TREE_IDLE_MS / 1000);
			break;
		}
		if (pfd[1].revents) {
			uint64_t v;
			ssize_t r = read(p->wake_fd, &v, sizeof v);
			(void)r;
		}
		if (!pfd[0].revents)
			continue;
		ssize_t got = read(fd, buf, TREE_READ_SIZE);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0) {
			st = asp_error_errno(&err, errno, NULL, "tree_write: reading its input");
		} else if (got == 0) { /* the last proc_write's eof */
			st = asp_tree_unpack_finish(u, &counts, &err);
			ended = true;
		} else {
			st = asp_tree_unpack_feed(u, buf, (size_t)got, &err);
		}
	}
	free(buf);
	/* Writers blocked on a full pipe fail now; then what was unpacked goes. */
	pthread_mutex_lock(&p->mu);
	close(fd);
	p->child.out_fd = -1;
	pthread_mutex_unlock(&p->mu);
	asp_tree_unpack_free(u);
	p->ext = NULL;
	tree_end(p, st, &err, sig, &counts, &b);
	return NULL;
}

/* "OP PATH" for proc_list. */
static char *tree_command(const char *op, const char *path)
{
	size_t n = strlen(op) + strlen(path) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s %s", op, path);
	return s;
}

/* Waits for the handle to finish and answers as the stream ended. */
static asp_status wait_result(local_proc *pr, asp_tree_write_result *r, asp_error *err)
{
	pthread_mutex_lock(&pr->mu);
	while (!pr->finished)
		pthread_cond_wait(&pr->cv, &pr->mu); /* the pump ends: idle limit or the stream */
	asp_status st = ASP_OK;
	if (pr->end_code != ASP_OK)
		st = asp_error_set(err, pr->end_code, NULL, "%s",
		                   pr->end_error ? pr->end_error : "");
	else if (pr->signal[0])
		st = asp_error_set(err, ASP_E_IO_ERROR, NULL, "tree_write: cancelled by %s",
		                   pr->signal);
	r->has_entries = r->has_bytes = pr->has_counts;
	r->entries = pr->entries;
	r->bytes = pr->bytes;
	pthread_mutex_unlock(&pr->mu);
	return st;
}

asp_status local_op_tree_write(void *self, const asp_tree_write_params *p, asp_tree_write_result *r,
                               asp_arena *a, asp_error *err)
{
	(void)a;
	asp_local_conn *c = self;
	r->proc = 0;
	asp_status st = asp_check_path("tree_write", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->data.len && !p->data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "tree_write: 'data' has no bytes");
	asp_tree_unpack *u;
	if ((st = asp_tree_unpack_open(p->path, "tree_write", &u, err)) != ASP_OK)
		return st;
	int fds[2];
	char *command = tree_command("tree_write", p->path);
	if (!command || pipe2(fds, O_CLOEXEC) < 0) {
		st = command ? asp_error_errno(err, errno, NULL, "tree_write: cannot make a pipe")
		             : local_oom("tree_write", err);
		free(command);
		asp_tree_unpack_free(u);
		return st;
	}
	fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
#ifdef F_SETPIPE_SZ
	fcntl(fds[1], F_SETPIPE_SZ, TREE_PIPE); /* a hint; the limit may refuse it */
#endif
	local_proc *pr =
	    local_proc_alloc(c->l, LOCAL_PROC_TREE_IN, 4096, NULL, command, "tree_write", err);
	free(command);
	if (!pr) {
		close(fds[0]);
		close(fds[1]);
		asp_tree_unpack_free(u);
		return err->code;
	}
	pr->child.out_fd = fds[0];
	pr->in_fd = fds[1];
	pr->ext = u;
	atomic_fetch_add(&pr->refs, 1); /* ours, for the first bytes below */
	if ((st = local_proc_list_start(pr, NULL, unpack_pump, "tree_write", err)) != ASP_OK) {
		asp_tree_unpack_free(u); /* the pump never ran: its unpacker is ours to free */
		local_proc_unref(pr);
		return st;
	}
	r->proc = pr->id;
	if (p->data.len || p->eof)
		st = local_proc_feed(pr, p->data.data, p->data.len, false, 0, p->eof, err);
	if (st == ASP_OK && p->eof)
		st = wait_result(pr, r, err);
	local_proc_unref(pr);
	return st;
}

/* ---- tree_read -------------------------------------------------------------------- */

static void *pack_pump(void *arg)
{
	local_proc *p = arg;
	asp_tree_pack *k = p->ext;
	asp_buf b;
	asp_buf_init(&b);
	uint8_t *buf = malloc(PROC_CHUNK);
	asp_error err;
	asp_status st = buf ? ASP_OK : local_oom("tree_read", &err);
	const char *sig = NULL;
	for (;;) {
		if (st != ASP_OK)
			break;
		if (must_stop(p, &sig)) {
			if (!sig)
				st = asp_error_set(&err, ASP_E_IO_ERROR, NULL,
				                   "tree_read: the responder is shutting down");
			break;
		}
		pthread_mutex_lock(&p->mu);
		bool followed = local_proc_followed_locked(p);
		pthread_mutex_unlock(&p->mu);
		if (!followed) {
			st = asp_error_set(&err, ASP_E_IO_ERROR, NULL,
			                   "tree_read: the connection that asked for the stream is "
			                   "gone");
			break;
		}
		size_t n;
		st = asp_tree_pack_read(k, buf, PROC_CHUNK, &n, &err);
		if (st == ASP_OK && n == 0)
			break;
		if (n)
			local_pump_chunk(p, 0, buf, n, &b); /* delivered before more is packed */
	}
	free(buf);
	asp_tree_counts counts = asp_tree_pack_counts(k);
	asp_tree_pack_free(k);
	p->ext = NULL;
	tree_end(p, st, &err, sig, &counts, &b);
	return NULL;
}

asp_status local_op_tree_read(void *self, const asp_tree_read_params *p, asp_tree_read_result *r,
                              asp_arena *a, asp_error *err)
{
	(void)a;
	asp_local_conn *c = self;
	r->proc = 0;
	asp_status st = asp_check_path("tree_read", p->path, err);
	if (st != ASP_OK)
		return st;
	if (!c->has_sink)
		return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
		                     "tree_read: this connection cannot carry notifications (plain "
		                     "HTTP); read the tree over a WebSocket, stdio or SSH");
	asp_tree_pack *k;
	st = asp_tree_pack_open(p->path, p->has_exclude ? p->exclude.items : NULL,
	                        p->has_exclude ? p->exclude.count : 0, &k, err);
	if (st != ASP_OK)
		return st;
	char *command = tree_command("tree_read", p->path);
	local_proc *pr = command ? local_proc_alloc(c->l, LOCAL_PROC_TREE_OUT, TREE_RING, NULL,
	                                            command, "tree_read", err)
	                         : NULL;
	if (!command)
		local_oom("tree_read", err);
	free(command);
	local_sub *sub = pr ? local_sub_new(c) : NULL;
	if (!sub) {
		if (pr) {
			local_oom("tree_read", err);
			local_proc_discard(pr);
		}
		asp_tree_pack_free(k);
		return err->code;
	}
	pr->ext = k;
	if ((st = local_proc_list_start(pr, sub, pack_pump, "tree_read", err)) != ASP_OK) {
		asp_tree_pack_free(k);
		return st;
	}
	r->proc = pr->id;
	return ASP_OK;
}
