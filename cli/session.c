/* The client handle of one invocation, opened on first use, and what it allows. */
#include "cli.h"

#include <errno.h>
#include <string.h>

asp_client *cli_client(cli *c)
{
	if (c->client)
		return c->client;
	asp_error err;
	asp_error_clear(&err);
	asp_config *cfg = NULL;
	/* Two steps, so a message says which failed: reading the config, or reaching the sandbox.
	 */
	if (asp_config_load(c->config_path, &cfg, &err) != ASP_OK) {
		if (c->config_path)
			cli_fail(c, &err, "%s: open %s", c->cmd, c->config_path);
		else
			cli_fail(c, &err, "%s: open config", c->cmd);
		return NULL;
	}
	if (asp_client_open(cfg, &c->client, &err) != ASP_OK) {
		c->client = NULL;
		cli_fail(c, &err, "%s: connect", c->cmd);
	}
	asp_config_free(cfg);
	return c->client;
}

void cli_close(cli *c)
{
	asp_client_free(c->client);
	c->client = NULL;
}

asp_arena *cli_arena(cli *c)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		cli_fail_errno(c, ENOMEM, "%s", c->cmd);
	return a;
}
