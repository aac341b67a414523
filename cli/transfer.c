/*
 * The chunked transfer engine behind read, write and cp.
 *
 * The first chunk is moved by the calling thread alone: it tells a remote source's size,
 * decides whether everything fits one write op, and creates a remote destination. The
 * rest is split between worker threads. With a known end ("sized"), workers claim byte
 * ranges and read them in parallel; a stream, or a sandbox file whose size says nothing
 * (/proc), is read under the lock so chunks keep their order, and written in parallel.
 * A local stream destination (stdout) takes chunks in order: each waits for its turn.
 * Data is read into one buffer (local) or arrives in one decoded frame (remote) and is
 * written from there; nothing is copied on the way.
 */
#include "transfer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct engine engine;

typedef struct worker {
	engine *e;
	uint8_t *buf;     /* a local source's chunk */
	asp_arena *arena; /* a remote source's chunk */
	pthread_t tid;
} worker;

struct engine {
	xfer *x;
	pthread_mutex_t lock;
	pthread_cond_t turn_cv;
	bool failed, done;
	bool sized;        /* `end` is known: workers claim ranges and read in parallel */
	uint64_t origin;   /* source offset of the transfer's byte 0 */
	uint64_t next;     /* source offset claimed next */
	uint64_t end;      /* sized: where the transfer ends */
	uint64_t limit;    /* origin + length, saturated */
	uint64_t next_idx; /* chunk index claimed next */
	uint64_t turn;     /* stream destination: the chunk index written next */
	const char *wpath; /* remote destination: where chunks go (the target or its temp) */
	bool wappend;      /* remote destination: chunks are appended, in order */
	_Atomic uint64_t moved;
	uint64_t dst_size;
};

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static size_t min_sz(uint64_t a, uint64_t b)
{
	return (size_t)(a < b ? a : b);
}

/* Records the first failure (the lock held); the others are its consequences. */
static void fail_locked(engine *e, const asp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_locked(engine *e, const asp_error *err, const char *fmt, ...)
{
	if (!e->failed) {
		e->failed = true;
		e->x->err = *err;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->x->what, sizeof e->x->what, fmt, ap);
		va_end(ap);
	}
	pthread_cond_broadcast(&e->turn_cv);
}

#define FAIL(e, err, ...)                                                                          \
	do {                                                                                       \
		pthread_mutex_lock(&(e)->lock);                                                    \
		fail_locked((e), (err), __VA_ARGS__);                                              \
		pthread_mutex_unlock(&(e)->lock);                                                  \
	} while (0)

/* Local reads fill the whole request unless the end of the input comes first. */
static ssize_t read_full(int fd, uint8_t *buf, size_t len, bool positional, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = positional ? pread(fd, buf + got, len - got, (off_t)(off + got))
		                       : read(fd, buf + got, len - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int pwrite_full(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t w = pwrite(fd, buf, len, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/*
 * Reads up to `len` bytes of the source at `off` (a stream ignores it). *eof: the source
 * ended there. *size: a remote file's size as read reports it (else untouched).
 * 0, or -1 with the failure recorded; `locked` says whether the caller holds e->lock.
 */
static int src_read(worker *w, uint64_t off, size_t len, const uint8_t **data, size_t *got,
                    bool *eof, uint64_t *size, bool locked)
{
	engine *e = w->e;
	xfer *x = e->x;
	asp_error err;
	if (x->src.kind == XF_REMOTE) {
		asp_read_params p;
		asp_read_result r;
		asp_read_params_init(&p);
		p.path = x->src.path;
		p.offset = off;
		p.has_length = true;
		p.length = len;
		asp_arena_reset(w->arena);
		if (asp_read(x->client, &p, &r, w->arena, &err) != ASP_OK)
			goto fail_remote;
		*data = r.data.data;
		*got = r.data.len > len ? len : r.data.len;
		*eof = r.eof;
		if (size)
			*size = r.size;
		return 0;
	fail_remote:
		if (locked)
			fail_locked(e, &err, "read %s", x->src.path);
		else
			FAIL(e, &err, "read %s", x->src.path);
		return -1;
	}
	bool positional = x->src.kind == XF_LOCAL_FILE;
	ssize_t n = read_full(x->src.fd, w->buf, len, positional, off);
	if (n < 0) {
		asp_error_errno(&err, errno, x->src.path, "%s", strerror(errno));
		if (locked)
			fail_locked(e, &err, "read %s", x->src.path);
		else
			FAIL(e, &err, "read %s", x->src.path);
		return -1;
	}
	*data = w->buf;
	*got = (size_t)n;
	*eof = (size_t)n < len;
	return 0;
}

/* Stream destination: waits until chunk `idx` is next. false when the transfer failed. */
static bool await_turn(engine *e, uint64_t idx)
{
	pthread_mutex_lock(&e->lock);
	while (e->turn != idx && !e->failed)
		pthread_cond_wait(&e->turn_cv, &e->lock);
	bool ok = !e->failed;
	pthread_mutex_unlock(&e->lock);
	return ok;
}

static void pass_turn(engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->turn++;
	pthread_cond_broadcast(&e->turn_cv);
	pthread_mutex_unlock(&e->lock);
}

/*
 * Writes one piece of chunk `idx`, which sits at source offset `off`. A stream destination
 * takes the chunk's turn before its first piece (*have_turn); the caller passes it on.
 */
static int dst_write(worker *w, uint64_t idx, uint64_t off, const uint8_t *data, size_t len,
                     bool *have_turn)
{
	engine *e = w->e;
	xfer *x = e->x;
	uint64_t rel = off - e->origin;
	asp_error err;
	switch (x->dst.kind) {
	case XF_LOCAL_FILE:
		if (pwrite_full(x->dst.fd, data, len, x->dst.base + rel) < 0) {
			asp_error_errno(&err, errno, x->dst.path, "%s", strerror(errno));
			FAIL(e, &err, "write %s", x->dst.path);
			return -1;
		}
		break;
	case XF_LOCAL_STREAM:
		if (!*have_turn) {
			if (!await_turn(e, idx))
				return -1;
			*have_turn = true;
		}
		if (cli_write_all(x->dst.fd, data, len) < 0) {
			asp_error_errno(&err, errno, x->dst.path, "%s", strerror(errno));
			FAIL(e, &err, "write %s", x->dst.path);
			return -1;
		}
		break;
	case XF_REMOTE: {
		asp_write_params p;
		asp_write_result r;
		asp_write_params_init(&p);
		p.path = e->wpath;
		p.data.data = data;
		p.data.len = len;
		if (e->wappend) {
			p.append = true;
		} else {
			p.has_offset = true;
			p.offset = rel;
		}
		if (x->mode)
			p.mode = x->mode;
		/* The op's result is tiny; a worker's arena holds it beside the chunk it wrote. */
		if (asp_write(x->client, &p, &r, w->arena, &err) != ASP_OK) {
			FAIL(e, &err, "write %s", x->dst.path);
			return -1;
		}
		pthread_mutex_lock(&e->lock);
		if (r.size > e->dst_size)
			e->dst_size = r.size;
		pthread_mutex_unlock(&e->lock);
		break;
	}
	}
	atomic_fetch_add(&e->moved, len);
	if (x->prog)
		progress_add(x->prog, len);
	return 0;
}

/* A claimed range of a sized source: read (in pieces, if the sandbox caps reads), write. */
static int do_sized_chunk(worker *w, uint64_t idx, uint64_t off, size_t len)
{
	engine *e = w->e;
	xfer *x = e->x;
	bool have_turn = false;
	int rc = 0;
	while (len > 0) {
		const uint8_t *data;
		size_t got;
		bool eof;
		if (src_read(w, off, len, &data, &got, &eof, NULL, false) < 0) {
			rc = -1;
			break;
		}
		if (got == 0 || (eof && got < len)) {
			/* The end moved under us: copying on would leave a hole or stale bytes. */
			asp_error err;
			asp_error_set(&err, ASP_E_IO_ERROR, x->src.path,
			              "the file shrank while being copied; try again");
			FAIL(e, &err, "read %s", x->src.path);
			rc = -1;
			break;
		}
		if (dst_write(w, idx, off, data, got, &have_turn) < 0) {
			rc = -1;
			break;
		}
		off += got;
		len -= got;
	}
	if (have_turn)
		pass_turn(e);
	return rc;
}

static void *worker_loop(void *arg)
{
	worker *w = arg;
	engine *e = w->e;
	xfer *x = e->x;
	for (;;) {
		pthread_mutex_lock(&e->lock);
		if (e->failed || e->done) {
			pthread_mutex_unlock(&e->lock);
			break;
		}
		uint64_t idx = e->next_idx, off = e->next;
		if (e->sized) {
			if (off >= e->end) {
				e->done = true;
				pthread_mutex_unlock(&e->lock);
				break;
			}
			size_t len = min_sz(x->chunk, e->end - off);
			e->next += len;
			e->next_idx++;
			pthread_mutex_unlock(&e->lock);
			if (do_sized_chunk(w, idx, off, len) < 0)
				break;
			continue;
		}
		/* Sequential source: read under the lock so offsets follow the data. */
		size_t len = min_sz(x->chunk, e->limit - off);
		const uint8_t *data;
		size_t got = 0;
		bool eof = true;
		if (len > 0 && src_read(w, off, len, &data, &got, &eof, NULL, true) < 0) {
			pthread_mutex_unlock(&e->lock);
			break;
		}
		if (got == 0) {
			e->done = true;
			pthread_mutex_unlock(&e->lock);
			break;
		}
		if (eof)
			e->done = true;
		e->next += got;
		e->next_idx++;
		pthread_mutex_unlock(&e->lock);
		bool have_turn = false;
		int rc = dst_write(w, idx, off, data, got, &have_turn);
		if (have_turn)
			pass_turn(e);
		if (rc < 0)
			break;
	}
	return NULL;
}

/* A worker's arena, and its chunk buffer when the source is local. false: out of memory. */
static bool worker_setup(engine *e, worker *w)
{
	w->e = e;
	w->arena = asp_arena_new();
	if (e->x->src.kind != XF_REMOTE)
		w->buf = malloc(e->x->chunk);
	return w->arena && (e->x->src.kind == XF_REMOTE || w->buf);
}

void xfer_init(xfer *x, asp_client *client, size_t chunk)
{
	memset(x, 0, sizeof *x);
	x->client = client;
	x->chunk = chunk;
	x->length = UINT64_MAX;
	x->threads = CLI_THREADS_DEFAULT;
	x->src.fd = -1;
	x->dst.fd = -1;
}

/* The mode of the file a temporary file will replace, if there is one. */
static void keep_mode(xfer *x, asp_arena *a, uint64_t *mode)
{
	asp_stat_params p;
	asp_stat_result r;
	asp_error err;
	asp_stat_params_init(&p);
	p.path = x->dst.path;
	if (asp_stat(x->client, &p, &r, a, &err) == ASP_OK && r.type && strcmp(r.type, "file") == 0)
		*mode = r.mode;
}

/*
 * "DIR/.NAME.asp-part" in the sandbox: the chunks go there, then one rename. The name is
 * the same for every transfer to the target, so a transfer cut short (asp killed, the
 * connection lost) leaves one file that the next transfer to the target overwrites from
 * its first chunk and renames away, instead of a new one each time.
 */
static char *part_name(const char *dst)
{
	char *dir = path_dir(dst), *base = path_base(dst), *out = NULL;
	if (dir && base) {
		char name[300];
		snprintf(name, sizeof name, ".%.200s.asp-part", base);
		out = path_join(dir, name);
	}
	free(dir);
	free(base);
	return out;
}

/* The first chunk, by the calling thread: sizes the rest and creates the destination. */
static int first_chunk(engine *e, worker *w, bool *whole, char **tmp)
{
	xfer *x = e->x;
	uint64_t local_size = 0;
	if (x->src.kind == XF_LOCAL_FILE) {
		struct stat st;
		if (fstat(x->src.fd, &st) < 0) {
			asp_error err;
			asp_error_errno(&err, errno, x->src.path, "%s", strerror(errno));
			FAIL(e, &err, "stat %s", x->src.path);
			return -1;
		}
		local_size = (uint64_t)st.st_size;
	}
	size_t len0 = min_sz(x->chunk, x->length);
	const uint8_t *data = NULL;
	size_t got = 0;
	bool eof = true;
	uint64_t rsize = 0;
	if (len0 > 0 && src_read(w, e->origin, len0, &data, &got, &eof, &rsize, false) < 0)
		return -1;
	x->src_size = rsize;
	e->next = e->origin + got;
	e->next_idx = 1;

	/* What is left, and whether it can be read in parallel. */
	bool more = !(got == 0 || eof || e->next >= e->limit);
	if (more && x->src.kind == XF_REMOTE && rsize > e->next) {
		e->sized = true;
		e->end = rsize < e->limit ? rsize : e->limit;
	} else if (more && x->src.kind == XF_LOCAL_FILE && local_size > e->next) {
		e->sized = true;
		e->end = local_size < e->limit ? local_size : e->limit;
	}
	if (e->sized && e->end <= e->next)
		more = false;
	/*
	 * A stream that filled the chunk exactly may be at its end; that costs a temp file
	 * and a rename at worst. A sized local file may not be at EOF yet got it all.
	 */
	*whole = !more;

	asp_error err;
	bool have_turn = false;
	if (x->dst.kind != XF_REMOTE) {
		if (got > 0 && dst_write(w, 0, e->origin, data, got, &have_turn) < 0)
			return -1;
		e->turn = 1;
		return 0;
	}
	asp_write_params p;
	asp_write_result r;
	asp_write_params_init(&p);
	p.data.data = data;
	p.data.len = got;
	p.mkdirs = x->mkdirs;
	if (x->mode)
		p.mode = x->mode;
	if (*whole) {
		p.path = x->dst.path;
		p.append = x->append;
		p.atomic = x->atomic;
	} else if (x->append) {
		p.path = e->wpath = x->dst.path;
		p.append = e->wappend = true;
	} else {
		*tmp = part_name(x->dst.path);
		if (!*tmp) {
			asp_error_errno(&err, ENOMEM, x->dst.path, "out of memory");
			FAIL(e, &err, "write %s", x->dst.path);
			return -1;
		}
		p.path = e->wpath = *tmp;
		/* A leftover would keep its own mode: `mode` applies to new files only. */
		asp_remove_params rp;
		asp_remove_result rr;
		asp_remove_params_init(&rp);
		rp.path = *tmp;
		(void)asp_remove(x->client, &rp, &rr, w->arena, &err);
		if (x->keep_target_mode)
			keep_mode(x, w->arena, &p.mode);
	}
	if (asp_write(x->client, &p, &r, w->arena, &err) != ASP_OK) {
		if (*tmp && (err.code == ASP_E_NOT_FOUND || err.code == ASP_E_NOT_A_DIRECTORY))
			/* The sandbox names our temporary file; the person knows the target. */
			asp_error_set(&err, err.code, x->dst.path,
			              "the directory %s goes in does not exist%s", x->dst.path,
			              x->mkdirs ? "" : " (asp mkdir -p creates it)");
		FAIL(e, &err, "write %s", x->dst.path);
		return -1;
	}
	e->dst_size = r.size;
	atomic_fetch_add(&e->moved, got);
	if (x->prog)
		progress_add(x->prog, got);
	return 0;
}

int xfer_run(xfer *x)
{
	engine e = {.x = x};
	pthread_mutex_init(&e.lock, NULL);
	pthread_cond_init(&e.turn_cv, NULL);
	e.origin = x->src.kind == XF_REMOTE       ? x->offset
	           : x->src.kind == XF_LOCAL_FILE ? x->src.base
	                                          : 0;
	e.limit = sat_add(e.origin, x->length);
	if (x->chunk == 0)
		x->chunk = CLI_CHUNK_DEFAULT;
	unsigned nthreads = x->threads ? x->threads : 1;
	if (x->append && x->dst.kind == XF_REMOTE)
		nthreads = 1; /* appends land in the order they are sent */

	worker *ws = calloc(nthreads, sizeof *ws);
	char *tmp = NULL;
	int rc = -1;
	bool whole = false;
	asp_error err;
	if (!ws) {
		asp_error_errno(&err, ENOMEM, NULL, "out of memory");
		FAIL(&e, &err, "copy");
		goto out;
	}
	/* The other workers get their buffers only when there is more than one chunk. */
	if (!worker_setup(&e, &ws[0])) {
		asp_error_errno(&err, ENOMEM, NULL, "out of memory for a buffer of %zu bytes",
		                x->chunk);
		FAIL(&e, &err, "copy");
		goto out;
	}
	if (first_chunk(&e, &ws[0], &whole, &tmp) < 0)
		goto out;

	if (!whole) {
		unsigned n = nthreads;
		if (e.sized) {
			uint64_t left = (e.end - e.next + x->chunk - 1) / x->chunk;
			if (left < n)
				n = (unsigned)left;
		}
		unsigned started = 1;
		for (; started < n; started++) {
			/* Fewer threads is slower, not wrong. */
			if (!worker_setup(&e, &ws[started]) ||
			    pthread_create(&ws[started].tid, NULL, worker_loop, &ws[started]) != 0)
				break;
		}
		worker_loop(&ws[0]);
		for (unsigned i = 1; i < started; i++)
			pthread_join(ws[i].tid, NULL);
		if (e.failed)
			goto out;
		if (tmp) {
			asp_rename_params p;
			asp_rename_result r;
			asp_rename_params_init(&p);
			p.from = tmp;
			p.to = x->dst.path;
			p.overwrite = true;
			asp_arena_reset(ws[0].arena);
			if (asp_rename(x->client, &p, &r, ws[0].arena, &err) != ASP_OK) {
				FAIL(&e, &err, "rename %s to %s", tmp, x->dst.path);
				goto out;
			}
			free(tmp);
			tmp = NULL;
		}
	}
	rc = 0;
out:
	if (tmp && ws) {
		/* Best effort: a dead transport leaves the hidden temp file behind. */
		asp_remove_params p;
		asp_remove_result r;
		asp_remove_params_init(&p);
		p.path = tmp;
		asp_arena_reset(ws[0].arena);
		asp_remove(x->client, &p, &r, ws[0].arena, &err);
	}
	free(tmp);
	if (ws) {
		for (unsigned i = 0; i < nthreads; i++) {
			asp_arena_free(ws[i].arena);
			free(ws[i].buf);
		}
		free(ws);
	}
	x->moved = atomic_load(&e.moved);
	x->dst_size = e.dst_size;
	pthread_cond_destroy(&e.turn_cv);
	pthread_mutex_destroy(&e.lock);
	return rc;
}
