/*
 * The tools layer (asp/tools.h) against a real asp-agent over stdio: formats and limits
 * the MCP tests do not pin down (output cap, long lines, UTF-8, CRLF), apply_patch's
 * forms, path resolution against the config's cwd, cancellation from another thread and
 * concurrent calls, and the glob matcher.
 */
#include "cu_run.h"
#include "asp/asp.h"
#include "tools/shared.h"

#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *agent;
static char root[256];
static asp_client *client;
static asp_tools *tools;
/* A deadlock was detected: freeing the handle would hang too. */
static bool deadlocked;

static char *slurp(const char *rel)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	FILE *f = fopen(p, "rb");
	if (!f)
		return NULL;
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strdup(buf);
}

static void put(const char *rel, const char *text)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	FILE *f = fopen(p, "wb");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
}

/* Calls a tool; returns its text (malloc'd) and sets *is_error. */
static char *call(const char *name, const char *args, bool *is_error)
{
	char *text = NULL;
	bool err = true;
	CU_ASSERT_EQUAL(asp_tools_call(tools, name, args, &text, &err, NULL), ASP_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(text);
	if (is_error)
		*is_error = err;
	return text;
}

static int suite_init(void)
{
	agent = getenv("ASP_AGENT");
	if (!agent)
		return -1;
	snprintf(root, sizeof root, "/tmp/asp-tools-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	char sub[300];
	snprintf(sub, sizeof sub, "%s/sub", root);
	mkdir(sub, 0755);
	/* cwd relative to the responder's start directory is joined with it */
	char cfg[1024];
	snprintf(cfg, sizeof cfg,
	         "{\"version\": 1, \"transport\": \"stdio\", \"cwd\": \"%s/sub/..\", "
	         "\"stdio\": {\"command\": [\"%s\", \"--stdio\"]}}",
	         root, agent);
	asp_config *c;
	asp_error err;
	if (asp_config_parse(cfg, strlen(cfg), NULL, &c, &err) != ASP_OK) {
		fprintf(stderr, "config: %s\n", err.message);
		return -1;
	}
	asp_status st = asp_client_open(c, &client, &err);
	asp_config_free(c);
	if (st != ASP_OK || asp_tools_new(client, &tools, &err) != ASP_OK) {
		fprintf(stderr, "open: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int suite_clean(void)
{
	if (deadlocked)
		return -1;
	asp_tools_free(tools);
	asp_client_free(client);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_list(void)
{
	size_t n;
	const asp_tool_desc *d = asp_tools_list(&n);
	CU_ASSERT_EQUAL(n, 13);
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_loads(d[i].input_schema, 0, NULL);
		CU_ASSERT_PTR_NOT_NULL(s);
		CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(s, "type")), "object");
		json_decref(s);
		CU_ASSERT_PTR_EQUAL(asp_tools_find(d[i].name), &d[i]);
	}
	CU_ASSERT_PTR_NULL(asp_tools_find("Bash"));
	char *text;
	bool e;
	CU_ASSERT_EQUAL(asp_tools_call(tools, "nope", "{}", &text, &e, NULL), ASP_E_NOT_FOUND);
	CU_ASSERT(e);
	free(text);
	CU_ASSERT_EQUAL(asp_tools_call(tools, "read", "[1]", &text, &e, NULL),
	                ASP_E_INVALID_ARGUMENT);
	free(text);
	text = call("read", "{\"file_path\": 3}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "`file_path` must be a string"));
	free(text);
}

/* Characters of valid UTF-8: the bytes that are not continuation bytes. */
static size_t utf8_chars(const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += ((unsigned char)s[i] & 0xC0) != 0x80;
	return n;
}

/* 30000 characters at most: the first and last 15000 around a note of the cut. */
static void test_bash_cap(void)
{
	bool e;
	char *t = call(
	    "bash", "{\"command\": \"head -c 100000 /dev/zero | tr '\\\\0' a; printf END\"}", &e);
	CU_ASSERT_FALSE(e);
	const char *note = strstr(t, "\n\n... [");
	CU_ASSERT_PTR_NOT_NULL_FATAL(note);
	CU_ASSERT_EQUAL(note - t, 15000);
	CU_ASSERT_PTR_NOT_NULL(strstr(note, "70003 characters of output cut"));
	const char *tail = strstr(note, "] ...\n\n");
	CU_ASSERT_PTR_NOT_NULL_FATAL(tail);
	tail += 7;
	CU_ASSERT_EQUAL(strlen(tail), 15000);
	CU_ASSERT_STRING_EQUAL(tail + 15000 - 3, "END");
	free(t);
	/* exactly at the limit: nothing cut */
	t = call("bash", "{\"command\": \"head -c 30000 /dev/zero | tr '\\\\0' b\"}", &e);
	CU_ASSERT_EQUAL(strlen(t), 30000);
	free(t);
	/* characters, not bytes: 20000 three-byte euro signs fit whole */
	t = call("bash", "{\"command\": \"yes € | head -n 20000 | tr -d '\\\\n'\"}", &e);
	CU_ASSERT_EQUAL(strlen(t), 60000);
	CU_ASSERT_EQUAL(utf8_chars(t, strlen(t)), 20000);
	free(t);
	/* 40000 of them are cut between characters, 15000 on each side */
	t = call("bash", "{\"command\": \"yes € | head -n 40000 | tr -d '\\\\n'; printf END\"}",
	         &e);
	note = strstr(t, "\n\n... [");
	CU_ASSERT_PTR_NOT_NULL_FATAL(note);
	CU_ASSERT_EQUAL(utf8_chars(t, (size_t)(note - t)), 15000);
	CU_ASSERT_EQUAL(note - t, 45000);
	CU_ASSERT_PTR_NOT_NULL(
	    strstr(note, "10003 characters of output cut from the middle, of 40003"));
	tail = strstr(note, "] ...\n\n");
	CU_ASSERT_PTR_NOT_NULL_FATAL(tail);
	tail += 7;
	CU_ASSERT_EQUAL(utf8_chars(tail, strlen(tail)), 15000);
	CU_ASSERT_EQUAL(strlen(tail), 3 + 14997 * 3);
	CU_ASSERT_PTR_NULL(strstr(t, "\xEF\xBF\xBD")); /* no character was split */
	free(t);
}

/* Invalid UTF-8 becomes U+FFFD: the text must fit a JSON string. */
static void test_utf8(void)
{
	bool e;
	char *t = call("bash", "{\"command\": \"printf 'a\\\\377b\\\\342\\\\202\\\\254'\"}", &e);
	CU_ASSERT_STRING_EQUAL(t, "a\xEF\xBF\xBD"
	                          "b\xE2\x82\xAC");
	free(t);
}

static void test_read_lines(void)
{
	char *longline = malloc(5000);
	memset(longline, 'x', 4999);
	longline[4999] = '\0';
	char *content = malloc(6000);
	snprintf(content, 6000, "a\r\n%s\nlast", longline);
	put("lines.txt", content);
	bool e;
	/* relative: the config's cwd ("ROOT/sub/..") */
	char *t = call("read", "{\"file_path\": \"lines.txt\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_EQUAL(strncmp(t, "     1\ta\n     2\t", 16), 0);
	const char *cut = strstr(t, "... [line cut: 4999 characters in all]\n     3\tlast");
	CU_ASSERT_PTR_NOT_NULL_FATAL(cut);
	CU_ASSERT_EQUAL(cut - (t + 16), 2000);
	free(t);
	free(longline);
	free(content);
	/* characters, not bytes: 1500 euro signs (4500 bytes) stay whole; 2500 are cut at
	 * 2000 and counted as 2500 */
	tbuf b = {0};
	for (int i = 0; i < 1500; i++)
		tb_puts(&b, "€");
	tb_puts(&b, "\n");
	for (int i = 0; i < 2500; i++)
		tb_puts(&b, "€");
	char *u = tb_take(&b);
	put("euro.txt", u);
	t = call("read", "{\"file_path\": \"euro.txt\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_EQUAL(strncmp(t, "     1\t", 7), 0);
	CU_ASSERT_EQUAL(strncmp(t + 7, u, 4500), 0);
	CU_ASSERT_EQUAL(strncmp(t + 7 + 4500, "\n     2\t", 8), 0);
	CU_ASSERT_EQUAL(strncmp(t + 15 + 4500, u + 4501, 6000), 0);
	CU_ASSERT_STRING_EQUAL(t + 15 + 4500 + 6000, "... [line cut: 2500 characters in all]");
	free(t);
	free(u);
}

/* A file past the size read whole (64 MiB) is read in pieces, as far as the lines shown. */
static void test_read_large(void)
{
	char p[512];
	snprintf(p, sizeof p, "%s/large.log", root);
	FILE *f = fopen(p, "wb");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	for (int i = 1; i <= 3000; i++)
		fprintf(f, "entry %d\n", i);
	fclose(f);
	/* the rest a hole: no disk, and never read, since the lines asked for come first */
	CU_ASSERT_EQUAL_FATAL(truncate(p, (off_t)TOOLS_FILE_MAX + 4096), 0);
	bool e;
	char *t =
	    call("read", "{\"file_path\": \"large.log\", \"offset\": 2999, \"limit\": 2}", &e);
	CU_ASSERT_FALSE(e);
	char want[256];
	snprintf(want, sizeof want,
	         "  2999\tentry 2999\n  3000\tentry 3000\n(Showed lines 2999-3000 of a file of %u "
	         "bytes, more follow; use offset=3001 to read on.)",
	         TOOLS_FILE_MAX + 4096);
	CU_ASSERT_STRING_EQUAL(t, want);
	free(t);
	t = call("read", "{\"file_path\": \"large.log\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_EQUAL(strncmp(t, "     1\tentry 1\n     2\tentry 2\n", 30), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "  2000\tentry 2000\n(Showed lines 1-2000 of a file of "));
	free(t);
	unlink(p);
}

static void test_edit(void)
{
	put("e.txt", "one two one two\n");
	bool e;
	char *t = call("edit",
	               "{\"file_path\": \"e.txt\", \"old_string\": \"one\", \"new_string\": \"1\", "
	               "\"replace_all\": true}",
	               &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "2 replacements"));
	free(t);
	char *s = slurp("e.txt");
	CU_ASSERT_STRING_EQUAL(s, "1 two 1 two\n");
	free(s);
	t = call("edit",
	         "{\"file_path\": \"made/new.txt\", \"old_string\": \"\", \"new_string\": \"hi\"}",
	         &e);
	CU_ASSERT_FALSE(e);
	free(t);
	s = slurp("made/new.txt");
	CU_ASSERT_STRING_EQUAL(s, "hi");
	free(s);
	t = call("edit", "{\"file_path\": \"e.txt\", \"old_string\": \"\", \"new_string\": \"x\"}",
	         &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "use write"));
	free(t);
}

static void test_patch_forms(void)
{
	put("p.c", "int a;\nint b;   \nint c;\n\nint z;\n");
	put("m.txt", "move me\n");
	bool e;
	/* a hunk matched ignoring trailing blanks, one at end of file, a move */
	char *t =
	    call("apply_patch",
	         "{\"input\": \"*** Begin Patch\\n*** Update File: p.c\\n@@ int a;\\n-int "
	         "b;\\n+int B;\\n"
	         " int c;\\n@@\\n int z;\\n+int end;\\n*** End of File\\n"
	         "*** Update File: m.txt\\n*** Move to: moved/m2.txt\\n@@\\n-move me\\n+moved\\n"
	         "*** End Patch\"}",
	         &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "Success. Updated the following files:\nM "));
	free(t);
	char *s = slurp("p.c");
	CU_ASSERT_STRING_EQUAL(s, "int a;\nint B;\nint c;\n\nint z;\nint end;\n");
	free(s);
	s = slurp("moved/m2.txt");
	CU_ASSERT_STRING_EQUAL(s, "moved\n");
	free(s);
	CU_ASSERT_PTR_NULL(slurp("m.txt"));
	/* the second section fails: the first is not applied either */
	t = call("apply_patch",
	         "{\"input\": \"*** Begin Patch\\n*** Delete File: p.c\\n*** Update File: "
	         "moved/m2.txt\\n"
	         "@@\\n-not there\\n+x\\n*** End Patch\"}",
	         &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "hunk 1 does not match"));
	free(t);
	s = slurp("p.c");
	CU_ASSERT_PTR_NOT_NULL(s);
	free(s);
	t = call("apply_patch",
	         "{\"input\": \"*** Begin Patch\\n*** Frobnicate File: x\\n*** End Patch\"}", &e);
	CU_ASSERT(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "line 2 of the patch"));
	free(t);
}

typedef struct firer {
	asp_tools_cancel *k;
	const char *flag;
} firer;

/* Fires once the command has shown it runs (it creates a file), bounded. */
static void *fire_when_started(void *arg)
{
	firer *f = arg;
	for (int i = 0; i < 600 && access(f->flag, F_OK) != 0; i++) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	asp_tools_cancel_fire(f->k);
	return NULL;
}

static void test_cancel(void)
{
	char flag[320], args[600];
	snprintf(flag, sizeof flag, "%s/started.flag", root);
	snprintf(args, sizeof args, "{\"command\": \"touch '%s'; sleep 300\"}", flag);
	firer f = {asp_tools_cancel_new(), flag};
	pthread_t th;
	pthread_create(&th, NULL, fire_when_started, &f);
	char *text;
	bool e;
	time_t t0 = time(NULL);
	CU_ASSERT_EQUAL(asp_tools_call(tools, "bash", args, &text, &e, f.k), ASP_OK);
	pthread_join(th, NULL);
	CU_ASSERT(e);
	CU_ASSERT(time(NULL) - t0 < 120);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "cancelled"));
	free(text);
	/* fired before the call: fails at once */
	CU_ASSERT_EQUAL(asp_tools_call(tools, "bash", "{\"command\": \"true\"}", &text, &e, f.k),
	                ASP_OK);
	CU_ASSERT(e);
	free(text);
	asp_tools_cancel_free(f.k);
}

static void *reader(void *arg)
{
	(void)arg;
	for (int i = 0; i < 20; i++) {
		char *text;
		bool e;
		if (asp_tools_call(tools, "grep",
		                   "{\"pattern\": \"two\", \"output_mode\": \"count\"}", &text, &e,
		                   NULL) != ASP_OK ||
		    e || !strstr(text, "e.txt:1")) {
			free(text);
			return (void *)1;
		}
		free(text);
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, reader, NULL);
	for (int i = 0; i < 4; i++) {
		void *rv;
		pthread_join(th[i], &rv);
		CU_ASSERT_PTR_NULL(rv);
	}
}

typedef struct starter {
	char *text;
	bool is_error;
	int done;
} starter;

static void *start_second(void *arg)
{
	starter *st = arg;
	/* several starts: each is a chance for the race */
	for (int i = 0; i < 8; i++) {
		free(st->text);
		st->text = NULL;
		asp_tools_call(tools, "bash",
		               "{\"command\": \"echo second\", \"run_in_background\": true}",
		               &st->text, &st->is_error, NULL);
	}
	__atomic_store_n(&st->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Starting a background shell while another one floods output: a start that held the
 * tools lock while waiting for the spawn's answer would never get it, the reader thread
 * being blocked on that lock in the flooding shell's callback.
 */
static void test_background_while_flooding(void)
{
	bool e;
	char *t = call(
	    "bash", "{\"command\": \"while :; do echo flood; done\", \"run_in_background\": true}",
	    &e);
	CU_ASSERT_FALSE_FATAL(e);
	char id[64];
	CU_ASSERT_EQUAL_FATAL(sscanf(strstr(t, "bash_"), "%63[a-z_0-9]", id), 1);
	free(t);
	char args[128];
	snprintf(args, sizeof args, "{\"bash_id\": \"%s\"}", id);
	t = call("bash_output", args, &e);
	free(t);
	starter st = {0};
	pthread_t th;
	pthread_create(&th, NULL, start_second, &st);
	for (int i = 0; i < 600 && !__atomic_load_n(&st.done, __ATOMIC_ACQUIRE); i++) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	int done = __atomic_load_n(&st.done, __ATOMIC_ACQUIRE);
	CU_ASSERT(done);
	if (done) {
		t = call("kill_bash", args, &e);
		CU_ASSERT_FALSE(e);
		free(t);
	} else {
		/* deadlocked: leave the thread and the handle; the test has failed */
		deadlocked = true;
		pthread_detach(th);
		return;
	}
	pthread_join(th, NULL);
	CU_ASSERT_FALSE(st.is_error);
	CU_ASSERT_TRUE(st.text && strstr(st.text, "bash_"));
	free(st.text);
}

/* OpenCode's spellings reach the same tools: each call is checked against the file system. */
static char *vcall(const char *name, const char *args, bool *is_error)
{
	char *text = NULL;
	bool err = true;
	CU_ASSERT_EQUAL(asp_tools_call_vocab(tools, "opencode", name, args, &text, &err, NULL),
	                ASP_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(text);
	*is_error = err;
	return text;
}

static void test_vocab_opencode(void)
{
	size_t n;
	const asp_tool_desc *d = asp_tools_vocab_list("opencode", &n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	CU_ASSERT_EQUAL(n, 7);
	for (size_t i = 0; i < n; i++) {
		json_t *schema = json_loads(d[i].input_schema, 0, NULL);
		CU_ASSERT_PTR_NOT_NULL(schema);
		json_decref(schema);
	}
	CU_ASSERT_PTR_NULL(asp_tools_vocab_list("nope", &n));
	CU_ASSERT_PTR_EQUAL(asp_tools_vocab_list(NULL, &n), asp_tools_list(&n));
	bool e;
	char *t =
	    vcall("write", "{\"filePath\": \"oc/a.txt\", \"content\": \"one two one\\n\"}", &e);
	CU_ASSERT_FALSE(e);
	free(t);
	/* null is a default left out, as OpenCode sends for an optional argument */
	t = vcall("edit",
	          "{\"filePath\": \"oc/a.txt\", \"oldString\": \"one\", \"newString\": \"1\", "
	          "\"replaceAll\": true}",
	          &e);
	CU_ASSERT_FALSE(e);
	free(t);
	char *s = slurp("oc/a.txt");
	CU_ASSERT_STRING_EQUAL(s, "1 two 1\n");
	free(s);
	t = vcall("read", "{\"filePath\": \"oc/a.txt\", \"offset\": null, \"limit\": null}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "     1\t1 two 1"));
	free(t);
	/* grep shows lines by default in OpenCode's vocabulary; include is the glob filter */
	t = vcall("grep", "{\"pattern\": \"two\", \"include\": \"*.txt\", \"path\": \"oc\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "a.txt:1:1 two 1"));
	free(t);
	t = vcall("bash", "{\"command\": \"pwd\", \"workdir\": \"oc\"}", &e);
	CU_ASSERT_FALSE(e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "/oc"));
	free(t);
	t = vcall(
	    "apply_patch",
	    "{\"patchText\": \"*** Begin Patch\\n*** Add File: oc/b.txt\\n+b\\n*** End Patch\"}",
	    &e);
	CU_ASSERT_FALSE(e);
	free(t);
	s = slurp("oc/b.txt");
	CU_ASSERT_STRING_EQUAL(s, "b\n");
	free(s);
	t = vcall("glob", "{\"pattern\": \"oc/*.txt\"}", &e);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "/oc/b.txt"));
	free(t);
	/* an argument the vocabulary does not rename reaches the tool, which refuses a wrong type
	 */
	t = vcall("read", "{\"filePath\": 3}", &e);
	CU_ASSERT(e);
	free(t);
	char *text = NULL;
	CU_ASSERT_EQUAL(asp_tools_call_vocab(tools, "opencode", "ls", "{}", &text, &e, NULL),
	                ASP_E_NOT_FOUND);
	CU_ASSERT(e);
	free(text);
	CU_ASSERT_EQUAL(asp_tools_call_vocab(tools, "nope", "read", "{}", &text, &e, NULL),
	                ASP_E_INVALID_ARGUMENT);
	free(text);
}

static void test_glob_match(void)
{
	CU_ASSERT(tools_glob_match("*.c", "a.c"));
	CU_ASSERT_FALSE(tools_glob_match("*.c", "src/a.c"));
	CU_ASSERT(tools_glob_match("**/*.c", "a.c"));
	CU_ASSERT(tools_glob_match("**/*.c", "x/y/a.c"));
	CU_ASSERT(tools_glob_match("src/**", "src/x/y"));
	CU_ASSERT(tools_glob_match("src/**/t_*.{c,h}", "src/t_a.h"));
	CU_ASSERT(tools_glob_match("src/**/t_*.{c,h}", "src/q/t_a.c"));
	CU_ASSERT_FALSE(tools_glob_match("src/**/t_*.{c,h}", "src/q/t_a.o"));
	CU_ASSERT(tools_glob_match("[a-c]?.txt", "b1.txt"));
	CU_ASSERT_FALSE(tools_glob_match("[!a-c]?.txt", "b1.txt"));
	CU_ASSERT(tools_glob_match("{a,b{c,d}}.x", "bd.x"));
	CU_ASSERT_FALSE(tools_glob_match("?", "/"));
}

int main(int argc, char **argv)
{
	if (!getenv("ASP_AGENT")) {
		fprintf(stderr, "ASP_AGENT is not set\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("tools", suite_init, suite_clean);
	CU_add_test(s, "list, lookup, bad arguments", test_list);
	CU_add_test(s, "bash output cap: head and tail around a note", test_bash_cap);
	CU_add_test(s, "invalid UTF-8 becomes U+FFFD", test_utf8);
	CU_add_test(s, "read: long lines cut, CRLF, relative cwd", test_read_lines);
	CU_add_test(s, "read: a file over 64 MiB in pieces, offset and limit", test_read_large);
	CU_add_test(s, "edit: replace_all, create, refuse", test_edit);
	CU_add_test(s, "apply_patch: fuzzy context, end of file, move, all or nothing",
	            test_patch_forms);
	CU_add_test(s, "cancel a running bash from another thread", test_cancel);
	CU_add_test(s, "concurrent calls", test_threads);
	CU_add_test(s, "a background start while another shell floods output",
	            test_background_while_flooding);
	CU_add_test(s, "glob matcher", test_glob_match);
	CU_add_test(s, "OpenCode's vocabulary over the same tools", test_vocab_opencode);
	/* every test, or the suites and tests named as arguments */
	unsigned fails = (unsigned)cu_run(argc, argv);
	return fails ? 1 : 0;
}
