/* Path strings, for local and sandbox paths alike (both are POSIX-style). */
#include "cli.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

char *path_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	bool slash = dl > 0 && dir[dl - 1] != '/';
	char *out = malloc(dl + slash + nl + 1);
	if (!out)
		return NULL;
	memcpy(out, dir, dl);
	if (slash)
		out[dl] = '/';
	memcpy(out + dl + slash, name, nl + 1);
	return out;
}

char *path_base(const char *path)
{
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	size_t start = len;
	while (start > 0 && path[start - 1] != '/')
		start--;
	if (start == len) /* "/" or "" */
		return strndup(path, len);
	return strndup(path + start, len - start);
}

char *path_dir(const char *path)
{
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	while (len > 0 && path[len - 1] != '/')
		len--;
	while (len > 1 && path[len - 1] == '/')
		len--;
	return strndup(path, len);
}

bool path_is_dot(const char *base)
{
	return strcmp(base, ".") == 0 || strcmp(base, "..") == 0;
}

char *path_temp_beside(const char *path)
{
	uint64_t r;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
		/* No entropy yet (early boot): time and pid still make a collision unlikely. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		r = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)ts.tv_sec ^
		    ((uint64_t)getpid() << 32);
	}
	char *dir = path_dir(path), *base = path_base(path);
	char *out = NULL;
	if (dir && base) {
		char name[300];
		snprintf(name, sizeof name, ".%.200s.asp-%016llx.tmp", base, (unsigned long long)r);
		out = path_join(dir, name);
	}
	free(dir);
	free(base);
	return out;
}
