/* Private alias: the follower routing table is public now (asp/transport.h). */
#ifndef ASP_RPC_PROC_ROUTE_H
#define ASP_RPC_PROC_ROUTE_H

#include "asp/transport.h"

#endif
