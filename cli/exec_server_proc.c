/*
 * asp exec-server's process methods methods and notifications. A process is an ASP spawn
 * followed through asp_spawn_start: its output becomes process/output notifications (one
 * seq counter per process for output, exited and closed), kept too for process/read. The
 * start answer goes out before any notification of that process: until then they wait in
 * the entry. The session's lock is never held across a call on the client, since the
 * client's callbacks take it.
 */
#include "exec_server.h"

#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Output kept per process for process/read; older chunks are dropped first. */
#define XS_KEEP_MAX (1u << 20)
/* The longest process/read waits, whatever waitMs asks. */
#define XS_READ_WAIT_MAX 30000u

typedef struct xs_chunk {
	struct xs_chunk *next;
	uint64_t seq;
	const char *stream; /* "stdout", "stderr" or "pty" */
	size_t len;
	uint8_t data[];
} xs_chunk;

typedef struct xs_proc {
	struct xs_proc *next;
	xs_session *s;
	char *id;        /* Codex's processId */
	uint64_t handle; /* the responder's */
	bool tty, pipe_stdin;
	bool announced;  /* the start was answered: notifications go out at once */
	json_t *pending; /* [[method, params], ...] waiting for the answer */
	uint64_t seq;    /* the last seq given out */
	bool following;  /* callbacks may still come */
	bool exited, closed;
	int64_t exit_code;
	char *failure; /* the connection was lost: why */
	xs_chunk *head, *tail;
	size_t kept;
} xs_proc;

static xs_proc *find_locked(xs_session *s, const char *id)
{
	for (xs_proc *p = s->procs; p; p = p->next)
		if (!strcmp(p->id, id))
			return p;
	return NULL;
}

static void notify_locked(xs_proc *p, const char *method, json_t *params)
{
	if (p->announced) {
		xs_notify_locked(p->s, method, params);
	} else {
		json_array_append_new(p->pending, json_pack("[s, o]", method, params));
	}
}

static void drop_chunks_locked(xs_proc *p)
{
	while (p->head) {
		xs_chunk *c = p->head;
		p->head = c->next;
		free(c);
	}
	p->tail = NULL;
	p->kept = 0;
}

/* --- callbacks (the client's reading thread) --------------------------------------------- */

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	(void)offset;
	xs_proc *p = user;
	char *b64 = cli_b64_encode(data, len);
	xs_chunk *c = malloc(sizeof *c + len);
	pthread_mutex_lock(&p->s->mu);
	p->seq++;
	const char *name = p->tty ? "pty" : stream == ASP_STREAM_STDERR ? "stderr" : "stdout";
	if (c) {
		c->next = NULL;
		c->seq = p->seq;
		c->stream = name;
		c->len = len;
		memcpy(c->data, data, len);
		if (p->tail)
			p->tail->next = c;
		else
			p->head = c;
		p->tail = c;
		p->kept += len;
		while (p->kept > XS_KEEP_MAX && p->head != p->tail) {
			xs_chunk *old = p->head;
			p->head = old->next;
			p->kept -= old->len;
			free(old);
		}
	}
	if (b64)
		notify_locked(p, "process/output",
		              json_pack("{s:s, s:I, s:s, s:s}", "processId", p->id, "seq",
		                        (json_int_t)p->seq, "stream", name, "chunk", b64));
	pthread_cond_broadcast(&p->s->cv);
	pthread_mutex_unlock(&p->s->mu);
	free(b64);
}

/* A shell's status for a death by signal: 128 + its number. */
static int64_t signal_status(const char *sig)
{
	int n = cli_signal_number(sig);
	return n ? 128 + n : -1;
}

static void finish_locked(xs_proc *p, int64_t code)
{
	p->following = false;
	p->exited = true;
	p->exit_code = code;
	p->seq++;
	notify_locked(p, "process/exited",
	              json_pack("{s:s, s:I, s:I, s:b}", "processId", p->id, "seq",
	                        (json_int_t)p->seq, "exitCode", (json_int_t)code, "sandboxDenied",
	                        0));
	p->closed = true;
	p->seq++;
	notify_locked(p, "process/closed",
	              json_pack("{s:s, s:I}", "processId", p->id, "seq", (json_int_t)p->seq));
	pthread_cond_broadcast(&p->s->cv);
}

static void on_exit_cb(void *user, const asp_exit_event *ev)
{
	xs_proc *p = user;
	pthread_mutex_lock(&p->s->mu);
	finish_locked(p, ev->exit_code >= 0 ? ev->exit_code : signal_status(ev->signal));
	pthread_mutex_unlock(&p->s->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	xs_proc *p = user;
	pthread_mutex_lock(&p->s->mu);
	free(p->failure);
	p->failure = strdup(err->message);
	finish_locked(p, -1);
	pthread_mutex_unlock(&p->s->mu);
}

static const asp_proc_callbacks proc_cbs = {on_output, on_exit_cb, on_lost};

/* --- tags: what proc_list shows, and what a restart finds again ------------------------------ */

/*
 * "asp exec-server tty=0 process=ID session=S": the processId last before the session, so
 * an id with spaces still parses; without a session the id ends the tag.
 */
#define TAG_PREFIX  "asp exec-server"
#define TAG_SESSION " session="
#define TAG_PROCESS " process="

static char *proc_tag(const xs_session *s, const char *id, bool tty)
{
	size_t n = strlen(TAG_PREFIX) + strlen(id) + (s->session ? strlen(s->session) : 0) + 40;
	char *tag = malloc(n);
	if (tag)
		snprintf(tag, n, "%s tty=%d%s%s%s%s", TAG_PREFIX, tty, TAG_PROCESS, id,
		         s->session ? TAG_SESSION : "", s->session ? s->session : "");
	return tag;
}

/* The processId and tty of a tag of the session's (malloc'd id), or NULL. */
static char *parse_tag(const xs_session *s, const char *tag, bool *tty)
{
	if (!tag || !s->session || strncmp(tag, TAG_PREFIX " tty=", strlen(TAG_PREFIX) + 5))
		return NULL;
	const char *p = tag + strlen(TAG_PREFIX) + 5;
	if ((*p != '0' && *p != '1') || strncmp(p + 1, TAG_PROCESS, strlen(TAG_PROCESS)))
		return NULL;
	*tty = *p == '1';
	const char *id = p + 1 + strlen(TAG_PROCESS);
	size_t idlen = strlen(id), sl = strlen(TAG_SESSION) + strlen(s->session);
	if (idlen <= sl || strcmp(id + idlen - sl + strlen(TAG_SESSION), s->session) ||
	    strncmp(id + idlen - sl, TAG_SESSION, strlen(TAG_SESSION)))
		return NULL;
	return strndup(id, idlen - sl);
}

/* --- process/start ------------------------------------------------------------------------ */

static const char *env_get(json_t *env, const char *key)
{
	json_t *v = json_object_get(env, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/*
 * envPolicy.inherit "none" or "core": the sandbox's environment is not inherited, so the
 * command runs under `env -i` with the variables Codex gave (and, for core, the sandbox's
 * HOME, LOGNAME, PATH, SHELL, USER, TMPDIR).
 */
static const char *const core_vars[] = {"HOME", "LOGNAME", "PATH", "SHELL", "USER", "TMPDIR"};

static bool start(xs_session *s, json_t *id, json_t *params)
{
	json_t *jid = json_object_get(params, "processId");
	json_t *jargv = json_object_get(params, "argv");
	json_t *env = json_object_get(params, "env");
	json_t *policy = json_object_get(params, "envPolicy");
	json_t *arg0 = json_object_get(params, "arg0");
	bool tty = json_is_true(json_object_get(params, "tty"));
	bool pipe = json_is_true(json_object_get(params, "pipeStdin"));
	if (!json_is_string(jid))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `processId`");
	if (!json_is_array(jargv) || json_array_size(jargv) == 0)
		return xs_error(s, id, XS_INVALID_PARAMS, "argv must not be empty");
	size_t argc = json_array_size(jargv);
	for (size_t i = 0; i < argc; i++)
		if (!json_is_string(json_array_get(jargv, i)))
			return xs_error(s, id, XS_INVALID_PARAMS, "argv[%zu] is not a string", i);
	if (json_is_string(arg0) &&
	    strcmp(json_string_value(arg0), json_string_value(json_array_get(jargv, 0))) != 0)
		return xs_error(s, id, XS_INVALID_PARAMS,
		                "arg0 (%s) other than argv[0] is not supported by asp exec-server",
		                json_string_value(arg0));
	if (env && !json_is_null(env) && !json_is_object(env))
		return xs_error(s, id, XS_INVALID_PARAMS, "`env` must be an object of strings");
	const char *inherit = json_is_string(json_object_get(policy, "inherit"))
	                          ? json_string_value(json_object_get(policy, "inherit"))
	                          : "all";
	if (strcmp(inherit, "all") && strcmp(inherit, "none") && strcmp(inherit, "core"))
		return xs_error(s, id, XS_INVALID_PARAMS,
		                "envPolicy.inherit `%s` is not supported by asp exec-server (all, "
		                "core or none)",
		                inherit);
	if (tty && !s->pty)
		return xs_error_data(s, id, XS_INTERNAL, json_pack("{s:s}", "kind", "spawnFailed"),
		                     "this sandbox has no terminals (its hello lists no pty "
		                     "feature); run the command without tty");
	char *cwd = NULL;
	if (json_is_string(json_object_get(params, "cwd")) &&
	    !(cwd = xs_path_param(s, id, params, "cwd")))
		return false;
	/* the environment: env, then envPolicy.set over it */
	json_t *vars = json_object();
	if (json_is_object(env))
		json_object_update(vars, env);
	if (json_is_object(json_object_get(policy, "set")))
		json_object_update(vars, json_object_get(policy, "set"));
	size_t nvars = json_object_size(vars), n = 0;
	const char **argv = calloc(argc + nvars + 9, sizeof *argv);
	asp_strmap_entry *ents = calloc(nvars + 2, sizeof *ents);
	char **owned = calloc(nvars + 1, sizeof *owned);
	xs_proc *p = calloc(1, sizeof *p);
	if (!argv || !ents || !owned || !p || !(p->id = strdup(json_string_value(jid))) ||
	    !(p->pending = json_array())) {
		free(argv);
		free(ents);
		free(owned);
		if (p) {
			free(p->id);
			json_decref(p->pending);
		}
		free(p);
		free(cwd);
		json_decref(vars);
		return xs_error(s, id, XS_INTERNAL, "out of memory");
	}
	const char *k;
	json_t *v;
	size_t nents = 0, nowned = 0;
	bool clean = strcmp(inherit, "all") != 0;
	char keep_core[256], script[512]; /* live until the spawn below */
	char *session_kv = NULL;
	if (clean) {
		keep_core[0] = '\0';
		if (!strcmp(inherit, "core"))
			for (size_t i = 0; i < sizeof core_vars / sizeof *core_vars; i++)
				snprintf(keep_core + strlen(keep_core),
				         sizeof keep_core - strlen(keep_core), "${%s+%s=\"$%s\"} ",
				         core_vars[i], core_vars[i], core_vars[i]);
		snprintf(script, sizeof script, "exec env -i %s\"$@\"", keep_core);
		argv[n++] = "/bin/sh";
		argv[n++] = "-c";
		argv[n++] = script;
		argv[n++] = "sh";
	}
	json_object_foreach(vars, k, v)
	{
		if (!json_is_string(v))
			continue;
		if (clean) {
			char *kv = malloc(strlen(k) + strlen(json_string_value(v)) + 2);
			if (kv) {
				sprintf(kv, "%s=%s", k, json_string_value(v));
				argv[n++] = owned[nowned++] = kv;
			}
		} else {
			ents[nents].key = k;
			ents[nents].value = json_string_value(v);
			nents++;
		}
	}
	/* $ASP_SESSION names the session to a look at the sandbox's processes (asp ui) */
	if (s->session && clean && (session_kv = malloc(strlen(s->session) + 13))) {
		sprintf(session_kv, "ASP_SESSION=%s", s->session);
		argv[n++] = session_kv;
	} else if (s->session && !clean) {
		ents[nents++] = (asp_strmap_entry){"ASP_SESSION", s->session};
	}
	for (size_t i = 0; i < argc; i++)
		argv[n++] = json_string_value(json_array_get(jargv, i));
	char *tag = proc_tag(s, p->id, tty);
	asp_tty term = {.rows = 24, .cols = 80, .term = env_get(vars, "TERM")};
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.has_argv = true;
	sp.argv.items = argv;
	sp.argv.count = n;
	sp.cwd = cwd ? cwd : s->base;
	sp.has_env = nents > 0;
	sp.env.items = ents;
	sp.env.count = nents;
	sp.tag = tag ? tag : TAG_PREFIX;
	sp.tty = tty ? &term : NULL;
	sp.stdin_eof = !tty && !pipe;
	p->s = s;
	p->tty = tty;
	p->pipe_stdin = pipe || tty;
	p->following = true;
	pthread_mutex_lock(&s->mu);
	bool dup = find_locked(s, p->id) != NULL;
	if (!dup) {
		p->next = s->procs;
		s->procs = p;
	}
	pthread_mutex_unlock(&s->mu);
	asp_error err;
	asp_status st = dup ? ASP_OK : asp_spawn_start(s->c, &sp, &proc_cbs, p, &p->handle, &err);
	for (size_t i = 0; i < nowned; i++)
		free(owned[i]);
	free(owned);
	free(session_kv);
	free(tag);
	free(argv);
	free(ents);
	free(cwd);
	json_decref(vars);
	if (dup || st != ASP_OK) {
		pthread_mutex_lock(&s->mu);
		for (xs_proc **pp = &s->procs; !dup && *pp; pp = &(*pp)->next)
			if (*pp == p) {
				*pp = p->next;
				break;
			}
		pthread_mutex_unlock(&s->mu);
		char *pid = p->id;
		json_decref(p->pending);
		free(p);
		bool r = dup ? xs_error(s, id, XS_INVALID_REQUEST, "process %s already exists", pid)
		             : xs_error_data(s, id, XS_INTERNAL,
		                             json_pack("{s:s}", "kind",
		                                       st == ASP_E_NOT_FOUND ? "spawnNotFound"
		                                                             : "spawnFailed"),
		                             "%s", err.message);
		free(pid);
		return r;
	}
	/* the answer first, then what came meanwhile, in order */
	pthread_mutex_lock(&s->mu);
	xs_reply_locked(s, id, json_pack("{s:s, s:s}", "processId", p->id, "sandboxType", "none"));
	p->announced = true;
	size_t i;
	json_t *item;
	json_array_foreach(p->pending, i, item)
	{
		xs_notify_locked(s, json_string_value(json_array_get(item, 0)),
		                 json_incref(json_array_get(item, 1)));
	}
	json_array_clear(p->pending);
	pthread_mutex_unlock(&s->mu);
	return true;
}

/* --- process/read, write, signal, terminate ---------------------------------------------- */

static bool read_proc(xs_session *s, json_t *id, json_t *params)
{
	json_t *jid = json_object_get(params, "processId");
	if (!json_is_string(jid))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `processId`");
	json_t *after = json_object_get(params, "afterSeq");
	json_t *maxb = json_object_get(params, "maxBytes");
	json_t *wait = json_object_get(params, "waitMs");
	uint64_t after_seq = json_is_integer(after) && json_integer_value(after) > 0
	                         ? (uint64_t)json_integer_value(after)
	                         : 0;
	uint64_t max_bytes = json_is_integer(maxb) && json_integer_value(maxb) > 0
	                         ? (uint64_t)json_integer_value(maxb)
	                         : UINT64_MAX;
	uint64_t wait_ms = json_is_integer(wait) && json_integer_value(wait) > 0
	                       ? (uint64_t)json_integer_value(wait)
	                       : 0;
	if (wait_ms > XS_READ_WAIT_MAX)
		wait_ms = XS_READ_WAIT_MAX;
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)(wait_ms / 1000);
	end.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->mu);
	xs_proc *p = find_locked(s, json_string_value(jid));
	if (!p) {
		pthread_mutex_unlock(&s->mu);
		return xs_error(s, id, XS_INVALID_REQUEST, "unknown process id %s",
		                json_string_value(jid));
	}
	for (;;) {
		bool any = p->closed;
		for (xs_chunk *c = p->head; c && !any; c = c->next)
			any = c->seq > after_seq;
		if (any || pthread_cond_timedwait(&s->cv, &s->mu, &end) == ETIMEDOUT)
			break;
	}
	json_t *chunks = json_array();
	uint64_t got = 0, next = p->seq + 1;
	for (xs_chunk *c = p->head; c; c = c->next) {
		if (c->seq <= after_seq)
			continue;
		if (got >= max_bytes) {
			next = c->seq;
			break;
		}
		char *b64 = cli_b64_encode(c->data, c->len);
		if (b64)
			json_array_append_new(chunks, json_pack("{s:I, s:s, s:s}", "seq",
			                                        (json_int_t)c->seq, "stream",
			                                        c->stream, "chunk", b64));
		free(b64);
		got += c->len;
	}
	json_t *r = json_object();
	json_object_set_new(r, "chunks", chunks);
	json_object_set_new(r, "nextSeq", json_integer((json_int_t)next));
	json_object_set_new(r, "exited", json_boolean(p->exited));
	json_object_set_new(r, "exitCode",
	                    p->exited ? json_integer((json_int_t)p->exit_code) : json_null());
	json_object_set_new(r, "closed", json_boolean(p->closed));
	json_object_set_new(r, "failure", p->failure ? json_string(p->failure) : json_null());
	json_object_set_new(r, "sandboxDenied", json_false());
	xs_reply_locked(s, id, r);
	pthread_mutex_unlock(&s->mu);
	return true;
}

/* The entry's handle and state, looked up under the lock. */
static xs_proc *lookup(xs_session *s, json_t *id, json_t *params, uint64_t *handle, bool *running,
                       bool *pipe)
{
	json_t *jid = json_object_get(params, "processId");
	if (!json_is_string(jid)) {
		xs_error(s, id, XS_INVALID_PARAMS, "missing field `processId`");
		return NULL;
	}
	pthread_mutex_lock(&s->mu);
	xs_proc *p = find_locked(s, json_string_value(jid));
	if (p) {
		*handle = p->handle;
		*running = !p->exited;
		*pipe = p->pipe_stdin;
	}
	pthread_mutex_unlock(&s->mu);
	return p;
}

static bool write_proc(xs_session *s, json_t *id, json_t *params)
{
	if (!json_is_string(json_object_get(params, "processId")))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `processId`");
	json_t *chunk = json_object_get(params, "chunk");
	if (!json_is_string(chunk))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `chunk`");
	if (!json_object_get(params, "writeId"))
		return xs_error(s, id, XS_INVALID_PARAMS, "missing field `writeId`");
	uint64_t handle = 0;
	bool running = false, pipe = false;
	if (!lookup(s, id, params, &handle, &running, &pipe))
		return xs_reply(s, id, json_pack("{s:s}", "status", "unknownProcess"));
	if (!running || !pipe)
		return xs_reply(s, id, json_pack("{s:s}", "status", "stdinClosed"));
	uint8_t *data;
	size_t len;
	if (!cli_b64_decode(json_string_value(chunk), strlen(json_string_value(chunk)), &data,
	                    &len))
		return xs_error(s, id, XS_INVALID_PARAMS, "`chunk` is not base64");
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = handle;
	p.data.data = data;
	p.data.len = len;
	asp_proc_write_result r;
	asp_error err;
	asp_arena *a = asp_arena_new();
	asp_status st = a ? asp_proc_write(s->c, &p, &r, a, &err) : ASP_E_INTERNAL;
	asp_arena_free(a);
	free(data);
	if (st == ASP_E_INVALID_ARGUMENT || st == ASP_E_NOT_FOUND)
		return xs_reply(s, id, json_pack("{s:s}", "status", "stdinClosed"));
	if (st != ASP_OK)
		return a ? xs_error_asp(s, id, &err, "process/write")
		         : xs_error(s, id, XS_INTERNAL, "out of memory");
	return xs_reply(s, id, json_pack("{s:s}", "status", "accepted"));
}

static asp_status send_signal(xs_session *s, uint64_t handle, const char *sig, asp_error *err)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = handle;
	p.signal = sig;
	asp_proc_signal_result r;
	asp_arena *a = asp_arena_new();
	if (!a)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_status st = asp_proc_signal(s->c, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

static bool signal_proc(xs_session *s, json_t *id, json_t *params)
{
	json_t *sig = json_object_get(params, "signal");
	if (!json_is_string(sig) || strcmp(json_string_value(sig), "interrupt") != 0)
		return xs_error(s, id, XS_INVALID_PARAMS,
		                "unknown variant `%s`, expected `interrupt`",
		                json_is_string(sig) ? json_string_value(sig) : "(not a string)");
	uint64_t handle = 0;
	bool running = false, pipe = false;
	if (!lookup(s, id, params, &handle, &running, &pipe))
		return xs_error(s, id, XS_INVALID_REQUEST, "unknown process id %s",
		                json_string_value(json_object_get(params, "processId")));
	asp_error err;
	if (running && send_signal(s, handle, "INT", &err) != ASP_OK && err.code != ASP_E_NOT_FOUND)
		return xs_error_asp(s, id, &err, "process/signal");
	return xs_reply(s, id, NULL);
}

static bool terminate_proc(xs_session *s, json_t *id, json_t *params)
{
	uint64_t handle = 0;
	bool running = false, pipe = false;
	xs_proc *p = lookup(s, id, params, &handle, &running, &pipe);
	if (!p)
		return json_is_string(json_object_get(params, "processId"))
		           ? xs_reply(s, id, json_pack("{s:b}", "running", 0))
		           : false;
	asp_error err;
	if (running && send_signal(s, handle, "KILL", &err) != ASP_OK &&
	    err.code != ASP_E_NOT_FOUND)
		return xs_error_asp(s, id, &err, "process/terminate");
	if (!running) { /* over and collected: what was kept for process/read can go */
		pthread_mutex_lock(&s->mu);
		drop_chunks_locked(p);
		pthread_mutex_unlock(&s->mu);
	}
	return xs_reply(s, id, json_pack("{s:b}", "running", running));
}

bool xs_proc_handle(xs_session *s, const char *method, json_t *id, json_t *params)
{
	if (!strcmp(method, "process/start"))
		start(s, id, params);
	else if (!strcmp(method, "process/read"))
		read_proc(s, id, params);
	else if (!strcmp(method, "process/write"))
		write_proc(s, id, params);
	else if (!strcmp(method, "process/signal"))
		signal_proc(s, id, params);
	else if (!strcmp(method, "process/terminate"))
		terminate_proc(s, id, params);
	else
		return false;
	return true;
}

void xs_procs_free(xs_session *s)
{
	/* What still runs belonged to this connection: kill it, stop following, then free. */
	for (;;) {
		uint64_t handle = 0;
		bool found = false;
		pthread_mutex_lock(&s->mu);
		for (xs_proc *p = s->procs; p; p = p->next)
			if (p->following) {
				handle = p->handle;
				p->following = false;
				found = true;
				break;
			}
		pthread_mutex_unlock(&s->mu);
		if (!found)
			break;
		asp_error err;
		send_signal(s, handle, "KILL", &err);
		asp_proc_detach(s->c, handle);
	}
	while (s->procs) {
		xs_proc *p = s->procs;
		s->procs = p->next;
		drop_chunks_locked(p);
		json_decref(p->pending);
		free(p->failure);
		free(p->id);
		free(p);
	}
}

void xs_procs_resume(xs_session *s)
{
	if (!s->session)
		return;
	asp_arena *a = asp_arena_new();
	asp_proc_list_params lp;
	asp_proc_list_params_init(&lp);
	asp_proc_list_result lr;
	asp_error err;
	if (!a || asp_proc_list(s->c, &lp, &lr, a, &err) != ASP_OK) {
		asp_arena_free(a);
		return; /* nothing to find again: a sandbox without proc_list keeps nothing */
	}
	size_t found = 0;
	for (size_t i = 0; i < lr.procs.count; i++) {
		const asp_proc_info *pi = &lr.procs.items[i];
		bool tty = false;
		char *id = pi->running ? parse_tag(s, pi->tag, &tty) : NULL;
		xs_proc *p = id ? calloc(1, sizeof *p) : NULL;
		if (!p || !(p->pending = json_array())) {
			free(id);
			free(p);
			continue;
		}
		p->s = s;
		p->id = id;
		p->handle = pi->proc;
		p->tty = tty;
		p->pipe_stdin = true; /* stdin as it was: a write to a closed one says so */
		p->announced = true;
		p->following = true;
		pthread_mutex_lock(&s->mu);
		bool dup = find_locked(s, id) != NULL;
		if (!dup) {
			p->next = s->procs;
			s->procs = p;
		}
		pthread_mutex_unlock(&s->mu);
		asp_proc_attach_params ap;
		asp_proc_attach_params_init(&ap);
		ap.proc = pi->proc;
		/* invalid_argument: another session of this process follows it already */
		if (!dup && asp_proc_attach_start(s->c, &ap, &proc_cbs, p, &err) == ASP_OK) {
			found++;
			continue;
		}
		pthread_mutex_lock(&s->mu);
		for (xs_proc **pp = &s->procs; !dup && *pp; pp = &(*pp)->next)
			if (*pp == p) {
				*pp = p->next;
				break;
			}
		pthread_mutex_unlock(&s->mu);
		json_decref(p->pending);
		free(p->id);
		free(p);
	}
	asp_arena_free(a);
	if (found)
		fprintf(stderr,
		        "asp: exec-server: %zu running process%s of session %s followed again\n",
		        found, found == 1 ? "" : "es", s->session);
}
