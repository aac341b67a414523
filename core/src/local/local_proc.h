/*
 * Spawned processes of the local backend: the process table, connections, subscribers.
 *
 * Threads. Each spawned process has one pump thread (local_pump.c) that polls its
 * stdout, stderr, pidfd and a wake eventfd, appends what it reads to the process's
 * replay rings and delivers it to the subscribers before it reads again. So a
 * subscriber whose sink blocks leaves the child's pipes unread (backpressure) and the
 * memory a process can hold is its two rings (1 MiB each) plus one chunk. One thread per
 * process rather than one poll thread for all: a sink blocked by one slow client stalls
 * only the processes that client watches, and there is no queue between the pipe and the
 * sink to bound; processes cost a fork each anyway, a thread is small beside that.
 *
 * Events. Output and exit go to a connection's sink as typed events (local_conn_event),
 * an output event's bytes pointing into the ring while p->mu is released for the sink:
 * the pump appends only while no subscriber is `sending`, so those bytes neither move
 * nor wrap away before the sink returns.
 *
 * Ordering. Every event to one subscriber is sent by one thread at a time (its `sending`
 * flag), in offset order per stream, and its exit after all of its output. A subscriber
 * created by a request served through asp_local_conn_serve (or inside a hold) is `gated`
 * until that request's response has gone out: the pump waits for the gate rather than
 * skipping it, so nothing is lost and the response comes first.
 *
 * Locks, outer to inner: asp_local.mu (the table) → local_proc.mu → asp_local_conn.mu.
 * No lock is held while a sink is called.
 */
#ifndef ASP_LOCAL_PROC_H
#define ASP_LOCAL_PROC_H

#include "local_impl.h"
#include "proc_ring.h"
#include "spawn_util.h"
#include "wire.h"

#include <pthread.h>
#include <stdatomic.h>

#define PROC_RING_BYTES   (1024u * 1024u) /* the last 1 MiB of each stream */
#define PROC_KEEP_DONE    64              /* finished processes retained */
#define PROC_CHUNK        (64u * 1024u)   /* bytes read, and sent, at most at a time */
#define PROC_STREAM_COUNT 2               /* 0 stdout, 1 stderr */

struct asp_local_conn {
	asp_local *l;
	asp_conn_sink sink;
	bool has_sink;
	atomic_uint refs; /* the server's, plus one per subscriber */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool dead;        /* the sink failed or the connection was disconnected */
	unsigned sending; /* threads inside sink.send */
};

typedef struct local_proc local_proc;

/* What a handle of the table is: all share proc_write, proc_signal, proc_wait, exit. */
typedef enum local_proc_kind {
	LOCAL_PROC_CHILD,    /* a spawned process (the pump above) */
	LOCAL_PROC_SOCK,     /* connect's TCP connection (connect.c) */
	LOCAL_PROC_WATCH,    /* watch's inotify watcher (watch.c) */
	LOCAL_PROC_TREE_IN,  /* tree_write's unpacker, fed by proc_write (tree_ops.c) */
	LOCAL_PROC_TREE_OUT, /* tree_read's packer, whose stream is its stdout (tree_ops.c) */
} local_proc_kind;

/* One connection receiving one process's notifications. Fields under the process's mu. */
typedef struct local_sub {
	struct local_sub *next;
	asp_local_conn *conn;             /* a reference */
	uint64_t sent[PROC_STREAM_COUNT]; /* next offset to send per stream */
	bool trunc[PROC_STREAM_COUNT];    /* the next chunk carries truncated_before */
	bool eof_sent[PROC_STREAM_COUNT]; /* the stream's eof chunk went out (connect) */
	bool gated;                       /* its response is not out yet: hold everything */
	bool sending;                     /* a thread is sending to it */
	bool removed;                     /* replaced by a newer attach, or never listed */
	bool exit_sent;
	unsigned refs; /* listed in the process, held by a request; freed at 0 */
} local_sub;

struct local_proc {
	uint64_t id;
	char *tag, *command;
	asp_local *l;
	atomic_uint refs; /* the table's, the pump's, and one per request using it */
	uint64_t timeout_ms;
	int wake_fd; /* eventfd: tells the pump to look at `ending` */

	pthread_mutex_t mu;
	pthread_cond_t cv; /* gates opening, sends ending, the process finishing */
	local_child child; /* the pump owns out_fd/err_fd/pidfd; pid is read under mu */
	proc_ring ring[PROC_STREAM_COUNT];
	bool ending;           /* the responder is shutting down: TERM, then KILL ... */
	unsigned end_grace_ms; /* ... this long after (2 s; less when it is killed itself) */
	bool reaped;           /* the group may not be signalled any more */
	bool finished;         /* dead and its output at EOF: the exit fields hold */
	int64_t exit_code;
	char signal[16]; /* "" when it exited */
	bool timed_out;
	uint64_t done_seq; /* when it finished, among the backend's processes */
	local_sub *subs;

	pthread_mutex_t in_mu; /* one proc_write at a time; in_fd, stdin_eof, in_off */
	pthread_cond_t in_cv;  /* in_off moved, or the input ended: for writes with an offset */
	uint64_t in_off;       /* bytes proc_write has put into in_fd */
	int in_fd;             /* non-blocking write end of its stdin; -1 after eof; tty: the
	                        * terminal's master, kept open after eof (for proc_resize) */
	bool stdin_eof;
	bool tty; /* on a pseudo-terminal (child.tty): proc_resize works, eof types VEOF */

	local_proc_kind kind;
	char close_sig[8]; /* not a child: proc_signal asked it to close ("KILL", "TERM") */
	bool eof[PROC_STREAM_COUNT]; /* the stream ended before exit: an eof chunk says so */
	char *end_error;     /* not a child: why it failed, for exit's error; malloc'd, owned */
	asp_status end_code; /* a tree handle that failed: its error's code (exit's error_code) */
	bool has_counts;     /* a tree handle that succeeded: entries and bytes hold */
	uint64_t entries, bytes;
	void *ext; /* the kind's own state (watch.c's watcher), owned by its pump */
};

/* ---- connections (local_conn.c) ---- */

void local_conn_ref(asp_local_conn *c);
void local_conn_unref(asp_local_conn *c);

/* Sends one frame through the sink unless the connection is dead. false: dead now. */
bool local_conn_send(asp_local_conn *c, const uint8_t *frame, size_t len);

/* As local_conn_send, for a frame that may reference bins: 1 sent, 0 gone, -1 out of memory. */
int local_conn_send_buf(asp_local_conn *c, const asp_buf *out);

/*
 * Sends one typed event unless the connection is dead: to the sink's `event`, else as a
 * frame built in `scratch` (asp_sink_send_event). 1 sent, 0 dead now, -1 out of memory
 * (nothing sent; the connection lives). The event's bytes must not move until it returns.
 */
int local_conn_event(asp_local_conn *c, asp_notice_id n, const void *ev, asp_buf *scratch);

/* ---- the table and its subscribers (proc_table.c) ---- */

/* The process with that id, with a reference taken; NULL (err: not_found) otherwise. */
local_proc *local_proc_find(asp_local *l, uint64_t id, const char *op, asp_error *err);

/* Drops a reference; the last one frees the process. */
void local_proc_unref(local_proc *p);

/* Under l->mu: takes the process with that id out of the table (the table's reference
 * passes to the caller). */
void local_proc_unlist_locked(asp_local *l, uint64_t id);

/*
 * Under l->mu and p->mu, as the process becomes finished (so proc_wait and proc_list see
 * its end and its eviction order in one step): counts it among the finished ones and
 * unlists the one that makes 65, returned for the caller to unref outside the locks.
 */
local_proc *local_proc_count_done_locked(local_proc *p);

/* ---- handles that are not children (handle.c) ---- */

/*
 * A new handle of `kind` with rings of `ring_limit` bytes, the wake eventfd, `tag` and
 * `command` copied (command required), not listed. NULL (err set) on failure.
 */
local_proc *local_proc_alloc(asp_local *l, local_proc_kind kind, size_t ring_limit, const char *tag,
                             const char *command, const char *op, asp_error *err);

/* Frees a handle that local_proc_alloc made and that was never listed. */
void local_proc_discard(local_proc *p);

/*
 * Lists a handle that is not a child (connect, watch) with `sub` (NULL: none; consumed)
 * as its first subscriber, gated by the current request's hold, and starts `pump` for
 * it, which owns a reference and must end with local_pump_end. On failure the handle
 * and sub are freed and err says why (a shutdown under way, no thread).
 */
asp_status local_proc_list_start(local_proc *p, local_sub *sub, void *(*pump)(void *),
                                 const char *op, asp_error *err);

/*
 * proc_signal on a handle that is not a child: KILL and TERM close it (its pump sees
 * close_sig), other signals are invalid_argument.
 */
asp_status local_proc_close_signal(local_proc *p, const char *sig, asp_error *err);

/* ---- the table (proc_table.c), continued ---- */

/* The pump has ended (asp_local_shutdown waits for every pump). */
void local_proc_pump_gone(local_proc *p);

/* A new subscriber of `c`, not yet listed. NULL when out of memory. */
local_sub *local_sub_new(asp_local_conn *c);

/* Under p->mu: drops a reference; the last frees it. */
void local_sub_unref_locked(local_sub *s);

/* ---- delivery and the pump (local_pump.c) ---- */

/*
 * Under p->mu (released while sending): sends what subscribers have not had yet, the
 * exit once finished. `only` NULL: every listed ungated subscriber (the pump), waiting
 * for gated ones that have something pending. `only` set: just that one, gate or not
 * (an attach replaying before its response); with `with_exit` false it stops at output.
 */
void local_deliver_locked(local_proc *p, local_sub *only, bool with_exit, asp_buf *b);

/* Starts the pump thread of a started process. 0, or an errno. */
int local_pump_start(local_proc *p);

/* Starts `fn` as the pump of `p` (signals blocked, as local_pump_start). 0 or an errno. */
int local_pump_start_fn(local_proc *p, void *(*fn)(void *));

/*
 * From a pump: `n` bytes read of stream `i` into its ring, delivered to the subscribers
 * before it returns (so a slow reader stops the pump: backpressure).
 */
void local_pump_chunk(local_proc *p, int i, const uint8_t *buf, size_t n, asp_buf *b);

/* From a pump: stream `i` has ended; subscribers get an output chunk with eof. */
void local_pump_eof(local_proc *p, int i, asp_buf *b);

/*
 * From a pump, last: the handle has finished with these exit fields (`error` malloc'd or
 * NULL, consumed); counts it among the finished, sends exit, closes its input, drops the
 * pump's reference. `b` is freed.
 */
void local_pump_end(local_proc *p, int64_t exit_code, const char *signal, char *error, asp_buf *b);

/* Wakes the pump (to see `ending`). */
void local_pump_wake(local_proc *p);

/* ---- holding notifications behind a response (local_hold.c) ---- */

typedef struct local_hold_entry local_hold_entry;

/* The request a thread is serving for one connection, and the subscribers it gated. */
typedef struct local_hold {
	asp_local_conn *c;
	local_hold_entry *list;
} local_hold;

/* Requests on this thread are served for `c` from now on (one hold per thread). */
void local_hold_begin(local_hold *h, asp_local_conn *c);

/* Opens the gates the request closed, and lets the pumps go on. */
void local_hold_end(local_hold *h);

/*
 * Whether the current request on this thread runs under asp_local_conn_serve or a hold
 * for `c`; if so, `s` (of `p`) is remembered and ungated once the response is out.
 * Takes a reference on both. false when there is no hold (or out of memory: the sub is
 * then not gated, which only risks the order).
 */
bool local_hold_add(asp_local_conn *c, local_proc *p, local_sub *s);

/* ---- the ops (local_proc.c) ---- */

asp_status asp_local_spawn(void *self, const asp_spawn_params *p, asp_spawn_result *r, asp_arena *a,
                           asp_error *err);
asp_status asp_local_proc_write(void *self, const asp_proc_write_params *p,
                                asp_proc_write_result *r, asp_arena *a, asp_error *err);
asp_status asp_local_proc_signal(void *self, const asp_proc_signal_params *p,
                                 asp_proc_signal_result *r, asp_arena *a, asp_error *err);
asp_status asp_local_proc_resize(void *self, const asp_proc_resize_params *p,
                                 asp_proc_resize_result *r, asp_arena *a, asp_error *err);
asp_status asp_local_proc_wait(void *self, const asp_proc_wait_params *p, asp_proc_wait_result *r,
                               asp_arena *a, asp_error *err);
asp_status asp_local_proc_list(void *self, const asp_proc_list_params *p, asp_proc_list_result *r,
                               asp_arena *a, asp_error *err);
asp_status asp_local_proc_attach(void *self, const asp_proc_attach_params *p,
                                 asp_proc_attach_result *r, asp_arena *a, asp_error *err);
asp_status local_op_connect(void *self, const asp_connect_params *p, asp_connect_result *r,
                            asp_arena *a, asp_error *err); /* connect.c */
asp_status local_op_watch(void *self, const asp_watch_params *p, asp_watch_result *r, asp_arena *a,
                          asp_error *err); /* watch.c */
asp_status local_op_tree_write(void *self, const asp_tree_write_params *p, asp_tree_write_result *r,
                               asp_arena *a, asp_error *err); /* tree_ops.c */
asp_status local_op_tree_read(void *self, const asp_tree_read_params *p, asp_tree_read_result *r,
                              asp_arena *a, asp_error *err); /* tree_ops.c */

/*
 * proc_write's body (local_proc.c): `len` bytes at `offset` (has_offset false: after what
 * came), then eof when asked, into the handle's input. tree_write's first bytes take it too.
 */
asp_status local_proc_feed(local_proc *pr, const uint8_t *data, size_t len, bool has_offset,
                           uint64_t offset, bool eof, asp_error *err);

/* Under p->mu: whether any subscriber can still receive events (local_pump.c). */
bool local_proc_followed_locked(local_proc *p);

#endif
