/*
 * Loads a .asp.json with the C core (asp_config_load: discovery when no file is given)
 * and prints the outcome as one JSON object, for the SDK tests to compare with what the
 * Python and TypeScript SDKs make of the same file:
 *   {"code": "invalid_argument", "message": "...", "path": "..."}   or
 *   {"view": {"path", "transport", "cwd", "env", "timeout_ms", "call_timeout_ms", "ssh": {...},
 *             "stdio": {"command"}, "http": {..., "headers": [[name, value, env]...]},
 *             "document": the whole file as version 1}}
 * usage: config_probe [FILE]
 */
#include "asp/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

int main(int argc, char **argv)
{
	asp_config *cfg = NULL;
	asp_error err;
	asp_status st = asp_config_load(argc > 1 ? argv[1] : NULL, &cfg, &err);
	json_t *out = json_object();
	if (st != ASP_OK) {
		json_object_set_new(out, "code", json_string(asp_strerror(st)));
		json_object_set_new(out, "message", json_string(err.message));
		json_object_set_new(out, "path", err.path[0] ? json_string(err.path) : json_null());
	} else {
		const asp_config_view *v = asp_config_get(cfg);
		static const char *const transports[] = {"", "stdio", "ssh", "http"};
		json_t *view = json_object(), *env = json_array(), *ssh = json_object();
		json_t *http = json_object(), *stdio = json_object();
		json_object_set_new(view, "path", str_or_null(v->path));
		json_object_set_new(view, "transport", json_string(transports[v->transport]));
		json_object_set_new(view, "cwd", str_or_null(v->cwd));
		for (size_t i = 0; i < v->env_count; i++)
			json_array_append_new(env,
			                      json_pack("[ss]", v->env[i].key, v->env[i].value));
		json_object_set_new(view, "env", env);
		json_object_set_new(view, "timeout_ms", json_integer((json_int_t)v->timeout_ms));
		json_object_set_new(view, "call_timeout_ms", json_integer(v->call_timeout_ms));
		json_object_set_new(ssh, "host", str_or_null(v->ssh.host));
		json_object_set_new(ssh, "port", json_integer(v->ssh.port));
		json_object_set_new(ssh, "user", str_or_null(v->ssh.user));
		json_object_set_new(ssh, "identity_file", str_or_null(v->ssh.identity_file));
		json_object_set_new(ssh, "identity_env", str_or_null(v->ssh.identity_env));
		json_object_set_new(ssh, "password_env", str_or_null(v->ssh.password_env));
		json_object_set_new(ssh, "known_hosts", str_or_null(v->ssh.known_hosts));
		json_object_set_new(ssh, "host_key_sha256", str_or_null(v->ssh.host_key_sha256));
		json_object_set_new(ssh, "host_key", str_or_null(v->ssh.host_key));
		json_object_set_new(
		    ssh, "strict_host_key_checking",
		    v->ssh.strict_host_key_checking == ASP_HOSTKEY_ACCEPT_NEW
		        ? json_string("accept-new")
		        : json_boolean(v->ssh.strict_host_key_checking == ASP_HOSTKEY_STRICT));
		json_object_set_new(ssh, "connect_timeout_ms",
		                    json_integer(v->ssh.connect_timeout_ms));
		json_object_set_new(ssh, "agent", str_or_null(v->ssh.agent));
		json_object_set_new(view, "ssh", ssh);
		json_t *cmd = v->stdio.argv ? json_array() : json_null();
		for (size_t i = 0; v->stdio.argv && i < v->stdio.argc; i++)
			json_array_append_new(cmd, json_string(v->stdio.argv[i]));
		json_object_set_new(stdio, "command", cmd);
		json_object_set_new(view, "stdio", stdio);
		json_object_set_new(http, "url", str_or_null(v->http.url));
		json_object_set_new(http, "token_env", str_or_null(v->http.token_env));
		json_object_set_new(http, "token_file", str_or_null(v->http.token_file));
		json_object_set_new(http, "ca_file", str_or_null(v->http.ca_file));
		json_object_set_new(http, "websocket",
		                    v->http.websocket == ASP_HTTP_WS_BOTH
		                        ? json_null()
		                        : json_boolean(v->http.websocket == ASP_HTTP_WS_ONLY));
		json_t *headers = json_array();
		for (size_t i = 0; i < v->http.header_count; i++) {
			const asp_config_header *h = &v->http.headers[i];
			json_array_append_new(headers,
			                      json_pack("[soo]", h->name, str_or_null(h->value),
			                                str_or_null(h->env)));
		}
		json_object_set_new(http, "headers", headers);
		json_object_set_new(view, "http", http);
		json_object_set_new(view, "document", json_loads(asp_config_json(cfg), 0, NULL));
		json_object_set_new(out, "view", view);
	}
	char *s = json_dumps(out, JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	if (s)
		puts(s);
	free(s);
	json_decref(out);
	asp_config_free(cfg);
	return s ? 0 : 1;
}
