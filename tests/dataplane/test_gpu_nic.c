/* SPDX-License-Identifier: MIT */
/*
 * The dpdk port's hooks for device memory (cs_port_gpu_nic) on a real vdev
 * (net_null: no interface, no root, no hugepages), with host memory
 * standing in for a GPU's range: what EAL holds after each call is read
 * back from EAL (rte_mem_virt2memseg_list), so a registration that leaks
 * or was never made shows. Nothing here touches a NIC or a GPU.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rte_memory.h>

#include "cs_config.h"
#include "dataplane/port.h"
#include "gpu/gpu.h"
#include "gpu_fake_export.h"

#define AREA (1u << 20)
#define HUGE_PG (2u << 20)

/* the dpdk port a test has open: closed by the fixture when an assertion
 * ends the test early, so that EAL's runtime folder goes with it */
static struct cs_port *null_port;

static void close_null(void)
{
	cs_port_close(null_port);
	null_port = NULL;
}

TestSuite(gpu_nic, .fini = close_null);

/* A dpdk null port of its own EAL (Criterion forks each test). */
static struct cs_port *open_null(double drop)
{
	struct cs_port_conf c;
	struct cs_port *p;
	int ret;

	cr_assert_eq(cs_port_conf_defaults(&c), 0);
	snprintf(c.type, sizeof(c.type), "dpdk");
	snprintf(c.dev, sizeof(c.dev), "null");
	snprintf(c.name, sizeof(c.name), "gnt%d", (int)getpid());
	c.no_huge = true;
	c.rx_desc = c.tx_desc = 64;
	c.fault.drop = drop;
	ret = cs_port_open(&c, &p);
	cr_assert_eq(ret, 0, "dpdk null port: %s", strerror(-ret));
	null_port = p;
	return p;
}

static void *area(size_t len, int flags)
{
	void *a = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);

	if (a == MAP_FAILED)
		return NULL;
	memset(a, 0x5a, len); /* fault the pages in, as a real range is */
	return a;
}

/* EAL's external segment list holding @va, or NULL */
static const struct rte_memseg_list *extmem_of(void *va)
{
	struct rte_memseg_list *msl = rte_mem_virt2memseg_list(va);

	return msl && msl->external ? msl : NULL;
}

Test(gpu_nic, ports_without_hooks_say_so)
{
	struct cs_port_conf c;
	struct cs_gpu_nic nic;
	struct cs_port *p;

	cr_assert_eq(cs_port_conf_defaults(&c), 0);
	snprintf(c.type, sizeof(c.type), "loop");
	cr_assert_eq(cs_port_open(&c, &p), 0);
	memset(&nic, 0xff, sizeof(nic));
	cr_assert_eq(cs_port_gpu_nic(p, &nic), -ENOTSUP);
	cr_assert(!nic.name && !nic.reg_dmabuf && !nic.reg_peer && !nic.dereg,
		  "zeroed when refused");
	cs_port_close(p);
}

Test(gpu_nic, vdev_refuses_with_its_name_and_leaves_nothing)
{
	struct cs_port *p = open_null(0);
	struct cs_gpu_nic nic;
	char why[CS_GPU_WHY_LEN] = "";
	void *mr = NULL, *va = area(AREA, 0);
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC), ret;

	cr_assert(va && fd >= 0);
	cr_assert_eq(cs_port_gpu_nic(p, &nic), 0);
	cr_assert(!strncmp(nic.name, "dpdk:net_null_gnt", 17), "name %s",
		  nic.name);
	cr_assert_null(nic.bdf, "a vdev has no PCI address");
	cr_assert(nic.reg_dmabuf && nic.reg_peer && nic.dereg);

	ret = nic.reg_peer(nic.ctx, va, AREA, &mr, why, sizeof(why));
	cr_assert_eq(ret, -EOPNOTSUPP, "reg_peer: %d (%s)", ret, why);
	cr_assert(strstr(why, "net_null_gnt") &&
			  strstr(why, "is a virtual device (driver net_null)"),
		  "why: %s", why);
	cr_assert_null(mr);
	cr_assert_null(extmem_of(va), "refused: nothing left in EAL");

	why[0] = 0;
	ret = nic.reg_dmabuf(nic.ctx, fd, 0, AREA, va, &mr, why, sizeof(why));
	cr_assert_eq(ret, -EOPNOTSUPP, "reg_dmabuf: %d (%s)", ret, why);
	cr_assert(strstr(why, "virtual device"), "why: %s", why);
	cr_assert_null(extmem_of(va));
	close(fd);
	close_null();
	munmap(va, AREA);
}

/* With the test hook, a vdev takes the range: every EAL call of a real
 * registration runs, and its undoing can be checked. */
Test(gpu_nic, register_twice_after_dereg_shares_and_undoes)
{
	struct cs_port *p = open_null(0);
	struct cs_gpu_nic nic;
	const struct rte_memseg_list *msl;
	char why[CS_GPU_WHY_LEN] = "";
	uint8_t *va = area(AREA, 0);
	void *mr, *mr2;
	int ret;

	cr_assert_not_null(va);
	cs__dpdk_gpu_vdev_ok = true;
	cr_assert_eq(cs_port_gpu_nic(p, &nic), 0);
	for (int round = 0; round < 2; round++) {
		ret = nic.reg_peer(nic.ctx, va, AREA, &mr, why, sizeof(why));
		cr_assert_eq(ret, 0, "round %d: %d (%s)", round, ret, why);
		msl = extmem_of(va);
		cr_assert_not_null(msl, "round %d: extmem registered", round);
		cr_assert_eq(msl->base_va, va);
		cr_assert_eq(msl->len, AREA);
		cr_assert_eq(msl->page_sz, (uint64_t)sysconf(_SC_PAGESIZE),
			     "the mapping's page size");
		/* a range inside it: the same registration, one more user */
		ret = nic.reg_dmabuf(nic.ctx, -1, 0, 100, va + 8192 + 5, &mr2,
				     why, sizeof(why));
		cr_assert_eq(ret, 0, "%s", why);
		cr_assert_eq(mr2, mr, "pages already registered are shared");
		nic.dereg(nic.ctx, mr2);
		cr_assert_not_null(extmem_of(va), "one user left");
		nic.dereg(nic.ctx, mr);
		cr_assert_null(extmem_of(va), "round %d: all undone", round);
	}
	/* pages that overlap a registration without lying inside it */
	cr_assert_eq(nic.reg_peer(nic.ctx, va, AREA / 2, &mr, why, sizeof(why)),
		     0);
	why[0] = 0;
	ret = nic.reg_peer(nic.ctx, va + AREA / 4, AREA / 2, &mr2, why,
			   sizeof(why));
	cr_assert_eq(ret, -EBUSY, "%d", ret);
	cr_assert(strstr(why, "overlap"), "why: %s", why);
	nic.dereg(nic.ctx, mr);
	cr_assert_null(extmem_of(va));
	/* an unaligned range: the whole pages around it */
	ret = nic.reg_peer(nic.ctx, va + 100, 5000, &mr, why, sizeof(why));
	cr_assert_eq(ret, 0, "%s", why);
	msl = extmem_of(va);
	cr_assert(msl && msl->base_va == va && msl->len == 8192,
		  "pages around an unaligned range");
	nic.dereg(nic.ctx, mr);
	cr_assert_null(extmem_of(va));
	close_null();
	munmap(va, AREA);
}

Test(gpu_nic, hugepage_mapping_registers_in_its_page_size)
{
	struct cs_port *p = open_null(0);
	struct cs_gpu_nic nic;
	const struct rte_memseg_list *msl;
	char why[CS_GPU_WHY_LEN] = "";
	uint8_t *va = area(HUGE_PG, MAP_HUGETLB);
	void *mr;
	int ret;

	if (!va) {
		close_null();
		cr_skip_test("no free 2 MiB hugepage for the stand-in range");
	}
	cs__dpdk_gpu_vdev_ok = true;
	cr_assert_eq(cs_port_gpu_nic(p, &nic), 0);
	ret = nic.reg_peer(nic.ctx, va + 4096, 4096, &mr, why, sizeof(why));
	cr_assert_eq(ret, 0, "%s", why);
	msl = extmem_of(va);
	cr_assert_not_null(msl);
	cr_assert_eq(msl->page_sz, HUGE_PG, "page size %llu",
		     (unsigned long long)msl->page_sz);
	cr_assert(msl->base_va == va && msl->len == HUGE_PG);
	nic.dereg(nic.ctx, mr);
	cr_assert_null(extmem_of(va));
	close_null();
	munmap(va, HUGE_PG);
}

/* The registrar over the port's hooks, behind the fault shim: a vdev
 * stages, and the registration's story names it and its errno. */
Test(gpu_nic, registrar_stages_on_a_vdev_and_says_why)
{
	struct cs_port *p = open_null(0.01);
	struct cs_gpu_dev dev = { .dmabuf = true, .gdr = true };
	struct cs_gpu_host_caps host = { .peermem = true };
	const struct cs_gpu_export_ops ex = { .dmabuf_export = fx_export };
	struct cs_gpu_nic nic;
	struct cs_gpu_mr mr;
	uint8_t *va = area(AREA, 0);
	int ret;

	cr_assert_not_null(va);
	cr_assert_eq(cs_port_gpu_nic(p, &nic), 0, "through the fault shim");
	ret = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, AREA, &mr);
	cr_assert_eq(ret, 0);
	cr_assert_eq(mr.kind, CS_GPU_REG_STAGING, "why: %s", mr.why);
	cr_assert(strstr(mr.why, "staging for dpdk:net_null_gnt") &&
			  strstr(mr.why,
				 "dma-buf: the port refused the "
				 "dma-buf (EOPNOTSUPP): net_null_gnt") &&
			  strstr(mr.why, "peer-memory: the port refused it "
					 "(EOPNOTSUPP): net_null_gnt") &&
			  strstr(mr.why, "virtual device"),
		  "why: %s", mr.why);
	cr_assert_null(extmem_of(va));
	cs_gpu_deregister(&nic, &mr);

	/* the same range taken (test hook): dma-buf, undone by dereg */
	cs__dpdk_gpu_vdev_ok = true;
	ret = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, AREA, &mr);
	cr_assert(!ret && mr.kind == CS_GPU_REG_DMABUF, "why: %s", mr.why);
	cr_assert(strstr(mr.why, "dma-buf for dpdk:net_null_gnt"), "why: %s",
		  mr.why);
	cr_assert_not_null(extmem_of(va));
	cs_gpu_deregister(&nic, &mr);
	cr_assert_null(extmem_of(va), "deregistered");
	close_null();
	munmap(va, AREA);
}
