/*
 * Opening a client from a loaded config. Apart from client.c so that a program using
 * only asp_client_open_view does not pull in the config parser.
 */
#include "asp/client.h"
#include "asp/transport.h"

asp_status asp_client_open(const asp_config *cfg, asp_client **out, asp_error *err)
{
	*out = NULL;
	if (!cfg)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_client_open: no config given");
	return asp_client_open_view(asp_config_get(cfg), out, err);
}

asp_status asp_client_open_path(const char *config_path, asp_client **out, asp_error *err)
{
	*out = NULL;
	asp_config *cfg;
	asp_status st = asp_config_load(config_path, &cfg, err);
	if (st)
		return st;
	st = asp_client_open(cfg, out, err);
	asp_config_free(cfg);
	return st;
}
