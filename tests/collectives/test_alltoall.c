/* SPDX-License-Identifier: MIT */
/*
 * The all-to-all engine (collectives/alltoall.h) without a transport: its
 * schedule (channels, peers, frame cuts), a whole exchange delivered by
 * hand in a hostile order (reversed, every frame twice), retransmission
 * rebuilds, and the refusals of bad descriptors and bad frames.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/alltoall.h"
#include "collstack/types.h"

#define MAXN 16

struct world {
	uint32_t n, G;
	uint64_t cnt[MAXN][MAXN]; /* elements s -> d */
	uint64_t sc[MAXN][MAXN], sd[MAXN][MAXN], rc[MAXN][MAXN], rd[MAXN][MAXN];
	uint64_t ns[MAXN], nr[MAXN];
	uint32_t *send[MAXN], *recv[MAXN];
	struct cs_a2a_params p[MAXN];
	struct cs_a2a_node *node[MAXN];
	struct cs_a2a *eng[MAXN];
};

static uint32_t val(uint32_t s, uint32_t d, uint64_t x)
{
	return s * 0x1000193u ^ d * 0x9e3779b9u ^ (uint32_t)x * 2654435761u;
}

/* Counts: @even or a fixed skewed pattern with empty blocks. */
static void w_counts(struct world *w, uint32_t n, uint32_t G, bool even,
		     uint64_t base)
{
	memset(w, 0, sizeof(*w));
	w->n = n;
	w->G = G;
	for (uint32_t s = 0; s < n; s++)
		for (uint32_t d = 0; d < n; d++)
			w->cnt[s][d] = even ? base
				       : (s * 7 + d * 3) % 5 == 0
					       ? 0
					       : base * ((s + 2 * d) % 4) + s;
}

static void w_params(struct world *w, uint32_t mtu, uint32_t flags)
{
	uint32_t n = w->n;

	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t d = 0; d < n; d++) {
			w->sc[i][d] = w->cnt[i][d];
			w->sd[i][d] = w->ns[i];
			w->ns[i] += w->cnt[i][d];
			w->rc[i][d] = w->cnt[d][i];
			w->rd[i][d] = w->nr[i];
			w->nr[i] += w->cnt[d][i];
		}
		w->send[i] = malloc((w->ns[i] + 1) * 4);
		w->recv[i] = calloc(w->nr[i] + 1, 4);
		for (uint32_t d = 0; d < n; d++)
			for (uint64_t x = 0; x < w->sc[i][d]; x++)
				w->send[i][w->sd[i][d] + x] = val(i, d, x);
		w->p[i] = (struct cs_a2a_params){
			.nranks = n,
			.rank = i,
			.ranks_per_node = w->G,
			.esz = 4,
			.sendbuf = w->send[i],
			.send_count = w->ns[i],
			.recvbuf = w->recv[i],
			.recv_count = w->nr[i],
			.sendcounts = w->sc[i],
			.sdispls = w->sd[i],
			.recvcounts = w->rc[i],
			.rdispls = w->rd[i],
			.mtu_payload = mtu,
			.flags = flags,
			.group = 7,
			.epoch = 3,
			.op_id = 9,
		};
	}
}

static void w_init(struct world *w)
{
	for (uint32_t b = 0; b < w->n / w->G; b++) {
		cr_assert_eq(
			cs_a2a_node_init(&w->p[b * w->G], w->G, &w->node[b]),
			0);
		for (uint32_t k = 0; k < w->G; k++)
			cr_assert_eq(cs_a2a_init(w->node[b], k,
						 &w->eng[b * w->G + k]),
				     0);
	}
}

/* With dynamic receive counts: every rank's layout as the senders' counts
 * say, and every element. */
static void w_check_dynamic(struct world *w)
{
	for (uint32_t d = 0; d < w->n; d++) {
		const uint64_t *rc, *rd;

		cr_assert_eq(cs_a2a_status(w->eng[d], NULL), 0);
		cs_a2a_recv_layout(w->eng[d], &rc, &rd);
		for (uint32_t s = 0; s < w->n; s++) {
			cr_assert_eq(rc[s], w->cnt[s][d], "G %u %u->%u", w->G,
				     s, d);
			for (uint64_t x = 0; x < rc[s]; x++)
				cr_assert_eq(w->recv[d][rd[s] + x],
					     val(s, d, x));
		}
	}
}

static void w_fini(struct world *w)
{
	for (uint32_t i = 0; i < w->n; i++) {
		cs_a2a_free(w->eng[i]);
		free(w->send[i]);
		free(w->recv[i]);
	}
	for (uint32_t b = 0; b < w->n / w->G; b++)
		cs_a2a_node_free(w->node[b]);
}

static void w_dynamic(struct world *w);
static void w_exchange_rounds(struct world *w, bool strict);

struct sent {
	uint32_t src;
	struct cs_flow_tx tx;
};

/* Every frame of every rank, then delivered in reverse, each twice. */
static void w_exchange(struct world *w)
{
	size_t cap = 1 << 16, nf = 0;
	struct sent *f = malloc(cap * sizeof(*f));

	for (uint32_t i = 0; i < w->n; i++)
		for (uint32_t c = 0; c < cs_a2a_channels(w->eng[i]); c++) {
			unsigned got;

			while ((got = cs_a2a_next(w->eng[i], c, &f[nf].tx,
						  1))) {
				cr_assert_eq(f[nf].tx.dst,
					     (uint32_t)cs_a2a_chan_peer(
						     w->eng[i], c));
				f[nf].src = i;
				nf++;
				cr_assert_lt(nf, cap);
			}
		}
	for (size_t k = nf; k-- > 0;) {
		struct cs_pkt_hdr h = f[k].tx.hdr;

		int ret = cs_a2a_on_data(w->eng[f[k].tx.dst], &h,
					 f[k].tx.payload);

		cr_assert(ret == CS_A2A_RX_NEW || ret == CS_FLOW_RX_ACK_NOW);
		cr_assert_eq(cs_a2a_on_data(w->eng[f[k].tx.dst], &h,
					    f[k].tx.payload),
			     CS_A2A_RX_DUP);
	}
	for (size_t k = 0; k < nf; k++) {
		struct cs_flow_tx rb;

		cr_assert_eq(
			cs_a2a_rebuild(w->eng[f[k].src], f[k].tx.cookie, &rb),
			0);
		cr_assert_eq(rb.payload, f[k].tx.payload, "rule (a)");
		cr_assert_eq(rb.len, f[k].tx.len);
		cr_assert_eq(rb.hdr.offset, f[k].tx.hdr.offset);
		cr_assert(rb.hdr.flags & CS_PKT_F_RETX);
		cr_assert_eq(cs_a2a_on_acked(w->eng[f[k].src], f[k].tx.cookie),
			     0);
		cr_assert_eq(cs_a2a_on_acked(w->eng[f[k].src], f[k].tx.cookie),
			     0, "a repeated ack is ignored");
	}
	free(f);
}

static void w_check(const struct world *w)
{
	for (uint32_t d = 0; d < w->n; d++) {
		cr_assert_eq(cs_a2a_status(w->eng[d], NULL), 0, "rank %u", d);
		for (uint32_t s = 0; s < w->n; s++)
			for (uint64_t x = 0; x < w->rc[d][s]; x++)
				cr_assert_eq(w->recv[d][w->rd[d][s] + x],
					     val(s, d, x),
					     "rank %u from %u element %lu", d,
					     s, (unsigned long)x);
	}
}

Test(alltoall, flat_schedule_is_shifted)
{
	struct world w;
	struct cs_flow_tx tx;

	w_counts(&w, 5, 1, true, 1000);
	w_params(&w, 1024, 0);
	w_init(&w);
	/* channel c of rank r sends to r + 1 + c: at any moment the ranks
	 * aim at different receivers */
	for (uint32_t r = 0; r < 5; r++) {
		cr_assert_eq(cs_a2a_channels(w.eng[r]), 4);
		for (uint32_t c = 0; c < 4; c++)
			cr_assert_eq(cs_a2a_chan_peer(w.eng[r], c),
				     (r + 1 + c) % 5);
	}
	/* 4000 bytes in frames of 1024: 4 frames, the last 928 bytes */
	for (int f = 0; f < 4; f++) {
		cr_assert_eq(cs_a2a_next(w.eng[0], 1, &tx, 1), 1);
		cr_assert_eq(tx.hdr.step, (uint32_t)f);
		cr_assert_eq(tx.hdr.offset, (uint64_t)f * 1024);
		cr_assert_eq(tx.len, f < 3 ? 1024u : 928u);
		cr_assert_eq(tx.hdr.channel, 1);
		cr_assert_eq(!!(tx.hdr.flags & CS_PKT_F_LAST), f == 3);
		/* flat: zero copy, from the caller's buffer */
		cr_assert_eq(tx.payload, (const uint8_t *)w.send[0] +
						 w.sd[0][2] * 4 +
						 (uint64_t)f * 1024);
	}
	cr_assert_eq(cs_a2a_next(w.eng[0], 1, &tx, 1), 0);
	cr_assert_eq(cs_a2a_next(w.eng[0], 4, &tx, 1), 0, "no such channel");
	w_fini(&w);
}

Test(alltoall, two_level_streams_per_node_pair)
{
	struct world w;
	struct cs_a2a_stats st;

	/* 4 nodes of 2: rank (a, i) owns the node pairs of channels
	 * c = i mod 2 and talks to the same local index (rail) */
	w_counts(&w, 8, 2, true, 100);
	w_params(&w, 512, 0);
	w_init(&w);
	cr_assert_eq(cs_a2a_channels(w.eng[0]), 3);
	cr_assert_eq(cs_a2a_chan_peer(w.eng[0], 0), 2); /* node 1 local 0 */
	cr_assert_eq(cs_a2a_chan_peer(w.eng[0], 1), -1);
	cr_assert_eq(cs_a2a_chan_peer(w.eng[0], 2), 6); /* node 3 local 0 */
	cr_assert_eq(cs_a2a_chan_peer(w.eng[3], 1), 7); /* node 1 -> 3 */
	cs_a2a_get_stats(w.eng[0], &st);
	/* one stream per node pair: 4 blocks of 400 bytes each, staged */
	cr_assert_eq(st.tx_streams, 2);
	cr_assert_eq(st.staged_bytes, 2 * 4 * 400);
	cr_assert_eq(st.local_bytes, 4 * 400, "intra-node exchange");
	w_exchange(&w);
	w_check(&w);
	w_fini(&w);
}

Test(alltoall, rail_streams_per_rank)
{
	struct world w;
	struct cs_a2a_stats st;

	/* 4 nodes of 2, rail-aligned: every rank carries every node pair,
	 * only the blocks for its own local index, to that local index */
	w_counts(&w, 8, 2, true, 100);
	w_params(&w, 512, CS_A2A_F_RAIL);
	w_init(&w);
	for (uint32_t r = 0; r < 8; r++) {
		cr_assert_eq(cs_a2a_channels(w.eng[r]), 3);
		for (uint32_t c = 0; c < 3; c++)
			cr_assert_eq(cs_a2a_chan_peer(w.eng[r], c),
				     ((r / 2 + 1 + c) % 4) * 2 + r % 2);
		cs_a2a_get_stats(w.eng[r], &st);
		/* 3 streams of the 2 local sources' blocks, 400 bytes each */
		cr_assert_eq(st.tx_streams, 3);
		cr_assert_eq(st.rx_streams, 3);
		cr_assert_eq(st.staged_bytes, 3 * 2 * 400);
	}
	w_exchange(&w);
	w_check(&w);
	w_fini(&w);
}

Test(alltoall, rail_uneven_and_dynamic)
{
	static const uint32_t gs[] = { 2, 3, 6 };
	static const uint32_t fl[] = { CS_A2A_F_RAIL,
				       CS_A2A_F_RAIL | CS_A2A_F_NO_BUCKET };

	for (size_t g = 0; g < 3; g++)
		for (size_t b = 0; b < 2; b++) {
			struct world w;

			w_counts(&w, 12, gs[g], false, 37);
			w_params(&w, 200, fl[b]);
			w_init(&w);
			w_exchange(&w);
			w_check(&w);
			w_fini(&w);
		}
	for (uint32_t G = 2; G <= 3; G++) {
		struct world w;

		w_counts(&w, 12, G, false, 41);
		w_params(&w, 128, CS_A2A_F_RAIL);
		w_dynamic(&w);
		w_init(&w);
		w_exchange_rounds(&w, true);
		w_check_dynamic(&w);
		w_fini(&w);
	}
}

Test(alltoall, rail_count_for_another_rail_refused)
{
	struct world w;
	struct cs_flow_tx tx;
	struct cs_pkt_hdr h;
	uint64_t cnt[4];

	w_counts(&w, 4, 2, true, 10);
	w_params(&w, 128, CS_A2A_F_RAIL);
	w_dynamic(&w);
	w_init(&w);
	/* rank 0's count frame to rank 2 (node 1, local 0): blocks (j, 0)
	 * only; one for local 1 is another rail's and refused */
	cr_assert_eq(cs_a2a_next(w.eng[0], 0, &tx, 1), 1);
	cr_assert_eq(tx.dst, 2);
	memcpy(cnt, tx.payload, sizeof(cnt));
	cr_assert_eq(cnt[0], 10);
	cr_assert_eq(cnt[1], 0);
	cr_assert_eq(cnt[2], 10);
	cr_assert_eq(cnt[3], 0);
	cnt[1] = 10;
	h = tx.hdr;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, cnt), CS_ERR_PROTO);
	cnt[1] = 0;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, cnt), CS_FLOW_RX_ACK_NOW);
	w_fini(&w);
}

Test(alltoall, bucketing_packs_blocks)
{
	uint64_t blk[8] = { 100, 100, 0, 100, 100, 100, 100, 100 };

	cr_assert_eq(cs_a2a_stream_frames(blk, 8, 1000, true), 1);
	cr_assert_eq(cs_a2a_stream_frames(blk, 8, 1000, false), 7);
	cr_assert_eq(cs_a2a_stream_frames(blk, 8, 150, true), 5);
	cr_assert_eq(cs_a2a_stream_frames(blk, 8, 150, false), 7);
	cr_assert_eq(cs_a2a_stream_frames(blk, 0, 150, true), 0);
}

Test(alltoall, uneven_exchanges_flat_and_two_level)
{
	static const uint32_t gs[] = { 1, 2, 3, 6 };
	static const uint32_t fl[] = { 0, CS_A2A_F_NO_BUCKET };

	for (size_t g = 0; g < 4; g++)
		for (size_t b = 0; b < 2; b++) {
			struct world w;

			w_counts(&w, 12, gs[g], false, 37);
			w_params(&w, 200, fl[b]);
			w_init(&w);
			w_exchange(&w);
			w_check(&w);
			w_fini(&w);
		}
}

Test(alltoall, every_rank_sends_nothing)
{
	struct world w;

	w_counts(&w, 6, 2, true, 0);
	w_params(&w, 200, 0);
	w_init(&w);
	for (uint32_t i = 0; i < 6; i++) {
		for (uint32_t c = 0; c < cs_a2a_channels(w.eng[i]); c++)
			cr_assert_eq(cs_a2a_chan_peer(w.eng[i], c), -1);
		cr_assert_eq(cs_a2a_status(w.eng[i], NULL), 0);
	}
	w_fini(&w);
}

Test(alltoall, one_rank_receives_everything)
{
	struct world w;

	w_counts(&w, 8, 2, true, 0);
	for (uint32_t s = 0; s < 8; s++)
		w.cnt[s][5] = 300 + s;
	w_params(&w, 256, 0);
	w_init(&w);
	w_exchange(&w);
	w_check(&w);
	w_fini(&w);
}

/* ---- bad descriptors ---------------------------------------------------- */

static int try_node(struct world *w, uint32_t b)
{
	struct cs_a2a_node *nd = NULL;
	int ret = cs_a2a_node_init(&w->p[b * w->G], w->G, &nd);

	cs_a2a_node_free(nd);
	return ret;
}

Test(alltoall, bad_descriptors_refused)
{
	struct world w;

	w_counts(&w, 4, 2, true, 10);
	w_params(&w, 200, 0);
	cr_assert_eq(try_node(&w, 0), 0);

	w.sc[0][3] = 11; /* more than the buffer holds */
	w.sd[0][3] = 30;
	cr_assert_eq(try_node(&w, 0), CS_ERR_BAD_DESC);
	w.sc[0][3] = 10;
	w.sd[0][3] = UINT64_MAX - 3; /* displacement overflows */
	cr_assert_eq(try_node(&w, 0), CS_ERR_BAD_DESC);
	w.sd[0][3] = 30;
	w.rd[1][2] = 5; /* overlaps the block from rank 0 */
	cr_assert_eq(try_node(&w, 0), CS_ERR_BAD_DESC);
	w.rd[1][2] = 20;
	w.sc[0][1] = 9; /* local 1 expects 10 from local 0 */
	cr_assert_eq(try_node(&w, 0), CS_ERR_BAD_DESC);
	w.sc[0][1] = 10;
	cr_assert_eq(try_node(&w, 0), 0);

	w.p[1].rank = 3; /* not node 0's local 1 */
	cr_assert_eq(try_node(&w, 0), -EINVAL);
	w.p[1].rank = 1;
	w.p[1].op_id = 10; /* a different operation */
	cr_assert_eq(try_node(&w, 0), -EINVAL);
	w.p[1].op_id = 9;
	w.p[0].esz = 0;
	cr_assert_eq(try_node(&w, 0), -EINVAL);
	w.p[0].esz = 4;
	w.p[0].recvcounts = NULL;
	cr_assert_eq(try_node(&w, 0), CS_ERR_BAD_DESC);
	w.p[0].recvcounts = w.rc[0];
	w.p[0].sendbuf = NULL;
	cr_assert_eq(try_node(&w, 0), CS_ERR_BAD_DESC);
	w.p[0].sendbuf = w.send[0];
	w.p[0].ranks_per_node = 3; /* does not divide 4 */
	w.p[1].ranks_per_node = 3;
	cr_assert_eq(try_node(&w, 0), -EINVAL);
	w.p[0].ranks_per_node = w.p[1].ranks_per_node = 2;
	cr_assert_eq(try_node(&w, 0), 0);
	for (uint32_t i = 0; i < 4; i++) {
		free(w.send[i]);
		free(w.recv[i]);
	}
}

/* ---- bad frames ---------------------------------------------------------- */

Test(alltoall, bad_frames_refused_nothing_written)
{
	struct world w;
	struct cs_flow_tx tx;
	struct cs_pkt_hdr h;
	uint32_t *copy;

	w_counts(&w, 4, 1, true, 500);
	w_params(&w, 512, 0);
	w_init(&w);
	/* rank 1's channel 0 goes to rank 2 */
	cr_assert_eq(cs_a2a_next(w.eng[1], 0, &tx, 1), 1);
	cr_assert_eq(tx.dst, 2);
	copy = malloc(w.nr[2] * 4);
	memcpy(copy, w.recv[2], w.nr[2] * 4);

	h = tx.hdr;
	h.channel = 3; /* no such channel */
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.src = 3; /* not the rank that owns the stream */
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.step = 4; /* 2000 bytes: frames 0 .. 3 */
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.offset = 4; /* not where frame 0 starts */
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.len = 511;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, NULL), CS_ERR_PROTO);
	h.epoch = 2;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_A2A_RX_STALE);
	h.epoch = 4;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_ERR_EPOCH);
	cr_assert_eq(memcmp(copy, w.recv[2], w.nr[2] * 4), 0,
		     "a refused frame wrote nothing");
	h = tx.hdr;
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_A2A_RX_NEW);
	cr_assert_eq(cs_a2a_on_data(w.eng[2], &h, tx.payload), CS_A2A_RX_DUP);

	/* cookies: unknown, or a frame not handed out yet */
	cr_assert_eq(cs_a2a_on_acked(w.eng[1], 7ull << 32), -EINVAL);
	cr_assert_eq(cs_a2a_on_acked(w.eng[1], 1), -EINVAL);
	cr_assert_eq(cs_a2a_rebuild(w.eng[1], 1, &tx), -EINVAL);
	free(copy);
	w_fini(&w);
}

Test(alltoall, abort_ends_the_node)
{
	struct world w;
	struct cs_flow_tx tx;
	uint32_t culprit;

	w_counts(&w, 4, 2, true, 100);
	w_params(&w, 256, 0);
	w_init(&w);
	cr_assert_eq(cs_a2a_status(w.eng[1], NULL), -EINPROGRESS);
	cr_assert_eq(cs_a2a_abort(w.eng[0], CS_ERR_PEER_LOST, 3), 0);
	cr_assert_eq(cs_a2a_status(w.eng[0], &culprit), CS_ERR_PEER_LOST);
	cr_assert_eq(culprit, 3);
	/* its node sibling waited for data through it: it ends too */
	cr_assert_eq(cs_a2a_status(w.eng[1], &culprit), CS_ERR_PEER_LOST);
	cr_assert_eq(cs_a2a_next(w.eng[1], 0, &tx, 1), 0);
	cr_assert_eq(cs_a2a_rebuild(w.eng[0], 0, &tx), -ECANCELED);
	cr_assert_eq(cs_a2a_abort(w.eng[0], 0, 0), -EINVAL);
	w_fini(&w);
}

Test(alltoall, choice_rule)
{
	cr_assert_eq(cs_a2a_choose(64, 1, 4096), CS_A2A_FLAT);
	cr_assert_eq(cs_a2a_choose(64, 8, 4096), CS_A2A_TWO_LEVEL);
	cr_assert_eq(cs_a2a_choose(64, 8, 1 << 20), CS_A2A_FLAT);
	cr_assert_eq(cs_a2a_choose(8, 8, 4096), CS_A2A_FLAT, "one node");
	cr_assert_eq(cs_a2a_choose(12, 8, 4096), CS_A2A_FLAT, "8 ∤ 12");
	cr_assert_eq(cs_a2a_choose(32, 8, 4096), CS_A2A_FLAT,
		     "4 nodes of 8: 3 NICs of 8 would carry it all");
	cr_assert_eq(cs_a2a_choose(512, 8, 4096), CS_A2A_TWO_LEVEL);
}

/* ---- counts in the same operation --------------------------------------- */

/* Rounds of: every frame that may leave, delivered, acknowledged. */
static void w_exchange_rounds(struct world *w, bool strict)
{
	struct cs_flow_tx tx;
	bool more = true;

	for (int round = 0; more && round < 1000; round++) {
		more = false;
		for (uint32_t i = 0; i < w->n; i++)
			for (uint32_t c = 0; c < cs_a2a_channels(w->eng[i]);
			     c++)
				while (cs_a2a_next(w->eng[i], c, &tx, 1)) {
					struct cs_pkt_hdr h = tx.hdr;
					int ret = cs_a2a_on_data(
						w->eng[tx.dst], &h, tx.payload);

					cr_assert(!strict ||
						  ret == CS_A2A_RX_NEW ||
						  ret == CS_FLOW_RX_ACK_NOW);
					cr_assert_eq(cs_a2a_on_acked(w->eng[i],
								     tx.cookie),
						     0);
					more = true;
				}
	}
}

static void w_dynamic(struct world *w)
{
	for (uint32_t i = 0; i < w->n; i++) {
		w->p[i].flags |= CS_A2A_F_RECV_DYNAMIC;
		w->p[i].recvcounts = NULL;
		w->p[i].rdispls = NULL;
	}
}

Test(alltoall, dynamic_counts_arrive_with_the_data)
{
	for (uint32_t G = 1; G <= 3; G++) {
		struct world w;
		struct cs_flow_tx tx;

		w_counts(&w, 6, G, false, 41);
		w_params(&w, 128, 0);
		w_dynamic(&w);
		w_init(&w);
		/* the count frame first; no data before it is acknowledged */
		for (uint32_t c = 0; c < cs_a2a_channels(w.eng[0]); c++) {
			if (cs_a2a_chan_peer(w.eng[0], c) < 0)
				continue;
			cr_assert_eq(cs_a2a_next(w.eng[0], c, &tx, 4), 1);
			cr_assert_eq(tx.hdr.step, 0);
			cr_assert_eq(tx.len, G * G * 8);
			cr_assert_eq(cs_a2a_on_data(w.eng[tx.dst], &tx.hdr,
						    tx.payload),
				     CS_FLOW_RX_ACK_NOW,
				     "count frame: ACK now");
			cr_assert_eq(cs_a2a_next(w.eng[0], c, &tx, 1), 0);
			cr_assert_eq(cs_a2a_on_acked(w.eng[0], tx.cookie), 0);
		}
		w_exchange_rounds(&w, true);
		w_check_dynamic(&w);
		w_fini(&w);
	}
}

Test(alltoall, dynamic_receive_buffer_too_small)
{
	struct world w;
	uint32_t culprit;

	w_counts(&w, 4, 1, true, 50);
	w_params(&w, 128, 0);
	w_dynamic(&w);
	w.p[2].recv_count = 120; /* 200 will come */
	w_init(&w);
	w_exchange_rounds(&w, false);
	cr_assert_eq(cs_a2a_status(w.eng[2], &culprit), -ENOSPC);
	cr_assert_lt(culprit, 4u);
	cr_assert_neq(culprit, 2u);
	w_fini(&w);
}

/* ---- virtual element tails (struct cs_a2a_virt) ------------------------- */

#define VT_TAIL 10
#define VT_AT 2

struct vt {
	struct world *w;
	uint64_t bytes[MAXN]; /* tail bytes each rank got */
	uint64_t bad;
};

static uint8_t vt_byte(uint32_t s, uint32_t d, uint32_t v, uint64_t off)
{
	return (uint8_t)(s * 31 + d * 7 + v * 13 + off * 3 + 1);
}

static void vt_gen(void *arg, uint32_t src, uint32_t dst, const uint8_t *elem,
		   uint64_t off, uint8_t *out, uint32_t len)
{
	uint32_t v;

	(void)arg;
	memcpy(&v, elem, 4);
	for (uint32_t i = 0; i < len; i++)
		out[i] = vt_byte(src, dst, v, off + i);
}

static void vt_got(void *arg, uint32_t src, uint32_t dst, uint64_t idx,
		   const uint8_t *in, uint64_t off, uint32_t len)
{
	struct vt *t = arg;
	const struct world *w = t->w;
	uint64_t x = idx - w->rd[dst][src]; /* element x of src's block */

	/* the stored value may not have arrived yet: what it must be */
	for (uint32_t i = 0; i < len; i++)
		t->bad += off + i >= VT_TAIL || x >= w->rc[dst][src] ||
			  in[i] != vt_byte(src, dst, val(src, dst, x), off + i);
	t->bytes[dst] += len;
}

Test(alltoall, virtual_tails_sent_and_placed)
{
	for (uint32_t G = 1; G <= 3; G++)
		for (uint32_t rail = 0; rail < 2; rail++) {
			struct world w;
			struct vt t = { .w = &w };
			struct cs_a2a_virt v = {
				.tail = VT_TAIL,
				.at = VT_AT,
				.gen = vt_gen,
				.got = vt_got,
				.arg = &t,
			};
			struct cs_a2a_stats st;
			uint64_t wire = 0;

			if (rail && G < 2)
				continue;
			w_counts(&w, 6, G, false, 23);
			/* 50 bytes: frames cut elements, stored and tail */
			w_params(&w, 50, rail ? CS_A2A_F_RAIL : 0);
			for (uint32_t i = 0; i < 6; i++)
				w.p[i].virt = &v;
			w_init(&w);
			w_exchange_rounds(&w, true);
			w_check(&w); /* the stored bytes */
			cr_assert_eq(t.bad, 0, "G %u rail %u", G, rail);
			for (uint32_t d = 0; d < 6; d++) {
				cr_assert_eq(t.bytes[d], w.nr[d] * VT_TAIL,
					     "every tail byte once, rank %u",
					     d);
				cs_a2a_get_stats(w.eng[d], &st);
				wire += st.tx_bytes;
			}
			/* the wire carries 4 + 10 bytes per element that
			 * leaves its node */
			for (uint32_t s = 0; s < 6; s++)
				for (uint32_t d = 0; d < 6; d++)
					wire -= s / G != d / G
							? w.cnt[s][d] *
								  (4 + VT_TAIL)
							: 0;
			cr_assert_eq(wire, 0);
			w_fini(&w);
		}
}

Test(alltoall, virtual_tails_refused)
{
	struct world w;
	struct vt t = { .w = &w };
	struct cs_a2a_virt v = {
		.tail = 8, .at = 5, .gen = vt_gen, .got = vt_got, .arg = &t
	};

	w_counts(&w, 4, 2, true, 10);
	w_params(&w, 200, 0);
	w.p[0].virt = w.p[1].virt = &v;
	cr_assert_eq(try_node(&w, 0), -EINVAL, "at past the element");
	v.at = 4;
	cr_assert_eq(try_node(&w, 0), 0);
	w.p[1].virt = NULL; /* the node's ranks must agree */
	cr_assert_eq(try_node(&w, 0), -EINVAL);
	w.p[1].virt = &v;
	w.p[0].flags = w.p[1].flags = CS_A2A_F_NODATA;
	cr_assert_eq(try_node(&w, 0), -EINVAL, "not with NODATA");
	for (uint32_t i = 0; i < 4; i++) {
		free(w.send[i]);
		free(w.recv[i]);
	}
}
