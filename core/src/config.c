/*
 * .asp.json: discovery, the view transports read, and the few rules a schema cannot say
 * (docs/design.md, ".asp.json").
 *
 * The rules live in one place, spec/asp.schema.json (and spec/asp.v0.schema.json), which
 * asp-sdkgen compiles into the tables config_schema.c walks. The view is filled from a
 * table of the schema's leaf properties, checked against the schema on first use, so a
 * rename in the schema fails every load rather than losing a value; a key the view does
 * not read is still validated, and reaches code through asp_config_json.
 */
#include "asp/config.h"

#include "asp/arena.h"
#include "config_copy.h"
#include "config_schema.h"
#include "ssh_config_file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Generated from spec/asp.schema.json by gen_embed, for asp_config_schema(). */
extern const char asp_config_schema_json[];

#define SECRET_MAX_BYTES (64 * 1024)

struct asp_config {
	asp_arena *arena;
	asp_config_view view;
	const char *json; /* the validated document, as version 1 */
};

static asp_status out_of_memory(asp_error *err)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
}

/* How each leaf property of the schema lands in asp_config_view. */
enum field_kind {
	F_SKIP,       /* checked by the schema, not exposed (version) */
	F_TRANSPORT,  /* asp_transport_kind */
	F_STRING,     /* const char *, as written */
	F_LOCAL_PATH, /* const char *, made absolute */
	F_UINT,       /* unsigned */
	F_U64,        /* uint64_t */
	F_WEBSOCKET,  /* asp_http_websocket: true, false, or absent (left 0) */
	F_HOSTKEY,    /* asp_hostkey_check */
	F_ENV,        /* env, env_count */
	F_ARGV,       /* stdio.argv, stdio.argc */
	F_PROXY,      /* ssh.proxy_command, proxy_command_argc: strings as written */
	F_JUMP,       /* ssh.jump, jump_count (after the keys a hop inherits) */
	F_HEADERS,    /* http.headers, header_count */
};

#define AT(member) offsetof(asp_config_view, member)

static const struct field {
	const char *path;
	enum field_kind kind;
	size_t offset;
} fields[] = {
    {"version", F_SKIP, 0},
    {"transport", F_TRANSPORT, AT(transport)},
    {"cwd", F_STRING, AT(cwd)},
    {"env", F_ENV, 0},
    {"timeout_ms", F_U64, AT(timeout_ms)},
    {"call_timeout_ms", F_UINT, AT(call_timeout_ms)},
    {"ssh.host", F_STRING, AT(ssh.host)},
    {"ssh.port", F_UINT, AT(ssh.port)},
    {"ssh.user", F_STRING, AT(ssh.user)},
    {"ssh.identity_file", F_LOCAL_PATH, AT(ssh.identity_file)},
    {"ssh.identity_env", F_STRING, AT(ssh.identity_env)},
    {"ssh.password_env", F_STRING, AT(ssh.password_env)},
    {"ssh.known_hosts", F_LOCAL_PATH, AT(ssh.known_hosts)},
    {"ssh.host_key_sha256", F_STRING, AT(ssh.host_key_sha256)},
    {"ssh.host_key", F_STRING, AT(ssh.host_key)},
    {"ssh.strict_host_key_checking", F_HOSTKEY, AT(ssh.strict_host_key_checking)},
    {"ssh.connect_timeout_ms", F_UINT, AT(ssh.connect_timeout_ms)},
    {"ssh.agent", F_STRING, AT(ssh.agent)},
    {"ssh.proxy_command", F_PROXY, 0},
    {"ssh.config_host", F_STRING, AT(ssh.config_host)},
    {"ssh.config_file", F_LOCAL_PATH, AT(ssh.config_file)},
    {"ssh.jump", F_JUMP, 0},
    {"stdio.command", F_ARGV, 0},
    {"http.url", F_STRING, AT(http.url)},
    {"http.token_env", F_STRING, AT(http.token_env)},
    {"http.token_file", F_LOCAL_PATH, AT(http.token_file)},
    {"http.ca_file", F_LOCAL_PATH, AT(http.ca_file)},
    {"http.websocket", F_WEBSOCKET, AT(http.websocket)},
    {"http.headers", F_HEADERS, 0},
    {"workspace.local", F_LOCAL_PATH, AT(workspace.local)},
    {"workspace.sandbox", F_STRING, AT(workspace.sandbox)},
};

static const struct {
	const char *name;
	asp_transport_kind kind;
} transports[] = {
    {"stdio", ASP_TRANSPORT_STDIO},
    {"ssh", ASP_TRANSPORT_SSH},
    {"http", ASP_TRANSPORT_HTTP},
};

/* The view reads only what the schema defines, and knows every transport it names. */
static asp_status check_fields(asp_error *err)
{
	for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
		if (!asp_cs_walk(&asp_cs_v1, fields[i].path))
			return asp_error_set(
			    err, ASP_E_INTERNAL, NULL,
			    "asp_config_view reads %s, which spec/asp.schema.json does "
			    "not define (fields[] in core/src/config.c)",
			    fields[i].path);
	}
	const asp_cs_node *t = asp_cs_walk(&asp_cs_v1, "transport");
	for (size_t i = 0; i < t->nvalues; i++) {
		const char *name = t->values[i].s;
		bool known = false;
		for (size_t j = 0; name && j < sizeof transports / sizeof *transports; j++)
			known = known || strcmp(name, transports[j].name) == 0;
		if (!known)
			return asp_error_set(
			    err, ASP_E_INTERNAL, NULL,
			    "spec/asp.schema.json names a transport libasp does not "
			    "know: %s",
			    name ? name : "(not a string)");
	}
	return ASP_OK;
}

const char *asp_config_schema(void)
{
	return asp_config_schema_json;
}

/* ---- paths -------------------------------------------------------------------------------- */

/* `dir` + "/" + `name` into `out`; false when it does not fit. A leading "./" is dropped. */
static bool join(char *out, size_t cap, const char *dir, const char *name)
{
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (strcmp(name, ".") == 0)
		name = "";
	size_t dl = strlen(dir);
	bool slash = dl > 0 && dir[dl - 1] == '/';
	int n = *name ? snprintf(out, cap, "%s%s%s", dir, slash ? "" : "/", name)
	              : snprintf(out, cap, "%s", dir);
	return n >= 0 && (size_t)n < cap;
}

static asp_status absolute(const char *path, char *out, size_t cap, asp_error *err)
{
	char cwd[PATH_MAX];
	if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
		return asp_error_errno(err, errno, NULL, "cannot get the working directory");
	if (path[0] == '/' ? snprintf(out, cap, "%s", path) >= (int)cap
	                   : !join(out, cap, cwd, path))
		return asp_error_set(err, ASP_E_TOO_LARGE, path, "path too long: %s", path);
	return ASP_OK;
}

static const char *home_dir(char *buf, size_t cap)
{
	const char *home = getenv("HOME");
	if (home && *home)
		return home;
	struct passwd pw, *res = NULL;
	if (getpwuid_r(getuid(), &pw, buf, cap, &res) == 0 && res && res->pw_dir && *res->pw_dir)
		return res->pw_dir;
	return NULL;
}

/* A local path from the config made absolute, in the arena; fails at the value on v. */
static asp_status local_path(asp_cs_ctx *v, asp_arena *a, const char *base, const char *p,
                             const char **out)
{
	char buf[PATH_MAX], pwbuf[4096];
	bool ok;
	if (p[0] == '~') {
		if (p[1] != '\0' && p[1] != '/')
			return asp_cs_fail(v, ASP_CS_AT_VALUE,
			                   "only ~/ is expanded, not ~user/; write the full path");
		const char *home = home_dir(pwbuf, sizeof pwbuf);
		if (!home)
			return asp_cs_fail(v, ASP_CS_AT_VALUE, "cannot expand ~: $HOME is not set");
		ok = join(buf, sizeof buf, home, p[1] ? p + 2 : "");
	} else if (p[0] == '/') {
		ok = snprintf(buf, sizeof buf, "%s", p) < (int)sizeof buf;
	} else {
		ok = join(buf, sizeof buf, base, p);
	}
	if (!ok)
		return asp_cs_fail(v, ASP_CS_AT_VALUE, "path longer than %d bytes", PATH_MAX - 1);
	*out = asp_arena_strndup(a, buf, strlen(buf));
	return *out ? ASP_OK : out_of_memory(v->err);
}

/* ---- the view ----------------------------------------------------------------------------- */

static asp_status view_bug(asp_error *err, const char *path)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL,
	                     "spec/asp.schema.json lets %s hold a value asp_config_view cannot "
	                     "represent (fields[] in core/src/config.c)",
	                     path);
}

static const char *copy(asp_arena *a, json_t *s)
{
	return asp_arena_strndup(a, json_string_value(s), json_string_length(s));
}

/* Points v's path at a dotted field path, for messages about its value. */
static void set_path(asp_cs_ctx *v, const char *dotted, char segs[][64])
{
	v->depth = 0;
	while (*dotted && v->depth < ASP_CS_MAX_STEPS) {
		size_t n = strcspn(dotted, ".");
		if (n >= 64)
			n = 63;
		memcpy(segs[v->depth], dotted, n);
		segs[v->depth][n] = '\0';
		asp_cs_push_key(v, segs[v->depth]);
		dotted += strcspn(dotted, ".");
		dotted += *dotted == '.';
	}
}

static asp_status build_argv(asp_cs_ctx *v, asp_config *cfg, json_t *arr, const char *base)
{
	size_t n = json_array_size(arr);
	const char **argv = asp_arena_alloc(cfg->arena, (n + 1) * sizeof *argv);
	if (!argv)
		return out_of_memory(v->err);
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_array_get(arr, i);
		if (!json_is_string(s))
			return view_bug(v->err, "stdio.command");
		const char *str = json_string_value(s);
		/* A program path (not a name looked up in PATH) is local: resolve it. */
		if (i == 0 && (strchr(str, '/') || str[0] == '~')) {
			asp_cs_push_index(v, 0);
			asp_status st = local_path(v, cfg->arena, base, str, &argv[0]);
			asp_cs_pop(v);
			if (st)
				return st;
		} else if (!(argv[i] = copy(cfg->arena, s))) {
			return out_of_memory(v->err);
		}
	}
	cfg->view.stdio.argv = argv;
	cfg->view.stdio.argc = n;
	return ASP_OK;
}

static asp_status build_env(asp_cs_ctx *v, asp_config *cfg, json_t *obj)
{
	size_t n = json_object_size(obj), i = 0;
	asp_config_env *env = asp_arena_alloc(cfg->arena, (n ? n : 1) * sizeof *env);
	if (!env)
		return out_of_memory(v->err);
	for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
		const char *key = json_object_iter_key(it);
		json_t *val = json_object_iter_value(it);
		if (!json_is_string(val))
			return view_bug(v->err, "env");
		env[i].key = asp_arena_strndup(cfg->arena, key, strlen(key));
		env[i].value = copy(cfg->arena, val);
		if (!env[i].key || !env[i].value)
			return out_of_memory(v->err);
		i++;
	}
	cfg->view.env = env;
	cfg->view.env_count = n;
	return ASP_OK;
}

static asp_status store_value(asp_cs_ctx *v, enum field_kind k, const char *path, json_t *val,
                              void *dst, asp_config *cfg, const char *base);

/* An array of strings as written, NULL after the last. */
static asp_status build_strings(asp_cs_ctx *v, asp_config *cfg, json_t *arr,
                                const char *const **out, size_t *count)
{
	size_t n = json_array_size(arr);
	const char **list = asp_arena_alloc(cfg->arena, (n + 1) * sizeof *list);
	if (!list)
		return out_of_memory(v->err);
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_array_get(arr, i);
		if (!json_is_string(s))
			return view_bug(v->err, "an array of strings");
		if (!(list[i] = copy(cfg->arena, s)))
			return out_of_memory(v->err);
	}
	list[n] = NULL;
	*out = list;
	*count = n;
	return ASP_OK;
}

static asp_status build_headers(asp_cs_ctx *v, asp_config *cfg, json_t *obj)
{
	size_t n = json_object_size(obj), i = 0;
	asp_config_header *h = asp_arena_alloc(cfg->arena, (n ? n : 1) * sizeof *h);
	if (!h)
		return out_of_memory(v->err);
	for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it), i++) {
		const char *key = json_object_iter_key(it);
		json_t *val = json_object_iter_value(it), *env = json_object_get(val, "env");
		h[i] = (asp_config_header){.name = asp_arena_strndup(cfg->arena, key, strlen(key))};
		if (json_is_string(val))
			h[i].value = copy(cfg->arena, val);
		else if (json_is_string(env))
			h[i].env = copy(cfg->arena, env);
		else
			return view_bug(v->err, "http.headers");
		if (!h[i].name || (!h[i].value && !h[i].env))
			return out_of_memory(v->err);
	}
	cfg->view.http.headers = h;
	cfg->view.http.header_count = n;
	return ASP_OK;
}

/* The keys of a hop written as an object, where they land in its asp_config_ssh. */
#define HOP(member) offsetof(asp_config_ssh, member)
static const struct field hop_fields[] = {
    {"host", F_STRING, HOP(host)},
    {"port", F_UINT, HOP(port)},
    {"user", F_STRING, HOP(user)},
    {"identity_file", F_LOCAL_PATH, HOP(identity_file)},
    {"identity_env", F_STRING, HOP(identity_env)},
    {"password_env", F_STRING, HOP(password_env)},
    {"known_hosts", F_LOCAL_PATH, HOP(known_hosts)},
    {"host_key_sha256", F_STRING, HOP(host_key_sha256)},
    {"host_key", F_STRING, HOP(host_key)},
    {"strict_host_key_checking", F_HOSTKEY, HOP(strict_host_key_checking)},
    {"connect_timeout_ms", F_UINT, HOP(connect_timeout_ms)},
};
#undef HOP

/* "[user@]host[:port]": config_host, user and port (ssh_hop_parse). */
static asp_status parse_hop_string(asp_cs_ctx *v, asp_config *cfg, const char *z,
                                   asp_config_ssh *hop)
{
	const char *why = NULL;
	if (ssh_hop_parse(z, cfg->arena, &hop->user, &hop->config_host, &hop->port, &why) != 0)
		return asp_cs_fail(v, ASP_CS_AT_VALUE, "%s in \"%s\"", why, z);
	return ASP_OK;
}

/* A hop takes what it lacks of these from the ssh section. */
static void hop_inherit(asp_config_ssh *hop, const asp_config_ssh *ssh, json_t *obj)
{
	if (!json_object_get(obj, "identity_file") && !json_object_get(obj, "identity_env")) {
		hop->identity_file = ssh->identity_file;
		hop->identity_env = ssh->identity_env;
	}
	if (!json_object_get(obj, "known_hosts"))
		hop->known_hosts = ssh->known_hosts;
	if (!json_object_get(obj, "strict_host_key_checking"))
		hop->strict_host_key_checking = ssh->strict_host_key_checking;
	if (!json_object_get(obj, "connect_timeout_ms"))
		hop->connect_timeout_ms = ssh->connect_timeout_ms;
}

static asp_status build_jump(asp_cs_ctx *v, asp_config *cfg, json_t *arr, const char *base)
{
	size_t n = json_array_size(arr);
	asp_config_ssh *hops = asp_arena_alloc(cfg->arena, (n ? n : 1) * sizeof *hops);
	if (!hops)
		return out_of_memory(v->err);
	asp_status st = ASP_OK;
	for (size_t i = 0; st == ASP_OK && i < n; i++) {
		json_t *e = json_array_get(arr, i);
		hops[i] = (asp_config_ssh){0};
		asp_cs_push_index(v, i);
		if (json_is_string(e)) {
			st = parse_hop_string(v, cfg, json_string_value(e), &hops[i]);
		} else if (json_is_object(e)) {
			for (size_t k = 0;
			     st == ASP_OK && k < sizeof hop_fields / sizeof *hop_fields; k++) {
				json_t *val = json_object_get(e, hop_fields[k].path);
				if (!val)
					continue;
				asp_cs_push_key(v, hop_fields[k].path);
				st =
				    store_value(v, hop_fields[k].kind, "ssh.jump", val,
				                (char *)&hops[i] + hop_fields[k].offset, cfg, base);
				asp_cs_pop(v);
			}
		} else {
			st = view_bug(v->err, "ssh.jump");
		}
		hop_inherit(&hops[i], &cfg->view.ssh, json_is_object(e) ? e : NULL);
		asp_cs_pop(v);
	}
	if (st != ASP_OK)
		return st;
	cfg->view.ssh.jump = hops;
	cfg->view.ssh.jump_count = n;
	return ASP_OK;
}

/* A default from the schema as JSON; NULL when there is none or no memory. */
static json_t *default_value(const char *path)
{
	const asp_cs_node *n = asp_cs_walk(&asp_cs_v1, path);
	const asp_cs_value *d = n ? n->dflt : NULL;
	if (!d)
		return NULL;
	switch (d->type) {
	case ASP_CS_BOOLEAN: return json_boolean(d->n);
	case ASP_CS_INTEGER: return json_integer(d->n);
	case ASP_CS_STRING: return json_string(d->s);
	default: return json_null();
	}
}

static json_t *walk(json_t *node, const char *dotted)
{
	while (node && *dotted) {
		char seg[64];
		size_t n = strcspn(dotted, ".");
		if (n >= sizeof seg)
			return NULL;
		memcpy(seg, dotted, n);
		seg[n] = '\0';
		node = json_object_get(node, seg);
		dotted += n + (dotted[n] == '.');
	}
	return node;
}

static asp_status store_field(asp_cs_ctx *v, const struct field *f, json_t *val, asp_config *cfg,
                              const char *base);

/* One field: the value from the document, else the schema's default, into the view. */
static asp_status build_field(asp_cs_ctx *v, const struct field *f, json_t *doc, asp_config *cfg,
                              const char *base)
{
	json_t *val = walk(doc, f->path), *dflt = NULL;
	if (!val)
		val = dflt = default_value(f->path);
	asp_status st = ASP_OK;
	if (val && !json_is_null(val) && f->kind != F_SKIP)
		st = store_field(v, f, val, cfg, base);
	json_decref(dflt);
	return st;
}

/* One value of kind `k` into `dst`; `path` names the key for view_bug. */
static asp_status store_value(asp_cs_ctx *v, enum field_kind k, const char *path, json_t *val,
                              void *dst, asp_config *cfg, const char *base)
{
	json_int_t n = json_integer_value(val);
	switch (k) {
	case F_SKIP: return ASP_OK;
	case F_TRANSPORT:
		for (size_t i = 0; i < sizeof transports / sizeof *transports; i++) {
			if (json_is_string(val) &&
			    strcmp(json_string_value(val), transports[i].name) == 0) {
				*(asp_transport_kind *)dst = transports[i].kind;
				return ASP_OK;
			}
		}
		return view_bug(v->err, path);
	case F_STRING:
		if (!json_is_string(val))
			return view_bug(v->err, path);
		*(const char **)dst = copy(cfg->arena, val);
		return *(const char **)dst ? ASP_OK : out_of_memory(v->err);
	case F_LOCAL_PATH:
		if (!json_is_string(val))
			return view_bug(v->err, path);
		return local_path(v, cfg->arena, base, json_string_value(val), (const char **)dst);
	case F_UINT:
		if (!json_is_integer(val) || n < 0 || (unsigned long long)n > UINT_MAX)
			return view_bug(v->err, path);
		*(unsigned *)dst = (unsigned)n;
		return ASP_OK;
	case F_U64:
		if (!json_is_integer(val) || n < 0)
			return view_bug(v->err, path);
		*(uint64_t *)dst = (uint64_t)n;
		return ASP_OK;
	case F_WEBSOCKET:
		if (!json_is_boolean(val))
			return view_bug(v->err, path);
		*(asp_http_websocket *)dst =
		    json_is_true(val) ? ASP_HTTP_WS_ONLY : ASP_HTTP_WS_NEVER;
		return ASP_OK;
	case F_HOSTKEY:
		if (json_is_boolean(val))
			*(asp_hostkey_check *)dst =
			    json_is_true(val) ? ASP_HOSTKEY_STRICT : ASP_HOSTKEY_ANY;
		else if (json_is_string(val) && strcmp(json_string_value(val), "accept-new") == 0)
			*(asp_hostkey_check *)dst = ASP_HOSTKEY_ACCEPT_NEW;
		else
			return view_bug(v->err, path);
		return ASP_OK;
	case F_ENV: return json_is_object(val) ? build_env(v, cfg, val) : view_bug(v->err, path);
	case F_ARGV:
		return json_is_array(val) ? build_argv(v, cfg, val, base) : view_bug(v->err, path);
	case F_PROXY:
		return json_is_array(val) ? build_strings(v, cfg, val, &cfg->view.ssh.proxy_command,
		                                          &cfg->view.ssh.proxy_command_argc)
		                          : view_bug(v->err, path);
	case F_JUMP:
		return json_is_array(val) ? build_jump(v, cfg, val, base) : view_bug(v->err, path);
	case F_HEADERS:
		return json_is_object(val) ? build_headers(v, cfg, val) : view_bug(v->err, path);
	}
	return view_bug(v->err, path);
}

static asp_status store_field(asp_cs_ctx *v, const struct field *f, json_t *val, asp_config *cfg,
                              const char *base)
{
	char segs[ASP_CS_MAX_STEPS][64];
	set_path(v, f->path, segs);
	return store_value(v, f->kind, f->path, val, (char *)&cfg->view + f->offset, cfg, base);
}

/* ---- public entry points ------------------------------------------------------------------ */

/* A jansson syntax error as "FILE:LINE:COL: invalid JSON: ...", in our words where clearer. */
static asp_status syntax_error(const char *file, const char *file_path, const json_error_t *je,
                               asp_error *err)
{
	static const struct {
		const char *jansson, *ours;
	} words[] = {
	    {"\\u0000 is not allowed without JSON_ALLOW_NUL", "strings may not contain \\u0000"},
	    {"NUL byte in object key not supported", "keys may not contain \\u0000"},
	};
	const char *text = je->text, *rest = "";
	for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
		size_t n = strlen(words[i].jansson);
		if (strncmp(text, words[i].jansson, n) == 0) {
			rest = text + n;
			text = words[i].ours;
			break;
		}
	}
	return asp_error_set(err, ASP_E_INVALID_ARGUMENT, file_path, "%s:%d:%d: invalid JSON: %s%s",
	                     file, je->line > 0 ? je->line : 1, je->column > 0 ? je->column : 1,
	                     text, rest);
}

/* ---- version 0 ------------------------------------------------------------------------- */

/*
 * A v0 file: "version": "0". Also "version": 0 beside v0's "connection", so that the v0
 * schema's answer names the version (expected "0") rather than calling the v0 keys
 * unknown ones of version 1.
 */
static bool is_v0(json_t *doc)
{
	json_t *ver = json_object_get(doc, "version");
	const char *v = json_string_value(ver);
	if (v)
		return strcmp(v, "0") == 0;
	return json_is_integer(ver) && json_integer_value(ver) == 0 &&
	       json_object_get(doc, "connection");
}

static int set_copy(json_t *dst, const char *key, json_t *src)
{
	return src ? json_object_set(dst, key, src) : 0;
}

/*
 * The version 1 document a valid v0 document means (docs/design.md, ".asp.json"): workspace -> cwd,
 * identity.file -> identity_file, identity.env -> identity_env, host_key -> host_key_sha256
 * or host_key, and without host_key trust on first use (accept-new).
 */
static json_t *v0_to_v1(json_t *v0)
{
	json_t *conn = json_object_get(v0, "connection");
	json_t *id = json_object_get(conn, "identity");
	json_t *hk = json_object_get(conn, "host_key");
	json_t *v1 = json_object(), *ssh = json_object();
	if (!v1 || !ssh)
		goto fail;
	if (json_object_set_new(v1, "version", json_integer(1)) ||
	    json_object_set_new(v1, "transport", json_string("ssh")) ||
	    set_copy(v1, "cwd", json_object_get(v0, "workspace")) ||
	    set_copy(ssh, "host", json_object_get(conn, "host")) ||
	    set_copy(ssh, "port", json_object_get(conn, "port")) ||
	    set_copy(ssh, "user", json_object_get(conn, "user")) ||
	    set_copy(ssh, "identity_file", json_object_get(id, "file")) ||
	    set_copy(ssh, "identity_env", json_object_get(id, "env")))
		goto fail;
	if (!hk) {
		if (json_object_set_new(ssh, "strict_host_key_checking", json_string("accept-new")))
			goto fail;
	} else if (json_object_set(ssh,
	                           strncmp(json_string_value(hk), "SHA256:", 7) == 0
	                               ? "host_key_sha256"
	                               : "host_key",
	                           hk)) {
		goto fail;
	}
	if (json_object_set(v1, "ssh", ssh))
		goto fail;
	json_decref(ssh);
	return v1;
fail:
	json_decref(ssh);
	json_decref(v1);
	return NULL;
}

/* Validates a v0 document (messages point into its text) and replaces it by its v1 form. */
static asp_status map_v0(asp_cs_ctx *v, json_t **doc)
{
	asp_status st = asp_cs_validate(v, &asp_cs_v0, *doc);
	if (st != ASP_OK)
		return st;
	json_t *v1 = v0_to_v1(*doc);
	if (!v1)
		return out_of_memory(v->err);
	json_decref(*doc);
	*doc = v1;
	return ASP_OK;
}

asp_status asp_config_v0_to_v1(const char *text, size_t len, const char *filename, char **out,
                               asp_error *err)
{
	*out = NULL;
	asp_config *cfg;
	/* Parsing checks it whole, the v1 mapping included; then the mapping is redone as text. */
	asp_status st = asp_config_parse(text, len, filename, &cfg, err);
	if (st != ASP_OK)
		return st;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *v1 = doc && is_v0(doc) ? v0_to_v1(doc) : NULL;
	json_t *ssh = json_object_get(v1, "ssh");
	/* The new file may live elsewhere: the key file keeps the place it had. */
	const char *key = cfg->view.ssh.identity_file;
	if (!doc || !is_v0(doc))
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, cfg->view.path,
		                   "%s: not a version 0 file (\"version\": \"0\")",
		                   cfg->view.path ? cfg->view.path : "<memory>");
	else if (!v1 || (key && json_object_set_new(ssh, "identity_file", json_string(key))) ||
	         !(*out = json_dumps(v1, JSON_INDENT(2) | JSON_PRESERVE_ORDER)))
		st = out_of_memory(err);
	json_decref(v1);
	json_decref(doc);
	asp_config_free(cfg);
	return st;
}

/*
 * Moves what the parse left in a 4 KiB arena into one of its size: a harness may keep a
 * config per sandbox for as long as it runs. Out of memory: it stays where it is.
 */
static void compact(asp_config *cfg)
{
	size_t jl = strlen(cfg->json);
	asp_config_view v;
	asp_arena *a = asp_config_view_dup(&cfg->view, &v, jl + 1);
	char *json = a ? asp_arena_strndup(a, cfg->json, jl) : NULL;
	if (!json) {
		asp_arena_free(a);
		return;
	}
	asp_arena_free(cfg->arena);
	cfg->arena = a;
	cfg->view = v;
	cfg->json = json;
}

asp_status asp_config_parse(const char *text, size_t len, const char *filename, asp_config **out,
                            asp_error *err)
{
	*out = NULL;
	char file[PATH_MAX] = "<memory>", base[PATH_MAX];
	asp_status st;
	if (filename) {
		if ((st = absolute(filename, file, sizeof file, err)) != ASP_OK)
			return st;
		memcpy(base, file, sizeof base);
		char *slash = strrchr(base, '/');
		slash[slash == base] = '\0'; /* "/x.json" keeps "/" */
	} else if (!getcwd(base, sizeof base)) {
		return asp_error_errno(err, errno, NULL, "cannot get the working directory");
	}
	if (len > ASP_CONFIG_MAX_BYTES)
		return asp_error_set(err, ASP_E_TOO_LARGE, filename ? file : NULL,
		                     "%s: %zu bytes, more than a config may hold (%d); is it the "
		                     "right file?",
		                     file, len, ASP_CONFIG_MAX_BYTES);
	json_t *doc = NULL;
	if ((st = check_fields(err)) != ASP_OK)
		return st;
	json_error_t je;
	/* No JSON_ALLOW_NUL: a \u0000 would cut a string short in C, so it is refused. */
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!doc)
		return syntax_error(file, filename ? file : NULL, &je, err);
	asp_cs_ctx v = {.text = text,
	                .len = len,
	                .file = file,
	                .file_path = filename ? file : NULL,
	                .err = err};
	asp_config *cfg = NULL;
	st = is_v0(doc) ? map_v0(&v, &doc) : ASP_OK;
	if (st == ASP_OK)
		st = asp_cs_validate(&v, &asp_cs_v1, doc);
	if (st == ASP_OK) {
		cfg = calloc(1, sizeof *cfg);
		if (!cfg || !(cfg->arena = asp_arena_new()))
			st = out_of_memory(err);
	}
	if (st == ASP_OK && filename &&
	    !(cfg->view.path = asp_arena_strndup(cfg->arena, file, strlen(file))))
		st = out_of_memory(err);
	for (size_t i = 0; st == ASP_OK && i < sizeof fields / sizeof *fields; i++)
		st = build_field(&v, &fields[i], doc, cfg, base);
	if (st == ASP_OK) {
		char *d = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (!d || !(cfg->json = asp_arena_strndup(cfg->arena, d, strlen(d))))
			st = out_of_memory(err);
		free(d);
	}
	json_decref(doc);
	if (st != ASP_OK) {
		asp_config_free(cfg);
		return st;
	}
	compact(cfg);
	*out = cfg;
	return ASP_OK;
}

void asp_config_free(asp_config *cfg)
{
	if (!cfg)
		return;
	asp_arena_free(cfg->arena);
	free(cfg);
}

const asp_config_view *asp_config_get(const asp_config *cfg)
{
	return cfg ? &cfg->view : NULL;
}

const char *asp_config_json(const asp_config *cfg)
{
	return cfg ? cfg->json : NULL;
}

/* The whole file, NUL-terminated, in a malloc'd *out; too_large past `max` bytes. */
static asp_status read_file(const char *path, size_t max, const char *what, char **out,
                            size_t *out_len, asp_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return asp_error_errno(err, errno, path, "cannot open %s %s", what, path);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap + 1);
	asp_status st = buf ? ASP_OK : out_of_memory(err);
	while (st == ASP_OK) {
		if (len == cap) {
			if (cap > max)
				break; /* len > max: too large, said below */
			char *bigger = realloc(buf, cap * 2 + 1);
			if (!bigger) {
				st = out_of_memory(err);
				break;
			}
			buf = bigger;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			st = asp_error_errno(err, errno, path, "cannot read %s %s", what, path);
		else if (n == 0)
			break;
		else
			len += (size_t)n;
	}
	close(fd);
	if (st == ASP_OK && len > max)
		st = asp_error_set(err, ASP_E_TOO_LARGE, path,
		                   "%s %s is larger than %zu bytes; is it the right file?", what,
		                   path, max);
	if (st != ASP_OK) {
		if (buf)
			explicit_bzero(buf, cap + 1); /* it may be a secret */
		free(buf);
		return st;
	}
	buf[len] = '\0';
	*out = buf;
	*out_len = len;
	return ASP_OK;
}

asp_status asp_config_find(const char *start_dir, char *out, size_t cap, asp_error *err)
{
	const char *env = getenv("ASP_CONFIG");
	struct stat sb;
	if (env && *env) {
		if (stat(env, &sb) != 0) {
			if (errno == ENOENT)
				return asp_error_set(
				    err, ASP_E_NOT_FOUND, env,
				    "ASP_CONFIG names %s, which does not exist; point it at "
				    "a .asp.json or unset it",
				    env);
			return asp_error_errno(err, errno, env, "cannot use ASP_CONFIG=%s", env);
		}
		if (S_ISDIR(sb.st_mode))
			return asp_error_set(
			    err, ASP_E_IS_A_DIRECTORY, env,
			    "ASP_CONFIG names %s, a directory; point it at a .asp.json "
			    "file",
			    env);
		return absolute(env, out, cap, err);
	}
	char start[PATH_MAX], dir[PATH_MAX], cand[PATH_MAX];
	asp_status st = absolute(start_dir ? start_dir : ".", start, sizeof start, err);
	if (st)
		return st;
	size_t n = strlen(start);
	while (n > 1 && start[n - 1] == '/')
		start[--n] = '\0';
	memcpy(dir, start, n + 1);
	for (;;) {
		if (!join(cand, sizeof cand, dir, ".asp.json"))
			return asp_error_set(err, ASP_E_TOO_LARGE, dir, "path too long: %s", dir);
		if (stat(cand, &sb) == 0) {
			/* A directory of that name is not a config: keep looking. */
			if (!S_ISDIR(sb.st_mode)) {
				if (snprintf(out, cap, "%s", cand) >= (int)cap)
					return asp_error_set(err, ASP_E_TOO_LARGE, cand,
					                     "%s does not fit in %zu bytes", cand,
					                     cap);
				return ASP_OK;
			}
		} else if (errno != ENOENT && errno != ENOTDIR) {
			/* Only "not there" moves on: never skip a config we could not look at. */
			return asp_error_errno(err, errno, cand, "cannot look for %s", cand);
		}
		if (strcmp(dir, "/") == 0)
			break;
		char *slash = strrchr(dir, '/');
		slash[slash == dir] = '\0'; /* "/a" becomes "/" */
	}
	return asp_error_set(err, ASP_E_NOT_FOUND, start,
	                     "no .asp.json in %s or any parent directory; create one with `asp "
	                     "init`, or set ASP_CONFIG to its path",
	                     start);
}

asp_status asp_config_load(const char *path, asp_config **out, asp_error *err)
{
	*out = NULL;
	char found[PATH_MAX];
	asp_status st;
	if (!path) {
		if ((st = asp_config_find(NULL, found, sizeof found, err)) != ASP_OK)
			return st;
		path = found;
	}
	char *text;
	size_t len;
	if ((st = read_file(path, ASP_CONFIG_MAX_BYTES, "config", &text, &len, err)) != ASP_OK)
		return st;
	st = asp_config_parse(text, len, path, out, err);
	free(text);
	return st;
}

asp_status asp_config_secret(const char *env_name, const char *file_path, char **out,
                             asp_error *err)
{
	*out = NULL;
	const char *value = env_name ? getenv(env_name) : NULL;
	char *s;
	size_t len;
	asp_status st;
	if (value) {
		len = strlen(value);
		if (!(s = strdup(value)))
			return out_of_memory(err);
	} else if (file_path) {
		if ((st = read_file(file_path, SECRET_MAX_BYTES, "secret file", &s, &len, err)))
			return st;
		if (memchr(s, '\0', len)) {
			explicit_bzero(s, len);
			free(s);
			return asp_error_set(err, ASP_E_INVALID_ARGUMENT, file_path,
			                     "secret file %s holds a NUL byte", file_path);
		}
	} else if (env_name) {
		return asp_error_set(
		    err, ASP_E_NOT_FOUND, NULL,
		    "environment variable %s is not set; export it with the secret "
		    "or name a file in the config's *_file key",
		    env_name);
	} else {
		return ASP_OK;
	}
	if (len > 0 && s[len - 1] == '\n')
		s[--len] = '\0';
	if (len > 0 && s[len - 1] == '\r')
		s[--len] = '\0';
	if (len == 0) {
		free(s);
		return value ? asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                             "environment variable %s is empty", env_name)
		             : asp_error_set(err, ASP_E_INVALID_ARGUMENT, file_path,
		                             "secret file %s is empty", file_path);
	}
	*out = s;
	return ASP_OK;
}
