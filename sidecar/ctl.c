/* SPDX-License-Identifier: MIT */
/* Client side of the sidecar control socket, and the cluster state file. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"

int cs_ctl_connect(const char *run_dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, n;

	n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", run_dir,
		     CS_CTL_SOCK);
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		n = -errno;
		close(fd);
		return n;
	}
	return fd;
}

int cs_ctl_send(int fd, const char *line)
{
	size_t len = strlen(line), off = 0;
	char buf[CS_CTL_LINE];

	if (len + 2 > sizeof(buf))
		return -E2BIG;
	memcpy(buf, line, len);
	buf[len++] = '\n';
	while (off < len) {
		ssize_t w = send(fd, buf + off, len - off, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (size_t)w;
	}
	return 0;
}

int cs_ctl_recv(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t off = 0;

	while (off + 1 < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, timeout_ms);
		ssize_t got;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		got = recv(fd, buf + off, 1, 0); /* a line is short */
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -ECONNRESET;
		if (buf[off] == '\n') {
			buf[off] = 0;
			return (int)off;
		}
		off++;
	}
	buf[off] = 0;
	return -EMSGSIZE;
}

int cs_ctl_call(const char *run_dir, const char *req, char *reply, size_t len,
		int timeout_ms)
{
	int fd = cs_ctl_connect(run_dir), ret;

	if (fd < 0)
		return fd;
	ret = cs_ctl_send(fd, req);
	if (!ret)
		ret = cs_ctl_recv(fd, reply, len, timeout_ms);
	close(fd);
	if (ret < 0)
		return ret;
	return strncmp(reply, "ok", 2) ? -EPROTO : 0;
}

int cs_ctl_kv(const char *line, const char *key, double *out)
{
	size_t kl = strlen(key);
	const char *p = line;

	while ((p = strstr(p, key))) {
		if ((p == line || p[-1] == ' ') && p[kl] == '=') {
			*out = strtod(p + kl + 1, NULL);
			return 0;
		}
		p += kl;
	}
	return -ENOENT;
}

int cs_ctl_word(const char *line, const char *key, char *out, size_t len)
{
	size_t kl = strlen(key), n;
	const char *p = line;

	while ((p = strstr(p, key))) {
		if ((p == line || p[-1] == ' ') && p[kl] == '=') {
			p += kl + 1;
			n = strcspn(p, " \n");
			if (n >= len)
				return -ENOSPC;
			memcpy(out, p, n);
			out[n] = 0;
			return 0;
		}
		p += kl;
	}
	return -ENOENT;
}

int cs_ctl_cluster(const char *env_file, char (*names)[CS_CTL_NAME_MAX],
		   int max, char *run_root, size_t run_len)
{
	char line[4096];
	int n = 0;
	FILE *f = fopen(env_file, "r");

	if (!f)
		return -errno;
	run_root[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		char *v, *tok, *save = NULL;

		line[strcspn(line, "\n")] = 0;
		v = strchr(line, '=');
		if (!v)
			continue;
		*v++ = 0;
		if (*v == '"' || *v == '\'') {
			v++;
			v[strcspn(v, "\"'")] = 0;
		}
		if (!strcmp(line, "CS_RUN"))
			snprintf(run_root, run_len, "%s", v);
		if (strcmp(line, "CS_NODES"))
			continue;
		for (tok = strtok_r(v, " ", &save); tok && n < max;
		     tok = strtok_r(NULL, " ", &save))
			snprintf(names[n++], CS_CTL_NAME_MAX, "%s", tok);
	}
	fclose(f);
	return run_root[0] ? n : -EINVAL;
}

const char *cs_ctl_env(void)
{
	const char *e = getenv("CS_CLUSTER_ENV");

	return e && *e ? e : CS_CTL_DEFAULT_ENV;
}

int cs_ctl_cluster_cli(const char *cmd, const char *env_file,
		       char (*names)[CS_CTL_NAME_MAX], int max, char *run_root,
		       size_t run_len, int min)
{
	int n = cs_ctl_cluster(env_file, names, max, run_root, run_len);

	if (n >= min)
		return n;
	if (n < 0)
		fprintf(stderr,
			"%s: %s: %s (start a cluster with scripts/cluster.sh "
			"up N)\n",
			cmd, env_file, strerror(-n));
	else
		fprintf(stderr, "%s: %s lists %d node(s), need %d\n", cmd,
			env_file, n, min);
	return -1;
}
