/*
 * The file ops over SFTP, answering with the same error codes as the local backend.
 * SFTP v3's statuses are coarse (OpenSSH's sftp-server turns ENOTDIR into NO_SUCH_FILE
 * and EEXIST, ENOTEMPTY, EISDIR into FAILURE), so on an error an extra stat or two finds
 * the precise errno. Bulk data keeps many READ or WRITE requests in flight.
 */
#include "ssh_sftp.h"

#include "asp/transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#define INFLIGHT_BYTES (8u * 1024u * 1024u) /* bulk: bytes requested but not yet answered */
#define MIN_INFLIGHT   4
#define NEW_DIR_MODE   0755

/* ---- small helpers --------------------------------------------------------------------- */

static const char *type_name(uint32_t perm, uint32_t flags)
{
	if (!(flags & FXA_PERMISSIONS))
		return "file";
	switch (perm & S_IFMT) {
	case S_IFDIR: return "dir";
	case S_IFLNK: return "symlink";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	case S_IFCHR: return "char";
	case S_IFBLK: return "block";
	default: return "file";
	}
}

static bool is_dir(const sattr *a)
{
	return (a->flags & FXA_PERMISSIONS) && S_ISDIR(a->perm);
}

/* The errno behind a status, where the status alone says it. */
static int fx_errno(int fx)
{
	switch (fx) {
	case FX_OK: return 0;
	case FX_NO_SUCH_FILE: return ENOENT;
	case FX_PERMISSION_DENIED: return EACCES;
	case FX_BAD_MESSAGE: return EINVAL;
	case FX_OP_UNSUPPORTED: return ENOSYS;
	default: return EIO;
	}
}

/* The server's text of a STATUS reply, for io_error messages. */
static void fx_text(const sreq *r, char *out, size_t cap)
{
	out[0] = '\0';
	if (r->type != FXP_STATUS || !r->body)
		return;
	scur c = {r->body, r->len, false};
	(void)sc_u32(&c);
	size_t n;
	const uint8_t *s = sc_str(&c, &n);
	if (!c.bad && n)
		snprintf(out, cap, "%.*s", (int)(n > 200 ? 200 : n), (const char *)s);
}

/* io_error for an errno the status could not tell (EIO): with the server's words. */
static asp_status fx_error(asp_error *err, int e, const char *srv, const char *path,
                           const char *what)
{
	if (e == ENOSYS)
		return asp_error_set(err, ASP_E_UNSUPPORTED, path,
		                     "%s: the sftp server does not "
		                     "support this",
		                     what);
	if (e == EIO && srv && srv[0])
		return asp_error_set(err, ASP_E_IO_ERROR, path, "%s: %s (sftp)", what, srv);
	return asp_error_errno(err, e, path, "%s", what);
}

/* ---- one round trip ----------------------------------------------------------------- */

/*
 * Sends a request whose arguments are up to two strings (a path, or from and to) and
 * optional attributes, and waits for the reply. *fx gets the status (FX_OK for a
 * non-status reply); the reply stays in *r for the caller to parse and forget.
 */
static asp_status send_call(sftpc *f, uint8_t type, const char *ext, const char *s1, const char *s2,
                            const sattr *at, sreq *r, asp_error *err)
{
	sbuild b;
	sb_init(&b);
	if (ext)
		sb_cstr(&b, ext);
	if (s1)
		sb_cstr(&b, s1);
	if (s2)
		sb_cstr(&b, s2);
	if (at)
		sb_attrs(&b, at);
	memset(r, 0, sizeof *r);
	asp_status st = sftp_send(f, type, &b, NULL, 0, r, err);
	sb_free(&b);
	return st;
}

static asp_status call(sftpc *f, uint8_t type, const char *ext, const char *s1, const char *s2,
                       const sattr *at, sreq *r, int *fx, asp_error *err)
{
	asp_status st = send_call(f, type, ext, s1, s2, at, r, err);
	if (st == ASP_OK)
		st = sftp_await(f, r, err);
	if (st != ASP_OK) {
		sftp_forget(f, r);
		return st;
	}
	int s = sftp_status(r);
	*fx = s < 0 ? FX_OK : s;
	return ASP_OK;
}

/* A request answered by a status only; *fx is that status. */
static asp_status call_status(sftpc *f, uint8_t type, const char *ext, const char *s1,
                              const char *s2, const sattr *at, int *fx, char *srv, size_t cap,
                              asp_error *err)
{
	sreq r;
	asp_status st = call(f, type, ext, s1, s2, at, &r, fx, err);
	if (st != ASP_OK)
		return st;
	if (srv)
		fx_text(&r, srv, cap);
	if (*fx == FX_OK && r.type != FXP_STATUS)
		*fx = FX_BAD_MESSAGE;
	sftp_forget(f, &r);
	return ASP_OK;
}

/* stat or lstat; *fx FX_OK with *a filled, or the status. */
static asp_status do_stat(sftpc *f, const char *path, bool follow, sattr *a, int *fx,
                          asp_error *err)
{
	sreq r;
	asp_status st = call(f, follow ? FXP_STAT : FXP_LSTAT, NULL, path, NULL, NULL, &r, fx, err);
	if (st != ASP_OK)
		return st;
	if (*fx == FX_OK) {
		scur c = {r.body, r.len, false};
		if (r.type == FXP_ATTRS)
			sc_attrs(&c, a);
		if (r.type != FXP_ATTRS || c.bad)
			*fx = FX_BAD_MESSAGE;
	}
	sftp_forget(f, &r);
	return ASP_OK;
}

/* The one name of NAME reply r (realpath, readlink) in a malloc'd *out, or *fx the status;
 * r is forgotten. */
static asp_status take_name(sftpc *f, sreq *r, char **out, int *fx, asp_error *err)
{
	*out = NULL;
	asp_status st = ASP_OK;
	int s = sftp_status(r);
	*fx = s < 0 ? FX_OK : s;
	if (*fx == FX_OK) {
		scur c = {r->body, r->len, false};
		uint32_t n = r->type == FXP_NAME ? sc_u32(&c) : 0;
		size_t l = 0;
		const uint8_t *p = n >= 1 ? sc_str(&c, &l) : NULL;
		if (!p || c.bad || memchr(p, '\0', l)) {
			*fx = FX_BAD_MESSAGE;
		} else {
			*out = strndup((const char *)p, l);
			if (!*out)
				st = asp_error_oom(err, "sftp", NULL);
		}
	}
	sftp_forget(f, r);
	return st;
}

/* The one name of a NAME reply (realpath, readlink), in a malloc'd string. */
static asp_status do_name(sftpc *f, uint8_t type, const char *path, char **out, int *fx,
                          asp_error *err)
{
	*out = NULL;
	sreq r;
	asp_status st = call(f, type, NULL, path, NULL, NULL, &r, fx, err);
	if (st != ASP_OK)
		return st;
	return take_name(f, &r, out, fx, err);
}

/* A handle from OPEN or OPENDIR; *fx the status when refused. */
typedef struct handle {
	uint8_t h[256];
	size_t len;
} handle;

/* Sends OPEN (OPENDIR when `dir`) of `path` without waiting; `r` gets the reply. */
static asp_status send_open(sftpc *f, const char *path, uint32_t flags, const sattr *at, bool dir,
                            sreq *r, asp_error *err)
{
	sbuild b;
	sb_init(&b);
	sb_cstr(&b, path);
	if (!dir) {
		sb_u32(&b, flags);
		sb_u32(&b, at ? at->flags : 0);
		if (at && (at->flags & FXA_PERMISSIONS))
			sb_u32(&b, at->perm);
	}
	memset(r, 0, sizeof *r);
	asp_status st = sftp_send(f, dir ? FXP_OPENDIR : FXP_OPEN, &b, NULL, 0, r, err);
	sb_free(&b);
	return st;
}

/* An OPEN's answer: the handle, or *fx the status (server text in srv). */
static void open_result(const sreq *r, handle *h, int *fx, char *srv, size_t cap)
{
	int s = sftp_status(r);
	*fx = s < 0 ? FX_OK : (s == FX_OK ? FX_FAILURE : s);
	if (srv)
		fx_text(r, srv, cap);
	if (*fx != FX_OK)
		return;
	scur c = {r->body, r->len, false};
	size_t l = 0;
	const uint8_t *p = r->type == FXP_HANDLE ? sc_str(&c, &l) : NULL;
	if (!p || c.bad || l > sizeof h->h) {
		*fx = FX_BAD_MESSAGE;
	} else {
		memcpy(h->h, p, l);
		h->len = l;
	}
}

static asp_status do_open(sftpc *f, const char *path, uint32_t flags, const sattr *at, bool dir,
                          handle *h, int *fx, char *srv, size_t cap, asp_error *err)
{
	sreq r;
	asp_status st = send_open(f, path, flags, at, dir, &r, err);
	if (st == ASP_OK)
		st = sftp_await(f, &r, err);
	if (st == ASP_OK)
		open_result(&r, h, fx, srv, cap);
	sftp_forget(f, &r);
	return st;
}

/* Sends CLOSE and does not wait: its reply is dropped. */
static void close_nowait(sftpc *f, const handle *h)
{
	sbuild b;
	sb_init(&b);
	sb_str(&b, h->h, h->len);
	sreq r = {0};
	asp_error e;
	if (sftp_send(f, FXP_CLOSE, &b, NULL, 0, &r, &e) == ASP_OK)
		sftp_forget(f, &r);
	sb_free(&b);
}

/*
 * The server said NO_SUCH_FILE for `path`: ENOTDIR when a leading component (or the
 * path itself, written with a trailing slash) is not a directory, else ENOENT.
 */
static asp_status missing_errno(sftpc *f, const char *path, int *e, asp_error *err)
{
	*e = ENOENT;
	char *p = strdup(path);
	if (!p)
		return asp_error_oom(err, "sftp", NULL);
	size_t n = strlen(p);
	bool slash = n > 1 && p[n - 1] == '/';
	while (n > 1 && p[n - 1] == '/')
		p[--n] = '\0';
	asp_status st = ASP_OK;
	sattr a;
	int fx;
	if (slash) {
		st = do_stat(f, p, true, &a, &fx, err);
		if (st != ASP_OK || fx == FX_OK) {
			if (st == ASP_OK && !is_dir(&a))
				*e = ENOTDIR;
			free(p);
			return st;
		}
	}
	for (int i = 0; i < 4096; i++) {
		char *sl = strrchr(p, '/');
		if (!sl)
			break; /* relative: its parent is the start directory, which exists */
		if (sl == p) {
			break; /* the root exists */
		}
		*sl = '\0';
		while (sl > p + 1 && sl[-1] == '/')
			*--sl = '\0';
		st = do_stat(f, p, true, &a, &fx, err);
		if (st != ASP_OK)
			break;
		if (fx == FX_OK) {
			if (!is_dir(&a))
				*e = ENOTDIR;
			break;
		}
		if (fx != FX_NO_SUCH_FILE)
			break;
	}
	free(p);
	return st;
}

/* The errno for a failed op on `path` with status fx (NO_SUCH_FILE refined). */
static asp_status path_errno(sftpc *f, const char *path, int fx, int *e, asp_error *err)
{
	if (fx == FX_NO_SUCH_FILE)
		return missing_errno(f, path, e, err);
	*e = fx_errno(fx);
	return ASP_OK;
}

/* The error of `op` on `path` after status fx, in the local backend's words. */
static asp_status op_error(sftpc *f, const char *op, const char *path, int fx, const char *srv,
                           asp_error *err)
{
	int e;
	asp_status st = path_errno(f, path, fx, &e, err);
	if (st != ASP_OK)
		return st;
	char what[ASP_ERROR_PATH_MAX + 32];
	snprintf(what, sizeof what, "%s %s", op, path);
	return fx_error(err, e, srv, path, what);
}

static int64_t mtime_ns(const sattr *a)
{
	return (a->flags & FXA_ACMODTIME) ? (int64_t)a->mtime * 1000000000 : 0;
}

asp_status ssh_sftp_realpath(sftpc *f, const char *path, char **out, asp_error *err)
{
	int fx;
	sshc_lock(f->c);
	asp_status st = do_name(f, FXP_REALPATH, path, out, &fx, err);
	if (st == ASP_OK && fx != FX_OK)
		st = asp_error_errno(err, fx_errno(fx), path, "realpath %s", path);
	sshc_unlock(f->c);
	return st;
}

/* ---- stat ---------------------------------------------------------------------------- */

asp_status ssh_sftp_stat(sftpc *f, const asp_stat_params *p, asp_stat_result *r, asp_arena *a,
                         asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("stat", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	sattr at;
	int fx;
	char *target = NULL;
	sshc_lock(f->c);
	st = do_stat(f, p->path, p->follow, &at, &fx, err);
	if (st == ASP_OK && fx != FX_OK)
		st = op_error(f, "stat", p->path, fx, NULL, err);
	if (st == ASP_OK && (at.flags & FXA_PERMISSIONS) && S_ISLNK(at.perm)) {
		st = do_name(f, FXP_READLINK, p->path, &target, &fx, err);
		if (st == ASP_OK && fx != FX_OK)
			st = asp_error_errno(err, fx_errno(fx), p->path, "stat %s: readlink",
			                     p->path);
	}
	sshc_unlock(f->c);
	if (st != ASP_OK) {
		free(target);
		return st;
	}
	r->type = type_name(at.perm, at.flags);
	r->size = at.size;
	r->mode = at.perm & 07777;
	r->mtime_ns = mtime_ns(&at);
	r->uid = at.uid;
	r->gid = at.gid;
	if (target) {
		r->target = asp_arena_strndup(a, target, strlen(target));
		free(target);
		if (!r->target)
			return asp_error_oom(err, "stat", NULL);
	}
	return ASP_OK;
}

/* ---- directories ----------------------------------------------------------------------- */

typedef struct dent {
	char *name;
	sattr a;
} dent;

typedef struct dlist {
	dent *v;
	size_t n, cap;
} dlist;

static void dlist_free(dlist *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i].name);
	free(d->v);
	memset(d, 0, sizeof *d);
}

/* Appends the entries of one NAME reply, without "." and "..". -1 when malformed or OOM. */
static int take_names(const sreq *r, dlist *d)
{
	scur c = {r->body, r->len, false};
	uint32_t n = sc_u32(&c);
	for (uint32_t i = 0; i < n && !c.bad; i++) {
		size_t nl, ll;
		const uint8_t *nm = sc_str(&c, &nl);
		sc_str(&c, &ll); /* longname: ls -l text, unused */
		sattr a;
		sc_attrs(&c, &a);
		if (c.bad || memchr(nm, '\0', nl))
			return -1;
		if ((nl == 1 && nm[0] == '.') || (nl == 2 && nm[0] == '.' && nm[1] == '.'))
			continue;
		if (d->n == d->cap) {
			size_t ncap = d->cap ? d->cap * 2 : 32;
			dent *nv = realloc(d->v, ncap * sizeof *nv);
			if (!nv)
				return -1;
			d->v = nv;
			d->cap = ncap;
		}
		d->v[d->n].name = strndup((const char *)nm, nl);
		if (!d->v[d->n].name)
			return -1;
		d->v[d->n].a = a;
		d->n++;
	}
	return c.bad ? -1 : 0;
}

/* Whether the OPEN's answer `h` is the handle guessed. */
static bool hit(const handle *h, const handle *g)
{
	return h->len == g->len && memcmp(h->h, g->h, g->len) == 0;
}

/* One READDIR answer in r: 0 names taken, 1 the end, -1 *fx the status, -2 out of memory. */
static int take_readdir(const sreq *r, dlist *out, int *fx, char *srv, size_t cap)
{
	int s = sftp_status(r);
	if (s == FX_EOF)
		return 1;
	if (s >= 0 || r->type != FXP_NAME) {
		*fx = s > 0 ? s : FX_BAD_MESSAGE;
		if (srv)
			fx_text(r, srv, cap);
		return -1;
	}
	return take_names(r, out) < 0 ? -2 : 0;
}

static asp_status send_readdir(sftpc *f, const handle *h, sreq *r, asp_error *err)
{
	sbuild b;
	sb_init(&b);
	sb_str(&b, h->h, h->len);
	memset(r, 0, sizeof *r);
	asp_status st = sftp_send(f, FXP_READDIR, &b, NULL, 0, r, err);
	sb_free(&b);
	return st;
}

/*
 * Reads the entries of a directory (their attributes are lstat's: OpenSSH's sftp-server
 * does not follow symlinks there). `first_only` stops after one batch. *fx is the
 * status when it could not be read.
 *
 * OPENDIR goes out with two READDIRs on the handle it will get (ssh_sftp_handles.c):
 * sftp-server answers up to 100 names a READDIR, so a directory of that many is read,
 * its end included, in one round trip. An OPENDIR never blocks (opendir(3) opens with
 * O_NONBLOCK), so nothing queued behind it waits on a fifo.
 */
static asp_status read_dir(sftpc *f, const char *path, bool first_only, dlist *out, int *fx,
                           char *srv, size_t cap, asp_error *err)
{
	asp_status st = sftp_start(f, err);
	if (st != ASP_OK)
		return st;
	handle g = {.len = 4}, h;
	sreq ro, rd[2];
	size_t nrd = 0, ahead = first_only ? 1 : 2;
	sftp_batch_begin(f);
	bool guessed = sftp_handles_guess(f, g.h);
	st = send_open(f, path, 0, NULL, true, &ro, err);
	for (; st == ASP_OK && guessed && nrd < ahead; nrd++)
		st = send_readdir(f, &g, &rd[nrd], err);
	sftp_batch_end(f);
	if (st == ASP_OK)
		st = sftp_await(f, &ro, err);
	if (st == ASP_OK)
		open_result(&ro, &h, fx, srv, cap);
	sftp_forget(f, &ro);
	if (st != ASP_OK || *fx != FX_OK || !hit(&h, &g)) {
		for (size_t i = 0; i < nrd; i++)
			sftp_forget(f, &rd[i]); /* on a wrong handle, or after a refused OPENDIR */
		if (st != ASP_OK || *fx != FX_OK)
			return st;
		nrd = 0;
	}
	int rc = 0;
	for (size_t i = 0; i < nrd; i++) {
		if (st == ASP_OK && rc == 0 && !(first_only && out->n > 0)) {
			st = sftp_await(f, &rd[i], err);
			if (st == ASP_OK)
				rc = take_readdir(&rd[i], out, fx, srv, cap);
		}
		sftp_forget(f, &rd[i]);
	}
	while (st == ASP_OK && rc == 0 && !(first_only && out->n > 0)) {
		sreq r;
		st = send_readdir(f, &h, &r, err);
		if (st == ASP_OK)
			st = sftp_await(f, &r, err);
		if (st == ASP_OK)
			rc = take_readdir(&r, out, fx, srv, cap);
		sftp_forget(f, &r);
	}
	if (st == ASP_OK && rc == -2)
		st = asp_error_oom(err, "list", NULL);
	close_nowait(f, &h);
	return st;
}

static int by_name(const void *x, const void *y)
{
	/* strcmp compares as unsigned char: bytewise, as the protocol asks */
	return strcmp(((const asp_list_entry *)x)->name, ((const asp_list_entry *)y)->name);
}

/* The entries of d into r, in a, by name. */
static asp_status list_result(const dlist *d, asp_list_result *r, asp_arena *a, asp_error *err)
{
	asp_list_entry *items = d->n ? asp_arena_alloc(a, d->n * sizeof *items) : NULL;
	if (d->n && !items)
		return asp_error_oom(err, "list", NULL);
	for (size_t i = 0; i < d->n; i++) {
		asp_list_entry *it = &items[i];
		it->name = asp_arena_strndup(a, d->v[i].name, strlen(d->v[i].name));
		if (!it->name)
			return asp_error_oom(err, "list", NULL);
		it->type = type_name(d->v[i].a.perm, d->v[i].a.flags);
		it->size = d->v[i].a.size;
		it->mode = d->v[i].a.perm & 07777;
		it->mtime_ns = mtime_ns(&d->v[i].a);
	}
	if (d->n > 1)
		qsort(items, d->n, sizeof *items, by_name);
	r->entries.items = items;
	r->entries.count = d->n;
	return ASP_OK;
}

asp_status ssh_sftp_list(sftpc *f, const asp_list_params *p, asp_list_result *r, asp_arena *a,
                         asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("list", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	dlist d = {0};
	int fx = FX_OK;
	char srv[256] = "";
	sshc_lock(f->c);
	st = read_dir(f, p->path, false, &d, &fx, srv, sizeof srv, err);
	if (st == ASP_OK && fx != FX_OK) {
		/* opendir on a non-directory is ENOTDIR, which the server calls NO_SUCH_FILE */
		sattr at;
		int sfx;
		st = do_stat(f, p->path, true, &at, &sfx, err);
		if (st == ASP_OK && sfx == FX_OK && !is_dir(&at) && fx == FX_NO_SUCH_FILE)
			st = asp_error_errno(err, ENOTDIR, p->path, "list %s", p->path);
		else if (st == ASP_OK)
			st = op_error(f, "list", p->path, fx, srv, err);
	}
	sshc_unlock(f->c);
	if (st == ASP_OK)
		st = list_result(&d, r, a, err);
	dlist_free(&d);
	return st;
}

/* ---- bulk transfer ------------------------------------------------------------------- */

struct chunk {
	sreq r;
	uint64_t off; /* relative to the start of the transfer */
	size_t len;
};

static size_t inflight_slots(uint32_t chunk)
{
	size_t n = INFLIGHT_BYTES / (chunk ? chunk : 1);
	return n < MIN_INFLIGHT ? MIN_INFLIGHT : n;
}

static void forget_ring(sftpc *f, struct chunk *q, size_t slots, size_t head, size_t count)
{
	for (size_t i = 0; i < count; i++)
		sftp_forget(f, &q[(head + i) % slots].r);
}

/* Sends a READ or WRITE of chunk `c` at `base` + c->off (WRITE: `data` is its bytes). */
static asp_status send_chunk(sftpc *f, uint8_t type, const handle *h, uint64_t base,
                             struct chunk *c, const uint8_t *data, asp_error *err)
{
	sbuild b;
	sb_init(&b);
	sb_str(&b, h->h, h->len);
	sb_u64(&b, base + c->off);
	sb_u32(&b, (uint32_t)c->len);
	asp_status st = sftp_send(f, type, &b, data, data ? c->len : 0, &c->r, err);
	sb_free(&b);
	return st;
}

/*
 * Reads up to `want` bytes at `base` into buf with many READs in flight; a short answer
 * is asked again for the rest. *got counts the bytes from the start that arrived; *eof
 * tells whether the file ended before `want`. *fx is a status other than EOF, if any.
 */
static asp_status bulk_read(sftpc *f, const handle *h, uint64_t base, uint8_t *buf, size_t want,
                            size_t *got, bool *eof, int *fx, char *srv, size_t cap, asp_error *err)
{
	*got = 0;
	*eof = false;
	*fx = FX_OK;
	size_t csz = f->max_read ? f->max_read : 32768;
	size_t slots = inflight_slots((uint32_t)csz);
	struct chunk *q = calloc(slots, sizeof *q);
	if (!q)
		return asp_error_oom(err, "read", NULL);
	size_t head = 0, count = 0;
	uint64_t next = 0, limit = want;
	asp_status st = ASP_OK;
	for (;;) {
		while (count < slots && next < limit) {
			struct chunk *c = &q[(head + count) % slots];
			c->off = next;
			c->len = limit - next < csz ? (size_t)(limit - next) : csz;
			next += c->len;
			memset(&c->r, 0, sizeof c->r);
			c->r.dst = buf + c->off;
			c->r.dst_cap = c->len;
			st = send_chunk(f, FXP_READ, h, base, c, NULL, err);
			if (st != ASP_OK)
				goto out;
			count++;
		}
		if (count == 0)
			break;
		struct chunk *c = &q[head];
		st = sftp_await(f, &c->r, err);
		if (st != ASP_OK)
			goto out;
		int s = sftp_status(&c->r);
		if (c->r.type == FXP_DATA) {
			if (c->r.len == 0 || c->off >= limit) {
				if (c->r.len == 0 && c->off < limit)
					limit = c->off;
			} else if (c->r.len < c->len && c->off + c->r.len < limit) {
				/* short: ask for the rest of this chunk (its slot is the one freed
				 * now) */
				struct chunk rest = {.off = c->off + c->r.len,
				                     .len = c->len - c->r.len};
				sftp_forget(f, &c->r);
				head = (head + 1) % slots;
				count--;
				struct chunk *t = &q[(head + count) % slots];
				*t = rest;
				t->r.dst = buf + t->off;
				t->r.dst_cap = t->len;
				st = send_chunk(f, FXP_READ, h, base, t, NULL, err);
				if (st != ASP_OK)
					goto out;
				count++;
				continue;
			}
		} else if (s == FX_EOF) {
			if (c->off < limit)
				limit = c->off;
		} else {
			*fx = s > 0 ? s : FX_BAD_MESSAGE;
			fx_text(&c->r, srv, cap);
			goto out;
		}
		sftp_forget(f, &c->r);
		head = (head + 1) % slots;
		count--;
	}
	*got = (size_t)limit;
	*eof = limit < want;
out:
	forget_ring(f, q, slots, head, count);
	free(q);
	return st;
}

/* Writes `len` bytes at `base` with many WRITEs in flight (no copy: the data is the tail). */
static asp_status bulk_write(sftpc *f, const handle *h, uint64_t base, const uint8_t *data,
                             size_t len, int *fx, char *srv, size_t cap, asp_error *err)
{
	*fx = FX_OK;
	size_t csz = f->max_write ? f->max_write : 32768;
	size_t slots = inflight_slots((uint32_t)csz);
	struct chunk *q = calloc(slots, sizeof *q);
	if (!q)
		return asp_error_oom(err, "write", NULL);
	size_t head = 0, count = 0;
	uint64_t next = 0;
	asp_status st = ASP_OK;
	for (;;) {
		while (count < slots && next < len && *fx == FX_OK) {
			struct chunk *c = &q[(head + count) % slots];
			c->off = next;
			c->len = len - next < csz ? (size_t)(len - next) : csz;
			next += c->len;
			memset(&c->r, 0, sizeof c->r);
			st = send_chunk(f, FXP_WRITE, h, base, c, data + c->off, err);
			if (st != ASP_OK)
				goto out;
			count++;
		}
		if (count == 0)
			break;
		struct chunk *c = &q[head];
		st = sftp_await(f, &c->r, err);
		if (st != ASP_OK)
			goto out;
		int s = sftp_status(&c->r);
		if (s != FX_OK && *fx == FX_OK) {
			*fx = s > 0 ? s : FX_BAD_MESSAGE;
			fx_text(&c->r, srv, cap);
		}
		sftp_forget(f, &c->r);
		head = (head + 1) % slots;
		count--;
	}
out:
	forget_ring(f, q, slots, head, count);
	free(q);
	return st;
}

/* A request on an open handle (FSTAT, CLOSE, FSETSTAT, fsync), sent now, awaited later. */
static asp_status send_on_handle(sftpc *f, uint8_t type, const char *ext, const handle *h,
                                 const sattr *at, sreq *r, asp_error *err)
{
	sbuild b;
	sb_init(&b);
	if (ext)
		sb_cstr(&b, ext);
	sb_str(&b, h->h, h->len);
	if (at)
		sb_attrs(&b, at);
	memset(r, 0, sizeof *r);
	asp_status st = sftp_send(f, type, &b, NULL, 0, r, err);
	sb_free(&b);
	return st;
}

/* Awaits a status reply; *fx gets it (kept when already set to an error). */
static asp_status await_status(sftpc *f, sreq *r, int *fx, char *srv, size_t cap, asp_error *err)
{
	asp_status st = sftp_await(f, r, err);
	if (st == ASP_OK) {
		int s = sftp_status(r);
		if (*fx == FX_OK && s != FX_OK) {
			*fx = s > 0 ? s : FX_BAD_MESSAGE;
			if (srv)
				fx_text(r, srv, cap);
		}
	}
	sftp_forget(f, r);
	return st;
}

/* ---- OPEN with what follows it: one round trip ------------------------------------------ */

/*
 * Bytes of READs or WRITEs sent on a guessed handle (ssh_sftp_handles.c) with its OPEN:
 * most files whole, and little wasted when the guess misses.
 */
#define GUESS_BYTES (1u << 20)

/* The STAT answer in r: *fx FX_OK with *a filled, or the status. */
static void stat_result(const sreq *r, sattr *a, int *fx)
{
	int s = sftp_status(r);
	*fx = s < 0 ? FX_OK : s;
	if (*fx != FX_OK)
		return;
	scur c = {r->body, r->len, false};
	if (r->type == FXP_ATTRS)
		sc_attrs(&c, a);
	if (r->type != FXP_ATTRS || c.bad)
		*fx = FX_BAD_MESSAGE;
}

/*
 * sftp-server opens a fifo with a blocking open(2), which waits for a writer and holds
 * every request behind it: open it here read-write (which never waits on Linux) for a
 * moment, through an exec channel, so its open returns and its reads see the end. The
 * connection's lock is let go meanwhile (the exec takes it).
 */
static void unblock_fifo(sftpc *f, const char *path)
{
	static const char script[] = ": <>\"$1\"";
	const char *argv[] = {"sh", "-c", script, "sh", path};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = sizeof argv / sizeof argv[0];
	p.timeout_ms = 10000;
	asp_arena *a = asp_arena_new();
	if (!a)
		return;
	asp_exec_result r;
	asp_error e;
	sshc_unlock(f->c);
	(void)ssh_exec_run(f->c, &p, 4096, &r, a, &e); /* failed: the OPEN's timeout says so */
	sshc_lock(f->c);
	asp_arena_free(a);
}

/*
 * OPEN `path` for reading and READ up to `want` bytes at `base` into buf. The OPEN and the
 * first READs (up to GUESS_BYTES) go out together on the handle the OPEN is expected to
 * get, so a small file takes one round trip; without a guess, or when it missed, the
 * reads follow the OPEN's answer. With `at`, a STAT goes first in the same batch (*sfx
 * its status, *at its attributes): a regular file's size trims `want`, and a fifo is
 * unblocked before the OPEN's answer is awaited. *ofx: the OPEN's status; then *h is its
 * handle (the caller closes it), *got and *eof as bulk_read's, *fx a read's failure.
 */
static asp_status open_read(sftpc *f, const char *path, uint64_t base, uint8_t **bufp, size_t want,
                            sattr *at, int *sfx, handle *h, size_t *got, bool *eof, int *ofx,
                            int *fx, char *srv, size_t cap, asp_error *err)
{
	uint8_t *buf = *bufp;
	*got = 0;
	*eof = false;
	*fx = *ofx = FX_OK;
	asp_status st = sftp_start(f, err);
	if (st != ASP_OK)
		return st;
	sreq rs = {0};
	size_t csz = f->max_read ? f->max_read : 32768; /* the default until the limits came */
	size_t ahead = want < GUESS_BYTES ? want : GUESS_BYTES;
	size_t n = ahead ? (ahead + csz - 1) / csz : 0, sent = 0;
	struct chunk *q = n ? calloc(n, sizeof *q) : NULL;
	handle g = {.len = 4};
	sreq ro = {0};
	sftp_batch_begin(f);
	bool guessed = q && sftp_handles_guess(f, g.h);
	bool stat_sent = false;
	if (at) {
		st = send_call(f, FXP_STAT, NULL, path, NULL, NULL, &rs, err);
		stat_sent = st == ASP_OK;
	}
	if (st == ASP_OK)
		st = send_open(f, path, FXF_READ, NULL, false, &ro, err);
	for (; st == ASP_OK && guessed && sent < n; sent++) {
		struct chunk *c = &q[sent];
		c->off = sent * csz;
		c->len = ahead - c->off < csz ? ahead - c->off : csz;
		c->r.dst = buf + c->off;
		c->r.dst_cap = c->len;
		st = send_chunk(f, FXP_READ, &g, base, c, NULL, err);
	}
	sftp_batch_end(f);
	if (stat_sent) {
		if (st == ASP_OK)
			st = sftp_await(f, &rs, err);
		if (st == ASP_OK)
			stat_result(&rs, at, sfx);
		sftp_forget(f, &rs);
		uint32_t ft = (at->flags & FXA_PERMISSIONS) ? (at->perm & S_IFMT) : S_IFREG;
		if (st == ASP_OK && *sfx == FX_OK && ft == S_IFIFO)
			unblock_fifo(f, path);
		if (st == ASP_OK && *sfx == FX_OK && ft == S_IFREG && at->size > 0) {
			uint64_t avail = base < at->size ? at->size - base : 0;
			if (avail < want)
				want = (size_t)avail;
		}
	}
	if (st == ASP_OK)
		st = sftp_await(f, &ro, err);
	if (st == ASP_OK)
		open_result(&ro, h, ofx, srv, cap);
	sftp_forget(f, &ro);
	size_t first = 0;
	bool more = true; /* the ahead reads left bytes to ask for */
	if (st == ASP_OK && *ofx == FX_OK && guessed && hit(h, &g)) {
		for (size_t i = 0; i < sent && st == ASP_OK; i++) {
			struct chunk *c = &q[i];
			st = sftp_await(f, &c->r, err);
			if (st != ASP_OK)
				break;
			int s2 = sftp_status(&c->r);
			if (c->r.type == FXP_DATA && c->r.len == c->len) {
				first += c->len;
				continue;
			}
			if (c->r.type == FXP_DATA && c->r.len > 0) {
				first += c->r.len; /* short: bulk_read asks again for the rest */
			} else if (c->r.type == FXP_DATA || s2 == FX_EOF) {
				*eof = true; /* the file ends here */
				more = false;
			} else {
				*fx = s2 > 0 ? s2 : FX_BAD_MESSAGE;
				fx_text(&c->r, srv, cap);
				more = false;
			}
			break;
		}
	}
	for (size_t k = 0; k < sent; k++)
		sftp_forget(f, &q[k].r); /* a guess that missed: those answers are dropped */
	free(q);
	if (st != ASP_OK || *ofx != FX_OK || *fx != FX_OK)
		return st;
	if (!more || first >= want) {
		*got = first; /* past want: the file grew since its STAT */
		return ASP_OK;
	}
	if (want > ahead) {
		/* past what the first READs asked for: the buffer grows to what is left */
		uint8_t *grown = realloc(buf, want);
		if (!grown)
			return asp_error_oom(err, "read", NULL);
		*bufp = buf = grown;
	}
	size_t rest = 0;
	st =
	    bulk_read(f, h, base + first, buf + first, want - first, &rest, eof, fx, srv, cap, err);
	*got = first + rest;
	return st;
}

/* A file written through its handle: what to send after the OPEN, and what came back. */
typedef struct wplan {
	const uint8_t *data;
	size_t len;
	uint64_t base;
	/*
	 * FSTAT at once (the mode the server gave the new file, its umask applied, into
	 * `made`), then FSETSTAT to `narrow` before any byte is written: a temporary file
	 * whose target is private is never readable by others with the new bytes in it.
	 */
	bool first_mode;
	uint32_t narrow;
	bool sync;  /* fsync@openssh.com after the writes (where the server has it) */
	bool size;  /* FSTAT after the writes, into `after` */
	bool attrs; /* FSETSTAT to `set` after the writes (a tree's member: mode and mtime) */
	sattr set;
	sattr made, after;
	int wfx; /* the first failure after the OPEN */
} wplan;

enum wkind { W_MODE, W_NARROW, W_WRITE, W_SYNC, W_SIZE, W_ATTRS, W_CLOSE };

typedef struct wreq {
	struct chunk c;
	enum wkind k;
} wreq;

/* Which of a plan's requests plan_send sends. */
enum { W_PRE = 1, W_DATA = 2, W_POST = 4 };

#define WREQ_MAX(len, csz) (((len) + (csz)-1) / (csz) + 6)

/*
 * Sends the `parts` of plan `w` on handle `x`, appending each to q[*n]; the data in
 * WRITEs of `csz` bytes (what q was sized for).
 */
static asp_status plan_send(sftpc *f, const wplan *w, const handle *x, int parts, size_t csz,
                            wreq *q, size_t *n, asp_error *err)
{
	asp_status st = ASP_OK;
	if ((parts & W_PRE) && w->first_mode) {
		q[*n].k = W_MODE;
		st = send_on_handle(f, FXP_FSTAT, NULL, x, NULL, &q[(*n)++].c.r, err);
		sattr nm = {.flags = FXA_PERMISSIONS, .perm = w->narrow};
		q[*n].k = W_NARROW;
		if (st == ASP_OK)
			st = send_on_handle(f, FXP_FSETSTAT, NULL, x, &nm, &q[(*n)++].c.r, err);
	}
	for (uint64_t off = 0; st == ASP_OK && (parts & W_DATA) && off < w->len; off += csz) {
		wreq *r = &q[(*n)++];
		r->k = W_WRITE;
		r->c.off = off;
		r->c.len = w->len - off < csz ? (size_t)(w->len - off) : csz;
		memset(&r->c.r, 0, sizeof r->c.r);
		st = send_chunk(f, FXP_WRITE, x, w->base, &r->c, w->data + off, err);
	}
	/*
	 * Before VERSION it is not known whether the server has fsync: asked all the same,
	 * and an answer from a server without it does not count (plan_await).
	 */
	if (st == ASP_OK && (parts & W_POST) && w->sync && (f->fsync || !f->version_seen)) {
		q[*n].k = W_SYNC;
		st = send_on_handle(f, FXP_EXTENDED, "fsync@openssh.com", x, NULL, &q[(*n)++].c.r,
		                    err);
	}
	if (st == ASP_OK && (parts & W_POST) && w->size) {
		q[*n].k = W_SIZE;
		st = send_on_handle(f, FXP_FSTAT, NULL, x, NULL, &q[(*n)++].c.r, err);
	}
	if (st == ASP_OK && (parts & W_POST) && w->attrs) {
		q[*n].k = W_ATTRS;
		st = send_on_handle(f, FXP_FSETSTAT, NULL, x, &w->set, &q[(*n)++].c.r, err);
	}
	if (st == ASP_OK && (parts & W_POST)) {
		q[*n].k = W_CLOSE;
		st = send_on_handle(f, FXP_CLOSE, NULL, x, NULL, &q[(*n)++].c.r, err);
	}
	return st;
}

/* An FSTAT's answer into *a (flags 0 when it failed); its failure counts in *fx when `count`. */
static asp_status await_attrs(sftpc *f, sreq *r, sattr *a, int *fx, bool count, asp_error *err)
{
	asp_status st = sftp_await(f, r, err);
	scur c = {r->body, r->len, false};
	memset(a, 0, sizeof *a);
	if (st == ASP_OK && r->type == FXP_ATTRS)
		sc_attrs(&c, a);
	if (st == ASP_OK && (r->type != FXP_ATTRS || c.bad)) {
		memset(a, 0, sizeof *a);
		if (count && *fx == FX_OK)
			*fx = sftp_status(r) > 0 ? sftp_status(r) : FX_BAD_MESSAGE;
	}
	sftp_forget(f, r);
	return st;
}

/* An fsync's answer, which counts only where the server has fsync (VERSION said it). */
static asp_status await_sync(sftpc *f, sreq *r, int *fx, char *srv, size_t cap, asp_error *err)
{
	int sfx = FX_OK;
	char text[256] = "";
	asp_status st = await_status(f, r, &sfx, text, sizeof text, err);
	if (st == ASP_OK && f->fsync && sfx != FX_OK && *fx == FX_OK) {
		*fx = sfx;
		if (srv)
			snprintf(srv, cap, "%s", text);
	}
	return st;
}

/* The answers to q[from .. n) into the plan. */
static asp_status plan_await(sftpc *f, wplan *w, wreq *q, size_t from, size_t n, char *srv,
                             size_t cap, asp_error *err)
{
	asp_status st = ASP_OK;
	for (size_t i = from; i < n; i++) {
		asp_status s2 = ASP_OK;
		int ignored = FX_OK;
		if (st != ASP_OK)
			sftp_forget(f, &q[i].c.r);
		else if (q[i].k == W_MODE)
			s2 = await_attrs(f, &q[i].c.r, &w->made, &ignored, false, err);
		else if (q[i].k == W_SIZE)
			s2 = await_attrs(f, &q[i].c.r, &w->after, &w->wfx, true, err);
		else if (q[i].k == W_NARROW)
			s2 = await_status(f, &q[i].c.r, &ignored, NULL, 0, err);
		else if (q[i].k == W_SYNC)
			s2 = await_sync(f, &q[i].c.r, &w->wfx, srv, cap, err);
		else
			s2 = await_status(f, &q[i].c.r, &w->wfx, srv, cap, err);
		if (st == ASP_OK)
			st = s2;
	}
	return st;
}

/* An open_write whose requests are out, its answers to come. */
typedef struct wflight {
	wreq *q;
	size_t n;
	handle g;
	sreq ro, rs;
	bool guessed, stat_sent, open_sent;
	size_t csz;    /* the WRITEs' size the queue was made for */
	asp_status st; /* the sending's */
} wflight;

/*
 * The sending half of open_write: OPEN (and STAT when `stat`), and with up to GUESS_BYTES
 * of data what `w` plans on the handle the OPEN is expected to get, CLOSE last, all in one
 * batch. open_write_await takes the answers, whatever this returned.
 */
static asp_status open_write_send(sftpc *f, const char *path, uint32_t flags, const sattr *at,
                                  const wplan *w, bool stat, wflight *x, asp_error *err)
{
	memset(x, 0, sizeof *x);
	x->g.len = 4;
	asp_status st = sftp_start(f, err);
	if (st != ASP_OK)
		return x->st = st;
	x->csz = f->max_write ? f->max_write : 32768; /* the default until the limits came */
	size_t qn = WREQ_MAX(w->len <= GUESS_BYTES ? w->len : 0, x->csz);
	x->q = calloc(qn, sizeof *x->q);
	if (!x->q)
		return x->st = asp_error_oom(err, "write", NULL);
	sftp_batch_begin(f);
	x->guessed = w->len <= GUESS_BYTES && sftp_handles_guess(f, x->g.h);
	if (stat) {
		st = send_call(f, FXP_STAT, NULL, path, NULL, NULL, &x->rs, err);
		x->stat_sent = st == ASP_OK;
	}
	if (st == ASP_OK && x->guessed)
		sftp_handles_closed_in_batch(f, x->g.h); /* the plan ends in its CLOSE */
	if (st == ASP_OK)
		st = send_open(f, path, flags, at, false, &x->ro, err);
	x->open_sent = st == ASP_OK;
	if (st == ASP_OK && x->guessed)
		st = plan_send(f, w, &x->g, W_PRE | W_DATA | W_POST, x->csz, x->q, &x->n, err);
	sftp_batch_end(f);
	return x->st = st;
}

/* Whether all of the write went out with open_write_send (else more follows its answer). */
static bool open_write_all_out(const wflight *x)
{
	return x->st == ASP_OK && x->guessed;
}

/*
 * The answers to open_write_send; when the guess missed or was not made, the rest follows
 * the OPEN's answer on its handle (the data through bulk_write). *ofx: the OPEN's status
 * (its text in srv); w->wfx: the first failure after it (FX_OK: all written, synced and
 * closed); with a STAT sent, *sat and *sfx its answer.
 */
static asp_status open_write_await(sftpc *f, const char *path, wplan *w, wflight *x, sattr *sat,
                                   int *sfx, int *ofx, char *srv, size_t cap, asp_error *err)
{
	*ofx = w->wfx = FX_OK;
	asp_status st = x->st;
	wreq *q = x->q;
	handle h;
	if (x->stat_sent) {
		if (st == ASP_OK)
			st = sftp_await(f, &x->rs, err);
		if (st == ASP_OK)
			stat_result(&x->rs, sat, sfx);
		sftp_forget(f, &x->rs);
		if (st == ASP_OK && *sfx == FX_OK && (sat->flags & FXA_PERMISSIONS) &&
		    S_ISFIFO(sat->perm))
			unblock_fifo(f, path);
	}
	if (st == ASP_OK && x->open_sent)
		st = sftp_await(f, &x->ro, err);
	if (st == ASP_OK && x->open_sent)
		open_result(&x->ro, &h, ofx, srv, cap);
	sftp_forget(f, &x->ro);
	bool opened = st == ASP_OK && x->open_sent && *ofx == FX_OK;
	if (opened && x->guessed && hit(&h, &x->g)) {
		st = plan_await(f, w, q, 0, x->n, srv, cap, err);
		free(q);
		return st;
	}
	for (size_t i = 0; i < x->n; i++)
		sftp_forget(f, &q[i].c.r); /* on a wrong handle, or after a refused OPEN */
	if (!opened) {
		free(q);
		return st;
	}
	/* on the real handle: the first FSTAT and FSETSTAT, the data, then the rest */
	size_t n = 0;
	st = plan_send(f, w, &h, W_PRE, x->csz, q, &n, err);
	if (st == ASP_OK)
		st = plan_await(f, w, q, 0, n, srv, cap, err);
	if (st == ASP_OK)
		st = bulk_write(f, &h, w->base, w->data, w->len, &w->wfx, srv, cap, err);
	size_t post = n;
	if (st == ASP_OK)
		st = plan_send(f, w, &h, W_POST, x->csz, q, &n, err);
	else
		close_nowait(f, &h);
	asp_status s2 = plan_await(f, w, q, post, n, srv, cap, err);
	free(q);
	return st == ASP_OK ? s2 : st;
}

/*
 * OPEN `path` with `flags` and `at`, then on its handle what `w` plans, CLOSE last. With
 * up to GUESS_BYTES of data it all goes out together on the handle the OPEN is expected
 * to get: one round trip (open_write_send, open_write_await).
 */
static asp_status open_write(sftpc *f, const char *path, uint32_t flags, const sattr *at, wplan *w,
                             sattr *sat, int *sfx, int *ofx, char *srv, size_t cap, asp_error *err)
{
	wflight x;
	open_write_send(f, path, flags, at, w, sat != NULL, &x, err);
	return open_write_await(f, path, w, &x, sat, sfx, ofx, srv, cap, err);
}

/* ---- read ------------------------------------------------------------------------------ */

asp_status ssh_sftp_read(sftpc *f, const asp_read_params *p, size_t budget, asp_read_result *r,
                         asp_arena *a, asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("read", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->offset > (uint64_t)INT64_MAX)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "read %s: offset %llu is out of range", p->path,
		                     (unsigned long long)p->offset);
	sattr at;
	int fx;
	char srv[256] = "";
	uint8_t *buf = NULL;
	size_t want = budget, got = 0;
	bool hit_eof = false, regular = false;
	handle h;
	if (p->has_length && p->length < want)
		want = (size_t)p->length;
	/* the first READs' room; open_read grows it once the STAT gave the size */
	if (want && !(buf = malloc(want < GUESS_BYTES ? want : GUESS_BYTES)))
		return asp_error_oom(err, "read", NULL);
	/* the STAT, the OPEN and the first READs together: one round trip */
	int ofx, sfx = FX_OK;
	sshc_lock(f->c);
	st = open_read(f, p->path, p->offset, &buf, want, &at, &sfx, &h, &got, &hit_eof, &ofx, &fx,
	               srv, sizeof srv, err);
	if (st == ASP_OK && ofx == FX_OK)
		close_nowait(f, &h);
	if (st != ASP_OK)
		goto out;
	if (sfx != FX_OK) {
		st = op_error(f, "read", p->path, sfx, NULL, err);
		goto out;
	}
	uint32_t ft = (at.flags & FXA_PERMISSIONS) ? (at.perm & S_IFMT) : S_IFREG;
	if (ft == S_IFDIR) {
		st = asp_error_errno(err, EISDIR, p->path, "read %s", p->path);
		goto out;
	}
	if (ft == S_IFSOCK) {
		st = asp_error_errno(err, ENXIO, p->path, "read %s", p->path);
		goto out;
	}
	if (ft == S_IFIFO) {
		/* sftp-server seeks before it reads, which a fifo refuses: it reads as empty */
		got = 0;
		r->eof = true;
		goto out;
	}
	if (ofx != FX_OK) {
		st = op_error(f, "read", p->path, ofx, srv, err);
		goto out;
	}
	if (fx != FX_OK) {
		st = op_error(f, "read", p->path, fx, srv, err);
		goto out;
	}
	regular = ft == S_IFREG;
	r->size = at.size;
	if (regular && at.size > 0)
		r->eof = hit_eof || p->offset + got >= at.size;
	else
		r->eof = hit_eof;
	if (regular && at.size == 0 && hit_eof)
		r->size = p->offset + got; /* size unknown (procfs): what was there */
	if (want == 0 && regular)
		r->eof = p->offset >= r->size;
out:
	sshc_unlock(f->c);
	if (st == ASP_OK && got > 0) {
		if (want - got > got / 4) {
			uint8_t *shrunk = realloc(buf, got);
			if (shrunk)
				buf = shrunk;
		}
		if (asp_arena_adopt(a, buf) < 0)
			return asp_error_oom(err, "read", NULL);
		r->data.data = buf;
		r->data.len = got;
		return ASP_OK;
	}
	free(buf);
	return st;
}

/* ---- mkdir ------------------------------------------------------------------------------ */

static asp_status mkdir_one(sftpc *f, const char *path, uint32_t mode, int *fx, asp_error *err)
{
	sattr at = {.flags = FXA_PERMISSIONS, .perm = mode};
	return call_status(f, FXP_MKDIR, NULL, path, NULL, &at, fx, NULL, 0, err);
}

/* After a refused mkdir (FAILURE): 0 when a directory is there, EEXIST for another kind. */
static asp_status exists_errno(sftpc *f, const char *path, int *e, asp_error *err)
{
	sattr at;
	int fx;
	asp_status st = do_stat(f, path, true, &at, &fx, err);
	if (st != ASP_OK)
		return st;
	if (fx == FX_OK) {
		*e = is_dir(&at) ? 0 : EEXIST;
		return ASP_OK;
	}
	/* a dangling symlink is there but stat cannot follow it */
	st = do_stat(f, path, false, &at, &fx, err);
	*e = st == ASP_OK && fx == FX_OK ? EEXIST : EIO;
	return st;
}

/* asp_mkdir_parents over SFTP: statuses become errnos, a failed request stops the walk. */
typedef struct sftp_mk {
	sftpc *f;
	asp_status st;
	asp_error *err;
} sftp_mk;

static int mk_one(void *ctx, const char *path, unsigned mode)
{
	sftp_mk *m = ctx;
	int fx;
	m->st = mkdir_one(m->f, path, mode, &fx, m->err);
	if (m->st != ASP_OK)
		return -1;
	switch (fx) {
	case FX_OK: return 0;
	case FX_NO_SUCH_FILE: return ENOENT;
	case FX_FAILURE: return EEXIST; /* or another refusal: exists() tells */
	default: return fx_errno(fx);
	}
}

static int mk_exists(void *ctx, const char *path)
{
	sftp_mk *m = ctx;
	int e;
	m->st = exists_errno(m->f, path, &e, m->err);
	return m->st == ASP_OK ? e : -1;
}

static int mk_missing(void *ctx, const char *path)
{
	sftp_mk *m = ctx;
	int e;
	m->st = missing_errno(m->f, path, &e, m->err);
	return m->st == ASP_OK ? e : -1;
}

/* mkdir -p with the fewest round trips, as the local backend. *e is 0 or an errno. */
static asp_status mkdir_parents(sftpc *f, const char *path, uint32_t mode, uint32_t pmode, int *e,
                                asp_error *err)
{
	static const asp_mkdir_fns fns = {
	    .mkdir = mk_one, .exists = mk_exists, .missing = mk_missing};
	sftp_mk m = {f, ASP_OK, err};
	int r = asp_mkdir_parents(path, mode, pmode, &fns, &m);
	if (r < 0)
		return m.st;
	if (r == ENOMEM)
		return asp_error_oom(err, "mkdir", NULL);
	*e = r;
	return ASP_OK;
}

asp_status ssh_sftp_mkdir(sftpc *f, const asp_mkdir_params *p, asp_error *err)
{
	asp_status st = asp_check_required("mkdir", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->mode > 07777)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "mkdir %s: mode %#llo has bits beyond 07777", p->path,
		                     (unsigned long long)p->mode);
	int e = 0, fx;
	sshc_lock(f->c);
	if (p->parents) {
		st = mkdir_parents(f, p->path, (uint32_t)p->mode, NEW_DIR_MODE, &e, err);
	} else {
		st = mkdir_one(f, p->path, (uint32_t)p->mode, &fx, err);
		if (st == ASP_OK && fx == FX_FAILURE) {
			sattr at;
			int sfx;
			st = do_stat(f, p->path, false, &at, &sfx, err);
			e = sfx == FX_OK ? EEXIST : EIO;
		} else if (st == ASP_OK && fx != FX_OK) {
			st = path_errno(f, p->path, fx, &e, err);
		}
	}
	sshc_unlock(f->c);
	if (st != ASP_OK || e == 0)
		return st;
	st = asp_error_errno(err, e, p->path, "mkdir %s", p->path);
	if (e == ENOENT && !p->parents)
		asp_error_hint(err, "a parent directory is missing; 'parents' creates it");
	else if (e == EEXIST && p->parents)
		asp_error_hint(err, "it exists and is not a directory");
	return st;
}

/* ---- write ------------------------------------------------------------------------------ */

static asp_status make_parents(sftpc *f, const char *path, int *e, asp_error *err)
{
	char *dir = asp_path_parent(path);
	if (!dir) {
		*e = strchr(path, '/') ? ENOMEM : ENOENT;
		return ASP_OK;
	}
	asp_status st = mkdir_parents(f, dir, NEW_DIR_MODE, NEW_DIR_MODE, e, err);
	free(dir);
	return st;
}

static asp_status write_error(sftpc *f, const asp_write_params *p, int fx, int e, const char *srv,
                              asp_error *err)
{
	asp_status st;
	if (!e && fx == FX_FAILURE) {
		/* EISDIR and friends: ask what is there */
		sattr at;
		int sfx;
		st = do_stat(f, p->path, true, &at, &sfx, err);
		if (st != ASP_OK)
			return st;
		e = sfx == FX_OK && is_dir(&at) ? EISDIR : EIO;
	}
	if (!e) {
		st = path_errno(f, p->path, fx, &e, err);
		if (st != ASP_OK)
			return st;
	}
	char what[ASP_ERROR_PATH_MAX + 16];
	snprintf(what, sizeof what, "write %s", p->path);
	st = fx_error(err, e, srv, p->path, what);
	if (e == ENOENT && !p->mkdirs)
		asp_error_hint(err, "its directory is missing; 'mkdirs' creates it");
	return st;
}

/* Opens for writing, making missing parents once when asked. */
static asp_status open_for_write(sftpc *f, const asp_write_params *p, const char *path,
                                 uint32_t flags, const sattr *at, handle *h, int *fx, int *e,
                                 char *srv, size_t cap, asp_error *err)
{
	*e = 0;
	asp_status st = do_open(f, path, flags, at, false, h, fx, srv, cap, err);
	if (st != ASP_OK || *fx != FX_NO_SUCH_FILE || !p->mkdirs)
		return st;
	st = make_parents(f, p->path, e, err);
	if (st != ASP_OK || *e)
		return st;
	return do_open(f, path, flags, at, false, h, fx, srv, cap, err);
}

/*
 * "DIR/.NAME.asp-sftp": hidden, beside the target, and the same every time, so a write
 * cut short (a crash, a dropped connection) leaves one file that the next atomic write
 * to the target truncates, reuses and renames away (SFTP has no unnamed files).
 */
static char *temp_name(const char *target)
{
	const char *slash = strrchr(target, '/');
	size_t dlen = slash ? (size_t)(slash - target) + 1 : 0;
	const char *base = target + dlen;
	size_t blen = strlen(base);
	if (blen > 200)
		blen = 200; /* stay under NAME_MAX with the suffix */
	size_t cap = dlen + blen + 16;
	char *t = malloc(cap);
	if (t)
		snprintf(t, cap, "%.*s.%.*s.asp-sftp", (int)dlen, target, (int)blen, base);
	return t;
}

/* rename replacing the target: posix-rename@openssh.com, else remove then rename. */
static asp_status rename_over(sftpc *f, const char *from, const char *to, int *fx, char *srv,
                              size_t cap, asp_error *err)
{
	asp_status st = sftp_ready(f, err); /* which of the two: VERSION says */
	if (st != ASP_OK)
		return st;
	if (f->posix_rename)
		return call_status(f, FXP_EXTENDED, "posix-rename@openssh.com", from, to, NULL, fx,
		                   srv, cap, err);
	st = call_status(f, FXP_RENAME, NULL, from, to, NULL, fx, srv, cap, err);
	if (st != ASP_OK || *fx != FX_FAILURE)
		return st;
	/* SFTP v3's rename refuses an existing target: not atomic, but what the server allows */
	sattr at;
	int sfx, rfx;
	st = do_stat(f, to, false, &at, &sfx, err);
	if (st != ASP_OK || sfx != FX_OK)
		return st;
	st = call_status(f, is_dir(&at) ? FXP_RMDIR : FXP_REMOVE, NULL, to, NULL, NULL, &rfx, NULL,
	                 0, err);
	if (st != ASP_OK || rfx != FX_OK)
		return st;
	return call_status(f, FXP_RENAME, NULL, from, to, NULL, fx, srv, cap, err);
}

/*
 * Temp file beside the target, written, fsynced (fsync@openssh.com), renamed over it: a
 * crash leaves the old or the new file. A symlink is resolved first so the link keeps
 * pointing at the file; an existing file's mode (and owner, when allowed) is kept. One
 * request at a time: the way when write_atomic's two round trips cannot be had.
 */
static asp_status write_atomic_steps(sftpc *f, const asp_write_params *p, asp_write_result *r,
                                     asp_error *err)
{
	char *real = NULL, *tmp = NULL;
	const char *target = p->path;
	char srv[256] = "";
	sattr old;
	int fx = FX_OK, e = 0;
	asp_status st = do_stat(f, target, false, &old, &fx, err);
	if (st != ASP_OK)
		return st;
	bool exists = fx == FX_OK;
	if (exists && (old.flags & FXA_PERMISSIONS) && S_ISLNK(old.perm)) {
		st = do_name(f, FXP_REALPATH, target, &real, &fx, err);
		if (st != ASP_OK)
			return st;
		if (real)
			target = real;
		st = do_stat(f, target, true, &old, &fx, err);
		if (st != ASP_OK)
			goto out;
		exists = fx == FX_OK;
	}
	if (exists && is_dir(&old)) {
		e = EISDIR;
		goto out;
	}
	uint32_t mode = exists ? (old.perm & 07777) : (uint32_t)p->mode;
	sattr at = {.flags = FXA_PERMISSIONS, .perm = mode};
	handle h;
	tmp = temp_name(target);
	if (!tmp) {
		st = asp_error_oom(err, "write", NULL);
		goto out;
	}
	/* TRUNC, not EXCL: a leftover of an earlier write is reused (docs/decisions.md) */
	st = open_for_write(f, p, tmp, FXF_WRITE | FXF_CREAT | FXF_TRUNC, &at, &h, &fx, &e, srv,
	                    sizeof srv, err);
	if (st != ASP_OK || e)
		goto out;
	if (fx != FX_OK) {
		free(tmp);
		tmp = NULL;
		goto out;
	}
	int wfx = FX_OK;
	sreq rs[3];
	int nrs = 0;
	if (exists) {
		/* the old file's mode exactly (not the umask's), and its owner where allowed */
		sattr keep = {.flags = FXA_PERMISSIONS, .perm = mode};
		sattr own = {.flags = FXA_UIDGID, .uid = old.uid, .gid = old.gid};
		sreq r1, r2;
		if (send_on_handle(f, FXP_FSETSTAT, NULL, &h, &keep, &r1, err) == ASP_OK)
			(void)await_status(f, &r1, &(int){FX_OK}, NULL, 0, err);
		if ((old.flags & FXA_UIDGID) &&
		    send_on_handle(f, FXP_FSETSTAT, NULL, &h, &own, &r2, err) == ASP_OK)
			(void)await_status(f, &r2, &(int){FX_OK}, NULL, 0, err);
	}
	st = bulk_write(f, &h, 0, p->data.data, p->data.len, &wfx, srv, sizeof srv, err);
	if (st == ASP_OK && wfx == FX_OK && f->fsync)
		st =
		    send_on_handle(f, FXP_EXTENDED, "fsync@openssh.com", &h, NULL, &rs[nrs++], err);
	if (st == ASP_OK)
		st = send_on_handle(f, FXP_CLOSE, NULL, &h, NULL, &rs[nrs++], err);
	for (int i = 0; i < nrs; i++) {
		asp_status s2 = st == ASP_OK ? await_status(f, &rs[i], &wfx, srv, sizeof srv, err)
		                             : (sftp_forget(f, &rs[i]), st);
		if (st == ASP_OK)
			st = s2;
	}
	if (st == ASP_OK && wfx == FX_OK)
		st = rename_over(f, tmp, target, &wfx, srv, sizeof srv, err);
	fx = wfx;
	if (st == ASP_OK && fx == FX_OK) {
		free(tmp);
		tmp = NULL;
	}
out:
	if (tmp) {
		int rfx;
		asp_error e2;
		(void)call_status(f, FXP_REMOVE, NULL, tmp, NULL, NULL, &rfx, NULL, 0, &e2);
		free(tmp);
	}
	free(real);
	if (st == ASP_OK && (e || fx != FX_OK))
		st = write_error(f, p, fx, e, srv, err);
	if (st == ASP_OK) {
		r->written = p->data.len;
		r->size = p->data.len;
		r->has_created = true;
		r->created = !exists;
	}
	return st;
}

/* An await of a STAT or LSTAT sent earlier: *fx its status, *a the attributes. */
static asp_status await_stat(sftpc *f, sreq *r, sattr *a, int *fx, asp_error *err)
{
	asp_status st = sftp_await(f, r, err);
	int s = st == ASP_OK ? sftp_status(r) : -1;
	*fx = s < 0 ? FX_OK : s == FX_OK ? FX_BAD_MESSAGE : s;
	if (st == ASP_OK && *fx == FX_OK) {
		scur c = {r->body, r->len, false};
		if (r->type == FXP_ATTRS)
			sc_attrs(&c, a);
		if (r->type != FXP_ATTRS || c.bad)
			*fx = FX_BAD_MESSAGE;
	}
	sftp_forget(f, r);
	return st;
}

/*
 * write_atomic_steps in two round trips where it can: the target's LSTAT and the temp
 * file's OPEN, writes, fsync and CLOSE together (open_write); then its mode (and owner)
 * and the rename together. The temp is made with the mode asked for, its umask applied,
 * and narrowed to its owner bits before any byte is written; it gets the old file's mode,
 * or the one it was made with, at the end. A symlink target, missing parents or data
 * past GUESS_BYTES take the steps.
 */
static asp_status write_atomic(sftpc *f, const asp_write_params *p, asp_write_result *r,
                               asp_error *err)
{
	if (p->data.len > GUESS_BYTES)
		return write_atomic_steps(f, p, r, err);
	char *tmp = temp_name(p->path);
	if (!tmp)
		return asp_error_oom(err, "write", NULL);
	char srv[256] = "";
	sattr old, at = {.flags = FXA_PERMISSIONS, .perm = (uint32_t)p->mode};
	wplan w = {.data = p->data.data,
	           .len = p->data.len,
	           .first_mode = true,
	           .narrow = (uint32_t)p->mode & 0600,
	           .sync = true};
	int lfx = FX_OK, ofx = FX_OK, e = 0;
	sreq rl;
	asp_status st = send_call(f, FXP_LSTAT, NULL, p->path, NULL, NULL, &rl, err);
	if (st == ASP_OK)
		st = open_write(f, tmp, FXF_WRITE | FXF_CREAT | FXF_TRUNC, &at, &w, NULL, NULL,
		                &ofx, srv, sizeof srv, err);
	asp_status s2 =
	    st == ASP_OK ? await_stat(f, &rl, &old, &lfx, err) : (sftp_forget(f, &rl), st);
	if (st == ASP_OK)
		st = s2;
	bool made = st == ASP_OK && ofx == FX_OK; /* the temp exists: remove it unless renamed */
	bool exists = lfx == FX_OK;
	if (st == ASP_OK && ((exists && (old.flags & FXA_PERMISSIONS) && S_ISLNK(old.perm)) ||
	                     (ofx == FX_NO_SUCH_FILE && p->mkdirs))) {
		if (made) {
			int rfx;
			asp_error e2;
			(void)call_status(f, FXP_REMOVE, NULL, tmp, NULL, NULL, &rfx, NULL, 0, &e2);
		}
		free(tmp);
		return write_atomic_steps(f, p, r, err);
	}
	int fx = st != ASP_OK ? FX_OK : ofx != FX_OK ? ofx : w.wfx;
	if (st == ASP_OK && exists && is_dir(&old))
		e = EISDIR;
	if (st == ASP_OK && !e && fx == FX_OK) {
		/* the final mode, the old owner (best effort), the rename: together */
		uint32_t mode = exists                             ? old.perm & 07777
		                : (w.made.flags & FXA_PERMISSIONS) ? w.made.perm & 07777
		                                                   : (uint32_t)p->mode & 07777;
		sattr own = {.flags = FXA_UIDGID, .uid = old.uid, .gid = old.gid};
		sattr keep = {.flags = FXA_PERMISSIONS, .perm = mode};
		sreq ro, rm, rr;
		bool s_own = exists && (old.flags & FXA_UIDGID), s_mode = true;
		bool s_ren = f->posix_rename;
		int ign = FX_OK;
		if (s_own)
			s_own =
			    send_call(f, FXP_SETSTAT, NULL, tmp, NULL, &own, &ro, err) == ASP_OK;
		s_mode = send_call(f, FXP_SETSTAT, NULL, tmp, NULL, &keep, &rm, err) == ASP_OK;
		if (s_ren)
			s_ren = send_call(f, FXP_EXTENDED, "posix-rename@openssh.com", tmp, p->path,
			                  NULL, &rr, err) == ASP_OK;
		if (s_own)
			st = await_status(f, &ro, &ign, NULL, 0, err);
		if (s_mode) {
			s2 = await_status(f, &rm, &ign, NULL, 0, err);
			st = st == ASP_OK ? s2 : st;
		}
		if (s_ren) {
			s2 = await_status(f, &rr, &fx, srv, sizeof srv, err);
			st = st == ASP_OK ? s2 : st;
		} else if (st == ASP_OK) {
			st = rename_over(f, tmp, p->path, &fx, srv, sizeof srv, err);
		}
		if (st == ASP_OK && fx == FX_OK)
			made = false;
	}
	if (made) {
		int rfx;
		asp_error e2;
		(void)call_status(f, FXP_REMOVE, NULL, tmp, NULL, NULL, &rfx, NULL, 0, &e2);
	}
	free(tmp);
	if (st == ASP_OK && (e || fx != FX_OK))
		st = write_error(f, p, fx, e, srv, err);
	if (st == ASP_OK) {
		r->written = p->data.len;
		r->size = p->data.len;
		r->has_created = true;
		r->created = !exists;
	}
	return st;
}

asp_status ssh_sftp_write(sftpc *f, const asp_write_params *p, asp_write_result *r, asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("write", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	st = asp_check_write_params(p, err);
	if (st != ASP_OK)
		return st;
	sshc_lock(f->c);
	if (p->atomic) {
		st = write_atomic(f, p, r, err);
		sshc_unlock(f->c);
		return st;
	}
	char srv[256] = "";
	int fx = FX_OK, e = 0;
	sattr at;
	bool want_size = p->append || p->has_offset;
	bool created = false;
	/*
	 * The STAT goes with the OPEN and the writes (one round trip), but for an append: a
	 * fifo's append write would reach the fifo (sftp-server does not seek first).
	 */
	bool together = !p->append;
	if (!together)
		st = do_stat(f, p->path, true, &at, &fx, err);
	if (st != ASP_OK)
		goto out;
	if (fx == FX_OK && !together && (at.flags & FXA_PERMISSIONS)) {
		uint32_t t = at.perm & S_IFMT;
		if (t == S_IFDIR)
			e = EISDIR;
		else if (t == S_IFIFO || t == S_IFSOCK)
			e = ENXIO; /* sftp-server would block opening a fifo; the local backend says
			              ENXIO */
		if (e)
			goto out;
	}
	if (!together)
		created = fx == FX_NO_SUCH_FILE;
	fx = FX_OK;
	uint32_t flags = FXF_WRITE | FXF_CREAT;
	if (p->append)
		flags |= FXF_APPEND;
	else if (!p->has_offset)
		flags |= FXF_TRUNC;
	sattr mode = {.flags = FXA_PERMISSIONS, .perm = (uint32_t)p->mode};
	wplan w = {.data = p->data.data,
	           .len = p->data.len,
	           .base = p->has_offset ? p->offset : 0,
	           .size = want_size};
	int ofx, sfx = FX_OK;
	st = open_write(f, p->path, flags, &mode, &w, together ? &at : NULL, &sfx, &ofx, srv,
	                sizeof srv, err);
	if (st == ASP_OK && together) {
		created = sfx == FX_NO_SUCH_FILE;
		uint32_t t = sfx == FX_OK && (at.flags & FXA_PERMISSIONS) ? at.perm & S_IFMT : 0;
		if (t == S_IFDIR)
			e = EISDIR; /* the OPEN was refused */
		else if (t == S_IFIFO || t == S_IFSOCK)
			e = ENXIO; /* nothing reached it: sftp-server seeks before it writes */
		if (e)
			goto out;
	}
	if (st == ASP_OK && ofx == FX_NO_SUCH_FILE && p->mkdirs) {
		st = make_parents(f, p->path, &e, err);
		if (st == ASP_OK && !e)
			st = open_write(f, p->path, flags, &mode, &w, NULL, NULL, &ofx, srv,
			                sizeof srv, err);
	}
	fx = ofx != FX_OK ? ofx : w.wfx;
	if (st == ASP_OK && fx == FX_OK && want_size)
		r->size = w.after.size;
out:
	if (st == ASP_OK && (e || fx != FX_OK))
		st = write_error(f, p, fx, e, srv, err);
	sshc_unlock(f->c);
	if (st == ASP_OK) {
		r->written = p->data.len;
		if (!want_size)
			r->size = p->data.len;
		r->has_created = true;
		r->created = created;
	}
	return st;
}

/* ---- remove ---------------------------------------------------------------------------- */

#define RM_DEPTH_MAX 2048 /* deeper than PATH_MAX allows */
#define RM_RESCANS   3

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	bool slash = dl > 0 && dir[dl - 1] == '/';
	char *p = malloc(dl + nl + 2);
	if (!p)
		return NULL;
	memcpy(p, dir, dl);
	if (!slash)
		p[dl++] = '/';
	memcpy(p + dl, name, nl + 1);
	return p;
}

/*
 * Removes everything below `path` and then `path`, never following a symlink (the
 * directory entries' attributes are lstat's). Files of one directory are removed with
 * their requests all in flight. *e and `where` say what could not be removed.
 */
static asp_status rm_tree(sftpc *f, const char *path, int depth, int *e, char *where, size_t wcap,
                          asp_error *err)
{
	if (depth > RM_DEPTH_MAX) {
		*e = ELOOP;
		snprintf(where, wcap, "%s", path);
		return ASP_OK;
	}
	asp_status st = ASP_OK;
	for (int scan = 0; scan <= RM_RESCANS; scan++) {
		dlist d = {0};
		int fx = FX_OK;
		st = read_dir(f, path, false, &d, &fx, NULL, 0, err);
		if (st != ASP_OK || fx != FX_OK) {
			if (st == ASP_OK && fx != FX_NO_SUCH_FILE) {
				*e = fx_errno(fx);
				snprintf(where, wcap, "%s", path);
			}
			dlist_free(&d);
			return st;
		}
		size_t slots = inflight_slots(64 * 1024);
		struct chunk *q = calloc(slots, sizeof *q);
		char **names = calloc(slots, sizeof *names);
		if (!q || !names) {
			free(q);
			free(names);
			dlist_free(&d);
			return asp_error_oom(err, "remove", NULL);
		}
		size_t head = 0, count = 0, i = 0;
		/* files and symlinks first, many at a time */
		while (st == ASP_OK && !*e && (i < d.n || count > 0)) {
			while (count < slots && i < d.n) {
				dent *de = &d.v[i++];
				if (is_dir(&de->a))
					continue;
				size_t k = (head + count) % slots;
				names[k] = join(path, de->name);
				if (!names[k]) {
					st = asp_error_oom(err, "remove", NULL);
					break;
				}
				sbuild b;
				sb_init(&b);
				sb_cstr(&b, names[k]);
				memset(&q[k].r, 0, sizeof q[k].r);
				st = sftp_send(f, FXP_REMOVE, &b, NULL, 0, &q[k].r, err);
				sb_free(&b);
				if (st != ASP_OK) {
					free(names[k]);
					names[k] = NULL;
					break;
				}
				count++;
			}
			if (count == 0 || st != ASP_OK)
				break;
			int fx2 = FX_OK;
			st = await_status(f, &q[head].r, &fx2, NULL, 0, err);
			if (st == ASP_OK && fx2 != FX_OK && fx2 != FX_NO_SUCH_FILE) {
				*e = fx2 == FX_FAILURE ? EIO : fx_errno(fx2);
				snprintf(where, wcap, "%s", names[head]);
			}
			free(names[head]);
			names[head] = NULL;
			head = (head + 1) % slots;
			count--;
		}
		for (size_t k = 0; k < count; k++) {
			size_t j = (head + k) % slots;
			sftp_forget(f, &q[j].r);
			free(names[j]);
		}
		free(q);
		free(names);
		/* then the directories, depth first */
		for (size_t j = 0; j < d.n && st == ASP_OK && !*e; j++) {
			if (!is_dir(&d.v[j].a))
				continue;
			char *sub = join(path, d.v[j].name);
			if (!sub) {
				st = asp_error_oom(err, "remove", NULL);
				break;
			}
			st = rm_tree(f, sub, depth + 1, e, where, wcap, err);
			free(sub);
		}
		dlist_free(&d);
		if (st != ASP_OK || *e)
			return st;
		int fx3;
		st = call_status(f, FXP_RMDIR, NULL, path, NULL, NULL, &fx3, NULL, 0, err);
		if (st != ASP_OK || fx3 == FX_OK || fx3 == FX_NO_SUCH_FILE)
			return st;
		if (fx3 != FX_FAILURE || scan == RM_RESCANS) {
			/* FAILURE again: entries appeared meanwhile; rescan a few times first */
			*e = fx3 == FX_FAILURE ? ENOTEMPTY : fx_errno(fx3);
			snprintf(where, wcap, "%s", path);
			return ASP_OK;
		}
	}
	return st;
}

/* True when the last component is "." or ".." (which rm refuses too). */
static bool dot_name(const char *path, size_t len)
{
	size_t i = len;
	while (i > 0 && path[i - 1] != '/')
		i--;
	size_t k = len - i;
	return (k == 1 && path[i] == '.') || (k == 2 && path[i] == '.' && path[i + 1] == '.');
}

asp_status ssh_sftp_remove(sftpc *f, const asp_remove_params *p, asp_error *err)
{
	asp_status st = asp_check_required("remove", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	/* "link/" would name the directory behind a symlink: strip trailing slashes so a
	 * symlink is always removed as itself. */
	size_t len = strlen(p->path);
	while (len > 1 && p->path[len - 1] == '/')
		len--;
	char *path = strndup(p->path, len);
	if (!path)
		return asp_error_oom(err, "remove", NULL);
	if (strcmp(path, "/") == 0 || dot_name(path, len)) {
		free(path);
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "remove %s: refusing to remove '/', '.' or '..'", p->path);
	}
	sattr at;
	int fx = FX_OK, e = 0;
	char srv[256] = "", where[ASP_ERROR_PATH_MAX / 2] = "";
	/*
	 * LSTAT, REMOVE and RMDIR go out together and the LSTAT's answer says which of the
	 * other two counts: one round trip. The other fails and changes nothing (unlink(2)
	 * of a directory is EISDIR, rmdir(2) of anything else ENOTDIR, or ENOENT once
	 * REMOVE took it).
	 */
	sreq rq[3];
	size_t sent = 0;
	static const uint8_t types[3] = {FXP_LSTAT, FXP_REMOVE, FXP_RMDIR};
	sshc_lock(f->c);
	for (st = ASP_OK; st == ASP_OK && sent < 3; sent++)
		st = send_call(f, types[sent], NULL, path, NULL, NULL, &rq[sent], err);
	if (st == ASP_OK)
		st = sftp_await(f, &rq[0], err);
	if (st == ASP_OK)
		stat_result(&rq[0], &at, &fx);
	size_t use = st == ASP_OK && fx == FX_OK ? (is_dir(&at) ? 2 : 1) : 0;
	for (size_t i = 0; i < sent; i++)
		if (i != use || !use)
			sftp_forget(f, &rq[i]);
	if (st != ASP_OK)
		goto out;
	if (fx != FX_OK) {
		st = op_error(f, "remove", p->path, fx, NULL, err);
		goto out;
	}
	st = await_status(f, &rq[use], &fx, srv, sizeof srv, err);
	if (st == ASP_OK && fx != FX_OK && use == 1)
		st = op_error(f, "remove", p->path, fx, srv, err);
	if (st != ASP_OK || fx == FX_OK || use == 1)
		goto out;
	if (fx == FX_FAILURE) {
		/* ENOTEMPTY, or EBUSY for a mount point: a look inside tells them apart */
		dlist d = {0};
		int dfx = FX_OK;
		st = read_dir(f, path, true, &d, &dfx, NULL, 0, err);
		bool full = d.n > 0;
		dlist_free(&d);
		if (st != ASP_OK)
			goto out;
		if (full && p->recursive) {
			st = rm_tree(f, path, 0, &e, where, sizeof where, err);
			if (st == ASP_OK && e)
				st = asp_error_errno(err, e, p->path, "remove %s: cannot remove %s",
				                     p->path, where);
			goto out;
		}
		if (full) {
			st = asp_error_errno(err, ENOTEMPTY, p->path, "remove %s", p->path);
			asp_error_hint(err, "'recursive' removes a directory and everything in it");
			goto out;
		}
	}
	st = op_error(f, "remove", p->path, fx, srv, err);
out:
	sshc_unlock(f->c);
	free(path);
	return st;
}

/* ---- rename ---------------------------------------------------------------------------- */

asp_status ssh_sftp_rename(sftpc *f, const asp_rename_params *p, asp_error *err)
{
	asp_status st = asp_check_required("rename", "from", p->from, err);
	if (st == ASP_OK)
		st = asp_check_required("rename", "to", p->to, err);
	if (st != ASP_OK)
		return st;
	sattr af, at;
	int fx = FX_OK, ffx, tfx, e = 0;
	char srv[256] = "";
	sshc_lock(f->c);
	if (!p->overwrite) {
		/* SFTP v3's own rename never replaces (OpenSSH links then unlinks a file) */
		st = do_stat(f, p->to, false, &at, &tfx, err);
		if (st == ASP_OK && tfx == FX_OK)
			e = EEXIST;
		else if (st == ASP_OK)
			st = call_status(f, FXP_RENAME, NULL, p->from, p->to, NULL, &fx, srv,
			                 sizeof srv, err);
	} else {
		st = rename_over(f, p->from, p->to, &fx, srv, sizeof srv, err);
	}
	if (st != ASP_OK || (fx == FX_OK && !e))
		goto out;
	if (!e) {
		/* the status is coarse: look at both ends */
		st = do_stat(f, p->from, false, &af, &ffx, err);
		if (st == ASP_OK)
			st = do_stat(f, p->to, false, &at, &tfx, err);
		if (st != ASP_OK)
			goto out;
		if (ffx != FX_OK) {
			st = path_errno(f, p->from, ffx, &e, err);
		} else if (fx == FX_NO_SUCH_FILE) {
			if (tfx == FX_OK && is_dir(&af) && !is_dir(&at))
				e = ENOTDIR;
			else
				st = missing_errno(f, p->to, &e, err);
		} else if (fx == FX_FAILURE && tfx == FX_OK) {
			if (!p->overwrite)
				e = EEXIST; /* appeared meanwhile */
			else if (!is_dir(&af) && is_dir(&at))
				e = EISDIR;
			else if (is_dir(&af) && is_dir(&at))
				e = ENOTEMPTY;
			else
				e = EIO;
		} else if (fx == FX_FAILURE && tfx != FX_OK && !p->overwrite) {
			e = EIO;
		} else {
			e = fx_errno(fx);
		}
		if (st != ASP_OK)
			goto out;
	}
	/* name the path the error is about: the target when it exists, else the source */
	const char *about = e == EEXIST ? p->to : p->from;
	char what[2 * ASP_ERROR_PATH_MAX + 16];
	snprintf(what, sizeof what, "rename %s -> %s", p->from, p->to);
	st = fx_error(err, e, srv, about, what);
	if (e == EEXIST && !p->overwrite)
		asp_error_hint(err, "the target exists and 'overwrite' is false");
out:
	sshc_unlock(f->c);
	return st;
}

/* ---- a tree's members (ssh_tree_sftp.c): many in flight from one thread ----------------- */

/* READDIRs sent with a tree's OPENDIR: sftp-server answers up to 100 names each */
#define LIST_AHEAD 4

struct sftp_tq_flight {
	asp_status st; /* the sending's */
	asp_error err;
	sreq r; /* the one request of the kinds that have one */
	/* TQ_PUT */
	sattr at;
	wplan w;
	wflight wf;
	/* TQ_GET: LSTAT, OPEN, the READs and CLOSE on the guessed handle g */
	struct chunk *q;
	size_t n;
	handle g;
	sreq rs, ro, rc;
	bool guessed;
	/* TQ_LIST: OPENDIR, LIST_AHEAD READDIRs and CLOSE on g */
	sreq rd[LIST_AHEAD];
};

/* What is left of a tree's file past *got, read ssh_sftp_read's way into buf. */
static asp_status get_rest(sftpc *f, const char *path, uint8_t *buf, size_t size, size_t *got,
                           asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_oom(err, "tree_read", NULL);
	asp_status st = ASP_OK;
	while (st == ASP_OK && *got < size) {
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = path;
		rp.offset = *got;
		rp.has_length = true;
		rp.length = size - *got;
		asp_read_result rr;
		st = ssh_sftp_read(f, &rp, size - *got, &rr, a, err);
		if (st == ASP_OK && rr.data.len) {
			memcpy(buf + *got, rr.data.data, rr.data.len);
			*got += rr.data.len;
		}
		asp_arena_reset(a);
		if (st == ASP_OK && (rr.eof || !rr.data.len))
			break;
	}
	asp_arena_free(a);
	return st;
}

/* Without a guess nothing goes out: the await reads the file ssh_sftp_read's way. */
static void get_send(sftpc *f, sftp_tq *t, struct sftp_tq_flight *x)
{
	size_t csz = f->max_read ? f->max_read : 32768;
	size_t n = (t->len + csz - 1) / csz;
	x->q = calloc(n + 1, sizeof *x->q);
	if (!x->q) {
		x->st = asp_error_oom(&x->err, "tree_read", NULL);
		return;
	}
	x->g.len = 4;
	sftp_settle(f);
	sftp_widen(f);
	sftp_batch_begin(f);
	x->guessed = sftp_handles_guess(f, x->g.h);
	asp_status st = ASP_OK;
	if (x->guessed) {
		st = send_call(f, FXP_LSTAT, NULL, t->path, NULL, NULL, &x->rs, &x->err);
		sftp_handles_closed_in_batch(f, x->g.h);
		if (st == ASP_OK)
			st = send_open(f, t->path, FXF_READ, NULL, false, &x->ro, &x->err);
		for (; st == ASP_OK && x->n < n; x->n++) {
			struct chunk *c = &x->q[x->n];
			c->off = x->n * csz;
			c->len = t->len - c->off < csz ? t->len - c->off : csz;
			c->r.dst = t->buf + c->off;
			c->r.dst_cap = c->len;
			st = send_chunk(f, FXP_READ, &x->g, 0, c, NULL, &x->err);
		}
		if (st == ASP_OK)
			st = send_on_handle(f, FXP_CLOSE, NULL, &x->g, NULL, &x->rc, &x->err);
	}
	sftp_batch_end(f);
	x->st = st;
}

/* (Under the lock, which it lets go to read the rest when the batch did not do.) */
static asp_status get_await(sftpc *f, sftp_tq *t, struct sftp_tq_flight *x, asp_error *err)
{
	asp_status st = x->st;
	if (st != ASP_OK)
		*err = x->err;
	sattr at = {0};
	int sfx = FX_OK, ofx = FX_FAILURE, fx = FX_OK;
	char srv[256] = "";
	handle h;
	if (st == ASP_OK && x->guessed) {
		st = sftp_await(f, &x->rs, err);
		if (st == ASP_OK)
			stat_result(&x->rs, &at, &sfx);
	}
	bool fifo = st == ASP_OK && x->guessed && sfx == FX_OK && (at.flags & FXA_PERMISSIONS) &&
	            S_ISFIFO(at.perm);
	if (fifo)
		unblock_fifo(f, t->path); /* put there since the listing: it reads as empty */
	if (st == ASP_OK && x->guessed)
		st = sftp_await(f, &x->ro, err);
	if (st == ASP_OK && x->guessed)
		open_result(&x->ro, &h, &ofx, srv, sizeof srv);
	bool hit_g = st == ASP_OK && x->guessed && ofx == FX_OK && hit(&h, &x->g);
	bool whole = hit_g; /* every byte asked came, or the file ended */
	bool ended = false;
	for (size_t i = 0; i < x->n && hit_g && st == ASP_OK && fx == FX_OK; i++) {
		struct chunk *c = &x->q[i];
		st = sftp_await(f, &c->r, err);
		int s2 = st == ASP_OK ? sftp_status(&c->r) : FX_OK;
		if (st != ASP_OK) {
			break;
		} else if (c->r.type == FXP_DATA && !ended) {
			t->got += c->r.len;
			ended = c->r.len < c->len; /* shrank, or a short read: asked again below */
		} else if (c->r.type == FXP_DATA) {
			whole = false; /* bytes after a short answer: read the rest again */
		} else if (s2 == FX_EOF) {
			ended = true;
		} else {
			fx = s2 > 0 ? s2 : FX_BAD_MESSAGE;
			fx_text(&c->r, srv, sizeof srv);
		}
	}
	for (size_t i = 0; i < x->n; i++)
		sftp_forget(f, &x->q[i].r);
	sftp_forget(f, &x->rs);
	sftp_forget(f, &x->ro);
	sftp_forget(f, &x->rc);
	free(x->q);
	if (st == ASP_OK && x->guessed && ofx == FX_OK && !hit_g)
		close_nowait(f, &h); /* the guess missed: the requests on it failed */
	if (fifo) {
		t->got = 0;
		return st;
	}
	if (st == ASP_OK && x->guessed && ofx != FX_OK)
		return op_error(f, "tree_read: read", t->path, ofx, srv, err);
	if (st == ASP_OK && fx != FX_OK)
		return op_error(f, "tree_read: read", t->path, fx, srv, err);
	if (st == ASP_OK && (!whole || (ended && t->got < t->len))) {
		/* no guess, a miss, or a short answer */
		sshc_unlock(f->c);
		st = get_rest(f, t->path, t->buf, t->len, &t->got, err);
		sshc_lock(f->c);
	}
	return st;
}

/* Without a guess nothing goes out: the await lists the directory ssh_sftp_list's way. */
static void list_send(sftpc *f, sftp_tq *t, struct sftp_tq_flight *x)
{
	x->g.len = 4;
	sftp_settle(f);
	sftp_batch_begin(f);
	x->guessed = sftp_handles_guess(f, x->g.h);
	asp_status st = ASP_OK;
	if (x->guessed) {
		sftp_handles_closed_in_batch(f, x->g.h);
		st = send_open(f, t->path, 0, NULL, true, &x->ro, &x->err);
		for (size_t i = 0; st == ASP_OK && i < LIST_AHEAD; i++)
			st = send_readdir(f, &x->g, &x->rd[i], &x->err);
		if (st == ASP_OK)
			st = send_on_handle(f, FXP_CLOSE, NULL, &x->g, NULL, &x->rc, &x->err);
	}
	sftp_batch_end(f);
	x->st = st;
}

/* (Under the lock, which it lets go to list again when the batch did not do.) */
static asp_status list_await(sftpc *f, sftp_tq *t, struct sftp_tq_flight *x, asp_error *err)
{
	asp_status st = x->st;
	if (st != ASP_OK)
		*err = x->err;
	int fx = FX_FAILURE;
	handle h;
	if (st == ASP_OK && x->guessed)
		st = sftp_await(f, &x->ro, err);
	if (st == ASP_OK && x->guessed)
		open_result(&x->ro, &h, &fx, NULL, 0);
	bool hit_g = st == ASP_OK && x->guessed && fx == FX_OK && hit(&h, &x->g);
	dlist d = {0};
	int rc = hit_g ? 0 : -1;
	for (size_t i = 0; i < LIST_AHEAD && rc == 0 && st == ASP_OK; i++) {
		st = sftp_await(f, &x->rd[i], err);
		int rfx = FX_OK;
		if (st == ASP_OK)
			rc = take_readdir(&x->rd[i], &d, &rfx, NULL, 0);
	}
	for (size_t i = 0; i < LIST_AHEAD; i++)
		sftp_forget(f, &x->rd[i]);
	sftp_forget(f, &x->ro);
	sftp_forget(f, &x->rc);
	if (st == ASP_OK && x->guessed && fx == FX_OK && !hit_g)
		close_nowait(f, &h); /* the guess missed: the requests on it failed */
	if (st == ASP_OK && rc == 1) {
		st = list_result(&d, &t->list, t->arena, err);
	} else if (st == ASP_OK) {
		/* no guess, a miss, a refusal (its error said the usual way) or a long one */
		asp_list_params lp;
		asp_list_params_init(&lp);
		lp.path = t->path;
		sshc_unlock(f->c);
		st = ssh_sftp_list(f, &lp, &t->list, t->arena, err);
		sshc_lock(f->c);
	}
	dlist_free(&d);
	return st;
}

bool ssh_sftp_tq_send(sftpc *f, sftp_tq *t)
{
	struct sftp_tq_flight *x = calloc(1, sizeof *x);
	t->fl = x;
	if (!x)
		return false;
	sshc_lock(f->c);
	x->st = sftp_start(f, &x->err);
	bool out = false;
	sattr at = {0};
	uint8_t type = 0;
	const char *s1 = t->path, *s2 = NULL;
	switch (t->kind) {
	case TQ_PUT:
		x->at = (sattr){.flags = FXA_PERMISSIONS, .perm = (t->perm & 07777) | 0600};
		x->w = (wplan){.data = t->data, .len = t->len, .base = t->base, .attrs = t->last};
		x->w.set = (sattr){.flags = FXA_PERMISSIONS | FXA_ACMODTIME,
		                   .perm = t->perm & 07777,
		                   .atime = t->mtime,
		                   .mtime = t->mtime};
		if (x->st == ASP_OK) {
			uint32_t flags =
			    FXF_WRITE | (t->create ? FXF_CREAT | FXF_EXCL | FXF_TRUNC : 0);
			sftp_settle(f);
			x->st = open_write_send(f, t->path, flags, t->create ? &x->at : NULL, &x->w,
			                        false, &x->wf, &x->err);
			out = open_write_all_out(&x->wf);
		}
		break;
	case TQ_GET:
		if (x->st == ASP_OK)
			get_send(f, t, x);
		out = x->st == ASP_OK && x->guessed;
		break;
	case TQ_LIST:
		if (x->st == ASP_OK)
			list_send(f, t, x);
		out = x->st == ASP_OK && x->guessed;
		break;
	case TQ_MKDIR:
		type = FXP_MKDIR;
		at = (sattr){.flags = FXA_PERMISSIONS, .perm = t->perm & 07777};
		break;
	case TQ_SETSTAT:
		type = FXP_SETSTAT;
		at = (sattr){.flags = FXA_PERMISSIONS | FXA_ACMODTIME,
		             .perm = t->perm & 07777,
		             .atime = t->mtime,
		             .mtime = t->mtime};
		break;
	case TQ_LINK: /* OpenSSH's sftp-server takes the target first (the draft's order reversed)
	               */
		type = FXP_SYMLINK;
		s1 = t->s2;
		s2 = t->path;
		break;
	case TQ_LSTAT: type = FXP_LSTAT; break;
	case TQ_READLINK: type = FXP_READLINK; break;
	}
	if (type && x->st == ASP_OK) {
		x->st = send_call(f, type, NULL, s1, s2, at.flags ? &at : NULL, &x->r, &x->err);
		out = x->st == ASP_OK;
	}
	sshc_unlock(f->c);
	return out;
}

asp_status ssh_sftp_tq_await(sftpc *f, sftp_tq *t, asp_error *err)
{
	struct sftp_tq_flight *x = t->fl;
	t->fl = NULL;
	if (!x)
		return asp_error_oom(err, "tree", NULL);
	sshc_lock(f->c);
	asp_status st = x->st;
	if (t->kind == TQ_PUT) {
		char srv[256] = "";
		int ofx = FX_OK;
		x->wf.st = x->st; /* (also where open_write_send was not reached) */
		st = open_write_await(f, t->path, &x->w, &x->wf, NULL, NULL, &ofx, srv, sizeof srv,
		                      err);
		int fx = ofx != FX_OK ? ofx : x->w.wfx;
		if (x->st != ASP_OK)
			*err = x->err;
		else if (st == ASP_OK && fx != FX_OK)
			st = op_error(f, "tree_write: write", t->path, fx, srv, err);
	} else if (t->kind == TQ_GET) {
		st = get_await(f, t, x, err);
	} else if (t->kind == TQ_LIST) {
		st = list_await(f, t, x, err);
	} else if (st != ASP_OK) {
		*err = x->err;
		sftp_forget(f, &x->r);
	} else if (t->kind == TQ_LSTAT) {
		sattr a = {0};
		int fx = FX_OK;
		st = sftp_await(f, &x->r, err);
		if (st == ASP_OK)
			stat_result(&x->r, &a, &fx);
		sftp_forget(f, &x->r);
		t->lkind = fx == FX_NO_SUCH_FILE ? 0 : is_dir(&a) ? 1 : 2;
		t->lperm = a.perm;
		t->lmtime = a.mtime;
		if (st == ASP_OK && fx != FX_OK && fx != FX_NO_SUCH_FILE)
			st = asp_error_set(err, ASP_E_IO_ERROR, t->path,
			                   "tree: lstat %s: sftp status %d", t->path, fx);
	} else if (t->kind == TQ_READLINK) {
		int fx = FX_OK;
		st = sftp_await(f, &x->r, err);
		if (st == ASP_OK)
			st = take_name(f, &x->r, &t->link, &fx, err);
		else
			sftp_forget(f, &x->r);
		if (st == ASP_OK && fx != FX_OK)
			st = op_error(f, "tree_read: readlink", t->path, fx, NULL, err);
	} else {
		static const char *const what[] = {[TQ_MKDIR] = "tree_write: mkdir",
		                                   [TQ_SETSTAT] = "tree_write: setstat",
		                                   [TQ_LINK] = "tree_write: symlink"};
		char srv[256] = "";
		int fx = FX_OK;
		st = await_status(f, &x->r, &fx, srv, sizeof srv, err);
		if (st == ASP_OK && fx != FX_OK)
			st = op_error(f, what[t->kind], t->path, fx, srv, err);
	}
	sshc_unlock(f->c);
	free(x);
	return st;
}
