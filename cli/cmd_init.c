/* asp init: writes a .asp.json for one of the three transports, checked by loading it. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	OPT_STDIO = CLI_OPT_FIRST_PRIVATE,
	OPT_SSH,
	OPT_HTTP,
	OPT_IDENTITY,
	OPT_TOKEN_ENV,
	OPT_TOKEN_FILE,
	OPT_CWD,
	OPT_ENV,
	OPT_TIMEOUT,
	OPT_FORCE,
	OPT_HOST_KEY,
	OPT_KNOWN_HOSTS,
	OPT_ACCEPT_NEW,
	OPT_WEBSOCKET,
	OPT_NO_WEBSOCKET,
	OPT_FROM_V0,
	OPT_PROXY_COMMAND,
	OPT_JUMP,
	OPT_FROM_SSH_CONFIG,
};

typedef struct init_opts {
	const char *transport;
	const char *ssh_spec, *identity;
	const char *proxy_command; /* --proxy-command: words, split as ssh_config's are */
	char **jumps;              /* --jump: each "[user@]host[:port]", commas split */
	size_t jump_count;
	const char *config_host;            /* --from-ssh-config NAME */
	const char *host_key, *known_hosts; /* --host-key-sha256, --known-hosts */
	bool accept_new;
	/* "true", "false" or NULL (absent: both; docs/design.md, ".asp.json") */
	const char *websocket;
	const char *url, *token_env, *token_file;
	const char *cwd;
	char **env; /* K=V strings */
	size_t env_count;
	bool has_timeout;
	uint64_t timeout_ms;
	bool force;
	char **command; /* --stdio: the argv after "--" */
	size_t command_count;
} init_opts;

/* [USER@]HOST[:PORT], HOST possibly a [bracketed] IPv6 address. */
typedef struct ssh_target {
	char user[256], host[256];
	unsigned port; /* 0: absent */
} ssh_target;

static int parse_ssh(cli *c, const char *spec, ssh_target *t)
{
	memset(t, 0, sizeof *t);
	const char *at = strrchr(spec, '@');
	const char *hp = spec;
	if (at) {
		if (at == spec || (size_t)(at - spec) >= sizeof t->user)
			return cli_usage(c, "--ssh needs [USER@]HOST[:PORT], got '%s'", spec), -1;
		memcpy(t->user, spec, (size_t)(at - spec));
		hp = at + 1;
	}
	const char *host = hp, *port = NULL;
	size_t hl;
	if (hp[0] == '[') {
		const char *close = strchr(hp, ']');
		if (!close || (close[1] != '\0' && close[1] != ':'))
			return cli_usage(c, "--ssh: unbalanced [ ] in '%s'", spec), -1;
		host = hp + 1;
		hl = (size_t)(close - host);
		port = close[1] == ':' ? close + 2 : NULL;
	} else {
		const char *colon = strchr(hp, ':');
		/* More than one ':' is a bare IPv6 address, not HOST:PORT. */
		if (colon && !strchr(colon + 1, ':')) {
			hl = (size_t)(colon - hp);
			port = colon + 1;
		} else {
			hl = strlen(hp);
		}
	}
	if (hl == 0 || hl >= sizeof t->host)
		return cli_usage(c, "--ssh needs [USER@]HOST[:PORT], got '%s'", spec), -1;
	memcpy(t->host, host, hl);
	if (port) {
		char *end;
		unsigned long v = strtoul(port, &end, 10);
		if (!*port || *end || v < 1 || v > 65535)
			return cli_usage(c, "--ssh: port must be 1-65535, got '%s'", port), -1;
		t->port = (unsigned)v;
	}
	return 0;
}

static void put_kv(FILE *f, const char *key, const char *value, bool *first)
{
	fprintf(f, "%s\n    ", *first ? "" : ",");
	*first = false;
	jw_put_string(f, key);
	fputs(": ", f);
	jw_put_string(f, value);
}

/*
 * --proxy-command's words: whitespace between them, "..." or '...' keeping spaces, as an
 * SSH config file's words are split. -1 (said) for an unclosed quote.
 */
static int put_words(cli *c, FILE *f, const char *line)
{
	size_t n = strlen(line);
	char *word = malloc(n + 1);
	if (!word)
		return cli_fail_errno(c, ENOMEM, "init"), -1;
	const char *p = line;
	int words = 0;
	fputs(",\n    \"proxy_command\": [", f);
	while (*p) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t o = 0;
		while (*p && *p != ' ' && *p != '\t') {
			if (*p == '"' || *p == '\'') {
				char q = *p++;
				while (*p && *p != q)
					word[o++] = *p++;
				if (*p != q) {
					free(word);
					return cli_usage(
					           c,
					           "--proxy-command: a quote is not closed in '%s'",
					           line),
					       -1;
				}
				p++;
			} else {
				word[o++] = *p++;
			}
		}
		word[o] = '\0';
		fputs(words++ ? ", " : "", f);
		jw_put_string(f, word);
	}
	fputs("]", f);
	free(word);
	if (!words)
		return cli_usage(c, "--proxy-command needs a command"), -1;
	return 0;
}

/* ssh.proxy_command and ssh.jump from --proxy-command and --jump. */
static int render_gateways(cli *c, const init_opts *o, FILE *f, bool *first)
{
	if (o->proxy_command && put_words(c, f, o->proxy_command) < 0)
		return -1;
	if (o->proxy_command)
		*first = false;
	if (!o->jump_count)
		return 0;
	fputs(",\n    \"jump\": [", f);
	size_t n = 0;
	for (size_t i = 0; i < o->jump_count; i++) {
		char *copy = strdup(o->jumps[i]), *save = NULL;
		if (!copy)
			return cli_fail_errno(c, ENOMEM, "init"), -1;
		for (char *h = strtok_r(copy, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
			fputs(n++ ? ", " : "", f);
			jw_put_string(f, h);
		}
		free(copy);
	}
	fputs("]", f);
	*first = false;
	return 0;
}

/* The file's text, formatted for people to edit; malloc'd into *out. */
static int render(cli *c, const init_opts *o, char **out, size_t *len)
{
	ssh_target st;
	if (o->ssh_spec && parse_ssh(c, o->ssh_spec, &st) < 0)
		return -1;
	FILE *f = open_memstream(out, len);
	if (!f)
		return cli_fail_errno(c, errno, "init"), -1;
	fprintf(f, "{\n  \"version\": 1,\n  \"transport\": \"%s\"", o->transport);
	if (o->cwd) {
		fputs(",\n  \"cwd\": ", f);
		jw_put_string(f, o->cwd);
	}
	if (o->env_count) {
		fputs(",\n  \"env\": {", f);
		bool first = true;
		for (size_t i = 0; i < o->env_count; i++) {
			char *eq = strchr(o->env[i], '=');
			*eq = '\0';
			put_kv(f, o->env[i], eq + 1, &first);
			*eq = '=';
		}
		fputs("\n  }", f);
	}
	if (o->has_timeout)
		fprintf(f, ",\n  \"timeout_ms\": %llu", (unsigned long long)o->timeout_ms);
	fprintf(f, ",\n  \"%s\": {", o->transport);
	bool first = true;
	if (o->command) {
		fputs("\n    \"command\": [", f);
		for (size_t i = 0; i < o->command_count; i++) {
			if (i)
				fputs(", ", f);
			jw_put_string(f, o->command[i]);
		}
		fputs("]", f);
		first = false;
	} else if (o->ssh_spec || o->config_host) {
		if (o->config_host)
			put_kv(f, "config_host", o->config_host, &first);
		if (o->ssh_spec)
			put_kv(f, "host", st.host, &first);
		if (o->ssh_spec && st.port)
			fprintf(f, ",\n    \"port\": %u", st.port);
		if (o->ssh_spec && st.user[0])
			put_kv(f, "user", st.user, &first);
		if (render_gateways(c, o, f, &first) < 0) {
			fclose(f);
			free(*out);
			*out = NULL;
			return -1;
		}
		if (o->identity)
			put_kv(f, "identity_file", o->identity, &first);
		if (o->host_key)
			put_kv(f, "host_key_sha256", o->host_key, &first);
		if (o->known_hosts)
			put_kv(f, "known_hosts", o->known_hosts, &first);
		if (o->accept_new)
			put_kv(f, "strict_host_key_checking", "accept-new", &first);
	} else {
		put_kv(f, "url", o->url, &first);
		if (o->token_env)
			put_kv(f, "token_env", o->token_env, &first);
		if (o->token_file)
			put_kv(f, "token_file", o->token_file, &first);
		if (o->websocket)
			fprintf(f, ",\n    \"websocket\": %s", o->websocket);
	}
	fputs("\n  }\n}\n", f);
	if (fclose(f) != 0) {
		free(*out);
		*out = NULL;
		return cli_fail_errno(c, ENOMEM, "init"), -1;
	}
	return 0;
}

/* Without --force the file must not exist (O_EXCL); with it, a rename replaces it whole. */
static int write_file(cli *c, const char *path, const char *text, size_t len, bool force)
{
	char *tmp = force ? path_temp_beside(path) : NULL;
	if (force && !tmp)
		return cli_fail_errno(c, ENOMEM, "init");
	const char *target = force ? tmp : path;
	int fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		free(tmp);
		if (e == EEXIST) {
			asp_error err;
			asp_error_set(&err, ASP_E_ALREADY_EXISTS, path,
			              "%s exists; add --force to replace it", path);
			return cli_fail(c, &err, "init %s", path);
		}
		return cli_fail_errno(c, e, "init: create %s", target);
	}
	int rc = CLI_EXIT_OK;
	if (cli_write_all(fd, text, len) < 0 || fsync(fd) < 0)
		rc = cli_fail_errno(c, errno, "init: write %s", target);
	if (close(fd) < 0 && rc == CLI_EXIT_OK)
		rc = cli_fail_errno(c, errno, "init: write %s", target);
	if (rc == CLI_EXIT_OK && force && rename(tmp, path) < 0)
		rc = cli_fail_errno(c, errno, "init: rename %s to %s", tmp, path);
	if (rc != CLI_EXIT_OK)
		unlink(target);
	free(tmp);
	return rc;
}

static bool all_utf8(cli *c, const char *what, const char *s)
{
	if (s && !cli_utf8_valid((const uint8_t *)s, strlen(s))) {
		cli_usage(c, "%s is not valid UTF-8, which JSON needs", what);
		return false;
	}
	return true;
}

/* The file written and what it holds, for people or --json. */
static void report_written(cli *c, const char *path, const char *transport)
{
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "path");
		jw_str(&w, path);
		jw_key(&w, "transport");
		jw_str(&w, transport);
		jw_obj_end(&w);
		jw_end(&w);
	} else {
		printf("wrote %s (%s); try: asp hello\n", path, transport);
	}
}

/* --from-v0 FILE: the version 1 file a v0 draft file means (docs/design.md, ".asp.json"). */
static int init_from_v0(cli *c, const char *v0_path, bool force)
{
	const char *path = c->config_path ? c->config_path : ".asp.json";
	int fd = open(v0_path, O_RDONLY | O_CLOEXEC);
	uint8_t *text = NULL;
	size_t len = 0;
	if (fd < 0 || cli_read_all(fd, &text, &len) < 0) {
		int rc = cli_fail_errno(c, errno, "init: read %s", v0_path);
		if (fd >= 0)
			close(fd);
		return rc;
	}
	close(fd);
	char *v1 = NULL;
	asp_error err;
	int rc;
	if (asp_config_v0_to_v1((const char *)text, len, v0_path, &v1, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "init --from-v0 %s", v0_path);
	} else {
		size_t n = strlen(v1);
		v1[n] = '\n'; /* json_dumps leaves the last line open; the NUL is not written */
		rc = write_file(c, path, v1, n + 1, force);
		v1[n] = '\0';
		asp_config *cfg;
		if (rc == CLI_EXIT_OK && asp_config_load(path, &cfg, &err) != ASP_OK)
			rc = cli_fail(c, &err, "init: check %s", path);
		else if (rc == CLI_EXIT_OK) {
			asp_config_free(cfg);
			report_written(c, path, "ssh");
			rc = cli_finish(c, CLI_EXIT_OK);
		}
	}
	free(v1);
	free(text);
	return rc;
}

int cmd_init(cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"stdio", no_argument, NULL, OPT_STDIO},
	    {"ssh", required_argument, NULL, OPT_SSH},
	    {"http", required_argument, NULL, OPT_HTTP},
	    {"identity", required_argument, NULL, OPT_IDENTITY},
	    {"token-env", required_argument, NULL, OPT_TOKEN_ENV},
	    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	    {"cwd", required_argument, NULL, OPT_CWD},
	    {"env", required_argument, NULL, OPT_ENV},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"force", no_argument, NULL, OPT_FORCE},
	    {"host-key-sha256", required_argument, NULL, OPT_HOST_KEY},
	    {"known-hosts", required_argument, NULL, OPT_KNOWN_HOSTS},
	    {"accept-new", no_argument, NULL, OPT_ACCEPT_NEW},
	    {"websocket", no_argument, NULL, OPT_WEBSOCKET},
	    {"no-websocket", no_argument, NULL, OPT_NO_WEBSOCKET},
	    {"from-v0", required_argument, NULL, OPT_FROM_V0},
	    {"proxy-command", required_argument, NULL, OPT_PROXY_COMMAND},
	    {"jump", required_argument, NULL, OPT_JUMP},
	    {"from-ssh-config", required_argument, NULL, OPT_FROM_SSH_CONFIG},
	    {NULL, 0, NULL, 0},
	};
	init_opts o = {0};
	const char *from_v0 = NULL;
	char **env = calloc((size_t)argc, sizeof *env);
	char **jumps = calloc((size_t)argc, sizeof *jumps);
	if (!env || !jumps) {
		free(env);
		free(jumps);
		return cli_fail_errno(c, ENOMEM, "init");
	}
	o.env = env;
	o.jumps = jumps;
	int rc = c->fail_code, opt, transports = 0;
	char *text = NULL;
	/* '+': the stdio command after "--" keeps its own options. */
	while ((opt = cli_getopt(c, argc, argv, "+h", longopts)) != -1) {
		switch (opt) {
		case 'h': rc = cli_finish(c, CLI_EXIT_OK); goto out;
		case OPT_STDIO: o.transport = "stdio", transports++; break;
		case OPT_SSH: o.transport = "ssh", o.ssh_spec = optarg, transports++; break;
		case OPT_HTTP: o.transport = "http", o.url = optarg, transports++; break;
		case OPT_IDENTITY: o.identity = optarg; break;
		case OPT_TOKEN_ENV: o.token_env = optarg; break;
		case OPT_TOKEN_FILE: o.token_file = optarg; break;
		case OPT_CWD: o.cwd = optarg; break;
		case OPT_ENV:
			if (!strchr(optarg, '=') || optarg[0] == '=') {
				rc = cli_usage(c, "--env needs NAME=VALUE, got '%s'", optarg);
				goto out;
			}
			o.env[o.env_count++] = optarg;
			break;
		case OPT_TIMEOUT:
			if (cli_parse_seconds(c, "--timeout", optarg, &o.timeout_ms) < 0)
				goto out;
			o.has_timeout = true;
			break;
		case OPT_FORCE: o.force = true; break;
		case OPT_HOST_KEY: o.host_key = optarg; break;
		case OPT_KNOWN_HOSTS: o.known_hosts = optarg; break;
		case OPT_ACCEPT_NEW: o.accept_new = true; break;
		case OPT_WEBSOCKET: o.websocket = "true"; break;
		case OPT_NO_WEBSOCKET: o.websocket = "false"; break;
		case OPT_FROM_V0: from_v0 = optarg, transports++; break;
		case OPT_PROXY_COMMAND: o.proxy_command = optarg; break;
		case OPT_JUMP: o.jumps[o.jump_count++] = optarg; break;
		case OPT_FROM_SSH_CONFIG: o.config_host = optarg; break;
		default: goto out;
		}
	}
	/* --from-ssh-config alone is the SSH transport too: its Host gives the host */
	if (o.config_host && !o.ssh_spec && transports == 0)
		o.transport = "ssh", transports++;
	if (transports != 1) {
		rc = cli_usage(c, "give one of --stdio -- COMMAND..., --ssh [USER@]HOST[:PORT], "
		                  "--http URL or --from-v0 FILE");
		goto out;
	}
	if (from_v0) {
		rc = optind < argc ? cli_usage(c, "unexpected argument '%s'", argv[optind])
		                   : init_from_v0(c, from_v0, o.force);
		goto out;
	}
	bool ssh = o.ssh_spec || o.config_host;
	if ((o.identity || o.host_key || o.known_hosts || o.accept_new || o.proxy_command ||
	     o.jump_count || o.config_host) &&
	    !ssh) {
		rc = cli_usage(c, "--identity, --host-key-sha256, --known-hosts, --accept-new, "
		                  "--proxy-command, --jump and --from-ssh-config go with --ssh");
		goto out;
	}
	if (o.config_host && strcmp(o.transport, "ssh") != 0) {
		rc = cli_usage(c, "--from-ssh-config goes with --ssh (or alone)");
		goto out;
	}
	if (o.websocket && !o.url) {
		rc = cli_usage(c, "--websocket and --no-websocket go with --http");
		goto out;
	}
	if ((o.token_env || o.token_file) && !o.url) {
		rc = cli_usage(c, "--token-env and --token-file go with --http");
		goto out;
	}
	if (strcmp(o.transport, "stdio") == 0) {
		if (optind >= argc) {
			rc = cli_usage(c, "--stdio needs the command after --, e.g. "
			                  "asp init --stdio -- asp-agent --stdio");
			goto out;
		}
		o.command = argv + optind;
		o.command_count = (size_t)(argc - optind);
	} else if (optind < argc) {
		rc = cli_usage(c, "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	bool ok = all_utf8(c, "--cwd", o.cwd) && all_utf8(c, "--ssh", o.ssh_spec) &&
	          all_utf8(c, "--identity", o.identity) && all_utf8(c, "--http", o.url) &&
	          all_utf8(c, "--token-env", o.token_env) &&
	          all_utf8(c, "--token-file", o.token_file) &&
	          all_utf8(c, "--host-key-sha256", o.host_key) &&
	          all_utf8(c, "--known-hosts", o.known_hosts) &&
	          all_utf8(c, "--proxy-command", o.proxy_command) &&
	          all_utf8(c, "--from-ssh-config", o.config_host);
	for (size_t i = 0; ok && i < o.jump_count; i++)
		ok = all_utf8(c, "--jump", o.jumps[i]);
	for (size_t i = 0; ok && i < o.env_count; i++)
		ok = all_utf8(c, "--env", o.env[i]);
	for (size_t i = 0; ok && i < o.command_count; i++)
		ok = all_utf8(c, "the command", o.command[i]);
	if (!ok)
		goto out;

	const char *path = c->config_path ? c->config_path : ".asp.json";
	size_t len;
	if (render(c, &o, &text, &len) < 0)
		goto out;
	/* Validate before writing, so a bad option leaves no file behind... */
	asp_config *cfg = NULL;
	asp_error err;
	if (asp_config_parse(text, len, path, &cfg, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "init");
		goto out;
	}
	asp_config_free(cfg);
	if ((rc = write_file(c, path, text, len, o.force)) != CLI_EXIT_OK)
		goto out;
	/* ...and load what landed on disk, the way every client will. */
	if (asp_config_load(path, &cfg, &err) != ASP_OK) {
		rc = cli_fail(c, &err, "init: check %s", path);
		goto out;
	}
	asp_config_free(cfg);
	report_written(c, path, o.transport);
	rc = cli_finish(c, CLI_EXIT_OK);
out:
	free(text);
	free(env);
	free(jumps);
	return rc;
}
