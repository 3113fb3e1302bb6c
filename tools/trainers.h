/* SPDX-License-Identifier: MIT */
/*
 * Trainer processes for the CLI's commands that run through real
 * sidecars (collstack bench -o OP, collstack run mixed --trainers T):
 * T processes per node of a scripts/cluster.sh cluster, started in the
 * node's namespace and connected to its sidecar.
 */
#ifndef CS_TOOLS_TRAINERS_H
#define CS_TOOLS_TRAINERS_H

#include <stdbool.h>

#define CS_TRAINERS_MAX_NODES 64
#define CS_TRAINERS_MAX_TPN 16

struct cs_trainers {
	const char *cmd; /* prefix of messages, e.g. "collstack bench" */
	const char *env; /* the cluster file */
	const char *prog; /* trainer binary; NULL or "": @default_name */
	const char *default_name; /* a binary next to this one */
	char *const *args; /* the trainer's argv[1..], NULL-terminated */
	int tpn; /* trainers per node, 1 .. CS_TRAINERS_MAX_TPN */
	bool netns; /* `ip netns exec NODE` (false: sidecars on loopback) */
	bool pin; /* on the sidecar's CPUs when it is pinned */
	unsigned timeout_s; /* then every trainer is stopped */
	bool all_output; /* keep every trainer's stdout, not rank 0's only */
};

/**
 * cs_trainers_run - start the trainers and wait for all of them
 * @t: what to start
 *
 * Node i's trainers are global ranks i*T .. i*T+T-1 (node order of the
 * cluster file), with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
 * COLLSTACK_SOCKET set; rank 0's stdout is kept, every other trainer's is
 * dropped (stderr is kept). A banner line starting with '#' is printed
 * first.
 *
 * Returns: 0 when every trainer exited 0; else 1, with what failed
 * (which rank, its exit status, a timeout) said on stderr.
 */
int cs_trainers_run(const struct cs_trainers *t);

#endif
