/* Running conformance cases: a fresh directory per case, the failure record, the report. */
#include "conformance.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void conf_fail(conf_ctx *ctx, const char *file, int line, const char *fmt, ...)
{
	if (ctx->failed)
		return;
	ctx->failed = true;
	ctx->file = file;
	ctx->line = line;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
	va_end(ap);
}

void conf_skip(conf_ctx *ctx, const char *fmt, ...)
{
	if (ctx->failed || ctx->skipped || ctx->na)
		return;
	ctx->skipped = true;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
	va_end(ap);
}

void conf_na(conf_ctx *ctx, const char *fmt, ...)
{
	if (ctx->failed || ctx->skipped || ctx->na)
		return;
	ctx->na = true;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
	va_end(ap);
}

const char *conf_verdict(const conf_outcome *o)
{
	return !o->passed ? "FAIL" : o->na ? "n/a" : o->skipped ? "SKIP" : "PASS";
}

/* ---- what a case needs against what hello announces ------------------------------- */

static bool word_is(const char *w, size_t n, const char *s)
{
	return strlen(s) == n && memcmp(w, s, n) == 0;
}

static const char *feature_meaning(const char *w, size_t n)
{
	if (word_is(w, n, CONF_FEATURE_FOLLOW))
		return "a process's output and exit as notifications";
	if (word_is(w, n, CONF_FEATURE_REATTACH))
		return "processes outliving their connection";
	if (word_is(w, n, CONF_FEATURE_PTY))
		return "spawn with tty and proc_resize: processes on a pseudo-terminal";
	if (word_is(w, n, "connect"))
		return "connect: TCP connections opened from inside the sandbox";
	if (word_is(w, n, "watch"))
		return "watch: file changes as fs_event notifications";
	if (word_is(w, n, "concurrent"))
		return "calls on one connection running at once";
	return "a feature this suite does not know";
}

static bool strv_has(asp_strv v, const char *s, size_t n)
{
	for (size_t i = 0; i < v.count; i++)
		if (v.items[i] && strlen(v.items[i]) == n && memcmp(v.items[i], s, n) == 0)
			return true;
	return false;
}

/* The next space-separated word of *list (its length in *n), or NULL at the end. */
static const char *next_word(const char **list, size_t *n)
{
	const char *s = *list;
	while (s && *s == ' ')
		s++;
	if (!s || !*s)
		return NULL;
	*n = strcspn(s, " ");
	*list = s + *n;
	return s;
}

static void na_because(conf_ctx *ctx, const char *what, const char *name, size_t n,
                       const char *meaning, const char *agent)
{
	char need[64];
	snprintf(need, sizeof need, "%.*s", (int)n, name);
	const char *hint = ctx->st && ctx->st->hint ? ctx->st->hint(ctx->st->ctx, need) : NULL;
	conf_na(ctx, "needs %s \"%s\"%s%s%s, which hello does not announce (agent \"%s\")%s%s",
	        what, need, meaning ? " (" : "", meaning ? meaning : "", meaning ? ")" : "",
	        agent ? agent : "?", hint ? "; " : "", hint ? hint : "");
}

/*
 * Whether `c` applies: every op and feature it needs is in hello's answer, and the
 * registration can use the features (st for "follow", st->peer_open for "reattach").
 * Otherwise it marks ctx n/a (or failed, when hello fails). Sets ctx->follow.
 */
static bool applicable(conf_ctx *ctx, const conf_case *c)
{
	if (!c->ops && !c->features)
		return true;
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	asp_error err;
	asp_status st = ctx->ops->hello(ctx->self, &p, &r, ctx->a, &err);
	if (st != ASP_OK) {
		conf_fail(ctx, __FILE__, __LINE__, "hello: %s: %s", asp_strerror(st), err.message);
		return false;
	}
	asp_strv none = {0};
	asp_strv features = r.has_features ? r.features : none;
	const char *list = c->ops, *w;
	size_t n;
	while ((w = next_word(&list, &n)))
		if (!strv_has(r.ops, w, n)) {
			na_because(ctx, "op", w, n, NULL, r.agent);
			return false;
		}
	const conf_streaming *rs = ctx->st;
	ctx->follow =
	    rs && rs->spawn && strv_has(features, CONF_FEATURE_FOLLOW, strlen(CONF_FEATURE_FOLLOW));
	list = c->features;
	while ((w = next_word(&list, &n))) {
		if (!strv_has(features, w, n)) {
			na_because(ctx, "the feature", w, n, feature_meaning(w, n), r.agent);
			return false;
		}
		if (word_is(w, n, CONF_FEATURE_FOLLOW) && !(rs && rs->spawn)) {
			conf_na(ctx, "hello announces \"follow\", but this runner was registered "
			             "without a way to follow a process (no conf_streaming)");
			return false;
		}
		if (word_is(w, n, CONF_FEATURE_REATTACH) && !(rs && rs->peer_open)) {
			conf_na(ctx, "hello announces \"reattach\", but this runner has no second "
			             "connection to the responder (conf_streaming.peer_open)");
			return false;
		}
	}
	return true;
}

const conf_case *conf_find(const char *name)
{
	for (size_t i = 0; i < conf_case_count; i++) {
		if (strcmp(conf_cases[i].name, name) == 0)
			return &conf_cases[i];
	}
	return NULL;
}

void conf_list(FILE *out)
{
	for (size_t i = 0; i < conf_case_count; i++) {
		const conf_case *c = &conf_cases[i];
		fprintf(out, "%-40s %s", c->name, c->what);
		if (c->ops || c->features)
			fprintf(out, " [needs%s%s%s%s]", c->ops ? " " : "", c->ops ? c->ops : "",
			        c->features ? " " : "", c->features ? c->features : "");
		fputc('\n', out);
	}
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static asp_status remove_tree(const asp_ops *ops, void *self, const char *path, asp_arena *a,
                              asp_error *err)
{
	asp_remove_params p;
	asp_remove_params_init(&p);
	p.path = path;
	p.recursive = true;
	asp_remove_result r;
	return ops->remove(self, &p, &r, a, err);
}

void conf_run_case(const conf_case *c, const asp_ops *ops, void *self, const char *root,
                   conf_outcome *out)
{
	conf_run_case_st(c, ops, self, NULL, root, out);
}

void conf_run_case_st(const conf_case *c, const asp_ops *ops, void *self,
                      const conf_streaming *streaming, const char *root, conf_outcome *out)
{
	memset(out, 0, sizeof *out);
	double t0 = now_ms();
	conf_ctx ctx = {.ops = ops, .self = self, .st = streaming, .root = root};
	ctx.a = asp_arena_new();
	size_t n = strlen(root) + strlen(c->name) + 2;
	char *dir = malloc(n);
	if (!ctx.a || !dir) {
		conf_fail(&ctx, __FILE__, __LINE__, "out of memory");
		goto done;
	}
	snprintf(dir, n, "%s/%s", root, c->name);
	ctx.dir = dir;

	asp_error err;
	asp_mkdir_params mp;
	asp_mkdir_params_init(&mp);
	mp.path = dir;
	asp_mkdir_result mr;
	asp_status st = ops->mkdir(self, &mp, &mr, ctx.a, &err);
	if (st == ASP_E_ALREADY_EXISTS) { /* left by an earlier failed run */
		remove_tree(ops, self, dir, ctx.a, &err);
		st = ops->mkdir(self, &mp, &mr, ctx.a, &err);
	}
	if (st != ASP_OK) {
		conf_fail(&ctx, __FILE__, __LINE__, "cannot create the case directory %s: %s: %s",
		          dir, asp_strerror(st), err.message);
		goto done;
	}
	if (applicable(&ctx, c))
		c->fn(&ctx);
	/* A failed case keeps its directory for a look; the suite's root goes at the end. */
	if (!ctx.failed) {
		st = remove_tree(ops, self, dir, ctx.a, &err);
		if (st != ASP_OK)
			conf_fail(&ctx, __FILE__, __LINE__, "cleanup: remove %s: %s: %s", dir,
			          asp_strerror(st), err.message);
	}
done:
	out->passed = !ctx.failed;
	out->na = ctx.na && !ctx.failed;
	out->skipped = (ctx.skipped || ctx.na) && !ctx.failed;
	out->file = ctx.file;
	out->line = ctx.line;
	memcpy(out->msg, ctx.msg, sizeof out->msg);
	out->ms = now_ms() - t0;
	asp_arena_free(ctx.a);
	free(dir);
}

int conf_run_filtered(const asp_ops *ops, void *self, const char *root, const char *only,
                      FILE *report)
{
	return conf_run_filtered_st(ops, self, NULL, root, only, report);
}

int conf_run_filtered_st(const asp_ops *ops, void *self, const conf_streaming *st, const char *root,
                         const char *only, FILE *report)
{
	int failed = 0, passed = 0, skipped = 0, na = 0;
	double t0 = now_ms();
	for (size_t i = 0; i < conf_case_count; i++) {
		const conf_case *c = &conf_cases[i];
		if (only && !strstr(c->name, only))
			continue;
		conf_outcome o;
		conf_run_case_st(c, ops, self, st, root, &o);
		if (!o.passed)
			failed++;
		else if (o.na)
			na++;
		else if (o.skipped)
			skipped++;
		else
			passed++;
		if (!report)
			continue;
		fprintf(report, "%-4s  %-42s %8.1f ms\n", conf_verdict(&o), c->name, o.ms);
		if (!o.passed)
			fprintf(report, "      %s:%d: %s\n", o.file ? o.file : "?", o.line, o.msg);
		else if (o.skipped)
			fprintf(report, "      %s\n", o.msg);
		fflush(report);
	}
	if (report)
		fprintf(report, "%d passed, %d failed, %d n/a, %d skipped in %.1f s\n", passed,
		        failed, na, skipped, (now_ms() - t0) / 1e3);
	return failed;
}

int conf_run_all(const asp_ops *ops, void *self, const char *root, FILE *report)
{
	return conf_run_filtered(ops, self, root, NULL, report);
}
