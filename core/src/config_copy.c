/* Deep copies of a config view (config_copy.h). */
#include "config_copy.h"
#include "arena_cap.h"

#include <string.h>

static bool dup_str(asp_arena *a, const char **s)
{
	if (!*s)
		return true;
	*s = asp_arena_strndup(a, *s, strlen(*s));
	return *s != NULL;
}

/* argv[0..argc) and a NULL after them, copied into `a`; NULL stays NULL. */
static bool dup_argv(asp_arena *a, const char *const **argvp, size_t argc)
{
	const char *const *src = *argvp;
	if (!src)
		return true;
	const char **argv = asp_arena_alloc(a, (argc + 1) * sizeof *argv);
	if (!argv)
		return false;
	for (size_t i = 0; i < argc; i++) {
		argv[i] = src[i];
		if (!dup_str(a, &argv[i]))
			return false;
	}
	argv[argc] = NULL;
	*argvp = argv;
	return true;
}

/* The strings of an ssh section (a hop's too), and its hops, copied into `a`. */
static bool ssh_copy(asp_arena *a, asp_config_ssh *s)
{
	bool ok = dup_str(a, &s->host) && dup_str(a, &s->user) && dup_str(a, &s->identity_file) &&
	          dup_str(a, &s->password_env) && dup_str(a, &s->known_hosts) &&
	          dup_str(a, &s->host_key_sha256) && dup_str(a, &s->agent) &&
	          dup_str(a, &s->identity_env) && dup_str(a, &s->host_key) &&
	          dup_str(a, &s->config_host) && dup_str(a, &s->config_file) &&
	          dup_argv(a, &s->proxy_command, s->proxy_command_argc);
	if (!ok || !s->jump_count)
		return ok;
	asp_config_ssh *hops = asp_arena_alloc(a, s->jump_count * sizeof *hops);
	if (!hops)
		return false;
	for (size_t i = 0; i < s->jump_count; i++) {
		hops[i] = s->jump[i];
		if (!ssh_copy(a, &hops[i]))
			return false;
	}
	s->jump = hops;
	return true;
}

/* Lists every string of asp_config_view: a string field added there must be added here too. */
bool asp_config_view_copy(asp_arena *a, const asp_config_view *src, asp_config_view *v)
{
	*v = *src;
	bool ok = dup_str(a, &v->path) && dup_str(a, &v->cwd) && ssh_copy(a, &v->ssh) &&
	          dup_str(a, &v->http.url) && dup_str(a, &v->http.token_env) &&
	          dup_str(a, &v->http.token_file) && dup_str(a, &v->http.ca_file) &&
	          dup_str(a, &v->workspace.local) && dup_str(a, &v->workspace.sandbox) &&
	          dup_str(a, &v->target) && dup_argv(a, &v->stdio.argv, v->stdio.argc);
	if (!ok)
		return false;
	if (src->env_count) {
		asp_config_env *e = asp_arena_alloc(a, src->env_count * sizeof *e);
		if (!e)
			return false;
		for (size_t i = 0; i < src->env_count; i++) {
			e[i] = src->env[i];
			if (!dup_str(a, &e[i].key) || !dup_str(a, &e[i].value))
				return false;
		}
		v->env = e;
	} else {
		v->env = NULL;
	}
	if (src->http.header_count) {
		asp_config_header *h = asp_arena_alloc(a, src->http.header_count * sizeof *h);
		if (!h)
			return false;
		for (size_t i = 0; i < src->http.header_count; i++) {
			h[i] = src->http.headers[i];
			if (!dup_str(a, &h[i].name) || !dup_str(a, &h[i].value) ||
			    !dup_str(a, &h[i].env))
				return false;
		}
		v->http.headers = h;
	} else {
		v->http.headers = NULL;
	}
	return true;
}

asp_arena *asp_config_view_dup(const asp_config_view *src, asp_config_view *dst, size_t extra)
{
	/* copied twice: once to learn the size, once into a block of that size */
	asp_arena *sizing = asp_arena_new();
	if (!sizing || !asp_config_view_copy(sizing, src, dst)) {
		asp_arena_free(sizing);
		return NULL;
	}
	size_t need = asp_arena_used(sizing) + extra + 64; /* (extra's alignment) */
	asp_arena_free(sizing);
	asp_arena *a = asp_arena_new_cap(need);
	if (a && !asp_config_view_copy(a, src, dst)) {
		asp_arena_free(a);
		a = NULL;
	}
	return a;
}
