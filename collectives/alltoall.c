/* SPDX-License-Identifier: MIT */
/* All-to-all(v), flat and two-level, as an engine of the transport core. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/alltoall.h"
#include "collstack/types.h"

/*
 * THE SCHEDULE (alltoall.h draws the streams). Per channel c of a rank
 * (node a, local i), c % G == i:
 *   send:    the stream a -> b, b = (a + 1 + c) mod M, to rank b*G + i
 *   receive: the stream a' -> a, a' = (a - 1 - c) mod M, from rank
 *            a'*G + i
 * RAIL (CS_A2A_F_RAIL): every rank owns every channel c = 0 .. M-2, with
 * the same peers, and its streams hold only the blocks for local rank i
 * of the far node (the others are empty in both ends' cut, and in the
 * count frame).
 * Frame f of a stream covers stream bytes [off, off + len): packed
 * (bucketed) off = f * mtu; unbucketed, each block starts a frame. Both
 * ends compute the same cut from the counts they hold; the header carries
 * f in step and off in offset, and the receiver accepts a frame only when
 * both match its own cut exactly.
 *
 * EXACTLY ONCE: one bit per (received stream, frame); a frame seen before
 * is dropped, never copied twice. ACKs are counted the same way (one bit
 * per sent frame), so a repeated report changes nothing.
 *
 * WHAT A RETRANSMISSION CARRIES: rule (a) of control/rel.h. The source
 * of every frame (the caller's send buffer for a flat stream, the staging
 * buffer for a two-level one) is never written by the engine and must
 * not be written by the caller until the operation completes; rebuild()
 * points at the same bytes again, so a retransmission is byte-identical.
 */

struct a2a_local {
	struct cs_a2a_params p;
	uint64_t *sc, *sd, *rc, *rd; /* copies: the caller's may change */
	uint64_t left; /* bytes of its result still due from other nodes */
	uint64_t used; /* RECV_DYNAMIC: elements of recvbuf placed so far */
};

struct cs_a2a_node {
	uint32_t G, n, M, node;
	uint32_t esz, mtu;
	uint32_t wsz; /* element bytes on the wire: esz (+ virt->tail) */
	const struct cs_a2a_virt *virt;
	uint8_t *vtmp; /* virt: a tail in the intra-node exchange */
	bool bucket, nodata, dyn, rail;
	uint32_t dyn_streams; /* RECV_DYNAMIC: streams into the node not
			       * complete (counts and data) */
	int err; /* the first abort of a local engine, shared */
	uint32_t culprit;
	void (*notify)(void *arg, uint32_t local);
	void *notify_arg;
	uint64_t local_bytes;
	struct a2a_local loc[];
};

struct a2a_stream {
	bool on; /* owned by this rank and not empty */
	uint32_t peer; /* rank at the other end */
	uint32_t pnode; /* its node */
	uint64_t bytes;
	uint32_t nfr;
	uint64_t *boff; /* [G*G + 1] stream offset of block (j, k) */
	uint64_t *foff; /* [G*G + 1] first frame of each block (unbucketed) */
	const uint8_t *data; /* send: the stream's bytes */
	uint64_t *bits; /* receive: frames placed; send: frames acked */
	uint32_t left; /* receive: frames missing; send: not acked */
	uint32_t cur; /* send: next frame to hand out */
	uint32_t base; /* 1: frame 0 is the count frame (RECV_DYNAMIC) */
	bool known; /* receive: sizes known (always, unless dynamic) */
	uint64_t cap; /* receive: frames the bitmap holds */
	uint64_t *cnt; /* send, dynamic: the count frame's payload */
};

struct cs_a2a {
	struct cs_a2a_node *nd;
	uint32_t me, rank, C;
	struct a2a_stream *tx, *rx;
	uint8_t *stage;
	uint8_t *vframe; /* virt: [C + 1][mtu] frames built (C: rebuilds) */
	uint64_t rx_left, ack_left;
	int err;
	uint32_t culprit;
	struct cs_a2a_stats st;
};

static inline uint32_t umod(int64_t a, uint32_t n)
{
	int64_t m = a % (int64_t)n;

	return (uint32_t)(m < 0 ? m + n : m);
}

static inline bool test_bit(const uint64_t *b, uint64_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static inline void set_bit(uint64_t *b, uint64_t i)
{
	b[i / 64] |= 1ull << (i % 64);
}

uint64_t cs_a2a_stream_frames(const uint64_t *blk, uint32_t nblk, uint32_t mtu,
			      bool bucket)
{
	uint64_t tot = 0, fr = 0;

	for (uint32_t i = 0; i < nblk; i++) {
		tot += blk[i];
		fr += CS_DIV_ROUND_UP(blk[i], mtu);
	}
	return bucket ? CS_DIV_ROUND_UP(tot, mtu) : fr;
}

enum cs_a2a_algo cs_a2a_choose(uint32_t n, uint32_t rpn, uint64_t block_bytes)
{
	if (rpn < 2 || rpn > CS_A2A_MAX_RPN || n % rpn || n / rpn < 2)
		return CS_A2A_FLAT;
	/* a node sends its M-1 streams from M-1 of its rpn NICs: with few
	 * nodes most NICs would idle (4 nodes of 8: 3 of 8 busy) */
	if (4 * (n / rpn - 1) < 3 * rpn)
		return CS_A2A_FLAT;
	return block_bytes <= CS_A2A_TWO_LEVEL_MAX_BLOCK ? CS_A2A_TWO_LEVEL
							 : CS_A2A_FLAT;
}

/* ---- node: validation and the intra-node exchange ---------------------- */

static int cmp_iv(const void *x, const void *y)
{
	const uint64_t *a = x, *b = y;

	return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* Blocks inside their buffer: @cnt[d] elements from @dsp[d], @cap in all. */
static int check_blocks(const uint64_t *cnt, const uint64_t *dsp, uint32_t n,
			uint64_t cap)
{
	for (uint32_t d = 0; d < n; d++)
		if (cnt[d] > cap || dsp[d] > cap - cnt[d])
			return CS_ERR_BAD_DESC;
	return 0;
}

/* Received blocks must not overlap (two sources writing one element would
 * make the result depend on arrival order). */
static int check_overlap(const uint64_t *cnt, const uint64_t *dsp, uint32_t n)
{
	uint64_t *iv = malloc((size_t)n * 2 * sizeof(*iv));
	uint32_t m = 0;
	int ret = 0;

	if (!iv)
		return -ENOMEM;
	for (uint32_t s = 0; s < n; s++) {
		if (!cnt[s])
			continue;
		iv[2 * m] = dsp[s];
		iv[2 * m + 1] = dsp[s] + cnt[s];
		m++;
	}
	qsort(iv, m, 2 * sizeof(*iv), cmp_iv);
	for (uint32_t i = 1; i < m && !ret; i++)
		if (iv[2 * i] < iv[2 * i - 1])
			ret = CS_ERR_BAD_DESC;
	free(iv);
	return ret;
}

static int check_local(const struct cs_a2a_params *p,
		       const struct cs_a2a_params *p0, uint32_t G, uint32_t k)
{
	if (!p->nranks || p->nranks > CS_A2A_MAX_RANKS ||
	    p->ranks_per_node != G || p->nranks % G || p->rank >= p->nranks ||
	    p->rank % G != k || p->rank / G != p0->rank / G)
		return -EINVAL;
	if (!p->esz || !p->mtu_payload || p->nranks != p0->nranks ||
	    p->esz != p0->esz || p->mtu_payload != p0->mtu_payload ||
	    p->flags != p0->flags || p->group != p0->group ||
	    p->epoch != p0->epoch || p->op_id != p0->op_id)
		return -EINVAL;
	if ((p->flags & CS_A2A_F_RECV_DYNAMIC) && (p->flags & CS_A2A_F_NODATA))
		return -EINVAL;
	if (p->virt != p0->virt ||
	    (p->virt &&
	     ((p->flags & CS_A2A_F_NODATA) || !p->virt->gen || !p->virt->got ||
	      p->virt->at > p->esz || p->virt->tail > UINT32_MAX - p->esz)))
		return -EINVAL;
	if (!p->sendcounts || !p->sdispls)
		return CS_ERR_BAD_DESC;
	if (!(p->flags & CS_A2A_F_RECV_DYNAMIC) &&
	    (!p->recvcounts || !p->rdispls))
		return CS_ERR_BAD_DESC;
	if (p->send_count > UINT64_MAX / p->esz ||
	    p->recv_count > UINT64_MAX / p->esz)
		return CS_ERR_BAD_DESC;
	if (p->virt && (p->send_count > UINT64_MAX / (p->esz + p->virt->tail) ||
			p->recv_count > UINT64_MAX / (p->esz + p->virt->tail)))
		return CS_ERR_BAD_DESC; /* wire bytes */
	if (!(p->flags & CS_A2A_F_NODATA) &&
	    ((p->send_count && !p->sendbuf) || (p->recv_count && !p->recvbuf)))
		return CS_ERR_BAD_DESC;
	if (check_blocks(p->sendcounts, p->sdispls, p->nranks, p->send_count))
		return CS_ERR_BAD_DESC;
	if (!(p->flags & CS_A2A_F_RECV_DYNAMIC) &&
	    check_blocks(p->recvcounts, p->rdispls, p->nranks, p->recv_count))
		return CS_ERR_BAD_DESC;
	return 0;
}

void cs_a2a_node_free(struct cs_a2a_node *nd)
{
	if (!nd)
		return;
	for (uint32_t k = 0; k < nd->G; k++) {
		free(nd->loc[k].sc);
		free(nd->loc[k].sd);
		free(nd->loc[k].rc);
		free(nd->loc[k].rd);
	}
	free(nd->vtmp);
	free(nd);
}

static uint64_t *dup_counts(const uint64_t *v, uint32_t n)
{
	uint64_t *c = malloc((size_t)n * sizeof(*c));

	if (c)
		memcpy(c, v, (size_t)n * sizeof(*c));
	return c;
}

/* virt: the tails of local j's block for local k, made and handed over
 * (the intra-node exchange never touches the network). */
static void local_tails(struct cs_a2a_node *nd, uint32_t j, uint32_t k)
{
	const struct cs_a2a_virt *v = nd->virt;
	uint32_t base = nd->node * nd->G, src = base + j, dst = base + k;
	const uint8_t *sb = nd->loc[j].p.sendbuf;

	for (uint64_t i = 0; i < nd->loc[j].sc[dst]; i++) {
		const uint8_t *e = sb + (nd->loc[j].sd[dst] + i) * nd->esz;

		for (uint64_t off = 0; off < v->tail; off += 4096) {
			uint32_t n = (uint32_t)CS_MIN(4096, v->tail - off);

			v->gen(v->arg, src, dst, e, off, nd->vtmp, n);
			v->got(v->arg, src, dst, nd->loc[k].rd[src] + i,
			       nd->vtmp, off, n);
		}
	}
}

int cs_a2a_node_init(const struct cs_a2a_params *local, uint32_t nlocal,
		     struct cs_a2a_node **out)
{
	struct cs_a2a_node *nd;
	uint32_t G = nlocal, n, base;
	int ret;

	*out = NULL;
	if (!local || !G || G > CS_A2A_MAX_RPN)
		return -EINVAL;
	for (uint32_t k = 0; k < G; k++) {
		ret = check_local(&local[k], &local[0], G, k);
		if (ret)
			return ret;
	}
	n = local[0].nranks;
	nd = calloc(1, sizeof(*nd) + G * sizeof(nd->loc[0]));
	if (!nd)
		return -ENOMEM;
	nd->G = G;
	nd->n = n;
	nd->M = n / G;
	nd->node = local[0].rank / G;
	nd->esz = local[0].esz;
	nd->virt = local[0].virt;
	nd->wsz = nd->esz + (nd->virt ? nd->virt->tail : 0);
	nd->mtu = local[0].mtu_payload;
	if (nd->virt) {
		nd->vtmp = malloc(4096);
		if (!nd->vtmp) {
			ret = -ENOMEM;
			goto out_free;
		}
	}
	nd->bucket = !(local[0].flags & CS_A2A_F_NO_BUCKET);
	nd->nodata = local[0].flags & CS_A2A_F_NODATA;
	nd->dyn = local[0].flags & CS_A2A_F_RECV_DYNAMIC;
	nd->rail = G > 1 && (local[0].flags & CS_A2A_F_RAIL);
	/* streams into the node: one per node pair, G with rails */
	nd->dyn_streams = (nd->M - 1) * (nd->rail ? G : 1);
	base = nd->node * G;
	for (uint32_t k = 0; k < G; k++) {
		struct a2a_local *l = &nd->loc[k];

		l->p = local[k];
		l->sc = dup_counts(local[k].sendcounts, n);
		l->sd = dup_counts(local[k].sdispls, n);
		l->rc = nd->dyn ? calloc(n, sizeof(uint64_t))
				: dup_counts(local[k].recvcounts, n);
		l->rd = nd->dyn ? calloc(n, sizeof(uint64_t))
				: dup_counts(local[k].rdispls, n);
		ret = -ENOMEM;
		if (!l->sc || !l->sd || !l->rc || !l->rd)
			goto out_free;
		if (nd->dyn) {
			ret = check_blocks(l->sc, l->sd, n, l->p.send_count);
			if (ret)
				goto out_free;
			continue;
		}
		/* re-check the copies: the caller's arrays may be shared
		 * memory a hostile trainer writes while we read */
		ret = check_blocks(l->sc, l->sd, n, l->p.send_count);
		if (!ret)
			ret = check_blocks(l->rc, l->rd, n, l->p.recv_count);
		if (!ret)
			ret = check_overlap(l->rc, l->rd, n);
		if (ret)
			goto out_free;
		for (uint32_t s = 0; s < n; s++)
			if (s / G != nd->node)
				l->left += l->rc[s] * nd->wsz;
	}
	/* dynamic: the node's own blocks go first, in local order */
	for (uint32_t k = 0; nd->dyn && k < G; k++) {
		struct a2a_local *l = &nd->loc[k];

		for (uint32_t j = 0; j < G; j++) {
			uint64_t c = nd->loc[j].sc[base + k];

			if (c > l->p.recv_count - l->used) {
				ret = CS_ERR_BAD_DESC;
				goto out_free;
			}
			l->rc[base + j] = c;
			l->rd[base + j] = l->used;
			l->used += c;
		}
	}
	/* inside the node both ends are known: they must agree */
	for (uint32_t j = 0; j < G; j++)
		for (uint32_t k = 0; k < G; k++)
			if (nd->loc[j].sc[base + k] !=
			    nd->loc[k].rc[base + j]) {
				ret = CS_ERR_BAD_DESC;
				goto out_free;
			}
	/* the intra-node exchange: local j's block for local k */
	for (uint32_t j = 0; j < G; j++)
		for (uint32_t k = 0; k < G; k++) {
			uint64_t b = nd->loc[j].sc[base + k] * nd->esz;

			nd->local_bytes += b;
			if (nd->nodata || !b)
				continue;
			memcpy((uint8_t *)nd->loc[k].p.recvbuf +
				       nd->loc[k].rd[base + j] * nd->esz,
			       (const uint8_t *)nd->loc[j].p.sendbuf +
				       nd->loc[j].sd[base + k] * nd->esz,
			       b);
			if (nd->virt)
				local_tails(nd, j, k);
		}
	*out = nd;
	return 0;
out_free:
	cs_a2a_node_free(nd);
	return ret;
}

void cs_a2a_node_set_notify(struct cs_a2a_node *nd,
			    void (*fn)(void *arg, uint32_t local), void *arg)
{
	nd->notify = fn;
	nd->notify_arg = arg;
}

/* ---- streams ------------------------------------------------------------ */

/* Frame @f of @s: stream offset and length. */
static void frame_geom(const struct cs_a2a_node *nd, const struct a2a_stream *s,
		       uint32_t f, uint64_t *off, uint32_t *len)
{
	uint32_t lo = 0, hi = nd->G * nd->G;

	if (nd->bucket) {
		*off = (uint64_t)f * nd->mtu;
		*len = (uint32_t)CS_MIN((uint64_t)nd->mtu, s->bytes - *off);
		return;
	}
	/* the block holding frame f: the last b with foff[b] <= f */
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;

		if (s->foff[mid] <= f)
			lo = mid;
		else
			hi = mid;
	}
	/* lo is not empty: an empty block's foff equals its successor's,
	 * and foff[G*G] (all frames) > f */
	*off = s->boff[lo] + (uint64_t)(f - s->foff[lo]) * nd->mtu;
	*len = (uint32_t)CS_MIN((uint64_t)nd->mtu, s->boff[lo + 1] - *off);
}

/* Set up stream @s of @bytes_of(j, k) block sizes. */
static int stream_init(struct cs_a2a *a, struct a2a_stream *s, bool tx,
		       uint32_t pnode)
{
	const struct cs_a2a_node *nd = a->nd;
	uint32_t G = nd->G, nb = G * G;
	uint64_t fr = 0, cap = 0;

	s->boff = calloc(nb + 1, sizeof(*s->boff));
	s->foff = calloc(nb + 1, sizeof(*s->foff));
	if (!s->boff || !s->foff)
		return -ENOMEM;
	s->known = true;
	if (nd->dyn) {
		s->base = 1;
		s->on = true; /* an empty stream still sends its counts */
	}
	if (nd->dyn && !tx) {
		/* sizes come with frame 0; the bitmap is sized for the most
		 * the node's receive buffers can take */
		for (uint32_t k = 0; k < G; k++)
			cap += nd->loc[k].p.recv_count * nd->wsz;
		cap = cap / nd->mtu + nb + 2;
		if (cap >= UINT32_MAX / 2)
			return -E2BIG;
		s->known = false;
		s->cap = cap;
		s->left = 1;
		s->bits =
			calloc(CS_DIV_ROUND_UP(cap, 64) + 1, sizeof(uint64_t));
		return s->bits ? 0 : -ENOMEM;
	}
	if (nd->dyn) {
		s->cnt = calloc(nb, sizeof(*s->cnt));
		if (!s->cnt)
			return -ENOMEM;
		for (uint32_t b = 0; b < nb; b++)
			if (!nd->rail || b % G == a->me)
				s->cnt[b] =
					nd->loc[b / G].sc[pnode * G + b % G];
	}
	for (uint32_t b = 0; b < nb; b++) {
		uint32_t j = b / G, k = b % G;
		uint64_t cnt = tx ? nd->loc[j].sc[pnode * G + k]
				  : nd->loc[k].rc[pnode * G + j];
		uint64_t by;

		if (nd->rail && k != a->me)
			cnt = 0; /* another rail's */
		by = cnt * nd->wsz;

		s->boff[b + 1] = s->boff[b] + by;
		s->foff[b] = fr;
		fr += CS_DIV_ROUND_UP(by, nd->mtu);
	}
	s->foff[nb] = fr;
	s->bytes = s->boff[nb];
	if (nd->bucket)
		fr = CS_DIV_ROUND_UP(s->bytes, nd->mtu);
	if (fr >= UINT32_MAX / 2)
		return -E2BIG;
	s->nfr = (uint32_t)fr;
	s->on = s->nfr > 0 || nd->dyn;
	s->left = s->nfr + s->base;
	s->cap = fr + s->base;
	s->bits = calloc(CS_DIV_ROUND_UP(s->cap, 64) + 1, sizeof(uint64_t));
	return s->bits ? 0 : -ENOMEM;
}

/* Stored bytes of @wire bytes of whole elements. */
static inline uint64_t stored(const struct cs_a2a_node *nd, uint64_t wire)
{
	return nd->virt ? wire / nd->wsz * nd->esz : wire;
}

/* Gather the blocks of send stream @s (to node @b) into @dst. */
static void stream_stage(const struct cs_a2a *a, const struct a2a_stream *s,
			 uint32_t b, uint8_t *dst)
{
	const struct cs_a2a_node *nd = a->nd;
	uint32_t G = nd->G;

	for (uint32_t blk = 0; blk < G * G; blk++) {
		const struct a2a_local *l = &nd->loc[blk / G];
		uint64_t by = stored(nd, s->boff[blk + 1] - s->boff[blk]);

		if (by)
			memcpy(dst + stored(nd, s->boff[blk]),
			       (const uint8_t *)l->p.sendbuf +
				       l->sd[b * G + blk % G] * nd->esz,
			       by);
	}
}

void cs_a2a_free(struct cs_a2a *a)
{
	if (!a)
		return;
	for (uint32_t c = 0; a->tx && c < a->C; c++) {
		free(a->tx[c].boff);
		free(a->tx[c].foff);
		free(a->tx[c].bits);
		free(a->tx[c].cnt);
		free(a->rx[c].boff);
		free(a->rx[c].foff);
		free(a->rx[c].bits);
	}
	free(a->tx);
	free(a->rx);
	free(a->stage);
	free(a->vframe);
	free(a);
}

int cs_a2a_init(struct cs_a2a_node *nd, uint32_t local, struct cs_a2a **out)
{
	struct cs_a2a *a;
	uint64_t stage = 0;
	uint32_t G, M;
	int ret;

	*out = NULL;
	if (!nd || local >= nd->G)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	G = nd->G;
	M = nd->M;
	a->nd = nd;
	a->me = local;
	a->rank = nd->node * G + local;
	a->C = M - 1;
	a->tx = calloc(a->C ? a->C : 1, sizeof(*a->tx));
	a->rx = calloc(a->C ? a->C : 1, sizeof(*a->rx));
	ret = -ENOMEM;
	if (!a->tx || !a->rx)
		goto out_free;
	for (uint32_t c = 0; c < a->C; c++) {
		uint32_t b = (nd->node + 1 + c) % M;
		uint32_t src = umod((int64_t)nd->node - 1 - c, M);

		if (c % G != local && !nd->rail)
			continue;
		ret = stream_init(a, &a->tx[c], true, b);
		if (!ret)
			ret = stream_init(a, &a->rx[c], false, src);
		if (ret)
			goto out_free;
		a->tx[c].pnode = b;
		a->tx[c].peer = b * G + local;
		a->rx[c].pnode = src;
		a->rx[c].peer = src * G + local;
		a->ack_left += a->tx[c].left;
		a->rx_left += a->rx[c].left;
		a->st.tx_streams += a->tx[c].on;
		a->st.rx_streams += a->rx[c].on;
		if (G > 1 && !nd->nodata)
			stage += stored(nd, a->tx[c].bytes);
	}
	if (nd->virt) {
		a->vframe = malloc(((size_t)a->C + 1) * nd->mtu);
		if (!a->vframe)
			goto out_free;
	}
	/* two-level: the intra-node stage gathers every stream this rank
	 * sends into one pinned buffer; flat sends from the caller's */
	if (stage) {
		a->stage = malloc(stage);
		if (!a->stage)
			goto out_free;
	}
	stage = 0;
	for (uint32_t c = 0; c < a->C; c++) {
		struct a2a_stream *s = &a->tx[c];

		if (!s->on || nd->nodata)
			continue;
		if (G > 1) {
			stream_stage(a, s, s->pnode, a->stage + stage);
			s->data = a->stage + stage;
			stage += stored(nd, s->bytes);
			a->st.staged_bytes += s->bytes;
		} else {
			s->data = (const uint8_t *)nd->loc[0].p.sendbuf +
				  nd->loc[0].sd[s->pnode] * nd->esz;
		}
	}
	if (!local)
		a->st.local_bytes = nd->local_bytes;
	*out = a;
	return 0;
out_free:
	cs_a2a_free(a);
	return ret;
}

void cs_a2a_get_stats(const struct cs_a2a *a, struct cs_a2a_stats *st)
{
	*st = a->st;
}

void cs_a2a_recv_layout(const struct cs_a2a *a, const uint64_t **counts,
			const uint64_t **displs)
{
	*counts = a->nd->loc[a->me].rc;
	*displs = a->nd->loc[a->me].rd;
}

/* ---- transmit ----------------------------------------------------------- */

/* The last of stream @s's @nb blocks that starts at or before wire byte
 * @off (its block offsets ascend). */
static uint32_t block_at(const struct a2a_stream *s, uint32_t nb, uint64_t off)
{
	uint32_t lo = 0, hi = nb;

	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;

		if (s->boff[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* virt: wire bytes [off, off + len) of send stream @s into @out: the
 * stored bytes from the stream's data, the tails from gen(). */
static void build_frame(const struct cs_a2a *a, const struct a2a_stream *s,
			uint64_t off, uint32_t len, uint8_t *out)
{
	const struct cs_a2a_node *nd = a->nd;
	const struct cs_a2a_virt *v = nd->virt;
	uint32_t G = nd->G, lo = block_at(s, G * G, off), at = v->at;
	uint64_t pos = off, end = off + len;

	while (pos < end) {
		uint64_t e = pos / nd->wsz, in = pos % nd->wsz, n;
		const uint8_t *st = s->data + e * nd->esz;
		uint32_t src, dst;

		while (s->boff[lo + 1] <= pos)
			lo++;
		/* block (j, k): local j of this node to local k of pnode;
		 * flat: this rank to the peer */
		src = G > 1 ? nd->node * G + lo / G : a->rank;
		dst = G > 1 ? s->pnode * G + lo % G : s->peer;
		if (in < at) {
			n = CS_MIN(at - in, end - pos);
			memcpy(out, st + in, n);
		} else if (in < at + v->tail) {
			n = CS_MIN(at + v->tail - in, end - pos);
			v->gen(v->arg, src, dst, st, in - at, out, (uint32_t)n);
		} else {
			n = CS_MIN(nd->wsz - in, end - pos);
			memcpy(out, st + in - v->tail, n);
		}
		out += n;
		pos += n;
	}
}

static void fill_tx(const struct cs_a2a *a, uint32_t c, uint32_t f,
		    struct cs_flow_tx *tx, uint8_t *vbuf)
{
	const struct a2a_stream *s = &a->tx[c];
	const struct cs_a2a_params *p = &a->nd->loc[a->me].p;
	struct cs_pkt_hdr *h = &tx->hdr;
	uint64_t off;
	uint32_t len;

	if (s->base && !f) { /* the count frame */
		off = 0;
		len = a->nd->G * a->nd->G * sizeof(uint64_t);
	} else {
		frame_geom(a->nd, s, f - s->base, &off, &len);
	}
	memset(h, 0, sizeof(*h));
	h->version = CS_PROTO_VERSION;
	h->type = CS_PKT_DATA;
	if (f + 1 == s->nfr + s->base)
		h->flags = CS_PKT_F_LAST;
	h->src = (uint16_t)a->rank;
	h->channel = (uint16_t)c;
	h->group = p->group;
	h->epoch = p->epoch;
	h->op = p->op_id;
	h->step = f;
	h->offset = off;
	h->len = len;
	tx->dst = s->peer;
	tx->len = len;
	if (s->base && !f)
		tx->payload = s->cnt;
	else
		tx->payload = s->data ? s->data + off : NULL;
	if (a->nd->virt && s->data && !(s->base && !f)) {
		build_frame(a, s, off, len, vbuf);
		tx->payload = vbuf;
	}
	tx->cookie = (uint64_t)c << 32 | f;
}

uint32_t cs_a2a_channels(const struct cs_a2a *a)
{
	return a->C;
}

int64_t cs_a2a_chan_peer(const struct cs_a2a *a, uint32_t ch)
{
	if (ch >= a->C || !a->tx[ch].on)
		return -1;
	return a->tx[ch].peer;
}

unsigned cs_a2a_next(struct cs_a2a *a, uint32_t ch, struct cs_flow_tx *out,
		     unsigned max)
{
	struct a2a_stream *s;
	unsigned n = 0;

	if (ch >= a->C || a->err || a->nd->err)
		return 0;
	s = &a->tx[ch];
	if (a->nd->virt) /* one frame buffer per channel */
		max = CS_MIN(max, 1u);
	while (s->on && n < max && s->cur < s->nfr + s->base) {
		/* data only once the receiver holds the counts */
		if (s->base && s->cur && !test_bit(s->bits, 0))
			break;
		fill_tx(a, ch, s->cur++, &out[n],
			a->vframe ? a->vframe + (size_t)ch * a->nd->mtu : NULL);
		a->st.tx_frames++;
		a->st.tx_bytes += out[n].len;
		n++;
	}
	return n;
}

/* A cookie names a frame this engine has handed out. */
static int decode_cookie(const struct cs_a2a *a, uint64_t cookie, uint32_t *c,
			 uint32_t *f)
{
	*c = (uint32_t)(cookie >> 32);
	*f = (uint32_t)cookie;
	if (*c >= a->C || !a->tx[*c].on || *f >= a->tx[*c].cur)
		return -EINVAL;
	return 0;
}

int cs_a2a_on_acked(struct cs_a2a *a, uint64_t cookie)
{
	struct a2a_stream *s;
	uint32_t c, f;

	if (a->err)
		return 0;
	if (decode_cookie(a, cookie, &c, &f))
		return -EINVAL;
	s = &a->tx[c];
	if (test_bit(s->bits, f))
		return 0;
	set_bit(s->bits, f);
	s->left--;
	a->ack_left--;
	return 0;
}

int cs_a2a_rebuild(struct cs_a2a *a, uint64_t cookie, struct cs_flow_tx *out)
{
	uint32_t c, f;

	if (a->err || a->nd->err)
		return -ECANCELED;
	if (decode_cookie(a, cookie, &c, &f))
		return -EINVAL;
	/* rule (a): the same pinned bytes, so the same frame */
	fill_tx(a, c, f, out,
		a->vframe ? a->vframe + (size_t)a->C * a->nd->mtu : NULL);
	out->hdr.flags |= CS_PKT_F_RETX;
	a->st.rebuilds++;
	return 0;
}

/* ---- receive ------------------------------------------------------------ */

/* virt: wire bytes [boff, boff + n) of the block from @src to @dst, which
 * starts at element @rd of @l's receive buffer: stored bytes there, tails
 * to got(). */
static void scatter_virt(const struct cs_a2a_node *nd, struct a2a_local *l,
			 uint32_t src, uint32_t dst, uint64_t rd, uint64_t boff,
			 const uint8_t *pl, uint64_t n)
{
	const struct cs_a2a_virt *v = nd->virt;
	uint64_t end = boff + n;

	while (boff < end) {
		uint64_t e = boff / nd->wsz, in = boff % nd->wsz, k;
		uint8_t *st = (uint8_t *)l->p.recvbuf + (rd + e) * nd->esz;

		if (in < v->at) {
			k = CS_MIN(v->at - in, end - boff);
			memcpy(st + in, pl, k);
		} else if (in < v->at + v->tail) {
			k = CS_MIN(v->at + v->tail - in, end - boff);
			v->got(v->arg, src, dst, rd + e, pl, in - v->at,
			       (uint32_t)k);
		} else {
			k = CS_MIN(nd->wsz - in, end - boff);
			memcpy(st + in - v->tail, pl, k);
		}
		pl += k;
		boff += k;
	}
}

/* Copy frame bytes [off, off + len) of stream @s from node @a0 into the
 * local ranks' buffers, block by block. */
static void scatter(struct cs_a2a *a, const struct a2a_stream *s, uint32_t a0,
		    uint64_t off, uint32_t len, const uint8_t *pl)
{
	struct cs_a2a_node *nd = a->nd;
	uint32_t G = nd->G, lo = block_at(s, G * G, off);
	uint64_t pos = off, end = off + len;

	for (uint32_t b = lo; pos < end && b < G * G; b++) {
		uint32_t j = b / G, k = b % G;
		struct a2a_local *l = &nd->loc[k];
		uint64_t piece;

		if (s->boff[b + 1] <= pos)
			continue;
		piece = CS_MIN(end, s->boff[b + 1]) - pos;
		if (pl && nd->virt)
			scatter_virt(nd, l, a0 * G + j, nd->node * G + k,
				     l->rd[a0 * G + j], pos - s->boff[b],
				     pl + (pos - off), piece);
		else if (pl)
			memcpy((uint8_t *)l->p.recvbuf +
				       l->rd[a0 * G + j] * nd->esz +
				       (pos - s->boff[b]),
			       pl + (pos - off), piece);
		pos += piece;
		if (nd->dyn)
			continue;
		l->left -= piece;
		if (!l->left && k != a->me && nd->notify)
			nd->notify(nd->notify_arg, k);
	}
}

/* RECV_DYNAMIC: a stream into the node is complete. */
static void stream_done(struct cs_a2a *a)
{
	struct cs_a2a_node *nd = a->nd;

	if (--nd->dyn_streams)
		return;
	for (uint32_t k = 0; k < nd->G; k++)
		if (k != a->me && nd->notify)
			nd->notify(nd->notify_arg, k);
}

/*
 * RECV_DYNAMIC: the count frame of stream @s. Each block is given room
 * in its local receiver's buffer, in arrival order; a block that does not
 * fit ends the operation with -ENOSPC naming its sender (the caller's
 * buffer is too small for what the peers send).
 */
static int rx_counts(struct cs_a2a *a, struct a2a_stream *s,
		     const struct cs_pkt_hdr *h, const void *payload)
{
	struct cs_a2a_node *nd = a->nd;
	uint32_t G = nd->G, nb = G * G;
	uint64_t cnt, fr = 0, need[CS_A2A_MAX_RPN] = { 0 };

	if (h->offset || h->len != nb * sizeof(uint64_t) || !payload)
		return CS_ERR_PROTO;
	if (test_bit(s->bits, 0)) {
		a->st.rx_dup++;
		return CS_A2A_RX_DUP;
	}
	for (uint32_t b = 0; b < nb; b++) {
		uint32_t k = b % G;

		memcpy(&cnt, (const uint8_t *)payload + b * sizeof(cnt),
		       sizeof(cnt));
		if (nd->rail && k != a->me) {
			if (cnt) /* for another rail: not ours to place */
				return CS_ERR_PROTO;
			continue;
		}
		if (cnt > nd->loc[k].p.recv_count - nd->loc[k].used ||
		    need[k] > nd->loc[k].p.recv_count - nd->loc[k].used - cnt) {
			cs_a2a_abort(a, -ENOSPC, s->pnode * G + b / G);
			return CS_ERR_PROTO;
		}
		need[k] += cnt;
	}
	for (uint32_t b = 0; b < nb; b++) {
		struct a2a_local *l = &nd->loc[b % G];
		uint32_t src = s->pnode * G + b / G;
		uint64_t by;

		memcpy(&cnt, (const uint8_t *)payload + b * sizeof(cnt),
		       sizeof(cnt));
		by = cnt * nd->wsz;
		if (!nd->rail || b % G == a->me) {
			l->rc[src] = cnt;
			l->rd[src] = l->used;
			l->used += cnt;
		}
		s->boff[b + 1] = s->boff[b] + by;
		s->foff[b] = fr;
		fr += CS_DIV_ROUND_UP(by, nd->mtu);
	}
	s->foff[nb] = fr;
	s->bytes = s->boff[nb];
	if (nd->bucket)
		fr = CS_DIV_ROUND_UP(s->bytes, nd->mtu);
	s->nfr = (uint32_t)fr; /* < cap: the sizes fit the buffers */
	s->known = true;
	set_bit(s->bits, 0);
	s->left += s->nfr - 1;
	a->rx_left += s->nfr;
	a->rx_left--;
	a->st.rx_frames++;
	if (!s->left)
		stream_done(a);
	/* the sender sends its data only once this is acknowledged */
	return CS_FLOW_RX_ACK_NOW;
}

int cs_a2a_on_data(struct cs_a2a *a, const struct cs_pkt_hdr *h,
		   const void *payload)
{
	const struct cs_a2a_params *p = &a->nd->loc[a->me].p;
	struct a2a_stream *s;
	uint64_t off;
	uint32_t len;

	if (h->epoch != p->epoch) {
		if ((int32_t)(h->epoch - p->epoch) > 0)
			return CS_ERR_EPOCH;
		return CS_A2A_RX_STALE;
	}
	if (a->err || a->nd->err)
		return CS_A2A_RX_LATE;
	if (h->channel >= a->C)
		return CS_ERR_PROTO;
	s = &a->rx[h->channel];
	/* the stream must be ours, from the rank that owns it */
	if (!s->on || h->src != s->peer)
		return CS_ERR_PROTO;
	if (s->base && !h->step)
		return rx_counts(a, s, h, payload);
	/* a correct sender sends data only after its counts were acked */
	if (!s->known || h->step < s->base || h->step - s->base >= s->nfr)
		return CS_ERR_PROTO;
	frame_geom(a->nd, s, h->step - s->base, &off, &len);
	if (h->offset != off || h->len != len)
		return CS_ERR_PROTO;
	if (!payload && !a->nd->nodata)
		return CS_ERR_PROTO;
	if (test_bit(s->bits, h->step)) {
		a->st.rx_dup++;
		return CS_A2A_RX_DUP;
	}
	set_bit(s->bits, h->step);
	s->left--;
	a->rx_left--;
	a->st.rx_frames++;
	a->st.rx_bytes += len;
	scatter(a, s, s->pnode, off, len, a->nd->nodata ? NULL : payload);
	if (s->left)
		return CS_A2A_RX_NEW;
	if (a->nd->dyn)
		stream_done(a);
	/* the stream is complete: its sender waits for this ACK */
	return CS_FLOW_RX_ACK_NOW;
}

/* ---- state -------------------------------------------------------------- */

bool cs_a2a_result_ready(const struct cs_a2a *a)
{
	return !a->err && !a->nd->err && !a->rx_left &&
	       !(a->nd->dyn ? a->nd->dyn_streams : a->nd->loc[a->me].left);
}

int cs_a2a_status(const struct cs_a2a *a, uint32_t *culprit)
{
	const struct cs_a2a_node *nd = a->nd;

	if (culprit)
		*culprit = UINT32_MAX;
	if (a->err || nd->err) {
		if (culprit)
			*culprit = a->err ? a->culprit : nd->culprit;
		return a->err ? a->err : nd->err;
	}
	if (a->rx_left || a->ack_left ||
	    (nd->dyn ? nd->dyn_streams : nd->loc[a->me].left))
		return -EINPROGRESS;
	return 0;
}

int cs_a2a_abort(struct cs_a2a *a, int err, uint32_t culprit)
{
	if (err >= 0)
		return -EINVAL;
	if (a->err || cs_a2a_status(a, NULL) == 0)
		return 0;
	a->err = err;
	a->culprit = culprit;
	/* the node's other ranks wait for data this one may never place */
	if (!a->nd->err) {
		a->nd->err = err;
		a->nd->culprit = culprit;
		for (uint32_t k = 0; k < a->nd->G; k++)
			if (k != a->me && a->nd->notify)
				a->nd->notify(a->nd->notify_arg, k);
	}
	return 0;
}

/* The rank an unfinished engine waits on: a missing stream's sender, else
 * an unacknowledged one's receiver. */
static uint32_t waiting_on(const struct cs_a2a *a)
{
	for (uint32_t c = 0; c < a->C; c++)
		if (a->rx[c].on && a->rx[c].left)
			return a->rx[c].peer;
	for (uint32_t c = 0; c < a->C; c++)
		if (a->tx[c].on && a->tx[c].left)
			return a->tx[c].peer;
	return UINT32_MAX;
}

static cs_ns_t a2a_deadline(const void *f)
{
	const struct cs_a2a *a = f;
	const struct cs_a2a_params *p = &a->nd->loc[a->me].p;

	if (!p->deadline || cs_a2a_status(a, NULL) != -EINPROGRESS)
		return UINT64_MAX; /* CS_NS_NEVER */
	return p->start + p->deadline;
}

static bool a2a_check_deadline(void *f, cs_ns_t now)
{
	struct cs_a2a *a = f;

	if (now < a2a_deadline(a))
		return false;
	return !cs_a2a_abort(a, CS_ERR_TIMEOUT, waiting_on(a));
}

/* ---- flow.h ------------------------------------------------------------- */

static uint32_t af_channels(const void *f)
{
	return cs_a2a_channels(f);
}

static int64_t af_chan_peer(const void *f, uint32_t ch)
{
	return cs_a2a_chan_peer(f, ch);
}

static unsigned af_next(void *f, cs_ns_t now, uint32_t ch,
			struct cs_flow_tx *out, unsigned max)
{
	(void)now;
	return cs_a2a_next(f, ch, out, max);
}

static int af_on_data(void *f, cs_ns_t now, const struct cs_pkt_hdr *h,
		      const void *payload)
{
	(void)now;
	return cs_a2a_on_data(f, h, payload);
}

static int af_on_acked(void *f, uint64_t cookie)
{
	return cs_a2a_on_acked(f, cookie);
}

static int af_rebuild(void *f, uint64_t cookie, struct cs_flow_tx *out)
{
	return cs_a2a_rebuild(f, cookie, out);
}

static int af_status(const void *f, uint32_t *culprit)
{
	return cs_a2a_status(f, culprit);
}

static int af_abort(void *f, int err, uint32_t culprit)
{
	return cs_a2a_abort(f, err, culprit);
}

static bool af_result_ready(const void *f)
{
	return cs_a2a_result_ready(f);
}

const struct cs_flow_ops cs_a2a_flow_ops = {
	.channels = af_channels,
	.chan_peer = af_chan_peer,
	.next = af_next,
	.on_data = af_on_data,
	.on_acked = af_on_acked,
	.rebuild = af_rebuild,
	.status = af_status,
	.abort = af_abort,
	.check_deadline = a2a_check_deadline,
	.deadline = a2a_deadline,
	.result_ready = af_result_ready,
};
