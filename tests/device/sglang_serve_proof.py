"""Serve real SGLang on a lent GPU machine as role sglang_server renders it, and keep what it answered.

Used on the lent H200 machine (no systemd, no registry; Python 3.12 and torch 2.11.0+cu130 of its
image). In order, each step with its own time limit and the whole under --deadline-s, so that it
always ends and its results are packed (after every phase, into --pack):

1. setup: the release as sglang_build lays it out (<root>/releases/<name>/venv, current -> it), its
   site-packages from the carried parts (tests/device/sglang_serve_bundle.py; checked against
   their MANIFEST.json), the machine's own torch through a .pth; ansible-core from carried wheels;
   the tiny Llama target and EAGLE-3 draft of tests/harness/synthetic_model.py; versions, GPU facts;
2. render: tests/device/sglang_serve_render.yml runs role sglang_server's validate, model and config
   phases with -c local (the role's own templates, variables and filters); the server's argv and
   environment are read back from the unit's ExecStart and EnvironmentFile it wrote;
3. serve: the proof plays systemd (no systemd there): ExecStart with the EnvironmentFile over the
   machine's environment, as root, in its own process group; readiness is the role's probe
   (sglang_ready.py, called as tasks/wait.yml calls it) with a TEST ONLY systemctl stand-in
   (sglang_serve_systemctl.py) that reports that process;
4. session 1: the bench tool (roles/sglang_bench/files/sglang_bench.py, as tasks/run.yml calls it,
   10 runs), the recordings the contract test compares the simulator with (raw HTTP exchanges:
   /generate JSON and SSE, /get_server_info, /get_load, /v1/loads, /v1/models, the OpenAI
   endpoints, errors, /metrics after an aborted stream), the alert rules' metric names looked up in
   /metrics, and the launcher's answer to a bad flag and to a bad value;
5. tuning: roles/sglang_bench/files/sglang_tune.py's plan/next/record/report, each candidate a
   render and a real restart (as playbooks/tasks/tune_step.yml), then a restart on the settings it
   serves; sessions of the same settings give the run-to-run noise across restarts;
6. noise.json: the coefficient of variation of tok/s within each session and across sessions.

--rehearse runs the same steps on a machine without a GPU with the labelled simulator standing for
SGLang (the test role sglang_simulator's package, copied to /opt/sglang-sim and run through the
server role's sglang_server_launch_module and sglang_server_launch_env; run it inside a mount
namespace with /etc, /opt and /var overlaid: the role writes /etc/sglang, /etc/systemd/system and
/opt/sglang).

Usage: python3 tests/device/sglang_serve_proof.py WORK --parts DIR... --ansible DIR --pack FILE
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "sglang-server"
UNIT = Path(f"/etc/systemd/system/{SERVICE}.service")
ENV_FILE = Path(f"/etc/sglang/{SERVICE}.env")
INSTALL_ROOT = Path("/opt/sglang")
RELEASE = INSTALL_ROOT / "releases" / "sglang-0.5.17-proof"
MODELS = Path("/opt/sglang-proof-models")
SIM_PACKAGE = ROOT / "molecule/resources/roles/sglang_simulator/files/sglang_sim"
SIM_DIR = Path("/opt/sglang-sim")  # --rehearse: the package's directory, as the test role installs it
HOST, PORT = "127.0.0.1", 30000
URL = f"http://{HOST}:{PORT}"
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
START = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}  # the role's defaults
BENCH = ROOT / "roles/sglang_bench/files/sglang_bench.py"
TUNE = ROOT / "roles/sglang_bench/files/sglang_tune.py"
CORRECTNESS = ROOT / "roles/sglang_bench/files/sglang_correctness.py"
READY = ROOT / "roles/sglang_server/files/sglang_ready.py"
ALERTS = ROOT / "roles/sglang_monitoring/templates/sglang-alerts.rules.yml.j2"
PROMPT = "The quick brown fox jumps over the lazy dog. Tell me a story about a fox"


class Proof:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.work
        self.started = time.monotonic()
        self.deadline = self.started + args.deadline_s
        self.summary: list[str] = []
        self.results: dict[str, Any] = {"sessions": [], "steps": {}}
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.session = 0
        self.log_handle = None
        # Real SGLang: no prefill CUDA graph (0.5.17 may compile one with torch.compile at start: minutes).
        self.extra_args: list[str] = ([] if args.rehearse else ["--cuda-graph-backend-prefill", "disabled"]) + list(
            args.extra_arg)
        for sub in ("facts", "render", "server", "bench", "recordings", "errors", "tune"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        self.state_file = self.work / "unit-state.json"
        self.bin = self.work / "bin"
        self.bin.mkdir(exist_ok=True)

    # ------------------------------------------------------------------ bookkeeping

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, line: str) -> None:
        stamp = f"[{time.monotonic() - self.started:6.1f}s] "
        print(stamp + line, flush=True)
        self.summary.append(stamp + line)
        (self.work / "summary.txt").write_text("\n".join(self.summary) + "\n")

    def pack(self) -> None:
        (self.work / "results.json").write_text(json.dumps(self.results, indent=1) + "\n")
        if not self.args.pack:
            return
        tmp = Path(str(self.args.pack) + ".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(self.work, arcname="proof")
        os.replace(tmp, self.args.pack)

    def run(self, name: str, cmd: list[str], timeout: float, env: dict | None = None, cwd: Path | None = None,
            stdin: str | None = None, log: Path | None = None) -> tuple[int, str, float]:
        """Run a command with its own time limit; its output goes to `log` (and is returned)."""
        timeout = max(5.0, min(timeout, self.left()))
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=cwd or ROOT, env=env, input=stdin, capture_output=True, text=True,
                                  timeout=timeout)
            rc, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            out = f"{exc.stdout or ''}{exc.stderr or ''}\n# TIMED OUT after {timeout:.0f} s"
        wall = time.monotonic() - started
        if log is not None:
            log.write_text(f"$ {shlex.join(cmd)}\n# rc={rc} wall={wall:.1f}s\n{out}")
        self.results["steps"].setdefault(name, []).append({"rc": rc, "wall_s": round(wall, 1)})
        return rc, out, wall

    # ------------------------------------------------------------------ 1. setup

    def setup(self) -> None:
        facts = self.work / "facts"
        for name, cmd in {"nvidia-smi.txt": ["nvidia-smi"],
                          "gpu.csv": ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                                      "--format=csv,noheader"],
                          "os.txt": ["sh", "-c", "uname -a; . /etc/os-release; echo $PRETTY_NAME; nproc; free -g"],
                          "python.txt": [sys.executable, "-c", "import sys, site; print(sys.version); "
                                         "print(sys.executable); print(site.getsitepackages())"]}.items():
            if shutil.which(cmd[0]) or cmd[0] == sys.executable:
                self.run("facts", cmd, 60, log=facts / name)
        gpu = (facts / "gpu.csv").read_text().splitlines()[-1] if (facts / "gpu.csv").exists() else "no GPU"
        self.results["gpu"] = gpu
        self.say(f"GPU: {gpu}")

        venv = RELEASE / "venv"
        site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        if not (venv / "bin" / "python").exists():
            rc, out, _ = self.run("venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)], 120)
            if rc != 0:
                raise SystemExit(f"venv: {out}")
        site.mkdir(parents=True, exist_ok=True)
        # The machine's own torch (and the rest of its image) after the release's packages: a .pth
        # line that runs site.addsitedir, so the image's own .pth files are processed too.
        machine = [p for p in __import__("site").getsitepackages() if Path(p).is_dir()]
        (site / "zz_machine_image.pth").write_text(
            "".join(f"import site; site.addsitedir({p!r})\n" for p in machine))
        for part in self.args.parts:
            self.extract(part, site)
        if self.args.install_only:
            return
        current = INSTALL_ROOT / "current"
        if current.is_symlink() or current.exists():
            current.unlink()
        current.symlink_to(RELEASE)
        (RELEASE / ".complete").touch()  # laid out whole, as role sglang_build marks a release it checked
        for directory in ("/var/lib/sglang", "/var/lib/sglang/huggingface", "/var/cache/sglang/flashinfer",
                          "/var/cache/sglang/triton", "/var/cache/sglang/torch", "/etc/sglang"):
            Path(directory).mkdir(parents=True, exist_ok=True)
        if self.args.ansible:
            target = Path("/tmp/sglang-proof-ansible")
            self.run("ansible-install", [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                         "--no-compile", "--target", str(target),
                                         *map(str, sorted(Path(self.args.ansible).glob("*.whl")))], 120,
                     log=facts / "ansible-install.log")
            self.ansible = [sys.executable, str(target / "bin" / "ansible-playbook")]
            self.ansible_env = {"PYTHONPATH": str(target)}
        else:
            self.ansible = [shutil.which("ansible-playbook") or "ansible-playbook"]
            self.ansible_env = {}
        rc, out, _ = self.run("models", [sys.executable, str(ROOT / "tests/harness/synthetic_model.py"), "llama-pair",
                                         "--root", str(MODELS), *(["--random-draft"] if self.args.random_draft else [])],
                              120, log=facts / "models.log")
        self.say(f"models: rc={rc} {out.strip().splitlines()[-1] if out.strip() else ''}")
        probe = ("import json, importlib.metadata as m\nout = {}\n"
                 "for d in ('sglang', 'sglang-kernel', 'flashinfer-python', 'torch', 'transformers', 'tokenizers',"
                 " 'triton', 'xgrammar', 'fastapi', 'uvicorn', 'pydantic'):\n"
                 "    try: out[d] = m.version(d)\n    except Exception as e: out[d] = repr(e)\n"
                 "import torch\nout['torch.cuda'] = torch.version.cuda\n"
                 "out['cuda_available'] = torch.cuda.is_available()\n"
                 "if out['cuda_available']:\n    out['device'] = torch.cuda.get_device_name(0)\n"
                 "    out['capability'] = torch.cuda.get_device_capability(0)\n"
                 "    import sgl_kernel, os\n    out['sgl_kernel_file'] = sgl_kernel.common_ops.__file__\n"
                 "print(json.dumps(out))\n")
        if self.args.rehearse:
            shutil.copytree(SIM_PACKAGE, SIM_DIR / SIM_PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"),
                            dirs_exist_ok=True)
        if not self.args.rehearse:
            rc, out, wall = self.run("versions", [str(venv / "bin" / "python"), "-c", probe], 180,
                                     log=facts / "versions.log")
            try:
                self.results["versions"] = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                self.results["versions"] = {"error": out[-2000:]}
            self.say(f"versions (rc={rc}, {wall:.1f}s, import sgl_kernel included): {json.dumps(self.results['versions'])}")

    def extract(self, part: str, site: Path) -> None:
        folder = Path(part)
        done = site / f".extracted-{folder.name}"
        if not (folder / "MANIFEST.json").exists() and done.exists():  # carried and extracted by an earlier call
            self.say(f"{folder.name}: extracted by an earlier call ({len(json.loads(done.read_text()))} distributions)")
            return
        manifest = json.loads((folder / "MANIFEST.json").read_text())
        if done.exists() and done.read_text() == (folder / "MANIFEST.json").read_text():
            self.say(f"{folder.name}: {len(manifest)} distributions already extracted")
            return
        started = time.monotonic()
        for entry in manifest:
            if entry.get("dest", "release") != "release":  # another release's or a file (tests/device/testbed.py)
                continue
            archive = folder / entry["archive"]
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()
            if digest != entry["sha256"]:
                raise SystemExit(f"{archive}: sha256 {digest}, MANIFEST.json says {entry['sha256']}")
            with tarfile.open(archive, "r:xz") as tar:
                tar.extractall(site, filter="data")
        done.write_text((folder / "MANIFEST.json").read_text())
        self.say(f"{folder.name}: {len(manifest)} distributions extracted in {time.monotonic() - started:.1f}s")

    # ------------------------------------------------------------------ 2. render

    def role_vars(self, overrides: dict[str, Any]) -> dict[str, Any]:
        base = {
            "sglang_server_model_path": str(MODELS / "llama-tiny-target"),
            "sglang_server_speculative_draft_model_path": str(MODELS / "llama-tiny-draft"),
            "sglang_server_served_model_name": "test-org/llama-tiny",
            "sglang_server_model_module": "llama",
            # Models made here, not staged by sglang_model (no manifest); the pre-start checks are
            # the Kimi-K2.5 interface checks (role sglang_eagle3_patch).
            "sglang_server_model_manifest_check": False,
            "sglang_server_preflight_checks": False,
            "sglang_server_tp_size": 1,
            "sglang_server_gpu_count": 1,
            "sglang_server_mem_fraction_static": 0.3,
            "sglang_server_cuda_graph_max_bs": 8,
            "sglang_server_attention_backend": "triton",
            "sglang_server_extra_args": self.extra_args,
            # The release current points at, recorded as role sglang_build records its releases (the render
            # playbook's tasks_from switch: ansible_local.sglang_build, which role sglang_server reads).
            "sglang_proof_release": str((INSTALL_ROOT / "current").resolve()),
        }
        if self.args.rehearse:
            base["sglang_server_launch_module"] = "sglang_sim"
            base["sglang_server_launch_env"] = {
                "PYTHONPATH": str(SIM_DIR), "SGLANG_SIM_SGLANG_DIR": "auto",
                "SGLANG_SIM_NOISE_PCT": "5.0", "SGLANG_SIM_START_NOISE_PCT": "0.5",
                "SGLANG_SIM_LOAD_SECONDS": "2", "SGLANG_SIM_DECODE_TOK_S": "400",
                "SGLANG_SIM_ACCEPT_FIRST": "0.99", "SGLANG_SIM_ACCEPT_DECAY": "1"}
        base.update(overrides)
        return base

    def render(self, label: str, overrides: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        folder = self.work / "render"
        inventory = folder / "inventory.ini"
        inventory.write_text(f"[gpu_hosts]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
        extra = folder / f"vars-{label}.json"
        extra.write_text(json.dumps(self.role_vars(overrides), indent=1) + "\n")
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP="/tmp/ansible-local",
                   ANSIBLE_REMOTE_TEMP="/tmp/ansible-remote", **self.ansible_env)
        cmd = [*self.ansible, "-i", str(inventory), "tests/device/sglang_serve_render.yml", "-e", "@" + str(extra)]
        rc, out, wall = self.run("render", cmd, 180, env=env, log=folder / f"ansible-{label}.log")
        recap = re.search(r"localhost\s*:\s*(ok=.*)", out)
        self.say(f"render {label}: rc={rc} {wall:.1f}s {recap.group(1).strip() if recap else 'no recap'}")
        if rc != 0:
            raise SystemExit(f"the role's render failed ({label}): see render/ansible-{label}.log")
        shutil.copy(UNIT, folder / f"{SERVICE}-{label}.service")
        shutil.copy(ENV_FILE, folder / f"{SERVICE}-{label}.env")  # no secret here: no API key, no token
        argv, env_vars, workdir = parse_unit(UNIT.read_text(), ENV_FILE.read_text())
        (folder / f"argv-{label}.json").write_text(json.dumps({"argv": argv, "env": env_vars, "cwd": workdir},
                                                              indent=1) + "\n")
        self.workdir = workdir
        return argv, env_vars

    # ------------------------------------------------------------------ 3. serve

    def start(self, label: str, argv: list[str], env_vars: dict[str, str]) -> None:
        self.stop()
        self.session += 1
        log = self.work / "server" / f"server-{self.session}-{label}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "PYTHONHOME"))}
        env.update(NCCL_ENV)
        env.update(env_vars)
        self.log_handle = open(log, "wb")
        self.proc = subprocess.Popen(argv, cwd=self.workdir, env=env, stdout=self.log_handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.state_file.write_text(json.dumps({"pid": self.proc.pid, "restarts": 0, "exit_status": None}))
        self.current_log = log
        self.say(f"session {self.session} ({label}): started pid {self.proc.pid}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        try:  # any worker left in the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.state_file.write_text(json.dumps({"pid": self.proc.pid, "restarts": 0,
                                               "exit_status": self.proc.returncode}))
        self.proc = None
        if self.log_handle:
            self.log_handle.close()
        deadline, port_free_at = time.monotonic() + 30, None
        while time.monotonic() < deadline:  # the port free again, and the GPU (at most 10 s more)
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((HOST, PORT))
                    port_free_at = port_free_at or time.monotonic()
                except OSError:
                    pass
            if port_free_at is not None:
                busy = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                                      capture_output=True, text=True).stdout.strip() if shutil.which("nvidia-smi") else ""
                if not busy or time.monotonic() - port_free_at > 10:
                    return
            time.sleep(0.5)

    def wait_ready(self, timeout: float, step: int = 10) -> dict[str, Any]:
        """tasks/wait.yml: sglang_ready.py --seconds STEP until its rc is not 3, up to the timeout."""
        systemctl = ROOT / "tests/device/sglang_serve_systemctl.py"
        (self.bin / "systemctl").write_text(
            f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(systemctl))} \"$@\"\n")
        (self.bin / "systemctl").chmod(0o755)
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '')}",
                   SGLANG_PROOF_UNIT_STATE=str(self.state_file))
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        started = time.monotonic()
        lines, first_answer = [], None
        for _ in range(max(1, math.ceil(timeout / step))):
            if first_answer is None:
                first_answer = raw_exchange("GET", "/health", timeout=2.0)
                if first_answer is not None:
                    (self.work / "recordings" / "health-first-answer.http").write_bytes(first_answer)
            rc, out, _ = self.run("ready", [python, str(READY), "--url", URL, "--unit", SERVICE, "--seconds",
                                            str(step), "--restarts", "0"], step + 30, env=env)
            lines.append(out.strip())
            if rc != 3 or self.left() < 30:
                break
        waited = time.monotonic() - started
        result = {"rc": rc, "waited_s": round(waited, 1), "polls": len(lines), "last": lines[-1][-600:]}
        self.say(f"session {self.session}: readiness rc={rc} after {waited:.1f}s ({len(lines)} probe calls): "
                 f"{lines[-1][-300:]}")
        return result

    def serve(self, label: str, overrides: dict[str, Any], timeout: float, during=None) -> dict[str, Any]:
        argv, env_vars = self.render(label, overrides)
        self.start(label, argv, env_vars)
        pending = during() if during else None
        ready = self.wait_ready(timeout)
        if pending is not None:
            self.collect_bad(pending)
        session = {"session": self.session, "label": label, "settings": overrides, "ready": ready,
                   "log": self.current_log.name, "argv": argv[argv.index("--") + 1:] if "--" in argv else argv}
        self.results["sessions"].append(session)
        if ready["rc"] != 0:
            tail = self.current_log.read_text(errors="replace")[-3000:]
            self.say(f"session {self.session}: NOT READY; server log tail:\n{tail}")
        return session

    # ------------------------------------------------------------------ 4. bench, recordings, metrics

    def bench(self, label: str, runs: int = 10) -> dict[str, Any] | None:
        out = self.work / "bench" / f"{self.session:02d}-{label}.json"
        env_json = json.dumps({"session": f"proof-{self.session}", "host": socket.gethostname(),
                               "gpu": self.results.get("gpu"), "proof": "tests/device/sglang_serve_proof.py"})
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        cmd = [python, str(BENCH), "--url", URL, "--api", "native", "--runs", str(runs), "--warmup", "1",
               "--concurrency", "1", "--max-tokens", "256", "--input-len", "128", "--timeout", "120",
               "--label", label, "--env-json", "/dev/stdin", "--json", str(out)]
        rc, text, wall = self.run("bench", cmd, 240, stdin=env_json,
                                  log=self.work / "bench" / f"{self.session:02d}-{label}.txt")
        data = json.loads(out.read_text()) if out.exists() else None
        if data:
            speeds = [r["tok_s"] for r in data["runs"] if r.get("ok")]
            cv = statistics.stdev(speeds) / statistics.fmean(speeds) if len(speeds) > 1 else None
            self.say(f"bench {label} (session {self.session}): rc={rc} {wall:.1f}s mean {data.get('mean_tok_s') or 0:.1f} "
                     f"tok/s over {len(speeds)} runs, CV {cv if cv is None else f'{cv:.4f}'}, accept length "
                     f"{data.get('accept_length')} (server: {data.get('server_avg_spec_accept_length')})")
            for session in self.results["sessions"]:
                if session["session"] == self.session:
                    session.setdefault("bench", []).append({"label": label, "file": out.name, "tok_s": speeds,
                                                            "mean": data.get("mean_tok_s"), "cv": cv,
                                                            "accept_length": data.get("accept_length"),
                                                            "server_accept": data.get("server_avg_spec_accept_length")})
        else:
            self.say(f"bench {label}: rc={rc}, no result: {text[-600:]}")
        return data

    def probe(self, label: str) -> dict[str, Any] | None:
        """The correctness probe (role sglang_bench's files/sglang_correctness.py) against the server."""
        folder = self.work / "correctness"
        folder.mkdir(exist_ok=True)
        out = folder / f"{label}.json"
        rc, text, wall = self.run("probe", [sys.executable, str(CORRECTNESS), "probe", "--url", URL, "--label", label,
                                            "--model", "test-org/llama-tiny", "--out", str(out)], 180,
                                  log=folder / f"{label}.txt")
        last = text.strip().splitlines()[-1][:300] if text.strip() else ""
        self.say(f"probe {label} (session {self.session}): rc={rc} {wall:.1f}s {last}")
        return json.loads(out.read_text()) if out.exists() else None

    def judge(self, name: str, candidate: str, reference: str, floor: str) -> None:
        self.compare(name, "verdict", {"--candidate": candidate, "--reference": reference, "--floor": floor},
                     f"{candidate} against {reference}, floor {floor}")

    def lossless(self, name: str, speculative: str, plain: str, floor: str) -> None:
        self.compare(name, "lossless", {"--speculative": speculative, "--plain": plain, "--floor": floor},
                     f"{plain} against {speculative}, floor {floor}")

    def compare(self, name: str, command: str, probes: dict[str, str], what: str) -> None:
        folder = self.work / "correctness"
        argv = [sys.executable, str(CORRECTNESS), command]
        for option, label in probes.items():
            argv += [option, str(folder / f"{label}.json")]
        rc, text, _ = self.run("verdict", [*argv, "--out", str(folder / f"verdict-{name}.json")], 60,
                               log=folder / f"verdict-{name}.txt")
        try:
            report = json.loads(text)["report"]
        except (ValueError, KeyError):
            report = text[-400:]
        self.say(f"{command} {name} ({what}): rc={rc}\n{report}")

    def correctness(self) -> None:
        """Greedy agreement on the real server, every probe on a flushed prefix cache: two probes of a
        speculative session (the floor), two of a start without speculation (EAGLE-3 is lossless: the
        target model's own tokens; and its own floor), then a restart of the speculative settings."""
        plan = [("spec", {}, ["spec-1", "spec-2"]),
                ("nospec", {"sglang_server_speculative_algorithm": ""}, ["nospec-1", "nospec-2"]),
                ("spec-again", {}, ["spec-restart"])]
        for label, overrides, probes in plan:
            if self.left() < 90:
                self.say(f"no time left for {label}")
                break
            session = self.serve(label, overrides, timeout=min(240, self.left() - 40))
            if session["ready"]["rc"] != 0:
                break
            for name in probes:
                self.probe(name)
            self.pack()
        self.stop()
        folder = self.work / "correctness"
        have = {f.stem for f in folder.glob("*.json")}
        if {"spec-1", "spec-2"} <= have:
            self.judge("floor-flushed", "spec-2", "spec-1", "spec-2")
        if {"spec-1", "spec-2", "nospec-1"} <= have:
            self.lossless("lossless", "spec-1", "nospec-1", "spec-2")
        if {"spec-1", "spec-2", "nospec-2"} <= have:
            self.lossless("lossless-2", "spec-2", "nospec-2", "spec-1")
        if {"nospec-1", "nospec-2"} <= have:
            self.judge("floor-nospec", "nospec-2", "nospec-1", "nospec-2")
        if {"spec-restart", "spec-1", "spec-2"} <= have:
            self.judge("restart", "spec-restart", "spec-1", "spec-2")

    def record(self) -> None:
        """Raw HTTP exchanges with the server for the contract test (tests/roles/sglang_server)."""
        folder = self.work / "recordings"
        model = "test-org/llama-tiny"
        requests: list[tuple[str, str, str, dict | None]] = [
            ("health", "GET", "/health", None),
            ("health-generate", "GET", "/health_generate", None),
            ("get-model-info", "GET", "/get_model_info", None),
            ("model-info", "GET", "/model_info", None),
            ("get-server-info", "GET", "/get_server_info", None),
            ("server-info", "GET", "/server_info", None),
            ("get-load", "GET", "/get_load", None),
            ("v1-loads", "GET", "/v1/loads", None),
            ("v1-models", "GET", "/v1/models", None),
            ("generate", "POST", "/generate",
             {"text": PROMPT, "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True}}),
            ("generate-stream", "POST", "/generate",
             {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0.0, "ignore_eos": True},
              "stream": True}),
            ("chat", "POST", "/v1/chat/completions",
             {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16,
              "temperature": 0.0}),
            ("chat-stream", "POST", "/v1/chat/completions",
             {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16,
              "temperature": 0.0, "ignore_eos": True, "stream": True,
              "stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
            ("completions", "POST", "/v1/completions",
             {"model": model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0.0}),
            ("completions-stream", "POST", "/v1/completions",
             {"model": model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0.0, "stream": True,
              "stream_options": {"include_usage": True}}),
            ("generate-no-prompt", "POST", "/generate", {"sampling_params": {"max_new_tokens": 4}}),
            ("chat-no-messages", "POST", "/v1/chat/completions", {"model": model, "max_tokens": 4}),
            ("not-found", "GET", "/no_such_endpoint", None),
            ("method-not-allowed", "POST", "/get_server_info", {}),
        ]
        index = []
        for name, method, path, body in requests:
            raw = raw_exchange(method, path, body, timeout=60.0)
            if raw is not None:
                (folder / f"{name}.http").write_bytes(raw)
            index.append({"name": name, "method": method, "path": path, "body": body,
                          "status": status_of(raw), "file": f"{name}.http" if raw is not None else None})
        # An aborted stream: the client closes after the first event (the abort counter, then /metrics).
        aborted = raw_exchange("POST", "/generate", {"text": PROMPT, "stream": True, "sampling_params": {
            "max_new_tokens": 2000, "temperature": 0.0, "ignore_eos": True}}, timeout=30.0, stop_after=b"data:")
        index.append({"name": "aborted-stream", "method": "POST", "path": "/generate", "status": status_of(aborted),
                      "file": None, "note": "closed by the client after the first event"})
        time.sleep(2.0)
        metrics = raw_exchange("GET", "/metrics", timeout=30.0)
        if metrics is not None:
            (folder / "metrics.http").write_bytes(metrics)
        index.append({"name": "metrics", "method": "GET", "path": "/metrics", "body": None,
                      "status": status_of(metrics), "file": "metrics.http"})
        (folder / "index.json").write_text(json.dumps({"server": "sglang", "url": URL, "requests": index},
                                                      indent=1) + "\n")
        self.say("recorded: " + ", ".join(f"{e['name']}={e['status']}" for e in index))
        self.metric_names(metrics)

    def metric_names(self, raw: bytes | None) -> None:
        body = http_body(raw).decode("utf-8", "replace") if raw else ""
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
        series = sorted({m for m in re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", body, re.M)})
        wanted = sorted(set(re.findall(r"sglang:[a-z_]+", ALERTS.read_text())))
        found = {name: name in series or name in types for name in wanted}
        (self.work / "recordings" / "metrics-check.json").write_text(json.dumps(
            {"alert_rule_names": found, "types": types, "series": series}, indent=1) + "\n")
        self.results["metrics"] = {"found": sorted(n for n, ok in found.items() if ok),
                                   "missing": sorted(n for n, ok in found.items() if not ok),
                                   "families": len(types), "series_names": len(series)}
        self.say(f"/metrics: {len(types)} families; the alert rules' names found: {self.results['metrics']['found']}; "
                 f"missing: {self.results['metrics']['missing']}")

    def bad_launches(self) -> list[subprocess.Popen]:
        """The launcher's answer to a bad flag and to a bad value (argparse: exit 2), run beside the start."""
        python = str(RELEASE / "venv" / "bin" / "python")
        module = "sglang_sim" if self.args.rehearse else "sglang.launch_server"
        procs = []
        for name, extra in (("bad-flag", ["--no-such-flag", "1"]), ("bad-value", ["--tp-size", "two"])):
            cmd = [python, str(INSTALL_ROOT / "bin" / "sglang_launch.py"), "--module", module, "--",
                   "--model-path", str(MODELS / "llama-tiny-target"), *extra]
            out = open(self.work / "errors" / f"{name}.txt", "wb")
            out.write(f"$ {shlex.join(cmd)}\n".encode())
            out.flush()
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            if self.args.rehearse:
                env["PYTHONPATH"] = str(SIM_DIR)
            procs.append((name, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                 cwd="/tmp"), out, time.monotonic()))
        return procs

    def collect_bad(self, procs) -> None:
        for name, proc, out, started in procs:
            try:
                rc = proc.wait(timeout=max(1.0, 120 - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            out.write(f"\n# rc={rc} (collected {time.monotonic() - started:.1f}s after its start)\n".encode())
            out.close()
            text = (self.work / "errors" / f"{name}.txt").read_text(errors="replace").strip().splitlines()
            self.say(f"{name}: rc={rc}: {' | '.join(text[-3:-1])[:400]}")

    # ------------------------------------------------------------------ 5. tuning

    def tune(self, candidates: int, runs: int) -> None:
        folder = self.work / "tune"
        state = folder / "state.json"
        restart, measure = 1.5, 0.5
        settings = {"num_steps": [1, 2, 3, 4, 5, 6], "eagle_topk": [1], "num_draft_tokens": [2, 3, 4, 5, 6, 7],
                    "objective": "single", "concurrency": 16, "weight": 0.5, "min_gain_pct": 1.0,
                    "baseline": False, "restart_minutes": restart, "measure_minutes": measure,
                    "budget_minutes": restart + candidates * (restart + measure) + 2 * measure + 3 * restart,  # the end's reserve
                    "start": START}
        python = sys.executable
        rc, out, _ = self.run("tune", [python, str(TUNE), "plan", "--state", str(state)], 30,
                              stdin=json.dumps(settings), log=folder / "plan.log")
        self.say(f"tune plan: rc={rc} {out.strip()[:500]}")
        if rc != 0:
            return
        for index in range(candidates):
            rc, out, _ = self.run("tune", [python, str(TUNE), "next", "--state", str(state)], 30,
                                  log=folder / f"next-{index + 1}.log")
            step = json.loads(out)
            candidate = step["candidate"]
            self.say(f"tune next {index + 1}: {json.dumps(step)}")
            if candidate is None:
                break
            if self.left() < 150:
                self.say("tune: stopped, too little time left for another restart")
                break
            label = candidate["label"]
            overrides = {"sglang_server_speculative_num_steps": candidate["num_steps"],
                         "sglang_server_speculative_eagle_topk": candidate["eagle_topk"],
                         "sglang_server_speculative_num_draft_tokens": candidate["num_draft_tokens"],
                         "sglang_server_env_unset": ["SGLANG_ENABLE_SPEC_V2"] if candidate["eagle_topk"] > 1 else []}
            session = self.serve(label, overrides, timeout=min(240, self.left() - 60))
            data = self.bench(label, runs) if session["ready"]["rc"] == 0 else None
            result = self.work / "bench" / f"{self.session:02d}-{label}.json"
            if data is not None and result.exists():
                cmd = [python, str(TUNE), "record", "--state", str(state), "--label", label, "--result", str(result)]
                self.run("tune", cmd, 30, log=folder / f"record-{index + 1}.log")
            else:
                why = f"not ready: {session['ready']['last'][-400:]}" if session["ready"]["rc"] else "the bench failed"
                self.run("tune", [python, str(TUNE), "record", "--state", str(state), "--label", label, "--failed", "-"],
                         30, stdin=why, log=folder / f"record-{index + 1}.log")
            self.pack()
        rc, out, _ = self.run("tune", [python, str(TUNE), "report", "--state", str(state), "--out-dir", str(folder)],
                              60, log=folder / "report.log")
        if rc != 0:
            rc, out, _ = self.run("tune", [python, str(TUNE), "report", "--state", str(state), "--out-dir",
                                           str(folder), "--no-plot"], 60, log=folder / "report.log")
        try:
            result = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            result = {"error": out[-1000:]}
        self.results["tune"] = result
        self.say(f"tune report: rc={rc} serving {result.get('serving_label')} winner {result.get('winner')} "
                 f"after {result.get('candidates')} candidates")

    # ------------------------------------------------------------------ 6. noise

    def noise(self) -> None:
        by_settings: dict[str, list[dict]] = {}
        rows = []
        for session in self.results["sessions"]:
            for bench in session.get("bench", []):
                speeds = bench["tok_s"]
                if len(speeds) < 2:
                    continue
                key = json.dumps(spec_point(session["settings"]), sort_keys=True)
                rows.append({"session": session["session"], "label": bench["label"], "settings": json.loads(key),
                             "runs": len(speeds), "mean_tok_s": statistics.fmean(speeds),
                             "cv_within": statistics.stdev(speeds) / statistics.fmean(speeds)})
                by_settings.setdefault(key, []).append(rows[-1])
        across = []
        for key, group in by_settings.items():
            means = [g["mean_tok_s"] for g in group]
            sessions = sorted({g["session"] for g in group})
            if len(sessions) > 1:
                across.append({"settings": json.loads(key), "sessions": sessions, "means": means,
                               "cv_across_restarts": statistics.stdev(means) / statistics.fmean(means)})
        result = {"within_session": rows, "across_restarts": across,
                  "cv_within_median": statistics.median([r["cv_within"] for r in rows]) if rows else None,
                  "cv_within_max": max([r["cv_within"] for r in rows]) if rows else None}
        (self.work / "noise.json").write_text(json.dumps(result, indent=1) + "\n")
        self.results["noise"] = result
        self.say("noise: within sessions " + ", ".join(f"s{r['session']} {r['cv_within']:.4f}" for r in rows)
                 + "; across restarts " + ", ".join(f"{a['settings']} {a['cv_across_restarts']:.4f} "
                                                    f"(sessions {a['sessions']})" for a in across))


def spec_point(settings: dict[str, Any]) -> dict[str, int]:
    return {"num_steps": int(settings.get("sglang_server_speculative_num_steps", START["num_steps"])),
            "eagle_topk": int(settings.get("sglang_server_speculative_eagle_topk", START["eagle_topk"])),
            "num_draft_tokens": int(settings.get("sglang_server_speculative_num_draft_tokens",
                                                 START["num_draft_tokens"]))}


# ---------------------------------------------------------------------- unit files and raw HTTP


def parse_unit(unit: str, env_file: str) -> tuple[list[str], dict[str, str], str]:
    """ExecStart (systemd's quoting as the role's template writes it), EnvironmentFile, WorkingDirectory."""
    joined = re.sub(r"\\\n", " ", unit)
    exec_line = re.search(r"^ExecStart=(.*)$", joined, re.M).group(1)
    argv = [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(exec_line)]
    workdir = re.search(r"^WorkingDirectory=(.*)$", joined, re.M).group(1).strip()
    env = {}
    for line in env_file.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        words = shlex.split(value)
        env[key.strip()] = words[0] if words else ""
    return argv, env, workdir


def raw_exchange(method: str, path: str, body: Any = None, timeout: float = 30.0,
                 stop_after: bytes | None = None) -> bytes | None:
    """One HTTP/1.1 request (Connection: close); the response's bytes as sent (head and body, chunked
    framing kept), or None when nothing answers. stop_after: close once those bytes were seen."""
    data = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{PORT}", "Connection: close", "Accept: */*"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    try:
        with socket.create_connection((HOST, PORT), timeout=timeout) as sock:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
            chunks, deadline = [], time.monotonic() + timeout
            while time.monotonic() < deadline:
                piece = sock.recv(65536)
                if not piece:
                    break
                chunks.append(piece)
                if stop_after is not None and stop_after in b"".join(chunks).split(b"\r\n\r\n", 1)[-1]:
                    break
            return b"".join(chunks)
    except OSError:
        return None


def status_of(raw: bytes | None) -> int | None:
    if not raw:
        return None
    match = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(match.group(1)) if match else None


def http_body(raw: bytes) -> bytes:
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--parts", nargs="*", default=[], help="folders of sglang_serve_bundle.py's parts")
    ap.add_argument("--ansible", help="folder of ansible-core wheels (default: the ansible-playbook on PATH)")
    ap.add_argument("--pack", type=Path, help="write a .tar.gz of WORK here after every phase")
    ap.add_argument("--deadline-s", type=float, default=560)
    ap.add_argument("--candidates", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--extra-arg", action="append", default=[], help="appended to sglang_server_extra_args")
    ap.add_argument("--rehearse", action="store_true", help="the role's simulator stands for SGLang (no GPU)")
    ap.add_argument("--install-only", action="store_true", help="lay out the release and extract --parts, then stop")
    ap.add_argument("--correctness", action="store_true",
                    help="only the correctness probes: a session probed twice, a start without speculation "
                         "probed twice, a restart")
    ap.add_argument("--random-draft", action="store_true", help="models whose greedy tokens vary (synthetic_model.py)")
    args = ap.parse_args()
    proof = Proof(args)
    if args.install_only:
        proof.setup()
        return 0
    if args.correctness:
        try:
            proof.setup()
            proof.correctness()
        finally:
            proof.stop()
            proof.say(f"done in {time.monotonic() - proof.started:.1f}s")
            proof.pack()
        return 0
    try:
        proof.setup()
        proof.pack()
        first = proof.serve("start", {}, timeout=min(330, proof.left() - 120), during=proof.bad_launches)
        if first["ready"]["rc"] != 0 and not args.rehearse:
            # Once: the same without CUDA graphs (the start that served on this machine before).
            proof.extra_args.append("--disable-cuda-graph")
            proof.say("retrying the first start with --disable-cuda-graph")
            first = proof.serve("start-nograph", {}, timeout=min(240, proof.left() - 120))
        proof.pack()
        if first["ready"]["rc"] == 0:
            proof.bench("eagle3", args.runs)
            proof.record()
            proof.pack()
            proof.tune(args.candidates, args.runs)
            proof.pack()
            # As playbooks/tasks/tune_host.yml ends: a restart on the settings the tuning serves; then more restarts on
            # them while the time lasts, for three sessions of the same settings (the noise across restarts).
            serving = (proof.results.get("tune") or {}).get("serving") or START
            overrides = {"sglang_server_speculative_num_steps": serving["num_steps"],
                         "sglang_server_speculative_eagle_topk": serving["eagle_topk"],
                         "sglang_server_speculative_num_draft_tokens": serving["num_draft_tokens"]}
            label = "serving"
            while proof.left() > 120 and sum(1 for s in proof.results["sessions"]
                                             if spec_point(s["settings"]) == serving and s.get("bench")) < 3:
                final = proof.serve(label, overrides, timeout=min(240, proof.left() - 40))
                if final["ready"]["rc"] != 0:
                    break
                proof.bench(label, args.runs)
                proof.pack()
                label = "serving-again"
    finally:
        proof.stop()
        proof.noise()
        proof.say(f"done in {time.monotonic() - proof.started:.1f}s")
        proof.pack()
    return 0


if __name__ == "__main__":
    sys.exit(main())
