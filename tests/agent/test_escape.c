/*
 * Nothing a command starts outlives its timeout, proc_signal KILL or its responder
 * (docs/design.md, "Concurrency and lifetime"), even when it left the process group
 * (setsid, a double fork, a cleared environment): real asp-agent processes, pids checked
 * in /proc with bounded waits.
 */
#include "cu_run.h"
#include "testproc.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *agent;

static void start(tproc *p)
{
	char *argv[] = {(char *)agent, "--stdio", NULL};
	CU_ASSERT_FATAL(tproc_spawn(p, argv) == 0);
}

static void send_exec(tproc *p, uint32_t id, const char *command, uint64_t timeout_ms)
{
	asp_exec_params e;
	asp_exec_params_init(&e);
	e.command = command;
	e.timeout_ms = timeout_ms;
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, id, ASP_OP_EXEC, &e);
	CU_ASSERT_FATAL(t_write_all(p->in, b.data, b.len) == 0);
	asp_buf_free(&b);
}

/*
 * Reads one exec response: its id; *code, *timed_out and the name of the signal that
 * ended the command ("" for none) from the result, each where asked for.
 */
static uint32_t read_exec_full(tproc *p, int ms, int64_t *code, bool *timed_out, char sig[16])
{
	uint8_t *body;
	size_t len;
	int got = t_read_frame(p->out, ms, &body, &len);
	CU_ASSERT_EQUAL_FATAL(got, 1);
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	t_resp resp;
	bool ok = t_parse_response(body, len, ASP_OP_EXEC, &r, a, &resp);
	CU_ASSERT_FATAL(ok);
	CU_ASSERT_EQUAL(resp.st, ASP_OK);
	if (code)
		*code = r.exit_code;
	if (timed_out)
		*timed_out = r.timed_out;
	if (sig)
		snprintf(sig, 16, "%s", r.signal ? r.signal : "");
	asp_arena_free(a);
	free(body);
	return resp.id;
}

static uint32_t read_exec(tproc *p, int ms, int64_t *code, bool *timed_out)
{
	return read_exec_full(p, ms, code, timed_out, NULL);
}

static uint32_t read_exec_sig(tproc *p, int ms, int64_t *code, char sig[16])
{
	return read_exec_full(p, ms, code, NULL, sig);
}

/* Waits up to `ms` for `pid` to be gone (or a zombie). */
static bool wait_dead(pid_t pid, int ms)
{
	int64_t until = t_now_ms() + ms;
	while (t_pid_alive(pid)) {
		if (t_now_ms() > until)
			return false;
		usleep(10 * 1000);
	}
	return true;
}

/* The parent of `pid`, or -1. */
static pid_t ppid_of(pid_t pid, char *state)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *s = strrchr(buf, ')');
	long pp;
	char st;
	if (!s || sscanf(s + 1, " %c %ld", &st, &pp) != 2)
		return -1;
	if (state)
		*state = st;
	return (pid_t)pp;
}

/* A fresh folder and the path of a pid file in it. */
static void pid_path(char *dir, char *file, size_t cap)
{
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(file, cap, "%s/pid", dir);
	unlink(file);
}

static void cleanup(pid_t pid, const char *file, const char *dir)
{
	if (pid > 0 && t_pid_alive(pid))
		kill(pid, SIGKILL); /* a failed test must not leave it behind either */
	unlink(file);
	rmdir(dir);
}

/* A command line that leaves the group: setsid, output away, its pid in `file`. */
static void escapee(char *cmd, size_t cap, const char *file, const char *then)
{
	snprintf(cmd, cap,
	         "setsid sh -c 'echo $$ > %s; exec sleep 1001' </dev/null >/dev/null 2>&1 & %s",
	         file, then);
}

/* exec's timeout ends what left the group too. */
static void test_timeout_kills_setsid(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512];
	pid_path(dir, file, sizeof file);
	escapee(cmd, sizeof cmd, file, "sleep 30");
	tproc p;
	start(&p);
	send_exec(&p, 1, cmd, 1000);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	bool timed_out = false;
	CU_ASSERT_EQUAL(read_exec(&p, 20000, NULL, &timed_out), 1);
	CU_ASSERT(timed_out);
	CU_ASSERT(wait_dead(esc, 5000));
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/* The example of the issue: the escapee holds stdout, so exec ends at the timeout. */
static void test_timeout_kills_setsid_holding_stdout(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512];
	pid_path(dir, file, sizeof file);
	snprintf(cmd, sizeof cmd, "setsid sh -c 'echo $$ > %s; exec sleep 1001' & echo started",
	         file);
	tproc p;
	start(&p);
	send_exec(&p, 1, cmd, 1000);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	bool timed_out = false;
	CU_ASSERT_EQUAL(read_exec(&p, 20000, NULL, &timed_out), 1);
	CU_ASSERT(timed_out);
	CU_ASSERT(wait_dead(esc, 5000));
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/* proc_signal KILL on a spawned process ends its setsid child as well. */
static void test_proc_kill_kills_setsid(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512];
	pid_path(dir, file, sizeof file);
	escapee(cmd, sizeof cmd, file, "sleep 30");
	tproc p;
	start(&p);
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = cmd;
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, 1, ASP_OP_SPAWN, &sp);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	asp_buf_init(&b);
	/* the spawn's answer, past any notification: its handle (a random start, not 1) */
	uint64_t proc = 0;
	asp_arena *a = asp_arena_new();
	for (int64_t end = t_now_ms() + 10000; !proc && t_now_ms() < end;) {
		uint8_t *body;
		size_t len;
		if (t_read_frame(p.out, 10000, &body, &len) != 1)
			break;
		asp_spawn_result sr;
		t_resp r;
		if (t_parse_response(body, len, ASP_OP_SPAWN, &sr, a, &r) && r.id == 1 && !r.st)
			proc = sr.proc;
		free(body);
	}
	asp_arena_free(a);
	CU_ASSERT_FATAL(proc != 0);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	asp_proc_signal_params sg;
	asp_proc_signal_params_init(&sg);
	sg.proc = proc;
	sg.signal = "KILL";
	t_add_request(&b, 2, ASP_OP_PROC_SIGNAL, &sg);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	CU_ASSERT(wait_dead(esc, 5000));
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/* A command that finished left a daemon: the agent's exit on EOF ends it. */
static void test_eof_kills_setsid(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512];
	pid_path(dir, file, sizeof file);
	escapee(cmd, sizeof cmd, file, "true");
	tproc p;
	start(&p);
	send_exec(&p, 1, cmd, 0);
	int64_t code = -2;
	CU_ASSERT_EQUAL(read_exec(&p, 10000, &code, NULL), 1);
	CU_ASSERT_EQUAL(code, 0);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	CU_ASSERT(t_pid_alive(esc)); /* a finished command's daemon lives until we exit */
	tproc_close_in(&p);
	int st = tproc_wait(&p, 10000, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(wait_dead(esc, 5000));
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/* kill -9 of the agent: its keeper ends what the commands left. */
static void test_agent_sigkill_kills_setsid(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512], cmd2[512];
	pid_path(dir, file, sizeof file);
	escapee(cmd, sizeof cmd, file, "true");
	char file2[160];
	snprintf(file2, sizeof file2, "%s/pid2", dir);
	snprintf(cmd2, sizeof cmd2, "echo $$ > %s; exec sleep 1002", file2);
	tproc p;
	start(&p);
	send_exec(&p, 1, cmd, 0);
	CU_ASSERT_EQUAL(read_exec(&p, 10000, NULL, NULL), 1);
	send_exec(&p, 2, cmd2, 0); /* still running when the agent dies */
	pid_t esc = t_pid_from_file(file, 0, 10000), running = t_pid_from_file(file2, 0, 10000);
	CU_ASSERT_FATAL(esc > 0 && running > 0);
	CU_ASSERT(t_pid_alive(esc) && t_pid_alive(running));
	kill(p.pid, SIGKILL);
	int st = tproc_wait(&p, 10000, NULL);
	CU_ASSERT(WIFSIGNALED(st));
	CU_ASSERT(wait_dead(esc, 5000));
	CU_ASSERT(wait_dead(running, 5000));
	tproc_close(&p);
	cleanup(running, file2, dir);
	cleanup(esc, file, dir);
}

/*
 * A double-fork daemon is re-parented to the agent (a child subreaper), not to init;
 * the timeout ends it. One that also cleared its environment carries no marker: the
 * agent's exit still ends it, as an orphan it adopted.
 */
static void test_double_fork(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512], file2[160], cmd2[512];
	pid_path(dir, file, sizeof file);
	snprintf(file2, sizeof file2, "%s/pid2", dir);
	snprintf(cmd, sizeof cmd,
	         "(sh -c 'echo $$ > %s; exec sleep 1001' </dev/null >/dev/null 2>&1 &); "
	         "sleep 30",
	         file);
	snprintf(cmd2, sizeof cmd2,
	         "(env -i /bin/sh -c 'echo $$ > %s; exec sleep 1002' </dev/null >/dev/null "
	         "2>&1 &)",
	         file2);
	tproc p;
	start(&p);
	send_exec(&p, 1, cmd, 1500);
	send_exec(&p, 2, cmd2, 0);
	pid_t d1 = t_pid_from_file(file, 0, 10000), d2 = t_pid_from_file(file2, 0, 10000);
	CU_ASSERT_FATAL(d1 > 0 && d2 > 0);
	/* Adopted by the agent once the middle process is gone (bounded wait). */
	int64_t until = t_now_ms() + 5000;
	while ((ppid_of(d1, NULL) != p.pid || ppid_of(d2, NULL) != p.pid) && t_now_ms() < until)
		usleep(10 * 1000);
	CU_ASSERT_EQUAL(ppid_of(d1, NULL), p.pid);
	CU_ASSERT_EQUAL(ppid_of(d2, NULL), p.pid);
	for (int i = 0; i < 2; i++) {
		bool timed_out = false;
		uint32_t id = read_exec(&p, 20000, NULL, &timed_out);
		CU_ASSERT(id == 1 ? timed_out : !timed_out);
	}
	CU_ASSERT(wait_dead(d1, 5000));
	CU_ASSERT(t_pid_alive(d2));
	tproc_close_in(&p);
	int st = tproc_wait(&p, 10000, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(wait_dead(d2, 5000));
	tproc_close(&p);
	cleanup(d2, file2, dir);
	cleanup(d1, file, dir);
}

/* ---- cgroup v2: the agent's own cgroup (docs/decisions.md, "Keeper") ---------------- */

/* The `0::` path of /proc/PID/cgroup (0: ourselves) in `cg`. */
static bool cgroup_of(pid_t pid, char *cg, size_t cap)
{
	char path[64], line[1200];
	if (pid)
		snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
	else
		snprintf(path, sizeof path, "/proc/self/cgroup");
	FILE *f = fopen(path, "r");
	bool ok = false;
	while (f && !ok && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "0::/", 4) == 0 && strlen(line + 3) < cap) {
			strcpy(cg, line + 3);
			ok = true;
		}
	}
	if (f)
		fclose(f);
	return ok;
}

/* The directory of the cgroup `cg`: the writable cgroup2 mount whose root holds it. */
static bool cgroup_dir(const char *cg, char *dir, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096];
	bool ok = false;
	while (f && !ok && fgets(line, sizeof line, f)) {
		char root[1024], mnt[1024], opts[1024];
		const char *sep = strstr(line, " - cgroup2 ");
		if (!sep ||
		    sscanf(line, "%*s %*s %*s %1023s %1023s %1023s", root, mnt, opts) != 3 ||
		    strncmp(opts, "ro", 2) == 0)
			continue;
		size_t rlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
		if (strncmp(cg, root, rlen) != 0 || (cg[rlen] != '/' && cg[rlen] != '\0'))
			continue;
		const char *rel = strcmp(cg + rlen, "/") == 0 ? "" : cg + rlen;
		ok = (size_t)snprintf(dir, cap, "%s%s", mnt, rel) < cap;
	}
	if (f)
		fclose(f);
	return ok;
}

/*
 * Whether this machine lets us do what the agent does: create a child of our cgroup
 * with a cgroup.kill and move a process into it (a child of ours, which then exits).
 */
static bool cgroup_writable(void)
{
	char cg[1024], dir[1200], probe[1300], file[1400];
	if (!cgroup_of(0, cg, sizeof cg) || !cgroup_dir(cg, dir, sizeof dir))
		return false;
	snprintf(probe, sizeof probe, "%s/asp-test-probe-%d", dir, (int)getpid());
	if (mkdir(probe, 0755) < 0)
		return false;
	snprintf(file, sizeof file, "%s/cgroup.kill", probe);
	bool ok = access(file, W_OK) == 0;
	snprintf(file, sizeof file, "%s/cgroup.procs", probe);
	pid_t c = ok ? fork() : -1;
	if (c == 0) {
		FILE *f = fopen(file, "w");
		_exit(f && fprintf(f, "%d", (int)getpid()) > 0 && fclose(f) == 0 ? 0 : 1);
	}
	int st = 0;
	ok = c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	/* the child is reaped, so the cgroup is empty: rmdir cannot be refused for long */
	for (int64_t until = t_now_ms() + 5000;
	     rmdir(probe) < 0 && errno == EBUSY && t_now_ms() < until;)
		usleep(10 * 1000);
	return ok;
}

/* The agent's own cgroup directory, if it moved into one (`.../asp-agent-<pid>`). */
static bool agent_cgroup(pid_t agent_pid, char *dir, size_t cap)
{
	char cg[1024], want[64];
	snprintf(want, sizeof want, "/asp-agent-%d", (int)agent_pid);
	size_t wl = strlen(want);
	return cgroup_of(agent_pid, cg, sizeof cg) && strlen(cg) >= wl &&
	       strcmp(cg + strlen(cg) - wl, want) == 0 && cgroup_dir(cg, dir, cap);
}

/*
 * Waits up to `ms` for the agent to be in its own cgroup: its keeper moves it beside its
 * start, and what a command forks before that has only the markers.
 */
static bool wait_agent_cgroup(pid_t agent_pid, char *dir, size_t cap, int ms)
{
	for (int64_t until = t_now_ms() + ms; !agent_cgroup(agent_pid, dir, cap);) {
		if (t_now_ms() > until)
			return false;
		usleep(10 * 1000);
	}
	return true;
}

/* Waits up to `ms` for `path` to be gone. */
static bool wait_gone(const char *path, int ms)
{
	int64_t until = t_now_ms() + ms;
	while (access(path, F_OK) == 0) {
		if (t_now_ms() > until)
			return false;
		usleep(10 * 1000);
	}
	return true;
}

/* Waits up to `ms` for `pid` to run the program `comm` (past its exec). */
static bool wait_comm(pid_t pid, const char *comm, int ms)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
	int64_t until = t_now_ms() + ms;
	for (;;) {
		size_t len = 0;
		uint8_t *d = t_read_file(path, &len);
		bool ok = d && len == strlen(comm) + 1 && memcmp(d, comm, len - 1) == 0;
		free(d);
		if (ok)
			return true;
		if (t_now_ms() > until)
			return false;
		usleep(10 * 1000);
	}
}

/* Whether the cgroup `cg` is `top` or a job cgroup right below it (`top/job-<n>`). */
static bool below(const char *cg, const char *top)
{
	size_t tl = strlen(top);
	if (strncmp(cg, top, tl) != 0)
		return false;
	if (cg[tl] == '\0')
		return true;
	return strncmp(cg + tl, "/job-", 5) == 0 && cg[tl + 5] >= '1' && cg[tl + 5] <= '9' &&
	       strspn(cg + tl + 5, "0123456789") == strlen(cg + tl + 5);
}

/* Says on stdout which of the two behaviours the tests check here. */
static bool cgroup_mode(void)
{
	static int known = -1;
	if (known < 0) {
		known = cgroup_writable();
		if (!known)
			printf("\n    cgroup v2 is not writable here: checking the fallback\n");
		fflush(stdout);
	}
	return known;
}

/*
 * kill -9 of the agent, and an escapee that left the group AND cleared its environment:
 * with writable cgroup v2 the keeper's cgroup.kill ends it and removes the cgroup;
 * without, only what carries the marker ends.
 */
static void test_agent_sigkill_kills_cleared_escapee(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], file2[160], cmd[700];
	pid_path(dir, file, sizeof file);
	snprintf(file2, sizeof file2, "%s/pid2", dir);
	snprintf(cmd, sizeof cmd,
	         "setsid sh -c 'echo $$ > %s; exec env -i sleep 1001' </dev/null >/dev/null "
	         "2>&1 & setsid sh -c 'echo $$ > %s; exec sleep 1002' </dev/null >/dev/null 2>&1 &",
	         file, file2);
	bool writable = cgroup_mode();
	tproc p;
	start(&p);
	char cg[1200] = "", esc_cg[1024] = "", agent_cg[1024] = "";
	/* the agent moves wherever the machine lets it */
	bool in = writable && wait_agent_cgroup(p.pid, cg, sizeof cg, 10000);
	CU_ASSERT_EQUAL(in, writable);
	send_exec(&p, 1, cmd, 0);
	CU_ASSERT_EQUAL(read_exec(&p, 10000, NULL, NULL), 1);
	pid_t esc = t_pid_from_file(file, 0, 10000), marked = t_pid_from_file(file2, 0, 10000);
	CU_ASSERT_FATAL(esc > 0 && marked > 0);
	CU_ASSERT(wait_comm(esc, "sleep", 10000)); /* past `env -i`: no marker left */
	if (in) {
		/* in its command's job cgroup, or the agent's for a command started before */
		CU_ASSERT(cgroup_of(esc, esc_cg, sizeof esc_cg) &&
		          cgroup_of(p.pid, agent_cg, sizeof agent_cg) && below(esc_cg, agent_cg));
		CU_ASSERT(access(cg, F_OK) == 0);
	}
	kill(p.pid, SIGKILL);
	int st = tproc_wait(&p, 10000, NULL);
	CU_ASSERT(WIFSIGNALED(st));
	CU_ASSERT(wait_dead(marked, 10000));
	if (writable)
		CU_ASSERT(wait_dead(esc, 10000));
	if (in)
		CU_ASSERT(wait_gone(cg, 10000));
	tproc_close(&p);
	cleanup(marked, file2, dir);
	cleanup(esc, file, dir);
}

/*
 * An agent run by a command of another (as the SDK and CLI tests do): its cgroup is a
 * child of the outer one's; kill -9 of the outer agent ends the inner agent, its
 * escapee, and both cgroups.
 */
static void test_nested_agents(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], inner_file[160], req[160], cmd[2048],
	     inner_cmd[700];
	pid_path(dir, file, sizeof file);
	snprintf(inner_file, sizeof inner_file, "%s/inner", dir);
	snprintf(req, sizeof req, "%s/fifo", dir);
	snprintf(inner_cmd, sizeof inner_cmd,
	         "echo $PPID > %s; setsid sh -c 'echo $$ > %s; exec env -i sleep 1003' "
	         "</dev/null >/dev/null 2>&1 &",
	         inner_file, file);
	/*
	 * The inner agent reads a FIFO we hold open, so it never sees the end of its input:
	 * it would end its subtree itself, its escapee too, and prove nothing.
	 */
	CU_ASSERT_FATAL(mkfifo(req, 0600) == 0);
	snprintf(cmd, sizeof cmd, "exec '%s' --stdio <%s >/dev/null", agent, req);
	bool writable = cgroup_mode();
	tproc p;
	start(&p);
	char outer_dir[1200] = "", inner_dir[1200] = "";
	bool in = writable && wait_agent_cgroup(p.pid, outer_dir, sizeof outer_dir, 10000);
	CU_ASSERT_EQUAL(in, writable);
	int fifo = open(req, O_RDWR | O_CLOEXEC); /* after start: the agent must not hold it */
	CU_ASSERT_FATAL(fifo >= 0);
	asp_exec_params e;
	asp_exec_params_init(&e);
	e.command = inner_cmd;
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, 1, ASP_OP_EXEC, &e);
	CU_ASSERT_FATAL(t_write_all(fifo, b.data, b.len) == 0);
	asp_buf_free(&b);
	send_exec(&p, 1, cmd, 0);
	pid_t inner = t_pid_from_file(inner_file, 0, 10000), esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(inner > 0 && esc > 0);
	CU_ASSERT(wait_comm(esc, "sleep", 10000));
	if (in) {
		/* the inner agent's escapee may predate its move: it is in the outer cgroup then */
		CU_ASSERT(wait_agent_cgroup(inner, inner_dir, sizeof inner_dir, 10000));
		/* beside the inner agent: in the job cgroup of the command that it is */
		char want[64];
		snprintf(want, sizeof want, "/asp-agent-%d", (int)inner);
		size_t il = strlen(inner_dir), wl = strlen(want);
		CU_ASSERT(il > wl && strcmp(inner_dir + il - wl, want) == 0);
		inner_dir[il > wl ? il - wl : 0] = '\0';
		CU_ASSERT(below(inner_dir, outer_dir));
	}
	kill(p.pid, SIGKILL);
	tproc_wait(&p, 10000, NULL);
	CU_ASSERT(wait_dead(inner, 10000)); /* it carries the outer agent's marker too */
	if (writable)
		CU_ASSERT(wait_dead(esc, 10000));
	if (in)
		CU_ASSERT(wait_gone(outer_dir, 10000));
	tproc_close(&p);
	close(fifo);
	cleanup(inner, inner_file, dir);
	unlink(req);
	cleanup(esc, file, dir);
}

/* A clean exit removes the agent's cgroup; a dead agent's empty one is swept at start. */
static void test_cgroup_removed(void)
{
	if (!cgroup_mode())
		return; /* nothing to remove */
	char cg[1024], dir[1200], stale[1300];
	CU_ASSERT_FATAL(cgroup_of(0, cg, sizeof cg) && cgroup_dir(cg, dir, sizeof dir));
	pid_t dead = fork(); /* a pid that is gone (reaped) */
	if (dead == 0)
		_exit(0);
	CU_ASSERT_FATAL(dead > 0 && waitpid(dead, NULL, 0) == dead);
	snprintf(stale, sizeof stale, "%s/asp-agent-%d", dir, (int)dead);
	CU_ASSERT_FATAL(mkdir(stale, 0755) == 0);
	tproc p;
	start(&p);
	send_exec(&p, 1, "true", 0);
	CU_ASSERT_EQUAL(read_exec(&p, 10000, NULL, NULL), 1);
	char own[1200] = "";
	CU_ASSERT(wait_agent_cgroup(p.pid, own, sizeof own, 10000));
	CU_ASSERT(wait_gone(stale, 10000));
	tproc_close_in(&p);
	int st = tproc_wait(&p, 10000, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(wait_gone(own, 10000));
	tproc_close(&p);
	rmdir(stale);
}

/* ---- a cgroup per command: timeout and proc_signal KILL end all it started --------- */

/* Reads one exec answer: its id and status, its stdout into `out` (NUL-terminated, at most
 * cap - 1 bytes; empty for an error answer). */
static t_resp exec_answer(tproc *p, char *out, size_t cap)
{
	uint8_t *body;
	size_t len;
	CU_ASSERT_EQUAL_FATAL(t_read_frame(p->out, 20000, &body, &len), 1);
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	memset(&r, 0, sizeof r);
	t_resp resp;
	CU_ASSERT_FATAL(t_parse_response(body, len, ASP_OP_EXEC, &r, a, &resp));
	size_t n = resp.st != ASP_OK             ? 0
	           : r.stdout_data.len < cap - 1 ? r.stdout_data.len
	                                         : cap - 1;
	if (n) /* an error answer has no stdout: data is NULL */
		memcpy(out, r.stdout_data.data, n);
	out[n] = '\0';
	asp_arena_free(a);
	free(body);
	return resp;
}

/* Runs `command` and returns the answer's id, its stdout in `out` (as exec_answer). */
static uint32_t exec_out(tproc *p, uint32_t id, const char *command, char *out, size_t cap)
{
	send_exec(p, id, command, 0);
	return exec_answer(p, out, cap).id;
}

/* The cgroup a command of `p` runs in (`dir`: its directory), from its own /proc. */
static bool command_cgroup(tproc *p, uint32_t id, char *dir, size_t cap)
{
	char out[1200];
	CU_ASSERT_EQUAL(exec_out(p, id, "grep '^0::' /proc/self/cgroup", out, sizeof out), id);
	out[strcspn(out, "\n")] = '\0';
	return strncmp(out, "0::/", 4) == 0 && cgroup_dir(out + 3, dir, cap);
}

/*
 * Waits up to `ms` for the agent's commands to be born in job cgroups: the keeper moves
 * the agent just after its start, and the commands before stay in the agent's cgroup.
 * False, and a word on stdout, where cgroup v2 is not writable (nothing to check).
 */
static bool wait_job_cgroups(tproc *p, uint32_t *id, int ms)
{
	if (!cgroup_mode()) {
		printf("\n    no writable cgroup v2: commands have no cgroup of their own (not "
		       "checked)\n");
		return false;
	}
	char agent_dir[1200], dir[1200];
	CU_ASSERT_FATAL(wait_agent_cgroup(p->pid, agent_dir, sizeof agent_dir, ms));
	for (int64_t until = t_now_ms() + ms;;) {
		bool got = command_cgroup(p, ++*id, dir, sizeof dir);
		if (got && strcmp(dir, agent_dir) != 0 && below(dir, agent_dir))
			return true;
		CU_ASSERT_FATAL(t_now_ms() < until);
	}
}

/*
 * Later commands run to their end: a cgroup once killed would SIGKILL what is born in it
 * (it is never given to another command). More than the spares (cgroup.c's SPARES, 8).
 */
static void later_commands_run(tproc *p, uint32_t *id)
{
	for (int i = 0; i < 10; i++) {
		send_exec(p, ++*id, "exit 7", 0);
		int64_t code = -2;
		/* past other answers and notifications (a proc_signal's, a process's end) */
		for (int64_t end = t_now_ms() + 20000; code == -2 && t_now_ms() < end;) {
			uint8_t *body;
			size_t len;
			if (t_read_frame(p->out, 20000, &body, &len) != 1)
				break;
			asp_arena *a = asp_arena_new();
			asp_exec_result r;
			t_resp resp;
			if (t_parse_response(body, len, ASP_OP_EXEC, &r, a, &resp) &&
			    resp.id == *id)
				code = resp.st == ASP_OK ? r.exit_code : -3;
			asp_arena_free(a);
			free(body);
		}
		CU_ASSERT_EQUAL(code, 7);
	}
}

/* The example, its escapee past `env -i`: no marker, no group; the timeout ends it. */
static void test_timeout_kills_cleared_escapee(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512];
	pid_path(dir, file, sizeof file);
	snprintf(cmd, sizeof cmd,
	         "setsid sh -c 'echo $$ > %s; exec env -i sleep 1001' & echo started", file);
	tproc p;
	start(&p);
	uint32_t id = 0;
	bool checked = wait_job_cgroups(&p, &id, 10000);
	send_exec(&p, ++id, cmd, 3000);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	CU_ASSERT(wait_comm(esc, "sleep", 10000)); /* past `env -i`, before the timeout */
	bool timed_out = false;
	CU_ASSERT_EQUAL(read_exec(&p, 20000, NULL, &timed_out), id);
	CU_ASSERT(timed_out);
	if (checked)
		CU_ASSERT(wait_dead(esc, 5000));
	later_commands_run(&p, &id);
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	CU_ASSERT(wait_dead(esc, 5000)); /* without a cgroup: at the agent's exit */
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/* Sends a spawn of `command` and returns its handle (past any notification). */
static uint64_t spawn_cmd(tproc *p, uint32_t id, const char *command)
{
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = command;
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, id, ASP_OP_SPAWN, &sp);
	CU_ASSERT_FATAL(t_write_all(p->in, b.data, b.len) == 0);
	asp_buf_free(&b);
	uint64_t proc = 0;
	asp_arena *a = asp_arena_new();
	for (int64_t end = t_now_ms() + 10000; !proc && t_now_ms() < end;) {
		uint8_t *body;
		size_t len;
		if (t_read_frame(p->out, 10000, &body, &len) != 1)
			break;
		asp_spawn_result sr;
		t_resp r;
		if (t_parse_response(body, len, ASP_OP_SPAWN, &sr, a, &r) && r.id == id && !r.st)
			proc = sr.proc;
		free(body);
	}
	asp_arena_free(a);
	return proc;
}

/* proc_signal KILL ends an escapee without marker or group too. */
static void test_proc_kill_kills_cleared_escapee(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512];
	pid_path(dir, file, sizeof file);
	snprintf(cmd, sizeof cmd,
	         "setsid sh -c 'echo $$ > %s; exec env -i sleep 1001' </dev/null >/dev/null 2>&1 "
	         "& sleep 30",
	         file);
	tproc p;
	start(&p);
	uint32_t id = 0;
	bool checked = wait_job_cgroups(&p, &id, 10000);
	uint64_t proc = spawn_cmd(&p, ++id, cmd);
	CU_ASSERT_FATAL(proc != 0);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	CU_ASSERT(wait_comm(esc, "sleep", 10000));
	asp_proc_signal_params sg;
	asp_proc_signal_params_init(&sg);
	sg.proc = proc;
	sg.signal = "KILL";
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, ++id, ASP_OP_PROC_SIGNAL, &sg);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	if (checked)
		CU_ASSERT(wait_dead(esc, 5000));
	/* the KILL's answer is none; the spawn's exit notification may come before ours */
	later_commands_run(&p, &id);
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	CU_ASSERT(wait_dead(esc, 5000));
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/*
 * A command that ends on its own leaves what it started running, in its job cgroup,
 * until the agent exits (as before: exec does not wait for it, nothing kills it).
 */
static void test_finished_command_leaves_job(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], cmd[512], out[1200], job[1200];
	pid_path(dir, file, sizeof file);
	snprintf(cmd, sizeof cmd,
	         "setsid sh -c 'echo $$ > %s; exec env -i sleep 1001' </dev/null >/dev/null 2>&1 "
	         "& grep '^0::' /proc/self/cgroup",
	         file);
	tproc p;
	start(&p);
	uint32_t id = 0;
	bool checked = wait_job_cgroups(&p, &id, 10000);
	id++;
	CU_ASSERT_EQUAL(exec_out(&p, id, cmd, out, sizeof out), id);
	pid_t esc = t_pid_from_file(file, 0, 10000);
	CU_ASSERT_FATAL(esc > 0);
	CU_ASSERT(wait_comm(esc, "sleep", 10000));
	if (checked) {
		out[strcspn(out, "\n")] = '\0';
		char esc_cg[1024];
		CU_ASSERT(strncmp(out, "0::/", 4) == 0 && cgroup_dir(out + 3, job, sizeof job));
		CU_ASSERT(cgroup_of(esc, esc_cg, sizeof esc_cg) && strcmp(esc_cg, out + 3) == 0);
	}
	id++;
	CU_ASSERT_EQUAL(exec_out(&p, id, "true", out, sizeof out), id); /* later commands */
	CU_ASSERT(t_pid_alive(esc));
	if (checked)
		CU_ASSERT(access(job, F_OK) == 0); /* held while populated */
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	CU_ASSERT(wait_dead(esc, 5000));
	if (checked)
		CU_ASSERT(wait_gone(job, 10000));
	tproc_close(&p);
	cleanup(esc, file, dir);
}

/* The job cgroups in `dir` (job-*), and in *busy how many of them are populated. */
static int job_dirs(const char *dir, int *busy)
{
	DIR *d = opendir(dir);
	int n = 0;
	*busy = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "job-", 4) != 0)
			continue;
		n++;
		char file[1500];
		snprintf(file, sizeof file, "%s/%s/cgroup.events", dir, de->d_name);
		size_t len = 0;
		uint8_t *ev = t_read_file(file, &len);
		if (ev && memmem(ev, len, "populated 1", 11))
			++*busy;
		free(ev);
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * Job cgroups do not pile up: each command is born in an empty one (never beside what
 * another command left), and once commands and what they left have ended, only the few
 * spares are left (at most cgroup.c's SPARES, 8), empty; none at the agent's exit.
 */
static void test_job_cgroups_settle(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", fifo[128], cmd[512], agent_dir[1200];
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
	/* held open, so that what the commands leave never waits to open it */
	int w = open(fifo, O_RDWR | O_CLOEXEC);
	CU_ASSERT_FATAL(w >= 0);
	tproc p;
	start(&p);
	uint32_t id = 0;
	if (wait_job_cgroups(&p, &id, 10000) &&
	    wait_agent_cgroup(p.pid, agent_dir, sizeof agent_dir, 10000)) {
		/* 12 at once, each leaving a reader of one line behind, away from its pipes */
		enum { N = 12 };
		snprintf(cmd, sizeof cmd,
		         "sh -c 'read x < %s' </dev/null >/dev/null 2>&1 & grep '^0::' "
		         "/proc/self/cgroup",
		         fifo);
		uint32_t first = id + 1;
		for (int i = 0; i < N; i++)
			send_exec(&p, ++id, cmd, 0);
		char held[N][1024];
		for (int i = 0; i < N; i++) {
			uint8_t *body;
			size_t len;
			CU_ASSERT_EQUAL_FATAL(t_read_frame(p.out, 20000, &body, &len), 1);
			asp_arena *a = asp_arena_new();
			asp_exec_result r;
			t_resp resp;
			CU_ASSERT_FATAL(t_parse_response(body, len, ASP_OP_EXEC, &r, a, &resp));
			CU_ASSERT_FATAL(resp.id >= first && resp.id < first + N);
			size_t n = r.stdout_data.len < 1023 ? r.stdout_data.len : 1023;
			memcpy(held[i], r.stdout_data.data, n);
			held[i][n] = '\0';
			held[i][strcspn(held[i], "\n")] = '\0';
			asp_arena_free(a);
			free(body);
		}
		for (int i = 0; i < N; i++)
			for (int j = 0; j < i; j++)
				CU_ASSERT(strcmp(held[i], held[j]) != 0);
		for (int k = 0; k < 3; k++) {
			char out[1200];
			id++;
			CU_ASSERT_EQUAL(
			    exec_out(&p, id, "grep '^0::' /proc/self/cgroup", out, sizeof out), id);
			out[strcspn(out, "\n")] = '\0';
			for (int i = 0; i < N; i++)
				CU_ASSERT(strcmp(out, held[i]) != 0);
		}
		int busy = 0;
		CU_ASSERT(job_dirs(agent_dir, &busy) >= N && busy == N);
		for (int i = 0; i < N; i++)
			CU_ASSERT(write(w, "x\n", 2) == 2);
		int n = 0;
		for (int64_t until = t_now_ms() + 10000;
		     ((n = job_dirs(agent_dir, &busy)) > 8 || busy) && t_now_ms() < until;)
			usleep(10 * 1000);
		CU_ASSERT(n <= 8 && busy == 0);
		tproc_close_in(&p);
		CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
		CU_ASSERT(wait_gone(agent_dir, 10000));
	} else {
		tproc_close_in(&p);
		CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	}
	tproc_close(&p);
	close(w);
	unlink(fifo);
	rmdir(dir);
}

/* One exec of `p` with argv, cwd and env (NULL: none): its status and stdout. */
static asp_status exec_full(tproc *p, uint32_t id, const char *const *argv, size_t argc,
                            const char *cwd, const char *env_key, const char *env_val, char *out,
                            size_t cap)
{
	asp_exec_params e;
	asp_exec_params_init(&e);
	e.has_argv = true;
	e.argv.items = argv;
	e.argv.count = argc;
	e.cwd = cwd;
	asp_strmap_entry kv = {env_key, env_val};
	if (env_key) {
		e.has_env = true;
		e.env.items = &kv;
		e.env.count = 1;
	}
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, id, ASP_OP_EXEC, &e);
	CU_ASSERT_FATAL(t_write_all(p->in, b.data, b.len) == 0);
	asp_buf_free(&b);
	t_resp resp = exec_answer(p, out, cap);
	CU_ASSERT_EQUAL(resp.id, id);
	return resp.st;
}

/*
 * A command born in its job cgroup starts as posix_spawn started it: the same errors,
 * PATH search, cwd and env, no signal blocked or ignored, nothing open but 0-2.
 */
static void test_job_start_like_posix_spawn(void)
{
	char dir[] = "/tmp/asp-esc-XXXXXX", file[128], out[4096];
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(file, sizeof file, "%s/plain", dir);
	int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	tproc p;
	start(&p);
	uint32_t id = 0;
	if (wait_job_cgroups(&p, &id, 10000)) {
		const char *missing[] = {"asp-no-such-program"},
		           *abs_missing[] = {"/nonexistent/x"}, *plain[] = {file}, *t[] = {"true"};
		CU_ASSERT_EQUAL(exec_full(&p, ++id, missing, 1, NULL, NULL, NULL, out, sizeof out),
		                ASP_E_NOT_FOUND);
		CU_ASSERT_EQUAL(
		    exec_full(&p, ++id, abs_missing, 1, NULL, NULL, NULL, out, sizeof out),
		    ASP_E_NOT_FOUND);
		CU_ASSERT_EQUAL(exec_full(&p, ++id, plain, 1, NULL, NULL, NULL, out, sizeof out),
		                ASP_E_PERMISSION_DENIED);
		CU_ASSERT_EQUAL(
		    exec_full(&p, ++id, t, 1, "/nonexistent-dir", NULL, NULL, out, sizeof out),
		    ASP_E_NOT_FOUND);
		CU_ASSERT_EQUAL(exec_full(&p, ++id, t, 1, file, NULL, NULL, out, sizeof out),
		                ASP_E_NOT_A_DIRECTORY);
		/* a PATH of the request without `true` in it */
		CU_ASSERT_EQUAL(exec_full(&p, ++id, t, 1, NULL, "PATH", dir, out, sizeof out),
		                ASP_E_NOT_FOUND);
		const char *sh[] = {
		    "sh", "-c",
		    "echo \"$FOO\"; pwd; grep -E '^Sig(Blk|Ign)' /proc/self/status; "
		    "ls /proc/self/fd; [ \"$(ps -o sid= -p $$)\" -eq $$ ] && "
		    "echo leader"};
		CU_ASSERT_EQUAL(exec_full(&p, ++id, sh, 3, dir, "FOO", "bar", out, sizeof out),
		                ASP_OK);
		char want[512];
		snprintf(
		    want, sizeof want,
		    "bar\n%s\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n0\n1\n2\n3\n"
		    "leader\n",
		    dir);
		CU_ASSERT_STRING_EQUAL(out, want);
		if (strcmp(out, want) != 0)
			printf("\n    got:\n%s\n    wanted:\n%s\n", out, want);
	}
	tproc_close_in(&p);
	CU_ASSERT(WIFEXITED(tproc_wait(&p, 10000, NULL)));
	tproc_close(&p);
	unlink(file);
	rmdir(dir);
}

/* Zombie children of `pid` right now. */
static int zombies_of(pid_t pid)
{
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		pid_t q = (pid_t)atol(de->d_name);
		char st = 0;
		if (q > 0 && ppid_of(q, &st) == pid && st == 'Z')
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * The reaper takes the adopted orphans, never an exit status that a request waits for:
 * 60 execs at once, each leaving an orphan that dies at once, every status right (an exit
 * code, or for every fifth the signal that ended it), no zombie left. The orphans come to
 * the agent's main thread and the reaper thread reaps them; the commands are the serving
 * threads'.
 */
static void test_reaping_keeps_statuses(void)
{
	tproc p;
	start(&p);
	enum { N = 60 };
	for (uint32_t id = 1; id <= N; id++) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "(true &); (sleep 0.0$((%u %% 10)) &); %s %u", id,
		         id % 5 ? "exit" : "kill -KILL $$; exit", id % 100);
		send_exec(&p, id, cmd, 0);
	}
	bool seen[N + 1] = {false};
	for (int i = 0; i < N; i++) {
		int64_t code = -2;
		char sig[16];
		uint32_t id = read_exec_sig(&p, 30000, &code, sig);
		CU_ASSERT_FATAL(id >= 1 && id <= N && !seen[id]);
		seen[id] = true;
		CU_ASSERT_EQUAL(code, id % 5 ? (int64_t)(id % 100) : -1);
		CU_ASSERT_STRING_EQUAL(sig, id % 5 ? "" : "KILL");
	}
	int64_t until = t_now_ms() + 5000;
	while (zombies_of(p.pid) > 0 && t_now_ms() < until)
		usleep(10 * 1000);
	CU_ASSERT_EQUAL(zombies_of(p.pid), 0);
	tproc_close_in(&p);
	int st = tproc_wait(&p, 10000, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	tproc_close(&p);
}

/* Bytes the process has read so far (rchar in /proc/PID/io), or -1. */
static long long rchar_of(pid_t pid)
{
	char path[64], line[128];
	snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
	FILE *f = fopen(path, "r");
	long long v = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "rchar: %lld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* Entries of `dir` other than "." and ".." and `keep`; their names joined in `names`. */
static int others_in(const char *dir, const char *keep, char *names, size_t cap)
{
	DIR *d = opendir(dir);
	int n = 0;
	size_t used = 0;
	names[0] = '\0';
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, keep))
			continue;
		n++;
		int w = snprintf(names + used, cap - used, "%s ", de->d_name);
		if (w > 0 && (size_t)w < cap - used)
			used += (size_t)w;
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * An agent killed (SIGKILL) while it writes a large file with `atomic`, many times: no
 * temporary piles up beside the target, and one good write leaves only the target.
 */
static void test_killed_atomic_writes_leave_nothing(void)
{
	char dir[] = "/tmp/asp-esc-w-XXXXXX", target[128], names[1024];
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(target, sizeof target, "%s/target", dir);
	enum { SIZE = 12 << 20, KILLS = 24 }; /* under max_message (16 MiB) */
	uint8_t *data = malloc(SIZE);
	CU_ASSERT_FATAL(data != NULL);
	memset(data, 'x', SIZE);
	asp_write_params w;
	asp_write_params_init(&w);
	w.path = target;
	w.data.data = data;
	w.data.len = SIZE;
	w.atomic = true;
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, 1, ASP_OP_WRITE, &w);
	int killed = 0, leftovers = 0;
	for (int i = 0; i < KILLS; i++) {
		tproc p;
		start(&p);
		long long base = rchar_of(p.pid);
		CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
		/* Once the whole request is read, kills at 0, 2, 4, ... ms: spread over the
		 * decoding, the write and the fsync (a fault's timing, not a synchronisation). */
		int64_t until = t_now_ms() + 10000;
		while (rchar_of(p.pid) - base < (long long)b.len && t_now_ms() < until)
			;
		usleep((useconds_t)(i % 12) * 2000);
		if (kill(p.pid, SIGKILL) == 0)
			killed++;
		tproc_wait(&p, 10000, NULL);
		tproc_close(&p);
		/* a write that finished before the kill is fine; a half-written target is not */
		struct stat st;
		if (stat(target, &st) == 0)
			CU_ASSERT_EQUAL(st.st_size, SIZE);
		leftovers = others_in(dir, "target", names, sizeof names);
	}
	fprintf(stderr, "\n    %d agents killed mid-write: %d temporaries beside the target (%s)\n",
	        killed, leftovers, names);
	/*
	 * A kill between the link and the rename (two system calls; docs/decisions.md) leaves
	 * the one reusable name, which the next atomic write removes: never more than it.
	 */
	CU_ASSERT(leftovers == 0 || (leftovers == 1 && strcmp(names, ".target.asp-tmp ") == 0));
	tproc p;
	start(&p);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	uint8_t *body;
	size_t len;
	CU_ASSERT_EQUAL_FATAL(t_read_frame(p.out, 30000, &body, &len), 1);
	t_resp r;
	CU_ASSERT(t_parse_response(body, len, ASP_OP_WRITE, NULL, NULL, &r) && r.st == ASP_OK);
	free(body);
	tproc_close_in(&p);
	tproc_wait(&p, 10000, NULL);
	tproc_close(&p);
	CU_ASSERT_EQUAL(others_in(dir, "target", names, sizeof names), 0);
	size_t got = 0;
	uint8_t *back = t_read_file(target, &got);
	CU_ASSERT(back && got == SIZE && memcmp(back, data, SIZE) == 0);
	free(back);
	asp_buf_free(&b);
	free(data);
	others_in(dir, "", names, sizeof names); /* what a failed run leaves, removed below */
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	agent = t_env("ASP_AGENT");
	if (!agent) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("escapees", NULL, NULL);
	CU_add_test(s, "exec timeout ends a setsid child", test_timeout_kills_setsid);
	CU_add_test(s, "exec timeout ends a setsid child holding stdout",
	            test_timeout_kills_setsid_holding_stdout);
	CU_add_test(s, "proc_signal KILL ends a setsid child", test_proc_kill_kills_setsid);
	CU_add_test(s, "the agent's exit on EOF ends a daemon", test_eof_kills_setsid);
	CU_add_test(s, "kill -9 of the agent: its keeper ends the daemons",
	            test_agent_sigkill_kills_setsid);
	CU_add_test(s, "kill -9 of the agent: its cgroup ends a daemon without its marker",
	            test_agent_sigkill_kills_cleared_escapee);
	CU_add_test(s, "nested agents: cgroup in cgroup, all ended by kill -9 of the outer",
	            test_nested_agents);
	CU_add_test(s, "the agent's cgroup is removed at exit, stale ones at start",
	            test_cgroup_removed);
	CU_add_test(s, "job cgroup: exec timeout ends an escapee without marker",
	            test_timeout_kills_cleared_escapee);
	CU_add_test(s, "job cgroup: proc_signal KILL ends an escapee without marker",
	            test_proc_kill_kills_cleared_escapee);
	CU_add_test(s, "job cgroup: a finished command's daemon lives until the agent exits",
	            test_finished_command_leaves_job);
	CU_add_test(s, "job cgroups: born in an empty one, only a few spares left after",
	            test_job_cgroups_settle);
	CU_add_test(s, "job cgroup: a command starts as posix_spawn started it",
	            test_job_start_like_posix_spawn);
	CU_add_test(s, "double fork: adopted, ended by the timeout or the exit", test_double_fork);
	CU_add_test(s, "reaping orphans keeps every exit status", test_reaping_keeps_statuses);
	CU_add_test(s, "killed atomic writes leave no temporary",
	            test_killed_atomic_writes_leave_nothing);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
