/* SPDX-License-Identifier: MIT */
/* Subcommands of the collstack CLI: each returns the process exit code. */
#ifndef CS_TOOLS_CMDS_H
#define CS_TOOLS_CMDS_H

int cs_cmd_selftest(int argc, char **argv);
int cs_cmd_bench_ring(int argc, char **argv);
int cs_cmd_bench(int argc, char **argv);

#endif
