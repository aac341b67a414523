/*
 * The tools layer's glob, grep and edit on the protocol's ops, against real asp-agents
 * over stdio:
 *   - with the op, one call of it and nothing else (no exec, read, write, stat), counted
 *     by a transport that wraps the real stdio one; the agent runs with an empty PATH,
 *     so find and grep could not have run;
 *   - the same calls through the fallback (a tools handle that does not see the ops in
 *     hello: exec of find and grep, read + write) give the same text, byte for byte,
 *     with asp-agent (PCRE2) and, when built, asp-agent-static (POSIX ERE);
 *   - what differs on purpose: grep's op skips hidden files (unless its glob names one);
 *     the op's multiline content;
 *   - the grep op itself: the whole-buffer search against line-by-line matching, ERE
 *     against PCRE2, an answer past max_message cut rather than refused.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "asp/transport.h"
#include "tools/shared.h"

#include <CUnit/Basic.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[256];
static char work[300]; /* the tree searched */
static char empty_dir[300];

/* ---- a stdio transport that counts the ops it carries ----------------------------- */

enum { C_EXEC, C_READ, C_WRITE, C_STAT, C_LIST, C_GLOB, C_GREP, C_EDIT, C_SPAWN, C_N };
static atomic_int counts[C_N];
static const asp_transport *real_stdio;
static const asp_ops *real_ops;
static asp_ops counted_ops;
static asp_transport counting;

#define COUNTED(op, slot)                                                                          \
	static asp_status counted_##op(void *self, const asp_##op##_params *p,                     \
	                               asp_##op##_result *r, asp_arena *a, asp_error *err)         \
	{                                                                                          \
		atomic_fetch_add(&counts[slot], 1);                                                \
		return real_ops->op(self, p, r, a, err);                                           \
	}
COUNTED(exec, C_EXEC)
COUNTED(read, C_READ)
COUNTED(write, C_WRITE)
COUNTED(stat, C_STAT)
COUNTED(list, C_LIST)
COUNTED(glob, C_GLOB)
COUNTED(grep, C_GREP)
COUNTED(edit, C_EDIT)

COUNTED(spawn, C_SPAWN)

/* A followed spawn (bash in the foreground): how many, and the timeout it asked for. */
static atomic_int follows;
static _Atomic uint64_t last_follow_timeout;
static asp_status counted_subscribe(void *self, asp_op_id op, const void *params, void *result,
                                    asp_arena *a, asp_proc_sub *sub, asp_error *err)
{
	if (op == ASP_OP_SPAWN) {
		atomic_fetch_add(&follows, 1);
		atomic_store(&last_follow_timeout, ((const asp_spawn_params *)params)->timeout_ms);
	}
	return real_stdio->subscribe(self, op, params, result, a, sub, err);
}

static asp_status counting_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                                asp_error *err)
{
	asp_status st = real_stdio->open(cfg, ops, self, err);
	if (st != ASP_OK)
		return st;
	real_ops = *ops; /* one table for every stdio connection */
	counted_ops = **ops;
	counted_ops.exec = counted_exec;
	counted_ops.read = counted_read;
	counted_ops.write = counted_write;
	counted_ops.stat = counted_stat;
	counted_ops.list = counted_list;
	counted_ops.glob = counted_glob;
	counted_ops.grep = counted_grep;
	counted_ops.edit = counted_edit;
	counted_ops.spawn = counted_spawn;
	*ops = &counted_ops;
	return ASP_OK;
}

static void counts_reset(void)
{
	for (int i = 0; i < C_N; i++)
		atomic_store(&counts[i], 0);
}

/* Every count but `slot` is 0 and `slot`'s is 1. */
static bool only(int slot)
{
	bool ok = true;
	for (int i = 0; i < C_N; i++)
		if (atomic_load(&counts[i]) != (i == slot ? 1 : 0)) {
			fprintf(stderr, "count %d is %d\n", i, atomic_load(&counts[i]));
			ok = false;
		}
	return ok;
}

/* ---- handles ---------------------------------------------------------------------- */

typedef struct side {
	asp_client *c;
	asp_tools *t;
} side;

/* A client on `agent` (argv before --stdio: prefix, e.g. env PATH=...) and its tools. */
static int side_open(side *s, const char *prefix, const char *agent)
{
	char cfg[2048];
	snprintf(cfg, sizeof cfg,
	         "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s\", "
	         "\"stdio\": {\"command\": [%s\"%s\", \"--stdio\"]}}",
	         work, prefix, agent);
	asp_config *c;
	asp_error err;
	if (asp_config_parse(cfg, strlen(cfg), NULL, &c, &err) != ASP_OK) {
		fprintf(stderr, "config: %s\n", err.message);
		return -1;
	}
	asp_status st = asp_client_open(c, &s->c, &err);
	asp_config_free(c);
	if (st != ASP_OK || asp_tools_new(s->c, &s->t, &err) != ASP_OK) {
		fprintf(stderr, "open: %s\n", err.message);
		return -1;
	}
	return 0;
}

/* The handle no longer sees glob, grep and edit in hello: the fallbacks run. */
static void side_hide_ops(side *s)
{
	asp_error err;
	if (tools_hello(s->t, &err) != ASP_OK) /* the ops come with hello, asked once */
		fprintf(stderr, "hello: %s\n", err.message);
	size_t k = 0;
	for (size_t i = 0; i < s->t->n_ops; i++) {
		const char *o = s->t->ops[i];
		if (!strcmp(o, "glob") || !strcmp(o, "grep") || !strcmp(o, "edit"))
			free(s->t->ops[i]);
		else
			s->t->ops[k++] = s->t->ops[i];
	}
	s->t->n_ops = k;
}

static void side_close(side *s)
{
	asp_tools_free(s->t);
	asp_client_free(s->c);
	*s = (side){0};
}

static char *call(asp_tools *t, const char *name, const char *args, bool *is_error)
{
	char *text = NULL;
	bool err = true;
	CU_ASSERT_EQUAL(asp_tools_call(t, name, args, &text, &err, NULL), ASP_OK);
	if (!text)
		text = strdup("(no text)");
	if (is_error)
		*is_error = err;
	return text;
}

/* ---- the tree --------------------------------------------------------------------- */

static void put_bytes(const char *rel, const char *text, size_t len, long mtime)
{
	char p[600];
	snprintf(p, sizeof p, "%s/%s", work, rel);
	/* parents */
	for (char *q = p + strlen(work) + 1; (q = strchr(q, '/')); q++) {
		*q = '\0';
		mkdir(p, 0755);
		*q = '/';
	}
	FILE *f = fopen(p, "wb");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fwrite(text, 1, len, f);
	fclose(f);
	/* distinct whole seconds: find's %T@ and the op's nanoseconds order them alike */
	struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
	utimensat(AT_FDCWD, p, ts, 0);
}

static void put_at(const char *rel, const char *text, long mtime)
{
	put_bytes(rel, text, strlen(text), mtime);
}

static const char *slurp(const char *rel)
{
	static char buf[1 << 16];
	char p[600];
	snprintf(p, sizeof p, "%s/%s", work, rel);
	FILE *f = fopen(p, "rb");
	if (!f)
		return "(missing)";
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void make_tree(void)
{
	long t0 = 1600000000;
	put_at("src/main.c",
	       "#include \"util.h\"\n\nint main(void)\n{\n\treturn util_answer() - 42;\n}\n",
	       t0 + 10);
	put_at("src/util.c",
	       "#include \"util.h\"\n\nint util_answer(void)\n{\n\treturn 42;\n}\n/* foo */\n",
	       t0 + 11);
	put_at("src/util.h", "int util_answer(void);\n", t0 + 5);
	/* "a-b" sorts before "a/..." bytewise, after it in a directory walk */
	put_at("a/x.txt", "foo in a/x\n", t0 + 1);
	put_at("a-b.txt", "foo in a-b\n", t0 + 2);
	/* matches close together: overlapping and touching context, a separate group */
	put_at("ctx.txt", "l1\nfoo 2\nl3\nl4\nfoo 5\nfoo 6\nl7\nl8\nl9\nl10\nl11\nfoo 12\nl13\n",
	       t0 + 3);
	put_at("first.txt", "foo first line\nl2\nl3\n", t0 + 4);
	put_at("last.txt", "l1\nl2\nFOO last, no newline", t0 + 6);
	put_at("crlf.txt", "foo\r\nbar\r\n", t0 + 7);
	put_at("docs/guide.md", "Call util_answer() for THE ANSWER.\n", t0 + 8);
	put_at("README.md", "# demo\n\nThe answer is 42.\n", t0 + 9);
	put_at(".cfg/hidden.c", "zzz_hidden\n", t0 + 12);
	put_at(".git/config", "foo = 42\n", t0 + 13);
	put_bytes("bin.dat", "foo\0bin\n", 8, t0 + 14);
	/* a name with a space, a newline, quotes, $ and a byte that is not UTF-8 */
	put_at("odd/we ird\n'q'$x\xff.txt", "foo odd\nbar\n", t0 + 15);
	for (int i = 0; i < 120; i++) {
		char rel[64], text[64];
		snprintf(rel, sizeof rel, "many/f%03d.log", i);
		snprintf(text, sizeof text, "entry %d foo\n", i);
		put_at(rel, text, t0 + 100 + i);
	}
}

/* ---- suite ------------------------------------------------------------------------ */

static side op_side, bare_side, counted_side, static_op, static_bare;
/* counted, with the usual PATH: with every op, and with glob, grep and edit hidden */
static side counted_plain, counted_bare;
static bool have_static;

static int suite_init(void)
{
	const char *agent = getenv("ASP_AGENT");
	if (!agent)
		return -1;
	snprintf(root, sizeof root, "/tmp/asp-tools-ops-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	snprintf(work, sizeof work, "%s/w", root);
	snprintf(empty_dir, sizeof empty_dir, "%s/empty-path", root);
	mkdir(work, 0755);
	mkdir(empty_dir, 0755);
	if (side_open(&op_side, "", agent) || side_open(&bare_side, "", agent))
		return -1;
	side_hide_ops(&bare_side);
	const char *st = getenv("ASP_AGENT_STATIC");
	if (st && *st) {
		if (side_open(&static_op, "", st) || side_open(&static_bare, "", st))
			return -1;
		side_hide_ops(&static_bare);
		have_static = true;
	}
	/* libasp registered its transports with the first client: wrap stdio's now */
	real_stdio = asp_transport_find(ASP_TRANSPORT_STDIO);
	if (!real_stdio)
		return -1;
	counting = *real_stdio;
	counting.open = counting_open;
	counting.subscribe = counted_subscribe;
	asp_error err;
	if (asp_transport_register(&counting, &err) != ASP_OK)
		return -1;
	char prefix[400];
	snprintf(prefix, sizeof prefix, "\"/usr/bin/env\", \"PATH=%s\", ", empty_dir);
	if (side_open(&counted_side, prefix, agent) || side_open(&counted_plain, "", agent) ||
	    side_open(&counted_bare, "", agent))
		return -1;
	side_hide_ops(&counted_bare);
	return 0;
}

static int suite_clean(void)
{
	side_close(&counted_side);
	side_close(&counted_plain);
	side_close(&counted_bare);
	side_close(&op_side);
	side_close(&bare_side);
	if (have_static) {
		side_close(&static_op);
		side_close(&static_bare);
	}
	if (real_stdio) {
		asp_error err;
		asp_transport_register(real_stdio, &err);
	}
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* ---- tests ------------------------------------------------------------------------ */

/* One op call and nothing else, with no find or grep on the agent's PATH. */
static void test_one_op_call(void)
{
	make_tree();
	asp_tools *t = counted_side.t;
	CU_ASSERT(tools_has_op(t, "glob") && tools_has_op(t, "grep") && tools_has_op(t, "edit"));
	bool e;
	counts_reset();
	char *s =
	    call(t, "grep", "{\"pattern\": \"util_answer\", \"output_mode\": \"content\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "/src/util.h:1:int util_answer(void);"));
	CU_ASSERT(only(C_GREP));
	free(s);
	counts_reset();
	s = call(t, "glob", "{\"pattern\": \"src/*.{c,h}\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "/src/util.c\n"));
	CU_ASSERT(only(C_GLOB));
	free(s);
	counts_reset();
	s = call(t, "glob", "{\"pattern\": \"*\", \"path\": \"nope\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "Error: directory does not exist: "));
	CU_ASSERT(only(C_GLOB));
	free(s);
	put_at("e.txt", "one two one\n", 1600000000);
	counts_reset();
	s = call(t, "edit",
	         "{\"file_path\": \"e.txt\", \"old_string\": \"one\", \"new_string\": \"1\", "
	         "\"replace_all\": true}",
	         &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "(2 replacements)"));
	CU_ASSERT(only(C_EDIT));
	CU_ASSERT_STRING_EQUAL(slurp("e.txt"), "1 two 1\n");
	free(s);
	/* the fallback on this agent cannot run: proof that the above did not use it */
	counts_reset();
	s = call(t, "bash", "{\"command\": \"grep -r foo .\"}", &e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "not found"));
	free(s);
}

/*
 * Every tool call is one round trip where the responder has the op: read, write and ls
 * ask nothing first (what the op refuses says what the path is; write's result says
 * whether it made the file), bash is one spawn; without the glob op, glob is one exec of
 * find and asks about the path only when find found nothing.
 */
static void test_one_call_each(void)
{
	make_tree();
	asp_tools *t = counted_plain.t;
	bool e;
	struct {
		const char *tool, *args, *text;
		bool error;
		int slot;
	} cases[] = {
	    {"read", "{\"file_path\": \"src/util.h\"}", "int util_answer(void);", false, C_READ},
	    {"read", "{\"file_path\": \"src\"}", "is a directory, not a file", true, C_READ},
	    {"read", "{\"file_path\": \"nope.txt\"}", "file does not exist", true, C_READ},
	    {"write", "{\"file_path\": \"new.txt\", \"content\": \"a\"}",
	     "File created successfully at: ", false, C_WRITE},
	    {"write", "{\"file_path\": \"new.txt\", \"content\": \"b\"}", "has been updated", false,
	     C_WRITE},
	    {"write", "{\"file_path\": \"src\", \"content\": \"b\"}", "is a directory", true,
	     C_WRITE},
	    {"ls", "{\"path\": \"src\"}", "util.c", false, C_LIST},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		counts_reset();
		char *s = call(t, cases[i].tool, cases[i].args, &e);
		CU_ASSERT_EQUAL(e, cases[i].error);
		CU_ASSERT_PTR_NOT_NULL(strstr(s, cases[i].text));
		if (!only(cases[i].slot) || !strstr(s, cases[i].text))
			fprintf(stderr, "%s %s: %s\n", cases[i].tool, cases[i].args, s);
		free(s);
	}
	CU_ASSERT_STRING_EQUAL(slurp("new.txt"), "b");
	counts_reset();
	atomic_store(&follows, 0);
	char *s = call(t, "bash", "{\"command\": \"echo hi\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_STRING_EQUAL(s, "hi");
	CU_ASSERT_EQUAL(atomic_load(&follows), 1);
	for (int i = 0; i < C_N; i++)
		CU_ASSERT_EQUAL(atomic_load(&counts[i]), 0);
	free(s);
	/* glob through find: one exec; a missing path is then asked about, once */
	counts_reset();
	s = call(counted_bare.t, "glob", "{\"pattern\": \"src/*.c\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "/src/util.c"));
	CU_ASSERT(only(C_EXEC));
	free(s);
	counts_reset();
	s = call(counted_bare.t, "glob", "{\"pattern\": \"*\", \"path\": \"nope\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "Error: directory does not exist: "));
	CU_ASSERT_EQUAL(atomic_load(&counts[C_EXEC]), 1);
	CU_ASSERT_EQUAL(atomic_load(&counts[C_STAT]), 1);
	free(s);
	counts_reset();
	s = call(counted_bare.t, "glob", "{\"pattern\": \"*\", \"path\": \"src/util.c\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "is not a directory"));
	free(s);
}

/* bash's timeout: 120000 ms unless given (0 too), refused past 600000 before anything runs. */
static void test_bash_timeout(void)
{
	static const struct {
		const char *args;
		uint64_t timeout; /* 0: refused */
	} cases[] = {
	    {"{\"command\": \"true\"}", 120000},
	    {"{\"command\": \"true\", \"timeout\": 0}", 120000},
	    {"{\"command\": \"true\", \"timeout\": 5000}", 5000},
	    {"{\"command\": \"true\", \"timeout\": 600000}", 600000},
	    {"{\"command\": \"true\", \"timeout\": 600001}", 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		atomic_store(&follows, 0);
		atomic_store(&last_follow_timeout, 1);
		bool e;
		char *s = call(counted_side.t, "bash", cases[i].args, &e);
		if (cases[i].timeout) {
			CU_ASSERT(atomic_load(&follows) >= 1);
			CU_ASSERT_EQUAL(atomic_load(&last_follow_timeout), cases[i].timeout);
		} else {
			CU_ASSERT(e);
			CU_ASSERT_PTR_NOT_NULL(strstr(s, "timeout must be at most 600000 ms"));
			CU_ASSERT_EQUAL(atomic_load(&follows), 0);
		}
		free(s);
	}
}

/* hello names the grep dialect: PCRE2 in asp-agent, POSIX ERE in asp-agent-static. */
static bool has_feature(asp_client *c, const char *name)
{
	asp_arena *a = asp_arena_new();
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	asp_error err;
	bool found = false;
	CU_ASSERT_EQUAL_FATAL(asp_hello(c, &p, &r, a, &err), ASP_OK);
	for (size_t i = 0; i < r.features.count; i++)
		found = found || !strcmp(r.features.items[i], name);
	asp_arena_free(a);
	return found;
}

static void test_grep_dialect(void)
{
	CU_ASSERT(has_feature(op_side.c, "grep-pcre2"));
	CU_ASSERT_FALSE(has_feature(op_side.c, "grep-ere"));
	if (!have_static) {
		fprintf(stderr, "(asp-agent-static not built)\n");
		return;
	}
	CU_ASSERT(has_feature(static_op.c, "grep-ere"));
	CU_ASSERT_FALSE(has_feature(static_op.c, "grep-pcre2"));
	/* towards ERE the tools layer makes a leading (?i) ignore-case, as PCRE2 reads it */
	put_at("dialect.txt", "x7\nMiXeD case\n", 1600000000);
	bool e1, e2;
	const char *icase = "{\"pattern\": \"(?i)mixed CASE\", \"glob\": \"dialect.txt\", "
	                    "\"output_mode\": \"content\"}";
	char *ere = call(static_op.t, "grep", icase, &e1);
	char *pcre = call(op_side.t, "grep", icase, &e2);
	CU_ASSERT_FALSE(e1 || e2);
	CU_ASSERT_PTR_NOT_NULL(strstr(ere, "dialect.txt:2:MiXeD case"));
	CU_ASSERT_STRING_EQUAL(ere, pcre);
	free(ere);
	free(pcre);
	/* what it cannot make ERE is an error naming the dialect; PCRE2 takes it */
	const char *look = "{\"pattern\": \"x(?=7)\", \"glob\": \"dialect.txt\"}";
	ere = call(static_op.t, "grep", look, &e1);
	CU_ASSERT(e1);
	CU_ASSERT_PTR_NOT_NULL(strstr(ere, "speaks POSIX extended regular expressions"));
	free(ere);
	pcre = call(op_side.t, "grep", look, &e2);
	CU_ASSERT_FALSE(e2);
	CU_ASSERT_PTR_NOT_NULL(strstr(pcre, "dialect.txt"));
	free(pcre);
}

/* The call on both handles: the same text and error flag. */
static void same(side *op, side *bare, const char *name, const char *args)
{
	bool e1, e2;
	char *a = call(op->t, name, args, &e1);
	char *b = call(bare->t, name, args, &e2);
	if (strcmp(a, b) != 0 || e1 != e2)
		fprintf(stderr, "\n%s %s\n--- op (error %d):\n%s\n--- fallback (error %d):\n%s\n",
		        name, args, e1, a, e2, b);
	CU_ASSERT_STRING_EQUAL(a, b);
	CU_ASSERT_EQUAL(e1, e2);
	free(a);
	free(b);
}

static const char *const grep_cases[] = {
    "{\"pattern\": \"foo\"}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\"}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\", \"-C\": 1}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\", \"-C\": 2}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\", \"-A\": 1}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\", \"-B\": 3, \"path\": \"ctx.txt\"}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\", \"-n\": false}",
    "{\"pattern\": \"foo\", \"output_mode\": \"count\"}",
    "{\"pattern\": \"foo\", \"-i\": true, \"output_mode\": \"count\"}",
    "{\"pattern\": \"return\", \"output_mode\": \"content\", \"-C\": 1, \"glob\": \"*.c\"}",
    ("{\"pattern\": \"util_[a-z]+\", \"output_mode\": \"content\", \"path\": \"src\", "
     "\"glob\": \"*.{c,h}\", \"head_limit\": 2}"),
    "{\"pattern\": \"foo\", \"glob\": \"a/*.txt\"}",
    "{\"pattern\": \"foo\", \"glob\": \"many/f00?.log\", \"output_mode\": \"content\"}",
    "{\"pattern\": \"foo\", \"output_mode\": \"content\", \"head_limit\": 7, \"-C\": 1}",
    "{\"pattern\": \"foo$\", \"output_mode\": \"content\"}",
    "{\"pattern\": \"^l[0-9]+$\", \"output_mode\": \"count\", \"path\": \"ctx.txt\"}",
    "{\"pattern\": \"zzz_hidden\", \"glob\": \".cfg/*.c\"}",
    "{\"pattern\": \"zzz_hidden\", \"glob\": \".*\", \"output_mode\": \"content\"}",
    "{\"pattern\": \"no such text\"}",
    "{\"pattern\": \"no such text\", \"output_mode\": \"content\"}",
    "{\"pattern\": \"foo\", \"path\": \"nope\"}",
    "{\"pattern\": \"(\", \"output_mode\": \"content\"}",
    "{\"pattern\": \"foo\", \"path\": \"odd\", \"output_mode\": \"content\", \"-A\": 1}",
    "{\"pattern\": \"odd\", \"glob\": \"*.txt\", \"output_mode\": \"count\"}",
};

static const char *const glob_cases[] = {
    "{\"pattern\": \"src/*.{c,h}\"}",
    "{\"pattern\": \"**/*.md\"}",
    "{\"pattern\": \"*.md\"}",
    "{\"pattern\": \"**/config\"}",
    "{\"pattern\": \"**/*.c\"}",
    "{\"pattern\": \"**/*.log\"}",
    "{\"pattern\": \"many/f1[01]?.log\"}",
    "{\"pattern\": \"*.rs\"}",
    "{\"pattern\": \"*\", \"path\": \"src\"}",
    "{\"pattern\": \"**\", \"path\": \"a\"}",
    "{\"pattern\": \"a\\\\-b.txt\"}",
    "{\"pattern\": \"*\", \"path\": \"nope\"}",
    "{\"pattern\": \"*\", \"path\": \"README.md\"}",
    "{\"pattern\": \"odd/*\"}",
    "{\"pattern\": \"**/we*.txt\"}",
};

static void edit_cases(side *op, side *bare)
{
	static const char *const cases[] = {
	    "{\"file_path\": \"e.txt\", \"old_string\": \"two\", \"new_string\": \"2\"}",
	    "{\"file_path\": \"e.txt\", \"old_string\": \"one\", \"new_string\": \"1\"}",
	    ("{\"file_path\": \"e.txt\", \"old_string\": \"one\", \"new_string\": \"1\", "
	     "\"replace_all\": true}"),
	    "{\"file_path\": \"e.txt\", \"old_string\": \"three\", \"new_string\": \"3\"}",
	    "{\"file_path\": \"nope/e.txt\", \"old_string\": \"x\", \"new_string\": \"y\"}",
	    "{\"file_path\": \"src\", \"old_string\": \"x\", \"new_string\": \"y\"}",
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		put_at("e.txt", "one two one\n", 1600000000);
		bool e1, e2;
		char *a = call(op->t, "edit", cases[i], &e1);
		char after_op[64];
		snprintf(after_op, sizeof after_op, "%s", slurp("e.txt"));
		put_at("e.txt", "one two one\n", 1600000000);
		char *b = call(bare->t, "edit", cases[i], &e2);
		if (strcmp(a, b) || e1 != e2)
			fprintf(stderr, "\nedit %s\n--- op:\n%s\n--- fallback:\n%s\n", cases[i], a,
			        b);
		CU_ASSERT_STRING_EQUAL(a, b);
		CU_ASSERT_EQUAL(e1, e2);
		CU_ASSERT_STRING_EQUAL(after_op, slurp("e.txt"));
		free(a);
		free(b);
	}
}

/* dialect: the regex dialects may differ (asp-agent-static's ERE, grep -P): so do the
 * words for a bad regex */
static void compare(side *op, side *bare, bool dialect)
{
	make_tree();
	for (size_t i = 0; i < sizeof grep_cases / sizeof *grep_cases; i++) {
		if (dialect && strstr(grep_cases[i], "\"(\"")) {
			bool e1, e2;
			char *a = call(op->t, "grep", grep_cases[i], &e1);
			char *b = call(bare->t, "grep", grep_cases[i], &e2);
			CU_ASSERT(e1 && e2);
			CU_ASSERT_EQUAL(strncmp(a, "Error: the search failed: grep: ", 32), 0);
			CU_ASSERT_EQUAL(strncmp(b, "Error: the search failed: grep: ", 32), 0);
			free(a);
			free(b);
			continue;
		}
		same(op, bare, "grep", grep_cases[i]);
	}
	for (size_t i = 0; i < sizeof glob_cases / sizeof *glob_cases; i++)
		same(op, bare, "glob", glob_cases[i]);
	edit_cases(op, bare);
}

static void test_same_as_fallback(void)
{
	compare(&op_side, &bare_side, false);
}

static void test_same_as_fallback_static(void)
{
	if (!have_static) {
		fprintf(stderr, "(asp-agent-static not built)\n");
		return;
	}
	compare(&static_op, &static_bare, true);
}

/* What differs on purpose: hidden files, multiline content (grep -o can say no line). */
static void test_op_differences(void)
{
	make_tree();
	bool e;
	char *a = call(op_side.t, "grep", "{\"pattern\": \"zzz_hidden\"}", &e);
	char *b = call(bare_side.t, "grep", "{\"pattern\": \"zzz_hidden\"}", &e);
	CU_ASSERT_STRING_EQUAL(a, "No files found");
	CU_ASSERT_PTR_NOT_NULL(strstr(b, "/.cfg/hidden.c"));
	free(a);
	free(b);
	/* ... unless the glob names a hidden name; its other alternatives do not let them in */
	put_at(".cfg/h.txt", "zzz_hidden\n", 1600000000);
	put_at("h.txt", "zzz_hidden\n", 1600000000);
	a = call(op_side.t, "grep", "{\"pattern\": \"zzz_hidden\", \"glob\": \"{.cfg/*.c,*.txt}\"}",
	         &e);
	char want2[700];
	snprintf(want2, sizeof want2, "%s/.cfg/hidden.c\n%s/h.txt", work, work);
	CU_ASSERT_STRING_EQUAL(a, want2);
	free(a);
	a = call(op_side.t, "grep",
	         "{\"pattern\": \"foo 5\\\\nfoo\", \"output_mode\": \"content\", \"multiline\": "
	         "true}",
	         &e);
	char want[700];
	snprintf(want, sizeof want, "%s/ctx.txt:5:foo 5\n%s/ctx.txt:6:foo 6", work, work);
	CU_ASSERT_STRING_EQUAL(a, want);
	free(a);
}

/* A text file of `size` bytes, sparse after its first lines (`text`). */
static void put_sized(const char *rel, const char *text, off_t size)
{
	put_at(rel, text, 1600000000);
	char p[600];
	snprintf(p, sizeof p, "%s/%s", work, rel);
	CU_ASSERT_EQUAL_FATAL(truncate(p, size), 0);
}

/*
 * Files over 64 MiB are not read by the op: it lists them and the tool says so, rather
 * than "No files found" of a file holding a match. A binary one (a NUL in its first
 * 8 KiB) is skipped as binary, whatever its size.
 */
static void test_grep_too_large(void)
{
	char head[9000];
	memset(head, 'x', sizeof head - 1);
	head[sizeof head - 1] = '\0';
	memcpy(head, "foo big\n", 8);
	head[200] = '\n';
	put_sized("large/huge.log", head, ((off_t)64 << 20) + 1);
	put_sized("large/blob.bin", "foo\n", ((off_t)64 << 20) + 1); /* NULs after the line */
	put_sized("large/edge.log", head, (off_t)64 << 20);          /* at the limit: searched */
	put_at("large/small.txt", "nothing here\n", 1600000000);
	bool e;
	char *a = call(op_side.t, "grep", "{\"pattern\": \"foo big\", \"path\": \"large\"}", &e);
	char want[1400];
	snprintf(want, sizeof want,
	         "%s/large/edge.log\n(Not searched, over 64 MiB: %s/large/huge.log. Search them "
	         "with grep through the bash tool.)",
	         work, work);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_STRING_EQUAL(a, want);
	free(a);
	a = call(op_side.t, "grep", "{\"pattern\": \"zzz\", \"path\": \"large\"}", &e);
	snprintf(want, sizeof want,
	         "No files found\n(Not searched, over 64 MiB: %s/large/huge.log. Search them "
	         "with grep through the bash tool.)",
	         work);
	CU_ASSERT_STRING_EQUAL(a, want);
	free(a);
	/* the op's own answer: the file named, alone, when it is the path searched */
	asp_arena *ar = asp_arena_new();
	asp_grep_params p;
	asp_grep_params_init(&p);
	char path[600];
	snprintf(path, sizeof path, "%s/large/huge.log", work);
	p.path = path;
	p.regex = "foo";
	asp_grep_result r;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_grep(op_side.c, &p, &r, ar, &err), ASP_OK);
	CU_ASSERT_EQUAL(r.files.count, 0);
	CU_ASSERT_TRUE(r.has_too_large);
	CU_ASSERT_EQUAL_FATAL(r.too_large.count, 1);
	CU_ASSERT_STRING_EQUAL(r.too_large.items[0], path);
	CU_ASSERT_FALSE(r.truncated);
	/* none too large: the field is absent */
	snprintf(path, sizeof path, "%s/large/small.txt", work);
	CU_ASSERT_EQUAL_FATAL(asp_grep(op_side.c, &p, &r, ar, &err), ASP_OK);
	CU_ASSERT_FALSE(r.has_too_large);
	asp_arena_free(ar);
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s/large'", work);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/* ---- the grep op: whole-buffer search gives what line-by-line matching gives ------- */

/* grep's answer as text (mode "count" or "content"), for comparing. */
static char *grep_text(asp_client *c, const char *regex, const char *mode, bool icase)
{
	asp_arena *a = asp_arena_new();
	asp_grep_params p;
	asp_grep_params_init(&p);
	char dir[400];
	snprintf(dir, sizeof dir, "%s/g", work);
	p.path = dir;
	p.regex = regex;
	p.mode = mode;
	p.ignore_case = icase;
	p.before = 1;
	p.after = 1;
	p.max_matches = 100000;
	asp_grep_result r;
	asp_error err;
	tbuf b = {0};
	if (asp_grep(c, &p, &r, a, &err) != ASP_OK) {
		tb_printf(&b, "error %d", (int)err.code);
	} else {
		for (size_t i = 0; i < r.counts.count; i++)
			tb_printf(&b, "%s:%llu\n", r.counts.items[i].path + strlen(dir),
			          (unsigned long long)r.counts.items[i].count);
		for (size_t i = 0; i < r.matches.count; i++) {
			const asp_grep_match *m = &r.matches.items[i];
			tb_printf(&b, "%s:%llu:%s|", m->path + strlen(dir),
			          (unsigned long long)m->line, m->text);
			for (size_t k = 0; k < m->before.count; k++)
				tb_printf(&b, "b=%s|", m->before.items[k]);
			for (size_t k = 0; k < m->after.count; k++)
				tb_printf(&b, "a=%s|", m->after.items[k]);
			tb_puts(&b, "\n");
		}
		tb_printf(&b, "truncated %d", r.truncated);
	}
	asp_arena_free(a);
	return tb_take(&b);
}

/* Files where a line-by-line match and a whole-buffer one could part ways. */
static void make_grep_tree(void)
{
	long t0 = 1600000000;
	put_at("g/multi.txt", "foo\nbar\nfoo bar\n\n\nbaz  \nfoo\tbar\nend", t0);
	put_at("g/crlf.txt", "a\r\nfoo\r\n\r\nbar\r\n", t0);
	put_at("g/empty.txt", "", t0);
	put_at("g/nl.txt", "\n", t0);
	put_at("g/utf8.txt", "h\xc3\xa9llo w\xc3\xb6rld\nna\xc3\xafve foo\n\xff\xfe bad foo\n", t0);
	tbuf b = {0};
	for (int i = 1; i <= 5000; i++)
		tb_printf(&b, i % 997 ? "line %d\n" : "line %d foo bar\n", i);
	put_at("g/long.txt", b.p, t0);
	tb_free(&b);
	/* a NUL after the binary probe: still text; regexec cannot see past it */
	for (int i = 0; i < 1300; i++)
		tb_puts(&b, "filler\n");
	tb_add(&b, "foo\0foo\nfoo\nbar", 15);
	put_bytes("g/nul_late.txt", b.p, b.len, t0);
	tb_free(&b);
}

/*
 * A line on which PCRE2 reaches its match limit is neither a match nor a miss: the file
 * is listed in undecided and the tool says so, rather than "No files found".
 */
static void test_grep_undecided(void)
{
	static const char limit_line[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaacb\n"; /* (a+)+b: the limit */
	char text[200];
	snprintf(text, sizeof text, "%s%s", limit_line, limit_line);
	put_at("open/limit.txt", text, 1600000000);
	snprintf(text, sizeof text, "%sab\n", limit_line);
	put_at("open/mixed.txt", text, 1600000000);
	put_at("open/plain.txt", "nothing here\n", 1600000000);
	bool e;
	char *a = call(op_side.t, "grep", "{\"pattern\": \"(a+)+b\", \"path\": \"open\"}", &e);
	char want[1400];
	snprintf(want, sizeof want,
	         "%s/open/mixed.txt\n(Not decided, the pattern hit the regex engine's "
	         "backtracking limit on a line of: %s/open/limit.txt. Simplify the pattern (fewer "
	         "nested quantifiers) to search them.)",
	         work, work);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_STRING_EQUAL(a, want);
	free(a);
	/* content mode: mixed.txt's match is shown, and its other line is undecided too */
	asp_arena *ar = asp_arena_new();
	asp_grep_params p;
	asp_grep_params_init(&p);
	char path[600], l[600], m[600];
	snprintf(path, sizeof path, "%s/open", work);
	snprintf(l, sizeof l, "%s/open/limit.txt", work);
	snprintf(m, sizeof m, "%s/open/mixed.txt", work);
	p.path = path;
	p.regex = "(a+)+b";
	p.mode = "content";
	asp_grep_result r;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(asp_grep(op_side.c, &p, &r, ar, &err), ASP_OK);
	CU_ASSERT_EQUAL_FATAL(r.matches.count, 1);
	CU_ASSERT_STRING_EQUAL(r.matches.items[0].path, m);
	CU_ASSERT_EQUAL(r.matches.items[0].line, 2);
	CU_ASSERT_TRUE(r.has_undecided);
	CU_ASSERT_EQUAL_FATAL(r.undecided.count, 2);
	CU_ASSERT_STRING_EQUAL(r.undecided.items[0], l);
	CU_ASSERT_STRING_EQUAL(r.undecided.items[1], m);
	CU_ASSERT_FALSE(r.truncated);
	/* a pattern that decides every line: the field is absent */
	p.regex = "a+cb";
	CU_ASSERT_EQUAL_FATAL(asp_grep(op_side.c, &p, &r, ar, &err), ASP_OK);
	CU_ASSERT_FALSE(r.has_undecided);
	CU_ASSERT_EQUAL(r.matches.count, 3);
	asp_arena_free(ar);
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s/open'", work);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/*
 * The grep op's timeout holds inside a file too: each of these lines takes PCRE2 to its
 * match limit (about 20 ms), 1,000 of them some 20 s, far past a 300 ms timeout.
 */
static void test_grep_time_bound(void)
{
	size_t line = 31, n = 1000;
	char *text = malloc(n * line + 4);
	CU_ASSERT_PTR_NOT_NULL_FATAL(text);
	for (size_t i = 0; i < n; i++)
		memcpy(text + i * line, "aaaaaaaaaaaaaaaaaaaaaaaaaaaacb\n", line);
	memcpy(text + n * line, "ab\n", 4); /* a match, after the time is up */
	put_at("slow/lines.txt", text, 1600000000);
	free(text);
	asp_arena *ar = asp_arena_new();
	asp_grep_params p;
	asp_grep_params_init(&p);
	char path[600];
	snprintf(path, sizeof path, "%s/slow", work);
	p.path = path;
	p.regex = "(a+)+b";
	p.timeout_ms = 300;
	asp_grep_result r;
	asp_error err;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CU_ASSERT_EQUAL_FATAL(asp_grep(op_side.c, &p, &r, ar, &err), ASP_OK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	CU_ASSERT_TRUE(r.truncated);
	CU_ASSERT_EQUAL(r.files.count, 0);
	/* a loaded machine's 300 ms may be several times that; 20 s would be a miss */
	CU_ASSERT_TRUE(ms < 8000);
	if (ms >= 8000)
		fprintf(stderr, "grep with a 300 ms timeout took %ld ms\n", ms);
	asp_arena_free(ar);
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s/slow'", work);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/*
 * PCRE2: each pattern against itself behind "(?=)", an empty lookahead that changes no
 * match but makes the agent go line by line (a lookaround is not safe for the buffer).
 */
static void test_grep_buffer_pcre2(void)
{
	make_grep_tree();
	static const char *const pats[] = {
	    "foo",
	    "foo\\sbar",
	    "\\s",
	    "^",
	    "$",
	    "^$",
	    "x*",
	    "bar$",
	    "^foo",
	    "\\bbar\\b",
	    "o\\s*$",
	    "[^a-z]",
	    "\\n",
	    "(foo|bar)+",
	    ".",
	    "\\r$",
	    "\\d{4}",
	    "line 4985 foo",
	    "\xc3\xb6",
	    "r\\s+b",
	    "\\s*$",
	    "filler\\nfoo",
	    "foo$",
	    "(?:o|\\n)+b",
	    /* \\K: reported in the next line, begun in this one */
	    "o\\s\\Kb|o$",
	    /* what cannot give back what it took past the newline: possessive, \\R, \\X */
	    "z\\s++$",
	    "z\\s*+$",
	    "a\\R$",
	    "(?i)FOO",
	    "x(?i:FOO)?$",
	    "a\\X$",
	};
	for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
		char slow[128];
		snprintf(slow, sizeof slow, "(?=)%s", pats[i]);
		for (int m = 0; m < 2; m++) {
			const char *mode = m ? "content" : "count";
			for (int ic = 0; ic < 2; ic++) {
				char *fast = grep_text(op_side.c, pats[i], mode, ic);
				char *ref = grep_text(op_side.c, slow, mode, ic);
				if (strcmp(fast, ref))
					fprintf(stderr,
					        "\n%s %s -i %d\n--- buffer:\n%s\n--- lines:\n%s\n",
					        pats[i], mode, ic, fast, ref);
				CU_ASSERT_STRING_EQUAL(fast, ref);
				free(fast);
				free(ref);
			}
		}
	}
}

/* ERE (asp-agent-static): the same answers as PCRE2 for patterns that mean the same. */
static void test_grep_buffer_ere(void)
{
	if (!have_static) {
		fprintf(stderr, "(asp-agent-static not built)\n");
		return;
	}
	make_grep_tree();
	static const char *const pats[] = {"foo",      "^",        "$",    "^$",
	                                   "x*",       "bar$",     "^foo", "(foo|bar)+",
	                                   "[0-9]{4}", "o[ \t]*$", "ba.",  "line 4985 foo",
	                                   "foo$"};
	for (size_t i = 0; i < sizeof pats / sizeof *pats; i++)
		for (int m = 0; m < 2; m++) {
			const char *mode = m ? "content" : "count";
			char *ere = grep_text(static_op.c, pats[i], mode, m);
			char *pcre = grep_text(op_side.c, pats[i], mode, m);
			if (strcmp(ere, pcre))
				fprintf(stderr, "\n%s %s\n--- ere:\n%s\n--- pcre2:\n%s\n", pats[i],
				        mode, ere, pcre);
			CU_ASSERT_STRING_EQUAL(ere, pcre);
			free(ere);
			free(pcre);
		}
}

/*
 * An answer that would pass max_message (16 MiB) is cut, not refused: the path goes out
 * with every match, so 40,000 one-byte matches under a 450-byte path are ~20 MB.
 */
static void test_grep_answer_fits(void)
{
	char dir[256] = "big/", rel[600];
	memset(dir + 4, 'd', 200);
	dir[204] = '\0';
	snprintf(rel, sizeof rel, "%s/%.200s/x.txt", dir, dir + 4);
	tbuf b = {0};
	for (int i = 0; i < 40000; i++)
		tb_puts(&b, "x\n");
	put_at(rel, b.p, 1600000000);
	tb_free(&b);
	asp_arena *a = asp_arena_new();
	asp_grep_params p;
	asp_grep_params_init(&p);
	char abs[700];
	snprintf(abs, sizeof abs, "%s/big", work);
	p.path = abs;
	p.regex = "x";
	p.mode = "content";
	p.max_matches = 1000000;
	asp_grep_result r;
	asp_error err;
	CU_ASSERT_EQUAL(asp_grep(op_side.c, &p, &r, a, &err), ASP_OK);
	CU_ASSERT(r.truncated);
	CU_ASSERT(r.matches.count > 1000 && r.matches.count < 40000);
	asp_arena_free(a);
	bool e;
	char *t = call(op_side.t, "grep",
	               "{\"pattern\": \"x\", \"path\": \"big\", \"output_mode\": \"content\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(
	    strstr(t, "(The output was cut: narrow the pattern, path or glob.)"));
	free(t);
}

int main(int argc, char **argv)
{
	if (!getenv("ASP_AGENT")) {
		fprintf(stderr, "ASP_AGENT is not set\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("tools on ops", suite_init, suite_clean);
	CU_add_test(s, "glob, grep, edit: one op call, no find or grep on PATH", test_one_op_call);
	CU_add_test(s, "read, write, ls, bash, glob through find: one op call each",
	            test_one_call_each);
	CU_add_test(s, "op and fallback give the same text (asp-agent, PCRE2)",
	            test_same_as_fallback);
	CU_add_test(s, "op and fallback give the same text (asp-agent-static, ERE)",
	            test_same_as_fallback_static);
	CU_add_test(s, "hidden files and multiline content: the op's own", test_op_differences);
	CU_add_test(s, "grep op: files over 64 MiB are listed, not left unsaid",
	            test_grep_too_large);
	CU_add_test(s, "grep op: a line the match limit leaves open is said, not missed",
	            test_grep_undecided);
	CU_add_test(s, "grep op: the timeout holds inside a file of slow lines",
	            test_grep_time_bound);
	CU_add_test(s, "grep op: the whole-buffer search finds what line-by-line does (PCRE2)",
	            test_grep_buffer_pcre2);
	CU_add_test(s, "grep op: ERE on the whole buffer agrees with PCRE2", test_grep_buffer_ere);
	CU_add_test(s, "bash timeout: default 120000 ms, at most 600000", test_bash_timeout);
	CU_add_test(s, "hello names the grep dialect (grep-pcre2, grep-ere)", test_grep_dialect);
	CU_add_test(s, "grep op: an answer past max_message is cut, not refused",
	            test_grep_answer_fits);
	/* every test, or the suites and tests named as arguments */
	unsigned fails = (unsigned)cu_run(argc, argv);
	return fails ? 1 : 0;
}
