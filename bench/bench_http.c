/*
 * The http transport against stdio, in one run, on loopback:
 *   - stat /, exec `true` and 4 KiB read round trips over stdio, HTTP (one POST per call,
 *     "websocket": false), the WebSocket ("websocket": true) and both-mode (the default:
 *     POST, and a WebSocket for streams), interleaved so that load from elsewhere hits
 *     all four alike;
 *   - bulk: 256 MiB written and read back in 8 MiB calls, each way (both-mode with its
 *     WebSocket open: a spawn is followed first);
 *   - requests/s of 4 KiB reads from 64 concurrent clients, and from 64 threads sharing
 *     one client.
 * Prints medians and a Markdown table for docs/benchmarks.md.
 *
 *   bench_http ASP_AGENT [iterations]
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MIB        (1024 * 1024)
#define BULK_MIB   256
#define BULK_CHUNK (8 * MIB)
#define NCONC      64

enum { T_STDIO, T_HTTP, T_WS, T_BOTH, NT };

static void die(const char *what, const asp_error *err)
{
	fprintf(stderr, "bench_http: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(1);
}

/* ---- the listener ----------------------------------------------------------------- */

static pid_t listener_pid;
static char listener_url[128];

static void start_listener(const char *agent, const char *dir)
{
	char log[300];
	snprintf(log, sizeof log, "%s/listener.log", dir);
	const char *argv[] = {agent, "--listen", "127.0.0.1:0", NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (posix_spawn(&listener_pid, agent, &fa, NULL, (char *const *)argv, environ) != 0)
		die("spawn asp-agent --listen", NULL);
	posix_spawn_file_actions_destroy(&fa);
	for (int i = 0; i < 500; i++) {
		FILE *f = fopen(log, "r");
		char line[256] = "";
		if (f && fgets(line, sizeof line, f) && strstr(line, "listening on ")) {
			sscanf(strstr(line, "listening on ") + 13, "%127s", listener_url);
			fclose(f);
			return;
		}
		if (f)
			fclose(f);
		usleep(10000);
	}
	die("asp-agent --listen did not start", NULL);
}

static asp_client *open_client(int t, const char *agent)
{
	asp_config_view v;
	memset(&v, 0, sizeof v);
	const char *argv[] = {agent, "--stdio", NULL};
	if (t == T_STDIO) {
		v.transport = ASP_TRANSPORT_STDIO;
		v.stdio.argv = argv;
		v.stdio.argc = 2;
	} else {
		v.transport = ASP_TRANSPORT_HTTP;
		v.http.url = listener_url;
		v.http.websocket = t == T_WS     ? ASP_HTTP_WS_ONLY
		                   : t == T_HTTP ? ASP_HTTP_WS_NEVER
		                                 : ASP_HTTP_WS_BOTH;
	}
	asp_client *c;
	asp_error err;
	if (asp_client_open_view(&v, &c, &err))
		die("open client", &err);
	return c;
}

/* ---- single calls ----------------------------------------------------------------- */

static void do_hello(asp_client *c, asp_arena *a)
{
	/* stat /, not hello: a connection answers later hellos from its first, no round trip */
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = "/";
	asp_stat_result r;
	asp_error err;
	if (asp_stat(c, &p, &r, a, &err))
		die("stat /", &err);
}

static void do_exec_true(asp_client *c, asp_arena *a)
{
	static const char *const argv[] = {"true"};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 1;
	asp_exec_result r;
	asp_error err;
	if (asp_exec(c, &p, &r, a, &err) || r.exit_code != 0)
		die("exec true", &err);
}

static const char *page_path;

static void do_read_4k(asp_client *c, asp_arena *a)
{
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = page_path;
	asp_read_result r;
	asp_error err;
	if (asp_read(c, &p, &r, a, &err) || r.data.len != 4096)
		die("read 4 KiB", &err);
}

typedef void (*call_fn)(asp_client *c, asp_arena *a);

/* Medians of `fn` per transport, the transports taking turns call by call. */
static void round_trips(asp_client *c[NT], call_fn fn, int iters, double med[NT])
{
	asp_arena *a = asp_arena_new();
	double *v[NT];
	for (int t = 0; t < NT; t++)
		v[t] = calloc((size_t)iters, sizeof(double));
	for (int i = 0; i < iters; i++)
		for (int t = 0; t < NT; t++) {
			double t0 = now_us();
			fn(c[t], a);
			v[t][i] = now_us() - t0;
			asp_arena_reset(a);
		}
	for (int t = 0; t < NT; t++) {
		med[t] = median(v[t], iters);
		free(v[t]);
	}
	asp_arena_free(a);
}

/* ---- bulk ------------------------------------------------------------------------- */

static void bulk(asp_client *c, const char *path, double *up_mibs, double *down_mibs)
{
	static uint8_t *chunk;
	if (!chunk) {
		chunk = malloc(BULK_CHUNK);
		for (size_t i = 0; i < BULK_CHUNK; i++)
			chunk[i] = (uint8_t)(i * 2654435761u >> 24);
	}
	asp_arena *a = asp_arena_new();
	asp_error err;
	double best_up = 1e18, best_down = 1e18;
	for (int rep = 0; rep < 3; rep++) { /* best of three: the machine is shared */
		double t0 = now_us();
		for (int i = 0; i < BULK_MIB * MIB / BULK_CHUNK; i++) {
			asp_write_params p;
			asp_write_params_init(&p);
			p.path = path;
			p.data.data = chunk;
			p.data.len = BULK_CHUNK;
			p.has_offset = i > 0;
			p.offset = (uint64_t)i * BULK_CHUNK;
			asp_write_result r;
			if (asp_write(c, &p, &r, a, &err))
				die("bulk write", &err);
			asp_arena_reset(a);
		}
		double t1 = now_us();
		for (int i = 0; i < BULK_MIB * MIB / BULK_CHUNK; i++) {
			asp_read_params p;
			asp_read_params_init(&p);
			p.path = path;
			p.offset = (uint64_t)i * BULK_CHUNK;
			p.has_length = true;
			p.length = BULK_CHUNK;
			asp_read_result r;
			if (asp_read(c, &p, &r, a, &err) || r.data.len != BULK_CHUNK)
				die("bulk read", &err);
			asp_arena_reset(a);
		}
		double t2 = now_us();
		best_up = t1 - t0 < best_up ? t1 - t0 : best_up;
		best_down = t2 - t1 < best_down ? t2 - t1 : best_down;
	}
	*up_mibs = BULK_MIB / (best_up / 1e6);
	*down_mibs = BULK_MIB / (best_down / 1e6);
	asp_arena_free(a);
}

/* Follows a spawn of `true` to its end: opens both-mode's WebSocket. */
static void follow_one(asp_client *c)
{
	static const asp_proc_callbacks cb = {0};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "true";
	uint64_t proc;
	asp_error err;
	if (asp_spawn_start(c, &p, &cb, NULL, &proc, &err))
		die("spawn", &err);
	asp_arena *a = asp_arena_new();
	asp_proc_wait_params wp;
	asp_proc_wait_params_init(&wp);
	wp.proc = proc;
	asp_proc_wait_result wr;
	if (asp_proc_wait(c, &wp, &wr, a, &err))
		die("proc_wait", &err);
	asp_arena_free(a);
}

/* ---- concurrency ------------------------------------------------------------------ */

typedef struct conc {
	asp_client *c; /* shared, or NULL: open one */
	int t, n;
	const char *agent;
	pthread_barrier_t *go;
} conc;

static void *conc_main(void *arg)
{
	conc *w = arg;
	asp_client *c = w->c ? w->c : open_client(w->t, w->agent);
	asp_arena *a = asp_arena_new();
	do_read_4k(c, a); /* connected before the clock starts */
	pthread_barrier_wait(w->go);
	for (int i = 0; i < w->n; i++) {
		do_read_4k(c, a);
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	pthread_barrier_wait(w->go);
	if (!w->c)
		asp_client_free(c);
	return NULL;
}

/* 4 KiB reads per second from NCONC threads, each with its own client or all with one. */
static double concurrent(int t, asp_client *shared, const char *agent, int per_thread)
{
	pthread_t th[NCONC];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, NCONC + 1);
	conc w = {shared, t, per_thread, agent, &go};
	for (int i = 0; i < NCONC; i++)
		pthread_create(&th[i], NULL, conc_main, &w);
	pthread_barrier_wait(&go);
	double t0 = now_us();
	pthread_barrier_wait(&go);
	double secs = (now_us() - t0) / 1e6;
	for (int i = 0; i < NCONC; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&go);
	return NCONC * per_thread / secs;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_http ASP_AGENT [iterations]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	const char *agent = argv[1];
	int iters = argc > 2 ? atoi(argv[2]) : 2000;
	char dir[64];
	snprintf(dir, sizeof dir, "%s/asp-bench-http-XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(dir))
		die("mkdtemp", NULL);
	start_listener(agent, dir);
	char page[300], big[300];
	snprintf(page, sizeof page, "%s/4k.bin", dir);
	snprintf(big, sizeof big, "%s/big.bin", dir);
	page_path = page;
	int fd = open(page, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	static uint8_t four_k[4096];
	if (fd < 0 || write(fd, four_k, sizeof four_k) != (ssize_t)sizeof four_k)
		die("write 4k.bin", NULL);
	close(fd);

	asp_client *c[NT];
	asp_arena *a = asp_arena_new();
	for (int t = 0; t < NT; t++) {
		c[t] = open_client(t, agent);
		for (int i = 0; i < 100; i++) { /* warm up: connections, pages, the pools */
			do_exec_true(c[t], a);
			do_read_4k(c[t], a);
			asp_arena_reset(a);
		}
	}
	double hello[NT], exec[NT], rd[NT];
	round_trips(c, do_hello, iters, hello);
	round_trips(c, do_exec_true, iters, exec);
	round_trips(c, do_read_4k, iters, rd);

	double up[NT], down[NT];
	follow_one(c[T_BOTH]); /* both-mode's WebSocket is open: bulk must still take POST */
	for (int t = 0; t < NT; t++)
		bulk(c[t], big, &up[t], &down[t]);

	int per = iters / 4 > 50 ? iters / 4 : 50;
	double own[NT] = {0}, shared[NT];
	for (int t = 0; t < NT; t++) {
		shared[t] = concurrent(t, c[t], agent, per);
		if (t != T_STDIO) /* 64 stdio clients would be 64 agents: not the same thing */
			own[t] = concurrent(t, NULL, agent, per);
	}

	printf("| measure | stdio | HTTP (POST) | WebSocket | both (default) | HTTP − stdio | "
	       "WS − stdio | both − stdio |\n");
	printf("|---|---|---|---|---|---|---|---|\n");
	printf("| stat / round trip, median | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %+.1f µs | "
	       "%+.1f µs | %+.1f µs |\n",
	       hello[0], hello[1], hello[2], hello[3], hello[1] - hello[0], hello[2] - hello[0],
	       hello[3] - hello[0]);
	printf(
	    "| exec `true` round trip, median | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %+.0f µs "
	    "| %+.0f µs | %+.0f µs |\n",
	    exec[0], exec[1], exec[2], exec[3], exec[1] - exec[0], exec[2] - exec[0],
	    exec[3] - exec[0]);
	printf("| 4 KiB read round trip, median | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %+.1f µs "
	       "| %+.1f µs | %+.1f µs |\n",
	       rd[0], rd[1], rd[2], rd[3], rd[1] - rd[0], rd[2] - rd[0], rd[3] - rd[0]);
	printf("| %d MiB upload, %d MiB writes (best of 3) | %.0f MiB/s | %.0f MiB/s | "
	       "%.0f MiB/s | %.0f MiB/s | | | |\n",
	       BULK_MIB, BULK_CHUNK / MIB, up[0], up[1], up[2], up[3]);
	printf("| %d MiB download, %d MiB reads (best of 3) | %.0f MiB/s | %.0f MiB/s | "
	       "%.0f MiB/s | %.0f MiB/s | | | |\n",
	       BULK_MIB, BULK_CHUNK / MIB, down[0], down[1], down[2], down[3]);
	printf("| 4 KiB reads/s, 64 clients of their own | | %.0f | %.0f | %.0f | | | |\n", own[1],
	       own[2], own[3]);
	printf("| 4 KiB reads/s, 64 threads on one client | %.0f | %.0f | %.0f | %.0f | | | |\n",
	       shared[0], shared[1], shared[2], shared[3]);
	printf("\n%s: unary round trip (4 KiB read) within 100 µs of stdio's: HTTP %+.1f µs, "
	       "WebSocket %+.1f µs, both %+.1f µs\n",
	       rd[1] - rd[0] <= 100 && rd[2] - rd[0] <= 100 && rd[3] - rd[0] <= 100 ? "met"
	                                                                            : "NOT met",
	       rd[1] - rd[0], rd[2] - rd[0], rd[3] - rd[0]);

	for (int t = 0; t < NT; t++)
		asp_client_free(c[t]);
	asp_arena_free(a);
	kill(listener_pid, SIGTERM);
	int st;
	waitpid(listener_pid, &st, 0);
	char rm[200];
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	return system(rm) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
