/*
 * Directory trees as one tar stream (docs/design.md, "Trees as one stream"): copying a
 * local directory into the sandbox and back with tree_write and tree_read, and the two
 * halves they are made of, which work on this machine's filesystem: packing a directory
 * into a stream and unpacking a stream into a directory. asp-agent serves tree_write and
 * tree_read with the same two.
 *
 * Ownership: each *_open has one matching *_free (NULL is a no-op); arguments are
 * borrowed.
 */
#ifndef ASP_TREE_H
#define ASP_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "asp/proto.h"
#include "asp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a tree held: its entries (files, directories, symlinks; the root not counted) and
 * the bytes of its files. */
typedef struct asp_tree_counts {
	uint64_t entries;
	uint64_t bytes;
} asp_tree_counts;

/* ---- exclude patterns ------------------------------------------------------------- */

/*
 * tree_read's exclude: patterns of glob's syntax, matched against a path below the tree's
 * root ("a/b.o"); a pattern without '/' matches a name at any depth. For a transport that
 * filters a stream itself. invalid_argument for an empty pattern or one that expands too
 * far.
 */
typedef struct asp_tree_exclude asp_tree_exclude;
asp_status asp_tree_exclude_new(const char *const *patterns, size_t n, asp_tree_exclude **out,
                                asp_error *err);
bool asp_tree_exclude_match(const asp_tree_exclude *x, const char *rel);
void asp_tree_exclude_free(asp_tree_exclude *x);

/* ---- a local directory into a stream ---------------------------------------------- */

/*
 * Packs the directory `dir` (symlinks in it not followed; `dir` itself may be one to a
 * directory): its root first as "./", then each directory before its entries, names in
 * bytewise order; files, directories and symlinks, other kinds skipped; mode and mtime
 * (whole seconds) kept, owners written as 0. `exclude` (n patterns, glob's syntax, may be
 * NULL) leaves out every path below `dir` one of them matches, a directory with what it
 * holds. Errors: not_found, not_a_directory, permission_denied; invalid_argument for a
 * pattern that expands too far.
 */
typedef struct asp_tree_pack asp_tree_pack;
asp_status asp_tree_pack_open(const char *dir, const char *const *exclude, size_t n,
                              asp_tree_pack **out, asp_error *err);

/*
 * The next bytes of the stream into buf (at most cap; cap must be at least
 * ASP_TAR_HEADER_MAX of asp/tar.h): *len of them, 0 once the stream has ended (after its
 * end-of-archive blocks). A file that cannot be read fails the stream with its error,
 * naming the file; a file that shrank while being read is padded with zeros, one that grew
 * is cut at the size it had, so the stream stays well formed.
 */
asp_status asp_tree_pack_read(asp_tree_pack *p, uint8_t *buf, size_t cap, size_t *len,
                              asp_error *err);

/* What the stream holds so far. */
asp_tree_counts asp_tree_pack_counts(const asp_tree_pack *p);

void asp_tree_pack_free(asp_tree_pack *p);

/* ---- a stream into a local directory ---------------------------------------------- */

/*
 * Unpacks a stream into the directory `dir`, made with its parents when absent. The
 * members go into a temporary directory (".NAME.asp-tree-PID-N" beside `dir` when it is
 * absent, ".asp-tree-PID-N" inside it when it exists, so the last step never crosses
 * filesystems) and are put in place by asp_tree_unpack_finish: the temporary directory
 * renamed to `dir`, or its entries moved into the existing `dir` one by one (replacing
 * files and symlinks of the same name, merging into directories). Members are checked as
 * asp_tar_reader checks them, and none is written through a symlink. Modes are kept but
 * for the setuid and setgid bits; mtimes are kept, of directories too. Temporary
 * directories that a killed unpacker left beside or in `dir` (their PID no longer runs)
 * are removed first. `op` starts every error message ("tree_write", "cp").
 */
typedef struct asp_tree_unpack asp_tree_unpack;
asp_status asp_tree_unpack_open(const char *dir, const char *op, asp_tree_unpack **out,
                                asp_error *err);

/*
 * Unpacks `n` more bytes. ASP_OK, or the first error (every later call answers it); on an
 * error nothing has reached `dir` yet.
 */
asp_status asp_tree_unpack_feed(asp_tree_unpack *u, const uint8_t *p, size_t n, asp_error *err);

/*
 * The stream has ended: checks that it was complete, then puts the tree in place. A
 * conflict with what `dir` holds (a file of the stream where `dir` has a directory:
 * is_a_directory; a directory where it has a file or symlink: not_a_directory) is found
 * before anything moves. *counts (may be NULL) gets what was written.
 */
asp_status asp_tree_unpack_finish(asp_tree_unpack *u, asp_tree_counts *counts, asp_error *err);

/* Frees; an unpack not finished removes its temporary directory (nothing reaches `dir`). */
void asp_tree_unpack_free(asp_tree_unpack *u);

/* ---- between here and the sandbox ------------------------------------------------- */

typedef struct asp_tree_opts {
	const char *const *exclude; /* glob patterns left out (tree_read's exclude), or NULL */
	size_t exclude_count;
	/* Called with the bytes of the stream moved so far, from any thread; may be NULL. */
	void (*progress)(void *user, uint64_t stream_bytes);
	void *user;
} asp_tree_opts;

/*
 * Copies the local directory `local_dir` into the sandbox directory `sandbox_dir` (made
 * with its parents when absent; merged into when it exists) as one tar stream through
 * tree_write: one call when the stream fits a message, else chunks with several in
 * flight. `o` may be NULL. The sandbox side's errors are tree_write's; a sandbox without
 * tree_write answers unsupported.
 */
asp_status asp_tree_upload(asp_client *c, const char *local_dir, const char *sandbox_dir,
                           const asp_tree_opts *o, asp_tree_counts *counts, asp_error *err);

/*
 * Copies the sandbox directory `sandbox_dir` into the local directory `local_dir` through
 * tree_read, unpacked as asp_tree_unpack does: a failure (the sandbox's, or a stream that
 * breaks the rules) leaves nothing in `local_dir`. Needs a transport with notifications.
 */
asp_status asp_tree_download(asp_client *c, const char *sandbox_dir, const char *local_dir,
                             const asp_tree_opts *o, asp_tree_counts *counts, asp_error *err);

#ifdef __cplusplus
}
#endif

#endif
