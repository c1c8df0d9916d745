"""One self-contained report.html per run, from the artifacts folder: `python -m harness.report ARTIFACTS`.

The page needs no network at view time (inline CSS and SVG, no script, a Content-Security-Policy
that forbids loading anything), so Prow's HTML lens, a CI artifact or a local browser shows it.
It reads `<binary>/**/result.json` (docs/ARTIFACTS.md) and the JUnit files, never pod logs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from harness.report.html import (
    Links,
    busbw_section,
    checks_section,
    config_section,
    details,
    esc,
    events_section,
    failure_box,
    fmt_seconds,
    loss_section,
    node_pairs_section,
    pods_section,
    rank_section,
    summary_table,
    table,
    verdict_badge,
)
from harness.report.inputs import NoArtifacts, Run, TestResult, read_run

REPORT_NAME = "report.html"
# Nothing may be fetched: no scripts, fonts, images or styles from anywhere but this file.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

STYLE = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#59636e;--grid:#d8dee4;--panel:#f6f8fa;
--pass:#1a7f37;--fail:#cf222e;--skip:#9a6700;--error:#8250df;--bar:#0969da;--ref:#1b1f24;--thr:#cf222e;
--min:#9a6700;--band:rgba(9,105,218,.18);--span:rgba(154,103,0,.14);
--s0:#0072b2;--s1:#d55e00;--s2:#009e73;--s3:#cc79a7;--s4:#56b4e9;--s5:#e69f00;--s6:#6a3d9a;--s7:#6e7781}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--grid:#30363d;
--panel:#161b22;--pass:#3fb950;--fail:#ff7b72;--skip:#d29922;--error:#bc8cff;--bar:#4493f8;--ref:#e6edf3;
--thr:#ff7b72;--min:#d29922;--band:rgba(68,147,248,.25);--span:rgba(210,153,34,.18);
--s0:#56b4e9;--s1:#ff8c42;--s2:#3fd0a0;--s3:#f0a6ca;--s4:#9ecbff;--s5:#f2c14e;--s6:#c39bff;--s7:#b1bac4}}
body{margin:0;padding:12px 20px 40px;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;padding-top:10px;border-top:1px solid var(--grid)}
h3{font-size:15px;margin:18px 0 6px}small,.how,caption{color:var(--muted)}
a{color:var(--bar)}code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:var(--panel);padding:8px;overflow:auto;max-height:360px;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;margin:4px 0 8px;width:100%}th,td{text-align:left;padding:3px 8px;
border-bottom:1px solid var(--grid);vertical-align:top}th{background:var(--panel);font-weight:600}
caption{text-align:left;font-size:12px;padding:2px 0}
table.summary td:last-child{width:45%}.reason{color:var(--fail)}.reason.SKIP,.reason.PASS{color:var(--muted)}
.verdict{display:inline-block;min-width:42px;text-align:center;font-weight:700;padding:0 6px;border-radius:4px;
color:#fff}.verdict.PASS{background:var(--pass)}.verdict.FAIL{background:var(--fail)}
.verdict.SKIP{background:var(--skip)}.verdict.ERROR{background:var(--error)}
@media (prefers-color-scheme:dark){.verdict{color:#0d1117}}
.badge{font-size:11px;border:1px solid var(--muted);border-radius:8px;padding:0 5px;color:var(--muted)}
.run-facts{color:var(--muted);margin:2px 0 10px}.run-facts span{margin-right:14px}
.failure{border-left:4px solid var(--fail);background:var(--panel);padding:4px 10px;margin:6px 0}
.note{border-left:4px solid var(--skip);background:var(--panel);padding:4px 10px;margin:6px 0}
.failure .message{color:var(--fail);font-weight:600;margin:4px 0}.problems{color:var(--skip)}
ul.checks{list-style:none;padding:0;margin:0}.check{padding:1px 0}.check .icon{display:inline-block;width:18px;
font-weight:700}.check .status{display:inline-block;min-width:100px;color:var(--muted)}
.check.pass .icon{color:var(--pass)}.check.fail .icon,.check.fail .status{color:var(--fail)}
.slow-text,.troubled,.restarts,.event-type.Warning{color:var(--fail);font-weight:600}
figure{margin:6px 0}svg.chart{width:100%;max-width:980px;height:auto;display:block;font-size:10px}
svg.chart text{fill:var(--fg)}svg.chart .tick,svg.chart .node-label{fill:var(--muted)}
svg.chart .node-label.slow,svg.chart .slow-mark{fill:var(--fail);font-weight:700}
.axis{stroke:var(--muted)}.grid{stroke:var(--grid);stroke-width:.6}
.bar{fill:var(--bar)}.bar.slow,.dot.slow{fill:var(--fail)}.dot{fill:var(--bar)}
.missing{fill:var(--skip)}.node-median{stroke:var(--fg);stroke-width:1.5}
.hline{stroke-width:1.5;stroke-dasharray:6 4}.hline.ref{stroke:var(--ref)}.hline.thr{stroke:var(--thr)}
.hline.min,.hline.floor{stroke:var(--min);stroke-dasharray:2 3;stroke-width:2}
svg .hline-label.ref{fill:var(--ref)}svg .hline-label.thr{fill:var(--thr)}
svg .hline-label.min,svg .hline-label.floor{fill:var(--min)}
svg .hline-label{paint-order:stroke;stroke:var(--bg);stroke-width:3px;stroke-linejoin:round;font-weight:600}
.series{stroke-width:1.4;fill:none}.series.median{stroke:var(--fg);stroke-width:2.2}
.series.slow{stroke:var(--fail);stroke-width:2}.dashed{stroke-dasharray:5 3}
.band{fill:var(--band);stroke:none}.xspan{fill:var(--span)}.moment{stroke:var(--fail);stroke-width:1.5}
.event{fill:var(--muted)}.event.warning{fill:var(--fail)}
.s0{stroke:var(--s0);fill:var(--s0)}.s1{stroke:var(--s1);fill:var(--s1)}.s2{stroke:var(--s2);fill:var(--s2)}
.s3{stroke:var(--s3);fill:var(--s3)}.s4{stroke:var(--s4);fill:var(--s4)}.s5{stroke:var(--s5);fill:var(--s5)}
.s6{stroke:var(--s6);fill:var(--s6)}.s7{stroke:var(--s7);fill:var(--s7)}polyline.series{fill:none}
ul.legend{list-style:none;padding:0;margin:2px 0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px}
svg.swatch{width:24px;height:8px;margin-right:4px}details{margin:4px 0}summary{cursor:pointer;color:var(--muted)}
table.data,table.events,table.pods,table.config{font-size:12px}
"""


def _counts(tests: list[TestResult]) -> str:
    counts = Counter(t.outcome for t in tests)
    words = {"PASS": "passed", "FAIL": "failed", "ERROR": "error" if counts["ERROR"] == 1 else "errors",
             "SKIP": "skipped"}
    parts = [f"{counts[outcome]} {word}" for outcome, word in words.items() if counts[outcome]]
    return f"{len(tests)} test{'s' if len(tests) != 1 else ''}: " + ", ".join(parts)


def overall(tests: list[TestResult]) -> str:
    """The run's verdict, as the binaries' exit code has it: failed if any test failed or errored."""
    return "FAIL" if any(t.outcome in ("FAIL", "ERROR") for t in tests) else "PASS"


def _run_header(run: Run, links: Links) -> str:
    run_id = run.suite_config["run_id"].value if "run_id" in run.suite_config else run.metadata.get("run-id", "?")
    facts = [f"run {run_id}"]
    started = min((t.started for t in run.tests if t.started), default="")
    if started:
        facts.append(f"started {started}")
    total = sum(t.elapsed_s or 0.0 for t in run.tests)
    facts.append(f"tests took {fmt_seconds(total)} in all")
    files = [links.anchor(path, path.name) for path in run.junit_files]
    if (run.artifacts / "metadata.json").is_file():
        files.append(links.anchor(run.artifacts / "metadata.json", "metadata.json"))
    return (f'<header><h1>{verdict_badge(overall(run.tests))} kubetest2-training: {esc(_counts(run.tests))}</h1>'
            f'<p class="run-facts">' + "".join(f"<span>{esc(f)}</span>" for f in facts)
            + (f"<span>files: {' '.join(files)}</span>" if files else "") + "</p></header>")


def _files_line(test: TestResult, links: Links) -> str:
    """Links to the test's own files: result.json, events, manifests, objects."""
    folder = test.folder
    names = [("result.json", folder / "result.json"), ("events.txt", folder / "events.txt"),
             ("objects.yaml", folder / "objects.yaml")]
    names += [(f"manifests/{p.name}", p) for p in sorted((folder / "manifests").glob("*")) if p.is_file()]
    if not test.pods:  # no pod list (JUnit only): link the captured logs from the folder itself
        names += [(f"logs/{p.name}", p) for p in sorted((folder / "logs").glob("*")) if p.is_file()]
    present = [links.anchor(path, name) for name, path in names if path.is_file()]
    return f'<p class="files">Files: {" · ".join(present)}</p>' if present else ""


def _junit_metrics(test: TestResult) -> str:
    if test.metrics is not None or not test.junit_properties:
        return ""
    rows = [(f"<code>{esc(k)}</code>", esc(v)) for k, v in sorted(test.junit_properties.items())
            if k.endswith((".median", ".count")) or k.count(".") == 1]
    return details("metrics (from the JUnit properties)", table(("property", "value"), rows, css="data"))


def test_section(test: TestResult, anchor: str, links: Links, run: Run) -> str:
    """Everything about one test: verdict and reason first, then checks, charts, pods, events."""
    started = f"started {test.started}" if test.started else ""
    facts = [test.binary, fmt_seconds(test.elapsed_s), test.execution, started]
    head = (f'<h2 id="{anchor}" data-test="{esc(test.test)}">{verdict_badge(test.outcome)} {esc(test.test)} '
            f'<small>{esc(" · ".join(fact for fact in facts if fact))}</small></h2>')
    problems = "".join(f'<p class="problems">{esc(p)}</p>' for p in test.problems)
    parts = [head, failure_box(test), problems, checks_section(test.checks)]
    metrics = test.metrics
    if metrics is not None:
        result_link = links.anchor(test.folder / "result.json", "result.json")
        parts += [rank_section(metrics, metrics.throughput_key, metrics.throughput_unit, "Throughput",
                               f"{anchor}-throughput") if metrics.throughput_key else "",
                  rank_section(metrics, metrics.probe_key, metrics.probe_unit, "Compute probe",
                               f"{anchor}-probe") if metrics.probe_key else "",
                  loss_section(metrics, f"{anchor}-loss", result_link),
                  busbw_section(metrics, f"{anchor}-busbw")]
    parts += [node_pairs_section(test.node_pairs, f"{anchor}-pairs"), _junit_metrics(test),
              pods_section(test, links), events_section(test, f"{anchor}-events", links),
              config_section(test.config or run.suite_config,
                             "Configuration" + ("" if test.config else " (the run's, from JUnit)")),
              _files_line(test, links)]
    return f'<section class="test" data-outcome="{esc(test.outcome)}">' + "".join(parts) + "</section>"


def render(run: Run, out: Path) -> str:
    """The whole page for `run`, with links relative to the folder `out` will be written in."""
    links = Links(run.artifacts, out.parent)
    anchors = {i: f"t{i}" for i in range(len(run.tests))}
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = [_run_header(run, links), summary_table(run.tests, anchors)]
    body += [test_section(t, anchors[i], links, run) for i, t in enumerate(run.tests)]
    body.append(f'<footer><small>Generated {generated} by <code>python -m harness.report</code> from '
                f"{esc(run.artifacts.name)}</small></footer>")
    title = f"{overall(run.tests)}: {_counts(run.tests)}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            + "".join(body) + "</body></html>\n")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(artifacts: Path, out: Path | None = None) -> Path:
    """Writes the report of the artifacts folder (default `<artifacts>/report.html`); returns its path.

    Raises NoArtifacts when the folder holds no JUnit file and no result.json.
    """
    out = out or artifacts / REPORT_NAME
    _atomic_write(out, render(read_run(artifacts), out))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report", description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, help="a run's artifacts folder ($ARTIFACTS), also a downloaded one")
    parser.add_argument("--out", type=Path, help="where to write the page (default ARTIFACTS/report.html)")
    args = parser.parse_args(argv)
    try:
        path = write_report(args.artifacts, args.out)
    except NoArtifacts as err:
        print(f"report: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0

