/* SPDX-License-Identifier: MIT */
/*
 * The sidecar's local control socket: a Unix stream socket at
 * <run_dir>/ctl.sock speaking one text line each way per request
 * ("ping", "stats", "raw DST MS LEN", "allreduce ...", "quit"). The CLI
 * (collstack bench raw, collstack run) uses it to command the sidecars that
 * scripts/cluster.sh started; a path socket, unlike an abstract one, is
 * reachable from every network namespace.
 */
#ifndef CS_TOOLS_CTL_H
#define CS_TOOLS_CTL_H

#include <stddef.h>

#define CS_CTL_SOCK "ctl.sock"
#define CS_CTL_LINE 4096

/**
 * cs_ctl_connect - connect to the control socket in @run_dir
 * Returns: a socket, or a negative errno.
 */
int cs_ctl_connect(const char *run_dir);

/**
 * cs_ctl_send - send one request line (a newline is added)
 * Returns: 0 or a negative errno.
 */
int cs_ctl_send(int fd, const char *line);

/**
 * cs_ctl_recv - read one reply line (without the newline) into @buf
 * @timeout_ms: give up after this long (-1: never)
 * Returns: its length, -ETIMEDOUT, or a negative errno.
 */
int cs_ctl_recv(int fd, char *buf, size_t len, int timeout_ms);

/**
 * cs_ctl_call - connect, send @req, read the reply, close
 * Returns: 0 when the reply starts with "ok", -EPROTO for an "err" reply
 * (kept in @reply), or a negative errno.
 */
int cs_ctl_call(const char *run_dir, const char *req, char *reply, size_t len,
		int timeout_ms);

/**
 * cs_ctl_kv - find "key=value" in a reply line and parse the value
 * Returns: 0, or -ENOENT when the key is missing.
 */
int cs_ctl_kv(const char *line, const char *key, double *out);

/**
 * cs_ctl_word - copy the value of "key=value" in a reply line (up to the
 * next space) into @out
 * Returns: 0, -ENOENT when the key is missing, -ENOSPC when the value
 * does not fit @len.
 */
int cs_ctl_word(const char *line, const char *key, char *out, size_t len);

/**
 * cs_ctl_cluster - read the node names and run folder that
 * scripts/cluster.sh recorded in @env_file (CS_NODES=..., CS_RUN=...)
 * @names: receives up to @max names (each CS_CTL_NAME_MAX bytes)
 * Returns: the number of nodes, or a negative errno.
 */
#define CS_CTL_NAME_MAX 64
int cs_ctl_cluster(const char *env_file, char (*names)[CS_CTL_NAME_MAX],
		   int max, char *run_root, size_t run_len);

/* The state file scripts/cluster.sh writes by default. */
#define CS_CTL_DEFAULT_ENV "/run/collstack/cluster.env"

/**
 * cs_ctl_env - the state file a CLI command reads: $CS_CLUSTER_ENV if set,
 * else CS_CTL_DEFAULT_ENV
 */
const char *cs_ctl_env(void);

/**
 * cs_ctl_cluster_cli - cs_ctl_cluster() for a CLI command: with fewer than
 * @min nodes (or none readable) it says why on stderr, prefixed by @cmd
 * Returns: the number of nodes, or -1.
 */
int cs_ctl_cluster_cli(const char *cmd, const char *env_file,
		       char (*names)[CS_CTL_NAME_MAX], int max, char *run_root,
		       size_t run_len, int min);

#endif
