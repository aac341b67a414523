/* asp-agent --listen / --relay (listen.c), present when built with HTTP support. */
#ifndef ASP_AGENT_LISTEN_H
#define ASP_AGENT_LISTEN_H

#include <stdbool.h>

/* Whether the command line asks for --listen or --relay. */
bool asp_agent_listen_wanted(int argc, char **argv);

/* Whether it asks for --relay (which runs no command of its own). */
bool asp_agent_relay_wanted(int argc, char **argv);

/*
 * Parses --listen ADDR | --relay unix:PATH, --token-file FILE, --tls-cert FILE,
 * --tls-key FILE and runs the listener or the relay. Returns the exit code.
 */
int asp_agent_listen_main(int argc, char **argv);

#endif
