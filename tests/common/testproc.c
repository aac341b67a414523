/* Test helpers: child processes, deadline reads, frames. */
#include "testproc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int64_t t_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *t_env(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] ? v : NULL;
}

pid_t t_pid_from_file(const char *path, pid_t old, int ms)
{
	for (int64_t end = t_now_ms() + ms;;) {
		size_t len;
		uint8_t *d = t_read_file(path, &len);
		/* whole once its newline is there: "12" of a "1234\n" being written is no pid */
		pid_t pid = d && len && d[len - 1] == '\n' ? (pid_t)atol((const char *)d) : 0;
		free(d);
		if (pid > 0 && pid != old)
			return pid;
		if (t_now_ms() >= end)
			return 0;
		usleep(10 * 1000); /* polling the condition, bounded by ms */
	}
}

/* The state letter of a /proc/.../stat file (R, S, D, T, Z, ...); 0 if unreadable. */
static char stat_state(const char *path)
{
	char buf[512];
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *s = strrchr(buf, ')');
	return s && s[1] == ' ' ? s[2] : 0;
}

bool t_pid_alive(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	char st = stat_state(path);
	return st && st != 'Z' && st != 'X';
}

bool t_thread_asleep(pid_t tid, int ms)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
	for (int64_t end = t_now_ms() + ms;;) {
		char st = stat_state(path);
		if (st == 'S' || st == 'D')
			return true;
		if (!st || t_now_ms() >= end)
			return false;
		usleep(1000); /* polling the condition, bounded by ms */
	}
}

/* Whether every thread of `pid` is stopped (state T or t in /proc/PID/task/TID/stat). */
static bool all_stopped(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	bool any = false, all = true;
	struct dirent *de;
	while (all && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", (int)pid, de->d_name);
		char st = stat_state(path);
		if (!st)
			continue; /* a thread that just exited */
		any = true;
		all = st == 'T' || st == 't';
	}
	closedir(d);
	return any && all;
}

bool t_stop(pid_t pid, int ms)
{
	if (pid <= 0 || kill(pid, SIGSTOP) != 0)
		return false;
	for (int64_t end = t_now_ms() + ms;;) {
		if (all_stopped(pid))
			return true;
		if (t_now_ms() >= end)
			return false;
		usleep(1000);
	}
}

bool t_asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	return true;
#endif
#endif
	return false;
}

static int spawn_fds(tproc *p, char *const argv[], int in, int out, int err)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in, 0);
	posix_spawn_file_actions_adddup2(&fa, out, 1);
	posix_spawn_file_actions_adddup2(&fa, err, 2);
	int e = posix_spawnp(&p->pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

int tproc_spawn(tproc *p, char *const argv[])
{
	int i[2], o[2], e[2];
	if (pipe2(i, O_CLOEXEC) || pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC))
		return -1;
	int rc = spawn_fds(p, argv, i[0], o[1], e[1]);
	close(i[0]);
	close(o[1]);
	close(e[1]);
	p->in = i[1];
	p->out = o[0];
	p->err = e[0];
	if (rc) {
		tproc_close(p);
		return -1;
	}
	return 0;
}

int tproc_spawn_socket(tproc *p, char *const argv[])
{
	int sv[2], e[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) || pipe2(e, O_CLOEXEC))
		return -1;
	int rc = spawn_fds(p, argv, sv[1], sv[1], e[1]);
	close(sv[1]);
	close(e[1]);
	p->in = p->out = sv[0];
	p->err = e[0];
	if (rc) {
		tproc_close(p);
		return -1;
	}
	return 0;
}

void tproc_close_in(tproc *p)
{
	if (p->in < 0)
		return;
	if (p->in == p->out)
		shutdown(p->in, SHUT_WR);
	else
		close(p->in);
	if (p->in != p->out)
		p->in = -1;
}

int tproc_wait(tproc *p, int ms, struct rusage *ru)
{
	int64_t end = t_now_ms() + ms;
	int status;
	struct rusage dummy;
	for (;;) {
		pid_t r = wait4(p->pid, &status, WNOHANG, ru ? ru : &dummy);
		if (r == p->pid)
			return status;
		if (r < 0)
			return -1;
		if (t_now_ms() > end) {
			kill(p->pid, SIGKILL);
			wait4(p->pid, &status, 0, ru ? ru : &dummy);
			return -1;
		}
		usleep(2000);
	}
}

void tproc_close(tproc *p)
{
	if (p->in >= 0 && p->in != p->out)
		close(p->in);
	if (p->out >= 0)
		close(p->out);
	if (p->err >= 0)
		close(p->err);
	p->in = p->out = p->err = -1;
}

int t_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;
	while (len) {
		ssize_t n = write(fd, b, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Waits for fd to be readable until `end`. 1 readable, 0 timeout. */
static int wait_in(int fd, int64_t end)
{
	for (;;) {
		int64_t left = end - t_now_ms();
		if (left <= 0)
			return 0;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, (int)left);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return 0;
	}
}

char *t_read_until_eof(int fd, int ms, size_t *len, bool *eof)
{
	int64_t end = t_now_ms() + ms;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	*eof = false;
	while (wait_in(fd, end)) {
		if (n + 1024 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*eof = true;
			break;
		}
		n += (size_t)r;
	}
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

static int read_exact(int fd, uint8_t *buf, size_t len, int64_t end)
{
	size_t got = 0;
	while (got < len) {
		if (!wait_in(fd, end))
			return -1;
		ssize_t r = read(fd, buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return got == 0 ? 0 : -1;
		got += (size_t)r;
	}
	return 1;
}

int t_read_frame(int fd, int ms, uint8_t **body, size_t *len)
{
	int64_t end = t_now_ms() + ms;
	uint8_t h[4];
	*body = NULL;
	int r = read_exact(fd, h, 4, end);
	if (r <= 0)
		return r;
	size_t n = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
	uint8_t *b = malloc(n ? n : 1);
	if (n && read_exact(fd, b, n, end) != 1) {
		free(b);
		return -1;
	}
	*body = b;
	*len = n;
	return 1;
}

void t_add_request(asp_buf *b, uint32_t id, asp_op_id op, const void *params)
{
	asp_buf one;
	asp_buf_init(&one);
	if (asp_wire_request(&one, id, op, params) < 0)
		abort();
	asp_buf_write(b, (const char *)one.data, one.len);
	asp_buf_free(&one);
}

void t_add_framed(asp_buf *b, const void *data, size_t len)
{
	uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
	                (uint8_t)len};
	asp_buf_write(b, (const char *)h, 4);
	asp_buf_write(b, data, len);
}

bool t_parse_response(const uint8_t *body, size_t len, asp_op_id op, void *result, asp_arena *a,
                      t_resp *r)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg msg;
	asp_error_clear(&r->err);
	bool ok =
	    asp_wire_decode(body, len, &u, &msg, &r->err) == ASP_OK && msg.type == ASP_MSG_RESPONSE;
	if (ok) {
		r->id = msg.id;
		if (msg.error)
			r->st = asp_wire_error_decode(msg.error, &r->err);
		else if (result)
			r->st = asp_wire_result_decode(op, &msg, result, a, &r->err);
		else
			r->st = ASP_OK;
	}
	msgpack_unpacked_destroy(&u);
	return ok;
}

uint8_t *t_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	size_t r;
	while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	*len = n;
	return buf;
}

/* Children of `pid` (from /proc/N/stat), for waiting until its execs have started. */
int t_children_of(pid_t pid)
{
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300], buf[512];
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[len] = '\0';
		const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
		int ppid = 0;
		if (close_paren && sscanf(close_paren + 1, " %*c %d", &ppid) == 1 && ppid == pid)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

int t_count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}
