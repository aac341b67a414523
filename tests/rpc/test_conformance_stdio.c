/*
 * The conformance table over the stdio transport: the RPC engine driving a real asp-agent
 * child ($ASP_AGENT, suite "stdio"), and the static build ($ASP_AGENT_STATIC, suite
 * "stdio_static") when it was built. When the agent has --listen unix:, also through
 * `asp-agent --relay` to one daemon (suite "stdio_relay", docs/design.md,
 * "Concurrency and lifetime"), where a second connection can reattach to a process after
 * the first one closed.
 */
#include "cu_run.h"
#include "asp/transport.h"
#include "conformance.h"

#include <CUnit/Basic.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct backend {
	const char *argv[4];
	asp_config_view view;
	const asp_transport *t;
	const asp_ops *ops;
	void *self;
	conf_streaming st;
} backend;

static void *peer_open(void *ctx);
static void peer_close(void *ctx, void *peer);

/* `relay` NULL: agent --stdio; else agent --relay unix:RELAY. */
static int open_backend(backend *b, const char *agent, const char *relay)
{
	b->argv[0] = agent;
	b->argv[1] = relay ? "--relay" : "--stdio";
	b->argv[2] = relay;
	b->argv[3] = NULL;
	memset(&b->view, 0, sizeof b->view);
	b->view.transport = ASP_TRANSPORT_STDIO;
	b->view.stdio.argv = b->argv;
	b->view.stdio.argc = relay ? 3 : 2;
	b->t = asp_transport_find(ASP_TRANSPORT_STDIO);
	asp_error err;
	if (!b->t || b->t->open(&b->view, &b->ops, &b->self, &err)) {
		fprintf(stderr, "stdio transport: %s\n", b->t ? err.message : "not built");
		return -1;
	}
	conf_transport_streaming(&b->st, b->t);
	if (relay) { /* another relay is another connection to the same daemon */
		b->st.peer_open = peer_open;
		b->st.peer_close = peer_close;
		b->st.ctx = b;
	}
	return 0;
}

static backend relay_b;

static void *peer_open(void *ctx)
{
	backend *b = ctx;
	const asp_ops *ops;
	void *self;
	asp_error err;
	return b->t->open(&b->view, &ops, &self, &err) == ASP_OK ? self : NULL;
}

static void peer_close(void *ctx, void *peer)
{
	backend *b = ctx;
	b->t->close(peer);
}

/* The streaming slots of conf_transport_streaming take the transport as ctx. */
static asp_status relay_spawn(void *ctx, void *self, const asp_spawn_params *p,
                              const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                              asp_error *err)
{
	conf_streaming plain;
	conf_transport_streaming(&plain, ((backend *)ctx)->t);
	return plain.spawn(plain.ctx, self, p, cb, user, proc, err);
}

static asp_status relay_attach(void *ctx, void *self, const asp_proc_attach_params *p,
                               const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	conf_streaming plain;
	conf_transport_streaming(&plain, ((backend *)ctx)->t);
	return plain.attach(plain.ctx, self, p, cb, user, err);
}

static asp_status relay_connect(void *ctx, void *self, const asp_connect_params *p,
                                const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                                asp_error *err)
{
	conf_streaming plain;
	conf_transport_streaming(&plain, ((backend *)ctx)->t);
	return plain.connect(plain.ctx, self, p, cb, user, proc, err);
}

static void relay_detach(void *ctx, void *self, uint64_t proc)
{
	conf_streaming plain;
	conf_transport_streaming(&plain, ((backend *)ctx)->t);
	plain.detach(plain.ctx, self, proc);
}

/*
 * asp-agent --listen unix:DIR/d.sock in the background: its pid; -1 without --listen (it
 * exits at once); -2 when the socket did not appear within a bound a loaded machine
 * meets (a failure, not a reason to skip the suite).
 */
static pid_t start_daemon(const char *agent, char *dir, char *sock, size_t cap)
{
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, cap, "unix:%s/d.sock", dir);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		execl(agent, agent, "--listen", sock, (char *)NULL);
		_exit(127);
	}
	if (pid < 0)
		return -1;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct stat st;
		if (stat(sock + 5, &st) == 0)
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1; /* built without HTTP support: no --listen */
		usleep(20 * 1000);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < 30);
	fprintf(stderr, "stdio_relay: asp-agent --listen %s made no socket within 30 s\n", sock);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -2;
}

int main(int argc, char **argv)
{
	const char *agent = getenv("ASP_AGENT"), *agent_static = getenv("ASP_AGENT_STATIC");
	if (!agent || !agent[0]) {
		fprintf(stderr, "ASP_AGENT must be set (meson test does)\n");
		return 77;
	}
	backend dyn, sta;
	bool have_static = agent_static && agent_static[0];
	if (open_backend(&dyn, agent, NULL) < 0 ||
	    (have_static && open_backend(&sta, agent_static, NULL) < 0))
		return 1;
	char dir[] = "/tmp/asp-conf-relay-XXXXXX", sock[128];
	pid_t daemon = start_daemon(agent, dir, sock, sizeof sock);
	if (daemon == -2) {
		rmdir(dir);
		return 1;
	}
	bool have_relay = daemon > 0 && open_backend(&relay_b, agent, sock) == 0;
	if (have_relay) {
		relay_b.st.spawn = relay_spawn;
		relay_b.st.attach = relay_attach;
		relay_b.st.detach = relay_detach;
		relay_b.st.connect = relay_connect;
	} else {
		fprintf(stderr, "stdio_relay: skipped (no asp-agent --listen unix:)\n");
	}
	if (CU_initialize_registry() != CUE_SUCCESS ||
	    conf_register_cunit_st("stdio", dyn.ops, dyn.self, &dyn.st, "/tmp") < 0 ||
	    (have_static &&
	     conf_register_cunit_st("stdio_static", sta.ops, sta.self, &sta.st, "/tmp") < 0) ||
	    (have_relay && conf_register_cunit_st("stdio_relay", relay_b.ops, relay_b.self,
	                                          &relay_b.st, "/tmp") < 0))
		return 1;
	/* every case, or the suites and cases named as arguments (stdio_relay/exec_timeout_...) */
	unsigned failed = (unsigned)cu_run(argc, argv);
	dyn.t->close(dyn.self);
	if (have_static)
		sta.t->close(sta.self);
	if (have_relay)
		relay_b.t->close(relay_b.self);
	if (daemon > 0) {
		kill(daemon, SIGTERM);
		waitpid(daemon, NULL, 0);
		char path[160];
		snprintf(path, sizeof path, "%s/d.sock", dir);
		unlink(path);
		rmdir(dir);
	}
	return failed ? 1 : 0;
}
