/* Private to libasp: registering the transports it was built with. */
#ifndef ASP_RPC_BUILTIN_H
#define ASP_RPC_BUILTIN_H

/*
 * Registers the local transport and every transport compiled into libasp, once; called
 * before the first client opens. Thread-safe.
 */
void asp_transports_init(void);

/*
 * Generated at build time (builtin_transports.c.in): registers each transport folder
 * that was enabled. Called once by asp_transports_init.
 */
void asp_builtin_transports_register(void);

#endif
