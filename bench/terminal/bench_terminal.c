/*
 * Terminals: asp shell against `ssh -tt` over an OpenSSH ControlMaster connection, on one
 * loopback sshd (the test fixture's). Each path runs as a child on a local pseudo-terminal
 * (forkpty) that this program drives as a person's terminal emulator would, so both sides
 * are measured the same way (raw mode, the pty's own costs):
 *   keystroke → echo: one byte written to our pty's master, until the remote terminal's
 *     echo of it is read back. The remote runs `stty -icanon; cat >/dev/null`, so the
 *     echo is the remote line discipline's: no program's scheduling is in the figure.
 *   64 MiB through the terminal: one line typed, the remote runs
 *     `head -c 48M /dev/zero | base64 -w0` (64 MiB of text) and a marker; from the
 *     keystroke until the marker arrived.
 * Paths: asp shell over stdio (asp-agent --stdio), SSH agent mode and native SSH, and
 * `ssh -tt` over a ControlMaster (`ssh -o ControlMaster=yes -N -f` first); and a floor,
 * script(1) relaying between our pty and a second local one (no transport, one process). All
 * sessions stay open for the whole run; each round times every path once, in a fresh random order
 * (bench_order), and the medians and ratios to ControlMaster come from one run.
 *
 *   bench_terminal ASP_AGENT ASP [ROUNDS]
 *
 * A last row splits the stdio figure: the same remote terminal driven through libasp
 * (asp_spawn_start with tty, proc_write, on_output) in this process, with no asp command
 * and no local pty: what the transport and the agent cost alone.
 *
 * A path whose sandbox has no terminals (its hello lacks "pty") is shown as n/a.
 */
#include "asp/asp.h"
#include "bench_util.h"
#include "sshd_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define ECHO_PER_ROUND 40
#define BULK_BYTES     (64u << 20) /* base64 output of the 48 MiB below */
#define BULK_CMD       "head -c 50331648 /dev/zero | base64 -w0; echo; echo END-OF-CAT"
#define ECHO_SCRIPT    "stty -icanon; echo READY-ECHO; exec cat >/dev/null"
#define BULK_SCRIPT    "stty -echo; echo READY-BULK; while read x; do " BULK_CMD "; done"
#define BOUND_MS       60000.0

static sshd_fixture fx;
static char dir[256];

enum { P_STDIO, P_AGENT, P_NATIVE, P_CM, P_FLOOR, P_API, P_COUNT };
static const char *const names[P_COUNT] = {"asp shell, stdio (asp-agent --stdio)",
                                           "asp shell, SSH agent mode",
                                           "asp shell, native SSH",
                                           "ssh -tt, ControlMaster",
                                           "floor: script(1) relaying to a local pty",
                                           "libasp over stdio, no asp, no local pty"};

typedef struct session {
	pid_t pid;
	int fd; /* our pty's master */
	bool ok;
} session;

/* Starts argv on a new 50x160 pty; the child's output is read from s->fd. */
static int session_start(session *s, char *const argv[])
{
	struct winsize ws = {.ws_row = 50, .ws_col = 160};
	s->pid = forkpty(&s->fd, NULL, NULL, &ws);
	if (s->pid < 0)
		return -1;
	if (s->pid == 0) {
		setenv("TERM", "xterm-256color", 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	return 0;
}

/*
 * Reads the master until `marker` was seen (it may span reads) or the bound passed;
 * *bytes gets the count read. 0 or -1.
 */
static int read_until(session *s, const char *marker, double bound_ms, size_t *bytes)
{
	static char buf[1 << 16];
	char tail[64] = "";
	size_t ml = strlen(marker), total = 0;
	double end = now_ms() + bound_ms;
	for (;;) {
		int left = (int)(end - now_ms());
		if (left <= 0)
			return -1;
		struct pollfd p = {s->fd, POLLIN, 0};
		if (poll(&p, 1, left) <= 0)
			continue;
		ssize_t n = read(s->fd, buf, sizeof buf);
		if (n <= 0)
			return -1; /* EIO: the child is gone */
		total += (size_t)n;
		/* the marker may span this read and the last: look in tail + the start */
		char join[128];
		size_t tl = strlen(tail), head = (size_t)n < ml ? (size_t)n : ml;
		memcpy(join, tail, tl);
		memcpy(join + tl, buf, head);
		join[tl + head] = '\0';
		if (strstr(join, marker) || memmem(buf, (size_t)n, marker, ml)) {
			if (bytes)
				*bytes = total;
			return 0;
		}
		size_t keep = (size_t)n < ml ? (size_t)n : ml - 1;
		memcpy(tail, buf + n - keep, keep);
		tail[keep] = '\0';
	}
}

static void session_stop(session *s)
{
	if (s->pid <= 0)
		return;
	kill(s->pid, SIGTERM);
	int status;
	while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
		;
	close(s->fd);
	s->pid = 0;
}

/* One byte typed → its echo; µs, or -1. */
static double echo_once(session *s)
{
	double t0 = now_us();
	if (write(s->fd, "a", 1) != 1)
		return -1;
	char c;
	double end = now_ms() + BOUND_MS;
	while (now_ms() < end) {
		struct pollfd p = {s->fd, POLLIN, 0};
		if (poll(&p, 1, 1000) <= 0)
			continue;
		ssize_t n = read(s->fd, &c, 1);
		if (n <= 0)
			return -1;
		if (c == 'a')
			return now_us() - t0;
	}
	return -1;
}

/* One 64 MiB cat: MB/s, or -1. */
static double bulk_once(session *s)
{
	double t0 = now_ms();
	if (write(s->fd, "g\r", 2) != 2)
		return -1;
	size_t bytes = 0;
	if (read_until(s, "END-OF-CAT", BOUND_MS, &bytes) < 0)
		return -1;
	double ms = now_ms() - t0;
	if (bytes < BULK_BYTES)
		return -1;
	return BULK_BYTES / 1e6 / (ms / 1e3);
}

/* ---- the library alone: a terminal through libasp over stdio, no asp, no local pty ---- */

typedef struct api_session {
	asp_client *client;
	uint64_t proc;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t seen;   /* bytes of output so far */
	char tail[64]; /* the last bytes, for markers */
	bool a_seen;   /* an 'a' arrived since the last reset */
	bool ok;
} api_session;

static void api_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                       const uint8_t *data, size_t len)
{
	(void)proc, (void)stream, (void)offset;
	api_session *s = user;
	pthread_mutex_lock(&s->mu);
	s->seen += len;
	if (memchr(data, 'a', len))
		s->a_seen = true;
	size_t tl = strlen(s->tail), keep = sizeof s->tail - 1;
	char join[sizeof s->tail * 2];
	memcpy(join, s->tail, tl);
	size_t add = len < keep ? len : keep;
	memcpy(join + tl, data + len - add, add);
	join[tl + add] = '\0';
	size_t jl = tl + add;
	snprintf(s->tail, sizeof s->tail, "%s", join + (jl > keep ? jl - keep : 0));
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static const asp_proc_callbacks api_cb = {api_output, NULL, NULL};

static int api_write(api_session *s, const char *bytes)
{
	asp_arena *a = asp_arena_new();
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = s->proc;
	p.data = (asp_bytes){(const uint8_t *)bytes, strlen(bytes)};
	asp_proc_write_result r;
	asp_error err;
	int rc = a && asp_proc_write(s->client, &p, &r, a, &err) == ASP_OK ? 0 : -1;
	asp_arena_free(a);
	return rc;
}

/* Waits (under s->mu) until `done` or the bound. */
#define API_WAIT(s, done)                                                                          \
	do {                                                                                       \
		struct timespec ts_;                                                               \
		clock_gettime(CLOCK_REALTIME, &ts_);                                               \
		ts_.tv_sec += (time_t)(BOUND_MS / 1000);                                           \
		while (!(done))                                                                    \
			if (pthread_cond_timedwait(&(s)->cv, &(s)->mu, &ts_) != 0)                 \
				break;                                                             \
	} while (0)

static int api_start(api_session *s, const char *cfg_path, const char *script, const char *ready)
{
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	asp_error err;
	if (asp_client_open_path(cfg_path, &s->client, &err) != ASP_OK)
		return -1;
	const char *argv[] = {"sh", "-c", script};
	asp_tty tty = {.rows = 50, .cols = 160, .term = "xterm-256color"};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 3;
	p.tty = &tty;
	if (asp_spawn_start(s->client, &p, &api_cb, s, &s->proc, &err) != ASP_OK)
		return -1;
	pthread_mutex_lock(&s->mu);
	API_WAIT(s, strstr(s->tail, ready));
	bool ok = strstr(s->tail, ready) != NULL;
	pthread_mutex_unlock(&s->mu);
	return ok ? 0 : -1;
}

static double api_echo_once(api_session *s)
{
	pthread_mutex_lock(&s->mu);
	s->a_seen = false;
	pthread_mutex_unlock(&s->mu);
	double t0 = now_us();
	if (api_write(s, "a") < 0)
		return -1;
	pthread_mutex_lock(&s->mu);
	API_WAIT(s, s->a_seen);
	bool ok = s->a_seen;
	pthread_mutex_unlock(&s->mu);
	return ok ? now_us() - t0 : -1;
}

static double api_bulk_once(api_session *s)
{
	pthread_mutex_lock(&s->mu);
	s->seen = 0;
	s->tail[0] = '\0';
	pthread_mutex_unlock(&s->mu);
	double t0 = now_ms();
	if (api_write(s, "g\r") < 0)
		return -1;
	pthread_mutex_lock(&s->mu);
	API_WAIT(s, strstr(s->tail, "END-OF-CAT"));
	bool ok = strstr(s->tail, "END-OF-CAT") && s->seen >= BULK_BYTES;
	pthread_mutex_unlock(&s->mu);
	double ms = now_ms() - t0;
	return ok ? BULK_BYTES / 1e6 / (ms / 1e3) : -1;
}

static void api_stop(api_session *s)
{
	if (s->client && s->proc) {
		asp_arena *a = asp_arena_new();
		asp_proc_signal_params p;
		asp_proc_signal_params_init(&p);
		p.proc = s->proc;
		p.signal = "KILL";
		asp_proc_signal_result r;
		asp_error err;
		if (a)
			asp_proc_signal(s->client, &p, &r, a, &err);
		asp_arena_free(a);
	}
	asp_client_free(s->client);
	s->client = NULL;
}

/*
 * The argv of path `p` running `script` on a terminal, in static storage: valid until the
 * next call, which is after session_start forked.
 */
static void path_argv(int p, const char *asp, const char *script, char *argv[], char *cm)
{
	static char cfg[320], kh[400], port[16], cp[440], dest[100], cmd[512];
	int k = 0;
	if (p == P_FLOOR) {
		/* One process copying between our pty and a second one: what any remote
		 * terminal costs at least, with no transport. */
		argv[k++] = "script";
		argv[k++] = "-qfec";
		snprintf(cmd, sizeof cmd, "sh -c '%s'", script);
		argv[k++] = cmd;
		argv[k++] = "/dev/null";
		argv[k] = NULL;
		return;
	}
	if (p != P_CM) {
		snprintf(cfg, sizeof cfg, "%s/asp-%d.json", dir, p);
		argv[k++] = (char *)asp;
		argv[k++] = "--config";
		argv[k++] = cfg;
		argv[k++] = "shell";
		argv[k++] = "--";
		argv[k++] = "sh";
		argv[k++] = "-c";
		argv[k++] = (char *)script;
		argv[k] = NULL;
		return;
	}
	snprintf(kh, sizeof kh, "UserKnownHostsFile=%s", fx.known_hosts);
	snprintf(port, sizeof port, "%u", fx.port);
	snprintf(cp, sizeof cp, "ControlPath=%s", cm);
	snprintf(dest, sizeof dest, "%s@127.0.0.1", fx.user);
	snprintf(cmd, sizeof cmd, "sh -c '%s'", script); /* the scripts hold no quote */
	const char *v[] = {"ssh", "-tt",
	                   "-o",  "BatchMode=yes",
	                   "-o",  "StrictHostKeyChecking=yes",
	                   "-o",  kh,
	                   "-o",  "LogLevel=ERROR",
	                   "-i",  fx.client_key,
	                   "-p",  port,
	                   "-o",  cp,
	                   dest,  cmd,
	                   NULL};
	for (k = 0; v[k]; k++)
		argv[k] = (char *)v[k];
	argv[k] = NULL;
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	int rc = fputs(text, f) < 0 ? -1 : 0;
	return fclose(f) != 0 ? -1 : rc;
}

static int run(const char *cmd)
{
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_terminal ASP_AGENT ASP [ROUNDS]\n");
		return 2;
	}
	/* absolute: the configs are read from another folder, the agent started over SSH */
	static char agent[PATH_MAX], asp[PATH_MAX];
	if (!realpath(argv[1], agent) || !realpath(argv[2], asp)) {
		fprintf(stderr, "bench_terminal: %s or %s: %s\n", argv[1], argv[2],
		        strerror(errno));
		return 2;
	}
	int rounds = argc > 3 ? atoi(argv[3]) : 15;
	if (rounds < 1)
		rounds = 1;
	signal(SIGPIPE, SIG_IGN);
	if (sshd_start(&fx) != 0) {
		fprintf(stderr, "bench_terminal: %s\n", fx.why);
		return 1;
	}
	snprintf(dir, sizeof dir, "%s", fx.dir);
	char text[PATH_MAX + 2048], path[400], cm[400], line[8192];
	snprintf(path, sizeof path, "%s/asp-%d.json", dir, P_STDIO);
	snprintf(text, sizeof text,
	         "{\"version\": 1, \"transport\": \"stdio\", \"stdio\": {\"command\": [\"%s\", "
	         "\"--stdio\"]}}",
	         agent);
	write_file(path, text);
	snprintf(path, sizeof path, "%s/asp-%d.json", dir, P_AGENT);
	sshd_config_json(&fx, agent, NULL, text, sizeof text);
	write_file(path, text);
	snprintf(path, sizeof path, "%s/asp-%d.json", dir, P_NATIVE);
	sshd_config_json(&fx, NULL, NULL, text, sizeof text);
	write_file(path, text);
	snprintf(cm, sizeof cm, "%s/cm.sock", dir);
	snprintf(line, sizeof line,
	         "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s "
	         "-o LogLevel=ERROR -i %s -p %u -o ControlMaster=yes -o ControlPath=%s "
	         "-o ControlPersist=300 -N -f %s@127.0.0.1 </dev/null >/dev/null 2>&1",
	         fx.known_hosts, fx.client_key, fx.port, cm, fx.user);
	if (run(line) != 0)
		fprintf(stderr, "bench_terminal: the ControlMaster did not start\n");

	session echo_s[P_COUNT], bulk_s[P_COUNT];
	memset(echo_s, 0, sizeof echo_s);
	memset(bulk_s, 0, sizeof bulk_s);
	static api_session api_echo, api_bulk;
	snprintf(path, sizeof path, "%s/asp-%d.json", dir, P_STDIO);
	api_echo.ok = api_start(&api_echo, path, ECHO_SCRIPT, "READY-ECHO") == 0;
	api_bulk.ok = api_start(&api_bulk, path, BULK_SCRIPT, "READY-BULK") == 0;
	for (int p = 0; p < P_COUNT; p++) {
		char *av[24];
		if (p == P_API) {
			echo_s[p].ok = api_echo.ok;
			bulk_s[p].ok = api_bulk.ok;
			continue;
		}
		path_argv(p, asp, ECHO_SCRIPT, av, cm);
		echo_s[p].ok = session_start(&echo_s[p], av) == 0 &&
		               read_until(&echo_s[p], "READY-ECHO", BOUND_MS, NULL) == 0;
		path_argv(p, asp, BULK_SCRIPT, av, cm);
		bulk_s[p].ok = session_start(&bulk_s[p], av) == 0 &&
		               read_until(&bulk_s[p], "READY-BULK", BOUND_MS, NULL) == 0;
		if (!echo_s[p].ok || !bulk_s[p].ok)
			fprintf(stderr, "bench_terminal: %s: no terminal session (n/a)\n",
			        names[p]);
	}

	static double echo_v[P_COUNT][ECHO_PER_ROUND * 64], bulk_v[P_COUNT][64];
	int ne[P_COUNT] = {0}, nb[P_COUNT] = {0};
	if (rounds > 64)
		rounds = 64;
	unsigned long long seed = 0x5eed7e57ull;
	int order[P_COUNT];
	/* a warm-up round, not counted: first faults, caches */
	for (int p = 0; p < P_COUNT; p++)
		if (echo_s[p].ok)
			for (int i = 0; i < 5; i++)
				p == P_API ? api_echo_once(&api_echo) : echo_once(&echo_s[p]);
	for (int r = 0; r < rounds; r++) {
		bench_order(order, P_COUNT, &seed);
		for (int k = 0; k < P_COUNT; k++) {
			int p = order[k];
			if (!echo_s[p].ok)
				continue;
			for (int i = 0; i < ECHO_PER_ROUND; i++) {
				double us =
				    p == P_API ? api_echo_once(&api_echo) : echo_once(&echo_s[p]);
				if (us >= 0)
					echo_v[p][ne[p]++] = us;
			}
		}
		bench_order(order, P_COUNT, &seed);
		for (int k = 0; k < P_COUNT; k++) {
			int p = order[k];
			if (!bulk_s[p].ok)
				continue;
			double mbs = p == P_API ? api_bulk_once(&api_bulk) : bulk_once(&bulk_s[p]);
			if (mbs >= 0)
				bulk_v[p][nb[p]++] = mbs;
			else
				fprintf(stderr, "bench_terminal: %s: a 64 MiB cat failed\n",
				        names[p]);
		}
	}
	double e[P_COUNT], p99[P_COUNT], b[P_COUNT];
	for (int p = 0; p < P_COUNT; p++) {
		e[p] = median(echo_v[p], ne[p]); /* sorts: p99 next */
		p99[p] = ne[p] ? echo_v[p][(int)(ne[p] * 0.99)] : -1;
		b[p] = median(bulk_v[p], nb[p]);
	}
	printf("## Terminals (one sshd on 127.0.0.1, %d rounds, medians; ratio to ssh -tt over "
	       "a ControlMaster)\n\n",
	       rounds);
	printf("| path | echo µs | p99 µs | ratio | 64 MiB cat MB/s | ratio |\n"
	       "|---|---|---|---|---|---|\n");
	for (int p = 0; p < P_COUNT; p++) {
		if (ne[p] == 0 && nb[p] == 0) {
			printf("| %s | n/a | | | n/a | |\n", names[p]);
			continue;
		}
		printf("| %s | %.0f | %.0f | %.2f | %.0f | %.2f |\n", names[p], e[p], p99[p],
		       e[P_CM] > 0 ? e[p] / e[P_CM] : 0, b[p], b[P_CM] > 0 ? b[p] / b[P_CM] : 0);
	}
	printf("\necho: %d keystrokes per path per round; cat: one 64 MiB run per path per round "
	       "(`%s`).\n",
	       ECHO_PER_ROUND, BULK_CMD);

	for (int p = 0; p < P_COUNT; p++) {
		if (p == P_API)
			continue;
		session_stop(&echo_s[p]);
		session_stop(&bulk_s[p]);
	}
	api_stop(&api_echo);
	api_stop(&api_bulk);
	snprintf(line, sizeof line,
	         "ssh -o ControlPath=%s -O exit x@127.0.0.1 </dev/null >/dev/null 2>&1", cm);
	run(line);
	sshd_stop(&fx);
	return 0;
}
