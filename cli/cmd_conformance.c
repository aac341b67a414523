/* asp conformance: the conformance case table against the configured sandbox. */
#include "cli.h"
#include "conformance.h"

#include "asp/transport.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { OPT_ROOT = CLI_OPT_FIRST_PRIVATE, OPT_KEEP, OPT_ONLY, OPT_LIST };

/* BASE/asp-conformance-RANDOM, made in the sandbox; malloc'd into *out. */
static int make_scratch(cli *c, asp_client *client, const char *base, char **out)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
		r = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	char name[64];
	snprintf(name, sizeof name, "asp-conformance-%016llx", (unsigned long long)r);
	char *dir = path_join(base, name);
	asp_arena *a = cli_arena(c);
	if (!dir || !a) {
		free(dir);
		asp_arena_free(a);
		return -1;
	}
	asp_mkdir_params p;
	asp_mkdir_result res;
	asp_error err;
	asp_mkdir_params_init(&p);
	p.path = dir;
	p.mode = 0700;
	int rc = 0;
	if (asp_mkdir(client, &p, &res, a, &err) != ASP_OK) {
		cli_fail(c, &err, "conformance: mkdir %s", dir);
		free(dir);
		rc = -1;
	} else {
		*out = dir;
	}
	asp_arena_free(a);
	return rc;
}

static void remove_scratch(cli *c, asp_client *client, const char *dir)
{
	asp_arena *a = asp_arena_new();
	asp_remove_params p;
	asp_remove_result r;
	asp_error err;
	asp_remove_params_init(&p);
	p.path = dir;
	p.recursive = true;
	if (!a || asp_remove(client, &p, &r, a, &err) != ASP_OK)
		cli_warn("%s: could not remove the scratch directory %s: %s", c->cmd, dir,
		         a ? err.message : "out of memory");
	asp_arena_free(a);
}

/* ---- streaming: the client API, a second client for reattaching, advice ------------- */

/* Another client from the same config: another connection to the same responder. */
static void *peer_open(void *ctx)
{
	asp_client *peer = NULL;
	asp_error err;
	if (asp_client_open_view(asp_client_config(ctx), &peer, &err) != ASP_OK) {
		cli_warn("conformance: a second connection: %s", err.message);
		return NULL;
	}
	return peer;
}

static void peer_close(void *ctx, void *peer)
{
	(void)ctx;
	asp_client_free(peer);
}

/* What to change in the config for a need hello lacks, for the transport in use. */
static const char *hint(void *ctx, const char *need)
{
	const asp_config_view *v = asp_client_config(ctx);
	bool reattach = strcmp(need, CONF_FEATURE_REATTACH) == 0;
	switch (v->transport) {
	case ASP_TRANSPORT_HTTP:
		if ((strcmp(need, CONF_FEATURE_FOLLOW) == 0 || strcmp(need, "proc_attach") == 0) &&
		    v->http.websocket == ASP_HTTP_WS_NEVER)
			return "\"websocket\": false makes every call one POST, which cannot carry "
			       "notifications: remove that key (POST and a WebSocket for streams) "
			       "to "
			       "follow processes";
		break;
	case ASP_TRANSPORT_SSH:
		if (!v->ssh.agent && strcmp(need, "proc_attach") == 0)
			return "native SSH mode has no proc_attach (a process's output has one way "
			       "out, its exec channel); set ssh.agent for agent mode";
		if (!v->ssh.agent && (strcmp(need, "glob") == 0 || strcmp(need, "grep") == 0))
			return "native SSH mode has no glob or grep (a search in one round trip "
			       "needs a responder in the sandbox); set ssh.agent for agent mode";
		if (!v->ssh.agent && strcmp(need, "concurrent") == 0)
			return "this server (Dropbear before 2024.86) runs native execs one at a "
			       "time (transport-ssh/README.md); set ssh.agent for agent mode";
		if (v->ssh.agent && reattach)
			return "ssh.agent runs asp-agent --stdio, whose processes end with the "
			       "connection; make ssh.agent a script that runs asp-agent --relay "
			       "unix:PATH to an asp-agent --listen unix:PATH in the sandbox";
		break;
	case ASP_TRANSPORT_STDIO:
		if (reattach)
			return "asp-agent --stdio ends its processes with the connection; run "
			       "asp-agent --listen unix:PATH in the sandbox and make stdio.command "
			       "asp-agent --relay unix:PATH";
		break;
	default: break;
	}
	return NULL;
}

/* --json: one object per case, then the totals. */
static int run_json(const char *root, asp_client *client, const conf_streaming *st,
                    const char *only)
{
	jw w;
	jw_init(&w, stdout);
	jw_obj_begin(&w);
	jw_key(&w, "root");
	jw_str(&w, root);
	jw_key(&w, "cases");
	jw_arr_begin(&w);
	int failed = 0, passed = 0, skipped = 0, na = 0;
	for (size_t i = 0; i < conf_case_count; i++) {
		const conf_case *k = &conf_cases[i];
		if (only && !strstr(k->name, only))
			continue;
		conf_outcome o;
		conf_run_case_st(k, &cli_client_ops, client, st, root, &o);
		jw_obj_begin(&w);
		jw_key(&w, "name");
		jw_str(&w, k->name);
		jw_key(&w, "result");
		jw_str(&w, !o.passed ? "fail" : o.na ? "n/a" : o.skipped ? "skip" : "pass");
		jw_key(&w, "ms");
		jw_double(&w, o.ms);
		if (!o.passed || o.skipped) {
			jw_key(&w, "message");
			jw_str(&w, o.msg);
		}
		if (!o.passed && o.file) {
			jw_key(&w, "where");
			char where[512];
			snprintf(where, sizeof where, "%s:%d", o.file, o.line);
			jw_str(&w, where);
		}
		jw_obj_end(&w);
		if (!o.passed)
			failed++;
		else if (o.na)
			na++;
		else if (o.skipped)
			skipped++;
		else
			passed++;
	}
	jw_arr_end(&w);
	jw_key(&w, "passed");
	jw_uint(&w, (uint64_t)passed);
	jw_key(&w, "failed");
	jw_uint(&w, (uint64_t)failed);
	jw_key(&w, "na");
	jw_uint(&w, (uint64_t)na);
	jw_key(&w, "skipped");
	jw_uint(&w, (uint64_t)skipped);
	jw_obj_end(&w);
	jw_end(&w);
	return failed;
}

/* True when some case's name contains `word`, as --only selects them. */
static bool matches_any(const char *word)
{
	for (size_t i = 0; i < conf_case_count; i++) {
		if (strstr(conf_cases[i].name, word))
			return true;
	}
	return false;
}

int cmd_conformance(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"root", required_argument, NULL, OPT_ROOT},
	    {"keep", no_argument, NULL, OPT_KEEP},
	    {"only", required_argument, NULL, OPT_ONLY},
	    {"list", no_argument, NULL, OPT_LIST},
	    {NULL, 0, NULL, 0},
	};
	const char *base = "/tmp", *only = NULL;
	bool keep = false;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case OPT_ROOT: base = optarg; break;
		case OPT_KEEP: keep = true; break;
		case OPT_ONLY: only = optarg; break;
		case OPT_LIST: conf_list(stdout); return cli_finish(c, CLI_EXIT_OK);
		default: return c->fail_code;
		}
	}
	if (optind < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind]);
	if (base[0] != '/')
		return cli_usage(c, "--root needs an absolute path in the sandbox, got '%s'", base);
	if (only && !matches_any(only))
		return cli_usage(
		    c, "--only '%s' matches no case (asp conformance --list shows them)", only);

	asp_client *client = cli_client(c);
	char *root = NULL;
	if (!client || make_scratch(c, client, base, &root) < 0)
		return c->fail_code;
	conf_streaming st = conf_client_streaming;
	st.peer_open = peer_open;
	st.peer_close = peer_close;
	st.hint = hint;
	st.ctx = client;
	int failed;
	if (c->json) {
		failed = run_json(root, client, &st, only);
	} else {
		/* the file discovery found, as the client just opened it */
		char found[4096];
		asp_error ferr;
		const char *name = c->config_path;
		if (!name)
			name = asp_config_find(NULL, found, sizeof found, &ferr) == ASP_OK
			           ? found
			           : "config";
		printf("conformance: %s, scratch %s\n", name, root);
		fflush(stdout);
		failed = conf_run_filtered_st(&cli_client_ops, client, &st, root, only, stdout);
	}
	if (keep)
		fprintf(c->json ? stderr : stdout, "kept %s\n", root);
	else
		remove_scratch(c, client, root);
	free(root);
	if (failed > 0) {
		fflush(stdout);
		fprintf(stderr, "asp: conformance: %d case%s failed\n", failed,
		        failed == 1 ? "" : "s");
		return cli_finish(c, CLI_EXIT_FAIL);
	}
	return cli_finish(c, CLI_EXIT_OK);
}
