/*
 * What streams to a page: a process's output (proc_attach, replay first), the page's
 * terminal (spawn with tty; input, resize, hang-up) and the changes in its open folder
 * (watch). The client follows a process once, so the table of what is followed is one
 * for every page: a page that attaches to a process another page follows takes it over
 * (the other is told), except a terminal, which stays its page's. Callbacks run on the
 * client's reading thread and only queue events; entries are freed on workers, after
 * asp_proc_detach guarantees no callback runs any more.
 */
#include "ui.h"

#include "cli.h"

#include <stdlib.h>
#include <string.h>

typedef enum { F_ATTACH, F_TERMINAL, F_WATCH } follow_kind;

typedef struct follow {
	struct follow *next;
	ui_follows *owner;
	ui_conn *c;
	follow_kind kind;
	uint64_t proc;
	bool ended; /* its last callback came: nothing more will */
} follow;

struct ui_follows {
	asp_client *client;
	ui_conn *c;
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static follow *table;

/* --- callbacks ------------------------------------------------------------------------------ */

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	follow *f = user;
	char *b64 = cli_b64_encode(data, len);
	if (b64)
		ui_send_output(f->c, json_pack("{s:s, s:I, s:s, s:I, s:s}", "event", "output",
		                               "proc", (json_int_t)proc, "stream",
		                               stream == ASP_STREAM_STDERR ? "stderr" : "stdout",
		                               "offset", (json_int_t)offset, "data", b64));
	free(b64);
}

static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	follow *f = user;
	json_t *m = json_pack("{s:s, s:I, s:I, s:s?, s:b, s:s?}", "event",
	                      f->kind == F_WATCH ? "watch_end" : "exit", "proc",
	                      (json_int_t)ev->proc, "exit_code", (json_int_t)ev->exit_code,
	                      "signal", ev->signal, "timed_out", ev->timed_out, "error", ev->error);
	pthread_mutex_lock(&table_mu);
	f->ended = true;
	pthread_mutex_unlock(&table_mu);
	ui_send(f->c, m);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	follow *f = user;
	pthread_mutex_lock(&table_mu);
	f->ended = true;
	pthread_mutex_unlock(&table_mu);
	ui_send(f->c, json_pack("{s:s, s:I, s:s}", "event", "lost", "proc", (json_int_t)proc,
	                        "message", err->message));
}

static void on_fs(void *user, const asp_fs_event_event *ev)
{
	follow *f = user;
	bool lossy;
	json_t *m = json_pack(
	    "{s:s, s:I, s:o, s:s, s:s}", "event", "fs", "proc", (json_int_t)ev->proc, "path",
	    ui_string(ev->path, strlen(ev->path), &lossy), "kind", ev->kind, "type", ev->type);
	if (ev->old_path)
		json_object_set_new(m, "old_path",
		                    ui_string(ev->old_path, strlen(ev->old_path), &lossy));
	ui_send_output(f->c, m);
}

static const asp_proc_callbacks callbacks = {
    .on_output = on_output, .on_exit = on_exit_cb, .on_lost = on_lost, .on_fs_event = on_fs};

/* --- the table ------------------------------------------------------------------------------- */

static follow *follow_new(ui_follows *o, follow_kind kind)
{
	follow *f = calloc(1, sizeof *f);
	if (f) {
		f->owner = o;
		f->c = o->c;
		f->kind = kind;
	}
	return f;
}

static void table_add(follow *f)
{
	pthread_mutex_lock(&table_mu);
	f->next = table;
	table = f;
	pthread_mutex_unlock(&table_mu);
}

/* Takes the first entry matching out of the table (the caller detaches and frees it). */
static follow *table_take(ui_follows *owner, int kind, uint64_t proc, bool any_proc)
{
	pthread_mutex_lock(&table_mu);
	follow *f = NULL;
	for (follow **pp = &table; *pp; pp = &(*pp)->next) {
		follow *e = *pp;
		if ((!owner || e->owner == owner) && (kind < 0 || (int)e->kind == kind) &&
		    (any_proc || e->proc == proc)) {
			*pp = e->next;
			f = e;
			break;
		}
	}
	pthread_mutex_unlock(&table_mu);
	return f;
}

static asp_status send_signal(asp_client *cl, uint64_t proc, const char *sig, asp_error *err)
{
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = sig;
	asp_proc_signal_result r;
	asp_status st = asp_proc_signal(cl, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

/* Ends an entry taken from the table: a terminal is hung up, a watch closed; then freed. */
static void follow_end(asp_client *cl, follow *f)
{
	asp_error err;
	if (!f->ended && f->kind != F_ATTACH)
		send_signal(cl, f->proc, f->kind == F_TERMINAL ? "HUP" : "KILL", &err);
	asp_proc_detach(cl, f->proc);
	free(f);
}

/* --- ops ---------------------------------------------------------------------------------------
 */

static uint64_t proc_arg(json_t *req)
{
	json_t *v = json_object_get(req, "proc");
	return json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v)
	                                                        : 0;
}

static void op_attach(ui_follows *o, json_t *id, json_t *req)
{
	uint64_t proc = proc_arg(req);
	pthread_mutex_lock(&table_mu);
	follow *held = NULL;
	for (follow *e = table; e; e = e->next)
		if (e->proc == proc && e->kind == F_TERMINAL && e->owner != o && !e->ended)
			held = e;
	pthread_mutex_unlock(&table_mu);
	if (held) {
		ui_reply_error(o->c, id, "invalid_argument",
		               "process %llu is the terminal of another page",
		               (unsigned long long)proc);
		return;
	}
	/* whoever follows it (this page before, another page) lets go first */
	for (follow *f; (f = table_take(NULL, -1, proc, false));) {
		if (f->owner != o && !f->ended)
			ui_send(f->c, json_pack("{s:s, s:I, s:s}", "event", "lost", "proc",
			                        (json_int_t)proc, "message",
			                        "another page follows this process now"));
		asp_proc_detach(o->client, f->proc);
		free(f);
	}
	follow *f = follow_new(o, F_ATTACH);
	if (!f) {
		ui_reply_error(o->c, id, "internal", "out of memory");
		return;
	}
	f->proc = proc;
	table_add(f); /* before: the replay's callbacks run inside the call */
	asp_proc_attach_params p;
	asp_proc_attach_params_init(&p);
	p.proc = proc;
	asp_error err;
	/* the answer goes after the replay: the page knows the output it has is all of it */
	if (asp_proc_attach_start(o->client, &p, &callbacks, f, &err) != ASP_OK) {
		follow *g = table_take(o, F_ATTACH, proc, false);
		free(g);
		ui_reply_asp(o->c, id, &err);
		return;
	}
	ui_reply(o->c, id, NULL);
}

/* detach, term_close: this page's entry of that kind for the process ends. */
static void op_end(ui_follows *o, json_t *id, json_t *req, follow_kind kind)
{
	follow *f = table_take(o, (int)kind, proc_arg(req), false);
	if (f)
		follow_end(o->client, f);
	ui_reply(o->c, id, NULL);
}

static void op_signal(ui_follows *o, json_t *id, json_t *req)
{
	json_t *sig = json_object_get(req, "signal");
	if (!json_is_string(sig)) {
		ui_reply_error(o->c, id, "invalid_argument", "`signal` must be a name (TERM, ...)");
		return;
	}
	asp_error err;
	asp_status st = send_signal(o->client, proc_arg(req), json_string_value(sig), &err);
	ui_reply_status(o->c, id, st, &err, NULL);
}

static unsigned size_arg(json_t *req, const char *key, unsigned dflt)
{
	json_t *v = json_object_get(req, key);
	json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
	return n >= 1 && n <= 4096 ? (unsigned)n : dflt;
}

/* Spawns `p` followed by this page (`kind`): *proc gets its handle. */
static bool spawn_followed(ui_follows *o, json_t *id, const asp_spawn_params *p, follow_kind kind,
                           uint64_t *proc)
{
	follow *f = follow_new(o, kind);
	if (!f) {
		ui_reply_error(o->c, id, "internal", "out of memory");
		return false;
	}
	/* in the table before the call: callbacks reach the entry through their user pointer,
	 * its proc is set from the answer */
	table_add(f);
	asp_error err;
	if (asp_spawn_start(o->client, p, &callbacks, f, proc, &err) != ASP_OK) {
		pthread_mutex_lock(&table_mu);
		for (follow **pp = &table; *pp; pp = &(*pp)->next)
			if (*pp == f) {
				*pp = f->next;
				break;
			}
		pthread_mutex_unlock(&table_mu);
		free(f);
		ui_reply_asp(o->c, id, &err);
		return false;
	}
	pthread_mutex_lock(&table_mu);
	f->proc = *proc;
	pthread_mutex_unlock(&table_mu);
	return true;
}

static void op_term_open(ui_follows *o, json_t *id, json_t *req)
{
	static const char *const argv[] = {"/bin/sh", "-c", cli_login_script};
	asp_tty tty = {.rows = size_arg(req, "rows", 24),
	               .cols = size_arg(req, "cols", 80),
	               .term = "xterm-256color"};
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.has_argv = true;
	p.argv.items = argv;
	p.argv.count = 3;
	p.tag = "asp ui terminal";
	p.tty = &tty;
	uint64_t proc;
	if (spawn_followed(o, id, &p, F_TERMINAL, &proc))
		ui_reply(o->c, id, json_pack("{s:I}", "proc", (json_int_t)proc));
}

/* run: a command through sh -c, its output to this page. */
static void op_run(ui_follows *o, json_t *id, json_t *req)
{
	json_t *cmd = json_object_get(req, "command");
	if (!json_is_string(cmd) || !*json_string_value(cmd)) {
		ui_reply_error(o->c, id, "invalid_argument",
		               "`command` must be a non-empty string");
		return;
	}
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = json_string_value(cmd);
	p.tag = "asp ui";
	p.stdin_eof = true;
	uint64_t proc;
	if (spawn_followed(o, id, &p, F_ATTACH, &proc))
		ui_reply(o->c, id, json_pack("{s:I}", "proc", (json_int_t)proc));
}

static void op_term_input(ui_follows *o, json_t *id, json_t *req)
{
	json_t *data = json_object_get(req, "data");
	if (!json_is_string(data)) {
		ui_reply_error(o->c, id, "invalid_argument", "`data` must be text");
		return;
	}
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = proc_arg(req);
	p.data.data = (const uint8_t *)json_string_value(data);
	p.data.len = json_string_length(data);
	asp_proc_write_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = a ? asp_proc_write(o->client, &p, &r, a, &err)
	                  : asp_error_set(&err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_arena_free(a);
	ui_reply_status(o->c, id, st, &err, NULL);
}

static void op_term_resize(ui_follows *o, json_t *id, json_t *req)
{
	asp_proc_resize_params p;
	asp_proc_resize_params_init(&p);
	p.proc = proc_arg(req);
	p.rows = size_arg(req, "rows", 24);
	p.cols = size_arg(req, "cols", 80);
	asp_proc_resize_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = a ? asp_proc_resize(o->client, &p, &r, a, &err)
	                  : asp_error_set(&err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_arena_free(a);
	ui_reply_status(o->c, id, st, &err, NULL);
}

static void op_watch(ui_follows *o, json_t *id, json_t *req)
{
	json_t *path = json_object_get(req, "path");
	if (!json_is_string(path)) {
		ui_reply_error(o->c, id, "invalid_argument", "`path` must be a string");
		return;
	}
	/* one open folder per page: the one before is closed */
	for (follow *old; (old = table_take(o, F_WATCH, 0, true));)
		follow_end(o->client, old);
	follow *f = follow_new(o, F_WATCH);
	if (!f) {
		ui_reply_error(o->c, id, "internal", "out of memory");
		return;
	}
	asp_watch_params p;
	asp_watch_params_init(&p);
	p.path = json_string_value(path);
	p.tag = "asp ui";
	asp_error err;
	table_add(f);
	uint64_t proc;
	if (asp_watch_start(o->client, &p, &callbacks, f, &proc, &err) != ASP_OK) {
		follow *g = table_take(o, F_WATCH, 0, true);
		free(g);
		ui_reply_asp(o->c, id, &err);
		return;
	}
	pthread_mutex_lock(&table_mu);
	f->proc = proc;
	pthread_mutex_unlock(&table_mu);
	ui_reply(o->c, id, json_pack("{s:I}", "proc", (json_int_t)proc));
}

static void op_unwatch(ui_follows *o, json_t *id)
{
	for (follow *f; (f = table_take(o, F_WATCH, 0, true));)
		follow_end(o->client, f);
	ui_reply(o->c, id, NULL);
}

/* --- the page's set --------------------------------------------------------------------------- */

ui_follows *ui_follows_new(asp_client *client, ui_conn *c)
{
	ui_follows *o = calloc(1, sizeof *o);
	if (o) {
		o->client = client;
		o->c = c;
	}
	return o;
}

bool ui_follows_handle(ui_follows *o, const char *op, json_t *id, json_t *req)
{
	if (!strcmp(op, "attach"))
		op_attach(o, id, req);
	else if (!strcmp(op, "detach"))
		op_end(o, id, req, F_ATTACH);
	else if (!strcmp(op, "signal"))
		op_signal(o, id, req);
	else if (!strcmp(op, "run"))
		op_run(o, id, req);
	else if (!strcmp(op, "term_open"))
		op_term_open(o, id, req);
	else if (!strcmp(op, "term_input"))
		op_term_input(o, id, req);
	else if (!strcmp(op, "term_resize"))
		op_term_resize(o, id, req);
	else if (!strcmp(op, "term_close"))
		op_end(o, id, req, F_TERMINAL);
	else if (!strcmp(op, "watch"))
		op_watch(o, id, req);
	else if (!strcmp(op, "unwatch"))
		op_unwatch(o, id);
	else
		return false;
	return true;
}

void ui_follows_free(ui_follows *o)
{
	if (!o)
		return;
	for (follow *f; (f = table_take(o, -1, 0, true));)
		follow_end(o->client, f);
	free(o);
}
