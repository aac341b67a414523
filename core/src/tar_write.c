/*
 * A member's tar header (asp/tar.h): one ustar block, after a pax header for what ustar
 * cannot hold, so any tar reads the common case and nothing is cut short.
 */
#include "asp/tar.h"

#include <stdio.h>
#include <string.h>

#define OCTAL_11_MAX 077777777777ll /* what 11 octal digits hold */

/* `v` in octal in a field of `n` bytes (n - 1 digits and a NUL); false when it does not fit. */
static bool octal(uint8_t *f, size_t n, int64_t v)
{
	if (v < 0)
		return false;
	char tmp[24];
	int len = snprintf(tmp, sizeof tmp, "%0*llo", (int)(n - 1), (unsigned long long)v);
	if (len < 0 || (size_t)len > n - 1)
		return false;
	memcpy(f, tmp, (size_t)len);
	f[n - 1] = '\0';
	return true;
}

/* GNU's base-256, for a size or time octal cannot hold (the pax header says it too). */
static void base256(uint8_t *f, size_t n, int64_t v)
{
	uint64_t u = (uint64_t)v;
	for (size_t k = 0; k + 1 < n; k++) /* big-endian, sign-extended past 8 bytes */
		f[n - 1 - k] = k < 8 ? (uint8_t)(u >> (8 * k)) : v < 0 ? 0xff : 0;
	f[0] = v < 0 ? 0xff : 0x80;
}

static void number(uint8_t *f, size_t n, int64_t v)
{
	if (!octal(f, n, v))
		base256(f, n, v);
}

static void checksum(uint8_t *b)
{
	memset(b + 148, ' ', 8);
	unsigned sum = 0;
	for (size_t i = 0; i < ASP_TAR_BLOCK; i++)
		sum += b[i];
	snprintf((char *)b + 148, 8, "%06o", sum); /* six digits, NUL, the space stays */
}

/* An empty ustar block of `type`. */
static void blank(uint8_t *b, char type, uint32_t mode, int64_t mtime)
{
	memset(b, 0, ASP_TAR_BLOCK);
	octal(b + 100, 8, mode & 07777);
	octal(b + 108, 8, 0);
	octal(b + 116, 8, 0);
	number(b + 136, 12, mtime);
	b[156] = (uint8_t)type;
	memcpy(b + 257, "ustar", 6);
	memcpy(b + 263, "00", 2);
}

/* Appends one pax record "LEN key=value\n" at *o; false when it does not fit `cap`. */
static bool pax_record(uint8_t *out, size_t cap, size_t *o, const char *key, const char *val)
{
	size_t body = 1 + strlen(key) + 1 + strlen(val) + 1; /* " key=value\n" */
	size_t len = body + 1;
	while (snprintf(NULL, 0, "%zu", len) + body != len)
		len++;
	if (*o + len > cap)
		return false;
	int w = snprintf((char *)out + *o, cap - *o, "%zu %s=%s\n", len, key, val);
	if (w < 0 || (size_t)w != len)
		return false;
	*o += len;
	return true;
}

/* Whether `name` fits ustar's name and prefix fields; fills them when it does. */
static bool ustar_name(uint8_t *b, const char *name)
{
	size_t n = strlen(name);
	if (n <= 100) {
		memcpy(b, name, n);
		return true;
	}
	/* prefix "/" name: the split at the first '/' that leaves the name part short enough */
	for (size_t i = n - 1; i > 0; i--) {
		if (name[i] != '/')
			continue;
		if (n - i - 1 > 100)
			break;
		if (i <= 155 && n - i - 1 > 0) {
			memcpy(b + 345, name, i);
			memcpy(b, name + i + 1, n - i - 1);
			return true;
		}
	}
	return false;
}

size_t asp_tar_padding(uint64_t size)
{
	return (size_t)((ASP_TAR_BLOCK - size % ASP_TAR_BLOCK) % ASP_TAR_BLOCK);
}

size_t asp_tar_header(const asp_tar_member *m, uint8_t *out, size_t cap, asp_error *err)
{
	size_t plen = strlen(m->path);
	size_t llen = m->type == ASP_TAR_SYMLINK && m->link ? strlen(m->link) : 0;
	if (plen > ASP_TAR_PATH_MAX || llen > ASP_TAR_PATH_MAX) {
		asp_error_set(err, ASP_E_INVALID_ARGUMENT, m->path,
		              "tar: '%.200s...' is longer than %u bytes", m->path,
		              ASP_TAR_PATH_MAX);
		return 0;
	}
	if (cap < ASP_TAR_HEADER_MAX) {
		asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "tar: a header needs %u bytes",
		              ASP_TAR_HEADER_MAX);
		return 0;
	}
	char name[ASP_TAR_PATH_MAX + 3];
	if (m->type == ASP_TAR_DIR)
		snprintf(name, sizeof name, "%s/", plen ? m->path : ".");
	else
		snprintf(name, sizeof name, "%s", m->path);
	char type = m->type == ASP_TAR_DIR ? '5' : m->type == ASP_TAR_SYMLINK ? '2' : '0';
	uint64_t size = m->type == ASP_TAR_FILE ? m->size : 0;

	uint8_t *h = out + 2 * ASP_TAR_BLOCK; /* room for a pax header before it */
	blank(h, type, m->mode, m->mtime);
	uint8_t pax[2 * ASP_TAR_PATH_MAX + 256];
	size_t po = 0;
	bool ok = true;
	if (!ustar_name(h, name))
		ok = pax_record(pax, sizeof pax, &po, "path", name);
	if (llen > 100)
		ok = ok && pax_record(pax, sizeof pax, &po, "linkpath", m->link);
	else if (llen)
		memcpy(h + 157, m->link, llen);
	char num[32];
	if (size > (uint64_t)OCTAL_11_MAX) {
		snprintf(num, sizeof num, "%llu", (unsigned long long)size);
		ok = ok && pax_record(pax, sizeof pax, &po, "size", num);
	}
	if (m->mtime < 0 || m->mtime > OCTAL_11_MAX) {
		snprintf(num, sizeof num, "%lld", (long long)m->mtime);
		ok = ok && pax_record(pax, sizeof pax, &po, "mtime", num);
	}
	if (!ok) {
		asp_error_set(err, ASP_E_INTERNAL, m->path, "tar: the pax header does not fit");
		return 0;
	}
	number(h + 124, 12, (int64_t)size);
	checksum(h);
	if (!po) {
		memmove(out, h, ASP_TAR_BLOCK);
		return ASP_TAR_BLOCK;
	}
	/* pax header block, its records padded to a block, then the ustar block */
	uint8_t x[ASP_TAR_BLOCK];
	blank(x, 'x', 0644, m->mtime < 0 || m->mtime > OCTAL_11_MAX ? 0 : m->mtime);
	memcpy(x, "././@PaxHeader", 14);
	number(x + 124, 12, (int64_t)po);
	checksum(x);
	size_t data = po + asp_tar_padding(po);
	uint8_t ustar[ASP_TAR_BLOCK];
	memcpy(ustar, h, ASP_TAR_BLOCK);
	memcpy(out, x, ASP_TAR_BLOCK);
	memcpy(out + ASP_TAR_BLOCK, pax, po);
	memset(out + ASP_TAR_BLOCK + po, 0, data - po);
	memcpy(out + ASP_TAR_BLOCK + data, ustar, ASP_TAR_BLOCK);
	return 2 * ASP_TAR_BLOCK + data;
}
