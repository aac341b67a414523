/*
 * Test helper: a TCP relay on a free loopback port in front of a real listener. Each
 * connection it accepts is relayed to the upstream port byte for byte by a thread of its
 * own, which counts the bytes each way and keeps the first bytes the client sent, so a
 * test can tell POST /v1/rpc connections from GET /v1/ws upgrades and see which one
 * carried a transfer; and it can cut the connections of one kind, as a network that
 * drops them would.
 */
#ifndef ASP_TEST_TCP_RELAY_H
#define ASP_TEST_TCP_RELAY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tcp_relay tcp_relay;

/* What the connections whose first bytes start with a prefix carried. */
typedef struct relay_count {
	unsigned conns; /* accepted so far */
	unsigned open;  /* not yet ended */
	uint64_t up;    /* bytes client → listener */
	uint64_t down;  /* bytes listener → client */
} relay_count;

/* Listens on 127.0.0.1:0 and relays to 127.0.0.1:`upstream_port`; NULL on failure. */
tcp_relay *tcp_relay_start(int upstream_port);

/* "http://127.0.0.1:PORT" */
const char *tcp_relay_url(const tcp_relay *r);

/* The totals over the connections whose first bytes start with `prefix`. */
relay_count tcp_relay_count(tcp_relay *r, const char *prefix);

/*
 * Waits up to `ms` until at most `n` connections starting with `prefix` are open (a cut
 * one ends when its thread has seen both sides go). Whether that came.
 */
bool tcp_relay_wait_open(tcp_relay *r, const char *prefix, unsigned n, int ms);

/* Cuts (shutdown both ways, both sides) every open connection starting with `prefix`. */
unsigned tcp_relay_cut(tcp_relay *r, const char *prefix);

/* Stops accepting, cuts every connection, waits for the threads, frees. NULL: no-op. */
void tcp_relay_stop(tcp_relay *r);

#endif
