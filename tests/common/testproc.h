/*
 * Test helpers: real child processes on pipes or a socketpair, reads with deadlines (a
 * broken responder fails the test instead of hanging it), and frames built and parsed
 * with the core's own wire functions.
 */
#ifndef ASP_TESTPROC_H
#define ASP_TESTPROC_H

#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct tproc {
	pid_t pid;
	int in;  /* the child's stdin (write end), -1 once closed */
	int out; /* the child's stdout (read end); with a socketpair, in == out */
	int err; /* the child's stderr (read end) */
} tproc;

/* Spawns argv with pipes on stdin, stdout and stderr. 0, or -1 with errno. */
int tproc_spawn(tproc *p, char *const argv[]);
/* Spawns argv with one end of a socketpair as both stdin and stdout. */
int tproc_spawn_socket(tproc *p, char *const argv[]);
/* Closes the child's stdin (EOF for it). */
void tproc_close_in(tproc *p);
/* Waits for exit up to `ms` (then SIGKILL and -1); returns the wait status. */
int tproc_wait(tproc *p, int ms, struct rusage *ru);
/* Closes our ends. */
void tproc_close(tproc *p);

/* Writes everything. 0, or -1. */
int t_write_all(int fd, const void *buf, size_t len);
/* Reads until EOF or `ms` elapsed; malloc'd, NUL-terminated. *eof says which. */
char *t_read_until_eof(int fd, int ms, size_t *len, bool *eof);
/* One frame body: 1 read (malloc'd *body), 0 EOF, -1 timeout or error. */
int t_read_frame(int fd, int ms, uint8_t **body, size_t *len);

/* Appends a request frame for `op` with `params` to `b`. */
void t_add_request(asp_buf *b, uint32_t id, asp_op_id op, const void *params);
/* Appends a 4-byte length header and `len` raw bytes. */
void t_add_framed(asp_buf *b, const void *data, size_t len);

/* A parsed response: its id and, on error, the status and message. */
typedef struct t_resp {
	uint32_t id;
	asp_status st;
	asp_error err;
} t_resp;

/*
 * Parses a response body; on success decodes the result of `op` into `result` (may be
 * NULL to skip) with `a`. false when the body is not a well-formed response.
 */
bool t_parse_response(const uint8_t *body, size_t len, asp_op_id op, void *result, asp_arena *a,
                      t_resp *r);

/* Reads a whole file; malloc'd. NULL on error. */
uint8_t *t_read_file(const char *path, size_t *len);

/* Monotonic milliseconds. */
int64_t t_now_ms(void);

/* $NAME or skip-worthy NULL. */
const char *t_env(const char *name);

/*
 * The pid a process wrote to `path` (as `echo $$ > path` does: digits and a newline), once
 * it is there and is not `old`; 0 after `ms`. A partly written file reads as not there yet.
 */
pid_t t_pid_from_file(const char *path, pid_t old, int ms);

/* Whether `pid` is alive and not a zombie (from /proc/PID/stat). */
bool t_pid_alive(pid_t pid);

/*
 * Whether thread `tid` of this process is asleep (state S or D), polled for up to `ms`: a
 * thread that announced it is about to make a blocking call is then inside it. false once
 * `ms` passed, or if there is no such thread.
 */
bool t_thread_asleep(pid_t tid, int ms);

/*
 * SIGSTOP to `pid`, returning once every thread of it has stopped (true) or after `ms`
 * (false). kill() returns when the signal is queued: a thread not yet reached can still
 * answer a request, which under load made "the call to a stopped agent" succeed.
 */
bool t_stop(pid_t pid, int ms);

/* How many processes have `pid` as their parent (from /proc). */
int t_children_of(pid_t pid);

/* Entries of a directory such as /proc/self/fd (the open one counts itself), or -1. */
int t_count_entries(const char *dir);

/* Whether the binary was built with AddressSanitizer (its RSS is larger). */
bool t_asan(void);

#endif
