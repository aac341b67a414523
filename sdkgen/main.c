/*
 * asp-sdkgen: reads spec/protocol.json and emits code and docs from it.
 *
 *   asp-sdkgen --spec S [--c-header H] [--c-source C] [--c-client K]
 *   asp-sdkgen --spec S --markdown OUT
 *   asp-sdkgen --spec S --check-compat FROZEN
 *   asp-sdkgen --spec S --lang python|typescript --out DIR [--config-schema F]
 *              [--sdk-version V] [--stamp FILE]
 *   asp-sdkgen --config-c OUT [--config-schema F]   (the .asp.json tables of the C core)
 */
#include "emit_config.h"
#include "spec.h"

#include <stdlib.h>
#include <string.h>

#ifndef ASP_SDK_VERSION
#define ASP_SDK_VERSION "0.0.0"
#endif

static int builtin_protocol(void)
{
	spec s;
	int p = spec_load(NULL, &s) == 0 ? s.protocol : 0;
	spec_free(&s);
	return p;
}

static int usage(void)
{
	fprintf(stderr,
	        "usage: asp-sdkgen [--spec FILE] [--c-header H --c-source C --c-client K]\n"
	        "                  [--markdown OUT] [--check-compat FROZEN]\n"
	        "                  [--lang python|typescript --out DIR [--config-schema F]\n"
	        "                   [--sdk-version V] [--stamp FILE]]\n"
	        "                  [--config-c OUT [--config-schema F]]\n"
	        "Without --spec, the spec asp-sdkgen was built from (protocol %d); "
	        "--config-schema\ndefaults to asp.schema.json beside --spec, or the "
	        "built-in one.\n",
	        builtin_protocol());
	return 2;
}

static FILE *open_out(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		perror(path);
	return f;
}

static int close_out(FILE *f, const char *path)
{
	if (fclose(f) != 0) {
		perror(path);
		return -1;
	}
	return 0;
}

/* One SDK into `out`; the stamp (for the build) lists every file written, last. */
static int emit_sdk(const spec *s, const char *lang, const char *out, const char *spec_path,
                    const char *schema, const char *version, const char *stamp)
{
	char def[4096];
	if (!schema && spec_path) {
		const char *slash = strrchr(spec_path, '/');
		int dir = slash ? (int)(slash - spec_path) : 1;
		snprintf(def, sizeof def, "%.*s/asp.schema.json", dir, slash ? spec_path : ".");
		schema = def;
	}
	sdk_options o = {.out_dir = out, .schema_path = schema, .version = version};
	char tmp[4096];
	if (stamp) {
		snprintf(tmp, sizeof tmp, "%s.tmp", stamp);
		if (!(o.stamp = open_out(tmp)))
			return 1;
	}
	int rc = strcmp(lang, "python") == 0 ? emit_python(s, &o) : emit_typescript(s, &o);
	if (rc == 0)
		rc = emit_config_sdk(&o, lang);
	if (o.stamp) {
		if (close_out(o.stamp, tmp) || (rc == 0 && rename(tmp, stamp) != 0)) {
			perror(stamp);
			rc = -1;
		}
		if (rc)
			remove(tmp);
	}
	return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *spec_path = NULL, *h = NULL, *c = NULL, *k = NULL, *md = NULL, *frozen = NULL;
	const char *lang = NULL, *out = NULL, *schema = NULL, *version = ASP_SDK_VERSION;
	const char *stamp = NULL, *config_c = NULL;
	for (int i = 1; i < argc; i++) {
		const char **slot = NULL;
		if (!strcmp(argv[i], "--spec"))
			slot = &spec_path;
		else if (!strcmp(argv[i], "--c-header"))
			slot = &h;
		else if (!strcmp(argv[i], "--c-source"))
			slot = &c;
		else if (!strcmp(argv[i], "--c-client"))
			slot = &k;
		else if (!strcmp(argv[i], "--markdown"))
			slot = &md;
		else if (!strcmp(argv[i], "--check-compat"))
			slot = &frozen;
		else if (!strcmp(argv[i], "--lang"))
			slot = &lang;
		else if (!strcmp(argv[i], "--out"))
			slot = &out;
		else if (!strcmp(argv[i], "--config-schema"))
			slot = &schema;
		else if (!strcmp(argv[i], "--sdk-version"))
			slot = &version;
		else if (!strcmp(argv[i], "--stamp"))
			slot = &stamp;
		else if (!strcmp(argv[i], "--config-c"))
			slot = &config_c;
		if (!slot || i + 1 >= argc)
			return usage();
		*slot = argv[++i];
	}
	if ((!h && !c && !k && !md && !frozen && !lang && !config_c) || (!lang != !out))
		return usage();
	if (lang && strcmp(lang, "python") && strcmp(lang, "typescript")) {
		fprintf(stderr, "asp-sdkgen: --lang %s: expected python or typescript\n", lang);
		return 2;
	}

	spec s;
	if (spec_load(spec_path, &s) < 0) {
		spec_free(&s);
		return 1;
	}
	int rc = 0;
	if (h || c || k) {
		FILE *fh = h ? open_out(h) : NULL, *fc = c ? open_out(c) : NULL;
		FILE *fk = k ? open_out(k) : NULL;
		if ((h && !fh) || (c && !fc) || (k && !fk) || emit_c(&s, fh, fc, fk) < 0)
			rc = 1;
		if ((fh && close_out(fh, h)) || (fc && close_out(fc, c)) ||
		    (fk && close_out(fk, k)))
			rc = 1;
	}
	if (md && !rc) {
		FILE *f = open_out(md);
		if (!f || emit_markdown(&s, f) < 0 || close_out(f, md))
			rc = 1;
	}
	if (frozen && !rc) {
		spec old;
		if (spec_load(frozen, &old) < 0) {
			rc = 1;
		} else {
			int bad = check_compat(&old, &s);
			if (bad) {
				fprintf(stderr,
				        "asp-sdkgen: %d incompatible change(s) against %s\n", bad,
				        frozen);
				rc = 1;
			}
		}
		spec_free(&old);
	}
	if (config_c && !rc) {
		sdk_options o = {.schema_path = schema};
		FILE *f = open_out(config_c);
		if (!f || emit_config_c(&o, f) < 0 || close_out(f, config_c))
			rc = 1;
	}
	if (lang && !rc)
		rc = emit_sdk(&s, lang, out, spec_path, schema, version, stamp);
	spec_free(&s);
	return rc;
}
