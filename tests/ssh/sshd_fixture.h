/*
 * A real SSH server for the SSH tests on 127.0.0.1 and a free port, with its own host
 * key, authorized_keys and pid file in a temp folder: Debian's OpenSSH /usr/sbin/sshd
 * (its own config), or Debian's Dropbear /usr/sbin/dropbear (the second server small
 * sandbox images run). No skipping: without the server the fixture fails with what to
 * install.
 */
#ifndef ASP_TEST_SSHD_FIXTURE_H
#define ASP_TEST_SSHD_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct sshd_fixture {
	char dir[256];
	unsigned port;
	pid_t pid;
	char user[64];
	char host_key[320];    /* private host key */
	char client_key[320];  /* private key in authorized_keys */
	char known_hosts[320]; /* holds the current host key for [127.0.0.1]:port */
	char empty_known_hosts[320];
	char fingerprint[128]; /* "SHA256:..." of the current host key */
	char log[320];         /* sshd's stderr (-e) */
	char why[1024];        /* what failed */
	bool real_login;       /* the login shell reads the user's startup files */
	unsigned max_sessions; /* sshd's MaxSessions: channels per connection */
	bool dropbear;         /* the server is Dropbear, not OpenSSH */
	bool non_root;         /* Dropbear: logs in as a user made for the run, not root */
	bool root_login;       /* root, its own shell and startup files, INT and QUIT ignored */
	char home[320];        /* Dropbear: the login user's home (authorized_keys) */
	char listen[64];       /* the IPv4 address it listens on; "": 127.0.0.1 */
	bool quiet;            /* the tests' login shell without its noise (sshd_start_quiet) */
	bool no_tar;           /* commands find no tar in PATH (sshd_start_no_tar) */
	char sftp[256];        /* OpenSSH: the sftp subsystem's program; "": none */
} sshd_fixture;

/*
 * Starts sshd for tests: the login shell (bash) skips the user's ~/.bashrc, so results do
 * not depend on who runs them, and prints noise on stdout and stderr before each command
 * (but sftp-server), which the transport must keep out of every result. 0, or -1 with
 * fx->why saying what failed and what to do.
 */
int sshd_start(sshd_fixture *fx);

/*
 * As sshd_start (or dropbear_start as root), listening on the IPv4 address `addr`
 * instead of 127.0.0.1 (an interface a test made in a network namespace of its own);
 * known_hosts and sshd_config_json name that address.
 */
int sshd_start_listen(sshd_fixture *fx, const char *addr, bool dropbear);

/*
 * As sshd_start, but the login shell prints nothing: for benchmarks that pipe a command's
 * stdout into a program (tar, rsync), which the noise would corrupt.
 */
int sshd_start_quiet(sshd_fixture *fx);

/*
 * As sshd_start, but a sandbox without tar: each command's PATH is one folder of the
 * fixture's holding a link to every program of /usr/bin, /usr/sbin and /usr/local/bin
 * but tar (a slim image's shape).
 */
int sshd_start_no_tar(sshd_fixture *fx);

/*
 * As sshd_start, with `program` as the sftp subsystem (NULL: no sftp subsystem, which
 * sshd refuses): a server that cannot serve file ops.
 */
int sshd_start_sftp(sshd_fixture *fx, const char *program);

/* Starts sshd with the login shell as users have it (startup files read): benchmarks. */
int sshd_start_real_login(sshd_fixture *fx);

/*
 * Both of the above allow 64 sessions per connection, so timing checks do not depend on
 * how fast other commands free theirs; this one sets MaxSessions (stock sshd: 10).
 */
int sshd_start_max_sessions(sshd_fixture *fx, unsigned max_sessions);

/*
 * Starts Dropbear (`dropbear -F -E -p 127.0.0.1:PORT`, host key from dropbearkey, key
 * auth only). Dropbear reads ~/.ssh/authorized_keys and has no option to look elsewhere,
 * so it runs in a mount namespace of its own where /etc/passwd and /etc/group are copies
 * in the fixture's folder: the login user's home is a folder there (nothing of the real
 * /root is read or written), and with `non_root` (the tests run as root) a user made
 * for the run logs in instead of root. Run as non-root, a user namespace maps the
 * current user to itself for the same mounts, and it logs in as that user. The login
 * shell is bash, whose ~/.bashrc prints noise on stdout and stderr before each command
 * (but sftp-server), as the OpenSSH fixture's does.
 */
int dropbear_start(sshd_fixture *fx, bool non_root);

/*
 * Starts OpenSSH (or Dropbear) logging in as the real root, with root's own login shell
 * and Debian's default startup files (~/.bashrc and ~/.profile as base-files installs
 * them, /etc/profile as it is): what a sandbox built from Debian that runs its server as
 * root gives. Nothing of root's files or the machine's config changes: the server
 * listens on 127.0.0.1 and a free port, with a host key and the client's key from the
 * fixture's folder, in a mount namespace of its own where root's home is a folder of the
 * fixture's holding .ssh, those startup files, and every other entry of the real home
 * bound in place, so root's other files are read and written and nothing is added to
 * the real home. Both servers start the way a script's background job starts them, with
 * SIGINT and SIGQUIT ignored, which they pass on to every command. Needs root.
 */
int sshd_start_root_login(sshd_fixture *fx, bool dropbear);

/* Stops the server (TERM, then KILL) and removes the folder. Safe to call twice. */
void sshd_stop(sshd_fixture *fx);

/*
 * Stops sshd, makes a new host key and starts it again on the same port; known_hosts
 * keeps the old key (so it is now "changed"), fx->fingerprint is the new key's.
 */
int sshd_rekey(sshd_fixture *fx);

/* Kills (SIGKILL) every process sshd forked for connections; the listener stays. */
int sshd_kill_sessions(sshd_fixture *fx);

/* Sends `sig` to every sftp-server of this sshd's sessions: how many. */
int sshd_signal_sftp(sshd_fixture *fx, int sig);

/* Sends `sig` to every process under this sshd whose name is `name` ("tar"): how many. */
int sshd_signal_named(sshd_fixture *fx, const char *name, int sig);

/* Kills (SIGKILL) every asp-agent of this server's sessions (agent mode): how many. */
int sshd_kill_agents(sshd_fixture *fx);

/* An .asp.json text for this server: "native" or an agent path, and extra ssh keys. */
void sshd_config_json(const sshd_fixture *fx, const char *agent, const char *extra, char *out,
                      size_t cap);

/* Runs argv, waits; exit status or -1. Output to /dev/null unless `out` (cap bytes). */
int sshd_run(const char *const argv[], char *out, size_t cap);

#endif
