/* The workspace path mapping (asp/workspace.h): lexical, component-wise, no I/O. */
#include "asp/workspace.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct asp_workspace {
	char *local;               /* normalised, absolute */
	char *sandbox;             /* normalised, absolute */
	bool sandbox_inside_local; /* a path under sandbox is already a sandbox path */
	bool local_inside_sandbox; /* a path under local is already a harness path */
};

char *asp_path_normalize(const char *path)
{
	size_t len = strlen(path);
	char *out = malloc(len + 2);
	if (!out)
		return NULL;
	bool abs = path[0] == '/';
	size_t n = 0, fixed = 0; /* out[0..fixed) cannot be popped: "/" or leading ".."s */
	if (abs)
		out[n++] = '/', fixed = 1;
	const char *s = path;
	while (*s) {
		while (*s == '/')
			s++;
		const char *e = s;
		while (*e && *e != '/')
			e++;
		size_t l = (size_t)(e - s);
		if (l == 0)
			break;
		bool dot = l == 1 && s[0] == '.', dotdot = l == 2 && s[0] == '.' && s[1] == '.';
		if (dotdot && n > fixed) {
			while (n > fixed && out[n - 1] != '/')
				n--;
			if (n > fixed)
				n--;
		} else if (!dot && !(dotdot && abs)) {
			if (n > 0 && out[n - 1] != '/')
				out[n++] = '/';
			memcpy(out + n, s, l);
			n += l;
			if (dotdot)
				fixed = n;
		}
		s = e;
	}
	if (n == 0)
		out[n++] = '.';
	out[n] = '\0';
	return out;
}

/* Whether the normalised absolute `path` is `dir` or lies under it. */
static bool under(const char *dir, const char *path)
{
	if (strcmp(dir, "/") == 0)
		return path[0] == '/';
	size_t dl = strlen(dir);
	return strncmp(path, dir, dl) == 0 && (path[dl] == '\0' || path[dl] == '/');
}

/* `path` (under `from`) moved under `to`, normalised. */
static char *rebase(const char *from, const char *to, const char *path)
{
	const char *rest = strcmp(from, "/") == 0 ? path : path + strlen(from);
	size_t tl = strlen(to), rl = strlen(rest);
	char *joined = malloc(tl + rl + 2);
	if (!joined)
		return NULL;
	memcpy(joined, to, tl);
	joined[tl] = '/';
	memcpy(joined + tl + 1, rest, rl + 1);
	char *out = asp_path_normalize(joined);
	free(joined);
	return out;
}

asp_status asp_workspace_new(const char *local, const char *sandbox, asp_workspace **out,
                             asp_error *err)
{
	*out = NULL;
	if (!local || local[0] != '/' || !sandbox || sandbox[0] != '/')
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "workspace: local (%s) and sandbox (%s) must be absolute "
		                     "directories",
		                     local ? local : "absent", sandbox ? sandbox : "absent");
	asp_workspace *w = calloc(1, sizeof *w);
	if (!w || !(w->local = asp_path_normalize(local)) ||
	    !(w->sandbox = asp_path_normalize(sandbox))) {
		asp_workspace_free(w);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	bool same = strcmp(w->local, w->sandbox) == 0;
	w->sandbox_inside_local = !same && under(w->local, w->sandbox);
	w->local_inside_sandbox = !same && under(w->sandbox, w->local);
	*out = w;
	return ASP_OK;
}

asp_status asp_workspace_from_config(const asp_config_view *cfg, const char *start_dir,
                                     asp_workspace **out, asp_error *err)
{
	*out = NULL;
	char *local = NULL;
	if (cfg->workspace.local) {
		local = strdup(cfg->workspace.local);
	} else if (cfg->path) {
		local = strdup(cfg->path);
		char *slash = local ? strrchr(local, '/') : NULL;
		if (slash)
			slash[slash == local] = '\0'; /* "/x.json" keeps "/" */
	} else {
		return ASP_OK; /* from memory, nothing says where the harness is */
	}
	const char *sb = cfg->workspace.sandbox ? cfg->workspace.sandbox : cfg->cwd;
	char *sandbox = NULL;
	asp_status st = ASP_OK;
	if (sb && sb[0] == '/') {
		sandbox = strdup(sb);
	} else if (!start_dir || start_dir[0] != '/') {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, cfg->path,
		                   "workspace: the sandbox directory %s is relative and the "
		                   "responder gave no absolute start directory to join it to; "
		                   "set workspace.sandbox to an absolute path",
		                   sb ? sb : "(the start directory)");
	} else if ((sandbox = malloc(strlen(start_dir) + (sb ? strlen(sb) : 0) + 2))) {
		strcpy(sandbox, start_dir);
		if (sb) {
			strcat(sandbox, "/");
			strcat(sandbox, sb);
		}
	}
	if (st == ASP_OK && (!local || !sandbox))
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	if (st == ASP_OK)
		st = asp_workspace_new(local, sandbox, out, err);
	free(local);
	free(sandbox);
	if (st == ASP_OK && strcmp((*out)->local, (*out)->sandbox) == 0) {
		asp_workspace_free(*out);
		*out = NULL;
	}
	return st;
}

void asp_workspace_free(asp_workspace *w)
{
	if (!w)
		return;
	free(w->local);
	free(w->sandbox);
	free(w);
}

const char *asp_workspace_local(const asp_workspace *w)
{
	return w->local;
}

const char *asp_workspace_sandbox(const asp_workspace *w)
{
	return w->sandbox;
}

/* `path` normalised, moved from `from` to `to` when under `from` and not kept. */
static char *map(const char *from, const char *to, bool keep_under_to, const char *path)
{
	char *n = asp_path_normalize(path);
	if (!n || n[0] != '/' || (keep_under_to && under(to, n)) || !under(from, n))
		return n;
	char *m = rebase(from, to, n);
	free(n);
	return m;
}

char *asp_workspace_to_sandbox(const asp_workspace *w, const char *path, const char *base)
{
	if (path[0] != '/' && base) {
		size_t bl = strlen(base), pl = strlen(path);
		char *joined = malloc(bl + pl + 2);
		if (!joined)
			return NULL;
		memcpy(joined, base, bl);
		joined[bl] = '/';
		memcpy(joined + bl + 1, path, pl + 1);
		char *out = w ? map(w->local, w->sandbox, w->sandbox_inside_local, joined)
		              : asp_path_normalize(joined);
		free(joined);
		return out;
	}
	return w ? map(w->local, w->sandbox, w->sandbox_inside_local, path)
	         : asp_path_normalize(path);
}

char *asp_workspace_to_local(const asp_workspace *w, const char *path)
{
	/* a sandbox inside the harness's directory: its paths already are the harness's */
	if (!w || w->sandbox_inside_local)
		return asp_path_normalize(path);
	return map(w->sandbox, w->local, w->local_inside_sandbox, path);
}
