/*
 * The SSH transport against what people use today, in one run against one sshd (the
 * test fixture's: Debian's sshd on a loopback port). Prints a Markdown table of medians
 * and ratios:
 *   exec `true` round trip: asp native, asp agent mode, `ssh` with a fresh connection,
 *     `ssh` over a ControlMaster connection, paramiko exec_command on a persistent client
 *   4 KiB file read: asp native, asp agent mode, paramiko SFTP
 *   256 MiB upload and download: asp native, asp agent mode, OpenSSH `sftp`
 * and the cost of the login shell's startup files, which every native exec (and every
 * OpenSSH or paramiko command) pays.
 *
 *   bench_ssh ASP_AGENT [MiB] [--skip-startup-files]
 *
 * MiB: size of the bulk transfer (default 256). By default the login shell reads the
 * user's startup files as sshd normally has it; --skip-startup-files runs the tests'
 * login shell instead (bash without ~/.bashrc) to show the transport's own cost.
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "sshd_fixture.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
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

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	if (n <= 0)
		return -1;
	qsort(v, (size_t)n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

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
	size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 256;
	bool skip_startup = argc > 3 && strcmp(argv[3], "--skip-startup-files") == 0;
	if (mib == 0)
		mib = 256;
	if (!agent) {
		fprintf(stderr, "usage: bench_ssh ASP_AGENT [MiB]\n");
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
	double e_nat = exec_true(nat, n), e_agt = exec_true(agt, n);
	snprintf(line, sizeof line, "ssh %s %s@127.0.0.1 true", ssh_opts, fx.user);
	double e_fresh = time_shell(line, 10);
	snprintf(line, sizeof line,
	         "ssh %s -o ControlMaster=yes -o ControlPath=%s -o ControlPersist=120 -N -f "
	         "%s@127.0.0.1",
	         ssh_opts, cm, fx.user);
	shell(line);
	snprintf(line, sizeof line, "ssh %s -o ControlPath=%s %s@127.0.0.1 true", ssh_opts, cm,
	         fx.user);
	double e_cm = time_shell(line, n);
	double e_pk = -1, r_pk = -1;
	if (paramiko(path4k, n, &e_pk, &r_pk) < 0)
		fprintf(stderr, "paramiko: not measured (is python3-paramiko installed?)\n");
	double r_nat = read_4k(nat, path4k, 4 * n), r_agt = read_4k(agt, path4k, 4 * n);
	/* the login shell alone: what sshd runs before any command (bash reads ~/.bashrc) */
	double login =
	    time_shell("env -u SHLVL SSH_CLIENT='127.0.0.1 1 22' \"$SHELL\" -c true", 10);
	double sh_only = time_shell("/bin/sh -c true", 10);

	enum { REPS = 3 };
	double un[REPS], dn[REPS], ua[REPS], da[REPS], us[REPS], ds[REPS];
	int kn = 0, ka = 0, ks = 0;
	for (int rep = 0; rep < REPS; rep++) {
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
	if (!ks)
		fprintf(stderr, "sftp: not measured\n");
	snprintf(line, sizeof line, "ssh %s -o ControlPath=%s -O exit %s@127.0.0.1", ssh_opts, cm,
	         fx.user);
	shell(line);
	asp_client_free(nat);
	asp_client_free(agt);

	printf("## SSH transport (one sshd on 127.0.0.1, medians; login shell %s)\n\n",
	       skip_startup ? "without startup files" : "with the user's startup files");
	printf("exec `true` round trip, ms (ratio to ControlMaster):\n\n| what | ms | ratio |\n"
	       "|---|---|---|\n");
	ratio_row("asp ssh native", e_nat, e_cm);
	ratio_row("asp ssh agent mode", e_agt, e_cm);
	ratio_row("ssh, fresh connection", e_fresh, e_cm);
	ratio_row("ssh, ControlMaster", e_cm, e_cm);
	ratio_row("paramiko exec_command", e_pk, e_cm);
	printf("\nagent mode / native: %.3f; native / paramiko: %.2f\n", e_agt / e_nat,
	       e_pk > 0 ? e_nat / e_pk : -1);
	printf("\nthe user's login shell alone, as sshd starts it (`$SHELL -c true`, startup files "
	       "read): %.2f ms; `/bin/sh -c true`: %.2f ms\n",
	       login, sh_only);
	printf(
	    "\n4 KiB read, ms (ratio to paramiko SFTP):\n\n| what | ms | ratio |\n|---|---|---|\n");
	ratio_row("asp ssh native (SFTP)", r_nat, r_pk);
	ratio_row("asp ssh agent mode", r_agt, r_pk);
	ratio_row("paramiko SFTP open+read+close", r_pk, r_pk);
	printf("\n%zu MiB transfer, MB/s (ratio to OpenSSH sftp):\n\n| what | upload | ratio | "
	       "download | ratio |\n|---|---|---|---|---|\n",
	       mib);
	printf("| asp ssh native | %.0f | %.2f | %.0f | %.2f |\n", up_nat, up_nat / up_sftp,
	       down_nat, down_nat / down_sftp);
	printf("| asp ssh agent mode | %.0f | %.2f | %.0f | %.2f |\n", up_agt, up_agt / up_sftp,
	       down_agt, down_agt / down_sftp);
	printf("| OpenSSH sftp (ControlMaster) | %.0f | 1.00 | %.0f | 1.00 |\n", up_sftp,
	       down_sftp);
	sshd_stop(&fx);
	free(agent);
	return 0;
}
