/* SPDX-License-Identifier: MIT */
/* The runtime config table: parse, default, bound-check and describe. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal/config.h"

static const struct cs_cfg_entry *find(const struct cs_cfg_entry *tab, size_t n,
				       const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(tab[i].name, name))
			return &tab[i];
	return NULL;
}

/* Number with an optional unit suffix; @kind picks the suffix set. */
static int parse_num(const char *s, enum cs_cfg_type kind, double *out)
{
	char *end;
	double v, mul = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !isfinite(v))
		return -EINVAL;
	if (kind == CS_CFG_SIZE) {
		if (!strcasecmp(end, "k") || !strcasecmp(end, "kib"))
			mul = 1024.0;
		else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib"))
			mul = 1024.0 * 1024;
		else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib"))
			mul = 1024.0 * 1024 * 1024;
		else if (*end)
			return -EINVAL;
	} else if (kind == CS_CFG_NS) {
		if (!strcmp(end, "ns") || !*end)
			mul = 1;
		else if (!strcmp(end, "us"))
			mul = 1e3;
		else if (!strcmp(end, "ms"))
			mul = 1e6;
		else if (!strcmp(end, "s"))
			mul = 1e9;
		else
			return -EINVAL;
	} else if (kind == CS_CFG_U64 || kind == CS_CFG_U32) {
		if (!strcmp(end, "k"))
			mul = 1e3;
		else if (!strcmp(end, "M"))
			mul = 1e6;
		else if (!strcmp(end, "G"))
			mul = 1e9;
		else if (*end)
			return -EINVAL;
	} else if (*end) {
		return -EINVAL;
	}
	*out = v * mul;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (unsigned i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int apply(const struct cs_cfg_entry *e, void *obj, const char *value,
		 char *err, size_t errlen)
{
	char *field = (char *)obj + e->offset;
	double v = 0;
	bool b;

	switch (e->type) {
	case CS_CFG_BOOL:
		if (parse_bool(value, &b))
			goto bad;
		*(bool *)field = b;
		return 0;
	case CS_CFG_STR:
		if (strlen(value) >= CS_CFG_STR_MAX)
			goto bad;
		strcpy(field, value);
		return 0;
	default:
		break;
	}
	if (parse_num(value, e->type, &v))
		goto bad;
	if (e->min <= e->max && (v < e->min || v > e->max)) {
		if (err)
			snprintf(
				err, errlen,
				"config key '%s': value '%s' is outside [%g, %g]",
				e->name, value, e->min, e->max);
		return -EINVAL;
	}
	switch (e->type) {
	case CS_CFG_U64:
	case CS_CFG_SIZE:
	case CS_CFG_NS:
		if (v < 0 || v > 1.8e19 || v != floor(v))
			goto bad;
		*(uint64_t *)field = (uint64_t)v;
		return 0;
	case CS_CFG_U32:
		if (v < 0 || v > UINT32_MAX || v != floor(v))
			goto bad;
		*(uint32_t *)field = (uint32_t)v;
		return 0;
	case CS_CFG_DOUBLE:
		*(double *)field = v;
		return 0;
	default:
		break;
	}
bad:
	if (err)
		snprintf(err, errlen, "config key '%s': bad value '%s'",
			 e->name, value);
	return -EINVAL;
}

int cs_cfg_defaults(const struct cs_cfg_entry *tab, size_t n, void *obj)
{
	char err[256];

	for (size_t i = 0; i < n; i++) {
		if (apply(&tab[i], obj, tab[i].def, err, sizeof(err))) {
			fprintf(stderr, "collstack: bad default: %s\n", err);
			return -EINVAL;
		}
	}
	return 0;
}

int cs_cfg_set(const struct cs_cfg_entry *tab, size_t n, void *obj,
	       const char *name, const char *value, char *err, size_t errlen)
{
	const struct cs_cfg_entry *e = find(tab, n, name);

	if (!e) {
		if (err)
			snprintf(err, errlen, "unknown config key '%s'", name);
		return -ENOENT;
	}
	return apply(e, obj, value, err, errlen);
}

void cs_cfg_help(const struct cs_cfg_entry *tab, size_t n, FILE *out)
{
	for (size_t i = 0; i < n; i++) {
		fprintf(out, "  %-28s (default %s", tab[i].name, tab[i].def);
		if (tab[i].min <= tab[i].max)
			fprintf(out, ", range %g..%g", tab[i].min, tab[i].max);
		fprintf(out, ")\n      %s\n", tab[i].help);
	}
}
