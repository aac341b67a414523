/*
 * asp hello's account of the way to an SSH sandbox (asp/ssh_route.h): each host on the
 * way, each value and where it came from (.asp.json, the SSH config file and line, a
 * default), and the proxy command.
 */
#include "cli.h"

#include "asp/ssh_route.h"

#include <stdlib.h>

/* The route of the config at c->config_path (found as cli_client finds it); NULL when the
 * transport is not SSH or the route cannot be resolved (connecting then says why). */
asp_ssh_route *cli_route(cli *c)
{
	asp_config *cfg = NULL;
	asp_error err;
	if (asp_config_load(c->config_path, &cfg, &err) != ASP_OK)
		return NULL;
	asp_ssh_route *r = NULL;
	if (asp_config_get(cfg)->transport == ASP_TRANSPORT_SSH)
		(void)asp_ssh_route_resolve(asp_config_get(cfg), &r, &err);
	asp_config_free(cfg);
	return r;
}

static void value_json(jw *w, const char *key, const char *value, const char *from)
{
	jw_key(w, key);
	jw_obj_begin(w);
	jw_key(w, "value");
	jw_str(w, value);
	jw_key(w, "from");
	jw_str(w, from);
	jw_obj_end(w);
}

void cli_route_json(jw *w, const asp_ssh_route *route)
{
	const asp_ssh_route_view *r = asp_ssh_route_get(route);
	jw_obj_begin(w);
	jw_key(w, "hops");
	jw_arr_begin(w);
	for (size_t i = 0; i < r->hop_count; i++) {
		const asp_ssh_hop *h = &r->hops[i];
		char port[16];
		snprintf(port, sizeof port, "%u", h->ssh.port);
		jw_obj_begin(w);
		jw_key(w, "role");
		jw_str(w, i + 1 == r->hop_count ? "sandbox" : "jump");
		jw_key(w, "name");
		jw_str(w, h->name);
		value_json(w, "host", h->ssh.host, h->host_from);
		value_json(w, "port", port, h->port_from);
		value_json(w, "user", h->ssh.user, h->user_from);
		value_json(w, "identity_file",
		           h->ssh.identity_file ? h->ssh.identity_file : h->ssh.identity_env,
		           h->identity_from);
		value_json(w, "known_hosts", h->ssh.known_hosts, h->known_hosts_from);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_key(w, "jump_from");
	jw_str(w, r->jump_from);
	jw_key(w, "proxy_command");
	if (r->proxy_command) {
		jw_obj_begin(w);
		jw_key(w, "argv");
		jw_arr_begin(w);
		for (size_t i = 0; i < r->proxy_command_argc; i++)
			jw_str(w, r->proxy_command[i]);
		jw_arr_end(w);
		jw_key(w, "from");
		jw_str(w, r->proxy_from);
		jw_obj_end(w);
	} else {
		jw_null(w);
	}
	jw_obj_end(w);
}

void cli_route_text(FILE *f, const asp_ssh_route *route)
{
	const asp_ssh_route_view *r = asp_ssh_route_get(route);
	fprintf(f, "route:\n");
	if (r->proxy_command) {
		fprintf(f, "  proxy command:");
		for (size_t i = 0; i < r->proxy_command_argc; i++)
			fprintf(f, " %s", r->proxy_command[i]);
		fprintf(f, "\n    (%s)\n", r->proxy_from);
	}
	for (size_t i = 0; i < r->hop_count; i++) {
		const asp_ssh_hop *h = &r->hops[i];
		char label[400];
		asp_ssh_hop_label(h, label, sizeof label);
		if (i + 1 == r->hop_count)
			fprintf(f, "  sandbox %s: %s\n", h->name, label);
		else
			fprintf(f, "  jump host %zu of %zu %s: %s%s%s%s\n", i + 1, r->hop_count - 1,
			        h->name, label, i == 0 && r->jump_from ? " (" : "",
			        i == 0 && r->jump_from ? r->jump_from : "",
			        i == 0 && r->jump_from ? ")" : "");
		fprintf(f, "    host         %s (%s)\n", h->ssh.host, h->host_from);
		fprintf(f, "    port         %u (%s)\n", h->ssh.port, h->port_from);
		fprintf(f, "    user         %s (%s)\n", h->ssh.user ? h->ssh.user : "-",
		        h->user_from);
		fprintf(f, "    identity     %s (%s)\n",
		        h->ssh.identity_file  ? h->ssh.identity_file
		        : h->ssh.identity_env ? h->ssh.identity_env
		                              : "-",
		        h->identity_from);
		fprintf(f, "    known_hosts  %s (%s)\n", h->ssh.known_hosts, h->known_hosts_from);
	}
}
