"""Filters of role sglang_server: the server's command line and its settings, from one table, for the
release that will serve.

``__sglang_server_options`` (vars/main.yml) maps SGLang's option names (its ServerArgs fields)
to values. Both views are derived from it, so a flag is described once; ``renames`` (what the release
to serve calls an option: files/sglang_release_features.py, ``options``) renames an option for it:

    {{ options | sglang_server_argv(extra_args, renames) }}
        -> ["--model-path", "m", "--tp-size", "8", ..., "--trust-remote-code", ...] + extra_args
           (null, "" and false are left out; true is a bare flag; the option name with "-" for "_")

    {{ options | sglang_server_settings(extra_args, env, renames, topology) }}
        -> {"model_path": "m", "tp_size": 8, ..., "extra_args": [...], "env": {...},
            "gpu_interconnect": "pcie", "gpu_p2p": "ok"}
           (what the launch-config check of sglang_eagle3_patch reads; null and "" left out; the host's
           GPUs as gpu_preflight recorded them, for its facts about the PCIe IPC all-reduce)

    {{ features | sglang_server_pcie_allreduce(topology, env, enabled, tp_size, nnodes) }}
        -> {"render": true, "why": "8 GPUs joined only over PCIe, P2P working, ..."}
           whether the server renders SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1, and why (not)
"""

from __future__ import annotations

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - unit tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass

PCIE_IPC = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
# The TP group sizes the PCIe IPC kernels build for (SGLang 0.5.23 pcie_ipc_ar.py _SUPPORTED_WORLD_SIZES,
# FlashInfer 0.7.2 comm/pcie_ipc_ar.py); 2 is left to SGLang's custom all-reduce, which serves two GPUs over
# PCIe itself (it turns off on more than two PCIe-only GPUs: custom_all_reduce_utils.py).
PCIE_IPC_TP_SIZES = (4, 8)
TRUE_WORDS = ("1", "true", "yes", "y", "on")


def _unset(value):
    return value is None or (isinstance(value, str) and value.strip() == "")


def _renamed(options, renames):
    renames = dict(renames or {})
    return {renames.get(name, name): value for name, value in dict(options).items()}


def sglang_server_argv(options, extra_args=(), renames=None):
    argv = []
    for name, value in _renamed(options, renames).items():
        if _unset(value) or value is False:
            continue
        flag = "--" + str(name).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, dict)):
            raise AnsibleFilterError(f"sglang_server_argv: option {name} has a {type(value).__name__} value")
        else:
            argv += [flag, str(value)]
    return argv + [str(arg) for arg in (extra_args or [])]


def sglang_server_settings(options, extra_args=(), env=None, renames=None, topology=None):
    settings = {name: value for name, value in _renamed(options, renames).items() if not _unset(value)}
    settings["extra_args"] = [str(arg) for arg in (extra_args or [])]
    settings["env"] = dict(env or {})
    topology = dict(topology or {})
    for key in ("interconnect", "p2p"):
        if topology.get(key):
            settings[f"gpu_{key}"] = topology[key]
    return settings


def _p2p_disabled(env):
    value = str(dict(env or {}).get("NCCL_P2P_DISABLE", "")).strip().lower()
    return value in TRUE_WORDS


def sglang_server_pcie_allreduce(features, topology=None, env=None, enabled=True, tp_size=1, nnodes=1):
    """Whether the server renders SGLang's PCIe IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1), and why.

    features: what the release to serve reads (files/sglang_release_features.py; {} when it was not asked);
    topology: gpu_preflight's local fact (ansible_local.gpu_preflight.topology; {} without one);
    env: the server's environment as given (the fixes' NCCL environment and sglang_server_env);
    enabled: sglang_server_pcie_allreduce; tp_size and nnodes: the TP group.

    On only where the release has it, the TP group is 4 or 8 GPUs of this host, and gpu_preflight found them
    joined only over PCIe with P2P working; a value in sglang_server_env stands as it is.
    """
    features, topology, env = dict(features or {}), dict(topology or {}), dict(env or {})
    tp_size, nnodes = int(tp_size or 1), int(nnodes or 1)

    def off(why):
        return {"render": False, "why": why}

    if not enabled:
        return off("sglang_server_pcie_allreduce is false")
    if PCIE_IPC in env:
        return off(f"{PCIE_IPC} is given in the server's environment (sglang_server_env): its value stands")
    if not features:
        return off("the release to serve was not asked what it has (no release yet)")
    version = features.get("version", "unknown")
    if not features.get("pcie_ipc_allreduce"):
        return off(f"SGLang {version} has no PCIe IPC all-reduce (it came with 0.5.21)")
    if nnodes > 1:
        return off(f"the TP group spans {nnodes} nodes: the PCIe IPC kernels serve the GPUs of one host")
    if not topology:
        return off("gpu_preflight has not recorded this host's GPUs (ansible_local.gpu_preflight.topology: "
                   "run playbooks/preflight.yml)")
    interconnect, gpus = topology.get("interconnect", "unknown"), int(topology.get("gpus") or 0)
    if interconnect in ("nvlink", "mixed"):
        return off(f"the GPUs are joined over NVLink ({interconnect}): SGLang's custom all-reduce serves them "
                   "(it is tried before the PCIe IPC kernels)")
    if gpus <= 2:
        return off(f"{gpus} GPU(s): SGLang's custom all-reduce serves up to two GPUs over PCIe")
    if interconnect != "pcie":
        return off(f"gpu_preflight could not tell how the GPUs are joined (interconnect {interconnect})")
    if tp_size not in PCIE_IPC_TP_SIZES:
        return off(f"tp_size {tp_size}: the PCIe IPC kernels serve a TP group of 4 or 8 GPUs "
                   "(2 are served by SGLang's custom all-reduce)")
    if _p2p_disabled(env):
        return off("P2P is disabled (NCCL_P2P_DISABLE=1: gpu_preflight_fix_nccl_p2p_disable, or sglang_server_env): "
                   "the PCIe IPC kernels write into the other GPUs' memory directly")
    if topology.get("p2p") != "ok":
        return off(f"P2P between the GPUs is {topology.get('p2p', 'unknown')} "
                   f"({topology.get('p2p_why') or 'gpu_preflight says no more'}): the PCIe IPC kernels write into "
                   "the other GPUs' memory directly")
    return {"render": True, "why": f"{gpus} GPUs joined only over PCIe with P2P working, a TP group of {tp_size}, "
                                   f"and SGLang {version} has it"}


class FilterModule:
    def filters(self):
        return {"sglang_server_argv": sglang_server_argv, "sglang_server_settings": sglang_server_settings,
                "sglang_server_pcie_allreduce": sglang_server_pcie_allreduce}
