/*
 * asp ui: a page on loopback that shows the sandbox (docs/design.md, "The page").
 * ui_server.c serves it with libwebsockets: the embedded assets (ui_assets.c), the
 * /file download, and one WebSocket per page whose JSON requests ui_api.c answers on a
 * pool of worker threads (ui_pool.c), with files in ui_files.c and what streams back
 * (process output, a terminal, file changes) in ui_follow.c. Everything it does in the
 * sandbox goes through libasp's public calls.
 */
#ifndef ASP_CLI_UI_H
#define ASP_CLI_UI_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "asp/asp.h"

/* --- ui_pool.c: worker threads for everything that calls the client ------------------------ */

/* Runs fn(arg) on a worker (started as needed, at most UI_POOL_MAX); false when it cannot. */
bool ui_pool_run(void (*fn)(void *), void *arg);
/* Waits (bounded) until every job has returned; new jobs are refused from then on. */
void ui_pool_stop(void);

/* --- ui_server.c: the sockets --------------------------------------------------------------- */

/* One page's WebSocket: a queue of messages to send, referenced while anything uses it. */
typedef struct ui_conn ui_conn;

/* Sends `msg` (stolen) as one text message; dropped once the socket closed. */
void ui_send(ui_conn *c, json_t *msg);
/*
 * As ui_send, from a callback of the client's reading thread: when the page reads slower
 * than the output comes, waits (a bounded time) for room, the backpressure the
 * responder then sees; a page that stays behind is disconnected.
 */
void ui_send_output(ui_conn *c, json_t *msg);

typedef struct ui_listen {
	const char *host; /* a loopback literal: 127.0.0.1, ::1 */
	int port;         /* 0: any free one */
	char token[65];   /* hex; required by every request */
} ui_listen;

/*
 * Serves the page until SIGINT or SIGTERM, printing its URL (with the token) on stdout
 * once listening. 0, or -1 with `why`.
 */
int ui_serve(asp_client *client, const ui_listen *l, char *why, size_t cap);

/* --- ui_api.c: one page's requests ----------------------------------------------------------- */

/* What a page has open in the sandbox: followed processes, its terminal, watch, uploads. */
typedef struct ui_page ui_page;

ui_page *ui_page_new(asp_client *client, ui_conn *c);
/* Handles one request ({"id", "op", ...}), answering through ui_send. Any worker. */
void ui_page_handle(ui_page *p, json_t *req);
/* Ends what the page started (its terminal, watch, unfinished uploads), then frees it. */
void ui_page_free(ui_page *p);

/* Answers request `id` with `result` (stolen) or with an error. */
void ui_reply(ui_conn *c, json_t *id, json_t *result);
void ui_reply_error(ui_conn *c, json_t *id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ui_reply_asp(ui_conn *c, json_t *id, const asp_error *err);
/* The answer of a call that returned `st`: `result` (stolen; NULL: {}) when ASP_OK, else `err`. */
void ui_reply_status(ui_conn *c, json_t *id, asp_status st, const asp_error *err, json_t *result);

/* A JSON string of `s` whatever its bytes (invalid UTF-8 becomes U+FFFD); *lossy set then. */
json_t *ui_string(const char *s, size_t len, bool *lossy);

/* --- ui_files.c: list, read, rename, remove, uploads ------------------------------------------ */

/* A page's uploads in progress (any worker may add a chunk: it has a lock of its own). */
typedef struct ui_uploads ui_uploads;

ui_uploads *ui_uploads_new(void);
/* Handles a file op; false when `op` is not one (nothing was answered). */
bool ui_files_handle(asp_client *client, ui_conn *c, ui_uploads *up, const char *op, json_t *id,
                     json_t *req);
/* Removes the temporary files of uploads that did not finish, and frees the table. */
void ui_uploads_free(asp_client *client, ui_uploads *up);

/* --- ui_follow.c: processes, the terminal, changes ------------------------------------------ */

typedef struct ui_follows ui_follows;

ui_follows *ui_follows_new(asp_client *client, ui_conn *c);
/* Handles a process, terminal or watch op; false when `op` is not one. */
bool ui_follows_handle(ui_follows *f, const char *op, json_t *id, json_t *req);
/* Detaches what the page follows, hangs its terminal up, closes its watch; frees. */
void ui_follows_free(ui_follows *f);

/* --- ui_download.c: GET /file ------------------------------------------------------------- */

typedef struct ui_download ui_download;

/*
 * A file's bytes for an HTTP answer, read on a worker in chunks while the socket takes
 * them. `wake` is called (any thread) when something is ready to write. NULL when out of
 * memory.
 */
ui_download *ui_download_start(asp_client *client, const char *path, void (*wake)(void *),
                               void *wake_arg);
/* Ready to answer: the headers are known (0 while not yet), else status >= 400 with text. */
int ui_download_status(ui_download *d, uint64_t *size, const char **message);
/* Up to `cap` next bytes into `buf`: how many, 0 when none is ready yet; *done at the end. */
size_t ui_download_take(ui_download *d, uint8_t *buf, size_t cap, bool *done);
/* The socket is gone, or the answer over: the reading stops; frees when the worker left. */
void ui_download_release(ui_download *d);

/* --- ui_assets.c ------------------------------------------------------------------------------ */

typedef struct ui_asset {
	const char *path; /* "/", "/app.js" */
	const char *type; /* Content-Type */
	const char *data;
	size_t len;
} ui_asset;

const ui_asset *ui_asset_find(const char *path);
/* Whether xterm.js was built in; else why not (static text). */
bool ui_terminal_built(const char **why);

#endif
