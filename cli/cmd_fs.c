/* asp stat, ls, mkdir, rm, mv: one op each (mv may stat first), output for people or JSON. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { OPT_NO_FOLLOW = CLI_OPT_FIRST_PRIVATE };

/* Parses only the common options; for commands that take positionals alone. */
static int common_opts(cli *c, int argc, char **argv, const char *shortopts,
                       const struct option *longopts, int *rc)
{
	int opt = cli_getopt(c, argc, argv, shortopts, longopts);
	if (opt == 'h')
		*rc = cli_finish(c, CLI_EXIT_OK);
	else if (opt == '?')
		*rc = c->fail_code;
	return opt;
}

/* "drwxr-xr-x" from a type name and permission bits, as ls -l shows them. */
static void mode_string(const char *type, uint64_t mode, char out[11])
{
	char t = '?';
	if (type) {
		if (strcmp(type, "file") == 0)
			t = '-';
		else if (strcmp(type, "dir") == 0)
			t = 'd';
		else if (strcmp(type, "symlink") == 0)
			t = 'l';
		else if (strcmp(type, "fifo") == 0)
			t = 'p';
		else if (strcmp(type, "socket") == 0)
			t = 's';
		else if (strcmp(type, "char") == 0)
			t = 'c';
		else if (strcmp(type, "block") == 0)
			t = 'b';
	}
	out[0] = t;
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		out[1 + i] = (mode & (0400u >> i)) ? rwx[i] : '-';
	if (mode & 04000)
		out[3] = (mode & 0100) ? 's' : 'S';
	if (mode & 02000)
		out[6] = (mode & 0010) ? 's' : 'S';
	if (mode & 01000)
		out[9] = (mode & 0001) ? 't' : 'T';
	out[10] = '\0';
}

static void time_string(int64_t mtime_ns, char *out, size_t cap, bool precise)
{
	time_t s = (time_t)(mtime_ns / 1000000000);
	long ns = (long)(mtime_ns % 1000000000);
	if (ns < 0) {
		s--;
		ns += 1000000000;
	}
	struct tm tm;
	if (!localtime_r(&s, &tm)) {
		snprintf(out, cap, "?");
		return;
	}
	size_t n = strftime(out, cap, precise ? "%Y-%m-%d %H:%M:%S" : "%Y-%m-%d %H:%M", &tm);
	if (precise && n > 0) {
		char zone[16];
		strftime(zone, sizeof zone, "%z", &tm);
		snprintf(out + n, cap - n, ".%09ld %s", ns, zone);
	}
}

/* Names are raw bytes: on a terminal, control characters show as '?' (ls does the same). */
static void put_name(const char *name, bool tty)
{
	for (const char *p = name; *p; p++)
		putchar(tty && ((unsigned char)*p < 0x20 || *p == 0x7f) ? '?' : *p);
}

static void print_entry(const char *name, const char *type, uint64_t size, uint64_t mode,
                        int64_t mtime_ns, bool tty)
{
	char ms[11], ts[64];
	mode_string(type, mode, ms);
	time_string(mtime_ns, ts, sizeof ts, false);
	printf("%s %12llu %s ", ms, (unsigned long long)size, ts);
	put_name(name, tty);
	putchar('\n');
}

static void json_stat(jw *w, const asp_stat_result *r)
{
	jw_obj_begin(w);
	jw_key(w, "type");
	jw_str(w, r->type);
	jw_key(w, "size");
	jw_uint(w, r->size);
	jw_key(w, "mode");
	jw_uint(w, r->mode);
	jw_key(w, "mtime_ns");
	jw_int(w, r->mtime_ns);
	jw_key(w, "uid");
	jw_uint(w, r->uid);
	jw_key(w, "gid");
	jw_uint(w, r->gid);
	if (r->target)
		jw_bytes_field(w, "target", (const uint8_t *)r->target, strlen(r->target));
	jw_obj_end(w);
}

int cmd_stat(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"no-follow", no_argument, NULL, OPT_NO_FOLLOW},
	    {NULL, 0, NULL, 0},
	};
	asp_stat_params p;
	asp_stat_params_init(&p);
	int opt, rc = c->fail_code;
	while ((opt = common_opts(c, argc, argv, "h", longopts, &rc)) != -1) {
		if (opt != OPT_NO_FOLLOW)
			return rc;
		p.follow = false;
	}
	if (argc - optind != 1)
		return cli_usage(c, argc - optind ? "give exactly one PATH" : "missing PATH");
	p.path = argv[optind];
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;
	asp_stat_result r;
	asp_error err;
	if (asp_stat(client, &p, &r, a, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "stat %s", p.path);
		asp_arena_free(a);
		return rc;
	}
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		json_stat(&w, &r);
		jw_end(&w);
	} else {
		char ms[11], ts[80];
		mode_string(r.type, r.mode, ms);
		time_string(r.mtime_ns, ts, sizeof ts, true);
		printf("  path: %s\n  type: %s\n  size: %llu\n  mode: %04llo (%s)\n mtime: %s\n"
		       "   uid: %llu\n   gid: %llu\n",
		       p.path, r.type ? r.type : "?", (unsigned long long)r.size,
		       (unsigned long long)r.mode, ms, ts, (unsigned long long)r.uid,
		       (unsigned long long)r.gid);
		if (r.target)
			printf("target: %s\n", r.target);
	}
	asp_arena_free(a);
	return cli_finish(c, CLI_EXIT_OK);
}

int cmd_ls(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"all", no_argument, NULL, 'a'},
	    {NULL, 0, NULL, 0},
	};
	bool all = false;
	int opt, rc = c->fail_code;
	while ((opt = common_opts(c, argc, argv, "ha", longopts, &rc)) != -1) {
		if (opt != 'a')
			return rc;
		all = true;
	}
	if (argc - optind > 1)
		return cli_usage(c, "give at most one PATH");
	const char *path = optind < argc ? argv[optind] : ".";
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;
	bool tty = isatty(STDOUT_FILENO);
	asp_list_params p;
	asp_list_result r;
	asp_error err;
	asp_list_params_init(&p);
	p.path = path;
	if (asp_list(client, &p, &r, a, &err) != ASP_OK) {
		/* ls of a file shows the file. */
		asp_stat_params sp;
		asp_stat_result sr;
		asp_error serr;
		asp_stat_params_init(&sp);
		sp.path = path;
		sp.follow = false;
		if (err.code != ASP_E_NOT_A_DIRECTORY ||
		    asp_stat(client, &sp, &sr, a, &serr) != ASP_OK) {
			rc = cli_fail(c, &err, "ls %s", path);
			asp_arena_free(a);
			return rc;
		}
		if (c->json) {
			jw w;
			jw_init(&w, stdout);
			jw_obj_begin(&w);
			jw_key(&w, "entries");
			jw_arr_begin(&w);
			jw_obj_begin(&w);
			jw_bytes_field(&w, "name", (const uint8_t *)path, strlen(path));
			jw_key(&w, "type");
			jw_str(&w, sr.type);
			jw_key(&w, "size");
			jw_uint(&w, sr.size);
			jw_key(&w, "mode");
			jw_uint(&w, sr.mode);
			jw_key(&w, "mtime_ns");
			jw_int(&w, sr.mtime_ns);
			jw_obj_end(&w);
			jw_arr_end(&w);
			jw_obj_end(&w);
			jw_end(&w);
		} else {
			print_entry(path, sr.type, sr.size, sr.mode, sr.mtime_ns, tty);
		}
		asp_arena_free(a);
		return cli_finish(c, CLI_EXIT_OK);
	}
	jw w;
	if (c->json) {
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "entries");
		jw_arr_begin(&w);
	}
	for (size_t i = 0; i < r.entries.count; i++) {
		const asp_list_entry *e = &r.entries.items[i];
		if (c->json) {
			jw_obj_begin(&w);
			jw_bytes_field(&w, "name", (const uint8_t *)e->name, strlen(e->name));
			jw_key(&w, "type");
			jw_str(&w, e->type);
			jw_key(&w, "size");
			jw_uint(&w, e->size);
			jw_key(&w, "mode");
			jw_uint(&w, e->mode);
			jw_key(&w, "mtime_ns");
			jw_int(&w, e->mtime_ns);
			jw_obj_end(&w);
		} else if (all || e->name[0] != '.') {
			print_entry(e->name, e->type, e->size, e->mode, e->mtime_ns, tty);
		}
	}
	if (c->json) {
		jw_arr_end(&w);
		jw_obj_end(&w);
		jw_end(&w);
	}
	asp_arena_free(a);
	return cli_finish(c, CLI_EXIT_OK);
}

/* {} on stdout for --json, the shape of the ops' own results. */
static int done_json(cli *c)
{
	if (c->json)
		puts("{}");
	return cli_finish(c, CLI_EXIT_OK);
}

int cmd_mkdir(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"parents", no_argument, NULL, 'p'},
	    {NULL, 0, NULL, 0},
	};
	asp_mkdir_params p;
	asp_mkdir_params_init(&p);
	int opt, rc = c->fail_code;
	while ((opt = common_opts(c, argc, argv, "hp", longopts, &rc)) != -1) {
		if (opt != 'p')
			return rc;
		p.parents = true;
	}
	if (optind >= argc)
		return cli_usage(c, "missing PATH");
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;
	for (int i = optind; i < argc; i++) {
		asp_mkdir_result r;
		asp_error err;
		p.path = argv[i];
		if (asp_mkdir(client, &p, &r, a, &err) != ASP_OK) {
			rc = cli_fail(c, &err, "mkdir %s", p.path);
			asp_arena_free(a);
			return rc;
		}
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return done_json(c);
}

int cmd_rm(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"recursive", no_argument, NULL, 'r'},
	    {"force", no_argument, NULL, 'f'},
	    {NULL, 0, NULL, 0},
	};
	asp_remove_params p;
	asp_remove_params_init(&p);
	bool force = false;
	int opt, rc = c->fail_code;
	while ((opt = common_opts(c, argc, argv, "hrRf", longopts, &rc)) != -1) {
		if (opt == 'r' || opt == 'R')
			p.recursive = true;
		else if (opt == 'f')
			force = true;
		else
			return rc;
	}
	if (optind >= argc)
		return force ? done_json(c) : cli_usage(c, "missing PATH");
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;
	for (int i = optind; i < argc; i++) {
		asp_remove_result r;
		asp_error err;
		p.path = argv[i];
		if (asp_remove(client, &p, &r, a, &err) != ASP_OK &&
		    !(force && err.code == ASP_E_NOT_FOUND)) {
			rc = cli_fail(c, &err, "rm %s", p.path);
			asp_arena_free(a);
			return rc;
		}
		asp_arena_reset(a);
	}
	asp_arena_free(a);
	return done_json(c);
}

int cmd_mv(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"no-clobber", no_argument, NULL, 'n'},
	    {NULL, 0, NULL, 0},
	};
	asp_rename_params p;
	asp_rename_params_init(&p);
	int opt, rc = c->fail_code;
	while ((opt = common_opts(c, argc, argv, "hn", longopts, &rc)) != -1) {
		if (opt != 'n')
			return rc;
		p.overwrite = false;
	}
	if (argc - optind != 2)
		return cli_usage(c, "give FROM and TO");
	p.from = argv[optind];
	p.to = argv[optind + 1];
	asp_client *client = cli_client(c);
	asp_arena *a = client ? cli_arena(c) : NULL;
	if (!a)
		return c->fail_code;

	/* Onto an existing directory, as mv(1): into it, keeping the name. */
	char *into = NULL;
	asp_stat_params sp;
	asp_stat_result sr;
	asp_error err;
	asp_stat_params_init(&sp);
	sp.path = p.to;
	if (asp_stat(client, &sp, &sr, a, &err) == ASP_OK && sr.type &&
	    strcmp(sr.type, "dir") == 0) {
		char *base = path_base(p.from);
		into = base && !path_is_dot(base) && strcmp(base, "/") != 0 ? path_join(p.to, base)
		                                                            : NULL;
		free(base);
		if (!into) {
			asp_error_set(&err, ASP_E_INVALID_ARGUMENT, p.from,
			              "cannot move '%s' into a directory", p.from);
			rc = cli_fail(c, &err, "mv %s %s", p.from, p.to);
			asp_arena_free(a);
			return rc;
		}
		p.to = into;
	}
	asp_rename_result r;
	if (asp_rename(client, &p, &r, a, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "mv %s %s", p.from, p.to);
	} else {
		if (c->json) {
			jw w;
			jw_init(&w, stdout);
			jw_obj_begin(&w);
			jw_key(&w, "to");
			jw_str(&w, p.to);
			jw_obj_end(&w);
			jw_end(&w);
		}
		rc = cli_finish(c, CLI_EXIT_OK);
	}
	free(into);
	asp_arena_free(a);
	return rc;
}
