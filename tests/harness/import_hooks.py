"""TEST HARNESS ONLY: the speed hooks' way into Ansible: a function run on one of Ansible's modules right
after its first import, before any other code uses it (ansiballz_cache.py, template_cache.py,
plugin_warm.py). Nothing of Ansible is imported here; a hook whose module is already imported
installs nothing, and a patch that fails leaves the module as Ansible wrote it."""

from __future__ import annotations

import sys


class _Finder:
    """Answers for the patched modules' names only, once each, with the real spec whose loader patches."""

    def __init__(self, patches: dict):
        self.pending = dict(patches)

    def find_spec(self, fullname, path=None, target=None):
        patch = self.pending.pop(fullname, None)
        if patch is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        import importlib.util

        # The real spec, found by the finders after this one (this one no longer answers for the name).
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            try:
                patch(module)
            except Exception:  # Ansible unchanged
                pass

        spec.loader.exec_module = exec_and_patch
        return spec


def patch_on_import(patches: dict) -> None:
    """Run patches[name](module) when the module `name` is first imported; nothing if one is imported already."""
    if not set(patches) & set(sys.modules):
        sys.meta_path.insert(0, _Finder(patches))
