"""TEST DOUBLE: torchvision without its native operators, for test releases that have a CPU torch.

Why: the server role's pre-start check imports the release's ``sglang.srt.server_args``, and that
imports torchvision (SGLang 0.5.9's ``srt/multimodal/internvl_utils.py`` directly, 0.5.10's through
transformers 5's ``AutoProcessor``). PyPI's torchvision wheels for Linux are CUDA builds: their
``_C.so`` links ``libtorch_cuda.so``, which the test hosts' CPU torch (``torch==2.13.0+cpu``, the
stand-in for the reference host's CUDA torch) does not have, and PyTorch's CPU index, where the
matching CPU torchvision lives, is not reachable from here. torchvision itself carries on without
its native library (``extension._has_ops()`` is then false and every operator registration is
skipped) except for two: ``_meta_registrations.py`` registers the fake kernels of ``nms`` and
``qnms`` unguarded, and that raises "operator torchvision::nms does not exist".

So the double is the REAL torchvision wheel (the release paired with the test torch) with:
- its native files removed (``*.so``, ``torchvision.libs/``): they cannot load against a CPU torch;
- those two registrations guarded by ``_has_ops()``, as the file's other registrations are;
- the version ``<real>+testdouble`` and the dist-info renamed and re-hashed to match.
Everything else is the real package, byte for byte (tests/test_harness.py compares them). No
server runs its operators: the check only imports modules.

Usage: python3 tests/harness/torchvision_double.py REAL.whl OUTDIR  (prints the double's path)
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

LABEL = "testdouble"
PATCHED = "torchvision/_meta_registrations.py"
UNGUARDED = re.compile(r'^@torch\.library\.register_fake\(("torchvision::\w+")\)$', re.M)
GUARD = '''

def _register_fake_with_ops(op_name):
    # TEST DOUBLE (tests/harness/torchvision_double.py): no native operators here.
    def wrapper(fn):
        if torchvision.extension._has_ops():
            torch.library.register_fake(op_name)(fn)
        return fn

    return wrapper
'''


def dropped(name: str) -> bool:
    """Native files: they link the CUDA torch libraries."""
    return name.endswith(".so") or ".so." in name or name.startswith("torchvision.libs/")


def patch_meta(text: str) -> str:
    patched, count = UNGUARDED.subn(r"@_register_fake_with_ops(\1)", text)
    if count == 0:
        raise ValueError(f"{PATCHED}: no unguarded register_fake found; torchvision changed, review the double")
    anchor = "\n\ndef register_meta("
    if anchor not in patched:
        raise ValueError(f"{PATCHED}: register_meta not found; torchvision changed, review the double")
    return patched.replace(anchor, GUARD + anchor, 1)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(real: Path, outdir: Path) -> Path:
    """Write the double of the real torchvision wheel `real` into outdir; return its path."""
    name, version, *tags = real.name[:-len(".whl")].split("-")
    base = version.split("+")[0]
    new_version = f"{base}+{LABEL}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{new_version}.dist-info/"
    out = outdir / f"{name}-{new_version}-{'-'.join(tags)}.whl"
    records = []
    part = out.with_suffix(".part")
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            member = info.filename
            if dropped(member) or member == old_info + "RECORD":
                continue
            data = src.read(member)
            if member == PATCHED:
                data = patch_meta(data.decode()).encode()
            if member.startswith(old_info):
                member = new_info + member[len(old_info):]
                if member.endswith("/METADATA"):
                    data = re.sub(rb"^Version: .*$", f"Version: {new_version}".encode(), data, count=1, flags=re.M)
                    data = re.sub(rb"^Summary: ", b"Summary: TEST DOUBLE (no native operators) of ", data,
                                  count=1, flags=re.M)
            dst.writestr(member, data)
            records.append(record_line(member, data))
        records.append(f"{new_info}RECORD,,")
        dst.writestr(new_info + "RECORD", "\n".join(records) + "\n")
    part.replace(out)
    return out


def main(argv: list[str]) -> int:
    print(build(Path(argv[0]), Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
