/* The responder's own cgroup v2 child: every command is born in it; cgroup.kill ends all. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>
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
