/* Checks of op params that every backend makes alike, so the same input gets the same answer. */
#ifndef ASP_OP_CHECK_H
#define ASP_OP_CHECK_H

#include "asp/proto.h"

/* write: offset with append/atomic, mode beyond 07777, offset out of range. */
asp_status asp_check_write_params(const asp_write_params *p, asp_error *err);

#endif
