/*
 * connect's channel in native mode (docs/design.md, "Ports and changes"): a direct-tcpip
 * channel, for which the SSH server opens the TCP connection from its side, in the
 * sandbox. The server's refusal (SSH_MSG_CHANNEL_OPEN_FAILURE: a reason code and a text,
 * which OpenSSH and Dropbear fill with strerror or gai_strerror) becomes the error the
 * local backend would give for the same cause. Such channels are not sessions: the
 * server's MaxSessions does not count them, so they take no slot of sshc's budget.
 */
#include "ssh_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 4254, 5.1 */
#define OPEN_PROHIBITED     1u
#define OPEN_CONNECT_FAILED 2u
#define OPEN_UNKNOWN_TYPE   3u
#define OPEN_SHORTAGE       4u

typedef struct tcp_target {
	const char *host;
	int port;
} tcp_target;

static int step_forward(ssh_channel ch, const void *arg)
{
	const tcp_target *t = arg;
	/* the originator is reported to the server for its logs only */
	return ssh_channel_open_forward(ch, t->host, t->port, "127.0.0.1", 0);
}

/* libssh 0.10 keeps the reply as "Channel opening failure: channel N error (CODE) TEXT". */
static bool parse_refusal(const char *msg, unsigned *code, const char **text)
{
	const char *at = strstr(msg, " error (");
	if (!at || sscanf(at, " error (%u)", code) != 1)
		return false;
	const char *close = strchr(at, ')');
	*text = close && close[1] == ' ' ? close + 2 : "";
	return true;
}

static bool has(const char *text, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = text; *p; p++)
		if (strncasecmp(p, word, n) == 0)
			return true;
	return false;
}

/* The server's CONNECT_FAILED text as the local backend's error for the same cause. */
static asp_status connect_failed(const char *host, unsigned port, const char *text,
                                 uint64_t timeout_ms, asp_error *err)
{
	if (has(text, "refused"))
		return asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                     "connect: %s port %u: connection refused: nothing listens on "
		                     "that port in the sandbox (the SSH server said: %s)",
		                     host, port, text);
	if (has(text, "network is unreachable") || has(text, "network unreachable"))
		return asp_error_set(
		    err, ASP_E_IO_ERROR, NULL,
		    "connect: %s port %u: network unreachable from the sandbox (no "
		    "route to that network; the SSH server said: %s)",
		    host, port, text);
	if (has(text, "no route"))
		return asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                     "connect: %s port %u: no route to host from the sandbox (the "
		                     "SSH server said: %s)",
		                     host, port, text);
	if (has(text, "timed out"))
		return asp_error_set(err, ASP_E_TIMEOUT, NULL,
		                     "connect: %s port %u: timed out (the SSH server's own connect "
		                     "gave up before our %llu ms: %s)",
		                     host, port, (unsigned long long)timeout_ms, text);
	/* gai_strerror's texts: the server could not resolve the name */
	if (has(text, "not known") || has(text, "no address") || has(text, "unknown host") ||
	    has(text, "nodename") || has(text, "name resolution") || has(text, "getaddrinfo"))
		return asp_error_set(err, ASP_E_NOT_FOUND, NULL,
		                     "connect: the sandbox cannot resolve '%s' (the SSH server "
		                     "said: %s)",
		                     host, text);
	return asp_error_set(err, ASP_E_IO_ERROR, NULL,
	                     "connect: %s port %u: the SSH server could not connect: %s", host,
	                     port, text[0] ? text : "(no reason given)");
}

asp_status ssh_tcp_open(sshc *c, ssh_channel ch, const char *host, unsigned port,
                        uint64_t timeout_ms, asp_error *err)
{
	tcp_target t = {host, (int)port};
	bool late;
	int rc = sshc_run_steps(c, ch, step_forward, &t, ssh_deadline_ms(timeout_ms), &late);
	if (rc == SSH_OK)
		return ASP_OK;
	if (late)
		return asp_error_set(err, ASP_E_TIMEOUT, NULL,
		                     "connect: %s port %u: timed out after %llu ms (the SSH server "
		                     "%s has not connected yet: the host does not answer, a "
		                     "firewall dropping packets or a host that is down)",
		                     host, port, (unsigned long long)timeout_ms, c->target);
	if (!sshc_check(c))
		return sshc_dead_error(c, "connect", err);
	char msg[512];
	snprintf(msg, sizeof msg, "%s", ssh_get_error(c->s));
	unsigned code = 0;
	const char *text = "";
	if (!parse_refusal(msg, &code, &text))
		return asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                     "connect: %s port %u: the SSH server %s refused the "
		                     "direct-tcpip channel: %s",
		                     host, port, c->target, msg);
	switch (code) {
	case OPEN_CONNECT_FAILED: return connect_failed(host, port, text, timeout_ms, err);
	case OPEN_PROHIBITED:
		return asp_error_set(err, ASP_E_PERMISSION_DENIED, NULL,
		                     "connect: the SSH server %s forbids TCP forwarding (%s): "
		                     "sshd's AllowTcpForwarding, DisableForwarding or PermitOpen, "
		                     "a restrict or permitopen option in authorized_keys, or "
		                     "Dropbear's -j; allow it, or use agent mode (ssh.agent), "
		                     "whose responder connects by itself",
		                     c->target, text[0] ? text : "administratively prohibited");
	case OPEN_UNKNOWN_TYPE:
		return asp_error_set(
		    err, ASP_E_UNSUPPORTED, NULL,
		    "connect: the SSH server %s has no direct-tcpip channels (%s); "
		    "use agent mode (ssh.agent)",
		    c->target, text);
	case OPEN_SHORTAGE:
		return asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                     "connect: the SSH server %s is short of resources for another "
		                     "channel (%s): close some connections and retry",
		                     c->target, text);
	default:
		return asp_error_set(err, ASP_E_IO_ERROR, NULL,
		                     "connect: %s port %u: the SSH server %s refused the channel "
		                     "(reason %u): %s",
		                     host, port, c->target, code, text);
	}
}

int ssh_tcp_open_poll(sshc *c, ssh_channel ch)
{
	tcp_target t = {"", 0}; /* an open in flight only looks at the channel's state */
	ssh_set_blocking(c->s, 0);
	int rc = ssh_channel_open_forward(ch, t.host, t.port, "127.0.0.1", 0);
	ssh_set_blocking(c->s, 1);
	return rc;
}
