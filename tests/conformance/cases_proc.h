/* The streaming cases (cases_proc.c), listed in the table of cases.c. */
#ifndef ASP_CONF_CASES_PROC_H
#define ASP_CONF_CASES_PROC_H

#include "conformance.h"

void spawn_output_live(conf_ctx *ctx);
void spawn_output_order(conf_ctx *ctx);
void spawn_stdin_binary(conf_ctx *ctx);
void spawn_timeout_kills_group(conf_ctx *ctx);
void spawn_slow_reader_bounded(conf_ctx *ctx);
void spawn_errors(conf_ctx *ctx);
void proc_signal_each(conf_ctx *ctx);
void proc_wait_timeout(conf_ctx *ctx);
void proc_list_fields(conf_ctx *ctx);
void proc_list_retains_64(conf_ctx *ctx);
void proc_attach_retained(conf_ctx *ctx);
void proc_attach_replay(conf_ctx *ctx);
void proc_attach_truncated(conf_ctx *ctx);
void proc_attach_after_close(conf_ctx *ctx);

#endif
