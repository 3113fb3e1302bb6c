/* SPDX-License-Identifier: MIT */
/* The Prometheus endpoint over libmicrohttpd (http.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "metrics"
#include "internal/log.h"
#include "observe/http.h"

struct cs_obs_http {
	struct MHD_Daemon *mhd;
	int (*fill)(FILE *out, void *arg);
	void *arg;
	unsigned port;
};

int cs_obs_parse_addr(const char *s, unsigned char ip[4], unsigned *port)
{
	const char *colon = strrchr(s, ':');
	char host[64], *end;
	unsigned long p;
	struct in_addr a;

	if (!colon || colon == s || (size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || p > 65535)
		return -EINVAL;
	if (!strcmp(host, "*"))
		a.s_addr = htonl(INADDR_ANY);
	else if (inet_pton(AF_INET, host, &a) != 1)
		return -EINVAL;
	memcpy(ip, &a.s_addr, 4);
	*port = (unsigned)p;
	return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code,
			     char *text, size_t len, const char *type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		len, text, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_len, void **state)
{
	struct cs_obs_http *h = cls;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)state;
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED,
			     strdup("GET /metrics only\n"), 18, "text/plain");
	if (strcmp(url, "/metrics"))
		return reply(c, MHD_HTTP_NOT_FOUND,
			     strdup("not found: try /metrics\n"), 24,
			     "text/plain");
	f = open_memstream(&text, &len);
	if (!f)
		return MHD_NO;
	if (h->fill(f, h->arg)) {
		fclose(f);
		free(text);
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
			     strdup("metrics unavailable\n"), 20,
			     "text/plain");
	}
	fclose(f);
	return reply(c, MHD_HTTP_OK, text, len,
		     "text/plain; version=0.0.4; charset=utf-8");
}

int cs_obs_http_start(const char *listen, int (*fill)(FILE *out, void *arg),
		      void *arg, struct cs_obs_http **out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	const union MHD_DaemonInfo *di;
	struct cs_obs_http *h;
	unsigned char ip[4];
	unsigned port;

	if (cs_obs_parse_addr(listen, ip, &port))
		return -EINVAL;
	memcpy(&sa.sin_addr.s_addr, ip, 4);
	sa.sin_port = htons((uint16_t)port);
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->fill = fill;
	h->arg = arg;
	errno = 0;
	h->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
					  MHD_USE_ERROR_LOG,
				  (uint16_t)port, NULL, NULL, handle, h,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				  MHD_OPTION_CONNECTION_LIMIT, 16u,
				  MHD_OPTION_CONNECTION_TIMEOUT, 10u,
				  MHD_OPTION_END);
	if (!h->mhd) {
		int err = errno ? errno : EADDRINUSE;

		free(h);
		return -err;
	}
	di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
	h->port = di ? di->port : port;
	*out = h;
	return 0;
}

unsigned cs_obs_http_port(const struct cs_obs_http *h)
{
	return h->port;
}

void cs_obs_http_stop(struct cs_obs_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->mhd);
	free(h);
}
