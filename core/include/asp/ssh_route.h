/*
 * The way to an SSH sandbox: .asp.json's ssh section over the SSH config file it names
 * (ssh.config_host, ssh.config_file), as the SSH transport connects and `asp hello`
 * shows it (docs/design.md, ".asp.json"). A route is the hosts connected to in order
 * (jump hosts, then the sandbox: each reached through a direct-tcpip channel of the one
 * before), and the local command, if any, whose stdin and stdout carry the connection to
 * the first. Every value says where it came from.
 */
#ifndef ASP_SSH_ROUTE_H
#define ASP_SSH_ROUTE_H

#include <stddef.h>

#include "asp/config.h"
#include "asp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A resolved route; owns every string its view points at. */
typedef struct asp_ssh_route asp_ssh_route;

/*
 * One host of the route. `ssh` holds what to connect with: host, port (never 0), user
 * (NULL: the local user's name), identity_file or identity_env, password_env, known_hosts
 * (never NULL), the host key pins, strict_host_key_checking and connect_timeout_ms; for
 * the sandbox also agent; proxy_command, jump, config_host and config_file are never set.
 * The *_from strings say where each value came from, for a person: "ssh.port in
 * /p/.asp.json", "Port at /home/me/.ssh/config:12", "the default".
 */
typedef struct asp_ssh_hop {
	asp_config_ssh ssh;
	const char *name; /* as the config names it: the Host alias, or the host */
	const char *host_from, *port_from, *user_from, *identity_from, *known_hosts_from;
} asp_ssh_hop;

typedef struct asp_ssh_route_view {
	const asp_ssh_hop *hops; /* hop_count >= 1: jump hosts in order, the sandbox last */
	size_t hop_count;
	/* The command carrying the connection to hops[0], its % escapes expanded; NULL: TCP. */
	const char *const *proxy_command; /* proxy_command_argc strings, then NULL */
	size_t proxy_command_argc;
	const char *proxy_from; /* NULL without a command */
	const char *jump_from;  /* where the jump hosts came from; NULL without any */
} asp_ssh_route_view;

/*
 * Resolves the ssh section of `cfg`: explicit keys first, then what the SSH config file
 * says of config_host (and of every jump host written as a name), then the defaults.
 * *out is the caller's, to free with asp_ssh_route_free. Errors: invalid_argument when
 * the ssh section has neither host nor config_host, config_host names a Host the file
 * does not have (or the file is missing), a value of the file is unusable (a bad Port,
 * an unknown % escape; the message names FILE:LINE), or the jump hosts form a loop or
 * number more than 16; the errors of reading the file.
 */
asp_status asp_ssh_route_resolve(const asp_config_view *cfg, asp_ssh_route **out, asp_error *err);

/* The route's view; valid until asp_ssh_route_free. */
const asp_ssh_route_view *asp_ssh_route_get(const asp_ssh_route *r);

/* "user@host:port" of one hop, for messages, into `out` (`cap` bytes). */
void asp_ssh_hop_label(const asp_ssh_hop *h, char *out, size_t cap);

/* Releases the route. NULL is a no-op. */
void asp_ssh_route_free(asp_ssh_route *r);

#ifdef __cplusplus
}
#endif

#endif
