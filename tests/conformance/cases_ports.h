/* The ports and changes cases (cases_ports.c), listed in the table of cases.c. */
#ifndef ASP_CONF_CASES_PORTS_H
#define ASP_CONF_CASES_PORTS_H

#include "conformance.h"

void connect_echo_and_half_close(conf_ctx *ctx);
void connect_large_round_trip(conf_ctx *ctx);
void connect_kill_and_errors(conf_ctx *ctx);
void watch_changes(conf_ctx *ctx);
void watch_bad_input(conf_ctx *ctx);

#endif
