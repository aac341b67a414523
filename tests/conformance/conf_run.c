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
	if (ctx->failed || ctx->skipped)
		return;
	ctx->skipped = true;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
	va_end(ap);
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
	for (size_t i = 0; i < conf_case_count; i++)
		fprintf(out, "%-40s %s\n", conf_cases[i].name, conf_cases[i].what);
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
	const char *gap = NULL;
	for (const char *const *g = streaming ? streaming->known_gaps : NULL; g && g[0]; g += 2)
		if (strcmp(g[0], c->name) == 0)
			gap = g[1];
	if (gap)
		conf_skip(&ctx, "known gap of this registration: %s", gap);
	else
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
	out->skipped = ctx.skipped && !ctx.failed;
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

int conf_run_filtered_st(const asp_ops *ops, void *self, const conf_streaming *st,
                         const char *root, const char *only, FILE *report)
{
	int failed = 0, passed = 0, skipped = 0;
	double t0 = now_ms();
	for (size_t i = 0; i < conf_case_count; i++) {
		const conf_case *c = &conf_cases[i];
		if (only && !strstr(c->name, only))
			continue;
		conf_outcome o;
		conf_run_case_st(c, ops, self, st, root, &o);
		const char *tag = !o.passed ? "FAIL" : o.skipped ? "SKIP" : "PASS";
		if (!o.passed)
			failed++;
		else if (o.skipped)
			skipped++;
		else
			passed++;
		if (!report)
			continue;
		fprintf(report, "%s  %-42s %8.1f ms\n", tag, c->name, o.ms);
		if (!o.passed)
			fprintf(report, "      %s:%d: %s\n", o.file ? o.file : "?", o.line, o.msg);
		else if (o.skipped)
			fprintf(report, "      %s\n", o.msg);
		fflush(report);
	}
	if (report)
		fprintf(report, "%d passed, %d failed, %d skipped in %.1f s\n", passed, failed,
		        skipped, (now_ms() - t0) / 1e3);
	return failed;
}

int conf_run_all(const asp_ops *ops, void *self, const char *root, FILE *report)
{
	return conf_run_filtered(ops, self, root, NULL, report);
}
