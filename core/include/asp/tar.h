/*
 * POSIX tar streams, the wire form of a directory tree (docs/design.md, "Trees as one
 * stream"): a decoder that checks every member against the rules tree_write enforces
 * (asp_tar_reader) and the encoder of a member's header (asp_tar_header). Both work on
 * bytes only, never on a filesystem, so a transport that hands the stream to a tar of the
 * sandbox (native SSH) checks it with the same rules as asp-agent's own extractor.
 *
 * Formats read: ustar (POSIX and GNU's old magic), pax extended headers (path, linkpath,
 * size, mtime; other keys ignored; global headers checked and ignored) and GNU long
 * names (types L and K); numbers in octal or GNU's base-256. Written: ustar, with a pax
 * header for what ustar cannot say (a long name or link, a size past 8 GiB, an mtime out
 * of range).
 */
#ifndef ASP_TAR_H
#define ASP_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "asp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ASP_TAR_BLOCK 512
/* The longest member path and link target a stream may carry (bytes, PATH_MAX - 1). */
#define ASP_TAR_PATH_MAX 4095
/* The most a pax extended header's records may hold; larger is refused. */
#define ASP_TAR_PAX_MAX (64u * 1024u)
/* The most bytes asp_tar_header writes for one member. */
#define ASP_TAR_HEADER_MAX (4u * ASP_TAR_BLOCK + 2u * ASP_TAR_PATH_MAX + 512u)
/* The end-of-archive marker: two zero blocks. */
#define ASP_TAR_END_BYTES (2u * ASP_TAR_BLOCK)

typedef enum asp_tar_type {
	ASP_TAR_FILE = 0,
	ASP_TAR_DIR = 1,
	ASP_TAR_SYMLINK = 2,
} asp_tar_type;

/* One member as the stream describes it. */
typedef struct asp_tar_member {
	asp_tar_type type;
	/*
	 * Relative, normalised: no leading '/', no empty, "." or ".." components, no
	 * trailing '/'. "" is the tree's root (a directory member "./").
	 */
	const char *path;
	const char *link; /* a symlink's target, as stored (any text); NULL for the others */
	uint32_t mode;    /* permission bits, & 07777 */
	int64_t mtime;    /* seconds since the epoch */
	uint64_t size;    /* a file's data bytes, which follow; 0 for the others */
} asp_tar_member;

/* ---- reading ---------------------------------------------------------------------- */

/*
 * What a reader reports, in stream order. Each returns ASP_OK, or an error (with `err`
 * filled) that stops the stream: the reader then answers it to every later call. Any
 * slot may be NULL. The member and the bytes are valid only during the call.
 */
typedef struct asp_tar_reader_cb {
	asp_status (*member)(void *user, const asp_tar_member *m, asp_error *err);
	/* The current file's data, in order, m->size bytes in all. */
	asp_status (*data)(void *user, const uint8_t *p, size_t n, asp_error *err);
	/* The current file's data is complete (after its last data call). */
	asp_status (*file_end)(void *user, asp_error *err);
} asp_tar_reader_cb;

/*
 * A stream decoder that refuses, with invalid_argument naming the member (in the
 * message and err->path), any member whose name is absolute, has a ".." component, is
 * longer than ASP_TAR_PATH_MAX or a component longer than 255 bytes, lies at or below a
 * symlink an earlier member made, or is not a file, directory or symlink (hard links,
 * devices, fifos, sparse files); a header whose checksum or numbers do not parse; a pax
 * header over ASP_TAR_PAX_MAX or with a record that does not parse; and, at the end, a
 * stream cut before the end-of-archive blocks. Memory: a block, one extended header, and
 * the names of the symlinks seen (at most 16 MiB of them, past which the stream is
 * too_large). `cb` is copied; `user` is borrowed. NULL when out of
 * memory.
 */
typedef struct asp_tar_reader asp_tar_reader;
asp_tar_reader *asp_tar_reader_new(const asp_tar_reader_cb *cb, void *user);

/*
 * Decodes `n` more bytes. ASP_OK, or the stream's first error (every later call answers
 * it again). Bytes after the end-of-archive blocks are ignored.
 */
asp_status asp_tar_reader_feed(asp_tar_reader *r, const uint8_t *p, size_t n, asp_error *err);

/* The stream has ended: ASP_OK when the end-of-archive blocks came, else invalid_argument. */
asp_status asp_tar_reader_end(asp_tar_reader *r, asp_error *err);

/*
 * Devices and fifos are skipped rather than refused (their headers checked, no callback):
 * for reading a tree that a tar of the sandbox wrote, which keeps them. Hard links are
 * still refused. Before the first feed.
 */
void asp_tar_reader_skip_special(asp_tar_reader *r);

/*
 * Where the end-of-archive blocks begin (a stream offset) when the last block decoded is
 * a zero block: the end, or perhaps its first half. UINT64_MAX otherwise. So a
 * transport that passes a stream on can hold those blocks back and end it its own way.
 */
uint64_t asp_tar_reader_end_at(const asp_tar_reader *r);

/* Whether the end-of-archive blocks came. */
bool asp_tar_reader_done(const asp_tar_reader *r);

/* Members so far (the root directory not counted), and the bytes of their files. */
void asp_tar_reader_counts(const asp_tar_reader *r, uint64_t *entries, uint64_t *bytes);

/* NULL is a no-op. */
void asp_tar_reader_free(asp_tar_reader *r);

/* ---- writing ---------------------------------------------------------------------- */

/*
 * The header of `m` (its path normalised as above, "" for the root; a directory's name
 * gets its trailing '/') into `out`: one ustar block, preceded by a pax header when
 * ustar cannot hold it. Returns the bytes written (a multiple of ASP_TAR_BLOCK, at most
 * ASP_TAR_HEADER_MAX), or 0 with invalid_argument in `err` when the path or link is
 * longer than ASP_TAR_PATH_MAX or `cap` is too small. A file's data follows, then
 * asp_tar_padding(size) zero bytes; owners are written as 0.
 */
size_t asp_tar_header(const asp_tar_member *m, uint8_t *out, size_t cap, asp_error *err);

/* The zero bytes after `size` bytes of data, up to the next block. */
size_t asp_tar_padding(uint64_t size);

#ifdef __cplusplus
}
#endif

#endif
