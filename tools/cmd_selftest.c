/* SPDX-License-Identifier: MIT */
/*
 * collstack selftest: quick end-to-end checks of the building blocks on
 * this machine (wire codec, packet authentication, reduction kernels), then
 * the reduction benchmark in its quick form. Exit 0 only if every check
 * passed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <collstack/types.h>

#include "cmds.h"
#include "collectives/reduce.h"
#include "control/auth.h"
#include "dataplane/wire.h"

static unsigned n_ok, n_fail;

static void check(bool ok, const char *what)
{
	printf("  %-58s %s\n", what, ok ? "ok" : "FAIL");
	if (ok)
		n_ok++;
	else
		n_fail++;
}

static int build(uint8_t *buf, size_t cap, struct cs_pkt_hdr *h,
		 const uint8_t *payload)
{
	struct cs_wire_addr a = { { 2, 0, 0, 0, 0, 1 }, 0x0a4d0001, 47000 };
	struct cs_wire_addr b = { { 2, 0, 0, 0, 0, 2 }, 0x0a4d0002, 47000 };

	return cs_wire_encode(buf, cap, &a, &b, h, payload);
}

static double secs_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Seconds per tag of code @m over @h and @len bytes of @payload: the
 * call sidecar/frame_auth.c makes for every frame sent and received, with
 * a loaded key (SipHash: the epoch key; GMAC: a sender instance's key and
 * the next counter per frame). */
static double tag_secs(enum cs_auth_mac m, struct cs_pkt_hdr *h,
		       const uint8_t *payload, uint32_t len)
{
	enum { N = 2000 };
	uint8_t key[CS_AUTH_KEY_LEN], tag[CS_PROTO_TAG_LEN];
	uint32_t keep = h->len;
	struct cs_auth_ctx ctx;
	struct cs_gmac g;
	double t0, t;

	cs_auth_epoch_key("selftest-token", 7, 2, key);
	cs_auth_ctx_init(&ctx, key);
	if (m == CS_AUTH_GMAC && cs_gmac_init(&g, key))
		return -1;
	h->len = len;
	t0 = secs_now();
	for (unsigned i = 0; i < N; i++) {
		h->seq = i;
		if (m == CS_AUTH_GMAC)
			(void)cs_gmac_tag(&g, i, h, payload, tag);
		else
			cs_auth_ctx_tag(&ctx, h, payload, tag);
	}
	t = (secs_now() - t0) / N;
	h->len = keep;
	if (m == CS_AUTH_GMAC)
		cs_gmac_fini(&g);
	return t;
}

/* What auth.enable costs per frame here, both codes, the one auth.mac=auto
 * picks first (figures, not checks). */
static void selftest_auth_cost(struct cs_pkt_hdr *h, const uint8_t *payload,
			       uint32_t plen)
{
	enum cs_auth_mac order[2] = { cs_auth_mac_auto(),
				      cs_auth_mac_auto() == CS_AUTH_GMAC
					      ? CS_AUTH_SIPHASH
					      : CS_AUTH_GMAC };
	uint8_t key[CS_AUTH_KEY_LEN];
	struct cs_auth_ctx ctx;

	cs_auth_epoch_key("selftest-token", 7, 2, key);
	cs_auth_ctx_init(&ctx, key);
	cs_auth_tag(key, h, payload, h->tag);
	check(cs_auth_ctx_check(&ctx, h, payload) == 0,
	      "precomputed key gives the same tag");
	for (unsigned i = 0; i < 2; i++) {
		double big = tag_secs(order[i], h, payload, plen);
		double ack = tag_secs(order[i], h, payload, 0);

		printf("  tag cost (%s%s): %.2f us per %u-byte payload "
		       "(%.0f MB/s), %.2f us per pure ACK\n",
		       cs_auth_mac_name(order[i]), i ? "" : ", auth.mac=auto",
		       big * 1e6, plen, plen / big / 1e6, ack * 1e6);
	}
}

/* A GMAC-tagged frame through the codec: verifies, forgeries refused. */
static void selftest_gmac(struct cs_pkt_hdr *h, const uint8_t *payload)
{
	static uint8_t buf[9200];
	uint8_t key[CS_AUTH_GMAC_KEY_LEN];
	struct cs_wire_pkt p;
	int len;

	cs_auth_gmac_epoch_key("selftest-token", 7, 2, key);
	h->flags |= CS_PKT_F_AUTH | CS_PKT_F_GMAC;
	for (unsigned i = 0; i < CS_PROTO_NONCE_LEN; i++)
		h->nonce[i] = (uint8_t)(i * 17 + 1);
	check(cs_auth_gmac_tag(key, h, payload, h->tag) == 0,
	      "AES-256-GMAC tag computed (libcrypto)");
	len = build(buf, sizeof(buf), h, payload);
	check(len > 0 && cs_wire_decode(buf, (size_t)len, &p) == 0 &&
		      cs_auth_gmac_check(key, &p.hdr, p.payload) == 0,
	      "GMAC-tagged packet verifies after a wire round trip");
	buf[CS_PROTO_FRAME_OVERHEAD + 15] ^= 1; /* the nonce's counter */
	check(cs_wire_decode(buf, (size_t)len, &p) == 0 &&
		      cs_auth_gmac_check(key, &p.hdr, p.payload) == CS_ERR_AUTH,
	      "GMAC: another nonce is refused");
	h->flags &= (uint16_t)~CS_PKT_F_GMAC;
}

static void selftest_codec(void)
{
	static uint8_t buf[9100], payload[8896];
	struct cs_pkt_hdr h = {
		.version = CS_PROTO_VERSION,
		.type = CS_PKT_DATA,
		.flags = CS_PKT_F_ACK,
		.src = 3,
		.channel = 1,
		.group = 7,
		.epoch = 2,
		.op = 41,
		.step = 5,
		.seq = 0xfffffff0u,
		.ack = 17,
		.sack = 0x5,
		.offset = 1ull << 33,
		.len = sizeof(payload),
		.ts = 123456789,
		.ts_echo = 42,
	};
	struct cs_wire_pkt p;
	uint8_t key[CS_AUTH_KEY_LEN];
	int len, ip;

	printf("wire codec (jumbo frame, %zu-byte payload):\n",
	       sizeof(payload));
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 131 + 7);
	len = build(buf, sizeof(buf), &h, payload);
	check(len == (int)(CS_PROTO_FRAME_OVERHEAD + sizeof(payload)),
	      "encode: frame length = 118-byte overhead + payload");
	check(cs_wire_decode(buf, (size_t)len, &p) == 0 && p.hdr.seq == h.seq &&
		      p.hdr.offset == h.offset && p.hdr.sack == h.sack &&
		      p.hdr.ts == h.ts && p.hdr.len == h.len &&
		      !memcmp(p.payload, payload, sizeof(payload)),
	      "decode: every field and the payload round-trip");
	check(cs_wire_decode(buf, 30, &p) == CS_WIRE_E_SHORT,
	      "reject: short packet");
	ip = CS_WIRE_ETH_LEN;
	buf[ip + 10] ^= 0x40;
	check(cs_wire_decode(buf, (size_t)len, &p) == CS_WIRE_E_IP_CSUM,
	      "reject: bad IPv4 header checksum");
	buf[ip + 10] ^= 0x40;
	buf[ip + 20 + 4] ^= 0x01;
	check(cs_wire_decode(buf, (size_t)len, &p) == CS_WIRE_E_UDP_LEN,
	      "reject: bad UDP length");
	buf[ip + 20 + 4] ^= 0x01;
	buf[CS_WIRE_L4_END] = CS_PROTO_VERSION + 1;
	check(cs_wire_decode(buf, (size_t)len, &p) == CS_WIRE_E_VERSION,
	      "reject: wrong collstack version");
	buf[CS_WIRE_L4_END] = CS_PROTO_VERSION;
	h.len = 100;
	len = build(buf, sizeof(buf), &h, payload);
	/* Claim more payload than the frame holds. */
	buf[CS_WIRE_L4_END + 51] = 200; /* low byte of len */
	check(cs_wire_decode(buf, (size_t)len, &p) == CS_WIRE_E_LEN,
	      "reject: payload length past the end of the packet");

	printf("packet authentication:\n");
	cs_auth_epoch_key("selftest-token", 7, 2, key);
	h.flags |= CS_PKT_F_AUTH;
	cs_auth_tag(key, &h, payload, h.tag);
	len = build(buf, sizeof(buf), &h, payload);
	check(len > 0 && cs_wire_decode(buf, (size_t)len, &p) == 0 &&
		      cs_auth_check(key, &p.hdr, p.payload) == 0,
	      "tagged packet verifies after a wire round trip");
	buf[len - 1] ^= 1;
	check(cs_wire_decode(buf, (size_t)len, &p) == 0 &&
		      cs_auth_check(key, &p.hdr, p.payload) == CS_ERR_AUTH,
	      "forged payload byte is refused");
	cs_auth_epoch_key("selftest-token", 7, 1, key);
	buf[len - 1] ^= 1;
	check(cs_wire_decode(buf, (size_t)len, &p) == 0 &&
		      cs_auth_check(key, &p.hdr, p.payload) == CS_ERR_AUTH,
	      "stale-epoch key is refused");
	selftest_gmac(&h, payload);
	selftest_auth_cost(&h, payload, sizeof(payload));
}

/* Both kernel paths against a naive per-element reference. */
static void selftest_reduce(void)
{
	enum { N = 1000 };
	static int32_t a[N], b[N], want[N], got[N];
	static float fa[N], fb[N], fwant[N], fgot[N];
	char what[96];

	printf("reduction kernels (run-time ISA: %s):\n", cs_reduce_isa());
	for (int i = 0; i < N; i++) {
		a[i] = i * 7 - 300;
		b[i] = 1000 - i * 3;
		fa[i] = (float)i * 0.25f;
		fb[i] = (float)(N - i) * 0.5f;
	}
	for (unsigned op = 0; op < CS_REDOP_COUNT; op++) {
		for (int i = 0; i < N; i++) {
			int32_t x = a[i], y = b[i];
			float fx = fa[i], fy = fb[i];

			want[i] = op == CS_SUM
					  ? (int32_t)((uint32_t)x + (uint32_t)y)
				  : op == CS_PROD
					  ? (int32_t)((uint32_t)x * (uint32_t)y)
				  : op == CS_MIN ? (x < y ? x : y)
						 : (x > y ? x : y);
			fwant[i] = op == CS_SUM	   ? fx + fy
				   : op == CS_PROD ? fx * fy
				   : op == CS_MIN  ? (fx < fy ? fx : fy)
						   : (fx > fy ? fx : fy);
		}
		memcpy(got, a, sizeof(a));
		memcpy(fgot, fa, sizeof(fa));
		snprintf(what, sizeof(what), "i32 and f32 %s, %d elements",
			 cs_redop_name((enum cs_redop)op), N);
		check(!cs_reduce_into(got, b, N, CS_I32, (enum cs_redop)op) &&
			      !cs_reduce_into(fgot, fb, N, CS_F32,
					      (enum cs_redop)op) &&
			      !memcmp(got, want, sizeof(want)) &&
			      !memcmp(fgot, fwant, sizeof(fwant)),
		      what);
	}
	check(cs_reduce_into(got, b, N, CS_DTYPE_COUNT, CS_SUM) == -EINVAL,
	      "bad dtype is refused with -EINVAL");
}

int cs_cmd_selftest(int argc, char **argv)
{
	(void)argv;
	if (argc > 1) {
		printf("usage: collstack selftest\n");
		return 2;
	}
	printf("collstack selftest\n");
	selftest_codec();
	selftest_reduce();
	printf("\nreduction benchmark (quick; full table: collstack bench-reduce):\n");
	if (cs_bench_reduce_run(stdout, true))
		check(false, "reduction benchmark ran");
	printf("\nselftest: %u checks ok, %u failed\n", n_ok, n_fail);
	return n_fail ? 1 : 0;
}
