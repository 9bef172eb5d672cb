"""iperf3 bulk TCP flows: ``iperf3.csv`` (per interval) and ``iperf3_summary.csv``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from nest_experiments.apps.base import App, tool_version
from nest_experiments.config import Iperf3App
from nest_experiments.net.procs import require_tool
from nest_experiments.parsers import iperf3 as parse
from nest_experiments.rundir import CLIENT, ERR, IPERF3, IPERF3_SUMMARY, JSON_OUT, LOG, SERVER, app_file


class Iperf3(App):
    cfg: Iperf3App

    def prepare(self) -> None:
        require_tool("iperf3", "iperf3")
        self.versions["iperf3"] = tool_version(["iperf3", "--version"])
        c = self.cfg
        self.server = self.spawn(c.dst, ["iperf3", "-s", "-p", str(c.port), "-1", "--bind", self.net.addr(c.dst)],
                                 log=app_file(c.name, SERVER, LOG))
        self.when_ready(functools.partial(self.wait_listening, c.dst, c.port, proc=self.server))

    @property
    def length_s(self) -> float:
        c = self.cfg
        return c.duration_s if c.duration_s is not None else self.run_duration_s - c.start_s

    def start(self) -> None:
        c = self.cfg
        argv = ["iperf3", "-c", self.net.addr(c.dst), "-p", str(c.port), "-P", str(c.flows),
                "-t", f"{self.length_s:g}", "-i", f"{c.interval_s:g}", "--json",
                "-C", c.congestion_control or self.net.cc]
        self.t_start = self.clock()
        self.client = self.spawn(c.src, argv, log=app_file(c.name, CLIENT, JSON_OUT), stderr_log=app_file(c.name, CLIENT, ERR))

    def finish(self, deadline: float) -> None:
        c = self.cfg
        code = self.wait_proc(self.client, deadline, "iperf3 client")
        text = (self.raw_dir / app_file(c.name, CLIENT, JSON_OUT)).read_text()
        data = parse.load(text, what=f"apps.{c.name} (exit {code})")
        who = {"flow_prefix": c.name, "src": c.src, "dst": c.dst}
        self.rows = parse.interval_rows(data, t_offset=self.t_start, **who)
        self.summary = parse.summary_rows(data, **who)
        self.wait_proc(self.server, deadline, "iperf3 server")
        for row in self.summary:
            if not row["bytes"]:
                self.warnings.append(f"apps.{c.name}: flow {row['flow']} moved no data")


    def outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        return {IPERF3: (parse.INTERVAL_FIELDS, self.rows),
                IPERF3_SUMMARY: (parse.SUMMARY_FIELDS, self.summary)}
