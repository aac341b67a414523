/*
 * Round trips per call over a slow link, on every transport, beside OpenSSH through the
 * same link (bench/wan/README.md). A delay proxy (wan_proxy) stands in front of the test
 * fixture's sshd (a quiet login shell) and of `asp-agent --listen`, and the stdio
 * transport's command runs behind a delayed pipe. Each figure is a median of wall time
 * divided by the round trip: what a call costs in round trips, the machine's own work
 * included. Then trees copied up and down with `asp cp -r` beside tar through ssh,
 * `scp -r` and `rsync -a`, each timed from a fresh process (connection included); native
 * SSH also to a sandbox without tar, so its trees go over SFTP.
 *
 *   bench_wan WAN_PROXY ASP_AGENT ASP [--rtt MS]... [--iters N] [--calls-only]
 *             [--trees-only] [--tree-cap S] [--trace ROW]
 *
 * Defaults: 20 and 100 ms, 7 calls per row (5 at 100 ms), trees 3 times (1 at 100 ms),
 * a copy slower than --tree-cap seconds (default 120) stopped and shown as "> S".
 * A program, never a timed test: the figures go to docs/benchmarks.md by hand.
 */
#include "asp/asp.h"
#include "bench_util.h"
#include "sshd_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/*
 * The transports; trees also go through native SSH to a second sshd whose sandbox has no
 * tar (sshd_start_no_tar), so they take the SFTP path (T_SFTP, trees only).
 */
enum { T_STDIO, T_NATIVE, T_AGENT, T_HTTP, NT, T_SFTP = NT, NTT };
static const char *const tname[NTT] = {"stdio", "SSH native", "SSH agent mode", "HTTP",
                                       "SSH native, SFTP (no tar)"};

static const char *proxy_bin, *agent_bin, *asp_bin;
static sshd_fixture fx;
static sshd_fixture fx_notar; /* started only for trees */
static char sbx[400];         /* the sandbox's folder: every config's cwd */
static char local[400];       /* the harness's side of tree copies */
static char kh_proxy[400], kh_notar[400];
static char cm_path[400];
static char cfg[NTT][400];
static double rtt_ms;
static int iters;

static void die(const char *what, const asp_error *err)
{
	fprintf(stderr, "bench_wan: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(1);
}

/* ---- processes ------------------------------------------------------------------------ */

/* Runs argv with stdin from `in` (NULL: /dev/null), output to /dev/null; exit status. */
static int run(const char *const *argv, const char *in)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, in ? in : "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -1;
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int shell(const char *line)
{
	const char *argv[] = {"/bin/bash", "-c", line, NULL};
	return run(argv, NULL);
}

static pid_t spawn_bg(const char *const *argv, const char *log)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	pid_t pid;
	if (posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ) != 0)
		die(argv[0], NULL);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

static void stop_bg(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Reads an unsigned from `path` once it exists (a bench may sleep: not a test). */
static unsigned wait_number(const char *path, const char *after)
{
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");
		char line[512] = "";
		unsigned v = 0;
		if (f && fgets(line, sizeof line, f)) {
			const char *p = after ? strstr(line, after) : line;
			if (p && sscanf(p + (after ? strlen(after) : 0), "%u", &v) == 1) {
				fclose(f);
				return v;
			}
		}
		if (f)
			fclose(f);
		usleep(10000);
	}
	fprintf(stderr, "bench_wan: nothing in %s\n", path);
	exit(1);
}

/* A delay proxy to 127.0.0.1:port; its own port. */
static unsigned proxy_start(unsigned port, const char *name, pid_t *pid)
{
	char delay[32], target[64], pf[500], log[500];
	snprintf(delay, sizeof delay, "%g", rtt_ms / 2);
	snprintf(target, sizeof target, "127.0.0.1:%u", port);
	snprintf(pf, sizeof pf, "%s/%s.port", fx.dir, name);
	snprintf(log, sizeof log, "%s/%s.log", fx.dir, name);
	unlink(pf);
	const char *argv[] = {proxy_bin, delay, "tcp", target, pf, NULL};
	*pid = spawn_bg(argv, log);
	return wait_number(pf, NULL);
}

/* ---- configs -------------------------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		die(path, NULL);
}

/* known_hosts `path` for the proxy's port: the server's key under that name */
static void write_proxy_known_hosts(const sshd_fixture *f0, unsigned port, const char *path)
{
	FILE *f = fopen(f0->known_hosts, "r");
	char line[2048];
	if (!f || !fgets(line, sizeof line, f))
		die(f0->known_hosts, NULL);
	fclose(f);
	char *key = strchr(line, ' ');
	char out[2200];
	snprintf(out, sizeof out, "[127.0.0.1]:%u%s", port, key ? key : "\n");
	write_text(path, out);
}

/* A native SSH config through the proxy at `port`; `agent`: its ssh.agent, or NULL. */
static void write_ssh_config(const char *path, const sshd_fixture *f, unsigned port, const char *kh,
                             const char *agent)
{
	char text[4096], ag[600] = "";
	if (agent)
		snprintf(ag, sizeof ag, ", \"agent\": \"%s\"", agent);
	snprintf(text, sizeof text,
	         "{\"version\": 1, \"transport\": \"ssh\", \"cwd\": \"%s\", \"ssh\": "
	         "{\"host\": \"127.0.0.1\", \"port\": %u, \"user\": \"%s\", "
	         "\"identity_file\": \"%s\", \"known_hosts\": \"%s\", "
	         "\"connect_timeout_ms\": 30000%s}}\n",
	         sbx, port, f->user, f->client_key, kh, ag);
	write_text(path, text);
}

static void write_configs(unsigned ssh_port, unsigned http_port)
{
	char text[4096];
	for (int t = 0; t < NTT; t++)
		snprintf(cfg[t], sizeof cfg[t], "%s/%s.json", fx.dir,
		         (const char *[]){"stdio", "native", "agent", "http", "native-notar"}[t]);
	snprintf(text, sizeof text,
	         "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s\", \"stdio\": "
	         "{\"command\": [\"%s\", \"%g\", \"pipe\", \"%s\", \"--stdio\"]}}\n",
	         sbx, proxy_bin, rtt_ms / 2, agent_bin);
	write_text(cfg[T_STDIO], text);
	write_ssh_config(cfg[T_NATIVE], &fx, ssh_port, kh_proxy, NULL);
	write_ssh_config(cfg[T_AGENT], &fx, ssh_port, kh_proxy, agent_bin);
	snprintf(text, sizeof text,
	         "{\"version\": 1, \"transport\": \"http\", \"cwd\": \"%s\", \"http\": "
	         "{\"url\": \"http://127.0.0.1:%u\"}}\n",
	         sbx, http_port);
	write_text(cfg[T_HTTP], text);
}

/* ---- OpenSSH through the same proxy --------------------------------------------------- */

static char ssh_port_s[16];

/* ssh's argv with `extra` options (NULL-terminated list) and a remote command. */
static void ssh_argv(const char **argv, const char *const *extra, const char *cmd)
{
	static char dest[128];
	snprintf(dest, sizeof dest, "%s@127.0.0.1", fx.user);
	int n = 0;
	static char khopt[500];
	snprintf(khopt, sizeof khopt, "UserKnownHostsFile=%s", kh_proxy);
	const char *base[] = {"ssh",
	                      "-o",
	                      "BatchMode=yes",
	                      "-o",
	                      "StrictHostKeyChecking=yes",
	                      "-o",
	                      khopt,
	                      "-o",
	                      "LogLevel=ERROR",
	                      "-i",
	                      fx.client_key,
	                      "-p",
	                      ssh_port_s};
	for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
		argv[n++] = base[i];
	for (size_t i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n++] = dest;
	if (cmd)
		argv[n++] = cmd;
	argv[n] = NULL;
}

static char cm_opt[500];

static int cm_run(const char *cmd, const char *in)
{
	const char *extra[] = {"-o", cm_opt, NULL};
	const char *argv[32];
	ssh_argv(argv, extra, cmd);
	return run(argv, in);
}

static void cm_start(void)
{
	snprintf(cm_opt, sizeof cm_opt, "ControlPath=%s", cm_path);
	const char *extra[] = {
	    "-o", "ControlMaster=yes", "-o", cm_opt, "-o", "ControlPersist=600", "-N", "-f", NULL};
	const char *argv[32];
	ssh_argv(argv, extra, NULL);
	if (run(argv, NULL) != 0)
		die("ssh ControlMaster", NULL);
}

/*
 * The first call's peer: a ControlMaster's setup from nothing (`ssh -M -N -f`, which
 * returns once the master is authenticated and listening), on a control path of its own,
 * then closed. Milliseconds, -1 when it failed.
 */
static double time_master_setup(void)
{
	char path[500], opt[520];
	snprintf(path, sizeof path, "%s/cm-setup", fx.dir);
	snprintf(opt, sizeof opt, "ControlPath=%s", path);
	const char *extra[] = {
	    "-o", "ControlMaster=yes", "-o", opt, "-o", "ControlPersist=60", "-N", "-f", NULL};
	const char *argv[32];
	ssh_argv(argv, extra, NULL);
	double t0 = now_ms();
	int rc = run(argv, NULL);
	double ms = now_ms() - t0;
	const char *stop[] = {"-o", opt, "-O", "exit", NULL};
	ssh_argv(argv, stop, NULL);
	run(argv, NULL);
	return rc == 0 ? ms : -1;
}

static void cm_stop(void)
{
	const char *extra[] = {"-o", cm_opt, "-O", "exit", NULL};
	const char *argv[32];
	ssh_argv(argv, extra, NULL);
	run(argv, NULL);
}

/* ---- the sandbox's files -------------------------------------------------------------- */

static void make_sandbox(void)
{
	char line[4096];
	snprintf(line, sizeof line,
	         "set -e; mkdir -p %s/src; cd %s; "
	         "for i in $(seq 1 100); do echo \"line $i of a small text file, alpha\"; done "
	         "| head -c 4096 > small.txt; "
	         "for t in 0 1 2 3; do printf 'one alpha two\\n' > e-$t.txt; : > r0-$t; done; "
	         "for d in a b c d e; do mkdir -p src/$d; for i in $(seq 1 10); do "
	         "printf 'int f%%s(void) { return %%s; } /* needle */\\n' $i $i "
	         "> src/$d/f$i.c; echo text > src/$d/n$i.txt; done; done",
	         sbx, sbx);
	if (shell(line) != 0)
		die("making the sandbox's files", NULL);
}

/* ---- one call ------------------------------------------------------------------------- */

typedef struct ctx {
	asp_client *c;
	asp_tools *tools;
	asp_arena *a;
	int mk, rm; /* folders made and removed */
	int ed, rn; /* edits and renames: which way */
	int t;      /* transport */
	char err[256];
} ctx;

typedef int (*call_fn)(ctx *x);

static int fail(ctx *x, const char *what, const asp_error *e)
{
	snprintf(x->err, sizeof x->err, "%s: %.200s", what, e ? e->message : "failed");
	return -1;
}

static int tool(ctx *x, const char *name, const char *args)
{
	char *text = NULL;
	bool is_err = false;
	asp_status st = asp_tools_call(x->tools, name, args, &text, &is_err, NULL);
	int rc = 0;
	if (st != ASP_OK || is_err) {
		snprintf(x->err, sizeof x->err, "%s: %.200s", name, text ? text : "failed");
		rc = -1;
	}
	free(text);
	return rc;
}

static int t_bash(ctx *x)
{
	return tool(x, "bash", "{\"command\": \"true\"}");
}
static int t_read(ctx *x)
{
	return tool(x, "read", "{\"file_path\": \"small.txt\"}");
}
static int t_write(ctx *x)
{
	static char args[1400];
	if (!args[0]) {
		char body[1025];
		memset(body, 'w', 1024);
		body[1024] = '\0';
		snprintf(args, sizeof args, "{\"file_path\": \"w.txt\", \"content\": \"%s\"}",
		         body);
	}
	return tool(x, "write", args);
}
static int t_edit(ctx *x)
{
	char args[200];
	bool back = x->ed++ % 2;
	snprintf(args, sizeof args,
	         "{\"file_path\": \"e-%d.txt\", \"old_string\": \"%s\", \"new_string\": \"%s\"}",
	         x->t, back ? "omega" : "alpha", back ? "alpha" : "omega");
	return tool(x, "edit", args);
}
static int t_ls(ctx *x)
{
	return tool(x, "ls", "{\"path\": \"src\"}");
}
static int t_glob(ctx *x)
{
	return tool(x, "glob", "{\"pattern\": \"**/*.c\", \"path\": \"src\"}");
}
static int t_grep(ctx *x)
{
	return tool(x, "grep", "{\"pattern\": \"needle\", \"path\": \"src\"}");
}

static int o_exec(ctx *x)
{
	static const char *const argv[] = {"true"};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 1;
	asp_exec_result r;
	asp_error e;
	return asp_exec(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "exec", &e);
}

typedef struct ended {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
} ended;

static void on_end(void *user)
{
	ended *d = user;
	pthread_mutex_lock(&d->mu);
	d->done = true;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
}
static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	(void)ev;
	on_end(user);
}
static void on_lost_cb(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	(void)err;
	on_end(user);
}

/* spawn `true` and wait for its exit event */
static int o_spawn(ctx *x)
{
	static const char *const argv[] = {"true"};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 1;
	ended d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
	asp_proc_callbacks cb = {.on_exit = on_exit_cb, .on_lost = on_lost_cb};
	uint64_t proc;
	asp_error e;
	if (asp_spawn_start(x->c, &p, &cb, &d, &proc, &e) != ASP_OK)
		return fail(x, "spawn", &e);
	pthread_mutex_lock(&d.mu);
	while (!d.done)
		pthread_cond_wait(&d.cv, &d.mu);
	pthread_mutex_unlock(&d.mu);
	asp_proc_detach(x->c, proc);
	return 0;
}

static int o_read(ctx *x)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = "small.txt";
	asp_read_result r;
	asp_error e;
	return asp_read(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "read", &e);
}

static int write_1k(ctx *x, const char *path, bool atomic)
{
	static uint8_t kb[1024];
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = path;
	p.data.data = kb;
	p.data.len = sizeof kb;
	p.atomic = atomic;
	asp_write_result r;
	asp_error e;
	return asp_write(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "write", &e);
}
static int o_write(ctx *x)
{
	return write_1k(x, "w.bin", false);
}
static int o_write_atomic(ctx *x)
{
	return write_1k(x, "wa.bin", true);
}

static int o_stat(ctx *x)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "small.txt";
	asp_stat_result r;
	asp_error e;
	return asp_stat(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "stat", &e);
}

static int o_list(ctx *x)
{
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = "src";
	asp_list_result r;
	asp_error e;
	return asp_list(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "list", &e);
}

/* mkdir, then remove of the same name: two rows, one call each */
static int o_mkdir(ctx *x)
{
	char path[64];
	snprintf(path, sizeof path, "mk-%d-%d", x->t, x->mk++);
	asp_mkdir_params p;
	asp_mkdir_params_init(&p);
	p.path = path;
	asp_mkdir_result r;
	asp_error e;
	if (asp_mkdir(x->c, &p, &r, x->a, &e) != ASP_OK)
		return fail(x, "mkdir", &e);
	return 0;
}
static int o_remove(ctx *x)
{
	char path[64];
	snprintf(path, sizeof path, "mk-%d-%d", x->t, x->rm++);
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = path;
	asp_remove_result r;
	asp_error e;
	return asp_remove(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "remove", &e);
}

static int o_rename(ctx *x)
{
	asp_rename_params p;
	asp_rename_params_init(&p);
	bool back = x->rn++ % 2;
	char r0[32], r1[32];
	snprintf(r0, sizeof r0, "r0-%d", x->t);
	snprintf(r1, sizeof r1, "r1-%d", x->t);
	p.from = back ? r1 : r0;
	p.to = back ? r0 : r1;
	asp_rename_result r;
	asp_error e;
	return asp_rename(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "rename", &e);
}

static int o_edit(ctx *x)
{
	asp_edit_params p;
	asp_edit_params_init(&p);
	char path[32];
	snprintf(path, sizeof path, "e-%d.txt", x->t);
	p.path = path;
	bool back = x->ed++ % 2;
	p.old = back ? "omega" : "alpha";
	p.new_text = back ? "alpha" : "omega";
	asp_edit_result r;
	asp_error e;
	return asp_edit(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "edit", &e);
}

static int o_glob(ctx *x)
{
	asp_glob_params p;
	asp_glob_params_init(&p);
	p.path = "src";
	p.pattern = "**/*.c";
	asp_glob_result r;
	asp_error e;
	return asp_glob(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "glob", &e);
}

static int o_grep(ctx *x)
{
	asp_grep_params p;
	asp_grep_params_init(&p);
	p.path = "src";
	p.regex = "needle";
	asp_grep_result r;
	asp_error e;
	return asp_grep(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "grep", &e);
}

static int o_proc_list(ctx *x)
{
	asp_proc_list_params p;
	asp_proc_list_params_init(&p);
	asp_proc_list_result r;
	asp_error e;
	return asp_proc_list(x->c, &p, &r, x->a, &e) == ASP_OK ? 0 : fail(x, "proc_list", &e);
}

/* ---- rows ----------------------------------------------------------------------------- */

/*
 * A row: the call on each transport, the OpenSSH peer (a command over the ControlMaster
 * connection, NULL: none) and the targets: for stdio, agent mode and HTTP together, and
 * for native SSH (0: none).
 */
typedef struct row {
	const char *name;
	call_fn fn;
	const char *peer_cmd; /* run by `ssh -o ControlPath=...` */
	const char *peer_in;  /* its stdin: a file under fx.dir, or NULL */
	double target_frame, target_native;
} row;

static const row tool_rows[] = {
    {"bash `true`", t_bash, "true", NULL, 1.2, 2.0},
    {"read (4 KiB)", t_read, "cat small.txt", NULL, 1.2, 1.5},
    {"write (1 KiB)", t_write, "cat > w.txt", "kb", 1.2, 2.0},
    {"edit", t_edit, NULL, NULL, 1.2, 0},
    {"ls", t_ls, "ls src", NULL, 1.2, 0},
    {"glob", t_glob, "find src -name '*.c'", NULL, 1.2, 2.5},
    {"grep", t_grep, "grep -rn needle src", NULL, 1.2, 2.5},
};

static const row op_rows[] = {
    {"exec `true`", o_exec, "true", NULL, 0, 2.0},
    {"spawn `true` to its exit", o_spawn, NULL, NULL, 0, 0},
    {"read 4 KiB", o_read, "cat small.txt", NULL, 0, 1.5},
    {"write 1 KiB", o_write, "cat > w.bin", "kb", 0, 2.0},
    {"write 1 KiB, atomic", o_write_atomic, NULL, NULL, 0, 2.0},
    {"stat", o_stat, "stat small.txt", NULL, 0, 1.5},
    {"list", o_list, "ls -la src", NULL, 0, 0},
    {"mkdir", o_mkdir, NULL, NULL, 0, 0},
    {"remove", o_remove, NULL, NULL, 0, 0},
    {"rename", o_rename, NULL, NULL, 0, 0},
    {"edit", o_edit, NULL, NULL, 0, 0},
    {"glob", o_glob, NULL, NULL, 0, 0},
    {"grep", o_grep, NULL, NULL, 0, 0},
    {"proc_list", o_proc_list, NULL, NULL, 0, 0},
};

#define NTOOL (sizeof tool_rows / sizeof tool_rows[0])
#define NOP   (sizeof op_rows / sizeof op_rows[0])

/* Round trips, per transport and the OpenSSH peer (column NT); <0: not measured. */
typedef struct figures {
	double first[NT + 1];
	double master; /* OpenSSH's ControlMaster setup: the native first call's target */
	double tools[NTOOL][NT + 1];
	double ops[NOP][NT + 1];
	char why[NOP + NTOOL + 1][NT][96]; /* why a cell is empty */
} figures;

static figures fig;

static double median_rtt(double *v, int n)
{
	double m = median(v, n);
	return m < 0 ? -1 : m / rtt_ms;
}

static void open_ctx(ctx *x, int t)
{
	memset(x, 0, sizeof *x);
	x->t = t;
	asp_error e;
	if (asp_client_open_path(cfg[t], &x->c, &e) != ASP_OK)
		die(tname[t], &e);
	if (asp_tools_new(x->c, &x->tools, &e) != ASP_OK)
		die(tname[t], &e);
	x->a = asp_arena_new();
}

static void close_ctx(ctx *x)
{
	asp_tools_free(x->tools);
	asp_client_free(x->c);
	asp_arena_free(x->a);
}

/* The connection and the first tool call, from nothing: open, tools, bash `true`. */
static double first_call(int t)
{
	double t0 = now_ms();
	ctx x;
	open_ctx(&x, t);
	int rc = t_bash(&x);
	double ms = now_ms() - t0;
	if (rc != 0)
		fprintf(stderr, "bench_wan: %s: %s\n", tname[t], x.err);
	close_ctx(&x);
	return rc == 0 ? ms : -1;
}

static double time_peer(const char *cmd, const char *in)
{
	char inpath[500] = "";
	if (in)
		snprintf(inpath, sizeof inpath, "%s/%s", fx.dir, in);
	double t0 = now_ms();
	char line[600];
	snprintf(line, sizeof line, "cd %s && %s", sbx, cmd);
	if (cm_run(line, in ? inpath : NULL) != 0)
		return -1;
	return now_ms() - t0;
}

/* Every row of `rows` on every transport: the transports take turns call by call. */
static void measure_rows(ctx x[NT], const row *rows, size_t nrows, double out[][NT + 1],
                         size_t why_base)
{
	unsigned long long seed = 38;
	for (size_t r = 0; r < nrows; r++) {
		double v[NT + 1][64];
		int k[NT + 1] = {0};
		bool ok[NT];
		for (int t = 0; t < NT; t++) {
			/* one call first: a connection's first use of an op (sftp's channel, the
			 * WebSocket) is not what the row measures */
			x[t].err[0] = '\0';
			ok[t] = rows[r].fn(&x[t]) == 0;
			if (!ok[t])
				snprintf(fig.why[why_base + r][t], sizeof fig.why[0][0], "%s",
				         x[t].err);
		}
		for (int i = 0; i < iters; i++) {
			int order[NT + 1];
			bench_order(order, NT + 1, &seed);
			for (int j = 0; j <= NT; j++) {
				int t = order[j];
				if (t == NT) {
					if (!rows[r].peer_cmd)
						continue;
					double ms = time_peer(rows[r].peer_cmd, rows[r].peer_in);
					if (ms >= 0)
						v[NT][k[NT]++] = ms;
					continue;
				}
				if (!ok[t])
					continue;
				asp_arena_reset(x[t].a);
				double t0 = now_ms();
				if (rows[r].fn(&x[t]) == 0)
					v[t][k[t]++] = now_ms() - t0;
			}
		}
		for (int t = 0; t <= NT; t++)
			out[r][t] = median_rtt(v[t], k[t]);
	}
}

static void measure_calls(void)
{
	char kb[500];
	snprintf(kb, sizeof kb, "%s/kb", fx.dir);
	char body[1024];
	memset(body, 'w', sizeof body);
	FILE *f = fopen(kb, "w");
	if (!f || fwrite(body, 1, sizeof body, f) != sizeof body || fclose(f) != 0)
		die(kb, NULL);
	/*
	 * first calls: fresh clients, the transports taking turns; OpenSSH: `ssh host true`
	 * on a fresh connection, and a ControlMaster's setup (column NT + 1)
	 */
	double v[NT + 2][16];
	int k[NT + 2] = {0};
	int n = iters < 5 ? iters : 5;
	unsigned long long seed = 7;
	for (int i = 0; i < n; i++) {
		int order[NT + 2];
		bench_order(order, NT + 2, &seed);
		for (int j = 0; j <= NT + 1; j++) {
			int t = order[j];
			double ms;
			if (t == NT + 1) {
				ms = time_master_setup();
			} else if (t == NT) {
				const char *argv[32];
				ssh_argv(argv, NULL, "true");
				double t0 = now_ms();
				ms = run(argv, NULL) == 0 ? now_ms() - t0 : -1;
			} else {
				ms = first_call(t);
			}
			if (ms >= 0)
				v[t][k[t]++] = ms;
		}
	}
	for (int t = 0; t <= NT; t++)
		fig.first[t] = median_rtt(v[t], k[t]);
	fig.master = median_rtt(v[NT + 1], k[NT + 1]);

	ctx x[NT];
	for (int t = 0; t < NT; t++)
		open_ctx(&x[t], t);
	cm_start();
	measure_rows(x, tool_rows, NTOOL, fig.tools, NOP);
	measure_rows(x, op_rows, NOP, fig.ops, 0);
	cm_stop();
	for (int t = 0; t < NT; t++)
		close_ctx(&x[t]);
}

/*
 * --trace NAME: the row whose name starts with NAME (or "first": the first call), three calls on
 * each transport after one untimed, each call's start and end on stderr (CLOCK_MONOTONIC ms, as the
 * proxy's WAN_PROXY_TRACE lines): which packets a call waits for.
 */
static void trace_row(const char *name)
{
	if (!strcmp(name, "first")) {
		for (int t = 0; t < NT; t++) {
			double t0 = now_ms(), ms = first_call(t);
			fprintf(stderr, "%.3f begin %s first call\n%.3f end (%.2f RTT)\n", t0,
			        tname[t], t0 + ms, ms / rtt_ms);
		}
		const char *argv[32];
		ssh_argv(argv, NULL, "true");
		double t0 = now_ms();
		run(argv, NULL);
		double t1 = now_ms();
		fprintf(stderr, "%.3f begin ssh host true\n%.3f end (%.2f RTT)\n", t0, t1,
		        (t1 - t0) / rtt_ms);
		t0 = now_ms();
		double ms = time_master_setup();
		fprintf(stderr, "%.3f begin ssh -M -N -f (master setup)\n%.3f end (%.2f RTT)\n", t0,
		        t0 + ms, ms / rtt_ms);
		return;
	}
	const row *r = NULL;
	for (size_t i = 0; i < NTOOL && !r; i++)
		if (!strncmp(tool_rows[i].name, name, strlen(name)))
			r = &tool_rows[i];
	for (size_t i = 0; i < NOP && !r; i++)
		if (!strncmp(op_rows[i].name, name, strlen(name)))
			r = &op_rows[i];
	if (!r)
		die("--trace: no such row", NULL);
	for (int t = 0; t < NT; t++) {
		ctx x;
		open_ctx(&x, t);
		if (r->fn(&x) != 0)
			fprintf(stderr, "%s: %s\n", tname[t], x.err);
		for (int i = 0; i < 3; i++) {
			double t0 = now_ms();
			int rc = r->fn(&x);
			double t1 = now_ms();
			fprintf(stderr, "%.3f begin %s %s\n%.3f end (%.2f RTT)%s\n", t0, tname[t],
			        r->name, t1, (t1 - t0) / rtt_ms, rc ? " failed" : "");
		}
		close_ctx(&x);
	}
}

/* ---- tables --------------------------------------------------------------------------- */

static void cell(double v, double target, const char *why)
{
	if (v < 0) {
		printf(" %s |", why && *why ? "n/a" : "—");
		return;
	}
	if (target > 0)
		printf(" %.2f %s |", v, v <= target ? "✓" : "✗");
	else
		printf(" %.2f |", v);
}

static void print_calls(void)
{
	printf("\n### Round trips per call at %g ms RTT (median of %d; time ÷ RTT)\n\n", rtt_ms,
	       iters);
	printf("Targets: tools ≤ 1.2 over stdio, agent mode and HTTP; native SSH exec ≤ 2.0, "
	       "read/stat ≤ 1.5, write ≤ 2.0, glob/grep ≤ 2.5, first call ≤ OpenSSH's "
	       "ControlMaster setup. ✓ met, ✗ missed.\n\n");
	printf("| tools layer |");
	for (int t = 0; t < NT; t++)
		printf(" %s |", tname[t]);
	printf(" OpenSSH, ControlMaster |\n|---|");
	for (int t = 0; t <= NT; t++)
		printf("---|");
	printf("\n| first call, connect included |");
	for (int t = 0; t < NT; t++)
		cell(fig.first[t], t == T_NATIVE ? fig.master : 0, NULL);
	printf(" %.2f (master setup, `ssh -M -N -f`); %.2f (`ssh host true`, fresh) |\n",
	       fig.master, fig.first[NT]);
	for (size_t r = 0; r < NTOOL; r++) {
		printf("| %s |", tool_rows[r].name);
		for (int t = 0; t < NT; t++)
			cell(fig.tools[r][t],
			     t == T_NATIVE ? tool_rows[r].target_native : tool_rows[r].target_frame,
			     fig.why[NOP + r][t]);
		if (tool_rows[r].peer_cmd)
			printf(" %.2f (`%s`) |\n", fig.tools[r][NT], tool_rows[r].peer_cmd);
		else
			printf(" — |\n");
	}
	printf("\n| op |");
	for (int t = 0; t < NT; t++)
		printf(" %s |", tname[t]);
	printf(" OpenSSH, ControlMaster |\n|---|");
	for (int t = 0; t <= NT; t++)
		printf("---|");
	printf("\n");
	for (size_t r = 0; r < NOP; r++) {
		printf("| %s |", op_rows[r].name);
		for (int t = 0; t < NT; t++)
			cell(fig.ops[r][t], t == T_NATIVE ? op_rows[r].target_native : 0,
			     fig.why[r][t]);
		if (op_rows[r].peer_cmd)
			printf(" %.2f (`%s`) |\n", fig.ops[r][NT], op_rows[r].peer_cmd);
		else
			printf(" — |\n");
	}
	bool any = false;
	for (size_t r = 0; r < NOP + NTOOL; r++)
		for (int t = 0; t < NT; t++)
			if (fig.why[r][t][0]) {
				if (!any)
					printf("\nn/a:\n");
				any = true;
				printf("- %s, %s: %s\n",
				       r < NOP ? op_rows[r].name : tool_rows[r - NOP].name,
				       tname[t], fig.why[r][t]);
			}
}

/* ---- trees ---------------------------------------------------------------------------- */

static int tree_reps;
static double tree_cap = 120;
static unsigned tree_rows = ~0u; /* the transports whose copies run (bit per T_*) */
static bool tree_peers = true;   /* scp and rsync too (tar always: the ratios need it) */

/* The copies of one tree: asp per transport up and down, then the peers. */
enum {
	K_ASP_UP,
	K_ASP_DOWN = K_ASP_UP + NTT,
	K_TAR_UP = K_ASP_DOWN + NTT,
	K_TAR_DOWN,
	K_SCP_UP,
	K_SCP_DOWN,
	K_RSYNC_UP,
	K_RSYNC_DOWN,
	NK
};

typedef struct tree_fig {
	const char *name;
	double s[NK]; /* seconds; -1 not run; > tree_cap: stopped */
} tree_fig;

static tree_fig trees[2];

/* 500 files of 1-6 KiB in 20 folders */
static void make_small_tree(const char *dir)
{
	char line[4096];
	snprintf(line, sizeof line,
	         "set -e; rm -rf %s; mkdir -p %s; cd %s; for d in $(seq 1 20); do mkdir d$d; "
	         "for f in $(seq 1 25); do head -c $(( (d * 25 + f) %% 6 * 1024 + 1024 )) "
	         "/dev/urandom | base64 > d$d/f$f.txt; done; done",
	         dir, dir, dir);
	if (shell(line) != 0)
		die("making the 500-file tree", NULL);
}

/* Python's dist-packages topped up from the standard library to 4,000 files */
static void make_big_tree(const char *dir)
{
	char line[8192];
	snprintf(
	    line, sizeof line,
	    "set -e; rm -rf %s; mkdir -p %s; cp -a /usr/lib/python3/dist-packages "
	    "%s/dist-packages; n=$(find %s -type f | wc -l); mkdir -p %s/stdlib; "
	    "cd /usr/lib/python3.11 && find . -type f -name '*.py' -not -path './site-packages/*' "
	    "| sort | head -n $((4000 - n)) | tar -cf - -T - | tar -C %s/stdlib -xf -",
	    dir, dir, dir, dir, dir, dir);
	if (shell(line) != 0)
		die("making the 4,000-file tree", NULL);
}

/* Wall time of a shell line under `timeout`; > tree_cap when stopped, -1 when it failed. */
static double time_copy(const char *clean, const char *line)
{
	shell(clean);
	char full[8192];
	snprintf(full, sizeof full, "timeout -s KILL %g bash -c %s", tree_cap, "\"$0\"");
	const char *argv[] = {"/bin/bash", "-c", full, line, NULL};
	double t0 = now_ms();
	int rc = run(argv, NULL);
	double s = (now_ms() - t0) / 1000;
	if (rc == 137 || s >= tree_cap)
		return tree_cap + 1;
	return rc == 0 ? s : -1;
}

static void measure_tree(int which, const char *name, const char *src_local, const char *src_remote)
{
	trees[which].name = name;
	char ssh_cmd[1600], up_dst[500], down_dst[500], clean_up[600], clean_down[600];
	snprintf(ssh_cmd, sizeof ssh_cmd,
	         "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s -o "
	         "LogLevel=ERROR -i %s -p %s",
	         kh_proxy, fx.client_key, ssh_port_s);
	snprintf(up_dst, sizeof up_dst, "%s/up", sbx);
	snprintf(down_dst, sizeof down_dst, "%s/down", local);
	snprintf(clean_up, sizeof clean_up, "rm -rf %s", up_dst);
	snprintf(clean_down, sizeof clean_down, "rm -rf %s", down_dst);
	double v[NK][8];
	int k[NK] = {0};
	for (int rep = 0; rep < tree_reps; rep++) {
		for (int j = 0; j < NK; j++) {
			char line[6000];
			const char *clean =
			    j < K_ASP_DOWN || j == K_TAR_UP || j == K_SCP_UP || j == K_RSYNC_UP
			        ? clean_up
			        : clean_down;
			if (j < K_ASP_DOWN)
				snprintf(line, sizeof line, "%s --config %s cp -r %s :%s", asp_bin,
				         cfg[j - K_ASP_UP], src_local, up_dst);
			else if (j < K_TAR_UP)
				snprintf(line, sizeof line, "%s --config %s cp -r :%s %s", asp_bin,
				         cfg[j - K_ASP_DOWN], src_remote, down_dst);
			else if (j == K_TAR_UP)
				snprintf(
				    line, sizeof line,
				    "tar -C %s -cf - . | %s %s@127.0.0.1 'mkdir -p %s && tar -C %s "
				    "-xf -'",
				    src_local, ssh_cmd, fx.user, up_dst, up_dst);
			else if (j == K_TAR_DOWN)
				snprintf(line, sizeof line,
				         "mkdir -p %s && %s %s@127.0.0.1 'tar -C %s -cf - .' | tar "
				         "-C %s "
				         "-xf -",
				         down_dst, ssh_cmd, fx.user, src_remote, down_dst);
			else if (j == K_SCP_UP)
				snprintf(line, sizeof line,
				         "scp -q -r -o BatchMode=yes -o UserKnownHostsFile=%s -i "
				         "%s -P %s "
				         "%s %s@127.0.0.1:%s",
				         kh_proxy, fx.client_key, ssh_port_s, src_local, fx.user,
				         up_dst);
			else if (j == K_SCP_DOWN)
				snprintf(line, sizeof line,
				         "scp -q -r -o BatchMode=yes -o UserKnownHostsFile=%s -i "
				         "%s -P %s "
				         "%s@127.0.0.1:%s %s",
				         kh_proxy, fx.client_key, ssh_port_s, fx.user, src_remote,
				         down_dst);
			else if (j == K_RSYNC_UP)
				snprintf(line, sizeof line, "rsync -a -e '%s' %s/ %s@127.0.0.1:%s/",
				         ssh_cmd, src_local, fx.user, up_dst);
			else
				snprintf(line, sizeof line, "rsync -a -e '%s' %s@127.0.0.1:%s/ %s/",
				         ssh_cmd, fx.user, src_remote, down_dst);
			if (rep > 0 && k[j] == 0 && v[j][0] > tree_cap)
				continue; /* stopped once: not again */
			if ((j < K_TAR_UP && !(tree_rows >> ((j - K_ASP_UP) % NTT) & 1)) ||
			    (j >= K_SCP_UP && !tree_peers))
				continue; /* not asked for: "—" */
			double s = time_copy(clean, line);
			if (s < 0) {
				fprintf(stderr, "bench_wan: failed: %s\n", line);
				continue;
			}
			if (s > tree_cap) {
				v[j][0] = s;
				if (k[j] == 0)
					k[j] = -1;
				continue;
			}
			if (k[j] < 0)
				k[j] = 0;
			v[j][k[j]++] = s;
		}
	}
	for (int j = 0; j < NK; j++)
		trees[which].s[j] = k[j] < 0 ? tree_cap + 1 : k[j] == 0 ? -1 : median(v[j], k[j]);
	shell(clean_up);
	shell(clean_down);
}

static void tree_cell(double s, double tar, bool ran)
{
	if (!ran)
		printf(" — |");
	else if (s < 0)
		printf(" failed |");
	else if (s > tree_cap)
		printf(" > %g s ✗ |", tree_cap);
	else if (tar > 0)
		printf(" %.2f s (%.1f× tar) %s |", s, s / tar, s <= 1.5 * tar ? "✓" : "✗");
	else
		printf(" %.2f s |", s);
}

static void print_trees(void)
{
	printf("\n### Trees at %g ms RTT (median of %d, fresh process and connection each; "
	       "target: asp cp -r ≤ 1.5× tar through ssh)\n\n",
	       rtt_ms, tree_reps);
	printf("| copy | %s up | %s down | %s up | %s down |\n|---|---|---|---|---|\n",
	       trees[0].name, trees[0].name, trees[1].name, trees[1].name);
	for (int t = 0; t < NTT; t++) {
		printf("| `asp cp -r`, %s |", tname[t]);
		for (int w = 0; w < 2; w++) {
			bool ran = tree_rows >> t & 1;
			tree_cell(trees[w].s[K_ASP_UP + t], trees[w].s[K_TAR_UP], ran);
			tree_cell(trees[w].s[K_ASP_DOWN + t], trees[w].s[K_TAR_DOWN], ran);
		}
		printf("\n");
	}
	/* a table cell's '|' is escaped, also inside code */
	static const char *const peers[] = {"`tar -cf - . \\| ssh host tar -xf -`", "`scp -r`",
	                                    "`rsync -a`"};
	for (int p = 0; p < 3; p++) {
		printf("| %s |", peers[p]);
		for (int w = 0; w < 2; w++) {
			tree_cell(trees[w].s[K_TAR_UP + 2 * p], 0, p == 0 || tree_peers);
			tree_cell(trees[w].s[K_TAR_UP + 2 * p + 1], 0, p == 0 || tree_peers);
		}
		printf("\n");
	}
}

/* The SFTP column's sandbox does what it says: a command finds no tar there. */
static void check_no_tar(void)
{
	ctx x;
	open_ctx(&x, T_SFTP);
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "command -v tar";
	asp_exec_result r;
	asp_error e;
	if (asp_exec(x.c, &p, &r, x.a, &e) != ASP_OK)
		die("the sshd without tar", &e);
	if (r.exit_code == 0) {
		fprintf(stderr, "bench_wan: the sshd without tar finds one: %.*s\n",
		        (int)r.stdout_data.len, (const char *)r.stdout_data.data);
		exit(1);
	}
	close_ctx(&x);
}

static void measure_trees(void)
{
	char small_l[500], big_l[500], small_r[500], big_r[500];
	snprintf(small_l, sizeof small_l, "%s/t500", local);
	snprintf(big_l, sizeof big_l, "%s/t4000", local);
	snprintf(small_r, sizeof small_r, "%s/t500", sbx);
	snprintf(big_r, sizeof big_r, "%s/t4000", sbx);
	make_small_tree(small_l);
	make_big_tree(big_l);
	char line[8192];
	snprintf(line, sizeof line, "rm -rf %s %s && cp -a %s %s && cp -a %s %s", small_r, big_r,
	         small_l, small_r, big_l, big_r);
	shell(line);
	measure_tree(0, "500 files", small_l, small_r);
	measure_tree(1, "4,000 files", big_l, big_r);
}

/* ---- main ----------------------------------------------------------------------------- */

/* --trees-of stdio,native,agent,http,sftp: only those rows' copies (and tar's), for
 * looking at one path at a time. */
static void trees_of(const char *list)
{
	static const char *const key[NTT] = {"stdio", "native", "agent", "http", "sftp"};
	tree_rows = 0;
	tree_peers = false;
	char buf[200];
	snprintf(buf, sizeof buf, "%s", list);
	for (char *save, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		int t = 0;
		while (t < NTT && strcmp(w, key[t]))
			t++;
		if (t == NTT) {
			fprintf(stderr,
			        "bench_wan: --trees-of: '%s' is none of "
			        "stdio, native, agent, http, sftp\n",
			        w);
			exit(2);
		}
		tree_rows |= 1u << t;
	}
}

static pid_t listener;
static unsigned listener_port;

static void start_listener(void)
{
	char log[500];
	snprintf(log, sizeof log, "%s/listener.log", fx.dir);
	const char *argv[] = {agent_bin, "--listen", "127.0.0.1:0", NULL};
	listener = spawn_bg(argv, log);
	listener_port = wait_number(log, "http://127.0.0.1:");
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr,
		        "usage: bench_wan WAN_PROXY ASP_AGENT ASP [--rtt MS]... [--iters N] "
		        "[--calls-only] [--trees-only] [--tree-cap S] [--trees-of LIST]\n");
		return 2;
	}
	static char pb[4096], ab[4096], cb[4096];
	if (!realpath(argv[1], pb) || !realpath(argv[2], ab) || !realpath(argv[3], cb))
		die("realpath", NULL);
	proxy_bin = pb;
	agent_bin = ab;
	asp_bin = cb;
	double rtts[8];
	int nrtt = 0, want_iters = 0;
	bool calls = true, do_trees = true;
	const char *trace = NULL;
	for (int i = 4; i < argc; i++) {
		if (!strcmp(argv[i], "--rtt") && i + 1 < argc && nrtt < 8)
			rtts[nrtt++] = atof(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			want_iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tree-cap") && i + 1 < argc)
			tree_cap = atof(argv[++i]);
		else if (!strcmp(argv[i], "--trace") && i + 1 < argc)
			trace = argv[++i];
		else if (!strcmp(argv[i], "--calls-only"))
			do_trees = false;
		else if (!strcmp(argv[i], "--trees-only"))
			calls = false;
		else if (!strcmp(argv[i], "--trees-of") && i + 1 < argc)
			trees_of(argv[++i]);
	}
	if (!nrtt) {
		rtts[nrtt++] = 20;
		rtts[nrtt++] = 100;
	}
	signal(SIGPIPE, SIG_IGN);
	if (sshd_start_quiet(&fx) < 0) {
		fprintf(stderr, "bench_wan: %s\n", fx.why);
		return 1;
	}
	snprintf(sbx, sizeof sbx, "%s/sandbox", fx.dir);
	snprintf(local, sizeof local, "%s/local", fx.dir);
	snprintf(kh_proxy, sizeof kh_proxy, "%s/known_hosts_proxy", fx.dir);
	snprintf(cm_path, sizeof cm_path, "%s/cm", fx.dir);
	mkdir(sbx, 0755);
	mkdir(local, 0755);
	make_sandbox();
	start_listener();
	if (do_trees && !trace && sshd_start_no_tar(&fx_notar) < 0) {
		fprintf(stderr, "bench_wan: the sshd without tar: %s\n", fx_notar.why);
		return 1;
	}
	snprintf(kh_notar, sizeof kh_notar, "%s/known_hosts_proxy_notar", fx.dir);
	char host[256] = "?";
	gethostname(host, sizeof host);
	printf("## bench-wan: %s, %ld cores, OpenSSH sshd and asp-agent on 127.0.0.1 behind "
	       "wan_proxy (one-way delay = RTT/2, both directions)\n",
	       host, sysconf(_SC_NPROCESSORS_ONLN));
	for (int r = 0; r < nrtt; r++) {
		rtt_ms = rtts[r];
		iters = want_iters ? want_iters : rtt_ms >= 50 ? 5 : 7;
		tree_reps = rtt_ms >= 50 ? 1 : 3;
		pid_t pssh, phttp, pnotar = 0;
		unsigned qssh = proxy_start(fx.port, "proxy-ssh", &pssh);
		unsigned qhttp = proxy_start(listener_port, "proxy-http", &phttp);
		snprintf(ssh_port_s, sizeof ssh_port_s, "%u", qssh);
		write_proxy_known_hosts(&fx, qssh, kh_proxy);
		write_configs(qssh, qhttp);
		if (fx_notar.pid > 0) {
			unsigned q = proxy_start(fx_notar.port, "proxy-notar", &pnotar);
			write_proxy_known_hosts(&fx_notar, q, kh_notar);
			write_ssh_config(cfg[T_SFTP], &fx_notar, q, kh_notar, NULL);
			check_no_tar();
		}
		memset(&fig, 0, sizeof fig);
		if (trace) {
			trace_row(trace);
			calls = do_trees = false;
		}
		if (calls) {
			measure_calls();
			print_calls();
		}
		if (do_trees) {
			measure_trees();
			print_trees();
		}
		fflush(stdout);
		stop_bg(pssh);
		stop_bg(phttp);
		stop_bg(pnotar);
	}
	stop_bg(listener);
	sshd_stop(&fx);
	if (fx_notar.pid > 0)
		sshd_stop(&fx_notar);
	return 0;
}
