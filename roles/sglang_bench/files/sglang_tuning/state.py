"""The state file: the settings and every measurement so far; the search replayed from it."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from .config import Config
from .rules import TuneError, as_vars
from .search import Ask, Search, drive
from .stats import gate


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8"))
        self.settings: dict[str, Any] = data["settings"]
        self.config = Config.from_settings(self.settings)
        self.measurements: list[dict[str, Any]] = data.get("measurements", [])

    def save(self) -> None:
        data = {"settings": self.settings, "measurements": self.measurements, "results": self.results()}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        tmp.replace(self.path)

    def replay(self) -> tuple[Search, Ask | None]:
        recorded = iter(self.measurements)

        def answer(ask: Ask) -> dict | None:
            entry = next(recorded, None)
            if entry is not None and entry["label"] != ask.label:
                raise TuneError(f"{self.path}: measurement {entry['label']} recorded where the search asked for "
                                f"{ask.label}: the state file is out of order (a new `plan` starts afresh)")
            return entry

        search, ask = drive(self.config, answer)
        if ask is None and next(recorded, None) is not None:
            raise TuneError(f"{self.path}: more measurements recorded than the search asked for")
        return search, ask

    def results(self) -> list[dict[str, Any]]:
        """Per label, every measurement's runs together (the report's table)."""
        out: dict[str, dict[str, Any]] = {}
        for m in self.measurements:
            e = out.setdefault(m["label"], {"point": m["point"], "label": m["label"], "status": "ok", "single": [],
                                            "concurrent": [], "measurements": 0, "accept_length": None,
                                            "aggregate_tok_s": None, "why": None})
            e["measurements"] += 1
            e["single"] += m.get("single") or []
            e["concurrent"] += m.get("concurrent") or []
            e["accept_length"] = m.get("accept_length") or e["accept_length"]
            e["aggregate_tok_s"] = m.get("aggregate_tok_s") or e["aggregate_tok_s"]
            if m["status"] != "ok":
                e.update(status="failed", why=m.get("why"))
        for e in out.values():
            runs = e["single"]
            e.update(runs=len(runs), single_tok_s=statistics.fmean(runs) if runs else None,
                     min_tok_s=min(runs) if runs else None, max_tok_s=max(runs) if runs else None)
        return list(out.values())

    def next(self) -> dict[str, Any]:
        search, ask = self.replay()
        if ask is None:
            return {"candidate": None, "why": search.decision or search.stop, "best": as_vars(search.best)}
        count = sum(1 for m in self.measurements if m["label"] == ask.label) + 1
        return {"candidate": {"baseline": ask.point is None, "label": ask.label, "runs": ask.runs,
                              "measurement": count, "file_label": ask.label if count == 1 else f"{ask.label}-m{count}",
                              "phase": ask.phase, "restart": ask.restart,
                              **(as_vars(ask.point) if ask.point else {})},
                "why": ask.why, "minutes_used": round(search.used_minutes, 2)}


def record(state: State, label: str, result: Path | None, aggregate: Path | None, failed: str | None) -> dict[str, Any]:
    _search, ask = state.replay()
    if ask is None or ask.label != label:
        raise TuneError(f"label {label!r} is not what the search asks for next "
                        f"({ask.label if ask else 'nothing: it is done'})")
    entry: dict[str, Any] = {"point": None if ask.point is None else list(ask.point), "label": label,
                             "phase": ask.phase}
    if failed is not None:
        entry.update(status="failed", why=" ".join(failed.split())[:600])
    else:
        single = json.loads(result.read_text(encoding="utf-8"))
        entry.update(status="ok" if single.get("ok") else "failed", single=gate.run_values(single),
                     accept_length=single.get("server_avg_spec_accept_length") or single.get("accept_length"),
                     why=single.get("failure"))
        if aggregate is not None:
            agg = json.loads(aggregate.read_text(encoding="utf-8"))
            scale = agg.get("concurrency") or state.config.concurrency
            entry.update(concurrent=[v * scale for v in gate.run_values(agg)], aggregate_tok_s=agg.get("aggregate_tok_s"))
            if not agg.get("ok"):
                entry.update(status="failed", why=agg.get("failure"))
    state.measurements.append(entry)
    state.save()
    return {k: v for k, v in entry.items() if k not in ("single", "concurrent")} | {
        "runs": len(entry.get("single") or [])}
