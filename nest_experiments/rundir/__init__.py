"""The run folder contract (DESIGN §4): its file names (named here once: every other module names a run folder's
file by these constants), its row schemas (:mod:`.rows`: ``segments.csv``, ``abr_decisions.csv``, ``racing.csv``),
atomic writers, its schema version (checked on read: :func:`check_schema`), and :class:`RunFolder`, the one reader
of a run folder's files.

Pure (files only): imported by the system side that writes run folders (runner, apps, collectors, the players of
``dash``) and by the analysis side that reads them (results, report, studies, plots). It imports nothing of either.
"""

from __future__ import annotations

import csv
import json
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nest_experiments.errors import NestExpError
from nest_experiments.rundir.rows import RacingRow, SegmentRow, read_racing, read_segments

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
STATUSES = ("completed", "failed", "interrupted")
SATURATED = 0.95  # a 1 s CPU window at or above this busy share is saturated (cpu.csv, the manifest's cpu_* fields)

# ---------------------------------------------------------------- the files of a run folder (DESIGN §4)

MANIFEST = "manifest.json"
CONFIG = "config.toml"
LINKS = "links.json"
RAW_DIR = "raw"
QDISC = "qdisc.csv"
QDELAY = "qdelay.csv"
QDELAY_SUMMARY = "qdelay_summary.json"
RATES = "rates.csv"
CPU = "cpu.csv"
CPU_PROCS = "cpu_procs.csv"
FIREWALL = "firewall.csv"
WIRE = "wire.csv"
SEGMENTS = "segments.csv"
DECISIONS = "abr_decisions.csv"
ACCESS = "access.csv"
RACING = "racing.csv"
SUBFLOWS = "subflows.csv"
QUIC = "quic.csv"  # each QUIC connection's recovery at our server (dash.http.recovery), run clock
QOE = "qoe.json"
SWEEP_LOG = "sweeps.jsonl"  # in a sweep folder (not a run folder): one JSON line per sweep side (runs.phases)
MPTCP = "mptcp.json"
OBJECTS = "objects.csv"
IPERF3 = "iperf3.csv"
IPERF3_SUMMARY = "iperf3_summary.csv"
SIPP = "sipp.csv"
HTTPERF = "httperf.csv"
ERROR_LOG = "error.log"  # the traceback of a run that failed in the runner
CAPTURES_DIR = "captures"  # kept packet captures (collectors.capture, collectors.wire)
CAPTURE_META = "capture.json"  # in CAPTURES_DIR: what was captured where
WIRE_META = "wire.json"  # how wire.csv was counted
QDISC_PLOT = "qdisc.png"  # the per-run plots (reports.plot)
THROUGHPUT_PLOT = "throughput.png"
TIMELINE_PLOT = "timeline.png"  # a DASH session's layers on one clock (reports.plot, analysis.timeline)
STALLS_TEXT = "stalls.txt"  # beside it: one line per stall, what the queue and the transport did before it


def pcap_file(node: str, dev: str, direction: str) -> str:
    """A queue-delay capture in CAPTURES_DIR: ``dev`` on ``node``, ``direction`` ``in`` | ``out``."""
    return f"{node}-{dev}-{direction}.pcap"


def wire_pcap_file(link: str, direction: str) -> str:
    """A wire-bytes capture in CAPTURES_DIR: ``link``'s a end, ``direction`` ``in`` | ``out``."""
    return f"wire-{link}-{direction}.pcap"

# ---------------------------------------------------------------- raw/: each app's files, ``<app>.<who>.<what>``

CLIENT, SERVER = "client", "server"  # whose file (app_file's ``who``)
OUT, ERR, LOG, JSON_OUT = "out", "err", "log", "json"  # a process's stdout, stderr, log, JSON output
PLAYER_DIR = CLIENT  # raw/<app>.client/: a player's own output folder (SEGMENTS, DECISIONS, RACING, QOE, ...)
CA = "ca.pem"  # the app's CA certificate
ACCESS_LOG = "access.csv"  # our DASH/objects server's access log (rows.ACCESS_LOG_FIELDS)
QUIC_LOG = "quic.csv"  # our DASH server's QUIC recovery rows (rows.QUIC_FIELDS), before the app's column
QUIC_QLOG = "quic.sqlog"  # the quic-go fetcher's recovery events (qlog JSON-SEQ: parsers.qlog)
CADDY_ACCESS_LOG = "access.json"  # Caddy's access log (parsers.caddy)
GO_FILE = "client.go"  # the player's start signal
NETLOG = "netlog.json"  # Chromium's NetLog
WEB_DIR = "web"  # httperf's served files
SIPP_DIR = "sipp"  # SIPp's working folder
OBJECTS_RAW = "objects.csv"  # the objects client's own rows, before the app's column
# in a player's folder, besides SEGMENTS, DECISIONS, RACING and QOE
PLAYER_EVENTS = "events.json"  # dash.js's events (the browser player)
CHROMIUM_LOG = "chromium.log"
FIREFOX_LOG = "firefox.log"
GPAC_LOG = "gpac.log"


def app_file(app: str, *what: str) -> str:
    """The name in ``raw/`` of one of app ``app``'s files: ``app_file("video", CLIENT, ERR)`` is
    ``video.client.err``, ``app_file("video", CA)`` ``video.ca.pem``."""
    return ".".join((app, *what))


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` under a temp name, then renamed: a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """:func:`write_atomic` for bytes (a gzip table, a certificate)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The run's manifest (None when absent or unreadable); a schema other than :data:`SCHEMA_VERSION` is a one-line
    error naming the folder and what to do (:func:`check_schema`)."""
    try:
        data = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    check_schema(run_dir, data)
    return data


def check_schema(run_dir: Path, manifest: Mapping[str, Any]) -> None:
    """The manifest's ``schema_version`` is this code's (absent: 1, as every folder wrote before it was checked)."""
    found = manifest.get("schema_version", 1)
    if found == SCHEMA_VERSION:
        return
    if not isinstance(found, int) or isinstance(found, bool):
        raise NestExpError(f"{run_dir}: {MANIFEST}'s schema_version {found!r} is not a number: the folder is damaged; "
                           "run it again (`python -m nest_experiments run` on its experiment replaces it)")
    if found > SCHEMA_VERSION:
        raise NestExpError(f"{run_dir}: run folder schema {found}, newer than this nest_experiments' {SCHEMA_VERSION}: "
                           "update nest_experiments to read it")
    raise NestExpError(f"{run_dir}: run folder schema {found}, older than this nest_experiments' {SCHEMA_VERSION}: "
                       "run it again (`python -m nest_experiments run` on its experiment replaces it)")


def is_completed(run_dir: Path, config_text: str | None = None) -> bool:
    manifest = read_manifest(run_dir)
    if manifest is None or manifest.get("status") != "completed":
        return False
    if config_text is None:
        return True
    try:
        return same_run((run_dir / CONFIG).read_text(), config_text)
    except OSError:
        return False


def same_run(config_a: str, config_b: str) -> bool:
    """Whether two resolved ``config.toml`` texts run the same run: equal but for what sizes the sweep and not
    the run (``experiment.repetitions``, the ``[paper]`` overrides), so that raising a file's repetitions keeps
    its completed runs (``[run]`` names the repetition and its seed)."""
    if config_a == config_b:
        return True
    try:
        a, b = tomllib.loads(config_a), tomllib.loads(config_b)
    except tomllib.TOMLDecodeError:
        return False
    for cfg in (a, b):
        cfg.pop("paper", None)
        if isinstance(cfg.get("experiment"), dict):
            cfg["experiment"].pop("repetitions", None)
    return a == b


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
    write_atomic(run_dir / CONFIG, config_text)
    write_json(run_dir / MANIFEST, {"schema_version": SCHEMA_VERSION, "warnings": [], "versions": {},
                                           **manifest, "status": "failed"})


# ---------------------------------------------------------------- reading


def run_dirs(folder: Path) -> list[Path]:
    """A run folder itself, or every run folder below an experiment folder."""
    if (folder / MANIFEST).exists():
        return [folder]
    return sorted(p.parent for p in folder.glob(f"*/{MANIFEST}"))


def experiment_name(folder: Path) -> str:
    """The experiment of a sweep folder: its first readable run config's ``[experiment] name``, else the folder's."""
    for run_dir in run_dirs(folder):
        try:
            name = RunFolder(run_dir).config()["experiment"]["name"]
        except (KeyError, TypeError):
            continue
        return str(name)
    return folder.name


@dataclass(frozen=True)
class RunFolder:
    """One run folder's files, read: a missing optional file reads as empty (``has`` tells which exist)."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when it is absent or unreadable (another schema: :func:`check_schema`'s error)."""
        return read_manifest(self.path)

    def completed(self) -> bool:
        return (self.manifest() or {}).get("status") == "completed"

    def config_text(self) -> str:
        return (self.path / CONFIG).read_text()

    def config(self) -> dict[str, Any]:
        """The run's resolved ``config.toml``; empty when it is absent or unreadable."""
        try:
            return tomllib.loads(self.config_text())
        except (OSError, tomllib.TOMLDecodeError):
            return {}

    def json(self, name: str) -> Any:
        """A JSON file of the run (raises OSError or ValueError)."""
        return json.loads((self.path / name).read_text())

    def egresses(self) -> list[dict[str, Any]]:
        """``links.json``'s egresses (none without the file)."""
        return list(self.json(LINKS).get("egresses", [])) if self.has(LINKS) else []

    def qoe(self) -> dict[str, Any] | None:
        """``qoe.json``: each DASH app's QoE document by app name; None when absent or unreadable."""
        try:
            docs = self.json(QOE)
        except (OSError, ValueError):
            return None
        return docs if isinstance(docs, dict) else None

    def rows(self, name: str) -> list[dict[str, str]]:
        """A CSV file's rows as strings (none without the file)."""
        return read_csv(self.path / name) if self.has(name) else []

    def frame(self, name: str) -> pd.DataFrame | None:
        """A CSV file as a pandas frame: None without the file, an empty frame for an empty file."""
        import pandas as pd

        path = self.path / name
        if not path.exists():
            return None
        try:
            return pd.read_csv(path)
        except pd.errors.EmptyDataError:
            return pd.DataFrame()

    def qdisc(self) -> pd.DataFrame:
        """``qdisc.csv`` (an empty frame without it)."""
        import pandas as pd

        frame = self.frame(QDISC)
        return frame if frame is not None else pd.DataFrame()

    def segments(self) -> list[SegmentRow]:
        """``segments.csv`` as the player's rows (raises OSError without it)."""
        return read_segments(self.path / SEGMENTS)

    def racing(self) -> list[RacingRow]:
        """``racing.csv``'s events (none without the file)."""
        return read_racing(self.path / RACING) if self.has(RACING) else []

    def iperf3(self) -> list[dict[str, str]]:
        return self.rows(IPERF3)

    def iperf3_summary(self) -> list[dict[str, str]]:
        return self.rows(IPERF3_SUMMARY)
