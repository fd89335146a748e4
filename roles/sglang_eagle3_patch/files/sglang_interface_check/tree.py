"""The sglang package being analysed: file texts and parsed modules, each read at most once.

Also the text-level helpers the rules use before parsing anything (``match_lines``) and the
resolution of ``from X import Y`` to a file of the tree.
"""

from __future__ import annotations

import ast
import bisect
import re
from pathlib import Path

TOP_LEVEL_DEF = re.compile(r"(?:async[ \t]+)?def[ \t]|class[ \t]")


class CheckError(Exception):
    """The input cannot be analysed (exit status 2)."""


class Tree:
    """The sglang package being analysed: file texts and parsed modules, read at most once."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.srt = self.root / "srt"
        if not self.srt.is_dir():
            raise CheckError(f"{root}: not an sglang package directory (no srt/ inside)")
        self._text: dict[Path, str] = {}
        self._ast: dict[Path, ast.Module] = {}
        self._chunks: dict[tuple[Path, int], list[ast.stmt]] = {}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def text(self, path: Path) -> str:
        if path not in self._text:
            self._text[path] = path.read_text(encoding="utf-8", errors="replace")
        return self._text[path]

    def parse(self, path: Path) -> ast.Module:
        if path not in self._ast:
            try:
                self._ast[path] = ast.parse(self.text(path), filename=str(path))
            except SyntaxError as exc:
                raise CheckError(f"{self.rel(path)}:{exc.lineno}: syntax error: {exc.msg}") from exc
        return self._ast[path]

    def parse_around(self, path: Path, lines: list[int]) -> list[ast.stmt]:
        """The top-level statements that span ``lines``, parsing only those parts of the file.

        Parsing is most of this tool's time, and a 5000-line module is usually needed for a few
        lines. A top-level ``def``/``class`` (with its decorators) starts at column 0 and runs to
        the next one; each such chunk is parsed on its own. If a chunk does not parse (a string
        that holds "class " at column 0, a decorator spread oddly) the whole file is parsed.
        """
        if path in self._ast:
            return self._ast[path].body
        text = self.text(path)
        all_lines = text.splitlines(keepends=True)
        starts = [i + 1 for i, line in enumerate(all_lines) if TOP_LEVEL_DEF.match(line)]
        statements: list[ast.stmt] = []
        done: set[int] = set()
        for line in lines:
            index = bisect.bisect_right(starts, line) - 1
            begin = starts[index] if index >= 0 else 1
            end = starts[index + 1] - 1 if index + 1 < len(starts) else len(all_lines)
            while begin > 1 and all_lines[begin - 2].startswith("@"):
                begin -= 1
            if begin in done:
                continue
            done.add(begin)
            key = (path, begin)
            if key not in self._chunks:
                # Blank lines in front keep the line numbers right (cheaper than renumbering).
                try:
                    chunk = ast.parse("\n" * (begin - 1) + "".join(all_lines[begin - 1 : end]))
                except SyntaxError:
                    return self.parse(path).body
                self._chunks[key] = chunk.body
            statements.extend(self._chunks[key])
        return sorted(statements, key=lambda n: n.lineno)

    def runtime_files(self) -> list[Path]:
        """Rule 1: every module under srt/ except the model implementations."""
        models = len(self.srt.parts)
        # By the path's parts: `models not in p.parents` built every parent of 2,000 paths (0.12 s).
        return sorted(p for p in self.srt.rglob("*.py") if p.parts[models] != "models")

    def module_path(self, dotted: str) -> Path | None:
        """File of an absolute ``sglang.…`` module name, if it is part of this tree."""
        parts = dotted.split(".")
        if not parts or parts[0] != "sglang":
            return None
        base = self.root.joinpath(*parts[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def dotted(self, path: Path) -> str:
        rel = path.relative_to(self.root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(["sglang", *parts])

    def version(self) -> str:
        """The release, from the files a build writes (``_version.py``, PKG-INFO, dist-info)."""
        pattern = re.compile(r"^(?:__version__\s*=\s*(?:version\s*=\s*)?['\"]|Version:\s*)([^'\"\s]+)", re.M)
        candidates = [self.root / "_version.py", self.root / "version.py", self.root.parent / "PKG-INFO"]
        candidates += sorted(self.root.parent.glob("sglang-*.dist-info/METADATA"))
        for path in candidates:
            if path.is_file():
                found = pattern.search(self.text(path))
                if found and not found.group(1).startswith("0.0.0"):
                    return found.group(1)
        return "unknown"


def import_from_module(tree: Tree, path: Path, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    package = tree.dotted(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(package + ([node.module] if node.module else []))


def match_lines(text: str, pattern: re.Pattern, keep: set[str] | None = None) -> list[int]:
    """Sorted line numbers (1-based) where ``pattern`` matches (and its group 1 is in ``keep``)."""
    lines: list[int] = []
    line, position = 1, 0
    for match in pattern.finditer(text):
        if keep is not None and match.group(1) not in keep:
            continue
        line += text.count("\n", position, match.start())
        position = match.start()
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines
