/*
 * Target "tar": a tar stream as tree_write receives it (docs/design.md, "Trees as one
 * stream"). The first byte picks the size of the pieces it arrives in; the rest goes to
 * the decoder, whose members must come out normalised (relative, no "." or ".."
 * components, no empty ones) with exactly their size of data, and to the unpacker, which
 * writes into ./t in the scratch directory and must leave nothing beside it.
 */
#include "fuzz_common.h"

#include "asp/tar.h"
#include "asp/tree.h"
#include "local/local_impl.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
	bool in_file;
	uint64_t left;
} seen;

static asp_status on_member(void *user, const asp_tar_member *m, asp_error *err)
{
	(void)err;
	seen *s = user;
	FUZZ_CHECK(!s->in_file, "a member before the last file's data ended");
	const char *p = m->path;
	FUZZ_CHECK(p[0] != '/', "an absolute member");
	FUZZ_CHECK(strlen(p) <= ASP_TAR_PATH_MAX, "a member past the length limit");
	for (const char *c = p; *c;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		FUZZ_CHECK(n > 0, "an empty component");
		FUZZ_CHECK(!(n == 1 && c[0] == '.'), "a '.' component");
		FUZZ_CHECK(!(n == 2 && c[0] == '.' && c[1] == '.'), "a '..' component");
		c += n + (e ? 1 : 0);
		FUZZ_CHECK(!e || *c, "a trailing '/'");
	}
	FUZZ_CHECK(m->type == ASP_TAR_FILE || m->size == 0, "data on a non-file");
	FUZZ_CHECK(m->type != ASP_TAR_SYMLINK || (m->link && m->link[0]),
	           "a symlink without target");
	s->in_file = m->type == ASP_TAR_FILE && m->size > 0;
	s->left = m->size;
	return ASP_OK;
}

static asp_status on_data(void *user, const uint8_t *p, size_t n, asp_error *err)
{
	(void)p;
	(void)err;
	seen *s = user;
	FUZZ_CHECK(s->in_file && n <= s->left && n > 0, "data beyond the member's size");
	s->left -= n;
	return ASP_OK;
}

static asp_status on_file_end(void *user, asp_error *err)
{
	(void)err;
	seen *s = user;
	FUZZ_CHECK(s->left == 0, "a file ended before its size");
	s->in_file = false;
	return ASP_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_scratch_enter();
	return 0;
}

/* Entries of the scratch directory: "t" at most. */
static void check_scratch(void)
{
	DIR *d = opendir(".");
	struct dirent *de;
	while (d && (de = readdir(d)))
		FUZZ_CHECK(!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		               !strcmp(de->d_name, "t"),
		           "the unpacker wrote beside its target");
	if (d)
		closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = (size_t)data[0] * 7 + 1;
	data++;
	size--;
	seen s = {0};
	asp_tar_reader_cb cb = {on_member, on_data, on_file_end};
	asp_tar_reader *r = asp_tar_reader_new(&cb, &s);
	asp_error err;
	asp_status st = ASP_OK;
	for (size_t off = 0; st == ASP_OK && off < size; off += step)
		st =
		    asp_tar_reader_feed(r, data + off, size - off < step ? size - off : step, &err);
	asp_status end = st == ASP_OK ? asp_tar_reader_end(r, &err) : st;
	FUZZ_CHECK(end != ASP_OK || !s.in_file, "a good end inside a file");
	asp_tar_reader_free(r);

	asp_tree_unpack *u;
	if (asp_tree_unpack_open("t", "fuzz", &u, &err) == ASP_OK) {
		asp_status us = asp_tree_unpack_feed(u, data, size, &err);
		if (us == ASP_OK)
			us = asp_tree_unpack_finish(u, NULL, &err);
		FUZZ_CHECK((us == ASP_OK) == (end == ASP_OK) || us != ASP_E_INVALID_ARGUMENT,
		           "the unpacker and the decoder disagree about the stream");
		asp_tree_unpack_free(u);
	}
	check_scratch();
	if (access("t", F_OK) == 0) {
		if (system("chmod -R u+rwx t 2>/dev/null") != 0) {
		}
		local_remove_tree("t", NULL, 0);
	}
	return 0;
}
