/*
 * Private to libasp: what an OpenSSH client config file (ssh_config(5)) says of one host,
 * for the keys .asp.json's ssh.config_host takes from it (docs/design.md, ".asp.json").
 * Host and Match blocks, Include, first value wins, as ssh(1) reads them; every value
 * keeps the file and line it came from, for `asp hello`.
 */
#ifndef ASP_SSH_CONFIG_FILE_H
#define ASP_SSH_CONFIG_FILE_H

#include <stdbool.h>

#include "asp/arena.h"
#include "asp/status.h"

/* The keys read; the rest of the file is skipped. */
enum ssh_cf_key {
	SSH_CF_HOSTNAME,
	SSH_CF_PORT,
	SSH_CF_USER,
	SSH_CF_IDENTITY_FILE,
	SSH_CF_KNOWN_HOSTS,   /* UserKnownHostsFile: its first file */
	SSH_CF_PROXY_COMMAND, /* the rest of its line */
	SSH_CF_PROXY_JUMP,    /* ProxyJump: the first of the two that appears is the one set */
	SSH_CF_KEYS
};

/* A value as written (NULL: the file does not set it) and "FILE:LINE". */
typedef struct ssh_cf_value {
	const char *text;
	const char *at;
} ssh_cf_value;

typedef struct ssh_cf_host {
	ssh_cf_value v[SSH_CF_KEYS];
	bool exists; /* the file could be read (a missing file sets nothing) */
	bool named;  /* a Host or Match line names it (not only "Host *" or "Match all") */
} ssh_cf_host;

/* The keyword of each key, as the file and messages spell it. */
const char *ssh_cf_keyword(enum ssh_cf_key k);

/*
 * Reads `path` (an absolute path) for the host `name`: every string lands in `a`.
 * A missing file is not an error (out->exists false). Errors: invalid_argument naming
 * FILE:LINE for a line it cannot read (an unterminated quote, Include nested too deep),
 * too_large for a file over 1 MiB, and those of reading it.
 */
asp_status ssh_cf_lookup(const char *path, const char *name, asp_arena *a, ssh_cf_host *out,
                         asp_error *err);

/*
 * "[user@]host[:port]" (host may be "[v6 address]"), as ssh -J and ProxyJump take it:
 * user (NULL when absent) and host land in `a`, *port is 0 when absent. -1 with `why`
 * (a static string) when it cannot be read: no host, a port outside 1..65535.
 */
int ssh_hop_parse(const char *z, asp_arena *a, const char **user, const char **host, unsigned *port,
                  const char **why);

#endif
