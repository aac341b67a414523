/*
 * The workspace path mapping (docs/design.md, ".asp.json"): a binding that serves a
 * harness's own tools receives the harness's paths; a path under the local directory is
 * sent as the same path under the sandbox directory, every other path unchanged, and
 * paths shown back in structured answers are mapped the other way.
 *
 * Paths are compared after lexical normalisation ("." and empty components dropped, ".."
 * pops one, no trailing slash), component by component: /home/me/proj2 is not under
 * /home/me/proj. When the sandbox directory lies inside the local one (both on one
 * machine), a path already under the sandbox directory is sent unchanged, so a sandbox
 * path learnt from command output is not mapped twice, and nothing is mapped back (every
 * sandbox path is then a harness path too). When the local directory lies inside the
 * sandbox's, a sandbox path under the local one is shown back unchanged.
 *
 * Threads: a handle is immutable once made; any thread may use it.
 */
#ifndef ASP_WORKSPACE_H
#define ASP_WORKSPACE_H

#include "asp/config.h"
#include "asp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct asp_workspace asp_workspace;

/*
 * A mapping of the absolute directory `local` onto the absolute directory `sandbox`
 * (both normalised here). invalid_argument when either is missing or relative. *out is
 * the caller's, to free with asp_workspace_free.
 */
asp_status asp_workspace_new(const char *local, const char *sandbox, asp_workspace **out,
                             asp_error *err);

/*
 * The mapping a config asks for: workspace.local, else the directory holding the config
 * file; workspace.sandbox, else the config's cwd, else `start_dir` (the responder's start
 * directory, from hello), a relative one joined to `start_dir`. *out is NULL with ASP_OK
 * when there is nothing to map: a config parsed from memory without workspace.local, or
 * local and sandbox the same directory. invalid_argument when a relative sandbox path has
 * no absolute `start_dir` to join.
 */
asp_status asp_workspace_from_config(const asp_config_view *cfg, const char *start_dir,
                                     asp_workspace **out, asp_error *err);

/* NULL is a no-op. */
void asp_workspace_free(asp_workspace *w);

/* The normalised directories (valid until asp_workspace_free). */
const char *asp_workspace_local(const asp_workspace *w);
const char *asp_workspace_sandbox(const asp_workspace *w);

/*
 * The sandbox path for the harness's `path` (malloc'd; NULL when out of memory). A
 * relative path joins `base` first (the harness's working directory, absolute) and stays
 * relative, normalised, when `base` is NULL. `w` may be NULL: no mapping, only the
 * normalisation.
 */
char *asp_workspace_to_sandbox(const asp_workspace *w, const char *path, const char *base);

/* The harness's path for the sandbox's absolute `path` (malloc'd; NULL when out of memory). */
char *asp_workspace_to_local(const asp_workspace *w, const char *path);

/*
 * The lexical normal form of `path` (malloc'd; NULL when out of memory): absolute stays
 * absolute ("/.." is "/"), a relative path stays relative ("a/../.." is "..", "" is ".").
 */
char *asp_path_normalize(const char *path);

#ifdef __cplusplus
}
#endif

#endif
