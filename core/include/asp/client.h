/* The client handle: one per sandbox, safe to share between threads. */
#ifndef ASP_CLIENT_H
#define ASP_CLIENT_H

#include "asp/config.h"
#include "asp/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Opens a client for the sandbox `cfg` names, over the transport it names. The config
 * is copied what it needs; `cfg` may be freed afterwards. Connecting may be deferred to
 * the first call. Free with asp_client_free.
 */
asp_status asp_client_open(const asp_config *cfg, asp_client **out, asp_error *err);

/*
 * Loads the config at `config_path` (NULL: discovery, docs/design.md, ".asp.json") and opens a
 * client.
 */
asp_status asp_client_open_path(const char *config_path, asp_client **out, asp_error *err);

/* Fails every call in flight with transport_error, closes, frees. NULL is a no-op. */
void asp_client_free(asp_client *c);

/* The config the client was opened with; valid until asp_client_free. */
const asp_config_view *asp_client_config(const asp_client *c);

#ifdef __cplusplus
}
#endif

#endif
