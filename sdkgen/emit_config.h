/*
 * The .asp.json rules as tables (emit_config.c): spec/asp.schema.json and
 * spec/asp.v0.schema.json compiled into a flat list of nodes per schema, printed as C for
 * the core, as Python and as TypeScript for the SDKs. Each language interprets its tables
 * with one hand-written validator (core/src/config_schema.c, asp/_config_check.py,
 * src/configCheck.ts); every text a message quotes from the schema ("expected ...", the
 * known keys, the condition of an "if") is made here, once, for all three.
 */
#ifndef ASP_SDKGEN_EMIT_CONFIG_H
#define ASP_SDKGEN_EMIT_CONFIG_H

#include <stdio.h>

#include "spec.h"

/* The C tables (asp_cs_v1, asp_cs_v0 of core/src/config_schema.h) into `out`. Returns 0, or
 * -1 after saying why: a schema that does not parse or uses a construct the validators do
 * not implement. */
int emit_config_c(const sdk_options *o, FILE *out);

/* The tables of one SDK: asp/_config_tables.py or src/configTables.ts under o->out_dir,
 * recorded in the stamp. `lang` is "python" or "typescript". */
int emit_config_sdk(const sdk_options *o, const char *lang);

#endif
