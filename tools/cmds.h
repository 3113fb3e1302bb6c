/* SPDX-License-Identifier: MIT */
/* Subcommands of the collstack CLI: each returns the process exit code. */
#ifndef CS_TOOLS_CMDS_H
#define CS_TOOLS_CMDS_H

#include <stdbool.h>
#include <stdio.h>

int cs_cmd_selftest(int argc, char **argv);
int cs_cmd_bench_ring(int argc, char **argv);
int cs_cmd_bench_reduce(int argc, char **argv);
/* bench-reduce with default settings; quick: small sizes, for selftest. */
int cs_bench_reduce_run(FILE *out, bool quick);

#endif
