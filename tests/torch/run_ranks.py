# SPDX-License-Identifier: MIT
"""Start one collstackd on the loop port (no root, no namespaces) and N
ranks of a torch script beside it, torchrun's variables set; exit with the
worst rank's status (77: skipped, torch missing).

usage: run_ranks.py [--victim R] COLLSTACKD LIBCOLLSTACK N SCRIPT [ARGS...]

A rank killed by a signal fails the run, except rank R of --victim (the
one a test kills on purpose).
"""

import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    argv = sys.argv[1:]
    victim = None
    if argv[:1] == ["--victim"]:
        victim = int(argv[1])
        argv = argv[2:]
    daemon, lib, n, script = argv[:4]
    n = int(n)
    args = argv[4:]
    try:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed or gloo missing")
    except ImportError as e:
        print(f"SKIP: torch is not installed for {sys.executable} ({e}); "
              "Debian: apt-get install python3-torch")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    py = os.path.join(here, "..", "..", "python")
    with tempfile.TemporaryDirectory(prefix="cs-torch-") as d:
        log = open(os.path.join(d, "collstackd.log"), "w")
        sc = subprocess.Popen([daemon, "--set", "port.type=loop",
                               "--set", f"run_dir={d}",
                               "--set", "name=torchtest"],
                              stdout=log, stderr=subprocess.STDOUT)
        ranks = []
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(d, "ready")):
                if sc.poll() is not None or time.monotonic() > deadline:
                    log.close()
                    print(open(os.path.join(d, "collstackd.log")).read())
                    print("FAIL: collstackd did not become ready")
                    return 1
                time.sleep(0.05)
            port = free_port()
            for r in range(n):
                env = dict(os.environ,
                           COLLSTACK_SOCKET=os.path.join(d, "collstack.sock"),
                           COLLSTACK_LIB=lib, RANK=str(r),
                           WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                           LOCAL_WORLD_SIZE=str(n),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                           PYTHONPATH=py + os.pathsep +
                           os.environ.get("PYTHONPATH", ""),
                           OMP_NUM_THREADS="1")
                ranks.append(subprocess.Popen(
                    [sys.executable, os.path.join(here, script)] + args,
                    env=env))
            rcs = []
            for p in ranks:
                try:
                    rcs.append(p.wait(timeout=600))
                except subprocess.TimeoutExpired:
                    print("FAIL: a rank hung")
                    rcs.append(1)
            worst = 0
            for r, rc in enumerate(rcs):
                if rc:
                    print(f"run_ranks: rank {r} exited with {rc}")
                if rc < 0 and r != victim:
                    worst = 1
                elif rc > 0:
                    worst = max(worst, rc)
            return worst
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            sc.terminate()
            sc.wait()
            log.close()


if __name__ == "__main__":
    sys.exit(main())
