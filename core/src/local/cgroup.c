/* The responder's own cgroup v2 child: every command is born in it; cgroup.kill ends all. */
#include "cgroup.h"
#include "thread.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_PREFIX "asp-agent-"

/* Undoes mountinfo's octal escapes (`\040` for a space) in place. */
static void unescape(char *s)
{
	char *w = s;
	for (const char *r = s; *r;) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

/* Whether the comma-separated `opts` holds `opt`. */
static bool has_opt(const char *opts, const char *opt)
{
	size_t n = strlen(opt);
	for (const char *p = opts; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, opt, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* Our cgroup in the v2 hierarchy: the `0::` line of /proc/self/cgroup. */
static bool own_cgroup(char *cg, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return false;
	char *line = NULL;
	size_t lcap = 0;
	bool ok = false;
	while (!ok && getline(&line, &lcap, f) > 0) {
		if (strncmp(line, "0::/", 4) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		size_t n = strlen(line + 3);
		/* a cgroup removed under us cannot get a child */
		ok = n < cap && !strstr(line, " (deleted)");
		if (ok)
			memcpy(cg, line + 3, n + 1);
	}
	free(line);
	fclose(f);
	return ok;
}

/*
 * Where our cgroup `cg` is in this mount namespace: the first writable cgroup2 mount
 * whose root holds it (/sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified on a hybrid
 * one, `/` as root inside a private cgroup namespace).
 */
static bool cgroup_dir(const char *cg, char *dir, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	char *line = NULL;
	size_t lcap = 0;
	bool ok = false;
	while (!ok && getline(&line, &lcap, f) > 0) {
		/* id parent dev root mountpoint options [optional...] - fstype source super */
		char *sep = strstr(line, " - ");
		if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
			continue;
		*sep = '\0';
		char *field[6] = {NULL}, *save = NULL, *tok = strtok_r(line, " ", &save);
		for (int i = 0; tok && i < 6; i++, tok = strtok_r(NULL, " ", &save))
			field[i] = tok;
		if (!field[5] || has_opt(field[5], "ro"))
			continue;
		char *root = field[3], *mnt = field[4];
		unescape(root);
		unescape(mnt);
		size_t rlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
		if (strncmp(cg, root, rlen) != 0 || (cg[rlen] != '/' && cg[rlen] != '\0'))
			continue; /* this mount shows another part of the hierarchy */
		const char *rel = strcmp(cg + rlen, "/") == 0 ? "" : cg + rlen;
		int n = snprintf(dir, cap, "%s%s", mnt, rel);
		ok = n > 0 && (size_t)n < cap;
	}
	free(line);
	fclose(f);
	return ok;
}

/* Writes `text` to the file `name` in the cgroup `dir`. */
static bool put(const char *dir, const char *name, const char *text)
{
	char file[LOCAL_CGROUP_PATH_MAX + 64];
	snprintf(file, sizeof file, "%s/%s", dir, name);
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	size_t n = strlen(text);
	bool ok = write(fd, text, n) == (ssize_t)n;
	close(fd);
	return ok;
}

bool local_cgroup_path(pid_t pid, char *path, size_t cap)
{
	char cg[LOCAL_CGROUP_PATH_MAX], dir[LOCAL_CGROUP_PATH_MAX];
	if (!own_cgroup(cg, sizeof cg) || !cgroup_dir(cg, dir, sizeof dir))
		return false;
	int n = snprintf(path, cap, "%s/" NAME_PREFIX "%ld", dir, (long)pid);
	return n > 0 && (size_t)n < cap && n < LOCAL_CGROUP_PATH_MAX;
}

bool local_cgroup_enter(const char *path, pid_t pid)
{
	/*
	 * EEXIST: never taken over. A dead agent's with our (reused) pid is swept by the next
	 * agent to start while it is empty; a live one may be an agent's of another pid
	 * namespace in the same cgroup.
	 */
	if (mkdir(path, 0755) < 0)
		return false;
	char num[24];
	snprintf(num, sizeof num, "%ld", (long)pid);
	char kill_file[LOCAL_CGROUP_PATH_MAX + 16];
	snprintf(kill_file, sizeof kill_file, "%s/cgroup.kill", path);
	/*
	 * Without cgroup.kill (before 5.14) nothing could end the cgroup at once. We enable
	 * no controller, so the no-internal-process rule never refuses an agent's cgroup
	 * below another's; where a parent's controllers (EBUSY) or modes (EACCES) refuse
	 * the move, we do without.
	 */
	if (access(kill_file, W_OK) == 0 && put(path, "cgroup.procs", num))
		return true;
	rmdir(path);
	return false;
}

void local_cgroup_adopt_children(const char *path, pid_t pid, pid_t self)
{
	char dir[64], file[128], buf[4096];
	snprintf(dir, sizeof dir, "/proc/%ld/task", (long)pid);
	DIR *d = opendir(dir);
	if (!d)
		return;
	int budget = 256; /* a start-up's worth of commands, not a fork bomb's */
	struct dirent *de;
	while (budget > 0 && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(file, sizeof file, "%s/%.20s/children", dir, de->d_name);
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		char *save = NULL;
		for (char *tok = strtok_r(buf, " \n", &save); tok && budget > 0;
		     tok = strtok_r(NULL, " \n", &save)) {
			if (strtol(tok, NULL, 10) == (long)self)
				continue; /* the keeper stays outside: it ends the cgroup */
			put(path, "cgroup.procs", tok); /* one that exited meanwhile fails: fine */
			budget--;
		}
	}
	closedir(d);
}

/* The pid in a name `asp-agent-<pid>`, or 0. */
static long name_pid(const char *name)
{
	size_t plen = strlen(NAME_PREFIX);
	if (strncmp(name, NAME_PREFIX, plen) != 0 || name[plen] < '1' || name[plen] > '9')
		return 0;
	char *end;
	long v = strtol(name + plen, &end, 10);
	return *end || v <= 0 ? 0 : v;
}

/* rmdir, and first the cgroups of nested agents below, depth-first; bounded. */
static void rmdir_tree(const char *path, int depth, int *budget)
{
	if (rmdir(path) == 0 || (errno != EBUSY && errno != ENOTEMPTY) || depth <= 0 ||
	    --*budget < 0)
		return;
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
			continue;
		char sub[LOCAL_CGROUP_PATH_MAX + 256];
		int n = snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
		if (n > 0 && (size_t)n < sizeof sub)
			rmdir_tree(sub, depth - 1, budget);
	}
	closedir(d);
	rmdir(path);
}

void local_cgroup_sweep_stale(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path || (size_t)(slash - path) >= LOCAL_CGROUP_PATH_MAX)
		return;
	char dir[LOCAL_CGROUP_PATH_MAX];
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	DIR *d = opendir(dir);
	if (!d)
		return;
	int seen = 0, tried = 0;
	struct dirent *de;
	/* bounded: of a parent cgroup with thousands of entries, only the first are seen */
	while (seen++ < 4096 && tried < 64 && (de = readdir(d))) {
		long pid = name_pid(de->d_name);
		if (!pid || strcmp(de->d_name, slash + 1) == 0 || pid > INT32_MAX ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		tried++;
		char sub[LOCAL_CGROUP_PATH_MAX + 256];
		int n = snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
		int budget = 16; /* with its nested agents' (a populated one stays) */
		if (n > 0 && (size_t)n < sizeof sub)
			rmdir_tree(sub, 4, &budget);
	}
	closedir(d);
}

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Until cgroup.events says `populated 0` (nothing left below), for at most `wait_ms`. */
static void wait_empty(const char *path, int wait_ms)
{
	char file[LOCAL_CGROUP_PATH_MAX + 16];
	snprintf(file, sizeof file, "%s/cgroup.events", path);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	int64_t until = now_ms() + wait_ms;
	for (;;) {
		char buf[256];
		ssize_t n = lseek(fd, 0, SEEK_SET) == 0 ? read(fd, buf, sizeof buf - 1) : -1;
		if (n <= 0)
			break;
		buf[n] = '\0';
		int64_t left = until - now_ms();
		if (strstr(buf, "populated 0") || left <= 0)
			break;
		/* a change of the file wakes poll (POLLPRI); the 20 ms cap is for missed ones */
		struct pollfd p = {.fd = fd, .events = POLLPRI};
		poll(&p, 1, left < 20 ? (int)left : 20);
	}
	close(fd);
}

void local_cgroup_end(const char *path, int wait_ms)
{
	/* after a clean exit it finds nobody: the agent ended its subtree itself */
	if (!put(path, "cgroup.kill", "1") && errno == ENOENT)
		return; /* already removed (a stale sweep took it while empty) */
	wait_empty(path, wait_ms);
	int budget = 256;
	rmdir_tree(path, 16, &budget);
}

/* ---- a cgroup per command ---------------------------------------------------------- */

#define JOB_PREFIX "job-"
/*
 * Empty ones kept for the next spawns (a burst beyond makes its own). A command's cgroup
 * that is empty when it is released goes straight back (the next command takes the one
 * on top, so one after another they reuse one cgroup: the kernel then notifies
 * cgroup.events, a kworker's wake-up, at most every 10 ms instead of at each start). The
 * thread is woken only when fewer than LOW_WATER are left, when a command left something
 * running in its cgroup, or when many wait for it; it refills to SPARES.
 */
#define SPARES     8
#define LOW_WATER  2
#define POLLED_MAX 64 /* leftover cgroups watched through cgroup.events; the rest by timer */

/* A job cgroup: its number, the O_PATH fd of its directory, its cgroup.events (-1: not
 * open). */
struct job {
	unsigned n;
	int dir;
	int events;
};

static struct {
	pthread_mutex_t mu;
	int base; /* O_PATH of the agent's cgroup */
	char path[LOCAL_CGROUP_PATH_MAX];
	int wake;     /* eventfd: spares ran low, or a job left something running, or many done */
	bool running; /* the thread runs (jc_wake starts it; it ends when idle) */
	unsigned next;
	struct job spare[SPARES];
	size_t nspare;
	struct job *out; /* taken by a command, until it releases them */
	size_t nout, capout;
	struct job *done; /* released, not yet tried by the thread */
	size_t ndone, capdone;
	unsigned *killed; /* cgroup.kill written: never reused (below) */
	size_t nkilled, capkilled;
} jc = {.mu = PTHREAD_MUTEX_INITIALIZER, .base = -1, .wake = -1};

static void job_name(char *buf, size_t cap, unsigned n)
{
	snprintf(buf, cap, JOB_PREFIX "%u", n);
}

/* Appends j to *v (of *len, *cap); false when out of memory. Under jc.mu. */
static bool push_job(struct job **v, size_t *len, size_t *cap, struct job j)
{
	if (*len == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		struct job *nv = realloc(*v, ncap * sizeof *nv);
		if (!nv)
			return false;
		*v = nv, *cap = ncap;
	}
	(*v)[(*len)++] = j;
	return true;
}

/* Appends n to *v (of *len, *cap); false when out of memory. Under jc.mu. */
static bool push(unsigned **v, size_t *len, size_t *cap, unsigned n)
{
	if (*len == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		unsigned *nv = realloc(*v, ncap * sizeof *nv);
		if (!nv)
			return false;
		*v = nv, *cap = ncap;
	}
	(*v)[(*len)++] = n;
	return true;
}

/* Under jc.mu: whether cgroup.kill was written to job cgroup n; `forget`: n is gone now. */
static bool was_killed_locked(unsigned n, bool forget)
{
	for (size_t i = 0; i < jc.nkilled; i++) {
		if (jc.killed[i] == n) {
			if (forget)
				jc.killed[i] = jc.killed[--jc.nkilled];
			return true;
		}
	}
	return false;
}

static bool was_killed(unsigned n, bool forget)
{
	pthread_mutex_lock(&jc.mu);
	bool hit = was_killed_locked(n, forget);
	pthread_mutex_unlock(&jc.mu);
	return hit;
}

/* Closes what is open of j. */
static void job_close(struct job *j)
{
	if (j->dir >= 0)
		close(j->dir);
	if (j->events >= 0)
		close(j->events);
	j->dir = j->events = -1;
}

/* Job cgroup n's cgroup.events, opened; -1 if it cannot be. */
static int open_events(unsigned n)
{
	char file[64];
	snprintf(file, sizeof file, JOB_PREFIX "%u/cgroup.events", n);
	return openat(jc.base, file, O_RDONLY | O_CLOEXEC);
}

/* A new empty job cgroup: its O_PATH fd and number, or -1. */
static int job_make(unsigned *n)
{
	pthread_mutex_lock(&jc.mu);
	unsigned k = ++jc.next;
	pthread_mutex_unlock(&jc.mu);
	char name[32];
	job_name(name, sizeof name, k);
	if (mkdirat(jc.base, name, 0755) < 0)
		return -1;
	int fd = openat(jc.base, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		unlinkat(jc.base, name, AT_REMOVEDIR);
		return -1;
	}
	*n = k;
	return fd;
}

static void *jc_main(void *arg);

static void jc_wake(void)
{
	pthread_mutex_lock(&jc.mu);
	bool start = !jc.running;
	jc.running = true;
	pthread_mutex_unlock(&jc.mu);
	if (start && local_thread_detached(jc_main, NULL, 128 * 1024) != 0) {
		pthread_mutex_lock(&jc.mu); /* tried again at the next wake */
		jc.running = false;
		pthread_mutex_unlock(&jc.mu);
	}
	uint64_t one = 1;
	ssize_t w = write(jc.wake, &one, sizeof one);
	(void)w;
}

static bool populated(int events)
{
	char buf[256];
	ssize_t r = pread(events, buf, sizeof buf - 1, 0);
	if (r <= 0)
		return false;
	buf[r] = '\0';
	return strstr(buf, "populated 1") != NULL;
}

/*
 * Removes job cgroup n if it is empty: true once it is gone. One that holds the cgroups
 * of a nested agent goes with them, but only once no process is left anywhere below
 * (that agent and its keeper are gone too: nobody else removes them).
 */
static bool job_remove(unsigned n)
{
	char name[32];
	job_name(name, sizeof name, n);
	if (unlinkat(jc.base, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		return true;
	if (errno != EBUSY && errno != ENOTEMPTY)
		return false;
	char file[64], sub[LOCAL_CGROUP_PATH_MAX + 32];
	snprintf(file, sizeof file, "%s/cgroup.events", name);
	int ev = openat(jc.base, file, O_RDONLY | O_CLOEXEC);
	bool busy = ev < 0 || populated(ev);
	if (ev >= 0)
		close(ev);
	if (busy)
		return false;
	snprintf(sub, sizeof sub, "%s/%s", jc.path, name);
	int budget = 16;
	rmdir_tree(sub, 8, &budget);
	return faccessat(jc.base, name, F_OK, 0) < 0 && errno == ENOENT;
}

/* The number in cgroup.stat's `nr_descendants` line, or -1. */
static long descendants(unsigned n)
{
	char file[64], buf[512];
	snprintf(file, sizeof file, JOB_PREFIX "%u/cgroup.stat", n);
	int fd = openat(jc.base, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[r > 0 ? r : 0] = '\0';
	const char *p = strstr(buf, "nr_descendants ");
	return p ? strtol(p + 15, NULL, 10) : -1;
}

/*
 * A released job cgroup: back among the spares if it is empty and a leaf (no process
 * left, no nested agent's cgroup), removed if it is empty but the spares are enough.
 * True once `j` is done with (given to the spares, or closed and removed); false while a
 * process is left in it, j->events then open where it can be.
 */
static bool settle(struct job *j)
{
	if (j->events < 0)
		j->events = open_events(j->n);
	if (j->events >= 0 && populated(j->events))
		return false;
	/*
	 * A cgroup once killed SIGKILLs whatever is born in it later (Linux 6.18 here: a
	 * command that reused one died at once), so it is only ever removed.
	 */
	bool killed = was_killed(j->n, false);
	pthread_mutex_lock(&jc.mu);
	bool room = jc.nspare < SPARES && !killed;
	pthread_mutex_unlock(&jc.mu);
	/* reused: a mkdir and an rmdir less per command (about 70 us of kernel time) */
	if (room && j->events >= 0 && descendants(j->n) == 0) {
		if (j->dir < 0) {
			char name[32];
			job_name(name, sizeof name, j->n);
			j->dir = openat(jc.base, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
		}
		pthread_mutex_lock(&jc.mu);
		room = j->dir >= 0 && jc.nspare < SPARES;
		if (room)
			jc.spare[jc.nspare++] = *j;
		pthread_mutex_unlock(&jc.mu);
		if (room)
			return true;
	}
	if (j->dir >= 0) {
		close(j->dir);
		j->dir = -1;
	}
	if (!job_remove(j->n) && j->events >= 0)
		return false;
	if (killed)
		was_killed(j->n, true);
	job_close(j);
	return true;
}

/* Makes new spares until there are SPARES: ahead of the commands that will take them. */
static void refill(void)
{
	for (;;) {
		pthread_mutex_lock(&jc.mu);
		bool want = jc.nspare < SPARES;
		pthread_mutex_unlock(&jc.mu);
		struct job j = {0, -1, -1};
		j.dir = want ? job_make(&j.n) : -1;
		if (j.dir < 0)
			return;
		j.events = open_events(j.n);
		pthread_mutex_lock(&jc.mu);
		bool room = jc.nspare < SPARES;
		if (room)
			jc.spare[jc.nspare++] = j;
		pthread_mutex_unlock(&jc.mu);
		if (!room) {
			job_close(&j);
			job_remove(j.n);
			return;
		}
	}
}

/*
 * The thread: keeps spare cgroups ready and settles the released ones that could not go
 * straight back (reused or removed), at once if they are empty, else when cgroup.events
 * says `populated 0` (POLLPRI) or, for those not watched and those that held a nested
 * agent's cgroup, at the next second's pass. No spawn waits for it. With nothing left to
 * settle for a second, it ends (jc_wake starts it again).
 */
static void *jc_main(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "asp-jobcg"); /* only asp-agent has job cgroups */
	struct job *pend = NULL;
	size_t npend = 0, cappend = 0;
	struct pollfd *pfd = malloc((POLLED_MAX + 1) * sizeof *pfd);
	size_t *pidx = malloc((POLLED_MAX + 1) * sizeof *pidx);
	int64_t full_at = 0;
	if (!pfd || !pidx) {
		pthread_mutex_lock(&jc.mu); /* out of memory: tried again at the next wake */
		jc.running = false;
		pthread_mutex_unlock(&jc.mu);
		free(pfd);
		free(pidx);
		return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&jc.mu);
		struct job *done = jc.done;
		size_t ndone = jc.ndone;
		jc.done = NULL;
		jc.ndone = jc.capdone = 0;
		pthread_mutex_unlock(&jc.mu);
		for (size_t i = 0; i < ndone; i++) {
			if (settle(&done[i]))
				continue;
			if (done[i].dir >= 0) {
				close(done[i].dir);
				done[i].dir = -1;
			}
			if (!push_job(&pend, &npend, &cappend, done[i]))
				job_close(&done[i]); /* the agent's cgroup's end removes it */
		}
		free(done);
		refill(); /* after the released ones, which may be spares again */
		int64_t now = now_ms();
		bool full = now >= full_at;
		if (full)
			full_at = now + 1000;
		size_t watched = 0;
		for (size_t i = 0; i < npend;) {
			if (full && settle(&pend[i])) {
				pend[i] = pend[--npend];
				continue;
			}
			if (pend[i].events < 0 && watched < POLLED_MAX)
				pend[i].events = open_events(pend[i].n);
			if (pend[i].events >= 0 && watched >= POLLED_MAX) {
				close(pend[i].events); /* beyond those watched: by the timer */
				pend[i].events = -1;
			}
			if (pend[i].events >= 0)
				watched++;
			i++;
		}
		nfds_t k = 0;
		pfd[k++] = (struct pollfd){.fd = jc.wake, .events = POLLIN};
		for (size_t i = 0; i < npend && k <= POLLED_MAX; i++) {
			if (pend[i].events < 0)
				continue;
			pidx[k] = i;
			pfd[k++] = (struct pollfd){.fd = pend[i].events, .events = POLLPRI};
		}
		int r = poll(pfd, k, 1000);
		if (r == 0 && npend == 0) {
			pthread_mutex_lock(&jc.mu);
			bool idle = jc.ndone == 0; /* spares: refilled when a take finds them low */
			if (idle)
				jc.running = false;
			pthread_mutex_unlock(&jc.mu);
			if (idle)
				break;
		}
		if (r > 0 && pfd[0].revents) {
			uint64_t v;
			ssize_t got = read(jc.wake, &v, sizeof v);
			(void)got;
		}
		/* emptied ones go now; the rest at the next full pass */
		for (nfds_t j = k; r > 0 && j-- > 1;) {
			size_t i = pidx[j];
			if (!pfd[j].revents || !settle(&pend[i]))
				continue;
			pend[i] = pend[--npend];
		}
	}
	free(pend);
	free(pfd);
	free(pidx);
	return NULL;
}

bool local_jobcg_init(void)
{
	char cg[LOCAL_CGROUP_PATH_MAX], dir[LOCAL_CGROUP_PATH_MAX], want[48];
	if (!own_cgroup(cg, sizeof cg) || !cgroup_dir(cg, dir, sizeof dir))
		return false;
	snprintf(want, sizeof want, "/" NAME_PREFIX "%ld", (long)getpid());
	size_t dl = strlen(dir), wl = strlen(want);
	if (dl < wl || strcmp(dir + dl - wl, want) != 0)
		return false;
	jc.base = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	snprintf(jc.path, sizeof jc.path, "%s", dir);
	jc.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	char kill_file[32];
	struct job probe = {0, -1, -1};
	probe.dir = jc.base >= 0 && jc.wake >= 0 ? job_make(&probe.n) : -1;
	if (probe.dir >= 0) {
		/* the first spare; and cgroup.kill is there (the keeper checked its own) */
		snprintf(kill_file, sizeof kill_file, JOB_PREFIX "%u/cgroup.kill", probe.n);
		if (faccessat(jc.base, kill_file, W_OK, 0) == 0) {
			probe.events = open_events(probe.n);
			jc.spare[0] = probe;
			jc.nspare = 1;
			jc.running = true;
			if (local_thread_detached(jc_main, NULL, 128 * 1024) == 0)
				return true;
			jc.running = false;
			jc.nspare = 0;
		}
		job_close(&probe);
		job_remove(probe.n);
	}
	if (jc.wake >= 0)
		close(jc.wake);
	if (jc.base >= 0)
		close(jc.base);
	jc.base = jc.wake = -1;
	return false;
}

int local_jobcg_take(unsigned *n)
{
	pthread_mutex_lock(&jc.mu);
	struct job j = {0, -1, -1};
	if (jc.nspare)
		j = jc.spare[--jc.nspare];
	bool low = jc.nspare < LOW_WATER;
	pthread_mutex_unlock(&jc.mu);
	if (j.dir < 0)
		j.dir = job_make(&j.n); /* a burst outran the thread: one mkdir on this call */
	if (low)
		jc_wake();
	if (j.dir < 0)
		return -1;
	pthread_mutex_lock(&jc.mu);
	bool listed = push_job(&jc.out, &jc.nout, &jc.capout, j);
	pthread_mutex_unlock(&jc.mu);
	if (!listed) { /* out of memory: the command starts without one */
		job_close(&j);
		job_remove(j.n);
		return -1;
	}
	*n = j.n;
	return j.dir;
}

void local_jobcg_kill(unsigned n)
{
	pthread_mutex_lock(&jc.mu);
	bool known = false;
	for (size_t i = 0; i < jc.nkilled && !known; i++)
		known = jc.killed[i] == n;
	/* out of memory: it may be reused, and what is born in it may die */
	if (!known)
		push(&jc.killed, &jc.nkilled, &jc.capkilled, n);
	pthread_mutex_unlock(&jc.mu);
	char file[48];
	snprintf(file, sizeof file, JOB_PREFIX "%u/cgroup.kill", n);
	int fd = openat(jc.base, file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t w = write(fd, "1", 1);
	(void)w;
	close(fd);
}

void local_jobcg_release(unsigned n)
{
	struct job j = {n, -1, -1};
	pthread_mutex_lock(&jc.mu);
	for (size_t i = 0; i < jc.nout; i++) {
		if (jc.out[i].n == n) {
			j = jc.out[i];
			jc.out[i] = jc.out[--jc.nout];
			break;
		}
	}
	pthread_mutex_unlock(&jc.mu);
	/*
	 * One pread: empty, it serves the next command at once. (An empty cgroup a nested
	 * agent left below it goes with it when it is removed; reusing it meanwhile is
	 * harmless, we enable no controller.)
	 */
	bool empty = j.dir >= 0 && j.events >= 0 && !populated(j.events);
	pthread_mutex_lock(&jc.mu);
	if (empty && !was_killed_locked(n, false) && jc.nspare < SPARES) {
		jc.spare[jc.nspare++] = j;
		pthread_mutex_unlock(&jc.mu);
		return;
	}
	bool kept = push_job(&jc.done, &jc.ndone, &jc.capdone, j);
	bool wake = !empty || jc.ndone >= SPARES;
	pthread_mutex_unlock(&jc.mu);
	if (!kept)
		job_close(&j); /* out of memory: left to the agent's end */
	if (wake)
		jc_wake();
}
