/* SPDX-License-Identifier: MIT */
/* Port set-up: the config table, back-end selection and frame helpers. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cs_config.h"
#define CS_LOG_MODULE "port"
#include "internal/log.h"
#include "dataplane/port.h"
#include "dataplane/fault.h"
#include "gpu/gpu.h" /* struct cs_gpu_nic (plain C; no CUDA) */

#define PC(f) offsetof(struct cs_port_conf, f)

const struct cs_cfg_entry cs_port_cfg[] = {
	{ "port.type", CS_CFG_STR, PC(type), "udp", CS_CFG_NO_BOUNDS,
	  "back-end: udp (kernel sockets via io_uring), dpdk (any ethdev), "
	  "loop (in-memory, tests)" },
	{ "port.dev", CS_CFG_STR, PC(dev), "af_packet", CS_CFG_NO_BOUNDS,
	  "dpdk: af_packet, af_xdp, memif, tap, null (no link; tests), or "
	  "a PCI address "
	  "(0000:3b:00.0) of a NIC bound to a DPDK driver" },
	{ "port.iface", CS_CFG_STR, PC(iface), "", CS_CFG_NO_BOUNDS,
	  "dpdk vdevs: the Linux interface (af_packet, af_xdp) or the tap "
	  "name to create" },
	{ "port.ip", CS_CFG_STR, PC(ip), "127.0.0.1", CS_CFG_NO_BOUNDS,
	  "local IPv4 address of the dataplane (udp: bound)" },
	{ "port.mac", CS_CFG_STR, PC(mac), "", CS_CFG_NO_BOUNDS,
	  "local MAC address; empty: the device's own" },
	{ "port.udp_port", CS_CFG_U32, PC(udp_port), "7700", 1, 65535,
	  "local UDP port of the dataplane" },
	{ "port.mtu", CS_CFG_U32, PC(mtu), "1500", 576, 9000,
	  "IP MTU; frames are up to mtu + 14 bytes (af_xdp on veth: "
	  "<= 3506)" },
	{ "port.queues", CS_CFG_U32, PC(queues), "1", 1, CS_PORT_MAX_QUEUES,
	  "rx/tx queue pairs, one polling lcore each" },
	{ "port.rx_desc", CS_CFG_U32, PC(rx_desc), "512", 32, 16384,
	  "receive descriptors per queue (udp: recvmsg slots)" },
	{ "port.rx_posted", CS_CFG_U32, PC(rx_posted), "32", 1, 16384,
	  "udp: recvmsg requests posted at once (at most port.rx_desc); "
	  "each waits on the socket, and every datagram wakes them all" },
	{ "port.rx_multishot", CS_CFG_BOOL, PC(rx_multishot), "true",
	  CS_CFG_NO_BOUNDS,
	  "udp: receive with one multishot recvmsg into the receive slots "
	  "(kernel 6.0+; else port.rx_posted requests)" },
	{ "port.udp_gso", CS_CFG_BOOL, PC(udp_gso), "true", CS_CFG_NO_BOUNDS,
	  "udp: a run of frames in a burst to one peer with one datagram "
	  "size goes out as one sendmsg with UDP_SEGMENT (the kernel cuts it "
	  "into the same datagrams); off: one sendmsg per datagram" },
	{ "port.udp_gro", CS_CFG_BOOL, PC(udp_gro), "true", CS_CFG_NO_BOUNDS,
	  "udp: receive with UDP_GRO: a GSO run that crossed veths and a "
	  "bridge whole (offloads on) arrives as one datagram of up to "
	  "64 KiB, cut into frames by the port (one copy each) instead of "
	  "by the kernel at the socket; needs port.rx_multishot. Off: one "
	  "datagram per frame, received in place" },
	{ "port.tx_desc", CS_CFG_U32, PC(tx_desc), "512", 32, 16384,
	  "transmit descriptors per queue (udp: sendmsg slots)" },
	{ "port.afp_frames", CS_CFG_U32, PC(afp_frames), "0", 0, 16384,
	  "dpdk af_packet: frames in each PACKET_MMAP ring (receive and "
	  "transmit, per queue); 0: as many as 2.5 MiB holds (256 at MTU "
	  "9000, 1280 at 1500): small enough to stay in cache, enough for "
	  "what the senders keep in flight" },
	{ "port.pool_mbufs", CS_CFG_U32, PC(pool_mbufs), "0", 0, 1048576,
	  "dpdk: mbufs in the pool; 0 sizes it from the rings, the burst "
	  "and the cache (kept small: several sidecars share hugepages)" },
	{ "port.pool_cache", CS_CFG_U32, PC(pool_cache), "128", 0, 512,
	  "dpdk: per-lcore mempool cache" },
	{ "port.sock_buf", CS_CFG_SIZE, PC(sock_buf), "4M", 0, 1073741824,
	  "udp: SO_RCVBUF/SO_SNDBUF (0: kernel default)" },
	{ "port.no_huge", CS_CFG_BOOL, PC(no_huge), "false", CS_CFG_NO_BOUNDS,
	  "dpdk: run EAL with --no-huge even when hugepages are free "
	  "(it does so anyway when none are)" },
	{ "port.zero_copy", CS_CFG_BOOL, PC(zero_copy), "true",
	  CS_CFG_NO_BOUNDS,
	  "dpdk: transmit registered memory as attached external mbufs "
	  "instead of copying it" },
	{ "port.rx_filter", CS_CFG_BOOL, PC(rx_filter), "true",
	  CS_CFG_NO_BOUNDS,
	  "dpdk af_packet: a kernel socket filter passes only IPv4 UDP to "
	  "port.udp_port into the rings, and frames the namespace sends are "
	  "ignored; the interface's other traffic (TCP, ARP, other ports) "
	  "then costs the sidecar no copy and no wake-up. Off: every frame "
	  "reaches the lcore, which drops and counts the foreign ones "
	  "(rx_foreign)" },
	{ "port.memif_role", CS_CFG_STR, PC(memif_role), "client",
	  CS_CFG_NO_BOUNDS, "dpdk memif: server or client" },
	{ "port.memif_socket", CS_CFG_STR, PC(memif_socket), "",
	  CS_CFG_NO_BOUNDS,
	  "dpdk memif: control socket path (a file, socket-abstract=no, so "
	  "it is reachable across namespaces); empty: <run_dir>/memif.sock" },
	{ "port.eal_args", CS_CFG_STR, PC(eal_args), "", CS_CFG_NO_BOUNDS,
	  "dpdk: extra EAL arguments, space separated" },
	{ "port.vdev_args", CS_CFG_STR, PC(vdev_args), "", CS_CFG_NO_BOUNDS,
	  "dpdk vdevs: extra devargs appended to the vdev string, e.g. "
	  "\"busy_budget=0\" for af_xdp" },
	{ "fault.seed", CS_CFG_U64, PC(fault.seed), "1", CS_CFG_NO_BOUNDS,
	  "fault shim: PRNG seed (a run replays for a given seed)" },
	{ "fault.drop", CS_CFG_DOUBLE, PC(fault.drop), "0", 0, 1,
	  "fault shim: probability a transmitted frame is dropped" },
	{ "fault.dup", CS_CFG_DOUBLE, PC(fault.dup), "0", 0, 1,
	  "fault shim: probability a frame is sent twice" },
	{ "fault.reorder", CS_CFG_DOUBLE, PC(fault.reorder), "0", 0, 1,
	  "fault shim: probability a frame is held back behind later ones" },
	{ "fault.delay", CS_CFG_DOUBLE, PC(fault.delay), "0", 0, 1,
	  "fault shim: probability a frame is delayed by fault.delay_ns" },
	{ "fault.corrupt", CS_CFG_DOUBLE, PC(fault.corrupt), "0", 0, 1,
	  "fault shim: probability one bit past the outer headers flips" },
	{ "fault.delay_ns", CS_CFG_NS, PC(fault.delay_ns), "200us", 0, 1e10,
	  "fault shim: how long a delayed frame is held (also the longest "
	  "a reordered frame waits)" },
	{ "fault.reorder_depth", CS_CFG_U32, PC(fault.reorder_depth), "4", 1,
	  256, "fault shim: frames sent ahead of a reordered one" },
};

const size_t cs_port_cfg_len = CS_ARRAY_SIZE(cs_port_cfg);

int cs_port_conf_check(const struct cs_port_conf *conf, char *err, size_t len)
{
	if (conf->afp_frames && conf->afp_frames < 32) {
		snprintf(err, len,
			 "port.afp_frames: %u is neither 0 (auto) nor at least "
			 "32",
			 conf->afp_frames);
		return -EINVAL;
	}
	return 0;
}

int cs_port_conf_defaults(struct cs_port_conf *conf)
{
	memset(conf, 0, sizeof(*conf));
	conf->numa = -1;
	snprintf(conf->name, sizeof(conf->name), "cs");
	snprintf(conf->run_dir, sizeof(conf->run_dir), "/tmp");
	return cs_cfg_defaults(cs_port_cfg, cs_port_cfg_len, conf);
}

static const struct cs_port_ops *find_ops(const char *type)
{
	if (!strcmp(type, "loop"))
		return &cs_port_loop_ops;
#if CS_HAVE_URING
	if (!strcmp(type, "udp"))
		return &cs_port_udp_ops;
#endif
#if CS_HAVE_DPDK
	if (!strcmp(type, "dpdk"))
		return &cs_port_dpdk_ops;
#endif
	return NULL;
}

int cs_port_open(const struct cs_port_conf *conf, struct cs_port **out)
{
	const struct cs_port_ops *ops = find_ops(conf->type);
	struct cs_port *p, *shim;
	int ret;

	*out = NULL;
	if (!ops) {
		CS_ERR("port type '%s' is not built in (config key port.type)",
		       conf->type);
		return -ENOTSUP;
	}
	ret = ops->open(conf, &p);
	if (ret) {
		CS_ERR("opening %s port failed: %s", conf->type,
		       strerror(-ret));
		return ret;
	}
	if (!cs_fault_active(&conf->fault)) {
		*out = p;
		return 0;
	}
	ret = cs_fault_wrap(p, &conf->fault, &shim);
	if (ret) {
		p->ops->close(p);
		return ret;
	}
	*out = shim;
	return 0;
}

void cs_port_close(struct cs_port *p)
{
	if (p)
		p->ops->close(p);
}

int cs_port_attach(struct cs_port *p, unsigned q, struct cs_pbuf *b, void *ext,
		   uint32_t len)
{
	if (p->ops->attach)
		return p->ops->attach(p, q, b, ext, len);
	if (b->len + len > b->cap)
		return -ENOSPC;
	memcpy(b->data + b->len, ext, len);
	b->len += len;
	return 0;
}

/* Registrations of every port in the process, one at a time: they come
 * from several threads (trainer segments from the IPC side, collstack
 * run's buffers from the control thread) and a back-end's table of
 * regions is not built for two writers. attach() takes no lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

int cs_port_reg_mem_locked(struct cs_port *p, void *addr, size_t len)
{
	return p->ops->reg_mem ? p->ops->reg_mem(p, addr, len) : 0;
}

int cs_port_unreg_mem_locked(struct cs_port *p, void *addr, size_t len)
{
	return p->ops->unreg_mem ? p->ops->unreg_mem(p, addr, len) : 0;
}

int cs_port_reg_mem(struct cs_port *p, void *addr, size_t len)
{
	int ret;

	pthread_mutex_lock(&reg_lock);
	ret = cs_port_reg_mem_locked(p, addr, len);
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

int cs_port_unreg_mem(struct cs_port *p, void *addr, size_t len)
{
	int ret;

	pthread_mutex_lock(&reg_lock);
	ret = cs_port_unreg_mem_locked(p, addr, len);
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

int cs_port_unreg_mem_wait(struct cs_port *p, void *addr, size_t len,
			   cs_ns_t timeout_ns)
{
	const struct timespec ts = { 0, 10000 };
	int ret;

	for (cs_ns_t waited = 0;; waited += 10000) {
		ret = cs_port_unreg_mem(p, addr, len);
		if (ret != -EBUSY || waited >= timeout_ns)
			return ret;
		nanosleep(&ts, NULL);
	}
}

int cs_port_wait(struct cs_port *p, unsigned q, cs_ns_t timeout_ns, int kick_fd)
{
	struct timespec ts;
	struct pollfd pfd = { .fd = kick_fd, .events = POLLIN };

	if (p->ops->wait)
		return p->ops->wait(p, q, timeout_ns, kick_fd);
	ts.tv_sec = (time_t)(timeout_ns / CS_NS_PER_S);
	ts.tv_nsec = (long)(timeout_ns % CS_NS_PER_S);
	if (kick_fd < 0)
		nanosleep(&ts, NULL);
	else if (ppoll(&pfd, 1, &ts, NULL) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

bool cs_port_wait_sees_fd(struct cs_port *p)
{
	if (p->ops->wait_sees_fd)
		return p->ops->wait_sees_fd(p);
	return !p->ops->wait;
}

bool cs_port_wakes_on_rx(struct cs_port *p, unsigned q)
{
	return p->ops->wakes_on_rx && p->ops->wakes_on_rx(p, q);
}

int cs_port_thread_init(struct cs_port *p)
{
	return p->ops->thread_init ? p->ops->thread_init(p) : 0;
}

int cs_port_gpu_nic(struct cs_port *p, struct cs_gpu_nic *out)
{
	memset(out, 0, sizeof(*out));
	return p->ops->gpu_nic ? p->ops->gpu_nic(p, out) : -ENOTSUP;
}

void cs_port_stats(struct cs_port *p, struct cs_port_stats *st)
{
	memset(st, 0, sizeof(*st));
	p->ops->stats(p, st);
}

int cs_port_parse_mac(const char *s, uint8_t mac[6])
{
	unsigned v[6];
	char tail;

	if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4],
		   &v[5], &tail) != 6)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		if (v[i] > 0xff)
			return -EINVAL;
		mac[i] = (uint8_t)v[i];
	}
	return 0;
}

void cs_port_format_mac(const uint8_t mac[6], char *buf, size_t len)
{
	snprintf(buf, len, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1],
		 mac[2], mac[3], mac[4], mac[5]);
}

uint16_t cs_port_ip_csum(const void *iphdr)
{
	const uint8_t *b = iphdr;
	uint32_t sum = 0;

	for (int i = 0; i < CS_PORT_IP_LEN; i += 2)
		sum += (uint32_t)b[i] << 8 | b[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

void cs_port_frame_hdrs(uint8_t *f, uint32_t frame_len, const uint8_t smac[6],
			const uint8_t dmac[6], uint32_t ips, uint32_t ipd,
			uint16_t sport, uint16_t dport)
{
	uint8_t *ip = f + CS_PORT_ETH_LEN, *udp = f + CS_PORT_L4_OFF;
	uint32_t iplen = frame_len - CS_PORT_ETH_LEN;
	uint16_t csum;

	memcpy(f, dmac, 6);
	memcpy(f + 6, smac, 6);
	put16(f + 12, 0x0800);
	ip[0] = 0x45;
	ip[1] = 0;
	put16(ip + 2, (uint16_t)iplen);
	put16(ip + 4, 0);
	put16(ip + 6, 0x4000); /* DF */
	ip[8] = 64;
	ip[9] = 17; /* UDP */
	put16(ip + 10, 0);
	memcpy(ip + 12, &ips, 4);
	memcpy(ip + 16, &ipd, 4);
	csum = cs_port_ip_csum(ip);
	put16(ip + 10, csum);
	put16(udp, sport);
	put16(udp + 2, dport);
	put16(udp + 4, (uint16_t)(iplen - CS_PORT_IP_LEN));
	put16(udp + 6, 0);
}

int cs_port_frame_check(const struct cs_port *p, const uint8_t *f, uint32_t len)
{
	const uint8_t *ip = f + CS_PORT_ETH_LEN, *udp = f + CS_PORT_L4_OFF;
	uint32_t iplen;

	if (len < CS_PORT_HDRS_LEN)
		return -EMSGSIZE;
	if (get16(f + 12) != 0x0800 || ip[0] != 0x45 || ip[9] != 17)
		return -EPROTO;
	iplen = get16(ip + 2);
	if (iplen < CS_PORT_IP_LEN + CS_PORT_UDP_LEN ||
	    iplen > len - CS_PORT_ETH_LEN)
		return -EMSGSIZE;
	if (get16(ip + 6) & 0x3fff) /* fragments: never ours */
		return -EPROTO;
	if (cs_port_ip_csum(ip) != 0)
		return -EBADMSG;
	if (get16(udp + 4) != iplen - CS_PORT_IP_LEN)
		return -EMSGSIZE;
	if (get16(udp + 2) != p->udp_port)
		return -EPROTO;
	return CS_PORT_HDRS_LEN;
}
