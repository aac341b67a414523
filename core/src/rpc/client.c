/*
 * The client handle: a copy of the config, the current connection (a backend from a
 * transport), the config applied to each call's params, and reconnection after a
 * transport_error.
 */
#include "asp/client.h"
#include "asp/proc.h"
#include "asp/transport.h"

#include "builtin.h"
#include "config_copy.h"
#include "proto_desc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One connection: a backend and the calls using it. The last reference closes it. */
typedef struct conn {
	const asp_transport *t;
	const asp_ops *ops;
	void *self;
	atomic_uint refs; /* 1 while it is the client's current one, +1 per call inside */
	atomic_int pty;   /* hello lists "pty": 0 not asked yet, 1 it does, -1 it does not */
} conn;

struct asp_client {
	pthread_mutex_t mu; /* cur, broken; opening a connection happens under it */
	pthread_cond_t idle_cv;
	conn *cur;   /* NULL until (re)opened */
	bool broken; /* cur failed with transport_error: the next call reconnects */
	atomic_bool closing;
	atomic_size_t inflight;
	const asp_transport *t;
	asp_arena *store; /* the copied config */
	asp_config_view view;
	asp_strmap_entry *env; /* the config's env as a map, view.env_count entries */
};

/* ---- applying the config to a call ------------------------------------------------ */

static char *join_path(asp_arena *a, const char *dir, const char *rel)
{
	size_t dl = strlen(dir), rl = strlen(rel);
	bool slash = dl > 0 && dir[dl - 1] == '/';
	char *p = asp_arena_alloc(a, dl + !slash + rl + 1);
	if (!p)
		return NULL;
	memcpy(p, dir, dl);
	if (!slash)
		p[dl++] = '/';
	memcpy(p + dl, rel, rl + 1);
	return p;
}

/* The config's env under the call's: entries of `call` win over same-named config ones. */
static bool merge_env(asp_client *c, asp_arena *a, const asp_strmap *call, asp_strmap *out)
{
	size_t n = c->view.env_count + call->count;
	asp_strmap_entry *e = asp_arena_alloc(a, n * sizeof *e);
	if (!e)
		return false;
	size_t k = 0;
	for (size_t i = 0; i < c->view.env_count; i++) {
		bool overridden = false;
		for (size_t j = 0; j < call->count && !overridden; j++)
			overridden = strcmp(call->items[j].key, c->env[i].key) == 0;
		if (!overridden)
			e[k++] = c->env[i];
	}
	for (size_t j = 0; j < call->count; j++)
		e[k++] = call->items[j];
	out->items = e;
	out->count = k;
	return true;
}

/* Field of a params struct, and its has_ flag. */
#define FIELD(rec, f)    ((char *)(rec) + (f)->offset)
#define HAS_FLAG(rec, f) ((bool *)((char *)(rec) + (f)->has_offset))

/*
 * The params the backend gets: `p` itself when the config changes nothing, else a copy
 * in `a` with relative paths joined to the config's cwd (an absent cwd becomes it), the
 * config's env merged under the call's and a zero timeout replaced by the default.
 * Driven by the descriptors' flags, so no op is special-cased.
 */
static const void *apply_config(asp_client *c, const asp_record_desc *d, const void *p,
                                asp_arena *a, asp_status *st)
{
	const asp_config_view *v = &c->view;
	void *copy = NULL;
	*st = ASP_OK;
	for (size_t i = 0; i < d->nfields; i++) {
		const asp_field_desc *f = &d->fields[i];
		if (!(f->flags & (ASP_FF_PATH | ASP_FF_ENV | ASP_FF_TIMEOUT)))
			continue;
		const char *path = NULL;
		asp_strmap env = {0};
		bool timeout = false;
		if ((f->flags & ASP_FF_PATH) && f->type == ASP_FT_STR && v->cwd && v->cwd[0]) {
			const char *s = *(const char *const *)FIELD(p, f);
			if (!s && (f->flags & ASP_FF_OPTIONAL) && strcmp(f->name, "cwd") == 0)
				path = v->cwd;
			else if (s && s[0] && s[0] != '/' && !(path = join_path(a, v->cwd, s)))
				goto oom;
			if (!path)
				continue;
		} else if ((f->flags & ASP_FF_ENV) && f->type == ASP_FT_STRMAP && v->env_count) {
			asp_strmap call = {0};
			if (f->has_offset < 0 || *HAS_FLAG(p, f))
				call = *(const asp_strmap *)FIELD(p, f);
			if (!merge_env(c, a, &call, &env))
				goto oom;
		} else if ((f->flags & ASP_FF_TIMEOUT) && f->type == ASP_FT_UINT && v->timeout_ms &&
		           *(const uint64_t *)FIELD(p, f) == 0) {
			timeout = true;
		} else {
			continue;
		}
		if (!copy) {
			copy = asp_arena_alloc(a, d->size);
			if (!copy)
				goto oom;
			memcpy(copy, p, d->size);
		}
		if (path) {
			*(const char **)FIELD(copy, f) = path;
		} else if (timeout) {
			*(uint64_t *)FIELD(copy, f) = v->timeout_ms;
		} else {
			*(asp_strmap *)FIELD(copy, f) = env;
			if (f->has_offset >= 0)
				*HAS_FLAG(copy, f) = true;
		}
	}
	return copy ? copy : p;
oom:
	*st = ASP_E_INTERNAL;
	return NULL;
}

/* ---- connections ------------------------------------------------------------------ */

static void conn_release(conn *k)
{
	if (k && atomic_fetch_sub(&k->refs, 1) == 1) {
		k->t->close(k->self);
		free(k);
	}
}

/* Under c->mu. */
static conn *conn_open(asp_client *c, asp_error *err)
{
	conn *k = malloc(sizeof *k);
	if (!k) {
		asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	k->t = c->t;
	atomic_init(&k->refs, 1);
	atomic_init(&k->pty, 0);
	if (c->t->open(&c->view, &k->ops, &k->self, err)) {
		free(k);
		return NULL;
	}
	return k;
}

/* The connection for one call, reconnecting when the last one died; NULL with err set. */
static conn *acquire(asp_client *c, asp_error *err)
{
	pthread_mutex_lock(&c->mu);
	if (atomic_load(&c->closing)) {
		pthread_mutex_unlock(&c->mu);
		asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL, "the client is being freed");
		return NULL;
	}
	conn *k = c->cur, *old = NULL;
	if (k && (c->broken || (k->t->alive && !k->t->alive(k->self)))) {
		old = k;
		c->cur = k = NULL;
	}
	if (!k) {
		k = conn_open(c, err);
		if (k) {
			c->cur = k;
			c->broken = false;
		}
	}
	if (k) {
		atomic_fetch_add(&k->refs, 1);
		atomic_fetch_add(&c->inflight, 1);
	}
	pthread_mutex_unlock(&c->mu);
	conn_release(old); /* may wait for the old connection's end: outside the lock */
	return k;
}

static void call_done(asp_client *c, conn *k, asp_status st)
{
	if (st == ASP_E_TRANSPORT_ERROR) {
		pthread_mutex_lock(&c->mu);
		if (c->cur == k)
			c->broken = true;
		pthread_mutex_unlock(&c->mu);
	}
	conn_release(k);
	if (atomic_fetch_sub(&c->inflight, 1) == 1 && atomic_load(&c->closing)) {
		pthread_mutex_lock(&c->mu);
		pthread_cond_broadcast(&c->idle_cv);
		pthread_mutex_unlock(&c->mu);
	}
}

/*
 * A spawn with tty goes only to a responder whose hello lists "pty": one without
 * terminals (protocol 1) would ignore the field and run the command on pipes. Asked once
 * per connection, on its first spawn with tty; other calls pay nothing.
 */
static asp_status tty_check(conn *k, const void *params, asp_arena *a, asp_error *err)
{
	if (!((const asp_spawn_params *)params)->tty)
		return ASP_OK;
	int pty = atomic_load(&k->pty);
	if (!pty) {
		asp_hello_params hp;
		asp_hello_params_init(&hp);
		asp_hello_result hr;
		asp_status st = k->ops->hello(k->self, &hp, &hr, a, err);
		if (st)
			return st;
		pty = -1;
		for (size_t i = 0; hr.has_features && i < hr.features.count; i++)
			if (hr.features.items[i] && strcmp(hr.features.items[i], "pty") == 0)
				pty = 1;
		atomic_store(&k->pty, pty);
	}
	if (pty > 0)
		return ASP_OK;
	return asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
	                     "spawn: this responder (over %s) has no terminals: its hello lists "
	                     "no feature \"pty\"; spawn without tty, or use an asp-agent of "
	                     "protocol 2",
	                     k->t->name);
}

asp_status asp_client_call(asp_client *c, asp_op_id op, const void *params, void *result,
                           asp_arena *a, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	if (!c || (unsigned)op >= ASP_OP_COUNT || !params || !result || !a)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_%s: client, params, result and arena are required",
		                     (unsigned)op < ASP_OP_COUNT ? asp_op_descs[op].name : "call");
	const asp_op_desc *d = &asp_op_descs[op];
	asp_status st;
	const void *p = apply_config(c, d->params, params, a, &st);
	if (st)
		return asp_error_set(err, st, NULL, "out of memory");
	conn *k = acquire(c, err);
	if (!k)
		return err->code;
	if (op == ASP_OP_SPAWN && (st = tty_check(k, p, a, err)) != ASP_OK) {
		call_done(c, k, st);
		return st;
	}
	asp_record_init(d->result, result);
	st = d->call(k->ops, k->self, p, result, a, err);
	if (st && err->code != st) /* a backend that forgot to fill err still says what */
		asp_error_set(err, st, NULL, "%s failed", d->name);
	call_done(c, k, st);
	return st;
}

/* ---- following spawned processes ------------------------------------------------- */

static asp_status stream_call(asp_client *c, asp_op_id op, const void *params, void *result,
                              asp_arena *a, const asp_proc_callbacks *cb, void *user,
                              asp_error *err)
{
	const asp_op_desc *d = &asp_op_descs[op];
	asp_status st;
	const void *p = apply_config(c, d->params, params, a, &st);
	if (st)
		return asp_error_set(err, st, NULL, "out of memory");
	conn *k = acquire(c, err);
	if (!k)
		return err->code;
	if (!k->t->subscribe) {
		st = asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
		                   "%s: the %s transport cannot carry a process's live output; use "
		                   "exec, or a transport with notifications (stdio, WebSocket, SSH "
		                   "agent mode)",
		                   d->name, k->t->name);
		call_done(c, k, st);
		return st;
	}
	if (op == ASP_OP_SPAWN && (st = tty_check(k, p, a, err)) != ASP_OK) {
		call_done(c, k, st);
		return st;
	}
	asp_proc_sub *sub = asp_proc_sub_new(cb, user);
	if (!sub) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		call_done(c, k, st);
		return st;
	}
	asp_record_init(d->result, result);
	st = k->t->subscribe(k->self, op, p, result, a, sub, err);
	if (st && err->code != st)
		asp_error_set(err, st, NULL, "%s failed", d->name);
	asp_proc_sub_unref(sub);
	call_done(c, k, st);
	return st;
}

asp_status asp_spawn_start(asp_client *c, const asp_spawn_params *p, const asp_proc_callbacks *cb,
                           void *user, uint64_t *proc, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	if (proc)
		*proc = 0;
	if (!c || !p || !cb)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_spawn_start: client, params and callbacks are required");
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_spawn_result r;
	asp_status st = stream_call(c, ASP_OP_SPAWN, p, &r, a, cb, user, err);
	if (st == ASP_OK && proc)
		*proc = r.proc;
	asp_arena_free(a);
	return st;
}

/* connect, watch, tree_read: a handle made by `op` and followed as a process is. */
static asp_status handle_start(asp_client *c, asp_op_id op, const void *p,
                               const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                               asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	if (proc)
		*proc = 0;
	if (!c || !p || !cb)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_%s_start: client, params and callbacks are required",
		                     asp_op_descs[op].name);
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_connect_result r; /* watch's result has the same one field */
	_Static_assert(sizeof(asp_connect_result) == sizeof(asp_watch_result) &&
	                   sizeof(asp_connect_result) == sizeof(asp_tree_read_result),
	               "connect, watch and tree_read answer a handle alike");
	asp_status st = stream_call(c, op, p, &r, a, cb, user, err);
	if (st == ASP_OK && proc)
		*proc = r.proc;
	asp_arena_free(a);
	return st;
}

asp_status asp_connect_start(asp_client *c, const asp_connect_params *p,
                             const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                             asp_error *err)
{
	return handle_start(c, ASP_OP_CONNECT, p, cb, user, proc, err);
}

asp_status asp_watch_start(asp_client *c, const asp_watch_params *p, const asp_proc_callbacks *cb,
                           void *user, uint64_t *proc, asp_error *err)
{
	return handle_start(c, ASP_OP_WATCH, p, cb, user, proc, err);
}

asp_status asp_tree_read_start(asp_client *c, const asp_tree_read_params *p,
                               const asp_proc_callbacks *cb, void *user, uint64_t *proc,
                               asp_error *err)
{
	return handle_start(c, ASP_OP_TREE_READ, p, cb, user, proc, err);
}

asp_status asp_proc_attach_start(asp_client *c, const asp_proc_attach_params *p,
                                 const asp_proc_callbacks *cb, void *user, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	if (!c || !p || !cb)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_proc_attach_start: client, params and callbacks are "
		                     "required");
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_proc_attach_result r;
	asp_status st = stream_call(c, ASP_OP_PROC_ATTACH, p, &r, a, cb, user, err);
	asp_arena_free(a);
	return st;
}

void asp_proc_detach(asp_client *c, uint64_t proc)
{
	if (!c)
		return;
	/* Only the current connection can have followers: a dead one told them on_lost. */
	pthread_mutex_lock(&c->mu);
	conn *k = c->cur;
	if (k)
		atomic_fetch_add(&k->refs, 1);
	pthread_mutex_unlock(&c->mu);
	if (!k)
		return;
	if (k->t->unsubscribe)
		k->t->unsubscribe(k->self, proc);
	conn_release(k);
}

/* ---- lifecycle -------------------------------------------------------------------- */

asp_status asp_client_open_view(const asp_config_view *view, asp_client **out, asp_error *err)
{
	asp_error scratch;
	if (!err)
		err = &scratch;
	*out = NULL;
	asp_transports_init();
	const asp_transport *t = asp_transport_find(view->transport);
	if (!t)
		return asp_error_set(err, ASP_E_UNSUPPORTED, view->path,
		                     "transport %d is not built into this libasp; rebuild with "
		                     "its meson option enabled, or choose another transport in %s",
		                     (int)view->transport, view->path ? view->path : "the config");
	asp_client *c = calloc(1, sizeof *c);
	size_t env_size = (view->env_count + 1) * sizeof *c->env;
	asp_arena *store = c ? asp_config_view_dup(view, &c->view, env_size) : NULL;
	if (!store) {
		free(c);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	c->store = store;
	c->t = t;
	c->env = (asp_strmap_entry *)asp_arena_alloc(store, env_size);
	if (!c->env) {
		asp_arena_free(store);
		free(c);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < view->env_count; i++) {
		c->env[i].key = c->view.env[i].key;
		c->env[i].value = c->view.env[i].value;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->idle_cv, NULL);
	atomic_init(&c->closing, false);
	atomic_init(&c->inflight, 0);
	/* Connect now, so a wrong command or host shows at open rather than on a call. */
	c->cur = conn_open(c, err);
	if (!c->cur) {
		asp_client_free(c);
		return err->code;
	}
	*out = c;
	return ASP_OK;
}

void asp_client_free(asp_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->closing, true);
	conn *k = c->cur;
	c->cur = NULL;
	pthread_mutex_unlock(&c->mu);
	if (k && k->t->abort)
		k->t->abort(k->self); /* calls in flight fail now instead of when they finish */
	pthread_mutex_lock(&c->mu);
	while (atomic_load(&c->inflight) > 0)
		pthread_cond_wait(&c->idle_cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	conn_release(k); /* last: the callers return without waiting for the close */
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->idle_cv);
	asp_arena_free(c->store);
	free(c);
}

size_t asp_client_max_message_known(asp_client *c)
{
	pthread_mutex_lock(&c->mu);
	conn *k = c->broken ? NULL : c->cur;
	size_t n = k && k->t->max_message ? k->t->max_message(k->self) : 0;
	pthread_mutex_unlock(&c->mu);
	return n;
}

const asp_config_view *asp_client_config(const asp_client *c)
{
	return &c->view;
}
