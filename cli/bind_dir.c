/*
 * Where the bindings that run inside a harness are (bindings/ in the source tree, installed
 * under DATADIR/asp/bindings by meson install): asp bind opencode|pi points the harness at
 * them.
 */
#include "bind.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool has(const char *dir, const char *harness, const char *entry, char *out, size_t cap)
{
	char p[PATH_MAX];
	struct stat st;
	if (!dir || !*dir ||
	    snprintf(p, sizeof p, "%s/%s/%s", dir, harness, entry) >= (int)sizeof p ||
	    stat(p, &st) != 0 || !realpath(dir, p))
		return false;
	return snprintf(out, cap, "%s/%s", p, harness) < (int)cap;
}

int bind_bindings_dir(const bind_ctx *b, const char *harness, const char *entry, char *out,
                      size_t cap)
{
	/* $ASP_BINDINGS_DIR; the installed tree beside this asp (PREFIX/bin/asp →
	 * PREFIX/share/asp/bindings); where meson install puts it; the source tree of this build */
	char beside[PATH_MAX];
	snprintf(beside, sizeof beside, "%s", b->asp);
	char *slash = strrchr(beside, '/');
	if (slash)
		snprintf(slash, sizeof beside - (size_t)(slash - beside), "/../share/asp/bindings");
	const char *dirs[] = {getenv("ASP_BINDINGS_DIR"), slash ? beside : NULL,
	                      ASP_BINDINGS_INSTALLED, ASP_BINDINGS_SOURCE};
	for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
		if (has(dirs[i], harness, entry, out, cap))
			return 0;
	return cli_fail_errno(b->c, ENOENT,
	                      "bind: the %s binding (bindings/%s/%s) is not installed; run meson "
	                      "install, or set ASP_BINDINGS_DIR to a bindings/ directory",
	                      harness, harness, entry),
	       -1;
}
