/* The tree cases (cases_tree.c), listed in the table of cases.c. */
#ifndef ASP_CONF_CASES_TREE_H
#define ASP_CONF_CASES_TREE_H

#include "conformance.h"

void tree_write_small(conf_ctx *ctx);
void tree_write_chunked(conf_ctx *ctx);
void tree_write_merge(conf_ctx *ctx);
void tree_write_hostile(conf_ctx *ctx);
void tree_write_cancel(conf_ctx *ctx);
void tree_write_empty_path(conf_ctx *ctx);
void tree_read_roundtrip(conf_ctx *ctx);
void tree_read_errors(conf_ctx *ctx);
void tree_read_empty_path(conf_ctx *ctx);

#endif
