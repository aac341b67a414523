/* A WebSocket message received in fragments, kept up to a size (exec-server, the page). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cli_ws_rx_add(cli_ws_rx *rx, const void *in, size_t len, size_t max)
{
	if (rx->over || rx->len + len > max) {
		rx->over = true;
		return;
	}
	char *grown = realloc(rx->buf, rx->len + len + 1);
	if (!grown) {
		rx->over = true;
		return;
	}
	memcpy(grown + rx->len, in, len);
	rx->buf = grown;
	rx->len += len;
}

void cli_ws_rx_reset(cli_ws_rx *rx)
{
	free(rx->buf);
	rx->buf = NULL;
	rx->len = 0;
	rx->over = false;
}
