/*
 * `asp conformance` (the CLI, $ASP_CLI) against real responders, checking its verdicts:
 * it exits 0 wherever every case that applies passes, and each n/a row names what hello
 * lacks and what to change for the transport in use. The whole table where rows are n/a
 * (native SSH against the real sshd fixture, tests/ssh/sshd_fixture.c; HTTP POST only
 * against `asp-agent --listen 127.0.0.1:0`, $ASP_AGENT) and where every row applies
 * (HTTP's default, POST with a WebSocket); agent mode's one n/a row with --only. The
 * table itself runs over each transport in that transport's own test.
 *
 *   test_cli_conformance            run everything
 *   test_cli_conformance NAME...    run only the named tests
 */
#include "listener.h"
#include "sshd_fixture.h"
#include "testproc.h"
#include "cu_run.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole table over native SSH takes about a minute alone; the machine is shared. */
#define RUN_MS (10 * 60 * 1000)

static sshd_fixture fx;
static bool have_sshd;
static listener http_l;
static bool have_listener;
static char dir[256];

/* Writes `json` to DIR/NAME.json; that path (in `path`), or NULL. */
static const char *write_config(const char *name, const char *json, char *path, size_t cap)
{
	snprintf(path, cap, "%s/%s.json", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(json, f);
	fclose(f);
	return path;
}

typedef struct run {
	int status; /* the wait status, or -1 */
	char *out, *err;
} run;

/* $ASP_CLI --config CONFIG conformance [--only ONLY]: its exit status and output. */
static void run_conformance(const char *config, const char *only, run *r)
{
	memset(r, 0, sizeof *r);
	r->status = -1;
	const char *cli = getenv("ASP_CLI");
	char *argv[] = {(char *)cli, "--config", (char *)config, "conformance", NULL, NULL, NULL};
	if (only) {
		argv[4] = "--only";
		argv[5] = (char *)only;
	}
	tproc p;
	if (!cli || tproc_spawn(&p, argv) < 0)
		return;
	tproc_close_in(&p);
	int64_t until = t_now_ms() + RUN_MS;
	bool eof;
	size_t n;
	/* stderr holds a line or two at most: it cannot fill its pipe while stdout is read */
	r->out = t_read_until_eof(p.out, RUN_MS, &n, &eof);
	int left = (int)(until - t_now_ms());
	r->err = t_read_until_eof(p.err, left > 1000 ? left : 1000, &n, &eof);
	left = (int)(until - t_now_ms());
	r->status = tproc_wait(&p, left > 1000 ? left : 1000, NULL);
	tproc_close(&p);
}

static void run_free(run *r)
{
	free(r->out);
	free(r->err);
}

/*
 * The verdict of case `name` in the table ("PASS", "FAIL", "n/a", ...) into `tag`, and
 * the reason line under it (empty for a PASS) into `why`. false when the case is not
 * in the output.
 */
static bool verdict(const char *out, const char *name, char *tag, size_t tcap, char *why,
                    size_t wcap)
{
	size_t n = strlen(name);
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *sp = strchr(l, ' ');
		if (!sp || sp == l || sp - l > 4)
			continue;
		const char *nm = sp;
		while (*nm == ' ')
			nm++;
		if (strncmp(nm, name, n) != 0 || nm[n] != ' ')
			continue;
		snprintf(tag, tcap, "%.*s", (int)(sp - l), l);
		why[0] = '\0';
		const char *next = strchr(l, '\n');
		if (next && strncmp(next + 1, "      ", 6) == 0) {
			const char *w = next + 7;
			while (*w == ' ')
				w++;
			snprintf(why, wcap, "%.*s", (int)strcspn(w, "\n"), w);
		}
		return true;
	}
	return false;
}

/* How many rows carry `tag`. */
static int count_tag(const char *out, const char *tag)
{
	int k = 0;
	size_t n = strlen(tag);
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, tag, n) == 0 && l[n] == ' ')
			k++;
	return k;
}

typedef struct expect_na {
	const char *name;
	const char *reason[4]; /* fragments the reason must hold, NULL-terminated */
} expect_na;

static bool listed(const expect_na *na, size_t nna, const char *name, size_t n)
{
	for (size_t i = 0; i < nna; i++)
		if (strlen(na[i].name) == n && strncmp(na[i].name, name, n) == 0)
			return true;
	return false;
}

/*
 * The n/a rows of cases named `prefix`... that `na` does not list, each checked to say
 * that hello does not announce what it needs: the cases a transport may have or not yet.
 */
static int optional_na(const char *label, const char *out, const char *prefix, const expect_na *na,
                       size_t nna, bool *bad)
{
	int k = 0;
	size_t pn = strlen(prefix);
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, "n/a ", 4) != 0)
			continue;
		const char *nm = l + 4;
		while (*nm == ' ')
			nm++;
		size_t n = strcspn(nm, " \n");
		if (strncmp(nm, prefix, pn) != 0 || listed(na, nna, nm, n))
			continue;
		k++;
		char name[128], tag[8], why[2048];
		snprintf(name, sizeof name, "%.*s", (int)n, nm);
		bool says = verdict(out, name, tag, sizeof tag, why, sizeof why) &&
		            strstr(why, "does not announce") != NULL;
		CU_ASSERT_TRUE(says);
		if (!says) {
			fprintf(stderr, "\n    %s: %s is n/a for no announced reason: '%s'\n",
			        label, name, why);
			*bad = true;
		}
	}
	return k;
}

/*
 * Runs the CLI on `config` (the cases whose names hold `only`, or all): exit 0, no FAIL,
 * exactly the cases in `na` are n/a and each of their reasons holds its fragments;
 * besides them, cases named `maybe`... (NULL: none) may be n/a for what hello does not
 * announce.
 */
static void check_run(const char *label, const char *config, const char *only, const expect_na *na,
                      size_t nna, const char *maybe)
{
	run r;
	run_conformance(config, only, &r);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r.out);
	bool exited0 = r.status == 0;
	CU_ASSERT_TRUE(exited0);
	CU_ASSERT_EQUAL(count_tag(r.out, "FAIL"), 0);
	bool bad = !exited0;
	int extra = maybe ? optional_na(label, r.out, maybe, na, nna, &bad) : 0;
	CU_ASSERT_EQUAL(count_tag(r.out, "n/a"), (int)nna + extra);
	bad |= count_tag(r.out, "n/a") != (int)nna + extra;
	for (size_t i = 0; i < nna; i++) {
		char tag[8], why[2048];
		bool found = verdict(r.out, na[i].name, tag, sizeof tag, why, sizeof why);
		CU_ASSERT_TRUE(found);
		if (!found) {
			bad = true;
			continue;
		}
		bool is_na = strcmp(tag, "n/a") == 0;
		CU_ASSERT_TRUE(is_na);
		bad |= !is_na;
		for (int k = 0; na[i].reason[k]; k++) {
			bool has = strstr(why, na[i].reason[k]) != NULL;
			CU_ASSERT_TRUE(has);
			if (!has) {
				fprintf(stderr, "\n    %s: %s: the reason '%s' lacks '%s'\n", label,
				        na[i].name, why, na[i].reason[k]);
				bad = true;
			}
		}
	}
	if (bad)
		fprintf(stderr, "\n%s: asp conformance (status %d):\n%s\nstderr: %s\n", label,
		        r.status, r.out, r.err ? r.err : "");
	else {
		/* the summary line, for the log */
		const char *sum = strstr(r.out, " passed, ");
		while (sum && sum > r.out && sum[-1] != '\n')
			sum--;
		fprintf(stderr, "\n    %s: %.*s\n", label, sum ? (int)strcspn(sum, "\n") : 0,
		        sum ? sum : "");
	}
	run_free(&r);
}

/* What the reasons say: the missing op or feature, and what to change in the config. */
#define NEEDS_ATTACH_NATIVE                                                                        \
	{                                                                                          \
		"op \"proc_attach\"", "not announce", "native SSH mode has no"                     \
	}
#define NEEDS_FOLLOW_POST                                                                          \
	{                                                                                          \
		"the feature \"follow\"", "not announce", "remove that key"                        \
	}
#define NEEDS_ATTACH_POST                                                                          \
	{                                                                                          \
		"op \"proc_attach\"", "not announce", "remove that key"                            \
	}

static void test_ssh_native(void)
{
	CU_ASSERT_TRUE_FATAL(have_sshd);
	char json[2048], path[512];
	sshd_config_json(&fx, NULL, NULL, json, sizeof json);
	CU_ASSERT_PTR_NOT_NULL_FATAL(write_config("native", json, path, sizeof path));
	static const expect_na na[] = {
	    {"proc_attach_retained", NEEDS_ATTACH_NATIVE},
	    {"proc_attach_replay", NEEDS_ATTACH_NATIVE},
	    {"proc_attach_truncated", NEEDS_ATTACH_NATIVE},
	    {"proc_attach_after_close", NEEDS_ATTACH_NATIVE},
	    {"glob_order_and_patterns", {"op \"glob\"", "not announce", "set ssh.agent"}},
	    {"grep_modes", {"op \"grep\"", "not announce", "set ssh.agent"}},
	    {"grep_pcre2", {"op \"grep\"", "not announce", "set ssh.agent"}},
	    {"tty_reattach", NEEDS_ATTACH_NATIVE},
	    {"watch_changes", {"op \"watch\"", "not announce"}},
	    {"watch_bad_input", {"op \"watch\"", "not announce"}},
	};
	/* terminals: n/a where the server or this client has none, naming what is missing */
	check_run("ssh native", path, NULL, na, sizeof na / sizeof na[0], "tty_");
}

static void test_ssh_agent(void)
{
	CU_ASSERT_TRUE_FATAL(have_sshd);
	const char *agent = getenv("ASP_AGENT");
	CU_ASSERT_PTR_NOT_NULL_FATAL(agent);
	char json[2048], path[512];
	sshd_config_json(&fx, agent, NULL, json, sizeof json);
	CU_ASSERT_PTR_NOT_NULL_FATAL(write_config("agent", json, path, sizeof path));
	static const expect_na na[] = {
	    {"proc_attach_after_close",
	     {"needs the feature \"reattach\"", "does not announce", "asp-agent --relay"}},
	};
	/* the rest of the table applies, as test_ssh runs it in agent mode */
	check_run("ssh agent mode", path, "proc_attach", na, 1, NULL);
}

static void test_http_post(void)
{
	CU_ASSERT_TRUE_FATAL(have_listener);
	char json[1024], path[512];
	snprintf(json, sizeof json,
	         "{\"version\": 1, \"transport\": \"http\", \"http\": {\"url\": \"%s\", "
	         "\"websocket\": false}}",
	         http_l.url);
	CU_ASSERT_PTR_NOT_NULL_FATAL(write_config("post", json, path, sizeof path));
	static const expect_na na[] = {
	    {"spawn_output_live", NEEDS_FOLLOW_POST},
	    {"spawn_output_order", NEEDS_FOLLOW_POST},
	    {"spawn_stdin_binary", NEEDS_FOLLOW_POST},
	    {"spawn_timeout_kills_group", NEEDS_FOLLOW_POST},
	    {"spawn_slow_reader_bounded", NEEDS_FOLLOW_POST},
	    {"proc_attach_retained", NEEDS_ATTACH_POST},
	    {"proc_attach_replay", NEEDS_ATTACH_POST},
	    {"proc_attach_truncated", NEEDS_ATTACH_POST},
	    {"proc_attach_after_close", NEEDS_ATTACH_POST},
	    {"tty_isatty_one_stream", NEEDS_FOLLOW_POST},
	    {"tty_size_and_term", NEEDS_FOLLOW_POST},
	    {"tty_resize_winch", NEEDS_FOLLOW_POST},
	    {"tty_ctrl_c", NEEDS_FOLLOW_POST},
	    {"tty_repl", NEEDS_FOLLOW_POST},
	    {"tty_large_output", NEEDS_FOLLOW_POST},
	    {"tty_eof", NEEDS_FOLLOW_POST},
	    {"tty_reattach", NEEDS_ATTACH_POST},
	    {"tree_read_roundtrip", NEEDS_FOLLOW_POST},
	    {"tree_read_errors",
	     {"needs the WebSocket", "\"websocket\": false", "remove that key"}},
	    {"tree_read_empty_path",
	     {"needs the WebSocket", "\"websocket\": false", "remove that key"}},
	    {"connect_echo_and_half_close", NEEDS_FOLLOW_POST},
	    {"connect_large_round_trip", NEEDS_FOLLOW_POST},
	    {"connect_kill_and_errors", NEEDS_FOLLOW_POST},
	    {"watch_changes", NEEDS_ATTACH_POST},
	    {"watch_bad_input", {"the feature \"watch\"", "not announce"}},
	};
	check_run("http POST", path, NULL, na, sizeof na / sizeof na[0], NULL);
}

/* The default, POST with a WebSocket for streams: everything applies. */
static void test_http_default(void)
{
	CU_ASSERT_TRUE_FATAL(have_listener);
	char json[1024], path[512];
	snprintf(json, sizeof json,
	         "{\"version\": 1, \"transport\": \"http\", \"http\": {\"url\": \"%s\"}}",
	         http_l.url);
	CU_ASSERT_PTR_NOT_NULL_FATAL(write_config("both", json, path, sizeof path));
	check_run("http POST and WebSocket", path, NULL, NULL, 0, NULL);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (!getenv("ASP_CLI") || !getenv("ASP_AGENT")) {
		fprintf(stderr, "ASP_CLI and ASP_AGENT must be set (meson test does)\n");
		return 1;
	}
	snprintf(dir, sizeof dir, "%s", test_tmpdir());
	have_sshd = sshd_start(&fx) == 0;
	if (!have_sshd)
		fprintf(stderr, "test_cli_conformance: %s\n", fx.why); /* the ssh tests fail */
	have_listener = listener_start(&http_l, "127.0.0.1:0", NULL, NULL) == 0;
	CU_pSuite s;
	if (CU_initialize_registry() != CUE_SUCCESS ||
	    !(s = CU_add_suite("cli_conformance", NULL, NULL)) ||
	    !CU_add_test(s, "ssh_native", test_ssh_native) ||
	    !CU_add_test(s, "ssh_agent", test_ssh_agent) ||
	    !CU_add_test(s, "http_post", test_http_post) ||
	    !CU_add_test(s, "http_default", test_http_default)) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		return 2;
	}
	int rc = cu_run(argc, argv);
	if (have_listener && listener_stop(&http_l, SIGTERM, 10000) != 0) {
		fprintf(stderr, "asp-agent --listen did not exit 0 on SIGTERM\n");
		rc = 1;
	}
	sshd_stop(&fx);
	return rc;
}
