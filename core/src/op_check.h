/* asp_check_write_params is public (asp/transport.h): backends share it. */
#ifndef ASP_OP_CHECK_H
#define ASP_OP_CHECK_H

#include "asp/transport.h"

#endif
