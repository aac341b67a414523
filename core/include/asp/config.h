/* .asp.json: discovery, strict validation against spec/asp.schema.json, and secrets. */
#ifndef ASP_CONFIG_H
#define ASP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "asp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded, validated config. Owns every string its view points at. */
typedef struct asp_config asp_config;

typedef enum asp_transport_kind {
	ASP_TRANSPORT_STDIO = 1,
	ASP_TRANSPORT_SSH = 2,
	ASP_TRANSPORT_HTTP = 3,
} asp_transport_kind;

/* ssh.strict_host_key_checking: false, true or "accept-new". */
typedef enum asp_hostkey_check {
	ASP_HOSTKEY_ANY = 0,
	ASP_HOSTKEY_STRICT = 1,
	ASP_HOSTKEY_ACCEPT_NEW = 2,
} asp_hostkey_check;

/* Larger files are refused (too_large) before parsing. */
#define ASP_CONFIG_MAX_BYTES (1024 * 1024)

/*
 * Finds the config: $ASP_CONFIG when set and non-empty (it must exist: not_found naming
 * it otherwise), else .asp.json in `start_dir` (NULL = the working directory), then in
 * each parent up to /. Writes the absolute path into `out` (`cap` bytes; too_large when
 * it does not fit). not_found, with a message saying how to create one, when none.
 */
asp_status asp_config_find(const char *start_dir, char *out, size_t cap, asp_error *err);

/*
 * Reads and validates the config at `path`, or the one asp_config_find(NULL, ...) finds
 * when `path` is NULL. On success *out is the caller's, to free with asp_config_free.
 * Errors: those of reading the file (not_found, permission_denied, ...), too_large, and
 * invalid_argument for anything wrong with its content, as for asp_config_parse.
 */
asp_status asp_config_load(const char *path, asp_config **out, asp_error *err);

/*
 * Validates a config already in memory (`len` bytes, need not be NUL-terminated).
 * `filename` names it in messages and its directory is the base of relative paths;
 * NULL means "<memory>" and the working directory. Every problem with the text is
 * invalid_argument with a message "FILE:LINE:COL: KEY.PATH: what was expected, got what".
 */
asp_status asp_config_parse(const char *text, size_t len, const char *filename, asp_config **out,
                            asp_error *err);

/*
 * The version 1 text of a version 0 file (the public v0 draft, docs/design.md,
 * ".asp.json"), checked as asp_config_parse checks it; *out is malloc'd JSON, the caller
 * frees it. Errors as for asp_config_parse, and invalid_argument when the text is not
 * version 0.
 */
asp_status asp_config_v0_to_v1(const char *text, size_t len, const char *filename, char **out,
                               asp_error *err);

/* Releases the config and every string of its view. NULL is a no-op. */
void asp_config_free(asp_config *cfg);

/*
 * The read-only view below: strings are NULL when absent, defaults from the schema are
 * applied, and local paths (identity_file, known_hosts, token_file, ca_file, workspace.local and a
 * stdio program path containing '/') are absolute: "~/" expanded with $HOME, relative
 * ones joined to the config file's directory. Sandbox paths (cwd, ssh.agent) are kept
 * as written.
 */
typedef struct asp_config_ssh {
	const char *host;
	unsigned port;
	const char *user;
	const char *identity_file;
	const char *identity_env; /* a variable holding the key's text or a key file's path */
	const char *password_env;
	const char *known_hosts;
	const char *host_key_sha256;
	const char *host_key; /* a pinned public key line: TYPE BASE64 [comment] */
	asp_hostkey_check strict_host_key_checking;
	unsigned connect_timeout_ms;
	const char *agent; /* NULL, a path in the sandbox, or "upload" */
	/*
	 * Gateways (docs/design.md, ".asp.json"). port is 0 and known_hosts NULL when neither
	 * is given (the transport then uses 22 and ~/.ssh/known_hosts, unless config_host's
	 * file names them). proxy_command is the argv as written, its % escapes expanded only
	 * when connecting. jump lists the hops in order: a hop written as an object has its
	 * own keys, and those of identity_file, identity_env, known_hosts,
	 * strict_host_key_checking and connect_timeout_ms it lacks from this section; a hop
	 * written as "[user@]host[:port]" has config_host set to host (looked up in
	 * config_file when connecting), user and port when given, and the same inherited
	 * keys. A hop's own proxy_command, jump and agent are never set.
	 */
	const char *const *proxy_command; /* proxy_command_argc strings, then NULL */
	size_t proxy_command_argc;
	const struct asp_config_ssh *jump;
	size_t jump_count;
	const char *config_host;
	const char *config_file; /* absolute: ~/.ssh/config when not given */
} asp_config_ssh;

typedef struct asp_config_stdio {
	const char *const *argv; /* argc strings, then NULL; NULL when there is no section */
	size_t argc;
} asp_config_stdio;

/*
 * http.websocket (docs/design.md, ".asp.json"). The values line up with the key's JSON: a
 * view filled in memory with `websocket = true` still means the WebSocket, and a zeroed
 * one means the key is absent.
 */
typedef enum asp_http_websocket {
	ASP_HTTP_WS_BOTH = 0,  /* absent: POST for calls and bulk, a WebSocket for streams */
	ASP_HTTP_WS_ONLY = 1,  /* true: every call over one WebSocket */
	ASP_HTTP_WS_NEVER = 2, /* false: every call a POST; nothing streams */
} asp_http_websocket;

/* One of http.headers: `value` as written, or `env` naming the variable that holds it. */
typedef struct asp_config_header {
	const char *name;
	const char *value;
	const char *env;
} asp_config_header;

typedef struct asp_config_http {
	const char *url;
	const char *token_env;
	const char *token_file;
	const char *ca_file;
	asp_http_websocket websocket;
	const asp_config_header *headers; /* header_count entries, in file order */
	size_t header_count;
} asp_config_http;

/*
 * workspace (docs/design.md, ".asp.json"): local is absolute when set (the module
 * asp/workspace.h applies the defaults); sandbox is kept as written.
 */
typedef struct asp_config_workspace {
	const char *local;
	const char *sandbox;
} asp_config_workspace;

typedef struct asp_config_env {
	const char *key;
	const char *value;
} asp_config_env;

/* call_timeout_ms when the config does not say (docs/design.md, ".asp.json"). */
#define ASP_CALL_TIMEOUT_DEFAULT 60000u

typedef struct asp_config_view {
	const char *path; /* absolute path of the config file; NULL if parsed from memory */
	asp_transport_kind transport;
	const char *cwd;
	const asp_config_env *env; /* env_count entries, in file order */
	size_t env_count;
	uint64_t timeout_ms;      /* 0 = none */
	unsigned call_timeout_ms; /* deadline of calls without one of their own; 0: 60000 */
	asp_config_ssh ssh;       /* defaults applied even when the section is absent */
	asp_config_stdio stdio;
	asp_config_http http;
	asp_config_workspace workspace;
	/*
	 * For an application's own transport (kind >= ASP_TRANSPORT_USER_MIN, asp/transport.h):
	 * what to connect to, in its own syntax (a socket path). Never set from a file.
	 */
	const char *target;
} asp_config_view;

/* The config's view; valid until asp_config_free(cfg). */
const asp_config_view *asp_config_get(const asp_config *cfg);

/*
 * The whole validated document as compact JSON, in its version 1 form (a v0 file
 * mapped), keys in file order; valid until asp_config_free(cfg). Every key the schema
 * defines is here, those the view has no field for included.
 */
const char *asp_config_json(const asp_config *cfg);

/*
 * Reads a secret named by an *_env key (a variable name) or an *_file key (a path);
 * either may be NULL. The variable wins when it is set; the file is read otherwise. One
 * trailing newline is stripped. *out is malloc'd (the caller frees it), or NULL with
 * ASP_OK when both names are NULL. Errors name the variable or file: not_found when the
 * variable is unset (and no file given), errors of reading the file, invalid_argument
 * when the secret is empty or holds a NUL byte.
 */
asp_status asp_config_secret(const char *env_name, const char *file_path, char **out,
                             asp_error *err);

/* spec/asp.schema.json as embedded at build; the validator reads the tables asp-sdkgen
 * compiled from it. */
const char *asp_config_schema(void);

#ifdef __cplusplus
}
#endif

#endif
