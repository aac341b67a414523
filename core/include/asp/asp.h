/*
 * ASP: one include for the client API. Transport authors add asp/transport.h and
 * asp/channel.h, server edges asp/server.h (docs/transports.md).
 */
#ifndef ASP_ASP_H
#define ASP_ASP_H

#include "asp/arena.h"
#include "asp/client.h"
#include "asp/config.h"
#include "asp/proc.h"
#include "asp/proto.h"
#include "asp/status.h"
#include "asp/tools.h"
#include "asp/tree.h"
#include "asp/types.h"
#include "asp/workspace.h"

#endif
