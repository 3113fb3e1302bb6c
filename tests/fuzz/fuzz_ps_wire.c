// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the PS message decoder, and for what the shard
 * store and the worker engine do with a message that decodes. Properties
 * (a trap when one fails):
 *  - every result is 0 or a known CS_PS_WIRE_E_* code with a name;
 *  - an accepted message's keys and rows lie inside the input, and the
 *    input is exactly as long as the header says;
 *  - re-encoding the decoded fields gives the input back, byte for byte
 *    (for the version 1 header length);
 *  - a shard store fed the input (and flushed) answers with messages that
 *    decode, never applies a refused push, and takes an id at most once;
 *  - a worker fed the input as a reply does not crash.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define fuzz_assert(c)                                                         \
	do {                                                                   \
		if (!(c))                                                      \
			__builtin_trap();                                      \
	} while (0)

/* The table the seeds are made for (tests/fuzz/ps_wire_seeds.c). */
static const struct cs_ps_table_spec fuzz_spec = {
	.id = 1,
	.dim = 4,
	.dtype = CS_F32,
	.key_max = 1000,
	.mode = CS_PS_SYNC,
	.workers = 4,
	.opt = { .kind = CS_PS_OPT_ADAM,
		 .lr = 0.01f,
		 .momentum = 0.9f,
		 .beta1 = 0.9f,
		 .beta2 = 0.999f,
		 .eps = 1e-8f },
	.init = { .kind = CS_PS_INIT_UNIFORM, .seed = 1, .scale = 0.1f },
};

static int on_reply(void *ctx, uint32_t worker, const void *msg, size_t len)
{
	struct cs_ps_msg m;

	(void)ctx;
	fuzz_assert(cs_ps_wire_decode(msg, len, &m) == 0);
	fuzz_assert(m.worker == worker);
	fuzz_assert(m.type == CS_PS_MSG_PUSH_ACK ||
		    m.type == CS_PS_MSG_PULL_REPLY);
	return 0;
}

static int on_send(void *ctx, uint32_t s, const void *msg, size_t len)
{
	(void)ctx, (void)s, (void)msg, (void)len;
	return 0;
}

static void on_done(void *ctx, uint64_t op, int rc, uint32_t peer)
{
	(void)ctx, (void)op, (void)rc, (void)peer;
}

static void check_store(const uint8_t *data, size_t size,
			const struct cs_ps_msg *m)
{
	struct cs_ps_store_cfg cfg = { .server = 0,
				       .msg_max = 4096,
				       .parked_max = 4 };
	struct cs_ps_store_io io = { .send = on_reply };
	const struct cs_ps_store_stats *st;
	struct cs_ps_store *s;
	uint64_t taken;

	fuzz_assert(cs_ps_store_create(&s, &cfg, &io) == 0);
	fuzz_assert(cs_ps_store_add_table(s, &fuzz_spec, 0, NULL) == 0);
	/* twice: the second copy of a push must not be taken again */
	fuzz_assert(cs_ps_store_rx(s, data, size) == 0);
	fuzz_assert(cs_ps_store_rx(s, data, size) == 0);
	fuzz_assert(cs_ps_store_flush(s) == 0);
	st = cs_ps_store_stats(s);
	taken = st->push_applied;
	fuzz_assert(taken <= 1);
	if (taken)
		fuzz_assert(m && m->type == CS_PS_MSG_PUSH &&
			    st->grads_in == m->nkeys);
	if (!m)
		fuzz_assert(st->rejected == 2 && !st->pulls_parked);
	cs_ps_store_destroy(s);
}

static void check_worker(const uint8_t *data, size_t size)
{
	uint32_t servers[2] = { 0, 1 };
	struct cs_ps_shardmap map;
	struct cs_ps_worker_cfg cfg = { .rank = 1,
					.map = &map,
					.msg_max = 4096,
					.rto = 1000,
					.rto_max = 8000,
					.max_tries = 2 };
	struct cs_ps_worker_io io = { on_send, on_done, NULL };
	struct cs_ps_worker *w;
	uint64_t keys[3] = { 1, 2, 1 }, op;
	float rows[3 * 4] = { 0 }, out[3 * 4];

	fuzz_assert(cs_ps_shardmap_init(&map, servers, 2, 8) == 0);
	fuzz_assert(cs_ps_worker_create(&w, &cfg, &io) == 0);
	fuzz_assert(cs_ps_worker_add_table(w, &fuzz_spec) == 0);
	fuzz_assert(cs_ps_worker_push(w, 1, 0, keys, rows, 3, 0, &op) == 0);
	fuzz_assert(cs_ps_worker_pull(w, 1, 0, keys, 3, out, 0, &op) == 0);
	fuzz_assert(cs_ps_worker_rx(w, 0, data, size, 1) == 0);
	fuzz_assert(cs_ps_worker_rx(w, 1, data, size, 1) == 0);
	cs_ps_worker_tick(w, 100000);
	cs_ps_worker_destroy(w);
	cs_ps_shardmap_fini(&map);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cs_ps_msg m;
	int rc = cs_ps_wire_decode(data, size, &m);

	fuzz_assert(rc == 0 ||
		    (rc <= -(CS_PS_WIRE_E_BASE + 1) &&
		     rc >= -(CS_PS_WIRE_E_BASE + CS_PS_WIRE_E_COUNT)));
	fuzz_assert(strcmp(cs_ps_wire_strerror(rc), "unknown ps wire error"));
	if (rc == 0) {
		size_t n = cs_ps_wire_len(m.type, m.nkeys, m.dim, m.dtype,
					  m.status);
		uint16_t hl = (uint16_t)(data[46] << 8 | data[47]);

		fuzz_assert(n && n + hl - CS_PS_WIRE_HDR == size);
		if (m.keys)
			fuzz_assert(m.keys >= data + CS_PS_WIRE_HDR &&
				    m.keys + 8ull * m.nkeys <= data + size);
		if (m.rows)
			fuzz_assert(m.rows >= data + CS_PS_WIRE_HDR &&
				    m.rows + (size_t)m.nkeys * m.dim *
							    cs_dtype_size(
								    m.dtype) ==
					    data + size);
		if (hl == CS_PS_WIRE_HDR) {
			uint8_t *buf = malloc(n);
			uint8_t row[8 * 64];

			fuzz_assert(buf);
			cs_ps_wire_put_hdr(buf, &m);
			for (uint32_t i = 0; m.keys && i < m.nkeys; i++)
				cs_ps_wire_put_key(buf, i,
						   cs_ps_wire_key(&m, i));
			for (uint32_t i = 0;
			     m.rows && i < m.nkeys && m.dim <= 64; i++) {
				cs_ps_wire_row(&m, i, row);
				cs_ps_wire_put_row(buf, &m, i, row);
			}
			if (!m.rows || m.dim <= 64)
				fuzz_assert(memcmp(buf, data, n) == 0);
			free(buf);
		}
	}
	check_store(data, size, rc == 0 ? &m : NULL);
	check_worker(data, size);
	return 0;
}
