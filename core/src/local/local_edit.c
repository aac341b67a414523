/* edit: replace a string in a file, written back through write's atomic path. */
#include "local_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EDIT_MAX_FILE (256u * 1024u * 1024u) /* the file and its edited copy are in memory */

/* The whole file, or an errno. */
static int slurp(const char *path, uint8_t **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	struct stat st = {0};
	errno = 0;
	if (fstat(fd, &st) < 0 || S_ISDIR(st.st_mode)) {
		int e = errno;
		if (e == 0 || S_ISDIR(st.st_mode))
			e = EISDIR;
		close(fd);
		return e;
	}
	if ((uint64_t)st.st_size > EDIT_MAX_FILE) {
		close(fd);
		return EFBIG;
	}
	size_t cap = (size_t)st.st_size + 1, n = 0;
	uint8_t *buf = malloc(cap);
	for (;;) {
		if (!buf) {
			close(fd);
			return ENOMEM;
		}
		if (n == cap) { /* it grew while we read */
			uint8_t *g = cap < EDIT_MAX_FILE ? realloc(buf, cap * 2) : NULL;
			if (!g) {
				free(buf);
				close(fd);
				return cap < EDIT_MAX_FILE ? ENOMEM : EFBIG;
			}
			buf = g;
			cap *= 2;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return e;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	*out = buf;
	*len = n;
	return 0;
}

/* Occurrences of needle, not overlapping, scanning left to right. */
static size_t count_of(const uint8_t *hay, size_t n, const char *needle, size_t m)
{
	size_t c = 0;
	for (const uint8_t *q = hay, *end = hay + n; (size_t)(end - q) >= m;) {
		const uint8_t *hit = memmem(q, (size_t)(end - q), needle, m);
		if (!hit)
			break;
		c++;
		q = hit + m;
	}
	return c;
}

asp_status asp_edit_apply(const asp_edit_params *p, const uint8_t *buf, size_t n, uint8_t **out,
                          size_t *out_len, uint64_t *count, asp_error *err)
{
	*out = NULL;
	*out_len = 0;
	*count = 0;
	if (!p->old || !p->old[0])
		return asp_error_set(
		    err, ASP_E_INVALID_ARGUMENT, NULL,
		    "edit: 'old' must not be empty (to write a whole file use write)");
	const char *repl = p->new_text ? p->new_text : "";
	size_t m = strlen(p->old), k = strlen(repl);
	size_t c = count_of(buf, n, p->old, m);
	if (c == 0)
		return asp_error_set(err, ASP_E_NOT_FOUND, p->path,
		                     "edit: old string found 0 times in %s", p->path);
	if (c > 1 && !p->replace_all)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "edit: old string found %zu times in %s; give more context or "
		                     "replace_all",
		                     c, p->path);
	size_t len = n - c * m + c * k;
	uint8_t *o = malloc(len ? len : 1);
	if (!o)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "edit: out of memory");
	size_t at = 0;
	for (const uint8_t *q = buf, *end = buf + n;;) {
		const uint8_t *hit =
		    (size_t)(end - q) >= m ? memmem(q, (size_t)(end - q), p->old, m) : NULL;
		size_t upto = (size_t)((hit ? hit : end) - q);
		if (upto)
			memcpy(o + at, q, upto);
		at += upto;
		if (!hit)
			break;
		memcpy(o + at, repl, k);
		at += k;
		q = hit + m;
	}
	*out = o;
	*out_len = len;
	*count = c;
	return ASP_OK;
}

asp_status asp_local_edit(void *self, const asp_edit_params *p, asp_edit_result *r, asp_arena *a,
                          asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_required("edit", "path", p->path, err);
	if (st)
		return st;
	if (!p->old || !p->old[0]) /* before reading the file */
		return asp_error_set(
		    err, ASP_E_INVALID_ARGUMENT, NULL,
		    "edit: 'old' must not be empty (to write a whole file use write)");
	uint8_t *buf = NULL;
	size_t n = 0;
	int e = slurp(p->path, &buf, &n);
	if (e == EFBIG)
		return asp_error_set(err, ASP_E_TOO_LARGE, p->path,
		                     "edit: %s is larger than %u bytes", p->path, EDIT_MAX_FILE);
	if (e == ENOMEM)
		return local_oom("edit", err);
	if (e)
		return asp_error_errno(err, e, p->path, "edit %s", p->path);
	uint8_t *out;
	size_t out_len;
	uint64_t c;
	st = asp_edit_apply(p, buf, n, &out, &out_len, &c, err);
	free(buf);
	if (st)
		return st;
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = p->path;
	wp.data.data = out;
	wp.data.len = out_len;
	wp.atomic = true;
	asp_write_result wr;
	st = asp_local_write(self, &wp, &wr, a, err);
	free(out);
	if (st)
		return st;
	r->replacements = c;
	return ASP_OK;
}
