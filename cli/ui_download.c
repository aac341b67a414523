/*
 * GET /file: a sandbox file as an HTTP answer (a download, or an image the viewer shows).
 * A worker stats the file, then reads it in chunks, at most a few ahead of what the socket
 * took, so a large file streams through a small buffer whatever its size.
 */
#include "ui.h"

#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bytes asked per read, and most bytes read ahead of the socket. */
#define DL_CHUNK (1u << 20)
#define DL_AHEAD (4u << 20)

typedef struct dl_chunk {
	struct dl_chunk *next;
	size_t len, off;
	uint8_t data[];
} dl_chunk;

struct ui_download {
	asp_client *client;
	char *path;
	void (*wake)(void *);
	void *wake_arg;
	pthread_mutex_t mu;
	pthread_cond_t room;
	unsigned refs; /* the socket's and the worker's */
	int status;    /* 0 until stat'ed; 200, or the refusal */
	char message[ASP_ERROR_MESSAGE_MAX + 64];
	uint64_t size;
	dl_chunk *head, *tail;
	size_t ahead;
	bool done; /* the worker has queued its last chunk (or failed) */
	bool gone; /* the socket let go: stop reading */
};

static void dl_unref(ui_download *d)
{
	pthread_mutex_lock(&d->mu);
	bool last = --d->refs == 0;
	pthread_mutex_unlock(&d->mu);
	if (!last)
		return;
	while (d->head) {
		dl_chunk *c = d->head;
		d->head = c->next;
		free(c);
	}
	pthread_cond_destroy(&d->room);
	pthread_mutex_destroy(&d->mu);
	free(d->path);
	free(d);
}

static int status_of(asp_status st)
{
	switch (st) {
	case ASP_E_NOT_FOUND: return 404;
	case ASP_E_PERMISSION_DENIED: return 403;
	case ASP_E_IS_A_DIRECTORY:
	case ASP_E_INVALID_ARGUMENT: return 400;
	default: return 502;
	}
}

static void finish(ui_download *d, int status, const char *msg)
{
	pthread_mutex_lock(&d->mu);
	if (status) {
		d->status = status;
		snprintf(d->message, sizeof d->message, "%s", msg);
	}
	d->done = true;
	pthread_mutex_unlock(&d->mu);
	d->wake(d->wake_arg);
}

static void dl_run(void *arg)
{
	ui_download *d = arg;
	asp_arena *a = asp_arena_new();
	asp_error err;
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = d->path;
	asp_stat_result sr;
	asp_status st = a ? asp_stat(d->client, &sp, &sr, a, &err) : ASP_E_INTERNAL;
	if (st != ASP_OK) {
		finish(d, a ? status_of(st) : 503, a ? err.message : "out of memory");
		goto out;
	}
	if (strcmp(sr.type, "file") != 0) {
		char msg[256];
		snprintf(msg, sizeof msg, "%s is a %s, not a file", d->path, sr.type);
		finish(d, 400, msg);
		goto out;
	}
	pthread_mutex_lock(&d->mu);
	d->size = sr.size;
	d->status = 200;
	pthread_mutex_unlock(&d->mu);
	d->wake(d->wake_arg);
	uint64_t off = 0;
	while (off < sr.size) {
		pthread_mutex_lock(&d->mu);
		while (d->ahead >= DL_AHEAD && !d->gone)
			pthread_cond_wait(&d->room, &d->mu);
		bool gone = d->gone;
		pthread_mutex_unlock(&d->mu);
		if (gone)
			break;
		asp_arena_reset(a);
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = d->path;
		rp.offset = off;
		rp.has_length = true;
		rp.length = sr.size - off < DL_CHUNK ? sr.size - off : DL_CHUNK;
		asp_read_result rr;
		if (asp_read(d->client, &rp, &rr, a, &err) != ASP_OK || rr.data.len == 0)
			break; /* the answer is cut short: the browser sees a failed download */
		dl_chunk *c = malloc(sizeof *c + rr.data.len);
		if (!c)
			break;
		c->next = NULL;
		c->len = rr.data.len;
		c->off = 0;
		memcpy(c->data, rr.data.data, rr.data.len);
		off += rr.data.len;
		pthread_mutex_lock(&d->mu);
		if (d->tail)
			d->tail->next = c;
		else
			d->head = c;
		d->tail = c;
		d->ahead += c->len;
		pthread_mutex_unlock(&d->mu);
		d->wake(d->wake_arg);
	}
	finish(d, 0, NULL);
out:
	asp_arena_free(a);
	dl_unref(d);
}

ui_download *ui_download_start(asp_client *client, const char *path, void (*wake)(void *),
                               void *wake_arg)
{
	ui_download *d = calloc(1, sizeof *d);
	if (!d || !(d->path = strdup(path))) {
		free(d);
		return NULL;
	}
	d->client = client;
	d->wake = wake;
	d->wake_arg = wake_arg;
	d->refs = 2;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->room, NULL);
	if (!ui_pool_run(dl_run, d)) {
		d->refs = 1;
		finish(d, 503, "asp ui is stopping");
	}
	return d;
}

int ui_download_status(ui_download *d, uint64_t *size, const char **message)
{
	pthread_mutex_lock(&d->mu);
	int st = d->status;
	*size = d->size;
	*message = d->message;
	pthread_mutex_unlock(&d->mu);
	return st;
}

size_t ui_download_take(ui_download *d, uint8_t *buf, size_t cap, bool *done)
{
	size_t n = 0;
	pthread_mutex_lock(&d->mu);
	while (n < cap && d->head) {
		dl_chunk *c = d->head;
		size_t take = c->len - c->off < cap - n ? c->len - c->off : cap - n;
		memcpy(buf + n, c->data + c->off, take);
		c->off += take;
		n += take;
		d->ahead -= take;
		if (c->off == c->len) {
			d->head = c->next;
			if (!d->head)
				d->tail = NULL;
			free(c);
		}
	}
	*done = d->done && !d->head;
	pthread_cond_broadcast(&d->room);
	pthread_mutex_unlock(&d->mu);
	return n;
}

void ui_download_release(ui_download *d)
{
	pthread_mutex_lock(&d->mu);
	d->gone = true;
	pthread_cond_broadcast(&d->room);
	pthread_mutex_unlock(&d->mu);
	dl_unref(d);
}
