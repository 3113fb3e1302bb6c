// SPDX-License-Identifier: MIT
/* ps_scen: the PS scenario (sim/ps.c), carrying the PS messages over the
 * lossy queue unless --carrier tp is given. */
#include "sim/ps.h"

int main(int argc, char **argv)
{
	return cs_sim_ps(argc, argv, false);
}
