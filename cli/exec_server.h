/*
 * asp exec-server: Codex's exec-server protocol (newline-delimited JSON-RPC without the
 * "jsonrpc" member) over any ASP transport (docs/harnesses.md, "Codex"). One session per
 * connection: exec_server.c frames and dispatches, exec_server_reply.c answers,
 * exec_server_fs.c serves fs methods, exec_server_proc.c process methods and their
 * notifications; cmd_exec_server.c runs a session on stdin/stdout, exec_server_ws.c one
 * per WebSocket connection.
 */
#ifndef ASP_CLI_EXEC_SERVER_H
#define ASP_CLI_EXEC_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "asp/asp.h"
#include "cli.h"

/* JSON-RPC error codes, as Codex's own exec-server answers them. */
enum {
	XS_INVALID_REQUEST = -32600,
	XS_METHOD_NOT_FOUND = -32601,
	XS_INVALID_PARAMS = -32602,
	XS_INTERNAL = -32603,
	XS_NOT_FOUND = -32004,
};

/* Sends one message (compact JSON, no newline); called with the session's lock held. */
typedef void (*xs_send_fn)(void *user, const char *msg, size_t len);

struct xs_proc;

typedef struct xs_session {
	asp_client *c;     /* borrowed */
	asp_workspace *ws; /* the harness's paths onto the sandbox's; NULL: none */
	char *base;        /* the sandbox's working directory (absolute) */
	char *home;        /* the sandbox's $HOME, or NULL */
	char *shell;       /* bash's path in the sandbox, or NULL for /bin/sh */
	char *tmp;         /* the sandbox's $TMPDIR or /tmp */
	bool pty;          /* the responder's hello lists pty */
	char *session;     /* --session: the tag its processes carry (docs/tools.md), or NULL */
	char id[40];       /* the sessionId initialize answers */
	xs_send_fn send;
	void *send_user;
	pthread_mutex_t mu; /* guards procs and every send */
	pthread_cond_t cv;  /* broadcast when a process has news (process/read waits) */
	struct xs_proc *procs;
} xs_session;

/*
 * A session over `c` (borrowed), sending with `send`, whose processes carry `session`
 * (NULL: none); it follows again the running processes an earlier asp exec-server of the
 * same session left. NULL with `err` filled on failure.
 */
xs_session *xs_session_new(asp_client *c, const char *session, xs_send_fn send, void *user,
                           asp_error *err);

/* Handles one incoming message (a request or a notification), answering through send. */
void xs_session_handle(xs_session *s, const char *msg, size_t len);

/* Kills the session's processes that still run, then frees it. NULL is a no-op. */
void xs_session_free(xs_session *s);

/* --- exec_server_reply.c: answers and paths ------------------------------------------------------
 */

/* Answers request `id` with `result` (stolen; NULL: {}). Returns true. */
bool xs_reply(xs_session *s, json_t *id, json_t *result);
/* The same with s->mu held. */
void xs_reply_locked(xs_session *s, json_t *id, json_t *result);
/* Answers request `id` with an error. Returns false, for `return xs_error(...)`. */
bool xs_error(xs_session *s, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same with `data` (stolen) in the error object. */
bool xs_error_data(xs_session *s, json_t *id, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Answers with a failed ASP call: not_found is -32004, the rest -32603 with the message. */
bool xs_error_asp(xs_session *s, json_t *id, const asp_error *err, const char *what);
/* Sends a notification; `params` is stolen. The caller holds s->mu. */
void xs_notify_locked(xs_session *s, const char *method, json_t *params);

/*
 * The sandbox path for params[key]: a file:// URI or an absolute path, mapped through the
 * workspace. malloc'd; NULL after answering `id` with -32602 when it is missing or bad.
 */
char *xs_path_param(xs_session *s, json_t *id, json_t *params, const char *key);
/* A file:// URI (new reference) for the sandbox's absolute `path`, mapped back. */
json_t *xs_uri(xs_session *s, const char *path);

/* --- exec_server_fs.c, exec_server_proc.c -------------------------------------------------- */

/* Each returns false when it does not know `method` (then nothing was answered). */
bool xs_fs_handle(xs_session *s, const char *method, json_t *id, json_t *params);
bool xs_proc_handle(xs_session *s, const char *method, json_t *id, json_t *params);
/* Kills what still runs and frees the table (at session end). */
void xs_procs_free(xs_session *s);
/*
 * Enters the session's running processes proc_list shows that no session of this process
 * follows (an earlier asp exec-server's, killed) into the table, followed from the start
 * the responder holds, so process/read and process/write reach them by their processId.
 */
void xs_procs_resume(xs_session *s);

/* --- exec_server_ws.c ---------------------------------------------------------------------- */

/*
 * Serves sessions over WebSocket on `url` (ws://IP:PORT; port 0 picks one) until SIGINT or
 * SIGTERM; prints "listening on ws://IP:PORT" on stderr once ready. 0, or -1 with `why`.
 */
int xs_ws_serve(asp_client *c, const char *session, const char *url, char *why, size_t cap);

#endif
