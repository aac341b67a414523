/* stat, list, mkdir and rename: metadata and names, not contents. */
#include "local_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0) /* musl's headers lack it; the kernel ABI value */
#endif

const char *local_type_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "file";
	case S_IFDIR: return "dir";
	case S_IFLNK: return "symlink";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	case S_IFCHR: return "char";
	case S_IFBLK: return "block";
	default: return "file"; /* no other type exists on POSIX systems */
	}
}

static int64_t mtime_ns(const struct stat *sb)
{
	return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

/* The symlink's target, in the arena; st_size is only a hint (procfs says 0). */
static char *read_link(asp_arena *a, const char *path, size_t hint)
{
	size_t cap = hint ? hint + 1 : 256;
	for (int i = 0; i < 16; i++) {
		char *buf = malloc(cap);
		if (!buf)
			return NULL;
		ssize_t n = readlink(path, buf, cap);
		if (n >= 0 && (size_t)n < cap) {
			char *s = asp_arena_strndup(a, buf, (size_t)n);
			free(buf);
			return s;
		}
		free(buf);
		if (n < 0)
			return NULL;
		cap *= 2; /* changed since lstat, or procfs: try a bigger buffer */
	}
	return NULL;
}

asp_status asp_local_stat(void *self, const asp_stat_params *p, asp_stat_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)self;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("stat", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	struct stat sb;
	if ((p->follow ? stat(p->path, &sb) : lstat(p->path, &sb)) < 0)
		return asp_error_errno(err, errno, p->path, "stat %s", p->path);
	r->type = local_type_name(sb.st_mode);
	r->size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
	r->mode = sb.st_mode & 07777;
	r->mtime_ns = mtime_ns(&sb);
	r->uid = sb.st_uid;
	r->gid = sb.st_gid;
	if (S_ISLNK(sb.st_mode)) {
		r->target = read_link(a, p->path, (size_t)r->size);
		if (!r->target && errno != ENOMEM)
			return asp_error_errno(err, errno, p->path, "stat %s: readlink", p->path);
		if (!r->target)
			return local_oom("stat", err);
	}
	return ASP_OK;
}

static int by_name(const void *x, const void *y)
{
	/* strcmp compares as unsigned char: bytewise, as the protocol asks */
	return strcmp(((const asp_list_entry *)x)->name, ((const asp_list_entry *)y)->name);
}

asp_status asp_local_list(void *self, const asp_list_params *p, asp_list_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)self;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("list", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	int fd = open(p->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return asp_error_errno(err, errno, p->path, "list %s", p->path);
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return asp_error_errno(err, e, p->path, "list %s", p->path);
	}
	asp_list_entry *items = NULL;
	size_t n = 0, cap = 0;
	int e = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			e = errno;
			break;
		}
		const char *nm = de->d_name;
		if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
			continue;
		struct stat sb;
		if (fstatat(fd, nm, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue; /* removed since readdir */
			e = errno;
			break;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 32;
			asp_list_entry *ni = realloc(items, ncap * sizeof *ni);
			if (!ni) {
				e = ENOMEM;
				break;
			}
			items = ni;
			cap = ncap;
		}
		asp_list_entry *it = &items[n];
		it->name = asp_arena_strndup(a, nm, strlen(nm));
		if (!it->name) {
			e = ENOMEM;
			break;
		}
		it->type = local_type_name(sb.st_mode);
		it->size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
		it->mode = sb.st_mode & 07777;
		it->mtime_ns = mtime_ns(&sb);
		n++;
	}
	closedir(d);
	if (e) {
		free(items);
		if (e == ENOMEM)
			return local_oom("list", err);
		return asp_error_errno(err, e, p->path, "list %s", p->path);
	}
	if (n > 1)
		qsort(items, n, sizeof *items, by_name);
	if (n && asp_arena_adopt(a, items) < 0)
		return local_oom("list", err);
	if (!n)
		free(items);
	r->entries.items = n ? items : NULL;
	r->entries.count = n;
	return ASP_OK;
}

static bool is_dir(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

char *asp_path_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return NULL;
	while (slash > path && slash[-1] == '/')
		slash--;
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

int asp_mkdir_parents(const char *path, unsigned mode, unsigned parent_mode,
                      const asp_mkdir_fns *fns, void *ctx)
{
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	char *buf = strndup(path, len);
	if (!buf)
		return ENOMEM;
	int e = fns->mkdir(ctx, buf, mode);
	if (e == EEXIST) {
		e = fns->exists(ctx, buf);
		goto out;
	}
	if (e != ENOENT)
		goto out;
	/* Back: cut at each separator run until an ancestor exists or gets made. */
	int cuts = 0;
	size_t i = len;
	for (;;) {
		while (i > 0 && buf[i - 1] != '/')
			i--;
		if (i == 0)
			break; /* relative path whose first component is missing: made below */
		size_t s = i - 1;
		while (s > 0 && buf[s - 1] == '/')
			s--;
		if (s == 0)
			break; /* reached the root */
		buf[s] = '\0';
		cuts++;
		e = fns->mkdir(ctx, buf, parent_mode);
		if (e == 0 || e == EEXIST)
			break; /* EEXIST on a non-directory shows up as ENOTDIR on the next level */
		if (e != ENOENT)
			goto out;
		i = s;
	}
	/* Forward: restore one separator at a time and make that level. */
	e = 0;
	for (int k = 0; k < cuts; k++) {
		char *z = buf + strlen(buf);
		*z = '/';
		bool last = k == cuts - 1;
		e = fns->mkdir(ctx, buf, last ? mode : parent_mode);
		if (e == EEXIST) /* raced with another creator */
			e = last ? fns->exists(ctx, buf) : 0;
		else if (e == ENOENT)
			e = fns->missing ? fns->missing(ctx, buf) : ENOENT;
		if (e)
			goto out;
	}
	if (cuts == 0)
		e = fns->missing ? fns->missing(ctx, buf) : ENOENT;
out:
	free(buf);
	return e;
}

static int sys_mkdir(void *ctx, const char *path, unsigned mode)
{
	(void)ctx;
	return mkdir(path, (mode_t)mode) == 0 ? 0 : errno;
}

static int sys_exists(void *ctx, const char *path)
{
	(void)ctx;
	return is_dir(path) ? 0 : EEXIST;
}

int local_mkdir_parents(const char *path, mode_t mode, mode_t parent_mode)
{
	static const asp_mkdir_fns sys = {.mkdir = sys_mkdir, .exists = sys_exists};
	return asp_mkdir_parents(path, mode, parent_mode, &sys, NULL);
}

asp_status asp_local_mkdir(void *self, const asp_mkdir_params *p, asp_mkdir_result *r, asp_arena *a,
                           asp_error *err)
{
	(void)self;
	(void)a;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("mkdir", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->mode > 07777)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "mkdir %s: mode %#llo has bits beyond 07777", p->path,
		                     (unsigned long long)p->mode);
	/* Missing parents get 0755 (as write's mkdirs does); `mode` is for the path itself. */
	int e = p->parents ? local_mkdir_parents(p->path, (mode_t)p->mode, 0755)
	                   : (mkdir(p->path, (mode_t)p->mode) < 0 ? errno : 0);
	if (!e)
		return ASP_OK;
	st = asp_error_errno(err, e, p->path, "mkdir %s", p->path);
	if (e == ENOENT && !p->parents)
		asp_error_hint(err, "a parent directory is missing; 'parents' creates it");
	else if (e == EEXIST && p->parents)
		asp_error_hint(err, "it exists and is not a directory");
	return st;
}

/*
 * rename without replacing: renameat2(RENAME_NOREPLACE) where the kernel and filesystem
 * have it; else link+unlink for non-directories (link fails atomically on an existing
 * name); else a check then rename, which a concurrent creator could race.
 */
static int rename_noreplace(const char *from, const char *to)
{
#ifdef SYS_renameat2
	if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL)
		return errno;
#endif
	struct stat sb;
	if (lstat(from, &sb) < 0)
		return errno;
	if (!S_ISDIR(sb.st_mode)) {
		if (link(from, to) == 0) {
			if (unlink(from) == 0)
				return 0;
			int e = errno;
			unlink(to);
			return e;
		}
		if (errno == EEXIST || errno == ENOENT || errno == ENOTDIR)
			return errno;
	}
	if (lstat(to, &sb) == 0)
		return EEXIST;
	return rename(from, to) == 0 ? 0 : errno;
}

asp_status asp_local_rename(void *self, const asp_rename_params *p, asp_rename_result *r,
                            asp_arena *a, asp_error *err)
{
	(void)self;
	(void)a;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("rename", "from", p->from, err);
	if (st == ASP_OK)
		st = asp_check_required("rename", "to", p->to, err);
	if (st != ASP_OK)
		return st;
	int e = p->overwrite ? (rename(p->from, p->to) == 0 ? 0 : errno)
	                     : rename_noreplace(p->from, p->to);
	if (!e)
		return ASP_OK;
	/* Name the path the error is about: the target when it exists, else the source. */
	const char *about = e == EEXIST ? p->to : p->from;
	st = asp_error_errno(err, e, about, "rename %s -> %s", p->from, p->to);
	if (e == EEXIST && !p->overwrite)
		asp_error_hint(err, "the target exists and 'overwrite' is false");
	return st;
}
