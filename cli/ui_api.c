/*
 * One page's requests: {"id": N, "op": NAME, ...} in, {"id": N, "result": {...}} or
 * {"id": N, "error": {"code", "message"}} out. hello, procs and sessions are here; files
 * and what follows a process or a folder have files of their own.
 */
#include "ui.h"

#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

struct ui_page {
	asp_client *client;
	ui_conn *c;
	ui_uploads *uploads;
	ui_follows *follows;
};

/* --- answers ------------------------------------------------------------------------------ */

void ui_reply(ui_conn *c, json_t *id, json_t *result)
{
	ui_send(c, json_pack("{s:O, s:o}", "id", id, "result", result ? result : json_object()));
}

void ui_reply_error(ui_conn *c, json_t *id, const char *code, const char *fmt, ...)
{
	char msg[ASP_ERROR_MESSAGE_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	bool lossy;
	ui_send(c, json_pack("{s:O, s:{s:s, s:o}}", "id", id, "error", "code", code, "message",
	                     ui_string(msg, strlen(msg), &lossy)));
}

void ui_reply_asp(ui_conn *c, json_t *id, const asp_error *err)
{
	ui_reply_error(c, id, asp_strerror(err->code), "%s", err->message);
}

void ui_reply_status(ui_conn *c, json_t *id, asp_status st, const asp_error *err, json_t *result)
{
	if (st == ASP_OK) {
		ui_reply(c, id, result);
	} else {
		json_decref(result);
		ui_reply_asp(c, id, err);
	}
}

json_t *ui_string(const char *s, size_t len, bool *lossy)
{
	*lossy = !cli_utf8_valid((const uint8_t *)s, len);
	if (!*lossy)
		return json_stringn(s, len);
	/* each byte that is not part of a valid sequence becomes U+FFFD */
	char *out = malloc(len * 3 + 1);
	if (!out)
		return json_string("");
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		size_t n = 1;
		unsigned char b = (unsigned char)s[i];
		if (b >= 0xc2 && b <= 0xf4)
			n = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
		if (b < 0x80 || (i + n <= len && cli_utf8_valid((const uint8_t *)s + i, n))) {
			memcpy(out + o, s + i, b < 0x80 ? 1 : n);
			o += b < 0x80 ? 1 : n;
			i += b < 0x80 ? 1 : n;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	json_t *j = json_stringn(out, o);
	free(out);
	return j ? j : json_string("");
}

/* --- hello: what the sandbox and this page can do --------------------------------------------- */

static json_t *strv(const asp_strv *v)
{
	json_t *a = json_array();
	for (size_t i = 0; i < v->count; i++)
		json_array_append_new(a, json_string(v->items[i]));
	return a;
}

static json_t *transport_of(asp_client *client)
{
	const asp_config_view *v = asp_client_config(client);
	char text[512];
	switch (v->transport) {
	case ASP_TRANSPORT_STDIO:
		snprintf(text, sizeof text, "stdio (%s)", v->stdio.argc ? v->stdio.argv[0] : "");
		break;
	case ASP_TRANSPORT_SSH:
		snprintf(text, sizeof text, "ssh %s%s%s:%u (%s)", v->ssh.user ? v->ssh.user : "",
		         v->ssh.user ? "@" : "", v->ssh.host ? v->ssh.host : "", v->ssh.port,
		         v->ssh.agent ? "agent mode" : "native");
		break;
	case ASP_TRANSPORT_HTTP: snprintf(text, sizeof text, "http %s", v->http.url); break;
	default: snprintf(text, sizeof text, "transport %d", (int)v->transport); break;
	}
	bool lossy;
	return ui_string(text, strlen(text), &lossy);
}

static void op_hello(ui_page *p, json_t *id)
{
	asp_arena *a = asp_arena_new();
	asp_hello_params hp;
	asp_hello_params_init(&hp);
	hp.client = "asp ui " ASP_VERSION;
	asp_hello_result hr;
	asp_error err;
	asp_status st =
	    a ? asp_hello(p->client, &hp, &hr, a, &err) : asp_error_oom(&err, "asp ui", NULL);
	if (st != ASP_OK) {
		ui_reply_asp(p->c, id, &err);
		asp_arena_free(a);
		return;
	}
	/* the directory the page opens first: the config's cwd, relative to the start dir */
	const char *ccwd = asp_client_config(p->client)->cwd;
	char home[4096];
	if (ccwd && ccwd[0] == '/')
		snprintf(home, sizeof home, "%s", ccwd);
	else
		snprintf(home, sizeof home, "%s%s%s", hr.cwd, ccwd ? "/" : "", ccwd ? ccwd : "");
	char *norm = asp_path_normalize(home);
	const char *why = NULL;
	bool term = ui_terminal_built(&why);
	json_t *r = json_pack(
	    "{s:s, s:s, s:o, s:s, s:s, s:s, s:I, s:o, s:o, s:s?, s:o, s:{s:b, s:s?}}", "asp",
	    ASP_VERSION, "agent", hr.agent, "transport", transport_of(p->client), "os", hr.os,
	    "arch", hr.arch, "cwd", hr.cwd, "max_message", (json_int_t)hr.max_message, "ops",
	    strv(&hr.ops), "features", hr.has_features ? strv(&hr.features) : json_array(), "home",
	    norm ? norm : home, "config",
	    json_string(asp_client_config(p->client)->path ? asp_client_config(p->client)->path
	                                                   : ""),
	    "xterm", "built", term, "why", why);
	free(norm);
	asp_arena_free(a);
	ui_reply(p->c, id, r);
}

/* --- procs: proc_list with each process's session -------------------------------------------- */

/* The session a tag names (" session=NAME", docs/tools.md, "Sessions"), or NULL. */
static json_t *tag_session(const char *tag)
{
	const char *s = tag ? strstr(tag, " session=") : NULL;
	bool lossy;
	return s ? ui_string(s + 9, strlen(s + 9), &lossy) : json_null();
}

static void op_procs(ui_page *p, json_t *id)
{
	asp_arena *a = asp_arena_new();
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	asp_error err;
	asp_status st =
	    a ? asp_proc_list(p->client, &lp, &lr, a, &err) : asp_error_oom(&err, "asp ui", NULL);
	if (st != ASP_OK) {
		ui_reply_asp(p->c, id, &err);
		asp_arena_free(a);
		return;
	}
	json_t *list = json_array();
	for (size_t i = 0; i < lr.procs.count; i++) {
		const asp_proc_info *pi = &lr.procs.items[i];
		bool lossy;
		json_t *e =
		    json_pack("{s:I, s:o, s:o, s:b, s:o}", "proc", (json_int_t)pi->proc, "tag",
		              pi->tag ? ui_string(pi->tag, strlen(pi->tag), &lossy) : json_null(),
		              "command", ui_string(pi->command, strlen(pi->command), &lossy),
		              "running", pi->running, "session", tag_session(pi->tag));
		if (pi->has_exit_code)
			json_object_set_new(e, "exit_code", json_integer(pi->exit_code));
		if (pi->signal)
			json_object_set_new(e, "signal", json_string(pi->signal));
		json_array_append_new(list, e);
	}
	asp_arena_free(a);
	ui_reply(p->c, id, json_pack("{s:o}", "procs", list));
}

/*
 * sessions: every process in the sandbox whose environment carries ASP_SESSION, found by
 * one exec of sh over /proc (a Linux sandbox), with its parent, so the page can show one
 * line per command rather than per child. This sees the commands of connections whose
 * processes proc_list here cannot show (each stdio responder has a table of its own).
 */
static const char sessions_script[] =
    "for f in $(grep -l -s -z '^ASP_SESSION=' /proc/[0-9]*/environ); do\n"
    "  d=${f%/environ}\n"
    "  s=$(tr '\\0' '\\n' < \"$f\" 2>/dev/null | sed -n 's/^ASP_SESSION=//p' | head -n 1)\n"
    "  pp=$(sed 's/.*) [A-Za-z] \\([0-9]*\\).*/\\1/' \"$d/stat\" 2>/dev/null)\n"
    "  c=$(tr '\\0\\n\\t' '   ' < \"$d/cmdline\" 2>/dev/null)\n"
    "  [ -n \"$s\" ] && [ -n \"$c\" ] && printf '%s\\t%s\\t%s\\t%s\\n' \"${d#/proc/}\" \"$pp\" "
    "\"$s\" \"$c\"\n"
    "done; exit 0\n";

static void op_sessions(ui_page *p, json_t *id)
{
	static const char *const argv[] = {"/bin/sh", "-c", sessions_script};
	asp_exec_params ep;
	asp_exec_params_init(&ep);
	ep.has_argv = true;
	ep.argv.items = argv;
	ep.argv.count = 3;
	ep.max_output = 1u << 20;
	ep.timeout_ms = 20000;
	asp_exec_result er;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st =
	    a ? asp_exec(p->client, &ep, &er, a, &err) : asp_error_oom(&err, "asp ui", NULL);
	if (st != ASP_OK) {
		ui_reply_asp(p->c, id, &err);
		asp_arena_free(a);
		return;
	}
	/* lines of pid, ppid, session, command; a child whose parent has the same session is
	 * part of its parent's command */
	char *text = strndup((const char *)er.stdout_data.data, er.stdout_data.len);
	json_t *all = json_object(), *list = json_array();
	for (char *save = NULL, *l = text ? strtok_r(text, "\n", &save) : NULL; l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *f[4] = {l, NULL, NULL, NULL};
		for (int i = 1; i < 4 && f[i - 1]; i++)
			if ((f[i] = strchr(f[i - 1], '\t')))
				*f[i]++ = '\0';
		if (!f[3])
			continue;
		bool lossy;
		json_object_set_new(all, f[0],
		                    json_pack("{s:s, s:o, s:o}", "ppid", f[1], "session",
		                              ui_string(f[2], strlen(f[2]), &lossy), "command",
		                              ui_string(f[3], strlen(f[3]), &lossy)));
	}
	const char *pid;
	json_t *e;
	json_object_foreach(all, pid, e)
	{
		json_t *parent =
		    json_object_get(all, json_string_value(json_object_get(e, "ppid")));
		if (parent &&
		    json_equal(json_object_get(parent, "session"), json_object_get(e, "session")))
			continue;
		json_array_append_new(list, json_pack("{s:i, s:O, s:O}", "pid", atoi(pid),
		                                      "session", json_object_get(e, "session"),
		                                      "command", json_object_get(e, "command")));
	}
	json_decref(all);
	free(text);
	asp_arena_free(a);
	ui_reply(p->c, id, json_pack("{s:o}", "commands", list));
}

/* --- the page --------------------------------------------------------------------------------- */

ui_page *ui_page_new(asp_client *client, ui_conn *c)
{
	ui_page *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->client = client;
	p->c = c;
	p->uploads = ui_uploads_new();
	p->follows = ui_follows_new(client, c);
	if (!p->uploads || !p->follows) {
		ui_page_free(p);
		return NULL;
	}
	return p;
}

void ui_page_handle(ui_page *p, json_t *req)
{
	json_t *id = json_object_get(req, "id");
	json_t *jop = json_object_get(req, "op");
	if (!id)
		id = json_null();
	if (!json_is_string(jop)) {
		ui_reply_error(p->c, id, "invalid_argument", "a request needs a string `op`");
		return;
	}
	const char *op = json_string_value(jop);
	if (!strcmp(op, "hello"))
		op_hello(p, id);
	else if (!strcmp(op, "procs"))
		op_procs(p, id);
	else if (!strcmp(op, "sessions"))
		op_sessions(p, id);
	else if (!ui_files_handle(p->client, p->c, p->uploads, op, id, req) &&
	         !ui_follows_handle(p->follows, op, id, req))
		ui_reply_error(p->c, id, "invalid_argument", "no op is called `%s`", op);
}

void ui_page_free(ui_page *p)
{
	if (!p)
		return;
	ui_follows_free(p->follows);
	ui_uploads_free(p->client, p->uploads);
	free(p);
}
