/*
 * asp mcp: the tools layer as an MCP server on stdin/stdout (newline-delimited JSON-RPC
 * 2.0). The main thread reads requests; tools/call runs on a pool of workers, started as
 * calls arrive while none is idle, so several calls are in flight at once (a few commands
 * that run for minutes hold back no other call) and answers may come out of order.
 * notifications/cancelled fires the call's cancel token (a running command's group is
 * killed) and its answer is not sent, as the MCP spec asks. Everything the tools do is
 * asp/tools.h's.
 */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

#define MCP_WORKERS_DEFAULT 32
#define MCP_WORKERS_MAX     256

/* Newest first: the answer to a version we do not know. */
static const char *const mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

/*
 * The stateless revision: no initialize; every request names its version in _meta, every
 * result says resultType, and server/discover tells what the server speaks.
 */
#define MCP_STATELESS "2026-07-28"
#define META_VERSION  "io.modelcontextprotocol/protocolVersion"
/* How long a client may keep tools/list's and server/discover's answers: the tool set is
 * fixed for the life of the process (--tools). */
#define MCP_LIST_TTL_MS 3600000

/* JSON-RPC error codes. */
enum {
	RPC_PARSE_ERROR = -32700,
	RPC_INVALID_REQUEST = -32600,
	RPC_METHOD_NOT_FOUND = -32601,
	RPC_INVALID_PARAMS = -32602,
	RPC_UNSUPPORTED_VERSION = -32022, /* MCP's own range (2026-07-28) */
};

typedef struct job {
	struct job *next; /* queue, then in-flight list */
	json_t *id;
	char *name;
	char *args;
	asp_tools_cancel *cancel;
	bool cancelled;
	bool stateless; /* the result says resultType */
} job;

typedef struct mcp {
	cli *c;
	const char *vocab;   /* --vocabulary: whose names and argument spellings */
	const char *session; /* --session, or the working directory; NULL: none */
	bool *enabled;       /* per asp_tools_vocab_list index */
	pthread_mutex_t out_mu;
	pthread_mutex_t mu; /* queue, in-flight, tools handle, stopping */
	pthread_cond_t cv;
	job *queue_head, *queue_tail;
	job *inflight;
	bool stopping;
	unsigned idle;        /* workers waiting for a call */
	unsigned queued;      /* calls in the queue */
	unsigned started;     /* workers running */
	unsigned max_workers; /* --workers */
	pthread_t *threads;   /* max_workers slots */
	asp_client *client;
	asp_tools *tools;
} mcp;

static void send_msg(mcp *m, json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!s)
		return;
	pthread_mutex_lock(&m->out_mu);
	fputs(s, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	pthread_mutex_unlock(&m->out_mu);
	free(s);
}

static void send_result(mcp *m, json_t *id, json_t *result)
{
	send_msg(m, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_error(mcp *m, json_t *id, int code, const char *message)
{
	send_msg(m, json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
	                      id ? id : json_null(), "error", "code", code, "message", message));
}

static bool tool_enabled(const mcp *m, const char *name)
{
	size_t n;
	const asp_tool_desc *d = asp_tools_vocab_list(m->vocab, &n);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(d[i].name, name))
			return m->enabled[i];
	return false;
}

/*
 * The session's commands a previous asp mcp left running are followed again, and the log
 * says so, or that background commands end with the connection (docs/tools.md,
 * "Sessions").
 */
static void resume_session(asp_tools *t, const char *session)
{
	if (!session || !asp_tools_set_session(t, session))
		return;
	size_t found = 0;
	asp_error err;
	if (asp_tools_resume(t, &found, &err) != ASP_OK)
		fprintf(stderr, "asp: mcp: the commands of session %s could not be listed: %s\n",
		        session, err.message);
	else if (found)
		fprintf(stderr, "asp: mcp: %zu running command%s of session %s followed again\n",
		        found, found == 1 ? "" : "s", session);
	const char *note = asp_tools_notice(t);
	if (note)
		fprintf(stderr, "asp: mcp: %s\n", note);
}

/* The tools handle, opened on the first call so that a sandbox down at start is retried. */
static asp_tools *get_tools(mcp *m, char *why, size_t cap)
{
	pthread_mutex_lock(&m->mu);
	asp_tools *t = m->tools;
	if (!t) {
		asp_error err;
		asp_error_clear(&err);
		if (!m->client &&
		    asp_client_open_path(m->c->config_path, &m->client, &err) != ASP_OK) {
			m->client = NULL;
		} else if (asp_tools_new(m->client, &m->tools, &err) != ASP_OK) {
			m->tools = NULL;
		} else {
			resume_session(m->tools, m->session);
		}
		t = m->tools;
		if (!t)
			snprintf(why, cap, "Error: the sandbox could not be reached (%s): %s",
			         asp_strerror(err.code), err.message);
	}
	pthread_mutex_unlock(&m->mu);
	return t;
}

static void *worker(void *arg)
{
	mcp *m = arg;
	for (;;) {
		pthread_mutex_lock(&m->mu);
		m->idle++;
		while (!m->queue_head && !m->stopping)
			pthread_cond_wait(&m->cv, &m->mu);
		m->idle--;
		job *j = m->queue_head;
		if (!j) {
			pthread_mutex_unlock(&m->mu);
			return NULL;
		}
		m->queue_head = j->next;
		m->queued--;
		if (!m->queue_head)
			m->queue_tail = NULL;
		j->next = m->inflight;
		m->inflight = j;
		pthread_mutex_unlock(&m->mu);

		char why[1200];
		char *text = NULL;
		bool is_error = true;
		asp_tools *t = get_tools(m, why, sizeof why);
		if (t)
			asp_tools_call_vocab(t, m->vocab, j->name, j->args, &text, &is_error,
			                     j->cancel);
		else
			text = strdup(why);

		pthread_mutex_lock(&m->mu);
		for (job **pp = &m->inflight; *pp; pp = &(*pp)->next)
			if (*pp == j) {
				*pp = j->next;
				break;
			}
		bool cancelled = j->cancelled;
		pthread_mutex_unlock(&m->mu);
		if (!cancelled) {
			json_t *r =
			    json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text",
			              text ? text : "Error: out of memory.", "isError", is_error);
			if (r && j->stateless)
				json_object_set_new(r, "resultType", json_string("complete"));
			send_result(m, j->id, r);
		}
		free(text);
		json_decref(j->id);
		free(j->name);
		free(j->args);
		asp_tools_cancel_free(j->cancel);
		free(j);
	}
}

/* A stateless request's result: resultType, and for a list the time it may be kept. */
static json_t *stateless_result(json_t *r, bool cacheable)
{
	if (!r)
		return NULL;
	json_object_set_new(r, "resultType", json_string("complete"));
	if (cacheable) {
		json_object_set_new(r, "ttlMs", json_integer(MCP_LIST_TTL_MS));
		/* what the sandbox holds is this user's: no cache shared across users */
		json_object_set_new(r, "cacheScope", json_string("private"));
	}
	return r;
}

static json_t *tools_list_result(const mcp *m)
{
	size_t n;
	const asp_tool_desc *d = asp_tools_vocab_list(m->vocab, &n);
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		if (!m->enabled[i])
			continue;
		json_t *schema = json_loads(d[i].input_schema, 0, NULL);
		json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "name", d[i].name,
		                                     "description", d[i].description, "inputSchema",
		                                     schema ? schema : json_object()));
	}
	return json_pack("{s:o}", "tools", arr);
}

static bool same_id(json_t *a, json_t *b)
{
	return a && b && json_equal(a, b);
}

static void on_cancelled(mcp *m, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");
	if (!rid)
		return;
	pthread_mutex_lock(&m->mu);
	for (job *j = m->inflight; j; j = j->next)
		if (same_id(j->id, rid)) {
			j->cancelled = true;
			asp_tools_cancel_fire(j->cancel);
		}
	for (job *j = m->queue_head; j; j = j->next)
		if (same_id(j->id, rid)) {
			j->cancelled = true;
			asp_tools_cancel_fire(j->cancel);
		}
	pthread_mutex_unlock(&m->mu);
}

static void on_call(mcp *m, json_t *id, json_t *params, bool stateless)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	if (!name) {
		send_error(m, id, RPC_INVALID_PARAMS, "tools/call needs params.name");
		return;
	}
	if (!tool_enabled(m, name)) {
		char msg[300];
		snprintf(msg, sizeof msg, "Unknown tool: %.200s", name);
		send_error(m, id, RPC_INVALID_PARAMS, msg);
		return;
	}
	if (args && !json_is_object(args) && !json_is_null(args)) {
		send_error(m, id, RPC_INVALID_PARAMS,
		           "tools/call params.arguments must be an object");
		return;
	}
	job *j = calloc(1, sizeof *j);
	if (j) {
		j->id = json_incref(id);
		j->name = strdup(name);
		j->args =
		    args && json_is_object(args) ? json_dumps(args, JSON_COMPACT) : strdup("{}");
		j->cancel = asp_tools_cancel_new();
		j->stateless = stateless;
	}
	if (!j || !j->name || !j->args || !j->cancel) {
		if (j) {
			json_decref(j->id);
			free(j->name);
			free(j->args);
			asp_tools_cancel_free(j->cancel);
			free(j);
		}
		send_error(m, id, -32603, "out of memory");
		return;
	}
	pthread_mutex_lock(&m->mu);
	if (m->queue_tail)
		m->queue_tail->next = j;
	else
		m->queue_head = j;
	m->queue_tail = j;
	m->queued++;
	/* more calls waiting than idle workers: one more, up to --workers (past it the call
	 * waits its turn); an idle worker counts until it has taken a call off the queue */
	if (m->queued > m->idle && m->started < m->max_workers &&
	    pthread_create(&m->threads[m->started], NULL, worker, m) == 0)
		m->started++;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

static const char *const server_title = "ASP sandbox tools";
static const char *const server_instructions =
    "These tools act inside a remote sandbox, not on the machine running the harness: files, "
    "commands and searches all happen there.";

static void on_initialize(mcp *m, json_t *id, json_t *params)
{
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *ver = mcp_versions[0];
	for (size_t i = 0; want && i < sizeof mcp_versions / sizeof mcp_versions[0]; i++)
		if (!strcmp(want, mcp_versions[i]))
			ver = mcp_versions[i];
	send_result(m, id,
	            json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", ver,
	                      "capabilities", "tools", "listChanged", 0, "serverInfo", "name",
	                      "asp", "title", server_title, "version", ASP_VERSION, "instructions",
	                      server_instructions));
}

/* server/discover: answered with or without _meta, before or instead of initialize. */
static void on_discover(mcp *m, json_t *id)
{
	json_t *versions = json_array();
	json_array_append_new(versions, json_string(MCP_STATELESS));
	for (size_t i = 0; i < sizeof mcp_versions / sizeof mcp_versions[0]; i++)
		json_array_append_new(versions, json_string(mcp_versions[i]));
	json_t *r = json_pack("{s:o, s:{s:{s:b}}, s:s, s:{s:{s:s, s:s, s:s}}}", "supportedVersions",
	                      versions, "capabilities", "tools", "listChanged", 0, "instructions",
	                      server_instructions, "_meta", "io.modelcontextprotocol/serverInfo",
	                      "name", "asp", "title", server_title, "version", ASP_VERSION);
	send_result(m, id, stateless_result(r, true));
}

/*
 * The version a request (one with an id) names in _meta, NULL for none. One we do not
 * speak is answered here with the versions we do, and *refused is set.
 */
static const char *request_version(mcp *m, json_t *id, json_t *params, bool *refused)
{
	*refused = false;
	json_t *v = json_object_get(json_object_get(params, "_meta"), META_VERSION);
	if (!v)
		return NULL;
	const char *want = json_string_value(v);
	if (want && !strcmp(want, MCP_STATELESS))
		return want;
	*refused = true;
	char text[300];
	snprintf(text, sizeof text,
	         "Unsupported protocol version %.100s: this server speaks " MCP_STATELESS
	         " without initialize, and 2025-11-25 and earlier through initialize",
	         want ? want : "(not a string)");
	send_msg(m, json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:[s], s:O}}}", "jsonrpc", "2.0", "id",
	                      id, "error", "code", RPC_UNSUPPORTED_VERSION, "message", text, "data",
	                      "supported", MCP_STATELESS, "requested", v));
	return NULL;
}

static void handle(mcp *m, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg = json_loadb(line, len, 0, &jerr);
	if (!msg) {
		send_error(m, NULL, RPC_PARSE_ERROR, "parse error: not JSON");
		return;
	}
	if (!json_is_object(msg)) {
		send_error(m, NULL, RPC_INVALID_REQUEST, "a message must be one JSON-RPC object");
		json_decref(msg);
		return;
	}
	json_t *id = json_object_get(msg, "id");
	const char *method = json_string_value(json_object_get(msg, "method"));
	json_t *params = json_object_get(msg, "params");
	if (!method) {
		/* a response to us (we send no requests) or garbage: nothing to answer */
		if (id && !json_object_get(msg, "result") && !json_object_get(msg, "error"))
			send_error(m, id, RPC_INVALID_REQUEST, "a request needs a method");
		json_decref(msg);
		return;
	}
	bool refused = false, stateless = false;
	if (id && strcmp(method, "server/discover"))
		stateless = request_version(m, id, params, &refused) != NULL;
	if (refused) {
		/* answered with the versions we speak */
	} else if (!id) {
		if (!strcmp(method, "notifications/cancelled"))
			on_cancelled(m, params);
		/* notifications/initialized and others need nothing */
	} else if (!strcmp(method, "server/discover")) {
		on_discover(m, id);
	} else if (!strcmp(method, "initialize")) {
		on_initialize(m, id, params);
	} else if (!strcmp(method, "ping")) {
		json_t *r = json_object();
		send_result(m, id, stateless ? stateless_result(r, false) : r);
	} else if (!strcmp(method, "tools/list")) {
		json_t *r = tools_list_result(m);
		send_result(m, id, stateless ? stateless_result(r, true) : r);
	} else if (!strcmp(method, "tools/call")) {
		on_call(m, id, params, stateless);
	} else {
		char msgtext[300];
		snprintf(msgtext, sizeof msgtext, "Method not found: %.200s", method);
		send_error(m, id, RPC_METHOD_NOT_FOUND, msgtext);
	}
	json_decref(msg);
}

/* --tools a,b,c: exactly those; an unknown name is a usage error. */
static int parse_tools(cli *c, mcp *m, const char *list)
{
	size_t n;
	const asp_tool_desc *d = asp_tools_vocab_list(m->vocab, &n);
	for (size_t i = 0; i < n; i++)
		m->enabled[i] = list == NULL;
	if (!list)
		return 0;
	char *copy = strdup(list), *save = NULL;
	if (!copy)
		return cli_fail_errno(c, ENOMEM, "mcp");
	for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		size_t i = 0;
		while (i < n && strcmp(d[i].name, tok))
			i++;
		if (i == n) {
			int rc = cli_usage(
			    c, "--tools: no tool is called '%s' (asp tool lists them)", tok);
			free(copy);
			return rc;
		}
		m->enabled[i] = true;
	}
	free(copy);
	return 0;
}

enum { OPT_TOOLS = CLI_OPT_FIRST_PRIVATE, OPT_WORKERS, OPT_VOCABULARY, OPT_SESSION };

int cmd_mcp(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"tools", required_argument, NULL, OPT_TOOLS},
	    {"workers", required_argument, NULL, OPT_WORKERS},
	    {"vocabulary", required_argument, NULL, OPT_VOCABULARY},
	    {"session", required_argument, NULL, OPT_SESSION},
	    {NULL, 0, NULL, 0}};
	const char *tools_list = NULL, *vocab = NULL, *session = NULL;
	unsigned workers = MCP_WORKERS_DEFAULT;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		if (opt == OPT_TOOLS) {
			tools_list = optarg;
		} else if (opt == OPT_VOCABULARY) {
			vocab = optarg;
		} else if (opt == OPT_SESSION) {
			session = optarg;
		} else if (opt == OPT_WORKERS) {
			char *end;
			unsigned long w = strtoul(optarg, &end, 10);
			if (*end || w == 0 || w > MCP_WORKERS_MAX)
				return cli_usage(c, "--workers wants 1 to %d", MCP_WORKERS_MAX);
			workers = (unsigned)w;
		} else {
			return c->fail_code;
		}
	}
	if (optind < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind]);

	size_t n;
	if (!asp_tools_vocab_list(vocab, &n))
		return cli_usage(c, "--vocabulary: no vocabulary is called '%s' (claude, opencode)",
		                 vocab);
	char here[4096];
	mcp m = {.c = c, .vocab = vocab, .session = cli_session_name(session, here, sizeof here)};
	m.enabled = calloc(n, sizeof *m.enabled);
	if (!m.enabled)
		return cli_fail_errno(c, ENOMEM, "mcp");
	int rc = parse_tools(c, &m, tools_list);
	if (rc) {
		free(m.enabled);
		return rc;
	}
	/* a client gone mid-answer must not kill us before the workers finish */
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&m.out_mu, NULL);
	pthread_mutex_init(&m.mu, NULL);
	pthread_cond_init(&m.cv, NULL);
	/* one worker now, so a call always has one; the others as calls pile up (on_call) */
	m.max_workers = workers;
	m.threads = calloc(workers, sizeof *m.threads);
	if (!m.threads || pthread_create(&m.threads[0], NULL, worker, &m) != 0) {
		int e = m.threads ? EAGAIN : ENOMEM;
		free(m.threads);
		pthread_cond_destroy(&m.cv);
		pthread_mutex_destroy(&m.mu);
		pthread_mutex_destroy(&m.out_mu);
		free(m.enabled);
		return cli_fail_errno(c, e, "mcp: start a worker");
	}
	m.started = 1;

	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, stdin)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			len--;
		if (len > 0)
			handle(&m, line, (size_t)len);
	}
	free(line);

	/*
	 * stdin closed: no more requests. The calls already received still run and answer (a
	 * script may pipe its requests and close); a client that wants them stopped cancels
	 * them or ends the process, which ends the sandbox side with its connection.
	 */
	pthread_mutex_lock(&m.mu);
	m.stopping = true;
	pthread_cond_broadcast(&m.cv);
	pthread_mutex_unlock(&m.mu);
	/* only the main thread starts workers (on_call), and it reads no more: started holds */
	for (unsigned i = 0; i < m.started; i++)
		pthread_join(m.threads[i], NULL);
	free(m.threads);
	asp_tools_free(m.tools);
	asp_client_free(m.client);
	pthread_cond_destroy(&m.cv);
	pthread_mutex_destroy(&m.mu);
	pthread_mutex_destroy(&m.out_mu);
	free(m.enabled);
	return CLI_EXIT_OK;
}
