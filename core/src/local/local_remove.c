/*
 * remove: a file, symlink or directory; recursively on request. The walk goes through
 * directory fds with O_NOFOLLOW, so a symlink (even one swapped in during the walk) is
 * removed as a name and never followed. It is iterative: a deep tree costs heap, not
 * stack, and one fd per level.
 */
#include "local_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define REWINDS   3 /* rescans of a directory that was not empty after one pass */

struct frame {
	DIR *d;
	int fd;
	char *name; /* its name in the parent; NULL for the top */
	int rewinds;
};

/* "a/b/c" below the top, for the message when something inside cannot be removed. */
static void inner_path(char *out, size_t cap, const struct frame *st, size_t n, const char *leaf)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 1; i <= n; i++) {
		const char *part = i < n ? st[i].name : leaf;
		if (!part)
			continue;
		int w = snprintf(out + used, cap - used, "%s%s", used ? "/" : "", part);
		if (w < 0 || (size_t)w >= cap - used)
			return;
		used += (size_t)w;
	}
}

int local_remove_tree(const char *path, char *where, size_t where_cap)
{
	int fd = open(path, DIR_FLAGS);
	if (fd < 0)
		return errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return e;
	}
	size_t n = 0, cap = 16;
	struct frame *st = malloc(cap * sizeof *st);
	if (!st) {
		closedir(d);
		return ENOMEM;
	}
	st[n++] = (struct frame){d, fd, NULL, 0};
	int e = 0;
	const char *leaf = NULL;
	while (n > 0 && !e) {
		struct frame *f = &st[n - 1];
		errno = 0;
		struct dirent *de = readdir(f->d);
		if (!de && errno) {
			e = errno;
			break;
		}
		if (!de) { /* this directory is done: remove it from its parent */
			int rc =
			    n == 1 ? rmdir(path) : unlinkat(st[n - 2].fd, f->name, AT_REMOVEDIR);
			if (rc < 0 && (errno == ENOTEMPTY || errno == EEXIST) &&
			    f->rewinds < REWINDS) {
				/* entries removed mid-scan can hide others on some filesystems */
				f->rewinds++;
				rewinddir(f->d);
				continue;
			}
			if (rc < 0 && errno != ENOENT) {
				e = errno;
				break;
			}
			closedir(f->d);
			free(f->name);
			n--;
			continue;
		}
		const char *nm = de->d_name;
		if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
			continue;
		if (de->d_type != DT_DIR) {
			if (unlinkat(f->fd, nm, 0) == 0 || errno == ENOENT)
				continue;
			if (errno != EISDIR &&
			    errno != EPERM) { /* EPERM: POSIX's answer for a dir */
				e = errno;
				leaf = nm;
				break;
			}
		}
		int cfd = openat(f->fd, nm, DIR_FLAGS);
		if (cfd < 0) {
			e = errno;
			if (e == ENOENT) {
				e = 0;
				continue;
			}
			if (e == ENOTDIR ||
			    e == ELOOP) { /* replaced by a non-directory meanwhile */
				if (unlinkat(f->fd, nm, 0) == 0 || errno == ENOENT) {
					e = 0;
					continue;
				}
				e = errno;
			}
			leaf = nm;
			break;
		}
		if (n == cap) {
			struct frame *ns = realloc(st, cap * 2 * sizeof *st);
			if (!ns) {
				close(cfd);
				e = ENOMEM;
				break;
			}
			st = ns;
			cap *= 2;
			f = &st[n - 1];
		}
		DIR *cd = fdopendir(cfd);
		char *name = strdup(nm);
		if (!cd || !name) {
			e = cd ? ENOMEM : errno;
			free(name);
			if (cd)
				closedir(cd);
			else
				close(cfd);
			leaf = nm;
			break;
		}
		st[n++] = (struct frame){cd, cfd, name, 0};
	}
	if (e && where_cap)
		inner_path(where, where_cap, st, n, leaf);
	while (n > 0) {
		closedir(st[n - 1].d);
		free(st[n - 1].name);
		n--;
	}
	free(st);
	return e;
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

asp_status asp_local_remove(void *self, const asp_remove_params *p, asp_remove_result *r,
                            asp_arena *a, asp_error *err)
{
	(void)self;
	(void)a;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("remove", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	/* "link/" would name the directory behind a symlink: strip trailing slashes so a
	 * symlink is always removed as itself. */
	size_t len = strlen(p->path);
	while (len > 1 && p->path[len - 1] == '/')
		len--;
	char *copy = NULL;
	const char *path = p->path;
	if (len != strlen(p->path)) {
		copy = strndup(p->path, len);
		if (!copy)
			return local_oom("remove", err);
		path = copy;
	}
	if (strcmp(path, "/") == 0 || dot_name(path, len)) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                   "remove %s: refusing to remove '/', '.' or '..'", p->path);
		goto out;
	}
	if (unlink(path) == 0)
		goto out;
	int e = errno;
	struct stat sb;
	if ((e == EISDIR || e == EPERM) && lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		e = rmdir(path) == 0 ? 0 : errno;
		if (e == EEXIST)
			e = ENOTEMPTY; /* what some filesystems say for a non-empty directory */
		if (e == ENOTEMPTY && p->recursive) {
			char where[ASP_ERROR_PATH_MAX / 2];
			where[0] = '\0';
			e = local_remove_tree(path, where, sizeof where);
			if (e && where[0]) {
				if (e == ENOMEM)
					st = local_oom("remove", err);
				else
					st = asp_error_errno(err, e, p->path,
					                     "remove %s: cannot remove %s", p->path,
					                     where);
				goto out;
			}
		}
	}
	if (e == ENOMEM) {
		st = local_oom("remove", err);
	} else if (e) {
		st = asp_error_errno(err, e, p->path, "remove %s", p->path);
		if (e == ENOTEMPTY && !p->recursive)
			asp_error_hint(err, "'recursive' removes a directory and everything in it");
	}
out:
	free(copy);
	return st;
}
