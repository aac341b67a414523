/* Helpers of the fuzz targets; see fuzz_common.h. */
#include "fuzz_common.h"

#include "wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void fuzz_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: fuzz check failed: %s\n", file, line, what);
	abort();
}

/* ---- the scratch directory -------------------------------------------------------- */

static char scratch[4096];
static bool touched; /* an op that creates files ran since the last clear */

/*
 * Removes everything below the working directory, moving with chdir so that neither
 * depth nor path length is limited (mkdir -p and rename can nest past PATH_MAX), and
 * making directories searchable first (a mode of 0 is a valid request).
 */
static void clear_cwd(void)
{
	DIR *d = opendir(".");
	if (!d)
		return;
	size_t n = 0, cap = 0;
	char **names = NULL;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			char **nn = realloc(names, cap * sizeof *nn);
			if (!nn)
				break;
			names = nn;
		}
		names[n] = strdup(e->d_name);
		if (names[n])
			n++;
	}
	closedir(d);
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (lstat(names[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			chmod(names[i], 0700);
			if (chdir(names[i]) == 0) {
				clear_cwd();
				if (chdir("..") != 0)
					fuzz_fail(__FILE__, __LINE__,
					          "cannot climb back out of a directory");
			}
			rmdir(names[i]);
		} else {
			unlink(names[i]);
		}
		free(names[i]);
	}
	free(names);
}

static void scratch_remove(void)
{
	if (!scratch[0] || chdir(scratch) != 0)
		return;
	clear_cwd();
	if (chdir("/") == 0)
		rmdir(scratch);
}

void fuzz_scratch_enter(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(scratch, sizeof scratch, "%s/asp-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(scratch) || chdir(scratch) != 0) {
		fprintf(stderr, "fuzz: cannot make a scratch directory %s: %s\n", scratch,
		        strerror(errno));
		exit(1);
	}
	umask(022);
	atexit(scratch_remove);
}

void fuzz_scratch_clear(void)
{
	if (!touched)
		return;
	touched = false;
	if (chdir(scratch) == 0)
		clear_cwd();
}

/* ---- the guarded op table --------------------------------------------------------- */

static const asp_ops *real;

/*
 * Relative and without a ".." component: such a path stays in the scratch directory,
 * since no op can make a symlink there (there is no symlink op and none runs a process).
 * NULL passes, so the backend reports the missing field itself.
 */
static bool confined(const char *p)
{
	if (!p)
		return true;
	if (p[0] == '/')
		return false;
	for (const char *s = p; *s;) {
		const char *end = strchr(s, '/');
		size_t n = end ? (size_t)(end - s) : strlen(s);
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return false;
		s += n;
		while (*s == '/')
			s++;
	}
	return true;
}

static asp_status outside(const char *op, const char *path, asp_error *err)
{
	return asp_error_set(err, ASP_E_PERMISSION_DENIED, path,
	                     "%s %s: outside the fuzzer's scratch directory", op, path);
}

#define GUARD1(name, field, creates)                                                               \
	static asp_status g_##name(void *self, const asp_##name##_params *p,                       \
	                           asp_##name##_result *r, asp_arena *a, asp_error *err)           \
	{                                                                                          \
		if (!confined(p->field))                                                           \
			return outside(#name, p->field, err);                                      \
		if (creates)                                                                       \
			touched = true;                                                            \
		return real->name(self, p, r, a, err);                                             \
	}
GUARD1(read, path, false)
GUARD1(write, path, true)
GUARD1(stat, path, false)
GUARD1(list, path, false)
GUARD1(mkdir, path, true)
GUARD1(remove, path, false)
#undef GUARD1

static asp_status g_rename(void *self, const asp_rename_params *p, asp_rename_result *r,
                           asp_arena *a, asp_error *err)
{
	if (!confined(p->from))
		return outside("rename", p->from, err);
	if (!confined(p->to))
		return outside("rename", p->to, err);
	return real->rename(self, p, r, a, err);
}

/*
 * exec and spawn never run: their params were decoded and checked by the dispatcher
 * (types, exactly one of command/argv, NUL bytes) and that is what is fuzzed. exec
 * answers a made-up result from its params so the result encoder runs too.
 */
static asp_status g_exec(void *self, const asp_exec_params *p, asp_exec_result *r, asp_arena *a,
                         asp_error *err)
{
	(void)self;
	(void)a;
	(void)err;
	size_t keep = p->stdin_data.len < p->max_output ? p->stdin_data.len : (size_t)p->max_output;
	r->exit_code = (int64_t)(p->env.count + p->argv.count);
	r->stdout_data = (asp_bytes){p->stdin_data.data, keep};
	r->stdout_bytes = p->stdin_data.len;
	r->signal = p->command && p->command[0] == 'k' ? "KILL" : NULL;
	r->timed_out = p->timeout_ms == 1;
	return ASP_OK;
}

static asp_status g_spawn(void *self, const asp_spawn_params *p, asp_spawn_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)self;
	(void)p;
	(void)r;
	(void)a;
	return asp_error_set(err, ASP_E_UNSUPPORTED, NULL, "spawn: not run under the fuzzer");
}

void fuzz_guarded_ops(const asp_ops *base, asp_ops *out)
{
	real = base;
	*out = *base;
	out->exec = g_exec;
	out->read = g_read;
	out->write = g_write;
	out->stat = g_stat;
	out->list = g_list;
	out->mkdir = g_mkdir;
	out->remove = g_remove;
	out->rename = g_rename;
	out->spawn = g_spawn;
	/* proc_*: harmless, they only find processes spawn made, and it makes none. */
}

/* ---- input and checks ------------------------------------------------------------- */

int fuzz_stream_fd(const uint8_t *data, size_t size)
{
	static int fd = -1;
	if (fd < 0)
		fd = memfd_create("asp-fuzz-input", MFD_CLOEXEC);
	FUZZ_CHECK(fd >= 0, "memfd_create");
	FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
	size_t off = 0;
	while (off < size) {
		ssize_t w = pwrite(fd, data + off, size - off, (off_t)off);
		FUZZ_CHECK(w > 0, "pwrite");
		off += (size_t)w;
	}
	FUZZ_CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
	return fd;
}

void fuzz_check_response(const uint8_t *frame, size_t len, uint32_t id)
{
	FUZZ_CHECK(len > ASP_FRAME_HEADER, "a response frame has a body");
	size_t n =
	    (size_t)frame[0] << 24 | (size_t)frame[1] << 16 | (size_t)frame[2] << 8 | frame[3];
	FUZZ_CHECK(n == len - ASP_FRAME_HEADER, "the frame header counts the body");
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	asp_msg m;
	asp_error err;
	asp_error_clear(&err);
	asp_status st = asp_wire_decode(frame + ASP_FRAME_HEADER, n, &u, &m, &err);
	FUZZ_CHECK(st == ASP_OK, "our own response decodes");
	FUZZ_CHECK(m.type == ASP_MSG_RESPONSE && m.has_id && m.id == id, "a response to the id");
	if (m.error)
		FUZZ_CHECK(asp_wire_error_decode(m.error, &err) != ASP_OK, "an error has a code");
	msgpack_unpacked_destroy(&u);
}
