/*
 * ssh.proxy_command and ssh.jump against the OpenSSH fixture on 127.0.0.1 (the network
 * namespaces of tests/ssh/test_gateways_netns.py are where a target is reachable only
 * through its bastion): a proxy command that exits, prints garbage, hangs or is missing
 * ends the call within connect_timeout_ms with transport_error naming it and its stderr's
 * last line; one that dies in the middle of a transfer fails the call at once and the
 * next call reconnects; a jump host with a wrong key is refused naming the hop; bulk data
 * through a proxy and through a jump host arrives intact.
 *
 *   test_ssh_gateways [NAME...]
 */
#include "asp/asp.h"
#include "asp/transport.h"
#include "cu_run.h"
#include "sshd_fixture.h"

#include <CUnit/Basic.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BIG (32u << 20)

static sshd_fixture fx;
static char scratch[300];

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A client for the fixture's server with `extra` ssh keys (NULL with the reason said). */
static asp_client *client(const char *extra, asp_config **cfg)
{
	char json[8192];
	sshd_config_json(&fx, NULL, extra, json, sizeof json);
	asp_error err;
	*cfg = NULL;
	if (asp_config_parse(json, strlen(json), NULL, cfg, &err) != ASP_OK) {
		fprintf(stderr, "config: %s\n%s\n", err.message, json);
		return NULL;
	}
	asp_client *c = NULL;
	if (asp_client_open_view(asp_config_get(*cfg), &c, &err) != ASP_OK) {
		fprintf(stderr, "open: %s\n", err.message);
		return NULL;
	}
	return c;
}

static asp_status exec_sh(asp_client *c, const char *cmd, asp_exec_result *r, asp_arena *a,
                          asp_error *err)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = cmd;
	p.timeout_ms = 30000;
	return asp_exec(c, &p, r, a, err);
}

/* ---- a proxy command that fails before the handshake ------------------------------------ */

/* Connects with `extra` ssh keys and calls exec: the status, message and time. */
static asp_status connect_exec(const char *extra, char *msg, size_t cap, long long *took)
{
	char json[8192];
	sshd_config_json(&fx, NULL, extra, json, sizeof json);
	asp_config *cfg = NULL;
	asp_error err;
	asp_status st = asp_config_parse(json, strlen(json), NULL, &cfg, &err);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	asp_client *c = NULL;
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	long long t0 = now_ms();
	st = asp_client_open_view(asp_config_get(cfg), &c, &err);
	if (st == ASP_OK)
		st = exec_sh(c, "true", &r, a, &err);
	*took = now_ms() - t0;
	snprintf(msg, cap, "%s", err.message);
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
	return st;
}

/* The same with `proxy` (a JSON argv) as the proxy command. */
static asp_status failing_proxy(const char *proxy, unsigned timeout_ms, char *msg, size_t cap,
                                long long *took)
{
	char extra[1024];
	snprintf(extra, sizeof extra, "\"connect_timeout_ms\": %u, \"proxy_command\": %s",
	         timeout_ms, proxy);
	return connect_exec(extra, msg, cap, took);
}

static void expect_failure(const char *proxy, unsigned timeout_ms, const char *needle1,
                           const char *needle2)
{
	char msg[ASP_ERROR_MESSAGE_MAX];
	long long took = 0;
	asp_status st = failing_proxy(proxy, timeout_ms, msg, sizeof msg, &took);
	CU_ASSERT_EQUAL(st, ASP_E_TRANSPORT_ERROR);
	/* within connect_timeout_ms, and the margin a loaded machine needs to notice */
	CU_ASSERT_TRUE(took < (long long)timeout_ms + 3000);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, needle1));
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, needle2));
	if (st != ASP_E_TRANSPORT_ERROR || !strstr(msg, needle1) || !strstr(msg, needle2) ||
	    took >= (long long)timeout_ms + 3000)
		fprintf(stderr, "\n  %s: %s after %lld ms: %s\n", proxy, asp_strerror(st), took,
		        msg);
}

static void test_proxy_exits(void)
{
	expect_failure("[\"sh\", \"-c\", \"echo no route to the gateway >&2; exit 3\"]", 5000,
	               "proxy_command `sh -c echo no route to the gateway >&2; exit 3` exited with "
	               "status 3",
	               "its stderr's last line: no route to the gateway");
}

static void test_proxy_garbage(void)
{
	expect_failure("[\"sh\", \"-c\", \"echo garbage; echo some words >&2; "
	               "head -c 3000 /dev/urandom; exec sleep 60\"]",
	               1500, "proxy_command `sh -c echo garbage", "some words");
}

static void test_proxy_hangs(void)
{
	expect_failure("[\"sh\", \"-c\", \"echo dialing >&2; exec sleep 60\"]", 1000,
	               "is still running", "its stderr's last line: dialing");
}

static void test_proxy_missing(void)
{
	expect_failure("[\"no-such-proxy-command\", \"%h\"]", 5000,
	               "cannot run no-such-proxy-command", "in PATH");
}

/* ---- data through a proxy and a jump host ------------------------------------------------ */

/* Writes BIG random bytes and reads them back; true when every byte came back. */
static bool roundtrip(asp_client *c, const char *name)
{
	char path[400];
	snprintf(path, sizeof path, "%s/%s", scratch, name);
	uint8_t *data = malloc(BIG);
	CU_ASSERT_PTR_NOT_NULL_FATAL(data);
	for (size_t i = 0; i < BIG; i++)
		data[i] = (uint8_t)((i * 2654435761u) >> 13);
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = path;
	wp.data = (asp_bytes){data, BIG};
	asp_write_result wr;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_write(c, &wp, &wr, a, &err);
	if (st != ASP_OK)
		fprintf(stderr, "\n  write: %s\n", err.message);
	/* read back in the pieces max_message allows */
	size_t got = 0;
	bool same = st == ASP_OK;
	while (same && got < BIG) {
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = path;
		rp.offset = got;
		asp_read_result rr;
		if ((st = asp_read(c, &rp, &rr, a, &err)) != ASP_OK) {
			fprintf(stderr, "\n  read: %s\n", err.message);
			same = false;
			break;
		}
		same = rr.data.len > 0 && got + rr.data.len <= BIG &&
		       memcmp(rr.data.data, data + got, rr.data.len) == 0;
		got += rr.data.len;
		asp_arena_reset(a);
	}
	same = same && got == BIG;
	asp_arena_free(a);
	free(data);
	unlink(path);
	return same;
}

static void test_proxy_socat_bulk(void)
{
	asp_config *cfg;
	asp_client *c = client("\"proxy_command\": [\"socat\", \"-\", \"TCP:%h:%p\"]", &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	asp_error err;
	CU_ASSERT_EQUAL(exec_sh(c, "echo $SSH_CONNECTION", &r, a, &err), ASP_OK);
	CU_ASSERT_TRUE(roundtrip(c, "proxy.bin"));
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
}

/* A jump host (the same server) with keys of its own, then the target through it. */
static void jump_keys(char *out, size_t cap, const char *hop_extra)
{
	snprintf(out, cap,
	         "\"port\": %u, \"identity_file\": \"%s\", \"known_hosts\": \"%s\", "
	         "\"jump\": [{\"host\": \"127.0.0.1\", \"port\": %u, \"user\": \"%s\", "
	         "\"identity_file\": \"%s\", \"known_hosts\": \"%s\"%s}]",
	         fx.port, fx.client_key, fx.known_hosts, fx.port, fx.user, fx.client_key,
	         fx.known_hosts, hop_extra);
}

static void test_jump_bulk(void)
{
	char extra[2048];
	jump_keys(extra, sizeof extra, "");
	asp_config *cfg;
	asp_client *c = client(extra, &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	asp_error err;
	CU_ASSERT_EQUAL(exec_sh(c, "echo through", &r, a, &err), ASP_OK);
	CU_ASSERT_TRUE(r.stdout_data.len == 8 && memcmp(r.stdout_data.data, "through\n", 8) == 0);
	CU_ASSERT_TRUE(roundtrip(c, "jump.bin"));
	asp_arena_free(a);
	asp_client_free(c);
	asp_config_free(cfg);
}

static asp_status failing_jump(const char *extra, char *msg, size_t cap)
{
	long long took;
	return connect_exec(extra, msg, cap, &took);
}

static void test_jump_wrong_key(void)
{
	char extra[2048], msg[ASP_ERROR_MESSAGE_MAX];
	jump_keys(extra, sizeof extra,
	          ", \"host_key_sha256\": \"SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8\"");
	asp_status st = failing_jump(extra, msg, sizeof msg);
	CU_ASSERT_EQUAL(st, ASP_E_UNAUTHORIZED);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "jump host 1 of 1 (127.0.0.1, "));
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "host key mismatch"));
	if (st != ASP_E_UNAUTHORIZED || !strstr(msg, "jump host 1 of 1"))
		fprintf(stderr, "\n  wrong hop key: %s: %s\n", asp_strerror(st), msg);
}

static void test_jump_cannot_reach(void)
{
	char extra[2048], msg[ASP_ERROR_MESSAGE_MAX];
	jump_keys(extra, sizeof extra, "");
	/* the target's port: 1, where nothing listens */
	char *p = strchr(extra, ',');
	char moved[2100];
	snprintf(moved, sizeof moved, "\"port\": 1%s", p);
	asp_status st = failing_jump(moved, msg, sizeof msg);
	CU_ASSERT_EQUAL(st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "cannot reach 127.0.0.1 port 1"));
	if (st != ASP_E_TRANSPORT_ERROR || !strstr(msg, "port 1"))
		fprintf(stderr, "\n  unreachable: %s: %s\n", asp_strerror(st), msg);
}

/* ---- a proxy that dies in the middle ------------------------------------------------------ */

/* The pid of our child named `comm` (the proxy command), or -1. */
static pid_t child_named(const char *comm)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	pid_t found = -1;
	struct dirent *e;
	while (found < 0 && (e = readdir(d))) {
		char path[300], buf[512];
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = '\0';
		char *open = strchr(buf, '('), *close = strrchr(buf, ')');
		if (!open || !close)
			continue;
		int ppid = 0;
		char state;
		if (sscanf(close + 2, "%c %d", &state, &ppid) != 2 || ppid != getpid())
			continue;
		if ((size_t)(close - open - 1) == strlen(comm) &&
		    !strncmp(open + 1, comm, strlen(comm)))
			found = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return found;
}

struct transfer {
	asp_client *c;
	const char *path;
	asp_status st;
	asp_error err;
	long long ended;
};

static void *big_write(void *arg)
{
	struct transfer *t = arg;
	size_t n = 256u << 20; /* long enough to be cut: the proxy dies after the first bytes */
	uint8_t *data = calloc(1, n);
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = t->path;
	wp.data = (asp_bytes){data, n};
	asp_write_result wr;
	asp_arena *a = asp_arena_new();
	t->st = data ? asp_write(t->c, &wp, &wr, a, &t->err) : ASP_E_INTERNAL;
	t->ended = now_ms();
	asp_arena_free(a);
	free(data);
	return NULL;
}

static void test_proxy_dies_mid_transfer(void)
{
	asp_config *cfg;
	asp_client *c = client("\"proxy_command\": [\"socat\", \"-\", \"TCP:%h:%p\"]", &cfg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	asp_arena *a = asp_arena_new();
	asp_exec_result r;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(exec_sh(c, "true", &r, a, &err), ASP_OK);
	pid_t proxy = child_named("socat");
	CU_ASSERT_TRUE_FATAL(proxy > 0);

	char path[400];
	snprintf(path, sizeof path, "%s/cut.bin", scratch);
	struct transfer t = {.c = c, .path = path};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, big_write, &t), 0);
	/* the transfer is under way once bytes land in the sandbox (the temporary file the
	 * atomic write makes beside the target) */
	long long until = now_ms() + 30000;
	bool moving = false;
	while (!moving && now_ms() < until) {
		DIR *d = opendir(scratch);
		struct dirent *e;
		while (d && !moving && (e = readdir(d))) {
			char p[700];
			struct stat sb;
			snprintf(p, sizeof p, "%s/%s", scratch, e->d_name);
			moving =
			    strstr(e->d_name, "cut.bin") && stat(p, &sb) == 0 && sb.st_size > 0;
		}
		if (d)
			closedir(d);
		if (!moving)
			sched_yield();
	}
	CU_ASSERT_TRUE(moving);
	long long t_kill = now_ms();
	kill(proxy, SIGKILL);
	pthread_join(th, NULL);
	long long took = t.ended - t_kill;
	CU_ASSERT_EQUAL(t.st, ASP_E_TRANSPORT_ERROR);
	CU_ASSERT_TRUE(took < 10000);
	CU_ASSERT_PTR_NOT_NULL(strstr(t.err.message, "proxy_command `socat - TCP:127.0.0.1:"));
	CU_ASSERT_PTR_NOT_NULL(strstr(t.err.message, "killed by signal 9"));
	if (t.st != ASP_E_TRANSPORT_ERROR || took >= 10000 || !strstr(t.err.message, "signal 9"))
		fprintf(stderr, "\n  cut transfer: %s after %lld ms: %s\n", asp_strerror(t.st),
		        took, t.err.message);
	/* the next call reconnects, through a new proxy */
	asp_status st = exec_sh(c, "echo again", &r, a, &err);
	CU_ASSERT_EQUAL(st, ASP_OK);
	if (st != ASP_OK)
		fprintf(stderr, "\n  reconnect: %s\n", err.message);
	pid_t again = child_named("socat");
	CU_ASSERT_TRUE(again > 0 && again != proxy);
	asp_arena_free(a);
	asp_client_free(c);
	/* the connection's end ends its proxy */
	CU_ASSERT_EQUAL(child_named("socat"), -1);
	asp_config_free(cfg);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -f %s/*cut.bin*", scratch);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (sshd_start(&fx) != 0) {
		fprintf(stderr, "test_ssh_gateways: %s\n", fx.why);
		return 1;
	}
	snprintf(scratch, sizeof scratch, "%s/scratch", fx.dir);
	mkdir(scratch, 0755);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s = CU_add_suite("ssh_gateways", NULL, NULL);
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"proxy_exits", test_proxy_exits},
	    {"proxy_garbage", test_proxy_garbage},
	    {"proxy_hangs", test_proxy_hangs},
	    {"proxy_missing", test_proxy_missing},
	    {"proxy_socat_bulk", test_proxy_socat_bulk},
	    {"proxy_dies_mid_transfer", test_proxy_dies_mid_transfer},
	    {"jump_bulk", test_jump_bulk},
	    {"jump_wrong_key", test_jump_wrong_key},
	    {"jump_cannot_reach", test_jump_cannot_reach},
	};
	for (size_t i = 0; s && i < sizeof tests / sizeof *tests; i++) {
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			return 2;
	}
	int rc = cu_run(argc, argv);
	sshd_stop(&fx);
	return rc;
}
