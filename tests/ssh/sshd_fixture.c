/* The sshd fixture: see sshd_fixture.h. */
#include "sshd_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SSHD          "/usr/sbin/sshd"
#define SFTP_SERVER   "/usr/lib/openssh/sftp-server"
#define START_WAIT_MS 10000

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sshd_run(const char *const argv[], char *out, size_t cap)
{
	int p[2] = {-1, -1};
	if (out && pipe(p) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (out) {
		posix_spawn_file_actions_adddup2(&fa, p[1], 1);
		posix_spawn_file_actions_addclose(&fa, p[0]);
		posix_spawn_file_actions_addclose(&fa, p[1]);
	} else {
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	}
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (out)
		close(p[1]);
	if (rc != 0) {
		if (out)
			close(p[0]);
		return -1;
	}
	if (out) {
		size_t got = 0;
		ssize_t n;
		while (got + 1 < cap && (n = read(p[0], out + got, cap - 1 - got)) > 0)
			got += (size_t)n;
		out[got] = '\0';
		close(p[0]);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static unsigned free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return 0;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	unsigned port = 0;
	if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(s);
	return port;
}

static bool port_open(unsigned port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return false;
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                        .sin_port = htons((uint16_t)port)};
	bool ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
	close(s);
	return ok;
}

static int write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -1;
	size_t n = strlen(text);
	bool ok = write(fd, text, n) == (ssize_t)n;
	return close(fd) == 0 && ok ? 0 : -1;
}

static int keygen(sshd_fixture *fx, const char *path)
{
	unlink(path);
	char pub[400];
	snprintf(pub, sizeof pub, "%s.pub", path);
	unlink(pub);
	const char *argv[] = {"/usr/bin/ssh-keygen",
	                      "-q",
	                      "-t",
	                      "ed25519",
	                      "-N",
	                      "",
	                      "-C",
	                      "asp-test",
	                      "-f",
	                      path,
	                      NULL};
	if (sshd_run(argv, NULL, 0) != 0) {
		snprintf(fx->why, sizeof fx->why,
		         "ssh-keygen failed for %s; run scripts/install-deps.sh (openssh-client)",
		         path);
		return -1;
	}
	return 0;
}

/* known_hosts (the host key for [127.0.0.1]:port) and the fingerprint of the host key. */
static int learn_host_key(sshd_fixture *fx)
{
	char pub[400], line[1024], fp[512];
	snprintf(pub, sizeof pub, "%s.pub", fx->host_key);
	FILE *f = fopen(pub, "r");
	if (!f || !fgets(line, sizeof line, f)) {
		if (f)
			fclose(f);
		snprintf(fx->why, sizeof fx->why, "cannot read %s", pub);
		return -1;
	}
	fclose(f);
	char *sp = strchr(line, ' ');
	sp = sp ? strchr(sp + 1, ' ') : NULL;
	if (sp)
		*sp = '\0'; /* "ssh-ed25519 AAAA...", without the comment */
	char entry[1200];
	snprintf(entry, sizeof entry, "[127.0.0.1]:%u %s\n", fx->port, line);
	if (write_file(fx->known_hosts, entry, 0600) < 0)
		return -1;
	const char *argv[] = {"/usr/bin/ssh-keygen", "-l", "-E", "sha256", "-f", pub, NULL};
	if (sshd_run(argv, fp, sizeof fp) != 0) {
		snprintf(fx->why, sizeof fx->why, "ssh-keygen -l failed for %s", pub);
		return -1;
	}
	char *s = strstr(fp, "SHA256:");
	if (!s) {
		snprintf(fx->why, sizeof fx->why, "no fingerprint in '%s'", fp);
		return -1;
	}
	size_t n = strcspn(s, " \n");
	snprintf(fx->fingerprint, sizeof fx->fingerprint, "%.*s", (int)n, s);
	return 0;
}

/*
 * The tests' login shell: bash skips ~/.bashrc (SHLVL=1 makes it think it is not the top
 * level), so results do not depend on the startup files of whoever runs the tests, and
 * it runs a script (BASH_ENV) that prints noise on stdout and stderr before every command
 * but sftp-server: the transport must keep such noise out of exec results and agent mode.
 */
static const char noise_script[] =
    "case $BASH_EXECUTION_STRING in\n"
    "*sftp-server*) ;;\n"
    "*) printf 'login noise on stdout\\n'; printf 'login noise on stderr\\n' >&2;;\n"
    "esac\n"
    "unset BASH_ENV\n";

static int launch(sshd_fixture *fx)
{
	char cfg[400], text[3072], pidfile[400], noise[400], setenv_line[600] = "";
	snprintf(noise, sizeof noise, "%s/login_noise.sh", fx->dir);
	if (!fx->real_login) {
		if (write_file(noise, noise_script, 0644) < 0) {
			snprintf(fx->why, sizeof fx->why, "cannot write %s", noise);
			return -1;
		}
		snprintf(setenv_line, sizeof setenv_line, "SetEnv SHLVL=1 BASH_ENV=%s\n", noise);
	}
	snprintf(cfg, sizeof cfg, "%s/sshd_config", fx->dir);
	snprintf(pidfile, sizeof pidfile, "%s/sshd.pid", fx->dir);
	snprintf(text, sizeof text,
	         "Port %u\n"
	         "ListenAddress 127.0.0.1\n"
	         "HostKey %s\n"
	         "PidFile %s\n"
	         "AuthorizedKeysFile %s/authorized_keys\n"
	         "StrictModes no\n"
	         "UsePAM no\n"
	         "PermitRootLogin yes\n"
	         "PubkeyAuthentication yes\n"
	         "PasswordAuthentication no\n"
	         "KbdInteractiveAuthentication no\n"
	         "MaxStartups 100\n"
	         "MaxSessions %u\n"
	         "Subsystem sftp " SFTP_SERVER "\n"
	         "%s"
	         "LogLevel ERROR\n",
	         fx->port, fx->host_key, pidfile, fx->dir, fx->max_sessions, setenv_line);
	if (write_file(cfg, text, 0600) < 0) {
		snprintf(fx->why, sizeof fx->why, "cannot write %s", cfg);
		return -1;
	}
	int log = open(fx->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (log >= 0)
		posix_spawn_file_actions_adddup2(&fa, log, 2);
	/* -D: stays in the foreground as our child; -e: logs to stderr (the log file) */
	const char *argv[] = {SSHD, "-D", "-e", "-f", cfg, NULL};
	int rc = posix_spawn(&fx->pid, SSHD, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (log >= 0)
		close(log);
	if (rc != 0) {
		fx->pid = 0;
		snprintf(fx->why, sizeof fx->why, "cannot run %s: %s", SSHD, strerror(rc));
		return -1;
	}
	for (long long end = now_ms() + START_WAIT_MS; now_ms() < end;) {
		int status;
		if (waitpid(fx->pid, &status, WNOHANG) == fx->pid) {
			fx->pid = 0;
			char logtext[600] = "";
			FILE *f = fopen(fx->log, "r");
			if (f) {
				size_t n = fread(logtext, 1, sizeof logtext - 1, f);
				logtext[n] = '\0';
				fclose(f);
			}
			snprintf(fx->why, sizeof fx->why, "sshd exited at start: %s", logtext);
			return -1;
		}
		if (port_open(fx->port))
			return 0;
		usleep(20000);
	}
	snprintf(fx->why, sizeof fx->why, "sshd did not listen on 127.0.0.1:%u within %d ms",
	         fx->port, START_WAIT_MS);
	return -1;
}

static int start(sshd_fixture *fx, bool real_login, unsigned max_sessions)
{
	memset(fx, 0, sizeof *fx);
	fx->real_login = real_login;
	fx->max_sessions = max_sessions;
	if (access(SSHD, X_OK) != 0 || access(SFTP_SERVER, X_OK) != 0) {
		snprintf(fx->why, sizeof fx->why,
		         "%s or %s is missing: the SSH tests need a real OpenSSH server; run "
		         "scripts/install-deps.sh (package openssh-server)",
		         SSHD, SFTP_SERVER);
		return -1;
	}
	/* sshd refuses to start without its privilege separation directory */
	if (geteuid() == 0)
		(void)mkdir("/run/sshd", 0755);
	struct passwd *pw = getpwuid(geteuid());
	snprintf(fx->user, sizeof fx->user, "%s", pw ? pw->pw_name : "root");
	snprintf(fx->dir, sizeof fx->dir, "/tmp/asp-sshd-XXXXXX");
	if (!mkdtemp(fx->dir)) {
		snprintf(fx->why, sizeof fx->why, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(fx->host_key, sizeof fx->host_key, "%s/host_ed25519", fx->dir);
	snprintf(fx->client_key, sizeof fx->client_key, "%s/client_ed25519", fx->dir);
	snprintf(fx->known_hosts, sizeof fx->known_hosts, "%s/known_hosts", fx->dir);
	snprintf(fx->empty_known_hosts, sizeof fx->empty_known_hosts, "%s/known_hosts_empty",
	         fx->dir);
	snprintf(fx->log, sizeof fx->log, "%s/sshd.log", fx->dir);
	if (keygen(fx, fx->host_key) < 0 || keygen(fx, fx->client_key) < 0)
		return -1;
	char pub[400], key[1024] = "", ak[400];
	snprintf(pub, sizeof pub, "%s.pub", fx->client_key);
	FILE *f = fopen(pub, "r");
	if (f) {
		if (!fgets(key, sizeof key, f))
			key[0] = '\0';
		fclose(f);
	}
	snprintf(ak, sizeof ak, "%s/authorized_keys", fx->dir);
	if (!key[0] || write_file(ak, key, 0600) < 0) {
		snprintf(fx->why, sizeof fx->why, "cannot write %s", ak);
		return -1;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		fx->port = free_port();
		if (!fx->port || learn_host_key(fx) < 0)
			return -1;
		if (launch(fx) == 0)
			return 0; /* a port taken meanwhile makes sshd exit: draw another */
	}
	return -1;
}

int sshd_start(sshd_fixture *fx)
{
	return start(fx, false, 64);
}

int sshd_start_real_login(sshd_fixture *fx)
{
	return start(fx, true, 64);
}

int sshd_start_max_sessions(sshd_fixture *fx, unsigned max_sessions)
{
	return start(fx, false, max_sessions);
}

static void stop_process(sshd_fixture *fx)
{
	if (fx->pid <= 0)
		return;
	kill(fx->pid, SIGTERM);
	for (long long end = now_ms() + 3000; now_ms() < end;) {
		if (waitpid(fx->pid, NULL, WNOHANG) == fx->pid) {
			fx->pid = 0;
			return;
		}
		usleep(10000);
	}
	kill(fx->pid, SIGKILL);
	waitpid(fx->pid, NULL, 0);
	fx->pid = 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* rm -rf, never following symlinks (tests create some). */
static void remove_dir(const char *dir)
{
	nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void sshd_stop(sshd_fixture *fx)
{
	stop_process(fx);
	if (fx->dir[0])
		remove_dir(fx->dir);
	fx->dir[0] = '\0';
}

int sshd_rekey(sshd_fixture *fx)
{
	stop_process(fx);
	char saved[sizeof fx->known_hosts + 8];
	snprintf(saved, sizeof saved, "%s.old", fx->known_hosts);
	rename(fx->known_hosts, saved);
	if (keygen(fx, fx->host_key) < 0 || learn_host_key(fx) < 0)
		return -1;
	rename(saved, fx->known_hosts); /* known_hosts keeps the old key */
	return launch(fx);
}

/* The parent pid from /proc/PID/stat (the field after the parenthesized name). */
static pid_t parent_of(pid_t pid)
{
	char p[64], buf[512];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *rp = strrchr(buf, ')');
	int ppid = -1;
	if (!rp || sscanf(rp + 2, "%*c %d", &ppid) != 1)
		return -1;
	return (pid_t)ppid;
}

int sshd_kill_sessions(sshd_fixture *fx)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	int killed = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		if (parent_of((pid_t)pid) == fx->pid && kill((pid_t)pid, SIGKILL) == 0)
			killed++;
	}
	closedir(d);
	return killed;
}

void sshd_config_json(const sshd_fixture *fx, const char *agent, const char *extra, char *out,
                      size_t cap)
{
	/* keys in `extra` replace the defaults (the config parser refuses duplicates) */
	char port[32] = "", id[400] = "", kh[400] = "", ag[600] = "", ct[40] = "";
#define OVERRIDES(key) (extra && strstr(extra, "\"" key "\""))
	if (!OVERRIDES("port"))
		snprintf(port, sizeof port, ", \"port\": %u", fx->port);
	if (!OVERRIDES("identity_file"))
		snprintf(id, sizeof id, ", \"identity_file\": \"%s\"", fx->client_key);
	if (!OVERRIDES("known_hosts"))
		snprintf(kh, sizeof kh, ", \"known_hosts\": \"%s\"", fx->known_hosts);
	if (!OVERRIDES("connect_timeout_ms"))
		snprintf(ct, sizeof ct, ", \"connect_timeout_ms\": 5000");
#undef OVERRIDES
	if (agent)
		snprintf(ag, sizeof ag, ", \"agent\": \"%s\"", agent);
	snprintf(out, cap,
	         "{\"version\": 1, \"transport\": \"ssh\", \"ssh\": {\"host\": \"127.0.0.1\", "
	         "\"user\": \"%s\"%s%s%s%s%s%s%s}}",
	         fx->user, ct, port, id, kh, ag, extra ? ", " : "", extra ? extra : "");
}
