/*
 * The client as an op table (self = asp_client *), so code written against asp_ops — the
 * conformance suite — runs through the client's config handling and transport unchanged.
 */
#include "cli.h"

#define THUNK(op)                                                                                  \
	static asp_status thunk_##op(void *self, const asp_##op##_params *p, asp_##op##_result *r, \
	                             asp_arena *a, asp_error *err)                                 \
	{                                                                                          \
		return asp_##op((asp_client *)self, p, r, a, err);                                 \
	}

THUNK(hello)
THUNK(exec)
THUNK(read)
THUNK(write)
THUNK(stat)
THUNK(list)
THUNK(mkdir)
THUNK(remove)
THUNK(rename)
THUNK(spawn)
THUNK(proc_write)
THUNK(proc_signal)
THUNK(proc_wait)
THUNK(proc_list)
THUNK(proc_attach)

const asp_ops cli_client_ops = {
    .hello = thunk_hello,
    .exec = thunk_exec,
    .read = thunk_read,
    .write = thunk_write,
    .stat = thunk_stat,
    .list = thunk_list,
    .mkdir = thunk_mkdir,
    .remove = thunk_remove,
    .rename = thunk_rename,
    .spawn = thunk_spawn,
    .proc_write = thunk_proc_write,
    .proc_signal = thunk_proc_signal,
    .proc_wait = thunk_proc_wait,
    .proc_list = thunk_proc_list,
    .proc_attach = thunk_proc_attach,
};
