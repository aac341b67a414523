/*
 * A lost connection, with each kind of stream open, through the public client (CUnit
 * checks): a followed spawn, a spawn on a terminal, a connect, a watch, an exec in
 * flight and a proc_wait in flight. The target's `kill` makes the connection die as a
 * crashed server would (SIGKILL of the server's process for it, a relay that cuts it);
 * then every stream of it ends with on_lost (transport_error), the calls in flight fail
 * with transport_error, the old handles answer not_found (or an error that says the
 * connection was lost), and the next call, whichever op it is, works on a new
 * connection. A kind the responder's hello does not offer (watch over native SSH) is
 * left out and said on stdout.
 */
#ifndef ASP_TEST_LOST_CONN_H
#define ASP_TEST_LOST_CONN_H

#include "asp/asp.h"

#include <stdbool.h>

typedef enum lost_kind {
	LOST_SPAWN,   /* a followed spawn, output flowing */
	LOST_TTY,     /* a followed spawn on a terminal */
	LOST_CONNECT, /* connect to a TCP echo server of this process, followed */
	LOST_WATCH,   /* a watch of a directory, an event seen */
	LOST_EXEC,    /* an exec whose command runs */
	LOST_WAIT,    /* a proc_wait for a running process */
	LOST_KINDS
} lost_kind;

typedef struct lost_target {
	asp_client *c;
	/* Ends the connection now (the server's side dies); > 0 when something was killed. */
	int (*kill)(void *ctx);
	void *ctx;
	/* A directory both the sandbox and this process can write (the same machine). */
	const char *scratch;
	const char *name; /* for messages: "OpenSSH native", "stdio" */
} lost_target;

/* "spawn", "tty", ... */
const char *lost_kind_name(lost_kind k);

/* One kind: the stream, the loss, the checks, the next call (which op depends on `k`). */
void lost_conn_run(const lost_target *t, lost_kind k);

/* Every kind in turn on the same client. */
void lost_conn_run_all(const lost_target *t);

#endif
