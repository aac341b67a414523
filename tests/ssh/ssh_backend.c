/* An SSH transport opened on a test fixture's server (see ssh_backend.h). */
#include "ssh_backend.h"
#include "asp_ssh.h"

#include <stdio.h>
#include <string.h>

asp_config *ssh_backend_config(const sshd_fixture *fx, const char *agent, const char *extra)
{
	char json[4096];
	sshd_config_json(fx, agent, extra, json, sizeof json);
	asp_config *cfg = NULL;
	asp_error err;
	if (asp_config_parse(json, strlen(json), NULL, &cfg, &err) != ASP_OK) {
		fprintf(stderr, "config: %s\n%s\n", err.message, json);
		return NULL;
	}
	return cfg;
}

asp_status ssh_backend_open(ssh_backend *b, const sshd_fixture *fx, const char *agent,
                            const char *extra, asp_error *err)
{
	memset(b, 0, sizeof *b);
	b->cfg = ssh_backend_config(fx, agent, extra);
	if (!b->cfg)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "bad test config");
	asp_status st = asp_transport_ssh.open(asp_config_get(b->cfg), &b->ops, &b->self, err);
	if (st != ASP_OK) {
		asp_config_free(b->cfg);
		b->cfg = NULL;
	}
	return st;
}

void ssh_backend_close(ssh_backend *b)
{
	if (b->self)
		asp_transport_ssh.close(b->self);
	asp_config_free(b->cfg);
	memset(b, 0, sizeof *b);
}
