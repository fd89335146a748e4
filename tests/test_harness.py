"""The test harness on this machine: containers.conf merged, not overwritten; failures in one line."""

import json
import os
import subprocess
import sys
import time

import pytest

from background import Background
from hostsetup import CONTAINERS_SETTINGS, merge_ini
from repo import ROOT
from steps import StepFailed, guarded, run


def test_empty_file_gets_every_section():
    out = merge_ini("", CONTAINERS_SETTINGS)
    assert '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]' in out
    assert '[engine]\nruntime = "runc"' in out
    assert '[network]\nnetwork_backend = "netavark"' in out


def test_existing_values_replaced_in_place_and_others_kept():
    text = ('[containers]\nlog_driver = "k8s-file"\ndefault_ulimits = []\n\n'
            '[engine]\n# comment\nruntime = "crun"\nevents_logger = "file"\n')
    out = merge_ini(text, CONTAINERS_SETTINGS)
    assert 'log_driver = "k8s-file"' in out and 'events_logger = "file"' in out and "# comment" in out
    assert 'runtime = "crun"' not in out and out.count("runtime =") == 1
    assert out.count("default_ulimits =") == 1


def test_merge_is_idempotent():
    once = merge_ini('[network]\nx = 1\n', CONTAINERS_SETTINGS)
    assert merge_ini(once, CONTAINERS_SETTINGS) == once
    assert once.count("[network]") == 1 and "x = 1" in once and 'network_backend = "netavark"' in once


def test_a_failing_step_names_itself_and_keeps_the_tools_stderr():
    with pytest.raises(StepFailed) as err:
        run("podman run", [sys.executable, "-c", "import sys; print('noise'); "
                           "sys.stderr.write('Error: netavark: No such file or directory (os error 2)\\n'); sys.exit(127)"])
    message = str(err.value)
    assert message.startswith("podman run: ") and "exited 127" in message
    assert "Error: netavark: No such file or directory (os error 2)" in message and "\n" not in message


def test_a_missing_tool_is_one_line_too():
    with pytest.raises(StepFailed, match=r"^debootstrap: no-such-tool-4711 is not installed"):
        run("debootstrap", ["no-such-tool-4711"])


def test_guarded_prints_one_line_and_no_traceback(capsys):
    def main():
        run("podman network create", [sys.executable, "-c", "import sys; sys.stderr.write('Error: boom\\n'); sys.exit(125)"])
        return 0
    assert guarded("hostsetup", main) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[hostsetup] FAILED: podman network create: ") and "Error: boom" in err[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="hostsetup runs as root")
def test_hostsetup_self_check_failure_is_one_line_with_podmans_stderr(tmp_path):
    """hostsetup with a podman whose networking is broken (netavark without iptables, as on a fresh machine)."""
    import hostsetup
    if subprocess.run(["dpkg-query", "-W", "-f=${Status}", *hostsetup.APT_PACKAGES],
                      capture_output=True, text=True).stdout.count("install ok installed") != len(hostsetup.APT_PACKAGES):
        pytest.skip("the harness packages are not installed here (run `make hostsetup`)")
    fake = tmp_path / "podman"
    fake.write_text("#!/bin/sh\ncase \"$1 $2\" in\n  'image exists') exit 0 ;;\n  'network rm'|'rm -f') exit 0 ;;\n"
                    "esac\necho 'Error: netavark: No such file or directory (os error 2)' >&2\nexit 127\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, str(ROOT / "tests/harness/hostsetup.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    failed = [line for line in proc.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "self-check" in failed[0]
    assert "Error: netavark: No such file or directory (os error 2)" in failed[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="podman images of the harness (root)")
def test_hostsetup_removes_the_images_of_earlier_recipes_only():
    import hostsetup
    from testhost import harness_or_skip

    current = harness_or_skip()["image"]
    old = f"{hostsetup.IMAGE_NAME}:{hostsetup.SUITE}-000000000000"  # an earlier recipe's tag (same layers here)
    other = "localhost/not-the-testhost:keep"  # another repository is never touched
    for ref in (old, other):
        subprocess.run(["podman", "tag", current, ref], check=True, capture_output=True)
    try:
        removed = hostsetup.prune_old_images(current)  # also any real image of an earlier recipe here
        assert old in removed and current not in removed and other not in removed
        exists = {ref: subprocess.run(["podman", "image", "exists", ref]).returncode == 0 for ref in (current, old, other)}
        assert exists == {current: True, old: False, other: True}
    finally:
        subprocess.run(["podman", "rmi", "--ignore", old, other], capture_output=True)


def another_process_finds(name):
    """The PID a new process (as Ansible's worker for each task) finds for a container, with no podman
    on its PATH: from the cache file only."""
    code = "import podman_enter, sys; print(podman_enter.container_pid(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                          env=dict(os.environ, PATH="/nonexistent", PYTHONPATH=str(ROOT / "tests" / "harness")))
    return proc.stdout.strip() or proc.stderr[-500:]


def test_podman_enter_keeps_pids_only_in_a_private_directory(tmp_path, monkeypatch):
    import podman_enter

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setattr(podman_enter, "DIRECTORY", str(shared))
    assert podman_enter._cache_file("host1") is None
    monkeypatch.setattr(podman_enter, "DIRECTORY", str(tmp_path / "private"))
    assert podman_enter._cache_file("host1") == str(tmp_path / "private" / "host1")
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o700
    assert podman_enter._cache_file("../etc/passwd") is None  # only podman's container names


def test_podman_enter_runs_inside_the_test_host_like_podman_exec_and_follows_a_restart():
    """tests/harness/podman_enter.py (nsenter) against a real test host: same user, hostname, root and
    exit status as `podman exec`; another process finds the PID in the cache file; a restarted
    container's new init is found (by both); a stopped one answers 125."""
    import time

    import podman_enter
    from testhost import TestHost, harness_or_skip

    harness = harness_or_skip()
    host = TestHost("pytest-podman-enter", harness["image"], harness["mirror"]).start()
    try:
        probe = "id -u; hostname; readlink /proc/1/exe; test -e /srv/nvidia-mirror && echo mirror; echo $PWD"
        via_podman = subprocess.run(["podman", "exec", host.name, "bash", "-c", probe],
                                    capture_output=True, text=True, check=True).stdout
        assert host.sh(probe).stdout == via_podman == f"0\n{host.name}\n/usr/lib/systemd/systemd\nmirror\n/\n"
        proc = host.sh("echo out; echo err >&2; exit 7", check=False)
        assert (proc.returncode, proc.stdout, proc.stderr) == (7, "out\n", "err\n")
        with pytest.raises(subprocess.CalledProcessError):
            host.sh("exit 1")
        assert "PYTEST_CURRENT_TEST" not in host.sh("env").stdout  # a clean environment: nothing of ours leaks in
        # The image's system Python keeps the bytecode of Ansible's module zips (tests/harness/zip_pycache.py).
        assert host.sh("python3 -c 'import zipimport; print(zipimport._compile_source.__module__)'").stdout == "zip_pycache\n"
        assert_ansible_pipelines_through_the_test_connection_and_records_its_cost(host.name)
        before = podman_enter.container_pid(host.name)
        assert another_process_finds(host.name) == str(before)
        subprocess.run(["podman", "restart", "-t", "5", host.name], check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while host.sh("systemctl is-system-running", check=False).stdout.strip() not in ("running", "degraded"):
            assert time.monotonic() < deadline, "the restarted test host did not boot"
            time.sleep(0.5)
        after = podman_enter.container_pid(host.name)
        assert after != before and another_process_finds(host.name) == str(after)
        assert host.sh("cat /proc/1/comm").stdout.strip() == "systemd"
        subprocess.run(["podman", "stop", "-t", "5", host.name], check=True, capture_output=True)
        stopped = host.sh("true", check=False)
        assert stopped.returncode == 125 and "not running" in stopped.stderr
    finally:
        host.remove()


def assert_ansible_pipelines_through_the_test_connection_and_records_its_cost(name):
    """The test connection (connection_plugins/sglang_testhost.py) sends a module through stdin in the one command
    that runs it, as SSH does with the project's ansible.cfg; under run_tests.py (SGLANG_TEST_RUN_COST) the
    ansible-playbook run and each command in the test host are recorded with their CPU time (run_cost.py)."""
    import tempfile

    import run_cost

    with tempfile.TemporaryDirectory() as tmp:
        play, cost = os.path.join(tmp, "ping.yml"), os.path.join(tmp, "cost.jsonl")
        with open(play, "w") as f:
            f.write("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n")
        env = dict(os.environ, ANSIBLE_CONNECTION_PLUGINS=str(ROOT / "tests" / "harness" / "connection_plugins"),
                   ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), **{run_cost.VARIABLE: cost})
        env.pop("ANSIBLE_PIPELINING", None)
        proc = subprocess.run(["ansible-playbook", "-i", f"{name},", "-e", "ansible_connection=sglang_testhost",
                               "-e", "ansible_python_interpreter=/usr/bin/python3", play],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        records = [json.loads(line) for line in open(cost, encoding="utf-8")]
        totals = run_cost.summary(cost)
    hosts = [r for r in records if r["kind"] == "host"]
    assert [r["kind"] for r in records if r["kind"] != "host"] == ["playbook"]
    assert len(hosts) == 1 and hosts[0]["piped"] and hosts[0]["host"] == name and hosts[0]["cpu"] > 0, records
    assert totals["runs"] == 1 and totals["host_commands"] == 1 and totals["runs_cpu"] >= totals["host_cpu"] > 0


def test_zip_pycache_reuses_code_by_source_text_and_only_from_a_private_directory(tmp_path):
    """tests/harness/zip_pycache.py: an import from a zip stores its code under the source's hash; the next
    import with the same source loads that code (shown by planting other code under the key); another source
    gets its own entry; a directory that is not private is not used."""
    import hashlib
    import importlib.util
    import marshal
    import zipfile

    harness = ROOT / "tests" / "harness"

    def import_from(source: str, tmpdir) -> str:
        archive = tmp_path / "mods.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("zmod.py", source)
        code = f"import zip_pycache, sys; sys.path.insert(0, {str(archive)!r}); import zmod; print(zmod.VALUE)"
        env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(harness))
        return subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    cache = tmpdir / f"zip-pycache-{os.getuid()}"
    source = "VALUE = 'compiled'\n"
    assert import_from(source, tmpdir) == "compiled"
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source.encode()).hexdigest()
    assert sorted(p.name for p in cache.iterdir()) == [key]
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    # Plant other code under the key: the next import of the same source runs it.
    (cache / key).write_bytes(marshal.dumps(compile("VALUE = 'from the cache'\n", "zmod.py", "exec")))
    assert import_from(source, tmpdir) == "from the cache"
    # Another source: its own entry, never the planted code.
    assert import_from("VALUE = 'other'\n", tmpdir) == "other"
    assert len(list(cache.iterdir())) == 2
    # A cache directory others may write to is not used (the import still works).
    cache.chmod(0o777)
    assert import_from(source, tmpdir) == "compiled"
    assert import_from("VALUE = 'third'\n", tmpdir) == "third" and len(list(cache.iterdir())) == 2


def test_the_test_targets_load_the_speed_hooks_through_pythonpath_and_the_venv_holds_none(tmp_path):
    """The Makefile's test targets put tests/harness/startup on PYTHONPATH: a Python started so loads
    zip_pycache and ansiballz_cache, then the sitecustomize it hides (Debian's, say); without it, none
    are loaded. The venv recipe writes no .pth (the operators' controller imports nothing of the tests)."""
    shadowed = tmp_path / "other"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED_RAN = True\n")
    probe = ("import builtins, sys, zipimport; print(zipimport._compile_source.__module__, "
             "'ansiballz_cache' in sys.modules, getattr(builtins, 'SHADOWED_RAN', False), "
             "any(p.endswith('tests/harness') for p in sys.path))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with_hooks = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                env=dict(env, PYTHONPATH=f"{ROOT / 'tests' / 'harness' / 'startup'}:{shadowed}"))
    assert with_hooks.stdout.split() == ["zip_pycache", "True", "True", "False"], with_hooks.stderr
    bare = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True)
    assert bare.stdout.split()[:2] == ["zipimport", "False"], bare.stderr
    recipe = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), f"VENV={tmp_path / 'venv'}", "venv"],
                            capture_output=True, text=True, check=True).stdout
    assert "pip install" in recipe, recipe
    writes = [line for line in recipe.splitlines() if ">" in line.replace(">/dev/null", "") or "cp " in line]
    assert writes == [], f"the venv recipe writes more than the requirements: {writes}"


def test_ansiballz_cache_shares_a_modules_payload_between_runs_and_searches_again_when_a_module_util_changes(tmp_path):
    """tests/harness/ansiballz_cache.py (loaded by the venv's .pth, active under `make test`): the first
    ansible-playbook run stores what Ansible's module_utils search found; the next run uses it (shown by
    planting other module_util code in the entry); a module_util changed on disk is searched again; with
    no cache directory set nothing is stored."""
    import pickle
    import sysconfig

    harness = ROOT / "tests" / "harness"
    role = tmp_path / "roles" / "probe"
    for sub in ("library", "module_utils", "tasks"):
        (role / sub).mkdir(parents=True)
    (role / "library" / "probe.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible.module_utils.probe_util import VALUE\n\n\n"
        "def main():\n    AnsibleModule(argument_spec={}).exit_json(changed=False, value=VALUE)\n\n\n"
        "if __name__ == '__main__':\n    main()\n")
    util = role / "module_utils" / "probe_util.py"
    util.write_text("VALUE = 'first'\n")
    (role / "tasks" / "main.yml").write_text(
        "- name: Probe\n  probe:\n  register: probe\n- name: Show\n  ansible.builtin.debug:\n"
        "    msg: \"VALUE={{ probe.value }}\"\n")
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  connection: local\n  roles: [probe]\n")
    site = sysconfig.get_paths()["purelib"]
    code = (f"import sys; sys.path[:0] = [{str(harness)!r}, {site!r}]; import ansiballz_cache; "
            "from ansible.cli.playbook import main; sys.exit(main())")
    cache = tmp_path / "cache"
    cache.mkdir()

    def value(cache_dir: str) -> str:
        env = dict(os.environ, SGLANG_TEST_ANSIBALLZ_CACHE=cache_dir, ANSIBLE_ROLES_PATH=str(tmp_path / "roles"),
                   ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        argv = [sys.executable, "-S", "-c", code, "-i", "localhost,", "-e",
                f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path).stdout
        assert "VALUE=" in out, out[-3000:]
        return out.split("VALUE=", 1)[1].split('"', 1)[0]

    assert value("") == "first" and not list(cache.iterdir())  # not set: nothing stored
    assert value(str(cache)) == "first"
    (entry,) = [p for p in cache.iterdir() if "-" not in p.name]  # the payload's entry (others: routing-, parsed-)
    entries, metadata, sources = pickle.loads(entry.read_bytes())
    assert str(util) in [path for path, _ in sources]
    planted = [(name, b"VALUE = 'from the cache'\n" if name.endswith("probe_util.py") else data) for name, data in entries]
    assert planted != entries
    entry.write_bytes(pickle.dumps((planted, metadata, sources)))
    assert value(str(cache)) == "from the cache"  # the next run used the entry
    util.write_text("VALUE = 'changed on disk'\n")
    assert value(str(cache)) == "changed on disk"  # a changed module_util: searched again
    assert value(str(cache)) == "changed on disk"


def test_ansiballz_cache_keeps_the_routing_table_per_yaml_text(tmp_path):
    """The same hook keeps the parsed ansible.builtin routing table (and each collection's runtime.yml)
    per YAML text: the next run uses the stored table (shown by planting a redirect in it, which only a
    run that reads the entry knows), an entry is found only under the hash of its text, and with no
    cache directory set nothing is read."""
    import pickle
    import sysconfig

    harness = ROOT / "tests" / "harness"
    site = sysconfig.get_paths()["purelib"]
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  connection: local\n  tasks:\n"
        "    - name: A module name only a planted redirect knows\n"
        "      ansible.builtin.planted_by_the_test:\n        data: PLANTED-REDIRECT-WORKS\n      register: probe\n"
        "    - name: Show\n      ansible.builtin.debug:\n        msg: \"{{ probe.ping }}\"\n")
    code = (f"import sys; sys.path[:0] = [{str(harness)!r}, {site!r}]; import ansiballz_cache; "
            "from ansible.cli.playbook import main; sys.exit(main())")
    cache = tmp_path / "cache"
    cache.mkdir()

    def run_play(cache_dir: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, SGLANG_TEST_ANSIBALLZ_CACHE=cache_dir, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        argv = [sys.executable, "-S", "-c", code, "-i", "localhost,", "-e",
                f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")]
        return subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)

    first = run_play(str(cache))
    assert first.returncode != 0 and "planted_by_the_test" in first.stdout + first.stderr  # unknown so far
    tables = {entry: pickle.loads(entry.read_bytes()) for entry in cache.glob("routing-*")}
    # ansible.builtin's table (ansible_builtin_runtime.yml): the one that routes formerly_core_ping
    builtin = [e for e, t in tables.items() if "formerly_core_ping" in t.get("plugin_routing", {}).get("modules", {})]
    assert len(builtin) == 1, list(cache.iterdir())
    entry, table = builtin[0], tables[builtin[0]]
    table["plugin_routing"]["modules"]["planted_by_the_test"] = {"redirect": "ansible.builtin.ping"}
    entry.write_bytes(pickle.dumps(table))
    planted = run_play(str(cache))
    assert planted.returncode == 0 and "PLANTED-REDIRECT-WORKS" in planted.stdout, planted.stdout[-3000:]
    assert run_play("").returncode != 0  # not set: Ansible parses the YAML itself, no redirect
    # Entries are found by the hash of the text they were parsed from: the planted table under another
    # name is not read (the run parses the YAML again and stores it under its own name).
    entry.rename(cache / "routing-0000")
    assert run_play(str(cache)).returncode != 0
    assert entry.exists() and "planted_by_the_test" not in str(pickle.loads(entry.read_bytes()))


def test_the_torchvision_double_is_the_real_wheel_less_its_native_files_and_two_guards(tmp_path):
    """TEST DOUBLE against the real thing (tests/harness/torchvision_double.py): the same files byte for
    byte but the native ones (dropped), _meta_registrations.py (the two unguarded fake registrations
    guarded, as the file's others are) and the dist-info (version +testdouble, re-hashed RECORD);
    the wheelhouse holds exactly that build."""
    import base64
    import hashlib
    import zipfile

    import sources
    import torchvision_double

    real = sources.torchvision_real()
    double = torchvision_double.build(real, tmp_path)
    with zipfile.ZipFile(real) as r, zipfile.ZipFile(double) as d:
        real_files = {n: r.read(n) for n in r.namelist()}
        double_files = {n: d.read(n) for n in d.namelist()}
    native = {n for n in real_files if torchvision_double.dropped(n)}
    assert any(n.endswith("_C.so") for n in native) and not any(torchvision_double.dropped(n) for n in double_files)
    code = {n for n in real_files if ".dist-info/" not in n} - native
    assert code == {n for n in double_files if ".dist-info/" not in n}
    changed = sorted(n for n in code if real_files[n] != double_files[n])
    assert changed == [torchvision_double.PATCHED]
    old, new = (files[torchvision_double.PATCHED].decode().splitlines() for files in (real_files, double_files))
    removed = [line for line in old if line not in new]
    assert removed == ['@torch.library.register_fake("torchvision::nms")', '@torch.library.register_fake("torchvision::qnms")']
    version = double.name.split("-")[1]
    assert version.endswith("+testdouble") and f"Version: {version}" in double_files[
        f"torchvision-{version}.dist-info/METADATA"].decode()
    for line in double_files[f"torchvision-{version}.dist-info/RECORD"].decode().splitlines():
        name, digest, size = line.split(",")
        if digest:
            expected = base64.urlsafe_b64encode(hashlib.sha256(double_files[name]).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(double_files[name]), name
    with zipfile.ZipFile(sources.WHEELS / double.name) as housed:
        assert {n: housed.read(n) for n in housed.namelist()} == double_files


def test_a_background_command_that_writes_more_than_a_pipe_holds_runs_on_while_nobody_reads(tmp_path):
    """What blocked the tuning test of molecule/sglang_bench: 1 MiB written, then a marker file; the test
    only polls for the marker, as a verifier polls its host."""
    marker = tmp_path / "reached"
    job = Background([sys.executable, "-c", f"import pathlib; print('x' * 2**20); pathlib.Path({str(marker)!r}).touch()"])
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "blocked on a full pipe"
        time.sleep(0.05)
    out, _ = job.communicate(timeout=30)
    assert job.returncode == 0 and len(out) == 2**20 + 1


def test_a_failed_jobs_digest_names_the_failing_test_through_molecules_prefixes():
    """CI shows the end of the output; a molecule verify failure ends in its destroy step. The digest
    finds pytest's failing test, its assertion and Ansible's fatal result under molecule's prefix."""
    import run_tests

    bar = "\x1b[2m\u2502\x1b[0m"
    log = [f"  {bar} TASK [Wait for the instance(s)]",
           f"  {bar} FAILED - RETRYING: [localhost]: Wait for instance(s) deletion to complete",
           f"  {bar} ___________ test_a_reboot_brings_the_stack_back[podman://molecule-site] ___________",
           f"  {bar} E   AssertionError: the server did not come back after the reboot:",
           f"  {bar} fatal: [molecule-site]: FAILED! => {{\"msg\": \"Benchmark regression\"}}",
           f"  {bar} =========================== short test summary info ===========================",
           f"  {bar} FAILED ../../tests/molecule/default/test_site.py::test_a_reboot - AssertionError",
           f"  {bar} FAILED", f"  {bar}   ../../tests/molecule/default/test_site.py::test_wrapped_",
           f"  {bar} =================== 1 failed, 5 passed in 301.20s (0:05:01) ===================",
           "\x1b[31mERROR   \x1b[0m Verifier tests failed", "make: *** [Makefile:81: test] Error 1"]
    digest = run_tests.failure_digest(log)
    assert digest == [log[2].split(" ", 3)[-1], "E   AssertionError: the server did not come back after the reboot:",
                      'fatal: [molecule-site]: FAILED! => {"msg": "Benchmark regression"}',
                      "=========================== short test summary info ===========================",
                      "FAILED ../../tests/molecule/default/test_site.py::test_a_reboot - AssertionError",
                      "FAILED ../../tests/molecule/default/test_site.py::test_wrapped_",
                      "=================== 1 failed, 5 passed in 301.20s (0:05:01) ===================",
                      "ERROR    Verifier tests failed"]
    assert run_tests.failure_digest(["ok"] * 3) == []


def test_the_times_table_shows_each_jobs_cpu_against_its_budget_and_marks_one_over(monkeypatch):
    """Issue 41 item 4: each job's CPU-seconds printed beside its budget; one that took more is marked."""
    import run_tests

    scenarios = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith("SCENARIOS ?="))
    jobs = {"lint", "pytest-1", "pytest-2", "pytest-timing"} | {f"molecule-{s}" for s in scenarios.split("=", 1)[1].split()}
    assert set(run_tests.CPU_BUDGET) == jobs, "every job make test runs has a CPU budget, and only those"
    assert all(isinstance(v, int) and v > 0 for v in run_tests.CPU_BUDGET.values())
    monkeypatch.setattr(run_tests, "CPU_BUDGET", {"lint": 70})
    under, over, unbudgeted = (run_tests.Job(name, [], cpu=cpu) for name, cpu in
                               (("lint", 69.6), ("lint", 70.4), ("molecule-new", 5.0)))
    assert run_tests.budget_column(under) == "    70 s"
    assert run_tests.budget_column(over) == "    70 s OVER"
    assert run_tests.budget_column(unbudgeted).strip() == ""


def test_the_cost_table_splits_a_jobs_cpu_into_its_playbook_runs_their_host_commands_and_the_rest(tmp_path, capsys):
    """Where a job's CPU went (run_cost.py's records, as the hook and the test connection write them)."""
    import run_cost
    import run_tests

    cost = tmp_path / "job.cost.jsonl"
    lines = [{"kind": "playbook", "self": 1.5, "children": 4.0, "wall": 9.0, "argv": "converge.yml"},
             {"kind": "host", "host": "h", "cpu": 0.2, "wall": 0.3, "piped": True},
             {"kind": "host", "host": "h", "cpu": 0.1, "wall": 0.1, "piped": False},
             {"kind": "playbook", "self": 1.0, "children": 0.5, "wall": 2.0, "argv": "verify.yml"}]
    cost.write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    totals = run_cost.summary(cost)
    assert (totals["runs"], totals["host_commands"], totals["piped"]) == (2, 2, 1)
    assert round(totals["runs_cpu"], 3) == 7.0 and round(totals["host_cpu"], 3) == 0.3
    assert run_cost.summary(tmp_path / "missing")["runs"] == 0
    run_tests.print_cost([run_tests.Job("molecule-x", [], cpu=10.0, cost=totals), run_tests.Job("lint", [], cpu=3.0)])
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("molecule-x")]
    assert row and row[0].split()[1:] == ["2", "7", "s", "2", "0", "s", "3", "s"], row

# The rollout timeline of molecule multihost (tests/harness/rollout_timeline.py) from a made-up upgrade of gpu1:
# the task times as the callback writes them, samples every second.
def _rollout_record():
    import rollout_timeline as rt

    host, other, url = "gpu1", "gpu2", "http://gpu1:30000"
    tasks = [(0, "Validate"), (10, rt.LEAVE), (12, rt.DRAIN), (20, rt.DRAIN_SAYS), (21, rt.BENCH_BEFORE),
             (30, rt.RESTART), (33, rt.STOP), (40, "sglang_server : Wait for /health_generate, release r2, up to 120 s"),
             (46, rt.BENCH_AFTER), (55, rt.JOIN), (56, rt.JOINED)]
    events = []
    for t, task in tasks:
        events.append({"t": 1000.0 + t, "event": "start", "task": task, "host": ""})
        done = {"t": 1000.5 + t, "event": "ok", "task": task, "host": host}
        if task == rt.DRAIN_SAYS:
            done["msg"] = "gpu1 drained in 7.0 s"
        if task == rt.DRAIN:
            done["t"] = 1019.0
        if task == rt.JOINED:
            done["t"] = 1060.0
        if task == rt.STOP:
            done["t"] = 1035.0
        events.append(done)
    samples = []
    for i in range(70):
        t = 1000.0 + i
        out = 11 <= i < 58
        down = 34 <= i < 40
        samples.append({"t": t, "listed": [url, "http://gpu2:30000"] if not out else ["http://gpu2:30000"],
                        "healthy": ["http://gpu2:30000"] + ([url] if i >= 58 or i < 10 else []),
                        "loads": {host: None if down else (3 if 11 <= i < 15 else 0), other: 2},
                        "clients": 4, "long": 1})
    return rt, events, samples, host, other, url


def test_the_rollout_timeline_puts_the_steps_beside_what_was_in_flight():
    rt, events, samples, host, other, url = _rollout_record()
    rows = rt.timeline(events, samples, host, other, url)
    assert rt.missing(rows) == [] and rt.in_order(rows)
    at = {r["point"]: r for r in rows}
    assert at["leave"]["at_s"] == 10.0 and at["unrouted"]["at_s"] == 10.0 and at["unrouted"]["in_flight_host"] == 0
    assert at["left"]["at_s"] == 11.0 and at["left"]["in_flight_host"] == 3
    assert at["drained"]["at_s"] == 19.0 and at["drained"]["peak_while_draining"] == 3
    assert at["stopped"]["at_s"] == 33.0 and at["stopped"]["in_flight_host"] == 0  # the last reading before the stop
    assert at["started"]["at_s"] == 35.0 and at["ready"]["at_s"] == 40.5
    assert at["healthy"]["at_s"] == 58.0 and at["joined"]["at_s"] == 60.0
    assert at["healthy"]["gateway_healthy"] == 2 and at["left"]["gateway_healthy"] == 1
    table = rt.markdown(rows, host)
    assert table.count("\n") == len(rows) + 1
    assert "| 19.0 | drained (up to 3 in flight since the gateway stopped routing to it) | 0 |" in table


def test_the_rollout_timeline_says_which_points_it_did_not_see():
    rt, events, samples, host, other, url = _rollout_record()
    no_restart = [e for e in events if e["task"] != rt.STOP]  # the server was not restarted
    rows = rt.timeline(no_restart, samples, host, other, url)
    assert rt.missing(rows) == ["stopped", "started"]
    early = [dict(e, t=e["t"] - 30) if e["task"] == rt.JOIN else e for e in events]  # the join before the restart
    rows = rt.timeline(early, samples, host, other, url)
    assert not rt.in_order(rows)
    # A sampled point up to a second after the task that follows it (the next sample) is in order; two are not.
    rows = rt.timeline(events, samples, host, other, url)
    for row in rows:
        if row["point"] == "drain":
            row["t"] = next(r["t"] for r in rows if r["point"] == "left") - 0.9
    assert rt.in_order(rows)
    for row in rows:
        if row["point"] == "drain":
            row["t"] -= 1.2
    assert not rt.in_order(rows)


def test_the_task_times_callback_writes_each_start_and_result_without_hidden_messages(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - {name: Said, ansible.builtin.assert: {that: true, success_msg: drained in 1 s}}\n"
                    "    - {name: Hidden, ansible.builtin.debug: {msg: not-for-the-log}, no_log: true}\n"
                    "    - {name: Failed, ansible.builtin.fail: {msg: \"it failed, said so\"}, ignore_errors: true}\n")
    times = tmp_path / "times.jsonl"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "tests" / "harness" / "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="sglang_task_times", SGLANG_TEST_TASK_TIMES=str(times))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(line) for line in times.read_text().splitlines()]
    assert [(e["event"], e["task"], e["host"]) for e in lines] == [
        ("start", "Said", ""), ("ok", "Said", "localhost"), ("start", "Hidden", ""), ("ok", "Hidden", "localhost"),
        ("start", "Failed", ""), ("failed", "Failed", "localhost")]
    assert lines[1]["msg"] == "drained in 1 s" and "msg" not in lines[3] and lines[5]["msg"] == "it failed, said so"
    assert lines[0]["t"] <= lines[1]["t"] <= lines[2]["t"]
    assert "not-for-the-log" not in times.read_text()


def _playbook_with_hooks(tmp_path, hooks: str, play: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ansible-playbook on localhost with the named harness hooks imported first (as the test targets'
    sitecustomize does), argv[0] named as the real command."""
    import sysconfig

    harness = ROOT / "tests" / "harness"
    (tmp_path / "play.yml").write_text(play)
    code = (f"import sys; sys.path[:0] = [{str(harness)!r}, {sysconfig.get_paths()['purelib']!r}]; "
            f"sys.argv[0] = 'ansible-playbook'; import {hooks}; "
            "from ansible.cli.playbook import main; sys.exit(main())")
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                    ANSIBLE_ROLES_PATH=str(tmp_path / "roles"), **(env or {}))
    argv = [sys.executable, "-S", "-c", code, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
            str(tmp_path / "play.yml")]
    return subprocess.run(argv, env=full_env, capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_plugin_warm_loads_the_filter_plugins_in_ansible_playbook_not_in_each_worker(tmp_path):
    """tests/harness/plugin_warm.py: a filter plugin file beside the playbook records the process that
    asks it for its filters. With the hook only ansible-playbook itself asks (the workers inherit the
    loaded filters); without it every task's worker asks again. A role's own filter, found when the play
    includes the role at run time (Ansible clears the loaded filters then), still works."""
    (tmp_path / "filter_plugins").mkdir()
    log = tmp_path / "asked"
    (tmp_path / "filter_plugins" / "probe.py").write_text(
        "import os\n\n\nclass FilterModule:\n    def filters(self):\n"
        f"        with open({str(log)!r}, 'a') as fh:\n            fh.write(f'{{os.getpid()}}\\n')\n"
        "        return {'probe_double': lambda v: v * 2}\n")
    role = tmp_path / "roles" / "withfilter"
    (role / "filter_plugins").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "filter_plugins" / "rolefilter.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'role_triple': lambda v: v * 3}\n")
    (role / "tasks" / "main.yml").write_text(
        "- name: Use the role's filter\n  ansible.builtin.debug:\n    msg: \"ROLE={{ 5 | role_triple }}\"\n")
    tasks = "".join(f"    - name: Task {i}\n      ansible.builtin.assert:\n        that: (3 | probe_double) == 6\n"
                    for i in range(4))
    play = ("- hosts: localhost\n  gather_facts: false\n  connection: local\n  tasks:\n" + tasks
            + "    - name: Include a role with filter plugins\n      ansible.builtin.include_role:\n        name: withfilter\n"
            + "    - name: After the role\n      ansible.builtin.assert:\n        that: (1 | probe_double) == 2\n")

    def askers(env=None) -> tuple[subprocess.CompletedProcess, list[str]]:
        log.unlink(missing_ok=True)
        proc = _playbook_with_hooks(tmp_path, "plugin_warm", play, env)
        assert proc.returncode == 0 and "ROLE=15" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
        return proc, log.read_text().split()

    _, warm = askers()
    _, cold = askers({"SGLANG_TEST_NO_PLUGIN_WARM": "1"})
    assert len(set(cold)) >= 5, cold  # every worker of a task with a filter asked
    # With the hook: one process asked, more than once only where Ansible cleared the cache (the role).
    assert len(set(warm)) == 1 and len(warm) <= 3, warm
    assert warm[0] not in cold


def test_template_cache_compiles_a_template_once_per_run_and_keys_it_by_its_text(tmp_path):
    """tests/harness/template_cache.py (active under `make test`): the first run stores the code Jinja2
    compiled for each template and expression; the next run builds its templates from it (shown by
    planting another constant in an entry), unless a filter the template names is not what it was at the
    compile; other text is another entry; a template with a syntax error fails as Ansible says, and is
    not stored; with no cache directory nothing is stored."""
    import marshal
    import types

    play = ("- hosts: localhost\n  gather_facts: false\n  connection: local\n  tasks:\n"
            "    - name: Template\n      ansible.builtin.debug:\n        msg: \"SAID={{ 'MARKER-' ~ 'ONE' | upper }}\"\n"
            "    - name: Expression\n      ansible.builtin.debug:\n        msg: WHEN-RAN\n"
            "      when: \"'MARKER-TWO' | length == 10\"\n")
    cache = tmp_path / "cache"
    cache.mkdir()

    def run(cache_dir: str, text: str = play) -> subprocess.CompletedProcess:
        return _playbook_with_hooks(tmp_path, "template_cache", text, {"SGLANG_TEST_ANSIBALLZ_CACHE": cache_dir})

    first = run("")
    assert first.returncode == 0 and "SAID=MARKER-ONE" in first.stdout and not list(cache.iterdir())
    assert "SAID=MARKER-ONE" in run(str(cache)).stdout
    entries = list(cache.glob("jinja-*"))

    def constants(code):
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield from constants(const)
            else:
                yield const

    def plant(code, old, new):
        consts = tuple(plant(c, old, new) if isinstance(c, types.CodeType) else (new if c == old else c)
                       for c in code.co_consts)
        return code.replace(co_consts=consts)

    marked = [e for e in entries if "MARKER-" in constants(marshal.loads(e.read_bytes())[0])]
    assert len(marked) == 1, entries  # 'MARKER-' ~ 'ONE': the template's entry
    code, plugins = marshal.loads(marked[0].read_bytes())
    assert ("filters", "upper", True, "None") in plugins, plugins
    marked[0].write_bytes(marshal.dumps((plant(code, "MARKER-", "PLANTED-"), plugins)))
    second = run(str(cache))
    assert second.returncode == 0 and "SAID=PLANTED-ONE" in second.stdout, second.stdout[-3000:]
    assert "WHEN-RAN" in second.stdout
    # The same entry, recorded as compiled where `upper` asked for the context: not used, compiled again.
    other = tuple((kind, name, present, "<_PassArg.context: 1>" if name == "upper" else arg)
                  for kind, name, present, arg in plugins)
    marked[0].write_bytes(marshal.dumps((plant(code, "MARKER-", "PLANTED-"), other)))
    assert "SAID=MARKER-ONE" in run(str(cache)).stdout
    assert marshal.loads(marked[0].read_bytes())[1] == plugins
    # Other text, other entry: a changed template compiles afresh.
    assert "SAID=MARKER-THREE" in run(str(cache), play.replace("'ONE'", "'THREE'")).stdout
    assert len(list(cache.glob("jinja-*"))) == len(entries) + 1
    # A syntax error: Ansible's failure, nothing stored.
    broken = run(str(cache), play.replace("| upper }}", "| upper }"))
    assert broken.returncode != 0 and "Syntax error in template" in broken.stdout, broken.stdout[-3000:]
    assert len(list(cache.glob("jinja-*"))) == len(entries) + 1


def test_ansiballz_cache_keeps_parsed_yaml_per_path_and_content_and_never_a_vault_file(tmp_path):
    """The same hook keeps what Ansible parsed from each YAML file (tags included) per path and bytes: the
    next run uses it (shown by planting another value in the entry); a file changed on disk is parsed
    again; a vault-encrypted file is never stored; with no cache directory nothing is stored."""
    import pickle

    vars_file = tmp_path / "values.yml"
    vars_file.write_text("said: from-the-file\n")
    play = ("- hosts: localhost\n  gather_facts: false\n  connection: local\n  vars_files: [values.yml]\n  tasks:\n"
            "    - name: Show\n      ansible.builtin.debug:\n        msg: \"SAID={{ said }}\"\n")
    cache = tmp_path / "cache"
    cache.mkdir()

    def said(cache_dir: str, env: dict | None = None) -> str:
        proc = _playbook_with_hooks(tmp_path, "ansiballz_cache", play,
                                    {"SGLANG_TEST_ANSIBALLZ_CACHE": cache_dir, **(env or {})})
        assert proc.returncode == 0 and "SAID=" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
        return proc.stdout.split("SAID=", 1)[1].split('"', 1)[0]

    assert said("") == "from-the-file" and not list(cache.iterdir())
    assert said(str(cache)) == "from-the-file"
    entries = {e: pickle.loads(e.read_bytes()) for e in cache.glob("parsed-*")}
    (entry,) = [e for e, data in entries.items() if data == {"said": "from-the-file"}]
    planted = entries[entry]
    planted["said"] = type(planted["said"])("planted")  # a plain str: the entry keeps Ansible's tagged types
    entry.write_bytes(pickle.dumps(planted))
    assert said(str(cache)) == "planted"
    vars_file.write_text("said: changed-on-disk\n")
    assert said(str(cache)) == "changed-on-disk"
    # A vault file: Ansible decrypts it, nothing of it is stored.
    secret = tmp_path / "vault-pass"
    secret.write_text("test-vault-pass\n")
    vault = os.path.join(os.path.dirname(sys.executable), "ansible-vault")
    subprocess.run([vault, "encrypt", "--vault-password-file", str(secret), str(vars_file)], check=True,
                   capture_output=True, env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
    before = set(cache.glob("parsed-*"))
    assert said(str(cache), {"ANSIBLE_VAULT_PASSWORD_FILE": str(secret)}) == "changed-on-disk"
    stored = b"".join(e.read_bytes() for e in set(cache.glob("parsed-*")) - before)
    assert b"changed-on-disk" not in stored
