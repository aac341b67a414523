/*
 * Trees as one stream (docs/design.md, "Trees as one stream"): tree_write and tree_read.
 * The streams are built here with asp_tar_header (and patched where a hostile one needs
 * what no honest writer makes), and what a tree_read sends is decoded with
 * asp_tar_reader, so every check is made through the ops only. A refused stream must
 * name its member, leave no target and write nothing beside it.
 */
#include "cases_tree.h"
#include "conf_follow.h"

#include "asp/tar.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MTIME 1700000000

/* ---- building streams ------------------------------------------------------------- */

typedef struct tb {
	uint8_t *p;
	size_t len, cap;
} tb;

static void tb_put(tb *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 4096;
		b->p = realloc(b->p, b->cap);
	}
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void tb_member(tb *b, asp_tar_type t, const char *path, uint32_t mode, const char *link,
                      const void *data, size_t n)
{
	uint8_t h[ASP_TAR_HEADER_MAX];
	asp_tar_member m = {t, path, link, mode, MTIME, t == ASP_TAR_FILE ? n : 0};
	asp_error err;
	size_t hn = asp_tar_header(&m, h, sizeof h, &err);
	tb_put(b, h, hn);
	if (t == ASP_TAR_FILE) {
		tb_put(b, data, n);
		static const uint8_t zero[ASP_TAR_BLOCK];
		tb_put(b, zero, asp_tar_padding(n));
	}
}

static void tb_end(tb *b)
{
	static const uint8_t zero[ASP_TAR_END_BYTES];
	tb_put(b, zero, sizeof zero);
}

/* A ustar header no honest writer makes: any name, any type flag, checksummed. */
static void tb_raw(tb *b, const char *name, char type, const char *link)
{
	uint8_t h[ASP_TAR_HEADER_MAX];
	asp_tar_member m = {ASP_TAR_FILE, "x", NULL, 0644, MTIME, 0};
	asp_error err;
	asp_tar_header(&m, h, sizeof h, &err);
	memset(h, 0, 100);
	memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
	h[156] = (uint8_t)type;
	if (link)
		memcpy(h + 157, link, strlen(link) < 100 ? strlen(link) : 100);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (size_t i = 0; i < ASP_TAR_BLOCK; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	tb_put(b, h, ASP_TAR_BLOCK);
}

/* A pax header naming the next member `path`, then an innocent ustar header. */
static void tb_pax_path(tb *b, const char *path)
{
	char rec[600];
	size_t body = strlen(path) + strlen(" path=\n"), len = body;
	while ((size_t)snprintf(NULL, 0, "%zu", len) + body != len) /* it counts its own digits */
		len = (size_t)snprintf(NULL, 0, "%zu", len) + body;
	snprintf(rec, sizeof rec, "%zu path=%s\n", len, path);
	tb_raw(b, "././@PaxHeader", 'x', NULL);
	/* the size field of that header: the record's length */
	uint8_t *h = b->p + b->len - ASP_TAR_BLOCK;
	snprintf((char *)h + 124, 12, "%011o", (unsigned)strlen(rec));
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (size_t i = 0; i < ASP_TAR_BLOCK; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	tb_put(b, rec, strlen(rec));
	static const uint8_t zero[ASP_TAR_BLOCK];
	tb_put(b, zero, asp_tar_padding(strlen(rec)));
	tb_member(b, ASP_TAR_FILE, "innocent", 0644, NULL, "x", 1);
}

/* ---- helpers ---------------------------------------------------------------------- */

static char *in_dir(conf_ctx *ctx, const char *name)
{
	char *p = asp_arena_alloc(ctx->a, strlen(ctx->dir) + strlen(name) + 2);
	if (p)
		sprintf(p, "%s/%s", ctx->dir, name);
	return p;
}

static asp_status tree_write(conf_ctx *ctx, const char *path, const tb *b, bool eof,
                             asp_tree_write_result *r, asp_error *err)
{
	asp_tree_write_params p;
	asp_tree_write_params_init(&p);
	p.path = path;
	p.data = (asp_bytes){b->p, b->len};
	p.eof = eof;
	return ctx->ops->tree_write(ctx->self, &p, r, ctx->a, err);
}

static bool stat_of(conf_ctx *ctx, const char *path, bool follow, asp_stat_result *r,
                    asp_status *st)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	p.follow = follow;
	asp_error err;
	*st = ctx->ops->stat(ctx->self, &p, r, ctx->a, &err);
	return *st == ASP_OK;
}

/* The case directory holds exactly `n` entries (nothing written beside the target). */
static bool dir_count(conf_ctx *ctx, int line, const char *path, size_t n)
{
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = path;
	asp_list_result r;
	asp_error err;
	asp_status st = ctx->ops->list(ctx->self, &p, &r, ctx->a, &err);
	if (st != ASP_OK)
		return conf_fail(ctx, __FILE__, line, "list %s: %s", path, err.message), false;
	if (r.entries.count != n) {
		conf_fail(ctx, __FILE__, line, "%s holds %zu entries, not %zu (first: %s)", path,
		          r.entries.count, n, r.entries.count ? r.entries.items[0].name : "-");
		return false;
	}
	return true;
}

/* A file's bytes are `want`. */
static bool file_is(conf_ctx *ctx, int line, const char *path, const void *want, size_t n)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = path;
	asp_read_result r;
	asp_error err;
	asp_status st = ctx->ops->read(ctx->self, &p, &r, ctx->a, &err);
	if (st != ASP_OK)
		return conf_fail(ctx, __FILE__, line, "read %s: %s", path, err.message), false;
	if (r.data.len != n || (n && memcmp(r.data.data, want, n) != 0))
		return conf_fail(ctx, __FILE__, line, "%s has %zu bytes, not the %zu written", path,
		                 r.data.len, n),
		       false;
	return true;
}

#define DIR_COUNT(path, n)     CONF_REQ(ctx, dir_count(ctx, __LINE__, (path), (n)))
#define FILE_IS(path, data, n) CONF_REQ(ctx, file_is(ctx, __LINE__, (path), (data), (n)))

/* The honest tree most cases write: a root, files of three modes, a directory, a symlink. */
static void tb_sample(tb *b)
{
	tb_member(b, ASP_TAR_DIR, "", 0755, NULL, NULL, 0);
	tb_member(b, ASP_TAR_FILE, "a.txt", 0644, NULL, "hello\n", 6);
	tb_member(b, ASP_TAR_FILE, "run.sh", 0755, NULL, "#!/bin/sh\n", 10);
	tb_member(b, ASP_TAR_DIR, "sub", 0750, NULL, NULL, 0);
	tb_member(b, ASP_TAR_FILE, "sub/secret", 0600, NULL, "s", 1);
	tb_member(b, ASP_TAR_SYMLINK, "sub/link", 0777, "../a.txt", NULL, 0);
	tb_member(b, ASP_TAR_FILE, "sub/empty", 0644, NULL, "", 0);
	tb_end(b);
}

/* ---- tree_write ------------------------------------------------------------------- */

void tree_write_small(conf_ctx *ctx)
{
	tb b = {0};
	tb_sample(&b);
	char *t = in_dir(ctx, "new/deeper/t"); /* parents made too */
	asp_tree_write_result r;
	asp_error err;
	asp_status st = tree_write(ctx, t, &b, true, &r, &err);
	free(b.p);
	CONF_OK(ctx, st, &err);
	CONF_CHECKF(ctx, r.has_entries && r.entries == 6 && r.has_bytes && r.bytes == 17,
	            "tree_write answered %llu entries, %llu bytes; want 6 and 17",
	            (unsigned long long)r.entries, (unsigned long long)r.bytes);
	struct {
		const char *name, *type;
		unsigned mode;
	} want[] = {
	    {"", "dir", 0755},         {"a.txt", "file", 0644},      {"run.sh", "file", 0755},
	    {"sub", "dir", 0750},      {"sub/secret", "file", 0600}, {"sub/empty", "file", 0644},
	    {"sub/link", "symlink", 0}};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		char *p = in_dir(ctx, "new/deeper/t/");
		char *q = asp_arena_alloc(ctx->a, strlen(p) + strlen(want[i].name) + 1);
		sprintf(q, "%s%s", p, want[i].name);
		asp_stat_result sr;
		asp_status s;
		CONF_CHECKF(ctx, stat_of(ctx, q, false, &sr, &s), "stat %s: %s", q,
		            asp_strerror(s));
		CONF_CHECKF(ctx, strcmp(sr.type, want[i].type) == 0, "%s is a %s, not a %s", q,
		            sr.type, want[i].type);
		if (want[i].mode)
			CONF_CHECKF(ctx, sr.mode == want[i].mode, "%s has mode %o, not %o", q,
			            (unsigned)sr.mode, want[i].mode);
		if (strcmp(want[i].type, "symlink") != 0)
			CONF_CHECKF(ctx, sr.mtime_ns / 1000000000 == MTIME,
			            "%s has mtime %lld s, not the stream's %d", q,
			            (long long)(sr.mtime_ns / 1000000000), MTIME);
		else
			CONF_CHECKF(ctx, sr.target && strcmp(sr.target, "../a.txt") == 0,
			            "%s points to %s, not ../a.txt", q,
			            sr.target ? sr.target : "-");
	}
	FILE_IS(in_dir(ctx, "new/deeper/t/sub/link"), "hello\n", 6);
	DIR_COUNT(ctx->dir, 1);
}

/* One proc_write of the chunked case, on a thread of its own. */
typedef struct piece {
	conf_ctx *ctx;
	uint64_t proc, offset;
	const uint8_t *data;
	size_t len;
	bool eof;
	asp_status st;
	asp_error err;
	pthread_t tid;
} piece;

static void *send_piece(void *arg)
{
	piece *w = arg;
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = w->proc;
	p.data = (asp_bytes){w->data, w->len};
	p.has_offset = true;
	p.offset = w->offset;
	p.eof = w->eof;
	asp_proc_write_result r;
	asp_arena *a = asp_arena_new();
	w->st = w->ctx->ops->proc_write(w->ctx->self, &p, &r, a, &w->err);
	asp_arena_free(a);
	return NULL;
}

#define PIECES 6

void tree_write_chunked(conf_ctx *ctx)
{
	/* 3 MiB in three files, sent as a first chunk and six writes all in flight at once */
	tb b = {0};
	size_t sizes[3] = {2 * MIB, MIB - 7, 5};
	uint8_t *data[3];
	for (int i = 0; i < 3; i++) {
		data[i] = malloc(sizes[i]);
		for (size_t k = 0; k < sizes[i]; k++)
			data[i][k] = (uint8_t)(k * 31 + i * 7 + k / 4099);
		char name[16];
		snprintf(name, sizeof name, "f%d", i);
		tb_member(&b, ASP_TAR_FILE, name, 0644, NULL, data[i], sizes[i]);
	}
	tb_end(&b);
	char *t = in_dir(ctx, "t");
	size_t first = 100000, rest = b.len - first, each = rest / PIECES;
	tb head = {b.p, first, first};
	asp_tree_write_result r;
	asp_error err;
	asp_status st = tree_write(ctx, t, &head, false, &r, &err);
	if (st != ASP_OK)
		goto out;
	piece w[PIECES + 1];
	memset(w, 0, sizeof w);
	size_t off = first;
	for (int i = 0; i <= PIECES; i++) {
		size_t n = i == PIECES ? 0 : i == PIECES - 1 ? b.len - off : each;
		w[i] = (piece){ctx, r.proc, off, b.p + off, n, i == PIECES, ASP_OK, {0}, 0};
		off += n;
	}
	for (int i = PIECES; i >= 0; i--) /* the last first: the responder puts them in order */
		pthread_create(&w[i].tid, NULL, send_piece, &w[i]);
	for (int i = 0; i <= PIECES; i++)
		pthread_join(w[i].tid, NULL);
	for (int i = 0; i <= PIECES && st == ASP_OK; i++)
		if (w[i].st != ASP_OK) {
			st = w[i].st;
			err = w[i].err;
		}
	asp_proc_wait_result wr;
	if (st == ASP_OK)
		st = do_wait(ctx, r.proc, 30000, &wr, &err);
	if (st == ASP_OK && wr.exit_code != 0) {
		conf_fail(ctx, __FILE__, __LINE__, "the stream ended with %lld: %s",
		          (long long)wr.exit_code, wr.error ? wr.error : "-");
		goto out;
	}
	if (st == ASP_OK && (!wr.has_entries || wr.entries != 3 || wr.bytes != 3 * MIB - 2)) {
		conf_fail(ctx, __FILE__, __LINE__, "proc_wait says %llu entries, %llu bytes",
		          (unsigned long long)wr.entries, (unsigned long long)wr.bytes);
		goto out;
	}
	for (int i = 0; i < 3 && st == ASP_OK; i++) {
		char name[16];
		snprintf(name, sizeof name, "t/f%d", i);
		if (!file_is(ctx, __LINE__, in_dir(ctx, name), data[i], sizes[i]))
			break;
	}
	/* the handle is done: a write after its end is refused */
	if (st == ASP_OK && !ctx->failed) {
		asp_status s2 = do_write(ctx, r.proc, "x", 1, false, &err);
		if (s2 == ASP_OK)
			conf_fail(ctx, __FILE__, __LINE__, "a proc_write after eof was taken");
	}
out:
	if (st != ASP_OK)
		conf_fail(ctx, __FILE__, __LINE__, "expected ok, got %s: %s", asp_strerror(st),
		          err.message);
	for (int i = 0; i < 3; i++)
		free(data[i]);
	free(b.p);
}

void tree_write_merge(conf_ctx *ctx)
{
	/* an existing directory: "a" replaced, "keep" kept, "sub" merged into */
	tb b = {0};
	tb_member(&b, ASP_TAR_FILE, "a", 0644, NULL, "new", 3);
	tb_member(&b, ASP_TAR_DIR, "sub", 0755, NULL, NULL, 0);
	tb_member(&b, ASP_TAR_FILE, "sub/y", 0644, NULL, "y", 1);
	tb_end(&b);
	tb old = {0};
	tb_member(&old, ASP_TAR_FILE, "a", 0644, NULL, "old", 3);
	tb_member(&old, ASP_TAR_FILE, "keep", 0644, NULL, "k", 1);
	tb_member(&old, ASP_TAR_FILE, "sub/x", 0644, NULL, "x", 1);
	tb_end(&old);
	char *t = in_dir(ctx, "t");
	asp_tree_write_result r;
	asp_error err;
	asp_status st = tree_write(ctx, t, &old, true, &r, &err);
	if (st == ASP_OK)
		st = tree_write(ctx, t, &b, true, &r, &err);
	free(b.p);
	free(old.p);
	CONF_OK(ctx, st, &err);
	FILE_IS(in_dir(ctx, "t/a"), "new", 3);
	FILE_IS(in_dir(ctx, "t/keep"), "k", 1);
	FILE_IS(in_dir(ctx, "t/sub/x"), "x", 1);
	FILE_IS(in_dir(ctx, "t/sub/y"), "y", 1);
	DIR_COUNT(t, 3);
	/* a file of the stream where the target has a directory: nothing moves */
	tb c = {0};
	tb_member(&c, ASP_TAR_FILE, "a", 0644, NULL, "newer", 5);
	tb_member(&c, ASP_TAR_FILE, "sub", 0644, NULL, "f", 1);
	tb_end(&c);
	st = tree_write(ctx, t, &c, true, &r, &err);
	free(c.p);
	CONF_ERR(ctx, st, ASP_E_IS_A_DIRECTORY, &err);
	FILE_IS(in_dir(ctx, "t/a"), "new", 3);
	DIR_COUNT(t, 3);
	/* onto a file */
	tb d = {0};
	tb_sample(&d);
	st = tree_write(ctx, in_dir(ctx, "t/a"), &d, true, &r, &err);
	free(d.p);
	CONF_ERR(ctx, st, ASP_E_NOT_A_DIRECTORY, &err);
}

typedef struct hostile {
	const char *what, *member;
	void (*build)(tb *b);
} hostile;

static void h_dotdot(tb *b)
{
	tb_member(b, ASP_TAR_FILE, "ok", 0644, NULL, "fine", 4);
	tb_raw(b, "../escape", '0', NULL);
	tb_end(b);
}
static void h_inner(tb *b)
{
	tb_raw(b, "a/../../escape", '0', NULL);
	tb_end(b);
}
static void h_absolute(tb *b)
{
	tb_raw(b, "/tmp/asp-conf-escape", '0', NULL);
	tb_end(b);
}
static void h_through_link(tb *b)
{
	tb_member(b, ASP_TAR_SYMLINK, "l", 0777, "..", NULL, 0);
	tb_member(b, ASP_TAR_FILE, "l/escape", 0644, NULL, "x", 1);
	tb_end(b);
}
static void h_through_abs_link(tb *b)
{
	tb_member(b, ASP_TAR_SYMLINK, "d", 0777, "/tmp", NULL, 0);
	tb_member(b, ASP_TAR_DIR, "d/asp-conf-escape", 0755, NULL, NULL, 0);
	tb_end(b);
}
static void h_hardlink(tb *b)
{
	tb_raw(b, "h", '1', "/etc/passwd");
	tb_end(b);
}
static void h_fifo(tb *b)
{
	tb_raw(b, "p", '6', NULL);
	tb_end(b);
}
static void h_device(tb *b)
{
	tb_raw(b, "null", '3', NULL);
	tb_end(b);
}
static void h_pax(tb *b)
{
	tb_pax_path(b, "../escape");
	tb_end(b);
}
static void h_cut(tb *b)
{
	tb_member(b, ASP_TAR_FILE, "a", 0644, NULL, "whole", 5);
	tb_member(b, ASP_TAR_FILE, "cut", 0644, NULL, "0123456789", 10);
	b->len -= ASP_TAR_BLOCK - 4; /* into the data of "cut", no end blocks */
}
static void h_no_end(tb *b)
{
	tb_member(b, ASP_TAR_FILE, "last", 0644, NULL, "x", 1);
}
static void h_garbage(tb *b)
{
	tb_put(b, "this is not a tar stream at all, not even close", 47);
	static const uint8_t zero[2 * ASP_TAR_BLOCK];
	tb_put(b, zero, sizeof zero);
}

static const hostile hostiles[] = {
    {"a name climbing out", "../escape", h_dotdot},
    {"a '..' inside a name", "a/../../escape", h_inner},
    {"an absolute name", "/tmp/asp-conf-escape", h_absolute},
    {"a symlink out, then a file through it", "l/escape", h_through_link},
    {"a symlink to /tmp, then a directory through it", "d/asp-conf-escape", h_through_abs_link},
    {"a hard link", "h", h_hardlink},
    {"a fifo", "p", h_fifo},
    {"a device", "null", h_device},
    {"a pax path climbing out", "../escape", h_pax},
    {"a stream cut inside a file", "cut", h_cut},
    {"a stream without its end", "last", h_no_end},
    {"bytes that are not tar", NULL, h_garbage},
};

void tree_write_hostile(conf_ctx *ctx)
{
	for (size_t i = 0; i < sizeof hostiles / sizeof hostiles[0]; i++) {
		const hostile *h = &hostiles[i];
		tb b = {0};
		h->build(&b);
		char *t = in_dir(ctx, "t");
		asp_tree_write_result r;
		asp_error err;
		asp_status st = tree_write(ctx, t, &b, true, &r, &err);
		free(b.p);
		CONF_CHECKF(ctx, st == ASP_E_INVALID_ARGUMENT,
		            "%s: expected invalid_argument, got %s%s%s", h->what, asp_strerror(st),
		            st ? ": " : "", st ? err.message : "");
		CONF_CHECKF(ctx, !h->member || strstr(err.message, h->member),
		            "%s: the error does not name '%s': %s", h->what, h->member,
		            err.message);
		asp_stat_result sr;
		asp_status s;
		CONF_CHECKF(ctx, !stat_of(ctx, t, false, &sr, &s) && s == ASP_E_NOT_FOUND,
		            "%s: the refused stream left its target (%s)", h->what,
		            asp_strerror(s));
		CONF_CHECKF(ctx, !stat_of(ctx, "/tmp/asp-conf-escape", false, &sr, &s),
		            "%s: /tmp/asp-conf-escape exists", h->what);
		DIR_COUNT(ctx->dir, 0);
	}
}

void tree_write_cancel(conf_ctx *ctx)
{
	tb b = {0};
	tb_sample(&b);
	char *t = in_dir(ctx, "t");
	/* half the stream, then KILL: nothing stays */
	tb half = {b.p, ASP_TAR_BLOCK * 3, 0};
	asp_tree_write_result r;
	asp_error err;
	asp_status st = tree_write(ctx, t, &half, false, &r, &err);
	if (st == ASP_OK)
		st = do_signal(ctx, r.proc, "KILL", &err);
	asp_proc_wait_result wr;
	if (st == ASP_OK)
		st = do_wait(ctx, r.proc, 15000, &wr, &err);
	if (st != ASP_OK) {
		free(b.p);
		CONF_OK(ctx, st, &err);
	}
	CONF_CHECKF(ctx, wr.exit_code == -1 && wr.signal && !strcmp(wr.signal, "KILL"),
	            "a cancelled tree_write ended with %lld (%s)", (long long)wr.exit_code,
	            wr.signal ? wr.signal : "no signal");
	asp_stat_result sr;
	asp_status s;
	CONF_CHECKF(ctx, !stat_of(ctx, t, false, &sr, &s), "a cancelled tree_write left %s", t);
	/* half the stream, then eof: the cut is the handle's error, named */
	st = tree_write(ctx, t, &half, false, &r, &err);
	if (st == ASP_OK) {
		asp_proc_write_params p;
		asp_proc_write_params_init(&p);
		p.proc = r.proc;
		p.has_offset = true;
		p.offset = half.len;
		p.eof = true;
		asp_proc_write_result pr;
		st = ctx->ops->proc_write(ctx->self, &p, &pr, ctx->a, &err);
		if (st == ASP_OK || st == ASP_E_INVALID_ARGUMENT)
			st = do_wait(ctx, r.proc, 15000, &wr, &err);
	}
	free(b.p);
	CONF_OK(ctx, st, &err);
	CONF_CHECKF(ctx,
	            wr.exit_code == 1 && wr.error_code &&
	                !strcmp(wr.error_code, "invalid_argument") && wr.error,
	            "a cut tree_write ended with %lld, error_code %s", (long long)wr.exit_code,
	            wr.error_code ? wr.error_code : "-");
	CONF_CHECKF(ctx, !stat_of(ctx, t, false, &sr, &s), "a cut tree_write left %s", t);
	/* an offset before what came is refused */
	tb one = {0};
	tb_sample(&one);
	st = tree_write(ctx, t, &one, false, &r, &err);
	free(one.p);
	CONF_OK(ctx, st, &err);
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = r.proc;
	p.data = (asp_bytes){(const uint8_t *)"x", 1};
	p.has_offset = true;
	p.offset = 10;
	asp_proc_write_result pr;
	CONF_ERR(ctx, ctx->ops->proc_write(ctx->self, &p, &pr, ctx->a, &err),
	         ASP_E_INVALID_ARGUMENT, &err);
	CONF_OK(ctx, do_signal(ctx, r.proc, "KILL", &err), &err);
}

/*
 * An empty path names no directory: not_found, as for every op that takes a path
 * (docs/design.md, "Operations"), never the responder's working directory. The stream
 * is an empty archive, so a responder that took "" has nothing to put there.
 */
void tree_write_empty_path(conf_ctx *ctx)
{
	tb b = {0};
	tb_end(&b);
	asp_tree_write_result r;
	asp_error err, serr;
	asp_status st = tree_write(ctx, "", &b, true, &r, &err);
	/* and as the start of a stream, KILLed if it opens */
	asp_status sst = tree_write(ctx, "", &b, false, &r, &serr);
	if (sst == ASP_OK)
		do_signal(ctx, r.proc, "KILL", &serr);
	free(b.p);
	CONF_ERR(ctx, st, ASP_E_NOT_FOUND, &err);
	CONF_CHECKF(ctx, strstr(err.message, "empty"),
	            "the message does not say the path is empty: %s", err.message);
	CONF_ERR(ctx, sst, ASP_E_NOT_FOUND, &serr);
}

/* ---- tree_read -------------------------------------------------------------------- */

typedef struct listing {
	char text[4096];
	size_t len;
	uint64_t bytes;
} listing;

static asp_status list_member(void *user, const asp_tar_member *m, asp_error *err)
{
	(void)err;
	listing *l = user;
	int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%c %o %s%s%s %llu\n",
	                 m->type == ASP_TAR_DIR    ? 'd'
	                 : m->type == ASP_TAR_FILE ? 'f'
	                                           : 'l',
	                 (unsigned)m->mode, m->path[0] ? m->path : ".", m->link ? " -> " : "",
	                 m->link ? m->link : "", (unsigned long long)m->size);
	if (n > 0 && (size_t)n < sizeof l->text - l->len)
		l->len += (size_t)n;
	return ASP_OK;
}

static asp_status list_data(void *user, const uint8_t *p, size_t n, asp_error *err)
{
	(void)p;
	(void)err;
	((listing *)user)->bytes += n;
	return ASP_OK;
}

/* tree_read of `path`, followed; the stream decoded into *l. */
static bool read_tree(conf_ctx *ctx, fx *f, int line, const char *path, const char *const *ex,
                      size_t nex, listing *l, asp_proc_wait_result *end)
{
	coll *c = fx_coll(f, 8 * MIB);
	if (!c)
		return conf_fail(ctx, __FILE__, line, "out of collectors"), false;
	asp_tree_read_params p;
	asp_tree_read_params_init(&p);
	p.path = path;
	if (nex) {
		p.has_exclude = true;
		p.exclude = strv_of(ctx, ex, nex);
	}
	asp_error err;
	uint64_t proc = 0;
	asp_status st = do_tree_read(ctx, f, ctx->self, &p, c, &proc, &err);
	if (st == ASP_E_UNSUPPORTED) {
		conf_na(ctx, "tree_read cannot be followed here: %s", err.message);
		return false;
	}
	if (st != ASP_OK)
		return conf_fail(ctx, __FILE__, line, "tree_read %s: %s: %s", path,
		                 asp_strerror(st), err.message),
		       false;
	if (!h_end(ctx, line, c))
		return false;
	end->exit_code = c->ev.exit_code;
	end->has_entries = c->ev.has_entries;
	end->entries = c->ev.entries;
	end->bytes = c->ev.bytes;
	if (c->ev.exit_code != 0)
		return conf_fail(ctx, __FILE__, line, "tree_read ended with %lld: %s",
		                 (long long)c->ev.exit_code, c->ev.error ? c->ev.error : "-"),
		       false;
	memset(l, 0, sizeof *l);
	asp_tar_reader_cb cb = {.member = list_member, .data = list_data};
	asp_tar_reader *r = asp_tar_reader_new(&cb, l);
	st = asp_tar_reader_feed(r, c->data[0], c->len[0], &err);
	if (st == ASP_OK)
		st = asp_tar_reader_end(r, &err);
	asp_tar_reader_free(r);
	if (st != ASP_OK)
		return conf_fail(ctx, __FILE__, line, "tree_read's stream of %zu bytes: %s",
		                 c->len[0], err.message),
		       false;
	return true;
}

PROC_CASE(tree_read_roundtrip)
{
	tb b = {0};
	tb_sample(&b);
	char *t = in_dir(ctx, "t");
	asp_tree_write_result r;
	asp_error err;
	asp_status st = tree_write(ctx, t, &b, true, &r, &err);
	free(b.p);
	CONF_OK(ctx, st, &err);
	listing l;
	asp_proc_wait_result end;
	CONF_REQ(ctx, read_tree(ctx, f, __LINE__, t, NULL, 0, &l, &end));
	static const char want[] = "d 755 . 0\n"
	                           "f 644 a.txt 6\n"
	                           "f 755 run.sh 10\n"
	                           "d 750 sub 0\n"
	                           "f 644 sub/empty 0\n"
	                           "l 777 sub/link -> ../a.txt 0\n"
	                           "f 600 sub/secret 1\n";
	/* a symlink's mode is whatever the system keeps: compare without it */
	char got[4096];
	snprintf(got, sizeof got, "%s", l.text);
	char *lk = strstr(got, "l ");
	if (lk && lk[2] >= '0' && lk[2] <= '7')
		memcpy(lk + 2, "777", 3);
	CONF_CHECKF(ctx, strcmp(got, want) == 0, "tree_read sent\n%swant\n%s", got, want);
	CONF_CHECKF(ctx, l.bytes == 17 && end.has_entries && end.entries == 6 && end.bytes == 17,
	            "%llu bytes of data; exit says %llu entries, %llu bytes",
	            (unsigned long long)l.bytes, (unsigned long long)end.entries,
	            (unsigned long long)end.bytes);
	const char *ex[] = {"*.sh", "sub"};
	CONF_REQ(ctx, read_tree(ctx, f, __LINE__, t, ex, 2, &l, &end));
	CONF_CHECKF(ctx, strcmp(l.text, "d 755 . 0\nf 644 a.txt 6\n") == 0,
	            "excluding *.sh and sub sent\n%s", l.text);
}

/* tree_read's refusals, through the follower where the transport has one (native SSH
 * sends the stream nowhere else): the call fails, nothing is followed. */
static asp_status read_error(conf_ctx *ctx, fx *f, const char *path, asp_error *err)
{
	coll *c = fx_coll(f, 0);
	if (!c)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of collectors");
	asp_tree_read_params p;
	asp_tree_read_params_init(&p);
	p.path = path;
	uint64_t proc = 0;
	return do_tree_read(ctx, f, ctx->self, &p, c, &proc, err);
}

PROC_CASE(tree_read_errors)
{
	asp_error err;
	asp_status st = read_error(ctx, f, in_dir(ctx, "missing"), &err);
	if (st == ASP_E_UNSUPPORTED) {
		conf_na(ctx, "%s", err.message);
		return;
	}
	CONF_ERR(ctx, st, ASP_E_NOT_FOUND, &err);
	tb b = {0};
	tb_sample(&b);
	asp_tree_write_result wr;
	st = tree_write(ctx, in_dir(ctx, "t"), &b, true, &wr, &err);
	free(b.p);
	CONF_OK(ctx, st, &err);
	CONF_ERR(ctx, read_error(ctx, f, in_dir(ctx, "t/a.txt"), &err), ASP_E_NOT_A_DIRECTORY,
	         &err);
}

/* An empty path names no directory: not_found, not a stream of the working directory. */
PROC_CASE(tree_read_empty_path)
{
	asp_error err;
	asp_status st = read_error(ctx, f, "", &err);
	if (st == ASP_E_UNSUPPORTED) {
		conf_na(ctx, "%s", err.message);
		return;
	}
	CONF_ERR(ctx, st, ASP_E_NOT_FOUND, &err);
	CONF_CHECKF(ctx, strstr(err.message, "empty"),
	            "the message does not say the path is empty: %s", err.message);
}
