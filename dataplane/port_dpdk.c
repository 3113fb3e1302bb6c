/* SPDX-License-Identifier: MIT */
/*
 * The dpdk port: any DPDK ethdev — a NIC by PCI address, or a vdev made
 * for a Linux interface (net_af_packet, net_af_xdp, net_tap) or a memif
 * link between two processes (net_memif).
 *
 * EAL is brought up once per process, on the first dpdk port, with a unique
 * --file-prefix (cs-<name>), no telemetry socket and, when no hugepages are
 * free (or port.no_huge), --no-huge with just enough memory for the pool.
 * Closing the last port runs rte_eal_cleanup() and removes the runtime
 * folder EAL made under /var/run/dpdk, so a stopped sidecar leaves nothing.
 *
 * Memory: one mbuf pool per port on the device's NUMA socket, sized from
 * the rings (port.pool_mbufs overrides); each mbuf's data room holds a whole
 * frame (mtu + 14), which af_packet needs for jumbo frames. Registered
 * trainer memory (rte_extmem_register) is sent without a copy: attach()
 * chains an mbuf whose buffer is the trainer's bytes (an external buffer
 * with a reference count that never reaches zero while registered).
 *
 * Device (GPU) memory: cs_port_gpu_nic() hands the registrar hooks that
 * register a device VA range as external memory and DMA-map it on the
 * port's device (gpu_map() below says what that does and does not do).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <linux/filter.h>
#include <linux/if_packet.h>

/* rte_dev_dma_map() is still marked experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API 1
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_version.h>

#define CS_LOG_MODULE "dpdk"
#include "internal/log.h"
#include "dataplane/port.h"
#include "gpu/gpu.h" /* struct cs_gpu_nic: plain C, no CUDA */

#define MAX_EAL_ARGS 32
#define MAX_EXT 16

/*
 * A registered region. reg_mem/unreg_mem run on a control thread while
 * the lcore's attach() looks regions up: @addr is published last (release)
 * and withdrawn first, so the lcore sees a region whole or not at all.
 */
struct ext_region {
	uint8_t *addr;
	size_t len;
	rte_iova_t iova; /* of @addr; the same offsets follow */
	struct rte_mbuf_ext_shared_info shinfo;
};

/*
 * A device range registered for the port's device: whole pages at @base,
 * external memory of EAL and DMA-mapped on the device. Ranges a
 * registration falls inside share it (@refs).
 */
struct gpu_reg {
	struct gpu_reg *next;
	uint8_t *base;
	size_t len;
	unsigned refs;
};

struct dpdk_port {
	struct cs_port port;
	uint16_t port_id;
	bool started;
	unsigned nq;
	struct rte_mempool *pool;
	bool multi_seg; /* TX may chain segments (zero-copy attach) */
	uint64_t tx_zc; /* attach() by reference; queue 0's lcore only */
	struct ext_region ext[MAX_EXT];
	unsigned next_ext;
	uint64_t rx_multiseg; /* chained frames we could not take */
	int rx_fd[CS_PORT_MAX_QUEUES]; /* af_packet: wait on these, or -1 */
	bool rx_filtered; /* af_packet: every queue's socket is filtered */
	bool afp; /* rx_fd are af_packet sockets (ring_drops) */
	bool xdp; /* an af_xdp vdev: its interface counts the drops */
	/* af_packet: frames the kernel dropped because a queue's ring was
	 * full, summed from PACKET_STATISTICS (which resets on each read;
	 * DPDK 22.11's PMD does not report them as imissed) */
	uint64_t ring_drops;
	/* device memory (cs_port_gpu_nic): registered from the control
	 * side, never looked at by the lcores */
	pthread_mutex_t gpu_lock;
	struct gpu_reg *gpu_regs;
	bool gpu_vdev; /* the device sits on the vdev bus */
	char gpu_name[CS_CFG_STR_MAX + 48]; /* "dpdk:net_af_packet_cs0" */
	char gpu_bdf[32]; /* PCI devices only */
};

bool cs__dpdk_gpu_vdev_ok;

static void find_rx_fds(struct dpdk_port *dp, const char *dev, unsigned nq);
static void find_xsk_fd(struct dpdk_port *dp, unsigned nq);

static int eal_users;
static char eal_runtime_dir[512];

static inline struct dpdk_port *dp_of(struct cs_port *p)
{
	return cs_container_of(p, struct dpdk_port, port);
}

static unsigned dpdk_rx_burst(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			      unsigned n)
{
	struct dpdk_port *dp = dp_of(p);
	struct rte_mbuf *m[CS_PORT_BURST];
	unsigned got, out = 0;

	if (n > CS_PORT_BURST)
		n = CS_PORT_BURST;
	got = rte_eth_rx_burst(dp->port_id, (uint16_t)q, m, (uint16_t)n);
	for (unsigned i = 0; i < got; i++) {
		if (unlikely(m[i]->nb_segs != 1)) {
			dp->rx_multiseg++;
			rte_pktmbuf_free(m[i]);
			continue;
		}
		v[out].data = rte_pktmbuf_mtod(m[i], uint8_t *);
		v[out].len = m[i]->data_len;
		v[out].cap = m[i]->data_len + rte_pktmbuf_tailroom(m[i]);
		v[out].handle = m[i];
		out++;
	}
	return out;
}

static unsigned dpdk_tx_alloc(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			      unsigned n)
{
	struct dpdk_port *dp = dp_of(p);
	struct rte_mbuf *m[CS_PORT_BURST];
	unsigned got = 0;

	(void)q;
	if (n > CS_PORT_BURST)
		n = CS_PORT_BURST;
	if (rte_pktmbuf_alloc_bulk(dp->pool, m, n) == 0) {
		got = n;
	} else {
		/* Pool nearly empty: take what is left. */
		while (got < n && (m[got] = rte_pktmbuf_alloc(dp->pool)))
			got++;
	}
	for (unsigned i = 0; i < got; i++) {
		v[i].data = rte_pktmbuf_mtod(m[i], uint8_t *);
		v[i].len = 0;
		v[i].cap = rte_pktmbuf_tailroom(m[i]);
		if (v[i].cap > p->frame_max)
			v[i].cap = p->frame_max;
		v[i].handle = m[i];
	}
	return got;
}

static unsigned dpdk_tx_burst(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			      unsigned n)
{
	struct dpdk_port *dp = dp_of(p);
	struct rte_mbuf *m[CS_PORT_BURST];

	if (n > CS_PORT_BURST)
		n = CS_PORT_BURST;
	for (unsigned i = 0; i < n; i++) {
		struct rte_mbuf *h = v[i].handle;

		h->data_len = (uint16_t)v[i].len;
		h->pkt_len = v[i].len + (h->next ? h->next->data_len : 0);
		m[i] = h;
	}
	return rte_eth_tx_burst(dp->port_id, (uint16_t)q, m, (uint16_t)n);
}

static void dpdk_release(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			 unsigned n)
{
	struct rte_mbuf *m[CS_PORT_BURST];

	(void)p;
	(void)q;
	while (n) {
		unsigned k = n > CS_PORT_BURST ? CS_PORT_BURST : n;

		for (unsigned i = 0; i < k; i++)
			m[i] = v[i].handle;
		rte_pktmbuf_free_bulk(m, k);
		v += k;
		n -= k;
	}
}

static void ext_free_cb(void *addr, void *opaque)
{
	/* The trainer owns the memory; nothing to free. The reference
	 * count starts at 1 and only reaches 0 at unregistration. */
	(void)addr;
	(void)opaque;
}

static struct ext_region *ext_find(struct dpdk_port *dp, const void *addr,
				   size_t len)
{
	for (unsigned i = 0; i < MAX_EXT; i++) {
		struct ext_region *r = &dp->ext[i];
		uint8_t *a = __atomic_load_n(&r->addr, __ATOMIC_ACQUIRE);

		if (a && (const uint8_t *)addr >= a &&
		    (const uint8_t *)addr + len <= a + r->len)
			return r;
	}
	return NULL;
}

static int dpdk_attach(struct cs_port *p, unsigned q, struct cs_pbuf *b,
		       void *ext, uint32_t len)
{
	struct dpdk_port *dp = dp_of(p);
	struct rte_mbuf *h = b->handle, *seg;
	struct ext_region *r;
	rte_iova_t iova;

	(void)q;
	r = dp->port.conf.zero_copy && dp->multi_seg && len <= UINT16_MAX
		    ? ext_find(dp, ext, len)
		    : NULL;
	if (!r || h->next) {
		if (b->len + len > b->cap)
			return -ENOSPC;
		memcpy(b->data + b->len, ext, len);
		b->len += len;
		return 0;
	}
	seg = rte_pktmbuf_alloc(dp->pool);
	if (unlikely(!seg))
		return -ENOBUFS;
	iova = r->iova + (rte_iova_t)((uint8_t *)ext - r->addr);
	rte_mbuf_ext_refcnt_update(&r->shinfo, 1);
	rte_pktmbuf_attach_extbuf(seg, ext, iova, (uint16_t)len, &r->shinfo);
	seg->data_off = 0;
	seg->data_len = (uint16_t)len;
	seg->pkt_len = len;
	h->next = seg;
	h->nb_segs = 2;
	__atomic_store_n(&dp->tx_zc, dp->tx_zc + 1, __ATOMIC_RELAXED);
	return 0;
}

static int dpdk_reg_mem(struct cs_port *p, void *addr, size_t len)
{
	struct dpdk_port *dp = dp_of(p);
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct rte_eth_dev_info info;
	struct ext_region *r = NULL;
	int ret;

	if (((uintptr_t)addr | len) & (pg - 1))
		return -EINVAL; /* rte_extmem_register wants whole pages */
	if (!dp->port.conf.zero_copy || !dp->multi_seg)
		return -ENOTSUP; /* attach() would copy anyway */
	for (unsigned i = 0; i < MAX_EXT; i++)
		if (!dp->ext[i].addr) {
			r = &dp->ext[i];
			break;
		}
	if (!r)
		return -ENOSPC;
	ret = rte_extmem_register(addr, len, NULL, 0, pg);
	if (ret && rte_errno != EEXIST)
		return -rte_errno;
	/* PCI devices need the memory in their IOMMU domain; vdevs copy
	 * or use the kernel and need nothing. */
	if (rte_eth_dev_info_get(dp->port_id, &info) == 0 && info.device &&
	    rte_dev_dma_map(info.device, addr, (uint64_t)(uintptr_t)addr,
			    len) &&
	    rte_errno != ENOTSUP)
		CS_WARN("dma map of %zu bytes failed: %s (copy mode for "
			"this device)",
			len, rte_strerror(rte_errno));
	r->len = len;
	/* registered without page addresses: IOVA as VA (vdevs do not
	 * care; a PCI device got the mapping above) */
	r->iova = rte_mem_virt2iova(addr);
	if (r->iova == RTE_BAD_IOVA)
		r->iova = (rte_iova_t)(uintptr_t)addr;
	r->shinfo.free_cb = ext_free_cb;
	r->shinfo.fcb_opaque = NULL;
	rte_mbuf_ext_refcnt_set(&r->shinfo, 1);
	__atomic_store_n(&r->addr, (uint8_t *)addr, __ATOMIC_RELEASE);
	return 0;
}

static int dpdk_unreg_mem(struct cs_port *p, void *addr, size_t len)
{
	struct dpdk_port *dp = dp_of(p);
	struct rte_eth_dev_info info;

	for (unsigned i = 0; i < MAX_EXT; i++) {
		struct ext_region *r = &dp->ext[i];

		if (r->addr != addr || r->len != len)
			continue;
		/* withdrawn first; frames still in a TX ring point into
		 * it: then it stays */
		__atomic_store_n(&r->addr, NULL, __ATOMIC_SEQ_CST);
		if (rte_mbuf_ext_refcnt_read(&r->shinfo) != 1) {
			__atomic_store_n(&r->addr, (uint8_t *)addr,
					 __ATOMIC_RELEASE);
			return -EBUSY;
		}
		if (rte_eth_dev_info_get(dp->port_id, &info) == 0 &&
		    info.device)
			rte_dev_dma_unmap(info.device, addr,
					  (uint64_t)(uintptr_t)addr, len);
		rte_extmem_unregister(addr, len);
		return 0;
	}
	return -ENOENT;
}

/* The page size of the mapping @va lies in (KernelPageSize in
 * /proc/self/smaps), or the system's when it is not listed there. */
static size_t va_page_size(const void *va)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	unsigned long lo, hi, kb;
	char line[512];
	bool in = false;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return pg;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = (uintptr_t)va >= lo && (uintptr_t)va < hi;
			continue;
		}
		if (in && sscanf(line, "KernelPageSize: %lu kB", &kb) == 1) {
			if (kb && !(kb & (kb - 1)))
				pg = (size_t)kb << 10;
			break;
		}
	}
	fclose(f);
	return pg;
}

/* Undo one device range (gpu_lock held, @r unlinked). */
static void gpu_undo(struct dpdk_port *dp, struct gpu_reg *r)
{
	struct rte_eth_dev_info info;

	if (rte_eth_dev_info_get(dp->port_id, &info) == 0 && info.device &&
	    rte_dev_dma_unmap(info.device, r->base,
			      (uint64_t)(uintptr_t)r->base, r->len))
		CS_WARN("%s: DMA unmap of %p+%zu: %s", dp->gpu_name, r->base,
			r->len, rte_strerror(rte_errno));
	if (rte_extmem_unregister(r->base, r->len))
		CS_WARN("%s: extmem unregister of %p+%zu: %s", dp->gpu_name,
			r->base, r->len, rte_strerror(rte_errno));
	free(r);
}

/*
 * gpu_map - register the device range [@va, @va + @len) for the port's
 * device: rte_extmem_register of the whole pages around it (the page size
 * of its mapping), then rte_dev_dma_map on the port's rte_device with the
 * VA as IOVA.
 *
 * What this is and is not. DPDK 22.11 has no call that hands a dma-buf
 * to a PMD, and EAL cannot learn a dma-buf's bus addresses in user space,
 * so the range goes by its VA with no IOVA table: the PMD's own dma_map
 * decides whether the device can reach it (mlx5 registers the VA as a
 * verbs MR, which needs the peer-memory module for GPU memory; vfio-pci
 * has to pin the pages, which device memory does not have). On the vdev
 * bus a PMD without a dma_map is answered "mapped" and nothing happens:
 * af_packet, tap, memif, null and ring move frames with the CPU, which
 * cannot read device memory, so a vdev is refused here by name, before
 * anything is registered (cs__dpdk_gpu_vdev_ok lets tests run the rest
 * on one). Nothing here has run against a NIC or a GPU (docs/gpu.md).
 *
 * Returns: 0 with *@mr set, or a negative errno with the reason in @why.
 */
static int gpu_map(struct dpdk_port *dp, void *va, size_t len, void **mr,
		   char *why, size_t whylen)
{
	size_t pg = va_page_size(va);
	uintptr_t lo = (uintptr_t)va & ~(uintptr_t)(pg - 1);
	uintptr_t hi = ((uintptr_t)va + len + pg - 1) & ~(uintptr_t)(pg - 1);
	struct rte_eth_dev_info info;
	struct rte_device *dev;
	struct gpu_reg *r;
	int err = 0;

	if (!va || !len || hi <= lo) {
		snprintf(why, whylen, "empty or wrapping range");
		return -EINVAL;
	}
	if (rte_eth_dev_info_get(dp->port_id, &info) || !info.device) {
		snprintf(why, whylen, "no rte_device behind port %u",
			 dp->port_id);
		return -ENODEV;
	}
	dev = info.device;
	if (dp->gpu_vdev && !cs__dpdk_gpu_vdev_ok) {
		snprintf(why, whylen,
			 "%s is a virtual device (driver %s): its PMD moves "
			 "frames with the CPU and maps nothing for DMA",
			 rte_dev_name(dev), info.driver_name);
		return -EOPNOTSUPP;
	}
	pthread_mutex_lock(&dp->gpu_lock);
	for (r = dp->gpu_regs; r; r = r->next) {
		uintptr_t b = (uintptr_t)r->base;

		if (lo >= b && hi <= b + r->len) {
			r->refs++; /* inside pages already registered */
			*mr = r;
			goto out_unlock;
		}
		if (lo < b + r->len && hi > b) {
			snprintf(why, whylen,
				 "pages overlap the registered device range "
				 "%p+%zu",
				 r->base, r->len);
			err = -EBUSY;
			goto out_unlock;
		}
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		err = -ENOMEM;
		goto out_unlock;
	}
	r->base = (uint8_t *)lo;
	r->len = hi - lo;
	r->refs = 1;
	if (rte_extmem_register(r->base, r->len, NULL, 0, pg)) {
		err = rte_errno ? -rte_errno : -EINVAL;
		snprintf(why, whylen,
			 "rte_extmem_register of %zu bytes in %zu KiB pages: "
			 "%s",
			 r->len, pg >> 10, rte_strerror(-err));
		goto out_free;
	}
	if (!dp->gpu_vdev && rte_eal_iova_mode() == RTE_IOVA_PA) {
		err = -ENOTSUP;
		snprintf(why, whylen,
			 "EAL runs with physical IOVAs, and device memory has "
			 "none it can find (IOVA as VA needed)");
		goto out_unreg;
	}
	if (rte_dev_dma_map(dev, r->base, (uint64_t)lo, r->len)) {
		err = rte_errno ? -rte_errno : -EIO;
		snprintf(why, whylen, "%s refused the DMA map: %s",
			 rte_dev_name(dev), rte_strerror(-err));
		goto out_unreg;
	}
	r->next = dp->gpu_regs;
	dp->gpu_regs = r;
	*mr = r;
	CS_INFO("%s: device memory %p+%zu registered (extmem %p+%zu in "
		"%zu KiB pages, DMA-mapped with IOVA = VA)",
		dp->gpu_name, va, len, r->base, r->len, pg >> 10);
	goto out_unlock;
out_unreg:
	rte_extmem_unregister(r->base, r->len);
out_free:
	free(r);
out_unlock:
	pthread_mutex_unlock(&dp->gpu_lock);
	return err;
}

static int dpdk_gpu_reg_dmabuf(void *ctx, int fd, uint64_t off, size_t len,
			       void *va, void **mr, char *why, size_t whylen)
{
	/* by its VA: see gpu_map() (the registrar keeps @fd open while the
	 * range is registered) */
	(void)fd;
	(void)off;
	return gpu_map(ctx, va, len, mr, why, whylen);
}

static int dpdk_gpu_reg_peer(void *ctx, void *va, size_t len, void **mr,
			     char *why, size_t whylen)
{
	return gpu_map(ctx, va, len, mr, why, whylen);
}

static void dpdk_gpu_dereg(void *ctx, void *mr)
{
	struct dpdk_port *dp = ctx;
	struct gpu_reg *r = mr, **pp;

	pthread_mutex_lock(&dp->gpu_lock);
	if (--r->refs == 0) {
		for (pp = &dp->gpu_regs; *pp && *pp != r; pp = &(*pp)->next)
			;
		if (*pp)
			*pp = r->next;
		gpu_undo(dp, r);
	}
	pthread_mutex_unlock(&dp->gpu_lock);
}

static int dpdk_gpu_nic(struct cs_port *p, struct cs_gpu_nic *out)
{
	struct dpdk_port *dp = dp_of(p);

	out->name = dp->gpu_name;
	out->bdf = dp->gpu_bdf[0] ? dp->gpu_bdf : NULL;
	out->ctx = dp;
	out->reg_dmabuf = dpdk_gpu_reg_dmabuf;
	out->reg_peer = dpdk_gpu_reg_peer;
	out->dereg = dpdk_gpu_dereg;
	return 0;
}

static int dpdk_thread_init(struct cs_port *p)
{
	(void)p;
	if (rte_lcore_id() != LCORE_ID_ANY)
		return 0;
	/* An EAL lcore id gives this thread a mempool cache. */
	if (rte_thread_register())
		return -rte_errno;
	return 0;
}

/* A counter of the port's interface (sysfs statistics/@name), 0 if none. */
static unsigned long long iface_counter(const struct dpdk_port *dp,
					const char *name)
{
	char path[CS_CFG_STR_MAX + 48];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s",
		 dp->port.conf.iface, name);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

static void dpdk_stats(struct cs_port *p, struct cs_port_stats *st)
{
	struct dpdk_port *dp = dp_of(p);
	struct rte_eth_stats es;

	if (rte_eth_stats_get(dp->port_id, &es))
		return;
	st->rx_pkts = es.ipackets;
	st->rx_bytes = es.ibytes;
	st->tx_pkts = es.opackets;
	st->tx_bytes = es.obytes;
	for (unsigned q = 0; dp->afp && q < CS_PORT_MAX_QUEUES; q++) {
		struct tpacket_stats_v3 ts; /* v2 fills its first part */
		socklen_t l = sizeof(ts);

		if (dp->rx_fd[q] >= 0 &&
		    !getsockopt(dp->rx_fd[q], SOL_PACKET, PACKET_STATISTICS,
				&ts, &l))
			__atomic_add_fetch(&dp->ring_drops, ts.tp_drops,
					   __ATOMIC_RELAXED);
	}
	/* af_xdp: a frame the XDP program could not hand to a full socket
	 * ring is dropped, and counted, by the interface; the PMD's imissed
	 * (the socket's rx_dropped) counts only some of those, and none of
	 * the full-ring ones */
	if (dp->xdp) {
		unsigned long long link = iface_counter(dp, "rx_dropped");

		if (link > es.imissed)
			es.imissed = link;
	}
	st->rx_dropped = es.imissed + es.ierrors + dp->rx_multiseg +
			 __atomic_load_n(&dp->ring_drops, __ATOMIC_RELAXED);
	st->rx_nombuf = es.rx_nombuf;
	st->tx_errors = es.oerrors;
	st->tx_zero_copy = __atomic_load_n(&dp->tx_zc, __ATOMIC_RELAXED);
	if (dp->rx_filtered) {
		/* what the interface got and the rings did not: the frames
		 * the socket filter turned away */
		unsigned long long rx = iface_counter(dp, "rx_packets");

		if (rx > es.ipackets + st->rx_dropped)
			st->rx_filtered = rx - es.ipackets - st->rx_dropped;
	}
}

/* rm -r of EAL's runtime folder (a few sockets and fbarray files). */
static void remove_runtime_dir(const char *dir)
{
	char path[1024];
	struct dirent *de;
	DIR *d;

	if (!dir[0])
		return;
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	if (rmdir(dir) == 0)
		CS_INFO("removed EAL runtime folder %s", dir);
}

static void dpdk_close(struct cs_port *p)
{
	struct dpdk_port *dp = dp_of(p);

	if (dp->started)
		rte_eth_dev_stop(dp->port_id);
	while (dp->gpu_regs) {
		struct gpu_reg *r = dp->gpu_regs;

		CS_WARN("%s: device memory %p+%zu still registered at close "
			"(%u users): unregistered now",
			dp->gpu_name, r->base, r->len, r->refs);
		dp->gpu_regs = r->next;
		gpu_undo(dp, r);
	}
	rte_eth_dev_close(dp->port_id);
	for (unsigned i = 0; i < MAX_EXT; i++)
		if (dp->ext[i].addr)
			rte_extmem_unregister(dp->ext[i].addr, dp->ext[i].len);
	rte_mempool_free(dp->pool);
	pthread_mutex_destroy(&dp->gpu_lock);
	free(dp);
	if (--eal_users == 0) {
		rte_eal_cleanup();
		remove_runtime_dir(eal_runtime_dir);
	}
}

/* Free 2 MiB-or-larger hugepages on a mounted hugetlbfs? */
static bool hugepages_free(void)
{
	char line[256];
	long freep = 0;
	bool mounted = false;
	FILE *f;

	f = fopen("/proc/meminfo", "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "HugePages_Free: %ld", &freep) == 1)
			break;
	fclose(f);
	f = fopen("/proc/mounts", "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, " hugetlbfs "))
			mounted = true;
	fclose(f);
	return freep > 0 && mounted;
}

/* "0@(0-3)": EAL's main lcore floats over the CPUs we may use, so EAL
 * does not pin the control thread; the polling lcores pin themselves. */
static void cpu_list(char *buf, size_t len)
{
	cpu_set_t set;
	size_t off = 0;

	buf[0] = 0;
	if (sched_getaffinity(0, sizeof(set), &set))
		CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE && off + 8 < len; c++)
		if (CPU_ISSET(c, &set))
			off += (size_t)snprintf(buf + off, len - off, "%s%d",
						off ? "," : "", c);
	if (!off)
		snprintf(buf, len, "0");
}

static uint32_t round_up(uint32_t v, uint32_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * af_packet ring frames: a TPACKET_V2 header (the frame starts 64 bytes
 * in); the PMD wants an mbuf data room of framesz - 32. Blocks are whole
 * pages, and the PMD walks frames at a framesz stride, so a block must hold
 * a whole number of frames with no gap: framesz a multiple of 2 KiB and
 * blocksz the least common multiple of framesz and the page.
 */
static uint32_t afp_framesz(uint32_t frame_max)
{
	return round_up(frame_max + 80, 2048);
}

static uint32_t afp_blocksz(uint32_t fsz)
{
	return fsz % 4096 ? 2 * fsz : fsz;
}

/*
 * Frames per af_packet ring: port.afp_frames, or as many as AFP_RING_BYTES
 * holds. The kernel copies every frame into a ring and the PMD copies it
 * out, so the rings are cache footprint: at 512 frames of 10 KiB, four
 * sidecars on one machine held 42 MB of rings, and a 64 MiB allreduce ran
 * about 12 % slower than with 256 (BENCHMARKS.md). Counted in bytes, not
 * frames, because the senders keep bytes in flight: at MTU 1500 a
 * 256-frame ring overflowed (about 90,000 retransmissions per run).
 */
#define AFP_RING_BYTES (5u << 19) /* 2.5 MiB */

static uint32_t afp_frames(const struct cs_port_conf *c, uint32_t fsz)
{
	if (c->afp_frames)
		return c->afp_frames;
	return AFP_RING_BYTES / fsz > 32 ? AFP_RING_BYTES / fsz : 32;
}

/*
 * Each mbuf holds a whole frame (no chained receive). af_packet needs room
 * for its ring frame; af_xdp uses the pool as its umem, whose chunks (the
 * whole mbuf object) may not exceed a page — hence its MTU limit.
 */
static uint32_t mbuf_room(const char *dev, uint32_t frame_max)
{
	if (!strcmp(dev, "af_packet"))
		return RTE_PKTMBUF_HEADROOM + afp_framesz(frame_max) - 32;
	/* The chunk is the whole object: a 64-byte mempool header, the
	 * 128-byte mbuf and the room fill exactly one page. Received
	 * frames then have 4096 - 320 (mbuf and headroom) - 256 (XDP
	 * headroom) = 3520 bytes: MTU 3506. */
	if (!strcmp(dev, "af_xdp"))
		return 4096 - 64 - (uint32_t)sizeof(struct rte_mbuf);
	return RTE_PKTMBUF_HEADROOM +
	       (frame_max <= 2048 ? 2048 : round_up(frame_max, 1024));
}

/*
 * An mbuf pool. For af_xdp the objects must tile pages exactly (they are
 * the umem chunks), so it is built without the memory-channel spreading
 * that rte_pktmbuf_pool_create() applies (which pads a 4096-byte object to
 * 4160).
 */
static struct rte_mempool *pool_create(const char *name, unsigned n,
				       unsigned cache, uint16_t room,
				       int socket, bool exact)
{
	struct rte_pktmbuf_pool_private priv = {
		.mbuf_data_room_size = room,
		.mbuf_priv_size = 0,
	};
	struct rte_mempool *mp;

	if (!exact)
		return rte_pktmbuf_pool_create(name, n, cache, 0, room, socket);
	mp = rte_mempool_create_empty(name, n, sizeof(struct rte_mbuf) + room,
				      cache, sizeof(priv), socket,
				      RTE_MEMPOOL_F_NO_SPREAD);
	if (!mp)
		return NULL;
	if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL))
		goto out_free;
	rte_pktmbuf_pool_init(mp, &priv);
	if (rte_mempool_populate_default(mp) < 0)
		goto out_free;
	rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
	return mp;
out_free:
	rte_mempool_free(mp);
	return NULL;
}

/* Build the vdev string for conf->dev; returns false for a PCI device. */
static int vdev_spec(const struct cs_port_conf *c, uint32_t frame_max,
		     char *name, size_t nlen, char *spec, size_t slen)
{
	const char *d = c->dev;
	unsigned q = c->queues ? c->queues : 1;

	if (!strcmp(d, "af_packet")) {
		uint32_t fsz = afp_framesz(frame_max);
		uint32_t bsz = afp_blocksz(fsz);

		snprintf(name, nlen, "net_af_packet_%s", c->name);
		snprintf(spec, slen,
			 "%s,iface=%s,qpairs=%u,framesz=%u,blocksz=%u,"
			 "framecnt=%u,qdisc_bypass=1",
			 name, c->iface, q, fsz, bsz,
			 round_up(afp_frames(c, fsz), bsz / fsz));
	} else if (!strcmp(d, "af_xdp")) {
		snprintf(name, nlen, "net_af_xdp_%s", c->name);
		snprintf(spec, slen, "%s,iface=%s,start_queue=0,queue_count=%u",
			 name, c->iface, q);
	} else if (!strcmp(d, "memif")) {
		char sock[CS_CFG_STR_MAX + 16];
		uint32_t bsz =
			frame_max <= 2048 ? 2048 : round_up(frame_max, 1024);

		if (c->memif_socket[0])
			snprintf(sock, sizeof(sock), "%s", c->memif_socket);
		else
			snprintf(sock, sizeof(sock), "%s/memif.sock",
				 c->run_dir);
		snprintf(name, nlen, "net_memif_%s", c->name);
		snprintf(spec, slen,
			 "%s,role=%s,id=0,socket=%s,socket-abstract=no,"
			 "bsize=%u%s%s",
			 name,
			 strcmp(c->memif_role, "server") ? "client" : "server",
			 sock, bsz, c->mac[0] ? ",mac=" : "", c->mac);
	} else if (!strcmp(d, "null")) {
		/* no link at all: sends vanish, receive makes up frames
		 * (tests that need a port and no interface) */
		snprintf(name, nlen, "net_null_%s", c->name);
		snprintf(spec, slen, "%s", name);
	} else if (!strcmp(d, "tap")) {
		snprintf(name, nlen, "net_tap_%s", c->name);
		snprintf(spec, slen, "%s,iface=%s", name,
			 c->iface[0] ? c->iface : "cstap0");
	} else {
		snprintf(name, nlen, "%s", d); /* PCI address */
		spec[0] = 0;
		return 0;
	}
	if (c->vdev_args[0]) {
		size_t l = strlen(spec);

		snprintf(spec + l, slen - l, ",%s", c->vdev_args);
	}
	return 1;
}

static int eal_init(const struct cs_port_conf *c, const char *vdev, bool pci,
		    size_t pool_bytes)
{
	static char argbuf[MAX_EAL_ARGS][256];
	char *argv[MAX_EAL_ARGS + 1];
	char extra[CS_CFG_STR_MAX], *tok, *save = NULL, cpus[200];
	int argc = 0, ret;
	bool no_huge = c->no_huge || !hugepages_free();

#define ARG(...)                                                               \
	snprintf(argbuf[argc], sizeof(argbuf[0]), __VA_ARGS__),                \
		argv[argc] = argbuf[argc], argc++
	ARG("collstackd");
	ARG("--file-prefix=cs-%s", c->name);
	ARG("--no-telemetry");
	cpu_list(cpus, sizeof(cpus));
	ARG("--lcores=0@(%s)", cpus);
	ARG("--log-level=*:notice");
	if (no_huge) {
		ARG("--no-huge");
		/* The pool, the vdev's rings and EAL's own heap. */
		ARG("-m");
		ARG("%zu", pool_bytes / (1 << 20) + 64);
	} else {
		ARG("--in-memory");
	}
	if (pci) {
		ARG("-a");
		ARG("%s", c->dev);
	} else {
		ARG("--no-pci");
		ARG("--vdev=%s", vdev);
	}
	snprintf(extra, sizeof(extra), "%s", c->eal_args);
	for (tok = strtok_r(extra, " ", &save); tok && argc < MAX_EAL_ARGS;
	     tok = strtok_r(NULL, " ", &save))
		ARG("%s", tok);
#undef ARG
	argv[argc] = NULL;
	{
		char line[1024];
		size_t off = 0;

		for (int i = 0; i < argc && off < sizeof(line) - 1; i++)
			off += (size_t)snprintf(line + off, sizeof(line) - off,
						"%s ", argv[i]);
		CS_INFO("EAL %s: %s",
			no_huge ? "without hugepages"
				: "on hugepages (in memory)",
			line);
	}
	ret = rte_eal_init(argc, argv);
	if (ret < 0)
		return -rte_errno ? -rte_errno : -EINVAL;
	snprintf(eal_runtime_dir, sizeof(eal_runtime_dir), "%s",
		 rte_eal_get_runtime_dir());
	return 0;
}

static int dpdk_open(const struct cs_port_conf *c, struct cs_port **out)
{
	struct rte_eth_conf ec = { 0 };
	struct rte_eth_dev_info info;
	struct rte_ether_addr ea;
	struct dpdk_port *dp;
	char name[CS_CFG_STR_MAX + 32], spec[1024], pname[64];
	uint32_t frame_max = c->mtu + CS_PORT_ETH_LEN;
	uint32_t room = mbuf_room(c->dev, frame_max);
	unsigned nq = c->queues ? c->queues : 1, nmbufs;
	uint16_t nrx = (uint16_t)c->rx_desc, ntx = (uint16_t)c->tx_desc;
	int is_vdev, socket, ret;

	*out = NULL;
	if (room > UINT16_MAX)
		return -EINVAL;
	is_vdev =
		vdev_spec(c, frame_max, name, sizeof(name), spec, sizeof(spec));
	if (is_vdev && strcmp(c->dev, "memif") && strcmp(c->dev, "tap") &&
	    strcmp(c->dev, "null") && !c->iface[0]) {
		CS_ERR("port.dev %s needs port.iface", c->dev);
		return -EINVAL;
	}
	/* Rings, a burst per queue in flight, the caches, the shim's hold,
	 * and a margin: a small pool, since sidecars share hugepages. */
	nmbufs = c->pool_mbufs ? c->pool_mbufs
			       : nq * (c->rx_desc + c->tx_desc +
				       4 * CS_PORT_BURST + 1024) +
					 (nq + 1) * c->pool_cache + 512;
	if (eal_users == 0) {
		ret = eal_init(c, spec, !is_vdev,
			       (size_t)nmbufs * (room + 256));
		if (ret) {
			CS_ERR("EAL init failed: %s", rte_strerror(-ret));
			return ret;
		}
	}
	eal_users++;
	dp = calloc(1, sizeof(*dp));
	if (!dp) {
		ret = -ENOMEM;
		goto out_eal;
	}
	dp->port.ops = &cs_port_dpdk_ops;
	dp->port.conf = *c;
	dp->port.conf.queues = nq;
	dp->port.frame_max = frame_max;
	dp->port.udp_port = (uint16_t)c->udp_port;
	dp->nq = nq;
	pthread_mutex_init(&dp->gpu_lock, NULL);
	if (inet_pton(AF_INET, c->ip, &dp->port.ip) != 1) {
		CS_ERR("bad port.ip '%s'", c->ip);
		ret = -EINVAL;
		goto out_free;
	}
	if (rte_eth_dev_get_port_by_name(name, &dp->port_id)) {
		CS_ERR("no ethdev named %s (vdev '%s')", name, spec);
		ret = -ENODEV;
		goto out_free;
	}
	socket = rte_eth_dev_socket_id(dp->port_id);
	dp->port.numa = socket;
	if (socket < 0)
		socket = (int)rte_socket_id();
	snprintf(pname, sizeof(pname), "cs_pool_%u", dp->port_id);
	dp->pool = pool_create(pname, nmbufs, c->pool_cache, (uint16_t)room,
			       socket, !strcmp(c->dev, "af_xdp"));
	if (!dp->pool) {
		CS_ERR("mbuf pool of %u x %u bytes on socket %d: %s", nmbufs,
		       room, socket, rte_strerror(rte_errno));
		ret = -rte_errno ? -rte_errno : -ENOMEM;
		goto out_close;
	}
	ret = rte_eth_dev_info_get(dp->port_id, &info);
	if (ret)
		goto out_pool;
	if (info.device) {
		const char *bus = rte_bus_name(rte_dev_bus(info.device));

		dp->gpu_vdev = bus && !strcmp(bus, "vdev");
		snprintf(dp->gpu_name, sizeof(dp->gpu_name), "dpdk:%s",
			 rte_dev_name(info.device));
		if (bus && !strcmp(bus, "pci"))
			snprintf(dp->gpu_bdf, sizeof(dp->gpu_bdf), "%s",
				 rte_dev_name(info.device));
	} else {
		snprintf(dp->gpu_name, sizeof(dp->gpu_name), "dpdk:%s", name);
	}
	if (nq > info.max_rx_queues || nq > info.max_tx_queues) {
		CS_ERR("%s has %u/%u queues, port.queues is %u", name,
		       info.max_rx_queues, info.max_tx_queues, nq);
		ret = -EINVAL;
		goto out_pool;
	}
	/*
	 * net_af_packet reports a 1518-byte max frame whatever its ring
	 * frames hold, but it moves any frame that fits framesz and the
	 * mbuf's data room (both sized for the MTU above); the interface
	 * MTU is the kernel's. So for it the ethdev MTU stays at its
	 * default instead of failing the configure.
	 */
	if (!strcmp(c->dev, "af_packet") &&
	    c->mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN > info.max_rx_pktlen)
		CS_INFO("%s: frames of %u bytes ride in %u-byte ring frames "
			"(the PMD's reported %u-byte limit does not apply)",
			name, frame_max, afp_framesz(frame_max),
			info.max_rx_pktlen);
	else
		ec.rxmode.mtu = c->mtu;
	if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
		ec.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
		dp->multi_seg = true;
	}
	if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE &&
	    !dp->multi_seg)
		ec.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
	if (nq > 1 && info.flow_type_rss_offloads) {
		ec.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		ec.rx_adv_conf.rss_conf.rss_hf =
			(RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP) &
			info.flow_type_rss_offloads;
	}
	ret = rte_eth_dev_configure(dp->port_id, (uint16_t)nq, (uint16_t)nq,
				    &ec);
	if (ret) {
		CS_ERR("configure %s: %s", name, rte_strerror(-ret));
		goto out_pool;
	}
	ret = ec.rxmode.mtu ? rte_eth_dev_set_mtu(dp->port_id, (uint16_t)c->mtu)
			    : 0;
	if (ret && ret != -ENOTSUP)
		CS_WARN("set MTU %u on %s: %s", c->mtu, name,
			rte_strerror(-ret));
	rte_eth_dev_adjust_nb_rx_tx_desc(dp->port_id, &nrx, &ntx);
	for (unsigned q = 0; q < nq; q++) {
		ret = rte_eth_rx_queue_setup(dp->port_id, (uint16_t)q, nrx,
					     (unsigned)socket, NULL, dp->pool);
		if (!ret)
			ret = rte_eth_tx_queue_setup(dp->port_id, (uint16_t)q,
						     ntx, (unsigned)socket,
						     NULL);
		if (ret) {
			CS_ERR("queue %u setup on %s: %s", q, name,
			       rte_strerror(-ret));
			goto out_pool;
		}
	}
	ret = rte_eth_dev_start(dp->port_id);
	if (ret) {
		CS_ERR("start %s: %s", name, rte_strerror(-ret));
		goto out_pool;
	}
	dp->started = true;
	if (is_vdev)
		rte_eth_promiscuous_enable(dp->port_id);
	if (c->mac[0]) {
		if (cs_port_parse_mac(c->mac, dp->port.mac)) {
			CS_ERR("bad port.mac '%s'", c->mac);
			ret = -EINVAL;
			goto out_stop;
		}
	} else if (rte_eth_macaddr_get(dp->port_id, &ea) == 0) {
		memcpy(dp->port.mac, ea.addr_bytes, 6);
	}
	{
		char mac[24];

		cs_port_format_mac(dp->port.mac, mac, sizeof(mac));
		CS_INFO("%s (port %u, driver %s) up: %u queue(s) of %u/%u "
			"descriptors, MTU %u, pool %u mbufs x %u bytes on "
			"socket %d, mac %s, zero-copy TX %s",
			name, dp->port_id, info.driver_name, nq, nrx, ntx,
			c->mtu, nmbufs, room, socket, mac,
			dp->multi_seg && c->zero_copy ? "on" : "off (copies)");
	}
	find_rx_fds(dp, c->dev, nq);
	*out = &dp->port;
	return 0;
out_stop:
	rte_eth_dev_stop(dp->port_id);
out_pool:
	rte_mempool_free(dp->pool);
out_close:
	rte_eth_dev_close(dp->port_id);
out_free:
	pthread_mutex_destroy(&dp->gpu_lock);
	free(dp);
out_eal:
	if (--eal_users == 0) {
		rte_eal_cleanup();
		remove_runtime_dir(eal_runtime_dir);
	}
	return ret;
}

/*
 * An adaptive lcore that waits should wake when a frame arrives, not when
 * its nap ends: on a machine where several sidecars share a core the nap
 * is what each hop of a small collective costs. DPDK's af_packet PMD has
 * no receive interrupt, but each of its receive queues is a packet socket
 * whose descriptor is the first member of the queue's private data (the
 * same in every DPDK release that has the PMD). Take it only if it proves
 * to be a raw AF_PACKET socket; otherwise the lcore naps as before.
 */
#ifndef AF_XDP
#define AF_XDP 44
#endif

/*
 * af_xdp: the PMD's XDP socket is not reachable through a stable layout,
 * but with one queue the process holds exactly one AF_XDP socket, which
 * poll() reports readable when its receive ring has frames. With more
 * queues (or anything ambiguous) the lcores nap.
 */
static void find_xsk_fd(struct dpdk_port *dp, unsigned nq)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	int found = -1, count = 0;

	if (!dir)
		return;
	while ((e = readdir(dir))) {
		int fd, dom = -1;
		socklen_t l = sizeof(dom);
		char *end;

		fd = (int)strtol(e->d_name, &end, 10);
		if (*end || fd == dirfd(dir))
			continue;
		if (!getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) &&
		    dom == AF_XDP) {
			found = fd;
			count++;
		}
	}
	closedir(dir);
	if (nq == 1 && count == 1)
		dp->rx_fd[0] = found;
	CS_INFO("af_xdp: %s", dp->rx_fd[0] >= 0
				      ? "idle lcores wake on receive"
				      : "idle lcores nap (lcore.sleep): one "
					"queue and one XDP socket needed to "
					"wait on it");
}

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

/*
 * The PMD's packet sockets are bound to ETH_P_ALL: without a filter the
 * kernel copies every frame the interface carries into our ring (the
 * namespace's own TCP both ways, ARP, other UDP) and wakes a waiting lcore
 * for it, only for the codec to drop it. On a machine the sidecar shares,
 * that is a copy and a wake-up per frame of every other program's traffic
 * (Open MPI's TCP ran 2-3x slower beside idle sidecars: BENCHMARKS.md).
 * So each socket gets a classic BPF filter, as a NIC's flow rule would:
 * to our MAC (or broadcast: a bridge floods unicast it has not learned to
 * every port, and the PMD puts the interface in promiscuous mode), IPv4,
 * UDP, first fragment, destination port.udp_port; and it ignores frames
 * the namespace itself sends. The codec still checks everything that
 * passes (malformed frames to our port are counted as before; the driver
 * checks the MAC again for ports without this filter).
 */
static int afp_filter(int fd, const uint8_t mac[6], uint16_t udp_port)
{
	uint32_t mac_hi = (uint32_t)mac[0] << 24 | (uint32_t)mac[1] << 16 |
			  (uint32_t)mac[2] << 8 | mac[3];
	uint32_t mac_lo = (uint32_t)mac[4] << 8 | mac[5];
	struct sock_filter code[] = {
		/* 0: destination MAC, ours or broadcast */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, mac_hi, 0, 2),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 4),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, mac_lo, 4, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffff, 0, 12),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 4),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffff, 0, 10),
		/* 8: ours */
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12), /* ethertype */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0800, 0, 8),
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23), /* IP protocol */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17, 0, 6),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20), /* fragment offset */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 4, 0),
		BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14), /* X = IP header */
		BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16), /* UDP dest port */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, udp_port, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0x7fffffff), /* whole frame */
		BPF_STMT(BPF_RET | BPF_K, 0), /* not ours */
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]),
				   .filter = code };
	int one = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)))
		return -errno;
	/* Linux 4.20+; older kernels only see our filter's verdict */
	(void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one,
			 sizeof(one));
	return 0;
}

static void find_rx_fds(struct dpdk_port *dp, const char *dev, unsigned nq)
{
	unsigned found = 0, filtered = 0;

	for (unsigned q = 0; q < CS_PORT_MAX_QUEUES; q++)
		dp->rx_fd[q] = -1;
	if (!strcmp(dev, "af_xdp")) {
		dp->xdp = true;
		find_xsk_fd(dp, nq);
		return;
	}
	if (strcmp(dev, "af_packet"))
		return;
	for (unsigned q = 0; q < nq && q < CS_PORT_MAX_QUEUES; q++) {
		void *rxq = rte_eth_fp_ops[dp->port_id].rxq.data[q];
		int fd, dom = -1, type = -1;
		socklen_t l = sizeof(int);

		if (!rxq)
			continue;
		fd = *(const int *)rxq;
		if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) ||
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) ||
		    dom != AF_PACKET || type != SOCK_RAW)
			continue;
		dp->rx_fd[q] = fd;
		dp->afp = true;
		found++;
		if (dp->port.conf.rx_filter) {
			int ret =
				afp_filter(fd, dp->port.mac, dp->port.udp_port);

			if (ret)
				CS_WARN("af_packet: socket filter on queue "
					"%u: %s (every frame on the "
					"interface reaches the lcore)",
					q, strerror(-ret));
			else
				filtered++;
		}
	}
	CS_INFO("af_packet: %s",
		found == nq
			? "idle lcores wake on receive"
			: "receive sockets not found: idle lcores nap (lcore.sleep)");
	dp->rx_filtered = nq && filtered == nq;
	CS_INFO("af_packet: %s",
		filtered == nq
			? "kernel filter: only UDP to our MAC and "
			  "port.udp_port reaches the rings"
			: "no kernel filter: every frame on the interface "
			  "reaches the rings (port.rx_filter)");
}

static int dpdk_wait(struct cs_port *p, unsigned q, cs_ns_t timeout_ns,
		     int kick_fd)
{
	struct dpdk_port *dp = dp_of(p);
	struct timespec ts = { (time_t)(timeout_ns / CS_NS_PER_S),
			       (long)(timeout_ns % CS_NS_PER_S) };
	struct pollfd pfd[2];
	nfds_t n = 0;

	if (q < CS_PORT_MAX_QUEUES && dp->rx_fd[q] >= 0)
		pfd[n++] =
			(struct pollfd){ .fd = dp->rx_fd[q], .events = POLLIN };
	if (kick_fd >= 0)
		pfd[n++] = (struct pollfd){ .fd = kick_fd, .events = POLLIN };
	if (!n) {
		nanosleep(&ts, NULL);
		return 0;
	}
	return ppoll(pfd, n, &ts, NULL) < 0 && errno != EINTR ? -errno : 0;
}

static bool dpdk_wait_sees_fd(struct cs_port *p)
{
	(void)p;
	return true;
}

static bool dpdk_wakes_on_rx(struct cs_port *p, unsigned q)
{
	return q < CS_PORT_MAX_QUEUES && dp_of(p)->rx_fd[q] >= 0;
}

const struct cs_port_ops cs_port_dpdk_ops = {
	.name = "dpdk",
	.open = dpdk_open,
	.rx_burst = dpdk_rx_burst,
	.tx_alloc = dpdk_tx_alloc,
	.tx_burst = dpdk_tx_burst,
	.release = dpdk_release,
	.attach = dpdk_attach,
	.reg_mem = dpdk_reg_mem,
	.unreg_mem = dpdk_unreg_mem,
	.thread_init = dpdk_thread_init,
	.gpu_nic = dpdk_gpu_nic,
	.wait = dpdk_wait,
	.wakes_on_rx = dpdk_wakes_on_rx,
	.wait_sees_fd = dpdk_wait_sees_fd,
	.stats = dpdk_stats,
	.close = dpdk_close,
};
