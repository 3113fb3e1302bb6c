/* SPDX-License-Identifier: MIT */
/* Unit tests: frame helpers, the loop port, the fault shim, the udp port. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cs_config.h"
#include "dataplane/fault.h"
#include "dataplane/port.h"

#define NFRAMES 2000
#define FLEN 200

static const uint8_t mac_a[6] = { 2, 0, 0, 0, 0, 1 };
static const uint8_t mac_b[6] = { 2, 0, 0, 0, 0, 2 };

static void conf_of(struct cs_port_conf *c, const char *type, uint16_t port)
{
	cr_assert_eq(cs_port_conf_defaults(c), 0);
	snprintf(c->type, sizeof(c->type), "%s", type);
	c->udp_port = port;
	c->rx_desc = 4096;
	c->tx_desc = 4096;
}

/* A loop port (self-connected) under a fault shim. */
static struct cs_port *shim_on_loop(const struct cs_fault_conf *fc)
{
	struct cs_port_conf c;
	struct cs_port *lp, *sp;

	conf_of(&c, "loop", 7700);
	cr_assert_eq(cs_port_loop_ops.open(&c, &lp), 0);
	cr_assert_eq(cs_fault_wrap(lp, fc, &sp), 0);
	return sp;
}

static void fill(struct cs_pbuf *b, uint32_t id, uint32_t ip)
{
	cs_port_frame_hdrs(b->data, FLEN, mac_a, mac_b, ip, ip, 7700, 7700);
	memcpy(b->data + CS_PORT_HDRS_LEN, &id, 4);
	for (uint32_t i = CS_PORT_HDRS_LEN + 4; i < FLEN; i++)
		b->data[i] = (uint8_t)(id + i);
	b->len = FLEN;
}

static uint32_t id_of(const struct cs_pbuf *b)
{
	uint32_t id;

	memcpy(&id, b->data + CS_PORT_HDRS_LEN, 4);
	return id;
}

/* Send frames 0..n-1, one at a time in bursts of up to CS_PORT_BURST. */
static void send_range(struct cs_port *p, uint32_t first, uint32_t n)
{
	uint32_t ip = htonl(0x7f000001);

	n += first;
	for (uint32_t id = first; id < n;) {
		struct cs_pbuf v[CS_PORT_BURST];
		unsigned k = CS_MIN(n - id, (uint32_t)CS_PORT_BURST), got, s;

		got = cs_port_tx_alloc(p, 0, v, k);
		cr_assert_gt(got, 0, "pool exhausted at %u", id);
		for (unsigned i = 0; i < got; i++)
			fill(&v[i], id + i, ip);
		s = cs_port_tx_burst(p, 0, v, got);
		cr_assert_eq(s, got);
		id += got;
	}
}

static void send_n(struct cs_port *p, uint32_t n)
{
	send_range(p, 0, n);
}

/* Receive everything there is; record ids in order. */
static unsigned recv_all(struct cs_port *p, uint32_t *ids, unsigned max,
			 unsigned *bad)
{
	unsigned n = 0, got;
	struct cs_pbuf v[CS_PORT_BURST];

	while ((got = cs_port_rx_burst(p, 0, v, CS_PORT_BURST))) {
		for (unsigned i = 0; i < got; i++) {
			uint32_t id = id_of(&v[i]);
			bool ok = v[i].len == FLEN;

			for (uint32_t j = CS_PORT_HDRS_LEN + 4; ok && j < FLEN;
			     j++)
				ok = v[i].data[j] == (uint8_t)(id + j);
			if (!ok && bad)
				(*bad)++;
			if (n < max)
				ids[n] = id;
			n++;
		}
		cs_port_release(p, 0, v, got);
	}
	return n;
}

Test(frame, headers_roundtrip_and_malformed)
{
	uint8_t f[256];
	struct cs_port p = { .udp_port = 7700 };

	cs_port_frame_hdrs(f, sizeof(f), mac_a, mac_b, htonl(0x0a4d0001),
			   htonl(0x0a4d0002), 7701, 7700);
	cr_assert_eq(cs_port_frame_check(&p, f, sizeof(f)), CS_PORT_HDRS_LEN);
	cr_assert_lt(cs_port_frame_check(&p, f, 30), 0, "short frame");
	cr_assert_lt(cs_port_frame_check(&p, f, sizeof(f) - 1), 0,
		     "IP length beyond the frame");
	p.udp_port = 7701;
	cr_assert_eq(cs_port_frame_check(&p, f, sizeof(f)), -EPROTO,
		     "foreign UDP port");
	p.udp_port = 7700;
	f[14 + 8] ^= 1; /* TTL: breaks the IPv4 checksum */
	cr_assert_eq(cs_port_frame_check(&p, f, sizeof(f)), -EBADMSG);
	f[14 + 8] ^= 1;
	f[12] = 0x86; /* IPv6 ethertype */
	cr_assert_eq(cs_port_frame_check(&p, f, sizeof(f)), -EPROTO);
}

Test(fault, none_passes_everything_in_order)
{
	struct cs_fault_conf fc = { .seed = 1, .reorder_depth = 4 };
	struct cs_port *p = shim_on_loop(&fc);
	static uint32_t ids[NFRAMES];
	unsigned bad = 0, n;

	send_n(p, 500);
	n = recv_all(p, ids, NFRAMES, &bad);
	cr_assert_eq(n, 500);
	cr_assert_eq(bad, 0);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(ids[i], i);
	cs_port_close(p);
}

static unsigned run_drop(uint64_t seed, uint32_t *ids, uint64_t *dropped)
{
	struct cs_fault_conf fc = { .seed = seed,
				    .drop = 0.3,
				    .reorder_depth = 4 };
	struct cs_port *p = shim_on_loop(&fc);
	struct cs_port_stats st;
	unsigned n = 0;

	for (uint32_t r = 0; r < 4; r++) { /* 4 x 500: under the rx ring */
		send_range(p, r * 500, 500);
		n += recv_all(p, ids + n, NFRAMES - n, NULL);
	}
	cs_port_stats(p, &st);
	*dropped = st.f_dropped;
	cs_port_close(p);
	return n;
}

Test(fault, drop_is_counted_and_seeded)
{
	static uint32_t a[NFRAMES], b[NFRAMES], c[NFRAMES];
	uint64_t da, db, dc;
	unsigned na = run_drop(42, a, &da), nb = run_drop(42, b, &db);
	unsigned nc = run_drop(43, c, &dc);

	cr_assert_eq(na + da, NFRAMES, "every frame delivered or dropped");
	cr_assert(da > NFRAMES * 0.2 && da < NFRAMES * 0.4,
		  "30%% drop gave %llu of %u", (unsigned long long)da, NFRAMES);
	cr_assert_eq(na, nb, "same seed, same run");
	cr_assert_eq(memcmp(a, b, na * sizeof(a[0])), 0);
	cr_assert(nc != na || memcmp(a, c, na * sizeof(a[0])),
		  "another seed drops other frames");
	cr_assert_eq(nc + dc, NFRAMES);
}

Test(fault, dup_sends_twice)
{
	struct cs_fault_conf fc = { .seed = 7, .dup = 1.0, .reorder_depth = 4 };
	struct cs_port *p = shim_on_loop(&fc);
	static uint32_t ids[NFRAMES];
	static unsigned count[NFRAMES];
	struct cs_port_stats st;
	unsigned bad = 0, n;

	send_n(p, 300);
	n = recv_all(p, ids, NFRAMES, &bad);
	cr_assert_eq(n, 600);
	cr_assert_eq(bad, 0, "a duplicate carries the same bytes");
	for (unsigned i = 0; i < n; i++)
		count[ids[i]]++;
	for (unsigned i = 0; i < 300; i++)
		cr_assert_eq(count[i], 2, "frame %u seen %u times", i,
			     count[i]);
	cs_port_stats(p, &st);
	cr_assert_eq(st.f_duplicated, 300);
	cs_port_close(p);
}

Test(fault, reorder_keeps_every_frame_once)
{
	struct cs_fault_conf fc = { .seed = 9,
				    .reorder = 0.2,
				    .delay_ns = 60ull * CS_NS_PER_S,
				    .reorder_depth = 3 };
	struct cs_port *p = shim_on_loop(&fc);
	static uint32_t ids[NFRAMES];
	static unsigned count[NFRAMES];
	unsigned n = 0, inversions = 0;

	for (uint32_t r = 0; r < 4; r++) {
		send_range(p, r * 250, 250);
		n += recv_all(p, ids + n, NFRAMES - n, NULL);
	}
	cr_assert_leq(n, 1000);
	cr_assert_geq(n, 900, "only the last few frames may still be held");
	for (unsigned i = 0; i < n; i++) {
		count[ids[i]]++;
		if (i && ids[i] < ids[i - 1])
			inversions++;
	}
	cr_assert_gt(inversions, 0, "20%% reorder produced no inversion");
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(count[ids[i]], 1, "frame %u twice", ids[i]);
	cs_port_close(p); /* frees frames still held */
}

Test(fault, delay_holds_then_releases)
{
	struct cs_fault_conf fc = { .seed = 3,
				    .delay = 1.0,
				    .delay_ns = 60ull * CS_NS_PER_S,
				    .reorder_depth = 1 };
	struct cs_port *p = shim_on_loop(&fc);
	static uint32_t ids[NFRAMES];
	struct cs_port_stats st;

	send_n(p, 100);
	cr_assert_eq(recv_all(p, ids, NFRAMES, NULL), 0,
		     "a 60 s delay let frames through at once");
	cs_port_stats(p, &st);
	cr_assert_eq(st.f_delayed, 100);
	cs_port_close(p);

	fc.delay_ns = 1 * CS_NS_PER_MS;
	p = shim_on_loop(&fc);
	send_n(p, 100);
	unsigned n = 0;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		n += recv_all(p, ids + n, NFRAMES - n, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (n < 100 && t.tv_sec - t0.tv_sec < 30);
	cr_assert_eq(n, 100);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(ids[i], i, "equal delays keep the order");
	cs_port_close(p);
}

Test(fault, corrupt_flips_one_payload_bit)
{
	struct cs_fault_conf fc = { .seed = 5,
				    .corrupt = 1.0,
				    .reorder_depth = 1 };
	struct cs_port *p = shim_on_loop(&fc);
	struct cs_pbuf v[CS_PORT_BURST];
	struct cs_port_stats st;
	unsigned got, total = 0;

	send_n(p, 200);
	while ((got = cs_port_rx_burst(p, 0, v, CS_PORT_BURST))) {
		for (unsigned i = 0; i < got; i++) {
			uint8_t ref[FLEN];
			struct cs_pbuf r = { .data = ref, .cap = FLEN };
			unsigned bits = 0;

			/* The id itself may be the flipped bytes: compare
			 * against both the received and the sent-order id. */
			fill(&r, total, htonl(0x7f000001));
			for (unsigned j = 0; j < FLEN; j++)
				bits += __builtin_popcount(ref[j] ^
							   v[i].data[j]);
			cr_assert_eq(bits, 1, "frame %u: %u bits differ", total,
				     bits);
			cr_assert_eq(memcmp(ref, v[i].data, CS_PORT_HDRS_LEN),
				     0, "outer headers left alone");
			total++;
		}
		cs_port_release(p, 0, v, got);
	}
	cr_assert_eq(total, 200);
	cs_port_stats(p, &st);
	cr_assert_eq(st.f_corrupted, 200);
	cs_port_close(p);
}

Test(fault, bad_probability_refused)
{
	struct cs_fault_conf fc = { .seed = 1, .drop = 1.5 };
	struct cs_port_conf c;
	struct cs_port *lp, *sp;

	conf_of(&c, "loop", 7700);
	cr_assert_eq(cs_port_loop_ops.open(&c, &lp), 0);
	cr_assert_eq(cs_fault_wrap(lp, &fc, &sp), -EINVAL);
	cs_port_close(lp);
}

Test(port, unknown_type_and_bad_address)
{
	struct cs_port_conf c;
	struct cs_port *p;

	conf_of(&c, "nosuch", 7700);
	cr_assert_eq(cs_port_open(&c, &p), -ENOTSUP);
	conf_of(&c, "loop", 7700);
	snprintf(c.ip, sizeof(c.ip), "10.0.0.300");
	cr_assert_eq(cs_port_open(&c, &p), -EINVAL);
}

#if CS_HAVE_URING
/*
 * @n consecutive UDP ports on 127.0.0.1 that nothing holds now: the first
 * one the kernel's choice (port 0), the others checked by binding them.
 * Fixed ranges collided with the other tests' ports (and with this file's
 * closed ports, which a ring lets go of late).
 */
static uint16_t free_udp_ports(unsigned n)
{
	for (int tries = 0; tries < 100; tries++) {
		struct sockaddr_in sa = { .sin_family = AF_INET };
		socklen_t l = sizeof(sa);
		int fd[4] = { -1, -1, -1, -1 };
		unsigned k = 0;
		uint16_t base = 0;
		bool ok = n <= 4;

		sa.sin_addr.s_addr = htonl(0x7f000001);
		for (; ok && k < n; k++) {
			fd[k] = socket(AF_INET, SOCK_DGRAM, 0);
			sa.sin_port = htons(k ? (uint16_t)(base + k) : 0);
			if (fd[k] < 0 ||
			    bind(fd[k], (struct sockaddr *)&sa, sizeof(sa)) ||
			    (!k &&
			     getsockname(fd[k], (struct sockaddr *)&sa, &l))) {
				ok = false;
				break;
			}
			if (!k) {
				base = ntohs(sa.sin_port);
				ok = base <= 65535 - n;
			}
		}
		for (unsigned j = 0; j <= k && j < n; j++)
			if (fd[j] >= 0)
				close(fd[j]);
		if (ok)
			return base;
	}
	cr_assert_fail("no %u free consecutive UDP ports on 127.0.0.1", n);
	return 0;
}

/*
 * Two udp ports on 127.0.0.1: a sends @total frames to b, 16 at a time;
 * b checks each (rebuilt headers that pass the frame check, order, bytes)
 * and gives its buffers back only once it holds @hold of them or nothing
 * more came, so that a small @rx_desc runs out of receive buffers.
 */
/* port.udp_gro on the receiving ports of udp_exchange() and gso_runs() */
static bool rx_gro;

/* Does the kernel coalesce for @p's socket (UDP_GRO set)? */
static bool gro_set(struct cs_port *p)
{
	int v = 0;
	socklen_t l = sizeof(v);

	return !getsockopt(cs__udp_port_fd(p, 0), IPPROTO_UDP,
			   104 /* UDP_GRO */, &v, &l) &&
	       v;
}

static void udp_exchange(bool multishot, uint32_t rx_desc, uint32_t posted,
			 unsigned total, unsigned hold,
			 struct cs_port_stats *bst, bool gso)
{
	struct cs_port_conf ca, cb;
	struct cs_port *a, *b;
	/* fresh ports per call: a closed ring lets go of its socket late */
	uint16_t pa = free_udp_ports(2), pb = pa + 1;
	uint32_t lo = htonl(0x7f000001);
	struct cs_pbuf v[CS_PORT_BURST], held[512];
	unsigned got, n = 0, sent = 0, nheld = 0;
	struct timespec t0, t;

	cr_assert_leq(hold, 512);
	conf_of(&ca, "udp", pa);
	conf_of(&cb, "udp", pb);
	ca.rx_desc = 256;
	cb.rx_desc = rx_desc;
	cb.rx_posted = posted;
	ca.rx_multishot = cb.rx_multishot = multishot;
	ca.udp_gso = gso;
	cb.udp_gro = rx_gro;
	ca.tx_desc = cb.tx_desc = 256;
	cr_assert_eq(cs_port_open(&ca, &a), 0);
	cr_assert_eq(cs_port_open(&cb, &b), 0);
	cr_assert_eq(gro_set(b), rx_gro && multishot,
		     "UDP_GRO set only with port.udp_gro and multishot");

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (sent < total && sent - n < 64) {
			got = cs_port_tx_alloc(
				a, 0, v, total - sent < 16 ? total - sent : 16);
			for (unsigned i = 0; i < got; i++) {
				fill(&v[i], sent + i, lo);
				/* address to b */
				cs_port_frame_hdrs(v[i].data, FLEN, mac_a,
						   mac_b, lo, lo, pa, pb);
			}
			cr_assert_eq(cs_port_tx_burst(a, 0, v, got), got);
			sent += got;
		}
		got = cs_port_rx_burst(b, 0, v, CS_PORT_BURST);
		for (unsigned i = 0; i < got; i++) {
			cr_assert_eq(v[i].len, FLEN);
			cr_assert_eq(
				cs_port_frame_check(b, v[i].data, v[i].len),
				CS_PORT_HDRS_LEN);
			cr_assert_eq(id_of(&v[i]), n + i,
				     "udp on lo keeps order");
			cr_assert_eq(v[i].data[CS_PORT_L4_OFF] << 8 |
					     v[i].data[CS_PORT_L4_OFF + 1],
				     pa, "source port rebuilt");
			for (uint32_t j = CS_PORT_HDRS_LEN + 4; j < FLEN; j++)
				cr_assert_eq(v[i].data[j],
					     (uint8_t)(n + i + j));
			held[nheld++] = v[i];
		}
		n += got;
		if (nheld >= hold || (!got && nheld)) {
			cs_port_release(b, 0, held, nheld);
			nheld = 0;
		}
		/* a's completions recycle its tx slots */
		got = cs_port_rx_burst(a, 0, v, CS_PORT_BURST);
		cr_assert_eq(got, 0);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (n < total && t.tv_sec - t0.tv_sec < 30);
	cr_assert_eq(n, total, "%u of %u frames arrived", n, total);
	cs_port_release(b, 0, held, nheld);

	struct cs_port_stats st;

	cs_port_stats(b, bst);
	cr_assert_eq(bst->rx_pkts, total);
	cs_port_stats(a, &st);
	cr_assert_eq(st.tx_pkts, total);
	/* bursts of 16 same-size frames to one peer: every burst of two or
	 * more frames is one GSO send */
	if (gso && total > 1)
		cr_assert_eq(st.tx_gso, total, "%llu of %u frames in GSO sends",
			     (unsigned long long)st.tx_gso, total);
	else
		cr_assert_eq(st.tx_gso, 0);
	/* on lo a GSO send reaches a UDP_GRO socket whole: every frame of
	 * a run comes up from a coalesced datagram */
	if (gro_set(b) && gso && total > 1)
		cr_assert_gt(bst->rx_gro, 0,
			     "no frame came from a GRO datagram");
	if (!gro_set(b) || !gso)
		cr_assert_eq(bst->rx_gro, 0);
	cs_port_close(a);
	cs_port_close(b);
}

Test(udp, loopback_exchange)
{
	struct cs_port_stats st;

	udp_exchange(true, 256, 32, 16, 1, &st, true);
	udp_exchange(false, 256, 32, 16, 1, &st, true);
	udp_exchange(true, 256, 32, 16, 1, &st, false);
}

/*
 * The kernel refuses a GSO send: the udp port gives GSO up for good and
 * sends one datagram per sendmsg. The refused run's frames are lost and
 * counted (tx_errors; the reliability layer resends them); every frame
 * of the next burst arrives. A socket without UDP checksums
 * (SO_NO_CHECK) is what makes the kernel say EINVAL here.
 */
Test(udp, gso_refused_falls_back)
{
	uint16_t pa = free_udp_ports(2), pb = pa + 1;
	uint32_t lo = htonl(0x7f000001);
	struct cs_port_conf ca, cb;
	struct cs_port *a, *b;
	struct cs_pbuf v[CS_PORT_BURST];
	struct cs_port_stats st;
	struct timespec t0, t;
	unsigned n = 0, got;
	int one = 1;

	conf_of(&ca, "udp", pa);
	conf_of(&cb, "udp", pb);
	ca.rx_desc = ca.tx_desc = cb.rx_desc = cb.tx_desc = 64;
	ca.udp_gso = true;
	cr_assert_eq(cs_port_open(&ca, &a), 0);
	cr_assert_eq(cs_port_open(&cb, &b), 0);
	cr_assert_eq(setsockopt(cs__udp_port_fd(a, 0), SOL_SOCKET, SO_NO_CHECK,
				&one, sizeof(one)),
		     0);
	for (int burst = 0; burst < 2; burst++) {
		cr_assert_eq(cs_port_tx_alloc(a, 0, v, 16), 16);
		for (unsigned i = 0; i < 16; i++) {
			fill(&v[i], (uint32_t)(burst * 16 + i), lo);
			cs_port_frame_hdrs(v[i].data, FLEN, mac_a, mac_b, lo,
					   lo, pa, pb);
		}
		cr_assert_eq(cs_port_tx_burst(a, 0, v, 16), 16);
		/* the first burst's completion: refused, all 16 counted */
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			cs_port_rx_burst(a, 0, v, CS_PORT_BURST);
			cs_port_stats(a, &st);
			clock_gettime(CLOCK_MONOTONIC, &t);
		} while (burst == 0 && st.tx_errors < 16 &&
			 t.tv_sec - t0.tv_sec < 30);
		cr_assert_eq(st.tx_errors, 16, "burst %d: %llu tx errors",
			     burst, (unsigned long long)st.tx_errors);
		cr_assert_eq(st.tx_gso, 0, "a refused GSO send counted");
	}
	/* the second burst arrives whole, datagram by datagram */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		got = cs_port_rx_burst(b, 0, v, CS_PORT_BURST);
		for (unsigned i = 0; i < got; i++) {
			cr_assert_eq(v[i].len, FLEN);
			cr_assert_eq(id_of(&v[i]), 16 + n + i,
				     "only the second burst arrives, in order");
		}
		n += got;
		cs_port_release(b, 0, v, got);
		cs_port_rx_burst(a, 0, v, CS_PORT_BURST); /* completions */
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (n < 16 && t.tv_sec - t0.tv_sec < 30);
	cr_assert_eq(n, 16, "%u of 16 frames after the fall-back", n);
	cs_port_stats(a, &st);
	cr_assert_eq(st.tx_errors, 16);
	cr_assert_eq(st.tx_gso, 0);
	cs_port_close(a);
	cs_port_close(b);
}

/*
 * GSO runs: one burst to two peers with mixed sizes and an attachment.
 * Runs end at another peer, a longer frame, or right after a shorter one;
 * each datagram must arrive whole, as sent, at its own peer.
 */
static void gso_runs(void)
{
	static const struct {
		int peer; /* 0: b, 1: c */
		uint32_t len; /* frame length */
		bool attach; /* last 64 bytes attached, not inline */
	} plan[] = {
		{ 0, FLEN, false },	 { 0, FLEN, true },
		{ 0, FLEN - 60, false }, { 0, FLEN, false },
		{ 0, FLEN, false },	 { 1, FLEN, false },
		{ 1, FLEN, true },	 { 0, FLEN, false },
		{ 0, FLEN + 40, false }, { 0, FLEN + 40, false },
		{ 0, 60, false },
	};
	enum { N = sizeof(plan) / sizeof(plan[0]) };
	uint16_t pa = free_udp_ports(3);
	uint32_t lo = htonl(0x7f000001);
	struct cs_port_conf ca, cb;
	struct cs_port *a, *rx[2];
	struct cs_pbuf v[CS_PORT_BURST];
	static uint8_t ext[N][64];
	unsigned seen[2] = { 0, 0 }, want[2] = { 0, 0 };
	struct cs_port_stats st;
	struct timespec t0, t;

	conf_of(&ca, "udp", pa);
	ca.rx_desc = ca.tx_desc = 64;
	cr_assert_eq(cs_port_open(&ca, &a), 0);
	for (int r = 0; r < 2; r++) {
		conf_of(&cb, "udp", (uint16_t)(pa + 1 + r));
		cb.rx_desc = cb.tx_desc = 64;
		cb.udp_gro = rx_gro;
		cr_assert_eq(cs_port_open(&cb, &rx[r]), 0);
	}
	cr_assert_eq(cs_port_tx_alloc(a, 0, v, N), N);
	for (unsigned i = 0; i < N; i++) {
		uint32_t inl = plan[i].attach ? plan[i].len - 64 : plan[i].len;

		want[plan[i].peer]++;
		cs_port_frame_hdrs(v[i].data, plan[i].len, mac_a, mac_b, lo, lo,
				   pa, (uint16_t)(pa + 1 + plan[i].peer));
		memcpy(v[i].data + CS_PORT_HDRS_LEN, &i, 4);
		for (uint32_t j = CS_PORT_HDRS_LEN + 4; j < plan[i].len; j++) {
			uint8_t x = (uint8_t)(i * 31 + j);

			if (j < inl)
				v[i].data[j] = x;
			else
				ext[i][j - inl] = x;
		}
		v[i].len = inl;
		if (plan[i].attach)
			cr_assert_eq(cs_port_attach(a, 0, &v[i], ext[i], 64),
				     0);
	}
	cr_assert_eq(cs_port_tx_burst(a, 0, v, N), N);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int r = 0; r < 2; r++) {
			unsigned got =
				cs_port_rx_burst(rx[r], 0, v, CS_PORT_BURST);

			for (unsigned g = 0; g < got; g++) {
				uint32_t i = id_of(&v[g]);

				cr_assert_lt(i, N);
				cr_assert_eq(plan[i].peer, r,
					     "frame %u at peer %d", i, r);
				cr_assert_eq(v[g].len, plan[i].len,
					     "frame %u: %u bytes, sent %u", i,
					     v[g].len, plan[i].len);
				for (uint32_t j = CS_PORT_HDRS_LEN + 4;
				     j < plan[i].len; j++)
					cr_assert_eq(v[g].data[j],
						     (uint8_t)(i * 31 + j),
						     "frame %u byte %u", i, j);
			}
			seen[r] += got;
			cs_port_release(rx[r], 0, v, got);
		}
		cs_port_rx_burst(a, 0, v, CS_PORT_BURST); /* completions */
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((seen[0] < want[0] || seen[1] < want[1]) &&
		 t.tv_sec - t0.tv_sec < 30);
	cr_assert_eq(seen[0], want[0]);
	cr_assert_eq(seen[1], want[1]);
	cs_port_stats(a, &st);
	cr_assert_eq(st.tx_pkts, N);
	cr_assert_eq(st.tx_errors, 0);
	/* runs: 0-2 (ends after the shorter), 3-4, 5-6 (peer c), 7 alone
	 * (a longer one follows), 8-10 (60 bytes ends it) */
	cr_assert_eq(st.tx_gso, 10, "%llu frames in GSO sends",
		     (unsigned long long)st.tx_gso);
	cs_port_stats(rx[0], &st);
	if (gro_set(rx[0]))
		cr_assert_gt(st.rx_gro, 0, "runs to b arrived one by one");
	else
		cr_assert_eq(st.rx_gro, 0);
	cs_port_close(a);
	cs_port_close(rx[0]);
	cs_port_close(rx[1]);
}

Test(udp, gso_runs_keep_every_datagram)
{
	rx_gro = false;
	gso_runs();
}

/* The same runs received with port.udp_gro: each run arrives as one
 * datagram and the port cuts it into the frames sent (sizes, bytes, the
 * shorter last one), at the peer it was sent to. */
Test(udp, gro_cuts_runs_into_the_frames_sent)
{
	rx_gro = true;
	gso_runs();
}

/* port.udp_gro: in-order frames from coalesced datagrams; with 8 receive
 * slots held by the caller a datagram of 16 frames waits half handed up
 * and comes out whole once slots are back; a sender without GSO gives
 * nothing to coalesce; without multishot GRO stays off. */
Test(udp, gro_exchange)
{
	struct cs_port_stats st;

	rx_gro = true;
	udp_exchange(true, 256, 32, 256, 1, &st, true);
	udp_exchange(true, 8, 32, 300, 8, &st, true);
	udp_exchange(true, 256, 32, 64, 1, &st, false);
	udp_exchange(false, 256, 32, 64, 1, &st, true);
	rx_gro = false;
}

/* Receive slots run out while the caller holds them: the multishot
 * request stops (counted in rx_nombuf) and is armed again once slots come
 * back; with single requests, 4 posted at a time still get every frame. */
Test(udp, receive_buffers_run_out_and_come_back)
{
	struct cs_port_stats st;

	udp_exchange(true, 8, 32, 300, 8, &st, true);
	cr_assert_gt(st.rx_nombuf, 0, "the 8 buffers never ran out");
	udp_exchange(false, 8, 4, 300, 8, &st, true);
}

/* Frames that arrive at @p's queue @qi within 10 s, until @want came
 * (then one more look for any extra); their source ports in @src. */
static unsigned udp_drain(struct cs_port *p, unsigned qi, unsigned want,
			  uint16_t *src, unsigned max)
{
	struct cs_pbuf v[CS_PORT_BURST];
	struct timespec t0, t;
	unsigned n = 0, got;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		got = cs_port_rx_burst(p, qi, v, CS_PORT_BURST);
		for (unsigned i = 0; i < got; i++) {
			if (n < max)
				src[n] = (uint16_t)(v[i].data[CS_PORT_L4_OFF]
							    << 8 |
						    v[i].data[CS_PORT_L4_OFF +
							      1]);
			n++;
		}
		cs_port_release(p, qi, v, got);
		if (!got)
			usleep(1000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (n < want && t.tv_sec - t0.tv_sec < 10);
	return n;
}

/*
 * port.queues=2: queue q listens on port.udp_port + q, so a datagram goes
 * to the queue its destination port names, whatever its source. With the
 * queues sharing one port (SO_REUSEPORT) the kernel spread datagrams over
 * them by a hash of the addresses, and the services, which run on queue
 * 0, lost the ones that landed on queue 1: every operation failed with
 * "peer lost". Here 16 senders with 16 source ports all reach queue 0
 * (the old way: 2^-16 odds), and a's queue 1 reaches b's queue 1.
 */
Test(udp, queue_by_destination_port)
{
	uint16_t pb = free_udp_ports(4), pa = pb + 2, src[32];
	struct sockaddr_in to = { .sin_family = AF_INET };
	uint32_t lo = htonl(0x7f000001);
	struct cs_port_conf ca, cb;
	struct cs_pbuf v[1];
	struct cs_port *a, *b;
	uint8_t dgram[64] = { 0 };
	int fds[16];

	conf_of(&ca, "udp", pa);
	conf_of(&cb, "udp", pb);
	ca.queues = cb.queues = 2;
	ca.rx_desc = cb.rx_desc = ca.tx_desc = cb.tx_desc = 64;
	cr_assert_eq(cs_port_open(&ca, &a), 0);
	cr_assert_eq(cs_port_open(&cb, &b), 0);
	/* nothing on either queue yet (and both multishot requests armed) */
	cr_assert_eq(cs_port_rx_burst(b, 0, v, 1), 0);
	cr_assert_eq(cs_port_rx_burst(b, 1, v, 1), 0);

	to.sin_addr.s_addr = lo;
	to.sin_port = htons(pb);
	for (unsigned i = 0; i < 16; i++) {
		fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
		cr_assert_geq(fds[i], 0);
		dgram[0] = (uint8_t)i;
		cr_assert_eq(sendto(fds[i], dgram, sizeof(dgram), 0,
				    (struct sockaddr *)&to, sizeof(to)),
			     (ssize_t)sizeof(dgram));
	}
	cr_assert_eq(udp_drain(b, 0, 16, src, 32), 16,
		     "every datagram to the base port reaches queue 0");
	cr_assert_eq(udp_drain(b, 1, 0, src, 32), 0, "none reaches queue 1");
	for (unsigned i = 0; i < 16; i++)
		close(fds[i]);

	/* a's queue 1 (port pa + 1) to b's queue 1 (port pb + 1) */
	cr_assert_eq(cs_port_tx_alloc(a, 1, v, 1), 1);
	fill(&v[0], 7, lo);
	cs_port_frame_hdrs(v[0].data, FLEN, mac_a, mac_b, lo, lo, pa + 1,
			   pb + 1);
	cr_assert_eq(cs_port_tx_burst(a, 1, v, 1), 1);
	cr_assert_eq(udp_drain(b, 1, 1, src, 32), 1);
	cr_assert_eq(src[0], pa + 1,
		     "sent from a's queue 1 (port %u), "
		     "seen from %u",
		     pa + 1, src[0]);
	cr_assert_eq(udp_drain(b, 0, 0, src, 32), 0);
	cs_port_close(a);
	cs_port_close(b);

	/* the last queue's port must exist */
	conf_of(&cb, "udp", 65535);
	cb.queues = 2;
	cr_assert_eq(cs_port_open(&cb, &b), -EINVAL);
}
#endif
