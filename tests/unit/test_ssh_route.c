/*
 * The route to an SSH sandbox (asp/ssh_route.h): .asp.json over an SSH config file in a
 * temporary $HOME. Host patterns, Match, Include, first value wins, ProxyJump lists
 * (and the first hop's own), ProxyCommand lines, % escapes, explicit keys winning, and
 * where each value came from.
 */
#include "asp/config.h"
#include "asp/ssh_route.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char home[512];

static void put(const char *rel, const char *text)
{
	char p[1024];
	snprintf(p, sizeof p, "%s/%s", home, rel);
	FILE *f = fopen(p, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
}

static const char *at(const char *rel)
{
	static char bufs[4][1024];
	static int next;
	char *b = bufs[next++ % 4];
	snprintf(b, sizeof bufs[0], "%s/%s", home, rel);
	return b;
}

/* The route of an .asp.json text (single quotes for double), or NULL with `err` filled. */
static asp_ssh_route *route_of(const char *doc, asp_config **cfg, asp_error *err)
{
	char text[4096];
	snprintf(text, sizeof text, "%s", doc);
	for (char *p = text; *p; p++)
		if (*p == '\'')
			*p = '"';
	char path[1024];
	snprintf(path, sizeof path, "%s/.asp.json", home);
	*cfg = NULL;
	if (asp_config_parse(text, strlen(text), path, cfg, err) != ASP_OK)
		return NULL;
	asp_ssh_route *r = NULL;
	if (asp_ssh_route_resolve(asp_config_get(*cfg), &r, err) != ASP_OK)
		return NULL;
	return r;
}

#define SSH(keys) "{'version': 1, 'transport': 'ssh', 'ssh': {" keys "}}"

static int setup_home(void)
{
	snprintf(home, sizeof home, "/tmp/asp-route-XXXXXX");
	if (!mkdtemp(home))
		return -1;
	setenv("HOME", home, 1);
	char d[1024];
	snprintf(d, sizeof d, "%s/.ssh", home);
	mkdir(d, 0700);
	snprintf(d, sizeof d, "%s/conf.d", home);
	return mkdir(d, 0700);
}

static void test_plain(void)
{
	asp_config *cfg;
	asp_error err;
	asp_ssh_route *r = route_of(SSH("'host': 'box'"), &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	const asp_ssh_route_view *v = asp_ssh_route_get(r);
	CU_ASSERT_EQUAL_FATAL(v->hop_count, 1);
	const asp_ssh_hop *t = &v->hops[0];
	CU_ASSERT_STRING_EQUAL(t->ssh.host, "box");
	CU_ASSERT_EQUAL(t->ssh.port, 22);
	CU_ASSERT_STRING_EQUAL(t->port_from, "the default");
	CU_ASSERT_PTR_NULL(t->ssh.user);
	CU_ASSERT_STRING_EQUAL(t->ssh.known_hosts, at(".ssh/known_hosts"));
	char want[1100];
	snprintf(want, sizeof want, "ssh.host in %s", at(".asp.json"));
	CU_ASSERT_STRING_EQUAL(t->host_from, want);
	CU_ASSERT_PTR_NULL(v->proxy_command);
	CU_ASSERT_PTR_NULL(v->jump_from);
	asp_ssh_route_free(r);
	asp_config_free(cfg);
}

static void test_config_host(void)
{
	put(".ssh/config", "# a comment\n"
	                   "Host *.corp !bad.corp\n"
	                   "  User corpuser\n"
	                   "Host box\n"
	                   "  HostName 10.1.2.%h\n"
	                   "  Port=2200\n"
	                   "  IdentityFile id_box\n"
	                   "  IdentityFile ~/other\n"
	                   "  UserKnownHostsFile \"%d/kh files/one\" two\n"
	                   "Host *\n"
	                   "  User fallback\n"
	                   "  Port 9\n");
	asp_config *cfg;
	asp_error err;
	asp_ssh_route *r = route_of(SSH("'config_host': 'box', 'port': 2222"), &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	const asp_ssh_hop *t = &asp_ssh_route_get(r)->hops[0];
	CU_ASSERT_STRING_EQUAL(t->ssh.host, "10.1.2.box");
	CU_ASSERT_EQUAL(t->ssh.port, 2222); /* .asp.json wins */
	CU_ASSERT_STRING_EQUAL(t->ssh.user, "fallback");
	CU_ASSERT_STRING_EQUAL(t->ssh.identity_file, at(".ssh/id_box"));
	CU_ASSERT_STRING_EQUAL(t->ssh.known_hosts, at("kh files/one"));
	char want[1100];
	snprintf(want, sizeof want, "HostName at %s:5", at(".ssh/config"));
	CU_ASSERT_STRING_EQUAL(t->host_from, want);
	snprintf(want, sizeof want, "User at %s:11", at(".ssh/config"));
	CU_ASSERT_STRING_EQUAL(t->user_from, want);
	snprintf(want, sizeof want, "ssh.port in %s", at(".asp.json"));
	CU_ASSERT_STRING_EQUAL(t->port_from, want);
	CU_ASSERT_STRING_EQUAL(t->name, "box");
	asp_ssh_route_free(r);
	asp_config_free(cfg);

	/* Negation, and explicit keys beside the file. */
	r = route_of(SSH("'config_host': 'a.corp', 'user': 'me', 'identity_file': '/k'"), &cfg,
	             &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	t = &asp_ssh_route_get(r)->hops[0];
	CU_ASSERT_STRING_EQUAL(t->ssh.host, "a.corp");
	CU_ASSERT_STRING_EQUAL(t->ssh.user, "me");
	CU_ASSERT_STRING_EQUAL(t->ssh.identity_file, "/k");
	CU_ASSERT_EQUAL(t->ssh.port, 9);
	asp_ssh_route_free(r);
	asp_config_free(cfg);
	CU_ASSERT_PTR_NULL(route_of(SSH("'config_host': 'bad.corp'"), &cfg, &err));
	CU_ASSERT_EQUAL(err.code, ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "no Host or Match line"));
	asp_config_free(cfg);
	CU_ASSERT_PTR_NULL(
	    route_of(SSH("'config_host': 'box', 'config_file': 'nope'"), &cfg, &err));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "does not exist"));
	asp_config_free(cfg);
}

static void test_include_and_match(void)
{
	put("conf.d/a.conf", "Host inc\n  HostName included.example\n  Port 2022\n");
	put("alt_config", "Include conf.d/*.conf\n"
	                  "Match host m1,m2\n"
	                  "  HostName matched.example\n"
	                  "Match exec \"true\"\n"
	                  "  HostName never\n"
	                  "Match !host m1 originalhost m*\n"
	                  "  User notm1\n");
	asp_config *cfg;
	asp_error err;
	asp_ssh_route *r =
	    route_of(SSH("'config_host': 'inc', 'config_file': 'alt_config'"), &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	const asp_ssh_hop *t = &asp_ssh_route_get(r)->hops[0];
	CU_ASSERT_STRING_EQUAL(t->ssh.host, "included.example");
	CU_ASSERT_EQUAL(t->ssh.port, 2022);
	char want[1100];
	snprintf(want, sizeof want, "Port at %s:3", at("conf.d/a.conf"));
	CU_ASSERT_STRING_EQUAL(t->port_from, want);
	asp_ssh_route_free(r);
	asp_config_free(cfg);
	r = route_of(SSH("'config_host': 'm2', 'config_file': 'alt_config'"), &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	t = &asp_ssh_route_get(r)->hops[0];
	CU_ASSERT_STRING_EQUAL(t->ssh.host, "matched.example");
	CU_ASSERT_STRING_EQUAL(t->ssh.user, "notm1");
	asp_ssh_route_free(r);
	asp_config_free(cfg);
}

static void test_proxy_jump(void)
{
	put(".ssh/config", "Host target\n"
	                   "  HostName 10.0.0.5\n"
	                   "  User app\n"
	                   "  ProxyJump bastion,ops@[fd00::7]:2200\n"
	                   "  ProxyCommand never-used %h\n"
	                   "Host bastion\n"
	                   "  HostName bastion.example\n"
	                   "  User jumper\n"
	                   "  IdentityFile ~/.ssh/bastion_key\n"
	                   "  ProxyCommand websocat -b wss://gw.example/%h:%p\n");
	asp_config *cfg;
	asp_error err;
	asp_ssh_route *r =
	    route_of(SSH("'config_host': 'target', 'identity_file': '/keys/target'"), &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	const asp_ssh_route_view *v = asp_ssh_route_get(r);
	CU_ASSERT_EQUAL_FATAL(v->hop_count, 3);
	CU_ASSERT_STRING_EQUAL(v->hops[0].ssh.host, "bastion.example");
	CU_ASSERT_STRING_EQUAL(v->hops[0].ssh.user, "jumper");
	CU_ASSERT_STRING_EQUAL(v->hops[0].ssh.identity_file, at(".ssh/bastion_key"));
	CU_ASSERT_STRING_EQUAL(v->hops[1].ssh.host, "fd00::7");
	CU_ASSERT_EQUAL(v->hops[1].ssh.port, 2200);
	CU_ASSERT_STRING_EQUAL(v->hops[1].ssh.user, "ops");
	CU_ASSERT_STRING_EQUAL(v->hops[1].ssh.identity_file, "/keys/target"); /* inherited */
	char want[1100];
	snprintf(want, sizeof want, "ProxyJump at %s:4", at(".ssh/config"));
	CU_ASSERT_STRING_EQUAL(v->hops[1].user_from, want);
	CU_ASSERT_STRING_EQUAL(v->jump_from, want);
	CU_ASSERT_STRING_EQUAL(v->hops[2].ssh.host, "10.0.0.5");
	CU_ASSERT_STRING_EQUAL(v->hops[2].ssh.user, "app");
	/* the first hop's own ProxyCommand carries the connection to it */
	CU_ASSERT_EQUAL_FATAL(v->proxy_command_argc, 3);
	CU_ASSERT_STRING_EQUAL(v->proxy_command[0], "/bin/sh");
	CU_ASSERT_STRING_EQUAL(v->proxy_command[2],
	                       "exec websocat -b wss://gw.example/bastion.example:22");
	CU_ASSERT_PTR_NULL(v->proxy_command[3]);
	asp_ssh_route_free(r);
	asp_config_free(cfg);

	/* .asp.json's jump replaces the file's route; a string hop is looked up too. */
	r = route_of(SSH("'config_host': 'target', 'jump': ['me@bastion:2020', {'host': 'h2'}]"),
	             &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	v = asp_ssh_route_get(r);
	CU_ASSERT_EQUAL_FATAL(v->hop_count, 3);
	CU_ASSERT_STRING_EQUAL(v->hops[0].ssh.host, "bastion.example");
	CU_ASSERT_STRING_EQUAL(v->hops[0].ssh.user, "me");
	CU_ASSERT_EQUAL(v->hops[0].ssh.port, 2020);
	CU_ASSERT_STRING_EQUAL(v->hops[1].ssh.host, "h2");
	CU_ASSERT_EQUAL(v->hops[1].ssh.port, 22);
	CU_ASSERT_PTR_NOT_NULL(v->proxy_command); /* bastion's own ProxyCommand */
	asp_ssh_route_free(r);
	asp_config_free(cfg);

	/* .asp.json's proxy_command reaches the first hop, escapes expanded for it. */
	r = route_of(SSH("'host': 't', 'user': 'u', 'jump': [{'host': 'gw', 'user': 'g', "
	                 "'port': 2201}], 'proxy_command': ['nc', '%h', '%p', '%r@%n %%']"),
	             &cfg, &err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	v = asp_ssh_route_get(r);
	CU_ASSERT_EQUAL_FATAL(v->proxy_command_argc, 4);
	CU_ASSERT_STRING_EQUAL(v->proxy_command[1], "gw");
	CU_ASSERT_STRING_EQUAL(v->proxy_command[2], "2201");
	CU_ASSERT_STRING_EQUAL(v->proxy_command[3], "g@gw %");
	snprintf(want, sizeof want, "ssh.proxy_command in %s", at(".asp.json"));
	CU_ASSERT_STRING_EQUAL(v->proxy_from, want);
	asp_ssh_route_free(r);
	asp_config_free(cfg);
}

static void test_bad_files(void)
{
	asp_config *cfg;
	asp_error err;
	put(".ssh/config", "Host loop1\n  ProxyJump loop2\nHost loop2\n  ProxyJump loop1\n"
	                   "Host badport\n  Port 70000\n"
	                   "Host badesc\n  ProxyCommand nc %h %C\n");
	CU_ASSERT_PTR_NULL(route_of(SSH("'config_host': 'loop1'"), &cfg, &err));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "more than 16 hosts"));
	asp_config_free(cfg);
	CU_ASSERT_PTR_NULL(route_of(SSH("'config_host': 'badport'"), &cfg, &err));
	char want[1100];
	snprintf(want, sizeof want, "%s:6: Port 70000 is not a number from 1 to 65535",
	         at(".ssh/config"));
	CU_ASSERT_STRING_EQUAL(err.message, want);
	asp_config_free(cfg);
	CU_ASSERT_PTR_NULL(route_of(SSH("'config_host': 'badesc'"), &cfg, &err));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "unknown escape %C"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, ":8"));
	asp_config_free(cfg);
	/* a line ssh(1) cannot read either fails every lookup, as there */
	put(".ssh/config", "Host other\n  User \"unclosed\nHost quote\n");
	CU_ASSERT_PTR_NULL(route_of(SSH("'config_host': 'quote'"), &cfg, &err));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, ":2: User: a quote is not closed"));
	asp_config_free(cfg);
}

int main(void)
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	CU_pSuite s = CU_add_suite("ssh route", NULL, NULL);
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"a host alone", test_plain},
	    {"config_host", test_config_host},
	    {"Include and Match", test_include_and_match},
	    {"ProxyJump, jump and proxy_command", test_proxy_jump},
	    {"bad files", test_bad_files},
	};
	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			return 2;
	}
	if (setup_home() != 0)
		return 2;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures();
	CU_cleanup_registry();
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
	if (system(cmd) != 0)
		return 2;
	return failed ? 1 : 0;
}
