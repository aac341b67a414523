/*
 * asp exec-server's fs methods methods (how Codex reads AGENTS.md, finds the git root and
 * applies patches), each on the ASP ops: getMetadata on stat, readFile on read,
 * writeFile on write, readDirectory on list, createDirectory on mkdir, remove on remove;
 * copy and canonicalize, which have no op, on exec (cp, realpath). Paths come and go
 * through the workspace mapping (exec_server.c).
 */
#include "exec_server.h"

#include <stdlib.h>
#include <string.h>

/* Larger files are refused rather than held in memory (and base64 on the wire). */
#define XS_FILE_MAX (64u << 20)

static bool opt_bool(json_t *params, const char *key, bool dflt)
{
	json_t *v = json_object_get(params, key);
	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static bool get_metadata(xs_session *s, json_t *id, const char *path, asp_arena *a)
{
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	asp_stat_result r;
	asp_error err;
	if (asp_stat(s->c, &p, &r, a, &err) != ASP_OK)
		return xs_error_asp(s, id, &err, "fs/getMetadata");
	bool link = !strcmp(r.type, "symlink");
	if (link) { /* the target's type, as Codex's own server reports it */
		p.follow = true;
		asp_stat_result t;
		if (asp_stat(s->c, &p, &t, a, &err) == ASP_OK)
			r.type = t.type, r.size = t.size;
	}
	return xs_reply(s, id,
	                json_pack("{s:b, s:b, s:b, s:I, s:i, s:I}", "isDirectory",
	                          !strcmp(r.type, "dir"), "isFile", !strcmp(r.type, "file"),
	                          "isSymlink", link, "size", (json_int_t)r.size, "createdAtMs", 0,
	                          "modifiedAtMs", (json_int_t)(r.mtime_ns / 1000000)));
}

static bool read_file(xs_session *s, json_t *id, const char *path, asp_arena *a)
{
	uint8_t *data = NULL;
	size_t len = 0;
	asp_error err;
	for (;;) {
		asp_read_params p;
		asp_read_params_init(&p);
		p.path = path;
		p.offset = len;
		asp_read_result r;
		if (asp_read(s->c, &p, &r, a, &err) != ASP_OK) {
			free(data);
			if (err.code == ASP_E_IS_A_DIRECTORY)
				return xs_error(s, id, XS_INVALID_REQUEST,
				                "path `%s` is not a file", path);
			return xs_error_asp(s, id, &err, "fs/readFile");
		}
		if (r.size > XS_FILE_MAX || len + r.data.len > XS_FILE_MAX) {
			free(data);
			return xs_error(
			    s, id, XS_INVALID_REQUEST,
			    "fs/readFile: %s is larger than asp exec-server reads whole "
			    "(%u bytes)",
			    path, XS_FILE_MAX);
		}
		uint8_t *grown = realloc(data, len + r.data.len + 1);
		if (!grown) {
			free(data);
			return xs_error(s, id, XS_INTERNAL, "out of memory");
		}
		data = grown;
		memcpy(data + len, r.data.data, r.data.len);
		len += r.data.len;
		if (r.eof || r.data.len == 0)
			break;
	}
	char *b64 = cli_b64_encode(data ? data : (const uint8_t *)"", len);
	free(data);
	if (!b64)
		return xs_error(s, id, XS_INTERNAL, "out of memory");
	json_t *r = json_object();
	json_object_set_new(r, "dataBase64", json_string(b64));
	free(b64);
	return xs_reply(s, id, r);
}

static bool write_file(xs_session *s, json_t *id, const char *path, json_t *params, asp_arena *a)
{
	json_t *v = json_object_get(params, "dataBase64");
	uint8_t *data = NULL;
	size_t len = 0;
	if (!json_is_string(v))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `dataBase64`");
	if (!cli_b64_decode(json_string_value(v), strlen(json_string_value(v)), &data, &len))
		return xs_error(s, id, XS_INVALID_PARAMS, "`dataBase64` is not base64");
	asp_write_params p;
	asp_write_params_init(&p);
	p.path = path;
	p.data.data = data;
	p.data.len = len;
	asp_write_result r;
	asp_error err;
	asp_status st = asp_write(s->c, &p, &r, a, &err);
	free(data);
	if (st != ASP_OK)
		return xs_error_asp(s, id, &err, "fs/writeFile");
	return xs_reply(s, id, NULL);
}

static bool read_directory(xs_session *s, json_t *id, const char *path, asp_arena *a)
{
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = path;
	asp_list_result r;
	asp_error err;
	if (asp_list(s->c, &p, &r, a, &err) != ASP_OK)
		return xs_error_asp(s, id, &err, "fs/readDirectory");
	json_t *entries = json_array();
	for (size_t i = 0; i < r.entries.count; i++) {
		const asp_list_entry *e = &r.entries.items[i];
		json_array_append_new(entries, json_pack("{s:s, s:b, s:b}", "fileName", e->name,
		                                         "isDirectory", !strcmp(e->type, "dir"),
		                                         "isFile", !strcmp(e->type, "file")));
	}
	return xs_reply(s, id, json_pack("{s:o}", "entries", entries));
}

static bool create_directory(xs_session *s, json_t *id, const char *path, json_t *params,
                             asp_arena *a)
{
	asp_mkdir_params p;
	asp_mkdir_params_init(&p);
	p.path = path;
	p.parents = opt_bool(params, "recursive", true);
	asp_mkdir_result r;
	asp_error err;
	if (asp_mkdir(s->c, &p, &r, a, &err) != ASP_OK)
		return xs_error_asp(s, id, &err, "fs/createDirectory");
	return xs_reply(s, id, NULL);
}

static bool remove_path(xs_session *s, json_t *id, const char *path, json_t *params, asp_arena *a)
{
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = path;
	p.recursive = opt_bool(params, "recursive", true);
	asp_remove_result r;
	asp_error err;
	if (asp_remove(s->c, &p, &r, a, &err) != ASP_OK &&
	    !(err.code == ASP_E_NOT_FOUND && opt_bool(params, "force", true)))
		return xs_error_asp(s, id, &err, "fs/remove");
	return xs_reply(s, id, NULL);
}

/* Runs argv in the sandbox; ASP_OK with exit 0, else `err` says why (stderr included). */
static asp_status run(xs_session *s, const char *const *argv, size_t argc, asp_exec_result *r,
                      asp_arena *a, asp_error *err)
{
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = argc;
	p.cwd = s->base;
	p.max_output = 65536;
	asp_status st = asp_exec(s->c, &p, r, a, err);
	if (st == ASP_OK && r->exit_code != 0)
		return asp_error_set(err, ASP_E_IO_ERROR, NULL, "%s exited %lld: %.*s", argv[0],
		                     (long long)r->exit_code, (int)r->stderr_data.len,
		                     (const char *)r->stderr_data.data);
	return st;
}

static bool copy_path(xs_session *s, json_t *id, json_t *params, asp_arena *a)
{
	if (!json_is_boolean(json_object_get(params, "recursive")))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `recursive`");
	char *src = xs_path_param(s, id, params, "sourcePath");
	char *dst = src ? xs_path_param(s, id, params, "destinationPath") : NULL;
	if (!dst) {
		free(src);
		return false;
	}
	bool recursive = opt_bool(params, "recursive", false);
	const char *argv[] = {"cp", recursive ? "-RP" : "-P", src, dst};
	asp_exec_result r;
	asp_error err;
	bool ok = run(s, argv, 4, &r, a, &err) == ASP_OK ? xs_reply(s, id, NULL)
	                                                 : xs_error_asp(s, id, &err, "fs/copy");
	free(src);
	free(dst);
	return ok;
}

static bool canonicalize(xs_session *s, json_t *id, const char *path, asp_arena *a)
{
	asp_stat_params sp;
	asp_stat_params_init(&sp);
	sp.path = path;
	asp_stat_result st;
	asp_error err;
	if (asp_stat(s->c, &sp, &st, a, &err) != ASP_OK)
		return xs_error_asp(s, id, &err, "fs/canonicalize");
	const char *argv[] = {"realpath", path};
	asp_exec_result r;
	if (run(s, argv, 2, &r, a, &err) != ASP_OK)
		return xs_error_asp(s, id, &err, "fs/canonicalize");
	size_t n = r.stdout_data.len;
	while (n && r.stdout_data.data[n - 1] == '\n')
		n--;
	char *real = strndup((const char *)r.stdout_data.data, n);
	if (!real || real[0] != '/') {
		free(real);
		return xs_error(s, id, XS_INTERNAL, "fs/canonicalize: realpath printed no path");
	}
	xs_reply(s, id, json_pack("{s:o}", "path", xs_uri(s, real)));
	free(real);
	return true;
}

bool xs_fs_handle(xs_session *s, const char *method, json_t *id, json_t *params)
{
	static const char *const known[] = {
	    "fs/getMetadata",     "fs/readFile", "fs/writeFile", "fs/readDirectory",
	    "fs/createDirectory", "fs/remove",   "fs/copy",      "fs/canonicalize"};
	size_t which = sizeof known / sizeof *known;
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (!strcmp(method, known[i]))
			which = i;
	if (which == sizeof known / sizeof *known)
		return false;
	asp_arena *a = asp_arena_new();
	if (!a) {
		xs_error(s, id, XS_INTERNAL, "out of memory");
		return true;
	}
	if (which == 6) {
		copy_path(s, id, params, a);
		asp_arena_free(a);
		return true;
	}
	char *path = xs_path_param(s, id, params, "path");
	if (path) {
		switch (which) {
		case 0: get_metadata(s, id, path, a); break;
		case 1: read_file(s, id, path, a); break;
		case 2: write_file(s, id, path, params, a); break;
		case 3: read_directory(s, id, path, a); break;
		case 4: create_directory(s, id, path, params, a); break;
		case 5: remove_path(s, id, path, params, a); break;
		default: canonicalize(s, id, path, a); break;
		}
	}
	free(path);
	asp_arena_free(a);
	return true;
}
