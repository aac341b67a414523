/* Option parsing shared by the commands: getopt with house-style errors, sizes, seconds. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_print_help(const cli *c)
{
	if (c->usage)
		fputs(c->usage, stdout);
	if (c->usage_more)
		c->usage_more(stdout);
	fputs(CLI_COMMON_HELP, stdout);
}

void cli_print_tools(FILE *f)
{
	static const char *const vocabs[] = {ASP_TOOLS_VOCAB_DEFAULT, "opencode"};
	for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
		size_t n;
		const asp_tool_desc *d = asp_tools_vocab_list(vocabs[v], &n);
		fprintf(f, "\nTools, --vocabulary %s:", vocabs[v]);
		/* wrapped as the rest of the help is, under 88 columns */
		size_t col = 22 + strlen(vocabs[v]);
		for (size_t i = 0; d && i < n; i++) {
			size_t w = strlen(d[i].name) + (i + 1 < n ? 1 : 0);
			if (col + 1 + w > 88) {
				fputs("\n ", f);
				col = 1;
			}
			fprintf(f, " %s%s", d[i].name, i + 1 < n ? "," : "");
			col += 1 + w;
		}
		fputc('\n', f);
	}
}

void cli_getopt_reset(void)
{
	optind = 0; /* glibc: 0 re-initializes the scanner */
	opterr = 0;
}

void cli_list_options(const char *shortopts, const struct option *longopts, bool with_common)
{
	for (const char *s = shortopts; *s; s++) {
		if (*s == '+' || *s == ':' || (*s == 'h' && !with_common))
			continue;
		const char *name = "-";
		for (const struct option *o = longopts; o->name; o++) {
			if (o->val == *s)
				name = o->name;
		}
		printf("-%c %s%s %d\n", *s, name[0] == '-' ? "" : "--", name, s[1] == ':');
	}
	for (const struct option *o = longopts; o->name; o++) {
		bool common = o->val == CLI_OPT_CONFIG || o->val == CLI_OPT_JSON || o->val == 'h';
		bool paired = o->val > 0 && o->val < 0x100 && strchr(shortopts, o->val);
		if ((with_common || !common) && !paired)
			printf("- --%s %d\n", o->name, o->has_arg != no_argument);
	}
	fflush(stdout);
}

int cli_getopt(cli *c, int argc, char **argv, const char *shortopts, const struct option *longopts)
{
	if (getenv("ASP_CLI_LIST_OPTIONS")) {
		cli_list_options(shortopts, longopts, false);
		exit(CLI_EXIT_OK);
	}
	/* A leading ':' (after any '+') makes a missing argument ':' rather than '?'. */
	char spec[64];
	bool plus = shortopts[0] == '+';
	snprintf(spec, sizeof spec, "%s:%s", plus ? "+" : "", shortopts + plus);
	for (;;) {
		int opt = getopt_long(argc, argv, spec, longopts, NULL);
		switch (opt) {
		case CLI_OPT_CONFIG: c->config_path = optarg; continue;
		case CLI_OPT_JSON: c->json = true; continue;
		case 'h': cli_print_help(c); return 'h';
		case ':': cli_usage(c, "%s needs an argument", argv[optind - 1]); return '?';
		case '?':
			if (optopt && optopt < 0x100)
				cli_usage(c, "unknown option '-%c'", optopt);
			else
				cli_usage(c, "unknown option '%s'", argv[optind - 1]);
			return '?';
		default: return opt;
		}
	}
}

int cli_parse_size(cli *c, const char *opt, const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (s[0] < '0' || s[0] > '9')
		goto bad;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		goto bad;
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'k':
	case 'K': shift = 10; break;
	case 'm':
	case 'M': shift = 20; break;
	case 'g':
	case 'G': shift = 30; break;
	case 't':
	case 'T': shift = 40; break;
	default: goto bad;
	}
	if (*end && end[1] != '\0' && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
		goto bad;
	if (shift && v > (UINT64_MAX >> shift))
		goto bad;
	*out = (uint64_t)v << shift;
	return 0;
bad:
	cli_usage(c, "%s needs a byte count (digits, optional k/M/G suffix), got '%s'", opt, s);
	return -1;
}

int cli_parse_seconds(cli *c, const char *opt, const char *s, uint64_t *out_ms)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 1e12) {
		cli_usage(c, "%s needs a number of seconds, got '%s'", opt, s);
		return -1;
	}
	uint64_t ms = (uint64_t)llround(v * 1000.0);
	/* A positive timeout below 1 ms must not turn into 0, which means "none". */
	*out_ms = (ms == 0 && v > 0) ? 1 : ms;
	return 0;
}

const char *cli_session_name(const char *flag, char *buf, size_t cap)
{
	if (flag)
		return *flag ? flag : NULL;
	return getcwd(buf, cap);
}

int cli_parse_env(cli *c, char *arg, asp_strmap_entry *out)
{
	char *eq = strchr(arg, '=');
	if (!eq || eq == arg) {
		cli_usage(c, "--env needs NAME=VALUE, got '%s'", arg);
		return -1;
	}
	*eq = '\0'; /* argv is ours to split */
	out->key = arg;
	out->value = eq + 1;
	return 0;
}
