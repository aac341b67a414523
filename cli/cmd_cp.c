/* asp cp: files and directory trees between here and the sandbox (a ':' marks its paths). */
#include "transfer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reports through `expr` (which returns an exit code), then yields -1 for the callers here. */
#define CP_ERR(expr) ((void)(expr), -1)

/* One side of the copy. */
typedef struct loc {
	bool remote;
	const char *path;
} loc;

/* What a path is, on either side. */
typedef enum node_type { N_NONE, N_FILE, N_DIR, N_LINK, N_OTHER } node_type;

typedef struct node {
	node_type type;
	uint64_t size, mode;
} node;

typedef struct cp {
	cli *c;
	asp_client *client;
	size_t chunk;
	bool recursive, progress;
	mode_t umask;
	uint64_t files, bytes;
} cp;

static node_type remote_type(const char *t)
{
	if (!t)
		return N_OTHER;
	if (strcmp(t, "file") == 0)
		return N_FILE;
	if (strcmp(t, "dir") == 0)
		return N_DIR;
	if (strcmp(t, "symlink") == 0)
		return N_LINK;
	return N_OTHER;
}

static node_type local_type(mode_t m)
{
	return S_ISREG(m) ? N_FILE : S_ISDIR(m) ? N_DIR : S_ISLNK(m) ? N_LINK : N_OTHER;
}

static const char *side(const loc *l)
{
	return l->remote ? ":" : "";
}

/* stat of a sandbox path into `r`, whose strings live in `a`. */
static asp_status remote_stat(cp *k, const char *path, bool follow, asp_stat_result *r,
                              asp_arena *a, asp_error *err)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	p.follow = follow;
	return asp_stat(k->client, &p, r, a, err);
}

/* Fills *n (type N_NONE when the path does not exist); -1 after reporting other failures. */
static int node_stat(cp *k, const loc *l, bool follow, node *n)
{
	memset(n, 0, sizeof *n);
	if (!l->remote) {
		struct stat st;
		if ((follow ? stat(l->path, &st) : lstat(l->path, &st)) < 0) {
			if (errno == ENOENT)
				return 0;
			cli_fail_errno(k->c, errno, "cp: stat %s", l->path);
			return -1;
		}
		n->type = local_type(st.st_mode);
		n->size = (uint64_t)st.st_size;
		n->mode = st.st_mode & 07777;
		return 0;
	}
	asp_arena *a = cli_arena(k->c);
	if (!a)
		return -1;
	asp_stat_result r;
	asp_error err;
	int rc = 0;
	if (remote_stat(k, l->path, follow, &r, a, &err) != ASP_OK) {
		if (err.code != ASP_E_NOT_FOUND) {
			cli_fail(k->c, &err, "cp: stat :%s", l->path);
			rc = -1;
		}
	} else {
		n->type = remote_type(r.type);
		n->size = r.size;
		n->mode = r.mode;
	}
	asp_arena_free(a);
	return rc;
}

static bool want_progress(cp *k, uint64_t size)
{
	/* Small files finish before a bar could tell anything; -r would scroll with them. */
	return k->progress && size >= (1u << 20);
}

/* Runs a prepared transfer with the progress bar; -1 after reporting. */
static int run_xfer(cp *k, xfer *x, const loc *src, uint64_t size)
{
	progress prog;
	char *name = path_base(src->path);
	progress_init(&prog, name ? name : src->path, size, want_progress(k, size));
	x->prog = &prog;
	int rc = xfer_run(x);
	progress_finish(&prog);
	free(name);
	if (rc < 0) {
		cli_fail(k->c, &x->err, "cp: %s", x->what);
		return -1;
	}
	k->files++;
	k->bytes += x->moved;
	return 0;
}

/* "DIR/.NAME.asp-" + suffix beside `dst`; NULL when out of memory. */
static char *beside(const char *dst, const char *suffix)
{
	char *dir = path_dir(dst), *base = path_base(dst), *out = NULL;
	if (dir && base) {
		char name[300];
		snprintf(name, sizeof name, ".%.200s.asp-%s", base, suffix);
		out = path_join(dir, name);
	}
	free(dir);
	free(base);
	return out;
}

/*
 * The file a local destination is written to: an unnamed one (O_TMPFILE) in its
 * directory, so a killed asp leaves nothing; *unnamed says so. Where the filesystem has
 * none, "DIR/.NAME.asp-part", the same name every time, which the next copy to `dst`
 * truncates and reuses. -1 with errno.
 */
static int open_temp(const char *dst, const char *part, bool *unnamed)
{
	*unnamed = false;
#ifdef O_TMPFILE
	char *dir = path_dir(dst);
	int fd = dir ? open(dir[0] ? dir : ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600) : -1;
	int e = dir ? errno : ENOMEM;
	free(dir);
	if (fd >= 0) {
		*unnamed = true;
		return fd;
	}
	if (e != EOPNOTSUPP && e != EISDIR && e != EINVAL && e != ENOSYS) {
		errno = e;
		return -1;
	}
#endif
	return open(part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/*
 * Puts the finished file in place. An unnamed one is linked as "DIR/.NAME.asp-tmp"
 * (link cannot replace a file), then renamed: a kill between the two leaves that one
 * name, which the next copy removes and reuses. 0, or -1 with errno.
 */
static int put_in_place(int fd, bool unnamed, const char *part, const char *dst)
{
	if (!unnamed)
		return rename(part, dst);
	char *lnk = beside(dst, "tmp");
	if (!lnk) {
		errno = ENOMEM;
		return -1;
	}
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	int rc = -1;
	for (int tries = 0; tries < 100; tries++) {
		if (linkat(fd, "", AT_FDCWD, lnk, AT_EMPTY_PATH) < 0 &&
		    (errno == EEXIST ||
		     linkat(AT_FDCWD, proc, AT_FDCWD, lnk, AT_SYMLINK_FOLLOW) < 0)) {
			if (errno == EEXIST) {
				/* a killed copy's leftover, or a racer's (it links again) */
				unlink(lnk);
				continue;
			}
			break;
		}
		if (rename(lnk, dst) == 0) {
			rc = 0;
			break;
		}
		if (errno != ENOENT) {
			unlink(lnk);
			break;
		}
	}
	int e = errno;
	free(lnk);
	errno = e;
	return rc;
}

/* A local destination is written to a temporary beside it and put in place at the end. */
static int copy_to_local(cp *k, const loc *src, const char *dst, uint64_t size, uint64_t mode)
{
	char *tmp = beside(dst, "part");
	if (!tmp)
		return CP_ERR(cli_fail_errno(k->c, ENOMEM, "cp"));
	bool unnamed;
	int fd = open_temp(dst, tmp, &unnamed);
	if (fd < 0) {
		cli_fail_errno(k->c, errno, "cp: create %s", dst); /* the temp name is ours */
		free(tmp);
		return -1;
	}
	xfer x;
	xfer_init(&x, k->client, k->chunk);
	x.src.kind = XF_REMOTE;
	x.src.path = src->path;
	x.dst.kind = XF_LOCAL_FILE;
	x.dst.fd = fd;
	x.dst.path = dst;
	int rc = run_xfer(k, &x, src, size);
	if (rc == 0 && fchmod(fd, (mode_t)mode & 07777 & ~k->umask) < 0) {
		cli_fail_errno(k->c, errno, "cp: chmod %s", tmp);
		rc = -1;
	}
	if (rc == 0 && put_in_place(fd, unnamed, tmp, dst) < 0) {
		cli_fail_errno(k->c, errno, "cp: rename %s to %s", tmp, dst);
		rc = -1;
	}
	if (close(fd) < 0 && rc == 0) {
		cli_fail_errno(k->c, errno, "cp: write %s", dst);
		rc = -1;
	}
	if (rc < 0 && !unnamed)
		unlink(tmp);
	free(tmp);
	return rc;
}

static int copy_to_remote(cp *k, const loc *src, const char *dst, uint64_t size, uint64_t mode)
{
	xfer x;
	xfer_init(&x, k->client, k->chunk);
	x.dst.kind = XF_REMOTE;
	x.dst.path = dst;
	x.mode = mode & 07777;
	if (src->remote) {
		x.src.kind = XF_REMOTE;
		x.src.path = src->path;
		return run_xfer(k, &x, src, size);
	}
	int fd = open(src->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CP_ERR(cli_fail_errno(k->c, errno, "cp: open %s", src->path));
	struct stat st;
	x.src.kind = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? XF_LOCAL_FILE : XF_LOCAL_STREAM;
	x.src.fd = fd;
	x.src.path = src->path;
	int rc = run_xfer(k, &x, src, size);
	close(fd);
	return rc;
}

static int copy_file(cp *k, const loc *src, const loc *dst, uint64_t size, uint64_t mode)
{
	if (dst->remote)
		return copy_to_remote(k, src, dst->path, size, mode);
	return copy_to_local(k, src, dst->path, size, mode);
}

/* Creates the destination directory; an existing directory is merged into, as cp -r does. */
static int make_dir(cp *k, const loc *dst, uint64_t mode)
{
	if (!dst->remote) {
		if (mkdir(dst->path, (mode_t)(mode & 07777) | 0700) == 0)
			return 0;
		struct stat st;
		if (errno == EEXIST && stat(dst->path, &st) == 0 && S_ISDIR(st.st_mode))
			return 0;
		return CP_ERR(cli_fail_errno(k->c, errno, "cp: mkdir %s", dst->path));
	}
	asp_arena *a = cli_arena(k->c);
	if (!a)
		return -1;
	asp_mkdir_params p;
	asp_mkdir_result r;
	asp_error err;
	asp_mkdir_params_init(&p);
	p.path = dst->path;
	p.mode = (mode & 07777) | 0700; /* we must be able to fill it */
	int rc = 0;
	if (asp_mkdir(k->client, &p, &r, a, &err) != ASP_OK) {
		node n;
		if (err.code != ASP_E_ALREADY_EXISTS || node_stat(k, dst, true, &n) < 0 ||
		    n.type != N_DIR) {
			cli_fail(k->c, &err, "cp: mkdir :%s", dst->path);
			rc = -1;
		}
	}
	asp_arena_free(a);
	return rc;
}

static int copy_tree(cp *k, const loc *src, const loc *dst, const node *sn);

/* A symlink inside a tree is recreated, in either direction (as cp -a and rsync -l do). */
static int copy_link(cp *k, const loc *src, const loc *dst)
{
	if (src->remote && !dst->remote) {
		asp_arena *a = cli_arena(k->c);
		if (!a)
			return -1;
		asp_stat_result r;
		asp_error err;
		int rc = 0;
		if (remote_stat(k, src->path, false, &r, a, &err) != ASP_OK) {
			rc = CP_ERR(cli_fail(k->c, &err, "cp: stat :%s", src->path));
		} else if (!r.target) {
			cli_warn("cp: skipping :%s: the sandbox did not say where it points",
			         src->path);
		} else {
			unlink(dst->path); /* replace, as cp -r --remove-destination */
			if (symlink(r.target, dst->path) < 0)
				rc = CP_ERR(
				    cli_fail_errno(k->c, errno, "cp: symlink %s", dst->path));
		}
		asp_arena_free(a);
		return rc;
	}
	/*
	 * Into the sandbox: the protocol has no op that makes a symlink, so `ln -s` runs there
	 * (argv, no shell), after the destination is removed as above.
	 */
	char target[4096];
	ssize_t tl = readlink(src->path, target, sizeof target - 1);
	if (tl < 0)
		return CP_ERR(cli_fail_errno(k->c, errno, "cp: readlink %s", src->path));
	target[tl] = '\0';
	asp_arena *a = cli_arena(k->c);
	if (!a)
		return -1;
	asp_error err;
	asp_remove_params rp;
	asp_remove_result rr;
	asp_remove_params_init(&rp);
	rp.path = dst->path;
	if (asp_remove(k->client, &rp, &rr, a, &err) != ASP_OK && err.code != ASP_E_NOT_FOUND) {
		int rc = CP_ERR(cli_fail(k->c, &err, "cp: replace :%s", dst->path));
		asp_arena_free(a);
		return rc;
	}
	const char *argv[] = {"ln", "-s", "--", target, dst->path};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv = (asp_strv){argv, 5};
	asp_exec_result r;
	int rc = 0;
	if (asp_exec(k->client, &p, &r, a, &err) != ASP_OK) {
		if (err.code == ASP_E_NOT_FOUND)
			cli_warn("cp: skipping symlink %s: the sandbox has no ln to recreate it",
			         src->path);
		else
			rc = CP_ERR(cli_fail(k->c, &err, "cp: symlink :%s", dst->path));
	} else if (r.exit_code != 0) {
		asp_error_set(&err, ASP_E_IO_ERROR, dst->path, "ln -s in the sandbox failed: %.*s",
		              (int)r.stderr_data.len, (const char *)r.stderr_data.data);
		rc = CP_ERR(cli_fail(k->c, &err, "cp: symlink :%s", dst->path));
	}
	asp_arena_free(a);
	return rc;
}

static int copy_child(cp *k, const loc *src, const loc *dst, node_type t, uint64_t size,
                      uint64_t mode)
{
	node n = {.type = t, .size = size, .mode = mode};
	switch (t) {
	case N_FILE: return copy_file(k, src, dst, size, mode);
	case N_DIR: return copy_tree(k, src, dst, &n);
	case N_LINK: return copy_link(k, src, dst);
	default:
		cli_warn("cp: skipping %s%s: not a file, directory or symlink", side(src),
		         src->path);
		return 0;
	}
}

static int skip_dots(const struct dirent *d)
{
	return !path_is_dot(d->d_name);
}

/* Bytewise, as the protocol's list sorts, so both directions copy in the same order. */
static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int copy_local_children(cp *k, const loc *src, const loc *dst)
{
	struct dirent **names;
	int n = scandir(src->path, &names, skip_dots, by_name);
	if (n < 0)
		return CP_ERR(cli_fail_errno(k->c, errno, "cp: list %s", src->path));
	int rc = 0;
	for (int i = 0; i < n; i++) {
		if (rc == 0) {
			char *sp = path_join(src->path, names[i]->d_name);
			char *dp = path_join(dst->path, names[i]->d_name);
			struct stat st;
			if (!sp || !dp) {
				rc = CP_ERR(cli_fail_errno(k->c, ENOMEM, "cp"));
			} else if (lstat(sp, &st) < 0) {
				rc = CP_ERR(cli_fail_errno(k->c, errno, "cp: stat %s", sp));
			} else {
				loc cs = {false, sp}, cd = {dst->remote, dp};
				rc = copy_child(k, &cs, &cd, local_type(st.st_mode),
				                (uint64_t)st.st_size, st.st_mode & 07777);
			}
			free(sp);
			free(dp);
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

static int copy_remote_children(cp *k, const loc *src, const loc *dst)
{
	/* The listing lives in this level's arena while the children are copied. */
	asp_arena *a = cli_arena(k->c);
	if (!a)
		return -1;
	asp_list_params p;
	asp_list_result r;
	asp_error err;
	asp_list_params_init(&p);
	p.path = src->path;
	int rc = 0;
	if (asp_list(k->client, &p, &r, a, &err) != ASP_OK) {
		rc = CP_ERR(cli_fail(k->c, &err, "cp: list :%s", src->path));
		r.entries.count = 0;
	}
	for (size_t i = 0; i < r.entries.count && rc == 0; i++) {
		const asp_list_entry *e = &r.entries.items[i];
		char *sp = path_join(src->path, e->name);
		char *dp = path_join(dst->path, e->name);
		if (!sp || !dp) {
			rc = CP_ERR(cli_fail_errno(k->c, ENOMEM, "cp"));
		} else {
			loc cs = {true, sp}, cd = {dst->remote, dp};
			rc = copy_child(k, &cs, &cd, remote_type(e->type), e->size, e->mode);
		}
		free(sp);
		free(dp);
	}
	asp_arena_free(a);
	return rc;
}

static int copy_tree(cp *k, const loc *src, const loc *dst, const node *sn)
{
	if (make_dir(k, dst, sn->mode) < 0)
		return -1;
	int rc = src->remote ? copy_remote_children(k, src, dst) : copy_local_children(k, src, dst);
	/* Read-only source directories were created writable so they could be filled. */
	if (rc == 0 && !(sn->mode & 0200)) {
		if (!dst->remote)
			chmod(dst->path, (mode_t)sn->mode & 07777 & ~k->umask);
	}
	return rc;
}

/* ---- a tree as one stream -------------------------------------------------------- */

typedef struct tree_progress {
	progress *bar;
	uint64_t last;
} tree_progress;

static void tree_moved(void *user, uint64_t total)
{
	tree_progress *t = user;
	if (total > t->last) { /* calls may come from several threads: each adds its step */
		progress_add(t->bar, total - t->last);
		t->last = total;
	}
}

/*
 * A directory between here and the sandbox as one tar stream (docs/design.md, "Trees as
 * one stream"): 1 when it worked, 0 when the responder has no tree ops (the caller copies
 * entry by entry), -1 after reporting a failure.
 */
static int copy_tree_stream(cp *k, const loc *src, const loc *dst)
{
	progress prog;
	char *name = path_base(src->path);
	progress_init(&prog, name ? name : src->path, 0, k->progress);
	tree_progress tp = {&prog, 0};
	asp_tree_opts o = {.progress = tree_moved, .user = &tp};
	asp_tree_counts n = {0};
	asp_error err;
	asp_status st = src->remote
	                    ? asp_tree_download(k->client, src->path, dst->path, &o, &n, &err)
	                    : asp_tree_upload(k->client, src->path, dst->path, &o, &n, &err);
	progress_finish(&prog);
	free(name);
	if (st == ASP_E_UNSUPPORTED && tp.last == 0)
		return 0;
	if (st != ASP_OK)
		return CP_ERR(cli_fail(k->c, &err, "cp -r %s%s", side(src), src->path));
	k->files += n.entries;
	k->bytes += n.bytes;
	return 1;
}

/* True when `inner` is `outer` or below it, by name. */
static bool sn_inside(const char *outer, const char *inner)
{
	size_t n = strlen(outer);
	while (n > 1 && outer[n - 1] == '/')
		n--;
	return strncmp(outer, inner, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

static void parse_loc(const char *arg, loc *l)
{
	l->remote = arg[0] == ':';
	l->path = l->remote ? arg + 1 : arg;
	if (l->path[0] == '\0')
		l->path = "."; /* ":" alone: the sandbox's cwd */
}

int cmd_cp(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"recursive", no_argument, NULL, 'r'},
	    {"quiet", no_argument, NULL, 'q'},
	    {NULL, 0, NULL, 0},
	};
	cp k = {.c = c};
	bool quiet = false;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "hrRq", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case 'r':
		case 'R': k.recursive = true; break;
		case 'q': quiet = true; break;
		default: return c->fail_code;
		}
	}
	if (argc - optind != 2)
		return cli_usage(c, "give SRC and DST");
	loc src, dst;
	parse_loc(argv[optind], &src);
	parse_loc(argv[optind + 1], &dst);
	if (!src.remote && !dst.remote)
		return cli_usage(c, "neither path is in the sandbox: start one with ':' "
		                    "(asp cp a.txt :/w/a.txt)");
	if (src.remote && dst.remote && sn_inside(src.path, dst.path))
		return cli_usage(c, "cannot copy :%s into itself (:%s)", src.path, dst.path);
	k.umask = umask(0);
	umask(k.umask);
	k.progress = !quiet && !c->json && isatty(STDERR_FILENO);
	if (!(k.client = cli_client(c)))
		return c->fail_code;
	k.chunk = cli_chunk_size(c);

	node sn, dn;
	if (node_stat(&k, &src, true, &sn) < 0)
		return c->fail_code;
	if (sn.type == N_NONE) {
		asp_error err;
		asp_error_set(&err, ASP_E_NOT_FOUND, src.path, "no such file or directory");
		return cli_fail(c, &err, "cp %s%s", side(&src), src.path);
	}
	if (sn.type == N_DIR && !k.recursive) {
		asp_error err;
		asp_error_set(&err, ASP_E_IS_A_DIRECTORY, src.path,
		              "%s%s is a directory; copy it with -r", side(&src), src.path);
		return cli_fail(c, &err, "cp %s%s", side(&src), src.path);
	}
	if (node_stat(&k, &dst, true, &dn) < 0)
		return c->fail_code;

	/* Onto an existing directory: into it, as cp does ("." and "/" copy their contents). */
	char *into = NULL;
	if (dn.type == N_DIR) {
		char *base = path_base(src.path);
		if (!base)
			return cli_fail_errno(c, ENOMEM, "cp");
		if (!path_is_dot(base) && strcmp(base, "/") != 0) {
			into = path_join(dst.path, base);
			if (!into) {
				free(base);
				return cli_fail_errno(c, ENOMEM, "cp");
			}
			dst.path = into;
		}
		free(base);
	}
	int rc = 0;
	if (sn.type == N_DIR && src.remote != dst.remote)
		rc = copy_tree_stream(&k, &src, &dst);
	if (rc == 0)
		rc = sn.type == N_DIR ? copy_tree(&k, &src, &dst, &sn)
		                      : copy_file(&k, &src, &dst, sn.size, sn.mode);
	free(into);
	if (rc < 0)
		return c->fail_code;
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "files");
		jw_uint(&w, k.files);
		jw_key(&w, "bytes");
		jw_uint(&w, k.bytes);
		jw_obj_end(&w);
		jw_end(&w);
	}
	return cli_finish(c, CLI_EXIT_OK);
}
