/*
 * Private to the core and its tests: what is inside an asp_request and an asp_reply
 * (asp/server.h), for a harness that serves them with an op table of its own
 * (tests/fuzz/fuzz_http.c).
 */
#ifndef ASP_EDGE_H
#define ASP_EDGE_H

#include "asp/server.h"
#include "wire.h"

/* The decoded message (asp_request_decode returned ASP_OK), else NULL. */
const asp_msg *asp_request_msg(const asp_request *r);

/* The buffer the answer is built in. */
asp_buf *asp_reply_buf(asp_reply *b);

#endif
