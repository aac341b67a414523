/*
 * SFTP version 3 (draft-ietf-secsh-filexfer-02, what OpenSSH speaks), framed by us on an
 * SSH channel. libssh 0.10's SFTP client waits for each reply inside the calling thread
 * (which would hold the session lock across the round trip) and cannot pipeline
 * writes; with our own framing every thread's requests are in flight at once, each
 * caller sleeps on the connection's condition variable, and bulk reads and writes keep
 * many requests outstanding.
 */
#ifndef ASP_SSH_SFTP_H
#define ASP_SSH_SFTP_H

#include "ssh_internal.h"

enum {
	FXP_INIT = 1,
	FXP_VERSION = 2,
	FXP_OPEN = 3,
	FXP_CLOSE = 4,
	FXP_READ = 5,
	FXP_WRITE = 6,
	FXP_LSTAT = 7,
	FXP_FSTAT = 8,
	FXP_SETSTAT = 9,
	FXP_FSETSTAT = 10,
	FXP_OPENDIR = 11,
	FXP_READDIR = 12,
	FXP_REMOVE = 13,
	FXP_MKDIR = 14,
	FXP_RMDIR = 15,
	FXP_REALPATH = 16,
	FXP_STAT = 17,
	FXP_RENAME = 18,
	FXP_READLINK = 19,
	FXP_SYMLINK = 20,
	FXP_STATUS = 101,
	FXP_HANDLE = 102,
	FXP_DATA = 103,
	FXP_NAME = 104,
	FXP_ATTRS = 105,
	FXP_EXTENDED = 200,
	FXP_EXTENDED_REPLY = 201,
};

enum {
	FX_OK = 0,
	FX_EOF = 1,
	FX_NO_SUCH_FILE = 2,
	FX_PERMISSION_DENIED = 3,
	FX_FAILURE = 4,
	FX_BAD_MESSAGE = 5,
	FX_NO_CONNECTION = 6,
	FX_CONNECTION_LOST = 7,
	FX_OP_UNSUPPORTED = 8,
};

enum {
	FXF_READ = 0x01,
	FXF_WRITE = 0x02,
	FXF_APPEND = 0x04,
	FXF_CREAT = 0x08,
	FXF_TRUNC = 0x10,
	FXF_EXCL = 0x20,
};

enum {
	FXA_SIZE = 0x01,
	FXA_UIDGID = 0x02,
	FXA_PERMISSIONS = 0x04,
	FXA_ACMODTIME = 0x08,
	FXA_EXTENDED = 0x80000000u,
};

/* One request in flight. The reply lands here; `dst` receives a DATA reply's bytes. */
typedef struct sreq {
	uint32_t id;
	bool pending, done;
	uint8_t type;  /* reply type; 0 when the channel was lost first */
	uint8_t *body; /* reply after the id (malloc'd), unless it went to dst */
	size_t len;    /* bytes of body, or of data copied to dst */
	uint8_t *dst;
	size_t dst_cap;
	struct sreq *next;
} sreq;

/* A request body being built; the 9-byte packet header is reserved in front. */
typedef struct sbuild {
	uint8_t *p;
	size_t len, cap;
	bool oom;
} sbuild;

void sb_init(sbuild *b);
void sb_free(sbuild *b);
void sb_u8(sbuild *b, uint8_t v);
void sb_u32(sbuild *b, uint32_t v);
void sb_u64(sbuild *b, uint64_t v);
void sb_str(sbuild *b, const void *s, size_t n);
void sb_cstr(sbuild *b, const char *s);

/* A reply being parsed; `bad` sticks once anything was short. */
typedef struct scur {
	const uint8_t *p;
	size_t n;
	bool bad;
} scur;

uint32_t sc_u32(scur *c);
uint64_t sc_u64(scur *c);
const uint8_t *sc_str(scur *c, size_t *len);

typedef struct sattr {
	uint32_t flags;
	uint64_t size;
	uint32_t uid, gid, perm, atime, mtime;
} sattr;

void sc_attrs(scur *c, sattr *a);
/* Appends `a` as a request's ATTRS; only the parts this client sets (uid/gid, permissions,
 * times). */
void sb_attrs(sbuild *b, const sattr *a);

/* ssh_sftp_handles.c: what sftp-server's handle table holds, for guessing the next. */
typedef struct sftp_hevent {
	bool open; /* an OPEN or OPENDIR not answered yet (id), else a CLOSE of handle v */
	bool self; /* an OPEN closed in its own batch on the guess v */
	uint32_t id, v;
} sftp_hevent;

typedef struct sftp_handles {
	bool off;       /* the server is not the one described: no guesses */
	uint32_t slots; /* its table's size */
	uint32_t *free; /* slots freed, the last freed last */
	size_t n_free, cap_free;
	uint32_t *open; /* our handles open */
	size_t n_open, cap_open;
	sftp_hevent *q; /* from the oldest OPEN unanswered, in the order sent */
	size_t n_q, cap_q;
	unsigned pending; /* OPENs unanswered */
	unsigned others;  /* of those, the ones not closed in their own batch */
	bool next_self;   /* the next OPEN sent is closed in its batch, on next_v */
	uint32_t next_v;
} sftp_handles;

struct sftpc {
	sshc *c;
	ssh_channel ch;
	ssh_channel writing; /* ch while a write on it may let go of the lock (sftp_reset) */
	bool opening;
	bool wbusy;
	/* the handshake: requests go out behind INIT before these come (sftp_start) */
	bool started; /* the subsystem request was answered */
	bool version_seen;
	uint64_t setup_dl; /* by when both must have come */
	sreq lim;          /* limits@openssh.com, asked with INIT */
	/* the last handshake failed: the requests sent with it are answered with this */
	bool setup_failed;
	asp_error setup_err;
	uint32_t next_id;
	sreq *pending;
	uint8_t *rx;
	size_t rx_off, rx_len, rx_cap;
	bool posix_rename, fsync, limits, got_limits;
	bool wide; /* the channel's window was widened to SSHC_BULK_WINDOW (sftp_widen) */
	uint32_t max_read, max_write; /* data bytes per READ / WRITE request */
	uint64_t req_timeout_ns;
	sftp_handles handles;
	/* sftp_batch_begin: this thread's requests go out back to back, nobody else's between */
	bool batching;
	uint8_t *tx; /* a batch's small requests, gathered: one channel write at its end */
	size_t tx_len, tx_cap;
	pthread_t batch_owner;
};

/* Under the lock, all of these. */

/*
 * Opens the channel if it is not open and sends the subsystem request, INIT and
 * limits@openssh.com, without waiting for VERSION: requests may follow at once,
 * sftp-server answers them in order after it. (INIT waits for the subsystem request's
 * answer where the channel's window opens only then, as OpenSSH's.) Until VERSION came,
 * posix_rename and fsync are false and max_read, max_write the default chunk (32 KiB,
 * which every server takes).
 */
asp_status sftp_start(sftpc *f, asp_error *err);
/* sftp_start, then waits for VERSION and the limits: for a request whose form they decide. */
asp_status sftp_ready(sftpc *f, asp_error *err);
/*
 * Sends one request (sftp_start first): `b` holds the body after the id; `tail` (may be
 * NULL) is sent right after it (the bytes of a WRITE). `r` gets its id and waits in the
 * pending list.
 */
asp_status sftp_send(sftpc *f, uint8_t type, sbuild *b, const uint8_t *tail, size_t tail_len,
                     sreq *r, asp_error *err);
/*
 * Waits for r's reply, taking the handshake's answers on the way. transport_error when
 * the connection or channel was lost, or the handshake's own error when it failed.
 */
asp_status sftp_await(sftpc *f, sreq *r, asp_error *err);
/*
 * Until the handle the next OPEN gets can be guessed (ssh_sftp_handles.c): no OPEN is
 * unanswered but those closed in their own batch. A tree's members wait for that, about a
 * round trip at most, rather than go one round trip after another without a guess. Gives
 * up at the request timeout, on a lost channel, or where guessing is off.
 */
void sftp_settle(sftpc *f);
/*
 * Widens the channel's window to SSHC_BULK_WINDOW now (the pump does it once much is
 * held): a tree's first reads ask for more than libssh's 1.28 MB at once.
 */
void sftp_widen(sftpc *f);
/* Takes r out of the pending list if it is there (its reply will be dropped) and frees
 * its body. Safe on a request that was never sent. */
void sftp_forget(sftpc *f, sreq *r);
/*
 * Hands each whole packet in rx[rx_off .. rx_len) to the request waiting for its id (or
 * takes it as the VERSION or the limits reply) and moves rx_off past it. false on a length no
 * server sends (0, or above 1 MiB): the stream is unusable. No I/O: the fuzz target's seam.
 */
bool sftp_take_packets(sftpc *f);
/* The status code of a STATUS reply; -1 for any other reply. */
int sftp_status(const sreq *r);
/*
 * Between these, only this thread sends on the channel (others wait), so a request
 * naming a guessed handle follows its OPEN with nothing between. Call sftp_start first.
 */
void sftp_batch_begin(sftpc *f);
void sftp_batch_end(sftpc *f);

/* ---- ssh_sftp_handles.c: the handle the next OPEN gets -------------------------------- */

/* A new channel: a new, empty table. */
void sftp_handles_reset(sftpc *f);
/* A request of `type` went out with `id`; `body` is what follows the id. */
void sftp_handles_sent(sftpc *f, uint8_t type, uint32_t id, const uint8_t *body, size_t len);
/* A reply to `id` came (every reply, a forgotten request's too). */
void sftp_handles_reply(sftpc *f, uint32_t id, uint8_t type, const uint8_t *body, size_t len);
/* The handle an OPEN sent now would get, when it is known and not one of ours open. */
bool sftp_handles_guess(sftpc *f, uint8_t out[4]);
/* The OPEN this batch sends next is closed in the same batch on the guess g. */
void sftp_handles_closed_in_batch(sftpc *f, const uint8_t g[4]);

#endif
