"""Results format 2 (issue 54): every metric name ends in its true unit; an evidence folder of format 1 is refused
with the command that migrates it, and the migration keeps its verdicts (reports/evidence_migrate.py)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments.analysis import preregistration, results
from nest_experiments.analysis.claims import Claim
from nest_experiments.analysis.results import DASH_METRICS, metric_v2, unit_of
from nest_experiments.cli import main
from nest_experiments.errors import NestExpError
from nest_experiments.reports import evidence
from nest_experiments.reports.evidence_migrate import derive, migrate
from nest_experiments.studies import STUDIES
from nest_experiments.studies.nest.claims import RTT_SIZE_RHO, rtt_size_rho
from tests.unit.sweep_synth import make_sweep

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
V1 = {"video.avg_bitrate_bps": "video.avg_bitrate_kbps", "audio.avg_throughput_bps": "audio.avg_throughput_kbps",
      "video.app_rtt_s": "video.app_rtt_ms", "session.app_jitter_s": "session.app_jitter_ms",
      "audio.response_latency_s": "audio.response_latency_ms", "qdelay.bn1": "qdelay_ms.bn1",
      "qdelay_kernel.bn2": "qdelay_kernel_ms.bn2", "qdelay.bn1 r1->r3.kernel": "qdelay_ms.bn1 r1->r3.kernel"}


def test_format_1_names_map_to_their_true_units_and_others_stay() -> None:
    assert {old: metric_v2(old) for old in V1} == V1
    for kept in ("video.switches", "video.avg_buffer_s", "session.stall_s", "video.qoe", "pie_delay_x_target.bn1",
                 "bitrate", "latency_median_ms", "qdelay_ms.bn1"):
        assert metric_v2(kept) == kept


def test_every_metric_name_ends_in_the_unit_it_is_reported_in() -> None:
    for m in DASH_METRICS:
        assert unit_of(m.key) == ("" if m.unit in ("count", "score") else m.unit), m.key
    assert unit_of(results.delay_metric("bn1 r1->r3", "kernel").key) == "ms"
    assert unit_of("media_mbps") == "Mbit/s" and unit_of("pie_delay_x_target.bn1") == ""


def test_every_claim_names_a_metric_of_today_s_format() -> None:
    for study in STUDIES.values():
        for c in study.paper_claims:
            assert metric_v2(c.metric) == c.metric and metric_v2(c.per or "") == (c.per or ""), c.id


def _as_format_1(folder: Path) -> None:
    """Rewrite a format-2 evidence folder as format 1 wrote it (the inverse of the migration)."""
    back = {new: old for old, new in V1.items()}

    def old(name: str) -> str:
        head, _, rest = name.partition(".")
        for new_head, old_head in (("qdelay_ms", "qdelay"), ("qdelay_kernel_ms", "qdelay_kernel")):
            if head == new_head:
                return f"{old_head}.{rest}"
        field = {n.split(".", 1)[1]: o.split(".", 1)[1] for n, o in back.items() if "." in n}.get(rest)
        return f"{head}.{field}" if field and not head.startswith("qdelay") else name

    sessions = folder / evidence.SESSIONS
    head, _, body = sessions.read_text().partition("\n")
    sessions.write_text(",".join(old(c) for c in head.split(",")) + "\n" + body)
    metrics = folder / evidence.TABLES_DIR / "metrics.csv.gz"
    rows = list(csv.reader(io.StringIO(gzip.decompress(metrics.read_bytes()).decode())))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([rows[0], *([r[0], old(r[1]), *r[2:]] for r in rows[1:])])
    metrics.write_bytes(gzip.compress(out.getvalue().encode(), mtime=0))
    doc = json.loads((folder / evidence.MANIFEST).read_text())
    doc.pop(evidence.FORMAT_KEY)
    doc.pop("migrated", None)
    (folder / evidence.MANIFEST).write_text(json.dumps(doc))


def test_a_format_1_folder_is_refused_with_the_command_and_migrates_to_the_same_verdicts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "nest_paper"
    shutil.copytree(EVIDENCE / "nest_paper", copy)
    _as_format_1(copy)
    assert "video.avg_bitrate_bps" in (copy / evidence.SESSIONS).read_text()
    with pytest.raises(NestExpError, match=r"results format 1, older than .* 2 .*: run `python -m nest_experiments "
                                           r"evidence --migrate .*nest_paper`"):
        evidence.read_manifest(copy)
    assert main(["evidence", "--migrate", str(copy)]) == 0
    assert f"{copy}: migrated" in capsys.readouterr().out
    assert (copy / evidence.SESSIONS).read_bytes() == (EVIDENCE / "nest_paper" / evidence.SESSIONS).read_bytes()
    assert (copy / "tables" / "metrics.csv.gz").read_bytes() == \
        (EVIDENCE / "nest_paper" / "tables" / "metrics.csv.gz").read_bytes()
    after, committed = (pd.read_csv(p / evidence.CLAIMS, keep_default_na=False, dtype=str)
                        for p in (copy, EVIDENCE / "nest_paper"))
    pd.testing.assert_frame_equal(after, committed)  # verdicts, effects, CIs and post hoc marks: the same
    assert evidence.read_manifest(copy).results_format == results.RESULTS_FORMAT
    assert migrate(copy) == []  # migrated once: nothing to do


def test_a_newer_format_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "h2quic_overhead"
    shutil.copytree(EVIDENCE / "h2quic_overhead", copy)
    doc = json.loads((copy / evidence.MANIFEST).read_text()) | {evidence.FORMAT_KEY: results.RESULTS_FORMAT + 1}
    (copy / evidence.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(NestExpError, match="newer than this version's"):
        evidence.read_manifest(copy)


def test_every_committed_folder_is_of_today_s_format() -> None:
    for folder in evidence.evidence_folders(EVIDENCE):
        assert evidence.read_manifest(folder).results_format == results.RESULTS_FORMAT, folder


def test_a_rename_of_the_results_format_marks_no_claim_post_hoc(tmp_path: Path) -> None:
    old = Claim(id="c", statement="s", figure="-", metric="video.app_rtt_s", per="video.avg_bitrate_bps",
                a={"aqm": "fq_pie"}, b={"aqm": "pie"}, expect="a < b", pair_by=("block",))
    preregistration.freeze(tmp_path, "nest", "nest_paper", [old], date="2026-01-02", before_data=True)
    renamed = Claim(id="c", statement="s", figure="-", metric="video.app_rtt_ms", per="video.avg_bitrate_kbps",
                    a={"aqm": "fq_pie"}, b={"aqm": "pie"}, expect="a < b", pair_by=("block",))
    assert preregistration.marked(tmp_path, [renamed])[0].post_hoc == ""
    other = Claim(id="c", statement="s", figure="-", metric="video.app_jitter_ms", per="video.avg_bitrate_kbps",
                  a={"aqm": "fq_pie"}, b={"aqm": "pie"}, expect="a < b", pair_by=("block",))
    assert preregistration.marked(tmp_path, [other])[0].post_hoc == "its metric changed after the freeze of 2026-01-02"


def test_derive_adds_a_studys_within_session_metric_from_the_committed_tables(tmp_path: Path) -> None:
    """A folder exported before Naik's Fig. 6 metric (each session's rank correlation of its video segments' RTT
    and size) gains the column from its own tables/segments.csv.gz, by the function session_metrics uses; its claim
    is judged; run again, nothing changes; a column that disagrees with its recomputation is refused."""
    sweep, out = tmp_path / "sweep", tmp_path / "evidence" / "nest_paper"
    shutil.move(make_sweep(tmp_path / "build", reps=3), sweep)
    evidence.export(sweep, out, command="run")
    table = out / evidence.TABLES_DIR / "segments.csv.gz"
    rows = pd.read_csv(table)
    video = rows["stream"] == "video"  # the synthetic segments' RTT is one value: give each a size-led one
    rows.loc[video, "t_last_byte"] = rows.loc[video, "t_request"] + rows.loc[video, "bytes"] / 1e5 + 0.01 * \
        rows.loc[video, "index"]
    rows = pd.concat([rows, rows.assign(index=rows["index"] + 4, t_request=rows["t_request"] + 16,
                                        t_last_byte=rows["t_last_byte"] + 16.02)])  # 8 video segments a session
    table.write_bytes(gzip.compress(rows.to_csv(index=False).encode(), mtime=0))
    sessions = pd.read_csv(out / evidence.SESSIONS).drop(columns=[RTT_SIZE_RHO])  # as exported before the metric
    sessions.to_csv(out / evidence.SESSIONS, index=False)
    assert main(["evidence", "--derive", str(out)]) == 0
    after = pd.read_csv(out / evidence.SESSIONS)
    assert after.drop(columns=[RTT_SIZE_RHO]).equals(sessions)  # nothing else changed
    expected = {run: rtt_size_rho(g) for run, g in rows.groupby("run")}
    assert after.set_index("run")[RTT_SIZE_RHO].to_dict() == pytest.approx(expected)
    assert all(v is not None and v > 0.5 for v in expected.values())
    claim = next(r for r in csv.DictReader((out / evidence.CLAIMS).open()) if r["id"] == "video_rtt_rises_with_size")
    assert claim["n_a"] == str(len(after)) and claim["verdict"] == "agrees"
    doc = json.loads((out / evidence.MANIFEST).read_text())
    assert doc["derived"][0]["metric"] == RTT_SIZE_RHO and doc["derived"][0]["sessions"] == len(after)
    before = (out / evidence.SESSIONS).read_bytes()
    assert main(["evidence", "--derive", str(out)]) == 0 and (out / evidence.SESSIONS).read_bytes() == before
    after.loc[0, RTT_SIZE_RHO] = 0.0
    after.to_csv(out / evidence.SESSIONS, index=False)
    with pytest.raises(NestExpError, match="not what segments.csv.gz gives again"):
        derive(out)
