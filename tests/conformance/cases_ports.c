/*
 * Ports and changes (docs/design.md, "Ports and changes"): connect's connections and
 * watch's events. A connection is followed with proc_attach (the registrations' attach),
 * which replays what came before the attach: connect and watch are called as plain ops.
 * The sandbox's TCP server echoes each connection until its EOF and then closes. It is a
 * python3 script where the sandbox has python3: it listens on port 0 of its 127.0.0.1 and
 * writes its port, and keeps a second socket bound but not listening, whose port refuses
 * connections. Else it is a netcat that serves, busybox's `nc -ll -p PORT -e cat` (a cat
 * per connection), on a port picked at random that connect found refusing, again on
 * another when the bind fails; it says nothing once it listens, so connect asks until it
 * answers, and a second port connect found refusing is the refusing one. A sandbox with
 * neither skips these cases.
 */
#include "cases_ports.h"
#include "conf_follow.h"

#include "asp/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 15000

static const char echo_server[] =
    "import socket, sys, threading\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n"
    "r = socket.socket(); r.bind(('127.0.0.1', 0))\n"
    "open(sys.argv[1] + '.tmp', 'w').write('%d %d\\n' % (s.getsockname()[1], "
    "r.getsockname()[1]))\n"
    "import os; os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "def echo(c):\n"
    "    while True:\n"
    "        d = c.recv(65536)\n"
    "        if not d: break\n"
    "        c.sendall(d)\n"
    "    c.close()\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    threading.Thread(target=echo, args=(c,), daemon=True).start()\n";

/*
 * The python3 server; its port and a refusing port. false: failed, or with `*missing`
 * when the sandbox has no python3 (nothing recorded).
 */
static bool start_python(conf_ctx *ctx, fx *f, unsigned *port, unsigned *refused, bool *missing)
{
	*missing = false;
	char *file = asp_arena_alloc(ctx->a, strlen(ctx->dir) + 16);
	if (!file)
		return false;
	sprintf(file, "%s/ports", ctx->dir);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.argv = ARGV("python3", "-c", echo_server, file);
	p.has_argv = true;
	p.cwd = ctx->dir;
	p.stdin_eof = true;
	uint64_t proc;
	asp_error err;
	asp_status st = do_spawn(ctx, f, ctx->self, &p, NULL, &proc, &err);
	*missing = st == ASP_E_NOT_FOUND;
	if (*missing)
		return false;
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, __LINE__, "spawn python3: %s: %s", asp_strerror(st),
		          err.message);
		return false;
	}
	double until = mono_ms() + WAIT_MS;
	while (mono_ms() < until) {
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = file;
		asp_read_result rr;
		if (ctx->ops->read(ctx->self, &rp, &rr, ctx->a, &err) == ASP_OK && rr.data.len) {
			char text[64];
			size_t n = rr.data.len < sizeof text - 1 ? rr.data.len : sizeof text - 1;
			memcpy(text, rr.data.data, n);
			text[n] = '\0';
			if (sscanf(text, "%u %u", port, refused) == 2)
				return true;
		}
		usleep(20000); /* polling a file the server writes once it listens */
	}
	conf_fail(ctx, __FILE__, __LINE__, "the sandbox's TCP server never listened");
	return false;
}

/* A port to try, at random below Linux's ephemeral range (fewer taken by connections). */
static unsigned random_port(uint32_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 17, *x ^= *x << 5;
	return 20000 + *x % 12000;
}

/*
 * connect to `port`, closing at once what it opens: true when something listens there,
 * false with `*refused` when nothing does, false without it on any other error (failed).
 */
static bool listening(conf_ctx *ctx, unsigned port, bool *refused)
{
	asp_connect_params p;
	asp_connect_params_init(&p);
	p.port = port;
	asp_connect_result r;
	asp_error err;
	asp_status st = ctx->ops->connect(ctx->self, &p, &r, ctx->a, &err);
	*refused = st == ASP_E_IO_ERROR && strstr(err.message, "refused");
	if (st == ASP_OK)
		kill_proc(ctx, ctx->self, r.proc);
	else if (!*refused)
		conf_fail(ctx, __FILE__, __LINE__, "connect port %u: %s: %s", port,
		          asp_strerror(st), err.message);
	return st == ASP_OK;
}

/* A port that refuses connections now, tried at random. false: failed. */
static bool refusing_port(conf_ctx *ctx, uint32_t *x, unsigned *port)
{
	for (int i = 0; i < 32; i++) {
		bool refused;
		*port = random_port(x);
		if (!listening(ctx, *port, &refused) && refused)
			return true;
		if (!refused)
			return false;
	}
	conf_fail(ctx, __FILE__, __LINE__, "32 ports tried, none refused connections");
	return false;
}

/*
 * The netcat server on a port that refused connections: true once connect reaches it;
 * false with `*again` when its bind failed (another port may do), else skipped or failed.
 */
static bool start_nc_on(conf_ctx *ctx, fx *f, unsigned port, bool *again)
{
	*again = false;
	char text[8];
	snprintf(text, sizeof text, "%u", port);
	coll *c = fx_coll(f, 4096); /* its stderr says why it ended */
	if (!c) {
		conf_fail(ctx, __FILE__, __LINE__, "out of collectors");
		return false;
	}
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.argv = ARGV("nc", "-ll", "-p", text, "-e", "cat");
	p.has_argv = true;
	p.cwd = ctx->dir;
	p.stdin_eof = true;
	uint64_t proc;
	asp_error err;
	asp_status st = do_spawn(ctx, f, ctx->self, &p, c, &proc, &err);
	if (st == ASP_E_NOT_FOUND) {
		conf_skip(ctx, "the sandbox has neither python3 nor nc for its TCP server");
		return false;
	}
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, __LINE__, "spawn nc: %s: %s", asp_strerror(st),
		          err.message);
		return false;
	}
	/* it says nothing once it listens: ask connect until it answers or nc ends */
	double until = mono_ms() + WAIT_MS;
	while (mono_ms() < until) {
		bool refused;
		if (listening(ctx, port, &refused))
			return true;
		if (!refused)
			return false;
		if (coll_wait_end(c, 50))
			break;
	}
	if (!coll_wait_end(c, 0)) {
		conf_fail(ctx, __FILE__, __LINE__, "nc -ll -p %u -e cat never listened", port);
		return false;
	}
	*again = strstr(coll_show(ctx, c, 1), "in use") != NULL;
	if (!*again)
		conf_skip(ctx,
		          "the sandbox has no python3, and its nc does not serve "
		          "(nc -ll -p PORT -e cat: exit %lld: %s)",
		          (long long)c->ev.exit_code, coll_show(ctx, c, 1));
	return false;
}

/* The netcat server; its port and a refusing port. false: skipped or failed. */
static bool start_nc(conf_ctx *ctx, fx *f, unsigned *port, unsigned *refused)
{
	uint32_t x = (((uint32_t)getpid() * 2654435761u) ^ (uint32_t)(mono_ms() * 1000)) | 1u;
	for (int i = 0; i < 4; i++) {
		bool again;
		if (!refusing_port(ctx, &x, port) ||
		    (!start_nc_on(ctx, f, *port, &again) && !again))
			return false;
		if (!again)
			return refusing_port(ctx, &x, refused);
	}
	conf_fail(ctx, __FILE__, __LINE__, "nc could not bind 4 ports that refused connections");
	return false;
}

/* Starts the echo server; its port and a refusing port. false: skipped or failed. */
static bool start_server(conf_ctx *ctx, fx *f, unsigned *port, unsigned *refused)
{
	bool missing;
	return start_python(ctx, f, port, refused, &missing) ||
	       (missing && start_nc(ctx, f, port, refused));
}

/*
 * connect, followed with `c`: from the answer on where the registration can (its
 * connect), else through proc_attach, which replays what came before (n/a when the
 * responder cannot attach).
 */
static bool connect_follow(conf_ctx *ctx, fx *f, int line, unsigned port, coll *c, uint64_t *proc)
{
	asp_connect_params p;
	asp_connect_params_init(&p);
	p.port = port;
	asp_error err;
	bool followed = ctx->st && ctx->st->connect;
	asp_status st = do_connect(ctx, f, ctx->self, &p, followed ? c : NULL, proc, &err);
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, line, "connect port %u: %s: %s", port, asp_strerror(st),
		          err.message);
		return false;
	}
	if (followed)
		return true;
	st = do_attach(ctx, ctx->self, *proc, 0, 0, c, &err);
	if (st == ASP_E_UNSUPPORTED)
		conf_na(ctx,
		        "the registration cannot follow connect from its answer, and "
		        "proc_attach is unsupported: %s",
		        err.message);
	else if (st != ASP_OK)
		conf_fail(ctx, __FILE__, line, "proc_attach to connection %llu: %s: %s",
		          (unsigned long long)*proc, asp_strerror(st), err.message);
	return st == ASP_OK;
}

PROC_CASE(connect_echo_and_half_close)
{
	unsigned port, refused;
	if (!start_server(ctx, f, &port, &refused))
		return;
	COLL(c, 1 << 20);
	uint64_t proc;
	CONF_REQ(ctx, connect_follow(ctx, f, __LINE__, port, c, &proc));
	asp_error err;
	asp_status st = do_write(ctx, proc, "hello, ", 7, false, &err);
	CONF_CHECKF(ctx, st == ASP_OK, "proc_write: %s", err.message);
	st = do_write(ctx, proc, "sandbox\n", 8, true, &err); /* eof: a half-close */
	CONF_CHECKF(ctx, st == ASP_OK, "proc_write eof: %s", err.message);
	END(c);
	CONF_CHECKF(ctx, coll_is(c, 0, "hello, sandbox\n"), "echoed %s", coll_show(ctx, c, 0));
	CONF_CHECKF(ctx, c->eof_seen, "the server's close came as an eof before the exit");
	CONF_CHECKF(ctx, c->ev.exit_code == 0 && !c->ev.signal,
	            "a connection both sides closed exits 0, got %lld %s",
	            (long long)c->ev.exit_code, c->ev.signal ? c->ev.signal : "");
	st = do_write(ctx, proc, "x", 1, false, &err);
	CONF_CHECKF(ctx, st != ASP_OK, "proc_write after the end is refused");
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	CONF_OK(ctx, ctx->ops->proc_list(ctx->self, &lp, &lr, ctx->a, &err), &err);
	char want[64];
	snprintf(want, sizeof want, "connect 127.0.0.1:%u", port);
	bool listed = false;
	for (size_t i = 0; i < lr.procs.count; i++)
		listed |=
		    lr.procs.items[i].proc == proc && !strcmp(lr.procs.items[i].command, want);
	CONF_CHECKF(ctx, listed, "proc_list shows the connection as '%s'", want);
}

PROC_CASE(connect_large_round_trip)
{
	unsigned port, refused;
	if (!start_server(ctx, f, &port, &refused))
		return;
	enum { TOTAL = 4 << 20, PIECE = 256 << 10 };
	COLL(c, TOTAL);
	uint8_t *data = asp_arena_alloc(ctx->a, TOTAL);
	CONF_CHECK(ctx, data != NULL);
	uint32_t x = 2463534242u;
	for (size_t i = 0; i < TOTAL; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		data[i] = (uint8_t)x;
	}
	uint64_t proc;
	CONF_REQ(ctx, connect_follow(ctx, f, __LINE__, port, c, &proc));
	asp_error err;
	for (size_t off = 0; off < TOTAL; off += PIECE) {
		asp_status st = do_write(ctx, proc, data + off, PIECE, off + PIECE == TOTAL, &err);
		CONF_CHECKF(ctx, st == ASP_OK, "proc_write at %zu: %s", off, err.message);
	}
	END(c);
	CONF_CHECKF(
	    ctx, c->total[0] == TOTAL && c->len[0] == TOTAL && memcmp(c->data[0], data, TOTAL) == 0,
	    "4 MiB echoed intact (%llu bytes came)", (unsigned long long)c->total[0]);
}

PROC_CASE(connect_kill_and_errors)
{
	unsigned port, refused;
	if (!start_server(ctx, f, &port, &refused))
		return;
	asp_connect_params p;
	asp_connect_params_init(&p);
	p.port = refused;
	asp_connect_result r;
	asp_error err;
	asp_status st = ctx->ops->connect(ctx->self, &p, &r, ctx->a, &err);
	CONF_CHECKF(ctx, st == ASP_E_IO_ERROR && strstr(err.message, "refused"),
	            "a port nobody listens on: io_error naming the refusal, got %s: %s",
	            asp_strerror(st), err.message);
	p.port = 0;
	st = ctx->ops->connect(ctx->self, &p, &r, ctx->a, &err);
	CONF_CHECKF(ctx, st == ASP_E_INVALID_ARGUMENT, "port 0: invalid_argument, got %s",
	            asp_strerror(st));
	p.port = 65536;
	st = ctx->ops->connect(ctx->self, &p, &r, ctx->a, &err);
	CONF_CHECKF(ctx, st == ASP_E_INVALID_ARGUMENT, "port 65536: invalid_argument, got %s",
	            asp_strerror(st));

	COLL(c, 4096);
	uint64_t proc;
	CONF_REQ(ctx, connect_follow(ctx, f, __LINE__, port, c, &proc));
	st = do_signal(ctx, proc, "INT", &err);
	CONF_CHECKF(ctx, st == ASP_E_INVALID_ARGUMENT,
	            "INT to a connection: invalid_argument, got %s", asp_strerror(st));
	st = do_signal(ctx, proc, "KILL", &err);
	CONF_CHECKF(ctx, st == ASP_OK, "KILL closes a connection: %s", err.message);
	END(c);
	CONF_CHECKF(ctx, c->ev.exit_code == -1 && c->ev.signal && !strcmp(c->ev.signal, "KILL"),
	            "a closed connection's exit names KILL, got %lld %s",
	            (long long)c->ev.exit_code, c->ev.signal ? c->ev.signal : "(none)");
	asp_proc_wait_result wr;
	st = do_wait(ctx, proc, WAIT_MS, &wr, &err);
	CONF_CHECKF(ctx, st == ASP_OK && wr.exit_code == -1, "proc_wait sees the same end");
}

PROC_CASE(watch_changes)
{
	char *root = asp_arena_alloc(ctx->a, strlen(ctx->dir) + 8);
	CONF_CHECK(ctx, root != NULL);
	sprintf(root, "%s/w", ctx->dir);
	asp_error err;
	asp_mkdir_params mp;
	asp_mkdir_params_init(&mp);
	mp.path = root;
	asp_mkdir_result mr;
	CONF_OK(ctx, ctx->ops->mkdir(ctx->self, &mp, &mr, ctx->a, &err), &err);
	asp_watch_params wp;
	asp_watch_params_init(&wp);
	wp.path = root;
	wp.recursive = true;
	asp_watch_result wr;
	asp_status st = ctx->ops->watch(ctx->self, &wp, &wr, ctx->a, &err);
	CONF_CHECKF(ctx, st == ASP_OK, "watch: %s: %s", asp_strerror(st), err.message);
	if (f->nprocs < MAX_PROCS)
		f->procs[f->nprocs++] = wr.proc;
	COLL(c, 0);
	st = do_attach(ctx, ctx->self, wr.proc, 0, 0, c, &err);
	CONF_CHECKF(ctx, st == ASP_OK, "proc_attach to the watch: %s", err.message);

	char path[4][1024], line[1100];
	snprintf(path[0], sizeof path[0], "%s/a.txt", root);
	snprintf(path[1], sizeof path[1], "%s/sub", root);
	snprintf(path[2], sizeof path[2], "%s/sub/b.txt", root);
	snprintf(path[3], sizeof path[3], "%s/c.txt", root);
	asp_write_params w;
	asp_write_params_init(&w);
	w.path = path[0];
	w.data = (asp_bytes){(const uint8_t *)"x", 1};
	asp_write_result wres;
	CONF_OK(ctx, ctx->ops->write(ctx->self, &w, &wres, ctx->a, &err), &err);
	snprintf(line, sizeof line, "created %s", path[0]);
	CONF_CHECKF(ctx, coll_wait_fs(c, line, WAIT_MS), "'%s' among: %s", line, c->fs);
	mp.path = path[1];
	CONF_OK(ctx, ctx->ops->mkdir(ctx->self, &mp, &mr, ctx->a, &err), &err);
	w.path = path[2];
	CONF_OK(ctx, ctx->ops->write(ctx->self, &w, &wres, ctx->a, &err), &err);
	snprintf(line, sizeof line, "created %s", path[2]);
	CONF_CHECKF(ctx, coll_wait_fs(c, line, WAIT_MS), "'%s' (a new subdirectory) among: %s",
	            line, c->fs);
	asp_rename_params rp;
	asp_rename_params_init(&rp);
	rp.from = path[0];
	rp.to = path[3];
	asp_rename_result rr;
	CONF_OK(ctx, ctx->ops->rename(ctx->self, &rp, &rr, ctx->a, &err), &err);
	snprintf(line, sizeof line, "renamed %s", path[3]);
	CONF_CHECKF(ctx, coll_wait_fs(c, line, WAIT_MS), "'%s' among: %s", line, c->fs);
	asp_remove_params dp;
	asp_remove_params_init(&dp);
	dp.path = path[3];
	asp_remove_result dr;
	CONF_OK(ctx, ctx->ops->remove(ctx->self, &dp, &dr, ctx->a, &err), &err);
	snprintf(line, sizeof line, "removed %s", path[3]);
	CONF_CHECKF(ctx, coll_wait_fs(c, line, WAIT_MS), "'%s' among: %s", line, c->fs);
	CONF_OK(ctx, do_signal(ctx, wr.proc, "KILL", &err), &err);
	END(c);
	CONF_CHECKF(ctx, c->ev.signal && !strcmp(c->ev.signal, "KILL"),
	            "a closed watch's exit names KILL");
}

PROC_CASE(watch_bad_input)
{
	asp_watch_params wp;
	asp_watch_params_init(&wp);
	char *missing = asp_arena_alloc(ctx->a, strlen(ctx->dir) + 16);
	CONF_CHECK(ctx, missing != NULL);
	sprintf(missing, "%s/missing", ctx->dir);
	wp.path = missing;
	asp_watch_result wr;
	asp_error err;
	asp_status st = ctx->ops->watch(ctx->self, &wp, &wr, ctx->a, &err);
	CONF_CHECKF(ctx, st == ASP_E_NOT_FOUND, "a missing path: not_found, got %s",
	            asp_strerror(st));
	wp.path = ctx->dir;
	st = ctx->ops->watch(ctx->self, &wp, &wr, ctx->a, &err);
	CONF_CHECKF(ctx, st == ASP_OK, "watch: %s: %s", asp_strerror(st), err.message);
	if (f->nprocs < MAX_PROCS)
		f->procs[f->nprocs++] = wr.proc;
	st = do_write(ctx, wr.proc, "x", 1, false, &err);
	CONF_CHECKF(ctx, st == ASP_E_INVALID_ARGUMENT,
	            "proc_write to a watch: invalid_argument, got %s", asp_strerror(st));
	st = do_signal(ctx, wr.proc, "KILL", &err);
	CONF_CHECKF(ctx, st == ASP_OK, "KILL closes a watch");
	asp_proc_wait_result pw;
	st = do_wait(ctx, wr.proc, WAIT_MS, &pw, &err);
	CONF_CHECKF(ctx, st == ASP_OK && pw.signal && !strcmp(pw.signal, "KILL"),
	            "proc_wait sees the closed watch end");
}
