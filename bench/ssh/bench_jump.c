/*
 * Through one jump host: the SSH transport's ssh.jump against OpenSSH's ProxyJump
 * (`ssh -J`) through the same two servers in the same run (the test fixture's sshd twice
 * on loopback ports: a bastion, and a target reached through a direct-tcpip channel of the
 * bastion). Prints a Markdown table of medians and ratios (asp ÷ OpenSSH, time):
 *   connect and exec `true`: `asp exec -- true` against `ssh -J bastion target true`, each
 *     a fresh process and two handshakes;
 *   exec `true` on a connection: asp's client against `ssh` over a ControlMaster
 *     connection that went through the bastion;
 *   MiB up and down: asp write and read (15 MiB calls) against OpenSSH `sftp` over that
 *     ControlMaster connection;
 * and the same two servers directly (no jump) for what the hop itself costs.
 *
 *   bench_jump ASP [MiB] [ROUNDS]
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "bench_util.h"
#include "sshd_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define EXEC_N 30 /* exec calls per round on a connection */

static sshd_fixture bastion, target;
static char dir[400], ssh_config[500], cm[500], asp_jump_cfg[500], asp_direct_cfg[500];
static const char *asp_cli;

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

/* Wall time of one shell line, or -1 when it failed. */
static double time_shell(const char *line)
{
	double t0 = now_ms();
	return shell(line) == 0 ? now_ms() - t0 : -1;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

/* The .asp.json for the target, through the bastion when `jump`. */
static int write_asp_config(const char *path, bool jump)
{
	char hop[2000] = "", text[5000];
	if (jump)
		snprintf(hop, sizeof hop,
		         ", \"jump\": [{\"host\": \"127.0.0.1\", \"port\": %u, \"user\": \"%s\", "
		         "\"identity_file\": \"%s\", \"known_hosts\": \"%s\"}]",
		         bastion.port, bastion.user, bastion.client_key, bastion.known_hosts);
	snprintf(text, sizeof text,
	         "{\"version\": 1, \"transport\": \"ssh\", \"cwd\": \"/tmp\", \"ssh\": {\"host\": "
	         "\"127.0.0.1\", \"port\": %u, \"user\": \"%s\", \"identity_file\": \"%s\", "
	         "\"known_hosts\": \"%s\"%s}}\n",
	         target.port, target.user, target.client_key, target.known_hosts, hop);
	return write_text(path, text);
}

/* OpenSSH's view of the same: Host bastion, Host target (ProxyJump bastion), Host direct. */
static int write_ssh_config(void)
{
	char text[4000];
	snprintf(text, sizeof text,
	         "Host bastion\n  HostName 127.0.0.1\n  Port %u\n  User %s\n  IdentityFile %s\n"
	         "  UserKnownHostsFile %s\n"
	         "Host target direct\n  HostName 127.0.0.1\n  Port %u\n  User %s\n"
	         "  IdentityFile %s\n  UserKnownHostsFile %s\n"
	         "Host target\n  ProxyJump bastion\n"
	         "Host *\n  BatchMode yes\n  StrictHostKeyChecking yes\n  IdentitiesOnly yes\n"
	         "  LogLevel ERROR\n",
	         bastion.port, bastion.user, bastion.client_key, bastion.known_hosts, target.port,
	         target.user, target.client_key, target.known_hosts);
	return write_text(ssh_config, text);
}

static asp_client *open_client(const char *path)
{
	asp_client *c = NULL;
	asp_error err;
	if (asp_client_open_path(path, &c, &err) != ASP_OK)
		fprintf(stderr, "open %s: %s\n", path, err.message);
	return c;
}

static double exec_true(asp_client *c)
{
	double v[EXEC_N];
	asp_arena *a = asp_arena_new();
	for (int i = 0; i < EXEC_N; i++) {
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
		v[i] = now_ms() - t0;
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return median(v, EXEC_N);
}

static double cm_exec_true(const char *host)
{
	char line[1500];
	snprintf(line, sizeof line, "ssh -F %s -S %s-%s %s true", ssh_config, cm, host, host);
	double v[EXEC_N];
	for (int i = 0; i < EXEC_N; i++)
		if ((v[i] = time_shell(line)) < 0)
			return -1;
	return median(v, EXEC_N);
}

/* Upload then download `mib` MiB in 15 MiB calls; seconds each. */
static int asp_bulk(asp_client *c, size_t mib, double *up, double *down)
{
	size_t total = mib << 20, chunk = 15u << 20;
	uint8_t *buf = malloc(chunk);
	if (!buf)
		return -1;
	for (size_t i = 0; i < chunk; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 12));
	char path[500];
	snprintf(path, sizeof path, "%s/asp-bulk", dir);
	asp_arena *a = asp_arena_new();
	asp_error err;
	int rc = -1;
	double t0 = now_ms();
	for (size_t off = 0; off < total; off += chunk) {
		asp_write_params p;
		asp_write_params_init(&p);
		p.path = path;
		p.data = (asp_bytes){buf, total - off < chunk ? total - off : chunk};
		p.has_offset = off > 0;
		p.offset = off;
		asp_write_result r;
		if (asp_write(c, &p, &r, a, &err) != ASP_OK) {
			fprintf(stderr, "write: %s\n", err.message);
			goto out;
		}
		asp_arena_reset(a);
	}
	*up = (now_ms() - t0) / 1e3;
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
			goto out;
		}
		asp_arena_reset(a);
	}
	*down = (now_ms() - t0) / 1e3;
	rc = 0;
out:
	unlink(path);
	asp_arena_free(a);
	free(buf);
	return rc;
}

/* OpenSSH sftp over the ControlMaster connection to `host`: put then get, seconds each. */
static int sftp_bulk(const char *host, size_t mib, double *up, double *down)
{
	char src[500], line[3000];
	snprintf(src, sizeof src, "%s/sftp-src", dir);
	snprintf(line, sizeof line, "head -c %zu /dev/zero > %s", mib << 20, src);
	if (shell(line) != 0)
		return -1;
	snprintf(line, sizeof line,
	         "echo 'put %s %s/sftp-up' | sftp -q -F %s -o ControlPath=%s-%s -b - %s", src, dir,
	         ssh_config, cm, host, host);
	*up = time_shell(line) / 1e3;
	snprintf(line, sizeof line,
	         "echo 'get %s/sftp-up %s/sftp-back' | sftp -q -F %s -o ControlPath=%s-%s -b - %s",
	         dir, dir, ssh_config, cm, host, host);
	*down = time_shell(line) / 1e3;
	snprintf(line, sizeof line, "rm -f %s %s/sftp-up %s/sftp-back", src, dir, dir);
	shell(line);
	return *up > 0 && *down > 0 ? 0 : -1;
}

enum { R_CONNECT, R_EXEC, R_UP, R_DOWN, R_COUNT };
static const char *const row_name[R_COUNT] = {"connect and exec `true`",
                                              "exec `true` on a connection", "upload", "download"};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_jump ASP [MiB] [ROUNDS]\n");
		return 2;
	}
	asp_cli = argv[1];
	size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 64;
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	if (rounds < 1 || rounds > 32)
		rounds = 5;
	if (sshd_start(&bastion) != 0 || sshd_start(&target) != 0) {
		fprintf(stderr, "bench_jump: %s%s\n", bastion.why, target.why);
		return 1;
	}
	snprintf(dir, sizeof dir, "%s/bench", target.dir);
	mkdir(dir, 0755);
	snprintf(ssh_config, sizeof ssh_config, "%s/ssh_config", dir);
	snprintf(cm, sizeof cm, "%s/cm", dir);
	snprintf(asp_jump_cfg, sizeof asp_jump_cfg, "%s/jump.asp.json", dir);
	snprintf(asp_direct_cfg, sizeof asp_direct_cfg, "%s/direct.asp.json", dir);
	if (write_ssh_config() != 0 || write_asp_config(asp_jump_cfg, true) != 0 ||
	    write_asp_config(asp_direct_cfg, false) != 0)
		return 1;
	/* OpenSSH's persistent connections, through the bastion and not */
	char line[2000];
	const char *hosts[2] = {"target", "direct"};
	for (int h = 0; h < 2; h++) {
		snprintf(line, sizeof line, "ssh -F %s -M -S %s-%s -fN %s", ssh_config, cm,
		         hosts[h], hosts[h]);
		if (shell(line) != 0) {
			fprintf(stderr, "bench_jump: the ControlMaster to %s did not start\n",
			        hosts[h]);
			return 1;
		}
	}
	asp_client *cj = open_client(asp_jump_cfg), *cd = open_client(asp_direct_cfg);
	if (!cj || !cd)
		return 1;

	/* [0]: through the bastion, [1]: direct; asp then OpenSSH; seconds or ms */
	double v[2][2][R_COUNT][32];
	unsigned long long seed = 0x4a756d70ull;
	for (int r = 0; r < rounds; r++) {
		int order[4];
		bench_order(order, 4, &seed);
		for (int k = 0; k < 4; k++) {
			int path = order[k] / 2, peer = order[k] % 2;
			const char *host = hosts[path];
			double(*out)[32] = v[path][peer];
			double up = -1, down = -1;
			if (peer == 0) {
				snprintf(line, sizeof line, "%s --config %s exec -- true", asp_cli,
				         path == 0 ? asp_jump_cfg : asp_direct_cfg);
				out[R_CONNECT][r] = time_shell(line);
				out[R_EXEC][r] = exec_true(path == 0 ? cj : cd);
				asp_bulk(path == 0 ? cj : cd, mib, &up, &down);
			} else {
				snprintf(line, sizeof line, "ssh -F %s -o ControlPath=none %s true",
				         ssh_config, host);
				out[R_CONNECT][r] = time_shell(line);
				out[R_EXEC][r] = cm_exec_true(host);
				sftp_bulk(host, mib, &up, &down);
			}
			out[R_UP][r] = up;
			out[R_DOWN][r] = down;
		}
	}
	printf("Through one jump host (two sshd on loopback), %zu MiB, %d rounds, medians:\n\n",
	       mib, rounds);
	printf("| | asp ssh.jump | OpenSSH `ssh -J` | ratio | asp direct | OpenSSH direct | "
	       "ratio |\n|---|---|---|---|---|---|---|\n");
	for (int row = 0; row < R_COUNT; row++) {
		double m[2][2];
		for (int path = 0; path < 2; path++)
			for (int peer = 0; peer < 2; peer++)
				m[path][peer] = median(v[path][peer][row], rounds);
		const char *unit = row >= R_UP ? "s" : "ms";
		printf("| %s | %.2f %s | %.2f %s | %.2f | %.2f %s | %.2f %s | %.2f |\n",
		       row_name[row], m[0][0], unit, m[0][1], unit, m[0][0] / m[0][1], m[1][0],
		       unit, m[1][1], unit, m[1][0] / m[1][1]);
	}
	asp_client_free(cj);
	asp_client_free(cd);
	for (int h = 0; h < 2; h++) {
		snprintf(line, sizeof line, "ssh -F %s -S %s-%s -O exit %s", ssh_config, cm,
		         hosts[h], hosts[h]);
		shell(line);
	}
	sshd_stop(&target);
	sshd_stop(&bastion);
	return 0;
}
