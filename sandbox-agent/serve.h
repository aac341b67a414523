/* asp-agent's stdio server: frames on stdin, answers on stdout, many requests at once. */
#ifndef ASP_AGENT_SERVE_H
#define ASP_AGENT_SERVE_H

#include <stddef.h>

/*
 * Serves a new local backend over fds `in` and `out` until EOF on `in` (then ends the
 * spawned processes, answers what is in flight and returns 0) or a protocol error
 * (logged to stderr; the requests read before it are answered, then the output closes
 * and it returns 1). Requests are decoded within a memory budget of 4 x max_message
 * (docs/faults.md). Logs go to stderr only.
 */
int asp_agent_serve_stdio(int in, int out, size_t max_message);

#endif
