/*
 * What the SSH transport's files share. One asp_ssh is one SSH connection (the core
 * reopens the transport after a transport_error, so reconnecting is its job, not ours).
 *
 * Threads: libssh sessions are not thread-safe, so every libssh call happens under
 * `mu`. Nobody waits inside libssh for the network while holding it: calls that would
 * wait run in non-blocking steps, and between steps the caller waits in sshc_wait. The
 * first thread to wait polls the socket itself (without the lock), lets libssh read what
 * arrived into the channels' buffers and wakes every other waiter; the rest sleep on
 * `cv`; each then looks at its own channel. A pump thread does the polling while nobody
 * waits (keepalives, window adjusts, output for no caller in particular).
 */
#ifndef ASP_SSH_INTERNAL_H
#define ASP_SSH_INTERNAL_H

#include "asp/config.h"
#include "asp/proto.h"
#include "asp/transport.h"

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SSH_NS_PER_MS   1000000ull
#define SSH_NO_DEADLINE UINT64_MAX
/*
 * Channels one connection opens at once, at first. OpenSSH's default MaxSessions is 10;
 * a server that refuses a channel while others are open teaches us its real limit.
 */
#define SSH_MAX_CHANNELS 32
/*
 * OpenSSH's default MaxSessions. Until a server refuses a channel, spawned processes (which
 * hold theirs while they run) assume no more: see ssh_proc.c's spawn_cap.
 */
#define SSH_STOCK_SESSIONS 10
/* Room left in max_message for the envelope and the other fields (as the local backend). */
#define SSH_ENVELOPE_HEADROOM (64u * 1024u)

typedef struct sftpc sftpc;
struct ssh_via;

/* What a channel is for: each class has slots the others cannot take. */
enum sshc_class {
	SSHC_COMMAND, /* exec, agent mode: first come, first served */
	SSHC_SFTP,    /* the one sftp channel: never waits behind commands */
	SSHC_URGENT,  /* the timeout's kill: never waits behind anything */
};

/* A caller waiting for a channel slot, in arrival order. */
struct slot_waiter {
	struct slot_waiter *next;
};

/* One SSH connection: the libssh session, its lock, its pump and its channel budget. */
typedef struct sshc {
	const asp_config_view *cfg;
	char target[320]; /* "user@host:port", for messages */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast after anything libssh may have read */
	ssh_session s;
	/* libssh counts every packet it reads here (ssh_set_counters): sshc_wait tells from
	 * it whether the waiting thread's own calls read what it waits for */
	struct ssh_counter_struct rx;
	struct ssh_counter_struct io; /* the bytes libssh read off the socket: the pump's gauge */
	uint64_t slice_ns;            /* sshc_wait's backstop (ssh_conn.c) */
	int fd;
	atomic_bool dead;
	char why[512];    /* under mu: what ended the connection, for transport_error messages */
	int wake_fd;      /* eventfd that wakes the pump */
	ssh_channel idle; /* never opened: the pump polls it to make libssh read the socket */
	pthread_t pump;
	pthread_cond_t pump_cv; /* CLOCK_MONOTONIC; the pump stands by on it while a waiter polls */
	bool pump_on;
	bool pump_sends; /* under mu: the pump waits for the socket to take libssh's output */
	/*
	 * Under mu: a waiter polls the socket (sshc_wait), so the pump stands by. What would
	 * have woken a sleeper on `cv` writes `lead_fd` instead, once per poll (`lead_kicked`):
	 * packets read by anyone since `lead_seen`, any other change of state.
	 */
	bool lead_polls;
	bool lead_kicked;
	uint64_t lead_seen;
	int lead_fd;          /* eventfd the polling waiter polls beside the socket */
	unsigned cv_sleepers; /* under mu: waiters asleep on `cv` */
	atomic_bool stop;
	unsigned chans;      /* session channels open (counted against MaxSessions) */
	unsigned chan_limit; /* lowered when the server refuses more */
	struct slot_waiter *slot_queue;
	unsigned by_class[3]; /* channels open (or opening) per enum sshc_class */
	unsigned opened;      /* channels the server confirmed (chans counts those opening too) */
	unsigned peak;        /* the most it confirmed open at once: its MaxSessions is no lower */
	/*
	 * Dropbear before 2024.86 closes a session channel that is open but has no command
	 * yet whenever one of the connection's processes exits, and aborts the whole
	 * connection when the command then starts on it. With `fragile_open`, a channel is
	 * opened only while no other is between its open and its command's start (`gate`)
	 * and no exec runs (`execs`): an exec's process ends only once its channel is done.
	 */
	bool fragile_open;
	bool gate_busy;   /* a channel is being opened, or open with its command not started */
	ssh_channel gate; /* that channel once open (NULL while its open is in flight) */
	unsigned execs;   /* exec channels (ssh_exec.c) open now */
	/*
	 * A spawned process's end is chosen here instead: its wrapper holds (ssh_wrap.hold)
	 * until told to end, which is done only while the gate is free, and no channel opens
	 * until the server reported that end (`exiting`). A spawn keeps the gate until its
	 * wrapper said "ok" (`gate_kept`): a wrapper that refuses the command ends at once.
	 */
	ssh_channel gate_kept;
	unsigned exiting;
	/*
	 * There, too, a kill's own channel (ssh_killer_exec) would be opened just as the
	 * command it is meant for may exit: the same abort. So kills go down one channel
	 * opened while nothing runs (ssh_kill_line_open), a shell reading one command per
	 * line and answering each with an ACK byte.
	 */
	ssh_channel kill_line;
	/*
	 * Native mode (`spares`): a session channel whose open went out ahead, so the next
	 * command, sftp channel or kill skips the open's round trip: after a channel is handed
	 * out and there is room, another open is sent without waiting (sshc_channel_open). It
	 * counts in chans and by_class[SSHC_COMMAND] as any channel does. Never where opens
	 * are fragile; `spare_off` after the server refused one, until a channel closes.
	 */
	bool spares;
	bool spare_off;
	ssh_channel spare;
	bool kill_line_gone; /* its shell ended: kills open their own channels again */
	unsigned kill_sent, kill_acked;
	/* the proxy command and jump hosts the session runs over (ssh_via.h); NULL: TCP */
	struct ssh_via *via;
} sshc;

/* Whether the server's banner names a Dropbear with the fragile channel open (above). */
bool ssh_fragile_open_banner(const char *banner);

/* ---- ssh_session.c: connect, host key, authentication ------------------------------- */

/*
 * Connects, verifies the host key (docs/design.md, ".asp.json"), authenticates and starts the pump.
 * Errors: transport_error (cannot reach or lost), unauthorized (host key refused or no
 * authentication method accepted), invalid_argument (config). On failure *c is torn down.
 */
asp_status sshc_connect(sshc *c, const asp_config_view *cfg, asp_error *err);
/*
 * A jump host's session (ssh_jump.c): as sshc_connect for `cfg` exactly as given (no
 * route of its own), over `fd` when >= 0 (which it takes), and without the pump: the
 * caller's thread alone uses the session afterwards.
 */
asp_status sshc_connect_hop(sshc *c, const asp_config_view *cfg, int fd, asp_error *err);

/* ---- ssh_cipher.c ------------------------------------------------------------------- */

/* The ciphers to offer, in order (a static string), or NULL for libssh's default order. */
const char *sshc_cipher_order(void);

/* ---- ssh_conn.c: the lock, waiting, the pump and channel plumbing ------------------- */

uint64_t ssh_now_ns(void);
/* now + ms, or SSH_NO_DEADLINE for 0. */
uint64_t ssh_deadline_ms(uint64_t ms);

/* sshc_wait's backstop for a new connection: 250 ms, or ASP_SSH_WAIT_SLICE_MS (tests). */
uint64_t sshc_wait_slice_ns(void);
void sshc_lock(sshc *c);
/* Wakes every waiter (state may have changed) and unlocks. */
void sshc_unlock(sshc *c);
/*
 * Unlocks after a thread only wrote to a channel: wakes the waiters only when libssh
 * read packets meanwhile (a write changes nothing anyone waits for), so a writer does not
 * wake the reader of the same channel for nothing.
 */
void sshc_unlock_after_write(sshc *c);
/*
 * Under the lock: waits until the socket or another thread may have brought progress, or
 * `deadline` (CLOCK_MONOTONIC ns) passes. The first waiter polls the socket itself and
 * reads what arrives (one thread hand-off fewer per reply than waking from the pump);
 * the others sleep. Returns at once when this thread's own libssh calls read packets
 * since it took the lock or last woke: any libssh call may read the socket, and what it
 * read (another stream's data, an EOF, an exit status) is then news that no other thread
 * will announce. Returns false when the connection is dead.
 */
bool sshc_wait(sshc *c, uint64_t deadline);
/* Under the lock: records why the connection ended (first reason wins) and wakes all. */
void sshc_mark_dead(sshc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Under the lock: marks the connection dead if libssh says the session failed. */
bool sshc_check(sshc *c);
/* transport_error naming the target and why the connection ended. */
asp_status sshc_dead_error(sshc *c, const char *what, asp_error *err);
/* Under no lock, once, after connecting: starts the pump thread. */
asp_status sshc_pump_start(sshc *c, asp_error *err);
/* Never blocks: fails everything in flight (shuts the socket down) and wakes everyone. */
void sshc_abort(sshc *c);
/* Under no lock, never blocks: makes the polling waiter and the pump look again. */
void sshc_wake(sshc *c);
/* Stops the pump, disconnects, frees the session and the lock. No call may be inside. */
void sshc_close(sshc *c);

/*
 * Under the lock: runs one libssh call that would wait for a reply in non-blocking mode,
 * over and over until it stops saying SSH_AGAIN, sleeping on the condition variable in
 * between. Its result; SSH_ERROR with *timed_out when `deadline` passed first.
 */
typedef int (*sshc_step_fn)(ssh_channel ch, const void *arg);
int sshc_run_steps(sshc *c, ssh_channel ch, sshc_step_fn fn, const void *arg, uint64_t deadline,
                   bool *timed_out);

/* now + connect_timeout_ms: the bound on one network step (open a channel, start a command). */
uint64_t sshc_setup_deadline(const sshc *c);

/*
 * Under the lock: an open session channel. Waits for a free slot until `slot_deadline`
 * (SSH_NO_DEADLINE: as long as other channels are busy), then opens within `deadline` and
 * the connect timeout, whichever comes first.
 */
asp_status sshc_channel_open(sshc *c, enum sshc_class k, uint64_t slot_deadline, uint64_t deadline,
                             ssh_channel *out, asp_error *err);
/*
 * Under the lock, on a fragile_open connection before sshc_channel_exec: `ch` keeps the
 * gate after its command started, until sshc_gate_done (or its free).
 */
void sshc_gate_keep(sshc *c, ssh_channel ch);
void sshc_gate_done(sshc *c, ssh_channel ch);
/* Under the lock: a wrapper told to end (`exiting`), and its end reported or given up. */
void sshc_exit_begin(sshc *c);
void sshc_exit_done(sshc *c);
/* Under the lock: sends "exec" with `cmd` (or a subsystem request) and waits for the reply. */
asp_status sshc_channel_exec(sshc *c, ssh_channel ch, const char *cmd, bool subsystem,
                             uint64_t deadline, asp_error *err);
/*
 * Under the lock: the exec (or subsystem) request without waiting for its answer, which
 * the server gives before any output, so data for the command can follow at once: the
 * first call sends it, later ones look. SSH_AGAIN while unanswered, SSH_OK when
 * accepted, SSH_ERROR refused or lost (`err` set). Until it is answered libssh sends no
 * other request on the channel (a signal waits).
 */
int sshc_channel_exec_step(sshc *c, ssh_channel ch, const char *cmd, bool subsystem,
                           asp_error *err);
/* A terminal for a command's channel (spawn with tty). */
typedef struct sshc_pty {
	const char *term;
	int cols, rows;
} sshc_pty;
/*
 * Under the lock, before sshc_channel_exec: asks for a pseudo-terminal (pty-req) and waits
 * for the reply. unsupported when the server refuses (PermitTTY no).
 */
asp_status sshc_channel_pty(sshc *c, ssh_channel ch, const sshc_pty *t, uint64_t deadline,
                            asp_error *err);
/*
 * Under the lock: writes all of `data`, waiting for window as needed. Returns bytes
 * written; fewer than `len` when the channel closed, the deadline passed or the
 * connection died (check sshc->dead).
 */
size_t sshc_channel_write(sshc *c, ssh_channel ch, const void *data, size_t len, uint64_t deadline);
/*
 * Under the lock: everything libssh holds for `stream` (0 stdout, 1 stderr) of `ch`, read
 * into *buf (grown as needed). >0 bytes, 0 nothing yet, SSH_EOF, or SSH_ERROR.
 *
 * Why all of it: libssh 0.10 reopens a channel's window to 1.28 MB after every read that
 * leaves it under 640 kB, however much it already holds unread, and past 256 MiB it drops
 * incoming data without a word. A reader that takes a little at a time while its consumer
 * is slow thus makes libssh buffer without bound (and then lose bytes). Taking all that is
 * buffered, and reading again only once that was consumed, keeps libssh's share of a
 * channel under one window (~1.3 MB): the window is what stops the sender.
 *
 * `window` > 0 (a bulk stream: a tree, the agent's channel) widens the channel's window
 * to that many bytes at each read, less what libssh holds then, so libssh's share stays
 * under `window`: over a link of 100 ms, 1.3 MB in flight caps a stream at about 10 MB/s.
 * *buf is then at least `window` bytes.
 */
int sshc_channel_take(ssh_channel ch, int stream, uint32_t window, uint8_t **buf, size_t *cap);
/* sshc_channel_take's parts, for a reader with a buffer of its own: the room a read of
 * `held` bytes (ssh_channel_poll's count, > 0) needs, and the read into dst. */
size_t sshc_bulk_room(int held, uint32_t window);
int sshc_channel_read_held(ssh_channel ch, int stream, int held, uint32_t window, uint8_t *dst);

/*
 * The window of bulk streams (sshc_channel_take): twice OpenSSH's 2 MB, from the first
 * read that finds SSHC_BULK_FROM bytes held.
 */
#define SSHC_BULK_WINDOW (4u * 1024u * 1024u)
#define SSHC_BULK_FROM   (128u * 1024u)
/* Under the lock: closes and frees a channel of class k, giving its slot back. NULL: no-op. */
void sshc_channel_free(sshc *c, ssh_channel ch, enum sshc_class k);

/* ---- ssh_tcp.c: connect's direct-tcpip channel ---------------------------------------- */

/*
 * Under the lock: opens `ch` (new, unopened) as a direct-tcpip channel to host:port, as the
 * server sees them, within timeout_ms. The server's refusal becomes the local backend's
 * error for the cause: io_error (refused, unreachable), not_found (a name it cannot
 * resolve), timeout, permission_denied (forwarding forbidden). After a timeout the open
 * is still in flight: poll it with ssh_tcp_open_poll until it settles before freeing.
 */
asp_status ssh_tcp_open(sshc *c, ssh_channel ch, const char *host, unsigned port,
                        uint64_t timeout_ms, asp_error *err);
/* Under the lock: SSH_AGAIN while an open is in flight; SSH_OK or SSH_ERROR once settled. */
int ssh_tcp_open_poll(sshc *c, ssh_channel ch);

/* ---- ssh_quote.c: words for the remote shell ---------------------------------------- */

/* A growable string. Functions return 0, or -1 when out of memory (then it is freed). */
typedef struct sstr {
	char *p;
	size_t len, cap;
} sstr;

int sstr_add(sstr *s, const char *data, size_t len);
int sstr_adds(sstr *s, const char *z);
/* Appends `z` as one single-quoted shell word: any bytes, nothing expanded. */
int sstr_add_quoted(sstr *s, const char *z);
void sstr_free(sstr *s);

/* proc_list's command for an argv: shell-quoted words, space-joined (as the local
 * backend shows them). malloc'd; NULL when out of memory. */
char *ssh_quote_argv(const char *const *argv, size_t argc);

/* A valid shell variable name (what `export NAME=...` accepts). */
bool ssh_is_shell_name(const char *z);

typedef struct ssh_wrap {
	const char *nonce;      /* marks the wrapper's own lines on stdout and stderr */
	const char *cwd;        /* NULL or "": the login directory */
	const char *check_prog; /* argv[0] to look up first (not_found / permission_denied) */
	const char *check_path; /* the PATH to look it up in, when env sets one; else NULL */
	const char *const *env; /* "NAME=VALUE" words exported before exec */
	size_t env_count;
	const char *const *argv; /* what to exec */
	size_t argc;
	/* where it relays: after the command's end it waits for the channel's USR1 (at
	 * most 10 s) before it ends, so the client chooses when (sshc.fragile_open) */
	bool hold;
} ssh_wrap;

/*
 * The command line for sshd (run by the login shell): a fixed POSIX sh wrapper that
 * prints "\1ASP<nonce>" on stderr, checks cwd and the program, prints
 * "\1ASP<nonce> ok PID PGID" (or "... err CODE") on stdout, exports env and execs argv.
 * Where the server gave the command no group of its own (Dropbear) it runs it through
 * setsid and relays its output until every writer closed (ssh_quote.c). Every value
 * travels as a single-quoted positional argument.
 */
int ssh_wrap_build(const ssh_wrap *w, sstr *out);

/* ---- ssh_exec.c: exec, and the wrapper's pieces spawn shares --------------------------- */

/* exec over an exec channel with the wrapper; budget = max bytes of output kept. */
asp_status ssh_exec_run(sshc *c, const asp_exec_params *p, size_t budget, asp_exec_result *r,
                        asp_arena *a, asp_error *err);

/*
 * Checks `p` (invalid_argument) and builds the wrapper's command line for sshd with a
 * fresh `nonce` (16 hex digits). too_large past what `$SHELL -c` takes in one argument.
 * `op` ("exec", "spawn") starts every message; `hold` as ssh_wrap's. On failure `cmd` is
 * freed.
 */
asp_status ssh_cmd_build(const char *op, const asp_exec_params *p, bool hold, char nonce[17],
                         sstr *cmd, asp_error *err);
/* The wrapper's "err CODE" as the local backend's error (not_found, permission_denied...). */
asp_status ssh_cmd_refused(const char *op, const asp_exec_params *p, const char *code,
                           asp_error *err);
/* io_error: the login shell ended without running the wrapper; `why` is its stderr. */
asp_status ssh_cmd_no_wrapper(sshc *c, const char *op, int status, const char *why, size_t len,
                              asp_error *err);

/* The wrapper's marker on stdout ("\1ASP<nonce> ", then "ok PID PGID") and on stderr. */
void ssh_markers(const char *nonce, char out_marker[40], char err_marker[40]);

/* Until the wrapper's marker shows up on a stream, its bytes are the login shell's noise. */
typedef struct ssh_marker {
	bool marked;
	sstr pre; /* what came before the marker, unkept */
} ssh_marker;

typedef void (*ssh_put_fn)(void *ctx, const uint8_t *p, size_t n);

/*
 * Feeds a stream's bytes: those after the marker line go to `put`; the marker line
 * itself (without the marker and the newline) lands in `line` with *got_line set. With
 * no marker in the first 64 KiB everything is output. Frees m->pre once marked.
 */
void ssh_marker_feed(ssh_marker *m, const uint8_t *p, size_t n, const char *marker, char *line,
                     size_t line_cap, bool *got_line, ssh_put_fn put, void *ctx);

/* What the channel said of the command's end (exit-status, exit-signal requests). */
typedef struct ssh_exit_info {
	bool has_status, has_signal;
	int status;
	char signal[32];
} ssh_exit_info;

/* Under the lock: records `ch`'s exit-status/exit-signal into `x` through `cb` (kept by
 * pointer: remove it with ssh_remove_channel_callbacks before freeing either). */
void ssh_exit_watch(ssh_channel ch, struct ssh_channel_callbacks_struct *cb, ssh_exit_info *x);

/*
 * Under the lock, before freeing a command's channel: on a `fragile_open` connection,
 * waits (at most 5 s, discarding output) until the server reported the command's end or
 * closed the channel, so that its process does not exit later, while another channel is
 * being opened. Elsewhere it returns at once.
 */
void ssh_exit_settle(sshc *c, ssh_channel ch, const ssh_exit_info *x);

/*
 * Under the lock: runs `kill -s SIG` at the group (pgid == pid) or the process from a
 * second exec channel (SSHC_URGENT, so it never waits behind commands); with `kill_later`
 * a KILL follows 2 s later, scheduled in the sandbox. NULL when no channel could be had
 * within 5 s. The caller reaps the channel.
 */
ssh_channel ssh_killer_start(sshc *c, long pid, long pgid, const char *sig, bool kill_later);
/*
 * Under the lock, on a fragile_open connection before any command runs: opens the kill
 * line (sshc.kill_line). Without it (refused, or a login shell that is not POSIX) kills
 * open channels of their own, as elsewhere.
 */
void ssh_kill_line_open(sshc *c);
/* Under the lock: as ssh_killer_start, any shell command (for several groups at once). */
ssh_channel ssh_killer_exec(sshc *c, const char *cmd);
/* Under the lock: frees a killer channel once its command ended (or at once: force). */
void ssh_killer_reap(sshc *c, ssh_channel *k, bool force);

/* ---- ssh_proc.c: spawned processes over exec channels (native mode) ------------------- */

typedef struct ssh_procs ssh_procs;

/* A connection's process table; no thread until the first spawn. NULL: out of memory. */
ssh_procs *ssh_procs_new(sshc *c);
/*
 * Ends the delivery thread, tells every follower on_lost, TERMs the groups still running
 * (KILL 2 s later, scheduled in the sandbox) if the connection lives, and frees every
 * channel and process. No call may be inside. NULL: no-op.
 */
void ssh_procs_free(ssh_procs *ps);

/* spawn; with `hold` nothing of the process is delivered until ssh_procs_release. */
asp_status ssh_proc_spawn(ssh_procs *ps, const asp_spawn_params *p, asp_spawn_result *r, bool hold,
                          asp_error *err);
/*
 * connect: a direct-tcpip channel as a handle of the table (docs/design.md, "Ports and
 * changes"); `hold` as spawn's.
 */
asp_status ssh_proc_connect(ssh_procs *ps, const asp_connect_params *p, asp_connect_result *r,
                            bool hold, asp_error *err);
asp_status ssh_proc_write(ssh_procs *ps, const asp_proc_write_params *p, asp_error *err);
asp_status ssh_proc_signal(ssh_procs *ps, const asp_proc_signal_params *p, asp_error *err);
/* A bulk stream (a tree read): its stdout's window is `window` (sshc_channel_take). */
void ssh_proc_widen(ssh_procs *ps, uint64_t id, uint32_t window);
/* window-change on a terminal's channel: not_found, invalid_argument (no tty, finished). */
asp_status ssh_proc_resize(ssh_procs *ps, const asp_proc_resize_params *p, asp_error *err);
asp_status ssh_proc_wait(ssh_procs *ps, const asp_proc_wait_params *p, asp_proc_wait_result *r,
                         asp_arena *a, asp_error *err);
asp_status ssh_proc_list(ssh_procs *ps, asp_proc_list_result *r, asp_arena *a, asp_error *err);

/* asp_transport.subscribe and .unsubscribe of native mode (attach: unsupported). */
asp_status ssh_procs_subscribe(ssh_procs *ps, asp_op_id op, const void *params, void *result,
                               asp_arena *a, asp_proc_sub *sub, asp_error *err);
void ssh_procs_unsubscribe(ssh_procs *ps, uint64_t proc);

/* unsupported, saying agent mode can. */
asp_status ssh_proc_attach_unsupported(asp_error *err);

/* ---- ssh_tree.c: tree_write and tree_read through the sandbox's tar (native mode) ------ */

typedef struct ssh_trees ssh_trees;

/* The tree handles of a connection's process table `ps`. NULL: out of memory. */
ssh_trees *ssh_trees_new(ssh_procs *ps, sftpc *sftp, size_t budget);
/* After ssh_procs_free (whose followers' last callbacks come here). NULL: no-op. */
void ssh_trees_free(ssh_trees *ts);
asp_status ssh_tree_write(ssh_trees *ts, const asp_tree_write_params *p, asp_tree_write_result *r,
                          asp_error *err);
/* tree_read, followed by `sub` (asp_transport.subscribe's contract). */
asp_status ssh_tree_read(ssh_trees *ts, const asp_tree_read_params *p, asp_tree_read_result *r,
                         asp_proc_sub *sub, asp_error *err);
/*
 * When `proc` is a tree handle these serve the call (*st, err) and return true; else
 * false, and the call is the process table's.
 */
bool ssh_tree_proc_write(ssh_trees *ts, const asp_proc_write_params *p, asp_status *st,
                         asp_error *err);
bool ssh_tree_proc_wait(ssh_trees *ts, const asp_proc_wait_params *p, asp_proc_wait_result *r,
                        asp_arena *a, asp_status *st, asp_error *err);
bool ssh_tree_proc_signal(ssh_trees *ts, const asp_proc_signal_params *p, asp_status *st,
                          asp_error *err);
bool ssh_tree_unsubscribe(ssh_trees *ts, uint64_t proc);

/* ---- ssh_sftp_proto.c / ssh_sftp.c: files over SFTP ----------------------------------- */

sftpc *sftpc_new(sshc *c);
/* Under the lock: closes its channel (failing requests in flight) and frees it. */
void sftpc_free(sftpc *f);

asp_status ssh_sftp_read(sftpc *f, const asp_read_params *p, size_t budget, asp_read_result *r,
                         asp_arena *a, asp_error *err);
asp_status ssh_sftp_write(sftpc *f, const asp_write_params *p, asp_write_result *r, asp_error *err);
asp_status ssh_sftp_stat(sftpc *f, const asp_stat_params *p, asp_stat_result *r, asp_arena *a,
                         asp_error *err);
asp_status ssh_sftp_list(sftpc *f, const asp_list_params *p, asp_list_result *r, asp_arena *a,
                         asp_error *err);
asp_status ssh_sftp_mkdir(sftpc *f, const asp_mkdir_params *p, asp_error *err);
asp_status ssh_sftp_remove(sftpc *f, const asp_remove_params *p, asp_error *err);
asp_status ssh_sftp_rename(sftpc *f, const asp_rename_params *p, asp_error *err);
/* The server's canonical form of `path` (malloc'd): one round trip. */
asp_status ssh_sftp_realpath(sftpc *f, const char *path, char **out, asp_error *err);

/*
 * A tree's members (ssh_tree_sftp.c), many in flight from one thread: ssh_sftp_tq_send puts
 * a member's requests on the channel, together (a file's OPEN, WRITEs, FSETSTAT and CLOSE
 * on the handle the OPEN will get), and says whether all of them went (else more follow
 * the answers, in the await); ssh_sftp_tq_await takes its answers (every tq sent is
 * awaited once, in any order; sftp-server answers in the order it was asked). Each takes
 * the connection's lock for itself.
 */
typedef enum sftp_tq_kind {
	TQ_MKDIR,    /* path, perm */
	TQ_PUT,      /* len bytes of data at base of path, made (O_EXCL) when `create`; the
	                `last` piece sets perm and mtime */
	TQ_GET,      /* up to len bytes of path into buf (room for len): *got */
	TQ_LINK,     /* path, a symlink to s2 */
	TQ_SETSTAT,  /* path's perm and mtime */
	TQ_LSTAT,    /* lkind 0 absent, 1 a directory, 2 anything else; lperm, lmtime */
	TQ_READLINK, /* link: a malloc'd string, the caller's */
	TQ_LIST,     /* list: path's entries, in `arena` */
} sftp_tq_kind;

typedef struct sftp_tq {
	sftp_tq_kind kind;
	const char *path, *s2;
	const uint8_t *data;
	uint8_t *buf;
	size_t len;
	uint64_t base;
	bool create, last;
	uint32_t perm, mtime;
	size_t got;
	int lkind;
	uint32_t lperm, lmtime;
	char *link;
	asp_arena *arena;
	asp_list_result list;
	struct sftp_tq_flight *fl; /* between send and await */
} sftp_tq;

bool ssh_sftp_tq_send(sftpc *f, sftp_tq *t);
asp_status ssh_sftp_tq_await(sftpc *f, sftp_tq *t, asp_error *err);

/* ---- ssh_tree_sftp.c: trees over SFTP, for a sandbox without tar ----------------------- */

struct asp_tar_member;
struct asp_tree_exclude;

/*
 * tree_write's members into the temporary directory `tmp_name` (made by the write
 * script) beside `target`, or in it when `inside`; sftp_tw_finish waits for every
 * member and gives the directories their mode and mtime, and the write script puts the
 * tree in place (ssh_tree.c). sftp_tw_cancel makes the feed's next step fail with `why`
 * (any thread, while the writer lives); sftp_tw_stop waits for the requests in flight;
 * sftp_tw_remove removes the temporary over SFTP (where the script could not);
 * sftp_tw_free removes nothing.
 */
typedef struct sftp_tw sftp_tw;
asp_status sftp_tw_open(sftpc *f, size_t budget, const char *target, const char *tmp_name,
                        bool inside, sftp_tw **out, asp_error *err);
asp_status sftp_tw_member(sftp_tw *w, const struct asp_tar_member *m, asp_error *err);
asp_status sftp_tw_data(sftp_tw *w, const uint8_t *p, size_t n, asp_error *err);
asp_status sftp_tw_file_end(sftp_tw *w, asp_error *err);
asp_status sftp_tw_finish(sftp_tw *w, asp_error *err);
void sftp_tw_cancel(sftp_tw *w, const asp_error *why);
void sftp_tw_stop(sftp_tw *w);
void sftp_tw_remove(sftp_tw *w);
void sftp_tw_free(sftp_tw *w);

/* tree_read's stream of `dir`, made here and handed to `emit` in order; an error from
 * `emit` stops it. */
typedef asp_status (*sftp_emit)(void *user, const uint8_t *p, size_t n, asp_error *err);
asp_status sftp_tree_walk(sftpc *f, size_t budget, const char *dir,
                          const struct asp_tree_exclude *ex, sftp_emit emit, void *user,
                          asp_error *err);

/* ---- ssh_agent_mode.c ------------------------------------------------------------------ */

typedef struct ssh_agent_link ssh_agent_link;

/*
 * Starts `<agent> --stdio` on one exec channel and the core's RPC engine over it; checks
 * it answers hello. not_found with what to do when the binary is missing.
 */
asp_status ssh_agent_start(sshc *c, const char *agent_path, ssh_agent_link **out, asp_error *err);
/*
 * "agent": "upload": copies the local static asp-agent ($ASP_AGENT_STATIC, else the
 * installed one) into the sandbox over SFTP unless that content is there already, and
 * writes its path (relative to the login directory) to `remote`.
 */
asp_status ssh_agent_upload(sshc *c, sftpc *f, char *remote, size_t cap, asp_error *err);

/* The RPC engine's op table and self for the link. */
const asp_ops *ssh_agent_ops(void);
void *ssh_agent_self(ssh_agent_link *l);
bool ssh_agent_alive(ssh_agent_link *l);
void ssh_agent_abort(ssh_agent_link *l);
void ssh_agent_free(ssh_agent_link *l);

#endif
