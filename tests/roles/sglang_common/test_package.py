"""sglang_common's `package` entry point (its module sglang_common_files and the filter
sglang_common_file_payloads), run for real by ansible-playbook on this machine (local connection, into a
temporary directory): the first run installs every file, a second changes nothing, a file changed on the
host is the only one written again, a file the package stopped shipping is removed, and check mode
reports (with --diff, what it would write and remove) without writing."""

import base64
import grp
import json
import os
import pwd
import re
import subprocess

import pytest

from repo import ROLES, load

common = load(ROLES / "sglang_common" / "filter_plugins" / "sglang_common.py")

PLAY = """---
- name: Run an entry point of sglang_common
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
  tasks:
    - name: Run it
      ansible.builtin.include_role:
        name: sglang_common
        tasks_from: {entry}
      vars: {settings}
    - name: Say whether it changed
      ansible.builtin.debug:
        msg: "{entry} changed: {{{{ sglang_common_{entry}_changed }}}}"
"""


def package_play(files, dest) -> str:
    return PLAY.format(entry="package", settings=json.dumps(
        {"sglang_common_package_files": [str(f) for f in files], "sglang_common_package_dest": str(dest)}))


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the entry point installs root-owned files")


def test_file_payloads_carry_each_files_name_and_exact_bytes(tmp_path):
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "a.py").write_bytes(b"A = 1\n\n")  # trailing newlines kept
    (src / "b.json").write_bytes(b'{"x": "\xc3\xa9"}')
    payloads = common.sglang_common_file_payloads([str(src / "a.py"), src / "b.json"])
    assert [p["name"] for p in payloads] == ["a.py", "b.json"]
    assert [base64.b64decode(p["content"]) for p in payloads] == [b"A = 1\n\n", b'{"x": "\xc3\xa9"}']
    with pytest.raises(common.AnsibleFilterError, match="cannot read .*missing.py"):
        common.sglang_common_file_payloads([str(src / "missing.py")])


def run(tmp_path, files, dest, *extra):
    play = tmp_path / "play.yml"
    play.write_text(package_play(files, dest))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(play), *extra], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    changed = int(re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", out).group(1))
    return changed, out


def test_package_entry_installs_only_what_differs_and_removes_what_is_gone(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = []
    for i in range(5):
        (src / f"m{i}.py").write_text(f"VALUE = {i}\n")
        files.append(src / f"m{i}.py")
    dest = tmp_path / "host" / "pkg"

    changed, out = run(tmp_path, files, dest, "--check")
    assert changed > 0 and "package changed: True" in out and not dest.exists()  # check mode writes nothing

    changed, out = run(tmp_path, files, dest)
    assert "package changed: True" in out
    assert sorted(p.name for p in dest.iterdir()) == [f"m{i}.py" for i in range(5)]
    assert oct(dest.stat().st_mode & 0o777) == "0o755" and oct((dest / "m0.py").stat().st_mode & 0o777) == "0o644"

    changed, out = run(tmp_path, files, dest)
    assert changed == 0 and "package changed: False" in out
    assert "m0.py" not in out  # nothing copied: no item of the copy loop ran

    (dest / "m2.py").write_text("VALUE = 'edited on the host'\n")
    (dest / "m3.py").chmod(0o600)
    (dest / "old.py").write_text("shipped by an earlier version\n")
    inodes = {p.name: p.stat().st_ino for p in dest.iterdir()}
    changed, out = run(tmp_path, files, dest, "--check", "--diff")
    assert "package changed: True" in out and (dest / "old.py").exists() and "edited" in (dest / "m2.py").read_text()
    assert "-VALUE = 'edited on the host'" in out and "+VALUE = 2" in out, out[-3000:]  # the diff of what it would write
    assert "-shipped by an earlier version" in out and "old.py (removed)" in out, out[-3000:]
    assert {p.name: p.stat().st_ino for p in dest.iterdir()} == inodes
    changed, out = run(tmp_path, files, dest)
    # Written again (a new file renamed over the old): only the two that differed; the rest untouched.
    rewritten = sorted(name for name, ino in inodes.items() if (dest / name).exists() and (dest / name).stat().st_ino != ino)
    assert rewritten == ["m2.py", "m3.py"], out[-3000:]
    assert (dest / "m2.py").read_text() == "VALUE = 2\n" and oct((dest / "m3.py").stat().st_mode & 0o777) == "0o644"
    assert not (dest / "old.py").exists()
    assert not [p.name for p in dest.iterdir() if p.name.startswith(".")]  # no temporary file left
    assert run(tmp_path, files, dest)[0] == 0


def test_an_empty_file_list_fails_before_anything_changes(tmp_path):
    dest = tmp_path / "host" / "pkg"
    dest.mkdir(parents=True)
    (dest / "keep.py").write_text("installed earlier\n")
    play = tmp_path / "play.yml"
    play.write_text(package_play([], dest))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(play)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "sglang_common_package_files is empty" in proc.stdout + proc.stderr
    assert (dest / "keep.py").read_text() == "installed earlier\n"


def test_tools_entry_installs_the_shared_tools_beside_other_roles_tools(tmp_path):
    dest = tmp_path / "host" / "bin"
    dest.mkdir(parents=True)
    (dest / "other_role_tool.py").write_text("another role's tool\n")
    play = tmp_path / "tools.yml"
    play.write_text(PLAY.format(entry="tools", settings=json.dumps({"sglang_common_tools_dir": str(dest)})))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))

    def run_tools():
        proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(play)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        return proc.stdout

    assert "tools changed: True" in run_tools()
    launcher = dest / "sglang_launch.py"
    assert launcher.read_bytes() == (ROLES / "sglang_common" / "files" / "sglang_launch.py").read_bytes()
    assert oct(launcher.stat().st_mode & 0o777) == "0o755"
    assert (dest / "other_role_tool.py").read_text() == "another role's tool\n"  # not exclusive: kept
    assert "tools changed: False" in run_tools()


def test_module_takes_a_mode_per_file_and_refuses_bad_names_and_modes(tmp_path):
    """library/sglang_common_files.py through ansible-playbook: a file's own mode wins over the default;
    a name with a directory, a name listed twice and a mode that is not octal fail, writing nothing."""
    dest = tmp_path / "host" / "tools"
    library = ROLES / "sglang_common" / "library"
    env = dict(os.environ, ANSIBLE_LIBRARY=str(library), ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")

    def install(files):
        play = tmp_path / "module.yml"
        play.write_text(
            "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
            "  vars:\n    ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n"
            f"  tasks:\n    - sglang_common_files:\n        dest: {dest}\n        exclusive: false\n"
            f"        files: {json.dumps(files)}\n")
        return subprocess.run(["ansible-playbook", "-i", "localhost,", str(play)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    def b64(text):
        return base64.b64encode(text.encode()).decode()

    for bad, named in (([{"name": "sub/x.py", "content": b64("x")}], "without a directory"),
                       ([{"name": "x.py", "content": b64("x")}] * 2, "listed twice"),
                       ([{"name": "x.py", "content": b64("x"), "mode": "rwx"}], "octal")):
        proc = install(bad)
        assert proc.returncode != 0 and named in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
        assert not dest.exists()
    proc = install([{"name": "tool.py", "content": b64("print(1)\n"), "mode": "0755"},
                    {"name": "facts.json", "content": b64("{}")}])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    assert oct((dest / "tool.py").stat().st_mode & 0o777) == "0o755"
    assert oct((dest / "facts.json").stat().st_mode & 0o777) == "0o644"
    # A directory where a file is to go: refused before anything is written (the other file stays as it was).
    (dest / "sub.py").mkdir()
    proc = install([{"name": "tool.py", "content": b64("print(2)\n")}, {"name": "sub.py", "content": b64("x")}])
    assert proc.returncode != 0 and "sub.py is a directory; nothing was changed" in proc.stdout + proc.stderr
    assert (dest / "tool.py").read_text() == "print(1)\n" and (dest / "sub.py").is_dir()


def test_dirs_module_creates_and_corrects_only_what_differs(tmp_path):
    """library/sglang_common_dirs.py through ansible-playbook: directories created with their owner, group
    and mode (an entry's own beating the defaults); a rerun changes nothing; only a directory whose mode
    changed on the host is corrected; check mode reports without creating; a file in the way or a
    relative path fails before anything is created."""
    base = tmp_path / "host"
    library = ROLES / "sglang_common" / "library"
    env = dict(os.environ, ANSIBLE_LIBRARY=str(library), ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\nstdout_callback = json\n")

    def ensure(*lists, extra=()):
        """One task per list of directories (each may fail on its own); (rc, [each task's result])."""
        tasks = "".join(f"    - sglang_common_dirs:\n        owner: nobody\n        group: nogroup\n        mode: '0750'\n"
                        f"        directories: {json.dumps(d)}\n      ignore_errors: true\n" for d in lists)
        play = tmp_path / "dirs.yml"
        play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n"
                        "  vars:\n    ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n  tasks:\n" + tasks)
        proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(play), *extra], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
        results = [t["hosts"]["localhost"] for t in json.loads(proc.stdout)["plays"][0]["tasks"]]
        return results if len(lists) > 1 else results[0]

    wanted = [{"path": str(base / "home")}, {"path": str(base / "home" / "cache" / "torch")},
              {"path": str(base / "etc"), "owner": "root", "mode": "0755"}]
    res = ensure(wanted, extra=("--check", "--diff"))
    assert res["changed"] and len(res["created"]) == 3 and not res.get("failed"), res
    assert {d["after"]["state"] for d in res["diff"]} == {"directory"}
    assert not base.exists()  # check mode wrote nothing

    res = ensure(wanted)
    assert res["changed"] and res["created"] == [w["path"] for w in wanted], res
    for path, owner, mode in ((base / "home", "nobody", 0o750), (base / "home" / "cache" / "torch", "nobody", 0o750),
                              (base / "etc", "root", 0o755)):
        st = path.stat()
        assert (pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, st.st_mode & 0o777) == \
            (owner, "nogroup", mode), path
    assert (base / "home" / "cache").stat().st_uid == 0  # a parent not listed: mkdir -p's

    res = ensure(wanted)
    assert not res["changed"] and res["changed_paths"] == [], res

    (base / "home").chmod(0o777)
    (base / "blocker").write_text("a file\n")
    bad = [([{"path": str(base / "new")}, {"path": str(base / "blocker")}], "exists and is not a directory"),
           ([{"path": str(base / "new")}, {"path": "relative/dir"}], "must be an absolute path"),
           ([{"path": str(base / "new"), "mode": "rwx"}], "is not octal"),
           ([{"path": str(base / "new")}, {"path": str(base / "new2"), "owner": "no-such-user-x"}], "does not exist on")]
    fixed, *refused = ensure(wanted, *(b[0] for b in bad), extra=("--diff",))
    assert fixed["changed_paths"] == [str(base / "home")] and fixed["created"] == [], fixed
    assert (base / "home").stat().st_mode & 0o777 == 0o750
    for res, (_, named) in zip(refused, bad, strict=True):
        assert res.get("failed") and named in res["msg"], res
    assert not (base / "new").exists()  # nothing created before a refusal


def test_inside_by_text():
    """Which directories contain a path (role sglang_server's and role sglang_model's writable-path checks)."""
    inside = common.sglang_common_inside
    assert inside("/var/lib/sglang/models", ["/var/lib/sglang", "/var/cache/sglang"]) == ["/var/lib/sglang"]
    assert inside("/var/lib/sglang-models", ["/var/lib/sglang"]) == []
    assert inside("/srv/models/", ["/srv/models"]) == ["/srv/models"]
    assert inside("/srv//models/./x", ["/srv/models/"]) == ["/srv/models/"]
