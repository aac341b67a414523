/*
 * asp bind HARNESS [--print]: finds the config, asks the harness's planner for the files
 * its own configuration needs (merged with what is there), then writes those that change,
 * each atomically (a temporary file beside it, renamed), after checking that every one can
 * be written. --print shows them instead and writes nothing.
 */
#include "bind.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const bind_harness *const harnesses[] = {&bind_claude, &bind_codex, &bind_opencode,
                                                &bind_pi};

/* Larger files are not what a harness keeps its settings in. */
#define BIND_FILE_MAX (4u << 20)

int bind_read(const bind_ctx *b, const char *path, char **text)
{
	*text = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return cli_fail_errno(b->c, errno, "bind: read %s", path), -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > BIND_FILE_MAX) {
		int e = S_ISDIR(st.st_mode) ? EISDIR : errno ? errno : EFBIG;
		close(fd);
		return cli_fail_errno(b->c, e, "bind: read %s", path), -1;
	}
	uint8_t *data;
	size_t len;
	int r = cli_read_all(fd, &data, &len);
	int e = errno;
	close(fd);
	if (r != 0)
		return cli_fail_errno(b->c, e, "bind: read %s", path), -1;
	char *t = realloc(data, len + 1);
	if (!t) {
		free(data);
		return cli_fail_errno(b->c, ENOMEM, "bind"), -1;
	}
	t[len] = '\0';
	*text = t;
	return 0;
}

int bind_json_load(const bind_ctx *b, const char *path, json_t **obj, json_t **before)
{
	*obj = *before = NULL;
	char *text;
	if (bind_read(b, path, &text) != 0)
		return -1;
	if (!text) {
		*obj = json_object();
		return 0;
	}
	json_error_t je;
	json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	free(text);
	if (!json_is_object(doc)) {
		json_decref(doc);
		return cli_usage(b->c,
		                 "%s:%d:%d: %s; asp bind merges into a JSON object and leaves this "
		                 "file alone: fix or move it, then run again",
		                 path, je.line, je.column, doc ? "not a JSON object" : je.text),
		       -1;
	}
	*obj = doc;
	*before = json_deep_copy(doc);
	return 0;
}

static json_t *child(const bind_ctx *b, const char *path, json_t *obj, const char *key, bool array)
{
	json_t *v = json_object_get(obj, key);
	if (!v) {
		v = array ? json_array() : json_object();
		json_object_set_new(obj, key, v);
		return v;
	}
	if (array ? json_is_array(v) : json_is_object(v))
		return v;
	cli_usage(b->c, "%s: \"%s\" is not %s; fix it, then run again", path, key,
	          array ? "an array" : "an object");
	return NULL;
}

json_t *bind_json_object(const bind_ctx *b, const char *path, json_t *obj, const char *key)
{
	return child(b, path, obj, key, false);
}

json_t *bind_json_array(const bind_ctx *b, const char *path, json_t *obj, const char *key)
{
	return child(b, path, obj, key, true);
}

void bind_json_union(json_t *arr, const char *s)
{
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		if (json_is_string(v) && !strcmp(json_string_value(v), s))
			return;
	}
	json_array_append_new(arr, json_string(s));
}

int bind_plan_text(const bind_ctx *b, bind_plan *plan, const char *path, char *content)
{
	char *p = strdup(path);
	if (!p || plan->n == BIND_FILES_MAX) {
		free(p);
		free(content);
		return cli_fail_errno(b->c, ENOMEM, "bind"), -1;
	}
	plan->files[plan->n].path = p;
	plan->files[plan->n].content = content;
	plan->n++;
	return 0;
}

int bind_plan_json(const bind_ctx *b, bind_plan *plan, const char *path, json_t *obj,
                   json_t *before)
{
	char *content = NULL;
	if (!before || !json_equal(obj, before)) {
		char *text = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		content = text ? malloc(strlen(text) + 2) : NULL;
		if (content)
			sprintf(content, "%s\n", text);
		free(text);
		if (!content) {
			json_decref(obj);
			json_decref(before);
			return cli_fail_errno(b->c, ENOMEM, "bind"), -1;
		}
	}
	json_decref(obj);
	json_decref(before);
	return bind_plan_text(b, plan, path, content);
}

char *bind_quote(const char *s)
{
	json_t *v = json_string(s);
	char *q = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
	json_decref(v);
	return q;
}

/* --- writing ------------------------------------------------------------------------------ */

/* The file's directory, made (with its parents) when missing. 0, or -1 with errno. */
static int make_parents(const char *path)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	struct stat st;
	if (stat(dir, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
	if (make_parents(dir) != 0)
		return -1;
	return mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* Whether `path` could be replaced: its directory writable (or makeable), not a directory. */
static int check_writable(const bind_ctx *b, const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return cli_fail_errno(b->c, EISDIR, "bind: cannot write %s", path), -1;
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == dir)
		dir[1] = '\0'; /* a file in / */
	else if (slash)
		*slash = '\0';
	/* walk up to the first existing ancestor: it must be a writable directory */
	for (;;) {
		if (stat(dir, &st) == 0) {
			if (!S_ISDIR(st.st_mode))
				return cli_fail_errno(b->c, ENOTDIR,
				                      "bind: cannot write %s (%s is not a "
				                      "directory)",
				                      path, dir),
				       -1;
			if (access(dir, W_OK) != 0)
				return cli_fail_errno(b->c, errno, "bind: cannot write %s", path),
				       -1;
			return 0;
		}
		slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			return 0;
		*slash = '\0';
	}
}

static int write_file(const bind_ctx *b, const char *path, const char *content)
{
	if (make_parents(path) != 0)
		return cli_fail_errno(b->c, errno, "bind: create the directory of %s", path), -1;
	struct stat st;
	mode_t mode = stat(path, &st) == 0 ? (st.st_mode & 07777) : 0644;
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof tmp, "%s.asp-bind-XXXXXX", path) >= (int)sizeof tmp)
		return cli_fail_errno(b->c, ENAMETOOLONG, "bind: write %s", path), -1;
	int fd = mkstemp(tmp);
	if (fd < 0)
		return cli_fail_errno(b->c, errno, "bind: write %s", path), -1;
	int e = 0;
	if (cli_write_all(fd, content, strlen(content)) != 0 || fchmod(fd, mode) != 0 ||
	    fsync(fd) != 0)
		e = errno;
	if (close(fd) != 0 && !e)
		e = errno;
	if (!e && rename(tmp, path) != 0)
		e = errno;
	if (e) {
		unlink(tmp);
		return cli_fail_errno(b->c, e, "bind: write %s", path), -1;
	}
	return 0;
}

static void plan_free(bind_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->files[i].path);
		free(p->files[i].content);
	}
	p->n = 0;
}

int cmd_bind(cli *c, int argc, char **argv)
{
	enum { OPT_PRINT = CLI_OPT_FIRST_PRIVATE };
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS, {"print", no_argument, NULL, OPT_PRINT}, {NULL, 0, NULL, 0}};
	bool print = false;
	int opt;
	/* options may follow the harness's name (asp bind codex --print) */
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		if (opt == 'h')
			return cli_finish(c, CLI_EXIT_OK);
		if (opt == OPT_PRINT) {
			print = true;
			continue;
		}
		return c->fail_code;
	}
	if (optind >= argc)
		return cli_usage(c, "which harness? claude, codex, opencode or pi");
	if (optind + 1 < argc)
		return cli_usage(c, "unexpected argument '%s'", argv[optind + 1]);
	const bind_harness *h = NULL;
	for (size_t i = 0; i < sizeof harnesses / sizeof *harnesses; i++)
		if (!strcmp(harnesses[i]->name, argv[optind]))
			h = harnesses[i];
	if (!h)
		return cli_usage(c, "no harness is called '%s' (claude, codex, opencode or pi)",
		                 argv[optind]);

	/* the config: the one --config names, else the one discovery finds; it must load */
	char config[PATH_MAX], project[PATH_MAX], self[PATH_MAX];
	asp_error err;
	asp_error_clear(&err);
	if (c->config_path ? !realpath(c->config_path, config)
	                   : asp_config_find(NULL, config, sizeof config, &err) != ASP_OK) {
		if (c->config_path)
			return cli_fail_errno(c, errno, "bind: %s", c->config_path);
		return cli_fail(c, &err, "bind: find the config");
	}
	asp_config *cfg;
	if (asp_config_load(config, &cfg, &err) != ASP_OK)
		return cli_fail(c, &err, "bind: %s", config);
	asp_config_free(cfg);
	if (!getcwd(project, sizeof project))
		return cli_fail_errno(c, errno, "bind: the working directory");
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return cli_fail_errno(c, errno, "bind: where this asp is");
	self[n] = '\0';

	bind_ctx b = {.c = c, .config = config, .asp = self, .project = project};
	bind_plan plan = {0};
	if (h->plan(&b, &plan) != 0) {
		plan_free(&plan);
		return c->fail_code;
	}
	int rc = CLI_EXIT_OK;
	if (print) {
		for (size_t i = 0; i < plan.n; i++) {
			if (plan.files[i].content)
				printf("# %s\n%s", plan.files[i].path, plan.files[i].content);
			else
				printf("# %s (unchanged)\n", plan.files[i].path);
		}
	} else {
		for (size_t i = 0; i < plan.n && rc == CLI_EXIT_OK; i++)
			if (plan.files[i].content && check_writable(&b, plan.files[i].path) != 0)
				rc = c->fail_code;
		for (size_t i = 0; i < plan.n && rc == CLI_EXIT_OK; i++) {
			if (!plan.files[i].content) {
				fprintf(stderr, "asp: bind %s: %s unchanged\n", h->name,
				        plan.files[i].path);
			} else if (write_file(&b, plan.files[i].path, plan.files[i].content) != 0) {
				rc = c->fail_code;
			} else {
				fprintf(stderr, "asp: bind %s: wrote %s\n", h->name,
				        plan.files[i].path);
			}
		}
	}
	plan_free(&plan);
	return rc == CLI_EXIT_OK ? cli_finish(c, rc) : rc;
}
