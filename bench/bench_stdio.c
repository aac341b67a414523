/*
 * The stdio transport against its floor, in one run:
 *   - exec of `true`: asp over stdio vs posix_spawn + waitpid of the same program here,
 *     vs the least an exec with exec's guarantees costs without ASP (start floor), and
 *     vs that start run by another process over a pipe (relay floor);
 *   - 4 KiB read and write round trips;
 *   - 1, 8 and 64 concurrent execs on one client;
 *   - 256 MiB upload and download with `asp cp`.
 * Prints medians, ratios and a Markdown table for docs/benchmarks.md.
 *
 *   bench_stdio ASP_AGENT ASP_CLI [iterations [quick]]
 *
 * `quick` skips the transfers and prints one line of the round trips (for interleaved
 * runs of two builds). Both modes also print how the agent starts its commands and how
 * often each of its threads slept per exec over stdio (voluntary context switches), and
 * how many threads it has once idle after the runs.
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "bench_util.h"
#include "spawn_floor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void die(const char *what, const asp_error *err)
{
	fprintf(stderr, "bench_stdio: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(1);
}

/* The agent the stdio transport started: a child of ours running `agent`, or -1. */
static pid_t find_agent(const char *agent)
{
	char want[PATH_MAX], path[300], exe[PATH_MAX];
	if (!realpath(agent, want))
		return -1;
	pid_t found = -1;
	DIR *d = opendir("/proc/self/task");
	for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%.64s/children", e->d_name);
		FILE *f = fopen(path, "r");
		for (long pid; f && found < 0 && fscanf(f, "%ld", &pid) == 1;) {
			snprintf(path, sizeof path, "/proc/%ld/exe", pid);
			ssize_t n = readlink(path, exe, sizeof exe - 1);
			if (n > 0 && (exe[n] = '\0', strcmp(exe, want) == 0))
				found = (pid_t)pid;
		}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/*
 * How the agent starts commands: in job cgroups (clone3, CLONE_INTO_CGROUP) once its
 * keeper moved it into `asp-agent-<pid>`, else posix_spawn.
 */
static const char *spawn_path(pid_t agent)
{
	char path[64], line[1024], want[48];
	snprintf(path, sizeof path, "/proc/%ld/cgroup", (long)agent);
	snprintf(want, sizeof want, "/asp-agent-%ld\n", (long)agent);
	FILE *f = fopen(path, "r");
	bool own = false;
	while (f && fgets(line, sizeof line, f)) {
		size_t n = strlen(line), w = strlen(want);
		own |= strncmp(line, "0::", 3) == 0 && n >= w && strcmp(line + n - w, want) == 0;
	}
	if (f)
		fclose(f);
#if defined(__x86_64__)
	return own ? "clone3-jobcg" : "posix_spawn";
#else
	return "posix_spawn";
#endif
}

#define MAX_THREADS 80

/* The agent's threads: tid, name and voluntary context switches so far. */
struct threads {
	int n;
	long tid[MAX_THREADS];
	char name[MAX_THREADS][20];
	double sleeps[MAX_THREADS];
};

static void read_threads(pid_t pid, struct threads *t)
{
	char path[300], line[256];
	t->n = 0;
	snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
	DIR *d = opendir(path);
	for (struct dirent *e; d && t->n < MAX_THREADS && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		int i = t->n;
		t->tid[i] = atol(e->d_name);
		t->sleeps[i] = 0;
		snprintf(t->name[i], sizeof t->name[i], "?");
		snprintf(path, sizeof path, "/proc/%ld/task/%.64s/status", (long)pid, e->d_name);
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof line, f)) {
			if (!strncmp(line, "Name:", 5) && sscanf(line + 5, "%19s", t->name[i]) != 1)
				snprintf(t->name[i], sizeof t->name[i], "?");
			if (!strncmp(line, "voluntary_ctxt_switches:", 24))
				t->sleeps[i] = atof(line + 24);
		}
		if (f)
			fclose(f);
		t->n++;
	}
	if (d)
		closedir(d);
}

/*
 * "name=sleeps/exec" per thread name (threads of one name summed, in the order first
 * seen; the count of threads in brackets when more than one), and the total, into buf.
 */
static void sleeps_line(const struct threads *a, const struct threads *b, int execs, char *buf,
                        size_t cap)
{
	char names[MAX_THREADS][20];
	double sum[MAX_THREADS] = {0}, total = 0;
	int count[MAX_THREADS] = {0}, k = 0;
	for (int i = 0; i < b->n; i++) {
		double before = 0;
		for (int j = 0; j < a->n; j++)
			if (a->tid[j] == b->tid[i])
				before = a->sleeps[j];
		double d = (b->sleeps[i] - before) / execs;
		int at = 0;
		while (at < k && strcmp(names[at], b->name[i]) != 0)
			at++;
		if (at == k)
			memcpy(names[k++], b->name[i], sizeof names[0]);
		sum[at] += d;
		count[at]++;
		total += d;
	}
	size_t len = (size_t)snprintf(buf, cap, "total=%.2f", total);
	for (int i = 0; i < k && len < cap; i++) {
		if (count[i] > 1)
			len += (size_t)snprintf(buf + len, cap - len, " %s[%d]=%.2f", names[i],
			                        count[i], sum[i]);
		else
			len += (size_t)snprintf(buf + len, cap - len, " %s=%.2f", names[i], sum[i]);
	}
	/* and each thread in the order the agent made them (for an agent without names) */
	int order[MAX_THREADS];
	for (int i = 0; i < b->n; i++)
		order[i] = i;
	for (int i = 1; i < b->n; i++)
		for (int j = i; j > 0 && b->tid[order[j]] < b->tid[order[j - 1]]; j--) {
			int t = order[j];
			order[j] = order[j - 1], order[j - 1] = t;
		}
	if (len < cap)
		len += (size_t)snprintf(buf + len, cap - len, " by-tid");
	for (int i = 0; i < b->n && len < cap; i++) {
		double before = 0;
		for (int j = 0; j < a->n; j++)
			if (a->tid[j] == b->tid[order[i]])
				before = a->sleeps[j];
		len += (size_t)snprintf(buf + len, cap - len, "%s%.2f", i ? "," : "=",
		                        (b->sleeps[order[i]] - before) / execs);
	}
}

/*
 * The agent's threads once it is idle: waits (up to 10 s, well past the agent's linger)
 * for the count to settle at one, and returns what it is then; -1 without an agent.
 */
static int idle_threads(pid_t pid)
{
	if (pid <= 0)
		return -1;
	static struct threads t;
	double until = now_us() + 10e6;
	do {
		read_threads(pid, &t);
		if (t.n <= 1)
			break;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	} while (now_us() < until);
	return t.n;
}

static void exec_true(asp_client *c, asp_arena *a)
{
	static const char *const argv[] = {"true"};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 1;
	asp_exec_result r;
	asp_error err;
	if (asp_exec(c, &p, &r, a, &err) || r.exit_code != 0)
		die("exec true", &err);
	asp_arena_reset(a);
}

/* Median µs of a stat of `path`. */
static double stat_rt(asp_client *c, asp_arena *a, const char *path, double *v, int iters)
{
	asp_error err;
	for (int i = 0; i < iters; i++) {
		double t0 = now_us();
		asp_stat_params p;
		asp_stat_params_init(&p);
		p.path = path;
		asp_stat_result r;
		if (asp_stat(c, &p, &r, a, &err))
			die("stat", &err);
		v[i] = now_us() - t0;
		asp_arena_reset(a);
	}
	return median(v, iters);
}

/* Median µs of a 4 KiB write (or read) of `path`. */
static double small_io(asp_client *c, asp_arena *a, const char *path, double *v, int iters,
                       bool write_it)
{
	static uint8_t page[4096];
	asp_error err;
	for (int i = 0; i < iters; i++) {
		double t0 = now_us();
		if (write_it) {
			asp_write_params p;
			asp_write_params_init(&p);
			p.path = path;
			p.data.data = page;
			p.data.len = sizeof page;
			asp_write_result r;
			if (asp_write(c, &p, &r, a, &err))
				die("write", &err);
		} else {
			asp_read_params p;
			asp_read_params_init(&p);
			p.path = path;
			asp_read_result r;
			if (asp_read(c, &p, &r, a, &err) || r.data.len != sizeof page)
				die("read", &err);
		}
		v[i] = now_us() - t0;
		asp_arena_reset(a);
	}
	return median(v, iters);
}

struct conc {
	asp_client *c;
	int n;
};

static void *conc_worker(void *arg)
{
	struct conc *w = arg;
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < w->n; i++)
		exec_true(w->c, a);
	asp_arena_free(a);
	return NULL;
}

/* Execs per second with `threads` callers sharing one client. */
static double concurrent_execs(asp_client *c, int threads, int per_thread)
{
	pthread_t t[64];
	struct conc w = {c, per_thread};
	double t0 = now_us();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, conc_worker, &w);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return threads * per_thread / ((now_us() - t0) / 1e6);
}

static double run_cli(const char *const *argv)
{
	pid_t pid;
	double t0 = now_us();
	if (posix_spawn(&pid, argv[0], NULL, NULL, (char *const *)argv, environ) != 0)
		die("spawn asp", NULL);
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "bench_stdio: %s %s failed\n", argv[0], argv[3]);
		exit(1);
	}
	return (now_us() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_stdio ASP_AGENT ASP_CLI [iterations [quick]]\n");
		return 2;
	}
	const char *agent = argv[1], *cli = argv[2];
	int iters = argc > 3 ? atoi(argv[3]) : 2000;
	bool quick = argc > 4 && strcmp(argv[4], "quick") == 0;
	/* tmpfs when there is one: the transport is measured, not the disk */
	char dir[64];
	snprintf(dir, sizeof dir, "%s/asp-bench-XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(dir))
		die("mkdtemp", NULL);
	char cfg[4200], path[4200], big[4200], back[4200];
	snprintf(cfg, sizeof cfg, "%s/.asp.json", dir);
	FILE *f = fopen(cfg, "w");
	fprintf(f,
	        "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s\",\n"
	        " \"stdio\": {\"command\": [\"%s\", \"--stdio\"]}}\n",
	        dir, agent);
	fclose(f);

	spawn_relay relay; /* forked before any thread starts */
	spawn_relay_start(&relay);
	asp_client *c;
	asp_error err;
	if (asp_client_open_path(cfg, &c, &err))
		die("open client", &err);
	asp_arena *a = asp_arena_new();
	double *v = calloc((size_t)iters, sizeof *v);

	for (int i = 0; i < 50; i++) /* warm up: spawn the agent, fault in its pages */
		exec_true(c, a);
	/* Interleaved, so that load from elsewhere on the machine hits all three alike. */
	asp_config_view lv = {.transport = ASP_TRANSPORT_LOCAL};
	asp_client *local;
	if (asp_client_open_view(&lv, &local, &err))
		die("open local client", &err);
	double *vl = calloc((size_t)iters, sizeof *vl), *vf = calloc((size_t)iters, sizeof *vf);
	pid_t agent_pid = find_agent(agent);
	static struct threads before, after;
	if (agent_pid > 0)
		read_threads(agent_pid, &before);
	/* Each iteration runs the five in a fresh random order (bench_order). */
	double *vs = calloc((size_t)iters, sizeof *vs), *vr = calloc((size_t)iters, sizeof *vr);
	double *cols[5] = {vf, v, vl, vs, vr};
	unsigned long long seed = 1;
	for (int i = 0; i < iters; i++) {
		int order[5];
		bench_order(order, 5, &seed);
		for (int j = 0; j < 5; j++) {
			int which = order[j];
			double t0 = now_us();
			switch (which) {
			case 0: spawn_floor_true(); break;
			case 1: exec_true(c, a); break;
			case 2: exec_true(local, a); break;
			case 3: spawn_start_floor_true(); break;
			default: spawn_relay_true(&relay); break;
			}
			cols[which][i] = now_us() - t0;
		}
	}
	char sleeps[1024] = "unknown (agent not found)";
	if (agent_pid > 0) {
		read_threads(agent_pid, &after);
		sleeps_line(&before, &after, iters, sleeps, sizeof sleeps);
	}
	const char *how = agent_pid > 0 ? spawn_path(agent_pid) : "unknown";
	double floor_us = median(vf, iters), exec_us = median(v, iters);
	double lexec_us = median(vl, iters), start_us = median(vs, iters);
	double relay_us = median(vr, iters);
	spawn_relay_stop(&relay);
	free(vr);
	free(vs);
	free(vl);
	free(vf);

	/* 4 KiB write and read round trips: over stdio, and in-process (the floor) */
	snprintf(path, sizeof path, "%s/4k.bin", dir);
	double write_us = small_io(c, a, path, v, iters, true);
	double read_us = small_io(c, a, path, v, iters, false);
	double lwrite_us = small_io(local, a, path, v, iters, true);
	double lread_us = small_io(local, a, path, v, iters, false);
	double stat_us = stat_rt(c, a, path, v, iters);
	asp_client_free(local);

	double c1 = concurrent_execs(c, 1, 400);
	double c8 = concurrent_execs(c, 8, 100);
	double c64 = concurrent_execs(c, 64, 20);
	int idle = idle_threads(agent_pid);
	if (quick) {
		printf(
		    "exec %.0f floor %.0f ratio %.3f in-process %.3f start-floor %.3f bound %.3f "
		    "relay-floor %.3f over-relay %.3f stat %.1f write %.1f read %.1f c1 %.0f "
		    "c8 %.0f c64 %.0f idle-threads %d spawn %s sleeps/exec %s\n",
		    exec_us, floor_us, exec_us / floor_us, lexec_us / floor_us, start_us / floor_us,
		    (start_us + stat_us) / floor_us, relay_us / floor_us, exec_us / relay_us,
		    stat_us, write_us, read_us, c1, c8, c64, idle, how, sleeps);
		asp_arena_free(a);
		free(v);
		asp_client_free(c);
		char rm[4300];
		snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
		return system(rm) == 0 ? 0 : 1;
	}

	/* 256 MiB through asp cp, both ways (local files in the same tmpfs-or-disk dir) */
	snprintf(big, sizeof big, "%s/big.bin", dir);
	snprintf(back, sizeof back, "%s/back.bin", dir);
	int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	static uint8_t chunk[1 << 20];
	for (size_t i = 0; i < sizeof chunk; i++)
		chunk[i] = (uint8_t)(i * 2654435761u >> 24);
	for (int i = 0; i < 256; i++)
		if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk)
			die("write big", NULL);
	close(fd);
	char remote[4300], remote_src[4300];
	snprintf(remote, sizeof remote, ":%s/up.bin", dir);
	snprintf(remote_src, sizeof remote_src, ":%s/big.bin", dir);
	const char *up[] = {cli, "--config", cfg, "cp", big, remote, NULL};
	const char *down[] = {cli, "--config", cfg, "cp", remote_src, back, NULL};
	/* The peer: the same bytes from file to file through one pipe, no protocol. */
	char pipe_cmd[9000];
	snprintf(pipe_cmd, sizeof pipe_cmd, "cat '%s' | cat > '%s/pipe.bin'", big, dir);
	const char *pipe_copy[] = {"/bin/sh", "-c", pipe_cmd, "cat|cat", NULL};
	double up_s = 1e9, down_s = 1e9, pipe_s = 1e9;
	for (int i = 0; i < 3; i++) { /* best of three: the machine is shared */
		double t = run_cli(up);
		up_s = t < up_s ? t : up_s;
		t = run_cli(down);
		down_s = t < down_s ? t : down_s;
		t = run_cli(pipe_copy);
		pipe_s = t < pipe_s ? t : pipe_s;
	}

	printf("agent: commands started with %s; sleeps per exec by thread: %s; threads when "
	       "idle after the runs: %d\n\n",
	       how, sleeps, idle);
	printf("| measure | asp over stdio | floor / peer | ratio |\n|---|---|---|---|\n");
	printf("| exec `true` round trip, median | %.0f µs | %.0f µs (posix_spawn + waitpid) | "
	       "%.2f× |\n",
	       exec_us, floor_us, exec_us / floor_us);
	printf("| exec `true`, in-process local backend (no transport) | %.0f µs | | %.2f× |\n",
	       lexec_us, lexec_us / floor_us);
	printf("| start floor: posix_spawn with exec's pipes and session, pidfd wait (no ASP) | "
	       "%.0f µs | | %.2f× |\n",
	       start_us, start_us / floor_us);
	printf("| start floor + one stat round trip over stdio (the least an exec can cost "
	       "here) | %.0f µs | | %.2f× |\n",
	       start_us + stat_us, (start_us + stat_us) / floor_us);
	printf("| relay floor: the start floor run by another process, a byte over a pipe each "
	       "way (no ASP) | %.0f µs | | %.2f× |\n",
	       relay_us, relay_us / floor_us);
	printf("| exec `true` over stdio / relay floor (what ASP adds to a pipe's exec) | | | "
	       "%.2f× |\n",
	       exec_us / relay_us);
	printf("| 4 KiB write round trip, median | %.1f µs (%.0f ops/s) | %.1f µs (in-process) | "
	       "+%.1f µs |\n",
	       write_us, 1e6 / write_us, lwrite_us, write_us - lwrite_us);
	printf("| 4 KiB read round trip, median | %.1f µs (%.0f ops/s) | %.1f µs (in-process) | "
	       "+%.1f µs |\n",
	       read_us, 1e6 / read_us, lread_us, read_us - lread_us);
	printf("| stat round trip, median | %.1f µs | | |\n", stat_us);
	printf("| exec `true`, 1 caller | %.0f execs/s | %.0f execs/s (1 / floor) | %.2f× |\n", c1,
	       1e6 / floor_us, c1 / (1e6 / floor_us));
	printf("| exec `true`, 8 concurrent callers | %.0f execs/s | | %.2f× of 1 caller |\n", c8,
	       c8 / c1);
	printf("| exec `true`, 64 concurrent callers | %.0f execs/s | | %.2f× of 1 caller |\n", c64,
	       c64 / c1);
	printf("| 256 MiB upload, `asp cp` (best of 3) | %.0f MiB/s | %.0f MiB/s (file → `cat` → "
	       "pipe → `cat` → file) | %.2f× |\n",
	       256 / up_s, 256 / pipe_s, pipe_s / up_s);
	printf("| 256 MiB download, `asp cp` (best of 3) | %.0f MiB/s | %.0f MiB/s (the same, "
	       "reversed) | %.2f× |\n",
	       256 / down_s, 256 / pipe_s, pipe_s / down_s);

	asp_arena_free(a);
	free(v);
	asp_client_free(c);
	char rm[4300];
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	return system(rm) == 0 ? 0 : 1;
}
