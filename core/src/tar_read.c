/*
 * The tar stream decoder (asp/tar.h): blocks in, checked members out. Anything it cannot
 * read the way every tar of a sandbox reads it is refused rather than guessed, since a
 * transport passes the checked stream to such a tar (docs/design.md, "Trees as one
 * stream"): so a size on a directory or symlink, a global pax header that renames, or a
 * lone zero block are errors, not warnings.
 */
#include "asp/tar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_BYTES 255                   /* one path component */
#define LINKS_MAX      (16u * 1024u * 1024u) /* bytes of symlink names remembered */

enum state {
	ST_HEADER, /* gathering a header block */
	ST_ZERO1,  /* one zero block came: the next must be zero too */
	ST_DATA,   /* a file's data */
	ST_EXT,    /* an extended header's data (pax, GNU long name) */
	ST_PAD,    /* the zero bytes up to the next block */
	ST_DONE,   /* the end-of-archive blocks came */
	ST_FAILED,
};

/* The names of the symlinks the stream made: open addressing, FNV-1a. */
typedef struct linkset {
	char **slot;
	size_t cap, n, bytes;
} linkset;

struct asp_tar_reader {
	asp_tar_reader_cb cb;
	void *user;
	enum state st;
	uint8_t blk[ASP_TAR_BLOCK];
	size_t have;
	uint64_t pos;  /* stream bytes decoded, for messages */
	uint64_t hdr;  /* where the current header began */
	uint64_t left; /* ST_DATA, ST_EXT: bytes to come */
	size_t pad;    /* zero bytes after them */
	/* the extended header being gathered, and what earlier ones said of the next member */
	char ext_kind;
	uint8_t *ext;
	size_t ext_len;
	char *pax_path, *pax_link, *gnu_name, *gnu_link;
	bool has_pax_size, has_pax_mtime;
	uint64_t pax_size;
	int64_t pax_mtime;
	char last[ASP_TAR_PATH_MAX + 1]; /* the last member's name as stored, for messages */
	uint64_t entries, bytes;
	linkset links;
	bool skip_special;
	uint64_t zero_at; /* ST_ZERO1, ST_DONE: where the first zero block began */
	asp_status failed;
	asp_error err;
};

/* ---- errors ----------------------------------------------------------------------- */

static asp_status fail(asp_tar_reader *r, asp_error *err, asp_status code, const char *member,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static asp_status fail(asp_tar_reader *r, asp_error *err, asp_status code, const char *member,
                       const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (member)
		asp_error_set(&r->err, code, member, "tar stream: member '%.300s': %s", member,
		              what);
	else if (r->last[0])
		asp_error_set(&r->err, code, NULL,
		              "tar stream: the header at byte %llu (after member '%.300s'): %s",
		              (unsigned long long)r->hdr, r->last, what);
	else
		asp_error_set(&r->err, code, NULL, "tar stream: the header at byte %llu: %s",
		              (unsigned long long)r->hdr, what);
	r->st = ST_FAILED;
	r->failed = code;
	if (err)
		*err = r->err;
	return code;
}

/* A callback's error stops the stream too. */
static asp_status stop(asp_tar_reader *r, asp_status st, asp_error *err)
{
	if (err && err->code != st)
		asp_error_set(err, st, NULL, "tar stream: the receiver refused it");
	if (err)
		r->err = *err;
	else
		asp_error_set(&r->err, st, NULL, "tar stream: the receiver refused it");
	r->st = ST_FAILED;
	r->failed = st;
	return st;
}

/* ---- the symlink set -------------------------------------------------------------- */

static uint64_t fnv(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static bool links_has(const linkset *ls, const char *s, size_t n)
{
	if (!ls->n)
		return false;
	for (size_t i = fnv(s, n) & (ls->cap - 1);; i = (i + 1) & (ls->cap - 1)) {
		const char *x = ls->slot[i];
		if (!x)
			return false;
		if (strlen(x) == n && memcmp(x, s, n) == 0)
			return true;
	}
}

/* 0, or -1 when out of memory or past LINKS_MAX. */
static int links_add(linkset *ls, const char *s)
{
	size_t n = strlen(s);
	if (links_has(ls, s, n))
		return 0;
	if (ls->bytes + n + 1 > LINKS_MAX)
		return -1;
	if ((ls->n + 1) * 2 > ls->cap) {
		size_t cap = ls->cap ? ls->cap * 2 : 64;
		char **v = calloc(cap, sizeof *v);
		if (!v)
			return -1;
		for (size_t i = 0; i < ls->cap; i++) {
			if (!ls->slot[i])
				continue;
			size_t j = fnv(ls->slot[i], strlen(ls->slot[i])) & (cap - 1);
			while (v[j])
				j = (j + 1) & (cap - 1);
			v[j] = ls->slot[i];
		}
		free(ls->slot);
		ls->slot = v;
		ls->cap = cap;
	}
	char *d = strdup(s);
	if (!d)
		return -1;
	size_t j = fnv(s, n) & (ls->cap - 1);
	while (ls->slot[j])
		j = (j + 1) & (ls->cap - 1);
	ls->slot[j] = d;
	ls->n++;
	ls->bytes += n + 1;
	return 0;
}

static void links_free(linkset *ls)
{
	for (size_t i = 0; i < ls->cap; i++)
		free(ls->slot[i]);
	free(ls->slot);
	memset(ls, 0, sizeof *ls);
}

/* ---- fields ----------------------------------------------------------------------- */

/*
 * A numeric header field: octal digits (leading spaces, ended by a space or NUL, nothing
 * but those after), or GNU's base-256 (high bit set). An empty field is 0. false when it
 * does not parse or does not fit an int64 (negative only with `neg`).
 */
static bool num_field(const uint8_t *f, size_t n, bool neg, int64_t *out)
{
	if (f[0] & 0x80) {
		bool minus = f[0] == 0xff;
		if (minus && !neg)
			return false;
		uint64_t v = minus ? UINT64_MAX : (uint64_t)(f[0] & 0x7f);
		for (size_t i = 1; i < n; i++) {
			if (!minus && v >> 55)
				return false;
			if (minus && (v >> 55) != 0x1ff)
				return false;
			v = v << 8 | f[i];
		}
		if (!minus && v > (uint64_t)INT64_MAX)
			return false;
		if (minus && v <= (uint64_t)INT64_MAX)
			return false;
		*out = (int64_t)v;
		return true;
	}
	size_t i = 0;
	while (i < n && f[i] == ' ')
		i++;
	uint64_t v = 0;
	size_t digits = 0;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
		if (v >> 60)
			return false;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	for (; i < n; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return false;
	(void)digits;
	*out = (int64_t)v;
	return true;
}

static bool zero_block(const uint8_t *b)
{
	for (size_t i = 0; i < ASP_TAR_BLOCK; i++)
		if (b[i])
			return false;
	return true;
}

/* The checksum: the unsigned sum of the block with its own field as spaces (the signed
 * sum, which some old tars wrote, is accepted too). */
static bool checksum_ok(const uint8_t *b)
{
	int64_t want;
	if (!num_field(b + 148, 8, false, &want))
		return false;
	int64_t u = 0, s = 0;
	for (size_t i = 0; i < ASP_TAR_BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : b[i];
		u += c;
		s += (signed char)c;
	}
	return want == u || want == s;
}

/* A NUL-terminated copy of a fixed field (it may fill the field without a NUL). */
static void field_str(char *dst, const uint8_t *f, size_t n)
{
	size_t l = 0;
	while (l < n && f[l])
		l++;
	memcpy(dst, f, l);
	dst[l] = '\0';
}

/* ---- extended headers ------------------------------------------------------------- */

static char *dup_n(const uint8_t *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* A decimal, as pax writes size: digits only. */
static bool dec_u64(const uint8_t *s, size_t n, uint64_t *out)
{
	if (!n)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > ((uint64_t)INT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return true;
}

/* pax mtime: [-]digits[.digits]; the fraction is dropped (whole seconds are kept). */
static bool pax_time(const uint8_t *s, size_t n, int64_t *out)
{
	bool minus = n && s[0] == '-';
	size_t i = minus ? 1 : 0, start = i;
	while (i < n && s[i] >= '0' && s[i] <= '9')
		i++;
	uint64_t v;
	if (!dec_u64(s + start, i - start, &v))
		return false;
	if (i < n) {
		if (s[i] != '.')
			return false;
		for (i++; i < n; i++)
			if (s[i] < '0' || s[i] > '9')
				return false;
	}
	*out = minus ? -(int64_t)v : (int64_t)v;
	return true;
}

static bool key_is(const uint8_t *k, size_t kn, const char *z)
{
	return strlen(z) == kn && memcmp(k, z, kn) == 0;
}

static void replace(char **slot, char *v)
{
	free(*slot);
	*slot = v;
}

/* Parses the pax records in r->ext; a global header (`global`) may not rename or resize. */
static asp_status pax_records(asp_tar_reader *r, bool global, asp_error *err)
{
	const uint8_t *p = r->ext;
	size_t n = r->ext_len, off = 0;
	while (off < n) {
		size_t i = off, len = 0;
		while (i < n && p[i] >= '0' && p[i] <= '9' && i - off < 8)
			len = len * 10 + (size_t)(p[i++] - '0');
		if (i == off || i >= n || p[i] != ' ' || len <= i - off + 1 || len > n - off ||
		    p[off + len - 1] != '\n')
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "a pax record at offset %zu of its header does not parse (its "
			            "length must count the whole \"LEN KEY=VALUE\\n\")",
			            off);
		const uint8_t *k = p + i + 1, *end = p + off + len - 1;
		const uint8_t *eq = memchr(k, '=', (size_t)(end - k));
		if (!eq || eq == k)
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "a pax record at offset %zu of its header has no KEY=", off);
		size_t kn = (size_t)(eq - k), vn = (size_t)(end - eq - 1);
		const uint8_t *v = eq + 1;
		bool path = key_is(k, kn, "path"), link = key_is(k, kn, "linkpath");
		bool size = key_is(k, kn, "size"), mtime = key_is(k, kn, "mtime");
		if (kn >= 11 && memcmp(k, "GNU.sparse.", 11) == 0)
			return fail(
			    r, err, ASP_E_INVALID_ARGUMENT, NULL,
			    "a pax header describes a sparse file, which a tree cannot hold");
		if (global && (path || link || size))
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "a global pax header sets '%.*s' for every member", (int)kn,
			            (const char *)k);
		if ((path || link) && (vn > ASP_TAR_PATH_MAX || memchr(v, '\0', vn)))
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "a pax %s is longer than %u bytes or holds a NUL byte",
			            path ? "path" : "linkpath", ASP_TAR_PATH_MAX);
		if (path || link) {
			char *d = vn ? dup_n(v, vn) : NULL;
			if (vn && !d)
				return fail(r, err, ASP_E_INTERNAL, NULL, "out of memory");
			replace(path ? &r->pax_path : &r->pax_link, d);
		} else if (size) {
			if (!dec_u64(v, vn, &r->pax_size))
				return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
				            "a pax size '%.*s' is not a number of bytes",
				            (int)(vn < 40 ? vn : 40), (const char *)v);
			r->has_pax_size = true;
		} else if (mtime && !global) {
			if (!pax_time(v, vn, &r->pax_mtime))
				return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
				            "a pax mtime '%.*s' is not a time",
				            (int)(vn < 40 ? vn : 40), (const char *)v);
			r->has_pax_mtime = true;
		}
		off += len;
	}
	return ASP_OK;
}

/* The extended header's data has come: what it says goes to the next member. */
static asp_status ext_done(asp_tar_reader *r, asp_error *err)
{
	asp_status st = ASP_OK;
	if (r->ext_kind == 'x' || r->ext_kind == 'g') {
		st = pax_records(r, r->ext_kind == 'g', err);
	} else {
		/* GNU long name or link: the name up to its NUL */
		const uint8_t *nul = memchr(r->ext, '\0', r->ext_len);
		size_t n = nul ? (size_t)(nul - r->ext) : r->ext_len;
		char *d = dup_n(r->ext, n);
		if (!d)
			st = fail(r, err, ASP_E_INTERNAL, NULL, "out of memory");
		else
			replace(r->ext_kind == 'L' ? &r->gnu_name : &r->gnu_link, d);
	}
	free(r->ext);
	r->ext = NULL;
	r->ext_len = 0;
	return st;
}

static void clear_pending(asp_tar_reader *r)
{
	replace(&r->pax_path, NULL);
	replace(&r->pax_link, NULL);
	replace(&r->gnu_name, NULL);
	replace(&r->gnu_link, NULL);
	r->has_pax_size = r->has_pax_mtime = false;
}

static bool pending(const asp_tar_reader *r)
{
	return r->pax_path || r->pax_link || r->gnu_name || r->gnu_link || r->has_pax_size ||
	       r->has_pax_mtime;
}

/* ---- names ------------------------------------------------------------------------ */

/*
 * `raw` normalised into `out` (room for ASP_TAR_PATH_MAX + 1): components joined by one
 * '/', "" and "." dropped. *dir_slash: it ended with '/'. NULL when fine, else why not.
 */
static const char *normalise(const char *raw, char *out, bool *dir_slash)
{
	size_t n = strlen(raw), o = 0;
	if (n == 0)
		return "the name is empty";
	if (raw[0] == '/')
		return "the name is absolute: it would leave the target";
	if (n > ASP_TAR_PATH_MAX)
		return "the name is longer than 4095 bytes";
	*dir_slash = raw[n - 1] == '/';
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && raw[j] != '/')
			j++;
		size_t cl = j - i;
		if (cl == 2 && raw[i] == '.' && raw[i + 1] == '.')
			return "a '..' component would leave the target";
		if (cl > NAME_MAX_BYTES)
			return "a component is longer than 255 bytes";
		if (cl && !(cl == 1 && raw[i] == '.')) {
			if (o)
				out[o++] = '/';
			memcpy(out + o, raw + i, cl);
			o += cl;
		}
		i = j + 1;
	}
	out[o] = '\0';
	return NULL;
}

/* The symlink the stream made that `path` lies at or below, or NULL. */
static const char *through_link(const asp_tar_reader *r, const char *path, size_t *len)
{
	size_t n = strlen(path);
	for (size_t i = 1; i <= n; i++) {
		if ((i == n || path[i] == '/') && links_has(&r->links, path, i)) {
			*len = i;
			return path;
		}
	}
	return NULL;
}

/* ---- headers ---------------------------------------------------------------------- */

static const char *kind_name(uint8_t t)
{
	switch (t) {
	case '1': return "a hard link";
	case '3': return "a character device";
	case '4': return "a block device";
	case '6': return "a fifo";
	case 'S': return "a sparse file";
	case 'D': return "a GNU directory dump";
	case 'M': return "a multi-volume continuation";
	case 'V': return "a volume label";
	default: return NULL;
	}
}

static asp_status header(asp_tar_reader *r, asp_error *err)
{
	const uint8_t *b = r->blk;
	if (r->st == ST_HEADER && !pending(r))
		r->hdr = r->pos; /* a member's extended headers count as its header */
	if (zero_block(b)) {
		if (r->st != ST_ZERO1)
			r->zero_at = r->pos;
		if (r->st == ST_ZERO1) {
			r->st = ST_DONE;
			return ASP_OK;
		}
		if (pending(r))
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "an extended header is followed by the end of the archive, not "
			            "by its member");
		r->st = ST_ZERO1;
		return ASP_OK;
	}
	if (r->st == ST_ZERO1)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
		            "a lone zero block comes before it (the end of an archive is two)");
	if (!checksum_ok(b))
		return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
		            "its checksum is wrong: this is not a tar header (or the stream is "
		            "damaged)");
	uint8_t type = b[156];
	bool posix = memcmp(b + 257, "ustar\0", 6) == 0 && b[263] == '0' && b[264] == '0';
	int64_t size, mtime, mode;
	bool size_ok = num_field(b + 124, 12, false, &size);
	if (!num_field(b + 100, 8, false, &mode) || !num_field(b + 136, 12, true, &mtime) ||
	    !size_ok)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
		            "its mode, size or mtime is not a number");
	if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
		uint64_t max = type == 'x' || type == 'g' ? ASP_TAR_PAX_MAX : ASP_TAR_PATH_MAX + 1;
		if ((uint64_t)size > max)
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "an extended header of %llu bytes (more than %llu)",
			            (unsigned long long)size, (unsigned long long)max);
		r->ext = malloc(size ? (size_t)size : 1);
		if (!r->ext)
			return fail(r, err, ASP_E_INTERNAL, NULL, "out of memory");
		r->ext_kind = (char)type;
		r->ext_len = 0;
		r->left = (uint64_t)size;
		r->pad = asp_tar_padding((uint64_t)size);
		r->st = size ? ST_EXT : ST_HEADER;
		return size ? ASP_OK : ext_done(r, err);
	}

	/* The member's name as stored: pax, else GNU long name, else the ustar fields. */
	char raw[ASP_TAR_PATH_MAX + 2], path[ASP_TAR_PATH_MAX + 1];
	if (r->pax_path || r->gnu_name) {
		const char *x = r->pax_path ? r->pax_path : r->gnu_name;
		if (strlen(x) > ASP_TAR_PATH_MAX)
			return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
			            "its long name is over 4095 bytes");
		strcpy(raw, x);
	} else {
		char name[101], prefix[156];
		field_str(name, b, 100);
		field_str(prefix, b + 345, 155);
		if (posix && prefix[0])
			snprintf(raw, sizeof raw, "%s/%s", prefix, name);
		else
			strcpy(raw, name);
	}
	memcpy(r->last, raw, sizeof r->last - 1); /* raw is at most ASP_TAR_PATH_MAX long */
	r->last[sizeof r->last - 1] = '\0';
	bool slash = false;
	const char *why = normalise(raw, path, &slash);
	if (why)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw, "%s", why);

	asp_tar_member m = {.path = path, .mode = (uint32_t)mode & 07777, .mtime = mtime};
	if (r->has_pax_mtime)
		m.mtime = r->pax_mtime;
	uint64_t sz = r->has_pax_size ? r->pax_size : (uint64_t)size;
	char link[ASP_TAR_PATH_MAX + 1];
	switch (type) {
	case '0':
	case '\0':
	case '7': m.type = slash && type != '7' ? ASP_TAR_DIR : ASP_TAR_FILE; break;
	case '5': m.type = ASP_TAR_DIR; break;
	case '2': m.type = ASP_TAR_SYMLINK; break;
	case '3':
	case '4':
	case '6':
		if (r->skip_special && !sz) { /* no data follows: nothing to skip but it */
			clear_pending(r);
			r->st = ST_HEADER;
			return ASP_OK;
		}
		/* fall through */
	default: {
		const char *k = kind_name(type);
		if (k)
			return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
			            "it is %s; a tree holds only files, directories and symlinks",
			            k);
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
		            "its type '%c' is not a file, directory or symlink",
		            type >= 0x20 && type < 0x7f ? type : '?');
	}
	}
	if (m.type != ASP_TAR_FILE && sz)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
		            "a %s with a size of %llu bytes (tars disagree on what follows)",
		            m.type == ASP_TAR_DIR ? "directory" : "symlink",
		            (unsigned long long)sz);
	if (m.type == ASP_TAR_FILE && sz > (uint64_t)INT64_MAX)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw, "its size is out of range");
	if (!path[0] && m.type != ASP_TAR_DIR)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
		            "the tree's root can only be a directory");
	if (m.type == ASP_TAR_FILE && slash)
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw, "a file whose name ends with '/'");
	if (m.type == ASP_TAR_SYMLINK) {
		if (!path[0])
			return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
			            "the tree's root can only be a directory");
		if (r->pax_link || r->gnu_link) {
			const char *x = r->pax_link ? r->pax_link : r->gnu_link;
			if (strlen(x) > ASP_TAR_PATH_MAX)
				return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
				            "its link target is over 4095 bytes");
			strcpy(link, x);
		} else {
			field_str(link, b + 157, 100);
		}
		if (!link[0])
			return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
			            "a symlink with an empty target");
		m.link = link;
	}
	size_t ll;
	if (through_link(r, path, &ll))
		return fail(r, err, ASP_E_INVALID_ARGUMENT, raw,
		            "it lies %s the symlink '%.*s' an earlier member made: writing it "
		            "would follow that link",
		            ll == strlen(path) ? "at" : "below", (int)ll, path);
	if (m.type == ASP_TAR_SYMLINK && links_add(&r->links, path) < 0)
		return fail(r, err, ASP_E_TOO_LARGE, raw,
		            "the stream makes more symlinks than a tree may (16 MiB of names)");
	clear_pending(r);
	m.size = m.type == ASP_TAR_FILE ? sz : 0;
	if (path[0])
		r->entries++;
	r->bytes += m.size;
	if (r->cb.member) {
		asp_status st = r->cb.member(r->user, &m, err);
		if (st != ASP_OK)
			return stop(r, st, err);
	}
	if (m.type == ASP_TAR_FILE && m.size) {
		r->left = m.size;
		r->pad = asp_tar_padding(m.size);
		r->st = ST_DATA;
		return ASP_OK;
	}
	if (m.type == ASP_TAR_FILE && r->cb.file_end) {
		asp_status st = r->cb.file_end(r->user, err);
		if (st != ASP_OK)
			return stop(r, st, err);
	}
	r->st = ST_HEADER;
	return ASP_OK;
}

/* ---- the stream ------------------------------------------------------------------- */

asp_tar_reader *asp_tar_reader_new(const asp_tar_reader_cb *cb, void *user)
{
	asp_tar_reader *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	if (cb)
		r->cb = *cb;
	r->user = user;
	r->st = ST_HEADER;
	return r;
}

asp_status asp_tar_reader_feed(asp_tar_reader *r, const uint8_t *p, size_t n, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	while (n > 0 || (r->st == ST_PAD && r->pad == 0)) {
		switch (r->st) {
		case ST_FAILED:
			if (err)
				*err = r->err;
			return r->failed;
		case ST_DONE: return ASP_OK;
		case ST_HEADER:
		case ST_ZERO1: {
			size_t k = ASP_TAR_BLOCK - r->have < n ? ASP_TAR_BLOCK - r->have : n;
			memcpy(r->blk + r->have, p, k);
			r->have += k;
			p += k;
			n -= k;
			if (r->have < ASP_TAR_BLOCK)
				break;
			r->have = 0;
			asp_status st = header(r, err);
			r->pos += ASP_TAR_BLOCK;
			if (st != ASP_OK)
				return st;
			break;
		}
		case ST_DATA: {
			size_t k = r->left < n ? (size_t)r->left : n;
			if (r->cb.data) {
				asp_status st = r->cb.data(r->user, p, k, err);
				if (st != ASP_OK)
					return stop(r, st, err);
			}
			p += k;
			n -= k;
			r->pos += k;
			r->left -= k;
			if (r->left)
				break;
			r->st = ST_PAD;
			if (r->cb.file_end) {
				asp_status st = r->cb.file_end(r->user, err);
				if (st != ASP_OK)
					return stop(r, st, err);
			}
			break;
		}
		case ST_EXT: {
			size_t k = r->left < n ? (size_t)r->left : n;
			memcpy(r->ext + r->ext_len, p, k);
			r->ext_len += k;
			p += k;
			n -= k;
			r->pos += k;
			r->left -= k;
			if (r->left)
				break;
			r->st = ST_PAD;
			asp_status st = ext_done(r, err);
			if (st != ASP_OK)
				return st;
			break;
		}
		case ST_PAD: {
			size_t k = r->pad < n ? r->pad : n;
			p += k;
			n -= k;
			r->pos += k;
			r->pad -= k;
			if (!r->pad)
				r->st = ST_HEADER;
			break;
		}
		}
	}
	if (r->st == ST_FAILED) {
		if (err)
			*err = r->err;
		return r->failed;
	}
	return ASP_OK;
}

asp_status asp_tar_reader_end(asp_tar_reader *r, asp_error *err)
{
	switch (r->st) {
	case ST_DONE: return ASP_OK;
	case ST_FAILED:
		if (err)
			*err = r->err;
		return r->failed;
	case ST_DATA:
		return fail(r, err, ASP_E_INVALID_ARGUMENT, r->last,
		            "the stream ends inside its data (%llu bytes missing): it was cut",
		            (unsigned long long)r->left);
	default:
		if (r->last[0])
			return fail(
			    r, err, ASP_E_INVALID_ARGUMENT, r->last,
			    "the stream ends after it without the end-of-archive blocks: it "
			    "was cut");
		return fail(r, err, ASP_E_INVALID_ARGUMENT, NULL,
		            "the stream ends without the end-of-archive blocks: it was cut or "
		            "is empty");
	}
}

void asp_tar_reader_skip_special(asp_tar_reader *r)
{
	r->skip_special = true;
}

uint64_t asp_tar_reader_end_at(const asp_tar_reader *r)
{
	return r->st == ST_ZERO1 || r->st == ST_DONE ? r->zero_at : UINT64_MAX;
}

bool asp_tar_reader_done(const asp_tar_reader *r)
{
	return r->st == ST_DONE;
}

void asp_tar_reader_counts(const asp_tar_reader *r, uint64_t *entries, uint64_t *bytes)
{
	if (entries)
		*entries = r->entries;
	if (bytes)
		*bytes = r->bytes;
}

void asp_tar_reader_free(asp_tar_reader *r)
{
	if (!r)
		return;
	clear_pending(r);
	free(r->ext);
	links_free(&r->links);
	free(r);
}
