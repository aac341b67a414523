/*
 * The soak: many mixed calls from many threads against one client over the
 * stdio transport, while a killer thread SIGKILLs the current asp-agent at random
 * intervals. Every call is classified afterwards:
 *
 *   ok            the call succeeded and its result was right (content, exit code, ...);
 *   with cause    it failed with transport_error or timeout, or (spawn+proc_wait) with
 *                 not_found from a new responder, and a kill fell in its window:
 *                 [start - GRACE_MS, end] (GRACE_MS: a call may start just after a kill,
 *                 before the client has seen the old pipe close, and go out on it);
 *   without cause any other failure, or one of those with no kill in its window, or a
 *                 wrong result (data that a read gave back that no write put there);
 *   hung          it took longer than its deadline + CONNECT_MS + MARGIN_MS.
 *
 * Each thread owns a directory with four file slots and one directory slot, and tracks
 * what each holds, so every result can be checked: a read must give back the last write
 * that succeeded; after a write that failed with cause the content is unknown, except for
 * an atomic write, which must leave the old or the new content, never a mix.
 *
 * The summary: calls by op and outcome, the client's fds and RSS before and after,
 * processes left (children of this process, and processes anywhere carrying this run's
 * marker in their environment), entries left in the scratch directory that no slot names
 * (temporaries). Exit status 0 only when nothing failed without cause and nothing hung.
 *
 *   soak ASP_AGENT [-n calls] [-t threads] [-i mean_kill_interval_ms] [-s seed] [-k]
 *   (-k: keep the scratch directory; -u: the control, kills not recorded: passes only
 *   when the classification reports failures without cause)
 */
#include "asp/asp.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define CALL_TIMEOUT_MS 5000 /* the config's call_timeout_ms: low, so a lost call shows */
#define EXEC_TIMEOUT_MS 10000
#define GRACE_MS        500
#define CONNECT_MS      20000 /* the stdio transport's connect + hello bound */
#define MARGIN_MS       10000
#define SLOTS           4
#define MAX_THREADS     256
#define MAX_KILLS       4096

enum op {
	OP_EXEC,
	OP_READ,
	OP_WRITE,
	OP_WRITE_ATOMIC,
	OP_STAT,
	OP_LIST,
	OP_MKDIR,
	OP_REMOVE,
	OP_RENAME,
	OP_SPAWN_WAIT,
	OP_COUNT
};
static const char *const op_names[OP_COUNT] = {"exec",   "read",           "write", "write_atomic",
                                               "stat",   "list",           "mkdir", "remove",
                                               "rename", "spawn+proc_wait"};
static const int op_weights[OP_COUNT] = {16, 16, 10, 10, 10, 6, 6, 8, 8, 10};

enum outcome { OK, CAUSE, NO_CAUSE, HUNG, OUTCOMES };
static const char *const outcome_names[OUTCOMES] = {"ok", "with cause", "WITHOUT CAUSE", "HUNG"};

/* One call: what it was, when, how it ended. */
typedef struct rec {
	unsigned char op;
	unsigned char status; /* asp_status */
	bool bad;             /* succeeded, but the result was wrong */
	bool causable;        /* a failure a kill can explain */
	double start_ms, end_ms, bound_ms;
	char why[160];
} rec;

static rec *recs;
static atomic_int next_call;
static int n_calls = 10000, n_threads = 64, kill_mean_ms = 250;
static atomic_bool done;
static double kills[MAX_KILLS];
static atomic_int n_kills;
static bool unrecorded; /* -u: kill without recording it, so the failures show */
static atomic_int n_hidden;
static atomic_int in_flight_start[MAX_THREADS]; /* ms since t0 of the thread's call, or -1 */
static char scratch[4096];
static char marker[64];
static asp_client *client;
static double t0_ms;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6 - t0_ms;
}

static uint64_t rnd(uint64_t *s) /* xorshift64* */
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static void die(const char *what, const asp_error *err)
{
	fprintf(stderr, "soak: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(2);
}

/* ---- the client's own figures ------------------------------------------------------ */

/*
 * The process's descriptors but the library's process-wide ones (`*shared` gets those):
 * the I/O pool's epoll fd and one wake eventfd per thread that has waited on a
 * connection, which stay for the process's life and do not grow with connections.
 */
static int count_fds_shared(int *shared)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0, sh = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], link[64];
		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		ssize_t l = readlink(path, link, sizeof link - 1);
		link[l > 0 ? l : 0] = '\0';
		if (!strcmp(link, "anon_inode:[eventfd]") ||
		    !strcmp(link, "anon_inode:[eventpoll]"))
			sh++;
		else
			n++;
	}
	if (d)
		closedir(d);
	if (shared)
		*shared = sh;
	return n - 1; /* the DIR's own */
}

static int count_fds(void)
{
	return count_fds_shared(NULL);
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* /proc/PID/stat's state, ppid and start time; false when it is gone. */
static bool proc_stat(pid_t pid, char *comm, size_t comm_len, char *state, pid_t *ppid,
                      unsigned long long *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *lp = strchr(buf, '('), *rp = strrchr(buf, ')');
	if (!lp || !rp)
		return false;
	size_t cl = (size_t)(rp - lp - 1) < comm_len - 1 ? (size_t)(rp - lp - 1) : comm_len - 1;
	memcpy(comm, lp + 1, cl);
	comm[cl] = 0;
	int pp = 0;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
	 * cutime cstime priority nice threads itrealvalue starttime */
	if (sscanf(rp + 2,
	           "%c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
	           "%*d %*d %llu",
	           state, &pp, start) != 3)
		return false;
	*ppid = pp;
	return true;
}

/* Calls fn for every live process; stops when fn returns true. */
static void each_proc(bool (*fn)(pid_t pid, void *arg), void *arg)
{
	DIR *d = opendir("/proc");
	for (struct dirent *e; d && (e = readdir(d));) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		if (fn((pid_t)pid, arg))
			break;
	}
	if (d)
		closedir(d);
}

struct newest {
	pid_t pid;
	unsigned long long start;
	int children; /* live children of this process */
};

static bool find_agent(pid_t pid, void *arg)
{
	struct newest *nw = arg;
	char comm[32], state;
	pid_t ppid;
	unsigned long long start;
	if (!proc_stat(pid, comm, sizeof comm, &state, &ppid, &start) || ppid != getpid() ||
	    state == 'Z')
		return false;
	nw->children++;
	if (strcmp(comm, "asp-agent") == 0 && (!nw->pid || start >= nw->start))
		nw->pid = pid, nw->start = start;
	return false;
}

/* Processes anywhere whose environment holds this run's marker. */
static bool find_marked(pid_t pid, void *arg)
{
	char path[64], buf[65536];
	snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	for (size_t i = 0; i < n; i += strnlen(buf + i, n - i) + 1)
		if (strncmp(buf + i, "ASP_SOAK_MARK=", 14) == 0 && i + 14 + strlen(marker) < n &&
		    strcmp(buf + i + 14, marker) == 0 && pid != getpid())
			++*(int *)arg;
	return false;
}

static int marked_procs(void)
{
	int n = 0;
	each_proc(find_marked, &n);
	return n;
}

static int live_children(void)
{
	struct newest nw = {0};
	each_proc(find_agent, &nw);
	return nw.children;
}

/* ---- the killer ---------------------------------------------------------------------- */

static void *killer(void *arg)
{
	uint64_t s = *(uint64_t *)arg;
	while (!atomic_load(&done)) {
		/* uniform in [mean/2, 3*mean/2], slept in steps so the end is seen soon */
		double until =
		    now_ms() + kill_mean_ms / 2.0 + (double)(rnd(&s) % (kill_mean_ms + 1));
		while (!atomic_load(&done) && now_ms() < until)
			usleep(5000);
		if (atomic_load(&done))
			break;
		/* The newest live asp-agent child is the current responder: an older one is
		 * the remains of a connection already failed. */
		struct newest nw = {0};
		each_proc(find_agent, &nw);
		int k = atomic_load(&n_kills);
		if (!nw.pid || k >= MAX_KILLS)
			continue;
		kills[k] = now_ms(); /* before the kill: the window must hold it */
		if (kill(nw.pid, SIGKILL) == 0 && !unrecorded)
			atomic_store(&n_kills, k + 1);
		else if (unrecorded)
			atomic_fetch_add(&n_hidden, 1);
	}
	return NULL;
}

/* ---- the callers --------------------------------------------------------------------- */

enum slot_state { ABSENT, KNOWN, UNKNOWN, EITHER };
typedef struct slot {
	enum slot_state st;
	uint8_t *data, *old; /* KNOWN: data; EITHER: old (NULL: absent) or data */
	size_t len, old_len;
	bool old_absent;
} slot;

typedef struct worker {
	int id;
	uint64_t rng;
	char dir[4200];
	slot s[SLOTS];
	int dir_state; /* the directory slot: 0 absent, 1 present, 2 unknown */
	asp_arena *a;
} worker;

static void slot_set(slot *s, enum slot_state st, uint8_t *data, size_t len)
{
	free(s->data);
	free(s->old);
	s->old = NULL;
	s->st = st, s->data = data, s->len = len;
}

static void path_of(const worker *w, int slot_i, char *out, size_t n)
{
	snprintf(out, n, "%s/f%d", w->dir, slot_i);
}

static uint8_t *make_content(worker *w, int seq, size_t *len)
{
	size_t n = (rnd(&w->rng) % 8 == 0) ? 16384 + rnd(&w->rng) % 200000 : rnd(&w->rng) % 4096;
	n += 32;
	uint8_t *b = malloc(n);
	int h = snprintf((char *)b, n, "t%d-s%d-", w->id, seq);
	for (size_t i = (size_t)h; i < n; i++)
		b[i] = (uint8_t)rnd(&w->rng);
	*len = n;
	return b;
}

static bool same(const asp_bytes *got, const uint8_t *want, size_t len)
{
	return got->len == len && (len == 0 || memcmp(got->data, want, len) == 0);
}

struct spawn_watch {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool ended, lost;
	int64_t exit_code;
	char out[256];
	size_t out_len;
};

static void sw_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	struct spawn_watch *sw = user;
	if (stream != ASP_STREAM_STDOUT)
		return;
	pthread_mutex_lock(&sw->mu);
	if (offset == sw->out_len && sw->out_len + len < sizeof sw->out) {
		memcpy(sw->out + sw->out_len, data, len);
		sw->out_len += len;
	}
	pthread_mutex_unlock(&sw->mu);
}

static void sw_exit(void *user, const asp_exit_event *ev)
{
	struct spawn_watch *sw = user;
	pthread_mutex_lock(&sw->mu);
	sw->ended = true;
	sw->exit_code = ev->exit_code;
	pthread_cond_signal(&sw->cv);
	pthread_mutex_unlock(&sw->mu);
}

static void sw_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc, (void)err;
	struct spawn_watch *sw = user;
	pthread_mutex_lock(&sw->mu);
	sw->ended = sw->lost = true;
	pthread_cond_signal(&sw->cv);
	pthread_mutex_unlock(&sw->mu);
}

#define FAIL(...) (r->bad = true, snprintf(r->why, sizeof r->why, __VA_ARGS__))

/* A file slot's read (or stat: `size_only`) against what the slot should hold. */
static void check_file(rec *r, const slot *s, asp_status st, const asp_bytes *got, uint64_t size,
                       bool size_only)
{
	bool absent_ok = s->st == ABSENT || s->st == UNKNOWN || (s->st == EITHER && s->old_absent);
	if (st == ASP_E_NOT_FOUND) {
		if (absent_ok)
			r->status = ASP_OK;
		else
			FAIL("not_found, but a write succeeded");
		return;
	}
	if (st != ASP_OK)
		return;
	if (s->st == ABSENT)
		FAIL("found a file no write made");
	else if (s->st == KNOWN && (size_only ? size != s->len : !same(got, s->data, s->len)))
		FAIL("content differs from the last write (%" PRIu64 " bytes, want %zu)", size,
		     s->len);
	else if (s->st == EITHER) {
		bool is_new = size_only ? size == s->len : same(got, s->data, s->len);
		bool is_old = !s->old_absent &&
		              (size_only ? size == s->old_len : same(got, s->old, s->old_len));
		if (!is_new && !is_old)
			FAIL("atomic write left neither old nor new content (%" PRIu64 " bytes)",
			     size);
	}
}

static void one_call(worker *w, int seq, rec *r)
{
	asp_error err;
	asp_status st = ASP_OK;
	char p1[4300], p2[4300];
	int op = 0;
	{
		int total = 0, pick;
		for (int i = 0; i < OP_COUNT; i++)
			total += op_weights[i];
		pick = (int)(rnd(&w->rng) % (uint64_t)total);
		while (pick >= op_weights[op])
			pick -= op_weights[op++];
	}
	int si = (int)(rnd(&w->rng) % SLOTS);
	slot *s = &w->s[si];
	path_of(w, si, p1, sizeof p1);
	r->op = (unsigned char)op;
	r->bound_ms = CALL_TIMEOUT_MS + CONNECT_MS + MARGIN_MS;
	r->causable = true;
	r->start_ms = now_ms();
	atomic_store(&in_flight_start[w->id], (int)r->start_ms);

	switch (op) {
	case OP_EXEC: {
		char tok[64], cmd[128];
		snprintf(tok, sizeof tok, "t%d-s%d", w->id, seq);
		/* a short sleep sometimes, so that kills find execs running */
		snprintf(cmd, sizeof cmd, "%sprintf %%s %s; cat", seq % 4 ? "" : "sleep 0.05; ",
		         tok);
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = cmd;
		p.stdin_data.data = (const uint8_t *)"|in";
		p.stdin_data.len = 3;
		p.timeout_ms = EXEC_TIMEOUT_MS;
		r->bound_ms += EXEC_TIMEOUT_MS;
		asp_exec_result res;
		st = asp_exec(client, &p, &res, w->a, &err);
		if (st == ASP_OK) {
			char want[80];
			snprintf(want, sizeof want, "%s|in", tok);
			if (res.exit_code != 0 ||
			    !same(&res.stdout_data, (const uint8_t *)want, strlen(want)))
				FAIL("exec: exit %" PRId64 ", stdout '%.*s'", res.exit_code,
				     (int)(res.stdout_data.len < 60 ? res.stdout_data.len : 60),
				     (const char *)res.stdout_data.data);
		}
		break;
	}
	case OP_READ: {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = p1;
		asp_read_result res = {0};
		st = asp_read(client, &p, &res, w->a, &err);
		check_file(r, s, st, &res.data, res.size, false);
		if (r->status == ASP_OK && st == ASP_E_NOT_FOUND) {
			st = ASP_OK;
			slot_set(s, ABSENT, NULL, 0); /* now known */
		} else if (st == ASP_OK && !r->bad && s->st != ABSENT && res.data.len)
			slot_set(s, KNOWN,
			         memcpy(malloc(res.data.len), res.data.data, res.data.len),
			         res.data.len);
		else if (st == ASP_OK && !r->bad && res.data.len == 0 && res.size == 0 &&
		         s->st == UNKNOWN)
			slot_set(s, KNOWN, NULL, 0);
		break;
	}
	case OP_WRITE:
	case OP_WRITE_ATOMIC: {
		size_t len;
		uint8_t *data = make_content(w, seq, &len);
		asp_write_params p;
		asp_write_params_init(&p);
		p.path = p1;
		p.data.data = data;
		p.data.len = len;
		p.atomic = op == OP_WRITE_ATOMIC;
		asp_write_result res;
		st = asp_write(client, &p, &res, w->a, &err);
		if (st == ASP_OK) {
			if (res.size != len)
				FAIL("write: size %" PRIu64 ", want %zu", res.size, len);
			slot_set(s, KNOWN, data, len);
		} else if (op == OP_WRITE_ATOMIC && (s->st == KNOWN || s->st == ABSENT)) {
			/* old or new, never half */
			uint8_t *old = s->data;
			size_t old_len = s->len;
			bool old_absent = s->st == ABSENT;
			s->data = NULL;
			slot_set(s, EITHER, data, len);
			s->old = old, s->old_len = old_len, s->old_absent = old_absent;
		} else {
			slot_set(s, UNKNOWN, NULL, 0);
			free(data);
		}
		break;
	}
	case OP_STAT: {
		asp_stat_params p;
		asp_stat_params_init(&p);
		p.path = p1;
		asp_stat_result res = {0};
		st = asp_stat(client, &p, &res, w->a, &err);
		check_file(r, s, st, NULL, res.size, true);
		if (r->status == ASP_OK && st == ASP_E_NOT_FOUND) {
			st = ASP_OK;
			slot_set(s, ABSENT, NULL, 0);
		}
		if (st == ASP_OK && res.type && strcmp(res.type, "file") != 0)
			FAIL("stat: type %s", res.type);
		break;
	}
	case OP_LIST: {
		asp_list_params p;
		asp_list_params_init(&p);
		p.path = w->dir;
		asp_list_result res;
		st = asp_list(client, &p, &res, w->a, &err);
		for (int i = 0; st == ASP_OK && i < SLOTS && !r->bad; i++) {
			char name[8];
			snprintf(name, sizeof name, "f%d", i);
			bool seen = false;
			for (size_t j = 0; j < res.entries.count; j++)
				if (strcmp(res.entries.items[j].name, name) == 0) {
					seen = true;
					if (w->s[i].st == KNOWN &&
					    res.entries.items[j].size != w->s[i].len)
						FAIL("list: %s has %" PRIu64 " bytes, want %zu",
						     name, res.entries.items[j].size, w->s[i].len);
				}
			if (seen && w->s[i].st == ABSENT)
				FAIL("list: %s exists, no write made it", name);
			if (!seen && w->s[i].st == KNOWN)
				FAIL("list: %s missing", name);
		}
		break;
	}
	case OP_MKDIR: {
		snprintf(p2, sizeof p2, "%s/d", w->dir);
		asp_mkdir_params p;
		asp_mkdir_params_init(&p);
		p.path = p2;
		asp_mkdir_result res;
		st = asp_mkdir(client, &p, &res, w->a, &err);
		if (st == ASP_E_ALREADY_EXISTS && w->dir_state != 0)
			st = ASP_OK;
		else if (st == ASP_OK && w->dir_state == 1)
			FAIL("mkdir: made a directory that existed");
		w->dir_state = st == ASP_OK ? 1 : 2;
		break;
	}
	case OP_REMOVE: {
		/* the directory slot or a file slot */
		bool dir = rnd(&w->rng) % 3 == 0;
		if (dir)
			snprintf(p2, sizeof p2, "%s/d", w->dir);
		asp_remove_params p;
		asp_remove_params_init(&p);
		p.path = dir ? p2 : p1;
		p.recursive = dir;
		asp_remove_result res;
		st = asp_remove(client, &p, &res, w->a, &err);
		bool absent_ok =
		    dir ? w->dir_state != 1
		        : s->st == ABSENT || s->st == UNKNOWN || (s->st == EITHER && s->old_absent);
		bool was_absent = dir ? w->dir_state == 0 : s->st == ABSENT;
		if (st == ASP_E_NOT_FOUND && absent_ok)
			st = ASP_OK;
		else if (st == ASP_OK && was_absent)
			FAIL("remove: removed what did not exist");
		if (dir)
			w->dir_state = st == ASP_OK ? 0 : 2;
		else
			slot_set(s, st == ASP_OK ? ABSENT : UNKNOWN, NULL, 0);
		break;
	}
	case OP_RENAME: {
		int ti = (si + 1 + (int)(rnd(&w->rng) % (SLOTS - 1))) % SLOTS;
		slot *t = &w->s[ti];
		path_of(w, ti, p2, sizeof p2);
		asp_rename_params p;
		asp_rename_params_init(&p);
		p.from = p1;
		p.to = p2;
		p.overwrite = true;
		asp_rename_result res;
		st = asp_rename(client, &p, &res, w->a, &err);
		bool absent_ok =
		    s->st == ABSENT || s->st == UNKNOWN || (s->st == EITHER && s->old_absent);
		if (st == ASP_OK && s->st == ABSENT)
			FAIL("rename: moved what did not exist");
		if (st == ASP_E_NOT_FOUND && absent_ok) {
			st = ASP_OK;
			if (s->st != ABSENT) /* it was absent after all: the target keeps its own */
				slot_set(s, ABSENT, NULL, 0);
		} else if (st == ASP_OK) {
			slot_set(t, ABSENT, NULL, 0);
			*t = *s; /* the target takes the source's state and bytes */
			memset(s, 0, sizeof *s);
		} else {
			slot_set(s, UNKNOWN, NULL, 0);
			slot_set(t, UNKNOWN, NULL, 0);
		}
		break;
	}
	case OP_SPAWN_WAIT: {
		char tok[64], cmd[128];
		snprintf(tok, sizeof tok, "p%d-s%d", w->id, seq);
		snprintf(cmd, sizeof cmd, "printf %%s %s%s", tok, seq % 3 ? "" : "; sleep 0.1");
		struct spawn_watch sw = {.mu = PTHREAD_MUTEX_INITIALIZER};
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&sw.cv, &ca);
		pthread_condattr_destroy(&ca);
		asp_spawn_params p;
		asp_spawn_params_init(&p);
		p.command = cmd;
		p.timeout_ms = EXEC_TIMEOUT_MS;
		asp_proc_callbacks cb = {sw_output, sw_exit, sw_lost};
		uint64_t proc = 0;
		r->bound_ms += CALL_TIMEOUT_MS + CONNECT_MS + EXEC_TIMEOUT_MS + 5000;
		st = asp_spawn_start(client, &p, &cb, &sw, &proc, &err);
		if (st == ASP_OK) {
			asp_proc_wait_params wp;
			asp_proc_wait_params_init(&wp);
			wp.proc = proc;
			wp.timeout_ms = EXEC_TIMEOUT_MS;
			asp_proc_wait_result wr;
			st = asp_proc_wait(client, &wp, &wr, w->a, &err);
			if (st == ASP_OK && wr.exit_code != 0)
				FAIL("proc_wait: exit %" PRId64, wr.exit_code);
			/* the exit notification comes on the reader thread: wait for it, bounded */
			struct timespec dl;
			clock_gettime(CLOCK_MONOTONIC, &dl);
			dl.tv_sec += 5;
			pthread_mutex_lock(&sw.mu);
			while (!sw.ended &&
			       pthread_cond_timedwait(&sw.cv, &sw.mu, &dl) != ETIMEDOUT)
				;
			bool ended = sw.ended, lost = sw.lost;
			pthread_mutex_unlock(&sw.mu);
			asp_proc_detach(client, proc);
			if (st == ASP_OK && !r->bad) {
				if (!ended)
					FAIL("spawn: no exit nor lost event for proc %" PRIu64
					     " within 5 s of proc_wait",
					     proc);
				else if (lost) /* the answer came, then the connection died */
					st = ASP_E_TRANSPORT_ERROR,
					snprintf(err.message, sizeof err.message,
					         "on_lost after proc_wait");
				else if (sw.exit_code != 0 || sw.out_len != strlen(tok) ||
				         memcmp(sw.out, tok, sw.out_len) != 0)
					FAIL("spawn: exit event %" PRId64 ", output '%.*s'",
					     sw.exit_code, (int)sw.out_len, sw.out);
			}
		}
		pthread_cond_destroy(&sw.cv);
		break;
	}
	}
	r->end_ms = now_ms();
	atomic_store(&in_flight_start[w->id], -1);
	r->status = (unsigned char)st;
	if (st != ASP_OK && !r->why[0])
		snprintf(r->why, sizeof r->why, "%.150s", err.message);
	/* A kill explains transport_error and timeout; for spawn+proc_wait also not_found
	 * (the process lived in the killed responder, proc_wait reached a new one). */
	r->causable = st == ASP_E_TRANSPORT_ERROR || st == ASP_E_TIMEOUT ||
	              (op == OP_SPAWN_WAIT && st == ASP_E_NOT_FOUND);
	asp_arena_reset(w->a);
}

static void *caller(void *arg)
{
	worker *w = arg;
	for (int i; (i = atomic_fetch_add(&next_call, 1)) < n_calls;)
		one_call(w, i, &recs[i]);
	return NULL;
}

/* ---- the run ------------------------------------------------------------------------- */

static int count_strays(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		const char *nm = e->d_name;
		if (!strcmp(nm, ".") || !strcmp(nm, ".."))
			continue;
		bool known = depth == 0 ? (nm[0] == 't' || !strcmp(nm, ".asp.json"))
		                        : (depth == 1 && ((nm[0] == 'f' && nm[1] >= '0' &&
		                                           nm[1] < '0' + SLOTS && !nm[2]) ||
		                                          !strcmp(nm, "d")));
		if (!known) {
			if (n < 5)
				printf("  stray: %s/%s\n", dir, nm);
			n++;
		} else if (depth == 0 && nm[0] == 't') {
			char sub[8192];
			snprintf(sub, sizeof sub, "%s/%s", dir, nm);
			n += count_strays(sub, 1);
		}
	}
	if (d)
		closedir(d);
	return n;
}

static bool kill_in(double from, double to)
{
	int k = atomic_load(&n_kills);
	for (int i = 0; i < k; i++)
		if (kills[i] >= from && kills[i] <= to)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: soak ASP_AGENT [-n calls] [-t threads] [-i kill_ms] "
		                "[-s seed] [-k] [-u]\n");
		return 2;
	}
	const char *agent = argv[1];
	uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	bool keep = false;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "-k"))
			keep = true;
		else if (!strcmp(argv[i], "-u"))
			unrecorded = true;
		else if (i + 1 < argc && !strcmp(argv[i], "-n"))
			n_calls = atoi(argv[++i]);
		else if (i + 1 < argc && !strcmp(argv[i], "-t"))
			n_threads = atoi(argv[++i]);
		else if (i + 1 < argc && !strcmp(argv[i], "-i"))
			kill_mean_ms = atoi(argv[++i]);
		else if (i + 1 < argc && !strcmp(argv[i], "-s"))
			seed = strtoull(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "soak: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (n_threads < 1 || n_threads > MAX_THREADS || n_calls < 1 || kill_mean_ms < 1) {
		fprintf(stderr, "soak: bad -n, -t or -i\n");
		return 2;
	}
	if (!seed)
		seed = 1;
	t0_ms = 0;
	t0_ms = now_ms();
	signal(SIGPIPE, SIG_IGN);

	snprintf(scratch, sizeof scratch, "%s/asp-soak-XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(scratch))
		die("mkdtemp", NULL);
	snprintf(marker, sizeof marker, "%d-%" PRIx64, (int)getpid(), seed);
	char cfg[4300];
	snprintf(cfg, sizeof cfg, "%s/.asp.json", scratch);
	FILE *f = fopen(cfg, "w");
	if (!f)
		die("config", NULL);
	fprintf(f,
	        "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s\",\n"
	        " \"call_timeout_ms\": %d, \"env\": {\"ASP_SOAK_MARK\": \"%s\"},\n"
	        " \"stdio\": {\"command\": [\"%s\", \"--stdio\"]}}\n",
	        scratch, CALL_TIMEOUT_MS, marker, agent);
	fclose(f);

	int fds_open = count_fds();
	long rss_open = rss_kib();
	asp_error err;
	if (asp_client_open_path(cfg, &client, &err))
		die("open client", &err);

	recs = calloc((size_t)n_calls, sizeof *recs);
	worker *ws = calloc((size_t)n_threads, sizeof *ws);
	for (int i = 0; i < n_threads; i++) {
		ws[i].id = i;
		ws[i].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull + 1;
		snprintf(ws[i].dir, sizeof ws[i].dir, "%s/t%d", scratch, i);
		if (mkdir(ws[i].dir, 0755))
			die("mkdir", NULL);
		ws[i].a = asp_arena_new();
		atomic_store(&in_flight_start[i], -1);
	}
	/* warm up: the agent runs, the client's threads and buffers exist */
	{
		asp_exec_params p;
		asp_exec_params_init(&p);
		p.command = "true";
		asp_exec_result r;
		if (asp_exec(client, &p, &r, ws[0].a, &err))
			die("warm-up exec", &err);
		asp_arena_reset(ws[0].a);
	}
	int fds_before = count_fds();
	long rss_before = rss_kib();

	printf("soak: %d calls, %d threads, kills every %d ms on average (uniform %d..%d), "
	       "seed 0x%" PRIx64 ", scratch %s\n",
	       n_calls, n_threads, kill_mean_ms, kill_mean_ms / 2, kill_mean_ms * 3 / 2, seed,
	       scratch);
	fflush(stdout);
	double run_start = now_ms();
	pthread_t kt, *ts = calloc((size_t)n_threads, sizeof *ts);
	uint64_t kseed = seed ^ 0x5555;
	pthread_create(&kt, NULL, killer, &kseed);
	for (int i = 0; i < n_threads; i++)
		pthread_create(&ts[i], NULL, caller, &ws[i]);

	/* The watchdog: a call in flight past twice its largest bound is hung for good;
	 * report and stop rather than wait for ever. */
	double worst_bound =
	    2.0 * (CALL_TIMEOUT_MS * 2 + CONNECT_MS * 2 + EXEC_TIMEOUT_MS * 2 + MARGIN_MS + 5000);
	for (;;) {
		bool all_idle = atomic_load(&next_call) >= n_calls;
		for (int i = 0; i < n_threads; i++) {
			int s0 = atomic_load(&in_flight_start[i]);
			if (s0 >= 0) {
				all_idle = false;
				if (now_ms() - s0 > worst_bound) {
					printf(
					    "soak: HUNG: thread %d's call in flight for %.0f ms\n",
					    i, now_ms() - s0);
					fflush(stdout);
					_exit(1);
				}
			}
		}
		if (all_idle)
			break;
		usleep(20000);
	}
	for (int i = 0; i < n_threads; i++)
		pthread_join(ts[i], NULL);
	atomic_store(&done, true);
	pthread_join(kt, NULL);
	double run_ms = now_ms() - run_start;

	/*
	 * One more call on the same client: it must work after all that. Like any call, it
	 * may go out on the pipe of an agent killed just before it, not yet seen to close
	 * (GRACE_MS): that failure has its cause, and the next call must work.
	 */
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = scratch;
	asp_stat_result sr;
	double final_start = now_ms();
	asp_status final_st = asp_stat(client, &sp, &sr, ws[0].a, &err);
	if (final_st == ASP_E_TRANSPORT_ERROR && kill_in(final_start - GRACE_MS, now_ms())) {
		printf("soak: the stat after the run met the last kill (%s); once more\n",
		       err.message);
		final_st = asp_stat(client, &sp, &sr, ws[0].a, &err);
	}
	if (final_st)
		printf("soak: the stat after the run failed: %s\n", err.message);
	int fds_after = count_fds();
	long rss_after = rss_kib();
	int children_after = live_children(), marked_after = marked_procs();

	/* Classify */
	int by[OP_COUNT][OUTCOMES] = {{0}};
	int tot[OUTCOMES] = {0}, printed = 0;
	double max_ms[OP_COUNT] = {0}, max_lag = 0;
	int after_kill = 0, cause_by[ASP_STATUS_COUNT] = {0};
	for (int i = 0; i < n_calls; i++) {
		rec *r = &recs[i];
		double d = r->end_ms - r->start_ms;
		int o;
		if (d > r->bound_ms)
			o = HUNG;
		else if (r->bad)
			o = NO_CAUSE;
		else if (r->status == ASP_OK)
			o = OK;
		else if (r->causable && kill_in(r->start_ms - GRACE_MS, r->end_ms))
			o = CAUSE;
		else
			o = NO_CAUSE;
		if (o == CAUSE && !kill_in(r->start_ms, r->end_ms)) {
			/* how long after the nearest kill before it did it start */
			double lag = 1e18;
			for (int k = 0; k < n_kills; k++)
				if (kills[k] < r->start_ms && r->start_ms - kills[k] < lag)
					lag = r->start_ms - kills[k];
			after_kill++;
			if (lag > max_lag)
				max_lag = lag;
		}
		by[r->op][o]++;
		tot[o]++;
		if (o == CAUSE)
			cause_by[r->status]++;
		if (d > max_ms[r->op])
			max_ms[r->op] = d;
		if ((o == NO_CAUSE || o == HUNG) && printed++ < 20)
			printf("  %s: call %d %s at %.0f ms took %.0f ms: %s: %s\n",
			       outcome_names[o], i, op_names[r->op], r->start_ms, d,
			       r->bad ? "wrong result" : asp_strerror((asp_status)r->status),
			       r->why);
	}

	/* Processes and files left */
	asp_client_free(client);
	int fds_shared = 0, fds_freed = count_fds_shared(&fds_shared);
	int marked_now = marked_procs();
	double until = now_ms() + 15000; /* the old agents' TERM/KILL and keepers, bounded */
	int children_left = live_children(), marked_left = marked_now;
	while ((children_left || marked_left) && now_ms() < until) {
		usleep(50000);
		children_left = live_children();
		marked_left = marked_procs();
	}
	int strays = count_strays(scratch, 0);

	/* the harness's own state (slot contents, arenas) out of the way of the figure */
	for (int i = 0; i < n_threads; i++) {
		for (int j = 0; j < SLOTS; j++)
			slot_set(&ws[i].s[j], ABSENT, NULL, 0);
		asp_arena_free(ws[i].a);
	}
	long rss_freed = rss_kib();
	printf("\n| op | calls | ok | failed with cause | failed without cause | hung | "
	       "slowest (ms) |\n|---|---:|---:|---:|---:|---:|---:|\n");
	for (int o = 0; o < OP_COUNT; o++)
		printf("| %s | %d | %d | %d | %d | %d | %.0f |\n", op_names[o],
		       by[o][OK] + by[o][CAUSE] + by[o][NO_CAUSE] + by[o][HUNG], by[o][OK],
		       by[o][CAUSE], by[o][NO_CAUSE], by[o][HUNG], max_ms[o]);
	printf("| **all** | %d | %d | %d | %d | %d | |\n\n", n_calls, tot[OK], tot[CAUSE],
	       tot[NO_CAUSE], tot[HUNG]);
	printf("run: %.1f s, %.0f calls/s, %d kills of asp-agent (%d unrecorded, -u)\n",
	       run_ms / 1e3, n_calls / (run_ms / 1e3), n_kills, n_hidden);
	printf("with cause: %d started after the kill that explains them (latest %.0f ms "
	       "after it; grace %d ms)\n",
	       after_kill, max_lag, GRACE_MS);
	printf("with cause by status:");
	for (int i = 0; i < ASP_STATUS_COUNT; i++)
		if (cause_by[i])
			printf(" %s %d", asp_strerror((asp_status)i), cause_by[i]);
	printf("\n");
	printf("client fds: %d before open, %d after warm-up, %d after the run, %d after free "
	       "(besides the I/O pool's epoll fd and per-thread wake fds: %d after free)\n",
	       fds_open, fds_before, fds_after, fds_freed, fds_shared);
	printf("client RSS: %ld KiB before open, %ld KiB after warm-up, %ld KiB after the run, "
	       "%ld KiB after free (client, arenas and slot contents)\n",
	       rss_open, rss_before, rss_after, rss_freed);
	printf("processes: %d children after the run (the live agent), %d left after free; "
	       "carrying the marker: %d after the run, %d after free, %d after waiting\n",
	       children_after, children_left, marked_after, marked_now, marked_left);
	printf("scratch: %d entries no slot names (temporaries)\n", strays);

	if (!keep) {
		char cmd[4400];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
		if (system(cmd) != 0)
			fprintf(stderr, "soak: could not remove %s\n", scratch);
	}
	bool fail = tot[NO_CAUSE] || tot[HUNG] || final_st || children_left || marked_left ||
	            fds_freed > fds_open;
	if (unrecorded) { /* the control: the hidden kills must show as failures */
		fail = !(tot[NO_CAUSE] > 0 && n_hidden > 0);
		printf("soak: control (-u): %d failures without cause from %d unrecorded kills\n",
		       tot[NO_CAUSE], n_hidden);
	}
	printf("soak: %s\n", fail ? "FAIL" : "pass");
	free(ws);
	free(ts);
	free(recs);
	return fail ? 1 : 0;
}
