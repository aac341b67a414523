/*
 * asp-sdkgen: reads spec/protocol.json and emits code and docs from it.
 *
 *   asp-sdkgen --spec S [--c-header H] [--c-source C] [--c-client K]
 *   asp-sdkgen --spec S --markdown OUT
 *   asp-sdkgen --spec S --check-compat FROZEN
 */
#include "spec.h"

#include <stdlib.h>
#include <string.h>

static int usage(void)
{
	fprintf(stderr, "usage: asp-sdkgen --spec FILE [--c-header H --c-source C --c-client K]\n"
	                "                  [--markdown OUT] [--check-compat FROZEN]\n");
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

int main(int argc, char **argv)
{
	const char *spec_path = NULL, *h = NULL, *c = NULL, *k = NULL, *md = NULL, *frozen = NULL;
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
		if (!slot || i + 1 >= argc)
			return usage();
		*slot = argv[++i];
	}
	if (!spec_path || (!h && !c && !k && !md && !frozen))
		return usage();

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
		if ((fh && close_out(fh, h)) || (fc && close_out(fc, c)) || (fk && close_out(fk, k)))
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
				fprintf(stderr, "asp-sdkgen: %d incompatible change(s) against %s\n", bad,
				        frozen);
				rc = 1;
			}
		}
		spec_free(&old);
	}
	spec_free(&s);
	return rc;
}
