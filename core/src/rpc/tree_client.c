/*
 * asp_tree_upload and asp_tree_download (asp/tree.h): a local directory to a sandbox one
 * and back as one tar stream, over any transport (docs/design.md, "Trees as one stream").
 *
 * Up: a stream that fits one message is one tree_write with eof (one round trip). A
 * larger one starts with a tree_write carrying the first chunk, then proc_writes at their
 * offsets from a few threads at once, so several chunks are in flight and the responder
 * takes them in order; the eof and the proc_wait that fetches the result go out together.
 * Down: tree_read's output is unpacked as it arrives, on the thread that reads the
 * connection, so a slow local disk slows the sandbox's packer rather than filling memory.
 */
#include "asp/client.h"
#include "asp/proc.h"
#include "asp/transport.h"
#include "asp/tree.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_MAX     (4u << 20)  /* bytes per request at most */
#define ENVELOPE      (64u << 10) /* room in a message for what is not data */
#define SENDERS       4u          /* proc_writes in flight at most */
#define CANCEL_SIGNAL "KILL"

/* ---- common ----------------------------------------------------------------------- */

/*
 * The connection's max_message: what its transport knows without a round trip (native
 * SSH frames nothing), else hello's (the RPC transports cache hello: no round trip after
 * the first).
 */
static size_t chunk_size(asp_client *c)
{
	uint64_t max = asp_client_max_message_known(c);
	if (!max) {
		max = ASP_MAX_MESSAGE_DEFAULT;
		asp_arena *a = asp_arena_new();
		asp_hello_params hp;
		asp_hello_params_init(&hp);
		asp_hello_result hr;
		asp_error err;
		if (a && asp_hello(c, &hp, &hr, a, &err) == ASP_OK && hr.max_message)
			max = hr.max_message;
		asp_arena_free(a);
	}
	uint64_t chunk = max > 2 * ENVELOPE ? max - ENVELOPE : max / 2;
	return (size_t)(chunk < CHUNK_MAX ? chunk : CHUNK_MAX);
}

/* The error a finished tree handle reported (exit or proc_wait). */
static asp_status handle_error(const char *op, const char *code, const char *msg, int64_t exit_code,
                               const char *sig, asp_error *err)
{
	if (code)
		return asp_error_set(err, asp_status_from_name(code, strlen(code)), NULL, "%s",
		                     msg ? msg : code);
	if (exit_code == -1)
		return asp_error_set(err, ASP_E_IO_ERROR, NULL, "%s: cancelled (%s)", op,
		                     sig ? sig : "signal");
	return asp_error_set(err, ASP_E_IO_ERROR, NULL, "%s: the stream failed%s%s", op,
	                     msg ? ": " : "", msg ? msg : "");
}

static void cancel(asp_client *c, uint64_t proc)
{
	asp_arena *a = asp_arena_new();
	asp_proc_signal_params sp;
	asp_proc_signal_params_init(&sp);
	sp.proc = proc;
	sp.signal = CANCEL_SIGNAL;
	asp_proc_signal_result sr;
	asp_error e;
	if (a)
		asp_proc_signal(c, &sp, &sr, a, &e);
	asp_arena_free(a);
}

/* ---- up --------------------------------------------------------------------------- */

typedef struct chunk {
	struct chunk *next;
	uint64_t offset;
	size_t len;
	bool eof;
	uint8_t data[];
} chunk;

typedef struct upload {
	asp_client *c;
	uint64_t proc;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	chunk *head, *tail;
	unsigned queued, busy; /* chunks waiting, senders sending */
	bool closed;           /* nothing more will be queued */
	bool failed;
	asp_error err; /* the first failure */
	const asp_tree_opts *o;
	uint64_t sent;
} upload;

static void *sender(void *arg)
{
	upload *u = arg;
	asp_arena *a = asp_arena_new();
	for (;;) {
		pthread_mutex_lock(&u->mu);
		while (!u->head && !u->closed)
			pthread_cond_wait(&u->cv, &u->mu);
		chunk *k = u->head;
		if (k) {
			u->head = k->next;
			if (!u->head)
				u->tail = NULL;
			u->queued--;
			u->busy++;
		}
		bool skip = u->failed;
		pthread_mutex_unlock(&u->mu);
		if (!k)
			break;
		asp_status st = ASP_OK;
		asp_error e;
		if (!skip && !a) {
			st = asp_error_set(&e, ASP_E_INTERNAL, NULL, "out of memory");
		} else if (!skip) {
			asp_proc_write_params p;
			asp_proc_write_params_init(&p);
			p.proc = u->proc;
			p.data = (asp_bytes){k->data, k->len};
			p.has_offset = true;
			p.offset = k->offset;
			p.eof = k->eof;
			asp_proc_write_result r;
			st = asp_proc_write(u->c, &p, &r, a, &e);
			asp_arena_reset(a);
		}
		pthread_mutex_lock(&u->mu);
		if (st != ASP_OK && !u->failed) {
			u->failed = true;
			u->err = e;
		}
		u->busy--;
		if (st == ASP_OK && !skip)
			u->sent += k->len;
		uint64_t sent = u->sent;
		pthread_cond_broadcast(&u->cv);
		pthread_mutex_unlock(&u->mu);
		if (st == ASP_OK && !skip && u->o && u->o->progress)
			u->o->progress(u->o->user, sent);
		free(k);
	}
	asp_arena_free(a);
	return NULL;
}

/* Queues a chunk once fewer than SENDERS are waiting; false once the upload failed. */
static bool enqueue(upload *u, chunk *k)
{
	pthread_mutex_lock(&u->mu);
	while (u->queued >= SENDERS && !u->failed)
		pthread_cond_wait(&u->cv, &u->mu);
	bool ok = !u->failed;
	if (ok) {
		if (u->tail)
			u->tail->next = k;
		else
			u->head = k;
		u->tail = k;
		u->queued++;
		pthread_cond_broadcast(&u->cv);
	}
	pthread_mutex_unlock(&u->mu);
	if (!ok)
		free(k);
	return ok;
}

/* The stream after its first chunk, from SENDERS threads; then the result. */
static asp_status upload_rest(upload *u, asp_tree_pack *k, size_t size, uint64_t offset,
                              asp_tree_counts *counts, asp_error *err)
{
	pthread_t tids[SENDERS];
	unsigned n = 0;
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	for (; n < SENDERS; n++)
		if (pthread_create(&tids[n], NULL, sender, u) != 0)
			break;
	asp_status st = n ? ASP_OK : asp_error_set(err, ASP_E_INTERNAL, NULL, "no thread");
	bool local_fail = false;
	while (st == ASP_OK) {
		chunk *c = malloc(sizeof *c + size);
		if (!c) {
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
			local_fail = true;
			break;
		}
		c->next = NULL;
		c->offset = offset;
		c->eof = false;
		st = asp_tree_pack_read(k, c->data, size, &c->len, err);
		if (st != ASP_OK) {
			free(c);
			local_fail = true;
			break;
		}
		c->eof = c->len == 0; /* the last: empty, with eof */
		offset += c->len;
		bool last = c->eof; /* once queued, a sender may send and free c at any moment */
		if (!enqueue(u, c) || last)
			break;
	}
	pthread_mutex_lock(&u->mu);
	u->closed = true;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	asp_status res = ASP_OK;
	if (st == ASP_OK) {
		/* Alongside the eof: the result, as soon as the responder has it. */
		asp_arena *a = asp_arena_new();
		asp_proc_wait_params wp;
		asp_proc_wait_params_init(&wp);
		wp.proc = u->proc;
		asp_proc_wait_result wr;
		res = a ? asp_proc_wait(u->c, &wp, &wr, a, err)
		        : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		if (res == ASP_OK && wr.exit_code != 0)
			res = handle_error("tree_write", wr.error_code, wr.error, wr.exit_code,
			                   wr.signal, err);
		else if (res == ASP_OK && counts)
			*counts = (asp_tree_counts){wr.entries, wr.bytes};
		asp_arena_free(a);
	}
	for (unsigned i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	if (local_fail) {
		cancel(u->c, u->proc); /* nothing of the stream stays in the sandbox */
	} else if (st == ASP_OK && res != ASP_OK) {
		st = res; /* the handle's own error says most */
	} else if (st == ASP_OK && u->failed) {
		*err = u->err;
		st = err->code;
	}
	pthread_cond_destroy(&u->cv);
	pthread_mutex_destroy(&u->mu);
	return st;
}

asp_status asp_tree_upload(asp_client *c, const char *local_dir, const char *sandbox_dir,
                           const asp_tree_opts *o, asp_tree_counts *counts, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	if (!c || !local_dir || !sandbox_dir)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_tree_upload: client and both directories are required");
	asp_tree_pack *k;
	asp_status st =
	    asp_tree_pack_open(local_dir, o ? o->exclude : NULL, o ? o->exclude_count : 0, &k, err);
	if (st != ASP_OK)
		return st;
	size_t size = chunk_size(c);
	uint8_t *first = malloc(size);
	asp_arena *a = asp_arena_new();
	size_t len = 0;
	if (!first || !a)
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	else
		st = asp_tree_pack_read(k, first, size, &len, err);
	/* The whole stream in the first chunk: one request, with eof. */
	bool whole = false;
	if (st == ASP_OK && len < size) {
		size_t more;
		st = asp_tree_pack_read(k, first + len, size - len, &more, err);
		whole = more == 0;
		len += more;
	}
	asp_tree_write_params wp;
	asp_tree_write_params_init(&wp);
	wp.path = sandbox_dir;
	wp.data = (asp_bytes){first, len};
	wp.eof = whole;
	asp_tree_write_result wr;
	if (st == ASP_OK)
		st = asp_tree_write(c, &wp, &wr, a, err);
	if (st == ASP_OK && whole) {
		if (counts)
			*counts = (asp_tree_counts){wr.entries, wr.bytes};
		if (o && o->progress)
			o->progress(o->user, len);
	} else if (st == ASP_OK) {
		if (o && o->progress)
			o->progress(o->user, len);
		upload u = {.c = c, .proc = wr.proc, .o = o, .sent = len};
		st = upload_rest(&u, k, size, len, counts, err);
	}
	asp_arena_free(a);
	free(first);
	asp_tree_pack_free(k);
	return st;
}

/* ---- down ------------------------------------------------------------------------- */

typedef struct download {
	asp_tree_unpack *u;
	const asp_tree_opts *o;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool ended, failed;
	asp_status st;
	asp_error err;
	uint64_t got;
	/* the exit */
	int64_t exit_code;
	char code[32], sig[16];
	char msg[ASP_ERROR_MESSAGE_MAX];
	asp_tree_counts counts;
} download;

static void dl_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	(void)offset;
	download *d = user;
	if (stream != ASP_STREAM_STDOUT || d->failed)
		return;
	asp_error e;
	asp_status st = asp_tree_unpack_feed(d->u, data, len, &e);
	pthread_mutex_lock(&d->mu);
	d->got += len;
	if (st != ASP_OK && !d->failed) {
		d->failed = true;
		d->st = st;
		d->err = e;
		pthread_cond_broadcast(&d->cv);
	}
	uint64_t got = d->got;
	pthread_mutex_unlock(&d->mu);
	if (d->o && d->o->progress)
		d->o->progress(d->o->user, got);
}

static void dl_exit(void *user, const asp_exit_event *ev)
{
	download *d = user;
	pthread_mutex_lock(&d->mu);
	d->ended = true;
	d->exit_code = ev->exit_code;
	snprintf(d->code, sizeof d->code, "%s", ev->error_code ? ev->error_code : "");
	snprintf(d->sig, sizeof d->sig, "%s", ev->signal ? ev->signal : "");
	snprintf(d->msg, sizeof d->msg, "%s", ev->error ? ev->error : "");
	d->counts = (asp_tree_counts){ev->entries, ev->bytes};
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void dl_lost(void *user, uint64_t proc, const asp_error *why)
{
	(void)proc;
	download *d = user;
	pthread_mutex_lock(&d->mu);
	d->ended = true;
	if (!d->failed) {
		d->failed = true;
		d->st = why->code;
		d->err = *why;
	}
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

asp_status asp_tree_download(asp_client *c, const char *sandbox_dir, const char *local_dir,
                             const asp_tree_opts *o, asp_tree_counts *counts, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	if (!c || !local_dir || !sandbox_dir)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_tree_download: client and both directories are required");
	download d = {.o = o};
	asp_status st = asp_tree_unpack_open(local_dir, "tree_read", &d.u, err);
	if (st != ASP_OK)
		return st;
	pthread_mutex_init(&d.mu, NULL);
	pthread_cond_init(&d.cv, NULL);
	asp_tree_read_params p;
	asp_tree_read_params_init(&p);
	p.path = sandbox_dir;
	if (o && o->exclude_count) {
		p.has_exclude = true;
		p.exclude = (asp_strv){(const char **)o->exclude, o->exclude_count};
	}
	asp_proc_callbacks cb = {.on_output = dl_output, .on_exit = dl_exit, .on_lost = dl_lost};
	uint64_t proc = 0;
	st = asp_tree_read_start(c, &p, &cb, &d, &proc, err);
	if (st == ASP_OK) {
		pthread_mutex_lock(&d.mu);
		while (!d.ended && !d.failed)
			pthread_cond_wait(&d.cv, &d.mu);
		bool stopped_early = d.failed && !d.ended;
		pthread_mutex_unlock(&d.mu);
		if (stopped_early) { /* the stream broke a rule here: stop the sandbox's packer */
			asp_proc_detach(c, proc);
			cancel(c, proc);
		}
		if (d.failed) {
			*err = d.err;
			st = d.st;
		} else if (d.exit_code != 0) {
			st = handle_error("tree_read", d.code[0] ? d.code : NULL,
			                  d.msg[0] ? d.msg : NULL, d.exit_code, d.sig, err);
		} else {
			st = asp_tree_unpack_finish(d.u, counts, err);
		}
	}
	asp_tree_unpack_free(d.u);
	pthread_cond_destroy(&d.cv);
	pthread_mutex_destroy(&d.mu);
	return st;
}
