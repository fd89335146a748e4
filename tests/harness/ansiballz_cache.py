"""TEST HARNESS ONLY: share what Ansible builds the same way in every ansible-playbook run of one `make test`.

Why: `make test` starts hundreds of ansible-playbook processes, and each builds again what the one
before it built from the same files:
- the module payloads: before a module first runs in a process, Ansible finds the module_utils it
  imports (parsing the module and every module_util it reaches, basic.py's dozens included) and zips
  them, about 0.17 s of CPU per module per run here. This hook keeps what that search found (the
  files it put in the zip and the module's metadata), so that only the first run pays;
- the routing table of ansible.builtin (ansible-core's ansible_builtin_runtime.yml, 370 kB of YAML)
  and each collection's meta/runtime.yml: parsed at every start, about 0.2 s of CPU, a sixth of
  what an ansible-playbook run costs before its first task. Ansible documents the parser,
  ``_meta_yml_to_dict(data, content_id)``, as a function tools may replace to cache its output
  (ansible-test does); this hook keeps its result per content (a sha256 of the YAML text);
- the playbooks, roles' task files, defaults, vars and argument specs: every ansible-playbook run parses
  them again (`DataLoader.load_from_file`), and each copy handed out is a deep copy: 0.44 of the 0.96
  CPU-s a `site.yml --syntax-check` spends after its imports (175 files). This hook keeps the parsed
  data, with its tags (the origin of every value, and trust as a template), pickled per path and
  content, and hands out a fresh unpickled copy (~1 ms for the server's argument specs, against 16 ms
  to parse and 19 to deep-copy them). A vault-encrypted file, or one with a `!vault` value, is parsed
  by Ansible and never stored. SGLANG_TEST_NO_PARSE_CACHE=1 turns this part off, to compare.

Active only where tests/harness/run_tests.py sets SGLANG_TEST_ANSIBALLZ_CACHE (a directory it
creates for its own run and removes at the end), in the harness's own venv (the Makefile installs
it beside zip_pycache.py, through the same ``.pth``): never on a user's machine, and `make demo`,
`make molecule` and a lone pytest build their payloads as Ansible does. What a module gets is
unchanged: a payload entry is found only for the same Ansible, Python, module name and source,
module_utils search path and collection paths, and is used only while every module_util file it holds
has the size and mtime it had (a changed one: searched again); a routing entry only for the same YAML
text, Python and PyYAML; a parsed file only for the same path, bytes, Ansible, Python and options
(JSON only, trusted as a template). Any error falls back to Ansible's own code.
"""

from __future__ import annotations

import os
import sys

DIRECTORY = os.environ.get("SGLANG_TEST_ANSIBALLZ_CACHE", "")


class _Recorder:
    """Stands in for the zip: records what recursive_finder writes, and writes it through."""

    def __init__(self, zf):
        self._zf = zf
        self.entries: list[tuple[str, bytes]] = []

    def writestr(self, zinfo, data):
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
        self.entries.append((zinfo.filename if hasattr(zinfo, "filename") else str(zinfo), raw))
        return self._zf.writestr(zinfo, raw)

    def __getattr__(self, name):
        return getattr(self._zf, name)


def _key(mc, name, module_fqn, module_data, extension_manager) -> str:
    import hashlib

    from ansible import __version__
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    paths = [p for p in mc.module_utils_loader._get_paths(subdirs=False) if os.path.isdir(p)]
    parts = [__version__, sys.version, name, module_fqn, repr(paths), repr(list(AnsibleCollectionConfig.collection_paths or [])),
             repr(sorted(extension_manager.module_names)), repr(extension_manager.extension_names)]
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape"))
    digest.update(b"\0" + (module_data if isinstance(module_data, (bytes, bytearray)) else str(module_data).encode()))
    return digest.hexdigest()


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _patch(mc) -> None:
    import pickle

    real = mc.recursive_finder

    def recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager):
        if extension_manager.debugger_enabled:
            return real(name, module_fqn, module_data, zf, date_time, extension_manager)
        try:
            path = os.path.join(DIRECTORY, _key(mc, name, module_fqn, bytes(module_data), extension_manager))
            with open(path, "rb") as fh:
                entries, metadata, sources = pickle.load(fh)
            if any(_stamp(source) != stamp for source, stamp in sources):
                raise FileNotFoundError(path)  # a module_util changed since: search again
        except FileNotFoundError:
            pass
        except Exception:  # anything unexpected: Ansible's own search
            return real(name, module_fqn, module_data, zf, date_time, extension_manager)
        else:
            for filename, data in entries:
                zf.writestr(mc._make_zinfo(filename, date_time, zf=zf), data)
            return metadata
        recorder = _Recorder(zf)
        parsed: list[str | None] = []
        compile_ast = mc._compile_module_ast

        def compile_and_note(module_name, source_code):
            origin = mc.Origin.get_tag(source_code)
            parsed.append(origin.path if origin else None)
            return compile_ast(module_name, source_code)

        mc._compile_module_ast = compile_and_note
        try:
            metadata = real(name, module_fqn, module_data, recorder, date_time, extension_manager)
        finally:
            mc._compile_module_ast = compile_ast
        try:
            # Every file the search parsed (the module itself and each module_util), with its size and
            # mtime: an entry whose files changed is not used. A source without a path is not cached.
            files = parsed[1:]
            if all(files):
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "wb") as fh:
                    pickle.dump((recorder.entries, metadata, [(f, _stamp(f)) for f in files]), fh)
                os.replace(tmp, path)
        except Exception:  # no entry: the next run searches again
            pass
        return metadata

    mc.recursive_finder = recursive_finder


def _patch_routing(finder) -> None:
    import hashlib
    import pickle

    real = finder._meta_yml_to_dict
    if real is None:
        return

    def meta_yml_to_dict(yaml_string_data, content_id):
        try:
            import yaml

            raw = (yaml_string_data if isinstance(yaml_string_data, bytes)
                   else str(yaml_string_data).encode("utf-8", "surrogateescape"))
            digest = hashlib.sha256("\0".join([sys.version, yaml.__version__, ""]).encode() + raw).hexdigest()
            path = os.path.join(DIRECTORY, f"routing-{digest}")
        except Exception:  # Ansible's own parser
            return real(yaml_string_data, content_id)
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)
        except Exception:  # no entry, or one that cannot be read: parse
            pass
        routing = real(yaml_string_data, content_id)  # its errors are Ansible's, raised as they are
        try:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                pickle.dump(routing, fh)
            os.replace(tmp, path)
        except Exception:  # no entry: the next run parses again
            pass
        return routing

    finder._meta_yml_to_dict = meta_yml_to_dict


def _patch_loader(dataloader) -> None:
    import hashlib
    import pickle

    if os.environ.get("SGLANG_TEST_NO_PARSE_CACHE"):  # to compare
        return

    real = dataloader.DataLoader.load_from_file

    def load_from_file(self, file_name, cache="all", unsafe=False, json_only=False, trusted_as_template=False):
        def ansibles():
            return real(self, file_name, cache=cache, unsafe=unsafe, json_only=json_only,
                        trusted_as_template=trusted_as_template)

        try:
            from ansible import __version__

            path = self.path_dwim(file_name)
            if cache != "none" and path in self._FILE_CACHE:
                # This process has it: a copy of the pickle it came from, where it came from one, is
                # cheaper than Ansible's deep copy.
                kept, stored = getattr(self, "_sglang_test_pickles", {}).get(path, (None, b""))
                if unsafe or kept is not self._FILE_CACHE[path]:
                    return ansibles()
                return pickle.loads(stored)
            with open(path, "rb") as fh:
                raw = fh.read()
            if b"$ANSIBLE_VAULT" in raw or b"!vault" in raw:
                return ansibles()  # never store what a vault secret opened
            digest = hashlib.sha256("\0".join([__version__, sys.version, path, repr(bool(json_only)),
                                                repr(bool(trusted_as_template)), ""]).encode("utf-8", "surrogateescape"))
            digest.update(raw)
            entry = os.path.join(DIRECTORY, f"parsed-{digest.hexdigest()}")
        except Exception:  # a missing file and the like: Ansible's own code and its errors
            return ansibles()
        try:
            with open(entry, "rb") as fh:
                stored = fh.read()
            parsed = pickle.loads(stored)
        except Exception:  # no entry, or one that cannot be read: parse
            data = ansibles()  # Ansible's errors are raised as they are
            try:
                keep = self._FILE_CACHE.get(path) if cache == "all" else None
                stored = pickle.dumps(data if keep is None else keep, protocol=pickle.HIGHEST_PROTOCOL)
                tmp = f"{entry}.{os.getpid()}.tmp"
                with open(tmp, "wb") as fh:
                    fh.write(stored)
                os.replace(tmp, entry)
            except Exception:  # no entry: the next run parses again
                pass
            return data
        # As Ansible: the process keeps its copy (cache 'all') and hands out another one unless unsafe.
        if cache == "all":
            self._FILE_CACHE[path] = parsed
            self.__dict__.setdefault("_sglang_test_pickles", {})[path] = (parsed, stored)
        return parsed if unsafe else pickle.loads(stored)

    dataloader.DataLoader.load_from_file = load_from_file


# What to patch in which of Ansible's modules, when it is first imported.
PATCHES = {"ansible.executor.module_common": _patch,
           "ansible.utils.collection_loader._collection_finder": _patch_routing,
           "ansible.parsing.dataloader": _patch_loader}


if DIRECTORY and os.path.isdir(DIRECTORY):
    from import_hooks import patch_on_import

    patch_on_import(PATCHES)
