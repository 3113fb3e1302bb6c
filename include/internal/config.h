/* SPDX-License-Identifier: MIT */
/*
 * The runtime config table: {name, parser, default, help} entries that
 * write into a caller's struct at an offset. One table per component;
 * collstackd concatenates them for --help-config and its config file.
 */
#ifndef CS_INTERNAL_CONFIG_H
#define CS_INTERNAL_CONFIG_H

#include <stddef.h>
#include <stdio.h>

enum cs_cfg_type {
	CS_CFG_U64, /* unsigned integer; k/M/G (x1000) suffixes allowed */
	CS_CFG_SIZE, /* byte size; K/M/G (x1024) suffixes allowed */
	CS_CFG_U32,
	CS_CFG_DOUBLE,
	CS_CFG_BOOL, /* 0/1, true/false, yes/no, on/off */
	CS_CFG_STR, /* char[] of CS_CFG_STR_MAX */
	CS_CFG_NS, /* duration into nanoseconds; ns/us/ms/s suffixes */
};

#define CS_CFG_STR_MAX 128

struct cs_cfg_entry {
	const char *name;
	enum cs_cfg_type type;
	size_t offset; /* offsetof() into the target struct */
	const char *def; /* default, as text (parsed like a user value) */
	double min, max; /* inclusive bounds for numbers; min > max: none */
	const char *help;
};

#define CS_CFG_NO_BOUNDS 1.0, 0.0

/**
 * cs_cfg_defaults - write every entry's default into @obj
 * Returns: 0, or -EINVAL naming the entry on stderr if a default is bad.
 */
int cs_cfg_defaults(const struct cs_cfg_entry *tab, size_t n, void *obj);

/**
 * cs_cfg_set - parse @value for key @name into @obj
 * @err: buffer for a message that names the key (may be NULL)
 * Returns: 0, -ENOENT for an unknown key, -EINVAL for a bad value.
 */
int cs_cfg_set(const struct cs_cfg_entry *tab, size_t n, void *obj,
	       const char *name, const char *value, char *err, size_t errlen);

/**
 * cs_cfg_help - print "name  default  help" for every entry
 */
void cs_cfg_help(const struct cs_cfg_entry *tab, size_t n, FILE *out);

#endif
