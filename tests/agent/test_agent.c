/*
 * asp-agent as a process: pipelining, concurrency, hostile input (tests/vectors), EOF
 * with requests in flight, options. Every suite runs against $ASP_AGENT and again
 * against $ASP_AGENT_STATIC when that is set.
 */
#include "cu_run.h"
#include "testproc.h"

#include "proto_desc.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *agent; /* the binary the current suite tests */
/*
 * How long to wait for what comes promptly (an answer, an exit, a pid file): generous,
 * since a loaded machine (an ASan build beside other tests) can take seconds; a working
 * agent never makes a test wait this long.
 */
#define WAIT_MS 20000
static const char *vectors;

static void start(tproc *p)
{
	char *argv[] = {(char *)agent, "--stdio", NULL};
	CU_ASSERT_FATAL(tproc_spawn(p, argv) == 0);
}

/* Closes stdin, expects exit status `code` within `ms`. */
static void finish(tproc *p, int code, int ms)
{
	tproc_close_in(p);
	int st = tproc_wait(p, ms, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == code);
	tproc_close(p);
}

/* Reads one response; returns its id, or UINT32_MAX (and fails) when none came. */
static uint32_t read_response(tproc *p, int ms, t_resp *r)
{
	uint8_t *body;
	size_t len;
	int got = t_read_frame(p->out, ms, &body, &len);
	CU_ASSERT_EQUAL(got, 1);
	if (got != 1)
		return UINT32_MAX;
	bool ok = t_parse_response(body, len, ASP_OP_HELLO, NULL, NULL, r);
	CU_ASSERT(ok);
	free(body);
	return ok ? r->id : UINT32_MAX;
}

static void add_stat(asp_buf *b, uint32_t id, const char *path)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	t_add_request(b, id, ASP_OP_STAT, &p);
}

static void add_exec(asp_buf *b, uint32_t id, const char *command)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = command;
	t_add_request(b, id, ASP_OP_EXEC, &p);
}

static void add_hello(asp_buf *b, uint32_t id)
{
	asp_hello_params p;
	asp_hello_params_init(&p);
	t_add_request(b, id, ASP_OP_HELLO, &p);
}

/* 50 requests in one write: 50 answers, each id once. */
static void test_pipelined_50(void)
{
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	for (uint32_t id = 1; id <= 50; id++) {
		if (id % 3 == 0)
			add_exec(&b, id, "true");
		else if (id % 3 == 1)
			add_stat(&b, id, "/");
		else
			add_hello(&b, id);
	}
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	bool seen[51] = {false};
	for (int i = 0; i < 50; i++) {
		t_resp r;
		uint32_t id = read_response(&p, WAIT_MS, &r);
		if (id == UINT32_MAX)
			break;
		CU_ASSERT(id >= 1 && id <= 50 && !seen[id]);
		CU_ASSERT_EQUAL(r.st, ASP_OK);
		if (id >= 1 && id <= 50)
			seen[id] = true;
	}
	for (int id = 1; id <= 50; id++)
		CU_ASSERT(seen[id]);
	finish(&p, 0, WAIT_MS);
}

/* A running exec does not delay a stat sent after it: answers come out of order. */
static void test_slow_exec_does_not_block_stat(void)
{
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	/* 3 s: the stat comes first even when a loaded machine takes a while to serve it. */
	add_exec(&b, 1, "sleep 3");
	add_stat(&b, 2, "/");
	int64_t t0 = t_now_ms();
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	t_resp r;
	CU_ASSERT_EQUAL(read_response(&p, WAIT_MS, &r), 2);
	CU_ASSERT_EQUAL(read_response(&p, WAIT_MS, &r), 1);
	CU_ASSERT(t_now_ms() - t0 >= 2900);
	finish(&p, 0, WAIT_MS);
}

/* 100 slow execs at once: all answered, with at most 64 threads serving. */
static void test_worker_cap(void)
{
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	for (uint32_t id = 1; id <= 100; id++)
		add_exec(&b, id, "sleep 0.3");
	int64_t t0 = t_now_ms();
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	/*
	 * The agent's threads only grow (idle ones stay until EOF): watch the count until
	 * it reaches the cap, or for 3 s, however long a loaded machine takes to get there.
	 */
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)p.pid);
	int threads = -1;
	for (int64_t until = t_now_ms() + 3000; threads < 64 && t_now_ms() < until;) {
		FILE *f = fopen(path, "r");
		int now = -1;
		while (f && fgets(line, sizeof line, f))
			if (sscanf(line, "Threads: %d", &now) == 1)
				break;
		if (f)
			fclose(f);
		threads = now > threads ? now : threads;
		usleep(10 * 1000);
	}
	/* + the reaper thread, the job cgroups' thread (cgroup.c, with a writable cgroup
	 * v2) and a sanitizer thread */
	CU_ASSERT(threads > 1 && threads <= 64 + 3);
	int answered = 0;
	for (int i = 0; i < 100; i++) {
		t_resp r;
		if (read_response(&p, WAIT_MS, &r) == UINT32_MAX)
			break;
		answered++;
	}
	CU_ASSERT_EQUAL(answered, 100);
	CU_ASSERT(t_now_ms() - t0 < 15000); /* one at a time, they would take 30 s */
	finish(&p, 0, WAIT_MS);
}

/* EOF with requests in flight: every one is answered, then exit 0. */
static void test_eof_answers_in_flight(void)
{
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	add_exec(&b, 1, "sleep 0.3; echo done");
	add_stat(&b, 2, "/");
	add_hello(&b, 3);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	tproc_close_in(&p);
	int seen = 0;
	for (int i = 0; i < 3; i++) {
		uint8_t *body;
		size_t len;
		if (t_read_frame(p.out, WAIT_MS, &body, &len) != 1)
			break;
		asp_arena *a = asp_arena_new();
		asp_exec_result er;
		t_resp r;
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		asp_msg m;
		asp_error e;
		CU_ASSERT_FATAL(asp_wire_decode(body, len, &u, &m, &e) == ASP_OK);
		if (m.id == 1) {
			CU_ASSERT(t_parse_response(body, len, ASP_OP_EXEC, &er, a, &r));
			CU_ASSERT_EQUAL(r.st, ASP_OK);
			CU_ASSERT(er.stdout_data.len == 5 &&
			          !memcmp(er.stdout_data.data, "done\n", 5));
		}
		seen |= 1 << m.id;
		msgpack_unpacked_destroy(&u);
		asp_arena_free(a);
		free(body);
	}
	CU_ASSERT_EQUAL(seen, 0xe);
	uint8_t *body;
	size_t len;
	CU_ASSERT_EQUAL(t_read_frame(p.out, WAIT_MS, &body, &len), 0); /* then EOF */
	finish(&p, 0, WAIT_MS);
}

/* ---- hostile input ---------------------------------------------------------------- */

/*
 * Feeds `bytes` with stdin left open and expects the agent to close on its own: EOF on
 * stdout with nothing written, a non-zero exit, a line on stderr, no big allocation.
 */
static void expect_close(const char *name, const uint8_t *bytes, size_t len, bool close_in)
{
	tproc p;
	start(&p);
	CU_ASSERT_FATAL(t_write_all(p.in, bytes, len) == 0);
	if (close_in)
		tproc_close_in(&p);
	size_t n;
	bool eof;
	char *out = t_read_until_eof(p.out, WAIT_MS, &n, &eof);
	if (!eof || n != 0)
		fprintf(stderr, "\n%s: eof %d, %zu bytes on stdout\n", name, eof, n);
	CU_ASSERT(eof);
	CU_ASSERT_EQUAL(n, 0);
	free(out);
	char *err = t_read_until_eof(p.err, WAIT_MS, &n, &eof);
	CU_ASSERT(strstr(err, "asp-agent: ") != NULL);
	CU_ASSERT(strchr(err, '\n') == err + n - 1); /* one line */
	free(err);
	struct rusage ru;
	int st = tproc_wait(&p, WAIT_MS, &ru);
	if (!(WIFEXITED(st) && WEXITSTATUS(st) != 0))
		fprintf(stderr, "\n%s: wait status %d\n", name, st);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0);
	if (!t_asan())
		CU_ASSERT(ru.ru_maxrss < 64 * 1024); /* KiB */
	tproc_close(&p);
}

/* Runs `fn` on every file of the vectors folder whose name starts with `prefix`. */
static int each_vector(const char *prefix,
                       void (*fn)(const char *name, const uint8_t *d, size_t len))
{
	DIR *d = opendir(vectors);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t nl = strlen(e->d_name);
		if (strncmp(e->d_name, prefix, strlen(prefix)) || nl < 4 ||
		    strcmp(e->d_name + nl - 4, ".bin"))
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", vectors, e->d_name);
		size_t len;
		uint8_t *data = t_read_file(path, &len);
		CU_ASSERT_PTR_NOT_NULL_FATAL(data);
		fn(e->d_name, data, len);
		free(data);
		n++;
	}
	closedir(d);
	return n;
}

static void one_msg_vector(const char *name, const uint8_t *d, size_t len)
{
	asp_buf b;
	asp_buf_init(&b);
	t_add_framed(&b, d, len);
	expect_close(name, b.data, b.len, false);
	asp_buf_free(&b);
}

/* msg-*: undecodable as far as an id: the agent logs and closes without writing. */
static void test_msg_vectors_close(void)
{
	CU_ASSERT(each_vector("msg-", one_msg_vector) >= 10);
}

static void one_frame_vector(const char *name, const uint8_t *d, size_t len)
{
	/* A truncated frame only shows as such at EOF. */
	expect_close(name, d, len, strstr(name, "truncated") != NULL);
}

/* frame-*: hostile framing (lengths above max_message, cut frames): closes. */
static void test_frame_vectors_close(void)
{
	CU_ASSERT(each_vector("frame-", one_frame_vector) >= 3);
}

static void one_req_vector(const char *name, const uint8_t *d, size_t len)
{
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	t_add_framed(&b, d, len);
	add_hello(&b, 6); /* the connection stays open: this is answered too */
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	asp_status want =
	    strstr(name, "unknown-method") ? ASP_E_UNSUPPORTED : ASP_E_INVALID_ARGUMENT;
	bool got5 = false, got6 = false;
	for (int i = 0; i < 2; i++) {
		t_resp r;
		uint32_t id = read_response(&p, WAIT_MS, &r);
		if (id == 5) {
			got5 = true;
			if (r.st != want)
				fprintf(stderr, "\n%s: got %s (%s)\n", name, asp_strerror(r.st),
				        r.err.message);
			CU_ASSERT_EQUAL(r.st, want);
		} else if (id == 6) {
			got6 = true;
			CU_ASSERT_EQUAL(r.st, ASP_OK);
		}
	}
	CU_ASSERT(got5 && got6);
	finish(&p, 0, WAIT_MS);
}

/* req-*: a request whose id decodes: an error for that id, connection open. */
static void test_req_vectors_answered(void)
{
	CU_ASSERT(each_vector("req-", one_req_vector) >= 5);
}

/* A response sent to the agent is not a request: protocol error, close. */
static void test_response_to_agent_closes(void)
{
	static const uint8_t resp[] = {0x94, 0x01, 0x01, 0xc0, 0x80}; /* [1, 1, nil, {}] */
	one_msg_vector("response", resp, sizeof resp);
}

/*
 * Writes pipelined just before an undecodable frame are all answered before the agent
 * closes (docs/design.md, "Faults and budgets"): N answers, then EOF. Twenty rounds,
 * since the old agent lost answers only sometimes (11 of 20 came back).
 */
static void test_answers_before_close(void)
{
	char dir[] = "/tmp/asp-agent-test-XXXXXX";
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	enum { N = 20 };
	int lost = 0;
	for (int round = 0; round < 20; round++) {
		tproc p;
		start(&p);
		asp_buf b;
		asp_buf_init(&b);
		char path[N][64];
		for (uint32_t id = 1; id <= N; id++) {
			snprintf(path[id - 1], sizeof path[0], "%s/f%u", dir, id);
			asp_write_params w;
			asp_write_params_init(&w);
			w.path = path[id - 1];
			w.data = (asp_bytes){(const uint8_t *)"data", 4};
			t_add_request(&b, id, ASP_OP_WRITE, &w);
		}
		static const uint8_t bad[] = {0xc1}; /* never a msgpack type */
		t_add_framed(&b, bad, sizeof bad);
		CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
		asp_buf_free(&b);
		int answers = 0;
		for (;;) {
			uint8_t *body;
			size_t len;
			int got = t_read_frame(p.out, 10000, &body, &len);
			CU_ASSERT(got >= 0); /* a frame or EOF, never a hang */
			if (got != 1)
				break;
			t_resp r;
			CU_ASSERT(t_parse_response(body, len, ASP_OP_WRITE, NULL, NULL, &r));
			CU_ASSERT_EQUAL(r.st, ASP_OK);
			free(body);
			answers++;
		}
		if (answers != N)
			lost++;
		CU_ASSERT_EQUAL(answers, N);
		int st = tproc_wait(&p, 5000, NULL);
		CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0);
		tproc_close(&p);
		for (int i = 0; i < N; i++)
			unlink(path[i]);
	}
	if (lost)
		fprintf(stderr, "\n    answers lost before the close in %d of 20 rounds\n", lost);
	rmdir(dir);
}

/* VmHWM (peak RSS) of `pid` in KiB, 0 when unknown. */
static long hwm_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/*
 * The decoding budget (docs/faults.md): twelve pipelined 16 MiB requests built to cost
 * msgpack-c the most. Half hold 16 million nils (over the object limit: too_large, never
 * decoded), half hold just under a million nils and a 15 MiB bin (decoded, one at a time:
 * invalid_argument). Each is answered with an error, and the agent stays under 128 MiB
 * (it took 2.6 GB before).
 */
static void test_hostile_frames_budget(void)
{
	const size_t body = ASP_MAX_MESSAGE_DEFAULT;
	uint8_t *bomb = malloc(4 + body), *padded = malloc(4 + body);
	CU_ASSERT_FATAL(bomb && padded);
	/* [0, id, "stat", {"path": [nil...]}] with the id as uint32 at bytes 4+3 */
	static const uint8_t head[] = {0x94, 0x00, 0xce, 0, 0, 0, 0, 0xa4, 's', 't', 'a', 't'};
	for (int k = 0; k < 2; k++) {
		uint8_t *f = k ? padded : bomb;
		f[0] = (uint8_t)(body >> 24), f[1] = (uint8_t)(body >> 16);
		f[2] = (uint8_t)(body >> 8), f[3] = (uint8_t)body;
		size_t at = 4;
		memcpy(f + at, head, sizeof head);
		at += sizeof head;
		f[at++] = k ? 0x82 : 0x81; /* map of 2 or 1 */
		memcpy(f + at, "\xa4path", 5);
		at += 5;
		size_t nils = k ? ASP_WIRE_MAX_OBJECTS_REQUEST - 16 : 4 + body - at - 5;
		f[at++] = 0xdd;
		f[at++] = (uint8_t)(nils >> 24), f[at++] = (uint8_t)(nils >> 16);
		f[at++] = (uint8_t)(nils >> 8), f[at++] = (uint8_t)nils;
		memset(f + at, 0xc0, nils);
		at += nils;
		if (k) { /* "pad": bin32 filling the rest */
			memcpy(f + at, "\xa3pad\xc6", 5);
			at += 5;
			size_t n = 4 + body - at - 4;
			f[at++] = (uint8_t)(n >> 24), f[at++] = (uint8_t)(n >> 16);
			f[at++] = (uint8_t)(n >> 8), f[at++] = (uint8_t)n;
			memset(f + at, 'x', n);
			at += n;
		}
		CU_ASSERT_EQUAL_FATAL(at, 4 + body);
	}
	tproc p;
	start(&p);
	enum { FRAMES = 12 };
	for (uint32_t id = 1; id <= FRAMES; id++) {
		uint8_t *f = id % 2 ? bomb : padded;
		f[4 + 3] = (uint8_t)(id >> 24), f[4 + 4] = (uint8_t)(id >> 16);
		f[4 + 5] = (uint8_t)(id >> 8), f[4 + 6] = (uint8_t)id;
		CU_ASSERT_FATAL(t_write_all(p.in, f, 4 + body) == 0);
	}
	free(bomb);
	free(padded);
	bool seen[FRAMES + 1] = {false};
	for (int i = 0; i < FRAMES; i++) {
		t_resp r;
		uint32_t id = read_response(&p, 30000, &r);
		if (id == UINT32_MAX)
			break;
		CU_ASSERT(id >= 1 && id <= FRAMES);
		if (id < 1 || id > FRAMES)
			continue;
		seen[id] = true;
		CU_ASSERT_EQUAL(r.st, id % 2 ? ASP_E_TOO_LARGE : ASP_E_INVALID_ARGUMENT);
	}
	for (int id = 1; id <= FRAMES; id++)
		CU_ASSERT(seen[id]);
	long peak = hwm_kb(p.pid);
	fprintf(stderr, "\n    agent peak RSS (VmHWM) with %d hostile 16 MiB frames: %ld KiB\n",
	        FRAMES, peak);
	if (!t_asan())
		CU_ASSERT(peak > 0 && peak < 128 * 1024);
	asp_buf b; /* the connection is still open */
	asp_buf_init(&b);
	add_hello(&b, 99);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	t_resp r;
	CU_ASSERT_EQUAL(read_response(&p, 10000, &r), 99);
	finish(&p, 0, 10000);
}

/* ---- spawned processes ------------------------------------------------------------ */

static void add_spawn(asp_buf *b, uint32_t id, const char *command)
{
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = command;
	t_add_request(b, id, ASP_OP_SPAWN, &p);
}

/* VmRSS of `pid` in KiB, 0 when unknown. */
static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/*
 * Makes `dir` (a mkdtemp template), starts an agent and sends it, as request 1, a spawn
 * that writes its pid to `pidfile` (set here) and then execs `what`.
 */
static void start_spawning(tproc *p, char *dir, const char *what, char *pidfile, size_t cap)
{
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(pidfile, cap, "%s/pid", dir);
	char cmd[512];
	snprintf(cmd, sizeof cmd, "echo $$ > %s; exec %s", pidfile, what);
	start(p);
	asp_buf b;
	asp_buf_init(&b);
	add_spawn(&b, 1, cmd);
	CU_ASSERT_FATAL(t_write_all(p->in, b.data, b.len) == 0);
	asp_buf_free(&b);
}

/*
 * A client that never reads while a process writes 1 GiB: the agent's memory stays
 * bounded (its replay ring and one chunk), the producer is held back. Then the client
 * goes away: the agent ends the process and exits 0.
 */
static void test_nonreader_bounded(void)
{
	char dir[] = "/tmp/asp-agent-nr-XXXXXX", pidfile[128];
	tproc p;
	start_spawning(&p, dir, "head -c 1073741824 /dev/zero", pidfile, sizeof pidfile);
	pid_t producer = t_pid_from_file(pidfile, 0, WAIT_MS);
	CU_ASSERT_FATAL(producer > 0);
	usleep(500 * 1000);
	long base = rss_kb(p.pid), peak = base;
	for (int i = 0; i < 6; i++) { /* 3 s: unbounded, that would be gigabytes */
		usleep(500 * 1000);
		long now = rss_kb(p.pid);
		peak = now > peak ? now : peak;
	}
	fprintf(stderr,
	        "\n    agent RSS with a 1 GiB producer and no reader: %ld KiB after "
	        "0.5 s, peak %ld KiB over the next 3 s\n",
	        base, peak);
	CU_ASSERT(peak - base < 16 * 1024);
	CU_ASSERT(t_asan() || peak < 64 * 1024);
	CU_ASSERT(t_pid_alive(producer)); /* held back, not finished */
	/* The client goes: its output fails, EOF ends the process (TERM), exit 0. */
	close(p.out);
	p.out = -1;
	int64_t t0 = t_now_ms();
	tproc_close_in(&p);
	int st = tproc_wait(&p, WAIT_MS, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(t_now_ms() - t0 < 15000); /* not held by the producer's 1 GiB */
	CU_ASSERT(!t_pid_alive(producer));
	tproc_close(&p);
	unlink(pidfile);
	rmdir(dir);
}

/*
 * EOF with spawned processes running (one ignores TERM, one has a background child):
 * their exits come out, all of their groups end, the agent exits 0 (docs/design.md,
 * "Concurrency and lifetime").
 */
static void test_eof_ends_spawned(void)
{
	char dir[] = "/tmp/asp-agent-eof-XXXXXX";
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	char f1[128], f2[128], c1[256], c2[256];
	snprintf(f1, sizeof f1, "%s/bg", dir);
	snprintf(f2, sizeof f2, "%s/stubborn", dir);
	snprintf(c1, sizeof c1, "sleep 30 & echo $! > %s; echo started; wait", f1);
	snprintf(c2, sizeof c2, "trap '' TERM; echo $$ > %s; sleep 30", f2);
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	add_spawn(&b, 1, c1);
	add_spawn(&b, 2, c2);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	pid_t bg = t_pid_from_file(f1, 0, WAIT_MS), stubborn = t_pid_from_file(f2, 0, WAIT_MS);
	CU_ASSERT_FATAL(bg > 0 && stubborn > 0);
	int64_t t0 = t_now_ms();
	tproc_close_in(&p);
	/* Every frame until EOF: a response precedes its process's notifications. */
	int responses = 0, exits = 0;
	uint64_t procs[3] = {0};
	bool order_ok = true;
	for (;;) {
		uint8_t *body;
		size_t len;
		if (t_read_frame(p.out, WAIT_MS, &body, &len) != 1)
			break;
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		asp_msg m;
		asp_error e;
		CU_ASSERT_FATAL(asp_wire_decode(body, len, &u, &m, &e) == ASP_OK);
		asp_arena *a = asp_arena_new();
		if (m.type == ASP_MSG_RESPONSE) {
			asp_spawn_result sr;
			t_resp r;
			CU_ASSERT(t_parse_response(body, len, ASP_OP_SPAWN, &sr, a, &r) &&
			          r.st == ASP_OK && r.id >= 1 && r.id <= 2);
			if (r.id >= 1 && r.id <= 2)
				procs[r.id] = sr.proc;
			responses++;
		} else if (m.type == ASP_MSG_NOTIFY) {
			const asp_notice_desc *d =
			    &asp_notice_descs[m.method_len == 4 ? ASP_NOTICE_EXIT
			                                        : ASP_NOTICE_OUTPUT];
			void *ev = asp_arena_alloc(a, d->params->size);
			CU_ASSERT_FATAL(asp_record_decode(d->params, m.params, ev, a, NULL) ==
			                ASP_OK);
			uint64_t proc = *(const uint64_t *)ev; /* proc is the first field of both */
			order_ok = order_ok && (proc == procs[1] || proc == procs[2]) && proc != 0;
			if (m.method_len == 4)
				exits++;
		}
		asp_arena_free(a);
		msgpack_unpacked_destroy(&u);
		free(body);
	}
	int st = tproc_wait(&p, WAIT_MS, NULL);
	int64_t took = t_now_ms() - t0;
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT_EQUAL(responses, 2);
	CU_ASSERT_EQUAL(exits, 2);
	CU_ASSERT(order_ok);
	/* The stubborn one needed the KILL, 2 s after the TERM; without it, 30 s. */
	CU_ASSERT(took >= 1500 && took < 15000);
	CU_ASSERT(!t_pid_alive(bg) && !t_pid_alive(stubborn));
	tproc_close(&p);
	unlink(f1);
	unlink(f2);
	rmdir(dir);
}

/*
 * The client goes away while every worker waits on a process (proc_wait without a
 * timeout): EOF must still end the process, answer the waits and let the agent exit,
 * rather than leave both running with nobody to talk to.
 */
static void test_eof_with_waits_in_flight(void)
{
	char dir[] = "/tmp/asp-agent-waits-XXXXXX", pidfile[128];
	tproc p;
	start_spawning(&p, dir, "sleep 30", pidfile, sizeof pidfile);
	uint8_t *body;
	size_t len;
	CU_ASSERT_FATAL(t_read_frame(p.out, WAIT_MS, &body, &len) == 1);
	asp_arena *a = asp_arena_new();
	asp_spawn_result sr;
	t_resp r;
	CU_ASSERT_FATAL(t_parse_response(body, len, ASP_OP_SPAWN, &sr, a, &r) && r.st == ASP_OK);
	free(body);
	pid_t child = t_pid_from_file(pidfile, 0, WAIT_MS);
	CU_ASSERT_FATAL(child > 0);
	/* Enough waits that every thread the agent has, its first one too, serves one. */
	asp_buf b;
	asp_buf_init(&b);
	for (uint32_t id = 2; id <= 9; id++) {
		asp_proc_wait_params wp;
		asp_proc_wait_params_init(&wp);
		wp.proc = sr.proc;
		t_add_request(&b, id, ASP_OP_PROC_WAIT, &wp);
	}
	/* Answered once the agent has read (and taken up) every wait before it. */
	add_hello(&b, 10);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	asp_arena_free(a);
	t_resp hr;
	CU_ASSERT_EQUAL(read_response(&p, WAIT_MS, &hr), 10);
	int64_t t0 = t_now_ms();
	tproc_close_in(&p);
	int st = tproc_wait(&p, WAIT_MS, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(t_now_ms() - t0 < 15000); /* not held by the sleep 30 */
	CU_ASSERT(!t_pid_alive(child));
	if (t_pid_alive(child))
		kill(child, SIGKILL);
	tproc_close(&p);
	unlink(pidfile);
	rmdir(dir);
}

/* ---- terminals -------------------------------------------------------------------- */

/*
 * Open fds of `pid` whose target holds `kind` ("/dev/pt": a terminal's master or slave,
 * "pidfd", "pipe:"), or -1. Counted by kind: the job cgroups the agent keeps ready come
 * and go with their own fds, whatever the processes do.
 */
static int fds_of(pid_t pid, const char *kind)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char fd[320], target[256];
		snprintf(fd, sizeof fd, "%s/%s", path, e->d_name);
		ssize_t len = readlink(fd, target, sizeof target - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		n += strstr(target, kind) != NULL;
	}
	closedir(d);
	return n;
}

/* Polls (bounded) until fds_of(pid, kind) is at most `most`; the last count. */
static int fds_settle(pid_t pid, const char *kind, int most)
{
	int n = fds_of(pid, kind);
	for (int64_t end = t_now_ms() + WAIT_MS; n > most && t_now_ms() < end;) {
		usleep(10 * 1000); /* polling the condition, bounded */
		n = fds_of(pid, kind);
	}
	return n;
}

/*
 * One request, and its answer's status: the frames before it (a process's notifications)
 * are skipped. The result of `op` goes to `result` (may be NULL).
 */
static asp_status call(tproc *p, uint32_t id, asp_op_id op, const void *params, void *result,
                       asp_arena *a)
{
	asp_buf b;
	asp_buf_init(&b);
	t_add_request(&b, id, op, params);
	CU_ASSERT_FATAL(t_write_all(p->in, b.data, b.len) == 0);
	asp_buf_free(&b);
	for (;;) {
		uint8_t *body;
		size_t len;
		int got = t_read_frame(p->out, WAIT_MS, &body, &len);
		CU_ASSERT_EQUAL_FATAL(got, 1);
		t_resp r;
		bool resp = t_parse_response(body, len, op, result, a, &r);
		free(body);
		if (resp && r.id == id)
			return r.st;
	}
}

static asp_status tty_spawn(tproc *p, uint32_t id, const char *command, const char *cwd,
                            uint64_t rows, uint64_t timeout_ms, uint64_t *proc, asp_arena *a)
{
	asp_tty tty = {rows, 80, NULL};
	const char *argv[] = {command};
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	if (command[0] == '/') { /* a program, run without a shell */
		sp.has_argv = true;
		sp.argv = (asp_strv){argv, 1};
	} else {
		sp.command = command;
	}
	sp.cwd = cwd;
	sp.tty = &tty;
	sp.timeout_ms = timeout_ms;
	asp_spawn_result sr = {0};
	asp_status st = call(p, id, ASP_OP_SPAWN, &sp, &sr, a);
	*proc = sr.proc;
	return st;
}

static asp_status wait_proc(tproc *p, uint32_t id, uint64_t proc, asp_proc_wait_result *w,
                            asp_arena *a)
{
	asp_proc_wait_params wp;
	asp_proc_wait_params_init(&wp);
	wp.proc = proc;
	wp.timeout_ms = WAIT_MS;
	return call(p, id, ASP_OP_PROC_WAIT, &wp, w, a);
}

/*
 * Terminal processes of every kind of end (exit, signal, timeout, VEOF, failed starts)
 * give back every fd: the master closes once the process is reaped and its output read.
 * Then EOF on stdin ends a terminal process as any other.
 */
static void test_tty_fds(void)
{
	char dir[] = "/tmp/asp-agent-tty-XXXXXX", pidfile[128];
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(pidfile, sizeof pidfile, "%s/pid", dir);
	tproc p;
	start(&p);
	asp_arena *a = asp_arena_new();
	uint32_t id = 1;
	uint64_t proc;
	asp_proc_wait_result w;
	/* warm up: what the agent opens once (the reaper, a worker) is open before counting */
	CU_ASSERT_FATAL(tty_spawn(&p, id++, "exit 0", NULL, 24, 0, &proc, a) == ASP_OK);
	CU_ASSERT_FATAL(wait_proc(&p, id++, proc, &w, a) == ASP_OK);
	int pidfds = fds_of(p.pid, "pidfd"), pipes = fds_of(p.pid, "pipe:");
	CU_ASSERT_EQUAL(fds_settle(p.pid, "/dev/pt", 0), 0);
	/* the count sees a running terminal's master */
	CU_ASSERT_FATAL(tty_spawn(&p, id++, "exec sleep 30", NULL, 24, 0, &proc, a) == ASP_OK);
	CU_ASSERT(fds_of(p.pid, "/dev/pt") >= 1);
	asp_proc_signal_params kill_it = {.proc = proc, .signal = "KILL"};
	CU_ASSERT(call(&p, id++, ASP_OP_PROC_SIGNAL, &kill_it, NULL, a) == ASP_OK);
	CU_ASSERT(wait_proc(&p, id++, proc, &w, a) == ASP_OK);
	for (int i = 0; i < 40; i++) {
		asp_status st;
		switch (i % 6) {
		case 0:
			CU_ASSERT(tty_spawn(&p, id++, "printf hello; exit 3", NULL, 24, 0, &proc,
			                    a) == ASP_OK);
			CU_ASSERT(wait_proc(&p, id++, proc, &w, a) == ASP_OK && w.exit_code == 3);
			break;
		case 1: {
			CU_ASSERT(tty_spawn(&p, id++, "exec sleep 30", NULL, 24, 0, &proc, a) ==
			          ASP_OK);
			asp_proc_resize_params rp = {.proc = proc, .rows = 30, .cols = 100};
			CU_ASSERT(call(&p, id++, ASP_OP_PROC_RESIZE, &rp, NULL, a) == ASP_OK);
			asp_proc_signal_params sp = {.proc = proc, .signal = "KILL"};
			CU_ASSERT(call(&p, id++, ASP_OP_PROC_SIGNAL, &sp, NULL, a) == ASP_OK);
			CU_ASSERT(wait_proc(&p, id++, proc, &w, a) == ASP_OK && w.signal);
			break;
		}
		case 2: {
			CU_ASSERT(tty_spawn(&p, id++, "cat", NULL, 24, 0, &proc, a) == ASP_OK);
			asp_proc_write_params wp;
			asp_proc_write_params_init(&wp);
			wp.proc = proc;
			wp.data = (asp_bytes){(const uint8_t *)"x\n", 2};
			wp.eof = true;
			CU_ASSERT(call(&p, id++, ASP_OP_PROC_WRITE, &wp, NULL, a) == ASP_OK);
			CU_ASSERT(wait_proc(&p, id++, proc, &w, a) == ASP_OK && w.exit_code == 0);
			break;
		}
		case 3:
			CU_ASSERT(tty_spawn(&p, id++, "exec sleep 30", NULL, 24, 100, &proc, a) ==
			          ASP_OK);
			CU_ASSERT(wait_proc(&p, id++, proc, &w, a) == ASP_OK && w.timed_out);
			break;
		case 4:
			st = tty_spawn(&p, id++, "true", "/nonexistent/asp-dir", 24, 0, &proc, a);
			CU_ASSERT_EQUAL(st, ASP_E_NOT_FOUND);
			st = tty_spawn(&p, id++, "/nonexistent/asp-prog", NULL, 24, 0, &proc, a);
			CU_ASSERT_EQUAL(st, ASP_E_NOT_FOUND);
			break;
		default:
			st = tty_spawn(&p, id++, "true", NULL, 0, 0, &proc, a);
			CU_ASSERT_EQUAL(st, ASP_E_INVALID_ARGUMENT);
			break;
		}
		asp_arena_reset(a);
	}
	/* closed as each process ended: at most a moment after the last proc_wait */
	CU_ASSERT_EQUAL(fds_settle(p.pid, "/dev/pt", 0), 0);
	CU_ASSERT(fds_settle(p.pid, "pidfd", pidfds) <= pidfds);
	CU_ASSERT(fds_settle(p.pid, "pipe:", pipes) <= pipes);
	/* EOF: the agent ends a terminal's process too, and exits 0 */
	char cmd[256];
	snprintf(cmd, sizeof cmd, "echo $$ > %s; exec sleep 30", pidfile);
	CU_ASSERT(tty_spawn(&p, id++, cmd, NULL, 24, 0, &proc, a) == ASP_OK);
	pid_t child = t_pid_from_file(pidfile, 0, WAIT_MS);
	CU_ASSERT(child > 0);
	tproc_close_in(&p);
	int wst = tproc_wait(&p, WAIT_MS, NULL);
	CU_ASSERT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	CU_ASSERT(child > 0 && !t_pid_alive(child));
	if (child > 0 && t_pid_alive(child))
		kill(child, SIGKILL);
	tproc_close(&p);
	asp_arena_free(a);
	unlink(pidfile);
	rmdir(dir);
}

/* ---- options ---------------------------------------------------------------------- */

static char *run(char *const argv[], int *status, bool want_stderr)
{
	tproc p;
	CU_ASSERT_FATAL(tproc_spawn(&p, argv) == 0);
	tproc_close_in(&p);
	size_t n;
	bool eof;
	char *out = t_read_until_eof(want_stderr ? p.err : p.out, WAIT_MS, &n, &eof);
	*status = tproc_wait(&p, WAIT_MS, NULL);
	tproc_close(&p);
	return out;
}

static void test_options(void)
{
	int st;
	char *out = run((char *[]){(char *)agent, "--version", NULL}, &st, false);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char proto[32];
	snprintf(proto, sizeof proto, "(protocol %d)", ASP_PROTOCOL);
	CU_ASSERT(strncmp(out, "asp-agent ", 10) == 0 && strstr(out, proto));
	free(out);
	out = run((char *[]){(char *)agent, "--help", NULL}, &st, false);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(strstr(out, "--stdio") != NULL);
	free(out);
	/* Refused either way: not built with HTTP support, or not an address. */
	out = run((char *[]){(char *)agent, "--listen", "nonsense", NULL}, &st, true);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	CU_ASSERT(strstr(out, "not built with HTTP support") || strstr(out, "is not HOST:PORT"));
	free(out);
	out = run((char *[]){(char *)agent, "--bogus", NULL}, &st, true);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	free(out);
	/* EOF at once: exit 0, nothing written. */
	out = run((char *[]){(char *)agent, NULL}, &st, false);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT_STRING_EQUAL(out, "");
	free(out);
}

/* ---- at rest: one thread; stop signals ------------------------------------------- */

/* Threads of `pid` (Threads: in /proc/PID/status), -1 when unknown. */
static int threads_of(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	int n = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

/* Children of `pid` (all its threads') but the keeper: -1 when unknown. */
static int children_of(pid_t pid)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char file[160];
		snprintf(file, sizeof file, "/proc/%d/task/%.32s/children", (int)pid, e->d_name);
		FILE *f = fopen(file, "r");
		long c;
		while (f && fscanf(f, "%ld", &c) == 1) {
			char comm_path[64], comm[32] = "";
			snprintf(comm_path, sizeof comm_path, "/proc/%ld/comm", c);
			FILE *cf = fopen(comm_path, "r");
			if (cf && fgets(comm, sizeof comm, cf) &&
			    strncmp(comm, "asp-keeper", 10) == 0) {
				fclose(cf);
				continue;
			}
			if (cf)
				fclose(cf);
			n++;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return n;
}

/*
 * Waits (at most WAIT_MS: the agent's idle threads end after a second) until `pid`
 * holds `threads` threads and no child but its keeper; true once it does.
 */
static bool wait_at_rest(pid_t pid, int threads)
{
	for (int64_t until = t_now_ms() + WAIT_MS; t_now_ms() < until;) {
		if (threads_of(pid) == threads && children_of(pid) == 0)
			return true;
		usleep(10 * 1000);
	}
	fprintf(stderr, "asp-agent %d: %d threads, %d children (want %d, 0)\n", (int)pid,
	        threads_of(pid), children_of(pid), threads);
	return false;
}

/*
 * The agent's threads before any request: 1 (2 where a sanitizer runs one of its own,
 * which the counts then include).
 */
static int threads_at_start(tproc *p)
{
	int n = -1;
	for (int64_t until = t_now_ms() + WAIT_MS; n <= 0 && t_now_ms() < until;)
		n = threads_of(p->pid);
	return n;
}

/*
 * An agent at rest holds one thread (docs/design.md, "Concurrency and lifetime"): before
 * a request, after a hello, an exec, a spawned process's end, an orphan's end (reaped),
 * and after a burst that needed many workers.
 */
static void test_one_thread_at_rest(void)
{
	tproc p;
	start(&p);
	int base = threads_at_start(&p);
	CU_ASSERT_FATAL(base >= 1);
	CU_ASSERT(base <= 2);
	CU_ASSERT(wait_at_rest(p.pid, base));
	t_resp r;
	asp_buf b;
	asp_buf_init(&b);
	add_hello(&b, 1);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	CU_ASSERT_EQUAL(read_response(&p, WAIT_MS, &r), 1);
	CU_ASSERT(wait_at_rest(p.pid, base));
	b.len = 0;
	add_exec(&b, 2, "true");
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	CU_ASSERT_EQUAL(read_response(&p, WAIT_MS, &r), 2);
	CU_ASSERT(wait_at_rest(p.pid, base));
	/* a spawned process that ends, and an orphan (re-parented to the agent) that ends */
	b.len = 0;
	add_spawn(&b, 3, "exit 0");
	add_exec(&b, 4, "sleep 0.3 >/dev/null 2>&1 &");
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	int answered = 0, exited = 0; /* the two answers and the spawned one's exit notice */
	for (int64_t until = t_now_ms() + WAIT_MS;
	     (answered < 2 || exited < 1) && t_now_ms() < until;) {
		uint8_t *body;
		size_t len;
		if (t_read_frame(p.out, WAIT_MS, &body, &len) != 1)
			break;
		asp_msg m;
		asp_error e;
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		if (asp_wire_decode(body, len, &u, &m, &e) == ASP_OK) {
			answered += m.type == ASP_MSG_RESPONSE;
			exited += m.type == ASP_MSG_NOTIFY && m.method_len == 4 &&
			          memcmp(m.method, "exit", 4) == 0;
		}
		msgpack_unpacked_destroy(&u);
		free(body);
	}
	CU_ASSERT_EQUAL(answered, 2);
	CU_ASSERT_EQUAL(exited, 1);
	CU_ASSERT(wait_at_rest(p.pid, base));
	/* a burst: 16 execs at once take workers, which end once idle */
	b.len = 0;
	for (uint32_t id = 10; id < 26; id++)
		add_exec(&b, id, "sleep 0.2");
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	for (int i = 0; i < 16; i++)
		CU_ASSERT(read_response(&p, WAIT_MS, &r) != UINT32_MAX);
	CU_ASSERT(wait_at_rest(p.pid, base));
	asp_buf_free(&b);
	finish(&p, 0, WAIT_MS);
}

/* SigBlk of `pid` from /proc/PID/status, or ~0 when unknown. */
static unsigned long long sig_blocked(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	unsigned long long v = ~0ULL;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "SigBlk: %llx", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* TERM, INT or HUP at rest (one thread, nothing running): the agent exits 0 at once. */
static void test_term_at_rest(void)
{
	enum { N = 3 };
	int sigs[N] = {SIGTERM, SIGINT, SIGHUP}, base[N];
	tproc p[N];
	for (int i = 0; i < N; i++) { /* side by side: each waits a second to be at rest */
		start(&p[i]);
		base[i] = threads_at_start(&p[i]);
		asp_buf b;
		asp_buf_init(&b);
		add_exec(&b, 1, "true");
		CU_ASSERT_FATAL(t_write_all(p[i].in, b.data, b.len) == 0);
		asp_buf_free(&b);
	}
	for (int i = 0; i < N; i++) {
		t_resp r;
		CU_ASSERT_EQUAL(read_response(&p[i], WAIT_MS, &r), 1);
	}
	for (int i = 0; i < N; i++) {
		CU_ASSERT(wait_at_rest(p[i].pid, base[i]));
		kill(p[i].pid, sigs[i]);
		int st = tproc_wait(&p[i], WAIT_MS, NULL);
		CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		tproc_close(&p[i]);
	}
}

/*
 * TERM while processes run (a spawned one that ignores TERM, an exec in flight): the
 * agent ends them (TERM, KILL 100 ms later) and exits 0; they started with an empty
 * signal mask.
 */
static void test_term_ends_running(void)
{
	char dir[] = "/tmp/asp-agent-term-XXXXXX";
	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	char f1[128], f2[128], c1[256], c2[256];
	snprintf(f1, sizeof f1, "%s/stubborn", dir);
	snprintf(f2, sizeof f2, "%s/exec", dir);
	snprintf(c1, sizeof c1, "trap '' TERM; echo $$ > %s; sleep 30", f1);
	snprintf(c2, sizeof c2, "echo $$ > %s; exec sleep 30", f2);
	tproc p;
	start(&p);
	asp_buf b;
	asp_buf_init(&b);
	add_spawn(&b, 1, c1);
	add_exec(&b, 2, c2);
	CU_ASSERT_FATAL(t_write_all(p.in, b.data, b.len) == 0);
	asp_buf_free(&b);
	pid_t stubborn = t_pid_from_file(f1, 0, WAIT_MS), ex = t_pid_from_file(f2, 0, WAIT_MS);
	CU_ASSERT_FATAL(stubborn > 0 && ex > 0);
	/* exec'd sleep: its mask is the one the agent gave (the shell leaves it alone) */
	for (int64_t until = t_now_ms() + WAIT_MS; t_now_ms() < until;) {
		char comm[64] = "", path[64];
		snprintf(path, sizeof path, "/proc/%d/comm", (int)ex);
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof comm, f))
				comm[0] = '\0';
			fclose(f);
		}
		if (strncmp(comm, "sleep", 5) == 0)
			break;
		usleep(10 * 1000);
	}
	CU_ASSERT_EQUAL(sig_blocked(ex), 0);
	kill(p.pid, SIGTERM);
	int st = tproc_wait(&p, WAIT_MS, NULL);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	bool gone = false;
	for (int64_t until = t_now_ms() + WAIT_MS; !gone && t_now_ms() < until;) {
		gone = !t_pid_alive(stubborn) && !t_pid_alive(ex);
		if (!gone)
			usleep(10 * 1000);
	}
	CU_ASSERT(gone);
	if (!gone) {
		kill(stubborn, SIGKILL);
		kill(ex, SIGKILL);
	}
	tproc_close(&p);
	unlink(f1);
	unlink(f2);
	rmdir(dir);
}

/* ---- registration ----------------------------------------------------------------- */

static const char *dynamic_agent, *static_agent;

static int use_dynamic(void)
{
	agent = dynamic_agent;
	return 0;
}

static int use_static(void)
{
	agent = static_agent;
	return 0;
}

static void add_suite(const char *name, int (*init)(void))
{
	CU_pSuite s = CU_add_suite(name, init, NULL);
	CU_add_test(s, "50 pipelined requests, all answered", test_pipelined_50);
	CU_add_test(s, "a slow exec does not block a stat", test_slow_exec_does_not_block_stat);
	CU_add_test(s, "100 slow execs, at most 64 threads", test_worker_cap);
	CU_add_test(s, "EOF answers what is in flight, exit 0", test_eof_answers_in_flight);
	CU_add_test(s, "msg-* vectors: close without writing", test_msg_vectors_close);
	CU_add_test(s, "frame-* vectors: close", test_frame_vectors_close);
	CU_add_test(s, "req-* vectors: error for the id, stays open", test_req_vectors_answered);
	CU_add_test(s, "a response sent to the agent closes", test_response_to_agent_closes);
	CU_add_test(s, "options", test_options);
	CU_add_test(s, "writes before a bad frame are answered, then close",
	            test_answers_before_close);
	CU_add_test(s, "12 hostile 16 MiB frames: errors, agent under 128 MiB",
	            test_hostile_frames_budget);
	CU_add_test(s, "a client that never reads: 1 GiB producer, bounded RSS",
	            test_nonreader_bounded);
	CU_add_test(s, "EOF ends spawned groups (TERM, KILL 2 s later), exit 0",
	            test_eof_ends_spawned);
	CU_add_test(s, "EOF while every worker waits on a process: it ends, exit 0",
	            test_eof_with_waits_in_flight);
	CU_add_test(s, "terminals: every end gives back its fds; EOF ends them", test_tty_fds);
	CU_add_test(s, "at rest: one thread, after a hello, an exec, a process, a burst",
	            test_one_thread_at_rest);
	CU_add_test(s, "TERM, INT, HUP at rest: exit 0", test_term_at_rest);
	CU_add_test(s, "TERM with processes running: they end, exit 0, empty masks",
	            test_term_ends_running);
}

int main(int argc, char **argv)
{
	dynamic_agent = t_env("ASP_AGENT");
	static_agent = t_env("ASP_AGENT_STATIC");
	vectors = t_env("ASP_VECTORS");
	if (!dynamic_agent || !vectors) {
		fprintf(stderr, "ASP_AGENT and ASP_VECTORS must be set (meson test does)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	add_suite("asp-agent", use_dynamic);
	if (static_agent)
		add_suite("asp-agent-static", use_static);
	/* every test, or the suites and tests named as arguments */
	unsigned failed = (unsigned)cu_run(argc, argv);
	return failed ? 1 : 0;
}
