/*
 * Target "config": `.asp.json` text through asp_config_parse (core/src/config.c): the
 * JSON parser, the schema validator with its error messages, and the view with its
 * defaults and local paths. A config that parses must have a view whose strings are
 * all readable and whose transport section is the one it names.
 */
#include "fuzz_common.h"

#include "asp/config.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* "~/" expands with $HOME: make it the same for every run. */
	setenv("HOME", "/home/fuzz", 1);
	return 0;
}

static size_t len_of(const char *s)
{
	return s ? strlen(s) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	asp_config *cfg = NULL;
	asp_error err;
	asp_error_clear(&err);
	asp_status st =
	    asp_config_parse((const char *)data, size, "/fuzz/project/.asp.json", &cfg, &err);
	if (st) {
		FUZZ_CHECK(!cfg, "no config on failure");
		FUZZ_CHECK(err.code == st && err.message[0], "a failure says why");
		FUZZ_CHECK(strlen(err.message) < sizeof err.message, "a terminated message");
		return 0;
	}
	const asp_config_view *v = asp_config_get(cfg);
	FUZZ_CHECK(v, "a view");
	size_t n = len_of(v->cwd);
	for (size_t i = 0; i < v->env_count; i++)
		n += len_of(v->env[i].key) + len_of(v->env[i].value);
	switch (v->transport) {
	case ASP_TRANSPORT_SSH:
		FUZZ_CHECK((v->ssh.host && v->ssh.host[0]) || v->ssh.config_host,
		           "ssh has a host, or a Host of the SSH config file");
		n += len_of(v->ssh.user) + len_of(v->ssh.identity_file) +
		     len_of(v->ssh.known_hosts) + len_of(v->ssh.host_key_sha256) +
		     len_of(v->ssh.password_env) + len_of(v->ssh.agent) +
		     len_of(v->ssh.config_file);
		for (size_t i = 0; i < v->ssh.proxy_command_argc; i++)
			n += len_of(v->ssh.proxy_command[i]);
		for (size_t i = 0; i < v->ssh.jump_count; i++) {
			const asp_config_ssh *h = &v->ssh.jump[i];
			FUZZ_CHECK(h->host || h->config_host, "a hop has a host");
			n += len_of(h->host) + len_of(h->config_host) + len_of(h->user) +
			     len_of(h->identity_file) + len_of(h->known_hosts);
		}
		if (v->ssh.identity_file)
			FUZZ_CHECK(v->ssh.identity_file[0] == '/', "local paths are absolute");
		break;
	case ASP_TRANSPORT_STDIO:
		FUZZ_CHECK(v->stdio.argv && v->stdio.argc > 0, "stdio has a command");
		for (size_t i = 0; i < v->stdio.argc; i++)
			n += len_of(v->stdio.argv[i]);
		FUZZ_CHECK(v->stdio.argv[v->stdio.argc] == NULL, "argv ends with NULL");
		break;
	case ASP_TRANSPORT_HTTP:
		FUZZ_CHECK(v->http.url && v->http.url[0], "http has a url");
		n += len_of(v->http.token_env) + len_of(v->http.token_file) +
		     len_of(v->http.ca_file);
		for (size_t i = 0; i < v->http.header_count; i++)
			n += len_of(v->http.headers[i].name) + len_of(v->http.headers[i].value) +
			     len_of(v->http.headers[i].env);
		if (v->http.token_file)
			FUZZ_CHECK(v->http.token_file[0] == '/', "local paths are absolute");
		break;
	default: FUZZ_CHECK(false, "a known transport");
	}
	FUZZ_CHECK(n < (size_t)-1, "lengths");
	asp_config_free(cfg);
	return 0;
}
