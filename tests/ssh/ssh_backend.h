/* An SSH transport opened on a test fixture's server (tests/ssh/ssh_backend.c). */
#ifndef ASP_TEST_SSH_BACKEND_H
#define ASP_TEST_SSH_BACKEND_H

#include "asp/config.h"
#include "asp/proto.h"
#include "sshd_fixture.h"

typedef struct ssh_backend {
	asp_config *cfg;
	const asp_ops *ops;
	void *self;
	int who; /* which fixture, for tests that run on several */
} ssh_backend;

/* The fixture's config (sshd_config_json), parsed; NULL (said on stderr) when it does not parse. */
asp_config *ssh_backend_config(const sshd_fixture *fx, const char *agent, const char *extra);

/*
 * The fixture's config (sshd_config_json: `agent` selects agent mode, `extra` adds or
 * overrides ssh keys), parsed and opened. `b` is zeroed first; on failure it holds nothing.
 */
asp_status ssh_backend_open(ssh_backend *b, const sshd_fixture *fx, const char *agent,
                            const char *extra, asp_error *err);

/* Closes what ssh_backend_open opened (a zeroed backend too). */
void ssh_backend_close(ssh_backend *b);

#endif
