/* SPDX-License-Identifier: MIT */
/*
 * The port interface: one small ops table that every packet back-end
 * implements (dpdk ethdev, kernel UDP over io_uring, in-memory loopback,
 * the simulator's link), and the fault shim that wraps any of them.
 *
 * Everything above a port sees whole Ethernet/IPv4/UDP frames, whatever the
 * back-end: the udp port strips the outer headers on transmit and rebuilds
 * them on receive, so the codec and the engines run the same code on every
 * port.
 *
 * Buffer ownership, the one rule to remember:
 *  - rx_burst() hands buffers to the caller; the caller gives each back with
 *    cs_port_release() once it has consumed the frame.
 *  - tx_alloc() hands empty buffers (cap bytes at data) to the caller.
 *  - tx_burst() takes the first `sent` buffers; the rest stay the caller's
 *    (retry them later or release them).
 * The hot-path calls take bursts and never block, allocate (beyond the
 * port's own pool) or lock.
 */
#ifndef CS_DATAPLANE_PORT_H
#define CS_DATAPLANE_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/config.h"
#include "internal/util.h"

/* Burst sizes: what one rx_burst / tx_burst call moves at most. */
#define CS_PORT_BURST 32
#define CS_PORT_MAX_QUEUES 8

/* Outer header bytes in every frame: Ethernet + IPv4 (no options) + UDP. */
#define CS_PORT_ETH_LEN 14
#define CS_PORT_IP_LEN 20
#define CS_PORT_UDP_LEN 8
#define CS_PORT_L4_OFF (CS_PORT_ETH_LEN + CS_PORT_IP_LEN)
#define CS_PORT_HDRS_LEN (CS_PORT_L4_OFF + CS_PORT_UDP_LEN)

/**
 * struct cs_pbuf - one frame buffer lent by a port
 * @data: first byte of the frame (the Ethernet header)
 * @len: frame bytes (set by rx_burst; set by the caller before tx_burst)
 * @cap: bytes writable at @data (tx buffers)
 * @handle: the back-end's own token (mbuf, slot index); do not touch
 */
struct cs_pbuf {
	uint8_t *data;
	uint32_t len;
	uint32_t cap;
	void *handle;
};

/* Fault-injection settings; all probabilities are per transmitted frame. */
struct cs_fault_conf {
	uint64_t seed;
	double drop; /* frame silently discarded */
	double dup; /* frame sent twice */
	double reorder; /* frame held back, sent after later ones */
	double delay; /* frame held for delay_ns */
	double corrupt; /* one bit flipped past the outer headers */
	cs_ns_t delay_ns;
	uint32_t reorder_depth; /* frames sent before a reordered one */
};

/* Everything needed to open a port; filled from the runtime config table. */
struct cs_port_conf {
	char type[CS_CFG_STR_MAX]; /* "udp", "dpdk", "loop" */
	char dev[CS_CFG_STR_MAX]; /* dpdk: PCI address, or a vdev kind */
	char iface[CS_CFG_STR_MAX]; /* Linux interface (vdevs) */
	char ip[CS_CFG_STR_MAX]; /* local IPv4 address */
	char mac[CS_CFG_STR_MAX]; /* local MAC ("" = the device's) */
	char name[CS_CFG_STR_MAX]; /* instance name (file prefix, pools) */
	char run_dir[CS_CFG_STR_MAX]; /* sockets and state of this instance */
	char memif_role[CS_CFG_STR_MAX]; /* "server" or "client" */
	char memif_socket[CS_CFG_STR_MAX]; /* memif control socket path */
	char eal_args[CS_CFG_STR_MAX]; /* extra EAL arguments */
	char vdev_args[CS_CFG_STR_MAX]; /* extra ",k=v" for the vdev */
	uint32_t udp_port; /* local UDP port of the dataplane */
	uint32_t mtu; /* IP MTU; frames are mtu + 14 bytes */
	uint32_t queues; /* rx/tx queue pairs */
	uint32_t rx_desc; /* descriptors (dpdk) / recv slots (udp) */
	uint32_t tx_desc;
	uint32_t afp_frames; /* af_packet ring frames (0: 2.5 MiB's worth) */
	uint32_t pool_mbufs; /* mbufs in the port's pool (0: auto) */
	uint32_t pool_cache; /* per-lcore mempool cache */
	uint64_t sock_buf; /* udp: SO_RCVBUF / SO_SNDBUF bytes */
	uint32_t rx_posted; /* udp: recvmsg requests in the kernel at once */
	bool rx_multishot; /* udp: one multishot recvmsg, provided buffers */
	bool udp_gso; /* udp: same-size runs to one peer as one GSO send */
	bool udp_gro; /* udp: receive GSO runs whole (UDP_GRO), split here */
	bool no_huge; /* dpdk: never use hugepages */
	bool zero_copy; /* dpdk: attach external TX buffers */
	bool rx_filter; /* dpdk af_packet: kernel filter on port.udp_port */
	int32_t numa; /* socket for memory, -1: the port's */
	struct cs_fault_conf fault;
};

/* Counters of one port (all queues); the shim adds its own. */
struct cs_port_stats {
	uint64_t rx_pkts, rx_bytes;
	uint64_t tx_pkts, tx_bytes;
	uint64_t rx_dropped; /* malformed/foreign frames, no buffers, ring full
			      */
	uint64_t tx_errors; /* frames the back-end could not send */
	uint64_t rx_nombuf;
	uint64_t tx_zero_copy; /* payloads sent by reference (attach) */
	uint64_t tx_gso; /* udp: frames sent in GSO sends of several */
	uint64_t rx_gro; /* udp: frames received in GRO datagrams of several */
	uint64_t rx_filtered; /* af_packet with port.rx_filter: frames the
			       * interface received that the kernel filter kept
			       * from the rings (interface rx_packets - ring
			       * frames - ring drops; approximate while frames
			       * wait in a ring) */
	/* fault shim */
	uint64_t f_dropped, f_duplicated, f_reordered, f_delayed, f_corrupted;
};

struct cs_port;
struct cs_gpu_nic; /* gpu/gpu.h */

/**
 * struct cs_port_ops - what a back-end implements
 *
 * Queues are numbered 0..queues-1; each queue is used by one lcore only.
 * attach and reg_mem are optional (NULL: not supported).
 */
struct cs_port_ops {
	const char *name;
	/* Allocate and open; fills the struct cs_port at the head. */
	int (*open)(const struct cs_port_conf *conf, struct cs_port **out);
	unsigned (*rx_burst)(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			     unsigned n);
	unsigned (*tx_alloc)(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			     unsigned n);
	unsigned (*tx_burst)(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			     unsigned n);
	void (*release)(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			unsigned n);
	/* Append @len bytes of registered memory at @ext to tx buffer @b. */
	int (*attach)(struct cs_port *p, unsigned q, struct cs_pbuf *b,
		      void *ext, uint32_t len);
	int (*reg_mem)(struct cs_port *p, void *addr, size_t len);
	int (*unreg_mem)(struct cs_port *p, void *addr, size_t len);
	/* Block up to @timeout_ns for receive work (adaptive polling), or
	 * until @kick_fd (an eventfd, -1: none) is readable. */
	int (*wait)(struct cs_port *p, unsigned q, cs_ns_t timeout_ns,
		    int kick_fd);
	/* Does wait() end when a frame arrives on @q? (NULL: no) */
	bool (*wakes_on_rx)(struct cs_port *p, unsigned q);
	/* Does wait() end when @kick_fd is readable? (NULL: only without
	 * a wait() of its own, whose stand-in ppoll()s it) */
	bool (*wait_sees_fd)(struct cs_port *p);
	/* Called once by each lcore thread before it polls (DPDK: register
	 * the thread as an EAL lcore so mempool caches work). */
	int (*thread_init)(struct cs_port *p);
	/* The port's hooks for device (GPU) memory; NULL: it has none. */
	int (*gpu_nic)(struct cs_port *p, struct cs_gpu_nic *out);
	void (*stats)(struct cs_port *p, struct cs_port_stats *st);
	void (*close)(struct cs_port *p); /* closes and frees */
};

/**
 * struct cs_port - an open port; back-ends embed it first in their state
 * @ops: the back-end
 * @conf: a copy of the configuration it was opened with
 * @mac: the local MAC in use
 * @ip: the local IPv4 address, network order
 * @udp_port: the local UDP port, host order
 * @frame_max: largest frame (Ethernet header included) the port carries
 * @numa: NUMA node of the device, -1 when unknown
 */
struct cs_port {
	const struct cs_port_ops *ops;
	struct cs_port_conf conf;
	uint8_t mac[6];
	uint32_t ip;
	uint16_t udp_port;
	uint32_t frame_max;
	int numa;
};

/* The runtime config table of a port (prefix "port." and "fault."). */
extern const struct cs_cfg_entry cs_port_cfg[];
extern const size_t cs_port_cfg_len;

/**
 * cs_port_conf_check - values the table's ranges cannot express
 * (port.afp_frames: 0 or at least 32)
 * @conf: the configuration
 * @err: message naming the key
 * @len: size of @err
 *
 * Return: 0, or -EINVAL with @err set.
 */
int cs_port_conf_check(const struct cs_port_conf *conf, char *err, size_t len);

/**
 * cs_port_open - open a port of type @conf->type, wrapped in the fault
 * shim when any fault probability is non-zero
 * @conf: configuration (copied)
 * @out: the port
 *
 * Returns: 0, -ENOTSUP for a type not built in, -EINVAL for a bad setting,
 * or the back-end's negative errno.
 */
int cs_port_open(const struct cs_port_conf *conf, struct cs_port **out);

/**
 * cs_port_close - close a port and free it (NULL is ignored)
 */
void cs_port_close(struct cs_port *p);

static inline unsigned cs_port_rx_burst(struct cs_port *p, unsigned q,
					struct cs_pbuf *v, unsigned n)
{
	return p->ops->rx_burst(p, q, v, n);
}

static inline unsigned cs_port_tx_alloc(struct cs_port *p, unsigned q,
					struct cs_pbuf *v, unsigned n)
{
	return p->ops->tx_alloc(p, q, v, n);
}

static inline unsigned cs_port_tx_burst(struct cs_port *p, unsigned q,
					struct cs_pbuf *v, unsigned n)
{
	return p->ops->tx_burst(p, q, v, n);
}

static inline void cs_port_release(struct cs_port *p, unsigned q,
				   struct cs_pbuf *v, unsigned n)
{
	if (n)
		p->ops->release(p, q, v, n);
}

/**
 * cs_port_attach - append registered memory to a tx buffer (zero copy
 * where the back-end can, a copy otherwise)
 * Returns: 0, or -ENOTSUP / -ENOSPC.
 */
int cs_port_attach(struct cs_port *p, unsigned q, struct cs_pbuf *b, void *ext,
		   uint32_t len);

/**
 * cs_port_reg_mem - register memory that attach() may point at
 *
 * Any thread may register and unregister; calls are serialized by one
 * lock for the process (a DPDK registration of 256 MiB took 3.4-4.4 ms
 * here: keep it off an lcore). attach() on the lcore takes no lock and
 * copies until the region is registered.
 * Returns: 0 (also when the back-end needs nothing), or a negative errno.
 */
int cs_port_reg_mem(struct cs_port *p, void *addr, size_t len);
int cs_port_unreg_mem(struct cs_port *p, void *addr, size_t len);
/* The same with the registration lock already held: for a port that
 * wraps another (the fault shim). */
int cs_port_reg_mem_locked(struct cs_port *p, void *addr, size_t len);
int cs_port_unreg_mem_locked(struct cs_port *p, void *addr, size_t len);

/**
 * cs_port_unreg_mem_wait - cs_port_unreg_mem(), waiting while frames still
 * queued for transmission point into the memory (-EBUSY: the lcore sends
 * them on its next rounds), for at most @timeout_ns
 * Returns: as cs_port_unreg_mem(); -EBUSY after the timeout (then the
 * memory must stay allocated and mapped).
 */
int cs_port_unreg_mem_wait(struct cs_port *p, void *addr, size_t len,
			   cs_ns_t timeout_ns);

/**
 * cs_port_wait - sleep until receive work may be there, @kick_fd is
 * readable, or @timeout_ns passed; ports that cannot wait on receive
 * events wait on @kick_fd alone (the udp port on its ring alone).
 * @kick_fd: an eventfd another thread writes to wake the lcore (-1: none);
 *	the caller drains it
 */
int cs_port_wait(struct cs_port *p, unsigned q, cs_ns_t timeout_ns,
		 int kick_fd);

/**
 * cs_port_wakes_on_rx - does cs_port_wait() on @q end when a frame
 * arrives (rather than only when its timeout passes)?
 */
bool cs_port_wakes_on_rx(struct cs_port *p, unsigned q);

/**
 * cs_port_wait_sees_fd - does cs_port_wait() end as soon as its @kick_fd
 * is readable (rather than at the end of its timeout)?
 */
bool cs_port_wait_sees_fd(struct cs_port *p);

int cs_port_thread_init(struct cs_port *p);

/**
 * cs_port_gpu_nic - the port's registration hooks for device memory
 * @p: an open port (it must outlive every registration made through them)
 * @out: filled with the port's name, PCI address and callbacks for
 *	cs_gpu_register() (gpu/gpu.h)
 *
 * The dpdk port has them (rte_extmem_register + rte_dev_dma_map on its
 * device; a vdev refuses each range with the reason); udp and loop ports
 * have none.
 * Returns: 0, or -ENOTSUP (@out is then zeroed).
 */
int cs_port_gpu_nic(struct cs_port *p, struct cs_gpu_nic *out);
void cs_port_stats(struct cs_port *p, struct cs_port_stats *st);

/**
 * cs_port_conf_defaults - fill @conf with the config table's defaults
 * Returns: 0 or -EINVAL.
 */
int cs_port_conf_defaults(struct cs_port_conf *conf);

/* Helpers shared by the back-ends and the tools. */
int cs_port_parse_mac(const char *s, uint8_t mac[6]);
void cs_port_format_mac(const uint8_t mac[6], char *buf, size_t len);
uint16_t cs_port_ip_csum(const void *iphdr);

/**
 * cs_port_frame_hdrs - write Ethernet/IPv4/UDP headers at @frame for a
 * frame of @frame_len bytes (UDP checksum 0, IPv4 checksum computed)
 * @ips, @ipd: source/destination IPv4, network order
 * @sport, @dport: UDP ports, host order
 */
void cs_port_frame_hdrs(uint8_t *frame, uint32_t frame_len,
			const uint8_t smac[6], const uint8_t dmac[6],
			uint32_t ips, uint32_t ipd, uint16_t sport,
			uint16_t dport);

/**
 * cs_port_frame_check - is @frame a well-formed IPv4/UDP frame for @p?
 * Checks the ethertype, IPv4 version/IHL/lengths/checksum, protocol, the
 * UDP length and the destination UDP port.
 * Returns: the UDP payload offset (CS_PORT_HDRS_LEN), or a negative errno.
 */
int cs_port_frame_check(const struct cs_port *p, const uint8_t *frame,
			uint32_t len);

/* Back-ends (dataplane/port_*.c). */
extern const struct cs_port_ops cs_port_udp_ops;
extern const struct cs_port_ops cs_port_loop_ops;
extern const struct cs_port_ops cs_port_dpdk_ops;

/**
 * cs_port_loop_connect - join two loop ports so each one's TX arrives at
 * the other's RX (an unconnected loop port receives its own TX)
 */
int cs_port_loop_connect(struct cs_port *a, struct cs_port *b);

/* Test hook: dpdk vdevs take device ranges instead of refusing them, so
 * that a test with host memory standing in for a GPU's sees a whole
 * registration through (never set outside tests). */
extern bool cs__dpdk_gpu_vdev_ok;

/* Test hook: the socket of queue @q of udp port @p (-1: no such queue). */
int cs__udp_port_fd(struct cs_port *p, unsigned q);

#endif
