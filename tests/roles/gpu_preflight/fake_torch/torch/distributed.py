"""TEST DOUBLE of torch.distributed: see the package's docstring."""

import os
import time

from . import MODE


def init_process_group(**kwargs):
    if MODE == "hang-init-with-p2p":  # hangs as NCCL's P2P does behind ACS; fails fast with P2P off
        if os.environ.get("NCCL_P2P_DISABLE") == "1":
            raise RuntimeError("NCCL error: no peer reachable (NCCL_P2P_DISABLE=1 seen by this rank)")
    elif MODE == "crash-init":
        raise RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO "
                           "for details), NCCL version 2.27.5")
    while True:
        time.sleep(1)
