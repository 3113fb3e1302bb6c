/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-p2p: one trainer's part of a point-to-point check (cs_send,
 * cs_recv), for tests/netns/test_trainers.sh and tests/client/p2p_loop.sh.
 * Joins group $P2P_GROUP (default "p2p") from the launcher variables (RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and runs one mode:
 *
 *   ring ITERS     every rank sends to both neighbours and receives from
 *                  both, all four in flight at once, for sizes of 0, 1,
 *                  1000, 12345 and 1 Mi bytes (several frames each, f32 or
 *                  u8), ITERS times each with a new tag; every byte checked
 *                  (a pattern of sender, receiver, iteration and index);
 *                  then 8 messages to the next rank with one tag, posted at
 *                  once, arrive in order. Prints "ring ok rank R bytes=B".
 *   bad            refusals, each checked: a peer that is this rank or past
 *                  the group (CS_ERR_BAD_DESC at once), a buffer outside
 *                  the client's (-EFAULT), sizes that differ between rank
 *                  0's send and rank 1's receive (CS_ERR_BAD_DESC on both,
 *                  the message naming the other's size); then a proper
 *                  exchange works; a send rank 1 never receives ends with
 *                  CS_ERR_TIMEOUT at coll.deadline ($P2P_DEADLINE_S: that
 *                  deadline in seconds). Prints "bad ok rank R".
 *   die            rank 1 posts a receive of 256 MiB from rank 0 and exits
 *                  without a word 200 ms after a second small message
 *                  told it that rank 0's send was taken (the transfer
 *                  runs); rank 0's send ends with
 *                  an error naming rank 1 (or, the transfer done first,
 *                  succeeds), then a send to rank 1 ends with
 *                  CS_ERR_PEER_LOST "rank 1 is gone" (on rank 1's node,
 *                  where the group lost it) or CS_ERR_TIMEOUT at
 *                  coll.deadline (elsewhere). Ranks other
 *                  than 0 and 1 exchange around their own ring meanwhile.
 *                  Prints "die ok rank R ...".
 *
 *   rooted         cs_reduce, cs_gather and cs_scatter from every root, 1
 *                  and 70001 f32 per rank, every element checked; a root
 *                  past the group and a reserved tag refused. Prints
 *                  "rooted ok rank R roots=N".
 *   reduce         cs_reduce of f32, f64, f16, bf16, i32, i64 x sum, prod,
 *                  min, max, from every root, in place on the root and
 *                  not, the other ranks' recv NULL, at counts below the
 *                  group's size, not a multiple of it, above the
 *                  allreduce threshold and 1 MiB; every element against
 *                  the exact result (small integers: exact in every
 *                  dtype, whatever the order); then a NULL recv on the
 *                  root and a bad dtype refused. Prints "reduce ok rank R
 *                  cases=N".
 *   reducebig MIB [allreduce]
 *                  one cs_reduce (or cs_allreduce) of MIB MiB of f32 to
 *                  root 0, checked; for the byte count of
 *                  tests/netns/test_p2p.sh. Prints "reducebig ok rank R".
 *   reducedie      a cs_reduce of 16 MiB of f32 to rank 0, and the last
 *                  rank exits at once after posting it: rank 0's request
 *                  must end with an error (CS_ERR_PEER_LOST, _CANCELLED, or
 *                  CS_ERR_TIMEOUT at coll.deadline where the dead rank's
 *                  reduce-scatter was done and only its block is missing),
 *                  the others' with one or done: no hang. Prints
 *                  "reducedie ok rank R: ...".
 *
 * Exit 0 when the mode's checks held, 1 otherwise (with what was wrong),
 * 2 on usage.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <collstack/collstack.h>

#define P2P_BIG (256u << 20)

static struct cs_client *c;
static struct cs_group *g;
static int rank, size;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stdout, "FAIL rank %d: ", rank);                       \
		fprintf(stdout, __VA_ARGS__);                                  \
		fprintf(stdout, "\n");                                         \
		exit(1);                                                       \
	} while (0)

static uint8_t pat(int src, int dst, unsigned it, size_t i)
{
	return (uint8_t)(src * 37 + dst * 11 + it * 7 + i * 13 + (i >> 8));
}

static void fill(uint8_t *p, size_t n, int src, int dst, unsigned it)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(src, dst, it, i);
}

static size_t wrong(const uint8_t *p, size_t n, int src, int dst, unsigned it)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += p[i] != pat(src, dst, it, i);
	return bad;
}

static void *buf(size_t len)
{
	struct cs_buf *b;

	if (cs_buf_alloc(c, len ? len : 1, &b))
		FAIL("cs_buf_alloc %zu: %s", len, cs_errmsg(c));
	return cs_buf_ptr(b);
}

static int wait_req(cs_req_t r)
{
	return cs_wait(c, r, -1);
}

static void mode_ring(unsigned iters)
{
	static const size_t sizes[] = { 0, 1, 1000, 12345, 1u << 20 };
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	size_t total = 0, maxlen = 1u << 20;
	uint8_t *sn = buf(maxlen), *sp = buf(maxlen);
	uint8_t *rn = buf(maxlen), *rp = buf(maxlen);
	uint8_t *m[8];

	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (unsigned it = 0; it < iters; it++) {
			size_t n = sizes[s];
			/* f32 where the size allows it, else bytes */
			enum cs_dtype dt = n % 4 ? CS_U8 : CS_F32;
			size_t cnt = dt == CS_U8 ? n : n / 4;
			unsigned tag = s * 1000 + it;
			cs_req_t r[4];

			fill(sn, n, rank, next, tag);
			fill(sp, n, rank, prev, tag + 1);
			memset(rn, 0xee, n);
			memset(rp, 0xee, n);
			/* from prev with tag; from next with tag + 1 */
			if (cs_recv(g, rp, cnt, dt, prev, tag, &r[0]) ||
			    cs_recv(g, rn, cnt, dt, next, tag + 1, &r[1]) ||
			    cs_send(g, sn, cnt, dt, next, tag, &r[2]) ||
			    cs_send(g, sp, cnt, dt, prev, tag + 1, &r[3]))
				FAIL("post %zu bytes: %s", n, cs_errmsg(c));
			for (int k = 0; k < 4; k++)
				if (wait_req(r[k]))
					FAIL("%zu bytes, tag %u: %s", n, tag,
					     cs_errmsg(c));
			if (wrong(rp, n, prev, rank, tag) ||
			    wrong(rn, n, next, rank, tag + 1))
				FAIL("%zu bytes, tag %u: %zu + %zu wrong", n,
				     tag, wrong(rp, n, prev, rank, tag),
				     wrong(rn, n, next, rank, tag + 1));
			total += 2 * n;
		}
	/* in order: 8 sends of one tag posted at once */
	{
		cs_req_t rs[8], rr[8];

		for (unsigned k = 0; k < 8; k++) {
			m[k] = buf(3000);
			if (cs_recv(g, m[k], 3000, CS_U8, prev, 77, &rr[k]))
				FAIL("post recv: %s", cs_errmsg(c));
		}
		for (unsigned k = 0; k < 8; k++) {
			uint8_t *x = buf(3000);

			fill(x, 3000, rank, next, 500 + k);
			if (cs_send(g, x, 3000, CS_U8, next, 77, &rs[k]))
				FAIL("post send: %s", cs_errmsg(c));
		}
		for (unsigned k = 0; k < 8; k++)
			if (wait_req(rr[k]) || wait_req(rs[k]))
				FAIL("ordered %u: %s", k, cs_errmsg(c));
		for (unsigned k = 0; k < 8; k++)
			if (wrong(m[k], 3000, prev, rank, 500 + k))
				FAIL("message %u of one tag out of order", k);
	}
	printf("ring ok rank %d bytes=%zu\n", rank, total);
}

static void expect(int ret, int want, const char *what, const char *needle)
{
	if (ret != want)
		FAIL("%s: %d (%s), expected %d", what, ret,
		     ret ? cs_errmsg(c) : "ok", want);
	if (needle && !strstr(cs_errmsg(c), needle))
		FAIL("%s: message \"%s\" lacks \"%s\"", what, cs_errmsg(c),
		     needle);
	printf("  rank %d %s: %s\n", rank, what, ret ? cs_errmsg(c) : "ok");
}

static void mode_bad(void)
{
	uint8_t *b = buf(4096), local[16];
	cs_req_t r;
	int ret;

	ret = cs_send(g, b, 16, CS_U8, rank, 0, &r);
	if (!ret)
		ret = wait_req(r);
	expect(ret, CS_ERR_BAD_DESC, "send to itself", "root rank");
	ret = cs_recv(g, b, 16, CS_U8, size, 0, &r);
	if (!ret)
		ret = wait_req(r);
	expect(ret, CS_ERR_BAD_DESC, "recv from past the group", "root rank");
	ret = cs_send(g, local, 16, CS_U8, (rank + 1) % size, 0, &r);
	expect(ret, -EFAULT, "send of memory not the client's", "not inside");
	if (rank == 0) {
		fill(b, 100, 0, 1, 3);
		ret = cs_send(g, b, 100, CS_U8, 1, 3, &r);
		if (!ret)
			ret = wait_req(r);
		expect(ret, CS_ERR_BAD_DESC,
		       "send of 100 bytes to a recv of 200", "is 200 bytes");
	} else if (rank == 1) {
		ret = cs_recv(g, b, 50, CS_F32, 0, 3, &r);
		if (!ret)
			ret = wait_req(r);
		expect(ret, CS_ERR_BAD_DESC,
		       "recv of 200 bytes of a send of 100", "is 100 bytes");
	}
	/* and a proper one then works, the same tag included */
	if (rank == 0) {
		fill(b, 4096, 0, 1, 3);
		if (cs_send(g, b, 1024, CS_F32, 1, 3, &r) || wait_req(r))
			FAIL("the proper send: %s", cs_errmsg(c));
	} else if (rank == 1) {
		memset(b, 0, 4096);
		if (cs_recv(g, b, 4096, CS_U8, 0, 3, &r) || wait_req(r))
			FAIL("the proper recv: %s", cs_errmsg(c));
		if (wrong(b, 4096, 0, 1, 3))
			FAIL("the proper recv: %zu wrong",
			     wrong(b, 4096, 0, 1, 3));
	}
	/* a send nobody receives: CS_ERR_TIMEOUT at coll.deadline; rank 1
	 * waits for rank 0's word that it came */
	if (rank == 0) {
		ret = cs_send(g, b, 10, CS_U8, 1, 99, &r);
		if (!ret)
			ret = wait_req(r);
		expect(ret, CS_ERR_TIMEOUT, "send nobody receives",
		       "no matching recv");
		if (cs_send(g, b, 1, CS_U8, 1, 100, &r) || wait_req(r))
			FAIL("the word to rank 1: %s", cs_errmsg(c));
	} else if (rank == 1) {
		/* posted once rank 0's send timed out, or it would time out
		 * too ($P2P_DEADLINE_S: the sidecars' coll.deadline) */
		const char *dl = getenv("P2P_DEADLINE_S");

		sleep((unsigned)(dl ? atoi(dl) : 120) + 1);
		if (cs_recv(g, b, 1, CS_U8, 0, 100, &r) || wait_req(r))
			FAIL("rank 0's word: %s", cs_errmsg(c));
	}
	printf("bad ok rank %d\n", rank);
}

static void mode_die(void)
{
	uint8_t *b = buf(P2P_BIG + 1);
	struct timespec t0, t1;
	cs_req_t r, r2;
	int ret;

	if (rank == 1) {
		/* rank 0's word that its send follows at once */
		if (cs_recv(g, b, 1, CS_U8, 0, 0, &r) || wait_req(r))
			FAIL("rank 0's word: %s", cs_errmsg(c));
		if (cs_recv(g, b, P2P_BIG, CS_U8, 0, 1, &r))
			FAIL("post: %s", cs_errmsg(c));
		/* rank 0's word that its send was taken: its RTS is here
		 * (one session, in order), the transfer runs */
		if (cs_recv(g, b + P2P_BIG, 1, CS_U8, 0, 3, &r2) ||
		    wait_req(r2))
			FAIL("rank 0's second word: %s", cs_errmsg(c));
		usleep(200000);
		printf("die rank 1 exits with its receive running\n");
		fflush(stdout);
		_exit(0);
	}
	if (rank == 0) {
		fill(b, 4096, 0, 1, 1);
		if (cs_send(g, b, 1, CS_U8, 1, 0, &r) || wait_req(r))
			FAIL("the word to rank 1: %s", cs_errmsg(c));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ret = cs_send(g, b, P2P_BIG, CS_U8, 1, 1, &r);
		if (!ret &&
		    (cs_send(g, b, 1, CS_U8, 1, 3, &r2) || wait_req(r2)))
			FAIL("the second word to rank 1: %s", cs_errmsg(c));
		if (!ret)
			ret = wait_req(r);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (ret && (ret != CS_ERR_PEER_LOST ||
			    !strstr(cs_errmsg(c), "rank 1 is gone")))
			FAIL("the send to the dying rank: %s", cs_errmsg(c));
		printf("  rank 0 send to the dying rank: %s (%.2f s)\n",
		       ret ? cs_errmsg(c) : "done before it died",
		       (double)(t1.tv_sec - t0.tv_sec) +
			       (t1.tv_nsec - t0.tv_nsec) / 1e9);
		/* rank 1 is gone: nobody receives this one */
		ret = cs_send(g, b, 10, CS_U8, 1, 2, &r);
		if (!ret)
			ret = wait_req(r);
		/* its node knows (the group lost it there), another waits
		 * for the receive until coll.deadline */
		if (ret == CS_ERR_PEER_LOST)
			expect(ret, CS_ERR_PEER_LOST, "send to the rank gone",
			       "rank 1 is gone");
		else
			expect(ret, CS_ERR_TIMEOUT, "send to the rank gone",
			       "no matching recv");
		printf("die ok rank 0\n");
		return;
	}
	/* the others: their own ring, unaffected */
	{
		int n = size - 2, me = rank - 2;
		int next = 2 + (me + 1) % n, prev = 2 + (me + n - 1) % n;
		uint8_t *x = buf(100000), *y = buf(100000);
		cs_req_t rr, rs;

		fill(x, 100000, rank, next, 9);
		if (n > 1 && (cs_recv(g, y, 100000, CS_U8, prev, 9, &rr) ||
			      cs_send(g, x, 100000, CS_U8, next, 9, &rs) ||
			      wait_req(rr) || wait_req(rs)))
			FAIL("ring of the others: %s", cs_errmsg(c));
		if (n > 1 && wrong(y, 100000, prev, rank, 9))
			FAIL("ring of the others: wrong bytes");
		printf("die ok rank %d\n", rank);
	}
}

/* cs_reduce, cs_gather, cs_scatter: every root, two sizes, every element;
 * then a bad root refused. */
static void mode_rooted(void)
{
	static const size_t counts[] = { 1, 70001 };
	size_t maxc = 70001;
	float *x = buf(maxc * 4), *y = buf(maxc * 4);
	float *all = buf(maxc * 4 * size), *blk = buf(maxc * 4);
	cs_req_t r;

	for (int root = 0; root < size; root++)
		for (unsigned s = 0; s < 2; s++) {
			size_t n = counts[s];
			size_t bad = 0;

			/* reduce: sum of (rank + 1) * (i % 7) */
			for (size_t i = 0; i < n; i++)
				x[i] = (float)((rank + 1) * (int)(i % 7));
			memset(y, 0, n * 4);
			if (cs_reduce(g, x, rank == root ? y : NULL, n, CS_F32,
				      CS_SUM, root, &r) ||
			    wait_req(r))
				FAIL("reduce root %d: %s", root, cs_errmsg(c));
			for (size_t i = 0; rank == root && i < n; i++)
				bad += y[i] != (float)(size * (size + 1) / 2 *
						       (int)(i % 7));
			/* gather: block j = rank j's x, tagged */
			for (size_t i = 0; i < n; i++)
				x[i] = (float)(rank * 1000 + (int)(i % 997));
			memset(all, 0, n * 4 * size);
			if (cs_gather(g, x, all, n, CS_F32, root, &r) ||
			    wait_req(r))
				FAIL("gather root %d: %s", root, cs_errmsg(c));
			for (int j = 0; rank == root && j < size; j++)
				for (size_t i = 0; i < n; i++)
					bad += all[(size_t)j * n + i] !=
					       (float)(j * 1000 +
						       (int)(i % 997));
			/* scatter: block j of the root's = j * 3 + i % 11 */
			for (int j = 0; rank == root && j < size; j++)
				for (size_t i = 0; i < n; i++)
					all[(size_t)j * n + i] =
						(float)(j * 3 + (int)(i % 11));
			memset(blk, 0, n * 4);
			if (cs_scatter(g, all, blk, n, CS_F32, root, &r) ||
			    wait_req(r))
				FAIL("scatter root %d: %s", root, cs_errmsg(c));
			for (size_t i = 0; i < n; i++)
				bad += blk[i] !=
				       (float)(rank * 3 + (int)(i % 11));
			if (bad)
				FAIL("root %d, %zu elements: %zu wrong", root,
				     n, bad);
		}
	if (cs_gather(g, x, all, 4, CS_F32, size, &r) != -EINVAL ||
	    !strstr(cs_errmsg(c), "root rank out of range"))
		FAIL("a root past the group was not refused: %s", cs_errmsg(c));
	if (cs_send(g, x, 4, CS_F32, (rank + 1) % size, CS_TAG_RESERVED, &r) !=
	    -EINVAL)
		FAIL("a reserved tag was not refused");
	printf("rooted ok rank %d roots=%d\n", rank, size);
}

/* f16 / bf16 of a small integer (exact), and back */
static uint16_t to_half(int v)
{
	unsigned m = (unsigned)(v < 0 ? -v : v), e = 0;

	if (!m)
		return 0;
	while ((m >> e) > 1)
		e++;
	return (uint16_t)((v < 0 ? 0x8000u : 0) | ((e + 15) << 10) |
			  (((m << 10) >> e) & 0x3ffu));
}

static double from_half(uint16_t h)
{
	int e = (h >> 10) & 0x1f;
	double m = (h & 0x3ff) / 1024.0;

	if (!e)
		return (h & 0x8000 ? -1 : 1) * m / 16384.0;
	return (h & 0x8000 ? -1 : 1) * (1 + m) * (double)(1u << e) / 32768.0;
}

static uint16_t to_bf16(int v)
{
	float f = (float)v;
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16); /* exact: small integers */
}

static double from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static void put(void *p, enum cs_dtype dt, size_t i, int v)
{
	switch (dt) {
	case CS_F32:
		((float *)p)[i] = (float)v;
		break;
	case CS_F64:
		((double *)p)[i] = v;
		break;
	case CS_F16:
		((uint16_t *)p)[i] = to_half(v);
		break;
	case CS_BF16:
		((uint16_t *)p)[i] = to_bf16(v);
		break;
	case CS_I32:
		((int32_t *)p)[i] = v;
		break;
	default:
		((int64_t *)p)[i] = v;
		break;
	}
}

static double get(const void *p, enum cs_dtype dt, size_t i)
{
	switch (dt) {
	case CS_F32:
		return ((const float *)p)[i];
	case CS_F64:
		return ((const double *)p)[i];
	case CS_F16:
		return from_half(((const uint16_t *)p)[i]);
	case CS_BF16:
		return from_bf16(((const uint16_t *)p)[i]);
	case CS_I32:
		return ((const int32_t *)p)[i];
	default:
		return (double)((const int64_t *)p)[i];
	}
}

/* rank @r's element @i for @op: -5..5, or for a product 1, -1 or 2 (so
 * that up to 8 ranks stay exact in bf16's 8 bits) */
static int rd_val(enum cs_redop op, int r, size_t i)
{
	if (op == CS_PROD)
		return (r + i) % 3 == 0 ? 2 : (r + i) % 5 == 0 ? -1 : 1;
	return (int)((r * 7 + i * 3 + (i >> 9)) % 11) - 5;
}

static int rd_want(enum cs_redop op, size_t i)
{
	int w = rd_val(op, 0, i);

	for (int r = 1; r < size; r++) {
		int v = rd_val(op, r, i);

		w = op == CS_SUM    ? w + v
		    : op == CS_PROD ? w * v
		    : op == CS_MIN  ? (v < w ? v : w)
				    : (v > w ? v : w);
	}
	return w;
}

static void mode_reduce(void)
{
	static const enum cs_dtype dts[] = { CS_F32,  CS_F64, CS_F16,
					     CS_BF16, CS_I32, CS_I64 };
	static const enum cs_redop ops[] = { CS_SUM, CS_PROD, CS_MIN, CS_MAX };
	size_t counts[] = { 1,
			    (size_t)size - 1,
			    (size_t)size * 3 + 1,
			    (size_t)size * 2500 + (size_t)size - 1,
			    (size_t)size * 4096,
			    0 };
	size_t maxb = 1u << 20, nc = 5, cases = 0;
	uint8_t *x = buf(maxb), *y = buf(maxb);
	cs_req_t r;
	int ret;

	for (unsigned d = 0; d < 6; d++)
		for (unsigned o = 0; o < 4; o++)
			for (unsigned k = 0; k <= nc; k++) {
				enum cs_dtype dt = dts[d];
				size_t esz = dt == CS_F64 || dt == CS_I64 ? 8
					     : dt == CS_F16 || dt == CS_BF16
						     ? 2
						     : 4;
				/* the last: 1 MiB, for f32 x sum only */
				size_t n = k == nc ? maxb / esz : counts[k];
				int root =
					(int)((d * 4 + o + k) % (unsigned)size);
				bool inplace = (d + o + k) % 2;
				size_t bad = 0;

				if (!n || (k == nc && (d || o)))
					continue;
				for (size_t i = 0; i < n; i++)
					put(x, dt, i, rd_val(ops[o], rank, i));
				memset(y, 0x5a, n * esz);
				ret = cs_reduce(g, x,
						rank != root ? NULL
						: inplace    ? x
							     : y,
						n, dt, ops[o], root, &r);
				if (!ret)
					ret = wait_req(r);
				if (ret)
					FAIL("reduce %s %s x %zu root %d: %s",
					     cs_dtype_name(dt),
					     cs_redop_name(ops[o]), n, root,
					     cs_errmsg(c));
				for (size_t i = 0; rank == root && i < n; i++)
					bad += get(inplace ? x : y, dt, i) !=
					       (double)rd_want(ops[o], i);
				/* a non-root rank's send is left alone */
				for (size_t i = 0; rank != root && i < n; i++)
					bad += get(x, dt, i) !=
					       (double)rd_val(ops[o], rank, i);
				if (bad)
					FAIL("reduce %s %s x %zu root %d%s: "
					     "%zu wrong",
					     cs_dtype_name(dt),
					     cs_redop_name(ops[o]), n, root,
					     inplace ? " in place" : "", bad);
				cases++;
			}
	/* refused at the post, on every rank alike (nothing posted): each
	 * rank the root of its own call, with a NULL recv; a root past the
	 * group; a bad element type */
	ret = cs_reduce(g, x, NULL, 100000, CS_F32, CS_SUM, rank, &r);
	if (ret != -EFAULT || !strstr(cs_errmsg(c), "NULL"))
		FAIL("a NULL recv on the root: %d %s", ret, cs_errmsg(c));
	ret = cs_reduce(g, x, y, 100000, CS_F32, CS_SUM, size, &r);
	if (ret != -EINVAL || !strstr(cs_errmsg(c), "root rank out of range"))
		FAIL("a root past the group: %d %s", ret, cs_errmsg(c));
	ret = cs_reduce(g, x, y, 10, CS_DTYPE_COUNT, CS_SUM, 0, &r);
	if (ret != -EINVAL || !strstr(cs_errmsg(c), "element type"))
		FAIL("a bad dtype: %d %s", ret, cs_errmsg(c));
	printf("reduce ok rank %d cases=%zu\n", rank, cases);
}

static void mode_reducebig(size_t mib, bool allreduce)
{
	size_t n = (mib << 20) / 4, bad = 0;
	float *x = buf(n * 4), *y = rank ? NULL : buf(n * 4);
	cs_req_t r;

	for (size_t i = 0; i < n; i++)
		x[i] = (float)((rank + 1) * (int)(i % 5));
	if (allreduce) {
		if (cs_allreduce(g, x, x, n, CS_F32, CS_SUM, &r) || wait_req(r))
			FAIL("allreduce: %s", cs_errmsg(c));
		y = x;
	} else if (cs_reduce(g, x, y, n, CS_F32, CS_SUM, 0, &r) ||
		   wait_req(r)) {
		FAIL("reduce: %s", cs_errmsg(c));
	}
	for (size_t i = 0; rank == 0 && i < n; i++)
		bad += y[i] != (float)(size * (size + 1) / 2 * (int)(i % 5));
	if (bad)
		FAIL("reducebig: %zu wrong", bad);
	printf("reducebig ok rank %d\n", rank);
}

static void mode_reducedie(void)
{
	size_t n = (16u << 20) / 4;
	float *x = buf(n * 4), *y = buf(n * 4);
	struct timespec t0, t1;
	cs_req_t r;
	int ret;

	for (size_t i = 0; i < n; i++)
		x[i] = (float)(i % 3);
	if (cs_reduce(g, x, rank ? NULL : y, n, CS_F32, CS_SUM, 0, &r))
		FAIL("post: %s", cs_errmsg(c));
	if (rank == size - 1) {
		printf("reducedie rank %d exits with its reduce posted\n",
		       rank);
		fflush(stdout);
		_exit(0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = wait_req(r);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rank == 0 && ret != CS_ERR_PEER_LOST && ret != CS_ERR_TIMEOUT &&
	    ret != CS_ERR_CANCELLED)
		FAIL("the root's reduce without rank %d: %d (%s)", size - 1,
		     ret, ret ? cs_errmsg(c) : "done");
	printf("reducedie ok rank %d: %s (%.2f s)\n", rank,
	       ret ? cs_errmsg(c) : "done",
	       (double)(t1.tv_sec - t0.tv_sec) +
		       (t1.tv_nsec - t0.tv_nsec) / 1e9);
}

int main(int argc, char **argv)
{
	int ret;

	if (argc < 2 ||
	    (strcmp(argv[1], "ring") && strcmp(argv[1], "bad") &&
	     strcmp(argv[1], "die") && strcmp(argv[1], "rooted") &&
	     strcmp(argv[1], "reduce") && strcmp(argv[1], "reducebig") &&
	     strcmp(argv[1], "reducedie"))) {
		fprintf(stderr,
			"usage: cs-trainer-p2p ring ITERS|bad|die|"
			"rooted|reduce|reducebig MIB [allreduce]|reducedie\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = cs_connect(NULL, &c);
	if (!ret)
		ret = cs_group_join_env(c, getenv("P2P_GROUP") ?: "p2p", &g);
	if (ret) {
		printf("FAIL setup: %s\n", c ? cs_errmsg(c) : "no client");
		return 1;
	}
	rank = cs_group_rank(g);
	size = cs_group_size(g);
	/* every rank joined before any leaves (a group that lost a rank
	 * takes no new member) */
	{
		cs_req_t r;

		if (cs_barrier(g, &r) || cs_wait(c, r, -1))
			FAIL("barrier: %s", cs_errmsg(c));
	}
	if (size < 2 || (!strcmp(argv[1], "die") && size < 2))
		FAIL("needs 2 ranks or more");
	if (!strcmp(argv[1], "ring"))
		mode_ring(argc > 2 ? (unsigned)atoi(argv[2]) : 2);
	else if (!strcmp(argv[1], "bad"))
		mode_bad();
	else if (!strcmp(argv[1], "rooted"))
		mode_rooted();
	else if (!strcmp(argv[1], "reduce"))
		mode_reduce();
	else if (!strcmp(argv[1], "reducedie"))
		mode_reducedie();
	else if (!strcmp(argv[1], "reducebig"))
		mode_reducebig(argc > 2 ? (size_t)atoi(argv[2]) : 8,
			       argc > 3 && !strcmp(argv[3], "allreduce"));
	else
		mode_die();
	cs_disconnect(c);
	return 0;
}
