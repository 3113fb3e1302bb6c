/* SPDX-License-Identifier: MIT */
/* Per-module logging with levels; debug logging compiles out. */
#ifndef CS_INTERNAL_LOG_H
#define CS_INTERNAL_LOG_H

#include <stdarg.h>

enum cs_log_level {
	CS_LOG_ERR = 0,
	CS_LOG_WARN = 1,
	CS_LOG_INFO = 2,
	CS_LOG_DEBUG = 3,
};

/* Messages above this level are discarded (default: info). */
extern int cs_log_level;

void cs_log(int level, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Each module defines CS_LOG_MODULE ("rel", "port", ...) before including
 * this header and logs with CS_ERR / CS_WARN / CS_INFO / CS_DEBUG.
 */
#ifndef CS_LOG_MODULE
#define CS_LOG_MODULE "cs"
#endif

#define CS_ERR(...) cs_log(CS_LOG_ERR, CS_LOG_MODULE, __VA_ARGS__)
#define CS_WARN(...) cs_log(CS_LOG_WARN, CS_LOG_MODULE, __VA_ARGS__)
#define CS_INFO(...) cs_log(CS_LOG_INFO, CS_LOG_MODULE, __VA_ARGS__)
#ifdef CS_DEBUG_LOG
#define CS_DEBUG(...) cs_log(CS_LOG_DEBUG, CS_LOG_MODULE, __VA_ARGS__)
#else
#define CS_DEBUG(...) ((void)0)
#endif

#endif
