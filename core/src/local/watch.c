/*
 * watch: file changes under a path, from inotify, as fs_event notifications on the
 * connection that asked (docs/design.md, "Ports and changes"). A handle of the process
 * table (closed by proc_signal KILL or TERM; exit when it ends) whose pump reads the
 * inotify descriptor, turns each event into a path and a kind, coalesces what one path
 * does within a short window, and sends the batch before it reads again: a client that
 * stops reading holds the pump, the kernel's queue fills, and its overflow becomes an
 * fs_event of kind overflow, so memory stays bounded and nothing is dropped silently.
 * Recursive watches add a watch to each directory created (or moved in) below, and
 * report what such a directory already holds as created, since entries made before its
 * watch existed have no event of their own.
 */
#include "local_proc.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MASK                                                                                 \
	(IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO |             \
	 IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
#define QUIET_MS     50u   /* a path's events this close together are one */
#define BATCH_MAX_MS 200u  /* a busy tree still reports this often */
#define PENDING_MAX  256u  /* events held for coalescing; full: sent at once */
#define WATCH_DEPTH  64    /* the deepest directory a recursive watch descends to */
#define READ_BUF     65536 /* inotify read buffer */

typedef struct wdir {
	int wd;
	char *path; /* the directory (or the watched file) as reported: root joined below */
} wdir;

typedef struct pending {
	char *path, *old_path; /* malloc'd */
	const char *kind;      /* a literal */
	char type[12];
} pending;

typedef struct watcher {
	int fd; /* inotify */
	bool recursive;
	char *root;
	wdir *dirs;
	size_t ndirs, cap;
	pending ev[PENDING_MAX];
	size_t nev;
	bool root_gone;
} watcher;

/* ---- the directory table ----------------------------------------------------------- */

static wdir *dir_of(watcher *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

/* Records wd for `path` (copied); a wd seen before (a directory watched twice through a
 * rename) gets the new path. 0, or -1 when out of memory. */
static int dir_put(watcher *w, int wd, const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return -1;
	wdir *d = dir_of(w, wd);
	if (d) {
		free(d->path);
		d->path = copy;
		return 0;
	}
	if (w->ndirs == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 16;
		wdir *nd = realloc(w->dirs, cap * sizeof *nd);
		if (!nd) {
			free(copy);
			return -1;
		}
		w->dirs = nd;
		w->cap = cap;
	}
	w->dirs[w->ndirs++] = (wdir){wd, copy};
	return 0;
}

static void dir_drop(watcher *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++) {
		if (w->dirs[i].wd == wd) {
			free(w->dirs[i].path);
			w->dirs[i] = w->dirs[--w->ndirs];
			return;
		}
	}
}

/* A directory moved from `from` to `to` (both full paths): its watched subtree's paths
 * follow. */
static void dirs_renamed(watcher *w, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	for (size_t i = 0; i < w->ndirs; i++) {
		char *p = w->dirs[i].path;
		if (strncmp(p, from, fl) != 0 || (p[fl] != '\0' && p[fl] != '/'))
			continue;
		size_t rest = strlen(p + fl);
		char *np = malloc(tl + rest + 1);
		if (!np)
			continue; /* its later events keep the old name: no worse than a lost rename
			           */
		memcpy(np, to, tl);
		memcpy(np + tl, p + fl, rest + 1);
		free(p);
		w->dirs[i].path = np;
	}
}

/* A directory moved out of the tree: stop watching what was below it. */
static void dirs_gone(watcher *w, const char *path)
{
	size_t l = strlen(path);
	for (size_t i = 0; i < w->ndirs;) {
		char *p = w->dirs[i].path;
		if (strncmp(p, path, l) == 0 && (p[l] == '\0' || p[l] == '/')) {
			inotify_rm_watch(w->fd, w->dirs[i].wd);
			free(p);
			w->dirs[i] = w->dirs[--w->ndirs];
		} else {
			i++;
		}
	}
}

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	bool slash = dl > 0 && dir[dl - 1] != '/';
	char *p = malloc(dl + slash + nl + 1);
	if (!p)
		return NULL;
	memcpy(p, dir, dl);
	if (slash)
		p[dl] = '/';
	memcpy(p + dl + slash, name, nl + 1);
	return p;
}

/* ---- pending events: coalescing ---------------------------------------------------- */

static void type_of(const char *path, bool is_dir, char out[12])
{
	struct stat st;
	if (is_dir)
		strcpy(out, "dir");
	else if (lstat(path, &st) == 0)
		snprintf(out, 12, "%s", local_type_name(st.st_mode));
	else
		out[0] = '\0'; /* already gone: unknown */
}

/* Adds an event (path and old_path consumed) unless the same path's last pending one
 * says it already: a second modified, a modified after created. false when the table is
 * full (the caller sends and retries). */
static bool pend(watcher *w, const char *kind, char *path, char *old_path, const char *type)
{
	for (size_t i = w->nev; i-- > 0;) {
		pending *e = &w->ev[i];
		if (strcmp(e->path, path) != 0)
			continue;
		bool same = e->kind == kind && !old_path && !e->old_path;
		bool mod_after_create = !strcmp(kind, "modified") && !strcmp(e->kind, "created");
		if (same || mod_after_create) {
			free(path);
			free(old_path);
			return true;
		}
		break;
	}
	if (w->nev == PENDING_MAX)
		return false;
	pending *e = &w->ev[w->nev++];
	e->path = path;
	e->old_path = old_path;
	e->kind = kind;
	snprintf(e->type, sizeof e->type, "%s", type);
	return true;
}

static void pending_clear(watcher *w)
{
	for (size_t i = 0; i < w->nev; i++) {
		free(w->ev[i].path);
		free(w->ev[i].old_path);
	}
	w->nev = 0;
}

/* Sends the pending events to every live subscriber, in order, each after its gate. */
static void send_pending(local_proc *p, watcher *w, asp_buf *b)
{
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < w->nev; i++) {
		pending *e = &w->ev[i];
		asp_fs_event_event ev = {
		    .proc = p->id,
		    .path = e->path,
		    .kind = e->kind,
		    .type = e->type,
		    .old_path = e->old_path,
		};
		for (local_sub *s = p->subs; s; s = s->next) {
			while (s->gated || s->sending) /* the answer first; one sender at a time */
				pthread_cond_wait(&p->cv, &p->mu);
			if (s->removed)
				continue;
			s->sending = true;
			pthread_mutex_unlock(&p->mu);
			int rc = local_conn_event(s->conn, ASP_NOTICE_FS_EVENT, &ev, b);
			pthread_mutex_lock(&p->mu);
			s->sending = false;
			pthread_cond_broadcast(&p->cv);
			if (rc <= 0)
				s->removed = true; /* dead, or out of memory for it */
		}
	}
	pthread_mutex_unlock(&p->mu);
	pending_clear(w);
	if (b->cap > 4 * PROC_CHUNK)
		asp_buf_free(b);
}

/* pend, sending first when the table is full: holding the pump is the backpressure. */
static void add_event(local_proc *p, watcher *w, asp_buf *b, const char *kind, char *path,
                      char *old_path, const char *type)
{
	if (!path)
		return; /* out of memory for the path: the event is lost, as in an overflow */
	if (!pend(w, kind, path, old_path, type)) {
		send_pending(p, w, b);
		pend(w, kind, path, old_path, type);
	}
}

/* ---- adding watches ------------------------------------------------------------------ */

/*
 * Watches directory `path` and, recursively, what is below it. With `report` (a
 * directory that appeared after the watch began) each entry found is a created event.
 * 0, or an errno of the first watch that failed (ENOSPC: out of inotify watches).
 */
static int watch_tree(local_proc *p, watcher *w, asp_buf *b, const char *path, int depth,
                      bool report)
{
	int wd = inotify_add_watch(w->fd, path, WATCH_MASK | IN_ONLYDIR);
	if (wd < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : errno; /* gone again: fine */
	if (dir_put(w, wd, path) < 0)
		return ENOMEM;
	if (depth >= WATCH_DEPTH)
		return 0;
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *sub = join(path, de->d_name);
		if (!sub) {
			rc = ENOMEM;
			break;
		}
		struct stat st;
		bool is_dir = lstat(sub, &st) == 0 && S_ISDIR(st.st_mode);
		if (report && p) {
			char type[12];
			type_of(sub, is_dir, type);
			add_event(p, w, b, "created", strdup(sub), NULL, type);
		}
		if (is_dir)
			rc = watch_tree(p, w, b, sub, depth + 1, report);
		free(sub);
	}
	closedir(d);
	return rc;
}

/* ---- the pump ------------------------------------------------------------------------ */

/* An overflow: changes were lost (or a new directory could not be watched). */
static void add_overflow(local_proc *p, watcher *w, asp_buf *b, const char *path)
{
	add_event(p, w, b, "overflow", strdup(path), NULL, "");
}

static void handle_event(local_proc *p, watcher *w, asp_buf *b, const struct inotify_event *ev,
                         const struct inotify_event *next)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		add_overflow(p, w, b, w->root);
		return;
	}
	wdir *d = dir_of(w, ev->wd);
	if (!d)
		return; /* a watch removed meanwhile */
	if (ev->mask & IN_IGNORED) {
		bool root = !strcmp(d->path, w->root);
		dir_drop(w, ev->wd);
		if (root)
			w->root_gone = true;
		return;
	}
	bool is_dir = (ev->mask & IN_ISDIR) != 0;
	if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
		if (!strcmp(d->path, w->root)) {
			add_event(p, w, b, "removed", strdup(w->root), NULL,
			          ev->mask & IN_DELETE_SELF ? ""
			          : is_dir                  ? "dir"
			                                    : "");
			w->root_gone = true;
		}
		return; /* below the root: its parent reports it */
	}
	char *path = ev->len ? join(d->path, ev->name) : strdup(d->path);
	if (!path)
		return;
	char type[12];
	if (ev->mask & IN_MOVED_FROM) {
		/* Its pair comes next in the same read when the move stays inside the tree. */
		if (next && (next->mask & IN_MOVED_TO) && next->cookie == ev->cookie) {
			wdir *nd = dir_of(w, next->wd);
			char *to = nd ? join(nd->path, next->name) : NULL;
			if (to) {
				type_of(to, is_dir, type);
				if (is_dir)
					dirs_renamed(w, path, to);
				add_event(p, w, b, "renamed", to, path, type);
				return;
			}
		}
		if (is_dir)
			dirs_gone(w, path);
		add_event(p, w, b, "removed", path, NULL, is_dir ? "dir" : "");
		return;
	}
	if (ev->mask & IN_MOVED_TO) {
		/* Paired above when its MOVED_FROM came first; here it was moved in. */
		type_of(path, is_dir, type);
		add_event(p, w, b, "created", strdup(path), NULL, type);
		if (is_dir && w->recursive && watch_tree(p, w, b, path, 1, true) == ENOSPC)
			add_overflow(p, w, b, path);
		free(path);
		return;
	}
	if (ev->mask & IN_CREATE) {
		type_of(path, is_dir, type);
		add_event(p, w, b, "created", strdup(path), NULL, type);
		if (is_dir && w->recursive && watch_tree(p, w, b, path, 1, true) == ENOSPC)
			add_overflow(p, w, b, path);
		free(path);
		return;
	}
	if (ev->mask & IN_DELETE) {
		add_event(p, w, b, "removed", path, NULL, is_dir ? "dir" : "");
		return;
	}
	type_of(path, is_dir, type); /* IN_MODIFY, IN_ATTRIB */
	add_event(p, w, b, "modified", path, NULL, type);
}

/* Whether a MOVED_TO was already taken as the pair of the MOVED_FROM before it. */
static bool paired(const struct inotify_event *prev, const struct inotify_event *ev)
{
	return prev && (prev->mask & IN_MOVED_FROM) && (ev->mask & IN_MOVED_TO) &&
	       prev->cookie == ev->cookie;
}

static void watcher_free(watcher *w)
{
	if (!w)
		return;
	pending_clear(w);
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	free(w->root);
	if (w->fd >= 0)
		close(w->fd);
	free(w);
}

static void *watch_pump(void *arg)
{
	local_proc *p = arg;
	watcher *w = p->ext;
	asp_buf b;
	asp_buf_init(&b);
	char *buf = malloc(READ_BUF);
	const char *sig = NULL;
	uint64_t first = 0, last = 0; /* when the pending batch began, and its latest event */
	while (buf) {
		pthread_mutex_lock(&p->mu);
		if (p->close_sig[0])
			sig = p->close_sig;
		else if (p->ending)
			sig = "TERM";
		pthread_mutex_unlock(&p->mu);
		if (sig || w->root_gone)
			break;
		uint64_t now = local_now_ns();
		if (w->nev && (now >= last + QUIET_MS * NS_PER_MS ||
		               now >= first + BATCH_MAX_MS * NS_PER_MS)) {
			send_pending(p, w, &b);
			continue;
		}
		int ms = -1;
		if (w->nev) {
			uint64_t due = last + QUIET_MS * NS_PER_MS;
			if (first + BATCH_MAX_MS * NS_PER_MS < due)
				due = first + BATCH_MAX_MS * NS_PER_MS;
			ms = local_poll_ms(now, due);
		}
		struct pollfd pfd[2] = {{w->fd, POLLIN, 0}, {p->wake_fd, POLLIN, 0}};
		if (poll(pfd, 2, ms) <= 0)
			continue;
		if (pfd[1].revents) {
			uint64_t v;
			ssize_t r = read(p->wake_fd, &v, sizeof v);
			(void)r;
		}
		if (!pfd[0].revents)
			continue;
		ssize_t n = read(w->fd, buf, READ_BUF);
		if (n <= 0)
			continue; /* EAGAIN, EINTR */
		if (!w->nev)
			first = local_now_ns();
		const struct inotify_event *prev = NULL;
		for (ssize_t off = 0; off < n;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			off += (ssize_t)(sizeof *ev + ev->len);
			const struct inotify_event *next =
			    off < n ? (const struct inotify_event *)(const void *)(buf + off)
			            : NULL;
			if (!paired(prev, ev))
				handle_event(p, w, &b, ev, next);
			prev = ev;
		}
		last = local_now_ns();
		if (!w->nev)
			first = 0;
	}
	if (w->nev)
		send_pending(p, w, &b);
	free(buf);
	char *why = buf ? NULL : strdup("out of memory in the responder");
	p->ext = NULL;
	watcher_free(w);
	local_pump_end(p, sig ? -1 : why ? 1 : 0, sig, why, &b);
	return NULL;
}

asp_status local_op_watch(void *self, const asp_watch_params *p, asp_watch_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)a;
	asp_local_conn *c = self;
	r->proc = 0;
	asp_status st = asp_check_required("watch", "path", p->path, err);
	if (st != ASP_OK)
		return st;
	if (!c->has_sink)
		return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
		                     "watch: this connection cannot carry notifications (plain "
		                     "HTTP); watch over a WebSocket, stdio or SSH agent mode");
	struct stat sb;
	if (stat(p->path, &sb) < 0)
		return asp_error_errno(err, errno, p->path, "watch %s", p->path);
	watcher *w = calloc(1, sizeof *w);
	if (!w)
		return local_oom("watch", err);
	w->recursive = p->recursive && S_ISDIR(sb.st_mode);
	w->root = strdup(p->path);
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (!w->root) {
		watcher_free(w);
		return local_oom("watch", err);
	}
	if (w->fd < 0) {
		int e = errno;
		watcher_free(w);
		return asp_error_errno(err, e, NULL, "watch: cannot create an inotify instance%s",
		                       e == EMFILE ? " (fs.inotify.max_user_instances reached)"
		                                   : "");
	}
	int wd = inotify_add_watch(w->fd, w->root, WATCH_MASK);
	int e = wd < 0 ? errno : dir_put(w, wd, w->root) < 0 ? ENOMEM : 0;
	if (!e && w->recursive) {
		asp_buf none;
		asp_buf_init(&none);
		/* Subdirectories only: the root's own watch is in place. */
		DIR *d = opendir(w->root);
		struct dirent *de;
		while (!e && d && (de = readdir(d)) != NULL) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			char *sub = join(w->root, de->d_name);
			struct stat st;
			if (!sub)
				e = ENOMEM;
			else if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
				e = watch_tree(NULL, w, &none, sub, 1, false);
			free(sub);
		}
		if (d)
			closedir(d);
	}
	if (e) {
		watcher_free(w);
		if (e == ENOMEM)
			return local_oom("watch", err);
		return asp_error_errno(err, e, p->path, "watch %s%s", p->path,
		                       e == ENOSPC ? ": out of inotify watches "
		                                     "(fs.inotify.max_user_watches)"
		                                   : "");
	}
	char command[PATH_MAX + 16];
	snprintf(command, sizeof command, "watch %s%s", p->path, w->recursive ? " -r" : "");
	local_proc *pr = local_proc_alloc(c->l, LOCAL_PROC_WATCH, 0, p->tag, command, "watch", err);
	local_sub *sub = pr ? local_sub_new(c) : NULL;
	if (!pr || !sub) {
		watcher_free(w);
		if (pr) {
			local_proc_discard(pr);
			return local_oom("watch", err);
		}
		return err->code;
	}
	pr->ext = w;
	st = local_proc_list_start(pr, sub, watch_pump, "watch", err);
	if (st != ASP_OK) {
		watcher_free(w); /* the handle went; its watcher is still ours */
		return st;
	}
	r->proc = pr->id;
	return ASP_OK;
}
