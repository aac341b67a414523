/* The client handle of one invocation, opened on first use, and what it allows. */
#include "cli.h"

#include <errno.h>
#include <string.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

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

/* The connection's hello, which the client caches: no round trip after the first. */
static bool cached_hello(cli *c, asp_hello_result *r, asp_arena *a)
{
	asp_hello_params p;
	asp_error err;
	asp_hello_params_init(&p);
	p.client = "asp/" ASP_VERSION;
	p.has_protocol = true;
	p.protocol = ASP_PROTOCOL;
	return asp_hello(c->client, &p, r, a, &err) == ASP_OK;
}

size_t cli_chunk_size(cli *c)
{
	/* Room for the envelope (method, path, other fields) around a chunk's bytes. */
	const uint64_t overhead = 64 * 1024;
	if (c->max_message == 0) {
		c->max_message = ASP_MAX_MESSAGE_DEFAULT;
		asp_arena *a = c->client ? asp_arena_new() : NULL;
		asp_hello_result r;
		/* A failure here resurfaces, reported, on the transfer's first call. */
		if (a && cached_hello(c, &r, a) && r.max_message > 0)
			c->max_message = r.max_message;
		asp_arena_free(a);
	}
	uint64_t chunk = CLI_CHUNK_DEFAULT;
	if (chunk + overhead > c->max_message)
		chunk =
		    c->max_message > 2 * overhead ? c->max_message - overhead : c->max_message / 2;
	if (chunk < 4096)
		chunk = 4096;
	return (size_t)chunk;
}

bool cli_sandbox_cwd(cli *c, char *out, size_t cap)
{
	asp_arena *a = c->client ? asp_arena_new() : NULL;
	if (!a)
		return false;
	asp_hello_result r;
	bool ok = cached_hello(c, &r, a) && r.cwd && r.cwd[0] == '/' &&
	          (size_t)snprintf(out, cap, "%s", r.cwd) < cap;
	asp_arena_free(a);
	return ok;
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
