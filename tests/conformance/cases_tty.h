/* The terminal cases (cases_tty.c), listed in the table of cases.c. */
#ifndef ASP_CONF_CASES_TTY_H
#define ASP_CONF_CASES_TTY_H

#include "conformance.h"

void tty_spawn_basics(conf_ctx *ctx);
void tty_resize_winch(conf_ctx *ctx);
void tty_ctrl_c(conf_ctx *ctx);
void tty_repl(conf_ctx *ctx);
void tty_large_output(conf_ctx *ctx);
void tty_exit_and_signal(conf_ctx *ctx);
void tty_eof(conf_ctx *ctx);
void tty_reattach(conf_ctx *ctx);
void tty_bad_input(conf_ctx *ctx);

#endif
