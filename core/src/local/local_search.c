/*
 * glob and grep: one walk of a tree in the sandbox per request, so a harness's search is
 * one round trip instead of a list and a read per file.
 */
#include "glob_match.h"
#include "local_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef ASP_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#else
#include <regex.h>
#endif

#define BINARY_PROBE    8192          /* a NUL in this many first bytes: binary, skipped */
#define GREP_MAX_FILE   (64u << 20)   /* larger files are skipped */
#define GREP_DEFAULT_MS (30u * 1000u) /* own bound, under the clients' 60 s call timeout */

/* ---- walking ----------------------------------------------------------------------- */

typedef struct walker walker;
/* One non-directory: rel is its path below the root; 1 goes on, 0 stops the walk. */
typedef int (*visit_fn)(walker *w, int dirfd, const char *name, const char *rel,
                        unsigned char type);

struct walker {
	bool hidden;
	bool sorted; /* entries in bytewise order (grep's answer is in path order) */
	bool stop;
	uint64_t deadline_ns; /* UINT64_MAX: none */
	bool timed_out;
	visit_fn visit;
	void *ctx;
};

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static void walk(walker *w, int fd0, char *rel, size_t rlen);

/* One entry of directory d (rel holds its directory's path, rlen long). */
static void walk_entry(walker *w, DIR *d, const char *nm, unsigned char type, char *rel,
                       size_t rlen)
{
	size_t nl = strlen(nm);
	if (w->stop || rlen + nl + 2 >= PATH_MAX)
		return;
	if (w->deadline_ns != UINT64_MAX && local_now_ns() >= w->deadline_ns) {
		w->timed_out = w->stop = true;
		return;
	}
	size_t nr = rlen;
	if (rlen)
		rel[nr++] = '/';
	memcpy(rel + nr, nm, nl + 1);
	nr += nl;
	if (type == DT_UNKNOWN) {
		struct stat st;
		if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
			goto next;
		type = S_ISDIR(st.st_mode)   ? DT_DIR
		       : S_ISLNK(st.st_mode) ? DT_LNK
		       : S_ISREG(st.st_mode) ? DT_REG
		                             : DT_FIFO;
	}
	if (type == DT_DIR) {
		if (strcmp(nm, ".git") == 0)
			goto next;
		int fd = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0)
			walk(w, fd, rel, nr);
	} else if (w->visit(w, dirfd(d), nm, rel, type) == 0) {
		w->stop = true;
	}
next:
	rel[rlen] = '\0';
}

/*
 * Entries of dirfd, files visited and directories entered: in bytewise order when
 * w->sorted, else as readdir gives them (glob sorts its results itself).
 */
static void walk(walker *w, int fd0, char *rel, size_t rlen)
{
	DIR *d = fdopendir(fd0);
	if (!d) {
		close(fd0);
		return;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *nm = de->d_name;
		if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
			continue;
		if (!w->hidden && nm[0] == '.')
			continue;
		if (!w->sorted) {
			walk_entry(w, d, nm, de->d_type, rel, rlen);
			continue;
		}
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			char **g = realloc(names, nc * sizeof *g);
			if (!g)
				break;
			names = g;
			cap = nc;
		}
		names[n] = malloc(strlen(nm) + 2);
		if (!names[n])
			break;
		/* the type rides after the name's NUL so sorting keeps them together */
		strcpy(names[n], nm);
		names[n][strlen(nm) + 1] = (char)de->d_type;
		n++;
	}
	if (n > 1)
		qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		walk_entry(w, d, names[i], (unsigned char)names[i][strlen(names[i]) + 1], rel,
		           rlen);
		free(names[i]);
	}
	free(names);
	closedir(d);
}

static char *join(asp_arena *a, const char *root, const char *rel)
{
	size_t rl = strlen(root), ll = strlen(rel);
	while (rl > 1 && root[rl - 1] == '/')
		rl--;
	char *s = asp_arena_alloc(a, rl + ll + 2);
	if (!s)
		return NULL;
	memcpy(s, root, rl);
	size_t o = rl;
	if (rl && root[rl - 1] != '/')
		s[o++] = '/';
	memcpy(s + o, rel, ll + 1);
	return s;
}

static asp_status open_root(const char *op, const char *path, int *fd, bool *is_dir, asp_error *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return asp_error_errno(err, errno, path, "%s %s", op, path);
	*is_dir = S_ISDIR(st.st_mode);
	*fd = open(path, O_RDONLY | O_CLOEXEC | (*is_dir ? O_DIRECTORY : 0));
	if (*fd < 0)
		return asp_error_errno(err, errno, path, "%s %s", op, path);
	return ASP_OK;
}

/* ---- glob -------------------------------------------------------------------------- */

typedef struct gent {
	char *rel;
	int64_t mtime_ns;
} gent;

typedef struct glob_ctx {
	patset ps;
	gent *v;
	size_t n, cap;
	bool oom;
} glob_ctx;

static int glob_visit(walker *w, int dirfd, const char *name, const char *rel, unsigned char type)
{
	(void)type;
	glob_ctx *g = w->ctx;
	if (!patset_match(&g->ps, rel))
		return 1;
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 1;
	if (g->n == g->cap) {
		size_t nc = g->cap ? 2 * g->cap : 256;
		gent *v = realloc(g->v, nc * sizeof *v);
		if (!v)
			return g->oom = true, 0;
		g->v = v;
		g->cap = nc;
	}
	char *copy = strdup(rel);
	if (!copy)
		return g->oom = true, 0;
	g->v[g->n].rel = copy;
	g->v[g->n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	g->n++;
	return 1;
}

static int cmp_gent(const void *x, const void *y)
{
	const gent *a = x, *b = y;
	if (a->mtime_ns != b->mtime_ns)
		return a->mtime_ns > b->mtime_ns ? -1 : 1;
	return strcmp(a->rel, b->rel);
}

asp_status asp_local_glob(void *self, const asp_glob_params *p, asp_glob_result *r, asp_arena *a,
                          asp_error *err)
{
	asp_local *l = self;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("glob", "path", p->path, err);
	if (st)
		return st;
	if (!p->pattern || !p->pattern[0])
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "glob: field 'pattern' is required");
	int fd;
	bool is_dir;
	if ((st = open_root("glob", p->path, &fd, &is_dir, err)))
		return st;
	if (!is_dir) {
		close(fd);
		return asp_error_set(err, ASP_E_NOT_A_DIRECTORY, p->path,
		                     "glob: %s is not a directory", p->path);
	}
	glob_ctx g = {0};
	if ((st = patset_init(&g.ps, "glob", p->pattern, err))) {
		close(fd);
		return st;
	}
	walker w = {.hidden = p->hidden, .deadline_ns = UINT64_MAX, .visit = glob_visit, .ctx = &g};
	char rel[PATH_MAX] = "";
	walk(&w, fd, rel, 0);
	patset_free(&g.ps);
	if (!g.oom && g.n > 1)
		qsort(g.v, g.n, sizeof *g.v, cmp_gent);
	size_t keep = g.n < p->max_results ? g.n : (size_t)p->max_results;
	const char **out = keep ? asp_arena_alloc(a, keep * sizeof *out) : NULL;
	if (keep && !out)
		g.oom = true;
	size_t bytes = 0, k = 0;
	for (; !g.oom && k < keep; k++) {
		bytes += strlen(p->path) + strlen(g.v[k].rel) + 8;
		if (bytes > l->payload_budget)
			break;
		out[k] = join(a, p->path, g.v[k].rel);
		if (!out[k])
			g.oom = true;
	}
	for (size_t i = 0; i < g.n; i++)
		free(g.v[i].rel);
	free(g.v);
	if (g.oom)
		return local_oom("glob", err);
	r->paths.items = out;
	r->paths.count = k;
	r->truncated = k < g.n;
	return ASP_OK;
}

/* ---- grep -------------------------------------------------------------------------- */

typedef enum { MODE_FILES, MODE_CONTENT, MODE_COUNT } grep_mode;

typedef struct grep_ctx {
	const asp_grep_params *p;
	asp_arena *a;
	grep_mode mode;
	bool has_glob;
	patset ps;
	const char *root; /* joined with rel for the reported path */
	bool root_is_file;
#ifdef ASP_HAVE_PCRE2
	pcre2_code *re;
	pcre2_code *re_buf; /* for whole buffers (^ $ at newlines); NULL: line by line */
	pcre2_match_data *md;
#else
	regex_t re;
	bool re_buf; /* regexec may run on the whole buffer (REG_NEWLINE, no newline in it) */
	char *line;  /* NUL-terminated copy for regexec */
	size_t line_cap;
#endif
	/* results, grown with realloc and adopted by the arena at the end */
	const char **files;
	asp_grep_match *matches;
	asp_grep_count *counts;
	size_t n, cap;
	const char **too_large; /* files over GREP_MAX_FILE, not read: reported */
	size_t nlarge, caplarge;
	const char **undecided; /* files with a line the match limit left undecided */
	size_t nundecided, capundecided;
	size_t bytes, budget;
	uint64_t deadline_ns; /* the walk's: checked inside a file too (out_of_time) */
	unsigned tick;        /* pattern calls since the clock was last read */
	bool slow_call;       /* the last call ran into a match limit: it took long */
	bool undecided_here;  /* a line of this file did (re_find): it is listed */
	bool truncated, oom, timed_out;
} grep_ctx;

/* Room in *v (n used of *cap) for one more; -1 (g->oom) when out of memory. */
static int grow(grep_ctx *g, void **v, size_t n, size_t *cap, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? 2 * *cap : 64;
	void *nv = realloc(*v, nc * elem);
	if (!nv)
		return g->oom = true, -1;
	*v = nv;
	*cap = nc;
	return 0;
}

/* Whether [s, s+len) holds a match; *mstart, *mend the first (offsets into s). */
static bool re_find(grep_ctx *g, const char *s, size_t len, size_t *mstart, size_t *mend)
{
#ifdef ASP_HAVE_PCRE2
	int rc = pcre2_match(g->re, (PCRE2_SPTR)s, len, 0, 0, g->md, NULL);
	if (rc < 0) {
		if (rc != PCRE2_ERROR_NOMATCH) /* a limit: tens of ms spent, and no answer */
			g->slow_call = g->undecided_here = true;
		return false;
	}
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(g->md);
	*mstart = ov[0];
	*mend = ov[1] > ov[0] ? ov[1] : ov[0];
	return true;
#else
	if (len + 1 > g->line_cap) {
		char *nl = realloc(g->line, len + 1);
		if (!nl)
			return g->oom = true, false;
		g->line = nl;
		g->line_cap = len + 1;
	}
	memcpy(g->line, s, len);
	g->line[len] = '\0';
	regmatch_t m;
	if (regexec(&g->re, g->line, 1, &m, 0) != 0)
		return false;
	*mstart = (size_t)m.rm_so;
	*mend = (size_t)m.rm_eo;
	return true;
#endif
}

/*
 * The first place at or after `start` (a line start) where the whole-buffer pattern
 * matches: 1 and *at; 0 none; -1 cannot tell (a match limit, a NUL for regexec): then the
 * caller goes line by line. A match found this way only says which line to try: the line
 * is then matched alone, as without this, so results do not change. It is sound for
 * patterns whose match inside a line stays a match inside the whole buffer: no
 * lookaround, no \A \z \Z \G \K, nothing atomic, no inline options (buf_safe decides).
 */
static int buf_find(grep_ctx *g, const char *buf, size_t len, size_t start, size_t *at)
{
#ifdef ASP_HAVE_PCRE2
	int rc = pcre2_match(g->re_buf, (PCRE2_SPTR)buf, len, start, 0, g->md, NULL);
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (rc < 0)
		return g->slow_call = true, -1;
	*at = pcre2_get_ovector_pointer(g->md)[0];
	return 1;
#else
	/* buf[len] is a NUL (grep_fd); one inside would end the string early */
	if (memchr(buf + start, '\0', len - start))
		return -1;
	regmatch_t m;
	if (regexec(&g->re, buf + start, 1, &m, 0) != 0)
		return 0;
	*at = start + (size_t)m.rm_so;
	return 1;
#endif
}

/*
 * Whether the search's time is up. Read every 16 pattern calls, and after each call that
 * ran into a match limit: a file of such lines (tens of ms each) would otherwise keep
 * the answer long past the deadline, which the walk checks only between files.
 */
static bool out_of_time(grep_ctx *g)
{
	if (++g->tick < 16 && !g->slow_call)
		return false;
	g->tick = 0;
	g->slow_call = false;
	if (local_now_ns() < g->deadline_ns)
		return false;
	g->timed_out = true;
	return true;
}

static bool have_buf_re(const grep_ctx *g)
{
#ifdef ASP_HAVE_PCRE2
	return g->re_buf != NULL;
#else
	return g->re_buf;
#endif
}

static char *astr(grep_ctx *g, const char *s, size_t n)
{
	char *c = asp_arena_strndup(g->a, s, n);
	if (!c)
		g->oom = true;
	g->bytes += n + 8;
	return c;
}

/* Lines [from, to) of the file as strings. */
static asp_strv lines_of(grep_ctx *g, const char *buf, const size_t *ls, size_t from, size_t to)
{
	asp_strv v = {0};
	if (to <= from)
		return v;
	const char **items = asp_arena_alloc(g->a, (to - from) * sizeof *items);
	if (!items)
		return g->oom = true, v;
	for (size_t i = from; i < to; i++) {
		size_t e = ls[i + 1] - 1; /* the newline, or the end */
		items[i - from] = astr(g, buf + ls[i], e - ls[i]);
	}
	v.items = items;
	v.count = to - from;
	return v;
}

/* One match in content mode: lines [l0, l1] matched. 0 when the search must stop. */
static int add_match(grep_ctx *g, const char *path, const char *buf, const size_t *ls,
                     size_t nlines, size_t l0, size_t l1)
{
	size_t b = g->p->before < l0 ? (size_t)g->p->before : l0;
	size_t after_end = l1 + 1 + (g->p->after < nlines ? (size_t)g->p->after : nlines);
	if (after_end > nlines)
		after_end = nlines;
	/*
	 * What it adds to the answer, checked before it is added: the path goes out with
	 * every match (48: the map's keys and headers), each line with a string header.
	 */
	size_t plen = strlen(path) + 48;
	size_t need = plen + (ls[after_end] - ls[l0 - b]) + 8 * (after_end - (l0 - b));
	if (g->n >= g->p->max_matches || g->bytes + need > g->budget) {
		g->truncated = true;
		return 0;
	}
	if (grow(g, (void **)&g->matches, g->n, &g->cap, sizeof *g->matches) < 0)
		return 0;
	asp_grep_match *m = &g->matches[g->n++];
	memset(m, 0, sizeof *m);
	g->bytes += plen;
	m->path = path;
	m->line = l0 + 1;
	m->text = astr(g, buf + ls[l0], ls[l1 + 1] - 1 - ls[l0]);
	m->before = lines_of(g, buf, ls, l0 - b, l0);
	m->after = lines_of(g, buf, ls, l1 + 1, after_end);
	return g->oom ? 0 : 1;
}

/* Which line holds offset `off` (ls sorted; ls[nlines] = len + 1). */
static size_t line_at(const size_t *ls, size_t nlines, size_t off)
{
	size_t lo = 0, hi = nlines;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (ls[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Line starts of buf: ls[i] where line i begins, ls[nlines] one past the end as if a
 * newline followed (ls[i + 1] - 1 is where line i ends). NULL when out of memory.
 */
static size_t *line_starts(const char *buf, size_t len, size_t *nlines_out)
{
	size_t nlines = 0, cap = 64;
	size_t *ls = malloc(cap * sizeof *ls);
	if (!ls)
		return NULL;
	ls[nlines++] = 0;
	for (const char *q = buf, *end = buf + len; q < end;) {
		const char *nl = memchr(q, '\n', (size_t)(end - q));
		if (!nl)
			break;
		if (nlines + 1 >= cap) {
			size_t *g2 = realloc(ls, 2 * cap * sizeof *ls);
			if (!g2) {
				free(ls);
				return NULL;
			}
			ls = g2;
			cap *= 2;
		}
		ls[nlines++] = (size_t)(nl + 1 - buf);
		q = nl + 1;
	}
	bool final_nl = nlines > 1 && ls[nlines - 1] == len;
	if (final_nl)
		nlines--; /* a final newline ends the last line, not a new empty one */
	ls[nlines] = final_nl ? len : len + 1;
	*nlines_out = nlines;
	return ls;
}

/* One file being searched: its lines (found on the first match) and what was found. */
typedef struct file_scan {
	const char *rel, *buf;
	size_t len;
	size_t *ls, nlines;
	const char *path; /* reported path, made on the first match */
	uint64_t count;
} file_scan;

static bool scan_lines(grep_ctx *g, file_scan *f)
{
	if (!f->ls && !(f->ls = line_starts(f->buf, f->len, &f->nlines)))
		g->oom = true;
	return f->ls != NULL;
}

/* The path reported for the file at rel (the root itself when it is a file). */
static const char *reported_path(grep_ctx *g, const char *rel)
{
	return g->root_is_file ? g->root : join(g->a, g->root, rel);
}

static bool scan_path(grep_ctx *g, file_scan *f)
{
	if (!f->path && !(f->path = reported_path(g, f->rel)))
		g->oom = true;
	return f->path != NULL;
}

/* Line i alone; on a match counts and reports it. 0 stops (file or walk: see caller). */
static int scan_line(grep_ctx *g, file_scan *f, size_t i, bool *hit)
{
	size_t e = f->ls[i + 1] - 1, ms, me;
	*hit = re_find(g, f->buf + f->ls[i], e - f->ls[i], &ms, &me);
	if (!*hit)
		return 1;
	f->count++;
	if (g->mode == MODE_FILES)
		return 0;
	if (g->mode == MODE_CONTENT) {
		if (!scan_path(g, f))
			return 0;
		return add_match(g, f->path, f->buf, f->ls, f->nlines, i, i);
	}
	return 1;
}

/*
 * A file reported beside the results (too_large, undecided): so that "no match" is never
 * said of a file, or a line, nobody could search. 0 stops the walk.
 */
static int note_path(grep_ctx *g, const char *rel, const char ***v, size_t *n, size_t *cap)
{
	const char *path = reported_path(g, rel);
	if (!path)
		return g->oom = true, 0;
	size_t need = strlen(path) + 16;
	if (g->bytes + need > g->budget) {
		g->truncated = true;
		return 0;
	}
	if (grow(g, (void **)v, *n, cap, sizeof **v) < 0)
		return 0;
	(*v)[(*n)++] = path;
	g->bytes += need;
	return 1;
}

/* Searches one file's bytes; 0 stops the walk. */
static int grep_scan(grep_ctx *g, const char *rel, const char *buf, size_t len)
{
	file_scan f = {.rel = rel, .buf = buf, .len = len};
	int go = 1;
	if (g->p->multiline) {
		if (!scan_lines(g, &f))
			return 0;
		size_t off = 0, last_line = SIZE_MAX; /* a line matched already: once */
		while (go && off <= len) {
			size_t ms, me;
			if (out_of_time(g))
				return free(f.ls), 0;
			if (!re_find(g, buf + off, len - off, &ms, &me))
				break;
			ms += off, me += off;
			size_t l0 = line_at(f.ls, f.nlines, ms);
			size_t l1 = line_at(f.ls, f.nlines, me > ms ? me - 1 : ms);
			f.count++;
			if (g->mode == MODE_FILES)
				break;
			if (g->mode == MODE_CONTENT && l0 != last_line) {
				if (!scan_path(g, &f))
					return free(f.ls), 0;
				go = add_match(g, f.path, buf, f.ls, f.nlines, l0, l1);
				last_line = l0;
			}
			off = me > ms ? me : ms + 1;
		}
	} else {
		/*
		 * The pattern runs over the whole buffer to find the next line worth trying
		 * (no call per line, no line table for files without a match); that line is
		 * then matched alone. Lines it jumps over cannot match alone.
		 */
		size_t from = 0; /* the first line not decided yet */
		bool by_line = !have_buf_re(g);
		while (go && !by_line) {
			if (f.ls && from >= f.nlines)
				break;
			if (out_of_time(g))
				return free(f.ls), 0;
			size_t at, start = f.ls ? f.ls[from] : 0;
			int rc = buf_find(g, buf, len, start, &at);
			if (rc == 0)
				break;
			if (!scan_lines(g, &f))
				return 0;
			if (rc < 0) {
				by_line = true;
				break;
			}
			if (at > f.ls[f.nlines] - 1)
				break; /* after the final newline: no line there */
			size_t i = line_at(f.ls, f.nlines, at);
			if (i < from) /* cannot be; be safe */
				i = from;
			bool hit;
			go = scan_line(g, &f, i, &hit);
			from = i + 1;
		}
		if (by_line) {
			if (!scan_lines(g, &f))
				return 0;
			for (size_t i = from; go && i < f.nlines; i++) {
				bool hit;
				if (out_of_time(g))
					return free(f.ls), 0;
				go = scan_line(g, &f, i, &hit);
			}
		}
		/* files mode stops at the first hit, not the walk */
		if (!go && g->mode == MODE_FILES && f.count && !g->oom)
			go = 1;
	}
	free(f.ls);
	if (!go)
		return 0;
	if (!f.count || g->mode == MODE_CONTENT)
		return 1;
	if (g->n >= g->p->max_matches || g->bytes > g->budget) {
		g->truncated = true;
		return 0;
	}
	if (!scan_path(g, &f))
		return 0;
	g->bytes += strlen(f.path) + 16;
	if (g->mode == MODE_FILES) {
		if (grow(g, (void **)&g->files, g->n, &g->cap, sizeof *g->files) < 0)
			return 0;
		g->files[g->n++] = f.path;
	} else {
		if (grow(g, (void **)&g->counts, g->n, &g->cap, sizeof *g->counts) < 0)
			return 0;
		g->counts[g->n].path = f.path;
		g->counts[g->n++].count = f.count;
	}
	return 1;
}

/* grep_scan, and the file listed in undecided when the match limit left a line open. */
static int grep_buf(grep_ctx *g, const char *rel, const char *buf, size_t len)
{
	g->undecided_here = false;
	size_t n0 = g->n;
	int go = grep_scan(g, rel, buf, len);
	bool listed = g->mode == MODE_FILES && g->n > n0; /* it matched: that is decided */
	if (g->undecided_here && !listed && !g->oom &&
	    !note_path(g, rel, &g->undecided, &g->nundecided, &g->capundecided))
		return 0;
	return go;
}

/* Reads a file (skipping binary ones, listing huge ones) and searches it. */
static int grep_fd(grep_ctx *g, int fd, const char *rel)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return close(fd), 1;
	if ((uint64_t)st.st_size > GREP_MAX_FILE) {
		/* a binary one would be skipped whatever its size: not worth a mention */
		char head[BINARY_PROBE];
		ssize_t got;
		while ((got = read(fd, head, sizeof head)) < 0 && errno == EINTR)
			;
		close(fd);
		return got > 0 && memchr(head, '\0', (size_t)got)
		           ? 1
		           : note_path(g, rel, &g->too_large, &g->nlarge, &g->caplarge);
	}
	/* one byte more than its size to see it grow, one for the NUL regexec needs */
	size_t cap = (size_t)st.st_size + 1, n = 0;
	size_t probe = (size_t)st.st_size < BINARY_PROBE ? (size_t)st.st_size : BINARY_PROBE;
	bool probed = false;
	char *buf = malloc(cap + 1);
	if (!buf)
		return close(fd), g->oom = true, 0;
	for (;;) {
		if (n == cap)
			break; /* it grew while we read: search what we have */
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
		/* binary: known from the first block, so the rest is not read */
		if (!probed && n >= probe) {
			probed = true;
			if (memchr(buf, '\0', n < BINARY_PROBE ? n : BINARY_PROBE))
				return close(fd), free(buf), 1;
		}
	}
	close(fd);
	int go = 1;
	buf[n] = '\0';
	if (probed || !memchr(buf, '\0', n < BINARY_PROBE ? n : BINARY_PROBE))
		go = grep_buf(g, rel, buf, n);
	free(buf);
	return go;
}

static int grep_visit(walker *w, int dirfd, const char *name, const char *rel, unsigned char type)
{
	grep_ctx *g = w->ctx;
	if (type != DT_REG)
		return 1; /* symlinks are not followed, devices and fifos not read */
	if (g->has_glob && !patset_match_grep(&g->ps, rel))
		return 1;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 1;
	return grep_fd(g, fd, rel);
}

#ifdef ASP_HAVE_PCRE2
/*
 * Whether a match of `re` inside one line is still a match at the same place inside the
 * whole file, so that the whole buffer may be searched (with ^ $ at newlines): not when
 * it looks around (a lookbehind at a line start sees the newline before it), anchors to
 * the subject (\A \z \Z \G), resets the match start (\K: a match begun in one line could
 * be reported in the next), cannot give back what it took past the newline (atomic
 * groups, possessive quantifiers, \R and \X, which take "\r\n" whole), changes options
 * inline (?-m) or uses verbs (*...). Text
 * that merely looks like these only costs the fast path.
 */
static bool buf_safe(const char *re)
{
	for (const char *q = re; *q; q++) {
		if (q[0] == '\\' && q[1]) {
			if (strchr("AzZGKRX", q[1]))
				return false;
			q++;
		} else if (q[0] == '(' && (q[1] == '*' || (q[1] == '?' && q[2] != ':'))) {
			/* (?i) and (?i:...), common in patterns models write, change no line edge
			 */
			if (q[1] == '?' && q[2] == 'i' && (q[3] == ')' || q[3] == ':'))
				continue;
			return false;
		} else if (strchr("*+?}", q[0]) && q[1] == '+') {
			return false; /* possessive */
		}
	}
	return true;
}
#endif

static asp_status grep_compile(grep_ctx *g, asp_error *err)
{
	const asp_grep_params *p = g->p;
#ifdef ASP_HAVE_PCRE2
	uint32_t opt = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
	if (p->ignore_case)
		opt |= PCRE2_CASELESS;
	if (p->multiline)
		opt |= PCRE2_MULTILINE | PCRE2_DOTALL;
	int ec;
	PCRE2_SIZE eo;
	g->re = pcre2_compile((PCRE2_SPTR)p->regex, PCRE2_ZERO_TERMINATED, opt, &ec, &eo, NULL);
	if (!g->re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(ec, msg, sizeof msg);
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "grep: regex at offset %zu: %s (PCRE2 syntax)", (size_t)eo,
		                     (const char *)msg);
	}
	pcre2_jit_compile(g->re, PCRE2_JIT_COMPLETE); /* optional: without JIT it interprets */
	pcre2_compile_context *cc = NULL;
	if (!p->multiline && buf_safe(p->regex) && (cc = pcre2_compile_context_create(NULL))) {
		/* ^ and $ at exactly the '\n' that split the lines, whatever the library's default
		 */
		pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
		g->re_buf = pcre2_compile((PCRE2_SPTR)p->regex, PCRE2_ZERO_TERMINATED,
		                          opt | PCRE2_MULTILINE, &ec, &eo, cc);
		if (g->re_buf)
			pcre2_jit_compile(g->re_buf, PCRE2_JIT_COMPLETE);
		pcre2_compile_context_free(cc);
	}
	g->md = pcre2_match_data_create_from_pattern(g->re, NULL);
	if (!g->md) {
		pcre2_code_free(g->re_buf);
		pcre2_code_free(g->re);
		return local_oom("grep", err);
	}
#else
	int flags =
	    REG_EXTENDED | (p->ignore_case ? REG_ICASE : 0) | (p->multiline ? 0 : REG_NEWLINE);
	int rc = regcomp(&g->re, p->regex, flags);
	if (rc != 0) {
		char msg[160];
		regerror(rc, &g->re, msg, sizeof msg);
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "grep: regex: %s (POSIX extended syntax)", msg);
	}
	/* with REG_NEWLINE only a newline in the pattern could match one */
	g->re_buf = !p->multiline && !strchr(p->regex, '\n');
#endif
	return ASP_OK;
}

static void grep_free_re(grep_ctx *g)
{
#ifdef ASP_HAVE_PCRE2
	pcre2_match_data_free(g->md);
	pcre2_code_free(g->re_buf);
	pcre2_code_free(g->re);
#else
	regfree(&g->re);
	free(g->line);
#endif
}

const char *local_grep_dialect(void)
{
#ifdef ASP_HAVE_PCRE2
	return "grep-pcre2";
#else
	return "grep-ere";
#endif
}

asp_status asp_local_grep(void *self, const asp_grep_params *p, asp_grep_result *r, asp_arena *a,
                          asp_error *err)
{
	asp_local *l = self;
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("grep", "path", p->path, err);
	if (st)
		return st;
	if (!p->regex)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "grep: field 'regex' is required");
	grep_ctx g = {.p = p, .a = a, .root = p->path, .budget = l->payload_budget};
	if (!p->mode || strcmp(p->mode, "files") == 0)
		g.mode = MODE_FILES;
	else if (strcmp(p->mode, "content") == 0)
		g.mode = MODE_CONTENT;
	else if (strcmp(p->mode, "count") == 0)
		g.mode = MODE_COUNT;
	else
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "grep: mode '%s' is not files, content or count", p->mode);
	if ((st = grep_compile(&g, err)))
		return st;
	if (p->glob && (st = patset_init(&g.ps, "grep", p->glob, err))) {
		grep_free_re(&g);
		return st;
	}
	g.has_glob = p->glob != NULL;
	int fd;
	bool is_dir;
	st = open_root("grep", p->path, &fd, &is_dir, err);
	if (!st) {
		uint64_t ms = p->timeout_ms ? p->timeout_ms : GREP_DEFAULT_MS;
		g.deadline_ns = local_now_ns() + ms * NS_PER_MS;
		/* hidden names are entered only when the glob names one */
		walker w = {.hidden = g.has_glob && g.ps.any_hid,
		            .sorted = true,
		            .deadline_ns = g.deadline_ns,
		            .visit = grep_visit,
		            .ctx = &g};
		if (is_dir) {
			char rel[PATH_MAX] = "";
			walk(&w, fd, rel, 0);
		} else {
			g.root_is_file = true;
			grep_fd(&g, fd, "");
		}
		if (w.timed_out || g.timed_out)
			g.truncated = true;
	}
	grep_free_re(&g);
	patset_free(&g.ps);
	void *v = g.mode == MODE_FILES     ? (void *)g.files
	          : g.mode == MODE_CONTENT ? (void *)g.matches
	                                   : (void *)g.counts;
	if (v && asp_arena_adopt(a, v) < 0) {
		free(v);
		g.oom = true;
	}
	if (g.too_large && asp_arena_adopt(a, g.too_large) < 0) {
		free(g.too_large);
		g.oom = true;
	}
	if (g.undecided && asp_arena_adopt(a, g.undecided) < 0) {
		free(g.undecided);
		g.oom = true;
	}
	if (st)
		return st;
	if (g.oom)
		return local_oom("grep", err);
	r->truncated = g.truncated;
	r->has_too_large = g.nlarge > 0;
	r->too_large = (asp_strv){g.too_large, g.nlarge};
	r->has_undecided = g.nundecided > 0;
	r->undecided = (asp_strv){g.undecided, g.nundecided};
	if (g.mode == MODE_FILES) {
		r->has_files = true;
		r->files = (asp_strv){g.files, g.n};
	} else if (g.mode == MODE_CONTENT) {
		r->has_matches = true;
		r->matches = (asp_grep_match_array){g.matches, g.n};
	} else {
		r->has_counts = true;
		r->counts = (asp_grep_count_array){g.counts, g.n};
	}
	return ASP_OK;
}
