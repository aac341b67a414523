/*
 * The SSH transport (libssh 0.10): ops over exec channels and SFTP against any sshd, or
 * asp-agent --stdio over one channel (ssh.agent). libasp registers it when built with
 * the transport_ssh option; nothing in the core knows libssh.
 */
#ifndef ASP_SSH_H
#define ASP_SSH_H

#include "asp/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * kind ASP_TRANSPORT_SSH. open() connects and authenticates (host key checked first);
 * a refused host key or failed authentication is `unauthorized`, an unreachable host
 * `transport_error`. One connection per open(); the core reopens after a
 * transport_error.
 */
extern const asp_transport asp_transport_ssh;

#ifdef __cplusplus
}
#endif

#endif
