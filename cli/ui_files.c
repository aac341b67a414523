/*
 * The page's file ops: list, stat, read (a byte range, for paging through a large file),
 * mkdir, rename, remove, and uploads. An upload writes its chunks (each at its offset, in
 * any order) into a temporary file beside the target and renames it over the target at
 * the end, so a page that goes away mid-upload leaves the target as it was; its
 * temporary file is removed when the page's connection ends.
 */
#include "ui.h"

#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Largest read answered: a page of the viewer, a chunk of an image. */
#define READ_MAX (1u << 20)

typedef struct upload {
	struct upload *next;
	uint64_t id;
	char *target, *temp;
	uint64_t size, written;
	unsigned busy; /* chunks being written */
} upload;

struct ui_uploads {
	pthread_mutex_t mu;
	upload *list;
	uint64_t next_id;
};

ui_uploads *ui_uploads_new(void)
{
	ui_uploads *u = calloc(1, sizeof *u);
	if (u)
		pthread_mutex_init(&u->mu, NULL);
	return u;
}

static bool str_arg(ui_conn *c, json_t *id, json_t *req, const char *key, const char **out)
{
	json_t *v = json_object_get(req, key);
	if (!json_is_string(v) || !*json_string_value(v)) {
		ui_reply_error(c, id, "invalid_argument", "`%s` must be a non-empty string", key);
		return false;
	}
	*out = json_string_value(v);
	return true;
}

static uint64_t uint_arg(json_t *req, const char *key, uint64_t dflt)
{
	json_t *v = json_object_get(req, key);
	return json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v)
	                                                        : dflt;
}

static void op_list(asp_client *cl, ui_conn *c, json_t *id, json_t *req, asp_arena *a)
{
	const char *path;
	if (!str_arg(c, id, req, "path", &path))
		return;
	asp_list_params p;
	asp_list_params_init(&p);
	p.path = path;
	asp_list_result r;
	asp_error err;
	asp_status st = asp_list(cl, &p, &r, a, &err);
	json_t *entries = json_array();
	for (size_t i = 0; st == ASP_OK && i < r.entries.count; i++) {
		const asp_list_entry *e = &r.entries.items[i];
		bool lossy;
		json_t *name = ui_string(e->name, strlen(e->name), &lossy);
		json_array_append_new(
		    entries,
		    json_pack("{s:o, s:s, s:I, s:I, s:I, s:b}", "name", name, "type", e->type,
		              "size", (json_int_t)e->size, "mode", (json_int_t)e->mode, "mtime_ms",
		              (json_int_t)(e->mtime_ns / 1000000), "lossy", lossy));
	}
	ui_reply_status(c, id, st, &err, json_pack("{s:o}", "entries", entries));
}

static void op_stat(asp_client *cl, ui_conn *c, json_t *id, json_t *req, asp_arena *a)
{
	const char *path;
	if (!str_arg(c, id, req, "path", &path))
		return;
	asp_stat_params p;
	asp_stat_params_init(&p);
	p.path = path;
	asp_stat_result r;
	asp_error err;
	asp_status st = asp_stat(cl, &p, &r, a, &err);
	ui_reply_status(c, id, st, &err,
	                st == ASP_OK ? json_pack("{s:s, s:I, s:I, s:I}", "type", r.type, "size",
	                                         (json_int_t)r.size, "mode", (json_int_t)r.mode,
	                                         "mtime_ms", (json_int_t)(r.mtime_ns / 1000000))
	                             : NULL);
}

static void op_read(asp_client *cl, ui_conn *c, json_t *id, json_t *req, asp_arena *a)
{
	const char *path;
	if (!str_arg(c, id, req, "path", &path))
		return;
	asp_read_params p;
	asp_read_params_init(&p);
	p.path = path;
	p.offset = uint_arg(req, "offset", 0);
	p.has_length = true;
	p.length = uint_arg(req, "length", READ_MAX);
	if (p.length > READ_MAX)
		p.length = READ_MAX;
	asp_read_result r;
	asp_error err;
	asp_status st = asp_read(cl, &p, &r, a, &err);
	char *b64 = st == ASP_OK ? cli_b64_encode(r.data.data, r.data.len) : NULL;
	if (st == ASP_OK && !b64) {
		ui_reply_error(c, id, "internal", "out of memory");
		return;
	}
	ui_reply_status(c, id, st, &err,
	                st == ASP_OK ? json_pack("{s:s, s:I, s:I, s:b}", "data", b64, "offset",
	                                         (json_int_t)p.offset, "size", (json_int_t)r.size,
	                                         "eof", r.eof)
	                             : NULL);
	free(b64);
}

static void op_mkdir(asp_client *cl, ui_conn *c, json_t *id, json_t *req, asp_arena *a)
{
	const char *path;
	if (!str_arg(c, id, req, "path", &path))
		return;
	asp_mkdir_params p;
	asp_mkdir_params_init(&p);
	p.path = path;
	asp_mkdir_result r;
	asp_error err;
	ui_reply_status(c, id, asp_mkdir(cl, &p, &r, a, &err), &err, NULL);
}

static void op_rename(asp_client *cl, ui_conn *c, json_t *id, json_t *req, asp_arena *a)
{
	const char *from, *to;
	if (!str_arg(c, id, req, "from", &from) || !str_arg(c, id, req, "to", &to))
		return;
	asp_rename_params p;
	asp_rename_params_init(&p);
	p.from = from;
	p.to = to;
	p.overwrite = false; /* the page asks before it replaces anything */
	asp_rename_result r;
	asp_error err;
	ui_reply_status(c, id, asp_rename(cl, &p, &r, a, &err), &err, NULL);
}

static asp_status remove_path(asp_client *cl, const char *path, bool recursive, asp_arena *a,
                              asp_error *err)
{
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = path;
	p.recursive = recursive;
	asp_remove_result r;
	return asp_remove(cl, &p, &r, a, err);
}

static void op_remove(asp_client *cl, ui_conn *c, json_t *id, json_t *req, asp_arena *a)
{
	const char *path;
	if (!str_arg(c, id, req, "path", &path))
		return;
	asp_error err;
	asp_status st =
	    remove_path(cl, path, json_is_true(json_object_get(req, "recursive")), a, &err);
	ui_reply_status(c, id, st, &err, NULL);
}

/* --- uploads ------------------------------------------------------------------------------- */

static void upload_free(upload *u)
{
	free(u->target);
	free(u->temp);
	free(u);
}

/* The upload `req` names, held (busy) until upload_put; NULL after answering. */
static upload *upload_get(ui_uploads *ups, ui_conn *c, json_t *id, json_t *req)
{
	uint64_t n = uint_arg(req, "upload", 0);
	pthread_mutex_lock(&ups->mu);
	upload *u = ups->list;
	while (u && u->id != n)
		u = u->next;
	if (u)
		u->busy++;
	pthread_mutex_unlock(&ups->mu);
	if (!u)
		ui_reply_error(c, id, "not_found", "no upload %llu in progress",
		               (unsigned long long)n);
	return u;
}

static void upload_put(ui_uploads *ups, upload *u)
{
	pthread_mutex_lock(&ups->mu);
	u->busy--;
	pthread_mutex_unlock(&ups->mu);
}

/* Takes the upload out of the table; false while a chunk is being written. */
static bool upload_unlink(ui_uploads *ups, upload *u)
{
	pthread_mutex_lock(&ups->mu);
	bool ok = u->busy == 1;
	for (upload **pp = &ups->list; ok && *pp; pp = &(*pp)->next)
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	if (!ok)
		u->busy--;
	pthread_mutex_unlock(&ups->mu);
	return ok;
}

static void op_upload_begin(asp_client *cl, ui_conn *c, ui_uploads *ups, json_t *id, json_t *req,
                            asp_arena *a)
{
	const char *path;
	if (!str_arg(c, id, req, "path", &path))
		return;
	asp_error err;
	if (!json_is_true(json_object_get(req, "overwrite"))) {
		asp_stat_params sp;
		asp_stat_params_init(&sp);
		sp.path = path;
		sp.follow = false;
		asp_stat_result sr;
		asp_status st = asp_stat(cl, &sp, &sr, a, &err);
		if (st == ASP_OK) {
			ui_reply_error(c, id, "already_exists", "%s exists", path);
			return;
		}
		if (st != ASP_E_NOT_FOUND) {
			ui_reply_asp(c, id, &err);
			return;
		}
	}
	upload *u = calloc(1, sizeof *u);
	if (!u || !(u->target = strdup(path)) || !(u->temp = path_temp_beside(path))) {
		if (u)
			upload_free(u);
		ui_reply_error(c, id, "internal", "out of memory");
		return;
	}
	u->size = uint_arg(req, "size", 0);
	asp_write_params wp;
	asp_write_params_init(&wp);
	wp.path = u->temp;
	wp.data.data = (const uint8_t *)"";
	wp.data.len = 0;
	asp_write_result wr;
	asp_status st = asp_write(cl, &wp, &wr, a, &err);
	if (st != ASP_OK) {
		upload_free(u);
		ui_reply_asp(c, id, &err);
		return;
	}
	pthread_mutex_lock(&ups->mu);
	u->id = ++ups->next_id;
	u->next = ups->list;
	ups->list = u;
	pthread_mutex_unlock(&ups->mu);
	ui_reply(c, id, json_pack("{s:I, s:s}", "upload", (json_int_t)u->id, "temp", u->temp));
}

static void op_upload_chunk(asp_client *cl, ui_conn *c, ui_uploads *ups, json_t *id, json_t *req,
                            asp_arena *a)
{
	json_t *data = json_object_get(req, "data");
	if (!json_is_string(data)) {
		ui_reply_error(c, id, "invalid_argument", "`data` must be base64 text");
		return;
	}
	upload *u = upload_get(ups, c, id, req);
	if (!u)
		return;
	uint8_t *bytes = NULL;
	size_t len = 0;
	uint64_t off = uint_arg(req, "offset", UINT64_MAX);
	/* the entry is let go before the answer: upload_end may follow it at once */
	if (!cli_b64_decode(json_string_value(data), json_string_length(data), &bytes, &len)) {
		upload_put(ups, u);
		ui_reply_error(c, id, "invalid_argument", "`data` is not base64");
	} else if (off > u->size || len > u->size - off) {
		upload_put(ups, u);
		ui_reply_error(c, id, "invalid_argument",
		               "a chunk of %zu bytes at %llu is beyond the upload's %llu bytes",
		               len, (unsigned long long)off, (unsigned long long)u->size);
	} else {
		asp_write_params wp;
		asp_write_params_init(&wp);
		wp.path = u->temp;
		wp.data.data = bytes;
		wp.data.len = len;
		wp.has_offset = true;
		wp.offset = off;
		asp_write_result wr;
		asp_error err;
		asp_status st = asp_write(cl, &wp, &wr, a, &err);
		pthread_mutex_lock(&ups->mu);
		if (st == ASP_OK)
			u->written += len;
		u->busy--;
		pthread_mutex_unlock(&ups->mu);
		ui_reply_status(c, id, st, &err, NULL);
	}
	free(bytes);
}

static void op_upload_end(asp_client *cl, ui_conn *c, ui_uploads *ups, json_t *id, json_t *req,
                          asp_arena *a, bool keep)
{
	upload *u = upload_get(ups, c, id, req);
	if (!u)
		return;
	if (!upload_unlink(ups, u)) {
		ui_reply_error(c, id, "invalid_argument",
		               "the upload's chunks are still being written");
		return;
	}
	asp_error err;
	asp_status st = ASP_OK;
	if (keep && u->written != u->size) {
		st = asp_error_set(&err, ASP_E_INVALID_ARGUMENT, u->target,
		                   "the upload has %llu of its %llu bytes",
		                   (unsigned long long)u->written, (unsigned long long)u->size);
		keep = false;
	}
	if (keep) {
		asp_rename_params rp;
		asp_rename_params_init(&rp);
		rp.from = u->temp;
		rp.to = u->target;
		asp_rename_result rr;
		st = asp_rename(cl, &rp, &rr, a, &err);
		keep = st == ASP_OK;
	}
	if (!keep) {
		asp_error e2;
		remove_path(cl, u->temp, false, a, &e2);
	}
	ui_reply_status(c, id, st, &err, NULL);
	upload_free(u);
}

void ui_uploads_free(asp_client *client, ui_uploads *ups)
{
	if (!ups)
		return;
	asp_arena *a = asp_arena_new();
	while (ups->list) {
		upload *u = ups->list;
		ups->list = u->next;
		asp_error err;
		if (a) /* the page went mid-upload: its half file goes too */
			remove_path(client, u->temp, false, a, &err);
		upload_free(u);
	}
	asp_arena_free(a);
	pthread_mutex_destroy(&ups->mu);
	free(ups);
}

bool ui_files_handle(asp_client *client, ui_conn *c, ui_uploads *up, const char *op, json_t *id,
                     json_t *req)
{
	static const char *const ops[] = {
	    "list",   "stat",         "read",         "mkdir",      "rename",
	    "remove", "upload_begin", "upload_chunk", "upload_end", "upload_abort"};
	size_t i = 0;
	while (i < sizeof ops / sizeof ops[0] && strcmp(ops[i], op))
		i++;
	if (i == sizeof ops / sizeof ops[0])
		return false;
	asp_arena *a = asp_arena_new();
	if (!a) {
		ui_reply_error(c, id, "internal", "out of memory");
		return true;
	}
	switch (i) {
	case 0: op_list(client, c, id, req, a); break;
	case 1: op_stat(client, c, id, req, a); break;
	case 2: op_read(client, c, id, req, a); break;
	case 3: op_mkdir(client, c, id, req, a); break;
	case 4: op_rename(client, c, id, req, a); break;
	case 5: op_remove(client, c, id, req, a); break;
	case 6: op_upload_begin(client, c, up, id, req, a); break;
	case 7: op_upload_chunk(client, c, up, id, req, a); break;
	case 8: op_upload_end(client, c, up, id, req, a, true); break;
	default: op_upload_end(client, c, up, id, req, a, false); break;
	}
	asp_arena_free(a);
	return true;
}
