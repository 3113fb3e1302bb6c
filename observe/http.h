/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus endpoint: GET /metrics over HTTP, served by libmicrohttpd
 * on a thread of its own. It calls @fill for each scrape; @fill reads only
 * what the lcores publish (observe/metrics.h) and counters meant for
 * concurrent readers.
 */
#ifndef CS_OBSERVE_HTTP_H
#define CS_OBSERVE_HTTP_H

#include <stdio.h>

struct cs_obs_http;

/**
 * cs_obs_http_start - listen on @listen ("IPv4:PORT"; "*" or 0.0.0.0 for
 * every address) and serve /metrics with what @fill writes
 * Returns: 0 and the server in @out, -EINVAL for a bad address, or
 * -EADDRINUSE / another negative errno when it cannot listen.
 */
int cs_obs_http_start(const char *listen, int (*fill)(FILE *out, void *arg),
		      void *arg, struct cs_obs_http **out);

/* cs_obs_http_port - the port it listens on (useful with port 0) */
unsigned cs_obs_http_port(const struct cs_obs_http *h);

void cs_obs_http_stop(struct cs_obs_http *h);

/**
 * cs_obs_parse_addr - split "IP:PORT" (IP may be "*")
 * Returns: 0, or -EINVAL.
 */
int cs_obs_parse_addr(const char *s, unsigned char ip[4], unsigned *port);

#endif
