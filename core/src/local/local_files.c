/* read and write: file contents, including the atomic replace. */
#include "op_check.h"
#include "local_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FIRST_READ   (64u * 1024)
#define NEW_DIR_MODE 0755

static void close_keep_errno(int fd)
{
	int e = errno;
	close(fd);
	errno = e;
}

/* Reads until `want` bytes, EOF, or (for non-blocking fifos and ttys) nothing more now. */
static ssize_t read_stream(int fd, uint8_t **bufp, size_t *capp, size_t want, bool *eof)
{
	size_t got = 0;
	*eof = false;
	while (got < want) {
		if (got == *capp) {
			size_t ncap = *capp ? *capp * 2 : FIRST_READ;
			if (ncap > want)
				ncap = want;
			uint8_t *nb = realloc(*bufp, ncap);
			if (!nb) {
				errno = ENOMEM;
				return -1;
			}
			*bufp = nb;
			*capp = ncap;
		}
		ssize_t n = read(fd, *bufp + got, *capp - got);
		if (n > 0) {
			got += (size_t)n;
		} else if (n == 0) {
			*eof = true;
			break;
		} else if (errno == EAGAIN) {
			break; /* a fifo or device with nothing more now: never wait for it */
		} else if (errno != EINTR) {
			return -1;
		}
	}
	return (ssize_t)got;
}

static ssize_t pread_all(int fd, uint8_t *buf, size_t want, uint64_t off)
{
	size_t got = 0;
	while (got < want) {
		ssize_t n = pread(fd, buf + got, want - got, (off_t)(off + got));
		if (n > 0)
			got += (size_t)n;
		else if (n == 0)
			break; /* the file shrank since fstat */
		else if (errno != EINTR)
			return -1;
	}
	return (ssize_t)got;
}

asp_status asp_local_read(void *self, const asp_read_params *p, asp_read_result *r, asp_arena *a,
                          asp_error *err)
{
	asp_local *l = self;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("read", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->offset > (uint64_t)INT64_MAX)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "read %s: offset %llu is out of range", p->path,
		                     (unsigned long long)p->offset);
	/* O_NONBLOCK: opening or reading a fifo must never wait for a writer. */
	int fd = open(p->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return asp_error_errno(err, errno, p->path, "read %s", p->path);
	struct stat sb;
	if (fstat(fd, &sb) < 0) {
		close_keep_errno(fd);
		return asp_error_errno(err, errno, p->path, "read %s", p->path);
	}
	if (S_ISDIR(sb.st_mode)) {
		close(fd);
		return asp_error_errno(err, EISDIR, p->path, "read %s", p->path);
	}
	size_t want = l->payload_budget;
	if (p->has_length && p->length < want)
		want = (size_t)p->length;
	uint64_t size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
	uint8_t *buf = NULL;
	size_t cap = 0;
	ssize_t got;
	bool eof;
	if (S_ISREG(sb.st_mode) && size > 0) {
		uint64_t avail = p->offset < size ? size - p->offset : 0;
		if (avail < want)
			want = (size_t)avail;
		if (want) {
			buf = malloc(want);
			cap = want;
		}
		got = want && !buf ? (errno = ENOMEM, -1) : pread_all(fd, buf, want, p->offset);
		eof = got >= 0 && p->offset + (uint64_t)got >= size;
	} else {
		/* Size unknown (procfs reports 0, devices, fifos): read until EOF or `want`. */
		got = 0;
		if (p->offset && lseek(fd, (off_t)p->offset, SEEK_SET) < 0)
			got = -1;
		if (got == 0)
			got = read_stream(fd, &buf, &cap, want, &eof);
		if (got > 0 && S_ISREG(sb.st_mode) && eof)
			size = p->offset + (uint64_t)got;
		if (want == 0 && S_ISREG(sb.st_mode))
			eof = p->offset >= size;
	}
	if (got < 0) {
		free(buf);
		close_keep_errno(fd);
		if (errno == ENOMEM)
			return local_oom("read", err);
		return asp_error_errno(err, errno, p->path, "read %s", p->path);
	}
	close(fd);
	r->size = size;
	r->eof = eof;
	if (local_bytes_give(a, buf, (size_t)got, cap, &r->data) < 0)
		return local_oom("read", err);
	return ASP_OK;
}

static int write_all(int fd, const uint8_t *data, size_t len, bool at, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = at ? pwrite(fd, data + done, len - done, (off_t)(off + done))
		               : write(fd, data + done, len - done);
		if (n > 0)
			done += (size_t)n;
		else if (n < 0 && errno != EINTR)
			return -1;
	}
	return 0;
}

/*
 * Replaces the contents of `fd` (opened without O_TRUNC) by `data`: written over the old
 * bytes from offset 0, then cut to the new length. Not O_TRUNC, because ext4 (its
 * auto_da_alloc) starts writing back a file truncated to zero when it is closed, which
 * was most of a small replacing write's time; cutting to a non-zero length does not arm
 * that, and rewriting pages in place spares freeing and reallocating the file's blocks
 * and page cache. Afterwards the file holds exactly `data`, as with O_TRUNC. A failure
 * part way leaves a prefix of `data` only, as with O_TRUNC: what was written is all the
 * file holds. Out of space part way (a copy-on-write filesystem needs room for the new
 * blocks while the old ones are held), it truncates first and writes again, as O_TRUNC
 * would have. Devices and fifos, which O_TRUNC leaves alone, are only written.
 */
static int replace_all(int fd, const uint8_t *data, size_t len)
{
	size_t done = 0;
	bool retried = false;
	while (done < len) {
		ssize_t n = pwrite(fd, data + done, len - done, (off_t)done);
		if (n > 0) {
			done += (size_t)n;
		} else if (n < 0 && errno == ESPIPE) {
			return write_all(fd, data + done, len - done, false, 0); /* a fifo, a tty */
		} else if (n == 0 || errno != EINTR) {
			int e =
			    n == 0 ? EIO : errno; /* 0 for a non-empty write: it would never end */
			if ((e == ENOSPC || e == EDQUOT) && !retried && ftruncate(fd, 0) == 0) {
				retried = true;
				done = 0;
				continue;
			}
			int cut = ftruncate(fd, (off_t)done); /* best effort: e is the error */
			(void)cut;
			errno = e;
			return -1;
		}
	}
	if (ftruncate(fd, (off_t)len) == 0)
		return 0;
	/* EINVAL: not a regular file (a device), whose length O_TRUNC would not touch either. */
	struct stat sb;
	int e = errno;
	if (e == EINVAL && fstat(fd, &sb) == 0 && !S_ISREG(sb.st_mode))
		return 0;
	errno = e;
	return -1;
}

/* Creates the missing parents of `path`; 0 or an errno. */
static int make_parents(const char *path)
{
	char *dir = asp_path_parent(path);
	if (!dir)
		return strchr(path, '/') ? ENOMEM : ENOENT;
	int e = local_mkdir_parents(dir, NEW_DIR_MODE, NEW_DIR_MODE);
	free(dir);
	return e;
}

static asp_status write_error(const asp_write_params *p, int e, asp_error *err)
{
	if (e == ENOMEM)
		return local_oom("write", err);
	asp_status st = asp_error_errno(err, e, p->path, "write %s", p->path);
	if (e == ENOENT && !p->mkdirs)
		asp_error_hint(err, "its directory is missing; 'mkdirs' creates it");
	return st;
}

/* "DIR/.NAME.asp-UNIQUE": hidden, beside the target, unique across processes and threads. */
static char *temp_name(const char *target)
{
	static atomic_uint counter;
	const char *slash = strrchr(target, '/');
	size_t dlen = slash ? (size_t)(slash - target) + 1 : 0;
	const char *base = target + dlen;
	size_t blen = strlen(base);
	if (blen > 200)
		blen = 200; /* stay under NAME_MAX with the suffix */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	size_t cap = dlen + blen + 64;
	char *t = malloc(cap);
	if (!t)
		return NULL;
	snprintf(t, cap, "%.*s.%.*s.asp-%x-%x-%lx", (int)dlen, target, (int)blen, base,
	         (unsigned)getpid(), atomic_fetch_add(&counter, 1), (unsigned long)ts.tv_nsec);
	return t;
}

static void fsync_dir_of(const char *path)
{
	char *dir = asp_path_parent(path);
	int fd = open(dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (fd >= 0) {
		fsync(fd); /* some filesystems refuse a directory fsync; the rename still stands */
		close(fd);
	}
}

/* The name's hex pid (".NAME.asp-PID-..."), or 0 when `name` is not such a temporary. */
static pid_t temp_pid(const char *name, const char *prefix, size_t plen)
{
	if (strncmp(name, prefix, plen) != 0)
		return 0;
	char *end;
	unsigned long v = strtoul(name + plen, &end, 16);
	return end != name + plen && *end == '-' && v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

/*
 * Before a named temporary: removes the ones beside `target` left by writers that died
 * (their pid is gone), so crashes on a filesystem without O_TMPFILE do not pile up.
 */
static void remove_dead_temps(const char *target)
{
	const char *slash = strrchr(target, '/');
	size_t dlen = slash ? (size_t)(slash - target) + 1 : 0;
	const char *base = target + dlen;
	size_t blen = strlen(base);
	if (blen > 200)
		blen = 200;
	char prefix[256];
	int plen = snprintf(prefix, sizeof prefix, ".%.*s.asp-", (int)blen, base);
	char *dir = asp_path_parent(target);
	DIR *d = opendir(dir ? dir : ".");
	free(dir);
	if (!d || plen < 0)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		pid_t pid = temp_pid(de->d_name, prefix, (size_t)plen);
		if (pid && pid != getpid() && kill(pid, 0) < 0 && errno == ESRCH)
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

/* ".NAME.asp-tmp" beside the target: see write_unnamed. */
static char *link_name(const char *target)
{
	const char *slash = strrchr(target, '/');
	size_t dlen = slash ? (size_t)(slash - target) + 1 : 0;
	size_t blen = strlen(target + dlen);
	if (blen > 200)
		blen = 200;
	size_t cap = dlen + blen + 16;
	char *t = malloc(cap);
	if (t)
		snprintf(t, cap, "%.*s.%.*s.asp-tmp", (int)dlen, target, (int)blen, target + dlen);
	return t;
}

/* Gives the unnamed file `fd` the name `name`. 0 or an errno. */
static int link_fd(int fd, const char *name)
{
	if (linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno == EEXIST)
		return EEXIST;
	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc's link to the fd does not. */
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
}

/* The old file's mode and owner for the new one (chown works as root only). */
static void copy_owner(int fd, bool exists, const struct stat *old, mode_t mode)
{
	if (!exists)
		return;
	fchmod(fd, mode); /* the old file's mode, not the umask's */
	if (old->st_uid != geteuid() || old->st_gid != getegid())
		(void)!fchown(fd, old->st_uid, old->st_gid); /* best effort */
}

/*
 * The data goes into an unnamed file (O_TMPFILE) in the target's directory: a crash
 * while writing leaves nothing. Finished and fsynced, it is linked as ".NAME.asp-tmp"
 * and renamed over the target (link cannot replace a file). A crash between the two
 * leaves that one name, which the next atomic write to the target removes and reuses;
 * a concurrent writer whose link was removed so links again. Returns 0, an errno, or
 * -1 when the filesystem offers no unnamed file (then the caller uses a named one).
 */
static int write_unnamed(const asp_write_params *p, const char *target, bool exists,
                         const struct stat *old, mode_t mode)
{
#ifdef O_TMPFILE
	char *dir = asp_path_parent(target);
	const char *d = dir ? dir : strchr(target, '/') ? NULL : ".";
	if (!d)
		return ENOMEM;
	int fd = open(d, O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	if (fd < 0 && errno == ENOENT && p->mkdirs) {
		int e = make_parents(target);
		if (e) {
			free(dir);
			return e;
		}
		fd = open(d, O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	}
	int e = fd < 0 ? errno : 0;
	free(dir);
	if (fd < 0)
		return e == EOPNOTSUPP || e == EISDIR || e == EINVAL || e == ENOSYS ? -1 : e;
	copy_owner(fd, exists, old, mode);
	if (write_all(fd, p->data.data, p->data.len, false, 0) < 0 || fsync(fd) < 0)
		e = errno;
	char *name = e ? NULL : link_name(target);
	if (!e && !name)
		e = ENOMEM;
	for (int tries = 0; !e; tries++) {
		int le = link_fd(fd, name);
		if (le == EEXIST && tries < 100) {
			unlink(name); /* a crash's leftover, or a racer's (it links again) */
			continue;
		}
		if (le) {
			e = le == EEXIST ? EEXIST : -1; /* no link for unnamed files here */
			break;
		}
		if (rename(name, target) == 0)
			break;
		e = errno;
		if (e == ENOENT && tries < 100) {
			e = 0; /* a racer removed our link: link again */
			continue;
		}
		unlink(name);
	}
	free(name);
	if (close(fd) < 0 && !e)
		e = errno;
	return e;
#else
	(void)p, (void)target, (void)exists, (void)old, (void)mode;
	return -1;
#endif
}

/* Without O_TMPFILE: a uniquely named temporary, written, fsynced, renamed. */
static int write_named(const asp_write_params *p, const char *target, bool exists,
                       const struct stat *old, mode_t mode)
{
	remove_dead_temps(target);
	char *tmp = NULL;
	int fd = -1, e = 0;
	bool made_parents = false;
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		free(tmp);
		tmp = temp_name(target);
		if (!tmp) {
			e = ENOMEM;
			break;
		}
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, mode);
		e = fd < 0 ? errno : 0;
		if (fd < 0 && e == ENOENT && p->mkdirs && !made_parents) {
			made_parents = true;
			e = make_parents(target);
			if (e)
				break;
		} else if (fd < 0 && e != EEXIST) {
			break; /* EEXIST: another writer's temp name; draw again */
		}
	}
	if (fd >= 0) {
		copy_owner(fd, exists, old, mode);
		if (write_all(fd, p->data.data, p->data.len, false, 0) < 0 || fsync(fd) < 0)
			e = errno;
		if (close(fd) < 0 && !e)
			e = errno;
		if (!e && rename(tmp, target) < 0)
			e = errno;
		if (e)
			unlink(tmp);
	}
	free(tmp);
	return e;
}

/*
 * open with O_CREAT (in `flags`) that tells whether it made the file: the file opened
 * without O_CREAT first, and made with O_EXCL only when missing, so write's `created` is
 * exact even with another writer racing.
 */
static int open_or_create(const char *path, int flags, mode_t mode, bool *created)
{
	*created = false;
	for (int tries = 0; tries < 2; tries++) {
		int fd = open(path, flags & ~O_CREAT, mode);
		if (fd >= 0 || errno != ENOENT)
			return fd;
		fd = open(path, flags | O_EXCL, mode);
		if (fd >= 0) {
			*created = true;
			return fd;
		}
		if (errno != EEXIST)
			return -1;
	}
	/* ENOENT, then EEXIST twice: a dangling symlink, whose target O_CREAT makes */
	int fd = open(path, flags, mode);
	*created = fd >= 0;
	return fd;
}

/*
 * Written in full and fsynced beside the target, then renamed over it: a crash leaves
 * the old or the new file (docs/decisions.md says what else at each point). A symlink is
 * resolved first so the link keeps pointing at the file.
 */
static asp_status write_atomic(const asp_write_params *p, asp_write_result *r, asp_error *err)
{
	char *real = NULL;
	const char *target = p->path;
	struct stat old;
	bool exists = lstat(target, &old) == 0;
	if (exists && S_ISLNK(old.st_mode)) {
		real = realpath(target, NULL);
		if (real)
			target = real;
		exists = stat(target, &old) == 0;
	}
	if (exists && S_ISDIR(old.st_mode)) {
		free(real);
		return write_error(p, EISDIR, err);
	}
	mode_t mode = exists ? (old.st_mode & 07777) : (mode_t)p->mode;
	int e = write_unnamed(p, target, exists, &old, mode);
	if (e < 0)
		e = write_named(p, target, exists, &old, mode);
	if (!e)
		fsync_dir_of(target);
	free(real);
	if (e)
		return write_error(p, e, err);
	r->written = p->data.len;
	r->size = p->data.len;
	r->has_created = true;
	r->created = !exists;
	return ASP_OK;
}

asp_status asp_local_write(void *self, const asp_write_params *p, asp_write_result *r, asp_arena *a,
                           asp_error *err)
{
	(void)self;
	(void)a;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("write", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->data.len && !p->data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "write %s: 'data' has no bytes", p->path);
	st = asp_check_write_params(p, err);
	if (st != ASP_OK)
		return st;
	if (p->atomic)
		return write_atomic(p, r, err);

	/* Replacing (neither append nor offset) cuts the file after writing: replace_all. */
	bool replace = !p->append && !p->has_offset;
	int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	if (p->append)
		flags |= O_APPEND;
	/* O_NONBLOCK: a fifo without a reader fails (ENXIO) rather than hanging. */
	bool created = false;
	int fd = open_or_create(p->path, flags, (mode_t)p->mode, &created);
	if (fd < 0 && errno == ENOENT && p->mkdirs) {
		int e = make_parents(p->path);
		if (e)
			return write_error(p, e, err);
		fd = open_or_create(p->path, flags, (mode_t)p->mode, &created);
	}
	if (fd < 0)
		return write_error(p, errno, err);
	struct stat sb;
	int rc = replace ? replace_all(fd, p->data.data, p->data.len)
	                 : write_all(fd, p->data.data, p->data.len, p->has_offset, p->offset);
	if (rc == 0 && (p->append || p->has_offset))
		rc = fstat(fd, &sb);
	if (rc < 0) {
		close_keep_errno(fd);
		return write_error(p, errno, err);
	}
	if (close(fd) < 0)
		return write_error(p, errno, err);
	r->written = p->data.len;
	r->size = (p->append || p->has_offset) ? (uint64_t)sb.st_size : p->data.len;
	r->has_created = true;
	r->created = created;
	return ASP_OK;
}
