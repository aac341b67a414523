/*
 * A third-party transport for libasp, written against the installed headers only: ASP
 * frames over a Unix socket. It registers itself as an application transport kind and
 * hands the socket to the core as a byte stream (asp_stream_channel_new); the core's RPC
 * engine does the rest (ids, pipelining, deadlines, notifications). serve_unix.c is the
 * other end: a listener that runs `asp-agent --stdio` on each connection.
 *
 *   cc -o asp_unix asp_unix.c $(pkg-config --cflags --libs asp)
 *   ./asp_unix /tmp/asp.sock
 *
 * A socket is a file descriptor, so asp_fd_channel_new(fd, fd, ASP_FDCH_OWN_FDS, ...)
 * would do too (and adds sendv); the byte callbacks are shown because they also fit a
 * stream that is not an fd (TLS, a vendor library's connection).
 */
#define _POSIX_C_SOURCE 200809L

#include <asp/asp.h>
#include <asp/channel.h>
#include <asp/transport.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define ASP_TRANSPORT_UNIX ASP_TRANSPORT_USER_MIN
/* How long the first hello may take before the open gives up. */
#define HELLO_TIMEOUT_MS 10000

/* ---- the byte stream: one connected socket ---------------------------------------- */

typedef struct unix_stream {
	int fd;
} unix_stream;

static ssize_t us_read(void *ctx, void *buf, size_t n)
{
	return read(((unix_stream *)ctx)->fd, buf, n);
}

static ssize_t us_write(void *ctx, const void *buf, size_t n)
{
	return send(((unix_stream *)ctx)->fd, buf, n, MSG_NOSIGNAL); /* no SIGPIPE */
}

/* Wakes a reader blocked in read(): the core calls it from any thread. */
static void us_close(void *ctx)
{
	shutdown(((unix_stream *)ctx)->fd, SHUT_RDWR);
}

static void us_free(void *ctx)
{
	close(((unix_stream *)ctx)->fd);
	free(ctx);
}

static const asp_stream_ops unix_stream_ops = {
    .read = us_read,
    .write = us_write,
    .close = us_close,
    .free = us_free,
};

/* ---- the transport ---------------------------------------------------------------- */

static asp_status unix_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                            asp_error *err)
{
	const char *path = cfg->target;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (!path || strlen(path) >= sizeof sa.sun_path)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "unix transport: the view's target must be a socket path "
		                     "shorter than %zu bytes",
		                     sizeof sa.sun_path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		asp_error_errno(err, e, path, "unix transport: connecting to %s", path);
		err->code = ASP_E_TRANSPORT_ERROR; /* the client reconnects on transport_error */
		return err->code;
	}
	unix_stream *us = malloc(sizeof *us);
	if (!us) {
		close(fd);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	us->fd = fd;
	asp_channel *ch;
	asp_status st = asp_stream_channel_new(&unix_stream_ops, us, &ch, err);
	if (st) { /* the stream stays ours on failure */
		us_free(us);
		return st;
	}
	asp_rpc *rpc;
	st = asp_rpc_new(ch, 0, &rpc, err); /* takes the channel, even on failure */
	if (st)
		return st;
	asp_rpc_set_call_timeout(rpc, cfg->call_timeout_ms);

	/* One hello with a deadline: a socket that is not an ASP responder fails here. */
	asp_arena *a = asp_arena_new();
	if (!a) {
		asp_rpc_free(rpc);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "asp-unix-example/1";
	hp.has_protocol = true;
	hp.protocol = ASP_PROTOCOL;
	asp_hello_result hr;
	st = asp_rpc_call(rpc, ASP_OP_HELLO, &hp, &hr, a, HELLO_TIMEOUT_MS, err);
	asp_arena_free(a);
	if (st) {
		asp_rpc_free(rpc);
		return st;
	}
	*ops = &asp_rpc_ops; /* every op is asp_rpc_invoke on `rpc` */
	*self = rpc;
	return ASP_OK;
}

static void unix_abort(void *self)
{
	asp_rpc_close(self);
}

static void unix_close(void *self)
{
	asp_rpc_free(self);
}

static bool unix_alive(void *self)
{
	return asp_rpc_alive(self);
}

static const asp_transport asp_transport_unix = {
    .kind = ASP_TRANSPORT_UNIX,
    .name = "unix",
    .open = unix_open,
    .abort = unix_abort,
    .close = unix_close,
    .alive = unix_alive,
    .subscribe = asp_rpc_subscribe, /* spawn_start / proc_attach_start stream too */
    .unsubscribe = asp_rpc_unsubscribe,
};

/* ---- a short demonstration: exec, write, read ------------------------------------- */

static int fail(const char *what, const asp_error *err)
{
	fprintf(stderr, "asp_unix: %s: %s: %s\n", what, asp_strerror(err->code), err->message);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: asp_unix SOCKET\n");
		return 2;
	}
	asp_error err;
	if (asp_transport_register(&asp_transport_unix, &err))
		return fail("register", &err);
	asp_config_view view = {.transport = ASP_TRANSPORT_UNIX, .target = argv[1]};
	asp_client *c;
	if (asp_client_open_view(&view, &c, &err))
		return fail("open", &err);
	asp_arena *a = asp_arena_new();
	int rc = 1;

	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.command = "echo hello over a unix socket";
	asp_exec_result er;
	if (asp_exec(c, &ep, &er, a, &err)) {
		rc = fail("exec", &err);
		goto out;
	}
	printf("exec: exit %lld, stdout: %.*s", (long long)er.exit_code, (int)er.stdout_data.len,
	       (const char *)er.stdout_data.data);

	char path[64];
	snprintf(path, sizeof path, "/tmp/asp-unix-example-%ld", (long)getpid());
	static const char text[] = "written and read back through the seam\n";
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = path;
	wp.data = (asp_bytes){(const uint8_t *)text, sizeof text - 1};
	asp_write_result wr;
	if (asp_write(c, &wp, &wr, a, &err)) {
		rc = fail("write", &err);
		goto out;
	}
	asp_read_params rp;
	asp_read_params_init(&rp);
	rp.path = path;
	asp_read_result rr;
	if (asp_read(c, &rp, &rr, a, &err)) {
		rc = fail("read", &err);
		goto out;
	}
	printf("read: %.*s", (int)rr.data.len, (const char *)rr.data.data);
	asp_remove_params xp;
	asp_remove_params_init(&xp);
	xp.path = path;
	asp_remove_result xr;
	asp_remove(c, &xp, &xr, a, NULL);
	rc = rr.data.len == sizeof text - 1 && !memcmp(rr.data.data, text, rr.data.len) ? 0 : 1;
out:
	asp_arena_free(a);
	asp_client_free(c);
	return rc;
}
