/* SPDX-License-Identifier: MIT */
/* Small compiler and arithmetic helpers shared by every module. */
#ifndef CS_INTERNAL_UTIL_H
#define CS_INTERNAL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define CS_CACHE_LINE 64

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define cs_cold __attribute__((cold))
#define cs_unused __attribute__((unused))
#define cs_export __attribute__((visibility("default")))

#define CS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CS_DIV_ROUND_UP(n, d) (((n) + (d)-1) / (d))

#define cs_container_of(ptr, type, member)                                     \
	((type *)((char *)(ptr)-offsetof(type, member)))

/* Time in the engines is always nanoseconds handed in by the caller. */
typedef uint64_t cs_ns_t;

#define CS_NS_PER_US 1000ull
#define CS_NS_PER_MS 1000000ull
#define CS_NS_PER_S 1000000000ull

/* splitmix64: a tiny seeded PRNG; every random choice in tests and the
 * simulator goes through one so a run replays bit for bit. */
static inline uint64_t cs_rand_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform double in [0, 1). */
static inline double cs_rand_unit(uint64_t *state)
{
	return (double)(cs_rand_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
