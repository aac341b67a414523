/*
 * A process handle from a responder that died must not name another process on the next
 * one (docs/faults.md, "Soak"): were both responders to number from the same start, the
 * old handle would be the new responder's first spawn, asp_proc_detach of it (the thread
 * that saw on_lost tidying up) would take another thread's follower, which would never get
 * on_exit, and proc_wait of it would wait for the other process and return its exit.
 *
 *   soak_stale_handle ASP_AGENT
 */
#include "asp/asp.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct watch {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool exited, lost;
	char out[64];
	size_t out_len;
} watch;

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc, (void)offset;
	watch *w = user;
	pthread_mutex_lock(&w->mu);
	if (stream == ASP_STREAM_STDOUT && w->out_len + len < sizeof w->out) {
		memcpy(w->out + w->out_len, data, len);
		w->out_len += len;
	}
	pthread_mutex_unlock(&w->mu);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	(void)ev;
	watch *w = user;
	pthread_mutex_lock(&w->mu);
	w->exited = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc, (void)err;
	watch *w = user;
	pthread_mutex_lock(&w->mu);
	w->lost = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void watch_init(watch *w)
{
	memset(w, 0, sizeof *w);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* Waits, at most `secs`, for the follower's end; true when it came. */
static bool wait_end(watch *w, int secs)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += secs;
	pthread_mutex_lock(&w->mu);
	while (!w->exited && !w->lost && pthread_cond_timedwait(&w->cv, &w->mu, &dl) != ETIMEDOUT)
		;
	bool ended = w->exited || w->lost;
	pthread_mutex_unlock(&w->mu);
	return ended;
}

/* The live asp-agent child of this process, or 0. */
static pid_t agent_child(void)
{
	DIR *d = opendir("/proc");
	pid_t found = 0;
	for (struct dirent *e; d && !found && (e = readdir(d));) {
		char path[300], buf[512];
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = 0;
		char *rp = strrchr(buf, ')');
		char state;
		int ppid;
		if (rp && strstr(buf, "(asp-agent)") &&
		    sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid() && state != 'Z')
			found = (pid_t)atoi(e->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

static int fail(const char *what)
{
	fprintf(stderr, "soak_stale_handle: %s\n", what);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return fail("usage: soak_stale_handle ASP_AGENT");
	char dir[] = "/tmp/asp-stale-XXXXXX", cfg[128];
	if (!mkdtemp(dir))
		return fail("mkdtemp");
	snprintf(cfg, sizeof cfg, "%s/.asp.json", dir);
	FILE *f = fopen(cfg, "w");
	if (!f)
		return fail("config");
	fprintf(
	    f,
	    "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s\", \"call_timeout_ms\": 5000,"
	    " \"stdio\": {\"command\": [\"%s\", \"--stdio\"]}}\n",
	    dir, argv[1]);
	fclose(f);
	asp_client *c;
	asp_error err;
	if (asp_client_open_path(cfg, &c, &err))
		return fail(err.message);
	asp_proc_callbacks cb = {on_output, on_exit_ev, on_lost};

	/* 1. a process on the first responder, which then dies */
	watch w1;
	watch_init(&w1);
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.command = "sleep 30";
	sp.timeout_ms = 60000;
	uint64_t h1, h2;
	if (asp_spawn_start(c, &sp, &cb, &w1, &h1, &err))
		return fail(err.message);
	pid_t agent = agent_child();
	if (!agent || kill(agent, SIGKILL))
		return fail("no asp-agent child to kill");
	if (!wait_end(&w1, 20) || !w1.lost)
		return fail("the first follower got no on_lost within 20 s");

	/* 2. a process on the next responder */
	watch w2;
	watch_init(&w2);
	sp.command = "sleep 0.5; printf two";
	if (asp_spawn_start(c, &sp, &cb, &w2, &h2, &err))
		return fail(err.message);
	printf("old handle %" PRIu64 ", new handle %" PRIu64 "\n", h1, h2);

	/* 3. the old handle's tidy-up and wait must not touch the new process */
	asp_proc_detach(c, h1);
	asp_proc_wait_params wp;
	asp_proc_wait_params_init(&wp);
	wp.proc = h1;
	wp.timeout_ms = 10000;
	asp_proc_wait_result wr;
	asp_arena *a = asp_arena_new();
	asp_status st = asp_proc_wait(c, &wp, &wr, a, &err);
	int rc = 0;
	if (st != ASP_E_NOT_FOUND) {
		fprintf(stderr,
		        "soak_stale_handle: proc_wait of the dead responder's handle %" PRIu64
		        " gave %s (exit %" PRId64 "), want not_found\n",
		        h1, asp_strerror(st), st ? (int64_t)0 : wr.exit_code);
		rc = 1;
	}
	if (!wait_end(&w2, 20) || !w2.exited || w2.out_len != 3 || memcmp(w2.out, "two", 3)) {
		fprintf(stderr,
		        "soak_stale_handle: the new process's follower got %s, want its "
		        "exit and 'two'\n",
		        w2.exited ? "a wrong output"
		        : w2.lost ? "on_lost"
		                  : "nothing in 20 s");
		rc = 1;
	}
	asp_proc_detach(c, h2);
	asp_arena_free(a);
	asp_client_free(c);
	char rm[200];
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	if (system(rm) != 0)
		rc = 1;
	printf("soak_stale_handle: %s\n", rc ? "FAIL" : "pass");
	return rc;
}
