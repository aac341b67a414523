/*
 * The route to an SSH sandbox (asp/ssh_route.h): .asp.json's keys win; what they leave
 * open for config_host, and for a jump host written as a name, comes from the SSH
 * config file; then the defaults (port 22, the local user, ~/.ssh/known_hosts).
 * proxy_command and jump count as one setting: either, in .asp.json, replaces the
 * file's ProxyCommand or ProxyJump. As ssh(1) does, the first jump host's own
 * ProxyJump or ProxyCommand in the file carries the connection to it, unless
 * .asp.json gives a proxy_command.
 */
#include "asp/ssh_route.h"

#include "asp/arena.h"
#include "ssh_config_file.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_HOPS 16 /* jump hosts and the sandbox */

struct asp_ssh_route {
	asp_arena *a;
	asp_ssh_route_view view;
	asp_ssh_hop hops[MAX_HOPS];
};

typedef struct builder {
	asp_ssh_route *r;
	const asp_config_view *cfg;
	const char *file;    /* the .asp.json, for "ssh.port in FILE" */
	const char *cf_path; /* the SSH config file */
	asp_error *err;
	/* the proxy before expansion: argv as written, or a ProxyCommand line */
	const char *const *proxy_argv;
	size_t proxy_argc;
	const char *proxy_line;
} builder;

static asp_status oom(builder *b)
{
	return asp_error_oom(b->err, "ssh route", NULL);
}

static const char *fmt(builder *b, const char *f, const char *x, const char *y)
{
	char buf[4400];
	snprintf(buf, sizeof buf, f, x, y ? y : "");
	return asp_arena_strndup(b->r->a, buf, strlen(buf));
}

static const char *local_user(void)
{
	const struct passwd *pw = getpwuid(getuid());
	return pw && pw->pw_name ? pw->pw_name : "?";
}

static const char *home(void)
{
	const char *h = getenv("HOME");
	if (h && *h)
		return h;
	const struct passwd *pw = getpwuid(getuid());
	return pw && pw->pw_dir ? pw->pw_dir : "/";
}

/* ---- % escapes ---------------------------------------------------------------------------- */

/* What %h %p %r %n stand for in one hop. */
typedef struct escapes {
	const char *host, *user, *name;
	unsigned port;
	bool paths; /* IdentityFile, UserKnownHostsFile: also ~, %d, %u */
} escapes;

/*
 * `in` with its escapes replaced, into the arena; NULL with *bad set to the escape's
 * letter when one is unknown ('\0': out of memory, or a % at the end).
 */
static char *expand(builder *b, const char *in, const escapes *e, char *bad)
{
	size_t cap = strlen(in) + 1, len = 0;
	for (const char *p = in; *p; p++)
		cap += *p == '%' || *p == '~' ? 4096 : 0;
	char *out = asp_arena_alloc(b->r->a, cap);
	*bad = '\0';
	if (!out)
		return NULL;
	if (e->paths && in[0] == '~' && (in[1] == '/' || !in[1])) {
		len = (size_t)snprintf(out, cap, "%s", home());
		in++;
	}
	for (const char *p = in; *p; p++) {
		if (*p != '%') {
			out[len++] = *p;
			continue;
		}
		char port[16];
		const char *v = NULL;
		switch (*++p) {
		case '%': v = "%"; break;
		case 'h': v = e->host; break;
		case 'n': v = e->name; break;
		case 'r': v = e->user ? e->user : local_user(); break;
		case 'p':
			snprintf(port, sizeof port, "%u", e->port);
			v = port;
			break;
		case 'd': v = e->paths ? home() : NULL; break;
		case 'u': v = e->paths ? local_user() : NULL; break;
		default: break;
		}
		if (!v) {
			*bad = *p ? *p : '%';
			return NULL;
		}
		size_t n = strlen(v);
		if (len + n >= cap)
			return NULL;
		memcpy(out + len, v, n);
		len += n;
	}
	out[len] = '\0';
	return out;
}

static asp_status bad_escape(builder *b, char letter, const char *what, const char *at)
{
	if (!letter)
		return oom(b);
	return asp_error_set(b->err, ASP_E_INVALID_ARGUMENT, b->cf_path,
	                     "%s: %s: unknown escape %%%c (known: %%h %%p %%r %%n %%%%%s)", at,
	                     what, letter,
	                     strcmp(what, "ProxyCommand") == 0 ? "" : " and ~ %d %u in paths");
}

/* ---- one hop ------------------------------------------------------------------------------ */

/* Both NULL, or the same text. */
static bool same(const char *x, const char *y)
{
	return x == y || (x && y && strcmp(x, y) == 0);
}

/* A value from the file, with its provenance "KEYWORD at FILE:LINE". */
static const char *cf_text(const ssh_cf_host *cf, enum ssh_cf_key k)
{
	return cf ? cf->v[k].text : NULL;
}

static const char *cf_from(builder *b, const ssh_cf_host *cf, enum ssh_cf_key k)
{
	return fmt(b, "%s at %s", ssh_cf_keyword(k), cf->v[k].at);
}

/* A path from the file (IdentityFile, UserKnownHostsFile), expanded; relative: in ~/.ssh. */
static asp_status cf_path(builder *b, const ssh_cf_host *cf, enum ssh_cf_key k,
                          const asp_ssh_hop *h, const char **out)
{
	escapes e = {h->ssh.host, h->ssh.user, h->name, h->ssh.port, true};
	char bad;
	const char *p = expand(b, cf->v[k].text, &e, &bad);
	if (!p)
		return bad_escape(b, bad, ssh_cf_keyword(k), cf->v[k].at);
	if (p[0] != '/')
		p = fmt(b, "%s/.ssh/%s", home(), p);
	*out = p;
	return *out ? ASP_OK : oom(b);
}

/*
 * Where a key `g` gives came from: "WHERE.KEY in FILE" for .asp.json's keys (where:
 * "ssh", "ssh.jump[1]"), or `where` itself for a hop a ProxyJump line names ("ProxyJump
 * at FILE:LINE").
 */
static const char *given(builder *b, const char *where, const char *key)
{
	if (strncmp(where, "ssh", 3) != 0)
		return where;
	char k[700];
	snprintf(k, sizeof k, "%s.%s", where, key);
	return fmt(b, "%s in %s", k, b->file);
}

/*
 * Fills hop `h` named `name` from `g` (the keys given for it where `where` says), then
 * `cf` (what the SSH config file says of the name, or NULL), then the defaults. With
 * `inherited`, g's identity and known_hosts are the sandbox's, taken when the file names
 * none.
 */
static asp_status fill(builder *b, asp_ssh_hop *h, const asp_config_ssh *g, const char *where,
                       const char *name, const ssh_cf_host *cf, bool inherited)
{
	h->ssh = *g;
	h->ssh.proxy_command = NULL;
	h->ssh.proxy_command_argc = 0;
	h->ssh.jump = NULL;
	h->ssh.jump_count = 0;
	h->ssh.config_host = NULL;
	h->ssh.config_file = NULL;
	h->name = name;
	char bad;
	if (g->host) {
		h->host_from = given(b, where, "host");
	} else if (cf_text(cf, SSH_CF_HOSTNAME)) {
		escapes e = {name, NULL, name, 0, false};
		if (!(h->ssh.host = expand(b, cf->v[SSH_CF_HOSTNAME].text, &e, &bad)))
			return bad_escape(b, bad, "HostName", cf->v[SSH_CF_HOSTNAME].at);
		h->host_from = cf_from(b, cf, SSH_CF_HOSTNAME);
	} else {
		h->ssh.host = name;
		h->host_from =
		    fmt(b, "the name itself (%s sets no HostName for it)", b->cf_path, NULL);
	}
	if (g->port) {
		h->port_from = given(b, where, "port");
	} else if (cf_text(cf, SSH_CF_PORT)) {
		char *stop;
		unsigned long p = strtoul(cf->v[SSH_CF_PORT].text, &stop, 10);
		if (*stop || p < 1 || p > 65535)
			return asp_error_set(b->err, ASP_E_INVALID_ARGUMENT, b->cf_path,
			                     "%s: Port %s is not a number from 1 to 65535",
			                     cf->v[SSH_CF_PORT].at, cf->v[SSH_CF_PORT].text);
		h->ssh.port = (unsigned)p;
		h->port_from = cf_from(b, cf, SSH_CF_PORT);
	} else {
		h->ssh.port = 22;
		h->port_from = "the default";
	}
	if (g->user) {
		h->user_from = given(b, where, "user");
	} else if (cf_text(cf, SSH_CF_USER)) {
		h->ssh.user = cf->v[SSH_CF_USER].text;
		h->user_from = cf_from(b, cf, SSH_CF_USER);
	} else {
		h->user_from = "the default: the local user";
	}
	bool own_key = g->identity_file || g->identity_env;
	/* a hop's object takes the sandbox's identity and known_hosts when it names none */
	const asp_config_ssh *sb = &b->cfg->ssh;
	bool hop = strcmp(where, "ssh") != 0;
	bool same_key = hop && (same(g->identity_file, sb->identity_file) &&
	                        same(g->identity_env, sb->identity_env));
	if (own_key && !inherited && same_key) {
		h->identity_from =
		    fmt(b, "the sandbox's %s in %s",
		        g->identity_file ? "ssh.identity_file" : "ssh.identity_env", b->file);
	} else if (own_key && !inherited) {
		h->identity_from =
		    given(b, where, g->identity_file ? "identity_file" : "identity_env");
	} else if (cf_text(cf, SSH_CF_IDENTITY_FILE)) {
		asp_status st = cf_path(b, cf, SSH_CF_IDENTITY_FILE, h, &h->ssh.identity_file);
		if (st)
			return st;
		h->ssh.identity_env = NULL;
		h->identity_from = cf_from(b, cf, SSH_CF_IDENTITY_FILE);
	} else if (own_key) {
		h->identity_from =
		    fmt(b, "the sandbox's %s in %s",
		        g->identity_file ? "ssh.identity_file" : "ssh.identity_env", b->file);
	} else {
		h->identity_from = "none given: ssh-agent and the default keys (~/.ssh/id_*)";
	}
	if (g->known_hosts && !inherited && hop && same(g->known_hosts, sb->known_hosts)) {
		h->known_hosts_from = fmt(b, "the sandbox's ssh.known_hosts in %s", b->file, NULL);
	} else if (g->known_hosts && !inherited) {
		h->known_hosts_from = given(b, where, "known_hosts");
	} else if (cf_text(cf, SSH_CF_KNOWN_HOSTS)) {
		asp_status st = cf_path(b, cf, SSH_CF_KNOWN_HOSTS, h, &h->ssh.known_hosts);
		if (st)
			return st;
		h->known_hosts_from = cf_from(b, cf, SSH_CF_KNOWN_HOSTS);
	} else if (g->known_hosts) {
		h->known_hosts_from = fmt(b, "the sandbox's ssh.known_hosts in %s", b->file, NULL);
	} else {
		h->ssh.known_hosts = fmt(b, "%s/.ssh/known_hosts", home(), NULL);
		h->known_hosts_from = "the default";
	}
	if (!h->host_from || !h->port_from || !h->identity_from || !h->known_hosts_from ||
	    !h->user_from || !h->ssh.known_hosts)
		return oom(b);
	/* the route owns its strings: the config may be freed before it */
	const char **own[] = {&h->name,
	                      &h->ssh.host,
	                      &h->ssh.user,
	                      &h->ssh.identity_file,
	                      &h->ssh.identity_env,
	                      &h->ssh.password_env,
	                      &h->ssh.known_hosts,
	                      &h->ssh.host_key_sha256,
	                      &h->ssh.host_key,
	                      &h->ssh.agent};
	for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
		if (*own[i] && !(*own[i] = asp_arena_strndup(b->r->a, *own[i], strlen(*own[i]))))
			return oom(b);
	}
	return ASP_OK;
}

/* What the SSH config file says of `name` (nothing when the file is missing). */
static asp_status lookup(builder *b, const char *name, ssh_cf_host *out)
{
	return ssh_cf_lookup(b->cf_path, name, b->r->a, out, b->err);
}

/* A hop named "[user@]host[:port]" (a ProxyJump entry): the keys a hop inherits. */
static asp_status named_hop(builder *b, const char *spec, const char *at, asp_config_ssh *g)
{
	const asp_config_ssh *s = &b->cfg->ssh;
	*g = (asp_config_ssh){.identity_file = s->identity_file,
	                      .identity_env = s->identity_env,
	                      .known_hosts = s->known_hosts,
	                      .strict_host_key_checking = s->strict_host_key_checking,
	                      .connect_timeout_ms = s->connect_timeout_ms};
	const char *why = NULL;
	if (ssh_hop_parse(spec, b->r->a, &g->user, &g->config_host, &g->port, &why) != 0)
		return asp_error_set(b->err, ASP_E_INVALID_ARGUMENT, b->cf_path,
		                     "%s: ProxyJump: %s in \"%s\"", at, why, spec);
	return ASP_OK;
}

/* The hops a ProxyJump line lists ("a,user@b:2222"; "none": no hops), into hops[]. */
static asp_status proxy_jump(builder *b, const ssh_cf_host *cf, asp_config_ssh *hops, size_t *n)
{
	const char *line = cf->v[SSH_CF_PROXY_JUMP].text, *at = cf->v[SSH_CF_PROXY_JUMP].at;
	*n = 0;
	if (strcasecmp(line, "none") == 0)
		return ASP_OK;
	char *copy = asp_arena_strndup(b->r->a, line, strlen(line)), *save = NULL;
	if (!copy)
		return oom(b);
	for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		if (*n == MAX_HOPS - 1)
			return asp_error_set(b->err, ASP_E_INVALID_ARGUMENT, b->cf_path,
			                     "%s: ProxyJump lists more than %d hosts", at,
			                     MAX_HOPS - 1);
		if (strncmp(p, "ssh://", 6) == 0)
			p += 6;
		asp_status st = named_hop(b, p, at, &hops[(*n)++]);
		if (st)
			return st;
	}
	return ASP_OK;
}

/* Inserts hops[0..n) of `add` before the route's first hop. */
static asp_status prepend(builder *b, asp_ssh_hop *add, size_t n)
{
	asp_ssh_route_view *v = &b->r->view;
	if (v->hop_count + n > MAX_HOPS)
		return asp_error_set(
		    b->err, ASP_E_INVALID_ARGUMENT, b->cf_path,
		    "more than %d hosts on the way to the sandbox (ProxyJump in %s "
		    "leads to itself?)",
		    MAX_HOPS, b->cf_path);
	memmove(&b->r->hops[n], &b->r->hops[0], v->hop_count * sizeof *b->r->hops);
	memcpy(&b->r->hops[0], add, n * sizeof *add);
	v->hop_count += n;
	return ASP_OK;
}

/*
 * Fills hops for the entries of a hop list: .asp.json's ssh.jump (`line` NULL), or a
 * ProxyJump line (`line`: "ProxyJump at FILE:LINE").
 */
static asp_status fill_list(builder *b, const asp_config_ssh *g, size_t n, const char *line,
                            asp_ssh_hop *out, ssh_cf_host *cfs)
{
	for (size_t i = 0; i < n; i++) {
		char where[4400];
		if (line)
			snprintf(where, sizeof where, "%s", line);
		else
			snprintf(where, sizeof where, "ssh.jump[%zu]", i);
		const char *name = g[i].config_host ? g[i].config_host : g[i].host;
		asp_status st = ASP_OK;
		memset(&cfs[i], 0, sizeof cfs[i]);
		if (g[i].config_host)
			st = lookup(b, name, &cfs[i]);
		if (st == ASP_OK)
			st = fill(b, &out[i], &g[i], fmt(b, "%s", where, NULL), name,
			          g[i].config_host ? &cfs[i] : NULL, g[i].config_host != NULL);
		if (st)
			return st;
	}
	return ASP_OK;
}

/* The first hop's own ProxyJump or ProxyCommand, as ssh(1) follows it, until none. */
static asp_status first_hop_route(builder *b, ssh_cf_host first)
{
	asp_ssh_route_view *v = &b->r->view;
	while (!b->proxy_argv && !b->proxy_line) {
		if (first.v[SSH_CF_PROXY_COMMAND].text) {
			if (strcasecmp(first.v[SSH_CF_PROXY_COMMAND].text, "none") != 0) {
				b->proxy_line = first.v[SSH_CF_PROXY_COMMAND].text;
				v->proxy_from = cf_from(b, &first, SSH_CF_PROXY_COMMAND);
			}
			return ASP_OK;
		}
		if (!first.v[SSH_CF_PROXY_JUMP].text)
			return ASP_OK;
		asp_config_ssh g[MAX_HOPS];
		asp_ssh_hop add[MAX_HOPS];
		ssh_cf_host cfs[MAX_HOPS];
		size_t n = 0;
		asp_status st = proxy_jump(b, &first, g, &n);
		if (st == ASP_OK && n > 0) {
			char where[4200];
			snprintf(where, sizeof where, "ProxyJump at %s",
			         first.v[SSH_CF_PROXY_JUMP].at);
			st = fill_list(b, g, n, where, add, cfs);
		}
		if (st == ASP_OK)
			st = prepend(b, add, n);
		if (st || n == 0)
			return st;
		if (!v->jump_from)
			v->jump_from = cf_from(b, &first, SSH_CF_PROXY_JUMP);
		first = cfs[0];
		if (!g[0].config_host)
			return ASP_OK;
	}
	return ASP_OK;
}

/* ---- the proxy command -------------------------------------------------------------------- */

static asp_status expand_proxy(builder *b)
{
	asp_ssh_route_view *v = &b->r->view;
	const asp_ssh_hop *h = &b->r->hops[0];
	escapes e = {h->ssh.host, h->ssh.user, h->name, h->ssh.port, false};
	char bad;
	if (b->proxy_argv) {
		const char **argv = asp_arena_alloc(b->r->a, (b->proxy_argc + 1) * sizeof *argv);
		if (!argv)
			return oom(b);
		for (size_t i = 0; i < b->proxy_argc; i++) {
			if (!(argv[i] = expand(b, b->proxy_argv[i], &e, &bad)))
				return bad ? asp_error_set(
				                 b->err, ASP_E_INVALID_ARGUMENT, b->file,
				                 "%s: ssh.proxy_command[%zu]: unknown escape "
				                 "%%%c",
				                 b->file, i, bad)
				           : oom(b);
		}
		argv[b->proxy_argc] = NULL;
		v->proxy_command = argv;
		v->proxy_command_argc = b->proxy_argc;
	} else if (b->proxy_line) {
		/* as ssh(1): the line runs in a shell, which the command replaces */
		const char *line = expand(b, b->proxy_line, &e, &bad);
		if (!line)
			return bad_escape(b, bad, "ProxyCommand", v->proxy_from);
		const char **argv = asp_arena_alloc(b->r->a, 4 * sizeof *argv);
		if (!argv || !(argv[2] = fmt(b, "exec %s", line, NULL)))
			return oom(b);
		argv[0] = "/bin/sh";
		argv[1] = "-c";
		argv[3] = NULL;
		v->proxy_command = argv;
		v->proxy_command_argc = 3;
	}
	return ASP_OK;
}

/* ---- the whole route ---------------------------------------------------------------------- */

static asp_status resolve(builder *b)
{
	const asp_config_ssh *s = &b->cfg->ssh;
	asp_ssh_route_view *v = &b->r->view;
	if (!s->host && !s->config_host)
		return asp_error_set(b->err, ASP_E_INVALID_ARGUMENT, b->cfg->path,
		                     "%s: ssh.host (or ssh.config_host) is required for the ssh "
		                     "transport",
		                     b->file);
	ssh_cf_host cf = {0};
	const char *name = s->config_host ? s->config_host : s->host;
	if (s->config_host) {
		asp_status st = lookup(b, name, &cf);
		if (st)
			return st;
		if (!cf.exists)
			return asp_error_set(
			    b->err, ASP_E_INVALID_ARGUMENT, b->cfg->path,
			    "%s: ssh.config_host \"%s\": the SSH config file %s does "
			    "not exist (ssh.config_file names another one)",
			    b->file, name, b->cf_path);
		if (!cf.named)
			return asp_error_set(
			    b->err, ASP_E_INVALID_ARGUMENT, b->cfg->path,
			    "%s: ssh.config_host \"%s\": no Host or Match line of %s "
			    "names it (check the spelling, or set ssh.host instead)",
			    b->file, name, b->cf_path);
	}
	/* the sandbox last; the jump hosts go before it */
	asp_ssh_hop target;
	asp_status st = fill(b, &target, s, "ssh", name, s->config_host ? &cf : NULL, false);
	if (st)
		return st;
	b->r->hops[0] = target;
	v->hop_count = 1;

	asp_config_ssh g[MAX_HOPS];
	const asp_config_ssh *list = s->jump;
	size_t n = s->jump_count;
	bool from_file = false;
	if (s->proxy_command || s->jump_count) {
		b->proxy_argv = s->proxy_command;
		b->proxy_argc = s->proxy_command_argc;
		if (s->proxy_command)
			v->proxy_from = fmt(b, "ssh.proxy_command in %s", b->file, NULL);
		if (n > MAX_HOPS - 1)
			return asp_error_set(b->err, ASP_E_INVALID_ARGUMENT, b->cfg->path,
			                     "%s: ssh.jump lists more than %d hosts", b->file,
			                     MAX_HOPS - 1);
		if (n)
			v->jump_from = fmt(b, "ssh.jump in %s", b->file, NULL);
	} else if (cf.v[SSH_CF_PROXY_COMMAND].text) {
		if (strcasecmp(cf.v[SSH_CF_PROXY_COMMAND].text, "none") != 0) {
			b->proxy_line = cf.v[SSH_CF_PROXY_COMMAND].text;
			v->proxy_from = cf_from(b, &cf, SSH_CF_PROXY_COMMAND);
		}
	} else if (cf.v[SSH_CF_PROXY_JUMP].text) {
		if ((st = proxy_jump(b, &cf, g, &n)) != ASP_OK)
			return st;
		list = g;
		from_file = true;
		if (n)
			v->jump_from = cf_from(b, &cf, SSH_CF_PROXY_JUMP);
	}
	if (n) {
		asp_ssh_hop add[MAX_HOPS];
		ssh_cf_host cfs[MAX_HOPS];
		char wf[4200];
		if (from_file)
			snprintf(wf, sizeof wf, "ProxyJump at %s", cf.v[SSH_CF_PROXY_JUMP].at);
		st = fill_list(b, list, n, from_file ? wf : NULL, add, cfs);
		if (st == ASP_OK)
			st = prepend(b, add, n);
		if (st == ASP_OK && list[0].config_host)
			st = first_hop_route(b, cfs[0]);
		if (st)
			return st;
	}
	v->hops = b->r->hops;
	return expand_proxy(b);
}

asp_status asp_ssh_route_resolve(const asp_config_view *cfg, asp_ssh_route **out, asp_error *err)
{
	*out = NULL;
	asp_ssh_route *r = calloc(1, sizeof *r);
	if (!r || !(r->a = asp_arena_new())) {
		free(r);
		return asp_error_oom(err, "ssh route", NULL);
	}
	char dflt[4200];
	snprintf(dflt, sizeof dflt, "%s/.ssh/config", home());
	builder b = {.r = r,
	             .cfg = cfg,
	             .file = cfg->path ? cfg->path : "<memory>",
	             .cf_path = cfg->ssh.config_file ? cfg->ssh.config_file : dflt,
	             .err = err};
	b.cf_path = asp_arena_strndup(r->a, b.cf_path, strlen(b.cf_path));
	asp_status st = b.cf_path ? resolve(&b) : oom(&b);
	if (st != ASP_OK) {
		asp_ssh_route_free(r);
		return st;
	}
	*out = r;
	return ASP_OK;
}

const asp_ssh_route_view *asp_ssh_route_get(const asp_ssh_route *r)
{
	return r ? &r->view : NULL;
}

void asp_ssh_hop_label(const asp_ssh_hop *h, char *out, size_t cap)
{
	const char *host = h->ssh.host ? h->ssh.host : "?";
	bool v6 = strchr(host, ':') != NULL;
	snprintf(out, cap, "%s@%s%s%s:%u", h->ssh.user ? h->ssh.user : local_user(), v6 ? "[" : "",
	         host, v6 ? "]" : "", h->ssh.port ? h->ssh.port : 22);
}

void asp_ssh_route_free(asp_ssh_route *r)
{
	if (!r)
		return;
	asp_arena_free(r->a);
	free(r);
}
