# SPDX-License-Identifier: MIT
"""Wrong world sizes and ranks are refused at init_process_group with a
message (run by run_ranks.py with 2 ranks; every rank checks the error it
must get and exits 0 only then).

modes: world_env  rank 1 asks for world_size 3 under WORLD_SIZE=2
       world      no launcher variables; rank 0 says 2, rank 1 says 3
       dup        no launcher variables; both ranks say rank 0
       rank_env   rank 1 asks for rank 0 under RANK=1
"""

import datetime
import os
import sys
import tempfile

import torch.distributed as dist

import collstack.torch  # noqa: F401

MODE = sys.argv[1]
RANK = int(os.environ["RANK"])
os.environ["COLLSTACK_INIT_TIMEOUT"] = "20"


def init(rank, size, env=True):
    if not env:
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            os.environ.pop(k, None)
    path = os.path.join(tempfile.gettempdir(),
                        f"cs-torch-init-{os.environ['MASTER_PORT']}")
    dist.init_process_group("collstack", init_method=f"file://{path}",
                            rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))


def expect(fn, *words):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        ok = all(w in msg for w in words)
        print(f"rank {RANK}: {'ok' if ok else 'FAIL'}: refused: {msg}")
        return 0 if ok else 1
    print(f"rank {RANK}: FAIL: accepted, wanted an error with {words}")
    return 1


def main():
    if MODE == "world_env":
        if RANK == 1:
            return expect(lambda: init(1, 3), "world_size 3 disagrees",
                          "launcher's 2")
        return expect(lambda: init(0, 2), "ranks [1] never joined")
    if MODE == "world":
        if RANK == 1:
            return expect(lambda: init(1, 3, False), "never joined")
        return expect(lambda: init(0, 2, False),
                      "ranks [1] were started with world_size 3")
    if MODE == "dup":
        # one of the two claims rank 0 first; the other is refused, the
        # first waits for a rank 1 that never comes
        try:
            init(0, 2, False)
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            ok = "claimed by another process" in msg or \
                "never joined" in msg
            print(f"rank {RANK}: {'ok' if ok else 'FAIL'}: refused: {msg}")
            return 0 if ok else 1
        print(f"rank {RANK}: FAIL: accepted a duplicate rank")
        return 1
    if MODE == "rank_env":
        if RANK == 1:
            return expect(lambda: init(0, 2), "rank 0 disagrees",
                          "launcher's 1")
        return expect(lambda: init(0, 2), "never joined")
    print(f"unknown mode {MODE}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
