/*
 * Tar streams and trees (asp/tar.h, asp/tree.h; docs/design.md, "Trees as one stream"):
 * the shared vectors (tests/vectors/tar/cases.json, argv[1]) through the decoder, whole
 * and a byte at a time, and through the unpacker, which must leave nothing anywhere when
 * it refuses; a tree packed and unpacked again keeps kinds, modes, mtimes, bytes and link
 * targets; GNU tar reads what the packer writes; unpacking into an existing directory
 * replaces and merges, and a conflict moves nothing; a killed unpacker's temporary goes.
 */
#include "asp/tar.h"
#include "asp/tree.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "cu_run.h"

static const char *cases_path;
static char root[256]; /* a scratch directory for the whole run */

/* ---- helpers ---------------------------------------------------------------------- */

/* snprintf, through a va_list: the paths here are short, and a cut one fails its test. */
static void pathf(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pathf(char *out, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, cap, fmt, ap);
	va_end(ap);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	uint8_t *b = malloc(cap);
	size_t r;
	while (b && (r = fread(b + len, 1, cap - len, f)) > 0) {
		len += r;
		if (len == cap)
			b = realloc(b, cap *= 2);
	}
	fclose(f);
	*n = len;
	return b;
}

static void run(const char *cmd)
{
	int rc = system(cmd);
	CU_ASSERT_EQUAL(rc, 0);
	if (rc != 0)
		fprintf(stderr, "\n  failed: %s\n", cmd);
}

static void put(const char *path, const char *data, mode_t mode, time_t mtime)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	fchmod(fd, mode);
	struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
	futimens(fd, ts);
	close(fd);
}

static size_t count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	size_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

/* A fresh empty directory under root. */
static void fresh(char *out, size_t cap, const char *name)
{
	pathf(out, cap, "%s/%s", root, name);
	char cmd[600];
	pathf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
	run(cmd);
}

/* Feeds `n` bytes in pieces of `step` (0: all at once), then ends. */
static asp_status decode(const uint8_t *b, size_t n, size_t step, asp_error *err,
                         asp_tree_counts *c)
{
	asp_tar_reader *r = asp_tar_reader_new(NULL, NULL);
	asp_status st = ASP_OK;
	for (size_t off = 0; st == ASP_OK && off < n;) {
		size_t k = step && n - off > step ? step : n - off;
		st = asp_tar_reader_feed(r, b + off, k, err);
		off += k;
	}
	if (st == ASP_OK)
		st = asp_tar_reader_end(r, err);
	asp_tar_reader_counts(r, &c->entries, &c->bytes);
	asp_tar_reader_free(r);
	return st;
}

static asp_status unpack(const char *dir, const uint8_t *b, size_t n, asp_error *err,
                         asp_tree_counts *c)
{
	asp_tree_unpack *u;
	asp_status st = asp_tree_unpack_open(dir, "test", &u, err);
	if (st != ASP_OK)
		return st;
	for (size_t off = 0; st == ASP_OK && off < n;) { /* odd pieces: 777 bytes */
		size_t k = n - off > 777 ? 777 : n - off;
		st = asp_tree_unpack_feed(u, b + off, k, err);
		off += k;
	}
	if (st == ASP_OK)
		st = asp_tree_unpack_finish(u, c, err);
	asp_tree_unpack_free(u);
	return st;
}

/* ---- the shared vectors ----------------------------------------------------------- */

static void test_vectors(void)
{
	json_error_t je;
	json_t *doc = json_load_file(cases_path, 0, &je);
	CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
	char dir[512];
	strncpy(dir, cases_path, sizeof dir - 1);
	dir[sizeof dir - 1] = '\0';
	*strrchr(dir, '/') = '\0';
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(doc, "cases"), i, c)
	{
		const char *file = json_string_value(json_object_get(c, "file"));
		const char *expect = json_string_value(json_object_get(c, "expect"));
		const char *member = json_string_value(json_object_get(c, "member"));
		char path[700];
		pathf(path, sizeof path, "%s/%s", dir, file);
		size_t n;
		uint8_t *b = slurp(path, &n);
		CU_ASSERT_PTR_NOT_NULL_FATAL(b);
		asp_status want = strcmp(expect, "ok") == 0 ? ASP_OK : ASP_E_INVALID_ARGUMENT;
		for (size_t step = 0; step <= 1; step++) {
			asp_error err;
			asp_tree_counts cnt;
			asp_status st = decode(b, n, step, &err, &cnt);
			CU_ASSERT_EQUAL(st, want);
			if (st != want)
				fprintf(stderr, "\n  %s (step %zu): got %s: %s\n", file, step,
				        asp_strerror(st), st ? err.message : "");
			if (st && member)
				CU_ASSERT_PTR_NOT_NULL(strstr(err.message, member));
			if (!st) {
				CU_ASSERT_EQUAL(cnt.entries,
				                json_integer_value(json_object_get(c, "entries")));
				CU_ASSERT_EQUAL(cnt.bytes,
				                json_integer_value(json_object_get(c, "bytes")));
			}
		}
		/* Through the unpacker: nothing written anywhere on a refusal. */
		char box[600], target[700];
		fresh(box, sizeof box, "vec");
		pathf(target, sizeof target, "%s/t", box);
		asp_error err;
		asp_tree_counts cnt;
		asp_status st = unpack(target, b, n, &err, &cnt);
		CU_ASSERT_EQUAL(st, want);
		if (st != want)
			fprintf(stderr, "\n  unpack %s: got %s: %s\n", file, asp_strerror(st),
			        st ? err.message : "");
		CU_ASSERT_EQUAL(count_entries(box), st == ASP_OK ? 1u : 0u);
		CU_ASSERT(access("/tmp/asp-escape", F_OK) != 0);
		free(b);
	}
	json_decref(doc);
}

/* ---- round trip ------------------------------------------------------------------- */

static void make_tree(const char *src)
{
	char p[1200];
	pathf(p, sizeof p, "%s/sub/deeper", src);
	CU_ASSERT_EQUAL(mkdir(src, 0755) == 0 || errno == EEXIST, 1);
	pathf(p, sizeof p, "%s/sub", src);
	mkdir(p, 0750);
	pathf(p, sizeof p, "%s/sub/deeper", src);
	mkdir(p, 0700);
	pathf(p, sizeof p, "%s/empty-dir", src);
	mkdir(p, 0755);
	pathf(p, sizeof p, "%s/a.txt", src);
	put(p, "hello\n", 0644, 1600000000);
	pathf(p, sizeof p, "%s/run.sh", src);
	put(p, "#!/bin/sh\n", 0755, 1500000000);
	pathf(p, sizeof p, "%s/sub/secret", src);
	put(p, "s", 0600, 1400000000);
	pathf(p, sizeof p, "%s/sub/deeper/empty", src);
	put(p, "", 0444, 1300000000);
	char longname[300];
	memset(longname, 'n', 200);
	longname[200] = '\0';
	pathf(p, sizeof p, "%s/sub/deeper/%s", src, longname);
	put(p, "long", 0640, 1200000000);
	pathf(p, sizeof p, "%s/link", src);
	CU_ASSERT_EQUAL(symlink("a.txt", p), 0);
	pathf(p, sizeof p, "%s/sub/out", src);
	CU_ASSERT_EQUAL(symlink("../../../etc/passwd", p), 0);
	char ro[1200];
	pathf(ro, sizeof ro, "%s/ro", src);
	mkdir(ro, 0755);
	pathf(p, sizeof p, "%s/ro/f", src);
	put(p, "r", 0644, 1100000000);
	chmod(ro, 0555);
	struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
	utimensat(AT_FDCWD, ro, ts, 0);
	pathf(p, sizeof p, "%s/sub", src);
	ts[0].tv_sec = ts[1].tv_sec = 1234567890;
	utimensat(AT_FDCWD, p, ts, 0);
}

/* Kind, mode, mtime (not of symlinks), size, bytes and link target agree, recursively. */
static void same_tree(const char *a, const char *b)
{
	char cmd[1200];
	pathf(cmd, sizeof cmd,
	      "cd '%s' && find . -printf '%%y %%m %%s %%l %%p\\n' | sort > '%s/.a' && "
	      "find . -not -type l -exec stat -c '%%Y %%n' {} + | sort >> '%s/.a' && cd '%s' && "
	      "find . -printf '%%y %%m %%s %%l %%p\\n' | sort > '%s/.b' && "
	      "find . -not -type l -exec stat -c '%%Y %%n' {} + | sort >> '%s/.b' && "
	      "diff '%s/.a' '%s/.b' && diff -r --no-dereference '%s' '%s'",
	      a, root, root, b, root, root, root, root, a, b);
	run(cmd);
}

static uint8_t *pack_all(const char *dir, const char *const *ex, size_t nex, size_t *n,
                         asp_tree_counts *c)
{
	asp_tree_pack *p;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_tree_pack_open(dir, ex, nex, &p, &err), ASP_OK);
	size_t cap = 1 << 20, len = 0;
	uint8_t *b = malloc(cap);
	for (;;) {
		if (cap - len < ASP_TAR_HEADER_MAX)
			b = realloc(b, cap *= 2);
		size_t got;
		CU_ASSERT_EQUAL_FATAL(asp_tree_pack_read(p, b + len, cap - len, &got, &err),
		                      ASP_OK);
		if (!got)
			break;
		len += got;
	}
	*c = asp_tree_pack_counts(p);
	asp_tree_pack_free(p);
	*n = len;
	return b;
}

static void test_roundtrip(void)
{
	char box[600], src[700], dst[700];
	fresh(box, sizeof box, "rt");
	pathf(src, sizeof src, "%s/src", box);
	pathf(dst, sizeof dst, "%s/new/deep/dst", box); /* parents made too */
	make_tree(src);
	size_t n;
	asp_tree_counts pc, uc;
	uint8_t *b = pack_all(src, NULL, 0, &n, &pc);
	CU_ASSERT_EQUAL(pc.entries, 12);
	CU_ASSERT_EQUAL(pc.bytes, 6 + 10 + 1 + 0 + 4 + 1);
	asp_error err;
	CU_ASSERT_EQUAL(decode(b, n, 0, &err, &uc), ASP_OK);
	CU_ASSERT_EQUAL(unpack(dst, b, n, &err, &uc), ASP_OK);
	CU_ASSERT_EQUAL(uc.entries, pc.entries);
	CU_ASSERT_EQUAL(uc.bytes, pc.bytes);
	same_tree(src, dst);
	/* GNU tar reads the stream the same way */
	char tarfile[700], cmd[2400];
	pathf(tarfile, sizeof tarfile, "%s/s.tar", box);
	FILE *f = fopen(tarfile, "wb");
	fwrite(b, 1, n, f);
	fclose(f);
	pathf(cmd, sizeof cmd, "mkdir '%s/gnu' && tar -xpf '%s' -C '%s/gnu'", box, tarfile, box);
	run(cmd);
	pathf(cmd, sizeof cmd, "%s/gnu", box);
	same_tree(src, cmd);
	/* and ours reads GNU tar's (its default format, long names as type L) */
	pathf(cmd, sizeof cmd, "tar -cf '%s' -C '%s' .", tarfile, src);
	run(cmd);
	free(b);
	b = slurp(tarfile, &n);
	pathf(dst, sizeof dst, "%s/from-gnu", box);
	CU_ASSERT_EQUAL(unpack(dst, b, n, &err, &uc), ASP_OK);
	same_tree(src, dst);
	free(b);
	pathf(cmd, sizeof cmd, "chmod -R u+w '%s'", box);
	run(cmd);
}

static void test_exclude(void)
{
	char box[600], src[700], cmd[2000];
	fresh(box, sizeof box, "ex");
	pathf(src, sizeof src, "%s/src", box);
	pathf(cmd, sizeof cmd,
	      "mkdir -p '%s/build/x' '%s/lib' && touch '%s/a.o' '%s/lib/b.o' '%s/lib/b.c' "
	      "'%s/build/x/y'",
	      src, src, src, src, src, src);
	run(cmd);
	const char *ex[] = {"*.o", "build"};
	size_t n;
	asp_tree_counts c;
	uint8_t *b = pack_all(src, ex, 2, &n, &c);
	CU_ASSERT_EQUAL(c.entries, 2); /* lib, lib/b.c */
	free(b);
	const char *bad[] = {""};
	asp_tree_pack *p;
	asp_error err;
	CU_ASSERT_EQUAL(asp_tree_pack_open(src, bad, 1, &p, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_EQUAL(asp_tree_pack_open("/nonexistent-asp", NULL, 0, &p, &err), ASP_E_NOT_FOUND);
}

/* ---- into an existing directory --------------------------------------------------- */

static void test_merge(void)
{
	char box[600], src[700], dst[700], cmd[3000];
	fresh(box, sizeof box, "merge");
	pathf(src, sizeof src, "%s/src", box);
	pathf(dst, sizeof dst, "%s/dst", box);
	pathf(cmd, sizeof cmd,
	      "mkdir -p '%s/d' '%s/d/keep' && echo new > '%s/a' && echo y > '%s/d/y' && "
	      "echo file > '%s/s' && "
	      "mkdir -p '%s/d' && echo old > '%s/a' && echo x > '%s/d/x' && "
	      "ln -s /etc '%s/s' && mkdir '%s/other'",
	      src, src, src, src, src, dst, dst, dst, dst, dst);
	run(cmd);
	size_t n;
	asp_tree_counts c;
	uint8_t *b = pack_all(src, NULL, 0, &n, &c);
	asp_error err;
	CU_ASSERT_EQUAL(unpack(dst, b, n, &err, &c), ASP_OK);
	pathf(cmd, sizeof cmd,
	      "cd '%s' && test \"$(cat a)\" = new && test -f d/x && test -f d/y && "
	      "test -d d/keep && test -f s && ! test -L s && test -d other && "
	      "test $(ls -A | wc -l) = 4",
	      dst);
	run(cmd);
	free(b);
	/* a conflict is found before anything moves */
	pathf(cmd, sizeof cmd,
	      "rm -rf '%s' '%s' && mkdir -p '%s/c' '%s/c' && echo new > '%s/a' && "
	      "echo f > '%s/c/f' && echo old > '%s/a' && rm -r '%s/c' && echo file > '%s/c'",
	      src, dst, src, dst, src, src, dst, src, src);
	run(cmd);
	b = pack_all(src, NULL, 0, &n, &c);
	CU_ASSERT_EQUAL(unpack(dst, b, n, &err, &c), ASP_E_IS_A_DIRECTORY);
	pathf(cmd, sizeof cmd, "cd '%s' && test \"$(cat a)\" = old && test $(ls -A | wc -l) = 2",
	      dst);
	run(cmd);
	free(b);
	/* the target is a file */
	pathf(cmd, sizeof cmd, "%s/a", dst);
	asp_tree_unpack *u;
	CU_ASSERT_EQUAL(asp_tree_unpack_open(cmd, "test", &u, &err), ASP_E_NOT_A_DIRECTORY);
}

/* ---- what a killed unpacker leaves ------------------------------------------------ */

static void test_dead_temps(void)
{
	char box[600], cmd[2000];
	fresh(box, sizeof box, "dead");
	/* pid 0x7ffffffe is above any pid_max: that unpacker is dead */
	pathf(cmd, sizeof cmd,
	      "mkdir -p '%s/.t.asp-tree-7ffffffe-1/x' '%s/e/.asp-tree-7ffffffe-2' && "
	      "mkdir '%s/.t.asp-tree-%x-9'",
	      box, box, box, (unsigned)getpid());
	run(cmd);
	char t[700];
	pathf(t, sizeof t, "%s/t", box);
	asp_tree_unpack *u;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_tree_unpack_open(t, "test", &u, &err), ASP_OK);
	asp_tree_unpack_free(u); /* unfinished: its own temporary goes too */
	pathf(t, sizeof t, "%s/e", box);
	CU_ASSERT_EQUAL_FATAL(asp_tree_unpack_open(t, "test", &u, &err), ASP_OK);
	asp_tree_unpack_free(u);
	pathf(cmd, sizeof cmd,
	      "cd '%s' && test \"$(LC_ALL=C ls -A)\" = \"$(printf '.t.asp-tree-%x-9\\ne')\" && "
	      "test -z \"$(ls -A e)\"",
	      box, (unsigned)getpid());
	run(cmd); /* a live pid's (ours) stays */
}

/* ---- the header encoder ----------------------------------------------------------- */

static void test_header_limits(void)
{
	uint8_t out[ASP_TAR_HEADER_MAX];
	asp_error err;
	char longp[ASP_TAR_PATH_MAX + 2];
	memset(longp, 'a', sizeof longp - 1);
	longp[sizeof longp - 1] = '\0';
	asp_tar_member m = {ASP_TAR_FILE, longp, NULL, 0644, 0, 0};
	CU_ASSERT_EQUAL(asp_tar_header(&m, out, sizeof out, &err), 0);
	CU_ASSERT_EQUAL(err.code, ASP_E_INVALID_ARGUMENT);
	/* the longest name and link there may be, a huge size and a negative time */
	for (size_t i = 100; i < ASP_TAR_PATH_MAX; i += 101)
		longp[i] = '/';
	longp[ASP_TAR_PATH_MAX] = '\0';
	asp_tar_member l = {ASP_TAR_SYMLINK, longp, longp, 0777, -1, 0};
	size_t n = asp_tar_header(&l, out, sizeof out, &err);
	CU_ASSERT(n > 0 && n <= ASP_TAR_HEADER_MAX && n % ASP_TAR_BLOCK == 0);
	asp_tar_member f = {ASP_TAR_FILE, "big", NULL, 0600, 1, 1ull << 40};
	size_t fn = asp_tar_header(&f, out + n, sizeof out - n, &err);
	CU_ASSERT_EQUAL(fn, 0); /* cap too small for a second header: refused, not overrun */
	uint8_t two[2 * ASP_TAR_HEADER_MAX];
	n = asp_tar_header(&l, two, sizeof two, &err);
	fn = asp_tar_header(&f, two + n, sizeof two - n, &err);
	CU_ASSERT(fn > 0);
	asp_tar_reader *r = asp_tar_reader_new(NULL, NULL);
	CU_ASSERT_EQUAL(asp_tar_reader_feed(r, two, n + fn, &err), ASP_OK);
	uint64_t e, b;
	asp_tar_reader_counts(r, &e, &b);
	CU_ASSERT_EQUAL(e, 2);
	CU_ASSERT_EQUAL(b, 1ull << 40);
	asp_tar_reader_free(r);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_tar tests/vectors/tar/cases.json [TEST...]\n");
		return 2;
	}
	cases_path = argv[1];
	pathf(root, sizeof root, "/tmp/asp-test-tar-%d", (int)getpid());
	mkdir(root, 0700);
	umask(022);
	CU_initialize_registry();
	CU_pSuite s = CU_add_suite("tar", NULL, NULL);
	CU_add_test(s, "vectors", test_vectors);
	CU_add_test(s, "roundtrip", test_roundtrip);
	CU_add_test(s, "exclude", test_exclude);
	CU_add_test(s, "merge", test_merge);
	CU_add_test(s, "dead_temps", test_dead_temps);
	CU_add_test(s, "header_limits", test_header_limits);
	int rc = cu_run(argc - 1, argv + 1);
	char cmd[400];
	pathf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", root, root);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
