/*
 * For transport authors: how a transport plugs into libasp. The core knows no transport;
 * each one registers an asp_transport, and libasp registers every transport it was built
 * with before the first client opens. A message transport implements a frame channel and
 * hands it to the core's RPC engine; a transport with its own file protocol implements
 * the op table (asp_ops) itself.
 */
#ifndef ASP_TRANSPORT_H
#define ASP_TRANSPORT_H

#include <stdbool.h>

#include "asp/config.h"
#include "asp/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The local backend as a transport: ops run with POSIX calls in this process. Internal
 * (tests, embedding); never a value of .asp.json's "transport".
 */
#define ASP_TRANSPORT_LOCAL ((asp_transport_kind)100)

typedef struct asp_transport {
	asp_transport_kind kind;
	const char *name; /* "stdio", ...: for messages */
	/*
	 * Connects to the sandbox `cfg` describes and returns the backend: its op table and
	 * the `self` every op gets. `cfg` stays valid until the backend is closed. May
	 * block (spawning, connecting). Called again to reconnect after a transport_error.
	 */
	asp_status (*open)(const asp_config_view *cfg, const asp_ops **ops, void **self,
	                   asp_error *err);
	/*
	 * Optional. Makes the calls in flight on `self` fail promptly with transport_error,
	 * and later ones at once. Never blocks; may run while calls are in flight.
	 */
	void (*abort)(void *self);
	/* Frees `self`. Called once, when no call is inside it any more. */
	void (*close)(void *self);
	/*
	 * Optional (NULL: always true). Whether `self` can still carry calls; when false,
	 * the next call reconnects first instead of failing. Must be cheap: called per call.
	 */
	bool (*alive)(void *self);
} asp_transport;

/*
 * Makes `t` (static storage, kept by pointer) the transport for t->kind, replacing any
 * registered before. invalid_argument when a mandatory slot is NULL; too_large when the
 * registry is full. Thread-safe.
 */
asp_status asp_transport_register(const asp_transport *t, asp_error *err);

/* The transport registered for `kind`, or NULL. */
const asp_transport *asp_transport_find(asp_transport_kind kind);

/*
 * Opens a client from a config view built in memory (every string copied; the view may
 * be freed afterwards). transport may be ASP_TRANSPORT_LOCAL. As asp_client_open.
 */
asp_status asp_client_open_view(const asp_config_view *view, asp_client **out, asp_error *err);

#ifdef __cplusplus
}
#endif

#endif
