/* SPDX-License-Identifier: MIT */
/* The parameter-server scenario (sim/ps.c): `collstack sim ps`, and the
 * test binary tests/ps/ps_scen. */
#ifndef CS_SIM_PS_H
#define CS_SIM_PS_H

#include <stdbool.h>

/**
 * cs_sim_ps - run the PS scenario with the options in @argv (argv[0] is
 * the command's name)
 * @tp: the default carrier: true, the transport core (cs_ps_flow);
 *	false, the PS messages themselves over the lossy queue (--carrier
 *	overrides it)
 *
 * A one-shot program, not a library call: it prints "ps ok ..." and
 * returns 0, or prints "ps FAIL ..." and exits 1 (usage: exits 2).
 */
int cs_sim_ps(int argc, char **argv, bool tp);

#endif
