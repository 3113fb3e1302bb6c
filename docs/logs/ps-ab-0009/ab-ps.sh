#!/bin/bash
# A/B of the PS bench: base vs new builds, alternating, fresh clusters
cd /work/main
export CS_CLUSTER=pa CS_CLUSTER_ENV=/run/collstack/cluster-pa.env
for r in 1 2 3; do
 for v in base new; do
  b=/work/main/build; [ $v = base ] && b=/work/wt/base/build
  CS_BUILD_DIR=$b scripts/cluster.sh down >/dev/null 2>&1
  CS_BUILD_DIR=$b scripts/cluster.sh up 4 --port udp >/dev/null 2>&1 || { echo upfail; exit 1; }
  $b/tools/collstack bench -o ps --pattern pushpull,pull,push --row-bytes 64,1024 -n 100 -w 5 --dense 1M 2>&1 |
   grep '^ps-bench' | sed -E 's/.*pattern=([a-z]+).*row_bytes=([0-9]+).*time_us=([0-9.]+) p50_us=([0-9.]+).*wrong=([0-9]+).*/\1 \2 \3 \4 wrong=\5/' | sed "s/^/$v r$r /"
  CS_BUILD_DIR=$b scripts/cluster.sh down >/dev/null 2>&1
 done
done
