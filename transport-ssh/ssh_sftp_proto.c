/*
 * SFTP v3 framing: building requests, sending them whole, reading replies from the
 * channel and handing each to the request waiting for its id.
 */
#include "ssh_sftp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER        9               /* length, type, id */
#define REPLY_MAX     (1024u * 1024u) /* a reply larger than this is a broken server */
#define TX_GATHER     (64u * 1024u)   /* a batch's requests up to this size are gathered */
#define DEFAULT_CHUNK (32u * 1024u)
#define MAX_CHUNK     (255u * 1024u) /* OpenSSH's sftp-server: 256 KiB messages */
#define SETUP_BYTES   64             /* INIT and limits@openssh.com */

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void sb_room(sbuild *b, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n <= b->cap)
		return;
	size_t ncap = b->cap ? b->cap : 128;
	while (ncap < b->len + n)
		ncap *= 2;
	uint8_t *np = realloc(b->p, ncap);
	if (!np) {
		b->oom = true;
		return;
	}
	b->p = np;
	b->cap = ncap;
}

void sb_init(sbuild *b)
{
	memset(b, 0, sizeof *b);
	sb_room(b, 256);
	if (!b->oom)
		b->len = HEADER;
}

void sb_free(sbuild *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

void sb_u8(sbuild *b, uint8_t v)
{
	sb_room(b, 1);
	if (!b->oom)
		b->p[b->len++] = v;
}

void sb_u32(sbuild *b, uint32_t v)
{
	sb_room(b, 4);
	if (!b->oom) {
		put32(b->p + b->len, v);
		b->len += 4;
	}
}

void sb_u64(sbuild *b, uint64_t v)
{
	sb_u32(b, (uint32_t)(v >> 32));
	sb_u32(b, (uint32_t)v);
}

void sb_str(sbuild *b, const void *s, size_t n)
{
	sb_u32(b, (uint32_t)n);
	sb_room(b, n);
	if (!b->oom && n) {
		memcpy(b->p + b->len, s, n);
		b->len += n;
	}
}

void sb_cstr(sbuild *b, const char *s)
{
	sb_str(b, s, strlen(s));
}

uint32_t sc_u32(scur *c)
{
	if (c->bad || c->n < 4) {
		c->bad = true;
		return 0;
	}
	uint32_t v = get32(c->p);
	c->p += 4;
	c->n -= 4;
	return v;
}

uint64_t sc_u64(scur *c)
{
	uint64_t hi = sc_u32(c);
	return hi << 32 | sc_u32(c);
}

const uint8_t *sc_str(scur *c, size_t *len)
{
	uint32_t n = sc_u32(c);
	if (c->bad || c->n < n) {
		c->bad = true;
		*len = 0;
		return NULL;
	}
	const uint8_t *s = c->p;
	c->p += n;
	c->n -= n;
	*len = n;
	return s;
}

void sc_attrs(scur *c, sattr *a)
{
	memset(a, 0, sizeof *a);
	a->flags = sc_u32(c);
	if (a->flags & FXA_SIZE)
		a->size = sc_u64(c);
	if (a->flags & FXA_UIDGID) {
		a->uid = sc_u32(c);
		a->gid = sc_u32(c);
	}
	if (a->flags & FXA_PERMISSIONS)
		a->perm = sc_u32(c);
	if (a->flags & FXA_ACMODTIME) {
		a->atime = sc_u32(c);
		a->mtime = sc_u32(c);
	}
	if (a->flags & FXA_EXTENDED) {
		uint32_t n = sc_u32(c);
		for (uint32_t i = 0; i < n && !c->bad; i++) {
			size_t l;
			sc_str(c, &l);
			sc_str(c, &l);
		}
	}
}

void sb_attrs(sbuild *b, const sattr *a)
{
	sb_u32(b, a->flags);
	if (a->flags & FXA_UIDGID) {
		sb_u32(b, a->uid);
		sb_u32(b, a->gid);
	}
	if (a->flags & FXA_PERMISSIONS)
		sb_u32(b, a->perm);
	if (a->flags & FXA_ACMODTIME) {
		sb_u32(b, a->atime);
		sb_u32(b, a->mtime);
	}
}

int sftp_status(const sreq *r)
{
	if (r->type != FXP_STATUS || !r->body || r->len < 4)
		return -1;
	return (int)get32(r->body);
}

/* Fails every request in flight and drops the channel; the next request reopens it. */
static void sftp_reset(sftpc *f)
{
	for (sreq *r = f->pending; r; r = r->next) {
		r->pending = false;
		r->done = true;
		r->type = 0;
	}
	f->pending = NULL;
	if (f->ch && f->ch == f->writing) {
		/* a write waits for window on it, the lock let go: it frees the channel */
		ssh_channel_close(f->ch);
		f->writing = NULL;
	} else if (f->ch) {
		sshc_channel_free(f->c, f->ch, SSHC_SFTP);
	}
	f->ch = NULL;
	f->rx_off = f->rx_len = 0;
	f->tx_len = 0;
	f->started = f->version_seen = f->wide = false;
	f->wbusy = false;
	f->batching = false;
	sftp_handles_reset(f);
	pthread_cond_broadcast(&f->c->cv);
}

static void parse_version(sftpc *f, const uint8_t *p, size_t n)
{
	scur c = {p, n, false};
	(void)sc_u32(&c); /* version */
	while (!c.bad && c.n > 0) {
		size_t nl, dl;
		const uint8_t *name = sc_str(&c, &nl);
		sc_str(&c, &dl);
		if (c.bad)
			break;
		if (nl == 24 && memcmp(name, "posix-rename@openssh.com", 24) == 0)
			f->posix_rename = true;
		else if (nl == 17 && memcmp(name, "fsync@openssh.com", 17) == 0)
			f->fsync = true;
		else if (nl == 18 && memcmp(name, "limits@openssh.com", 18) == 0)
			f->limits = true;
	}
	f->version_seen = true;
}

/* The answer to limits@openssh.com: the sizes of READ and WRITE. */
static void take_limits(sftpc *f, uint8_t type, const uint8_t *p, size_t n)
{
	if (type != FXP_EXTENDED_REPLY)
		return; /* a status: the server has no such extension */
	scur c = {p, n, false};
	(void)sc_u64(&c); /* max packet */
	uint64_t rd = sc_u64(&c), wr = sc_u64(&c);
	if (!c.bad) {
		f->max_read = rd && rd < MAX_CHUNK ? (uint32_t)rd : MAX_CHUNK;
		f->max_write = wr && wr < MAX_CHUNK ? (uint32_t)wr : MAX_CHUNK;
	}
}

/* Hands one whole packet (after its length) to whoever waits for it. */
static void dispatch(sftpc *f, const uint8_t *p, size_t n)
{
	uint8_t type = p[0];
	if (type == FXP_VERSION) {
		parse_version(f, p + 1, n - 1);
		return;
	}
	if (n < 5)
		return;
	uint32_t id = get32(p + 1);
	sftp_handles_reply(f, id, type, p + 5, n - 5);
	sreq **pp = &f->pending;
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	sreq *r = *pp;
	if (!r)
		return; /* a forgotten request's late reply */
	*pp = r->next;
	r->pending = false;
	r->done = true;
	r->type = type;
	const uint8_t *body = p + 5;
	size_t blen = n - 5;
	if (r == &f->lim) {
		take_limits(f, type, body, blen);
		return;
	}
	if (type == FXP_DATA && r->dst && blen >= 4) {
		size_t dl = get32(body);
		if (dl <= blen - 4 && dl <= r->dst_cap) {
			memcpy(r->dst, body + 4, dl);
			r->len = dl;
			return;
		}
		r->type = 0; /* more than asked for: a broken server */
		return;
	}
	r->body = malloc(blen ? blen : 1);
	if (!r->body) {
		r->type = 0;
		return;
	}
	memcpy(r->body, body, blen);
	r->len = blen;
}

bool sftp_take_packets(sftpc *f)
{
	while (f->rx_len - f->rx_off >= 4) {
		const uint8_t *p = f->rx + f->rx_off;
		uint32_t plen = get32(p);
		if (plen == 0 || plen > REPLY_MAX)
			return false;
		if (f->rx_len - f->rx_off < 4 + (size_t)plen)
			break;
		dispatch(f, p + 4, plen);
		f->rx_off += 4 + (size_t)plen;
	}
	return true;
}

/* Room for `need` more bytes after rx_len; false when out of memory. */
static bool rx_room(sftpc *f, size_t need)
{
	if (f->rx_cap - f->rx_len >= need)
		return true;
	size_t ncap = f->rx_cap ? f->rx_cap : 256 * 1024;
	while (ncap - f->rx_len < need)
		ncap *= 2;
	uint8_t *np = realloc(f->rx, ncap);
	if (!np)
		return false;
	f->rx = np;
	f->rx_cap = ncap;
	return true;
}

/* Reads whatever arrived on the channel and dispatches the whole packets. */
static bool sftp_pump(sftpc *f)
{
	if (!f->ch)
		return false;
	for (;;) {
		if (f->rx_off > 0) { /* what is left is less than one packet */
			memmove(f->rx, f->rx + f->rx_off, f->rx_len - f->rx_off);
			f->rx_len -= f->rx_off;
			f->rx_off = 0;
		}
		/*
		 * What libssh holds, read whole; from SSHC_BULK_FROM held on, the read widens
		 * the channel's window to SSHC_BULK_WINDOW (sshc_channel_take): a tree's reads
		 * keep megabytes of answers in flight, more than libssh's 1.28 MB.
		 */
		int held = ssh_channel_poll(f->ch, 0);
		if (held == 0)
			break;
		size_t need = held > 0 ? sshc_bulk_room(held, SSHC_BULK_WINDOW) : 0;
		if (!rx_room(f, need)) {
			sftp_reset(f);
			return false;
		}
		int n = held > 0 ? sshc_channel_read_held(f->ch, 0, held, SSHC_BULK_WINDOW,
		                                          f->rx + f->rx_len)
		                 : held;
		if (n == 0)
			break;
		if (n < 0) {
			sshc_check(f->c);
			sftp_reset(f); /* sftp-server exited, or the channel went away */
			return false;
		}
		f->rx_len += (size_t)n;
		if (!sftp_take_packets(f)) {
			sftp_reset(f);
			return false;
		}
	}
	/* a discarded stderr would otherwise fill the window */
	char sink[512];
	while (f->ch && ssh_channel_read_nonblocking(f->ch, sink, sizeof sink, 1) > 0)
		;
	return true;
}

static asp_status lost(sftpc *f, asp_error *err)
{
	if (atomic_load(&f->c->dead))
		return sshc_dead_error(f->c, "sftp", err);
	if (f->setup_failed) {
		/* a request that went out with the handshake: the handshake's words */
		if (err)
			*err = f->setup_err;
		return f->setup_err.code;
	}
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
	                     "sftp: ssh %s: the sftp channel was lost; try again", f->c->target);
}

/*
 * Writes n bytes on ch, which may let go of the lock to wait for window; false when the
 * channel was lost meanwhile (then freed here if sftp_reset left it to us) or the write
 * stopped halfway (the stream is unusable: reset).
 */
static bool put_bytes(sftpc *f, ssh_channel ch, const uint8_t *p, size_t n, uint64_t dl)
{
	f->writing = ch;
	size_t w = sshc_channel_write(f->c, ch, p, n, dl);
	if (f->ch != ch) {
		/* reset meanwhile (sftp_reset closed it, left it to us); its requests failed */
		sshc_channel_free(f->c, ch, SSHC_SFTP);
		return false;
	}
	f->writing = NULL;
	if (w != n) {
		sftp_reset(f);
		return false;
	}
	return true;
}

/* What a batch gathered, written now. */
static bool flush_tx(sftpc *f, ssh_channel ch, uint64_t dl)
{
	if (!f->tx_len)
		return true;
	size_t n = f->tx_len;
	f->tx_len = 0;
	return put_bytes(f, ch, f->tx, n, dl);
}

static bool tx_add(sftpc *f, const uint8_t *p, size_t n)
{
	if (f->tx_cap - f->tx_len < n) {
		size_t ncap = f->tx_cap ? f->tx_cap : 16 * 1024;
		while (ncap - f->tx_len < n)
			ncap *= 2;
		uint8_t *nt = realloc(f->tx, ncap);
		if (!nt)
			return false;
		f->tx = nt;
		f->tx_cap = ncap;
	}
	memcpy(f->tx + f->tx_len, p, n);
	f->tx_len += n;
	return true;
}

static asp_status write_packet(sftpc *f, uint8_t type, sbuild *b, const uint8_t *tail,
                               size_t tail_len, sreq *r, asp_error *err)
{
	if (b->oom)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "sftp: out of memory");
	/* the length counts type, id and body; INIT has no id */
	size_t total = (r ? b->len - 4 : b->len - 8) + tail_len;
	if (total > UINT32_MAX)
		return asp_error_set(err, ASP_E_TOO_LARGE, NULL, "sftp: request too large");
	put32(b->p, (uint32_t)total);
	b->p[4] = type;
	if (r) {
		r->id = f->next_id++;
		put32(b->p + 5, r->id);
	}
	uint64_t dl = ssh_now_ns() + f->req_timeout_ns;
	bool mine = f->batching && pthread_equal(f->batch_owner, pthread_self());
	while (f->wbusy && !mine) {
		if (!sshc_wait(f->c, dl))
			return lost(f, err);
		if (!f->ch)
			return lost(f, err);
		mine = f->batching && pthread_equal(f->batch_owner, pthread_self());
	}
	ssh_channel ch = f->ch;
	if (!ch)
		return lost(f, err);
	if (r) {
		/* listed before writing: the reply may be read while we wait for window */
		r->pending = true;
		r->done = false;
		r->next = f->pending;
		f->pending = r;
		sftp_handles_sent(f, type, r->id, b->p + HEADER, b->len - HEADER);
	}
	f->wbusy = true;
	size_t hl = b->len;
	const uint8_t *hp = b->p;
	if (!r) {
		memmove(b->p + 5, b->p + 9, b->len - 9); /* INIT: the body follows the type */
		hl -= 4;
	}
	/*
	 * A batch's small requests are gathered and go in one channel write at its end (one
	 * SSH packet, one send, where a file's four requests took four); a large one (a
	 * WRITE's data) goes at once, after what was gathered.
	 */
	size_t before = f->tx_len;
	if (mine && hl + tail_len <= TX_GATHER && tx_add(f, hp, hl) &&
	    (!tail_len || tx_add(f, tail, tail_len)))
		return ASP_OK;
	f->tx_len = mine ? before : f->tx_len;
	bool ok = (!mine || flush_tx(f, ch, dl)) && put_bytes(f, ch, hp, hl, dl) &&
	          (!tail_len || put_bytes(f, ch, tail, tail_len, dl));
	if (ok && !mine) {
		f->wbusy = false;
		pthread_cond_broadcast(&f->c->cv);
	}
	return ok ? ASP_OK : lost(f, err);
}

void sftp_batch_begin(sftpc *f)
{
	uint64_t dl = ssh_now_ns() + f->req_timeout_ns;
	while (f->wbusy && f->ch && sshc_wait(f->c, dl))
		;
	if (f->wbusy)
		return; /* lost or stuck: the sends fail on their own, unbatched */
	f->wbusy = true;
	f->batching = true;
	f->batch_owner = pthread_self();
}

void sftp_batch_end(sftpc *f)
{
	if (!f->batching || !pthread_equal(f->batch_owner, pthread_self()))
		return;
	f->handles.next_self = false; /* an OPEN marked but not sent: no longer ours */
	/* a failed flush resets the channel, which fails the batch's requests */
	if (f->ch)
		(void)flush_tx(f, f->ch, ssh_now_ns() + f->req_timeout_ns);
	if (f->batching && pthread_equal(f->batch_owner, pthread_self())) {
		f->batching = false;
		f->wbusy = false;
	}
	pthread_cond_broadcast(&f->c->cv);
}

/* The handshake is under way: the subsystem request or VERSION not answered yet. */
static bool shaking(const sftpc *f)
{
	return f->ch && (!f->started || !f->version_seen);
}

/*
 * The handshake failed as f->setup_err says: the channel goes, and the requests sent
 * with it are answered with the same error (lost), so that each caller learns why.
 */
static asp_status setup_fail(sftpc *f, ssh_channel ch, asp_error *err)
{
	if (f->ch == ch)
		sftp_reset(f);
	f->setup_failed = true;
	if (err)
		*err = f->setup_err;
	return f->setup_err.code;
}

/* The channel ended before VERSION: sftp-server is missing or would not run. */
static asp_status closed_at_once(sftpc *f, ssh_channel ch, asp_error *err)
{
	if (atomic_load(&f->c->dead))
		sshc_dead_error(f->c, "sftp", &f->setup_err);
	else
		asp_error_set(&f->setup_err, ASP_E_TRANSPORT_ERROR, NULL,
		              "sftp: ssh %s: the server's sftp subsystem closed at once; is "
		              "sftp-server installed and enabled (Subsystem sftp)?",
		              f->c->target);
	return setup_fail(f, ch, err);
}

/*
 * One look at the handshake under way, without waiting: the subsystem request's answer,
 * then what sftp-server sent (VERSION, the limits, answers to the requests behind them).
 */
static asp_status shake(sftpc *f, asp_error *err)
{
	ssh_channel ch = f->ch;
	if (!f->started) {
		int rc = sshc_channel_exec_step(f->c, ch, "sftp", true, &f->setup_err);
		if (rc == SSH_ERROR && !atomic_load(&f->c->dead))
			asp_error_hint(&f->setup_err, "is sftp-server installed and enabled "
			                              "(Subsystem sftp)?");
		if (rc == SSH_ERROR)
			return setup_fail(f, ch, err);
		f->started = rc == SSH_OK;
	}
	if (f->started && (!sftp_pump(f) || f->ch != ch))
		return closed_at_once(f, ch, err);
	if (shaking(f) && ssh_now_ns() >= f->setup_dl) {
		asp_error_set(&f->setup_err, ASP_E_TIMEOUT, NULL,
		              "sftp: ssh %s: sftp-server did not answer", f->c->target);
		return setup_fail(f, ch, err);
	}
	return ASP_OK;
}

/* Waits until the handshake under way is past the subsystem request (`all`: VERSION too). */
static asp_status shake_until(sftpc *f, bool all, asp_error *err)
{
	while (f->ch && (!f->started || (all && !f->version_seen))) {
		asp_status st = shake(f, err);
		if (st != ASP_OK)
			return st;
		if (!f->ch || (f->started && (!all || f->version_seen)))
			break;
		if (!sshc_wait(f->c, f->setup_dl))
			return lost(f, err);
	}
	return f->ch ? ASP_OK : lost(f, err);
}

asp_status sftp_send(sftpc *f, uint8_t type, sbuild *b, const uint8_t *tail, size_t tail_len,
                     sreq *r, asp_error *err)
{
	asp_status st = sftp_start(f, err);
	/*
	 * Until the server answered the subsystem request, nothing reads the channel: a
	 * packet larger than its window would wait for window that a server refusing sftp
	 * never gives.
	 */
	if (st == ASP_OK && f->ch && !f->started &&
	    b->len + tail_len > ssh_channel_window_size(f->ch))
		st = shake_until(f, false, err);
	if (st != ASP_OK)
		return st;
	r->body = NULL;
	r->len = 0;
	r->type = 0;
	return write_packet(f, type, b, tail, tail_len, r, err);
}

asp_status sftp_await(sftpc *f, sreq *r, asp_error *err)
{
	uint64_t dl = ssh_now_ns() + f->req_timeout_ns;
	for (;;) {
		if (!r->done && shaking(f)) {
			asp_status st = shake(f, err);
			if (st != ASP_OK)
				return st;
		} else if (!r->done) {
			sftp_pump(f);
		}
		if (r->done)
			return r->type ? ASP_OK : lost(f, err);
		if (!sshc_check(f->c))
			return lost(f, err);
		if (shaking(f)) {
			/* the handshake has a deadline of its own (shake); r's counts from its end
			 */
			dl = ssh_now_ns() + f->req_timeout_ns;
		} else if (ssh_now_ns() >= dl) {
			/* sftp-server answers in order: one stuck request blocks all; start afresh
			 */
			sftp_reset(f);
			return asp_error_set(
			    err, ASP_E_TIMEOUT, NULL,
			    "sftp: ssh %s: no answer from sftp-server within "
			    "call_timeout_ms (%llu ms)",
			    f->c->target, (unsigned long long)(f->req_timeout_ns / SSH_NS_PER_MS));
		}
		if (!sshc_wait(f->c, shaking(f) ? f->setup_dl : dl))
			return lost(f, err);
	}
}

void sftp_widen(sftpc *f)
{
	if (!f->ch || f->wide || !rx_room(f, SSHC_BULK_WINDOW))
		return; /* (out of memory: the pump widens it later) */
	/* a read of more than libssh holds plus the window widens it, and waits for nothing */
	int n = ssh_channel_read_timeout(f->ch, f->rx + f->rx_len, SSHC_BULK_WINDOW, 0, 0);
	if (n < 0) {
		sshc_check(f->c);
		sftp_reset(f);
		return;
	}
	f->rx_len += (size_t)n;
	f->wide = true;
	if (!sftp_take_packets(f))
		sftp_reset(f);
}

void sftp_settle(sftpc *f)
{
	uint64_t dl = ssh_now_ns() + f->req_timeout_ns;
	while (f->ch && !f->handles.off && f->handles.others > 0) {
		sftp_pump(f);
		if (!f->ch || !f->handles.others || !sshc_check(f->c) || ssh_now_ns() >= dl ||
		    !sshc_wait(f->c, dl))
			break;
	}
}

void sftp_forget(sftpc *f, sreq *r)
{
	if (r->pending) {
		sreq **pp = &f->pending;
		while (*pp && *pp != r)
			pp = &(*pp)->next;
		if (*pp)
			*pp = r->next;
		r->pending = false;
	}
	free(r->body);
	r->body = NULL;
}

/*
 * Opens the channel (the spare one when there is one), sends the subsystem request, then
 * INIT and limits@openssh.com, and returns without waiting for VERSION: whoever awaits a
 * request next takes the handshake's answers (shake), so a call's own requests go out
 * right behind INIT and the first call's round trip is the handshake's. INIT follows the
 * request without waiting where the channel's window allows (the server starts
 * sftp-server before it reads the bytes that follow the request, and sftp-server answers
 * a request it does not know with a status); OpenSSH gives a session channel its window
 * only once its subsystem runs, so there INIT waits for the request's answer. Where
 * channel opens are fragile (Dropbear) the request's answer comes first too.
 */
asp_status sftp_start(sftpc *f, asp_error *err)
{
	uint64_t dl = ssh_now_ns() + f->req_timeout_ns;
	while (f->opening) {
		if (!sshc_wait(f->c, dl))
			return lost(f, err);
	}
	if (f->ch)
		return ASP_OK;
	f->opening = true;
	f->setup_failed = false;
	ssh_channel ch = NULL;
	asp_status st = sshc_channel_open(f->c, SSHC_SFTP, dl, SSH_NO_DEADLINE, &ch, err);
	uint64_t setup = sshc_setup_deadline(f->c);
	bool started = false;
	if (st == ASP_OK && f->c->fragile_open) {
		st = sshc_channel_exec(f->c, ch, "sftp", true, setup, err);
		started = st == ASP_OK;
	} else if (st == ASP_OK) {
		int rc = sshc_channel_exec_step(f->c, ch, "sftp", true, err);
		started = rc == SSH_OK;
		st = rc == SSH_ERROR ? ASP_E_TRANSPORT_ERROR : ASP_OK;
	}
	if (st != ASP_OK) {
		sshc_channel_free(f->c, ch, SSHC_SFTP);
		f->opening = false;
		return st;
	}
	f->ch = ch;
	f->started = started;
	f->setup_dl = setup;
	f->max_read = f->max_write = DEFAULT_CHUNK;
	f->posix_rename = f->fsync = f->limits = false;
	/* a refused request never opens the window: a write would wait for the call timeout */
	if (!started && ssh_channel_window_size(ch) < SETUP_BYTES)
		st = shake_until(f, false, err);
	bool shook = st == ASP_OK;
	sbuild b;
	if (st == ASP_OK) {
		sb_init(&b);
		sb_u32(&b, 3);
		st = write_packet(f, FXP_INIT, &b, NULL, 0, NULL, err);
		sb_free(&b);
	}
	if (st == ASP_OK) {
		sb_init(&b);
		sb_cstr(&b, "limits@openssh.com");
		memset(&f->lim, 0, sizeof f->lim);
		st = write_packet(f, FXP_EXTENDED, &b, NULL, 0, &f->lim, err);
		sb_free(&b);
	}
	if (shook && st == ASP_E_TRANSPORT_ERROR)
		st = closed_at_once(f, ch, err); /* the channel ended under INIT */
	if (st != ASP_OK && f->ch == ch)
		sftp_reset(f);
	f->opening = false;
	pthread_cond_broadcast(&f->c->cv);
	return st;
}

asp_status sftp_ready(sftpc *f, asp_error *err)
{
	asp_status st = sftp_start(f, err);
	if (st == ASP_OK && f->lim.pending)
		st = sftp_await(f, &f->lim, err);
	if (st == ASP_OK)
		st = shake_until(f, true, err); /* a server that answered before VERSION */
	return st;
}

sftpc *sftpc_new(sshc *c)
{
	sftpc *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->c = c;
	f->next_id = 1;
	/* a request unanswered this long means a stuck server (docs/faults.md) */
	unsigned ms =
	    c->cfg && c->cfg->call_timeout_ms ? c->cfg->call_timeout_ms : ASP_CALL_TIMEOUT_DEFAULT;
	f->req_timeout_ns = (uint64_t)ms * SSH_NS_PER_MS;
	return f;
}

void sftpc_free(sftpc *f)
{
	if (!f)
		return;
	sftp_reset(f);
	free(f->rx);
	free(f->tx);
	free(f);
}
