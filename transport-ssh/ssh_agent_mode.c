/*
 * Agent mode: `<agent> --stdio` on one exec channel, and the core's RPC engine speaking
 * the stdio framing (docs/design.md, "Wire format") through it, every op pipelined on
 * that channel. This file is the frame channel over an SSH channel: reads wait on the
 * connection's condition variable (the pump brings the bytes), writes go out under the
 * session lock.
 */
#include "ssh_internal.h"

#include "asp/channel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#ifndef ASP_VERSION
#define ASP_VERSION "dev"
#endif

#define ERR_RING     4096
#define ERR_QUOTE    500
#define EXIT_WAIT_NS (500ull * SSH_NS_PER_MS)
#define MISSING_MARK "ASP-AGENT-MISSING"
#define MAX_NOISE    (64 * 1024)

struct ssh_agent_link {
	sshc *c;
	ssh_channel ch;
	struct ssh_channel_callbacks_struct cb;
	ssh_exit_info exit; /* under c->mu: the agent's exit-status / exit-signal */
	atomic_bool closed;
	const char *path;
	asp_rpc *rpc;
	size_t err_total; /* under c->mu: stderr bytes seen; the ring keeps the last ones */
	char ring[ERR_RING];
	uint8_t hdr[4];
	uint8_t *rbuf; /* under c->mu: stdout taken from libssh, not yet read (link_read) */
	size_t roff, rlen, rcap;
	uint8_t *ebuf; /* under c->mu: stderr as taken from libssh */
	size_t ecap;
	bool synced;     /* the marker line before the agent's first byte was seen */
	char marker[40]; /* "\1ASPAGENT<nonce>\n": what the login shell printed first is noise */
	size_t matched;  /* bytes of the marker matched so far */
	size_t noise;    /* bytes skipped before it */
	/*
	 * The exec request went out without waiting for its answer (the first frames follow
	 * it at once); until `started`, the reader looks for the answer, `cmd` its command.
	 */
	bool started;
	char *cmd;
};

/* Under the lock: the agent's stderr into the ring (its logs; they explain a death). */
static void drain_stderr(ssh_agent_link *l)
{
	/* all of it at once, as stdout (link_read): each read may widen the shared window */
	int n = l->ch ? sshc_channel_take(l->ch, 1, 0, &l->ebuf, &l->ecap) : 0;
	for (int i = 0; i < n; i++)
		l->ring[(l->err_total + (size_t)i) % ERR_RING] = (char)l->ebuf[i];
	if (n > 0)
		l->err_total += (size_t)n;
}

/* The last `max` bytes of stderr, one line per line, for a message. */
static void stderr_tail(const ssh_agent_link *l, char *out, size_t cap, size_t max)
{
	size_t have = l->err_total < ERR_RING ? l->err_total : ERR_RING;
	if (have > max)
		have = max;
	if (have >= cap)
		have = cap - 1;
	size_t start = l->err_total - have, o = 0;
	for (size_t i = 0; i < have; i++) {
		char ch = l->ring[(start + i) % ERR_RING];
		out[o++] = ch == '\n' ? ' ' : ch;
	}
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

static bool missing(const ssh_agent_link *l)
{
	char tail[ERR_RING + 1];
	stderr_tail(l, tail, sizeof tail, ERR_RING);
	return strstr(tail, MISSING_MARK) != NULL;
}

static asp_status ch_send(void *base, const uint8_t *frame, size_t len, asp_error *err)
{
	ssh_agent_link *l = (ssh_agent_link *)base;
	if (atomic_load(&l->closed))
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "agent channel closed");
	sshc_lock(l->c);
	size_t w = sshc_channel_write(l->c, l->ch, frame, len, SSH_NO_DEADLINE);
	asp_status st = ASP_OK;
	if (w != len)
		st = atomic_load(&l->c->dead)
		         ? sshc_dead_error(l->c, "agent", err)
		         : asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                         "ssh %s: the asp-agent channel closed", l->c->target);
	if (st == ASP_OK)
		sshc_unlock_after_write(l->c);
	else
		sshc_unlock(l->c);
	return st;
}

/*
 * Under the lock: bytes of stdout into `dst`, from the link's buffer or else straight from
 * libssh. Every read from libssh takes all it holds (sshc_channel_take says why), into
 * `dst` when that fits, else into the link's buffer, which is read empty before libssh is
 * read again. So a slow RPC reader (a follower's callback runs on it) leaves libssh
 * holding at most a window. >0 bytes, 0 nothing yet, SSH_EOF, SSH_ERROR.
 */
static int link_read(ssh_agent_link *l, uint8_t *dst, size_t want)
{
	if (l->rlen == l->roff) {
		int n = ssh_channel_poll(l->ch, 0);
		if (n <= 0)
			return n;
		if ((size_t)n <= want) /* a large message: no copy */
			return ssh_channel_read_nonblocking(l->ch, dst, (uint32_t)n, 0);
		n = sshc_channel_take(l->ch, 0, SSHC_BULK_WINDOW, &l->rbuf, &l->rcap);
		if (n <= 0)
			return n;
		l->roff = 0;
		l->rlen = (size_t)n;
	}
	size_t k = l->rlen - l->roff < want ? l->rlen - l->roff : want;
	memcpy(dst, l->rbuf + l->roff, k);
	l->roff += k;
	return (int)k;
}

/* Under the lock: reads exactly len bytes. 1 done, 0 EOF before any byte, -1 failed. */
static int read_exact(ssh_agent_link *l, uint8_t *dst, size_t len, bool boundary, asp_error *err)
{
	size_t got = 0;
	while (got < len) {
		if (atomic_load(&l->closed)) {
			asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "agent channel closed");
			return -1;
		}
		if (!l->started) {
			int rc = sshc_channel_exec_step(l->c, l->ch, l->cmd, false, err);
			if (rc == SSH_ERROR)
				return -1;
			l->started = rc == SSH_OK;
		}
		size_t want = len - got;
		int n = link_read(l, dst + got, want > 1u << 30 ? 1u << 30 : want);
		drain_stderr(l);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n == SSH_EOF) {
			if (boundary && got == 0)
				return 0;
			asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
			              "ssh %s: asp-agent's output ended inside a message",
			              l->c->target);
			return -1;
		}
		if (n < 0 || !sshc_check(l->c)) {
			sshc_dead_error(l->c, "agent", err);
			return -1;
		}
		if (!sshc_wait(l->c, SSH_NO_DEADLINE) && !atomic_load(&l->closed)) {
			sshc_dead_error(l->c, "agent", err);
			return -1;
		}
	}
	return 1;
}

/*
 * Under the lock: skips what the login shell printed (a noisy ~/.bashrc) up to the
 * marker line the agent command prints before exec. 1 found, 0 EOF first, -1 failed.
 */
static int sync_marker(ssh_agent_link *l, asp_error *err)
{
	size_t mlen = strlen(l->marker);
	while (l->matched < mlen) {
		uint8_t b;
		int rc = read_exact(l, &b, 1, true, err);
		if (rc <= 0)
			return rc;
		if (b == (uint8_t)l->marker[l->matched]) {
			l->matched++;
		} else {
			/* the marker starts with \1 and has no repeats: restart, this byte may
			 * begin it */
			l->noise += l->matched + 1;
			l->matched = b == (uint8_t)l->marker[0] ? 1 : 0;
			if (l->matched)
				l->noise--;
		}
		if (l->noise > MAX_NOISE) {
			asp_error_set(
			    err, ASP_E_PROTOCOL_ERROR, NULL,
			    "ssh %s: more than %d bytes before asp-agent started: does the "
			    "login shell's startup print that much?",
			    l->c->target, MAX_NOISE);
			return -1;
		}
	}
	l->synced = true;
	return 1;
}

static asp_status ch_recv(void *base, size_t max, uint8_t **msg, size_t *len, asp_error *err)
{
	ssh_agent_link *l = (ssh_agent_link *)base;
	*msg = NULL;
	*len = 0;
	sshc_lock(l->c);
	asp_status st = ASP_OK;
	int rc = l->synced ? 1 : sync_marker(l, err);
	if (rc <= 0) {
		st = rc == 0 ? ASP_OK : err->code;
		goto out;
	}
	rc = read_exact(l, l->hdr, 4, true, err);
	if (rc <= 0) {
		st = rc == 0 ? ASP_OK : ASP_E_TRANSPORT_ERROR;
		goto out;
	}
	size_t n =
	    (size_t)l->hdr[0] << 24 | (size_t)l->hdr[1] << 16 | (size_t)l->hdr[2] << 8 | l->hdr[3];

	if (n > max) {
		st = asp_error_set(err, ASP_E_PROTOCOL_ERROR, NULL,
		                   "ssh %s: asp-agent sent a %zu-byte message (limit %zu)",
		                   l->c->target, n, max);
		goto out;
	}
	uint8_t *m = malloc(n ? n : 1);
	if (!m) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		goto out;
	}
	rc = read_exact(l, m, n, false, err);
	if (rc <= 0) {
		free(m);
		st = ASP_E_TRANSPORT_ERROR;
		goto out;
	}
	*msg = m;
	*len = n;
out:
	sshc_unlock(l->c);
	return st;
}

static void ch_explain(void *base, asp_error *err)
{
	ssh_agent_link *l = (ssh_agent_link *)base;
	sshc *c = l->c;
	sshc_lock(c);
	/* the exit status follows the EOF closely: give it a moment */
	uint64_t dl = ssh_now_ns() + EXIT_WAIT_NS;
	while (!l->exit.has_status && !l->exit.has_signal && !atomic_load(&c->dead) &&
	       !ssh_channel_is_closed(l->ch) && ssh_now_ns() < dl) {
		drain_stderr(l);
		if (!sshc_wait(c, dl))
			break;
	}
	drain_stderr(l);
	char tail[ERR_QUOTE + 1];
	stderr_tail(l, tail, sizeof tail, ERR_QUOTE);
	if (missing(l) || (l->exit.has_status && l->exit.status == 127)) {
		asp_error_set(
		    err, ASP_E_TRANSPORT_ERROR, NULL,
		    "asp-agent not found at %s on %s; install it there or set ssh.agent to "
		    "null",
		    l->path, c->target);
	} else if (l->exit.has_status || l->exit.has_signal) {
		char how[64];
		if (l->exit.has_signal)
			snprintf(how, sizeof how, "was killed by SIG%s", l->exit.signal);
		else
			snprintf(how, sizeof how, "exited with status %d", l->exit.status);
		asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "asp-agent %s on %s %s%s%s",
		              l->path, c->target, how, tail[0] ? ": " : "", tail);
	} else if (atomic_load(&c->dead)) {
		sshc_dead_error(c, "agent", err);
	}
	sshc_unlock(c);
}

static void ch_close(void *base)
{
	ssh_agent_link *l = (ssh_agent_link *)base;
	atomic_store(&l->closed, true);
	/* wake the reader without taking the lock: it polls, or the pump broadcasts for us */
	sshc_wake(l->c);
}

static void ch_free(void *base)
{
	ssh_agent_link *l = (ssh_agent_link *)base;
	sshc_lock(l->c);
	if (l->ch) {
		ssh_remove_channel_callbacks(l->ch, &l->cb);
		sshc_channel_free(l->c, l->ch, SSHC_COMMAND);
		l->ch = NULL;
	}
	sshc_unlock(l->c);
	free(l->rbuf);
	free(l->ebuf);
	free(l->cmd);
	free(l);
}

static const asp_channel_ops link_ops = {
    .send = ch_send,
    .recv = ch_recv,
    .explain = ch_explain,
    .close = ch_close,
    .free = ch_free,
};

asp_status ssh_agent_start(sshc *c, const char *agent_path, ssh_agent_link **out, asp_error *err)
{
	*out = NULL;
	ssh_agent_link *l = calloc(1, sizeof *l);
	if (!l)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	l->c = c;
	l->path = agent_path;
	/*
	 * Checked before exec so a missing binary is told apart from an agent that failed:
	 * a marker on stderr and status 127. The path is one single-quoted word.
	 */
	uint8_t rnd[8];
	if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
		memcpy(rnd, &(uint64_t){ssh_now_ns()}, sizeof rnd);
	snprintf(l->marker, sizeof l->marker, "\001ASPAGENT%02x%02x%02x%02x%02x%02x%02x%02x\n",
	         rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	char mark_arg[32];
	snprintf(mark_arg, sizeof mark_arg, "%.16s", l->marker + 9);
	sstr cmd = {0};
	if (sstr_adds(&cmd, "p=") < 0 || sstr_add_quoted(&cmd, agent_path) < 0 ||
	    sstr_adds(&cmd, "; case $p in */*) test -f \"$p\" && test -x \"$p\";; "
	                    "*) command -v \"$p\" >/dev/null 2>&1;; esac && "
	                    "{ printf '\\001ASPAGENT%s\\n' ") < 0 ||
	    sstr_add_quoted(&cmd, mark_arg) < 0 ||
	    sstr_adds(&cmd, "; exec \"$p\" --stdio; }; echo " MISSING_MARK " >&2; exit 127") < 0) {
		free(l);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	uint64_t dl = sshc_setup_deadline(c);
	sshc_lock(c);
	asp_status st = sshc_channel_open(c, SSHC_COMMAND, dl, dl, &l->ch, err);
	if (st == ASP_OK) {
		ssh_exit_watch(l->ch, &l->cb, &l->exit);
		/* hello follows the request without waiting for its answer, except where
		 * channel opens are fragile (Dropbear: the gate wants the command started) */
		if (c->fragile_open) {
			st = sshc_channel_exec(c, l->ch, cmd.p, false, dl, err);
			l->started = true;
		} else if (!(l->cmd = strdup(cmd.p))) {
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		} else {
			int rc = sshc_channel_exec_step(c, l->ch, l->cmd, false, err);
			st = rc == SSH_ERROR ? ASP_E_TRANSPORT_ERROR : ASP_OK;
			l->started = rc == SSH_OK;
		}
	}
	sshc_unlock(c);
	sstr_free(&cmd);
	if (st != ASP_OK) {
		ch_free(l);
		return st;
	}
	asp_channel *chan;
	st = asp_channel_new(&link_ops, l, &chan, err);
	if (st != ASP_OK) {
		ch_free(l);
		return st;
	}
	st = asp_rpc_new(chan, 0, &l->rpc, err); /* takes the channel, even on failure */
	if (st != ASP_OK)
		return st;
	asp_rpc_set_call_timeout(l->rpc, c->cfg->call_timeout_ms);
	asp_arena *a = asp_arena_new();
	if (!a) {
		asp_rpc_free(l->rpc);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	/* one hello: proves the far end is an ASP responder and sets its max_message */
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "libasp-ssh/" ASP_VERSION;
	hp.has_protocol = true;
	hp.protocol = ASP_PROTOCOL;
	asp_hello_result hr;
	st = asp_rpc_invoke(l->rpc, ASP_OP_HELLO, &hp, &hr, a, err);
	asp_arena_free(a);
	if (st != ASP_OK) {
		sshc_lock(c);
		bool gone = missing(l) || (l->exit.has_status && l->exit.status == 127);
		sshc_unlock(c);
		if (gone && err)
			err->code = ASP_E_NOT_FOUND;
		if (gone)
			st = ASP_E_NOT_FOUND;
		asp_rpc_free(l->rpc);
		return st;
	}
	*out = l;
	return ASP_OK;
}

const asp_ops *ssh_agent_ops(void)
{
	return &asp_rpc_ops;
}

void *ssh_agent_self(ssh_agent_link *l)
{
	return l->rpc;
}

bool ssh_agent_alive(ssh_agent_link *l)
{
	return asp_rpc_alive(l->rpc);
}

void ssh_agent_abort(ssh_agent_link *l)
{
	asp_rpc_close(l->rpc);
}

void ssh_agent_free(ssh_agent_link *l)
{
	if (l)
		asp_rpc_free(l->rpc); /* frees the channel, and with it `l` */
}
