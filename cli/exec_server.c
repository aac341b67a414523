/*
 * asp exec-server's session: framing, dispatch, initialize and environment/info. Answers,
 * paths and base64 are in exec_server_reply.c, the fs and process methods in their own
 * files.
 */
#include "exec_server.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

/* --- initialize and environment/info ------------------------------------------------------ */

static json_t *environment_info(xs_session *s)
{
	const char *shell = s->shell ? s->shell : "/bin/sh";
	const char *slash = strrchr(shell, '/');
	json_t *info = json_object();
	json_object_set_new(
	    info, "shell",
	    json_pack("{s:s, s:s}", "name", slash ? slash + 1 : shell, "path", shell));
	json_object_set_new(info, "executorVersion", json_string(ASP_VERSION));
	json_object_set_new(info, "providerId", json_string("asp"));
	json_object_set_new(info, "cwd", xs_uri(s, s->base));
	json_object_set_new(info, "userHomeDir", s->home ? xs_uri(s, s->home) : json_null());
	json_object_set_new(info, "platformOs", json_string("linux"));
	json_object_set_new(info, "prependPathDirs", json_array());
	json_object_set_new(info, "temporaryDirectories", json_array());
	json_object_set_new(info, "tempDir", xs_uri(s, s->tmp));
	/* None of the optional methods (fs/watchMissing, environmentConfig/read, streaming
	 * files, network proxies, shell snapshots): Codex then does without them. */
	json_object_set_new(info, "capabilities", json_object());
	return info;
}

static void new_session_id(char out[40])
{
	uint8_t r[16] = {0};
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
		uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
		memcpy(r, &t, sizeof t);
	}
	if (fd >= 0)
		close(fd);
	r[6] = (uint8_t)((r[6] & 0x0f) | 0x40);
	r[8] = (uint8_t)((r[8] & 0x3f) | 0x80);
	snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	         r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
	         r[13], r[14], r[15]);
}

/* $HOME, $TMPDIR and bash's path in the sandbox: one exec at the start of the session. */
static void probe_sandbox(xs_session *s)
{
	static const char *const argv[] = {
	    "/bin/sh", "-c", "printf '%s\\n' \"$HOME\" \"${TMPDIR:-/tmp}\"; command -v bash || :"};
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 3;
	p.cwd = s->base;
	p.max_output = 16384;
	asp_exec_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	if (a && asp_exec(s->c, &p, &r, a, &err) == ASP_OK && r.exit_code == 0) {
		char *text = strndup((const char *)r.stdout_data.data, r.stdout_data.len);
		char *save = NULL, *line[3] = {NULL, NULL, NULL};
		for (int i = 0; text && i < 3; i++)
			line[i] = strtok_r(i ? NULL : text, "\n", &save);
		if (line[0] && line[0][0] == '/')
			s->home = strdup(line[0]);
		if (line[1] && line[1][0] == '/')
			s->tmp = strdup(line[1]);
		if (line[2] && line[2][0] == '/')
			s->shell = strdup(line[2]);
		free(text);
	}
	asp_arena_free(a);
	if (!s->tmp)
		s->tmp = strdup("/tmp");
}

xs_session *xs_session_new(asp_client *c, const char *session, xs_send_fn send, void *user,
                           asp_error *err)
{
	xs_session *s = calloc(1, sizeof *s);
	asp_arena *a = asp_arena_new();
	if (!s || !a) {
		free(s);
		asp_arena_free(a);
		asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	s->c = c;
	if (session && !(s->session = strdup(session))) {
		free(s);
		asp_arena_free(a);
		asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	s->send = send;
	s->send_user = user;
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "asp exec-server " ASP_VERSION;
	asp_hello_result hr;
	if (asp_hello(c, &hp, &hr, a, err) != ASP_OK) {
		asp_arena_free(a);
		xs_session_free(s);
		return NULL;
	}
	for (size_t i = 0; hr.has_features && i < hr.features.count; i++)
		s->pty = s->pty || !strcmp(hr.features.items[i], "pty");
	/* The sandbox's working directory: the config's cwd joined to the start directory. */
	const char *cwd = asp_client_config(c)->cwd;
	const char *start = hr.cwd && hr.cwd[0] == '/' ? hr.cwd : "/";
	char *joined = malloc(strlen(start) + (cwd ? strlen(cwd) : 0) + 2);
	if (joined)
		sprintf(joined, "%s/%s", cwd && cwd[0] == '/' ? "" : start, cwd ? cwd : "");
	s->base = joined ? asp_path_normalize(joined) : NULL;
	free(joined);
	asp_status st = s->base
	                    ? asp_workspace_from_config(asp_client_config(c), hr.cwd, &s->ws, err)
	                    : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_arena_free(a);
	if (st != ASP_OK) {
		xs_session_free(s);
		return NULL;
	}
	probe_sandbox(s);
	new_session_id(s->id);
	xs_procs_resume(s);
	return s;
}

void xs_session_free(xs_session *s)
{
	if (!s)
		return;
	xs_procs_free(s);
	asp_workspace_free(s->ws);
	free(s->base);
	free(s->home);
	free(s->shell);
	free(s->tmp);
	free(s->session);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* --- dispatch ----------------------------------------------------------------------------- */

void xs_session_handle(xs_session *s, const char *msg, size_t len)
{
	json_error_t je;
	json_t *m = json_loadb(msg, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(m)) {
		xs_error(s, json_null(), -32700, "parse error: %s",
		         m ? "not a JSON object" : je.text);
		json_decref(m);
		return;
	}
	json_t *id = json_object_get(m, "id");
	json_t *method = json_object_get(m, "method");
	json_t *params = json_object_get(m, "params");
	if (!json_is_string(method)) {
		/* an answer to a request we never send, or garbage with an id */
		if (id && !json_object_get(m, "result") && !json_object_get(m, "error"))
			xs_error(s, id, XS_INVALID_REQUEST, "a request needs a string `method`");
		json_decref(m);
		return;
	}
	const char *name = json_string_value(method);
	json_t *empty = NULL;
	if (!json_is_object(params))
		params = empty = json_object();
	if (!id) {
		/* notifications: initialized, and any other the client sends; nothing to answer */
	} else if (!strcmp(name, "initialize")) {
		json_t *r = json_object();
		json_object_set_new(r, "sessionId", json_string(s->id));
		json_object_set_new(r, "environmentInfo", environment_info(s));
		xs_reply(s, id, r);
	} else if (!strcmp(name, "environment/info")) {
		xs_reply(s, id, environment_info(s));
	} else if (!xs_fs_handle(s, name, id, params) && !xs_proc_handle(s, name, id, params)) {
		xs_error(s, id, XS_METHOD_NOT_FOUND,
		         "asp exec-server does not implement `%s` (docs/harnesses.md, \"Codex\")",
		         name);
	}
	json_decref(empty);
	json_decref(m);
}
