/*
 * asp watch PATH [-r]: the sandbox's file changes under PATH (watch, docs/design.md,
 * "Ports and changes"), one JSON line each on stdout, until INT, TERM or HUP (which close
 * the watch) or PATH's removal. The lines are written from the client's reading thread:
 * a reader of our stdout that stalls holds the sandbox's watcher back, whose queue then
 * overflows into an "overflow" line rather than growing memory anywhere.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define CLOSE_WAIT_MS 10000 /* after a signal, the watch's exit at most this long */

static int wake_pipe[2] = {-1, -1};

typedef struct watch_run {
	bool ended, lost, out_gone;
	int64_t exit_code;
	char error[ASP_ERROR_MESSAGE_MAX];
} watch_run;

static void on_fs_event(void *user, const asp_fs_event_event *ev)
{
	watch_run *w = user;
	if (w->out_gone)
		return;
	jw j;
	jw_init(&j, stdout);
	jw_obj_begin(&j);
	jw_bytes_field(&j, "path", (const uint8_t *)ev->path, strlen(ev->path));
	jw_key(&j, "kind");
	jw_str(&j, ev->kind);
	jw_key(&j, "type");
	jw_str(&j, ev->type);
	if (ev->old_path)
		jw_bytes_field(&j, "old_path", (const uint8_t *)ev->old_path, strlen(ev->old_path));
	jw_obj_end(&j);
	jw_end(&j);
	if (fflush(stdout) != 0) { /* the reader went away: end as a closed pipe would */
		w->out_gone = true;
		ssize_t r = write(wake_pipe[1], "o", 1);
		(void)r;
	}
}

static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	watch_run *w = user;
	w->exit_code = ev->exit_code;
	if (ev->error)
		snprintf(w->error, sizeof w->error, "%s", ev->error);
	w->ended = true; /* read by the main thread after the pipe's byte */
	ssize_t r = write(wake_pipe[1], "e", 1);
	(void)r;
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	watch_run *w = user;
	snprintf(w->error, sizeof w->error, "%s", err->message);
	w->lost = true;
	ssize_t r = write(wake_pipe[1], "l", 1);
	(void)r;
}

/* Waits for a byte of the pipe for at most `ms` (-1: no limit); the byte, or 0. */
static char wait_wake(int ms)
{
	for (;;) {
		struct pollfd pfd = {wake_pipe[0], POLLIN, 0};
		int n = poll(&pfd, 1, ms);
		if (n < 0 && errno == EINTR)
			continue;
		char b = 0;
		if (n > 0 && read(wake_pipe[0], &b, 1) == 1)
			return b;
		return 0;
	}
}

int cmd_watch(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"recursive", no_argument, NULL, 'r'},
	    {NULL, 0, NULL, 0},
	};
	asp_watch_params p;
	asp_watch_params_init(&p);
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "hr", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case 'r': p.recursive = true; break;
		default: return c->fail_code;
		}
	}
	if (optind + 1 != argc)
		return cli_usage(c, "give one PATH to watch");
	p.path = argv[optind];
	p.tag = "watch";
	asp_client *client = cli_client(c);
	if (!client)
		return c->fail_code;
	if (wake_pipe[0] < 0 && pipe2(wake_pipe, O_CLOEXEC) < 0)
		return cli_fail_errno(c, errno, "watch");
	struct sigaction old[CLI_STOP_SIGNALS];
	cli_stop_signals_catch(wake_pipe[1], old);
	static const asp_proc_callbacks cb = {
	    .on_exit = on_exit_cb,
	    .on_lost = on_lost,
	    .on_fs_event = on_fs_event,
	};
	watch_run w = {0};
	uint64_t proc = 0;
	asp_error err;
	int rc = CLI_EXIT_OK;
	if (asp_watch_start(client, &p, &cb, &w, &proc, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "watch %s", p.path);
		goto out;
	}
	char b = wait_wake(-1);
	if (b == 's' || b == 'o') {
		/* Close the watch; its exit ends the callbacks. */
		asp_arena *a = asp_arena_new();
		if (a) {
			asp_proc_signal_params sp;
			asp_proc_signal_params_init(&sp);
			sp.proc = proc;
			sp.signal = "KILL";
			asp_proc_signal_result sr;
			asp_proc_signal(client, &sp, &sr, a, &err);
			asp_arena_free(a);
		}
		while (b && b != 'e' && b != 'l')
			b = wait_wake(CLOSE_WAIT_MS);
		if (b != 'e' && b != 'l')
			asp_proc_detach(client, proc);
	} else if (b == 'l') {
		asp_error_set(&err, ASP_E_TRANSPORT_ERROR, NULL, "%s", w.error);
		rc = cli_fail(c, &err, "watch %s", p.path);
	} else if (b == 'e' && w.exit_code > 0) {
		asp_error_set(&err, ASP_E_IO_ERROR, NULL, "the watch ended: %s",
		              w.error[0] ? w.error : "a failure in the sandbox");
		rc = cli_fail(c, &err, "watch %s", p.path);
	}
out:
	cli_stop_signals_restore(old);
	return cli_finish(c, rc);
}
