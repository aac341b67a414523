/*
 * The local backend: every unary op done with POSIX calls in this process. asp-agent
 * serves it to remote clients; tests and the CLI may call it directly. Relative paths
 * resolve against the process's working directory (the responder's start directory).
 */
#ifndef ASP_LOCAL_H
#define ASP_LOCAL_H

#include "asp/proto.h"

#include <stddef.h>

typedef struct asp_local asp_local;

/*
 * A backend whose responses fit `max_message` bytes (exec output trimmed, read length
 * capped); 0 means ASP_MAX_MESSAGE_DEFAULT. NULL when out of memory.
 */
asp_local *asp_local_new(size_t max_message);

/* NULL is a no-op. No call may be in flight. */
void asp_local_free(asp_local *l);

/*
 * self is an asp_local *. Every op may block (exec until the process ends) and may be
 * called from many threads at once. The streaming ops (spawn, proc_*) are NULL: run the
 * table through asp_ops_complete() to have them answer `unsupported`.
 */
extern const asp_ops asp_local_ops;

#endif
