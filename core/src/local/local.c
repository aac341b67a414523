/* The local backend: its op table, its state and hello. */
#include "asp/transport.h"
#include "local_impl.h"
#include "local_proc.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define AGENT_NAME "asp-agent/0.1.0"

const asp_ops asp_local_ops = {
    .hello = asp_local_hello,
    .exec = asp_local_exec,
    .read = asp_local_read,
    .write = asp_local_write,
    .stat = asp_local_stat,
    .list = asp_local_list,
    .mkdir = asp_local_mkdir,
    .remove = asp_local_remove,
    .rename = asp_local_rename,
    .glob = asp_local_glob,
    .grep = asp_local_grep,
    .edit = asp_local_edit,
};

uint64_t asp_proc_first_id(void)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		r = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 12;
	}
	return (1u << 16) + (r & ((1u << 30) - 1));
}

asp_local *asp_local_new(size_t max_message)
{
	asp_local *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->max_message = max_message ? max_message : ASP_MAX_MESSAGE_DEFAULT;
	l->last_id = asp_proc_first_id() - 1; /* the first is ++last_id */
	/* A tiny max_message (tests) still leaves half of it for data. */
	l->payload_budget = l->max_message > 2 * LOCAL_ENVELOPE_HEADROOM
	                        ? l->max_message - LOCAL_ENVELOPE_HEADROOM
	                        : l->max_message / 2;
	struct utsname u;
	pthread_mutex_init(&l->mu, NULL);
	local_cond_init(&l->cv);
	if (uname(&u) == 0) {
		size_t i = 0;
		for (; u.sysname[i] && i + 1 < sizeof l->os; i++)
			l->os[i] = (char)tolower((unsigned char)u.sysname[i]);
		l->os[i] = '\0';
		memcpy(l->arch, u.machine, strnlen(u.machine, sizeof l->arch - 1));
	}
	if (!l->os[0])
		strcpy(l->os, "unknown");
	if (!l->arch[0])
		strcpy(l->arch, "unknown");
	return l;
}

void asp_local_free(asp_local *l)
{
	if (!l)
		return;
	if (!asp_local_shutdown(l))
		return; /* a pump is stuck in a sink: leaking beats freeing under it */
	for (size_t i = 0; i < l->nprocs; i++)
		local_proc_unref(l->procs[i]);
	free(l->procs);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static char *arena_str(asp_arena *a, const char *s)
{
	return asp_arena_strndup(a, s, strlen(s));
}

asp_status asp_local_hello(void *self, const asp_hello_params *p, asp_hello_result *r, asp_arena *a,
                           asp_error *err)
{
	(void)p; /* any client protocol is answered with ours; the client decides */
	return local_hello(self, NULL, false, r, a, err);
}

void asp_local_set_shared(asp_local *l, bool shared)
{
	l->shared = shared;
}

asp_status local_hello(asp_local *l, const asp_ops *stream, bool follow, asp_hello_result *r,
                       asp_arena *a, asp_error *err)
{
	memset(r, 0, sizeof *r);
	/* What the tables fill, so a new op in the spec is never announced before it is done. */
	const asp_ops *tables[] = {&asp_local_ops, stream};
	const char **ops = asp_arena_alloc(a, ASP_OP_COUNT * sizeof *ops);
	if (!ops)
		return local_oom("hello", err);
	size_t n = asp_ops_filled(tables, 2, ops);
	char buf[PATH_MAX];
	const char *cwd = getcwd(buf, sizeof buf);
	if (!cwd)
		return asp_error_errno(err, errno, NULL,
		                       "hello: the responder's working directory is gone");
	r->protocol = ASP_PROTOCOL;
	r->agent = AGENT_NAME;
	r->ops.items = ops;
	r->ops.count = n;
	r->os = arena_str(a, l->os);
	r->arch = arena_str(a, l->arch);
	r->cwd = arena_str(a, cwd);
	r->max_message = l->max_message;
	const char **features = asp_arena_alloc(a, 7 * sizeof *features);
	if (!features)
		return local_oom("hello", err);
	size_t nf = 0;
	features[nf++] = "concurrent"; /* every request runs on a worker of its own */
	if (follow)
		features[nf++] = "follow";
	if (stream && l->shared)
		features[nf++] = "reattach";
	if (stream && stream->proc_resize)
		features[nf++] = "pty"; /* spawn's tty: posix_openpt is POSIX, always here */
	if (asp_local_ops.grep)
		features[nf++] = local_grep_dialect();
	/* Both deliver by notification: announced where this connection carries them. */
	if (follow && stream && stream->connect)
		features[nf++] = "connect"; /* TCP from inside the sandbox (connect.c) */
	if (follow && stream && stream->watch)
		features[nf++] = "watch"; /* inotify (watch.c) */
	r->has_features = true;
	r->features = (asp_strv){features, nf};
	if (!r->os || !r->arch || !r->cwd)
		return local_oom("hello", err);
	return ASP_OK;
}
