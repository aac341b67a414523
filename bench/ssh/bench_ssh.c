/*
 * The SSH transport against what people use today, in one run against one sshd (the
 * test fixture's: Debian's sshd on a loopback port). Prints a Markdown table of medians
 * and ratios:
 *   exec `true` round trip: asp native, asp agent mode, `ssh` with a fresh connection,
 *     `ssh` over a ControlMaster connection, paramiko exec_command on a persistent client
 *   4 KiB file read: asp native, asp agent mode, paramiko SFTP
 *   256 MiB upload and download: asp native, asp agent mode, OpenSSH `sftp`
 * and the cost of the login shell's startup files, which every native exec (and every
 * OpenSSH or paramiko command) pays. Then streaming (asp_spawn_start, ~30 s), the
 * transports taking turns: asp native, asp agent mode, `ssh` over the ControlMaster
 * connection, paramiko on a persistent client:
 *   output chunk latency: a remote loop prints `date +%s%N` every ~20 ms; each line's
 *     arrival (on_output, the ssh stdout pipe, paramiko's readline) less its stamp;
 *   spawn of `echo hi` → its line, → exit;
 *   backpressure: `head -c 1GiB /dev/zero` to a follower sleeping 10 ms per chunk for
 *     2 s: how far the producer ran ahead (its /proc/PID/io wchar) and the RSS growth
 *     (asp: the client; ssh: the ControlMaster process, which writes into our pipe).
 *
 *   bench_ssh ASP_AGENT [MiB] [--skip-startup-files] [--streaming-only]
 *
 * MiB: size of the bulk transfer (default 256). By default the login shell reads the
 * user's startup files as sshd normally has it; --skip-startup-files runs the tests'
 * login shell instead (bash without ~/.bashrc) to show the transport's own cost.
 * --streaming-only skips everything before the streaming section.
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "bench_util.h"
#include "sshd_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define PARAMIKO_PY "/usr/bin/python3"

static sshd_fixture fx;
static char ssh_opts[1200];

/* Runs a shell line (bash) quietly; exit status or -1. */
static int shell(const char *line)
{
	const char *argv[] = {"/bin/bash", "-c", line, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
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

/* Median wall time of `n` runs of a shell line. */
static double time_shell(const char *line, int n)
{
	double v[64];
	int k = 0;
	for (int i = 0; i < n && i < 64; i++) {
		double t0 = now_ms();
		if (shell(line) != 0)
			return -1;
		v[k++] = now_ms() - t0;
	}
	return median(v, k);
}

static asp_client *open_client(const char *agent)
{
	char json[4096];
	sshd_config_json(&fx, agent, NULL, json, sizeof json);
	asp_config *cfg;
	asp_error err;
	if (asp_config_parse(json, strlen(json), NULL, &cfg, &err) != ASP_OK) {
		fprintf(stderr, "config: %s\n", err.message);
		return NULL;
	}
	asp_client *c = NULL;
	if (asp_client_open_view(asp_config_get(cfg), &c, &err) != ASP_OK)
		fprintf(stderr, "open (%s): %s\n", agent ? "agent" : "native", err.message);
	asp_config_free(cfg);
	return c;
}

static double exec_true(asp_client *c, int n)
{
	double v[256];
	int k = 0;
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < n + 3 && i < 256; i++) {
		asp_exec_params p;
		asp_exec_params_init(&p);
		const char *argv[] = {"true"};
		p.has_argv = true;
		p.argv = (asp_strv){argv, 1};
		asp_exec_result r;
		asp_error err;
		double t0 = now_ms();
		if (asp_exec(c, &p, &r, a, &err) != ASP_OK || r.exit_code != 0) {
			fprintf(stderr, "exec: %s\n", err.message);
			asp_arena_free(a);
			return -1;
		}
		if (i >= 3) /* warm-up excluded */
			v[k++] = now_ms() - t0;
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return median(v, k);
}

static double read_4k(asp_client *c, const char *path, int n)
{
	double v[512];
	int k = 0;
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < n + 3 && i < 512; i++) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = path;
		asp_read_result r;
		asp_error err;
		double t0 = now_ms();
		if (asp_read(c, &p, &r, a, &err) != ASP_OK || r.data.len != 4096) {
			fprintf(stderr, "read: %s\n", err.message);
			asp_arena_free(a);
			return -1;
		}
		if (i >= 3)
			v[k++] = now_ms() - t0;
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return median(v, k);
}

/* Upload then download `mib` MiB in 15 MiB writes/reads (under max_message); MB/s each. */
static int bulk(asp_client *c, const char *path, size_t mib, double *up, double *down)
{
	size_t total = mib << 20, chunk = 15u << 20;
	uint8_t *buf = malloc(chunk);
	if (!buf)
		return -1;
	for (size_t i = 0; i < chunk; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 12));
	asp_arena *a = asp_arena_new();
	asp_error err;
	double t0 = now_ms();
	for (size_t off = 0; off < total; off += chunk) {
		asp_write_params p;
		asp_write_params_init(&p);
		p.path = path;
		p.data = (asp_bytes){buf, total - off < chunk ? total - off : chunk};
		if (off) {
			p.has_offset = true;
			p.offset = off;
		}
		asp_write_result r;
		if (asp_write(c, &p, &r, a, &err) != ASP_OK) {
			fprintf(stderr, "write: %s\n", err.message);
			goto fail;
		}
		asp_arena_reset(a);
	}
	*up = (double)total / 1e6 / ((now_ms() - t0) / 1e3);
	t0 = now_ms();
	for (size_t off = 0; off < total; off += chunk) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = path;
		p.offset = off;
		p.has_length = true;
		p.length = chunk;
		asp_read_result r;
		if (asp_read(c, &p, &r, a, &err) != ASP_OK) {
			fprintf(stderr, "read: %s\n", err.message);
			goto fail;
		}
		asp_arena_reset(a);
	}
	*down = (double)total / 1e6 / ((now_ms() - t0) / 1e3);
	asp_arena_free(a);
	free(buf);
	return 0;
fail:
	asp_arena_free(a);
	free(buf);
	return -1;
}

/* paramiko on a persistent client: median ms of exec_command('true') and of a 4 KiB
 * SFTP read, printed by the script as "EXEC ms\nREAD ms". */
static int paramiko(const char *path4k, int n, double *exec_ms, double *read_ms)
{
	char script[3000];
	snprintf(script, sizeof script,
	         "import paramiko, time, statistics\n"
	         "c = paramiko.SSHClient()\n"
	         "c.set_missing_host_key_policy(paramiko.AutoAddPolicy())\n"
	         "c.connect('127.0.0.1', port=%u, username='%s', key_filename='%s', "
	         "look_for_keys=False, allow_agent=False)\n"
	         "def one():\n"
	         "    i, o, e = c.exec_command('true')\n"
	         "    o.channel.recv_exit_status()\n"
	         "v = []\n"
	         "for k in range(%d):\n"
	         "    t = time.monotonic(); one(); v.append((time.monotonic() - t) * 1e3)\n"
	         "print('EXEC', statistics.median(v[3:]))\n"
	         "s = c.open_sftp()\n"
	         "v = []\n"
	         "for k in range(%d):\n"
	         "    t = time.monotonic()\n"
	         "    with s.open('%s', 'rb') as f: d = f.read()\n"
	         "    v.append((time.monotonic() - t) * 1e3)\n"
	         "print('READ', statistics.median(v[3:]))\n",
	         fx.port, fx.user, fx.client_key, n + 3, 4 * n + 3, path4k);
	int p[2];
	if (pipe(p) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_addclose(&fa, p[0]);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	const char *argv[] = {PARAMIKO_PY, "-c", script, NULL};
	pid_t pid;
	int rc = posix_spawn(&pid, PARAMIKO_PY, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return -1;
	}
	char out[512] = "";
	size_t got = 0;
	ssize_t r;
	while (got + 1 < sizeof out && (r = read(p[0], out + got, sizeof out - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	close(p[0]);
	int status;
	waitpid(pid, &status, 0);
	return sscanf(out, "EXEC %lf READ %lf", exec_ms, read_ms) == 2 ? 0 : -1;
}

/* OpenSSH sftp over the ControlMaster connection: put then get, MB/s each. */
static int sftp_bulk(const char *path, size_t mib, const char *cm, double *up, double *down)
{
	char line[8192], opts[1200];
	/* sftp takes -P for the port; ssh_opts ends with ssh's "-p PORT" */
	snprintf(opts, sizeof opts, "%s", ssh_opts);
	char *pp = strstr(opts, " -p ");
	if (pp)
		*pp = '\0';
	snprintf(line, sizeof line,
	         "head -c %zu /dev/zero > %s.src && t0=$(date +%%s%%N) && "
	         "echo 'put %s.src %s' | sftp -q %s -o ControlPath=%s -P %u -b - %s@127.0.0.1 && "
	         "t1=$(date +%%s%%N) && "
	         "echo 'get %s %s.back' | sftp -q %s -o ControlPath=%s -P %u -b - %s@127.0.0.1 && "
	         "t2=$(date +%%s%%N) && echo $t0 $t1 $t2 > %s.times; rm -f %s.src %s.back",
	         mib << 20, path, path, path, opts, cm, fx.port, fx.user, path, path, opts, cm,
	         fx.port, fx.user, path, path, path);
	if (shell(line) != 0)
		return -1;
	char tp[480];
	snprintf(tp, sizeof tp, "%s.times", path);
	FILE *f = fopen(tp, "r");
	long long t0, t1, t2;
	int ok = f && fscanf(f, "%lld %lld %lld", &t0, &t1, &t2) == 3;
	if (f)
		fclose(f);
	if (!ok)
		return -1;
	*up = (double)(mib << 20) / 1e6 / ((double)(t1 - t0) / 1e9);
	*down = (double)(mib << 20) / 1e6 / ((double)(t2 - t1) / 1e9);
	return 0;
}

/* ---- Streaming: spawned processes' output through asp_spawn_start, against `ssh` over
 * the ControlMaster connection and paramiko. ---- */

#define LAT_RUNS    3    /* latency runs per transport, interleaved */
#define LAT_CAP     64   /* stamped lines kept per run (LAT_CMD prints 50) */
#define SPAWN_WARM  2    /* spawn rounds not counted */
#define SPAWN_N     20   /* spawn rounds counted */
#define BP_MS       2000 /* how long the slow follower follows */
#define BP_SLEEP_US 10000
/* 50 lines ~20 ms apart, each the remote CLOCK_REALTIME in ns: same machine, same clock */
#define LAT_CMD "for i in $(seq 50); do date +%s%N; sleep 0.02; done"

enum { T_NATIVE, T_AGENT, T_CM, T_PARAMIKO, T_COUNT };
static const char *const t_name[T_COUNT] = {
    "asp ssh native (`on_output`)", "asp ssh agent mode (`on_output`)",
    "ssh, ControlMaster (stdout pipe)", "paramiko (channel `readline`)"};

static int64_t real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* What one followed process delivered, whoever delivers it (callbacks or a pipe). */
typedef struct follow {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool ended, lost;
	double t_first, t_exit; /* now_ms() of the line "hi" and of the exit; -1: not seen */
	char line[64];
	size_t llen;
	double lat[LAT_CAP]; /* µs from each stamped line's stamp to its arrival */
	int nlat;
	bool bp;   /* backpressure run: count bytes only */
	bool slow; /* the follower takes BP_SLEEP_US per chunk */
	uint64_t consumed, gaps;
} follow;

static void follow_init(follow *f, bool bp)
{
	memset(f, 0, sizeof *f);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->t_first = f->t_exit = -1;
	f->bp = f->slow = bp;
}

static void follow_destroy(follow *f)
{
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
}

/* Splits stdout into lines (lock held): a stamped line gives a latency, "hi" the first
 * output. Anything else (the fixture's login noise over plain ssh) is ignored. */
static void feed_locked(follow *f, const uint8_t *d, size_t len)
{
	int64_t real = real_ns();
	double mono = now_ms();
	for (size_t i = 0; i < len; i++) {
		if (d[i] != '\n') {
			if (f->llen < sizeof f->line - 1)
				f->line[f->llen++] = (char)d[i];
			continue;
		}
		f->line[f->llen] = '\0';
		size_t n = f->llen;
		f->llen = 0;
		if (strcmp(f->line, "hi") == 0 && f->t_first < 0) {
			f->t_first = mono;
			continue;
		}
		if (n != 19 || strspn(f->line, "0123456789") != n || f->nlat >= LAT_CAP)
			continue;
		f->lat[f->nlat++] = (double)(real - atoll(f->line)) / 1e3;
	}
}

static void on_output(void *user, uint64_t proc, asp_stream s, uint64_t off, const uint8_t *d,
                      size_t len)
{
	(void)proc;
	follow *f = user;
	if (s != ASP_STREAM_STDOUT)
		return;
	pthread_mutex_lock(&f->mu);
	if (off != f->consumed)
		f->gaps++;
	f->consumed = off + len;
	if (!f->bp)
		feed_locked(f, d, len);
	bool slow = f->slow;
	pthread_mutex_unlock(&f->mu);
	if (slow) /* a slow consumer: the reader thread is held, which is backpressure */
		usleep(BP_SLEEP_US);
}

static void follow_end(follow *f, bool lost)
{
	pthread_mutex_lock(&f->mu);
	f->t_exit = now_ms();
	f->lost = lost;
	f->ended = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	(void)ev;
	follow_end(user, false);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	fprintf(stderr, "stream: connection lost: %s\n", err->message);
	follow_end(user, true);
}

static const asp_proc_callbacks follow_cb = {on_output, on_exit_ev, on_lost};

/* Spawns `command` (or argv when command is NULL) and follows it; t0 is set just before
 * the spawn. 0, or -1 (then no callback runs). */
static int asp_follow(asp_client *c, const char *command, const char *const *argv, size_t argc,
                      follow *f, double *t0, uint64_t *proc)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	if (command) {
		p.command = command;
	} else {
		p.has_argv = true;
		p.argv = (asp_strv){argv, argc};
	}
	asp_error err;
	*t0 = now_ms();
	if (asp_spawn_start(c, &p, &follow_cb, f, proc, &err) != ASP_OK) {
		fprintf(stderr, "spawn: %s\n", err.message);
		return -1;
	}
	return 0;
}

/* Waits up to ms for on_exit/on_lost; 0 when it came and was on_exit. */
static int follow_wait(follow *f, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&f->mu);
	int rc = 0;
	while (!f->ended && rc == 0)
		rc = pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	bool ok = f->ended && !f->lost;
	pthread_mutex_unlock(&f->mu);
	return ok ? 0 : -1;
}

/* `ssh` over the ControlMaster connection running `cmd` (NULL: `-O check`): argv in static
 * storage. */
static const char **cm_argv(const char *cm, const char *cmd)
{
	static char kh[400], port[16], cp[440], dest[100];
	static const char *v[24];
	snprintf(kh, sizeof kh, "UserKnownHostsFile=%s", fx.known_hosts);
	snprintf(port, sizeof port, "%u", fx.port);
	snprintf(cp, sizeof cp, "ControlPath=%s", cm);
	snprintf(dest, sizeof dest, "%s@127.0.0.1", fx.user);
	int k = 0;
	v[k++] = "ssh";
	v[k++] = "-o";
	v[k++] = "BatchMode=yes";
	v[k++] = "-o";
	v[k++] = "StrictHostKeyChecking=yes";
	v[k++] = "-o";
	v[k++] = kh;
	v[k++] = "-o";
	v[k++] = "LogLevel=ERROR";
	v[k++] = "-i";
	v[k++] = fx.client_key;
	v[k++] = "-p";
	v[k++] = port;
	v[k++] = "-o";
	v[k++] = cp;
	if (!cmd) {
		v[k++] = "-O";
		v[k++] = "check";
	}
	v[k++] = dest;
	v[k++] = cmd;
	v[k] = NULL;
	return v;
}

/* Starts argv (PATH lookup) with stdin from /dev/null, stdout (and stderr when `both`) to
 * a pipe whose read end it returns; -1 on failure. */
static int spawn_pipe(const char **argv, bool both, pid_t *pid)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	if (both)
		posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	else
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclose(&fa, p[0]);
	posix_spawn_file_actions_addclose(&fa, p[1]);
	int rc = posix_spawnp(pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return -1;
	}
	return p[0];
}

static int reap(pid_t pid)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* `ssh` over the ControlMaster connection: its stdout read as it comes; t_exit once it
 * was reaped. 0 or -1. */
static int cm_follow(const char *cm, const char *cmd, follow *f, double *t0)
{
	pid_t pid;
	*t0 = now_ms();
	int fd = spawn_pipe(cm_argv(cm, cmd), false, &pid);
	if (fd < 0)
		return -1;
	uint8_t buf[65536];
	ssize_t r;
	while ((r = read(fd, buf, sizeof buf)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		pthread_mutex_lock(&f->mu);
		feed_locked(f, buf, (size_t)r);
		pthread_mutex_unlock(&f->mu);
	}
	close(fd);
	int rc = reap(pid);
	f->t_exit = now_ms();
	return rc == 0 ? 0 : -1;
}

/* paramiko on one persistent client, driven line by line: "LAT" runs LAT_CMD and answers
 * "LAT n µs..." (time.time_ns() as each line comes out of readline), "SPAWN" runs
 * `echo hi` and answers "SPAWN ms-to-first-output ms-to-exit". */
typedef struct pk_helper {
	pid_t pid;
	FILE *to, *from;
} pk_helper;

static int pk_start(pk_helper *h)
{
	char script[3000];
	snprintf(script, sizeof script,
	         "import paramiko, sys, time\n"
	         "c = paramiko.SSHClient()\n"
	         "c.set_missing_host_key_policy(paramiko.AutoAddPolicy())\n"
	         "c.connect('127.0.0.1', port=%u, username='%s', key_filename='%s', "
	         "look_for_keys=False, allow_agent=False)\n"
	         "print('READY', flush=True)\n"
	         "while True:\n"
	         "    req = sys.stdin.readline().strip()\n"
	         "    if req == 'LAT':\n"
	         "        i, o, e = c.exec_command('%s')\n"
	         "        v = []\n"
	         "        for line in o:\n"
	         "            now = time.time_ns()\n"
	         "            s = line.strip()\n"
	         "            if len(s) == 19 and s.isdigit():\n"
	         "                v.append(f'{(now - int(s)) / 1e3:.1f}')\n"
	         "        o.channel.recv_exit_status()\n"
	         "        print('LAT', len(v), ' '.join(v), flush=True)\n"
	         "    elif req == 'SPAWN':\n"
	         "        t0 = time.monotonic_ns()\n"
	         "        i, o, e = c.exec_command('echo hi')\n"
	         "        buf, t1 = b'', 0\n"
	         "        while True:\n"
	         "            d = o.channel.recv(4096)\n"
	         "            if not d:\n"
	         "                break\n"
	         "            buf += d\n"
	         "            if not t1 and b'hi\\n' in buf:\n"
	         "                t1 = time.monotonic_ns()\n"
	         "        o.channel.recv_exit_status()\n"
	         "        t2 = time.monotonic_ns()\n"
	         "        f = (t1 - t0) / 1e6 if t1 else -1\n"
	         "        print(f'SPAWN {f:.3f} {(t2 - t0) / 1e6:.3f}', flush=True)\n"
	         "    else:\n"
	         "        break\n",
	         fx.port, fx.user, fx.client_key, LAT_CMD);
	int in[2], out[2];
	if (pipe(in) < 0)
		return -1;
	if (pipe(out) < 0) {
		close(in[0]);
		close(in[1]);
		return -1;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclose(&fa, in[0]);
	posix_spawn_file_actions_addclose(&fa, in[1]);
	posix_spawn_file_actions_addclose(&fa, out[0]);
	posix_spawn_file_actions_addclose(&fa, out[1]);
	const char *argv[] = {PARAMIKO_PY, "-c", script, NULL};
	int rc = posix_spawn(&h->pid, PARAMIKO_PY, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (rc != 0) {
		close(in[1]);
		close(out[0]);
		return -1;
	}
	h->to = fdopen(in[1], "w");
	h->from = fdopen(out[0], "r");
	char line[64];
	if (!h->to || !h->from || !fgets(line, sizeof line, h->from) ||
	    strcmp(line, "READY\n") != 0) {
		if (h->to)
			fclose(h->to);
		if (h->from)
			fclose(h->from);
		reap(h->pid);
		h->to = h->from = NULL;
		return -1;
	}
	return 0;
}

/* Sends a request, reads the one-line answer into line; 0 or -1. */
static int pk_ask(pk_helper *h, const char *req, char *line, size_t cap)
{
	if (!h->to || fprintf(h->to, "%s\n", req) < 0 || fflush(h->to) != 0 ||
	    !fgets(line, (int)cap, h->from))
		return -1;
	return 0;
}

static void pk_stop(pk_helper *h)
{
	if (!h->to)
		return;
	fprintf(h->to, "QUIT\n");
	fclose(h->to);
	fclose(h->from);
	reap(h->pid);
	h->to = h->from = NULL;
}

/* One latency run on transport t; appends the run's latencies to lat[t]. */
static void lat_run(int t, asp_client *nat, asp_client *agt, const char *cm, pk_helper *pk,
                    double *lat, int *n)
{
	static follow f;
	follow_init(&f, false);
	double t0;
	uint64_t proc;
	int ok = -1;
	if (t == T_NATIVE || t == T_AGENT) {
		asp_client *c = t == T_NATIVE ? nat : agt;
		if (asp_follow(c, LAT_CMD, NULL, 0, &f, &t0, &proc) == 0 &&
		    (ok = follow_wait(&f, 30000)) < 0)
			asp_proc_detach(c, proc);
	} else if (t == T_CM) {
		ok = cm_follow(cm, LAT_CMD, &f, &t0);
	} else {
		char line[4096];
		if (pk_ask(pk, "LAT", line, sizeof line) == 0 && strncmp(line, "LAT ", 4) == 0) {
			char *s = line + 4, *e;
			strtol(s, &e, 10);
			for (s = e;; s = e) {
				double v = strtod(s, &e);
				if (e == s || f.nlat >= LAT_CAP)
					break;
				f.lat[f.nlat++] = v;
			}
			ok = 0;
		}
	}
	if (ok == 0 && f.nlat < 40)
		fprintf(stderr, "stream latency: %s: only %d stamped lines\n", t_name[t], f.nlat);
	if (ok == 0)
		for (int i = 0; i < f.nlat; i++)
			lat[(*n)++] = f.lat[i];
	else
		fprintf(stderr, "stream latency: %s: failed\n", t_name[t]);
	follow_destroy(&f);
}

/* One spawn of `echo hi` on transport t: ms to the line "hi" and to the exit (-1 failed). */
static void spawn_run(int t, asp_client *nat, asp_client *agt, const char *cm, pk_helper *pk,
                      double *first, double *exit_ms)
{
	static follow f;
	follow_init(&f, false);
	*first = *exit_ms = -1;
	double t0 = 0;
	uint64_t proc;
	if (t == T_NATIVE || t == T_AGENT) {
		const char *argv[] = {"echo", "hi"};
		asp_client *c = t == T_NATIVE ? nat : agt;
		if (asp_follow(c, NULL, argv, 2, &f, &t0, &proc) == 0) {
			if (follow_wait(&f, 30000) < 0)
				asp_proc_detach(c, proc);
			else if (f.t_first >= 0) {
				*first = f.t_first - t0;
				*exit_ms = f.t_exit - t0;
			}
		}
	} else if (t == T_CM) {
		if (cm_follow(cm, "echo hi", &f, &t0) == 0 && f.t_first >= 0) {
			*first = f.t_first - t0;
			*exit_ms = f.t_exit - t0;
		}
	} else {
		char line[128];
		if (pk_ask(pk, "SPAWN", line, sizeof line) != 0 ||
		    sscanf(line, "SPAWN %lf %lf", first, exit_ms) != 2)
			*first = *exit_ms = -1;
	}
	follow_destroy(&f);
}

/* A number field ("VmRSS:", "wchar:") of /proc/PID/FILE; -1 when unreadable. */
static long long proc_field(pid_t pid, const char *file, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long long v = -1;
	size_t k = strlen(key);
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, k) == 0) {
			v = atoll(line + k);
			break;
		}
	fclose(f);
	return v;
}

static pid_t read_pidfile(const char *path)
{
	FILE *f = fopen(path, "r");
	int pid = 0;
	if (f) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return (pid_t)pid;
}

/* What a backpressure run saw at BP_MS: bytes the follower had, bytes the producer had
 * written (its /proc/PID/io wchar: same machine), the largest RSS growth of the client;
 * and the producer's lead halfway. */
typedef struct bp_result {
	double consumed_mb, wrote_mb, rss_mb;
	double ahead_half_mb; /* producer's lead at BP_MS / 2: the same when bounded */
	uint64_t gaps;
	bool ok;
} bp_result;

static void bp_command(const char *pidfile, char *out, size_t cap)
{
	unlink(pidfile);
	snprintf(out, cap, "echo $$ > %s; exec head -c 1073741824 /dev/zero", pidfile);
}

static bp_result bp_asp(asp_client *c, const char *pidfile)
{
	bp_result r = {0};
	char cmd[600];
	bp_command(pidfile, cmd, sizeof cmd);
	static follow f;
	follow_init(&f, true);
	pid_t self = getpid(), remote = 0;
	long long rss0 = proc_field(self, "status", "VmRSS:"), rss_max = rss0;
	double t0;
	uint64_t proc;
	if (asp_follow(c, cmd, NULL, 0, &f, &t0, &proc) < 0) {
		follow_destroy(&f);
		return r;
	}
	bool half = false;
	while (now_ms() - t0 < BP_MS) {
		usleep(20000);
		long long rss = proc_field(self, "status", "VmRSS:");
		if (rss > rss_max)
			rss_max = rss;
		if (!remote)
			remote = read_pidfile(pidfile);
		if (!half && remote && now_ms() - t0 >= BP_MS / 2) {
			half = true;
			long long w = proc_field(remote, "io", "wchar:");
			pthread_mutex_lock(&f.mu);
			r.ahead_half_mb = (double)(w - (long long)f.consumed) / 1e6;
			pthread_mutex_unlock(&f.mu);
		}
	}
	long long wrote = remote ? proc_field(remote, "io", "wchar:") : -1;
	pthread_mutex_lock(&f.mu);
	uint64_t consumed = f.consumed;
	f.slow = false; /* drain quickly from here */
	pthread_mutex_unlock(&f.mu);
	asp_proc_signal_params sp;
	asp_proc_signal_params_init(&sp);
	sp.proc = proc;
	sp.signal = "KILL";
	asp_proc_signal_result sr;
	asp_arena *a = asp_arena_new();
	asp_error err;
	if (asp_proc_signal(c, &sp, &sr, a, &err) != ASP_OK) {
		fprintf(stderr, "backpressure: proc_signal: %s\n", err.message);
		if (remote)
			kill(remote, SIGKILL);
	}
	asp_arena_free(a);
	if (follow_wait(&f, 20000) < 0) {
		fprintf(stderr, "backpressure: no exit after KILL\n");
		asp_proc_detach(c, proc);
	}
	r.ok = wrote >= 0 && rss0 >= 0 && half;
	r.consumed_mb = (double)consumed / 1e6;
	r.wrote_mb = (double)wrote / 1e6;
	r.rss_mb = (double)(rss_max - rss0) / 1e3;
	r.gaps = f.gaps;
	follow_destroy(&f);
	return r;
}

/* The pid of the ControlMaster process (`ssh -O check`), 0 if unknown. */
static pid_t cm_master_pid(const char *cm)
{
	pid_t pid;
	int fd = spawn_pipe(cm_argv(cm, NULL), true, &pid);
	if (fd < 0)
		return 0;
	char out[256] = "";
	size_t got = 0;
	ssize_t n;
	while (got + 1 < sizeof out && (n = read(fd, out + got, sizeof out - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fd);
	reap(pid);
	const char *p = strstr(out, "pid=");
	return p ? (pid_t)atoi(p + 4) : 0;
}

/* The same producer through `ssh` over the ControlMaster connection, its stdout read 64 KiB
 * per BP_SLEEP_US; the RSS growth is the master's (it writes into our pipe). */
static bp_result bp_cm(const char *cm, const char *pidfile)
{
	bp_result r = {0};
	char cmd[600];
	bp_command(pidfile, cmd, sizeof cmd);
	pid_t master = cm_master_pid(cm), remote = 0, pid;
	if (!master)
		return r;
	long long rss0 = proc_field(master, "status", "VmRSS:"), rss_max = rss0;
	double t0 = now_ms();
	int fd = spawn_pipe(cm_argv(cm, cmd), false, &pid);
	if (fd < 0)
		return r;
	static uint8_t buf[65536];
	uint64_t consumed = 0;
	bool half = false;
	while (now_ms() - t0 < BP_MS) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0 && !(n < 0 && errno == EINTR))
			break;
		if (n > 0)
			consumed += (uint64_t)n;
		usleep(BP_SLEEP_US);
		long long rss = proc_field(master, "status", "VmRSS:");
		if (rss > rss_max)
			rss_max = rss;
		if (!remote)
			remote = read_pidfile(pidfile);
		if (!half && remote && now_ms() - t0 >= BP_MS / 2) {
			half = true;
			r.ahead_half_mb =
			    (double)(proc_field(remote, "io", "wchar:") - (long long)consumed) /
			    1e6;
		}
	}
	long long wrote = remote ? proc_field(remote, "io", "wchar:") : -1;
	if (remote)
		kill(remote, SIGKILL);
	while (read(fd, buf, sizeof buf) > 0)
		;
	close(fd);
	reap(pid);
	r.ok = wrote >= 0 && rss0 >= 0 && half;
	r.consumed_mb = (double)consumed / 1e6;
	r.wrote_mb = (double)wrote / 1e6;
	r.rss_mb = (double)(rss_max - rss0) / 1e3;
	return r;
}

typedef struct stream_figures {
	double lat_med[T_COUNT], lat_p99[T_COUNT];
	int lat_n[T_COUNT];
	double first[T_COUNT], exit_ms[T_COUNT];
	bp_result bp[3]; /* native, agent, ControlMaster */
	double wall_s;
} stream_figures;

static double pct(double *v, int n, int p)
{
	if (n <= 0)
		return -1;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	int i = (n * p + 99) / 100 - 1;
	return v[i < 0 ? 0 : i];
}

/* The whole streaming section, transports taking turns (a fresh random order each round,
 * bench_order). */
static void streaming(asp_client *nat, asp_client *agt, const char *cm, stream_figures *sf)
{
	double t_start = now_ms();
	pk_helper pk = {0};
	bool have_pk = pk_start(&pk) == 0;
	if (!have_pk)
		fprintf(stderr, "stream: paramiko not measured (is python3-paramiko installed?)\n");
	static double lat[T_COUNT][LAT_RUNS * LAT_CAP];
	int nl[T_COUNT] = {0};
	unsigned long long seed = 1;
	int order[T_COUNT];
	for (int run = 0; run < LAT_RUNS; run++) {
		bench_order(order, T_COUNT, &seed);
		for (int j = 0; j < T_COUNT; j++) {
			int t = order[j];
			if (t != T_PARAMIKO || have_pk)
				lat_run(t, nat, agt, cm, &pk, lat[t], &nl[t]);
		}
	}
	double first[T_COUNT][SPAWN_N], ex[T_COUNT][SPAWN_N];
	int ns[T_COUNT] = {0};
	for (int i = 0; i < SPAWN_WARM + SPAWN_N; i++) {
		bench_order(order, T_COUNT, &seed);
		for (int j = 0; j < T_COUNT; j++) {
			int t = order[j];
			if (t == T_PARAMIKO && !have_pk)
				continue;
			double a, b;
			spawn_run(t, nat, agt, cm, &pk, &a, &b);
			if (a < 0)
				fprintf(stderr, "stream spawn: %s: failed\n", t_name[t]);
			else if (i >= SPAWN_WARM) {
				first[t][ns[t]] = a;
				ex[t][ns[t]++] = b;
			}
		}
	}
	pk_stop(&pk);
	for (int t = 0; t < T_COUNT; t++) {
		sf->lat_n[t] = nl[t];
		sf->lat_med[t] = median(lat[t], nl[t]);
		sf->lat_p99[t] = pct(lat[t], nl[t], 99);
		sf->first[t] = median(first[t], ns[t]);
		sf->exit_ms[t] = median(ex[t], ns[t]);
	}
	char pidfile[400];
	snprintf(pidfile, sizeof pidfile, "%s/producer.pid", fx.dir);
	sf->bp[0] = bp_asp(nat, pidfile);
	sf->bp[1] = bp_asp(agt, pidfile);
	sf->bp[2] = bp_cm(cm, pidfile);
	unlink(pidfile);
	sf->wall_s = (now_ms() - t_start) / 1e3;
}

static void print_streaming(const stream_figures *sf)
{
	printf("\n### Streaming over SSH (`asp_spawn_start`; %.0f s)\n\n", sf->wall_s);
	printf("output chunk latency: `%s` on the remote, remote stamp → line at the client, "
	       "µs over %d runs each (ratio of medians to ControlMaster):\n\n"
	       "| what | lines | median µs | p99 µs | ratio |\n|---|---|---|---|---|\n",
	       LAT_CMD, LAT_RUNS);
	double ref = sf->lat_med[T_CM];
	for (int t = 0; t < T_COUNT; t++) {
		if (sf->lat_n[t] == 0) {
			printf("| %s | 0 | n/a | n/a | |\n", t_name[t]);
			continue;
		}
		printf("| %s | %d | %.0f | %.0f | %.2f |\n", t_name[t], sf->lat_n[t],
		       sf->lat_med[t], sf->lat_p99[t], ref > 0 ? sf->lat_med[t] / ref : -1);
	}
	printf("\nspawn of `echo hi` → its line at the client, and → exit seen, ms, median of %d "
	       "(ratio to ControlMaster):\n\n"
	       "| what | first output | ratio | exit | ratio |\n|---|---|---|---|---|\n",
	       SPAWN_N);
	double rf = sf->first[T_CM], re = sf->exit_ms[T_CM];
	for (int t = 0; t < T_COUNT; t++) {
		if (sf->first[t] < 0) {
			printf("| %s | n/a | | n/a | |\n", t_name[t]);
			continue;
		}
		printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", t_name[t], sf->first[t],
		       sf->first[t] / rf, sf->exit_ms[t], sf->exit_ms[t] / re);
	}
	printf(
	    "\nbackpressure: `head -c 1073741824 /dev/zero` followed for %.0f s by a follower "
	    "that sleeps %d ms per chunk; MB (10^6 bytes) at the end, and the lead halfway:\n\n"
	    "| what | follower got | producer wrote | ran ahead | ahead at %.0f s | RSS growth |\n"
	    "|---|---|---|---|---|---|\n",
	    BP_MS / 1e3, BP_SLEEP_US / 1000, BP_MS / 2e3);
	static const char *const bp_name[3] = {"asp ssh native (client RSS)",
	                                       "asp ssh agent mode (client RSS)",
	                                       "ssh, ControlMaster, 64 KiB reads (master's RSS)"};
	for (int i = 0; i < 3; i++) {
		const bp_result *b = &sf->bp[i];
		if (!b->ok) {
			printf("| %s | n/a | n/a | n/a | n/a | n/a |\n", bp_name[i]);
			continue;
		}
		printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", bp_name[i], b->consumed_mb,
		       b->wrote_mb, b->wrote_mb - b->consumed_mb, b->ahead_half_mb, b->rss_mb);
	}
	if (sf->bp[0].gaps || sf->bp[1].gaps)
		printf(
		    "\noffset gaps in the followed output: native %llu, agent %llu (should be 0)\n",
		    (unsigned long long)sf->bp[0].gaps, (unsigned long long)sf->bp[1].gaps);
}

static void ratio_row(const char *what, double v, double ref)
{
	if (v < 0)
		printf("| %s | n/a | |\n", what);
	else if (ref > 0)
		printf("| %s | %.2f | %.2f |\n", what, v, v / ref);
	else
		printf("| %s | %.2f | |\n", what, v);
}

int main(int argc, char **argv)
{
	const char *agent_arg = argc > 1 ? argv[1] : getenv("ASP_AGENT");
	/* the sandbox is this machine: the agent path must be absolute there */
	char *agent = agent_arg ? realpath(agent_arg, NULL) : NULL;
	size_t mib = 256;
	bool skip_startup = false, streaming_only = false;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--skip-startup-files") == 0)
			skip_startup = true;
		else if (strcmp(argv[i], "--streaming-only") == 0)
			streaming_only = true;
		else if (atoi(argv[i]) > 0)
			mib = (size_t)atoi(argv[i]);
	}
	if (!agent) {
		fprintf(stderr, "usage: bench_ssh ASP_AGENT [MiB] [--skip-startup-files] "
		                "[--streaming-only]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if ((skip_startup ? sshd_start(&fx) : sshd_start_real_login(&fx)) < 0) {
		fprintf(stderr, "bench_ssh: %s\n", fx.why);
		return 1;
	}
	char cm[400];
	snprintf(cm, sizeof cm, "%s/cm", fx.dir);
	snprintf(ssh_opts, sizeof ssh_opts,
	         "-o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s "
	         "-o LogLevel=ERROR -i %s -p %u",
	         fx.known_hosts, fx.client_key, fx.port);
	char path4k[400], pathbig[400], line[8192];
	snprintf(path4k, sizeof path4k, "%s/f4k", fx.dir);
	snprintf(pathbig, sizeof pathbig, "%s/big", fx.dir);
	snprintf(line, sizeof line, "head -c 4096 /dev/urandom > %s", path4k);
	shell(line);

	asp_client *nat = open_client(NULL), *agt = open_client(agent);
	if (!nat || !agt) {
		sshd_stop(&fx);
		return 1;
	}
	int n = 30;
	double e_nat = -1, e_agt = -1, e_fresh = -1, e_cm = -1, e_pk = -1, r_pk = -1;
	double r_nat = -1, r_agt = -1, login = -1, sh_only = -1;
	if (!streaming_only) {
		e_nat = exec_true(nat, n);
		e_agt = exec_true(agt, n);
		snprintf(line, sizeof line, "ssh %s %s@127.0.0.1 true", ssh_opts, fx.user);
		e_fresh = time_shell(line, 10);
	}
	snprintf(line, sizeof line,
	         "ssh %s -o ControlMaster=yes -o ControlPath=%s -o ControlPersist=120 -N -f "
	         "%s@127.0.0.1",
	         ssh_opts, cm, fx.user);
	shell(line);
	if (!streaming_only) {
		snprintf(line, sizeof line, "ssh %s -o ControlPath=%s %s@127.0.0.1 true", ssh_opts,
		         cm, fx.user);
		e_cm = time_shell(line, n);
		if (paramiko(path4k, n, &e_pk, &r_pk) < 0)
			fprintf(stderr,
			        "paramiko: not measured (is python3-paramiko installed?)\n");
		r_nat = read_4k(nat, path4k, 4 * n);
		r_agt = read_4k(agt, path4k, 4 * n);
		/* the login shell alone: what sshd runs before any command (reads ~/.bashrc) */
		login =
		    time_shell("env -u SHLVL SSH_CLIENT='127.0.0.1 1 22' \"$SHELL\" -c true", 10);
		sh_only = time_shell("/bin/sh -c true", 10);
	}

	/* before the bulk transfers, whose buffers would hide the client's RSS growth */
	static stream_figures sf;
	streaming(nat, agt, cm, &sf);

	enum { REPS = 3 };
	double un[REPS], dn[REPS], ua[REPS], da[REPS], us[REPS], ds[REPS];
	int kn = 0, ka = 0, ks = 0;
	for (int rep = 0; rep < REPS && !streaming_only; rep++) {
		if (bulk(nat, pathbig, mib, &un[kn], &dn[kn]) == 0)
			kn++;
		if (bulk(agt, pathbig, mib, &ua[ka], &da[ka]) == 0)
			ka++;
		if (sftp_bulk(pathbig, mib, cm, &us[ks], &ds[ks]) == 0)
			ks++;
	}
	double up_nat = median(un, kn), down_nat = median(dn, kn);
	double up_agt = median(ua, ka), down_agt = median(da, ka);
	double up_sftp = median(us, ks), down_sftp = median(ds, ks);
	if (!ks && !streaming_only)
		fprintf(stderr, "sftp: not measured\n");
	snprintf(line, sizeof line, "ssh %s -o ControlPath=%s -O exit %s@127.0.0.1", ssh_opts, cm,
	         fx.user);
	shell(line);
	asp_client_free(nat);
	asp_client_free(agt);

	printf("## SSH transport (one sshd on 127.0.0.1, medians; login shell %s)\n\n",
	       skip_startup ? "without startup files" : "with the user's startup files");
	if (!streaming_only) {
		printf("exec `true` round trip, ms (ratio to ControlMaster):\n\n| what | ms | "
		       "ratio |\n"
		       "|---|---|---|\n");
		ratio_row("asp ssh native", e_nat, e_cm);
		ratio_row("asp ssh agent mode", e_agt, e_cm);
		ratio_row("ssh, fresh connection", e_fresh, e_cm);
		ratio_row("ssh, ControlMaster", e_cm, e_cm);
		ratio_row("paramiko exec_command", e_pk, e_cm);
		printf("\nagent mode / native: %.3f; native / paramiko: %.2f\n", e_agt / e_nat,
		       e_pk > 0 ? e_nat / e_pk : -1);
		printf("\nthe user's login shell alone, as sshd starts it (`$SHELL -c true`, "
		       "startup files "
		       "read): %.2f ms; `/bin/sh -c true`: %.2f ms\n",
		       login, sh_only);
		printf("\n4 KiB read, ms (ratio to paramiko SFTP):\n\n| what | ms | ratio "
		       "|\n|---|---|---|\n");
		ratio_row("asp ssh native (SFTP)", r_nat, r_pk);
		ratio_row("asp ssh agent mode", r_agt, r_pk);
		ratio_row("paramiko SFTP open+read+close", r_pk, r_pk);
		printf("\n%zu MiB transfer, MB/s (ratio to OpenSSH sftp):\n\n| what | upload | "
		       "ratio | "
		       "download | ratio |\n|---|---|---|---|---|\n",
		       mib);
		printf("| asp ssh native | %.0f | %.2f | %.0f | %.2f |\n", up_nat, up_nat / up_sftp,
		       down_nat, down_nat / down_sftp);
		printf("| asp ssh agent mode | %.0f | %.2f | %.0f | %.2f |\n", up_agt,
		       up_agt / up_sftp, down_agt, down_agt / down_sftp);
		printf("| OpenSSH sftp (ControlMaster) | %.0f | 1.00 | %.0f | 1.00 |\n", up_sftp,
		       down_sftp);
	}
	print_streaming(&sf);
	sshd_stop(&fx);
	free(agent);
	return 0;
}
