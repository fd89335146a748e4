"""Filters of role sglang_model: plans, pattern matching and the fan-out schedule (pure functions).

    {{ models | sglang_model_normalize }}                    every entry with its defaults filled in
    {{ paths | sglang_model_select(allow, ignore) }}         huggingface_hub's filter_repo_objects rule
    {{ info | sglang_model_plan(allow, ignore) }}            a plan from GET /api/models/{repo}/revision/{rev}?blobs=true
    {{ revision | sglang_model_plan_from_manifest }}         a plan from a verified copy's manifest (preflight)
    {{ holders | sglang_model_fanout_pairs(needers) }}       one copy round: [{src, dst}]
    {{ holders | sglang_model_fanout_schedule(needers) }}    every round until all hosts hold a copy
    {{ n | sglang_model_bytes }}                             "547.0 GB"

A plan is {revision, files: [{path, size, sha256 | null, blob_id}], total_bytes}: what the staging
tool (files/sglang_model_stage.py) downloads and verifies. Bad data raises AnsibleFilterError with
a message naming the variable.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import math
import re
import sys
from pathlib import Path

_STAGE_TOOL = Path(__file__).resolve().parent.parent / "files" / "sglang_model_staging" / "checks.py"


def _stage_tool():
    """The staging tool's read-only module (files/sglang_model_staging/checks.py, standard library
    only, no import of its package) as a module: the controller's checks of a local source share its
    wording and rules."""
    module = sys.modules.get("sglang_model_stage_tool")
    if module is None:
        spec = importlib.util.spec_from_file_location("sglang_model_stage_tool", _STAGE_TOOL)
        module = importlib.util.module_from_spec(spec)
        sys.modules["sglang_model_stage_tool"] = module
        spec.loader.exec_module(module)
    return module


try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - the tests import this file without Ansible too
    class AnsibleFilterError(Exception):
        pass

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
FORBIDDEN_TOP = (".git", ".cache")
MODEL_DEFAULTS = {"allow_patterns": None, "ignore_patterns": None, "source": "hub", "local_dir": ""}


def sglang_model_normalize(models):
    """Fill each model entry's defaults; check what argument_specs cannot (names unique, safe).

    The entries' types, required keys and source's choices are meta/argument_specs.yml's, checked
    before this filter runs (entry points main and validate); this adds non-empty and the rest."""
    out, names = [], set()
    for i, m in enumerate(models or []):
        entry = {**MODEL_DEFAULTS, **m}
        for key in ("name", "repo_id", "revision"):
            if not str(entry.get(key) or "").strip():
                raise AnsibleFilterError(f"sglang_model_models[{i}].{key} is required")
        name = str(entry["name"])
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name) or name in ("current",):
            raise AnsibleFilterError(f"sglang_model_models[{i}].name {name!r} must be a plain directory name "
                                     "(letters, digits, . _ -)")
        if name in names:
            raise AnsibleFilterError(f"sglang_model_models: the name {name!r} is used twice")
        names.add(name)
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$", str(entry["repo_id"])):
            raise AnsibleFilterError(f"sglang_model_models[{i}] ({name}).repo_id {entry['repo_id']!r} must be "
                                     "<owner>/<name>")
        rev = str(entry["revision"])
        if rev.startswith("/") or ".." in rev or any(c in rev for c in " \t\n~^:?*[\\"):
            raise AnsibleFilterError(f"sglang_model_models[{i}] ({name}).revision {rev!r} is not a commit, "
                                     "branch or tag name")
        for key in ("allow_patterns", "ignore_patterns"):
            value = entry[key]
            if value is not None and (isinstance(value, str) or not all(isinstance(p, str) for p in value)):
                raise AnsibleFilterError(f"sglang_model_models[{i}] ({name}).{key} must be a list of patterns")
        if entry["source"] == "local" and not str(entry["local_dir"]).startswith("/"):
            raise AnsibleFilterError(f"sglang_model_models[{i}] ({name}).local_dir must be an absolute path "
                                     "when source is local")
        entry.update(name=name, revision=rev, index=i, pinned=bool(SHA_RE.match(rev)))
        out.append(entry)
    if not out:
        raise AnsibleFilterError("sglang_model_models is empty: name at least one model")
    return out


def _widen(pattern):
    return pattern + "*" if pattern.endswith("/") else pattern


def sglang_model_select(paths, allow=None, ignore=None):
    """The paths huggingface_hub's filter_repo_objects keeps (utils/_paths.py, 1.17.0)."""
    allow = None if allow is None else [_widen(p) for p in allow]
    ignore = None if ignore is None else [_widen(p) for p in ignore]
    kept = []
    for path in paths or []:
        if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
            continue
        kept.append(path)
    return kept


def _safe(path, where):
    parts = str(path).split("/")
    if (not path or path.startswith("/") or "\\" in path or "\0" in path
            or any(p in ("", ".", "..") for p in parts)):
        raise AnsibleFilterError(f"{where}: refusing the repository path {path!r} (not a plain relative path)")
    return path


def sglang_model_plan(info, allow=None, ignore=None, where="sglang_model_models"):
    """A plan from model_info with file metadata (siblings: rfilename, size, blobId, lfs.sha256)."""
    if not isinstance(info, dict) or not SHA_RE.match(str(info.get("sha", ""))):
        raise AnsibleFilterError(f"{where}: the Hub's answer carries no commit sha (is the endpoint a Hub?)")
    siblings = {}
    for s in info.get("siblings") or []:
        name = s.get("rfilename")
        if name is None or name.split("/")[0] in FORBIDDEN_TOP:
            continue
        siblings[_safe(name, where)] = s
    files = []
    for path in sglang_model_select(sorted(siblings), allow, ignore):
        s = siblings[path]
        if s.get("size") is None:
            raise AnsibleFilterError(f"{where}: the Hub gave no size for {path} (was ?blobs=true honoured?)")
        lfs = s.get("lfs") or None
        files.append({"path": path, "size": int(s["size"]), "blob_id": s.get("blobId"),
                      "sha256": (lfs or {}).get("sha256")})
    return {"revision": info["sha"], "files": files, "total_bytes": sum(f["size"] for f in files),
            "repo_files": sorted(siblings), "gated": info.get("gated") or False}


def sglang_model_plan_from_manifest(revision, sha):
    """A plan from the manifest summary that preflight reports for a verified copy."""
    files = []
    for f in revision.get("files") or []:
        algo, value = f.get("algo"), f.get("hash")
        files.append({"path": f["path"], "size": int(f["size"]),
                      "sha256": value if algo == "sha256" else None,
                      "blob_id": value if algo == "git-sha1" else None})
    return {"revision": sha, "files": files, "total_bytes": sum(f["size"] for f in files),
            "repo_files": [f["path"] for f in files], "gated": False}


def sglang_model_fanout_pairs(holders, needers):
    """One copy round: every host holding a verified copy serves at most one host that needs it.

    Only `holders` are ever sources: a host that has not verified its copy is never paired as one.
    """
    holders = [h for h in (holders or [])]
    needers = [h for h in (needers or []) if h not in holders]
    return [{"src": src, "dst": dst} for src, dst in zip(holders, needers, strict=False)]


def sglang_model_fanout_schedule(holders, needers):
    """Every round, assuming each copy succeeds: the holders double until every host has a copy."""
    have = list(holders or [])
    need = [h for h in (needers or []) if h not in have]
    if need and not have:
        raise AnsibleFilterError("fan-out: no host holds a verified copy to copy from")
    rounds = []
    while need:
        pairs = sglang_model_fanout_pairs(have, need)
        rounds.append(pairs)
        done = [p["dst"] for p in pairs]
        have += done
        need = [h for h in need if h not in done]
    return rounds


def sglang_model_rounds_needed(hosts, holders=1):
    """ceil(log2((holders + needers) / holders)): the copy rounds of the doubling schedule."""
    total = int(hosts)
    holders = max(1, int(holders))
    return 0 if total <= holders else math.ceil(math.log2(total / holders))


# --------------------------------------------------------------------------- host state (validation)


def _get(obj, *keys, default=None):
    for k in keys:
        try:
            obj = obj[k]
        except (KeyError, TypeError, IndexError):
            return default
    return default if obj is None else obj


def _complete(pre, model, sha):
    """The host holds a verified copy of this model's revision, staged with the same repo and patterns."""
    rev = _get(pre, "models", model["name"], "revisions", sha)
    if not rev or not rev.get("complete"):
        return False
    if rev.get("repo_id") != model["repo_id"]:
        return False
    if rev.get("allow_patterns") != model.get("allow_patterns") or rev.get("ignore_patterns") != model.get("ignore_patterns"):
        return False
    kind = _get(rev, "source", "kind", default="")
    if model.get("source") == "local":
        return kind == "local" and _get(rev, "source", "path") == _get(pre, "models", model["name"], "local", "realpath")
    return kind != "local"


def sglang_model_decide(models, hosts, hostvars, fanout=True, seed=""):
    """Per model: does this run need the Hub's metadata, or can a verified copy's manifest plan it?

    {name: {query, plan_from, holders}} and "_query_host": the host that asks the Hub (the seed).
    """
    hosts = list(hosts or [])
    out = {"_query_host": seed if seed in hosts else (hosts[0] if hosts else "")}
    for m in models:
        holders = [h for h in hosts if m["pinned"] and _complete(_get(hostvars, h, "__sglang_model_pre"), m, m["revision"])]
        lacking = [h for h in hosts if h not in holders]
        if not m["pinned"]:
            query = True  # a branch or tag: resolved by the Hub, once
        elif not lacking:
            query = False
        elif m.get("source") == "local" or fanout:
            query = not holders  # copies (or local checks) are planned from a holder's manifest
        else:
            query = True  # every host without a copy downloads from the Hub
        out[m["name"]] = {"query": query, "plan_from": "" if query else (holders[0] if holders else ""),
                          "holders": holders}
    return out


def sglang_model_answer(result):
    """What validation may keep of a registered uri result: never its invocation (the token is in it)."""
    result = result or {}
    item = result.get("item") or {}
    status = result.get("status", -1)
    body = result.get("json") if status == 200 and isinstance(result.get("json"), dict) else None
    return {"name": item.get("name"), "index": item.get("index"), "status": status,
            "code": result.get("x_error_code", "") or "", "message": result.get("x_error_message", "") or "",
            "msg": "" if status != -1 else str(result.get("msg", ""))[:300], "json": body,
            "commit": result.get("x_repo_commit", "") or "", "location": result.get("location", "") or ""}


def sglang_model_hub_problem(answer, model, endpoint, token_set, host="", kind="info"):
    """'' when the Hub's answer is usable; else one message naming the variable to fix."""
    status, code, message = answer.get("status", -1), answer.get("code", ""), answer.get("message", "")
    where = f"sglang_model_models[{model['index']}] ({model['name']})"
    repo = model["repo_id"]
    if kind == "info" and status == 200:
        return ""
    if kind == "file" and status in (200, 302, 307):
        return ""
    if status == -1:
        return (f"sglang_model_hub_endpoint {endpoint} is unreachable from {host}: {answer.get('msg', '')} "
                "(check sglang_model_proxy_env and sglang_model_ca_bundle)")
    if status == 401 and message == "Invalid credentials in Authorization header":
        return f"sglang_model_hf_token was rejected by {endpoint} (401 Invalid credentials): renew it in the vault"
    if code == "GatedRepo":
        if status == 403:
            return (f"{where}: {repo} is gated and the account of sglang_model_hf_token has no access to it "
                    f"(403 GatedRepo): request access on the Hub with that account")
        return (f"{where}: {repo} is gated and sglang_model_hf_token is "
                f"{'not accepted' if token_set else 'empty'} (401 GatedRepo): set it from ansible-vault")
    if code == "RevisionNotFound":
        return f"{where}.revision {model['revision']!r} does not exist in {repo} on {endpoint} ({status} RevisionNotFound)"
    if code == "RepoNotFound" or (kind == "info" and status in (401, 404)):
        private = ("or it is private and sglang_model_hf_token has no access" if token_set
                   else "or it is private or gated and sglang_model_hf_token is empty")
        return f"{where}.repo_id {repo!r} was not found on {endpoint} ({status} {code or 'Not Found'}), {private}"
    if code == "EntryNotFound":
        return f"{where}: a planned file is missing in {repo} ({status} EntryNotFound): {message}"
    if status == 401:
        return f"{where}: {endpoint} refused {repo} (401): sglang_model_hf_token is {'not accepted' if token_set else 'empty'}"
    if status == 403:
        return f"{where}: {endpoint} forbids {repo} (403 {code}): {message}"
    return f"{where}: {endpoint} answered {status} for {repo} ({code or 'no error code'}): {message}"


def sglang_model_plans(models, answers, decision, hostvars):
    """{name: plan}: from the Hub's answer, or from the manifest of a host holding a verified copy."""
    by_name = {a["name"]: a for a in answers or [] if a.get("json") is not None}
    out = {}
    for m in models:
        d = decision[m["name"]]
        if d["query"]:
            where = f"sglang_model_models[{m['index']}] ({m['name']})"
            out[m["name"]] = sglang_model_plan(by_name[m["name"]]["json"], m.get("allow_patterns"),
                                               m.get("ignore_patterns"), where)
        else:
            pre = _get(hostvars, d["plan_from"], "__sglang_model_pre")
            out[m["name"]] = sglang_model_plan_from_manifest(_get(pre, "models", m["name"], "revisions", m["revision"]),
                                                             m["revision"])
    return out


def sglang_model_host_state(pre, models, plans):
    """{name: {have, staged_bytes, need_bytes, local_problem}} for one host."""
    out = {}
    for m in models:
        plan = plans[m["name"]]
        sha = plan["revision"]
        have = _complete(pre, m, sha)
        staged = int(_get(pre, "models", m["name"], "staging", sha, default=0))
        need = 0 if have or m.get("source") == "local" else max(0, plan["total_bytes"] - staged)
        problem = ""
        if m.get("source") == "local" and not have:
            local = _get(pre, "models", m["name"], "local", default={})
            where = f"sglang_model_models[{m['index']}] ({m['name']}).local_dir {m['local_dir']}"
            if not local.get("exists"):
                problem = f"{where} does not exist on this host"
            else:
                problems = _stage_tool().size_problems(plan["files"], local.get("files") or {})
                if problems:
                    problem = f"{where} lacks files of {m['repo_id']}@{sha}: {problems}"
        out[m["name"]] = {"have": have, "revision": sha, "staged_bytes": staged, "need_bytes": need,
                          "local_problem": problem}
    return out


def sglang_model_holders(hosts, hostvars, names, want=True):
    """want=True: the hosts holding a verified copy of every model in `names` (a name or a list);
    want=False: the hosts lacking at least one."""
    names = [names] if isinstance(names, str) else list(names or [])

    def holds(h):
        return all(_get(hostvars, h, "__sglang_model_have", n, default=False) for n in names)
    return [h for h in hosts or [] if holds(h) == want]


def sglang_model_have_of(state):
    """{name: True/False} from a host's state."""
    return {name: bool(v.get("have")) for name, v in (state or {}).items()}


def sglang_model_lacking(sources, hostvars, names):
    """The named fan-out sources that hold no verified copy of one of the models."""
    return [h for h in sources or [] if not all(_get(hostvars, h, "__sglang_model_have", n, default=False) for n in names)]


def sglang_model_report(models, plans, hosts, hostvars, fanout=True):
    """One line per model: revision (resolved), size, who holds it, who stages it and how."""
    lines = []
    for m in models:
        plan = plans[m["name"]]
        holders = [h for h in hosts if _get(hostvars, h, "__sglang_model_state", m["name"], "have", default=False)]
        needers = [h for h in hosts if h not in holders]
        resolved = (f"revision {m['revision']} -> {plan['revision']} (resolved now: pin it in sglang_model_models)"
                    if not m["pinned"] else f"revision {plan['revision']}")
        line = (f"{m['name']}: {m['repo_id']} {resolved}, {len(plan['files'])} files, "
                f"{sglang_model_bytes(plan['total_bytes'])}; verified on {len(holders)} of {len(hosts)} hosts")
        if needers:
            if m.get("source") == "local":
                line += f"; to verify in place ({m['local_dir']}): {', '.join(needers)}"
            elif not fanout:
                line += f"; to download from the Hub: {', '.join(needers)}"
            else:
                start = holders or needers[:1]
                rounds = sglang_model_fanout_schedule(start, [h for h in needers if h not in start])
                line += (f"; to stage: {', '.join(needers)}"
                         + ("" if holders else f" ({start[0]} from the Hub)")
                         + f", then {len(rounds)} copy round(s) between hosts")
        lines.append(line)
    return lines


def sglang_model_direct(hosts, hostvars, model, fanout=True, seed="", sources=None):
    """The hosts that fetch a model themselves: local sources, every host without fan-out, else the seed.

    With fan-out, the seed reads the Hub only when no host (among `sources`, if named) holds a
    verified copy; every other host waits for a copy round.
    """
    name = model["name"]
    needers = sglang_model_holders(hosts, hostvars, name, False)
    if not needers:
        return []
    if model.get("source") == "local" or not fanout:
        return needers
    holders = [h for h in sglang_model_holders(hosts, hostvars, name, True) if not sources or h in sources]
    if holders:
        return []
    return [seed if seed in needers else needers[0]]


def sglang_model_pick(models, key):
    """{name: models[name][key]}."""
    return {name: v.get(key) for name, v in (models or {}).items()}


def sglang_model_facts_of(models, plans, root):
    """Per model: its revision directory, the current link, the revision, the manifest."""
    root = str(root).rstrip("/")
    out = {}
    for m in models:
        sha = plans[m["name"]]["revision"]
        base = f"{root}/{m['name']}"
        out[m["name"]] = {"repo_id": m["repo_id"], "revision": sha, "requested_revision": m["revision"],
                          "path": f"{base}/{sha}", "current": f"{base}/current",
                          "manifest": f"{base}/{sha}.manifest.json", "source": m.get("source", "hub"),
                          "local_dir": m.get("local_dir", "")}
    return out


def sglang_model_keep_entry(name, plans):
    return {"name": name, "keep_revisions": [plans[name]["revision"]]}


def sglang_model_bytes(n):
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class FilterModule:
    def filters(self):
        return {
            "sglang_model_normalize": sglang_model_normalize,
            "sglang_model_select": sglang_model_select,
            "sglang_model_plan": sglang_model_plan,
            "sglang_model_plan_from_manifest": sglang_model_plan_from_manifest,
            "sglang_model_fanout_pairs": sglang_model_fanout_pairs,
            "sglang_model_fanout_schedule": sglang_model_fanout_schedule,
            "sglang_model_rounds_needed": sglang_model_rounds_needed,
            "sglang_model_bytes": sglang_model_bytes,
            "sglang_model_decide": sglang_model_decide,
            "sglang_model_answer": sglang_model_answer,
            "sglang_model_hub_problem": sglang_model_hub_problem,
            "sglang_model_plans": sglang_model_plans,
            "sglang_model_host_state": sglang_model_host_state,
            "sglang_model_holders": sglang_model_holders,
            "sglang_model_have_of": sglang_model_have_of,
            "sglang_model_lacking": sglang_model_lacking,
            "sglang_model_report": sglang_model_report,
            "sglang_model_direct": sglang_model_direct,
            "sglang_model_pick": sglang_model_pick,
            "sglang_model_facts_of": sglang_model_facts_of,
            "sglang_model_keep_entry": sglang_model_keep_entry,
        }
