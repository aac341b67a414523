/*
 * The SSH transport as libasp sees it: open (connect; native or agent mode), the op
 * table of native mode, hello, and the asp_transport registered with the core.
 */
#include "asp_ssh.h"
#include "ssh_internal.h"
#include "ssh_sftp.h"

#include "asp/channel.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ASP_VERSION
#define ASP_VERSION "dev"
#endif

typedef struct asp_ssh {
	sshc c;
	sftpc *sftp;          /* native mode */
	ssh_procs *procs;     /* native mode: spawned processes */
	ssh_trees *trees;     /* native mode: tree_write and tree_read handles among them */
	ssh_agent_link *link; /* agent mode */
	size_t budget;        /* bytes of data one result may carry */
	pthread_mutex_t hello_mu;
	bool hello_done;
	char os[64], arch[64];
	char *cwd;
	char upload_path[96]; /* agent "upload": where the responder was copied */
} asp_ssh;

/* What native mode announces: its table's slots before asp_ops_complete (ops_init). */
static const char *native_names[ASP_OP_COUNT];
static size_t native_count;

/* uname and the login directory, once per connection: one exec (*fresh: this call's). */
static asp_status learn_host(asp_ssh *t, bool *fresh, asp_error *err)
{
	asp_status st = ASP_OK;
	*fresh = false;
	pthread_mutex_lock(&t->hello_mu);
	if (t->hello_done)
		goto out;
	asp_arena *a = asp_arena_new();
	if (!a) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "hello: out of memory");
		goto out;
	}
	asp_exec_params p;
	asp_exec_params_init(&p);
	p.command = "uname -s; uname -m; pwd";
	p.max_output = 64 * 1024;
	p.timeout_ms = 30000;
	asp_exec_result r;
	st = ssh_exec_run(&t->c, &p, t->budget, &r, a, err);
	if (st == ASP_OK && (r.exit_code != 0 || r.timed_out))
		st = asp_error_set(
		    err, ASP_E_IO_ERROR, NULL,
		    "hello: ssh %s: 'uname -s; uname -m; pwd' failed (exit %lld): %.*s",
		    t->c.target, (long long)r.exit_code,
		    (int)(r.stderr_data.len > 200 ? 200 : r.stderr_data.len),
		    (const char *)r.stderr_data.data);
	if (st == ASP_OK) {
		/* three lines; the last (the directory) may itself hold newlines */
		const char *s = (const char *)r.stdout_data.data;
		size_t n = r.stdout_data.len;
		const char *nl1 = s ? memchr(s, '\n', n) : NULL;
		const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', n - (size_t)(nl1 + 1 - s)) : NULL;
		if (!nl2) {
			st = asp_error_set(err, ASP_E_IO_ERROR, NULL,
			                   "hello: ssh %s: unexpected output from uname and pwd",
			                   t->c.target);
		} else {
			size_t l1 = (size_t)(nl1 - s), l2 = (size_t)(nl2 - nl1 - 1);
			size_t l3 = n - (size_t)(nl2 + 1 - s);
			if (l3 > 0 && nl2[l3] == '\n')
				l3--;
			snprintf(t->os, sizeof t->os, "%.*s", (int)l1, s);
			for (char *q = t->os; *q; q++)
				*q = (char)tolower((unsigned char)*q);
			snprintf(t->arch, sizeof t->arch, "%.*s", (int)l2, nl1 + 1);
			t->cwd = strndup(nl2 + 1, l3);
			if (!t->cwd)
				st = asp_error_set(err, ASP_E_INTERNAL, NULL,
				                   "hello: out of memory");
			else
				t->hello_done = *fresh = true;
		}
	}
	asp_arena_free(a);
out:
	pthread_mutex_unlock(&t->hello_mu);
	return st;
}

static asp_status n_hello(void *self, const asp_hello_params *p, asp_hello_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)p;
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	bool fresh;
	asp_status st = learn_host(t, &fresh, err);
	if (st != ASP_OK)
		return st;
	size_t n = native_count;
	const char **ops = asp_arena_alloc(a, n * sizeof *ops);
	if (!ops)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "hello: out of memory");
	memcpy(ops, native_names, n * sizeof *ops);
	r->protocol = ASP_PROTOCOL;
	r->agent = "asp-ssh/" ASP_VERSION " (native: exec channels and sftp)";
	r->ops.items = ops;
	r->ops.count = n;
	r->os = asp_arena_strndup(a, t->os, strlen(t->os));
	r->arch = asp_arena_strndup(a, t->arch, strlen(t->arch));
	/*
	 * A round trip, so hello proves the connection works (and times it): the exec that
	 * learnt the host did, else sftp's realpath (which also sees a changed directory).
	 */
	char *here = NULL;
	asp_error e2;
	if (!fresh && ssh_sftp_realpath(t->sftp, ".", &here, &e2) != ASP_OK &&
	    atomic_load(&t->c.dead))
		return sshc_dead_error(&t->c, "hello", err);
	const char *cwd = here ? here : t->cwd;
	r->cwd = asp_arena_strndup(a, cwd, strlen(cwd));
	free(here);
	r->max_message = ASP_MAX_MESSAGE_DEFAULT;
	/*
	 * A spawn's output comes on its exec channel; it ends with this connection. Calls run
	 * at once, except execs on a Dropbear that cannot take a channel open beside a
	 * running command (fragile_open, ssh_internal.h): those run one at a time. Terminals
	 * are the channel's pty-req and window-change; connections direct-tcpip channels.
	 */
	static const char *const features[] = {"follow", "pty", "connect", "concurrent"};
	r->has_features = true;
	r->features = (asp_strv){features, t->c.fragile_open ? 3 : 4};
	if (!r->os || !r->arch || !r->cwd)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "hello: out of memory");
	return ASP_OK;
}

static asp_status n_exec(void *self, const asp_exec_params *p, asp_exec_result *r, asp_arena *a,
                         asp_error *err)
{
	asp_ssh *t = self;
	return ssh_exec_run(&t->c, p, t->budget, r, a, err);
}

static asp_status n_read(void *self, const asp_read_params *p, asp_read_result *r, asp_arena *a,
                         asp_error *err)
{
	asp_ssh *t = self;
	return ssh_sftp_read(t->sftp, p, t->budget, r, a, err);
}

static asp_status n_write(void *self, const asp_write_params *p, asp_write_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	return ssh_sftp_write(t->sftp, p, r, err);
}

/* SFTP read of the whole file, the replacement here, then write's atomic path. */
static asp_status n_edit(void *self, const asp_edit_params *p, asp_edit_result *r, asp_arena *a,
                         asp_error *err)
{
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	if (!p->path)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "edit: field 'path' is required");
	if (!p->old || !p->old[0])
		return asp_error_set(
		    err, ASP_E_INVALID_ARGUMENT, NULL,
		    "edit: 'old' must not be empty (to write a whole file use write)");
	uint8_t *buf = NULL;
	size_t n = 0;
	asp_status st = ASP_OK;
	for (;;) {
		asp_read_params rp;
		asp_read_params_init(&rp);
		rp.path = p->path;
		rp.offset = n;
		asp_read_result rr;
		if ((st = ssh_sftp_read(t->sftp, &rp, t->budget, &rr, a, err)))
			break;
		if (rr.data.len) {
			uint8_t *g = realloc(buf, n + rr.data.len);
			if (!g) {
				st =
				    asp_error_set(err, ASP_E_INTERNAL, NULL, "edit: out of memory");
				break;
			}
			buf = g;
			memcpy(buf + n, rr.data.data, rr.data.len);
			n += rr.data.len;
		}
		if (rr.eof || rr.data.len == 0)
			break;
	}
	uint8_t *out = NULL;
	size_t out_len = 0;
	uint64_t c = 0;
	if (!st)
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
	st = ssh_sftp_write(t->sftp, &wp, &wr, err);
	free(out);
	if (!st)
		r->replacements = c;
	return st;
}

static asp_status n_stat(void *self, const asp_stat_params *p, asp_stat_result *r, asp_arena *a,
                         asp_error *err)
{
	asp_ssh *t = self;
	return ssh_sftp_stat(t->sftp, p, r, a, err);
}

static asp_status n_list(void *self, const asp_list_params *p, asp_list_result *r, asp_arena *a,
                         asp_error *err)
{
	asp_ssh *t = self;
	return ssh_sftp_list(t->sftp, p, r, a, err);
}

static asp_status n_mkdir(void *self, const asp_mkdir_params *p, asp_mkdir_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	return ssh_sftp_mkdir(t->sftp, p, err);
}

static asp_status n_remove(void *self, const asp_remove_params *p, asp_remove_result *r,
                           asp_arena *a, asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	return ssh_sftp_remove(t->sftp, p, err);
}

static asp_status n_rename(void *self, const asp_rename_params *p, asp_rename_result *r,
                           asp_arena *a, asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	return ssh_sftp_rename(t->sftp, p, err);
}

static asp_status n_spawn(void *self, const asp_spawn_params *p, asp_spawn_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	return ssh_proc_spawn(t->procs, p, r, false, err); /* nobody follows it: output dropped */
}

static asp_status n_proc_write(void *self, const asp_proc_write_params *p, asp_proc_write_result *r,
                               asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_ssh *t = self;
	asp_status st;
	if (ssh_tree_proc_write(t->trees, p, &st, err))
		return st;
	return ssh_proc_write(t->procs, p, err);
}

static asp_status n_proc_signal(void *self, const asp_proc_signal_params *p,
                                asp_proc_signal_result *r, asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_ssh *t = self;
	asp_status st;
	if (ssh_tree_proc_signal(t->trees, p, &st, err))
		return st;
	return ssh_proc_signal(t->procs, p, err);
}

static asp_status n_proc_resize(void *self, const asp_proc_resize_params *p,
                                asp_proc_resize_result *r, asp_arena *a, asp_error *err)
{
	(void)a;
	(void)r;
	asp_ssh *t = self;
	return ssh_proc_resize(t->procs, p, err);
}

static asp_status n_proc_wait(void *self, const asp_proc_wait_params *p, asp_proc_wait_result *r,
                              asp_arena *a, asp_error *err)
{
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	asp_status st;
	if (ssh_tree_proc_wait(t->trees, p, r, a, &st, err))
		return st;
	return ssh_proc_wait(t->procs, p, r, a, err);
}

static asp_status n_proc_list(void *self, const asp_proc_list_params *p, asp_proc_list_result *r,
                              asp_arena *a, asp_error *err)
{
	(void)p;
	asp_ssh *t = self;
	memset(r, 0, sizeof *r);
	return ssh_proc_list(t->procs, r, a, err);
}

static asp_status n_proc_attach(void *self, const asp_proc_attach_params *p,
                                asp_proc_attach_result *r, asp_arena *a, asp_error *err)
{
	(void)self;
	(void)p;
	(void)r;
	(void)a;
	return ssh_proc_attach_unsupported(err);
}

/* Not in native hello: a search in one round trip needs a responder in the sandbox. */
#define AGENT_ONLY(name)                                                                           \
	static asp_status n_##name(void *self, const asp_##name##_params *p,                       \
	                           asp_##name##_result *r, asp_arena *a, asp_error *err)           \
	{                                                                                          \
		(void)self, (void)p, (void)r, (void)a;                                             \
		return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,                                 \
		                     #name                                                         \
		                     " needs SSH agent mode (ssh.agent: \"upload\" or a "          \
		                     "path to asp-agent); native SSH mode does not have it");      \
	}
AGENT_ONLY(glob)
AGENT_ONLY(grep)
#undef AGENT_ONLY

/* Ports and changes (docs/design.md): refused with what to do instead. */
static asp_status n_watch(void *self, const asp_watch_params *p, asp_watch_result *r, asp_arena *a,
                          asp_error *err)
{
	(void)self, (void)p, (void)r, (void)a;
	return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
	                     "watch needs SSH agent mode (ssh.agent: \"upload\" or a path to "
	                     "asp-agent): native SSH has no file watcher (SFTP cannot report "
	                     "changes, and no inotify tool is assumed on the server)");
}

/* A direct-tcpip channel, followed as a spawned process's exec channel is (ssh_proc.c). */
static asp_status n_connect(void *self, const asp_connect_params *p, asp_connect_result *r,
                            asp_arena *a, asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	return ssh_proc_connect(t->procs, p, r, false, err);
}

/* Trees through the sandbox's tar (ssh_tree.c). */
static asp_status n_tree_write(void *self, const asp_tree_write_params *p, asp_tree_write_result *r,
                               asp_arena *a, asp_error *err)
{
	(void)a;
	asp_ssh *t = self;
	return ssh_tree_write(t->trees, p, r, err);
}

/* The stream has one way out here, to its follower: asp_tree_read_start subscribes. */
static asp_status n_tree_read(void *self, const asp_tree_read_params *p, asp_tree_read_result *r,
                              asp_arena *a, asp_error *err)
{
	(void)self, (void)p, (void)r, (void)a;
	return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
	                     "tree_read over native SSH goes to its follower from the start: "
	                     "call asp_tree_read_start (or asp_tree_download), not the plain "
	                     "op");
}

static asp_ops native_ops = {
    .hello = n_hello,
    .exec = n_exec,
    .read = n_read,
    .write = n_write,
    .stat = n_stat,
    .list = n_list,
    .mkdir = n_mkdir,
    .remove = n_remove,
    .rename = n_rename,
    .spawn = n_spawn,
    .proc_write = n_proc_write,
    .proc_signal = n_proc_signal,
    .proc_resize = n_proc_resize,
    .proc_wait = n_proc_wait,
    .proc_list = n_proc_list,
    .edit = n_edit,
    .connect = n_connect,
    .tree_write = n_tree_write,
    .tree_read = n_tree_read,
};

/*
 * Agent mode: the RPC engine's table with our `self`. Each op hands the engine its own
 * `self` (the asp_rpc); close() still gets an asp_ssh, which owns the connection too.
 */
#define FWD(name)                                                                                  \
	static asp_status a_##name(void *self, const asp_##name##_params *p,                       \
	                           asp_##name##_result *r, asp_arena *a, asp_error *err)           \
	{                                                                                          \
		asp_ssh *t = self;                                                                 \
		return ssh_agent_ops()->name(ssh_agent_self(t->link), p, r, a, err);               \
	}
ASP_FOR_EACH_OP(FWD)
#undef FWD

#define SLOT(name) .name = a_##name,
static const asp_ops agent_ops = {ASP_FOR_EACH_OP(SLOT)};
#undef SLOT

static void ops_init(void)
{
	const asp_ops *tables[] = {&native_ops};
	native_count = asp_ops_filled(tables, 1, native_names);
	/* Not announced, but refused with the reason rather than a bare unsupported. */
	native_ops.proc_attach = n_proc_attach;
	native_ops.glob = n_glob;
	native_ops.grep = n_grep;
	native_ops.watch = n_watch;
	asp_ops_complete(&native_ops);
}

static asp_status ssh_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                           asp_error *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, ops_init);
	*ops = NULL;
	*self = NULL;
	asp_ssh *t = calloc(1, sizeof *t);
	if (!t)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	t->budget = ASP_MAX_MESSAGE_DEFAULT - SSH_ENVELOPE_HEADROOM;
	pthread_mutex_init(&t->hello_mu, NULL);
	asp_status st = sshc_connect(&t->c, cfg, err);
	if (st != ASP_OK) {
		pthread_mutex_destroy(&t->hello_mu);
		free(t);
		return st;
	}
	const char *agent = cfg->ssh.agent;
	if (agent && strcmp(agent, "upload") == 0) {
		sftpc *f = sftpc_new(&t->c);
		st = f ? ssh_agent_upload(&t->c, f, t->upload_path, sizeof t->upload_path, err)
		       : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		sshc_lock(&t->c);
		sftpc_free(f); /* its channel is not needed any more */
		sshc_unlock(&t->c);
		if (st == ASP_OK)
			st = ssh_agent_start(&t->c, t->upload_path, &t->link, err);
		*ops = &agent_ops;
	} else if (agent) {
		st = ssh_agent_start(&t->c, agent, &t->link, err);
		*ops = &agent_ops;
	} else {
		sshc_lock(&t->c);
		t->c.spares = true; /* commands open channels all the time: one ahead */
		sshc_unlock(&t->c);
		t->sftp = sftpc_new(&t->c);
		t->procs = ssh_procs_new(&t->c);
		t->trees = t->procs && t->sftp ? ssh_trees_new(t->procs, t->sftp, t->budget) : NULL;
		if (!t->sftp || !t->procs || !t->trees)
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		if (st == ASP_OK && t->c.fragile_open) {
			/* the channels that live long are opened now, while no command can exit
			 * (ssh_internal.h, fragile_open); a failure here shows again on use */
			asp_error e2;
			sshc_lock(&t->c);
			(void)sftp_ready(t->sftp, &e2);
			ssh_kill_line_open(&t->c);
			sshc_unlock(&t->c);
		}
		*ops = &native_ops;
	}
	if (st != ASP_OK) {
		*ops = NULL;
		ssh_procs_free(t->procs);
		ssh_trees_free(t->trees);
		sshc_close(&t->c);
		free(t->sftp);
		pthread_mutex_destroy(&t->hello_mu);
		free(t);
		return st;
	}
	*self = t;
	return ASP_OK;
}

static void ssh_abort(void *self)
{
	asp_ssh *t = self;
	sshc_abort(&t->c);
	if (t->link)
		ssh_agent_abort(t->link);
}

static bool ssh_alive(void *self)
{
	asp_ssh *t = self;
	if (atomic_load(&t->c.dead))
		return false;
	return !t->link || ssh_agent_alive(t->link);
}

static void ssh_close_backend(void *self)
{
	asp_ssh *t = self;
	if (!t)
		return;
	ssh_agent_free(t->link);
	ssh_procs_free(t->procs); /* before the sftp channel and the pump: it may run a kill */
	ssh_trees_free(t->trees); /* after: the followers' last callbacks come to it */
	if (t->sftp) {
		sshc_lock(&t->c);
		sftpc_free(t->sftp);
		sshc_unlock(&t->c);
	}
	sshc_close(&t->c);
	pthread_mutex_destroy(&t->hello_mu);
	free(t->cwd);
	free(t);
}

/*
 * Following a spawned process: agent mode hands it to the RPC engine (proc_attach works
 * there, from any connection to the same responder); native mode follows its channel.
 */
static asp_status ssh_subscribe(void *self, asp_op_id op, const void *params, void *result,
                                asp_arena *a, asp_proc_sub *sub, asp_error *err)
{
	asp_ssh *t = self;
	if (t->link)
		return asp_rpc_subscribe(ssh_agent_self(t->link), op, params, result, a, sub, err);
	if (op == ASP_OP_TREE_READ)
		return ssh_tree_read(t->trees, params, result, sub, err);
	return ssh_procs_subscribe(t->procs, op, params, result, a, sub, err);
}

static void ssh_unsubscribe(void *self, uint64_t proc)
{
	asp_ssh *t = self;
	if (t->link)
		asp_rpc_unsubscribe(ssh_agent_self(t->link), proc);
	else if (!ssh_tree_unsubscribe(t->trees, proc))
		ssh_procs_unsubscribe(t->procs, proc);
}

/* Native mode frames nothing: its trees go to tar or SFTP, whatever the chunks. Agent
 * mode's is the responder's, which the RPC engine learnt (its hello is cached). */
static size_t ssh_max_message(void *self)
{
	asp_ssh *t = self;
	return t->link ? 0 : ASP_MAX_MESSAGE_DEFAULT;
}

const asp_transport asp_transport_ssh = {
    .kind = ASP_TRANSPORT_SSH,
    .name = "ssh",
    .open = ssh_open,
    .abort = ssh_abort,
    .close = ssh_close_backend,
    .alive = ssh_alive,
    .subscribe = ssh_subscribe,
    .unsubscribe = ssh_unsubscribe,
    .max_message = ssh_max_message,
};
