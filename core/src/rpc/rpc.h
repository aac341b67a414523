/*
 * Private to the core: the RPC engine (asp/channel.h declares its public calls) with
 * the core's own headers it is built on.
 */
#ifndef ASP_RPC_RPC_H
#define ASP_RPC_RPC_H

#include "asp/channel.h"
#include "asp/transport.h"
#include "channel.h"
#include "proto_desc.h"

#endif
