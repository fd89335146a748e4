"""TEST HARNESS ONLY: cache the bytecode Python compiles for modules imported from zip files.

Why: every Ansible task runs its module as an AnsiballZ zip, and Python's zipimport compiles
every module_utils source in it again at every task (a zip holds no bytecode): about 0.12 s of
CPU per task here, a third of what a task costs, thousands of times per `make test` on a 2-core
machine. This hook keeps the compiled code per source text, so a module's second run loads it.

Installed only where the harness runs Ansible modules (never on a user's host): the test-host
image (tests/harness/hostsetup.py, for the system Python) and the harness's own venv (the
Makefile, for modules run on this machine), each through a ``.pth`` line that imports this
module. Nothing changes in what runs: the cache key is the source text itself plus the
interpreter's bytecode magic number, so a different source never finds another's code; any
error falls back to compiling as usual. The cache is per user, in a private directory under
the temporary directory (a directory owned by someone else, or not private, is not used).
"""

from __future__ import annotations

import os

try:
    import zipimport

    _compile = zipimport._compile_source  # CPython's pure-Python zipimport (3.8 and later)
except (ImportError, AttributeError):  # another implementation: leave imports alone
    _compile = None

# Imported at every start of the interpreter: only what is already loaded; the rest at the first
# zip import.
DIRECTORY = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"zip-pycache-{os.getuid()}")


def _private_directory() -> bool:
    import stat

    try:
        os.mkdir(DIRECTORY, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(DIRECTORY)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _cached_compile(pathname, source):
    try:
        import hashlib
        import importlib.util
        import marshal

        data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogateescape")
        key = hashlib.sha256(importlib.util.MAGIC_NUMBER + data).hexdigest()
        path = os.path.join(DIRECTORY, key)
        if _private_directory():
            try:
                with open(path, "rb") as fh:
                    return marshal.loads(fh.read())
            except FileNotFoundError:
                pass
            code = _compile(pathname, source)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(marshal.dumps(code))
            os.replace(tmp, path)
            return code
    except Exception:  # a cache must never break an import
        pass
    return _compile(pathname, source)


def install() -> None:
    if _compile is not None and zipimport._compile_source is _compile:
        zipimport._compile_source = _cached_compile


install()
