/*
 * The session a tools handle works for (docs/tools.md, "Sessions"): the tag and the
 * environment variable its commands carry, the table rebuilt from proc_list when a
 * harness starts again, and bash_list, which shows the session's commands to a model
 * whose context no longer holds their ids.
 */
#include "shared.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SESSION_MARK " session="

bool asp_tools_set_session(asp_tools *t, const char *session)
{
	free(t->session);
	t->session = session && *session ? strdup(session) : NULL;
	return !session || !*session || t->session;
}

const char *asp_tools_notice(const asp_tools *t)
{
	/* hello once: the handle is the caller's, only its hello fields are filled in */
	asp_error err;
	bool reattach = tools_hello((asp_tools *)t, &err) == ASP_OK && t->reattach;
	return reattach
	           ? NULL
	           : "Background commands end when this connection to the sandbox closes: its "
	             "responder does not keep processes for another connection (its hello lists "
	             "no reattach), so they do not outlive this tool server.";
}

char *tools_tag(const asp_tools *t, const char *what)
{
	tbuf b = {0};
	tb_puts(&b, what);
	if (t->session) {
		tb_puts(&b, SESSION_MARK);
		tb_puts(&b, t->session);
	}
	return tb_take(&b);
}

size_t tools_env(const asp_tools *t, const asp_strmap_entry *base, size_t n, asp_strmap_entry *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = base[i];
	if (t->session)
		out[n++] = (asp_strmap_entry){"ASP_SESSION", t->session};
	return n;
}

/*
 * What kind of this layer's command `tag` names, when it belongs to the handle's session
 * (a handle without one: commands tagged without a session); NULL otherwise.
 */
static const char *session_kind(const asp_tools *t, const char *tag)
{
	static const char *const kinds[] = {TOOLS_TAG_BACKGROUND, TOOLS_TAG_EXEC, TOOLS_TAG_BASH};
	if (!tag)
		return NULL;
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		size_t n = strlen(kinds[i]);
		if (strncmp(tag, kinds[i], n) != 0)
			continue;
		const char *rest = tag + n;
		if (!t->session)
			return *rest ? NULL : kinds[i];
		if (strncmp(rest, SESSION_MARK, strlen(SESSION_MARK)) != 0)
			return NULL;
		return strcmp(rest + strlen(SESSION_MARK), t->session) == 0 ? kinds[i] : NULL;
	}
	return NULL;
}

/*
 * The command as the model gave it, from proc_list's shell-quoted argv of this layer's
 * spawns ("bash -c 'exec 2>&1\nCMD'", "bash -lc 'CMD'"): the last word unquoted, bash's
 * redirection line dropped. NULL (show the raw command) when it is not in that form.
 */
static char *model_command(const char *quoted)
{
	const char *p = strrchr(quoted, ' ');
	/* the last word may itself hold spaces: find the start of its quoting instead */
	const char *q = strstr(quoted, " '");
	if (q)
		p = q;
	if (!p)
		return NULL;
	p++;
	tbuf b = {0};
	while (*p) {
		if (*p == '\'') {
			const char *end = strchr(p + 1, '\'');
			if (!end) {
				tb_free(&b);
				return NULL;
			}
			tb_add(&b, p + 1, (size_t)(end - p - 1));
			p = end + 1;
		} else if (*p == '\\' && p[1]) {
			tb_add(&b, p + 1, 1);
			p += 2;
		} else if (*p == ' ') {
			tb_free(&b);
			return NULL;
		} else {
			tb_add(&b, p++, 1);
		}
	}
	char *s = tb_take(&b);
	static const char redirect[] = "exec 2>&1\n";
	if (s && !strncmp(s, redirect, sizeof redirect - 1))
		memmove(s, s + sizeof redirect - 1, strlen(s) - (sizeof redirect - 1) + 1);
	return s;
}

/* proc_list into `a`; the session's entries are those session_kind names. */
static asp_status list_procs(asp_tools *t, asp_proc_list_result *r, asp_arena *a, asp_error *err)
{
	asp_proc_list_params p;
	asp_proc_list_params_init(&p);
	return asp_proc_list(t->c, &p, r, a, err);
}

asp_status asp_tools_resume(asp_tools *t, size_t *found, asp_error *err)
{
	*found = 0;
	if (!t->session)
		return ASP_OK;
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_proc_list_result r;
	asp_status st = list_procs(t, &r, a, err);
	for (size_t i = 0; st == ASP_OK && i < r.procs.count; i++) {
		const asp_proc_info *pi = &r.procs.items[i];
		const char *kind = session_kind(t, pi->tag);
		if (!pi->running || !kind)
			continue;
		tools_proc *p;
		asp_error e2;
		/* follows it from the start the responder holds, as bash_output would */
		if (tools_proc_get(t, pi->proc, !strcmp(kind, TOOLS_TAG_EXEC), &p, &e2) == ASP_OK) {
			tools_proc_put(p);
			++*found;
		}
	}
	asp_arena_free(a);
	return st;
}

bool tool_bash_list(asp_tools *t, json_t *args, tresult *r, asp_tools_cancel *k)
{
	(void)args, (void)k;
	asp_arena *a = asp_arena_new();
	if (!a)
		return tools_fail(r, "Error: out of memory.");
	asp_proc_list_result pl;
	asp_error err;
	if (list_procs(t, &pl, a, &err) != ASP_OK) {
		asp_arena_free(a);
		if (err.code == ASP_E_UNSUPPORTED)
			return tools_fail(r, "Error: this sandbox's transport cannot list its "
			                     "commands (no proc_list).");
		return tools_fail_asp(r, &err, "listing the commands", "");
	}
	size_t shown = 0;
	for (size_t i = 0; i < pl.procs.count; i++) {
		const asp_proc_info *pi = &pl.procs.items[i];
		const char *kind = session_kind(t, pi->tag);
		if (!kind)
			continue;
		if (!shown++)
			tb_printf(&r->text, "Commands of %s%s:\n",
			          t->session ? "session " : "this tool server",
			          t->session ? t->session : "");
		char state[64];
		if (pi->running)
			snprintf(state, sizeof state, "running");
		else if (pi->signal)
			snprintf(state, sizeof state, "killed by signal %s", pi->signal);
		else
			snprintf(state, sizeof state, "exited with code %" PRId64,
			         pi->has_exit_code ? pi->exit_code : 0);
		char *cmd = model_command(pi->command);
		if (!strcmp(kind, TOOLS_TAG_EXEC))
			tb_printf(&r->text, "session ID %" PRIu64 " (exec_command, %s): %s\n",
			          pi->proc, state, cmd ? cmd : pi->command);
		else
			tb_printf(&r->text, "bash_%" PRIu64 " (%s%s): %s\n", pi->proc, state,
			          !strcmp(kind, TOOLS_TAG_BASH) ? ", foreground" : "",
			          cmd ? cmd : pi->command);
		free(cmd);
	}
	asp_arena_free(a);
	if (!shown)
		tb_printf(&r->text, "No commands of %s%s are known to the sandbox.",
		          t->session ? "session " : "this tool server",
		          t->session ? t->session : "");
	else
		tb_puts(&r->text,
		        "bash_output reads a bash_N's output (from its start after a "
		        "restart), kill_bash stops it; write_stdin continues a session ID.");
	const char *note = asp_tools_notice(t);
	if (note)
		tb_printf(&r->text, "\nNote: %s", note);
	return true;
}
