/*
 * tree_write and tree_read in native mode when the sandbox has no tar (docs/design.md,
 * "Trees as one stream"): the members go over SFTP, many requests in flight. Each member's
 * requests go out together (a file's OPEN, WRITEs, FSETSTAT and CLOSE on the handle
 * sftp-server will give, ssh_sftp_handles.c: one round trip), and a pool of WORKERS
 * threads each keeps up to BATCH members in flight, sending ahead and taking the answers
 * in order, so the connection, not the round trip, sets the pace. sftp-server takes
 * requests in the order they came, so a job that needs another done first (a file in a
 * directory being made, the next piece of a file) goes out as soon as that one's requests
 * are out, not a round trip after; when that one fails, so does the job, and the failure
 * reported is the first one's.
 *
 * Writing: members go into the temporary directory the write script made beside the
 * target (inside it when it exists; ssh_tree.c), each behind its directory's mkdir;
 * directories get their mode and mtime once everything in them is written. Then the
 * write script puts the temporary in place as it does after tar (renamed to the target,
 * or its entries moved into the existing target after every conflict was looked for:
 * ssh_tree.c). What is left of the temporary goes with the script, or with
 * sftp_tw_remove where the script is gone: nothing reaches the target.
 *
 * Reading: the directories are listed level by level (one level's lists at once), then
 * the stream is made in the order asp-agent makes it, the files read READ_AHEAD ahead of
 * the one being sent.
 */
#include "ssh_internal.h"

#include "asp/tar.h"
#include "asp/tree.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS      4u /* threads, each with up to BATCH jobs in flight */
#define BATCH        64u
#define PIECE        (1u << 20)  /* a file's bytes per job */
#define HELD_MAX     (32u << 20) /* bytes waiting in jobs at most */
#define READ_AHEAD   256u        /* files read ahead of the one sent */
#define DEFAULT_PERM 0755u

/* ---- a pool of threads, each with many jobs' requests in flight --------------------- */

typedef enum jkind { J_MKDIR, J_PUT, J_LINK, J_SETSTAT, J_LSTAT, J_LIST, J_READ } jkind;

typedef struct job job;
struct job {
	job *next; /* in the queue */
	jkind kind;
	char *path, *s2; /* s2: a symlink's target */
	uint8_t *data;   /* J_PUT's bytes (held), J_READ's result */
	size_t len;
	uint64_t base;
	bool create, last;
	uint32_t perm, mtime;
	job *after; /* goes out once this one's requests are out */
	bool sent;  /* its requests are out (or it is done) */
	bool done;
	asp_status st;
	/* results */
	int kind_out; /* J_LSTAT: 0 absent, 1 directory, 2 other; perm and mtime its */
	asp_list_result list;
	asp_arena *a;
};

typedef struct pool {
	sftpc *f;
	size_t budget;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job *head, *tail;
	pthread_t tids[WORKERS];
	unsigned n;
	bool closing;
	unsigned pending; /* queued or running */
	unsigned unsent;  /* queued or running, requests not out yet */
	size_t held;      /* bytes of queued J_PUT jobs */
	bool failed;
	asp_error err; /* the first failure */
} pool;

/* Under p->mu. */
static void mark_sent(pool *p, job *j)
{
	if (j->sent)
		return;
	j->sent = true;
	p->unsent--;
	pthread_cond_broadcast(&p->cv);
}

/* The request for job j; false when out of memory. */
static bool request_of(job *j, sftp_tq *t)
{
	memset(t, 0, sizeof *t);
	t->path = j->path;
	t->perm = j->perm;
	t->mtime = j->mtime;
	switch (j->kind) {
	case J_MKDIR:
		t->kind = TQ_MKDIR;
		t->perm = j->perm | 0700;
		return true;
	case J_PUT:
		t->kind = TQ_PUT;
		t->data = j->data;
		t->len = j->len;
		t->base = j->base;
		t->create = j->create;
		t->last = j->last;
		return true;
	case J_LINK:
		t->kind = TQ_LINK;
		t->s2 = j->s2;
		return true;
	case J_SETSTAT: t->kind = TQ_SETSTAT; return true;
	case J_LSTAT: t->kind = TQ_LSTAT; return true;
	case J_LIST:
		t->kind = TQ_LIST;
		t->arena = j->a = asp_arena_new();
		return j->a != NULL;
	case J_READ:
		if (j->s2) { /* a symlink's target */
			t->kind = TQ_READLINK;
			return true;
		}
		t->kind = TQ_GET;
		t->len = j->len;
		t->buf = j->data = malloc(j->len ? j->len : 1);
		return j->data != NULL;
	}
	return false;
}

/* What came back for job j. */
static void take_result(job *j, sftp_tq *t)
{
	if (j->kind == J_LSTAT) {
		j->kind_out = t->lkind;
		j->perm = t->lperm;
		j->mtime = t->lmtime;
	} else if (j->kind == J_LIST)
		j->list = t->list;
	else if (j->kind == J_READ && j->s2)
		j->data = (uint8_t *)t->link;
	else if (j->kind == J_READ)
		j->base = t->got; /* what came */
}

/* Job j's end, st its status (under p->mu). */
static void finish_job(pool *p, job *j, asp_status st, bool skip, const asp_error *e)
{
	/* behind a failed job, a failure is that one's: its report comes first */
	while (st != ASP_OK && !skip && j->after && !j->after->done)
		pthread_cond_wait(&p->cv, &p->mu);
	if (st != ASP_OK && !skip && j->after && j->after->st != ASP_OK)
		skip = true;
	if (st != ASP_OK && !skip && !p->failed) {
		p->failed = true;
		p->err = *e;
	}
	if (j->kind == J_PUT) {
		p->held -= j->len;
		free(j->data);
		j->data = NULL;
	}
	j->st = st;
	mark_sent(p, j);
	j->done = true;
	p->pending--;
	pthread_cond_broadcast(&p->cv);
}

/*
 * Keeps up to BATCH jobs of the queue's, taken in its order: sends each one's requests as
 * soon as what it waits for is out, and takes the answers in order, taking more jobs as
 * room comes. A job whose `after` is not out yet waits for it, the answers in flight
 * first (they may be what it waits for); with nothing in flight the worker sleeps on it.
 * What a job waits for is always earlier in the queue, so two workers never wait on
 * each other.
 */
static void *worker(void *arg)
{
	pool *p = arg;
	job *mine[BATCH];
	sftp_tq tq[BATCH];
	bool skip[BATCH], asked[BATCH];
	size_t n = 0, out = 0, done = 0; /* mine[done..out) in flight, [out..n) not sent yet */
	pthread_mutex_lock(&p->mu);
	for (;;) {
		if (done == n) {
			n = out = done = 0;
		} else if (done > 0 && n == BATCH && p->head) {
			memmove(mine, mine + done, (n - done) * sizeof *mine);
			memmove(tq, tq + done, (n - done) * sizeof *tq);
			memmove(skip, skip + done, (n - done) * sizeof *skip);
			memmove(asked, asked + done, (n - done) * sizeof *asked);
			n -= done;
			out -= done;
			done = 0;
		}
		for (; p->head && n < BATCH; n++) {
			mine[n] = p->head;
			p->head = p->head->next;
		}
		if (!p->head)
			p->tail = NULL;
		if (n == 0) {
			if (p->closing)
				break;
			pthread_cond_wait(&p->cv, &p->mu);
			continue;
		}
		while (out < n) {
			job *j = mine[out];
			if (j->after && !j->after->sent) {
				if (done < out)
					break;
				pthread_cond_wait(&p->cv, &p->mu);
				continue;
			}
			skip[out] =
			    p->failed || (j->after && j->after->done && j->after->st != ASP_OK);
			asked[out] = !skip[out] && request_of(j, &tq[out]);
			if (asked[out]) {
				pthread_mutex_unlock(&p->mu);
				bool all = ssh_sftp_tq_send(p->f, &tq[out]);
				pthread_mutex_lock(&p->mu);
				if (all)
					mark_sent(p, j);
			}
			out++;
		}
		if (done == out)
			continue;
		job *j = mine[done];
		asp_error e;
		asp_status st = ASP_E_IO_ERROR; /* skipped: never reported */
		pthread_mutex_unlock(&p->mu);
		if (asked[done]) {
			st = ssh_sftp_tq_await(p->f, &tq[done], &e);
			take_result(j, &tq[done]);
		} else if (!skip[done]) {
			st = asp_error_set(&e, ASP_E_INTERNAL, NULL, "tree: out of memory");
		}
		pthread_mutex_lock(&p->mu);
		finish_job(p, j, st, skip[done], &e);
		done++;
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static asp_status pool_start(pool *p, sftpc *f, size_t budget, asp_error *err)
{
	memset(p, 0, sizeof *p);
	p->f = f;
	p->budget = budget;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (; p->n < WORKERS; p->n++)
		if (pthread_create(&p->tids[p->n], NULL, worker, p) != 0)
			break;
	return p->n ? ASP_OK : asp_error_set(err, ASP_E_INTERNAL, NULL, "tree: no thread");
}

static void pool_stop(pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->closing = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n; i++)
		pthread_join(p->tids[i], NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
}

/* Queues `j` once the bytes held allow; false once the pool failed (j not queued). */
static bool pool_put(pool *p, job *j)
{
	pthread_mutex_lock(&p->mu);
	while (!p->failed && j->kind == J_PUT && p->held && p->held + j->len > HELD_MAX)
		pthread_cond_wait(&p->cv, &p->mu);
	bool ok = !p->failed;
	if (ok) {
		j->next = NULL;
		if (p->tail)
			p->tail->next = j;
		else
			p->head = j;
		p->tail = j;
		p->pending++;
		p->unsent++;
		if (j->kind == J_PUT)
			p->held += j->len;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return ok;
}

/* Until every job queued has its requests out; the pool's first failure, or ASP_OK. */
static asp_status pool_wait_sent(pool *p, asp_error *err)
{
	pthread_mutex_lock(&p->mu);
	while (p->unsent > 0 && !p->failed)
		pthread_cond_wait(&p->cv, &p->mu);
	asp_status st = p->failed ? (*err = p->err, err->code) : ASP_OK;
	pthread_mutex_unlock(&p->mu);
	return st;
}

/* Waits for `j` (NULL: every job); the pool's first failure, or ASP_OK. */
static asp_status pool_wait(pool *p, job *j, asp_error *err)
{
	pthread_mutex_lock(&p->mu);
	while (j ? !j->done : p->pending > 0)
		pthread_cond_wait(&p->cv, &p->mu);
	asp_status st = p->failed ? (*err = p->err, err->code) : ASP_OK;
	pthread_mutex_unlock(&p->mu);
	return st;
}

static char *join(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = malloc(na + nb + 2);
	if (!s)
		return NULL;
	memcpy(s, a, na);
	s[na] = '/';
	memcpy(s + na + 1, b, nb + 1);
	if (!nb)
		s[na] = '\0';
	return s;
}

static void job_free(job *j)
{
	if (!j)
		return;
	free(j->path);
	free(j->s2);
	if (!j->a)
		free(j->data);
	asp_arena_free(j->a);
	free(j);
}

/* ---- tree_write ------------------------------------------------------------------- */

typedef struct member {
	char *rel; /* path below the root */
	bool dir;
	uint32_t perm, mtime;
	job *made; /* the job that makes it (directories) */
} member;

struct sftp_tw {
	pool p;
	bool started;
	char *target, *tmp;
	bool inside; /* the target exists: tmp is in it */
	member *m;
	size_t n, cap;
	bool has_root;
	uint32_t root_perm, root_mtime;
	job **jobs; /* every job, for freeing */
	size_t nj, capj;
	job *cur; /* the file being received: its piece */
	uint64_t cur_off;
};

static job *new_job(sftp_tw *w, jkind k, char *path)
{
	if (!path)
		return NULL;
	if (w->nj == w->capj) {
		size_t cap = w->capj ? 2 * w->capj : 256;
		job **nj = realloc(w->jobs, cap * sizeof *nj);
		if (!nj) {
			free(path);
			return NULL;
		}
		w->jobs = nj;
		w->capj = cap;
	}
	job *j = calloc(1, sizeof *j);
	if (!j) {
		free(path);
		return NULL;
	}
	j->kind = k;
	j->path = path;
	w->jobs[w->nj++] = j;
	return j;
}

static asp_status oom(asp_error *err)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_write: out of memory");
}

/* The queue refused the job: the pool's first failure. */
static asp_status queue(sftp_tw *w, job *j, asp_error *err)
{
	if (pool_put(&w->p, j))
		return ASP_OK;
	return pool_wait(&w->p, NULL, err);
}

/* The job that makes the directory `rel` ("" the root: none); made when the stream did
 * not name it first. */
static asp_status dir_job(sftp_tw *w, const char *rel, job **out, asp_error *err);

static asp_status add_member(sftp_tw *w, const char *rel, bool dir, uint32_t perm, uint32_t mtime,
                             job *made, asp_error *err)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 256;
		member *nm = realloc(w->m, cap * sizeof *nm);
		if (!nm)
			return oom(err);
		w->m = nm;
		w->cap = cap;
	}
	char *r = strdup(rel);
	if (!r)
		return oom(err);
	w->m[w->n++] = (member){r, dir, perm, mtime, made};
	return ASP_OK;
}

static asp_status make_dir(sftp_tw *w, const char *rel, uint32_t perm, uint32_t mtime, job **out,
                           asp_error *err)
{
	*out = NULL;
	const char *slash = strrchr(rel, '/');
	job *parent = NULL;
	if (slash) {
		char *up = strndup(rel, (size_t)(slash - rel));
		if (!up)
			return oom(err);
		asp_status st = dir_job(w, up, &parent, err);
		free(up);
		if (st != ASP_OK)
			return st;
	}
	job *j = new_job(w, J_MKDIR, join(w->tmp, rel));
	if (!j)
		return oom(err);
	j->perm = perm;
	j->after = parent;
	asp_status st = add_member(w, rel, true, perm, mtime, j, err);
	if (st == ASP_OK)
		st = queue(w, j, err);
	*out = j;
	return st;
}

static asp_status dir_job(sftp_tw *w, const char *rel, job **out, asp_error *err)
{
	*out = NULL;
	if (!rel[0])
		return ASP_OK;
	for (size_t i = w->n; i-- > 0;)
		if (w->m[i].dir && strcmp(w->m[i].rel, rel) == 0) {
			*out = w->m[i].made;
			return ASP_OK;
		}
	return make_dir(w, rel, DEFAULT_PERM, (uint32_t)time(NULL), out, err);
}

/* The job of a member `rel`'s directory. */
static asp_status parent_of(sftp_tw *w, const char *rel, job **out, asp_error *err)
{
	const char *slash = strrchr(rel, '/');
	if (!slash) {
		*out = NULL;
		return ASP_OK;
	}
	char *up = strndup(rel, (size_t)(slash - rel));
	if (!up)
		return oom(err);
	asp_status st = dir_job(w, up, out, err);
	free(up);
	return st;
}

asp_status sftp_tw_open(sftpc *f, size_t budget, const char *target, const char *tmp_name,
                        bool inside, sftp_tw **out, asp_error *err)
{
	*out = NULL;
	sftp_tw *w = calloc(1, sizeof *w);
	if (!w)
		return oom(err);
	w->p.f = f;
	size_t tl = strlen(target);
	while (tl > 1 && target[tl - 1] == '/')
		tl--;
	w->target = strndup(target, tl);
	w->inside = inside;
	asp_status st = w->target ? ASP_OK : oom(err);
	if (st == ASP_OK && inside) {
		w->tmp = join(w->target, tmp_name);
	} else if (st == ASP_OK) {
		/* the parent as the script names it: "." for a bare name, "/" at the top */
		const char *slash = strrchr(w->target, '/');
		char *up = slash ? strndup(w->target, (size_t)(slash - w->target)) : strdup(".");
		if (up)
			w->tmp = join(up, tmp_name);
		free(up);
	}
	if (st == ASP_OK && !w->tmp)
		st = oom(err);
	if (st == ASP_OK)
		st = pool_start(&w->p, f, budget, err);
	if (st != ASP_OK) {
		free(w->tmp);
		free(w->target);
		free(w);
		return st;
	}
	w->started = true;
	*out = w;
	return ASP_OK;
}

/* (Not after sftp_tw_stop, which destroys the pool's lock.) */
void sftp_tw_cancel(sftp_tw *w, const asp_error *why)
{
	pool *p = &w->p;
	pthread_mutex_lock(&p->mu);
	if (!p->failed) {
		p->failed = true;
		p->err = *why;
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

asp_status sftp_tw_member(sftp_tw *w, const asp_tar_member *m, asp_error *err)
{
	uint32_t perm = (uint32_t)m->mode & 07777 & ~06000u;
	uint32_t mtime = m->mtime < 0 ? 0 : (uint32_t)m->mtime;
	if (!m->path[0]) {
		w->has_root = true;
		w->root_perm = perm;
		w->root_mtime = mtime;
		return ASP_OK;
	}
	job *parent, *j = NULL;
	asp_status st;
	switch (m->type) {
	case ASP_TAR_DIR: return make_dir(w, m->path, perm, mtime, &j, err);
	case ASP_TAR_SYMLINK:
		if ((st = parent_of(w, m->path, &parent, err)) != ASP_OK)
			return st;
		if (!(j = new_job(w, J_LINK, join(w->tmp, m->path))) || !(j->s2 = strdup(m->link)))
			return oom(err);
		j->after = parent;
		if ((st = add_member(w, m->path, false, 0, 0, NULL, err)) != ASP_OK)
			return st;
		return queue(w, j, err);
	case ASP_TAR_FILE:
		if ((st = parent_of(w, m->path, &parent, err)) != ASP_OK)
			return st;
		if (!(j = new_job(w, J_PUT, join(w->tmp, m->path))))
			return oom(err);
		j->after = parent;
		j->create = true;
		j->perm = perm;
		j->mtime = mtime;
		w->cur = j;
		w->cur_off = 0;
		return add_member(w, m->path, false, perm, mtime, NULL, err);
	default:
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, m->path,
		                     "tree_write: member '%s' is not a file, directory or symlink",
		                     m->path);
	}
}

/* The current piece is queued; the next one follows it. */
static asp_status next_piece(sftp_tw *w, bool last, asp_error *err)
{
	job *j = w->cur;
	j->last = last;
	asp_status st = queue(w, j, err);
	w->cur_off += j->len;
	w->cur = NULL;
	if (st != ASP_OK || last)
		return st;
	job *k = new_job(w, J_PUT, strdup(j->path));
	if (!k)
		return oom(err);
	k->after = j;
	k->base = w->cur_off;
	k->perm = j->perm;
	k->mtime = j->mtime;
	w->cur = k;
	return ASP_OK;
}

asp_status sftp_tw_data(sftp_tw *w, const uint8_t *p, size_t n, asp_error *err)
{
	while (n > 0 && w->cur) {
		job *j = w->cur;
		if (!j->data && !(j->data = malloc(PIECE)))
			return oom(err);
		size_t k = PIECE - j->len < n ? PIECE - j->len : n;
		memcpy(j->data + j->len, p, k);
		j->len += k;
		p += k;
		n -= k;
		if (j->len == PIECE) {
			asp_status st = next_piece(w, false, err);
			if (st != ASP_OK)
				return st;
		}
	}
	return ASP_OK;
}

asp_status sftp_tw_file_end(sftp_tw *w, asp_error *err)
{
	return w->cur ? next_piece(w, true, err) : ASP_OK;
}

asp_status sftp_tw_finish(sftp_tw *w, asp_error *err)
{
	pool *p = &w->p;
	/*
	 * Directories last, deepest first, each behind the one before: their mode and mtime
	 * once everything in them is written (the requests of every member are out: the
	 * server takes them first), then the temporary's own; all in the round trip of the
	 * last members.
	 */
	asp_status st = pool_wait_sent(p, err);
	job *prev = NULL;
	for (size_t i = w->n; st == ASP_OK && i-- > 0;) {
		member *m = &w->m[i];
		if (!m->dir)
			continue;
		job *j = new_job(w, J_SETSTAT, join(w->tmp, m->rel));
		if (!j) {
			st = oom(err);
			break;
		}
		j->perm = m->perm;
		j->mtime = m->mtime;
		j->after = prev;
		prev = j;
		if (!pool_put(p, j))
			break;
	}
	if (st == ASP_OK && !w->inside) {
		job *j = new_job(w, J_SETSTAT, strdup(w->tmp));
		if (!j) {
			st = oom(err);
		} else {
			j->perm = w->has_root ? w->root_perm : DEFAULT_PERM;
			j->mtime = w->has_root ? w->root_mtime : (uint32_t)time(NULL);
			j->after = prev;
			pool_put(p, j);
		}
	}
	asp_status waited = pool_wait(p, NULL, err);
	return st == ASP_OK ? waited : st;
}

void sftp_tw_stop(sftp_tw *w)
{
	if (w && w->started)
		pool_stop(&w->p);
	w->started = false;
}

void sftp_tw_remove(sftp_tw *w)
{
	sftp_tw_stop(w);
	if (!w || !w->tmp)
		return;
	asp_remove_params rp;
	asp_remove_params_init(&rp);
	rp.path = w->tmp;
	rp.recursive = true;
	asp_error ignore;
	ssh_sftp_remove(w->p.f, &rp, &ignore);
}

void sftp_tw_free(sftp_tw *w)
{
	if (!w)
		return;
	sftp_tw_stop(w);
	for (size_t i = 0; i < w->nj; i++)
		job_free(w->jobs[i]);
	free(w->jobs);
	for (size_t i = 0; i < w->n; i++)
		free(w->m[i].rel);
	free(w->m);
	free(w->tmp);
	free(w->target);
	free(w);
}

/* ---- tree_read -------------------------------------------------------------------- */

typedef struct node {
	char *rel;
	char type; /* 'd', 'f', 'l' */
	uint32_t perm;
	int64_t mtime;
	uint64_t size;
	size_t first, count; /* a directory's children in the list, once listed */
	job *j;              /* its list (d), its read (f), its readlink (l) */
} node;

typedef struct walk {
	pool p;
	const char *dir;
	const asp_tree_exclude *ex;
	node *v;
	size_t n, cap;
	sftp_emit emit;
	void *user;
	job **jobs;
	size_t nj, capj;
} walk;

static int by_name(const void *a, const void *b)
{
	return strcmp(((const node *)a)->rel, ((const node *)b)->rel);
}

static job *walk_job(walk *k, jkind kind, char *path)
{
	sftp_tw fake = {.jobs = k->jobs, .nj = k->nj, .capj = k->capj};
	job *j = new_job(&fake, kind, path);
	k->jobs = fake.jobs;
	k->nj = fake.nj;
	k->capj = fake.capj;
	return j;
}

static asp_status walk_oom(asp_error *err)
{
	return asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_read: out of memory");
}

/* Lists the directories from v[from] on, level by level, into the list. */
static asp_status list_all(walk *k, asp_error *err)
{
	/* the root's lstat goes with its list: its kind is the error, if any, its mode and
	 * mtime the stream's first header */
	job *root = walk_job(k, J_LSTAT, strdup(k->dir));
	if (!root)
		return walk_oom(err);
	if (!pool_put(&k->p, root))
		return pool_wait(&k->p, NULL, err);
	size_t from = 0;
	while (from < k->n) {
		size_t to = k->n;
		for (size_t i = from; i < to; i++) {
			if (k->v[i].type != 'd' && k->v[i].type != 'l')
				continue;
			job *j = k->v[i].type == 'd'
			             ? walk_job(k, J_LIST, join(k->dir, k->v[i].rel))
			             : walk_job(k, J_READ, join(k->dir, k->v[i].rel));
			if (!j)
				return walk_oom(err);
			if (k->v[i].type == 'l')
				j->s2 = strdup("");
			k->v[i].j = j;
			if (!pool_put(&k->p, j))
				break;
		}
		asp_status st = pool_wait(&k->p, NULL, err);
		if (from == 0 && root->done && root->st == ASP_OK && root->kind_out != 1)
			return asp_error_set(
			    err, root->kind_out ? ASP_E_NOT_A_DIRECTORY : ASP_E_NOT_FOUND, k->dir,
			    "tree_read: %s: %s", k->dir,
			    root->kind_out ? "not a directory" : "no such directory");
		if (st != ASP_OK)
			return st;
		if (from == 0) {
			k->v[0].perm = root->perm & 07777;
			k->v[0].mtime = root->mtime;
		}
		for (size_t i = from; i < to; i++) {
			if (k->v[i].type != 'd')
				continue;
			asp_list_entry_array *e = &k->v[i].j->list.entries;
			k->v[i].first = k->n;
			for (size_t c = 0; c < e->count; c++) {
				const asp_list_entry *x = &e->items[c];
				char t = !strcmp(x->type, "dir")       ? 'd'
				         : !strcmp(x->type, "file")    ? 'f'
				         : !strcmp(x->type, "symlink") ? 'l'
				                                       : 0;
				if (!t)
					continue; /* other kinds are skipped */
				char *rel =
				    k->v[i].rel[0] ? join(k->v[i].rel, x->name) : strdup(x->name);
				if (!rel)
					return walk_oom(err);
				if (k->ex && asp_tree_exclude_match(k->ex, rel)) {
					free(rel);
					continue;
				}
				if (k->n == k->cap) {
					size_t cap = 2 * k->cap;
					node *nv = realloc(k->v, cap * sizeof *nv);
					if (!nv) {
						free(rel);
						return walk_oom(err);
					}
					k->v = nv;
					k->cap = cap;
				}
				k->v[k->n++] = (node){rel,
				                      t,
				                      (uint32_t)x->mode,
				                      x->mtime_ns / 1000000000,
				                      t == 'f' ? x->size : 0,
				                      0,
				                      0,
				                      NULL};
			}
			k->v[i].count = k->n - k->v[i].first;
			qsort(k->v + k->v[i].first, k->v[i].count, sizeof *k->v, by_name);
			asp_arena_free(k->v[i].j->a);
			k->v[i].j->a = NULL;
			memset(&k->v[i].j->list, 0, sizeof k->v[i].j->list);
		}
		from = to;
	}
	return ASP_OK;
}

/* The stream's order: each directory, then what it holds, names bytewise. */
static void order(const walk *k, size_t i, size_t *out, size_t *n)
{
	out[(*n)++] = i;
	if (k->v[i].type != 'd')
		return;
	for (size_t c = 0; c < k->v[i].count; c++)
		order(k, k->v[i].first + c, out, n);
}

static asp_status emit_zeros(walk *k, size_t n, asp_error *err)
{
	static const uint8_t zero[ASP_TAR_BLOCK];
	while (n > 0) {
		size_t c = n < sizeof zero ? n : sizeof zero;
		asp_status st = k->emit(k->user, zero, c, err);
		if (st != ASP_OK)
			return st;
		n -= c;
	}
	return ASP_OK;
}

/* Queues the read of file v[i] (a small one whole; a big one is read as it is sent). */
static bool read_ahead(walk *k, size_t i, asp_error *err, asp_status *st)
{
	node *x = &k->v[i];
	if (x->type != 'f' || x->size > PIECE || x->j)
		return true;
	x->j = walk_job(k, J_READ, join(k->dir, x->rel));
	if (!x->j) {
		*st = walk_oom(err);
		return false;
	}
	x->j->len = (size_t)x->size;
	return pool_put(&k->p, x->j);
}

static asp_status send_file(walk *k, node *x, asp_error *err)
{
	asp_status st = ASP_OK;
	uint64_t sent = 0;
	if (x->j) {
		st = pool_wait(&k->p, x->j, err);
		size_t got = x->j->base < x->size ? (size_t)x->j->base : (size_t)x->size;
		if (st == ASP_OK && got)
			st = k->emit(k->user, x->j->data, got, err);
		sent = got;
		free(x->j->data);
		x->j->data = NULL;
	} else {
		char *path = join(k->dir, x->rel);
		asp_arena *a = asp_arena_new();
		if (!path || !a)
			st = walk_oom(err);
		while (st == ASP_OK && sent < x->size) {
			asp_read_params rp;
			asp_read_params_init(&rp);
			rp.path = path;
			rp.offset = sent;
			rp.has_length = true;
			rp.length = x->size - sent < 4 * PIECE ? x->size - sent : 4 * PIECE;
			asp_read_result rr;
			st = ssh_sftp_read(k->p.f, &rp, k->p.budget, &rr, a, err);
			if (st == ASP_OK && rr.data.len)
				st = k->emit(k->user, rr.data.data, rr.data.len, err);
			sent += rr.data.len;
			asp_arena_reset(a);
			if (st == ASP_OK && (rr.eof || !rr.data.len))
				break;
		}
		asp_arena_free(a);
		free(path);
	}
	/* a file that shrank is padded, one that grew cut at its listed size */
	if (st == ASP_OK)
		st = emit_zeros(k, (size_t)(x->size - sent) + asp_tar_padding(x->size), err);
	return st;
}

asp_status sftp_tree_walk(sftpc *f, size_t budget, const char *dir, const asp_tree_exclude *ex,
                          sftp_emit emit, void *user, asp_error *err)
{
	walk k = {.dir = dir, .ex = ex, .emit = emit, .user = user};
	asp_status st;
	k.cap = 256;
	k.v = malloc(k.cap * sizeof *k.v);
	char *root = strdup("");
	if (!k.v || !root) {
		free(k.v);
		free(root);
		return walk_oom(err);
	}
	k.v[k.n++] = (node){root, 'd', 0, 0, 0, 0, 0, NULL}; /* mode and mtime: list_all */
	st = pool_start(&k.p, f, budget, err);
	bool started = st == ASP_OK;
	if (st == ASP_OK)
		st = list_all(&k, err);
	size_t *seq = st == ASP_OK ? malloc(k.n * sizeof *seq) : NULL;
	size_t ns = 0;
	if (st == ASP_OK && !seq)
		st = walk_oom(err);
	if (st == ASP_OK)
		order(&k, 0, seq, &ns);
	size_t ahead = 0, files_ahead = 0;
	uint64_t bytes_ahead = 0; /* of files read ahead whole, not sent yet */
	for (size_t s = 0; st == ASP_OK && s < ns; s++) {
		while (st == ASP_OK && ahead < ns && files_ahead < READ_AHEAD &&
		       bytes_ahead <= HELD_MAX) {
			node *y = &k.v[seq[ahead]];
			if (y->type == 'f' && ahead >= s) {
				files_ahead++;
				bytes_ahead += y->size <= PIECE ? y->size : 0;
			}
			if (!read_ahead(&k, seq[ahead++], err, &st) && st == ASP_OK)
				st = pool_wait(&k.p, NULL, err);
		}
		if (st != ASP_OK)
			break;
		node *x = &k.v[seq[s]];
		asp_tar_member m = {x->type == 'd'   ? ASP_TAR_DIR
		                    : x->type == 'f' ? ASP_TAR_FILE
		                                     : ASP_TAR_SYMLINK,
		                    x->rel,
		                    x->type == 'l' ? (const char *)x->j->data : NULL,
		                    x->perm & 07777,
		                    x->mtime,
		                    x->size};
		uint8_t hdr[ASP_TAR_HEADER_MAX];
		size_t hn = asp_tar_header(&m, hdr, sizeof hdr, err);
		if (!hn) {
			st = err->code;
			break;
		}
		st = emit(user, hdr, hn, err);
		if (st == ASP_OK && x->type == 'f') {
			st = send_file(&k, x, err);
			files_ahead--;
			bytes_ahead -= x->size <= PIECE ? x->size : 0;
		}
	}
	if (st == ASP_OK)
		st = emit_zeros(&k, ASP_TAR_END_BYTES, err);
	if (started)
		pool_stop(&k.p);
	free(seq);
	for (size_t i = 0; i < k.nj; i++)
		job_free(k.jobs[i]);
	free(k.jobs);
	for (size_t i = 0; i < k.n; i++)
		free(k.v[i].rel);
	free(k.v);
	return st;
}
