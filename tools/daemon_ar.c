/* SPDX-License-Identifier: MIT */
/* collstackd's collective service: not wired yet (no engine). */
#include <errno.h>

#include "daemon.h"

int cs_daemon_conf_defaults(struct cs_daemon_conf *c)
{
	(void)c;
	return 0;
}

int cs_daemon_set_key(struct cs_daemon_conf *c, const char *key,
		      const char *val, char *err, size_t errlen)
{
	(void)c;
	(void)val;
	if (err)
		snprintf(err, errlen, "unknown config key '%s'", key);
	return -ENOENT;
}

void cs_daemon_help_config(FILE *out)
{
	(void)out;
}

int cs_daemon_init(struct cs_daemon *d)
{
	(void)d;
	return 0;
}

void cs_daemon_fini(struct cs_daemon *d)
{
	(void)d;
}

int cs_daemon_ctl(struct cs_daemon *d, const char *req, const char *args,
		  char *out, size_t len)
{
	(void)d;
	(void)req;
	(void)args;
	(void)out;
	(void)len;
	return -ENOENT;
}

void cs_daemon_tick(struct cs_daemon *d)
{
	(void)d;
}
