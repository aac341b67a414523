/*
 * A directory of this machine as a tar stream (asp/tree.h, asp_tree_pack): a walk through
 * directory fds (O_NOFOLLOW below the root), each directory's names sorted bytewise,
 * headers from asp_tar_header and file data read straight into the caller's buffer.
 */
#include "asp/tar.h"
#include "asp/tree.h"
#include "local_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

typedef struct frame {
	int fd;
	char **names; /* sorted */
	size_t n, next;
	size_t rel_len; /* its path below the root, in p->rel */
} frame;

struct asp_tree_pack {
	char *dir;
	asp_tree_exclude *ex;
	frame *st;
	size_t depth, cap;
	char rel[ASP_TAR_PATH_MAX + NAME_MAX + 2];
	/* bytes ready to hand out before anything else: a header, padding, the end */
	uint8_t out[ASP_TAR_HEADER_MAX];
	size_t out_len, out_off;
	/* the file whose data goes out now */
	int file_fd;
	uint64_t file_left; /* data bytes still owed to the stream */
	size_t file_pad;
	char *file_rel;
	bool started, ended, done;
	asp_tree_counts counts;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void frame_free(frame *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->names[i]);
	free(f->names);
	if (f->fd >= 0)
		close(f->fd);
}

/* Pushes the directory `fd` (taken) with its entries read and sorted; 0 or an errno. */
static int push(asp_tree_pack *p, int fd, size_t rel_len)
{
	if (p->depth == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 16;
		frame *v = realloc(p->st, cap * sizeof *v);
		if (!v) {
			close(fd);
			return ENOMEM;
		}
		p->st = v;
		p->cap = cap;
	}
	frame f = {.fd = fd, .rel_len = rel_len};
	int dfd = dup(fd);
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	if (!d) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		close(fd);
		return e;
	}
	size_t cap = 0;
	int e = 0;
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) {
		const char *nm = de->d_name;
		if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
			continue;
		if (f.n == cap) {
			cap = cap ? cap * 2 : 32;
			char **v = realloc(f.names, cap * sizeof *v);
			if (!v) {
				e = ENOMEM;
				break;
			}
			f.names = v;
		}
		if (!(f.names[f.n] = strdup(nm))) {
			e = ENOMEM;
			break;
		}
		f.n++;
	}
	if (!e && errno)
		e = errno;
	closedir(d);
	if (e) {
		frame_free(&f);
		return e;
	}
	if (f.n > 1)
		qsort(f.names, f.n, sizeof *f.names, by_name);
	p->st[p->depth++] = f;
	return 0;
}

asp_status asp_tree_pack_open(const char *dir, const char *const *exclude, size_t n,
                              asp_tree_pack **out, asp_error *err)
{
	*out = NULL;
	asp_tree_pack *p = calloc(1, sizeof *p);
	if (!p || !(p->dir = strdup(dir && dir[0] ? dir : "."))) {
		asp_tree_pack_free(p);
		return asp_error_oom(err, "tree_read", "packing a tree");
	}
	p->file_fd = -1;
	asp_status st = n ? asp_tree_exclude_new(exclude, n, &p->ex, err) : ASP_OK;
	int fd = st == ASP_OK ? open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (st == ASP_OK && fd < 0)
		st = asp_error_errno(err, errno, p->dir, "tree_read: cannot open the directory %s",
		                     p->dir);
	int e = fd >= 0 ? push(p, fd, 0) : 0;
	if (st == ASP_OK && e)
		st = asp_error_errno(err, e, p->dir, "tree_read: cannot read the directory %s",
		                     p->dir);
	if (st != ASP_OK) {
		asp_tree_pack_free(p);
		return st;
	}
	*out = p;
	return ASP_OK;
}

/* A member's header into p->out; the error names the member. */
static asp_status put_header(asp_tree_pack *p, const asp_tar_member *m, asp_error *err)
{
	size_t n = asp_tar_header(m, p->out, sizeof p->out, err);
	if (!n)
		return asp_error_prefix(err, ASP_E_INVALID_ARGUMENT, "tree_read");
	p->out_len = n;
	p->out_off = 0;
	if (m->path[0])
		p->counts.entries++;
	p->counts.bytes += m->size;
	return ASP_OK;
}

static asp_status entry_error(asp_tree_pack *p, int e, const char *what, asp_error *err)
{
	return asp_error_errno(err, e, p->rel, "tree_read: cannot %s %s/%s", what, p->dir, p->rel);
}

/* The walk's next member into p->out (or the end-of-archive blocks once it is over). */
static asp_status next_member(asp_tree_pack *p, asp_error *err)
{
	if (!p->started) { /* the root, as "./" */
		p->started = true;
		struct stat sb;
		if (fstat(p->st[0].fd, &sb) < 0)
			return asp_error_errno(err, errno, p->dir, "tree_read: cannot stat %s",
			                       p->dir);
		asp_tar_member m = {ASP_TAR_DIR,          "", NULL, (uint32_t)sb.st_mode & 07777,
		                    (int64_t)sb.st_mtime, 0};
		return put_header(p, &m, err);
	}
	while (p->depth > 0) {
		frame *f = &p->st[p->depth - 1];
		if (f->next == f->n) {
			frame_free(f);
			p->depth--;
			continue;
		}
		const char *nm = f->names[f->next++];
		int w = snprintf(p->rel + f->rel_len, sizeof p->rel - f->rel_len, "%s%s",
		                 f->rel_len ? "/" : "", nm);
		size_t rel_len = f->rel_len + (size_t)w;
		if (w < 0 || rel_len > ASP_TAR_PATH_MAX) {
			p->rel[f->rel_len] = '\0';
			return asp_error_set(
			    err, ASP_E_INVALID_ARGUMENT, p->rel,
			    "tree_read: a path below %s/%s is longer than %u bytes, "
			    "more than a tar member may have",
			    p->dir, p->rel, ASP_TAR_PATH_MAX);
		}
		if (asp_tree_exclude_match(p->ex, p->rel))
			continue;
		struct stat sb;
		if (fstatat(f->fd, nm, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue; /* removed since the listing */
			return entry_error(p, errno, "stat", err);
		}
		asp_tar_member m = {.path = p->rel,
		                    .mode = (uint32_t)sb.st_mode & 07777,
		                    .mtime = (int64_t)sb.st_mtime};
		if (S_ISDIR(sb.st_mode)) {
			int fd = openat(f->fd, nm, DIR_FLAGS);
			if (fd < 0 && errno == ENOENT)
				continue;
			int e = fd < 0 ? errno : push(p, fd, rel_len); /* f moves with the stack */
			if (e)
				return entry_error(p, e, "read the directory", err);
			m.type = ASP_TAR_DIR;
			return put_header(p, &m, err);
		}
		if (S_ISLNK(sb.st_mode)) {
			char target[ASP_TAR_PATH_MAX + 2];
			ssize_t n = readlinkat(f->fd, nm, target, sizeof target - 1);
			if (n < 0 && errno == ENOENT)
				continue;
			if (n < 0)
				return entry_error(p, errno, "read the symlink", err);
			if ((size_t)n > ASP_TAR_PATH_MAX)
				return asp_error_set(
				    err, ASP_E_INVALID_ARGUMENT, p->rel,
				    "tree_read: the symlink %s/%s points to a path longer "
				    "than %u bytes",
				    p->dir, p->rel, ASP_TAR_PATH_MAX);
			target[n] = '\0';
			m.type = ASP_TAR_SYMLINK;
			m.link = target;
			return put_header(p, &m, err);
		}
		if (!S_ISREG(sb.st_mode))
			continue; /* fifos, sockets, devices: a tree holds none */
		int fd = openat(f->fd, nm, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			continue;
		if (fd < 0 || fstat(fd, &sb) < 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			return entry_error(p, e, "read", err);
		}
		if (!S_ISREG(sb.st_mode)) { /* swapped for something else since the stat */
			close(fd);
			continue;
		}
		m.type = ASP_TAR_FILE;
		m.mode = (uint32_t)sb.st_mode & 07777;
		m.mtime = (int64_t)sb.st_mtime;
		m.size = (uint64_t)sb.st_size;
		asp_status st = put_header(p, &m, err);
		if (st != ASP_OK) {
			close(fd);
			return st;
		}
		if (!m.size) {
			close(fd);
			return ASP_OK;
		}
		free(p->file_rel);
		p->file_rel = strdup(p->rel);
		p->file_fd = fd;
		p->file_left = m.size;
		p->file_pad = asp_tar_padding(m.size);
		return ASP_OK;
	}
	memset(p->out, 0, ASP_TAR_END_BYTES);
	p->out_len = ASP_TAR_END_BYTES;
	p->out_off = 0;
	p->ended = true;
	return ASP_OK;
}

/* File data straight into buf: what it has, zeros where it shrank. */
static asp_status file_data(asp_tree_pack *p, uint8_t *buf, size_t cap, size_t *got, asp_error *err)
{
	size_t want = p->file_left < cap ? (size_t)p->file_left : cap;
	ssize_t n = p->file_fd >= 0 ? read(p->file_fd, buf, want) : 0;
	if (n < 0 && errno == EINTR)
		n = 0;
	else if (n < 0)
		return asp_error_errno(err, errno, p->file_rel, "tree_read: cannot read %s/%s",
		                       p->dir, p->file_rel ? p->file_rel : "");
	else if (n == 0) { /* it shrank since its size was taken: zeros keep the stream whole */
		memset(buf, 0, want);
		n = (ssize_t)want;
		if (p->file_fd >= 0)
			close(p->file_fd);
		p->file_fd = -1;
	}
	*got = (size_t)n;
	p->file_left -= (uint64_t)n;
	if (!p->file_left) {
		if (p->file_fd >= 0)
			close(p->file_fd); /* what it grew by since stays out */
		p->file_fd = -1;
		memset(p->out, 0, p->file_pad);
		p->out_len = p->file_pad;
		p->out_off = 0;
		p->file_pad = 0;
	}
	return ASP_OK;
}

asp_status asp_tree_pack_read(asp_tree_pack *p, uint8_t *buf, size_t cap, size_t *len,
                              asp_error *err)
{
	*len = 0;
	size_t used = 0;
	while (used < cap && !p->done) {
		if (p->out_off < p->out_len) {
			size_t k = p->out_len - p->out_off;
			if (k > cap - used)
				k = cap - used;
			memcpy(buf + used, p->out + p->out_off, k);
			p->out_off += k;
			used += k;
			continue;
		}
		if (p->ended) {
			p->done = true;
			break;
		}
		asp_status st;
		if (p->file_left) {
			size_t got = 0;
			st = file_data(p, buf + used, cap - used, &got, err);
			used += got;
		} else {
			st = next_member(p, err);
		}
		if (st != ASP_OK) {
			*len = used;
			return st;
		}
	}
	*len = used;
	return ASP_OK;
}

asp_tree_counts asp_tree_pack_counts(const asp_tree_pack *p)
{
	return p->counts;
}

void asp_tree_pack_free(asp_tree_pack *p)
{
	if (!p)
		return;
	while (p->depth > 0)
		frame_free(&p->st[--p->depth]);
	free(p->st);
	asp_tree_exclude_free(p->ex);
	if (p->file_fd >= 0)
		close(p->file_fd);
	free(p->file_rel);
	free(p->dir);
	free(p);
}
