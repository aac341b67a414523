/*
 * The conformance table in a sandbox of the shape of Alpine and distroless images: a root
 * holding nothing but Debian's busybox-static (its applets as links) and asp-agent-static
 * (the musl build), entered over stdio with no daemon, as `docker run -i IMAGE asp-agent
 * --stdio` would: `unshare` gives it its own mount, network and pid namespaces (the agent
 * is pid 1 there, /proc is its own, /dev the host's, the network a loopback of its own, so
 * the connect cases' server, busybox's nc, which listens on every address, is seen by
 * nothing outside) and `chroot` the root. Prints the table; every case passes, or is n/a
 * with the reason. Nothing is skipped for the fixture: without busybox-static (a static
 * /bin/busybox) the test fails and says to run scripts/install-deps.sh.
 *
 *   test_busybox_root              the whole table
 *   ASP_TEST_ONLY=WORD             only the cases whose names contain WORD
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "conformance.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUSYBOX "/bin/busybox"

/* Whether `path` is an ELF executable without an interpreter (statically linked). */
static bool is_static(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	Elf64_Ehdr eh;
	bool ok = read(fd, &eh, sizeof eh) == (ssize_t)sizeof eh &&
	          memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64;
	for (unsigned i = 0; ok && i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		ok =
		    pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) ==
		        (ssize_t)sizeof ph &&
		    ph.p_type != PT_INTERP;
	}
	close(fd);
	return ok;
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	char buf[65536];
	ssize_t n = 0;
	while (out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, (size_t)n) != n) {
			n = -1;
			break;
		}
	int rc = in >= 0 && out >= 0 && n == 0 ? 0 : -1;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0)
		rc = -1;
	return rc;
}

/* Runs argv, waits: 0 when it exited 0. */
static int run(const char *const argv[])
{
	pid_t pid = fork();
	if (pid == 0) {
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	int status = 0;
	return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	               WEXITSTATUS(status) == 0
	           ? 0
	           : -1;
}

/* ROOT/bin with busybox, a link per applet, and asp-agent; /tmp, /dev, /proc, /etc. */
static int make_root(const char *root, const char *agent)
{
	static const char *const dirs[] = {"bin", "tmp", "dev", "proc", "etc", "root"};
	char path[512];
	for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
		snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
		if (mkdir(path, 0755) < 0)
			return -1;
	}
	snprintf(path, sizeof path, "%s/tmp", root);
	if (chmod(path, 01777) < 0)
		return -1;
	snprintf(path, sizeof path, "%s/bin/busybox", root);
	if (copy_file(BUSYBOX, path, 0755) < 0)
		return -1;
	snprintf(path, sizeof path, "%s/bin/asp-agent", root);
	if (copy_file(agent, path, 0755) < 0)
		return -1;
	snprintf(path, sizeof path, "%s/etc/passwd", root);
	FILE *f = fopen(path, "w");
	if (!f || fputs("root:x:0:0:root:/root:/bin/sh\n", f) < 0 || fclose(f) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/etc/group", root);
	f = fopen(path, "w");
	if (!f || fputs("root:x:0:\n", f) < 0 || fclose(f) != 0)
		return -1;
	/* the applets, as `busybox --install -s` would link them */
	FILE *list = popen(BUSYBOX " --list", "r");
	char name[128];
	int links = 0;
	while (list && fgets(name, sizeof name, list)) {
		name[strcspn(name, "\n")] = '\0';
		if (!name[0] || strchr(name, '/') || strcmp(name, "busybox") == 0)
			continue;
		snprintf(path, sizeof path, "%s/bin/%s", root, name);
		if (symlink("busybox", path) < 0 && errno != EEXIST)
			return -1;
		links++;
	}
	if (!list || pclose(list) != 0 || links < 100)
		return -1;
	return 0;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	const char *agent = getenv("ASP_AGENT_STATIC");
	if (!agent || !agent[0]) {
		fprintf(stderr, "test_busybox_root: ASP_AGENT_STATIC (asp-agent-static) is not "
		                "set\n");
		return 1;
	}
	if (!is_static(BUSYBOX)) {
		fprintf(stderr,
		        "test_busybox_root: %s is missing or not statically linked: "
		        "install busybox-static (scripts/install-deps.sh)\n",
		        BUSYBOX);
		return 1;
	}
	char root[] = "/tmp/asp-busybox-XXXXXX";
	if (!mkdtemp(root) || chmod(root, 0755) < 0 || make_root(root, agent) < 0) {
		fprintf(stderr, "test_busybox_root: cannot make the root in %s: %s\n", root,
		        strerror(errno));
		return 1;
	}
	/* a user namespace (root inside) where the tests do not run as root */
	char proc[600];
	snprintf(proc, sizeof proc, "--mount-proc=%s/proc", root);
	const char *argv[16];
	size_t n = 0;
	argv[n++] = "unshare";
	if (geteuid() != 0) {
		argv[n++] = "--user";
		argv[n++] = "--map-root-user";
	}
	argv[n++] = "--mount";
	argv[n++] = "--net";
	argv[n++] = "--pid";
	argv[n++] = "--fork";
	argv[n++] = proc;
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = "\"$0/bin/busybox\" ip link set lo up && mount --rbind /dev \"$0/dev\" && "
	            "exec chroot \"$0\" /bin/asp-agent --stdio";
	argv[n++] = root;
	argv[n] = NULL;
	asp_config_view v;
	memset(&v, 0, sizeof v);
	v.transport = ASP_TRANSPORT_STDIO;
	v.stdio.argv = argv;
	v.stdio.argc = n;
	asp_client *c = NULL;
	asp_error err;
	int failed = 1;
	if (asp_client_open_view(&v, &c, &err) != ASP_OK) {
		fprintf(stderr, "test_busybox_root: %s\n", err.message);
	} else {
		failed = conf_run_filtered_st(&conf_client_ops, c, &conf_client_streaming, "/tmp",
		                              getenv("ASP_TEST_ONLY"), stdout);
		asp_client_free(c);
	}
	/* the namespace's mounts went with it: only the root's own files are left */
	const char *rm[] = {"rm", "-rf", "--one-file-system", root, NULL};
	if (run(rm) < 0)
		fprintf(stderr, "test_busybox_root: could not remove %s\n", root);
	return failed ? 1 : 0;
}
