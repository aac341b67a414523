/* ASP: one include for the whole public API. */
#ifndef ASP_ASP_H
#define ASP_ASP_H

#include "asp/arena.h"
#include "asp/client.h"
#include "asp/config.h"
#include "asp/proc.h"
#include "asp/proto.h"
#include "asp/status.h"
#include "asp/tools.h"
#include "asp/types.h"

#endif
