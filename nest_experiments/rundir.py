"""The run folder contract (DESIGN §4): atomic files, manifest, CSV writers."""

from __future__ import annotations

import csv
import json
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

SCHEMA_VERSION = 1
STATUSES = ("completed", "failed", "interrupted")


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_completed(run_dir: Path, config_text: str | None = None) -> bool:
    manifest = read_manifest(run_dir)
    if manifest is None or manifest.get("status") != "completed":
        return False
    if config_text is None:
        return True
    try:
        return (run_dir / "config.toml").read_text() == config_text
    except OSError:
        return False


def dump_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for resolved configs (tables, scalars, lists of scalars)."""
    lines: list[str] = []
    _toml_table(lines, [], data)
    text = "\n".join(lines).strip() + "\n"
    tomllib.loads(text)  # what we write must read back
    return text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_table(lines: list[str], path: list[str], data: Mapping[str, Any]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if path and scalars:
        lines.append(f"\n[{'.'.join(_key(p) for p in path)}]")
    lines += [f"{_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for key, sub in tables.items():
        _toml_table(lines, path + [key], sub)


class CsvSink:
    """A CSV file written under a temp name and renamed by :meth:`close`."""

    def __init__(self, path: Path, fields: Sequence[str]) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")
        self._fh: IO[str] = self.tmp.open("w", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=list(fields), extrasaction="ignore")
        self._writer.writeheader()
        self.rows = 0

    def write(self, row: Mapping[str, Any]) -> None:
        self._writer.writerow(row)
        self.rows += 1

    def write_all(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.write(row)

    def close(self, *, keep: bool = True) -> None:
        if self._fh.closed:
            return
        self._fh.close()
        if keep:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def write_csv(path: Path, fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> int:
    sink = CsvSink(path, fields)
    sink.write_all(rows)
    sink.close()
    return sink.rows


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def write_failed_run(run_dir: Path, *, config_text: str, manifest: Mapping[str, Any]) -> None:
    """A run folder that says the run failed, and why, for a run that never produced one of its own (e.g. the
    cluster worker running it was lost): its ``config.toml`` and a manifest with ``status`` ``failed``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.toml", config_text)
    write_json(run_dir / "manifest.json", {"schema_version": SCHEMA_VERSION, "warnings": [], "versions": {},
                                           **manifest, "status": "failed"})
