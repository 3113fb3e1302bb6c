/* SPDX-License-Identifier: MIT */
/*
 * The parameter-server benchmark pattern (ps_pattern.c): which keys a
 * worker pushes and pulls at each version, the gradient it pushes, and
 * the value a row must have after it was pushed c times. Shared by the
 * sidecar job (sidecar/svc_ps.c, `collstack run ps`, `collstack bench -o
 * ps`) and its Open MPI counterpart (tools/mpi_bench.c -o ps), so both
 * stacks move the same rows and check them the same way.
 *
 * The table is f32, rows start at 1 (constant initializer) and take SGD
 * steps with lr CS_PS_PAT_LR. The gradient of row @key at index j is
 * g(key, j) = (1 + (key + j) % 4) / 4, whoever pushes it, so after c
 * pushes of the row (duplicates within one push counted) it holds exactly
 * 1 - lr * g * c in f32 (every value a multiple of 1/8 below 2^20),
 * whatever the order the pushes were summed and applied in. A pulled row
 * then says how many pushes it has seen, and the check is exact: sync
 * knows c, ssp and async bound it.
 */
#ifndef CS_COLLECTIVES_PS_PATTERN_H
#define CS_COLLECTIVES_PS_PATTERN_H

#include <stdbool.h>
#include <stdint.h>

#include "ps.h"

#define CS_PS_PAT_TABLE 1u
#define CS_PS_PAT_LR 0.5f

/**
 * struct cs_ps_pat - the keys of every (worker, version)
 * @rows: keys 0 .. rows - 1
 * @kpp: keys per push (and per pull); dense: rows
 * @workers: worker ranks 0 .. workers - 1
 * @dim: f32 values per row
 * @skew: Zipf exponent of the keys (0: uniform); ignored when dense
 * @dense: every push and pull is every key, in order
 */
struct cs_ps_pat {
	uint32_t rows, kpp, workers, dim;
	double skew;
	bool dense;
	double *cdf; /* Zipf: cumulative weights of ranks 1..rows */
};

/* 0, -EINVAL (bad sizes), -ENOMEM. */
int cs_ps_pat_init(struct cs_ps_pat *p, uint32_t rows, uint32_t kpp,
		   uint32_t workers, uint32_t dim, double skew, bool dense);
void cs_ps_pat_fini(struct cs_ps_pat *p);

/* The @p->kpp keys of worker @w at version (or pull step) @t: a pure
 * function of (w, t); duplicates kept (the worker engine combines them). */
void cs_ps_pat_keys(const struct cs_ps_pat *p, uint32_t w, uint64_t t,
		    uint64_t *keys);

/* The gradient rows of @keys (@n of them, @p->dim each). */
void cs_ps_pat_grads(const struct cs_ps_pat *p, const uint64_t *keys,
		     uint32_t n, float *rows);

/* Row @key after @c pushes. */
void cs_ps_pat_row(const struct cs_ps_pat *p, uint64_t key, uint64_t c,
		   float *row);

/* 0 when @row is row @key after c pushes for some c in [@lo, @hi] (bit
 * for bit), else -EBADMSG. */
int cs_ps_pat_check(const struct cs_ps_pat *p, uint64_t key, const float *row,
		    uint64_t lo, uint64_t hi);

/*
 * What a row pulled at @clock may have seen, in pushes: every worker's
 * pushes of versions < cs_ps_pat_lo_version() (@lo_all, counted by
 * cs_ps_pat_count), at least this worker's own completed pushes (@own;
 * async, ssp), at most every push of the job (@tot). Sync: exactly
 * @lo_all.
 */
uint64_t cs_ps_pat_lo_version(enum cs_ps_mode mode, uint32_t stale,
			      uint64_t clock);
void cs_ps_pat_bounds(enum cs_ps_mode mode, uint32_t lo_all, uint32_t own,
		      uint32_t tot, uint64_t *lo, uint64_t *hi);

/* Add every worker's pushes of versions [@from, @to) to @cnt (@p->rows
 * counters, one per key; a duplicate in a push counts twice). */
void cs_ps_pat_count(const struct cs_ps_pat *p, uint64_t from, uint64_t to,
		     uint32_t *cnt);

/*
 * Gradient rows server @server of @map takes over versions [0, @to): the
 * distinct keys of each (worker, version) push it owns (what its store
 * counts in grads_in once every push arrived). Returns 0 or -ENOMEM.
 */
int cs_ps_pat_grads_of(const struct cs_ps_pat *p, uint64_t to,
		       const struct cs_ps_shardmap *map, uint32_t server,
		       uint64_t *out);

#endif
