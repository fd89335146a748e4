"""TEST DOUBLE of torch, for the orchestration tests of gpu_preflight_allreduce.py.

There is no torch (and no GPU) where the tests run. This package lets the orchestrator
find "a Python with torch" and start its workers, and then makes them fail the way a
broken NCCL setup does, chosen by FAKE_TORCH_MODE:

- ``hang-init``: init_process_group never returns (a hung NCCL init);
- ``crash-init``: init_process_group raises the error NCCL gives for a broken transport;
- ``hang-init-with-p2p``: hangs unless NCCL_P2P_DISABLE=1, then raises naming that setting
  (which run of a P2P comparison got which environment).

It implements nothing else: a measurement needs the real torch (tests/device/).
"""

import os

__version__ = "0.0.0+testdouble"
MODE = os.environ.get("FAKE_TORCH_MODE", "hang-init")
float32 = bfloat16 = float16 = "dtype"


class version:  # torch's own spelling
    cuda = None


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return 0


def device(kind, index=None):
    return (kind, index)
