/*
 * A tar stream into a directory of this machine (asp/tree.h, asp_tree_unpack): the
 * checked members of asp_tar_reader written into a temporary directory, through
 * directory fds opened with O_NOFOLLOW, then put in place in one rename or by moving
 * entries into the existing directory (docs/design.md, "Trees as one stream").
 */
#include "asp/tar.h"
#include "asp/tree.h"
#include "local_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0) /* linux/fs.h, which musl's headers lack */
#endif

#define DIR_FLAGS   (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define TEMP_PREFIX "asp-tree-"
/* Directories whose mode and mtime wait for the end, at most (a stream of more is refused). */
#define DIRS_MAX (4u * 1024u * 1024u)

typedef struct dir_meta {
	char *rel; /* below the tree's root; "" for the root */
	uint32_t mode;
	int64_t mtime;
} dir_meta;

struct asp_tree_unpack {
	char op[32];
	char *dir;    /* the target, as given (trailing slashes dropped) */
	int place_fd; /* where the temporary lives: the target's parent, or the target */
	char *tmp;    /* the temporary's name in place_fd */
	int tmp_fd;   /* the temporary */
	bool exists;  /* the target existed: the temporary is inside it */
	char *base;   /* the target's name in place_fd when it did not exist */
	asp_tar_reader *rd;
	/* the directory of the last member, kept open: most members share one */
	char *cache_rel;
	int cache_fd;
	/* the file being written */
	int file_fd;
	uint32_t file_mode;
	int64_t file_mtime;
	char *file_rel;
	dir_meta *dirs;
	size_t ndirs, dirs_cap;
	bool failed, finished;
	asp_status status;
	asp_error err;
};

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static asp_status member_errno(asp_tree_unpack *u, int e, const char *rel, const char *what,
                               asp_error *err)
{
	return asp_error_errno(err, e, rel, "%s: member '%.300s': %s", u->op, rel[0] ? rel : ".",
	                       what);
}

static asp_status member_refused(asp_tree_unpack *u, const char *rel, const char *what,
                                 asp_error *err)
{
	return asp_error_set(err, ASP_E_INVALID_ARGUMENT, rel, "%s: member '%.300s': %s", u->op,
	                     rel[0] ? rel : ".", what);
}

/* ---- temporary directories -------------------------------------------------------- */

/* The pid in NAME (PREFIX + hex pid + "-..."), or 0. */
static pid_t temp_pid(const char *name, const char *prefix)
{
	size_t pl = strlen(prefix);
	if (strncmp(name, prefix, pl) != 0)
		return 0;
	char *end;
	unsigned long v = strtoul(name + pl, &end, 16);
	return end != name + pl && *end == '-' && v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

/* Removes `fd`'s entries named PREFIX<pid>-... whose pid no longer runs (a killed unpack's). */
static void remove_dead(int fd, const char *path, const char *prefix)
{
	int dfd = openat(fd, ".", DIR_FLAGS);
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	if (!d) {
		close_fd(&dfd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		pid_t pid = temp_pid(de->d_name, prefix);
		if (!pid || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		size_t n = strlen(path) + strlen(de->d_name) + 2;
		char *full = malloc(n);
		if (full) {
			snprintf(full, n, "%s/%s", path, de->d_name);
			local_remove_tree(full, NULL, 0);
			free(full);
		}
	}
	closedir(d);
}

/* Makes PREFIX<pid>-<n> in `fd`: its name (malloc'd), *out its fd; NULL with errno. */
static char *make_temp(int fd, const char *prefix, int *out)
{
	static _Atomic unsigned seq;
	for (int tries = 0; tries < 100; tries++) {
		char name[320];
		snprintf(name, sizeof name, "%s%x-%x", prefix, (unsigned)getpid(),
		         (unsigned)(seq++ ^ (unsigned)(local_now_ns() >> 10)));
		if (mkdirat(fd, name, 0700) < 0) {
			if (errno == EEXIST)
				continue;
			return NULL;
		}
		*out = openat(fd, name, DIR_FLAGS);
		if (*out < 0) {
			int e = errno;
			unlinkat(fd, name, AT_REMOVEDIR);
			errno = e;
			return NULL;
		}
		char *d = strdup(name);
		if (!d) {
			close_fd(out);
			unlinkat(fd, name, AT_REMOVEDIR);
			errno = ENOMEM;
		}
		return d;
	}
	errno = EEXIST;
	return NULL;
}

/* The temporary's path, for removing it. */
static char *temp_path(const asp_tree_unpack *u)
{
	const char *parent = u->exists ? u->dir : NULL;
	char *owned = NULL;
	if (!u->exists) {
		owned = asp_path_parent(u->dir);
		parent = owned ? owned : strchr(u->dir, '/') ? "/" : ".";
	}
	size_t n = strlen(parent) + strlen(u->tmp) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", parent, u->tmp);
	free(owned);
	return p;
}

/* A directory renamed onto a name that must not exist: 0, or -1 with errno (EEXIST). */
static int rename_dir_noreplace(int fd, const char *from, const char *to)
{
#ifdef SYS_renameat2
	if (syscall(SYS_renameat2, fd, from, fd, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL)
		return -1;
#endif
	struct stat sb; /* a check then a rename, which a concurrent creator could race */
	if (fstatat(fd, to, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		errno = EEXIST;
		return -1;
	}
	return renameat(fd, from, fd, to);
}

/* ---- opening ---------------------------------------------------------------------- */

static bool dot_base(const char *base)
{
	return !base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0;
}

asp_status asp_tree_unpack_open(const char *dir, const char *op, asp_tree_unpack **out,
                                asp_error *err)
{
	*out = NULL;
	asp_tree_unpack *u = calloc(1, sizeof *u);
	if (!u)
		return asp_error_oom(err, op, "unpacking a tree");
	snprintf(u->op, sizeof u->op, "%s", op ? op : "tree");
	u->place_fd = u->tmp_fd = u->cache_fd = u->file_fd = -1;
	u->dir = strdup(dir && dir[0] ? dir : ".");
	asp_status st = ASP_OK;
	if (!u->dir) {
		st = asp_error_oom(err, op, "unpacking a tree");
		goto fail;
	}
	for (size_t n = strlen(u->dir); n > 1 && u->dir[n - 1] == '/'; n--)
		u->dir[n - 1] = '\0';
	struct stat sb;
	if (stat(u->dir, &sb) == 0) {
		if (!S_ISDIR(sb.st_mode)) {
			st = asp_error_set(err, ASP_E_NOT_A_DIRECTORY, u->dir,
			                   "%s: %s exists and is not a directory", u->op, u->dir);
			goto fail;
		}
		u->exists = true;
		u->place_fd = open(u->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (u->place_fd < 0) {
			st = asp_error_errno(err, errno, u->dir, "%s: cannot open %s", u->op,
			                     u->dir);
			goto fail;
		}
		remove_dead(u->place_fd, u->dir, "." TEMP_PREFIX);
		u->tmp = make_temp(u->place_fd, "." TEMP_PREFIX, &u->tmp_fd);
	} else if (errno == ENOENT) {
		char *parent = asp_path_parent(u->dir);
		const char *slash = strrchr(u->dir, '/');
		u->base = strdup(slash ? slash + 1 : u->dir);
		if (!u->base || (slash && !parent)) {
			free(parent);
			st = asp_error_oom(err, op, "unpacking a tree");
			goto fail;
		}
		if (dot_base(u->base)) {
			free(parent);
			st = asp_error_set(err, ASP_E_NOT_FOUND, u->dir, "%s: %s does not exist",
			                   u->op, u->dir);
			goto fail;
		}
		const char *pdir = parent ? parent : slash ? "/" : ".";
		int e = parent ? local_mkdir_parents(parent, 0755, 0755) : 0;
		if (e) {
			st = asp_error_errno(err, e, parent, "%s: cannot make the directory %s",
			                     u->op, parent);
			free(parent);
			goto fail;
		}
		u->place_fd = open(pdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (u->place_fd < 0) {
			st = asp_error_errno(err, errno, pdir, "%s: cannot open %s", u->op, pdir);
			free(parent);
			goto fail;
		}
		char prefix[300];
		snprintf(prefix, sizeof prefix, ".%.200s." TEMP_PREFIX, u->base);
		remove_dead(u->place_fd, pdir, prefix);
		free(parent);
		u->tmp = make_temp(u->place_fd, prefix, &u->tmp_fd);
	} else {
		st = asp_error_errno(err, errno, u->dir, "%s: cannot look at %s", u->op, u->dir);
		goto fail;
	}
	if (!u->tmp) {
		st = asp_error_errno(err, errno, u->dir,
		                     "%s: cannot make a temporary directory for %s", u->op, u->dir);
		goto fail;
	}
	*out = u;
	return ASP_OK;
fail:
	asp_tree_unpack_free(u);
	return st;
}

/* ---- members ---------------------------------------------------------------------- */

/*
 * An fd of the directory `rel` below the temporary (made when missing, 0755), each
 * component opened without following a symlink. -1 with the error in err.
 */
static int open_dir(asp_tree_unpack *u, const char *rel, const char *member, asp_error *err)
{
	if (u->cache_rel && strcmp(u->cache_rel, rel) == 0)
		return u->cache_fd;
	int fd = openat(u->tmp_fd, ".", DIR_FLAGS);
	char comp[NAME_MAX + 1];
	for (const char *p = rel; fd >= 0 && *p;) {
		const char *s = strchr(p, '/');
		size_t n = s ? (size_t)(s - p) : strlen(p);
		memcpy(comp, p, n);
		comp[n] = '\0';
		int c = openat(fd, comp, DIR_FLAGS);
		if (c < 0 && errno == ENOENT && mkdirat(fd, comp, 0755) == 0)
			c = openat(fd, comp, DIR_FLAGS);
		if (c < 0) {
			int e = errno;
			close(fd);
			char what[400];
			snprintf(what, sizeof what,
			         "'%.*s' is not a directory: cannot write below it",
			         (int)(p + n - rel), rel);
			if (e == ENOTDIR || e == ELOOP)
				member_refused(u, member, what, err);
			else
				member_errno(u, e, member, "cannot make its directory", err);
			return -1;
		}
		close(fd);
		fd = c;
		p += n;
		if (*p == '/')
			p++;
	}
	if (fd < 0) {
		member_errno(u, errno, member, "cannot open the temporary directory", err);
		return -1;
	}
	char *d = strdup(rel);
	if (!d) {
		close(fd);
		asp_error_oom(err, u->op, "unpacking a tree");
		return -1;
	}
	close_fd(&u->cache_fd);
	free(u->cache_rel);
	u->cache_rel = d;
	u->cache_fd = fd;
	return fd;
}

/* Splits `path` into its directory (copied into `dir`) and its last name. */
static const char *split(const char *path, char *dir)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		dir[0] = '\0';
		return path;
	}
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return slash + 1;
}

/*
 * Makes room for a non-directory named `name` in `fd`: an earlier member of the same name
 * is replaced (unlinked), a directory there is refused. ASP_OK or the error.
 */
static asp_status clear_name(asp_tree_unpack *u, int fd, const char *name, const char *rel,
                             const char *kind, asp_error *err)
{
	struct stat sb;
	if (fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? ASP_OK
		                       : member_errno(u, errno, rel, "cannot look at it", err);
	if (S_ISDIR(sb.st_mode)) {
		char what[96];
		snprintf(what, sizeof what, "a %s where an earlier member made a directory", kind);
		return member_refused(u, rel, what, err);
	}
	if (unlinkat(fd, name, 0) < 0)
		return member_errno(u, errno, rel, "cannot replace an earlier member", err);
	return ASP_OK;
}

static asp_status add_dir_meta(asp_tree_unpack *u, const asp_tar_member *m, asp_error *err)
{
	/* A directory listed twice (the root often is): the later wins. Only recent entries
	 * are looked at, so a long stream costs no quadratic search. */
	for (size_t i = u->ndirs > 64 ? u->ndirs - 64 : 0; i < u->ndirs; i++) {
		if (strcmp(u->dirs[i].rel, m->path) == 0) {
			u->dirs[i].mode = m->mode;
			u->dirs[i].mtime = m->mtime;
			return ASP_OK;
		}
	}
	if (u->ndirs == DIRS_MAX)
		return asp_error_set(err, ASP_E_TOO_LARGE, m->path,
		                     "%s: the stream holds more than %u directories", u->op,
		                     DIRS_MAX);
	if (u->ndirs == u->dirs_cap) {
		size_t cap = u->dirs_cap ? u->dirs_cap * 2 : 64;
		dir_meta *v = realloc(u->dirs, cap * sizeof *v);
		if (!v)
			return asp_error_oom(err, u->op, "unpacking a tree");
		u->dirs = v;
		u->dirs_cap = cap;
	}
	char *rel = strdup(m->path);
	if (!rel)
		return asp_error_oom(err, u->op, "unpacking a tree");
	u->dirs[u->ndirs++] = (dir_meta){rel, m->mode, m->mtime};
	return ASP_OK;
}

static asp_status on_member(void *user, const asp_tar_member *m, asp_error *err)
{
	asp_tree_unpack *u = user;
	if (!m->path[0]) /* the root: its mode and mtime go to the target at the end */
		return add_dir_meta(u, m, err);
	char parent[ASP_TAR_PATH_MAX + 1];
	const char *name = split(m->path, parent);
	int fd = open_dir(u, parent, m->path, err);
	if (fd < 0)
		return err->code;
	if (m->type == ASP_TAR_DIR) {
		if (mkdirat(fd, name, 0700) < 0) {
			struct stat sb;
			if (errno != EEXIST)
				return member_errno(u, errno, m->path, "cannot make the directory",
				                    err);
			if (fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(sb.st_mode))
				return member_refused(
				    u, m->path,
				    "a directory where an earlier member made a file or symlink",
				    err);
		}
		return add_dir_meta(u, m, err);
	}
	asp_status st =
	    clear_name(u, fd, name, m->path, m->type == ASP_TAR_FILE ? "file" : "symlink", err);
	if (st != ASP_OK)
		return st;
	if (m->type == ASP_TAR_SYMLINK) {
		if (symlinkat(m->link, fd, name) < 0)
			return member_errno(u, errno, m->path, "cannot make the symlink", err);
		struct timespec ts[2] = {{m->mtime, 0}, {m->mtime, 0}};
		utimensat(fd, name, ts, AT_SYMLINK_NOFOLLOW); /* where links have times */
		return ASP_OK;
	}
	u->file_fd = openat(fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (u->file_fd < 0)
		return member_errno(u, errno, m->path, "cannot create the file", err);
	free(u->file_rel);
	u->file_rel = strdup(m->path);
	if (!u->file_rel)
		return asp_error_oom(err, u->op, "unpacking a tree");
	u->file_mode = m->mode;
	u->file_mtime = m->mtime;
	return ASP_OK;
}

static asp_status on_data(void *user, const uint8_t *p, size_t n, asp_error *err)
{
	asp_tree_unpack *u = user;
	while (n > 0) {
		ssize_t w = write(u->file_fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return member_errno(u, w < 0 ? errno : EIO, u->file_rel, "cannot write",
			                    err);
		p += w;
		n -= (size_t)w;
	}
	return ASP_OK;
}

/* setuid and setgid are not kept: a stream must not plant a privileged program. */
static mode_t kept_mode(uint32_t mode)
{
	return (mode_t)(mode & 01777);
}

static asp_status on_file_end(void *user, asp_error *err)
{
	asp_tree_unpack *u = user;
	struct timespec ts[2] = {{u->file_mtime, 0}, {u->file_mtime, 0}};
	int e = 0;
	if (fchmod(u->file_fd, kept_mode(u->file_mode)) < 0 || futimens(u->file_fd, ts) < 0)
		e = errno;
	if (close(u->file_fd) < 0 && !e)
		e = errno;
	u->file_fd = -1;
	if (e)
		return member_errno(u, e, u->file_rel, "cannot finish the file", err);
	return ASP_OK;
}

asp_status asp_tree_unpack_feed(asp_tree_unpack *u, const uint8_t *p, size_t n, asp_error *err)
{
	if (u->failed) {
		*err = u->err;
		return u->status;
	}
	if (!u->rd) {
		asp_tar_reader_cb cb = {on_member, on_data, on_file_end};
		if (!(u->rd = asp_tar_reader_new(&cb, u)))
			return asp_error_oom(err, u->op, "unpacking a tree");
	}
	asp_status st = asp_tar_reader_feed(u->rd, p, n, err);
	if (st != ASP_OK) {
		if (strncmp(err->message, "tar stream:", 11) == 0)
			asp_error_prefix(err, st, "%s", u->op);
		u->failed = true;
		u->status = st;
		u->err = *err;
	}
	return st;
}

/* ---- putting it in place ---------------------------------------------------------- */

typedef enum { NODE_NONE, NODE_DIR, NODE_OTHER, NODE_ERR } node;

static node node_at(int fd, const char *name)
{
	struct stat sb;
	if (fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? NODE_NONE : NODE_ERR;
	return S_ISDIR(sb.st_mode) ? NODE_DIR : NODE_OTHER;
}

static void join_rel(char *out, size_t cap, const char *rel, const char *name)
{
	snprintf(out, cap, "%s%s%s", rel, rel[0] ? "/" : "", name);
}

/*
 * Moves (or with `check` only looks for conflicts) every entry of `src` into `dst`:
 * absent there, renamed whole; a directory in both, merged; a non-directory replacing
 * a non-directory. `skip` is a name of `dst` never touched (the temporary itself).
 */
static asp_status merge(asp_tree_unpack *u, int src, int dst, const char *rel, const char *skip,
                        bool check, asp_error *err)
{
	int sfd = openat(src, ".", DIR_FLAGS);
	DIR *d = sfd < 0 ? NULL : fdopendir(sfd);
	if (!d) {
		close_fd(&sfd);
		return asp_error_errno(err, errno, u->dir,
		                       "%s: cannot read the temporary directory", u->op);
	}
	asp_status st = ASP_OK;
	struct dirent *de;
	char sub[ASP_TAR_PATH_MAX + NAME_MAX + 2];
	while (st == ASP_OK && (errno = 0, de = readdir(d))) {
		const char *nm = de->d_name;
		if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 || (skip && !strcmp(nm, skip)))
			continue;
		join_rel(sub, sizeof sub, rel, nm);
		node s = node_at(src, nm), t = node_at(dst, nm);
		if (s == NODE_ERR || t == NODE_ERR) {
			st = asp_error_errno(err, errno, sub, "%s: cannot look at %s in %s", u->op,
			                     sub, u->dir);
		} else if (s == NODE_DIR && t == NODE_DIR) {
			int a = openat(src, nm, DIR_FLAGS), b = openat(dst, nm, DIR_FLAGS);
			if (a < 0 || b < 0)
				st = asp_error_errno(err, errno, sub, "%s: cannot open %s in %s",
				                     u->op, sub, u->dir);
			else
				st = merge(u, a, b, sub, NULL, check, err);
			if (st == ASP_OK && !check && unlinkat(src, nm, AT_REMOVEDIR) < 0)
				st = asp_error_errno(err, errno, sub, "%s: cannot tidy %s", u->op,
				                     sub);
			close_fd(&a);
			close_fd(&b);
		} else if (s == NODE_DIR && t == NODE_OTHER) {
			st = asp_error_set(err, ASP_E_NOT_A_DIRECTORY, sub,
			                   "%s: member '%.300s' is a directory but %s/%s is a file "
			                   "or symlink; remove it first",
			                   u->op, sub, u->dir, sub);
		} else if (s != NODE_DIR && t == NODE_DIR) {
			st =
			    asp_error_set(err, ASP_E_IS_A_DIRECTORY, sub,
			                  "%s: member '%.300s' is a file or symlink but %s/%s is a "
			                  "directory; remove it first",
			                  u->op, sub, u->dir, sub);
		} else if (!check && renameat(src, nm, dst, nm) < 0) {
			st = asp_error_errno(err, errno, sub, "%s: cannot move %s into %s", u->op,
			                     sub, u->dir);
		}
	}
	if (st == ASP_OK && errno)
		st = asp_error_errno(err, errno, u->dir, "%s: cannot read the temporary directory",
		                     u->op);
	closedir(d);
	return st;
}

/* An fd of `rel` below the placed tree, never through a symlink; -1 with errno. */
static int open_placed(int root, const char *rel)
{
	int fd = openat(root, ".", DIR_FLAGS);
	char comp[NAME_MAX + 1];
	for (const char *p = rel; fd >= 0 && *p;) {
		const char *s = strchr(p, '/');
		size_t n = s ? (size_t)(s - p) : strlen(p);
		memcpy(comp, p, n);
		comp[n] = '\0';
		int c = openat(fd, comp, DIR_FLAGS);
		int e = errno;
		close(fd);
		errno = e;
		fd = c;
		p += n;
		if (*p == '/')
			p++;
	}
	return fd;
}

/* Directories' modes and mtimes, deepest first, once nothing moves into them any more. */
static asp_status dir_metadata(asp_tree_unpack *u, int root, bool fresh_root, asp_error *err)
{
	bool root_seen = false;
	for (size_t i = u->ndirs; i-- > 0;) {
		const dir_meta *dm = &u->dirs[i];
		int fd = open_placed(root, dm->rel);
		if (fd < 0)
			return asp_error_errno(err, errno, dm->rel, "%s: cannot open %s/%s", u->op,
			                       u->dir, dm->rel);
		struct timespec ts[2] = {{dm->mtime, 0}, {dm->mtime, 0}};
		int e = fchmod(fd, kept_mode(dm->mode)) < 0 || futimens(fd, ts) < 0 ? errno : 0;
		close(fd);
		if (e)
			return asp_error_errno(err, e, dm->rel, "%s: cannot set the mode of %s/%s",
			                       u->op, u->dir, dm->rel);
		root_seen |= !dm->rel[0];
	}
	if (fresh_root && !root_seen) { /* made 0700 as a temporary: as mkdir would have */
		mode_t um = umask(0);
		umask(um);
		if (fchmod(root, 0777 & ~um) < 0)
			return asp_error_errno(err, errno, u->dir, "%s: cannot set the mode of %s",
			                       u->op, u->dir);
	}
	return ASP_OK;
}

asp_status asp_tree_unpack_finish(asp_tree_unpack *u, asp_tree_counts *counts, asp_error *err)
{
	if (u->failed) {
		*err = u->err;
		return u->status;
	}
	if (u->finished)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "%s: already finished",
		                     u->op);
	asp_status st = ASP_OK;
	if (!u->rd)
		st = asp_tree_unpack_feed(u, NULL, 0, err);
	if (st == ASP_OK && (st = asp_tar_reader_end(u->rd, err)) != ASP_OK)
		asp_error_prefix(err, st, "%s", u->op);
	if (st != ASP_OK) {
		u->failed = true;
		u->status = st;
		u->err = *err;
		return st;
	}
	close_fd(&u->cache_fd);
	int root = -1;
	bool fresh = false;
	if (!u->exists) {
		if (rename_dir_noreplace(u->place_fd, u->tmp, u->base) == 0) {
			fresh = true;
			root = u->tmp_fd;
			u->tmp_fd = -1;
			free(u->tmp);
			u->tmp = NULL; /* it is the target now */
		} else if (errno == EEXIST || errno == ENOTEMPTY) {
			/* made meanwhile by someone else: merged into, as an existing one is */
			root = openat(u->place_fd, u->base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (root < 0)
				st = asp_error_errno(err, errno, u->dir, "%s: cannot open %s",
				                     u->op, u->dir);
		} else {
			st = asp_error_errno(err, errno, u->dir, "%s: cannot rename the tree to %s",
			                     u->op, u->dir);
		}
	} else {
		root = openat(u->place_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (root < 0)
			st = asp_error_errno(err, errno, u->dir, "%s: cannot open %s", u->op,
			                     u->dir);
	}
	if (st == ASP_OK && !fresh) {
		const char *skip = u->exists ? u->tmp : NULL;
		st = merge(u, u->tmp_fd, root, "", skip, true, err);
		if (st == ASP_OK)
			st = merge(u, u->tmp_fd, root, "", skip, false, err);
		if (st == ASP_OK) { /* empty now; gone before the root's mtime is set */
			close_fd(&u->tmp_fd);
			char *path = temp_path(u);
			if (path && local_remove_tree(path, NULL, 0) == 0) {
				free(u->tmp);
				u->tmp = NULL;
			}
			free(path);
		}
	}
	if (st == ASP_OK)
		st = dir_metadata(u, root, fresh, err);
	close_fd(&root);
	if (st != ASP_OK) {
		u->failed = true;
		u->status = st;
		u->err = *err;
		return st;
	}
	u->finished = true;
	if (counts) {
		asp_tar_reader_counts(u->rd, &counts->entries, &counts->bytes);
	}
	return ASP_OK;
}

void asp_tree_unpack_free(asp_tree_unpack *u)
{
	if (!u)
		return;
	close_fd(&u->file_fd);
	close_fd(&u->cache_fd);
	close_fd(&u->tmp_fd);
	if (u->tmp) { /* not finished, or merged: what is left of the temporary goes */
		char *path = temp_path(u);
		if (path)
			local_remove_tree(path, NULL, 0);
		free(path);
	}
	close_fd(&u->place_fd);
	asp_tar_reader_free(u->rd);
	for (size_t i = 0; i < u->ndirs; i++)
		free(u->dirs[i].rel);
	free(u->dirs);
	free(u->cache_rel);
	free(u->file_rel);
	free(u->tmp);
	free(u->base);
	free(u->dir);
	free(u);
}
