/*
 * Where the bindings that run inside a harness are, in a copy that can load: asp bind
 * opencode|pi points the harness at it. Copies: the one $ASP_BINDINGS_DIR names (then no
 * other); the installed tree beside this asp (PREFIX/bin/asp -> PREFIX/share/asp/bindings);
 * the build's own copy (BUILD/bindings, which the build fills with the TypeScript SDK
 * pi's extension imports) when this asp is that build's; where meson install puts it; the
 * source tree, whose bindings/pi has no SDK beside it.
 */
#include "bind.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* DIR/HARNESS/ENTRY exists: *out is DIR/HARNESS, absolute. */
static bool has(const char *dir, const char *harness, const char *entry, char *out, size_t cap)
{
	char p[PATH_MAX];
	if (!dir || !*dir ||
	    snprintf(p, sizeof p, "%s/%s/%s", dir, harness, entry) >= (int)sizeof p ||
	    !is_file(p) || !realpath(dir, p))
		return false;
	return snprintf(out, cap, "%s/%s", p, harness) < (int)cap;
}

/*
 * Whether Node resolves `module` from `dir` as it would for an import there: a
 * node_modules/MODULE with a package.json and its built dist/index.js in `dir` or above.
 */
static bool resolves(const char *dir, const char *module)
{
	char d[PATH_MAX], p[PATH_MAX + 64];
	snprintf(d, sizeof d, "%s", dir);
	for (;;) {
		if (snprintf(p, sizeof p, "%s/node_modules/%s/package.json", d, module) <
		        (int)sizeof p &&
		    is_file(p)) {
			snprintf(p, sizeof p, "%s/node_modules/%s/dist/index.js", d, module);
			return is_file(p);
		}
		char *slash = strrchr(d, '/');
		if (!slash || slash == d)
			return false;
		*slash = '\0';
	}
}

/* True when `asp` (absolute) is this build's own program, under ASP_BUILD_ROOT. */
static bool from_this_build(const char *asp)
{
	char root[PATH_MAX], self[PATH_MAX];
	if (!realpath(ASP_BUILD_ROOT, root) || !realpath(asp, self))
		return false;
	size_t n = strlen(root);
	return strncmp(self, root, n) == 0 && self[n] == '/';
}

int bind_bindings_dir(const bind_ctx *b, const char *harness, const char *entry, const char *module,
                      char *out, size_t cap)
{
	char beside[PATH_MAX];
	snprintf(beside, sizeof beside, "%s", b->asp);
	char *slash = strrchr(beside, '/');
	if (slash)
		snprintf(slash, sizeof beside - (size_t)(slash - beside), "/../share/asp/bindings");
	const char *env = getenv("ASP_BINDINGS_DIR");
	bool ours = from_this_build(b->asp);
	const char *dirs[] = {slash ? beside : NULL, ours ? ASP_BINDINGS_BUILD : NULL,
	                      ASP_BINDINGS_INSTALLED, ours ? NULL : ASP_BINDINGS_BUILD,
	                      ASP_BINDINGS_SOURCE};
	size_t ndirs = env && *env ? 1 : sizeof dirs / sizeof *dirs;
	if (env && *env)
		dirs[0] = env;
	char first[PATH_MAX] = "";
	for (size_t i = 0; i < ndirs; i++) {
		char dir[PATH_MAX];
		if (!has(dirs[i], harness, entry, dir, sizeof dir))
			continue;
		if (!module || resolves(dir, module)) {
			snprintf(out, cap, "%s", dir);
			return 0;
		}
		if (!first[0])
			snprintf(first, sizeof first, "%s", dir);
	}
	asp_error err;
	if (first[0])
		asp_error_set(
		    &err, ASP_E_NOT_FOUND, NULL,
		    "the %s binding in %s cannot load: it imports %s, which is in no "
		    "node_modules/ beside it or above; with node and npm installed, ninja -C "
		    "%s builds a copy that has it (%s/%s), meson install installs one, or "
		    "set ASP_BINDINGS_DIR to a bindings/ directory that has it",
		    harness, first, module, ASP_BUILD_ROOT, ASP_BINDINGS_BUILD, harness);
	else if (env && *env)
		asp_error_set(&err, ASP_E_NOT_FOUND, NULL,
		              "ASP_BINDINGS_DIR=%s has no %s/%s; point it at a bindings/ directory "
		              "(as meson install makes)",
		              env, harness, entry);
	else
		asp_error_set(
		    &err, ASP_E_NOT_FOUND, NULL,
		    "the %s binding (bindings/%s/%s) is not installed; run meson install, "
		    "or set ASP_BINDINGS_DIR to a bindings/ directory",
		    harness, harness, entry);
	return cli_fail(b->c, &err, "bind %s", harness), -1;
}
