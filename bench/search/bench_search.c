/*
 * Search in the sandbox, in one run over one tree of ~20,000 files
 * (a copy of /usr/include and /usr/share/perl* in a temp folder, page cache warm):
 *   - grep: the `grep` op in content mode (every matching line with its number) against
 *     GNU `grep -rn` run here on the same tree;
 *   - glob: the `glob` op (`**` / `*.h`: paths newest first) against `find -name`;
 *   - each over stdio (asp-agent --stdio) and SSH agent mode (the test fixture's sshd on
 *     loopback, asp-agent as the remote agent), and the same search done the naive way
 *     through protocol 1's ops: `list` of every directory, `read` of every file (grep),
 *     matched here, one call at a time, as a harness without the ops would.
 * Prints medians and ratios as a Markdown table for docs/benchmarks.md. A program, never
 * a timed test.
 *
 *   bench_search ASP_AGENT [runs] [--tree DIR] [--only grep|glob]
 *
 * runs: timed runs per row (default 3), after one untimed run that warms the cache.
 * --tree DIR searches DIR as it is instead of a fresh copy (quick looks; not removed);
 * --only runs the grep or the glob rows alone.
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "bench_util.h"
#include "sshd_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define GREP_PATTERN "PTHREAD_MUTEX_INITIALIZER"
#define GLOB_PATTERN "*.h"
#define MAX_RUNS     15

static char tree[300];
static int runs = 3;

/* Runs a shell line with stdout to /dev/null; its exit status, or -1. */
static int shell(const char *line)
{
	const char *argv[] = {"/bin/bash", "-c", line, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -1;
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The first line of a shell line's output as a number (counts: `... | wc -l`). */
static long shell_count(const char *line)
{
	FILE *f = popen(line, "r");
	if (!f)
		return -1;
	long n = -1;
	if (fscanf(f, "%ld", &n) != 1)
		n = -1;
	pclose(f);
	return n;
}

/* ---- what is measured: each returns how many it found, -1 on failure ------------- */

typedef long (*search_fn)(asp_client *c);

static long local_grep(asp_client *c)
{
	(void)c;
	char line[600];
	snprintf(line, sizeof line, "grep -rn -- '%s' '%s'", GREP_PATTERN, tree);
	int rc = shell(line);
	return rc == 0 || rc == 1 ? 0 : -1;
}

static long local_find(asp_client *c)
{
	(void)c;
	char line[600];
	snprintf(line, sizeof line, "find '%s' -name '%s'", tree, GLOB_PATTERN);
	return shell(line) == 0 ? 0 : -1;
}

static long op_grep(asp_client *c)
{
	asp_arena *a = asp_arena_new();
	asp_grep_params p;
	asp_grep_params_init(&p);
	p.path = tree;
	p.regex = GREP_PATTERN;
	p.mode = "content";
	p.max_matches = 1000000;
	asp_grep_result r;
	asp_error err;
	long n = -1;
	if (asp_grep(c, &p, &r, a, &err) != ASP_OK)
		fprintf(stderr, "grep: %s\n", err.message);
	else if (r.truncated)
		fprintf(stderr, "grep: truncated\n");
	else
		n = (long)r.matches.count;
	asp_arena_free(a);
	return n;
}

static long op_glob(asp_client *c)
{
	asp_arena *a = asp_arena_new();
	asp_glob_params p;
	asp_glob_params_init(&p);
	p.path = tree;
	p.pattern = GLOB_PATTERN;
	p.max_results = 1000000;
	asp_glob_result r;
	asp_error err;
	long n = -1;
	if (asp_glob(c, &p, &r, a, &err) != ASP_OK)
		fprintf(stderr, "glob: %s\n", err.message);
	else if (r.truncated)
		fprintf(stderr, "glob: truncated\n");
	else
		n = (long)r.paths.count;
	asp_arena_free(a);
	return n;
}

/* The naive way: list each directory, and for grep read each file, one call at a time. */
typedef struct naive {
	asp_client *c;
	bool grep;
	long found;
	bool failed;
	int64_t *mtimes; /* glob: the matches' times, sorted at the end as glob's are */
	size_t n, cap;
} naive;

/* Whole file by read calls; counts lines holding the pattern (text files only). */
static void naive_read(naive *nv, const char *path, asp_arena *a)
{
	asp_error err;
	char *buf = NULL;
	size_t len = 0;
	uint64_t off = 0;
	for (;;) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = path;
		p.offset = off;
		asp_read_result r;
		if (asp_read(nv->c, &p, &r, a, &err) != ASP_OK) {
			free(buf);
			return; /* unreadable: skipped, as grep -r says and goes on */
		}
		char *nb = realloc(buf, len + r.data.len + 1);
		if (!nb) {
			free(buf);
			nv->failed = true;
			return;
		}
		buf = nb;
		memcpy(buf + len, r.data.data, r.data.len);
		len += r.data.len;
		off += r.data.len;
		bool eof = r.eof || r.data.len == 0;
		asp_arena_reset(a);
		if (eof)
			break;
	}
	if (!buf)
		return;
	buf[len] = '\0';
	if (memchr(buf, '\0', len < 8192 ? len : 8192) == NULL) {
		size_t pl = strlen(GREP_PATTERN);
		for (const char *q = buf, *end = buf + len; q < end;) {
			const char *hit = memmem(q, (size_t)(end - q), GREP_PATTERN, pl);
			if (!hit)
				break;
			nv->found++;
			const char *nl = memchr(hit, '\n', (size_t)(end - hit));
			q = nl ? nl + 1 : end;
		}
	}
	free(buf);
}

static void naive_walk(naive *nv, const char *dir)
{
	asp_arena *a = asp_arena_new();
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = dir;
	asp_list_result r;
	asp_error err;
	if (asp_list(nv->c, &p, &r, a, &err) != ASP_OK) {
		asp_arena_free(a);
		return;
	}
	size_t dl = strlen(dir);
	asp_arena *fa = asp_arena_new();
	for (size_t i = 0; i < r.entries.count && !nv->failed; i++) {
		const asp_list_entry *e = &r.entries.items[i];
		size_t nl = strlen(e->name);
		char *path = malloc(dl + nl + 2);
		if (!path) {
			nv->failed = true;
			break;
		}
		memcpy(path, dir, dl);
		path[dl] = '/';
		memcpy(path + dl + 1, e->name, nl + 1);
		if (!strcmp(e->type, "dir")) {
			if (strcmp(e->name, ".git"))
				naive_walk(nv, path);
		} else if (nv->grep) {
			if (!strcmp(e->type, "file"))
				naive_read(nv, path, fa);
		} else if (fnmatch(GLOB_PATTERN, e->name, 0) == 0) {
			if (nv->n == nv->cap) {
				size_t nc = nv->cap ? 2 * nv->cap : 1024;
				int64_t *m = realloc(nv->mtimes, nc * sizeof *m);
				if (!m) {
					nv->failed = true;
					free(path);
					break;
				}
				nv->mtimes = m;
				nv->cap = nc;
			}
			nv->mtimes[nv->n++] = e->mtime_ns;
		}
		free(path);
	}
	asp_arena_free(fa);
	asp_arena_free(a);
}

static int cmp_i64_desc(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
	return a < b ? 1 : a > b ? -1 : 0;
}

static long naive_search(asp_client *c, bool grep)
{
	naive nv = {.c = c, .grep = grep};
	naive_walk(&nv, tree);
	if (!grep && nv.n > 1)
		qsort(nv.mtimes, nv.n, sizeof *nv.mtimes, cmp_i64_desc);
	free(nv.mtimes);
	if (nv.failed)
		return -1;
	return grep ? nv.found : (long)nv.n;
}

static long naive_grep(asp_client *c)
{
	return naive_search(c, true);
}

static long naive_glob(asp_client *c)
{
	return naive_search(c, false);
}

/*
 * Median ms of `n` timed calls, after one untimed when `warm`; *found from the last. The
 * naive rows run once, unwarmed (the rows before them warmed the cache): over SSH one
 * takes a quarter of a minute.
 */
static double timed(search_fn f, asp_client *c, int n, bool warm, long *found)
{
	double v[MAX_RUNS];
	if (warm && (*found = f(c)) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		double t0 = now_ms();
		if ((*found = f(c)) < 0)
			return -1;
		v[i] = now_ms() - t0;
	}
	return median(v, n);
}

/* ---- clients ---------------------------------------------------------------------- */

static asp_client *open_json(const char *json, const char *what)
{
	asp_config *cfg;
	asp_error err;
	if (asp_config_parse(json, strlen(json), NULL, &cfg, &err) != ASP_OK) {
		fprintf(stderr, "config (%s): %s\n", what, err.message);
		return NULL;
	}
	asp_client *c = NULL;
	if (asp_client_open_view(asp_config_get(cfg), &c, &err) != ASP_OK)
		fprintf(stderr, "open (%s): %s\n", what, err.message);
	asp_config_free(cfg);
	return c;
}

static asp_client *open_stdio(const char *agent)
{
	char json[1200];
	snprintf(json, sizeof json,
	         "{\"version\": 1, \"transport\": \"stdio\", "
	         "\"stdio\": {\"command\": [\"%s\", \"--stdio\"]}}",
	         agent);
	return open_json(json, "stdio");
}

static asp_client *open_ssh_agent(sshd_fixture *fx, const char *agent)
{
	char json[4096];
	sshd_config_json(fx, agent, NULL, json, sizeof json);
	return open_json(json, "ssh agent mode");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_search ASP_AGENT [runs]\n");
		return 2;
	}
	const char *agent = argv[1], *given = NULL, *only = NULL;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--tree") && i + 1 < argc)
			given = argv[++i];
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else
			runs = atoi(argv[i]);
	}
	if (runs < 1 || runs > MAX_RUNS)
		runs = 3;
	char root[] = "/tmp/asp-bench-search-XXXXXX";
	char line[1200];
	int rc = 0;
	if (given) {
		snprintf(tree, sizeof tree, "%s", given);
	} else {
		if (!mkdtemp(root)) {
			perror("mkdtemp");
			return 1;
		}
		snprintf(tree, sizeof tree, "%s/tree", root);
		snprintf(line, sizeof line,
		         "mkdir -p '%s' && cp -r /usr/include '%s/' && for d in /usr/share/perl*; "
		         "do cp -r \"$d\" '%s/'; done",
		         tree, tree, tree);
		fprintf(stderr, "copying /usr/include and /usr/share/perl* to %s ...\n", tree);
		rc = shell(line);
	}
	snprintf(line, sizeof line, "find '%s' -type f | wc -l", tree);
	long files = shell_count(line);
	snprintf(line, sizeof line, "find '%s' -type d | wc -l", tree);
	long dirs = shell_count(line);
	snprintf(line, sizeof line, "du -sm '%s' | cut -f1", tree);
	long mib = shell_count(line);
	snprintf(line, sizeof line, "grep -rn -- '%s' '%s' | wc -l", GREP_PATTERN, tree);
	long grep_lines = shell_count(line);
	snprintf(line, sizeof line, "find '%s' -name '%s' | wc -l", tree, GLOB_PATTERN);
	long find_lines = shell_count(line);
	if (rc != 0 || files <= 0) {
		fprintf(stderr, "bench_search: could not copy the tree\n");
		return 1;
	}
	fprintf(stderr, "%ld files, %ld directories, %ld MiB; grep -rn: %ld lines, find: %ld\n",
	        files, dirs, mib, grep_lines, find_lines);

	sshd_fixture fx;
	memset(&fx, 0, sizeof fx);
	if (sshd_start(&fx) < 0) {
		fprintf(stderr, "sshd: %s\n", fx.why);
		return 1;
	}
	asp_client *cs = open_stdio(agent), *ca = open_ssh_agent(&fx, agent);
	if (!cs || !ca) {
		sshd_stop(&fx);
		return 1;
	}

	struct row {
		const char *what;
		search_fn f;
		asp_client *c;
		double ms;
		long found;
	} rows[] = {
	    {"GNU `grep -rn` here", local_grep, NULL, 0, 0},
	    {"`grep` op, stdio", op_grep, cs, 0, 0},
	    {"`grep` op, SSH agent mode", op_grep, ca, 0, 0},
	    {"list + read every file, stdio", naive_grep, cs, 0, 0},
	    {"list + read every file, SSH agent mode", naive_grep, ca, 0, 0},
	    {"GNU `find -name` here", local_find, NULL, 0, 0},
	    {"`glob` op, stdio", op_glob, cs, 0, 0},
	    {"`glob` op, SSH agent mode", op_glob, ca, 0, 0},
	    {"list every directory, stdio", naive_glob, cs, 0, 0},
	    {"list every directory, SSH agent mode", naive_glob, ca, 0, 0},
	};
	size_t nrows = sizeof rows / sizeof *rows;
	for (size_t i = 0; i < nrows; i++) {
		if (only && strcmp(only, i < 5 ? "grep" : "glob")) {
			rows[i].ms = -2;
			continue;
		}
		fprintf(stderr, "%s ...\n", rows[i].what);
		bool slow = rows[i].f == naive_grep || rows[i].f == naive_glob;
		rows[i].ms = timed(rows[i].f, rows[i].c, slow ? 1 : runs, !slow, &rows[i].found);
	}

	printf("\nTree: %ld files in %ld directories, %ld MiB (%s); page cache warm; median of "
	       "%d runs after a warm-up (list + read: one run).\n",
	       files, dirs, mib, given ? given : "/usr/include and /usr/share/perl*", runs);
	printf("grep `%s` (content: every matching line, numbered; `grep -rn` printed %ld "
	       "lines); glob `%s` (`find -name` printed %ld paths).\n\n",
	       GREP_PATTERN, grep_lines, GLOB_PATTERN, find_lines);
	printf("| search | found | median | vs the local tool |\n|---|---:|---:|---:|\n");
	for (size_t i = 0; i < nrows; i++) {
		double base = i < 5 ? rows[0].ms : rows[5].ms;
		char found[32] = "";
		if (rows[i].c)
			snprintf(found, sizeof found, "%ld", rows[i].found);
		if (rows[i].ms == -2)
			continue;
		if (rows[i].ms < 0)
			printf("| %s | | failed | |\n", rows[i].what);
		else
			printf("| %s | %s | %.0f ms | %.2f× |\n", rows[i].what, found, rows[i].ms,
			       base > 0 ? rows[i].ms / base : 0);
	}
	asp_client_free(cs);
	asp_client_free(ca);
	sshd_stop(&fx);
	if (!given) {
		snprintf(line, sizeof line, "rm -rf '%s'", root);
		shell(line);
	}
	return 0;
}
