"""TEST DOUBLE of torch.distributed: see the package's docstring."""

import time

from . import MODE


def init_process_group(**kwargs):
    if MODE == "crash-init":
        raise RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO "
                           "for details), NCCL version 2.27.5")
    while True:
        time.sleep(1)
