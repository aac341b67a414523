/*
 * The way to the sandbox, assembled from its route (asp/ssh_route.h): the proxy command
 * (when there is one) carries the connection to the first host; each jump host then
 * opens a direct-tcpip channel to the next and relays it; the sandbox's session runs
 * over what the last one gives. Without either, nothing runs here and libssh makes the
 * TCP connection itself.
 */
#include "ssh_via.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ssh_via {
	asp_ssh_route *route;
	asp_config_view target; /* the caller's config with the resolved sandbox keys */
	ssh_proxy *proxy;
	ssh_hop **hops;
	size_t nhops;
};

/*
 * How long a failure may wait for the proxy command's exit, to quote how it ended: up
 * to 500 ms, within what is left of the connect timeout counted from `t0`.
 */
static unsigned exit_wait(const struct timespec *t0, unsigned timeout_ms)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t spent =
	    (int64_t)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
	int64_t left = (int64_t)(timeout_ms ? timeout_ms : 10000) - spent;
	return left <= 0 ? 0 : left < 500 ? (unsigned)left : 500;
}

asp_status ssh_via_open(const asp_config_view *cfg, ssh_via **out, const asp_config_view **target,
                        int *fd, asp_error *err)
{
	*out = NULL;
	*fd = -1;
	ssh_via *v = calloc(1, sizeof *v);
	if (!v)
		return asp_error_oom(err, "ssh", NULL);
	asp_status st = asp_ssh_route_resolve(cfg, &v->route, err);
	if (st != ASP_OK) {
		free(v);
		return st;
	}
	const asp_ssh_route_view *r = asp_ssh_route_get(v->route);
	v->target = *cfg;
	v->target.ssh = r->hops[r->hop_count - 1].ssh;
	if (r->hop_count > 1 && !(v->hops = calloc(r->hop_count - 1, sizeof *v->hops))) {
		ssh_via_free(v);
		return asp_error_oom(err, "ssh", NULL);
	}
	int carry = -1;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (r->proxy_command &&
	    (st = ssh_proxy_start(r->proxy_command, &v->proxy, &carry, err)) != ASP_OK) {
		ssh_via_free(v);
		return st;
	}
	for (size_t i = 0; i + 1 < r->hop_count; i++) {
		const asp_ssh_hop *h = &r->hops[i], *next = &r->hops[i + 1];
		char label[400], at[300];
		asp_ssh_hop_label(h, at, sizeof at);
		snprintf(label, sizeof label, "jump host %zu of %zu (%s, %s)", i + 1,
		         r->hop_count - 1, h->name, at);
		st = ssh_hop_open(h, cfg->path, label, carry, next->ssh.host, next->ssh.port,
		                  &v->hops[i], &carry, err);
		if (st != ASP_OK) {
			if (i == 0 && v->proxy) {
				char why[700];
				ssh_proxy_explain(v->proxy,
				                  exit_wait(&t0, h->ssh.connect_timeout_ms), why,
				                  sizeof why);
				asp_error_hint(err, why);
			}
			ssh_via_free(v);
			return st;
		}
		v->nhops++;
	}
	*out = v;
	*target = &v->target;
	*fd = carry;
	return ASP_OK;
}

void ssh_via_explain(ssh_via *v, unsigned wait_ms, char *out, size_t cap)
{
	out[0] = '\0';
	if (!v)
		return;
	/* the hop nearest the sandbox that saw its relay end says the most */
	for (size_t i = v->nhops; i-- > 0;) {
		if (ssh_hop_explain(v->hops[i], out, cap))
			return;
	}
	if (v->proxy)
		ssh_proxy_explain(v->proxy, wait_ms, out, cap);
}

void ssh_via_free(ssh_via *v)
{
	if (!v)
		return;
	/* the sandbox's end first, then the way back to here */
	for (size_t i = v->nhops; i-- > 0;)
		ssh_hop_free(v->hops[i]);
	free(v->hops);
	ssh_proxy_free(v->proxy);
	asp_ssh_route_free(v->route);
	free(v);
}
