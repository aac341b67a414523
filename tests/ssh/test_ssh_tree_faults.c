/*
 * Trees when things go wrong (docs/design.md, "Trees as one stream"), over native SSH
 * with tar, native SSH without it (SFTP) and agent mode, against real sshd servers:
 *
 * - a tree_write whose connection is cut mid-stream leaves no temporary directory (the
 *   sandbox side removes it once the connection is gone);
 * - a stale temporary (its owner's pid no longer runs) is removed by the next tree_write
 *   into the same parent, and one whose owner runs is kept;
 * - a cancel, or sftp-server's death, while a write is feeding the stream ends it and
 *   removes the temporary before proc_wait (or the write) answers; a client freed then
 *   returns promptly and the sandbox side removes the temporary;
 * - a tree_read stalled by its reader or by the sandbox (a stopped tar, sftp-server or
 *   asp-agent) does not hold up asp_client_free, and leaks nothing (the sanitizer build
 *   runs this too).
 *
 * The sandbox is this machine, so the tests look at its folders directly.
 * ASP_TEST_ONLY=WORD runs the cases whose names contain WORD.
 */
#include "asp/asp.h"
#include "asp/tar.h"
#include "sshd_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__);                     \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One way in: which server, and agent mode or not. */
typedef struct way {
	const char *name;
	sshd_fixture *fx;
	const char *agent; /* NULL: native */
} way;

static asp_client *open_client(const way *w, asp_config **cfg, const char *extra)
{
	char json[4096];
	sshd_config_json(w->fx, w->agent, extra, json, sizeof json);
	asp_error err;
	*cfg = NULL;
	if (asp_config_parse(json, strlen(json), NULL, cfg, &err) != ASP_OK) {
		fprintf(stderr, "  config: %s\n", err.message);
		return NULL;
	}
	asp_client *c = NULL;
	if (asp_client_open(*cfg, &c, &err) != ASP_OK) {
		fprintf(stderr, "  client: %s\n", err.message);
		asp_config_free(*cfg);
		*cfg = NULL;
		return NULL;
	}
	return c;
}

/* ---- the stream ------------------------------------------------------------------- */

typedef struct tb {
	uint8_t *p;
	size_t len, cap;
} tb;

static void tb_put(tb *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np)
			abort();
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void tb_member(tb *b, asp_tar_type t, const char *path, const uint8_t *data, size_t n)
{
	asp_tar_member m = {t, path, NULL, t == ASP_TAR_DIR ? 0755 : 0644, 1700000000, n};
	uint8_t hdr[ASP_TAR_HEADER_MAX];
	asp_error err;
	size_t hn = asp_tar_header(&m, hdr, sizeof hdr, &err);
	if (!hn)
		abort();
	tb_put(b, hdr, hn);
	if (n) {
		tb_put(b, data, n);
		static const uint8_t zero[ASP_TAR_BLOCK];
		tb_put(b, zero, asp_tar_padding(n));
	}
}

static void tb_end(tb *b)
{
	static const uint8_t zero[ASP_TAR_END_BYTES];
	tb_put(b, zero, sizeof zero);
}

/* A root, a directory, and `files` files of `size` bytes in it. */
static void tb_tree(tb *b, int files, size_t size)
{
	uint8_t *data = malloc(size ? size : 1);
	for (size_t i = 0; i < size; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	tb_member(b, ASP_TAR_DIR, "", NULL, 0);
	tb_member(b, ASP_TAR_DIR, "d", NULL, 0);
	for (int i = 0; i < files; i++) {
		char name[32];
		snprintf(name, sizeof name, "d/f%03d", i);
		tb_member(b, ASP_TAR_FILE, name, data, size);
	}
	free(data);
}

/* ---- the sandbox's folders (this machine's) --------------------------------------- */

static void rm_rf(const char *path)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "  (could not remove %s)\n", path);
}

static void mk_scratch(char *out, size_t cap, const char *what)
{
	snprintf(out, cap, "/tmp/asp-tf-%s-XXXXXX", what);
	if (!mkdtemp(out))
		abort();
}

/* Entries of `dir` whose names contain `part`; the first into `first`. */
static int entries_with(const char *dir, const char *part, char *first, size_t cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	if (first && cap)
		first[0] = '\0';
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (part && !strstr(de->d_name, part))
			continue;
		if (!n && first)
			snprintf(first, cap, "%s", de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* Waits up to `ms` for `dir` to hold no entry containing `part`. */
static bool wait_no_entries(const char *dir, const char *part, long long ms)
{
	long long end = now_ms() + ms;
	while (entries_with(dir, part, NULL, 0) > 0) {
		if (now_ms() >= end)
			return false;
		usleep(20 * 1000);
	}
	return true;
}

static bool wait_entries(const char *dir, const char *part, long long ms)
{
	long long end = now_ms() + ms;
	while (entries_with(dir, part, NULL, 0) <= 0) {
		if (now_ms() >= end)
			return false;
		usleep(20 * 1000);
	}
	return true;
}

static void mkdir_p(const char *path)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "mkdir -p -- '%s'", path);
	if (system(cmd) != 0)
		abort();
}

/* A pid that ran and no longer does. */
static pid_t dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return p;
}

/* ---- cases ------------------------------------------------------------------------ */

/*
 * Half a stream into `t`, then the connection is killed: the sandbox side removes the
 * temporary (bounded), and nothing else is left beside the target.
 */
static void cut_connection(const way *w)
{
	char dir[256], t[300];
	mk_scratch(dir, sizeof dir, "cut");
	snprintf(t, sizeof t, "%s/t", dir);
	asp_config *cfg;
	asp_client *c = open_client(w, &cfg, NULL);
	CHECK(c, "%s: no client", w->name);
	if (!c)
		goto out;
	tb b = {0};
	tb_tree(&b, 8, 100000);
	asp_arena *a = asp_arena_new();
	asp_tree_write_params p;
	asp_tree_write_params_init(&p);
	p.path = t;
	p.data = (asp_bytes){b.p, b.len / 2};
	asp_tree_write_result r;
	asp_error err;
	asp_status st = asp_tree_write(c, &p, &r, a, &err);
	CHECK(st == ASP_OK, "%s: tree_write: %s", w->name, err.message);
	/* the members written so far are in the temporary (over SFTP they are in flight) */
	CHECK(wait_entries(dir, ".asp-tree-", 20000), "%s: no temporary in %s", w->name, dir);
	if (st == ASP_OK) {
		asp_proc_wait_params wp;
		asp_proc_wait_params_init(&wp);
		wp.proc = r.proc;
		wp.timeout_ms = 200;
		asp_proc_wait_result wr;
		(void)asp_proc_wait(c, &wp, &wr, a, &err); /* the first members are in */
	}
	CHECK(sshd_kill_sessions(w->fx) > 0, "%s: no session to kill", w->name);
	char left[256];
	bool gone = wait_no_entries(dir, NULL, 20000);
	entries_with(dir, NULL, left, sizeof left);
	CHECK(gone, "%s: a cut connection left %s in %s", w->name, left, dir);
	asp_arena_free(a);
	free(b.p);
	asp_client_free(c);
	asp_config_free(cfg);
out:
	rm_rf(dir);
}

/*
 * Temporaries of a dead pid beside the target (absent) and inside it (present) are
 * removed by the next tree_write there; one whose pid runs (this process's) is kept.
 */
static void stale_reaped(const way *w)
{
	char dir[256], t[300], dead[400], live[400], dead_in[400];
	mk_scratch(dir, sizeof dir, "stale");
	snprintf(t, sizeof t, "%s/t", dir);
	snprintf(dead, sizeof dead, "%s/.t.asp-tree-%x-0123456789abcdef/d", dir,
	         (unsigned)dead_pid());
	snprintf(live, sizeof live, "%s/.t.asp-tree-%x-fedcba9876543210/d", dir,
	         (unsigned)getpid());
	mkdir_p(dead);
	mkdir_p(live);
	asp_config *cfg;
	asp_client *c = open_client(w, &cfg, NULL);
	CHECK(c, "%s: no client", w->name);
	if (!c)
		goto out;
	asp_arena *a = asp_arena_new();
	tb b = {0};
	tb_tree(&b, 2, 10);
	tb_end(&b);
	asp_tree_write_params p;
	asp_tree_write_params_init(&p);
	p.path = t;
	p.data = (asp_bytes){b.p, b.len};
	p.eof = true;
	asp_tree_write_result r;
	asp_error err;
	asp_status st = asp_tree_write(c, &p, &r, a, &err);
	CHECK(st == ASP_OK, "%s: tree_write: %s", w->name, err.message);
	char name[300];
	snprintf(name, sizeof name, ".t.asp-tree-%x-", (unsigned)getpid());
	CHECK(entries_with(dir, ".asp-tree-", NULL, 0) == 1 &&
	          entries_with(dir, name, NULL, 0) == 1,
	      "%s: beside the target, the dead temporary stayed or the live one went", w->name);
	/* inside the existing target */
	snprintf(dead_in, sizeof dead_in, "%s/.asp-tree-%x-00aa/d", t, (unsigned)dead_pid());
	mkdir_p(dead_in);
	st = asp_tree_write(c, &p, &r, a, &err);
	CHECK(st == ASP_OK, "%s: tree_write into %s: %s", w->name, t, err.message);
	CHECK(entries_with(t, ".asp-tree-", NULL, 0) == 0,
	      "%s: the dead temporary inside the target stayed", w->name);
	asp_arena_free(a);
	free(b.p);
	asp_client_free(c);
	asp_config_free(cfg);
out:
	rm_rf(dir);
}

typedef struct feeder {
	asp_client *c;
	uint64_t proc;
	const tb *b;
	size_t from;
	_Atomic int writes; /* returned */
	asp_status st;
	asp_error err;
} feeder;

/* The rest of the stream in 8 MiB writes, without its end. */
static void *feed_rest(void *arg)
{
	feeder *f = arg;
	asp_arena *a = asp_arena_new();
	f->st = ASP_OK;
	for (size_t off = f->from; off < f->b->len && f->st == ASP_OK;) {
		size_t n = f->b->len - off < (8u << 20) ? f->b->len - off : (8u << 20);
		asp_proc_write_params p;
		asp_proc_write_params_init(&p);
		p.proc = f->proc;
		p.data = (asp_bytes){f->b->p + off, n};
		p.has_offset = true;
		p.offset = off;
		asp_proc_write_result r;
		f->st = asp_proc_write(f->c, &p, &r, a, &f->err);
		off += n;
		f->writes++;
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return NULL;
}

typedef enum mid { MID_CANCEL, MID_SFTP_DIES, MID_FREE } mid;

/*
 * Over SFTP, while a write is inside the stream (sftp-server stopped, so the write waits
 * for room in the writer):
 * - MID_CANCEL: KILL; the write gives up, the handle ends with KILL and the temporary
 *   is gone when proc_wait answers;
 * - MID_SFTP_DIES: sftp-server is killed; the write fails (the connection still up) and
 *   the temporary is gone when it answers;
 * - MID_FREE: asp_client_free from this thread; it returns within 10 s and the sandbox
 *   side removes the temporary once the connection is gone.
 */
static void mid_feed(const way *w, mid how)
{
	static const char *const what[] = {"a cancel", "sftp-server's death", "a free"};
	char dir[256], t[300];
	mk_scratch(dir, sizeof dir, "mid");
	snprintf(t, sizeof t, "%s/t", dir);
	asp_config *cfg;
	asp_client *c = open_client(w, &cfg, NULL);
	CHECK(c, "%s: no client", w->name);
	if (!c)
		goto out;
	asp_arena *a = asp_arena_new();
	tb b = {0};
	tb_tree(&b, 48, 1u << 20); /* 48 MiB: more than the writer holds */
	asp_tree_write_params p;
	asp_tree_write_params_init(&p);
	p.path = t;
	p.data = (asp_bytes){b.p, 2 * ASP_TAR_BLOCK}; /* the root and "d" */
	asp_tree_write_result r;
	asp_error err;
	asp_status st = asp_tree_write(c, &p, &r, a, &err);
	CHECK(st == ASP_OK, "%s: tree_write: %s", w->name, err.message);
	if (st != ASP_OK)
		goto done;
	/* the directory "d" is made over SFTP: its sftp-server runs */
	long long up = now_ms() + 20000;
	while (sshd_signal_sftp(w->fx, 0) <= 0 && now_ms() < up)
		usleep(20 * 1000);
	CHECK(sshd_signal_sftp(w->fx, SIGSTOP) > 0, "%s: no sftp-server to stop", w->name);
	feeder f = {.c = c, .proc = r.proc, .b = &b, .from = p.data.len};
	pthread_t th;
	pthread_create(&th, NULL, feed_rest, &f);
	/* the first 32 MiB fit what the writer holds; the next write waits for room */
	long long end = now_ms() + 20000;
	while (f.writes < 4 && now_ms() < end)
		usleep(20 * 1000);
	CHECK(f.writes == 4, "%s: %d writes returned, not 4", w->name, (int)f.writes);
	long long t0 = now_ms();
	if (how == MID_CANCEL) {
		asp_proc_signal_params sp;
		asp_proc_signal_params_init(&sp);
		sp.proc = r.proc;
		sp.signal = "KILL";
		asp_proc_signal_result sr;
		st = asp_proc_signal(c, &sp, &sr, a, &err);
		CHECK(st == ASP_OK, "%s: proc_signal: %s", w->name, err.message);
		sshd_signal_sftp(w->fx, SIGCONT);
	} else if (how == MID_SFTP_DIES) {
		sshd_signal_sftp(w->fx, SIGKILL);
		sshd_signal_sftp(w->fx, SIGCONT);
	} else {
		asp_client_free(c);
		c = NULL;
		long long took = now_ms() - t0;
		CHECK(took < 10000, "%s: asp_client_free mid-write took %lld ms", w->name, took);
		sshd_signal_sftp(w->fx, SIGCONT);
	}
	pthread_join(th, NULL);
	CHECK(f.st != ASP_OK, "%s: the write went on after %s", w->name, what[how]);
	if (how == MID_SFTP_DIES) /* the failed write has removed the temporary */
		CHECK(entries_with(dir, NULL, NULL, 0) == 0,
		      "%s: a write failed by sftp-server's death left entries in %s (%s)", w->name,
		      dir, f.err.message);
	if (how == MID_CANCEL) {
		asp_proc_wait_params wp;
		asp_proc_wait_params_init(&wp);
		wp.proc = r.proc;
		wp.timeout_ms = 20000;
		asp_proc_wait_result wr;
		st = asp_proc_wait(c, &wp, &wr, a, &err);
		CHECK(st == ASP_OK && wr.exit_code == -1, "%s: proc_wait after KILL: %s, exit %lld",
		      w->name, st ? err.message : "ok", st ? 0LL : (long long)wr.exit_code);
		CHECK(entries_with(dir, NULL, NULL, 0) == 0,
		      "%s: a cancelled write left entries in %s", w->name, dir);
	}
	if (how == MID_FREE)
		CHECK(wait_no_entries(dir, NULL, 20000),
		      "%s: a client freed mid-write left its temporary in %s", w->name, dir);
	fprintf(stderr, "  [%s] %s mid-write: ended in %lld ms\n", w->name, what[how],
	        now_ms() - t0);
done:
	asp_arena_free(a);
	free(b.p);
	asp_client_free(c);
	asp_config_free(cfg);
out:
	rm_rf(dir);
}

/* ---- a stalled tree_read ---------------------------------------------------------- */

typedef struct reader {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t bytes;
	bool ended;
	long long stall_ms;    /* the first chunk's callback waits this long for `release` */
	bool release, in_call; /* (the callback is in its stall) */
} reader;

static void r_output(void *user, uint64_t proc, asp_stream s, uint64_t off, const uint8_t *d,
                     size_t n)
{
	(void)proc, (void)s, (void)off, (void)d;
	reader *r = user;
	pthread_mutex_lock(&r->mu);
	bool first = r->bytes == 0;
	r->bytes += n;
	pthread_cond_broadcast(&r->cv);
	if (first && r->stall_ms) {
		/* a reader that stops consuming for a while */
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += r->stall_ms / 1000;
		r->in_call = true;
		pthread_cond_broadcast(&r->cv);
		while (!r->release)
			if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
				break;
		r->in_call = false;
	}
	pthread_mutex_unlock(&r->mu);
}

static void r_exit(void *user, const asp_exit_event *ev)
{
	(void)ev;
	reader *r = user;
	pthread_mutex_lock(&r->mu);
	r->ended = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void r_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc, (void)err;
	r_exit(user, NULL);
}

static const asp_proc_callbacks reader_cb = {
    .on_output = r_output, .on_exit = r_exit, .on_lost = r_lost};

typedef struct closer {
	asp_client *c;
	long long took;
	reader *r;
} closer;

static void *close_it(void *arg)
{
	closer *k = arg;
	long long t0 = now_ms();
	asp_client_free(k->c);
	k->took = now_ms() - t0;
	return NULL;
}

/* Makes `dir` hold `files` files of `mib` MiB. */
static void make_src(const char *dir, int files, int mib)
{
	char cmd[600];
	for (int i = 0; i < files; i++) {
		snprintf(cmd, sizeof cmd,
		         "head -c %d /dev/urandom > '%s/f%02d' 2>/dev/null || exit 1", mib << 20,
		         dir, i);
		if (system(cmd) != 0)
			abort();
	}
}

/*
 * A tree_read in progress, then stalled: `stop` names the sandbox's process to SIGSTOP
 * once the first bytes came (NULL: the reader stalls instead, its callback waiting up to
 * 30 s). asp_client_free from another thread returns within 10 s.
 */
static void stalled_read(const way *w, const char *stop)
{
	char dir[256];
	mk_scratch(dir, sizeof dir, "read");
	make_src(dir, 8, 4);
	asp_config *cfg;
	asp_client *c = open_client(w, &cfg, NULL);
	CHECK(c, "%s: no client", w->name);
	if (!c) {
		rm_rf(dir);
		return;
	}
	reader r = {.stall_ms = stop ? 0 : 30000};
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	asp_tree_read_params p;
	asp_tree_read_params_init(&p);
	p.path = dir;
	uint64_t proc = 0;
	asp_error err;
	asp_status st = asp_tree_read_start(c, &p, &reader_cb, &r, &proc, &err);
	CHECK(st == ASP_OK, "%s: tree_read: %s", w->name, st ? err.message : "");
	int stopped = 0;
	if (st == ASP_OK) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 20;
		pthread_mutex_lock(&r.mu);
		while (!(stop ? r.bytes > 0 : r.in_call) && !r.ended)
			if (pthread_cond_timedwait(&r.cv, &r.mu, &dl) == ETIMEDOUT)
				break;
		bool going = stop ? r.bytes > 0 : r.in_call;
		pthread_mutex_unlock(&r.mu);
		CHECK(going, "%s: the tree_read did not start", w->name);
		if (stop)
			stopped = sshd_signal_named(w->fx, stop, SIGSTOP);
		CHECK(!stop || stopped > 0, "%s: no %s to stop", w->name, stop);
	}
	closer k = {.c = c, .r = &r};
	pthread_t th;
	long long t0 = now_ms();
	pthread_create(&th, NULL, close_it, &k);
	if (!stop) {
		/* the reader comes back after a while, as a slow disk does */
		usleep(1000 * 1000);
		pthread_mutex_lock(&r.mu);
		r.release = true;
		pthread_cond_broadcast(&r.cv);
		pthread_mutex_unlock(&r.mu);
	}
	pthread_join(th, NULL);
	long long took = now_ms() - t0;
	if (stopped)
		sshd_signal_named(w->fx, stop, SIGCONT);
	CHECK(took < 10000, "%s: asp_client_free took %lld ms with the read stalled (%s)", w->name,
	      took, stop ? stop : "by its reader");
	fprintf(stderr, "  [%s] closed during a read stalled %s: %lld ms, %llu bytes came\n",
	        w->name, stop ? stop : "by its reader", took, (unsigned long long)r.bytes);
	pthread_cond_destroy(&r.cv);
	pthread_mutex_destroy(&r.mu);
	asp_config_free(cfg);
	rm_rf(dir);
}

/* ---- main ------------------------------------------------------------------------- */

static bool wanted(const char *name)
{
	const char *only = getenv("ASP_TEST_ONLY");
	return !only || !only[0] || strstr(name, only);
}

#define RUN(name, call)                                                                            \
	do {                                                                                       \
		if (wanted(name)) {                                                                \
			int before = failures;                                                     \
			long long t0 = now_ms();                                                   \
			call;                                                                      \
			printf("%s  %s (%lld ms)\n", failures == before ? "PASS" : "FAIL", name,   \
			       now_ms() - t0);                                                     \
		}                                                                                  \
	} while (0)

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	static sshd_fixture tar_fx, notar_fx;
	if (sshd_start(&tar_fx) < 0 || sshd_start_no_tar(&notar_fx) < 0) {
		fprintf(stderr, "test_ssh_tree_faults: %s%s\n", tar_fx.why, notar_fx.why);
		sshd_stop(&tar_fx);
		sshd_stop(&notar_fx);
		return 1;
	}
	const char *agent = getenv("ASP_AGENT");
	way ways[] = {
	    {"sftp", &notar_fx, NULL},
	    {"tar", &tar_fx, NULL},
	    {"agent", &tar_fx, agent},
	};
	size_t nways = agent ? 3 : 2;
	for (size_t i = 0; i < nways; i++) {
		char name[64];
		snprintf(name, sizeof name, "cut_connection_%s", ways[i].name);
		RUN(name, cut_connection(&ways[i]));
		snprintf(name, sizeof name, "stale_reaped_%s", ways[i].name);
		RUN(name, stale_reaped(&ways[i]));
	}
	RUN("cancel_mid_feed_sftp", mid_feed(&ways[0], MID_CANCEL));
	RUN("sftp_dies_mid_feed_sftp", mid_feed(&ways[0], MID_SFTP_DIES));
	RUN("free_mid_feed_sftp", mid_feed(&ways[0], MID_FREE));
	RUN("stalled_read_reader_sftp", stalled_read(&ways[0], NULL));
	RUN("stalled_read_server_sftp", stalled_read(&ways[0], "sftp-server"));
	RUN("stalled_read_reader_tar", stalled_read(&ways[1], NULL));
	RUN("stalled_read_server_tar", stalled_read(&ways[1], "tar"));
	if (agent) {
		RUN("stalled_read_reader_agent", stalled_read(&ways[2], NULL));
		RUN("stalled_read_server_agent", stalled_read(&ways[2], "asp-agent"));
	}
	sshd_stop(&tar_fx);
	sshd_stop(&notar_fx);
	if (failures)
		fprintf(stderr, "test_ssh_tree_faults: %d checks failed\n", failures);
	return failures ? 1 : 0;
}
