/* The sshd fixture: see sshd_fixture.h. */
#include "sshd_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SSHD          "/usr/sbin/sshd"
#define SFTP_SERVER   "/usr/lib/openssh/sftp-server"
#define DROPBEAR      "/usr/sbin/dropbear"
#define DROPBEARKEY   "/usr/bin/dropbearkey"
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

/* The address the server listens on: 127.0.0.1 unless the fixture was given another. */
static const char *listen_addr(const sshd_fixture *fx)
{
	return fx->listen[0] ? fx->listen : "127.0.0.1";
}

static unsigned free_port(const sshd_fixture *fx)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return 0;
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, listen_addr(fx), &a.sin_addr);
	socklen_t len = sizeof a;
	unsigned port = 0;
	if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(s);
	return port;
}

static bool port_open(const sshd_fixture *fx)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return false;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx->port)};
	inet_pton(AF_INET, listen_addr(fx), &a.sin_addr);
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

/* A Dropbear host key, and its public half in PATH.pub as ssh-keygen writes it. */
static int dropbear_keygen(sshd_fixture *fx, const char *path)
{
	unlink(path);
	char pub[400], out[2048];
	snprintf(pub, sizeof pub, "%s.pub", path);
	const char *gen[] = {DROPBEARKEY, "-t", "ed25519", "-f", path, NULL};
	const char *show[] = {DROPBEARKEY, "-y", "-f", path, NULL};
	char *line = NULL;
	if (sshd_run(gen, NULL, 0) == 0 && sshd_run(show, out, sizeof out) == 0)
		line = strstr(out, "ssh-ed25519 ");
	if (!line) {
		snprintf(fx->why, sizeof fx->why,
		         "dropbearkey failed for %s; run scripts/install-deps.sh (dropbear-bin)",
		         path);
		return -1;
	}
	line[strcspn(line, "\n")] = '\0';
	char text[1100];
	snprintf(text, sizeof text, "%s\n", line);
	return write_file(pub, text, 0644);
}

static int host_keygen(sshd_fixture *fx)
{
	return fx->dropbear ? dropbear_keygen(fx, fx->host_key) : keygen(fx, fx->host_key);
}

/* known_hosts (the host key for [ADDRESS]:port) and the fingerprint of the host key. */
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
	snprintf(entry, sizeof entry, "[%s]:%u %s\n", listen_addr(fx), fx->port, line);
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

static int wait_listening(sshd_fixture *fx, const char *name);

/*
 * The noise script, then the sanitizer options of a sanitizer build's test run exported
 * for the commands it precedes: sshd and Dropbear start sessions without our environment,
 * so an agent-mode asp-agent would otherwise run with the sanitizers' defaults (UBSan
 * findings only printed to the channel's stderr; ASan's 256 MB quarantine, which swamps
 * the checks that bound its memory).
 */
static int write_noise(const char *path, mode_t mode, bool quiet, const char *bin)
{
	static const char *const vars[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
	char text[2048];
	size_t n =
	    (size_t)snprintf(text, sizeof text, "%s", quiet ? "unset BASH_ENV\n" : noise_script);
	if (bin && n < sizeof text)
		n += (size_t)snprintf(text + n, sizeof text - n, "export PATH='%s'\n", bin);
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = getenv(vars[i]);
		if (v && !strchr(v, '\'') && n < sizeof text)
			n += (size_t)snprintf(text + n, sizeof text - n, "export %s='%s'\n",
			                      vars[i], v);
	}
	return n < sizeof text ? write_file(path, text, mode) : -1;
}

/* The passwd and group files Dropbear sees (see dropbear_start), and the user's home. */
static int dropbear_files(sshd_fixture *fx, char *passwd, char *group, size_t cap)
{
	snprintf(passwd, cap, "%s/passwd", fx->dir);
	snprintf(group, cap, "%s/group", fx->dir);
	uid_t uid = geteuid();
	gid_t gid = getegid();
	if (fx->non_root) {
		for (uid = 42420; getpwuid(uid) || getgrgid((gid_t)uid); uid++)
			;
		gid = (gid_t)uid;
	}
	FILE *in = fopen("/etc/passwd", "r");
	FILE *out = fopen(passwd, "w");
	char line[2048];
	bool ok = in && out;
	while (ok && fgets(line, sizeof line, in)) {
		char name[256];
		size_t nl = strcspn(line, ":");
		snprintf(name, sizeof name, "%.*s", (int)nl, line);
		if (strcmp(name, fx->user) == 0)
			continue; /* written below with the fixture's home */
		ok = fputs(line, out) >= 0;
	}
	if (in)
		fclose(in);
	if (ok)
		ok = fprintf(out, "%s:x:%u:%u:asp test:%s:/bin/bash\n", fx->user, (unsigned)uid,
		             (unsigned)gid, fx->home) > 0;
	if (out && fclose(out) != 0)
		ok = false;
	in = fopen("/etc/group", "r");
	out = fopen(group, "w");
	ok = ok && in && out;
	while (ok && fgets(line, sizeof line, in))
		ok = fputs(line, out) >= 0;
	if (ok && fx->non_root)
		ok = fprintf(out, "%s:x:%u:\n", fx->user, (unsigned)gid) > 0;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		ok = false;
	/* the home: ~/.ssh/authorized_keys and a ~/.bashrc that prints noise */
	char ssh_dir[400], ak[440], rc[440], key[1024] = "", pub[400];
	snprintf(ssh_dir, sizeof ssh_dir, "%s/.ssh", fx->home);
	snprintf(ak, sizeof ak, "%s/authorized_keys", ssh_dir);
	snprintf(rc, sizeof rc, "%s/.bashrc", fx->home);
	snprintf(pub, sizeof pub, "%s.pub", fx->client_key);
	FILE *f = fopen(pub, "r");
	if (f) {
		if (!fgets(key, sizeof key, f))
			key[0] = '\0';
		fclose(f);
	}
	ok = ok && key[0] && (mkdir(fx->home, 0700) == 0 || errno == EEXIST) &&
	     (mkdir(ssh_dir, 0700) == 0 || errno == EEXIST) && write_file(ak, key, 0600) == 0 &&
	     write_noise(rc, 0644, false, NULL) == 0;
	/* the user owns its home (Dropbear checks), and may pass through the folder */
	ok = ok && chown(fx->home, uid, gid) == 0 && chown(ssh_dir, uid, gid) == 0 &&
	     chown(ak, uid, gid) == 0 && chown(rc, uid, gid) == 0 && chmod(fx->dir, 0755) == 0;
	if (!ok)
		snprintf(fx->why, sizeof fx->why, "cannot write Dropbear's files in %s: %s",
		         fx->dir, strerror(errno));
	return ok ? 0 : -1;
}

static void write_id_map(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t w = write(fd, text, strlen(text));
		(void)w;
		close(fd);
	}
}

/*
 * In the child, before exec: every signal's action the default and none blocked, as a
 * server started by init has them. A suite run in the background of a script inherits
 * SIGINT and SIGQUIT ignored (POSIX, for asynchronous lists), the servers pass that on
 * to every command, and a conformance case then sees `sleep` survive a QUIT.
 */
static void default_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &sa, NULL); /* fails harmlessly for KILL and STOP */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Root's startup files as Debian's base-files installs them, and the names bash reads. */
static const char *const debian_startup[][2] = {
    {".bashrc", "/usr/share/base-files/dot.bashrc"},
    {".profile", "/usr/share/base-files/dot.profile"},
};
static const char *const other_startup[] = {".bash_profile", ".bash_login", ".bash_logout"};

/* Whether `name` is a startup file of the real home that the fixture replaces. */
static bool replaced_startup(const char *name)
{
	for (size_t i = 0; i < sizeof debian_startup / sizeof debian_startup[0]; i++)
		if (!strcmp(name, debian_startup[i][0]))
			return true;
	for (size_t i = 0; i < sizeof other_startup / sizeof other_startup[0]; i++)
		if (!strcmp(name, other_startup[i]))
			return true;
	return false;
}

/* Appends the pair src, dst to the NULL-terminated list; false without memory. */
static bool add_bind(char ***binds, size_t *n, size_t *cap, const char *src, const char *dst)
{
	if (*n + 3 > *cap) {
		char **nb = realloc(*binds, 2 * *cap * sizeof **binds);
		if (!nb)
			return false;
		*binds = nb;
		*cap *= 2;
	}
	(*binds)[(*n)++] = strdup(src);
	(*binds)[(*n)++] = strdup(dst);
	(*binds)[*n] = NULL;
	return (*binds)[*n - 2] && (*binds)[*n - 1];
}

/*
 * Root's home as both servers see it in their mount namespace: a folder in the fixture's
 * one holding the fixture's .ssh, Debian's default ~/.bashrc and ~/.profile (what a
 * sandbox built from Debian gives root; this machine's own may run anything), and, for
 * every other entry of the real home, a placeholder the entry itself is bound onto, so
 * the login reads and writes root's own files and nothing is added to the real home. (An
 * overlay with the home as its lower layer would not do: logins outside the namespace
 * change that layer meanwhile, which overlayfs does not follow.) Returns the pairs to
 * bind, source then target, the last the folder onto the home; NULL-terminated,
 * malloc'd; NULL with fx->why.
 */
static char **root_home_binds(sshd_fixture *fx)
{
	char top[400], ssh_dir[440], ak[480], pub[400], key[1024] = "";
	snprintf(top, sizeof top, "%s/home", fx->dir);
	snprintf(ssh_dir, sizeof ssh_dir, "%s/.ssh", top);
	snprintf(ak, sizeof ak, "%s/authorized_keys", ssh_dir);
	snprintf(pub, sizeof pub, "%s.pub", fx->client_key);
	FILE *f = fopen(pub, "r");
	if (f) {
		if (!fgets(key, sizeof key, f))
			key[0] = '\0';
		fclose(f);
	}
	struct stat home;
	/* the folder takes the home's owner and mode (Dropbear checks them) */
	bool ok =
	    key[0] && stat(fx->home, &home) == 0 && (mkdir(top, 0700) == 0 || errno == EEXIST) &&
	    chmod(top, home.st_mode & 07777) == 0 && chown(top, home.st_uid, home.st_gid) == 0 &&
	    (mkdir(ssh_dir, 0700) == 0 || errno == EEXIST) && write_file(ak, key, 0600) == 0;
	DIR *d = ok ? opendir(fx->home) : NULL;
	size_t n = 0, cap = 16;
	char **binds = ok && d ? calloc(cap, sizeof *binds) : NULL;
	ok = binds != NULL;
	struct dirent *de;
	while (ok && (de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, ".ssh") || replaced_startup(de->d_name))
			continue;
		char src[800], dst[800], target[600];
		snprintf(src, sizeof src, "%s/%s", fx->home, de->d_name);
		snprintf(dst, sizeof dst, "%s/%s", top, de->d_name);
		struct stat st;
		if (lstat(src, &st) != 0)
			continue;          /* gone meanwhile */
		if (S_ISLNK(st.st_mode)) { /* a link is copied: binding would follow it */
			ssize_t len = readlink(src, target, sizeof target - 1);
			ok = len >= 0 &&
			     (target[len] = '\0', symlink(target, dst) == 0 || errno == EEXIST);
			continue;
		}
		ok = S_ISDIR(st.st_mode) ? mkdir(dst, 0700) == 0 || errno == EEXIST
		                         : write_file(dst, "", 0600) == 0;
		ok = ok && add_bind(&binds, &n, &cap, src, dst);
	}
	if (d)
		closedir(d);
	for (size_t i = 0; ok && i < sizeof debian_startup / sizeof debian_startup[0]; i++) {
		char dst[800];
		snprintf(dst, sizeof dst, "%s/%s", top, debian_startup[i][0]);
		ok = access(debian_startup[i][1], R_OK) == 0 && write_file(dst, "", 0644) == 0 &&
		     add_bind(&binds, &n, &cap, debian_startup[i][1], dst);
	}
	ok = ok && add_bind(&binds, &n, &cap, top, fx->home);
	if (!ok) {
		snprintf(fx->why, sizeof fx->why, "cannot prepare root's home in %s: %s", top,
		         strerror(errno));
		for (size_t i = 0; binds && i < n; i++)
			free(binds[i]);
		free(binds);
		return NULL;
	}
	return binds;
}

/*
 * Forks the server `argv` in a mount namespace of its own (and, not as root, a user
 * namespace mapping only us), with `binds` (pairs, source then target) or else the
 * fixture's passwd and group bound in; stdin and stdout /dev/null, stderr the log.
 */
static pid_t fork_in_namespace(sshd_fixture *fx, char **binds, const char *passwd,
                               const char *group, const char *const *argv)
{
	char uid_map[64], gid_map[64];
	snprintf(uid_map, sizeof uid_map, "%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
	snprintf(gid_map, sizeof gid_map, "%u %u 1\n", (unsigned)getegid(), (unsigned)getegid());
	bool as_root = geteuid() == 0;
	int log = open(fx->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int null_out = open("/dev/null", O_WRONLY | O_CLOEXEC);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		/* the child: only system calls from here to exec */
		int flags = CLONE_NEWNS | (as_root ? 0 : CLONE_NEWUSER);
		if (unshare(flags) < 0)
			_exit(97);
		if (!as_root) {
			write_id_map("/proc/self/setgroups", "deny");
			write_id_map("/proc/self/uid_map", uid_map);
			write_id_map("/proc/self/gid_map", gid_map);
		}
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(98);
		for (size_t i = 0; binds && binds[i]; i += 2)
			if (mount(binds[i], binds[i + 1], NULL, MS_BIND | MS_REC, NULL) < 0)
				_exit(98);
		if (!binds && (mount(passwd, "/etc/passwd", NULL, MS_BIND, NULL) < 0 ||
		               mount(group, "/etc/group", NULL, MS_BIND, NULL) < 0))
			_exit(98);
		dup2(null_in, 0);
		dup2(null_out, 1);
		if (log >= 0)
			dup2(log, 2);
		/* unlike sshd, Dropbear passes what it inherited on to every command */
		close_range(3, ~0u, 0);
		default_signals();
		if (fx->root_login) {
			signal(SIGINT, SIG_IGN); /* as a script's background job starts it */
			signal(SIGQUIT, SIG_IGN);
		}
		execve(argv[0], (char *const *)argv, environ);
		_exit(99);
	}
	if (log >= 0)
		close(log);
	close(null_in);
	close(null_out);
	if (pid < 0)
		snprintf(fx->why, sizeof fx->why, "fork: %s", strerror(errno));
	return pid;
}

static void free_binds(char **binds)
{
	for (size_t i = 0; binds && binds[i]; i++)
		free(binds[i]);
	free(binds);
}

static int launch_dropbear(sshd_fixture *fx)
{
	char passwd[400], group[400], listen_on[96], pidfile[400];
	char **binds = NULL; /* root_login: bind mounts, source then target */
	if (fx->root_login ? !(binds = root_home_binds(fx))
	                   : dropbear_files(fx, passwd, group, sizeof passwd) < 0)
		return -1;
	snprintf(listen_on, sizeof listen_on, "%s:%u", listen_addr(fx), fx->port);
	snprintf(pidfile, sizeof pidfile, "%s/dropbear.pid", fx->dir);
	/* -F: stays in the foreground as our child; -E: logs to stderr (the log file);
	 * -s: keys only */
	const char *argv[] = {DROPBEAR, "-F",      "-E", "-s",    "-r", fx->host_key,
	                      "-p",     listen_on, "-P", pidfile, NULL};
	pid_t pid = fork_in_namespace(fx, binds, passwd, group, argv);
	free_binds(binds);
	if (pid < 0)
		return -1;
	fx->pid = pid;
	return wait_listening(fx, "dropbear (exit 97: no mount namespace, 98: mounts refused)");
}

/* The folder of links for sshd_start_no_tar: every program but tar. */
static int make_bin_without_tar(sshd_fixture *fx, char *bin, size_t cap)
{
	snprintf(bin, cap, "%s/bin-without-tar", fx->dir);
	if (mkdir(bin, 0755) != 0)
		return -1;
	static const char *const from[] = {"/usr/local/bin", "/usr/bin", "/usr/sbin"};
	for (size_t i = 0; i < sizeof from / sizeof from[0]; i++) {
		DIR *d = opendir(from[i]);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.' || strcmp(e->d_name, "tar") == 0)
				continue;
			char src[700], dst[700];
			snprintf(src, sizeof src, "%s/%s", from[i], e->d_name);
			snprintf(dst, sizeof dst, "%s/%s", bin, e->d_name);
			(void)symlink(src, dst); /* the first folder's name wins */
		}
		if (d)
			closedir(d);
	}
	return 0;
}

static int launch_sshd(sshd_fixture *fx)
{
	char cfg[400], text[3072], pidfile[400], noise[400], setenv_line[600] = "", bin[400];
	char subsystem[300] = "";
	if (fx->sftp[0])
		snprintf(subsystem, sizeof subsystem, "Subsystem sftp %s\n", fx->sftp);
	snprintf(noise, sizeof noise, "%s/login_noise.sh", fx->dir);
	if (fx->no_tar && make_bin_without_tar(fx, bin, sizeof bin) < 0) {
		snprintf(fx->why, sizeof fx->why, "cannot make %s", bin);
		return -1;
	}
	if (!fx->real_login) {
		if (write_noise(noise, 0644, fx->quiet, fx->no_tar ? bin : NULL) < 0) {
			snprintf(fx->why, sizeof fx->why, "cannot write %s", noise);
			return -1;
		}
		snprintf(setenv_line, sizeof setenv_line, "SetEnv SHLVL=1 BASH_ENV=%s\n", noise);
	}
	snprintf(cfg, sizeof cfg, "%s/sshd_config", fx->dir);
	snprintf(pidfile, sizeof pidfile, "%s/sshd.pid", fx->dir);
	snprintf(text, sizeof text,
	         "Port %u\n"
	         "ListenAddress %s\n"
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
	         "%s"
	         "%s"
	         "LogLevel ERROR\n",
	         fx->port, listen_addr(fx), fx->host_key, pidfile, fx->dir, fx->max_sessions,
	         subsystem, setenv_line);
	if (write_file(cfg, text, 0600) < 0) {
		snprintf(fx->why, sizeof fx->why, "cannot write %s", cfg);
		return -1;
	}
	if (fx->root_login) {
		/* in a mount namespace where root's home has Debian's startup files; INT and
		 * QUIT ignored, as a script's background job starts it */
		char **binds = root_home_binds(fx);
		const char *argv[] = {SSHD, "-D", "-e", "-f", cfg, NULL};
		pid_t pid = binds ? fork_in_namespace(fx, binds, NULL, NULL, argv) : -1;
		free_binds(binds);
		if (pid < 0)
			return -1;
		fx->pid = pid;
		return wait_listening(fx, "sshd (exit 97: no mount namespace, 98: mounts refused)");
	}
	int log = open(fx->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (log >= 0)
		posix_spawn_file_actions_adddup2(&fa, log, 2);
	/* -D: stays in the foreground as our child; -e: logs to stderr (the log file) */
	const char *args[] = {SSHD, "-D", "-e", "-f", cfg, NULL};
	posix_spawnattr_t at;
	posix_spawnattr_init(&at);
	sigset_t all, none;
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&at, &all); /* as default_signals() */
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
	int rc = posix_spawn(&fx->pid, args[0], &fa, &at, (char *const *)args, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	if (log >= 0)
		close(log);
	if (rc != 0) {
		fx->pid = 0;
		snprintf(fx->why, sizeof fx->why, "cannot run %s: %s", SSHD, strerror(rc));
		return -1;
	}
	return wait_listening(fx, "sshd");
}

static int launch(sshd_fixture *fx)
{
	return fx->dropbear ? launch_dropbear(fx) : launch_sshd(fx);
}

static int wait_listening(sshd_fixture *fx, const char *name)
{
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
			snprintf(fx->why, sizeof fx->why, "%s exited at start (status %d): %s",
			         name, WIFEXITED(status) ? WEXITSTATUS(status) : -1, logtext);
			return -1;
		}
		if (port_open(fx))
			return 0;
		usleep(20000);
	}
	snprintf(fx->why, sizeof fx->why, "%s did not listen on %s:%u within %d ms", name,
	         listen_addr(fx), fx->port, START_WAIT_MS);
	return -1;
}

static int start(sshd_fixture *fx, bool real_login, unsigned max_sessions, bool dropbear,
                 bool non_root, bool root_login, const char *listen, bool quiet, bool no_tar,
                 const char *sftp)
{
	memset(fx, 0, sizeof *fx);
	fx->quiet = quiet;
	fx->no_tar = no_tar;
	snprintf(fx->sftp, sizeof fx->sftp, "%s", sftp ? sftp : SFTP_SERVER);
	snprintf(fx->listen, sizeof fx->listen, "%s", listen ? listen : "");
	fx->real_login = real_login || root_login;
	fx->max_sessions = max_sessions;
	fx->dropbear = dropbear;
	fx->non_root = non_root;
	fx->root_login = root_login;
	if (root_login && geteuid() != 0) {
		snprintf(fx->why, sizeof fx->why,
		         "logging in as the real root needs the tests to run as root");
		return -1;
	}
	if (dropbear && (access(DROPBEAR, X_OK) != 0 || access(DROPBEARKEY, X_OK) != 0)) {
		snprintf(fx->why, sizeof fx->why,
		         "%s or %s is missing: run scripts/install-deps.sh (package dropbear-bin)",
		         DROPBEAR, DROPBEARKEY);
		return -1;
	}
	if (non_root && geteuid() != 0) {
		snprintf(fx->why, sizeof fx->why,
		         "a Dropbear login as a user made for the run needs root; the tests "
		         "already run as a non-root user, use that one");
		return -1;
	}
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
	snprintf(fx->user, sizeof fx->user, "%s",
	         non_root ? "asp-test"
	         : pw     ? pw->pw_name
	                  : "root");
	snprintf(fx->dir, sizeof fx->dir,
	         dropbear ? "/tmp/asp-dropbear-XXXXXX" : "/tmp/asp-sshd-XXXXXX");
	if (!mkdtemp(fx->dir)) {
		snprintf(fx->why, sizeof fx->why, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(fx->home, sizeof fx->home, "%s/home", fx->dir);
	if (root_login)
		snprintf(fx->home, sizeof fx->home, "%s", pw && pw->pw_dir ? pw->pw_dir : "/root");
	snprintf(fx->host_key, sizeof fx->host_key, "%s/host_ed25519", fx->dir);
	snprintf(fx->client_key, sizeof fx->client_key, "%s/client_ed25519", fx->dir);
	snprintf(fx->known_hosts, sizeof fx->known_hosts, "%s/known_hosts", fx->dir);
	snprintf(fx->empty_known_hosts, sizeof fx->empty_known_hosts, "%s/known_hosts_empty",
	         fx->dir);
	snprintf(fx->log, sizeof fx->log, "%s/sshd.log", fx->dir);
	if (host_keygen(fx) < 0 || keygen(fx, fx->client_key) < 0)
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
		fx->port = free_port(fx);
		if (!fx->port || learn_host_key(fx) < 0)
			return -1;
		if (launch(fx) == 0)
			return 0; /* a port taken meanwhile makes sshd exit: draw another */
	}
	return -1;
}

int sshd_start(sshd_fixture *fx)
{
	return start(fx, false, 64, false, false, false, NULL, false, false, NULL);
}

int dropbear_start(sshd_fixture *fx, bool non_root)
{
	/* Dropbear's MAX_CHANNELS: 100 per connection */
	return start(fx, false, 100, true, non_root, false, NULL, false, false, NULL);
}

int sshd_start_quiet(sshd_fixture *fx)
{
	return start(fx, false, 64, false, false, false, NULL, true, false, NULL);
}

int sshd_start_no_tar(sshd_fixture *fx)
{
	return start(fx, false, 64, false, false, false, NULL, false, true, NULL);
}

int sshd_start_real_login(sshd_fixture *fx)
{
	return start(fx, true, 64, false, false, false, NULL, false, false, NULL);
}

int sshd_start_root_login(sshd_fixture *fx, bool dropbear)
{
	return start(fx, true, dropbear ? 100 : 64, dropbear, false, true, NULL, false, false,
	             NULL);
}

int sshd_start_max_sessions(sshd_fixture *fx, unsigned max_sessions)
{
	return start(fx, false, max_sessions, false, false, false, NULL, false, false, NULL);
}

int sshd_start_sftp(sshd_fixture *fx, const char *program)
{
	return start(fx, false, 64, false, false, false, NULL, false, false,
	             program ? program : "");
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

static void resume_stopped(void);

void sshd_stop(sshd_fixture *fx)
{
	resume_stopped(); /* what a test left stopped ends with its connection */
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
	if (host_keygen(fx) < 0 || learn_host_key(fx) < 0)
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

/* Whether `pid` is sshd's or descends from it, within a few generations (a command's
 * children are sshd, its session, the login shell, the wrapper's shells below it). */
static bool under(pid_t pid, pid_t sshd)
{
	for (int i = 0; i < 8 && pid > 1; i++) {
		pid = parent_of(pid);
		if (pid == sshd)
			return true;
	}
	return false;
}

/* Sends `sig` to every process under the server whose name starts with `name`: how many. */
/*
 * The processes a test stopped: a SIGCONT resumes them all by pid, since a stopped
 * server process whose connection ended has gone to init (no longer under sshd) and
 * would otherwise stay stopped after the test.
 */
static pid_t stopped_pids[256];
static int n_stopped;

static void resume_stopped(void)
{
	for (int i = 0; i < n_stopped; i++)
		kill(stopped_pids[i], SIGCONT);
	n_stopped = 0;
}

static int signal_named(sshd_fixture *fx, const char *name, int sig)
{
	if (sig == SIGCONT)
		resume_stopped();
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char *end, path[64], comm[64] = "";
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/comm", pid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof comm, f))
			comm[0] = '\0';
		fclose(f);
		if (strncmp(comm, name, strlen(name)) == 0 && under((pid_t)pid, fx->pid) &&
		    kill((pid_t)pid, sig) == 0) {
			n++;
			if (sig == SIGSTOP &&
			    n_stopped < (int)(sizeof stopped_pids / sizeof *stopped_pids))
				stopped_pids[n_stopped++] = (pid_t)pid;
		}
	}
	closedir(d);
	return n;
}

int sshd_signal_sftp(sshd_fixture *fx, int sig)
{
	return signal_named(fx, "sftp-server\n", sig);
}

int sshd_signal_named(sshd_fixture *fx, const char *name, int sig)
{
	char comm[64];
	snprintf(comm, sizeof comm, "%s\n", name);
	return signal_named(fx, comm, sig);
}

int sshd_kill_agents(sshd_fixture *fx)
{
	return signal_named(fx, "asp-agent", SIGKILL);
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
	         "{\"version\": 1, \"transport\": \"ssh\", \"ssh\": {\"host\": \"%s\", "
	         "\"user\": \"%s\"%s%s%s%s%s%s%s}}",
	         listen_addr(fx), fx->user, ct, port, id, kh, ag, extra ? ", " : "",
	         extra ? extra : "");
}

int sshd_start_listen(sshd_fixture *fx, const char *addr, bool dropbear)
{
	return start(fx, false, dropbear ? 100 : 64, dropbear, false, false, addr, false, false,
	             NULL);
}
