/* SPDX-License-Identifier: MIT */
/* Unit tests: the dataplane driver's receive filter and raw blaster over
 * loop ports, and the lcore helpers. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataplane/driver.h"
#include "dataplane/lcore.h"
#include "dataplane/port.h"
#include "dataplane/wire.h"

struct pair {
	struct cs_port *a, *b;
	struct cs_drv da, db;
	char peers[64];
};

static void open_loop(struct cs_port **p, const char *ip, const char *mac)
{
	struct cs_port_conf c;

	cr_assert_eq(cs_port_conf_defaults(&c), 0);
	snprintf(c.type, sizeof(c.type), "loop");
	snprintf(c.ip, sizeof(c.ip), "%s", ip);
	snprintf(c.mac, sizeof(c.mac), "%s", mac);
	c.udp_port = 7700;
	cr_assert_eq(cs_port_loop_ops.open(&c, p), 0);
}

static void pair_up(struct pair *pr)
{
	FILE *f;
	int fd;

	open_loop(&pr->a, "10.77.0.1", "02:77:00:00:00:01");
	open_loop(&pr->b, "10.77.0.2", "02:77:00:00:00:02");
	cr_assert_eq(cs_port_loop_connect(pr->a, pr->b), 0);
	snprintf(pr->peers, sizeof(pr->peers), "/tmp/cs-peers.XXXXXX");
	fd = mkstemp(pr->peers);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	fprintf(f, "# rank ip mac port name\n"
		   "0 10.77.0.1 02:77:00:00:00:01 7700 a\n"
		   "1 10.77.0.2 02:77:00:00:00:02 7700 b  # comment\n");
	fclose(f);
	cr_assert_eq(cs_drv_init(&pr->da, pr->a, 0), 0);
	cr_assert_eq(cs_drv_init(&pr->db, pr->b, 1), 0);
	cr_assert_eq(cs_drv_load_peers(&pr->da, pr->peers), 0);
	cr_assert_eq(cs_drv_load_peers(&pr->db, pr->peers), 0);
	cr_assert_eq(pr->da.npeers, 2);
}

static void pair_down(struct pair *pr)
{
	unlink(pr->peers);
	cs_port_close(pr->a);
	cs_port_close(pr->b);
}

/* Send one frame of @len bytes built by @fill from port a. */
static void send_frame(struct pair *pr,
		       void (*fill)(struct pair *, uint8_t *, uint32_t *))
{
	struct cs_pbuf b;

	cr_assert_eq(cs_port_tx_alloc(pr->a, 0, &b, 1), 1);
	fill(pr, b.data, &b.len);
	cr_assert_eq(cs_port_tx_burst(pr->a, 0, &b, 1), 1);
}

static void fill_arp(struct pair *pr, uint8_t *f, uint32_t *len)
{
	(void)pr;
	memset(f, 0, 60);
	f[12] = 0x08;
	f[13] = 0x06; /* ARP */
	*len = 60;
}

static void fill_other_port(struct pair *pr, uint8_t *f, uint32_t *len)
{
	cs_port_frame_hdrs(f, 200, pr->a->mac, pr->b->mac, pr->a->ip, pr->b->ip,
			   7700, 7755);
	*len = 200;
}

static void fill_garbage(struct pair *pr, uint8_t *f, uint32_t *len)
{
	cs_port_frame_hdrs(f, 200, pr->a->mac, pr->b->mac, pr->a->ip, pr->b->ip,
			   7700, 7700);
	memset(f + CS_PORT_HDRS_LEN, 0x42, 200 - CS_PORT_HDRS_LEN);
	*len = 200;
}

static void fill_data(struct pair *pr, uint8_t *f, uint32_t *len)
{
	struct cs_pkt_hdr h = { .type = CS_PKT_DATA, .op = 77, .len = 64 };
	int n;

	memset(f + CS_PROTO_FRAME_OVERHEAD, 0xab, 64);
	n = cs_drv_frame_hdr(&pr->da, f, pr->a->frame_max, &h, 1, 7700);
	cr_assert_gt(n, 0);
	*len = (uint32_t)n;
}

static unsigned seen_n;
static uint32_t seen_op;

static void rx_hook(void *arg, unsigned q, struct cs_pbuf *v,
		    struct cs_wire_pkt *pk, unsigned n, cs_ns_t now)
{
	(void)arg;
	(void)q;
	(void)v;
	(void)now;
	for (unsigned i = 0; i < n; i++) {
		seen_n++;
		seen_op = pk[i].hdr.op;
		cr_assert_eq(pk[i].hdr.len, 64);
		cr_assert_eq(pk[i].payload[0], 0xab);
	}
}

Test(driver, foreign_and_malformed_are_counted_never_delivered)
{
	struct pair pr;
	struct cs_drv_totals t;

	pair_up(&pr);
	pr.db.rx_fn = rx_hook;
	seen_n = 0;
	send_frame(&pr, fill_arp);
	send_frame(&pr, fill_other_port);
	send_frame(&pr, fill_garbage);
	send_frame(&pr, fill_data);
	while (cs_drv_poll(&pr.db, 0, 1))
		;
	cs_drv_totals(&pr.db, &t);
	cr_assert_eq(t.rx_frames, 4);
	cr_assert_eq(t.rx_foreign, 2, "ARP and another UDP port");
	cr_assert_eq(t.rx_malformed, 1, "not a collstack header");
	cr_assert_eq(seen_n, 1, "only the valid frame reaches the handler");
	cr_assert_eq(seen_op, 77);
	/* without a handler a valid frame is counted as unhandled */
	pr.db.rx_fn = NULL;
	send_frame(&pr, fill_data);
	while (cs_drv_poll(&pr.db, 0, 2))
		;
	cs_drv_totals(&pr.db, &t);
	cr_assert_eq(t.rx_unhandled, 1);
	pair_down(&pr);
}

/* A valid data frame for b whose destination MAC is then set to @mac. */
static const uint8_t *to_mac;

static void fill_data_to(struct pair *pr, uint8_t *f, uint32_t *len)
{
	fill_data(pr, f, len);
	memcpy(f, to_mac, 6);
}

Test(driver, frames_to_another_mac_are_counted_never_delivered)
{
	static const uint8_t other[6] = { 0x02, 0x77, 0, 0, 0, 0x09 };
	static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	struct pair pr;
	struct cs_drv_totals t;

	pair_up(&pr);
	pr.db.rx_fn = rx_hook;
	seen_n = 0;
	/* what a bridge floods: a valid frame for a neighbour's MAC */
	to_mac = other;
	send_frame(&pr, fill_data_to);
	while (cs_drv_poll(&pr.db, 0, 1))
		;
	cs_drv_totals(&pr.db, &t);
	cr_assert_eq(t.rx_frames, 1);
	cr_assert_eq(t.rx_other_mac, 1, "counted by its cause");
	cr_assert_eq(t.rx_foreign, 1, "and as foreign");
	cr_assert_eq(t.rx_malformed, 0);
	cr_assert_eq(seen_n, 0, "not delivered");
	/* the same frame to our MAC, then to broadcast, is delivered */
	to_mac = pr.b->mac;
	send_frame(&pr, fill_data_to);
	to_mac = bcast;
	send_frame(&pr, fill_data_to);
	while (cs_drv_poll(&pr.db, 0, 2))
		;
	cs_drv_totals(&pr.db, &t);
	cr_assert_eq(seen_n, 2, "ours and broadcast are delivered");
	cr_assert_eq(seen_op, 77);
	cr_assert_eq(t.rx_other_mac, 1);
	cr_assert_eq(t.rx_foreign, 1);
	pair_down(&pr);
}

Test(driver, raw_blast_counts_both_ends)
{
	struct pair pr;
	struct cs_drv_totals ta, tb;
	cs_ns_t now = 1000;

	pair_up(&pr);
	cr_assert_eq(cs_drv_raw_start(&pr.da, 0, 1514, 0), -EINVAL,
		     "to itself");
	cr_assert_eq(cs_drv_raw_start(&pr.da, 1, 60, 0), -EINVAL,
		     "shorter than the headers");
	cr_assert_eq(cs_drv_raw_start(&pr.da, 1, 1515, 0), -EINVAL,
		     "longer than the port's frames");
	cr_assert_eq(cs_drv_raw_start(&pr.da, 1, 1514, now + 100), 0);
	for (int i = 0; i < 50; i++, now++) {
		cs_drv_poll(&pr.da, 0, now);
		cs_drv_poll(&pr.db, 0, now);
	}
	for (int i = 0; i < 60; i++, now++) { /* past the end: drain */
		cs_drv_poll(&pr.da, 0, now);
		cs_drv_poll(&pr.db, 0, now);
	}
	cs_drv_totals(&pr.da, &ta);
	cs_drv_totals(&pr.db, &tb);
	cr_assert_gt(ta.tx_raw_pkts, 0);
	cr_assert_eq(ta.tx_raw_bytes, ta.tx_raw_pkts * 1514);
	cr_assert_eq(tb.rx_raw_pkts, ta.tx_raw_pkts, "loop ports lose nothing");
	cr_assert_eq(tb.rx_raw_bytes, ta.tx_raw_bytes);
	cr_assert_eq(tb.rx_foreign + tb.rx_malformed, 0);
	cr_assert_eq(ta.tx_raw_ns, 100, "blast stops at its deadline");
	pair_down(&pr);
}

Test(driver, bad_peer_table_names_the_line)
{
	struct pair pr;
	FILE *f;

	pair_up(&pr);
	f = fopen(pr.peers, "w");
	fprintf(f, "0 10.77.0.1 02:77:00:00:00:01 7700\n1 10.77.0.x zz 7700\n");
	fclose(f);
	cr_assert_eq(cs_drv_load_peers(&pr.da, pr.peers), -EINVAL);
	cr_assert_eq(cs_drv_load_peers(&pr.da, "/nonexistent/peers"), -ENOENT);
	pair_down(&pr);
}

Test(lcore, cpu_choice_and_poll_mode)
{
	struct cs_lcore_conf lc;
	struct cs_port p = { 0 };
	char why[256];

	cr_assert_eq(cs_cfg_defaults(cs_lcore_cfg, cs_lcore_cfg_len, &lc), 0);
	snprintf(lc.cpus, sizeof(lc.cpus), "0");
	cr_assert_eq(cs_lcore_pick_cpu(&lc, -1, 3, 0, why, sizeof(why)), 0);
	cr_assert(strstr(why, "lcore.cpus"), "why: %s", why);
	snprintf(lc.cpus, sizeof(lc.cpus), "x-y");
	cr_assert_eq(cs_lcore_pick_cpu(&lc, -1, 0, 0, why, sizeof(why)), -1);
	lc.cpus[0] = 0;
	cr_assert_geq(cs_lcore_pick_cpu(&lc, -1, 0, 1, why, sizeof(why)), 0);
	cr_assert(strstr(why, "unknown"), "why: %s", why);

	snprintf(p.conf.type, sizeof(p.conf.type), "dpdk");
	snprintf(p.conf.dev, sizeof(p.conf.dev), "0000:3b:00.0");
	cr_assert_eq(cs_lcore_poll_mode(&lc, &p), CS_POLL_BUSY, "a NIC");
	snprintf(p.conf.dev, sizeof(p.conf.dev), "af_packet");
	cr_assert_eq(cs_lcore_poll_mode(&lc, &p), CS_POLL_ADAPTIVE);
	snprintf(p.conf.type, sizeof(p.conf.type), "udp");
	cr_assert_eq(cs_lcore_poll_mode(&lc, &p), CS_POLL_ADAPTIVE);
	snprintf(lc.poll, sizeof(lc.poll), "busy");
	cr_assert_eq(cs_lcore_poll_mode(&lc, &p), CS_POLL_BUSY);
}

static atomic_uint calls;

static unsigned count_fn(void *arg, unsigned q, cs_ns_t now)
{
	(void)arg;
	(void)q;
	(void)now;
	atomic_fetch_add(&calls, 1);
	return 0; /* idle: the adaptive lcore waits between polls */
}

/* lcore defaults with @spin idle polls, and a loop port to poll. */
static struct cs_port *lcore_setup(struct cs_lcore_conf *lc, uint32_t spin)
{
	struct cs_port *p;

	cr_assert_eq(cs_cfg_defaults(cs_lcore_cfg, cs_lcore_cfg_len, lc), 0);
	lc->spin = spin;
	open_loop(&p, "127.0.0.1", "");
	return p;
}

/* An adaptive lcore on @p running count_fn, with the call count reset. */
static void start_counting(struct cs_lcore *l, struct cs_port *p,
			   const struct cs_lcore_conf *lc)
{
	atomic_store(&calls, 0);
	cr_assert_eq(cs_lcore_start(l, p, 0, CS_POLL_ADAPTIVE, lc, -1, count_fn,
				    NULL),
		     0);
}

/* Wait (generously: a loaded machine) until count_fn ran @n times. */
static void wait_calls(unsigned n)
{
	while (atomic_load(&calls) < n)
		usleep(1000);
}

Test(lcore, adaptive_lcore_polls_waits_and_stops)
{
	struct cs_lcore_conf lc;
	struct cs_lcore l;
	struct cs_port *p = lcore_setup(&lc, 10);

	/* no yield phase: with the default lcore.yield (200 us) 100 polls
	 * can all fall inside it, and the lcore then never waits */
	lc.yield_ns = 0;
	start_counting(&l, p, &lc);
	wait_calls(100);
	cs_lcore_stop(&l);
	cr_assert_gt(l.idle_waits, 0, "an idle adaptive lcore waits");
	cr_assert_geq(l.loops, 100);
	cs_port_close(p);
}

/* lcore.yield: an idle lcore keeps polling (yielding the CPU between
 * polls) until lcore.yield has passed since its last work, and only then
 * waits on the port. */
Test(lcore, idle_lcore_yields_before_it_waits)
{
	struct cs_lcore_conf lc;
	struct cs_lcore l;
	struct cs_port *p = lcore_setup(&lc, 1);

	lc.yield_ns = 60 * CS_NS_PER_S; /* longer than the test */
	start_counting(&l, p, &lc);
	wait_calls(2000);
	cs_lcore_stop(&l);
	cr_assert_eq(l.idle_waits, 0, "waited within lcore.yield");

	lc.yield_ns = 0; /* wait at once */
	start_counting(&l, p, &lc);
	wait_calls(20);
	cs_lcore_stop(&l);
	cr_assert_gt(l.idle_waits, 0, "lcore.yield=0 waits after the spin");
	cs_port_close(p);
}

static atomic_uint side_calls;
static atomic_bool side_on_lcore;

static unsigned side_fn(void *arg, unsigned q, cs_ns_t now)
{
	(void)q;
	(void)now;
	atomic_store(&side_on_lcore, cs_lcore_is_self(arg));
	atomic_fetch_add(&side_calls, 1);
	return 0;
}

/* ipc.on_lcore: a second work function runs on the lcore thread each
 * round until it is taken off; once cs_lcore_set_side(NULL) returns it is
 * never called again. */
Test(lcore, side_work_runs_on_the_lcore_until_taken_off)
{
	struct cs_lcore_conf lc;
	struct cs_lcore l;
	struct cs_port *p = lcore_setup(&lc, 10);
	struct cs_lcore_side side = { .fn = side_fn, .arg = &l };
	unsigned n;

	start_counting(&l, p, &lc);
	cr_assert_not(cs_lcore_is_self(&l), "the test thread is not it");
	atomic_store(&side_calls, 0);
	cs_lcore_set_side(&l, &side);
	while (atomic_load(&side_calls) < 50)
		usleep(1000);
	cr_assert(atomic_load(&side_on_lcore), "ran on the lcore thread");
	cs_lcore_set_side(&l, NULL);
	n = atomic_load(&side_calls);
	wait_calls(atomic_load(&calls) + 50); /* the lcore goes on */
	cr_assert_eq(atomic_load(&side_calls), n, "called after removal");
	cs_lcore_stop(&l);
	cs_lcore_stop(&l); /* twice: nothing */
	cs_port_close(p);
}

Test(lcore, kick_wakes_a_waiting_lcore)
{
	struct cs_lcore_conf lc;
	struct cs_lcore l;
	struct cs_port *p = lcore_setup(&lc, 1);
	unsigned before;

	lc.sleep_ns = 30 * CS_NS_PER_S; /* only a kick ends the wait */
	lc.quiet_sleep_ns = 30 * CS_NS_PER_S;
	start_counting(&l, p, &lc);
	cr_assert_geq(l.kick_fd, 0);
	while (!atomic_load(&l.waiting))
		usleep(1000);
	before = atomic_load(&calls);
	cs_lcore_kick(&l);
	/* generous: a loaded machine may take long to run it, but without
	 * the kick it would sleep for 30 s */
	for (unsigned i = 0; i < 10000 && atomic_load(&calls) == before; i++)
		usleep(1000);
	cr_assert_gt(atomic_load(&calls), before, "the kick woke the lcore");
	cs_lcore_stop(&l); /* kicks it again: must not wait 30 s */
	cr_assert_eq(l.kick_fd, -1);
	cs_port_close(p);
}
