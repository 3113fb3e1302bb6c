/* SPDX-License-Identifier: MIT */
/*
 * What `collstack trace`, `top` and `doctor` share: the cluster's nodes
 * and a request whose reply line ("ok ... bytes=N") is followed by N
 * bytes of body (observe/obs_sidecar.h lists the requests).
 */
#ifndef CS_TOOLS_OBS_FETCH_H
#define CS_TOOLS_OBS_FETCH_H

#include <stddef.h>
#include <stdio.h>

#include "sidecar/ctl.h"

#define CS_OBS_CLI_NODES 64

struct cs_obs_cluster {
	int n;
	char names[CS_OBS_CLI_NODES][CS_CTL_NAME_MAX];
	char root[256];
};

/**
 * cs_obs_cluster_load - the nodes of @env (the state file of
 * scripts/cluster.sh); says why on stderr, prefixed by @cmd, on failure
 * Returns: 0, or -1.
 */
int cs_obs_cluster_load(const char *cmd, const char *env,
			struct cs_obs_cluster *c);

/* cs_obs_node_dir - the run folder of node @i */
void cs_obs_node_dir(const struct cs_obs_cluster *c, int i, char *dir,
		     size_t len);

/**
 * cs_obs_fetch - send @req to the sidecar in @dir, read its reply line
 * into @line and its body into a malloc()ed *@body of *@blen bytes (NUL
 * terminated); an "err" reply is -EPROTO with the line kept
 * Returns: 0 or a negative errno.
 */
int cs_obs_fetch(const char *dir, const char *req, char *line, size_t llen,
		 char **body, size_t *blen, int timeout_ms);

/**
 * cs_obs_cli_opt - the options trace, top and doctor share: --cluster
 * FILE (getopt value 'c'), --help ('h') and anything unknown
 * Returns: -1 when parsing goes on, else the exit status to return now
 * (0 after --help, 2 after a bad option, @usage printed).
 */
int cs_obs_cli_opt(int o, const char **env, void (*usage)(FILE *out));

/**
 * cs_obs_cli_num - parse option @opt's value @arg into @out, a number in
 * [@min, @max] (says why on stderr, prefixed by @cmd)
 * Returns: 0, or 2 (the exit status of a bad argument).
 */
int cs_obs_cli_num(const char *cmd, const char *opt, const char *arg,
		   double min, double max, double *out);

/**
 * cs_obs_cli_rest - refuse arguments left after the options
 * Returns: 0, or 2 with the reason and @usage on stderr.
 */
int cs_obs_cli_rest(const char *cmd, int argc, char **argv,
		    void (*usage)(FILE *out));

#endif
