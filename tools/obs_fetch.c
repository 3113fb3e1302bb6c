/* SPDX-License-Identifier: MIT */
/* Requests with a body over the control socket (obs_fetch.h). */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "obs_fetch.h"

int cs_obs_cluster_load(const char *cmd, const char *env,
			struct cs_obs_cluster *c)
{
	c->n = cs_ctl_cluster_cli(cmd, env, c->names, CS_OBS_CLI_NODES,
				  c->root, sizeof(c->root), 1);
	return c->n < 0 ? -1 : 0;
}

void cs_obs_node_dir(const struct cs_obs_cluster *c, int i, char *dir,
		     size_t len)
{
	snprintf(dir, len, "%.255s/%.63s", c->root, c->names[i]);
}

static int read_n(int fd, char *p, size_t n, int timeout_ms)
{
	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, timeout_ms);
		ssize_t got;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r ? -errno : -ETIMEDOUT;
		got = recv(fd, p, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got ? -errno : -ECONNRESET;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int cs_obs_fetch(const char *dir, const char *req, char *line, size_t llen,
		 char **body, size_t *blen, int timeout_ms)
{
	int fd = cs_ctl_connect(dir), ret;
	double bytes;

	*body = NULL;
	*blen = 0;
	if (fd < 0)
		return fd;
	ret = cs_ctl_send(fd, req);
	if (!ret)
		ret = cs_ctl_recv(fd, line, llen, timeout_ms);
	if (ret < 0)
		goto out;
	ret = -EPROTO;
	if (strncmp(line, "ok", 2))
		goto out;
	if (cs_ctl_kv(line, "bytes", &bytes) || bytes < 0 || bytes > 1e10)
		goto out; /* not a reply with a body */
	*blen = (size_t)bytes;
	*body = malloc(*blen + 1);
	ret = -ENOMEM;
	if (!*body)
		goto out;
	ret = read_n(fd, *body, *blen, timeout_ms);
	(*body)[*blen] = 0;
	if (ret) {
		free(*body);
		*body = NULL;
		*blen = 0;
	}
out:
	close(fd);
	return ret;
}

int cs_obs_cli_opt(int o, const char **env, void (*usage)(FILE *out))
{
	switch (o) {
	case 'c':
		*env = optarg;
		return -1;
	case 'h':
		usage(stdout);
		return 0;
	default:
		usage(stderr);
		return 2;
	}
}

int cs_obs_cli_num(const char *cmd, const char *opt, const char *arg,
		   double min, double max, double *out)
{
	char *end;

	*out = strtod(arg, &end);
	if (end != arg && !*end && *out >= min && *out <= max)
		return 0;
	fprintf(stderr, "%s: %s wants a number in %g..%g, got '%s'\n", cmd,
		opt, min, max, arg);
	return 2;
}

int cs_obs_cli_rest(const char *cmd, int argc, char **argv,
		    void (*usage)(FILE *out))
{
	if (optind >= argc)
		return 0;
	fprintf(stderr, "%s: unexpected '%s'\n", cmd, argv[optind]);
	usage(stderr);
	return 2;
}
