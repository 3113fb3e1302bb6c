/* SPDX-License-Identifier: MIT */
/* All transport tunables in one struct: defaults and set-by-key. */
#include <errno.h>
#include <string.h>

#include "control/xport.h"

int cs_xport_params_default(struct cs_xport_params *xp)
{
	memset(xp, 0, sizeof(*xp));
	if (cs_cfg_defaults(cs_rel_cfg, cs_rel_cfg_len, &xp->rel) ||
	    cs_cfg_defaults(cs_pacer_cfg, cs_pacer_cfg_len, &xp->pacer) ||
	    cs_cfg_defaults(cs_cc_cfg, cs_cc_cfg_len, &xp->cc))
		return -EINVAL;
	return 0;
}

int cs_xport_params_set(struct cs_xport_params *xp, const char *key,
			const char *value, char *err, size_t errlen)
{
	if (!strncmp(key, "rel.", 4))
		return cs_cfg_set(cs_rel_cfg, cs_rel_cfg_len, &xp->rel, key,
				  value, err, errlen);
	if (!strncmp(key, "pacer.", 6))
		return cs_cfg_set(cs_pacer_cfg, cs_pacer_cfg_len, &xp->pacer,
				  key, value, err, errlen);
	if (!strncmp(key, "cc.", 3))
		return cs_cfg_set(cs_cc_cfg, cs_cc_cfg_len, &xp->cc, key, value,
				  err, errlen);
	if (err)
		snprintf(err, errlen, "unknown config key '%s'", key);
	return -ENOENT;
}

void cs_xport_params_help(FILE *out)
{
	cs_cfg_help(cs_rel_cfg, cs_rel_cfg_len, out);
	cs_cfg_help(cs_pacer_cfg, cs_pacer_cfg_len, out);
	cs_cfg_help(cs_cc_cfg, cs_cc_cfg_len, out);
}
