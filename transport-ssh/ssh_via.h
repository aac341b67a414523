/*
 * How the SSH connection reaches the sandbox when it is not one TCP connection away
 * (docs/design.md, ".asp.json"): a local command carrying it (ssh_proxy.c), jump hosts
 * each relaying it through a direct-tcpip channel (ssh_jump.c), and the route that puts
 * them together (ssh_via.c). Each gives the sandbox's session a file descriptor to run
 * over instead of a TCP socket.
 */
#ifndef ASP_SSH_VIA_H
#define ASP_SSH_VIA_H

#include "asp/config.h"
#include "asp/ssh_route.h"
#include "asp/status.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- ssh_proxy.c: a local command's stdin and stdout ------------------------------------ */

typedef struct ssh_proxy ssh_proxy;

/*
 * Runs argv (no shell; looked up in PATH) with one end of a socketpair as its stdin and
 * stdout; *fd is the other end, the caller's. transport_error when it cannot start.
 */
asp_status ssh_proxy_start(const char *const *argv, ssh_proxy **out, int *fd, asp_error *err);
/*
 * "proxy_command `CMD` exited with status N; its stderr's last line: ...", after waiting
 * up to `wait_ms` for it to end (a closed socket usually means it is exiting).
 */
void ssh_proxy_explain(ssh_proxy *p, unsigned wait_ms, char *out, size_t cap);
/* Terminates its process group (KILL after a grace), reaps it, frees. NULL: no-op. */
void ssh_proxy_free(ssh_proxy *p);

/* ---- ssh_jump.c: a jump host relaying to the next host ------------------------------------ */

typedef struct ssh_hop ssh_hop;

/*
 * Connects to jump host `h` (over `fd` when >= 0, which it takes; else TCP), verifies its
 * host key and authenticates as for the sandbox, opens a direct-tcpip channel to
 * host:port and relays it, on a thread of its own, to a socketpair: *out_fd is the other
 * end, the caller's. `label` names the hop in every message ("jump host 1 of 2
 * (bastion)"). Errors as sshc_connect's, and transport_error when the jump host cannot
 * reach host:port.
 */
asp_status ssh_hop_open(const asp_ssh_hop *h, const char *config_path, const char *label, int fd,
                        const char *host, unsigned port, ssh_hop **out, int *out_fd,
                        asp_error *err);
/* What ended the relay ("jump host ...: connection lost: ..."); false while it runs. */
bool ssh_hop_explain(ssh_hop *j, char *out, size_t cap);
/* Stops the relay, closes the channel and the hop's session, frees. NULL: no-op. */
void ssh_hop_free(ssh_hop *j);

/* ---- ssh_via.c: the route, assembled ----------------------------------------------------- */

typedef struct ssh_via ssh_via;

/*
 * Resolves the route of `cfg` (asp/ssh_route.h) and opens its way to the sandbox: the
 * proxy command, then each jump host in turn. *target is the config to connect to the
 * sandbox with (the resolved keys; valid until ssh_via_free), *fd the descriptor to run
 * its session over (-1: a TCP connection of libssh's own). On failure nothing is left.
 */
asp_status ssh_via_open(const asp_config_view *cfg, ssh_via **out, const asp_config_view **target,
                        int *fd, asp_error *err);
/*
 * Why the way broke (a hop's relay, the proxy's exit); "" when there is nothing to say.
 * The first call waits up to `wait_ms` for a proxy command to end (a socket that closed
 * under us usually means it is dying; its exit takes a moment to show), later ones not.
 */
#define VIA_EXPLAIN_WAIT_MS 300
void ssh_via_explain(ssh_via *v, unsigned wait_ms, char *out, size_t cap);
/* After the sandbox's session is freed: ends the relays and the proxy. NULL: no-op. */
void ssh_via_free(ssh_via *v);

#endif
