/* Private to libasp: registering the transports it was built with. */
#ifndef ASP_RPC_BUILTIN_H
#define ASP_RPC_BUILTIN_H

#include "asp/transport.h"

/*
 * Registers the local transport and every transport compiled into libasp, once; called
 * before the first client opens. Thread-safe.
 */
void asp_transports_init(void);

/*
 * Generated at build time (builtin_transports.c.in): registers each transport folder
 * that was enabled, with asp_transport_add. Called once by asp_transports_init.
 */
void asp_builtin_transports_register(void);

/* asp_transport_register without the one-time init (which calls this). */
void asp_transport_add(const asp_transport *t);

#endif
