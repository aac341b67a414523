/*
 * The exec wrapper without sshd: its command line run the way sshd runs it
 * (`$SHELL -c LINE`) under bash and dash (and zsh, ksh, busybox sh when installed), with
 * hostile argv, env and cwd. Every byte must arrive verbatim and nothing may run.
 */
#include "cu_run.h"
#include "ssh_internal.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dir[256];
static char **run_env;  /* the shell's environment when set, else ours */
static bool run_leader; /* the shell leads a session of its own, as sshd starts it */

typedef struct out {
	char buf[16384];
	size_t len;
	char err[4096];
	size_t elen;
	int status;
} out;

/* Runs `shell -c line` in `dir`; both streams captured. 0, or -1 when it cannot run. */
static int run_as(const char *shell, const char *arg0, const char *line, out *o)
{
	memset(o, 0, sizeof *o);
	int po[2], pe[2];
	if (pipe(po) < 0 || pipe(pe) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	posix_spawn_file_actions_addclose(&fa, po[0]);
	posix_spawn_file_actions_addclose(&fa, pe[0]);
	posix_spawn_file_actions_addchdir_np(&fa, dir);
	const char *argv[] = {arg0, "-c", line, NULL};
	pid_t pid;
	posix_spawnattr_t at;
	posix_spawnattr_init(&at);
	if (run_leader)
		posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	int rc =
	    posix_spawn(&pid, shell, &fa, &at, (char *const *)argv, run_env ? run_env : environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	if (rc != 0) {
		close(po[0]);
		close(pe[0]);
		return -1;
	}
	struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	int open_fds = 2;
	while (open_fds > 0 && poll(p, 2, 10000) > 0) {
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char *b = i ? o->err : o->buf;
			size_t *l = i ? &o->elen : &o->len;
			size_t cap = i ? sizeof o->err : sizeof o->buf;
			ssize_t n = read(p[i].fd, b + *l, cap - 1 - *l);
			if (n > 0) {
				*l += (size_t)n;
			} else {
				close(p[i].fd);
				p[i].fd = -1;
				open_fds--;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	waitpid(pid, &o->status, 0);
	return 0;
}

static int run(const char *shell, const char *line, out *o)
{
	/* busybox is sh only under that applet name */
	return run_as(shell, strstr(shell, "busybox") ? "sh" : shell, line, o);
}

static const char *const hostile[] = {
    "plain",
    "it's",
    "'single' \"double\"",
    "; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    "${HOME}$HOME$$ $0 $1 $@ $*",
    "line1\nline2\n",
    "\\ back\\\\slash\\",
    "*",
    "-n",
    "--",
    "| tee CANARY &",
    "!! !$ ^x^y",
    "\xff\xfe\x01\x7f",
    "",
};
#define NH (sizeof hostile / sizeof hostile[0])

/* The shells to try: bash and dash are required (Debian's login shell and /bin/sh). */
static const char *const shells[] = {"/bin/bash",    "/bin/dash", "/bin/sh",
                                     "/usr/bin/zsh", "/bin/ksh",  "/bin/busybox"};

static void check_hostile(const char *shell)
{
	if (access(shell, X_OK) != 0) {
		CU_ASSERT_TRUE(strcmp(shell, "/bin/bash") != 0 && strcmp(shell, "/bin/dash") != 0);
		return;
	}
	const char *argv[NH + 2];
	argv[0] = "printf";
	argv[1] = "%s\\0";
	char want[4096];
	size_t wl = 0;
	for (size_t i = 0; i < NH; i++) {
		argv[i + 2] = hostile[i];
		size_t l = strlen(hostile[i]);
		memcpy(want + wl, hostile[i], l + 1);
		wl += l + 1;
	}
	char envw[NH][600];
	const char *env[NH];
	for (size_t i = 0; i < NH; i++) {
		snprintf(envw[i], sizeof envw[i], "V%zu=%s", i, hostile[i]);
		env[i] = envw[i];
	}
	char cwd[600];
	snprintf(cwd, sizeof cwd, "%s/c $(touch CANARY) ';`x`\n*", dir);
	mkdir(cwd, 0700);
	ssh_wrap w = {
	    .nonce = "0123abcd",
	    .cwd = cwd,
	    .check_prog = "printf",
	    .env = env,
	    .env_count = NH,
	    .argv = argv,
	    .argc = NH + 2,
	};
	sstr line = {0};
	CU_ASSERT_EQUAL_FATAL(ssh_wrap_build(&w, &line), 0);
	const char *sh = shell;
	out o;
	CU_ASSERT_EQUAL_FATAL(run(sh, line.p, &o), 0);
	char head[128];
	int hl = snprintf(head, sizeof head, "\001ASP0123abcd ok ");
	CU_ASSERT_TRUE(o.len > (size_t)hl && memcmp(o.buf, head, (size_t)hl) == 0);
	const char *nl = memchr(o.buf, '\n', o.len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(nl);
	size_t rest = o.len - (size_t)(nl + 1 - o.buf);
	CU_ASSERT_EQUAL(rest, wl);
	CU_ASSERT_TRUE(rest == wl && memcmp(nl + 1, want, wl) == 0);
	CU_ASSERT_TRUE(o.elen >= 13 && memcmp(o.err, "\001ASP0123abcd\n", 13) == 0);
	if (rest != wl)
		fprintf(stderr, "%s: stdout [%.*s] stderr [%.*s]\n", shell, (int)o.len, o.buf,
		        (int)o.elen, o.err);

	/* env and cwd as the command sees them */
	const char *show[] = {
	    "/bin/sh", "-c",
	    ("i=0; while [ $i -lt 16 ]; do eval \"printf '%s\\0' \\\"\\$V$i\\\"\"; "
	     "i=$((i+1)); done; pwd")};
	w.argv = show;
	w.argc = 3;
	w.check_prog = NULL;
	sstr line2 = {0};
	CU_ASSERT_EQUAL_FATAL(ssh_wrap_build(&w, &line2), 0);
	CU_ASSERT_EQUAL_FATAL(run(sh, line2.p, &o), 0);
	nl = memchr(o.buf, '\n', o.len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(nl);
	char want2[8192];
	memcpy(want2, want, wl);
	int n = snprintf(want2 + wl, sizeof want2 - wl, "%s\n", cwd);
	rest = o.len - (size_t)(nl + 1 - o.buf);
	CU_ASSERT_TRUE(rest == wl + (size_t)n && memcmp(nl + 1, want2, rest) == 0);
	if (rest != wl + (size_t)n)
		fprintf(stderr, "%s env: stdout [%.*s] stderr [%.*s]\n", shell, (int)o.len, o.buf,
		        (int)o.elen, o.err);
	sstr_free(&line);
	sstr_free(&line2);

	/* nothing ran */
	char canary[700];
	snprintf(canary, sizeof canary, "%s/CANARY", dir);
	CU_ASSERT_NOT_EQUAL(access(canary, F_OK), 0);
	snprintf(canary, sizeof canary, "%s/CANARY", cwd);
	CU_ASSERT_NOT_EQUAL(access(canary, F_OK), 0);
}

static void test_hostile_all_shells(void)
{
	for (size_t i = 0; i < sizeof shells / sizeof shells[0]; i++)
		check_hostile(shells[i]);
}

/* The wrapper's own errors, before anything runs. */
static void expect_err(const char *cwd, const char *prog, const char *path, const char *code)
{
	const char *argv[] = {prog ? prog : "true"};
	ssh_wrap w = {.nonce = "n1",
	              .cwd = cwd,
	              .check_prog = prog,
	              .check_path = path,
	              .argv = argv,
	              .argc = 1};
	sstr line = {0};
	CU_ASSERT_EQUAL_FATAL(ssh_wrap_build(&w, &line), 0);
	for (int s = 0; s < 2; s++) {
		out o;
		CU_ASSERT_EQUAL_FATAL(run(s ? "/bin/dash" : "/bin/bash", line.p, &o), 0);
		char want[128];
		snprintf(want, sizeof want, "\001ASPn1 err %s\n", code);
		CU_ASSERT_TRUE(o.len == strlen(want) && memcmp(o.buf, want, o.len) == 0);
		if (!(o.len == strlen(want) && memcmp(o.buf, want, o.len) == 0))
			fprintf(stderr, "want %s got [%.*s] [%.*s]\n", code, (int)o.len, o.buf,
			        (int)o.elen, o.err);
	}
	sstr_free(&line);
}

static void test_wrapper_errors(void)
{
	char file[300], d[300];
	snprintf(file, sizeof file, "%s/afile", dir);
	snprintf(d, sizeof d, "%s/adir", dir);
	FILE *f = fopen(file, "w");
	if (f)
		fclose(f);
	chmod(file, 0644);
	mkdir(d, 0755);
	expect_err("/nonexistent/x", NULL, NULL, "cwd_not_found");
	expect_err(file, NULL, NULL, "cwd_not_a_directory");
	expect_err(NULL, "asp-no-such-program", NULL, "prog_not_found");
	expect_err(NULL, "/nonexistent/prog", NULL, "prog_not_found");
	expect_err(NULL, d, NULL, "prog_permission_denied");
	/* PATH from the request's env is the one searched */
	expect_err(NULL, "true", "/nonexistent", "prog_not_found");
	expect_err(NULL, "afile", dir, "prog_permission_denied");
}

/*
 * Run the way Dropbear runs it (the shell is not a group leader: posix_spawn leaves it in
 * ours): the command must lead a group of its own (pgid = the pid the wrapper reports,
 * not ours), what a background child writes after the command exited must not be lost,
 * and the exit status and a killing signal must come back as the command's. `path` is
 * the login PATH (which decides setsid, perl or neither); `own` whether a group is
 * expected.
 */
static void check_not_leader(const char *path, bool own)
{
	char pathvar[400];
	snprintf(pathvar, sizeof pathvar, "PATH=%s", path);
	char *env[] = {pathvar, NULL};
	run_env = env;
	const char *argv[] = {"/bin/sh", "-c",
	                      ("read -r p x x x g x </proc/self/stat; echo \"$p $g\"; "
	                       "(sleep 0.3; echo late; echo late2 >&2) & echo early")};
	ssh_wrap w = {.nonce = "g1", .argv = argv, .argc = 3};
	sstr line = {0};
	CU_ASSERT_EQUAL_FATAL(ssh_wrap_build(&w, &line), 0);
	out o;
	CU_ASSERT_EQUAL_FATAL(run("/bin/bash", line.p, &o), 0);
	o.buf[o.len] = '\0';
	o.err[o.elen] = '\0';
	long rp = 0, rg = 0, cp = 0, cg = 0;
	/* "relay": the wrapper, not the command, is the channel's process */
	int n = sscanf(o.buf, "\001ASPg1 ok %ld %ld relay\n%ld %ld\n", &rp, &rg, &cp, &cg);
	CU_ASSERT_EQUAL(n, 4);
	CU_ASSERT_EQUAL(rp, cp); /* the reported pid is the command's */
	CU_ASSERT_EQUAL(rg, cg); /* and so is the group */
	CU_ASSERT_EQUAL(own, cg == cp);
	CU_ASSERT_TRUE(!own || cg != (long)getpgrp());
	CU_ASSERT_PTR_NOT_NULL(strstr(o.buf, "early\nlate\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(o.err, "late2\n"));
	CU_ASSERT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
	if (n != 4 || !strstr(o.buf, "late\n") || !strstr(o.err, "late2\n") || own != (cg == cp))
		fprintf(stderr, "PATH=%s: stdout [%s] stderr [%s]\n", path, o.buf, o.err);
	sstr_free(&line);

	/* an exit status, and a signal, as the command's */
	const char *ex[] = {"/bin/sh", "-c", "exit 7"};
	const char *sig[] = {"/bin/sh", "-c", "echo e >&2; kill -s TERM $$"};
	const char *const *cmds[] = {ex, sig};
	for (int i = 0; i < 2; i++) {
		ssh_wrap w2 = {.nonce = "g2", .argv = cmds[i], .argc = 3};
		sstr l2 = {0};
		CU_ASSERT_EQUAL_FATAL(ssh_wrap_build(&w2, &l2), 0);
		CU_ASSERT_EQUAL_FATAL(run("/bin/bash", l2.p, &o), 0);
		bool want = i == 0 ? WIFEXITED(o.status) && WEXITSTATUS(o.status) == 7
		                   : WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGTERM;
		CU_ASSERT_TRUE(want);
		/* only the command's stderr: no shell reporting the job it lost */
		CU_ASSERT_TRUE(i == 0 ? o.elen == 7 : o.elen == 9);
		if (i == 1 && o.elen != 9)
			fprintf(stderr, "PATH=%s: stderr [%.*s]\n", path, (int)o.elen, o.err);
		sstr_free(&l2);
	}
	run_env = NULL;
}

/* A folder holding only links to the given programs: a login PATH without the rest. */
static void path_of(const char *name, const char *const progs[], char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", dir, name);
	mkdir(out, 0755);
	for (size_t i = 0; progs[i]; i++) {
		char link[600];
		snprintf(link, sizeof link, "%s/%s", out, strrchr(progs[i], '/') + 1);
		CU_ASSERT_EQUAL(symlink(progs[i], link), 0);
	}
}

static void test_not_group_leader(void)
{
	check_not_leader("/usr/bin:/bin", true); /* setsid */
	char p[400];
	const char *perl[] = {"/usr/bin/cat", "/usr/bin/perl", "/usr/bin/sleep", NULL};
	path_of("with-perl", perl, p, sizeof p);
	if (access("/usr/bin/perl", X_OK) == 0)
		check_not_leader(p, true); /* perl's setpgrp */
	const char *none[] = {"/usr/bin/cat", "/usr/bin/sleep", NULL};
	path_of("bare", none, p, sizeof p);
	check_not_leader(p, false); /* neither: no group, but nothing lost */
}

/*
 * A server started with SIGINT and SIGQUIT ignored (a script's background job) passes
 * that on; the command must still start with every signal the default (as locally), get
 * its env, and a signal that kills it must come back as the wrapper's own: as a session
 * leader (OpenSSH), and through each relay (Dropbear: setsid, perl's setpgrp, neither).
 */
static void check_ignored(const char *path, bool leader)
{
	char pathvar[400];
	snprintf(pathvar, sizeof pathvar, "PATH=%s", path);
	char *env[] = {pathvar, NULL};
	run_env = env;
	run_leader = leader;
	const char *vars[] = {"A=x y", "s=1"};
	const char *show[] = {
	    "/bin/sh", "-c",
	    "/bin/sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status; echo \"$A\""};
	const char *die[] = {"/bin/sh", "-c", "kill -s QUIT $$"};
	for (int i = 0; i < 2; i++) {
		ssh_wrap w = {
		    .nonce = "i1", .env = vars, .env_count = 1, .argv = i ? die : show, .argc = 3};
		sstr line = {0};
		CU_ASSERT_EQUAL_FATAL(ssh_wrap_build(&w, &line), 0);
		out o;
		CU_ASSERT_EQUAL_FATAL(run("/bin/bash", line.p, &o), 0);
		o.buf[o.len] = '\0';
		char *nl = strchr(o.buf, '\n');
		const char *got = nl ? nl + 1 : "";
		if (i == 0) {
			/* SigIgn: INT (bit 1) and QUIT (bit 2) no longer ignored */
			char *end = NULL;
			unsigned long long mask = strtoull(got, &end, 16);
			bool ok = end && end != got && !(mask & 6) && strcmp(end, "\nx y\n") == 0;
			CU_ASSERT_TRUE(ok);
			if (!ok)
				fprintf(stderr, "PATH=%s leader %d: [%s]\n", path, leader, o.buf);
		} else {
			CU_ASSERT_TRUE(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGQUIT);
		}
		sstr_free(&line);
	}
	run_env = NULL;
	run_leader = false;
}

static void test_ignored_signals(void)
{
	struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	check_ignored("/usr/bin:/bin", true);
	check_ignored("/usr/bin:/bin", false); /* setsid */
	char p[400];
	snprintf(p, sizeof p, "%s/with-perl", dir);
	if (access("/usr/bin/perl", X_OK) == 0)
		check_ignored(p, false); /* perl's setpgrp */
	snprintf(p, sizeof p, "%s/bare", dir);
	check_ignored(p, false); /* neither: /usr/bin/env resets */
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGQUIT, &old_quit, NULL);
}

static void test_quote_word(void)
{
	sstr s = {0};
	CU_ASSERT_EQUAL(sstr_add_quoted(&s, "a'b"), 0);
	CU_ASSERT_STRING_EQUAL(s.p, "'a'\\''b'");
	sstr_free(&s);
	CU_ASSERT_EQUAL(sstr_add_quoted(&s, ""), 0);
	CU_ASSERT_STRING_EQUAL(s.p, "''");
	sstr_free(&s);
	CU_ASSERT_TRUE(ssh_is_shell_name("_A1"));
	CU_ASSERT_FALSE(ssh_is_shell_name("1A"));
	CU_ASSERT_FALSE(ssh_is_shell_name("A-B"));
	CU_ASSERT_FALSE(ssh_is_shell_name(""));
}

int main(int argc, char **argv)
{
	snprintf(dir, sizeof dir, "/tmp/asp-quote-XXXXXX");
	if (!mkdtemp(dir))
		return 2;
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s = CU_add_suite("ssh_quote", NULL, NULL);
	if (!s || !CU_add_test(s, "quote_word", test_quote_word) ||
	    !CU_add_test(s, "hostile_all_shells", test_hostile_all_shells) ||
	    !CU_add_test(s, "wrapper_errors", test_wrapper_errors) ||
	    !CU_add_test(s, "not_group_leader", test_not_group_leader) ||
	    !CU_add_test(s, "ignored_signals", test_ignored_signals))
		return 2;
	/* every test, or the suites and tests named as arguments */
	unsigned failures = (unsigned)cu_run(argc, argv);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		failures++;
	return failures ? 1 : 0;
}
