/*
 * exec over SSH: one exec channel per command, running the wrapper of ssh_quote.c.
 * stdin is fed as the remote window allows while stdout and stderr are drained, so large
 * input and output cannot deadlock. On timeout TERM goes to the command's process group
 * (from a second exec channel, and as the channel's signal request), KILL 2 s later.
 */
#include "ssh_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* exec's timeout: KILL 2 s after TERM (docs/design.md, "Operations"). */
#define KILL_GRACE_NS (2000ull * SSH_NS_PER_MS)
/*
 * After the KILL ran, stop waiting for pipes held by processes that left the group. The
 * kill itself (and the wrapper's report of the group) goes through the login shell,
 * which may take up to connect_timeout_ms to start: that long is waited for it first.
 */
#define GIVE_UP_NS (2000ull * SSH_NS_PER_MS)
/* How long a command's end is awaited before its channel goes (ssh_exit_settle). */
#define SETTLE_NS (5000ull * SSH_NS_PER_MS) /* past the KILL 2 s after a TERM */
/* A kill that found no free channel is tried again this much later. */
#define KILL_RETRY_NS (200ull * SSH_NS_PER_MS)
/* Login-shell noise tolerated before the wrapper's first line. */
#define NOISE_MAX  (64u * 1024)
#define READ_CHUNK (64u * 1024)
#define FIRST_BUF  (16u * 1024)
/* Linux's MAX_ARG_STRLEN: the longest single argument execve takes. */
#define ARG_MAX_ONE (128u * 1024)

struct stream {
	uint8_t *buf;
	size_t len, cap, keep;
	uint64_t total;
	bool eof;
	ssh_marker mk; /* the login shell's noise and the wrapper's line, stripped */
};

static void on_exit_status(ssh_session s, ssh_channel ch, int status, void *ud)
{
	(void)s;
	(void)ch;
	ssh_exit_info *x = ud;
	x->has_status = true;
	x->status = status;
}

static void on_exit_signal(ssh_session s, ssh_channel ch, const char *sig, int core,
                           const char *errmsg, const char *lang, void *ud)
{
	(void)s;
	(void)ch;
	(void)core;
	(void)errmsg;
	(void)lang;
	ssh_exit_info *x = ud;
	x->has_signal = true;
	snprintf(x->signal, sizeof x->signal, "%s", sig ? sig : "");
}

void ssh_exit_watch(ssh_channel ch, struct ssh_channel_callbacks_struct *cb, ssh_exit_info *x)
{
	ssh_callbacks_init(cb);
	cb->userdata = x;
	cb->channel_exit_status_function = on_exit_status;
	cb->channel_exit_signal_function = on_exit_signal;
	ssh_set_channel_callbacks(ch, cb);
}

void ssh_exit_settle(sshc *c, ssh_channel ch, const ssh_exit_info *x)
{
	if (!c->fragile_open || !ch)
		return;
	char sink[4096];
	for (uint64_t dl = ssh_now_ns() + SETTLE_NS;;) {
		for (int e = 0; e < 2; e++) {
			while (ssh_channel_read_nonblocking(ch, sink, sizeof sink, e) > 0)
				;
		}
		if (x->has_status || x->has_signal || !ssh_channel_is_open(ch) ||
		    ssh_channel_is_closed(ch))
			return;
		if (ssh_now_ns() >= dl || !sshc_wait(c, dl))
			return;
	}
}

static void stream_put(struct stream *s, const uint8_t *p, size_t n)
{
	s->total += n;
	size_t room = s->keep > s->len ? s->keep - s->len : 0;
	if (n > room)
		n = room;
	if (n == 0)
		return;
	if (s->len + n > s->cap) {
		size_t ncap = s->cap ? s->cap : FIRST_BUF;
		while (ncap < s->len + n)
			ncap *= 2;
		if (ncap > s->keep)
			ncap = s->keep;
		uint8_t *nb = realloc(s->buf, ncap);
		if (!nb) {
			s->keep = s->len; /* out of memory: keep what we have, count the rest */
			return;
		}
		s->buf = nb;
		s->cap = ncap;
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m)
{
	if (m == 0 || n < m)
		return NULL;
	for (size_t i = 0; i + m <= n; i++) {
		if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0)
			return hay + i;
	}
	return NULL;
}

void ssh_markers(const char *nonce, char out_marker[40], char err_marker[40])
{
	snprintf(out_marker, 40, "\001ASP%s ", nonce);
	snprintf(err_marker, 40, "\001ASP%s\n", nonce);
}

void ssh_marker_feed(ssh_marker *m, const uint8_t *p, size_t n, const char *marker, char *line,
                     size_t line_cap, bool *got_line, ssh_put_fn put, void *ctx)
{
	*got_line = false;
	if (m->marked) {
		put(ctx, p, n);
		return;
	}
	if (sstr_add(&m->pre, (const char *)p, n) < 0) {
		m->marked = true; /* out of memory (pre is gone): pass the rest through */
		return;
	}
	size_t mlen = strlen(marker);
	const char *mk = find_bytes(m->pre.p, m->pre.len, marker, mlen);
	/* stderr's marker is a whole line; stdout's is followed by the rest of its line */
	const char *nl = !mk ? NULL
	                 : marker[mlen - 1] == '\n'
	                     ? mk + mlen - 1
	                     : memchr(mk + mlen, '\n', m->pre.len - (size_t)(mk + mlen - m->pre.p));
	if (!nl) {
		if (m->pre.len > NOISE_MAX) {
			/* no marker in 64 KiB: give up looking, it is all output */
			m->marked = true;
			put(ctx, (const uint8_t *)m->pre.p, m->pre.len);
			sstr_free(&m->pre);
		}
		return;
	}
	size_t ll = nl >= mk + mlen ? (size_t)(nl - (mk + mlen)) : 0;
	if (ll >= line_cap)
		ll = line_cap - 1;
	memcpy(line, mk + mlen, ll);
	line[ll] = '\0';
	m->marked = true;
	*got_line = true;
	size_t rest = m->pre.len - (size_t)(nl + 1 - m->pre.p);
	if (rest)
		put(ctx, (const uint8_t *)nl + 1, rest);
	sstr_free(&m->pre);
}

static void put_stream(void *ctx, const uint8_t *p, size_t n)
{
	stream_put(ctx, p, n);
}

ssh_channel ssh_killer_start(sshc *c, long pid, long pgid, const char *sig, bool kill_later)
{
	char cmd[512];
	char now[96], later[96];
	if (pgid == pid) {
		/* where the wrapper made the group itself (setsid under Dropbear), a kill right
		 * after its report may come before the group exists: then the pid alone */
		snprintf(now, sizeof now, "-- -%ld 2>/dev/null || kill -s %s %ld", pgid, sig, pid);
		snprintf(later, sizeof later, "-- -%ld", pgid);
	} else {
		snprintf(now, sizeof now, "%ld", pid); /* no group of its own: just it */
		snprintf(later, sizeof later, "%ld", pid);
	}
	int n = snprintf(cmd, sizeof cmd, "kill -s %s %s 2>/dev/null", sig, now);
	if (kill_later)
		/* the KILL is scheduled in the sandbox, so it happens even if we disconnect */
		snprintf(cmd + n, sizeof cmd - (size_t)n,
		         "; (sleep 2; kill -s KILL %s) </dev/null >/dev/null 2>&1 &", later);
	return ssh_killer_exec(c, cmd);
}

void ssh_kill_line_open(sshc *c)
{
	/* only builtins, so the line's shell has no child whose exit the server would see */
	static const char line[] = "while IFS= read -r l; do eval \"$l\"; printf '\\006'; done";
	ssh_channel ch = NULL;
	asp_error e;
	uint64_t dl = ssh_now_ns() + 5000ull * SSH_NS_PER_MS;
	if (!c->fragile_open || c->kill_line ||
	    sshc_channel_open(c, SSHC_URGENT, dl, dl, &ch, &e) != ASP_OK)
		return;
	if (sshc_channel_exec(c, ch, line, false, dl, &e) != ASP_OK) {
		sshc_channel_free(c, ch, SSHC_URGENT);
		return;
	}
	c->kill_line = ch;
	c->kill_line_gone = false;
	c->kill_sent = c->kill_acked = 0;
}

/* Counts the line's ACKs; false once it is gone (the channel stays till sshc_close, as
 * callers may still hold it). */
static bool kill_line_poll(sshc *c)
{
	if (c->kill_line_gone)
		return false;
	char buf[256];
	int n;
	while ((n = ssh_channel_read_nonblocking(c->kill_line, buf, sizeof buf, 0)) > 0) {
		for (int i = 0; i < n; i++)
			c->kill_acked += buf[i] == '\006';
	}
	while (ssh_channel_read_nonblocking(c->kill_line, buf, sizeof buf, 1) > 0)
		;
	if (n == SSH_ERROR || ssh_channel_is_eof(c->kill_line) ||
	    !ssh_channel_is_open(c->kill_line) || ssh_channel_is_closed(c->kill_line)) {
		c->kill_line_gone = true;
		return false;
	}
	return true;
}

ssh_channel ssh_killer_exec(sshc *c, const char *cmd)
{
	ssh_channel ch = NULL;
	asp_error e;
	uint64_t dl = ssh_now_ns() + 5000ull * SSH_NS_PER_MS;
	if (c->kill_line && kill_line_poll(c)) {
		size_t n = strlen(cmd);
		if (sshc_channel_write(c, c->kill_line, cmd, n, dl) == n &&
		    sshc_channel_write(c, c->kill_line, "\n", 1, dl) == 1) {
			c->kill_sent++;
			return c->kill_line; /* ssh_killer_reap knows it is not the caller's */
		}
		c->kill_line_gone = true;
	}
	if (sshc_channel_open(c, SSHC_URGENT, dl, dl, &ch, &e) != ASP_OK)
		return NULL;
	if (sshc_channel_exec(c, ch, cmd, false, dl, &e) != ASP_OK) {
		sshc_channel_free(c, ch, SSHC_URGENT);
		return NULL;
	}
	return ch;
}

void ssh_killer_reap(sshc *c, ssh_channel *k, bool force)
{
	if (!*k)
		return;
	if (*k == c->kill_line) {
		/* done when every kill written has been answered (ours among them) */
		if (force || !kill_line_poll(c) || c->kill_acked >= c->kill_sent)
			*k = NULL;
		return;
	}
	char sink[256];
	while (ssh_channel_read_nonblocking(*k, sink, sizeof sink, 0) > 0)
		;
	while (ssh_channel_read_nonblocking(*k, sink, sizeof sink, 1) > 0)
		;
	if (force || ssh_channel_is_closed(*k) || ssh_channel_is_eof(*k)) {
		sshc_channel_free(c, *k, SSHC_URGENT);
		*k = NULL;
	}
}

/* Trims the two streams so that together they fit `budget` (as the local backend). */
static void fit_budget(size_t *a, size_t *b, size_t budget)
{
	if (*a + *b <= budget)
		return;
	size_t half = budget / 2;
	if (*a <= half)
		*b = budget - *a;
	else if (*b <= half)
		*a = budget - *b;
	else
		*a = half, *b = budget - half;
}

static asp_status validate(const char *op, const asp_exec_params *p, asp_error *err)
{
	if ((p->command != NULL) == p->has_argv)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: give exactly one of 'command' and 'argv'", op);
	if (p->has_argv && (p->argv.count == 0 || !p->argv.items[0] || !p->argv.items[0][0]))
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "%s: 'argv' needs at least a program name", op);
	for (size_t i = 0; p->has_argv && i < p->argv.count; i++) {
		if (!p->argv.items[i])
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
			                     "%s: argv[%zu] is missing", op, i);
	}
	for (size_t i = 0; p->has_env && i < p->env.count; i++) {
		const char *k = p->env.items[i].key;
		if (!k || !k[0] || strchr(k, '=') || !p->env.items[i].value)
			return asp_error_set(
			    err, ASP_E_INVALID_ARGUMENT, NULL,
			    "%s: env name '%s' is not a variable name (empty or holds "
			    "'=')",
			    op, k ? k : "");
	}
	return ASP_OK;
}

/* The command line for sshd; *words holds the malloc'd "NAME=VALUE" strings. */
static int build_command(const asp_exec_params *p, bool hold, const char *nonce, sstr *cmd,
                         char ***words, const char ***argvp)
{
	size_t ne = p->has_env ? p->env.count : 0;
	bool plain = true; /* every name is a shell variable name: the wrapper exports them */
	const char *path = NULL;
	for (size_t i = 0; i < ne; i++) {
		/* the wrapper reads its own `s` after the export: that name goes through env(1) */
		plain = plain && ssh_is_shell_name(p->env.items[i].key) &&
		        strcmp(p->env.items[i].key, "s") != 0;
		if (strcmp(p->env.items[i].key, "PATH") == 0)
			path = p->env.items[i].value;
	}
	size_t base = p->has_argv ? p->argv.count : 3;
	size_t extra = plain ? 0 : ne + 2;
	char **w = calloc(ne ? ne : 1, sizeof *w);
	const char **argv = calloc(base + extra, sizeof *argv);
	*words = w;
	*argvp = argv;
	if (!w || !argv)
		return -1;
	for (size_t i = 0; i < ne; i++) {
		size_t kl = strlen(p->env.items[i].key), vl = strlen(p->env.items[i].value);
		w[i] = malloc(kl + vl + 2);
		if (!w[i])
			return -1;
		memcpy(w[i], p->env.items[i].key, kl);
		w[i][kl] = '=';
		memcpy(w[i] + kl + 1, p->env.items[i].value, vl + 1);
	}
	size_t n = 0;
	if (!plain) {
		/* names the shell cannot export go through env(1), which takes any name */
		argv[n++] = "env";
		argv[n++] = "--";
		for (size_t i = 0; i < ne; i++)
			argv[n++] = w[i];
	}
	if (p->has_argv) {
		for (size_t i = 0; i < p->argv.count; i++)
			argv[n++] = p->argv.items[i];
	} else {
		argv[n++] = "/bin/sh";
		argv[n++] = "-c";
		argv[n++] = p->command;
	}
	ssh_wrap wrap = {
	    .nonce = nonce,
	    .cwd = p->cwd,
	    .check_prog = p->has_argv ? p->argv.items[0] : NULL,
	    .check_path = path,
	    .env = plain ? (const char *const *)w : NULL,
	    .env_count = plain ? ne : 0,
	    .argv = argv,
	    .argc = n,
	    .hold = hold,
	};
	return ssh_wrap_build(&wrap, cmd);
}

static void make_nonce(char out[17])
{
	uint8_t b[8];
	if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
		uint64_t t = ssh_now_ns();
		memcpy(b, &t, sizeof b);
	}
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

asp_status ssh_cmd_build(const char *op, const asp_exec_params *p, bool hold, char nonce[17],
                         sstr *cmd, asp_error *err)
{
	asp_status st = validate(op, p, err);
	if (st != ASP_OK)
		return st;
	make_nonce(nonce);
	char **words = NULL;
	const char **argv = NULL;
	size_t ne = p->has_env ? p->env.count : 0;
	int brc = build_command(p, hold, nonce, cmd, &words, &argv);
	free(argv);
	for (size_t i = 0; words && i < ne; i++)
		free(words[i]);
	free(words);
	if (brc < 0) {
		sstr_free(cmd);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: out of memory", op);
	}
	if (cmd->len >= ARG_MAX_ONE) {
		/* sshd passes the line as one argument of `$SHELL -c`: execve refuses more */
		size_t n = cmd->len;
		sstr_free(cmd);
		return asp_error_set(
		    err, ASP_E_TOO_LARGE, NULL,
		    "%s: the quoted command line (argv, env and cwd) is %zu bytes; "
		    "the remote shell takes at most %u in one argument: pass large "
		    "data through stdin or a file",
		    op, n, ARG_MAX_ONE - 1);
	}
	return ASP_OK;
}

asp_status ssh_cmd_refused(const char *op, const asp_exec_params *p, const char *code,
                           asp_error *err)
{
	const char *prog = p->has_argv ? p->argv.items[0] : "/bin/sh";
	if (strcmp(code, "cwd_not_found") == 0)
		return asp_error_errno(err, ENOENT, p->cwd, "%s: cwd %s", op, p->cwd);
	if (strcmp(code, "cwd_not_a_directory") == 0)
		return asp_error_errno(err, ENOTDIR, p->cwd, "%s: cwd %s", op, p->cwd);
	if (strcmp(code, "cwd_permission_denied") == 0)
		return asp_error_errno(err, EACCES, p->cwd, "%s: cwd %s", op, p->cwd);
	if (strcmp(code, "prog_not_found") == 0)
		return asp_error_set(err, ASP_E_NOT_FOUND, prog, "%s %s: program not found%s", op,
		                     prog, strchr(prog, '/') ? "" : " in PATH");
	if (strcmp(code, "prog_permission_denied") == 0)
		return asp_error_errno(err, EACCES, prog, "%s %s: cannot run it", op, prog);
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "%s: the wrapper said '%s'", op, code);
}

asp_status ssh_cmd_no_wrapper(sshc *c, const char *op, int status, const char *why, size_t len,
                              asp_error *err)
{
	if (len > 300)
		len = 300;
	return asp_error_set(err, ASP_E_IO_ERROR, NULL,
	                     "%s: ssh %s: the login shell did not run the ASP wrapper (exit "
	                     "%d): %.*s. The user's login shell must be POSIX (sh, bash, dash, "
	                     "zsh, ksh) and /bin/sh must exist",
	                     op, c->target, status, (int)len, why ? why : "");
}

/* Hands a stream's buffer to the arena as the result's bytes. */
static int give(asp_arena *a, struct stream *s, size_t len, asp_bytes *out)
{
	out->data = NULL;
	out->len = 0;
	if (len == 0) {
		free(s->buf);
		s->buf = NULL;
		return 0;
	}
	uint8_t *b = s->buf;
	s->buf = NULL;
	if (asp_arena_adopt(a, b) < 0)
		return -1;
	out->data = b;
	out->len = len;
	return 0;
}

/* One exec in flight: its channel, what came back, and what the wrapper told us. */
struct run {
	ssh_channel ch;
	struct ssh_channel_callbacks_struct cb;
	ssh_exit_info xi;
	struct stream out, errs;
	char marker_out[40], marker_err[40];
	long pid, pgid;
	bool relayed; /* the wrapper stays as the channel's process (ssh_quote.c) */
	bool tagged;
	char tag_err[64];
	size_t in_off;
	bool eof_sent;
};

asp_status ssh_exec_run(sshc *c, const asp_exec_params *p, size_t budget, asp_exec_result *r,
                        asp_arena *a, asp_error *err)
{
	memset(r, 0, sizeof *r);
	char nonce[17];
	sstr cmd = {0};
	asp_status st = ssh_cmd_build("exec", p, false, nonce, &cmd, err);
	if (st != ASP_OK)
		return st;
	struct run x = {0};
	size_t keep = p->max_output < budget ? (size_t)p->max_output : budget;
	x.out.keep = x.errs.keep = keep;
	ssh_markers(nonce, x.marker_out, x.marker_err);
	ssh_channel killer = NULL, killer2 = NULL;
	uint64_t t0 = ssh_now_ns(), t_end = 0;
	uint64_t term_at = ssh_deadline_ms(p->timeout_ms);
	uint64_t kill_at = SSH_NO_DEADLINE, give_up_at = SSH_NO_DEADLINE;
	uint64_t kill_ran_by = 0, report_by = 0; /* the login shell's bounds (see GIVE_UP_NS) */
	uint64_t retry_at = 0;
	bool timed_out = false, term_sent = false, kill_sent = false;
	uint8_t *buf = malloc(READ_CHUNK);

	sshc_lock(c);
	if (!buf) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "exec: out of memory");
		goto done;
	}
	/* waiting for a free slot is waiting for other commands: bounded by our timeout */
	st = sshc_channel_open(c, SSHC_COMMAND, term_at, SSH_NO_DEADLINE, &x.ch, err);
	if (st == ASP_E_TIMEOUT && ssh_now_ns() >= term_at) {
		/* the timeout ran out before a channel was free: it never started */
		asp_error_clear(err);
		st = ASP_OK;
		r->timed_out = true;
		r->exit_code = -1;
		r->duration_ms = (ssh_now_ns() - t0) / SSH_NS_PER_MS;
		goto done;
	}
	if (st != ASP_OK)
		goto done;
	c->execs++; /* (see sshc.fragile_open) */
	ssh_exit_watch(x.ch, &x.cb, &x.xi);
	/*
	 * The request, then stdin and its EOF at once, without waiting for the answer: the
	 * server takes them in order, and its answer comes before any output. Where channel
	 * opens are fragile (Dropbear), the gate needs the answer first.
	 */
	uint64_t start_by = sshc_setup_deadline(c);
	bool started = false;
	if (c->fragile_open) {
		st = sshc_channel_exec(c, x.ch, cmd.p, false, start_by, err);
		if (st != ASP_OK)
			goto done;
		started = true;
	}

	for (;;) {
		bool progress = false;
		if (!sshc_check(c)) {
			st = sshc_dead_error(c, "exec", err);
			goto done;
		}
		if (!started) {
			int rc = sshc_channel_exec_step(c, x.ch, cmd.p, false, err);
			if (rc == SSH_ERROR) {
				st = ASP_E_TRANSPORT_ERROR;
				goto done;
			}
			started = rc == SSH_OK;
			if (!started && ssh_now_ns() >= start_by) {
				st = asp_error_set(
				    err, ASP_E_TIMEOUT, NULL,
				    "ssh %s: the server did not start the command in time",
				    c->target);
				goto done;
			}
		}
		/* stdin, as far as the remote window allows */
		if (x.in_off < p->stdin_data.len && ssh_channel_is_open(x.ch)) {
			uint32_t win = ssh_channel_window_size(x.ch);
			size_t n = p->stdin_data.len - x.in_off;
			if (n > win)
				n = win;
			if (n > READ_CHUNK)
				n = READ_CHUNK;
			if (n > 0) {
				int w = ssh_channel_write(x.ch, p->stdin_data.data + x.in_off,
				                          (uint32_t)n);
				if (w > 0) {
					x.in_off += (size_t)w;
					progress = true;
				} else if (w < 0) {
					x.in_off =
					    p->stdin_data
					        .len; /* the rest is dropped, as with EPIPE */
				}
			}
		}
		if (!x.eof_sent && x.in_off >= p->stdin_data.len) {
			x.eof_sent = true;
			if (ssh_channel_is_open(x.ch))
				ssh_channel_send_eof(x.ch);
		}
		/* stdout and stderr */
		for (int which = 0; which < 2; which++) {
			struct stream *s = which ? &x.errs : &x.out;
			while (!s->eof) {
				int n = ssh_channel_read_nonblocking(x.ch, buf, READ_CHUNK, which);
				if (n == SSH_EOF) {
					s->eof = true;
					break;
				}
				if (n < 0) {
					if (!sshc_check(c)) {
						st = sshc_dead_error(c, "exec", err);
						goto done;
					}
					s->eof = true; /* the channel went away */
					break;
				}
				if (n == 0)
					break;
				progress = true;
				char line[64];
				bool got;
				ssh_marker_feed(&s->mk, buf, (size_t)n,
				                which ? x.marker_err : x.marker_out, line,
				                sizeof line, &got, put_stream, s);
				if (got && which == 0) {
					x.tagged = true;
					char how[16] = "";
					int k =
					    sscanf(line, "ok %ld %ld %15s", &x.pid, &x.pgid, how);
					x.relayed = strcmp(how, "relay") == 0;
					if (k < 2) {
						x.pid = x.pgid = 0;
						snprintf(x.tag_err, sizeof x.tag_err, "%s",
						         strncmp(line, "err ", 4) == 0 ? line + 4
						                                       : "bad");
					}
				}
			}
		}
		if (x.tag_err[0])
			break; /* the wrapper refused before running anything */
		uint64_t now = ssh_now_ns();
		if (x.out.eof && x.errs.eof &&
		    (x.xi.has_status || x.xi.has_signal || ssh_channel_is_closed(x.ch))) {
			t_end = now;
			break;
		}
		if (!timed_out && now >= term_at) {
			timed_out = true;
			kill_at = now + KILL_GRACE_NS;
			report_by = sshc_setup_deadline(c);
			/* honoured by sshd for non-root; where the wrapper relays, the channel's
			 * process is the wrapper, which ignores it (and would die of a KILL) */
			if (!x.relayed && started)
				ssh_channel_request_send_signal(x.ch, "TERM");
		}
		/* the group is known once the wrapper's line arrived (maybe after the timeout) */
		/* (a kill that found no free channel is tried again a little later) */
		if (timed_out && !term_sent && x.pid > 0 && now >= retry_at) {
			killer = ssh_killer_start(c, x.pid, x.pgid, "TERM", true);
			term_sent = killer != NULL;
			retry_at = now + KILL_RETRY_NS;
		}
		if (timed_out && !kill_sent && x.pid > 0 && now >= kill_at && now >= retry_at) {
			killer2 = ssh_killer_start(c, x.pid, x.pgid, "KILL", false);
			kill_sent = killer2 != NULL || now >= kill_at + GIVE_UP_NS;
			give_up_at = now + GIVE_UP_NS;
			kill_ran_by = sshc_setup_deadline(c);
			retry_at = now + KILL_RETRY_NS;
		}
		if (timed_out && (kill_sent ? now >= give_up_at && (!killer2 || now >= kill_ran_by)
		                            : now >= kill_at + GIVE_UP_NS && now >= report_by)) {
			t_end = now; /* killed and still not closed, or never told us its group */
			break;
		}
		ssh_killer_reap(c, &killer, false);
		bool killing = killer2 != NULL;
		ssh_killer_reap(c, &killer2, false);
		if (killing && !killer2 && give_up_at < now + GIVE_UP_NS)
			give_up_at = now + GIVE_UP_NS; /* the KILL ran just now */
		if (!progress) {
			uint64_t late =
			    kill_at + GIVE_UP_NS > report_by ? kill_at + GIVE_UP_NS : report_by;
			uint64_t until =
			    !timed_out  ? term_at
			    : kill_sent ? (now < give_up_at || !killer2 ? give_up_at : kill_ran_by)
			    : x.pid > 0 ? kill_at
			                : late;
			if (!started && start_by < until)
				until = start_by;
			if (timed_out && x.pid > 0 && (!term_sent || !kill_sent) &&
			    retry_at > now && retry_at < until)
				until = retry_at;
			if (!sshc_wait(c, until)) {
				st = sshc_dead_error(c, "exec", err);
				goto done;
			}
		}
	}
	if (timed_out && !kill_sent && x.pid > 0) {
		/* the command ended at TERM; none of its group may outlive a timeout */
		kill_sent = true;
		ssh_killer_reap(c, &killer2, true);
		killer2 = ssh_killer_start(c, x.pid, x.pgid, "KILL", false);
	}
	/* give the killers a moment to finish so nothing of the group survives us */
	for (uint64_t dl = ssh_now_ns() + 3000ull * SSH_NS_PER_MS; killer || killer2;) {
		ssh_killer_reap(c, &killer, false);
		ssh_killer_reap(c, &killer2, false);
		if ((killer || killer2) && (ssh_now_ns() >= dl || !sshc_wait(c, dl)))
			break;
	}

	if (x.tag_err[0]) {
		st = ssh_cmd_refused("exec", p, x.tag_err, err);
		goto done;
	}
	if (!x.tagged && !timed_out) {
		/* stderr before the marker is the login shell's complaint, if any */
		const char *why = x.errs.mk.pre.p ? x.errs.mk.pre.p : (const char *)x.errs.buf;
		size_t wl = x.errs.mk.pre.p ? x.errs.mk.pre.len : x.errs.len;
		st =
		    ssh_cmd_no_wrapper(c, "exec", x.xi.has_status ? x.xi.status : -1, why, wl, err);
		goto done;
	}
	r->timed_out = timed_out;
	r->duration_ms = (t_end - t0) / SSH_NS_PER_MS;
	r->stdout_bytes = x.out.total;
	r->stderr_bytes = x.errs.total;
	r->exit_code = -1;
	if (x.xi.has_signal) {
		r->signal = asp_arena_strndup(a, x.xi.signal, strlen(x.xi.signal));
		if (!r->signal)
			st = ASP_E_INTERNAL;
	} else if (x.xi.has_status) {
		r->exit_code = x.xi.status;
	}
	size_t lo = x.out.len, le = x.errs.len;
	fit_budget(&lo, &le, budget);
	if (give(a, &x.out, lo, &r->stdout_data) < 0 || give(a, &x.errs, le, &r->stderr_data) < 0)
		st = ASP_E_INTERNAL;
	if (st != ASP_OK)
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "exec: out of memory");
done:
	ssh_killer_reap(c, &killer, true);
	ssh_killer_reap(c, &killer2, true);
	if (x.ch) {
		ssh_exit_settle(c, x.ch, &x.xi);
		ssh_remove_channel_callbacks(x.ch, &x.cb);
		sshc_channel_free(c, x.ch, SSHC_COMMAND);
		c->execs--;
	}
	sshc_unlock(c);
	free(buf);
	sstr_free(&cmd);
	sstr_free(&x.out.mk.pre);
	sstr_free(&x.errs.mk.pre);
	free(x.out.buf);
	free(x.errs.buf);
	return st;
}
