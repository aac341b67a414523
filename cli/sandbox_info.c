/*
 * What the sandbox's hello says, as the command line uses it: its cwd (to show a relative
 * path in full) and its largest message (to size transfer chunks). The client caches
 * hello, so only the first costs a round trip.
 */
#include "cli.h"

#include <stdio.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

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
