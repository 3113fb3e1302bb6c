# SPDX-License-Identifier: MIT
"""Start a mini sidecar and N ranks of train_local.py on this node.

usage: run_local.py MINI_SIDECAR LIBCOLLSTACK [N] [SCRIPT]
"""

import os
import subprocess
import sys
import tempfile
import time


def main():
    sidecar, lib = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    script = sys.argv[4] if len(sys.argv) > 4 else "train_local.py"
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as d:
        sock = os.path.join(d, "cs.sock")
        sc = subprocess.Popen([sidecar, sock], stderr=subprocess.DEVNULL)
        try:
            for _ in range(500):
                if os.path.exists(sock):
                    break
                time.sleep(0.01)
            ranks = []
            for r in range(n):
                env = dict(os.environ, COLLSTACK_SOCKET=sock,
                           COLLSTACK_LIB=lib, RANK=str(r),
                           WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                           LOCAL_WORLD_SIZE=str(n))
                ranks.append(subprocess.Popen(
                    [sys.executable, os.path.join(here, script)],
                    env=env))
            rc = max(p.wait(timeout=240) for p in ranks)
        finally:
            sc.terminate()
            sc.wait()
    return rc


if __name__ == "__main__":
    sys.exit(main())
