/* SPDX-License-Identifier: MIT */
/* The fault shim: seeded drop / duplicate / reorder / delay / corrupt. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CS_LOG_MODULE "fault"
#include "internal/log.h"
#include "dataplane/fault.h"

struct held {
	struct cs_pbuf b;
	cs_ns_t due; /* send when now >= due ... */
	uint64_t after; /* ... or once this many frames went out */
};

struct fq {
	uint64_t rng;
	uint64_t sent; /* frames passed to the inner port */
	unsigned nheld;
	struct held held[CS_FAULT_HOLD];
};

struct fault_port {
	struct cs_port port;
	struct cs_port *inner;
	struct cs_fault_conf fc;
	uint64_t dropped, duplicated, reordered, delayed, corrupted;
	uint64_t lost; /* inner refused and the hold was full */
	struct fq *q; /* one per queue */
};

static inline struct fault_port *fp_of(struct cs_port *p)
{
	return cs_container_of(p, struct fault_port, port);
}

/* A cheap monotonic clock (vDSO, no system call). */
static inline cs_ns_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

bool cs_fault_active(const struct cs_fault_conf *fc)
{
	return fc->drop > 0 || fc->dup > 0 || fc->reorder > 0 ||
	       fc->delay > 0 || fc->corrupt > 0;
}

static void hold(struct fq *q, const struct cs_pbuf *b, cs_ns_t due,
		 uint64_t after)
{
	struct held *h = &q->held[q->nheld++];

	h->b = *b;
	h->due = due;
	h->after = after;
}

/* Send the held frames that are due, in the order they were held. */
static void flush(struct fault_port *fp, unsigned qi, cs_ns_t now)
{
	struct fq *q = &fp->q[qi];
	struct cs_pbuf out[CS_PORT_BURST];
	unsigned idx[CS_PORT_BURST];
	unsigned n = 0, sent, keep = 0;

	if (!q->nheld)
		return;
	for (unsigned i = 0; i < q->nheld && n < CS_PORT_BURST; i++) {
		struct held *h = &q->held[i];

		if (now >= h->due || q->sent >= h->after) {
			idx[n] = i;
			out[n++] = h->b;
		}
	}
	if (!n)
		return;
	sent = fp->inner->ops->tx_burst(fp->inner, qi, out, n);
	q->sent += sent;
	/* Compact: drop the sent entries, keep the order of the rest. */
	for (unsigned i = 0, k = 0; i < q->nheld; i++) {
		if (k < sent && idx[k] == i) {
			k++;
			continue;
		}
		q->held[keep++] = q->held[i];
	}
	q->nheld = keep;
}

static unsigned fault_rx_burst(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			       unsigned n)
{
	struct fault_port *fp = fp_of(p);

	if (fp->q[q].nheld)
		flush(fp, q, now_ns());
	return fp->inner->ops->rx_burst(fp->inner, q, v, n);
}

static unsigned fault_tx_alloc(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			       unsigned n)
{
	struct fault_port *fp = fp_of(p);

	return fp->inner->ops->tx_alloc(fp->inner, q, v, n);
}

static void fault_release(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			  unsigned n)
{
	struct fault_port *fp = fp_of(p);

	fp->inner->ops->release(fp->inner, q, v, n);
}

static void corrupt(struct fq *q, struct cs_pbuf *b)
{
	uint32_t span, off;

	if (b->len <= CS_PORT_HDRS_LEN)
		return;
	span = b->len - CS_PORT_HDRS_LEN;
	off = CS_PORT_HDRS_LEN + (uint32_t)(cs_rand_next(&q->rng) % span);
	b->data[off] ^= (uint8_t)(1u << (cs_rand_next(&q->rng) & 7));
}

static unsigned fault_tx_burst(struct cs_port *p, unsigned qi,
			       struct cs_pbuf *v, unsigned n)
{
	struct fault_port *fp = fp_of(p);
	struct cs_port *in = fp->inner;
	struct fq *q = &fp->q[qi];
	const struct cs_fault_conf *fc = &fp->fc;
	struct cs_pbuf out[2 * CS_PORT_BURST];
	unsigned nout = 0, sent, room, take;
	cs_ns_t now = now_ns();

	flush(fp, qi, now);
	/* Each accepted frame may become two, and any of them may have to
	 * be held if the inner port refuses it: accept only what fits. */
	room = (CS_FAULT_HOLD - q->nheld) / 2;
	take = CS_MIN(n, CS_MIN(room, (unsigned)CS_PORT_BURST));
	for (unsigned i = 0; i < take; i++) {
		struct cs_pbuf b = v[i], d;

		if (fc->drop > 0 && cs_rand_unit(&q->rng) < fc->drop) {
			in->ops->release(in, qi, &b, 1);
			fp->dropped++;
			continue;
		}
		if (fc->corrupt > 0 && cs_rand_unit(&q->rng) < fc->corrupt) {
			corrupt(q, &b);
			fp->corrupted++;
		}
		if (fc->dup > 0 && cs_rand_unit(&q->rng) < fc->dup &&
		    in->ops->tx_alloc(in, qi, &d, 1) == 1) {
			if (d.cap >= b.len) {
				memcpy(d.data, b.data, b.len);
				d.len = b.len;
				out[nout++] = d;
				fp->duplicated++;
			} else {
				in->ops->release(in, qi, &d, 1);
			}
		}
		if (fc->reorder > 0 && cs_rand_unit(&q->rng) < fc->reorder) {
			hold(q, &b, now + fc->delay_ns,
			     q->sent + nout + fc->reorder_depth);
			fp->reordered++;
			continue;
		}
		if (fc->delay > 0 && cs_rand_unit(&q->rng) < fc->delay) {
			hold(q, &b, now + fc->delay_ns, UINT64_MAX);
			fp->delayed++;
			continue;
		}
		out[nout++] = b;
	}
	if (!nout)
		return take;
	sent = in->ops->tx_burst(in, qi, out, nout);
	q->sent += sent;
	for (unsigned i = sent; i < nout; i++) {
		if (q->nheld < CS_FAULT_HOLD) {
			hold(q, &out[i], 0, 0); /* retry at next flush */
		} else {
			in->ops->release(in, qi, &out[i], 1);
			fp->lost++;
		}
	}
	return take;
}

static int fault_attach(struct cs_port *p, unsigned q, struct cs_pbuf *b,
			void *ext, uint32_t len)
{
	struct fault_port *fp = fp_of(p);
	const struct cs_fault_conf *fc = &fp->fc;

	/* Duplicates and corruption work on the frame's own bytes, held
	 * frames leave later: those faults get copies, not references. */
	if (fc->dup > 0 || fc->corrupt > 0 || fc->reorder > 0 ||
	    fc->delay > 0) {
		if (b->len + len > b->cap)
			return -ENOSPC;
		memcpy(b->data + b->len, ext, len);
		b->len += len;
		return 0;
	}
	return cs_port_attach(fp->inner, q, b, ext, len);
}

static int fault_reg_mem(struct cs_port *p, void *addr, size_t len)
{
	/* cs_port_reg_mem() holds the registration lock already */
	return cs_port_reg_mem_locked(fp_of(p)->inner, addr, len);
}

static int fault_unreg_mem(struct cs_port *p, void *addr, size_t len)
{
	return cs_port_unreg_mem_locked(fp_of(p)->inner, addr, len);
}

/* Device memory is registered with the device underneath: the shim acts
 * on frames, not on memory. */
static int fault_gpu_nic(struct cs_port *p, struct cs_gpu_nic *out)
{
	return cs_port_gpu_nic(fp_of(p)->inner, out);
}

static int fault_wait(struct cs_port *p, unsigned q, cs_ns_t timeout_ns,
		      int kick_fd)
{
	struct fault_port *fp = fp_of(p);

	/* Held frames need flushing: do not sleep past their due time. */
	if (fp->q[q].nheld && timeout_ns > fp->fc.delay_ns / 4)
		timeout_ns = fp->fc.delay_ns / 4;
	return cs_port_wait(fp->inner, q, timeout_ns, kick_fd);
}

static bool fault_wait_sees_fd(struct cs_port *p)
{
	return cs_port_wait_sees_fd(fp_of(p)->inner);
}

static bool fault_wakes_on_rx(struct cs_port *p, unsigned q)
{
	return cs_port_wakes_on_rx(fp_of(p)->inner, q);
}

static int fault_thread_init(struct cs_port *p)
{
	return cs_port_thread_init(fp_of(p)->inner);
}

static void fault_stats(struct cs_port *p, struct cs_port_stats *st)
{
	struct fault_port *fp = fp_of(p);

	fp->inner->ops->stats(fp->inner, st);
	st->f_dropped = fp->dropped;
	st->f_duplicated = fp->duplicated;
	st->f_reordered = fp->reordered;
	st->f_delayed = fp->delayed;
	st->f_corrupted = fp->corrupted;
	st->tx_errors += fp->lost;
}

static void fault_close(struct cs_port *p)
{
	struct fault_port *fp = fp_of(p);

	for (unsigned qi = 0; qi < fp->port.conf.queues; qi++) {
		struct fq *q = &fp->q[qi];

		for (unsigned i = 0; i < q->nheld; i++)
			fp->inner->ops->release(fp->inner, qi, &q->held[i].b,
						1);
	}
	fp->inner->ops->close(fp->inner);
	free(fp->q);
	free(fp);
}

static int fault_open(const struct cs_port_conf *conf, struct cs_port **out)
{
	(void)conf;
	(void)out;
	return -ENOTSUP; /* only made by cs_fault_wrap() */
}

static const struct cs_port_ops fault_ops = {
	.name = "fault",
	.open = fault_open,
	.rx_burst = fault_rx_burst,
	.tx_alloc = fault_tx_alloc,
	.tx_burst = fault_tx_burst,
	.release = fault_release,
	.attach = fault_attach,
	.reg_mem = fault_reg_mem,
	.unreg_mem = fault_unreg_mem,
	.wait = fault_wait,
	.wakes_on_rx = fault_wakes_on_rx,
	.wait_sees_fd = fault_wait_sees_fd,
	.thread_init = fault_thread_init,
	.gpu_nic = fault_gpu_nic,
	.stats = fault_stats,
	.close = fault_close,
};

static bool prob_ok(double v)
{
	return v >= 0 && v <= 1;
}

int cs_fault_wrap(struct cs_port *inner, const struct cs_fault_conf *fc,
		  struct cs_port **out)
{
	struct fault_port *fp;
	unsigned nq = inner->conf.queues ? inner->conf.queues : 1;

	*out = NULL;
	if (!prob_ok(fc->drop) || !prob_ok(fc->dup) || !prob_ok(fc->reorder) ||
	    !prob_ok(fc->delay) || !prob_ok(fc->corrupt))
		return -EINVAL;
	fp = calloc(1, sizeof(*fp));
	if (!fp)
		return -ENOMEM;
	fp->q = calloc(nq, sizeof(*fp->q));
	if (!fp->q) {
		free(fp);
		return -ENOMEM;
	}
	fp->port = *inner;
	fp->port.ops = &fault_ops;
	fp->port.conf.queues = nq;
	fp->inner = inner;
	fp->fc = *fc;
	if (!fp->fc.reorder_depth)
		fp->fc.reorder_depth = 1;
	for (unsigned i = 0; i < nq; i++)
		fp->q[i].rng = fc->seed + i;
	CS_INFO("fault shim on %s port: seed %llu drop %g dup %g reorder %g "
		"delay %g (%llu ns) corrupt %g",
		inner->ops->name, (unsigned long long)fc->seed, fc->drop,
		fc->dup, fc->reorder, fc->delay,
		(unsigned long long)fc->delay_ns, fc->corrupt);
	*out = &fp->port;
	return 0;
}
