/*
 * Connecting: TCP and the SSH handshake, host key verification (known_hosts, accept-new
 * or a pinned SHA256 fingerprint) before any credential is sent, then authentication by
 * identity file, ssh-agent, default keys or a password from the environment.
 */
#include "ssh_internal.h"
#include "ssh_via.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Dead peers are noticed within ~30 s even when nothing is being sent. */
#define KEEPALIVE_IDLE_S     15
#define KEEPALIVE_INTERVAL_S 5
#define KEEPALIVE_COUNT      3
#define USER_TIMEOUT_MS      30000

static void tune_socket(int fd)
{
	int on = 1, idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTERVAL_S, cnt = KEEPALIVE_COUNT;
	unsigned user_timeout = USER_TIMEOUT_MS;
	/* best effort: a socket that refuses an option still works */
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/* "SHA256:abc=" and "abc" compare equal: the prefix and base64 padding are optional. */
static void fp_norm(const char *in, char *out, size_t cap)
{
	if (strncmp(in, "SHA256:", 7) == 0)
		in += 7;
	size_t n = strlen(in);
	while (n > 0 && in[n - 1] == '=')
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(out, in, n);
	out[n] = '\0';
}

/*
 * "host_key": the only key accepted, as a public key line (TYPE BASE64 [comment]); the
 * server's key must have that type and that blob. known_hosts is not consulted.
 */
static asp_status check_pinned_line(sshc *c, const char *line, const char *type, const char *b64,
                                    asp_error *err)
{
	if (!b64)
		return asp_error_set(err, ASP_E_INTERNAL, NULL,
		                     "ssh %s: cannot export the server's host key", c->target);
	const char *sp = strchr(line, ' ');
	size_t tl = sp ? (size_t)(sp - line) : strlen(line);
	const char *blob = sp ? sp + 1 : "";
	size_t bl = strcspn(blob, " ");
	if (tl == strlen(type) && strncmp(line, type, tl) == 0 && bl == strlen(b64) &&
	    strncmp(blob, b64, bl) == 0)
		return ASP_OK;
	return asp_error_set(err, ASP_E_UNAUTHORIZED, NULL,
	                     "ssh %s: host key mismatch: the server offered a %s key that is "
	                     "not the one host_key pins (%.*s %.12s...). If the server's key "
	                     "changed on purpose, check it out of band and update host_key; "
	                     "otherwise someone may be intercepting the connection",
	                     c->target, type, (int)tl, line, blob);
}

static asp_status verify_host_key(sshc *c, asp_error *err)
{
	const asp_config_ssh *sc = &c->cfg->ssh;
	ssh_key key = NULL;
	if (ssh_get_server_publickey(c->s, &key) != SSH_OK)
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "ssh %s: the server sent no host key: %s", c->target,
		                     ssh_get_error(c->s));
	unsigned char *hash = NULL;
	size_t hlen = 0;
	int rc = ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen);
	const char *ktype = ssh_key_type_to_char(ssh_key_type(key));
	char type_name[32];
	snprintf(type_name, sizeof type_name, "%s", ktype ? ktype : "unknown");
	char *b64 = NULL; /* the key's blob, to compare with a pinned key line */
	if (sc->host_key && ssh_pki_export_pubkey_base64(key, &b64) != SSH_OK)
		b64 = NULL;
	ssh_key_free(key);
	if (sc->host_key) {
		asp_status pst = check_pinned_line(c, sc->host_key, type_name, b64, err);
		ssh_string_free_char(b64);
		if (rc == SSH_OK)
			ssh_clean_pubkey_hash(&hash);
		return pst;
	}
	if (rc != SSH_OK)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "ssh %s: cannot hash the host key",
		                     c->target);
	char *fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
	ssh_clean_pubkey_hash(&hash);
	if (!fp)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "ssh %s: out of memory", c->target);
	char got[128], want[128];
	asp_status st = ASP_OK;

	if (sc->host_key_sha256) {
		/* pinned: the only key accepted, known_hosts is not consulted */
		fp_norm(fp, got, sizeof got);
		fp_norm(sc->host_key_sha256, want, sizeof want);
		if (strcmp(got, want) != 0)
			st = asp_error_set(
			    err, ASP_E_UNAUTHORIZED, NULL,
			    "ssh %s: host key mismatch: the server's %s key is %s but "
			    "host_key_sha256 pins SHA256:%s. If the server's key changed on "
			    "purpose, check the new fingerprint out of band and update "
			    "host_key_sha256; otherwise someone may be intercepting the "
			    "connection",
			    c->target, type_name, fp, want);
		ssh_string_free_char(fp);
		return st;
	}
	if (sc->strict_host_key_checking == ASP_HOSTKEY_ANY) {
		ssh_string_free_char(fp); /* checking switched off in the config */
		return ASP_OK;
	}
	const char *kh = sc->known_hosts ? sc->known_hosts : "~/.ssh/known_hosts";
	enum ssh_known_hosts_e known = ssh_session_is_known_server(c->s);
	switch (known) {
	case SSH_KNOWN_HOSTS_OK: break;
	case SSH_KNOWN_HOSTS_CHANGED: {
		/* known_hosts names a host on another port than 22 "[host]:port", and
		 * ssh-keygen -R finds the entry only by that name */
		char name[300];
		if (c->cfg->ssh.port == 22)
			snprintf(name, sizeof name, "%s", c->cfg->ssh.host);
		else
			snprintf(name, sizeof name, "[%s]:%u", c->cfg->ssh.host,
			         (unsigned)c->cfg->ssh.port);
		st = asp_error_set(
		    err, ASP_E_UNAUTHORIZED, NULL,
		    "ssh %s: HOST KEY CHANGED: the server's %s key is now %s, which "
		    "does not match %s. Someone may be intercepting the connection, or "
		    "the sandbox was rebuilt: check the fingerprint out of band, then "
		    "remove the old entry (ssh-keygen -R '%s' -f %s) or pin the new key "
		    "with host_key_sha256",
		    c->target, type_name, fp, kh, name, kh);
		break;
	}
	case SSH_KNOWN_HOSTS_OTHER:
		st = asp_error_set(
		    err, ASP_E_UNAUTHORIZED, NULL,
		    "ssh %s: the server offered a %s key (%s) but %s holds a key of "
		    "another type for it; this can mean interception. Check the "
		    "fingerprint out of band, then pin it with host_key_sha256 or fix "
		    "%s",
		    c->target, type_name, fp, kh, kh);
		break;
	case SSH_KNOWN_HOSTS_NOT_FOUND:
	case SSH_KNOWN_HOSTS_UNKNOWN:
		if (sc->strict_host_key_checking == ASP_HOSTKEY_ACCEPT_NEW) {
			if (ssh_session_update_known_hosts(c->s) != SSH_OK)
				st = asp_error_set(
				    err, ASP_E_IO_ERROR, kh,
				    "ssh %s: cannot record the new host key in %s: %s", c->target,
				    kh, ssh_get_error(c->s));
			break;
		}
		st = asp_error_set(
		    err, ASP_E_UNAUTHORIZED, NULL,
		    "ssh %s: unknown host key: the server's %s key is %s and %s has no "
		    "entry for it. Check the fingerprint out of band, then pin it "
		    "(\"host_key_sha256\": \"%s\"), or add it (ssh-keyscan -p %u %s >> "
		    "%s), or set \"strict_host_key_checking\": \"accept-new\" to trust "
		    "it on first use",
		    c->target, type_name, fp, kh, fp, c->cfg->ssh.port, c->cfg->ssh.host, kh);
		break;
	case SSH_KNOWN_HOSTS_ERROR:
	default:
		st = asp_error_set(err, ASP_E_IO_ERROR, kh,
		                   "ssh %s: cannot check the host key (%s) against %s: %s",
		                   c->target, fp, kh, ssh_get_error(c->s));
		break;
	}
	ssh_string_free_char(fp);
	return st;
}

/* Appends "; what" (or "what" first), truncating at cap. */
static void note(char *buf, size_t cap, const char *what)
{
	size_t n = strlen(buf);
	const char *parts[2] = {n ? "; " : "", what};
	for (int i = 0; i < 2; i++) {
		for (const char *p = parts[i]; *p && n + 1 < cap; p++)
			buf[n++] = *p;
	}
	buf[n] = '\0';
}

/* keyboard-interactive answered with the password: servers that offer only that (PAM). */
static int kbdint_password(ssh_session s, const char *pw)
{
	int rc = ssh_userauth_kbdint(s, NULL, NULL);
	for (int round = 0; rc == SSH_AUTH_INFO && round < 8; round++) {
		int n = ssh_userauth_kbdint_getnprompts(s);
		for (int i = 0; i < n; i++) {
			char echo = 0;
			(void)ssh_userauth_kbdint_getprompt(s, (unsigned)i, &echo);
			if (ssh_userauth_kbdint_setanswer(s, (unsigned)i, echo ? "" : pw) < 0)
				return SSH_AUTH_ERROR;
		}
		rc = ssh_userauth_kbdint(s, NULL, NULL);
	}
	return rc;
}

/*
 * The configured private key: identity_file, else the variable identity_env names, which
 * holds the key's text (it starts "-----BEGIN") or a path to a key file. 0, or -1 with
 * `why` saying what failed; `label` names the source for later messages.
 */
static int load_identity(const asp_config_ssh *sc, ssh_key *k, char *label, size_t lcap, char *why,
                         size_t wcap)
{
	const char *file = sc->identity_file;
	if (file) {
		snprintf(label, lcap, "identity_file %s", file);
	} else {
		const char *v = getenv(sc->identity_env);
		snprintf(label, lcap, "identity_env %s", sc->identity_env);
		if (!v || !v[0]) {
			snprintf(why, wcap,
			         "%s: the variable is not set (it holds the private key, or "
			         "a path to it)",
			         label);
			return -1;
		}
		if (strncmp(v, "-----BEGIN", 10) == 0) {
			if (ssh_pki_import_privkey_base64(v, NULL, NULL, NULL, k) == SSH_OK)
				return 0;
			snprintf(why, wcap,
			         "%s: the variable holds a key libssh cannot load "
			         "(malformed, or protected by a passphrase: load such keys into "
			         "ssh-agent instead)",
			         label);
			return -1;
		}
		file = v;
		snprintf(label, lcap, "identity_env %s (the file %s)", sc->identity_env, v);
	}
	if (ssh_pki_import_privkey_file(file, NULL, NULL, NULL, k) == SSH_OK)
		return 0;
	snprintf(why, wcap,
	         "%s: cannot load it (missing, unreadable, or protected by a "
	         "passphrase: load such keys into ssh-agent instead)",
	         label);
	return -1;
}

static asp_status authenticate(sshc *c, asp_error *err)
{
	const asp_config_ssh *sc = &c->cfg->ssh;
	char tried[512] = "";
	char line[600];
	int rc;
	/*
	 * The configured key first, signed at once: one round trip, not two (a "none"
	 * request to learn the methods, then the key). The methods are then those its
	 * refusal lists; "none" is asked only without a key to try, or after a refusal.
	 */
	if (sc->identity_file || sc->identity_env) {
		ssh_key k = NULL;
		char label[300];
		if (load_identity(sc, &k, label, sizeof label, line, sizeof line) != 0) {
			note(tried, sizeof tried, line);
		} else {
			rc = ssh_userauth_publickey(c->s, NULL, k);
			ssh_key_free(k);
			if (rc == SSH_AUTH_SUCCESS)
				return ASP_OK;
			if (rc == SSH_AUTH_ERROR)
				goto lost;
			int m = ssh_userauth_list(c->s, NULL);
			snprintf(line, sizeof line, "%s: %s", label,
			         m && !(m & SSH_AUTH_METHOD_PUBLICKEY)
			             ? "the server does not accept keys"
			             : "refused");
			note(tried, sizeof tried, line);
		}
	}
	rc = ssh_userauth_none(c->s, NULL);
	if (rc == SSH_AUTH_SUCCESS)
		return ASP_OK;
	if (rc == SSH_AUTH_ERROR)
		goto lost;
	int methods = ssh_userauth_list(c->s, NULL);
	const char *sock = getenv("SSH_AUTH_SOCK");
	if (sock && sock[0] && (methods & SSH_AUTH_METHOD_PUBLICKEY)) {
		rc = ssh_userauth_agent(c->s, NULL);
		if (rc == SSH_AUTH_SUCCESS)
			return ASP_OK;
		if (rc == SSH_AUTH_ERROR && !ssh_is_connected(c->s))
			goto lost;
		note(tried, sizeof tried, "ssh-agent: no key accepted");
	}
	if (!sc->identity_file && !sc->identity_env && !sc->password_env &&
	    (methods & SSH_AUTH_METHOD_PUBLICKEY)) {
		rc = ssh_userauth_publickey_auto(c->s, NULL, NULL);
		if (rc == SSH_AUTH_SUCCESS)
			return ASP_OK;
		if (rc == SSH_AUTH_ERROR && !ssh_is_connected(c->s))
			goto lost;
		note(tried, sizeof tried, "default keys (~/.ssh/id_*): none accepted");
	}
	if (sc->password_env) {
		char *pw = NULL;
		asp_error e2;
		asp_error_clear(&e2);
		if (asp_config_secret(sc->password_env, NULL, &pw, &e2) != ASP_OK || !pw) {
			snprintf(line, sizeof line, "password: %.400s", e2.message);
			note(tried, sizeof tried, line);
		} else {
			rc = SSH_AUTH_DENIED;
			if (methods & SSH_AUTH_METHOD_PASSWORD)
				rc = ssh_userauth_password(c->s, NULL, pw);
			if (rc != SSH_AUTH_SUCCESS && rc != SSH_AUTH_ERROR &&
			    (methods & SSH_AUTH_METHOD_INTERACTIVE))
				rc = kbdint_password(c->s, pw);
			explicit_bzero(pw, strlen(pw));
			free(pw);
			if (rc == SSH_AUTH_SUCCESS)
				return ASP_OK;
			if (rc == SSH_AUTH_ERROR && !ssh_is_connected(c->s))
				goto lost;
			snprintf(line, sizeof line, "password from $%s: refused", sc->password_env);
			note(tried, sizeof tried, line);
		}
	}
	char offered[96] = "";
	if (methods & SSH_AUTH_METHOD_PUBLICKEY)
		note(offered, sizeof offered, "publickey");
	if (methods & SSH_AUTH_METHOD_PASSWORD)
		note(offered, sizeof offered, "password");
	if (methods & SSH_AUTH_METHOD_INTERACTIVE)
		note(offered, sizeof offered, "keyboard-interactive");
	return asp_error_set(err, ASP_E_UNAUTHORIZED, NULL,
	                     "ssh %s: authentication failed (%s); the server accepts: %s. Set "
	                     "ssh.identity_file to a key in the user's authorized_keys "
	                     "(identity.file in a version 0 file), run an ssh-agent holding "
	                     "one, or set ssh.password_env (version 1 only)",
	                     c->target, tried[0] ? tried : "no method configured",
	                     offered[0] ? offered : "nothing we support");
lost:
	return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
	                     "ssh %s: connection lost during authentication: %s", c->target,
	                     ssh_get_error(c->s));
}

bool ssh_fragile_open_banner(const char *banner)
{
	/* "SSH-2.0-dropbear_2022.83": fixed in 2024.86 (an idle session channel was closed
	 * on any child's exit); a Dropbear whose version we cannot read counts as old */
	const char *d = banner ? strstr(banner, "dropbear") : NULL;
	if (!d)
		return false;
	unsigned year = 0, rel = 0;
	if (sscanf(d, "dropbear_%u.%u", &year, &rel) != 2)
		return true;
	return year < 2024 || (year == 2024 && rel < 86);
}

/* A fresh connection object for `cfg`: no session yet. */
static void conn_init(sshc *c, const asp_config_view *cfg)
{
	memset(c, 0, sizeof *c);
	c->cfg = cfg;
	c->fd = -1;
	c->wake_fd = -1;
	c->lead_fd = -1;
	c->chan_limit = SSH_MAX_CHANNELS;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_cond_init(&c->pump_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->mu, NULL);
	c->slice_ns = sshc_wait_slice_ns();
}

/*
 * The session for c->cfg: TCP (or `via`, which libssh takes), the handshake, the host
 * key, authentication.
 */
static asp_status handshake(sshc *c, int via, asp_error *err)
{
	const asp_config_ssh *sc = &c->cfg->ssh;
	asp_status st = ASP_OK;
	c->s = ssh_new();
	if (!c->s) {
		if (via >= 0)
			close(via);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "ssh: out of memory");
	}
	ssh_set_counters(c->s, &c->io, &c->rx);
	unsigned port = sc->port ? sc->port : 22;
	unsigned ms = sc->connect_timeout_ms ? sc->connect_timeout_ms : 10000;
	long secs = (long)(ms / 1000), usecs = (long)(ms % 1000) * 1000;
	int no = 0, yes = 1;
	/* .asp.json is the whole config: ~/.ssh/config is read only through ssh.config_host
	 * (asp/ssh_route.h), never by libssh, so runs are reproducible */
	ssh_options_set(c->s, SSH_OPTIONS_PROCESS_CONFIG, &no);
	if (ssh_options_set(c->s, SSH_OPTIONS_HOST, sc->host) < 0 ||
	    ssh_options_set(c->s, SSH_OPTIONS_PORT, &port) < 0 ||
	    (sc->user && ssh_options_set(c->s, SSH_OPTIONS_USER, sc->user) < 0) ||
	    (sc->known_hosts &&
	     ssh_options_set(c->s, SSH_OPTIONS_KNOWNHOSTS, sc->known_hosts) < 0) ||
	    (via >= 0 && ssh_options_set(c->s, SSH_OPTIONS_FD, &via) < 0)) {
		if (via >= 0)
			close(via);
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "ssh: bad option: %s",
		                     ssh_get_error(c->s));
	}
	ssh_options_set(c->s, SSH_OPTIONS_TIMEOUT, &secs);
	ssh_options_set(c->s, SSH_OPTIONS_TIMEOUT_USEC, &usecs);
	ssh_options_set(c->s, SSH_OPTIONS_NODELAY, &yes);
	const char *ciphers = sshc_cipher_order();
	if (ciphers) { /* best effort: libssh's default order otherwise */
		ssh_options_set(c->s, SSH_OPTIONS_CIPHERS_C_S, ciphers);
		ssh_options_set(c->s, SSH_OPTIONS_CIPHERS_S_C, ciphers);
	}
	char *user = NULL;
	ssh_options_get(c->s, SSH_OPTIONS_USER, &user);
	/* no user in the config: libssh logs in as the local user, so messages name that one */
	const struct passwd *pw = user ? NULL : getpwuid(getuid());
	bool v6 = strchr(sc->host, ':') != NULL;
	snprintf(c->target, sizeof c->target, "%s@%s%s%s:%u",
	         user                ? user
	         : pw && pw->pw_name ? pw->pw_name
	                             : "?",
	         v6 ? "[" : "", sc->host, v6 ? "]" : "", port);
	ssh_string_free_char(user);

	/* from here libssh owns `via`: it closes it on errors and in ssh_free */
	uint64_t deadline = ssh_deadline_ms(ms);
	if (ssh_connect(c->s) != SSH_OK) {
		/* a proxy command that closed the socket is exiting: wait for its last words,
		 * within what is left of connect_timeout_ms */
		uint64_t now = ssh_now_ns(), left = deadline > now ? deadline - now : 0;
		unsigned wait = left / SSH_NS_PER_MS < 500 ? (unsigned)(left / SSH_NS_PER_MS) : 500;
		char why[800] = "";
		ssh_via_explain(c->via, wait, why, sizeof why);
		return asp_error_set(err, ASP_E_TRANSPORT_ERROR, NULL,
		                     "ssh %s: cannot connect: %s; %s (connect_timeout_ms %u)",
		                     c->target, ssh_get_error(c->s),
		                     why[0] ? why : "check host and port, and that sshd runs there",
		                     ms);
	}
	/* Forget that the descriptor came from us, so ssh_disconnect closes it as it closes
	 * a socket of its own (it keeps one set by the option open). */
	if (via >= 0)
		ssh_options_set(c->s, SSH_OPTIONS_FD, NULL);
	c->fd = ssh_get_fd(c->s);
	tune_socket(c->fd);
	c->fragile_open = ssh_fragile_open_banner(ssh_get_serverbanner(c->s));
	st = verify_host_key(c, err);
	if (st == ASP_OK)
		st = authenticate(c, err);
	return st;
}

asp_status sshc_connect(sshc *c, const asp_config_view *cfg, asp_error *err)
{
	conn_init(c, cfg);
	int via = -1;
	asp_status st = ssh_via_open(cfg, &c->via, &c->cfg, &via, err);
	if (st == ASP_OK)
		st = handshake(c, via, err);
	if (st == ASP_OK)
		st = sshc_pump_start(c, err);
	if (st == ASP_OK)
		return ASP_OK;
	sshc_close(c);
	return st;
}

asp_status sshc_connect_hop(sshc *c, const asp_config_view *cfg, int fd, asp_error *err)
{
	conn_init(c, cfg);
	asp_status st = handshake(c, fd, err);
	if (st != ASP_OK)
		sshc_close(c);
	return st;
}
