/*
 * ASP's HTTP listener against Rivet's sandbox-agent (the peer people would pick instead),
 * both driven side by side, call by call, from one plain HTTP/1.1 keep-alive client: one
 * TCP socket per server (TCP_NODELAY), a request written with one writev, the status
 * line, headers and a Content-Length body read back. No libcurl: its tuned path is not
 * what a plain client gets.
 *
 * Ops: exec `true` (argv, no shell, on both), 4 KiB read, stat, 4 KiB write, 1 MiB upload
 * in one request. The servers take turns each iteration, in a fresh random order
 * (bench_order), so load from elsewhere hits both alike. Prints medians, ASP/peer
 * ratios, MiB/s for the upload and each server's VmRSS after the run, and a Markdown
 * table. With exec, each iteration also times `true` started here without a server
 * (spawn_floor.h), so both servers' exec is also given over that floor, which the load
 * moves less than the ratio.
 *
 *   bench_peer_http ASP_AGENT [SANDBOX_AGENT] [iterations] [ops]
 *
 * ops, comma-separated, picks some of health, exec, read, stat, write, upload (default all).
 * The files go in $TMPDIR (default /tmp).
 *
 * The peer's binary comes from the argument or $ASP_PEER_SANDBOX_AGENT; without it the
 * program says how to get it and exits 77 (skipped).
 */
#include "bench_util.h"
#include "spawn_floor.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define KIB        4096
#define UPLOAD     (1024 * 1024)
#define START_MS   30000 /* a loaded machine may take long to start a server */
#define IO_TIMEOUT 30    /* seconds: no call waits for ever */

static void die(const char *fmt, const char *detail)
{
	fprintf(stderr, "bench_peer_http: ");
	fprintf(stderr, fmt, detail);
	fprintf(stderr, " (%s)\n", errno ? strerror(errno) : "-");
	exit(1);
}

/* ---- a minimal HTTP/1.1 keep-alive client ------------------------------------------ */

typedef struct hc {
	int fd;
	int port;
	char *buf; /* what was read: headers, then the body */
	size_t cap, len;
	const uint8_t *body; /* the last answer's body, inside buf */
	size_t body_len;
} hc;

static int hc_connect(hc *h, int port)
{
	h->port = port;
	h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (h->fd < 0)
		return -1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	struct timeval tv = {.tv_sec = IO_TIMEOUT};
	setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(h->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(h->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(h->fd);
		h->fd = -1;
		return -1;
	}
	return 0;
}

static void hc_reserve(hc *h, size_t need)
{
	if (need <= h->cap)
		return;
	size_t cap = h->cap ? h->cap : 64 * 1024;
	while (cap < need)
		cap *= 2;
	h->buf = realloc(h->buf, cap);
	if (!h->buf)
		die("%s", "out of memory");
	h->cap = cap;
}

static void write_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("%s", "write to a server");
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
}

/* Reads more into buf; dies on EOF or a timeout. */
static void read_more(hc *h)
{
	hc_reserve(h, h->len + 64 * 1024);
	ssize_t r;
	do
		r = read(h->fd, h->buf + h->len, h->cap - h->len);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		die("%s", r == 0 ? "a server closed the connection" : "read from a server");
	h->len += (size_t)r;
}

/*
 * One request and its answer; returns the status, the body in h->body. The request's
 * body is `body` then `tail` (the payload of an ASP write, sent from where it is, as the
 * peer's PUT body is: no copy into the request). The answer must carry a Content-Length
 * (both servers send one for everything timed here).
 */
static int hc_call2(hc *h, const char *method, const char *target, const char *ctype,
                    const void *body, size_t blen, const void *tail, size_t tlen)
{
	char head[1024];
	int hl = snprintf(head, sizeof head,
	                  "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: %s\r\n"
	                  "Content-Length: %zu\r\n\r\n",
	                  method, target, h->port, ctype, blen + tlen);
	struct iovec iov[3] = {{head, (size_t)hl}, {(void *)body, blen}, {(void *)tail, tlen}};
	write_all(h->fd, iov, tlen ? 3 : blen ? 2 : 1);

	h->len = 0;
	char *end;
	for (;;) {
		if (h->len) {
			h->buf[h->len] = '\0';
			if ((end = strstr(h->buf, "\r\n\r\n")))
				break;
		}
		read_more(h);
		hc_reserve(h, h->len + 1);
	}
	int status = 0;
	if (sscanf(h->buf, "HTTP/1.%*d %d", &status) != 1)
		die("bad status line: %.40s", h->buf);
	size_t clen = 0;
	bool have_len = false;
	for (char *l = strstr(h->buf, "\r\n") + 2; l < end; l = strstr(l, "\r\n") + 2)
		if (!strncasecmp(l, "content-length:", 15)) {
			clen = strtoull(l + 15, NULL, 10);
			have_len = true;
		}
	if (!have_len)
		die("an answer without Content-Length: %.200s", h->buf);
	size_t hdr = (size_t)(end + 4 - h->buf);
	hc_reserve(h, hdr + clen + 1);
	while (h->len < hdr + clen)
		read_more(h);
	if (h->len != hdr + clen)
		die("%s", "more bytes than the answer (nothing is pipelined)");
	h->body = (const uint8_t *)h->buf + hdr;
	h->body_len = clen;
	return status;
}

static int hc_call(hc *h, const char *method, const char *target, const char *ctype,
                   const void *body, size_t blen)
{
	return hc_call2(h, method, target, ctype, body, blen, NULL, 0);
}

static bool body_has(const hc *h, const void *needle, size_t n)
{
	return h->body_len >= n && memmem(h->body, h->body_len, needle, n) != NULL;
}

/* ---- starting the servers ---------------------------------------------------------- */

static pid_t spawn_logged(const char *const argv[], const char *log)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	pid_t pid;
	if (posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ) != 0)
		die("cannot start %s", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

/* asp-agent --listen 127.0.0.1:0 prints its URL with the port it took. */
static int asp_port(pid_t pid, const char *log)
{
	double t0 = now_ms();
	while (now_ms() - t0 < START_MS) {
		FILE *f = fopen(log, "r");
		char line[256];
		while (f && fgets(line, sizeof line, f)) {
			char *u = strstr(line, "listening on http://127.0.0.1:");
			if (u) {
				fclose(f);
				return atoi(u + 30);
			}
		}
		if (f)
			fclose(f);
		if (waitpid(pid, NULL, WNOHANG) == pid)
			die("asp-agent exited; see %s", log);
		usleep(10000);
	}
	die("asp-agent did not say where it listens; see %s", log);
	return -1;
}

/* A free loopback port for the peer, which takes a port number only. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof sa;
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		die("%s", "no free port");
	close(fd);
	return ntohs(sa.sin_port);
}

/* Connects once GET /v1/health answers 200 (the peer binds some time after its start). */
static void connect_healthy(hc *h, int port, pid_t pid, const char *name)
{
	double t0 = now_ms();
	while (now_ms() - t0 < START_MS) {
		if (hc_connect(h, port) == 0) {
			if (hc_call(h, "GET", "/v1/health", "text/plain", NULL, 0) == 200)
				return;
			die("%s: /v1/health is not 200", name);
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			die("%s exited before it listened", name);
		usleep(10000);
	}
	die("%s did not start listening", name);
}

static long vm_rss_kib(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kib = -1;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = atol(line + 6);
	if (f)
		fclose(f);
	return kib;
}

/*
 * CPU time (ns) the server's threads have run, and how often they went to sleep
 * (voluntary context switches: a wait for a socket, a futex, a poll), summed over
 * /proc/PID/task. Threads that exited are not counted; both servers keep theirs. Load
 * from elsewhere inflates wall time but hardly these, so they show the per-request path.
 */
static void sched_totals(pid_t pid, double *cpu_ns, double *sleeps)
{
	char path[400], line[256];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	*cpu_ns = *sleeps = 0;
	DIR *d = opendir(path);
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		unsigned long long ns = 0;
		if (f && fscanf(f, "%llu", &ns) == 1)
			*cpu_ns += (double)ns;
		if (f)
			fclose(f);
		snprintf(path, sizeof path, "/proc/%d/task/%s/status", (int)pid, e->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof line, f))
			if (!strncmp(line, "voluntary_ctxt_switches:", 24))
				*sleeps += atof(line + 24);
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
}

/* ---- msgpack requests for ASP (hand-encoded: only what these calls need) ----------- */

typedef struct mp {
	uint8_t *b;
	size_t len;
} mp;

static void mp_raw(mp *m, const void *p, size_t n)
{
	memcpy(m->b + m->len, p, n);
	m->len += n;
}

static void mp_byte(mp *m, uint8_t v)
{
	m->b[m->len++] = v;
}

static void mp_be32(mp *m, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	mp_raw(m, b, 4);
}

static void mp_str(mp *m, const char *s)
{
	size_t n = strlen(s);
	if (n < 32) {
		mp_byte(m, (uint8_t)(0xa0 | n));
	} else {
		mp_byte(m, 0xd9);
		mp_byte(m, (uint8_t)n);
	}
	mp_raw(m, s, n);
}

/* [0, id, method, {npairs...}]: the caller adds the map's pairs. */
static void mp_request(mp *m, uint32_t id, const char *method, unsigned npairs)
{
	m->len = 0;
	mp_byte(m, 0x94);
	mp_byte(m, 0x00);
	mp_byte(m, 0xce);
	mp_be32(m, id);
	mp_str(m, method);
	mp_byte(m, (uint8_t)(0x80 | npairs));
}

/* A bin's header only: its n bytes follow the message (hc_call2's tail). */
static void mp_bin_head(mp *m, size_t n)
{
	mp_byte(m, 0xc6);
	mp_be32(m, (uint32_t)n);
}

/* An ASP answer [1, id, nil, result]: the error slot must be nil. */
static bool asp_ok(const hc *h)
{
	const uint8_t *b = h->body;
	size_t n = h->body_len, i = 2;
	if (n < 4 || b[0] != 0x94 || b[1] != 0x01)
		return false;
	i += b[i] < 0x80 ? 1 : b[i] == 0xcc ? 2 : b[i] == 0xcd ? 3 : b[i] == 0xce ? 5 : n;
	return i < n && b[i] == 0xc0;
}

/* ---- the calls --------------------------------------------------------------------- */

enum { S_ASP, S_PEER, NS };
enum { OP_HEALTH, OP_EXEC, OP_READ, OP_STAT, OP_WRITE, OP_UPLOAD, NOP };
static const char *const op_name[NOP] = {"GET /v1/health", "exec `true`",
                                         "read 4 KiB",     "stat",
                                         "write 4 KiB",    "upload 1 MiB (one request)"};
/* Names for the optional op list (the fourth argument, comma-separated). */
static const char *const op_key[NOP] = {"health", "exec", "read", "stat", "write", "upload"};

typedef struct server {
	const char *name;
	hc h;
	pid_t pid;
	char read_path[256], write_path[256], upload_path[256];
	char read_q[600], stat_q[600], write_q[600], upload_q[600]; /* the peer's targets */
} server;

static uint8_t *payload; /* UPLOAD bytes; the 4 KiB write is its start */
static mp req;
static uint32_t next_id = 1;

static void check(bool ok, const server *sv, int op)
{
	if (!ok) {
		fprintf(stderr, "bench_peer_http: %s: %s failed: %.300s\n", sv->name, op_name[op],
		        sv->h.body ? (const char *)sv->h.body : "");
		exit(1);
	}
}

static void asp_post(server *sv, int op, const void *tail, size_t tlen)
{
	int st =
	    hc_call2(&sv->h, "POST", "/v1/rpc", "application/msgpack", req.b, req.len, tail, tlen);
	check(st == 200 && asp_ok(&sv->h), sv, op);
}

/* "exit_code": 0 in an exec result (fixstr 9, then fixint 0). */
static const char exit0[] = "\xa9"
                            "exit_code\x00";

static void call(server *sv, int which, int op)
{
	hc *h = &sv->h;
	if (op == OP_HEALTH) {
		check(hc_call(h, "GET", "/v1/health", "text/plain", NULL, 0) == 200, sv, op);
		return;
	}
	if (which == S_ASP) {
		switch (op) {
		case OP_EXEC:
			mp_request(&req, next_id++, "exec", 1);
			mp_str(&req, "argv");
			mp_byte(&req, 0x91);
			mp_str(&req, "true");
			asp_post(sv, op, NULL, 0);
			check(body_has(h, exit0, sizeof exit0 - 1), sv, op);
			return;
		case OP_READ:
		case OP_STAT:
			mp_request(&req, next_id++, op == OP_READ ? "read" : "stat", 1);
			mp_str(&req, "path");
			mp_str(&req, sv->read_path);
			asp_post(sv, op, NULL, 0);
			check(op == OP_STAT || h->body_len > KIB, sv, op);
			return;
		case OP_WRITE:
		case OP_UPLOAD:
			mp_request(&req, next_id++, "write", 2);
			mp_str(&req, "path");
			mp_str(&req, op == OP_WRITE ? sv->write_path : sv->upload_path);
			mp_str(&req, "data");
			mp_bin_head(&req, op == OP_WRITE ? KIB : UPLOAD);
			asp_post(sv, op, payload, op == OP_WRITE ? KIB : UPLOAD);
			return;
		}
	}
	int st;
	switch (op) {
	case OP_EXEC: { /* a block: a declaration after a label is C23, not C11 (clang says so) */
		static const char run[] = "{\"command\":\"true\",\"args\":[]}";
		st = hc_call(h, "POST", "/v1/processes/run", "application/json", run,
		             sizeof run - 1);
		check(st == 200 && body_has(h, "\"exitCode\":0", 12), sv, op);
		return;
	}
	case OP_READ:
		st = hc_call(h, "GET", sv->read_q, "text/plain", NULL, 0);
		check(st == 200 && h->body_len == KIB, sv, op);
		return;
	case OP_STAT:
		st = hc_call(h, "GET", sv->stat_q, "text/plain", NULL, 0);
		check(st == 200 && body_has(h, "\"size\":4096", 11), sv, op);
		return;
	case OP_WRITE:
		st = hc_call(h, "PUT", sv->write_q, "application/octet-stream", payload, KIB);
		check(st == 200 && body_has(h, "\"bytesWritten\":4096", 19), sv, op);
		return;
	case OP_UPLOAD:
		st = hc_call(h, "PUT", sv->upload_q, "application/octet-stream", payload, UPLOAD);
		check(st == 200 && body_has(h, "\"bytesWritten\":1048576", 22), sv, op);
		return;
	}
}

static void set_paths(server *sv, const char *dir, const char *tag)
{
	snprintf(sv->read_path, sizeof sv->read_path, "%s/%s-read", dir, tag);
	snprintf(sv->write_path, sizeof sv->write_path, "%s/%s-write", dir, tag);
	snprintf(sv->upload_path, sizeof sv->upload_path, "%s/%s-upload", dir, tag);
	snprintf(sv->read_q, sizeof sv->read_q, "/v1/fs/file?path=%s", sv->read_path);
	snprintf(sv->stat_q, sizeof sv->stat_q, "/v1/fs/stat?path=%s", sv->read_path);
	snprintf(sv->write_q, sizeof sv->write_q, "/v1/fs/file?path=%s", sv->write_path);
	snprintf(sv->upload_q, sizeof sv->upload_q, "/v1/fs/file?path=%s", sv->upload_path);
	FILE *f = fopen(sv->read_path, "w");
	if (!f || fwrite(payload, 1, KIB, f) != KIB || fclose(f))
		die("cannot write %s", sv->read_path);
}

/* SIGTERM, then SIGKILL if it is not gone within 10 s. */
static void stop(server *sv)
{
	kill(sv->pid, SIGTERM);
	double t0 = now_ms();
	while (waitpid(sv->pid, NULL, WNOHANG) == 0) {
		if (now_ms() - t0 > 10000) {
			kill(sv->pid, SIGKILL);
			waitpid(sv->pid, NULL, 0);
			return;
		}
		usleep(10000);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr,
		        "usage: bench_peer_http ASP_AGENT [SANDBOX_AGENT] [iterations] [ops]\n");
		return 2;
	}
	const char *peer = argc > 2 && argv[2][0] ? argv[2] : getenv("ASP_PEER_SANDBOX_AGENT");
	if (!peer || !*peer || access(peer, X_OK) != 0) {
		fprintf(stderr, "bench_peer_http: skipped: no sandbox-agent binary. Get it with\n"
		                "  mkdir -p /tmp/rivet && cd /tmp/rivet && "
		                "npm pack @sandbox-agent/cli-linux-x64@0.4.2 &&\n"
		                "  tar xzf sandbox-agent-cli-linux-x64-0.4.2.tgz && "
		                "chmod +x package/bin/sandbox-agent\n"
		                "then pass package/bin/sandbox-agent as the second argument or in "
		                "$ASP_PEER_SANDBOX_AGENT.\n");
		return 77;
	}
	int iters = argc > 3 ? atoi(argv[3]) : 1000;
	if (iters < 10)
		iters = 10;
	signal(SIGPIPE, SIG_IGN);

	const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char dir[300];
	snprintf(dir, sizeof dir, "%s/asp-peer-XXXXXX", tmp);
	if (!mkdtemp(dir))
		die("mkdtemp %s", dir);
	payload = malloc(UPLOAD);
	req.b = malloc(1024); /* the requests without their payload */
	if (!payload || !req.b)
		die("%s", "out of memory");
	for (size_t i = 0; i < UPLOAD; i++)
		payload[i] = (uint8_t)(i * 2654435761u >> 13);

	server sv[NS] = {{.name = "asp-agent"}, {.name = "sandbox-agent"}};
	set_paths(&sv[S_ASP], dir, "asp");
	set_paths(&sv[S_PEER], dir, "peer");
	char log[NS][400];
	snprintf(log[S_ASP], sizeof log[S_ASP], "%s/asp-agent.log", dir);
	snprintf(log[S_PEER], sizeof log[S_PEER], "%s/sandbox-agent.log", dir);

	const char *aargv[] = {argv[1], "--listen", "127.0.0.1:0", NULL};
	sv[S_ASP].pid = spawn_logged(aargv, log[S_ASP]);
	char port_s[16];
	snprintf(port_s, sizeof port_s, "%d", free_port());
	const char *pargv[] = {peer,     "server",    "--no-token", "--no-telemetry",
	                       "--host", "127.0.0.1", "--port",     port_s,
	                       NULL};
	sv[S_PEER].pid = spawn_logged(pargv, log[S_PEER]);
	connect_healthy(&sv[S_ASP].h, asp_port(sv[S_ASP].pid, log[S_ASP]), sv[S_ASP].pid,
	                "asp-agent");
	connect_healthy(&sv[S_PEER].h, atoi(port_s), sv[S_PEER].pid, "sandbox-agent");

	/* Fewer uploads: each is 1 MiB, and the point is the rate, not the tail. */
	int n_of[NOP] = {iters, iters, iters, iters, iters, iters / 4 > 10 ? iters / 4 : 10};
	bool want[NOP];
	for (int op = 0; op < NOP; op++)
		want[op] = argc <= 4 || strstr(argv[4], op_key[op]) != NULL;
	double med[NOP][NS], p90[NOP][NS], cpu[NOP][NS], sleeps[NOP][NS];
	double *v[NS] = {malloc(sizeof(double) * (size_t)iters),
	                 malloc(sizeof(double) * (size_t)iters)};
	double *vfloor = malloc(sizeof(double) * (size_t)iters);
	double *vstart = malloc(sizeof(double) * (size_t)iters);
	double floor_us = 0, start_us = 0;
	for (int op = 0; op < NOP; op++) {
		if (!want[op])
			continue;
		int n = n_of[op], warm = n / 10;
		for (int i = 0; i < warm; i++)
			for (int k = 0; k < NS; k++)
				call(&sv[k], k, op);
		double c0[NS], s0[NS];
		for (int k = 0; k < NS; k++)
			sched_totals(sv[k].pid, &c0[k], &s0[k]);
		/*
		 * Each iteration the servers take turns, and with exec the two floors too
		 * (spawn_floor.h), in a fresh random order (bench_order).
		 */
		int turns = op == OP_EXEC ? NS + 2 : NS;
		unsigned long long seed = 1;
		for (int i = 0; i < n; i++) {
			int order[NS + 2];
			bench_order(order, turns, &seed);
			for (int k = 0; k < turns; k++) {
				int s = order[k];
				double t0 = now_us();
				if (s < NS)
					call(&sv[s], s, op);
				else if (s == NS)
					spawn_floor_true();
				else
					spawn_start_floor_true();
				double t = now_us() - t0;
				if (s < NS)
					v[s][i] = t;
				else
					(s == NS ? vfloor : vstart)[i] = t;
			}
		}
		if (op == OP_EXEC)
			floor_us = median(vfloor, n), start_us = median(vstart, n);
		for (int s = 0; s < NS; s++) {
			double c1, s1;
			sched_totals(sv[s].pid, &c1, &s1);
			cpu[op][s] = (c1 - c0[s]) / 1e3 / n;
			sleeps[op][s] = (s1 - s0[s]) / n;
			med[op][s] = median(v[s], n); /* sorts v[s] */
			p90[op][s] = v[s][n * 9 / 10];
		}
	}
	long rss[NS] = {vm_rss_kib(sv[S_ASP].pid), vm_rss_kib(sv[S_PEER].pid)};

	printf("bench_peer_http: %d iterations (uploads %d), files in %s\n\n", iters,
	       n_of[OP_UPLOAD], dir);
	printf("| op | asp-agent median (p90) | sandbox-agent median (p90) | ASP/peer |\n");
	printf("|---|---|---|---|\n");
	for (int op = 0; op < NOP; op++)
		if (want[op])
			printf("| %s | %.1f µs (%.1f) | %.1f µs (%.1f) | %.2f× |\n", op_name[op],
			       med[op][S_ASP], p90[op][S_ASP], med[op][S_PEER], p90[op][S_PEER],
			       med[op][S_ASP] / med[op][S_PEER]);
	if (want[OP_EXEC]) {
		printf("\n| exec `true` over the floor (posix_spawn + waitpid here, %.0f µs) | "
		       "asp-agent | sandbox-agent |\n|---|---|---|\n",
		       floor_us);
		printf("| the server's exec | %.2f× | %.2f× |\n", med[OP_EXEC][S_ASP] / floor_us,
		       med[OP_EXEC][S_PEER] / floor_us);
		printf("| start floor: exec's pipes and session, no server | %.2f× | |\n",
		       start_us / floor_us);
		if (want[OP_STAT])
			printf("| start floor + ASP's stat round trip | %.2f× | |\n",
			       (start_us + med[OP_STAT][S_ASP]) / floor_us);
		printf("| 0.8× the peer's exec | %.2f× | |\n",
		       0.8 * med[OP_EXEC][S_PEER] / floor_us);
	}
	printf("\nServer side, per call: CPU time of the server's threads, and how often they "
	       "slept (voluntary context switches)\n\n");
	printf("| op | asp-agent CPU | sleeps | sandbox-agent CPU | sleeps |\n");
	printf("|---|---|---|---|---|\n");
	for (int op = 0; op < NOP; op++)
		if (want[op])
			printf("| %s | %.1f µs | %.1f | %.1f µs | %.1f |\n", op_name[op],
			       cpu[op][S_ASP], sleeps[op][S_ASP], cpu[op][S_PEER],
			       sleeps[op][S_PEER]);
	printf("\n");
	if (want[OP_UPLOAD])
		printf("| upload rate | %.0f MiB/s | %.0f MiB/s | |\n", 1e6 / med[OP_UPLOAD][S_ASP],
		       1e6 / med[OP_UPLOAD][S_PEER]);
	printf("| VmRSS after the run | %.1f MiB | %.1f MiB | |\n", rss[S_ASP] / 1024.0,
	       rss[S_PEER] / 1024.0);

	for (int s = 0; s < NS; s++) {
		close(sv[s].h.fd);
		stop(&sv[s]);
		free(sv[s].h.buf);
	}
	char *files[] = {sv[0].read_path,
	                 sv[0].write_path,
	                 sv[0].upload_path,
	                 sv[1].read_path,
	                 sv[1].write_path,
	                 sv[1].upload_path,
	                 log[0],
	                 log[1]};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		unlink(files[i]);
	rmdir(dir);
	free(v[0]);
	free(v[1]);
	free(vfloor);
	free(vstart);
	free(payload);
	free(req.b);
	return 0;
}
