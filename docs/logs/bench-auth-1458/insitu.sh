#!/usr/bin/env bash
# In-place GMAC tag timing (docs/bench-auth.md, 7 December 15:00): a
# build with insitu-instrument.patch applied (rdtsc around every tag call,
# tags longer than 50,000 TSC cycles, i.e. preempted, left out; XA_TWICE=1:
# the same tag again right after, on bytes now in cache; XA_RX, XA_PFQ: the
# prefetch experiments), B=its build directory. 4 nodes, af_packet, MTU
# 9000, one 64 MiB warm-up allreduce, then 3 (+1 warm-up) measured; prints
# ns per tag sent and checked. The TSC runs at 2.3 GHz on this VM.
cd "$(git rev-parse --show-toplevel)"
export CS_CLUSTER=${CS_CLUSTER:-ac}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
B=${B:-build}
CLI=$B/tools/collstack; export CS_BUILD_DIR=$B
scripts/cluster.sh up 4 --port af_packet --mtu 9000 --set auth.enable=1 --set boot.token=bench-token-0123456789 "$@" >/dev/null || exit 1
sum() { $CLI stats --raw 2>/dev/null | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { s += $2 } END { printf "%.0f\n", s }'; }
$CLI run allreduce --bytes 64M --iters 1 >/dev/null 2>&1
declare -A a
for k in xa_tx_tags xa_tx_bytes xa_tx_cyc xa_rx_tags xa_rx_bytes xa_rx_cyc xa_tx2_cyc xa_tx2_tags xa_rx2_cyc xa_rx2_tags xa_bursts xa_frames xa_txb xa_txf xa_pfc xa_pfn tx_pkts rx_pkts; do a[$k]=$(sum $k); done
uptime
$CLI run allreduce --bytes 64M --iters ${ITERS:-3} 2>&1 | grep -E "f32|retrans"
for k in xa_tx_tags xa_tx_bytes xa_tx_cyc xa_rx_tags xa_rx_bytes xa_rx_cyc xa_tx2_cyc xa_tx2_tags xa_rx2_cyc xa_rx2_tags xa_bursts xa_frames xa_txb xa_txf xa_pfc xa_pfn tx_pkts rx_pkts; do v=$(( $(sum $k) - ${a[$k]} )); eval "d_$k=$v"; echo "$k $v"; done
python3 -c "
tt,tb,tc,rt,rb,rc=$d_xa_tx_tags,$d_xa_tx_bytes,$d_xa_tx_cyc,$d_xa_rx_tags,$d_xa_rx_bytes,$d_xa_rx_cyc
f=2.3
print('tx: %d tags, avg %.0f B, %.0f ns/tag, %.2f GB/s'%(tt,tb/max(tt,1),tc/f/max(tt,1),tb/(tc/f) if tc else 0))
print('rx: %d tags, avg %.0f B, %.0f ns/tag, %.2f GB/s'%(rt,rb/max(rt,1),rc/f/max(rt,1),rb/(rc/f) if rc else 0))
t2c,t2n,r2c,r2n=$d_xa_tx2_cyc,$d_xa_tx2_tags,$d_xa_rx2_cyc,$d_xa_rx2_tags
if t2n: print('second pass: tx %.0f ns/tag, rx %.0f ns/tag'%(t2c/f/t2n, r2c/f/max(r2n,1)))
"
scripts/cluster.sh down >/dev/null 2>&1
