"""Build SGLang, sgl-kernel, FlashInfer and torch into versioned releases.

Why a tool and not a chain of tasks: a build of this stack for SM120 takes long,
and every step must be safe to kill and to repeat. The rules it keeps:

* A release is /ROOT/releases/<release-id>/ (a venv inside). Its id is a digest of
  every input (component modes, versions, refs, URLs, CUDA version, arch lists,
  Python, patch set), so the same inputs never rebuild and changed inputs build a
  new release beside the old one.
* A source-built wheel goes to /ROOT/wheelhouse/<key>/, keyed by that component's
  own inputs only: changing one component rebuilds only that component.
* Nothing is marked done before it is: wheels are built in a temporary directory
  and renamed into the wheelhouse; a release counts only once `check` has written
  its manifest and then its `.complete` marker. A run killed midway leaves
  temporary directories and an incomplete release, which the next run (under the
  same lock) removes before it starts again.
* Secrets never reach argv: the spec (with index URLs) comes in the environment
  (SGLANG_BUILD_SPEC) or a file; URLs' credentials are masked in logs and manifests.

* The FlashInfer modules the server will load are compiled into the release (phase
  aot, flashinfer_aot.py beside the package, run by the release's Python) for the target arch list,
  into FlashInfer's own AOT directory, where the server's FlashInfer finds them before it
  would compile; the check phase reads each module's machine code archs back.

Phases (one subcommand each, so the role can tag and time them): plan, fetch,
wheels, venv, aot, check, prune. Every phase prints one JSON object on stdout; progress
lines go to stderr and to /ROOT/logs/<release-id>.log.

Modules, each of one concern::

    plan     the spec's identities (release id, wheelhouse keys), FlashInfer modules, the plan
             (standalone: stdlib only; the role runs it alone for the read-only plan)
    build    class Build: fetch, wheels, venv (with sglang_release.py beside the package)
    aot      phase aot (flashinfer_aot.py beside the package)
    check    phase check: versions, pip check, archs, the manifest, .complete
    archs    the CUDA archs of compiled code (nvcc, fatbin headers, cubins)
    prune    old releases and unused wheels removed
    cli      the command line of sglang_build.py
"""

from .archs import fatbin_archs, list_archs, unbuildable
from .build import Build
from .plan import AOT_STAMP, COMPLETE, COMPONENTS, BuildError, Plan, aot_label, derive_aot_modules, load_spec, mask
from .prune import prune

__all__ = ["AOT_STAMP", "COMPLETE", "COMPONENTS", "Build", "BuildError", "Plan", "aot_label", "derive_aot_modules",
           "fatbin_archs", "list_archs", "load_spec", "mask", "prune", "unbuildable"]
