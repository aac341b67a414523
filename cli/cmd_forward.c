/*
 * asp forward [LOCAL_ADDR:]PORT[:REMOTE_PORT]: a local TCP port whose connections reach a
 * port on the sandbox's own localhost through connect (docs/design.md, "Ports and
 * changes"), as ssh -L does. One relay per accepted connection: a thread reads the local
 * socket and sends with proc_write (each write waits for its answer, so a sandbox peer
 * that reads slowly slows the local sender); what the sandbox peer sends arrives in
 * on_output and is written to the local socket, blocking, so a local reader that stalls
 * stops the client reading (bounded by the socket's buffer, never a queue of ours).
 * INT, TERM and HUP close every relayed connection and end the command.
 */
#include "cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { OPT_HOST = CLI_OPT_FIRST_PRIVATE };

/* Bytes per proc_write, at most: each waits for its answer, so a bulk upload pays one round
 * trip per chunk; a read takes what the socket holds, so small requests stay small. */
#define READ_CHUNK     (1024u * 1024u)
#define CLOSE_WAIT_MS  10000 /* after Ctrl-C, each relay's exit at most this long */
#define ADDR_TEXT      (INET6_ADDRSTRLEN + 8)
#define LISTEN_BACKLOG 128

typedef struct fwd fwd;

typedef struct relay {
	fwd *f;
	struct relay *next;
	int fd;        /* the local connection; closed by the relay's thread at its end */
	uint64_t proc; /* 0 until connected */
	char peer[ADDR_TEXT];

	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool ended;         /* on_exit or on_lost came */
	atomic_bool broken; /* writing to the local socket failed */
} relay;

struct fwd {
	cli *c;
	asp_client *client;
	const char *host; /* in the sandbox */
	uint64_t port;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* a relay ended */
	relay *relays;
	unsigned live;
	atomic_bool stopping;
	/*
	 * Relay threads that ended, to join: joined, not detached, so that the process ends
	 * only after each thread's own end (a library's per-thread state, such as
	 * OpenSSL's random generator for the SSH transport, is freed then).
	 */
	pthread_t *ended;
	size_t nended, cap_ended;
};

static int stop_pipe[2] = {-1, -1};

/* ---- the callbacks (the client's reading thread: they must not call the client) -- */

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	(void)stream;
	(void)offset;
	relay *r = user;
	if (atomic_load(&r->broken))
		return;
	while (len > 0) {
		ssize_t n = send(r->fd, data, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* The local side is gone: the relay's thread closes the sandbox side. */
			atomic_store(&r->broken, true);
			shutdown(r->fd, SHUT_RDWR);
			return;
		}
		data += n;
		len -= (size_t)n;
	}
}

static void on_eof(void *user, uint64_t proc, asp_stream stream)
{
	(void)proc;
	(void)stream;
	relay *r = user;
	shutdown(r->fd, SHUT_WR); /* the sandbox peer is done sending: so are we, here */
}

static void relay_ended(relay *r, const char *why)
{
	if (why && !atomic_load(&r->f->stopping))
		cli_warn("forward: connection from %s: %s", r->peer, why);
	/* Before `ended`: once that is set the relay's thread may close the fd. */
	shutdown(r->fd, why ? SHUT_RDWR : SHUT_WR); /* wakes the reader on a failure */
	pthread_mutex_lock(&r->mu);
	r->ended = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	relay *r = user;
	relay_ended(r, ev->error);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	relay *r = user;
	relay_ended(r, err->message[0] ? err->message : "the connection to the sandbox was lost");
}

/* ---- one relay --------------------------------------------------------------------- */

static void close_remote(relay *r)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return;
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = r->proc;
	p.signal = "KILL";
	asp_proc_signal_result res;
	asp_error err;
	asp_proc_signal(r->f->client, &p, &res, a, &err); /* finished already: a no-op */
	asp_arena_free(a);
}

/* Local bytes to the sandbox until local EOF, a failure or a stop. */
static void pump_local(relay *r)
{
	uint8_t *buf = malloc(READ_CHUNK);
	asp_arena *a = asp_arena_new();
	bool kill = !buf || !a;
	while (!kill) {
		ssize_t n = read(r->fd, buf, READ_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (atomic_load(&r->f->stopping) || atomic_load(&r->broken) || n < 0) {
			kill = true;
			break;
		}
		pthread_mutex_lock(&r->mu);
		bool ended = r->ended;
		pthread_mutex_unlock(&r->mu);
		if (ended)
			break;
		asp_proc_write_params p;
		asp_proc_write_params_init(&p);
		p.proc = r->proc;
		p.data = (asp_bytes){buf, (size_t)n};
		p.eof = n == 0;
		asp_proc_write_result res;
		asp_error err;
		asp_arena_reset(a);
		if (asp_proc_write(r->f->client, &p, &res, a, &err) != ASP_OK) {
			pthread_mutex_lock(&r->mu);
			ended = r->ended;
			pthread_mutex_unlock(&r->mu);
			if (!ended && !atomic_load(&r->f->stopping))
				cli_warn("forward: connection from %s: sending: %s: %s", r->peer,
				         asp_strerror(err.code), err.message);
			kill = true;
			break;
		}
		if (n == 0)
			break;
	}
	free(buf);
	asp_arena_free(a);
	if (kill)
		close_remote(r);
}

static void *relay_main(void *arg)
{
	relay *r = arg;
	fwd *f = r->f;
	asp_connect_params p;
	asp_connect_params_init(&p);
	p.host = f->host;
	p.port = f->port;
	p.tag = "forward";
	static const asp_proc_callbacks cb = {
	    .on_output = on_output,
	    .on_exit = on_exit_cb,
	    .on_lost = on_lost,
	    .on_eof = on_eof,
	};
	asp_error err;
	asp_status st = asp_connect_start(f->client, &p, &cb, r, &r->proc, &err);
	if (st != ASP_OK) {
		cli_warn("forward: connection from %s: %s: %s", r->peer, asp_strerror(st),
		         err.message);
	} else {
		pump_local(r);
		/* The exit comes once both directions ended, or after the KILL. */
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += CLOSE_WAIT_MS / 1000;
		pthread_mutex_lock(&r->mu);
		bool timed_out = false;
		while (!r->ended && !timed_out) {
			if (atomic_load(&f->stopping)) /* KILL sent: its exit is near */
				timed_out =
				    pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT;
			else
				pthread_cond_wait(&r->cv, &r->mu);
		}
		pthread_mutex_unlock(&r->mu);
		if (!r->ended)
			asp_proc_detach(f->client, r->proc);
	}
	pthread_mutex_lock(&f->mu);
	relay **pp = &f->relays;
	while (*pp != r)
		pp = &(*pp)->next;
	*pp = r->next;
	f->live--;
	if (f->nended == f->cap_ended) {
		size_t cap = f->cap_ended ? f->cap_ended * 2 : 16;
		pthread_t *v = realloc(f->ended, cap * sizeof *v);
		if (v) {
			f->ended = v;
			f->cap_ended = cap;
		}
	}
	if (f->nended < f->cap_ended)
		f->ended[f->nended++] = pthread_self();
	else
		pthread_detach(pthread_self()); /* out of memory: nobody joins it */
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	close(r->fd);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
	return NULL;
}

/* ---- the listener ------------------------------------------------------------------ */

static void addr_text(const struct sockaddr *sa, char *out, size_t cap)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		port = ntohs(in->sin_port);
		snprintf(out, cap, "%s:%u", host, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		port = ntohs(in6->sin6_port);
		snprintf(out, cap, "[%s]:%u", host, port);
	} else {
		snprintf(out, cap, "?");
	}
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

static int parse_port(cli *c, const char *s, bool zero_ok, uint64_t *out)
{
	if (!all_digits(s) || strlen(s) > 5 || atoi(s) > 65535 || (!zero_ok && atoi(s) == 0))
		return cli_usage(c, "'%s' is not a port (%s to 65535)", s, zero_ok ? "0" : "1"), -1;
	*out = (uint64_t)atoi(s);
	return 0;
}

/*
 * [LOCAL_ADDR:]PORT[:REMOTE_PORT], LOCAL_ADDR an IPv4 address, a name or [IPv6]. Two parts
 * are PORT:REMOTE_PORT when the first is a number, else LOCAL_ADDR:PORT. `spec` is split
 * in place.
 */
static int parse_spec(cli *c, char *spec, const char **addr, uint64_t *lport, uint64_t *rport)
{
	*addr = "127.0.0.1";
	char *rest = spec;
	if (spec[0] == '[') {
		char *close = strchr(spec, ']');
		if (!close || close[1] != ':')
			return cli_usage(c, "'%s': an IPv6 address is [ADDR]:PORT", spec), -1;
		*close = '\0';
		*addr = spec + 1;
		rest = close + 2;
	}
	char *parts[3];
	int n = 0;
	for (char *tok = rest; n < 3; n++) {
		parts[n] = tok;
		char *colon = strchr(tok, ':');
		if (!colon) {
			n++;
			break;
		}
		*colon = '\0';
		tok = colon + 1;
		if (n == 2)
			return cli_usage(c, "too many ':' in the forward (want "
			                    "[LOCAL_ADDR:]PORT[:REMOTE_PORT])"),
			       -1;
	}
	const char *lp = NULL, *rp = NULL;
	if (spec[0] == '[') {
		if (n > 2)
			return cli_usage(c, "too many ':' after [ADDR]"), -1;
		lp = parts[0];
		rp = n == 2 ? parts[1] : NULL;
	} else if (n == 3) {
		*addr = parts[0];
		lp = parts[1];
		rp = parts[2];
	} else if (n == 2 && all_digits(parts[0])) {
		lp = parts[0];
		rp = parts[1];
	} else if (n == 2) {
		*addr = parts[0];
		lp = parts[1];
	} else {
		lp = parts[0];
	}
	if (parse_port(c, lp, true, lport) < 0)
		return -1;
	if (!rp && *lport == 0)
		return cli_usage(c, "local port 0 (any free port) needs REMOTE_PORT: 0:PORT"), -1;
	if (parse_port(c, rp ? rp : lp, false, rport) < 0)
		return -1;
	return 0;
}

/* A listening socket on addr:port, or -1 after reporting why. */
static int listen_on(cli *c, const char *addr, uint64_t port, char *bound, size_t cap)
{
	char service[8];
	snprintf(service, sizeof service, "%u", (unsigned)port);
	struct addrinfo hints = {0}, *res = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	int g = getaddrinfo(addr, service, &hints, &res);
	if (g != 0) {
		asp_error err;
		asp_error_set(&err, ASP_E_NOT_FOUND, NULL, "cannot resolve '%s': %s", addr,
		              gai_strerror(g));
		cli_fail(c, &err, "forward: listen");
		return -1;
	}
	int fd = -1, e = 0;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
			e = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		cli_fail_errno(c, e, "forward: listen on %s port %u", addr, (unsigned)port);
		return -1;
	}
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &len);
	addr_text((struct sockaddr *)&ss, bound, cap);
	return fd;
}

/* Whether hello lists the op connect; false after reporting why not. */
static bool has_connect(cli *c, asp_client *client)
{
	asp_arena *a = cli_arena(c);
	if (!a)
		return false;
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	asp_hello_result hr;
	asp_error err;
	bool ok = false;
	if (asp_hello(client, &hp, &hr, a, &err) != ASP_OK) {
		cli_fail(c, &err, "forward: hello");
	} else {
		/* The op, not the feature: hello over HTTP's POST announces no notifications,
		 * while the connections themselves are followed over its WebSocket. */
		for (size_t i = 0; i < hr.ops.count; i++)
			if (hr.ops.items[i] && strcmp(hr.ops.items[i], "connect") == 0)
				ok = true;
		if (!ok) {
			asp_error_set(&err, ASP_E_UNSUPPORTED, NULL,
			              "the sandbox's responder (%s) cannot open connections: its "
			              "hello lists no op connect; use an asp-agent of protocol 2 "
			              "(stdio, HTTP or SSH agent mode)",
			              hr.agent ? hr.agent : "?");
			cli_fail(c, &err, "forward");
		}
	}
	asp_arena_free(a);
	return ok;
}

/* Joins the relay threads that ended (each has left f->relays already). */
static void join_ended(fwd *f)
{
	pthread_mutex_lock(&f->mu);
	pthread_t *v = f->ended;
	size_t n = f->nended;
	f->ended = NULL;
	f->nended = f->cap_ended = 0;
	pthread_mutex_unlock(&f->mu);
	for (size_t i = 0; i < n; i++)
		pthread_join(v[i], NULL);
	free(v);
}

static void accept_one(fwd *f, int lfd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
	if (fd < 0)
		return; /* EAGAIN, a reset before accept, EMFILE: the next one may do */
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	relay *r = calloc(1, sizeof *r);
	if (!r) {
		close(fd);
		return;
	}
	r->f = f;
	r->fd = fd;
	addr_text((struct sockaddr *)&ss, r->peer, sizeof r->peer);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	pthread_mutex_lock(&f->mu);
	r->next = f->relays;
	f->relays = r;
	f->live++;
	pthread_mutex_unlock(&f->mu);
	join_ended(f);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 256u * 1024u);
	pthread_t t;
	int e = pthread_create(&t, &at, relay_main, r);
	pthread_attr_destroy(&at);
	if (e) {
		cli_warn("forward: connection from %s: cannot start a thread: %s", r->peer,
		         strerror(e));
		pthread_mutex_lock(&f->mu);
		f->relays = r->next; /* still first: only this thread adds */
		f->live--;
		pthread_mutex_unlock(&f->mu);
		close(fd);
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		free(r);
	}
}

/* Closes every relayed connection and waits for their threads. */
static void stop_all(fwd *f)
{
	atomic_store(&f->stopping, true);
	pthread_mutex_lock(&f->mu);
	for (relay *r = f->relays; r; r = r->next)
		shutdown(r->fd, SHUT_RDWR); /* the reader wakes, sends KILL, waits for exit */
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += CLOSE_WAIT_MS / 1000 + 5;
	while (f->live > 0 && pthread_cond_timedwait(&f->cv, &f->mu, &dl) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&f->mu);
}

int cmd_forward(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"host", required_argument, NULL, OPT_HOST},
	    {NULL, 0, NULL, 0},
	};
	fwd f = {.c = c, .host = "127.0.0.1"};
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case OPT_HOST: f.host = optarg; break;
		default: return c->fail_code;
		}
	}
	if (optind + 1 != argc)
		return cli_usage(c, "give one [LOCAL_ADDR:]PORT[:REMOTE_PORT]");
	const char *addr;
	uint64_t lport;
	if (parse_spec(c, argv[optind], &addr, &lport, &f.port) < 0)
		return c->fail_code;
	asp_client *client = cli_client(c);
	if (!client || !has_connect(c, client))
		return c->fail_code;
	f.client = client;
	char bound[ADDR_TEXT];
	int lfd = listen_on(c, addr, lport, bound, sizeof bound);
	if (lfd < 0)
		return c->fail_code;
	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		close(lfd);
		return cli_fail_errno(c, errno, "forward");
	}
	pthread_mutex_init(&f.mu, NULL);
	pthread_cond_init(&f.cv, NULL);
	struct sigaction old[CLI_STOP_SIGNALS];
	cli_stop_signals_catch(stop_pipe[1], old);
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "listen");
		jw_str(&w, bound);
		jw_key(&w, "host");
		jw_str(&w, f.host);
		jw_key(&w, "port");
		jw_uint(&w, f.port);
		jw_obj_end(&w);
		jw_end(&w);
	} else {
		printf("forwarding %s to %s port %u in the sandbox (Ctrl-C ends)\n", bound, f.host,
		       (unsigned)f.port);
	}
	fflush(stdout);
	for (;;) {
		struct pollfd pfd[2] = {{lfd, POLLIN, 0}, {stop_pipe[0], POLLIN, 0}};
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		if (pfd[0].revents)
			accept_one(&f, lfd);
	}
	close(lfd);
	stop_all(&f);
	cli_stop_signals_restore(old);
	pthread_mutex_lock(&f.mu);
	unsigned left = f.live;
	pthread_mutex_unlock(&f.mu);
	if (left) {
		/* Threads still inside the client: leave the process to end them. */
		cli_warn("forward: %u connections did not close in time", left);
		return cli_finish(c, c->fail_code);
	}
	join_ended(&f);
	pthread_cond_destroy(&f.cv);
	pthread_mutex_destroy(&f.mu);
	return cli_finish(c, CLI_EXIT_OK);
}
