"""Stage one Hugging Face model revision on this host: plan, fetch, verify, manifest, progress.

Installed by role sglang_model on every GPU host and run as root. Hub downloads run in the
role's venv with the real, pinned ``huggingface_hub``: its metadata request (token, redirects,
errors) for every file and ``hf_hub_download`` for the small ones; the bytes of LFS files (the
weights) move through the standard library (mover.py: resumable, hashed as they arrive,
written back as they land). Everything else (preflight, check, verify, prune, peer
copies over rsync, local directories) needs only Python's standard library; the read-only part
(checks.py: preflight, check) runs alone too, with the system Python before anything is installed.

Layout of a model directory ``<root>/<name>/``::

    <sha>/                  the verified files, read-only (dirs 0555, files 0444, root);
                            for a local source, a symlink to that directory
    <sha>.manifest.json     written last: revision, every file with size, mtime and hash,
                            when and from where. A directory without it is not staged.
    current -> <sha>        switched by the role once the revision is verified
    .staging/<sha>/         downloads in progress (the client's local_dir, rsync's target)
    .staging/<sha>.journal  one JSON line per file verified in staging (size, mtime, hash)
    .staging/<sha>.lock     one staging run per revision at a time (flock)

A run killed at any point leaves a consistent state: partial files stay in staging (the
Mover and the client resume them with an HTTP Range request, rsync appends), verified files are in the
journal (size and mtime; never hashed again), and a revision is complete only when its
directory was renamed into place and its manifest written. Files are checked with the
Hub's own rule (``hf cache verify``): sha256 for LFS files, the git blob id for the others,
the size where a source publishes nothing else.

The command line (sglang_model_stage.py, cli.py): subcommands print one JSON object on stdout;
failures print ``sglang_model_stage: <why>`` on stderr and exit 1 (2 for usage errors):

    preflight   read-only state of this host for the role's validation (spec: --spec-b64)
    sync        stage one model revision from the Hub, a peer (rsync) or a local directory
                (spec on stdin); also repairs a staged copy whose files changed
    verify      rehash a staged revision (quick: size+mtime, full: every byte); reopens a
                corrupted copy for repair when --reopen is given
    check       quick manifest check of staged model directories (the server's pre-start check)
    prune       remove revisions beyond a count; never current, a wanted one or one in use
    plan        plan a revision with the real client (model_info with file metadata)

Modules, each of one concern::

    checks      hashing with the Hub's rule, manifests, preflight and check (standalone: stdlib only)
    fsutil      files written whole and durably
    progress    the progress file and its lines
    staging     one revision's staging area, journal and lock
    mover       the byte path of Hub downloads (standard library)
    hub         the client: environment, metadata, errors, fetch, plan
    rsync       copies from a peer (fan-out)
    sync        a revision staged, repaired or verified in place (local sources)
    prune       old revisions removed
    cli         the command line
"""

from .checks import StageError, check_staged, preflight, size_problems
from .hub import hub_environment
from .mover import Mover
from .progress import progress_line, summary_line
from .prune import prune
from .sync import sync

__all__ = ["Mover", "StageError", "check_staged", "hub_environment", "preflight", "progress_line", "prune",
           "size_problems", "summary_line", "sync"]
