"""Writing a benchmark run: full JSON, a markdown report, a PNG plot and ``latest.json``.

Files under the output folder (``benchmarks/results/`` by default, git-ignored):

* ``bench-<stamp>.json``: ``{"meta", "rows", "ratios", "goals"}`` (everything measured; each row
  keeps its raw ``records``, ``[index, start_s, end_s, status, audio_s]`` per request, and the
  ``wall_clock`` epoch seconds of the level, to match server logs);
* ``bench-<stamp>.md``: the tables (results, ratios, goals);
* ``bench-<stamp>.png``: throughput and p95 latency vs concurrency, one line per system;
* ``latest.json``: the list of rows of the latest run (the keys the issue names first; no records).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
from matplotlib.ticker import NullLocator  # noqa: E402

from scripts.bench_stats import SYSTEMS  # noqa: E402

_LOGGER = logging.getLogger(__name__)

#: The row keys ``latest.json`` starts with, in this order.
ROW_KEYS = ("system", "concurrency", "requests_per_s", "audio_s_per_s", "p50_ms", "p95_ms", "p99_ms",
            "errors", "mean_batch_size")


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _level(row: Mapping) -> str:
    return str(row["concurrency"]) if row.get("mode", "closed") == "closed" else f"{row['rate_rps']:g}/s"


def results_table(rows: Sequence[Mapping]) -> str:
    """The results as a markdown table, one line per (system, level)."""
    lines = [
        "| system | load | req/s | audio s/s | p50 ms | p95 ms | p99 ms | errors | mean batch | engine busy | "
        "engine RTF | server CPU (cores) | machine CPU (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        errors = ", ".join(f"{k}: {v}" for k, v in row["errors_by_status"].items()) or "0"
        lines.append(
            f"| {row['system']} | {_level(row)} | {_fmt(row['requests_per_s'])} | {_fmt(row['audio_s_per_s'])} "
            f"| {_fmt(row['p50_ms'], 0)} | {_fmt(row['p95_ms'], 0)} | {_fmt(row['p99_ms'], 0)} | {errors} "
            f"| {_fmt(row['mean_batch_size'])} | {_fmt(row['engine_busy'])} | {_fmt(row.get('engine_rtf'), 3)} "
            f"| {_fmt(row['server_cpu_cores'])} "
            f"| {_fmt(row['machine_cpu_cores'])} |"
        )
    return "\n".join(lines)


def ratios_table(ratios: Sequence[Mapping]) -> str:
    """Per concurrency, the requests/s ratios c/a, c/b, c/d and the engine-busy ratios, as markdown."""
    lines = ["| concurrency | c/a | c/b | c/d | c/a engine busy | c/b engine busy |",
             "|---:|---:|---:|---:|---:|---:|"]
    for entry in ratios:
        lines.append(f"| {entry['concurrency']} | {_fmt(entry['c/a'])} | {_fmt(entry['c/b'])} | {_fmt(entry['c/d'])} "
                     f"| {_fmt(entry.get('c/a busy'))} | {_fmt(entry.get('c/b busy'))} |")
    return "\n".join(lines)


def goals_table(goals: Sequence[Mapping]) -> str:
    """The goal checks as a markdown table (met / MISSED and the margin)."""
    lines = ["| goal | concurrency | value | target | met | margin |", "|---|---:|---:|---:|---|---:|"]
    for goal in goals:
        met = {True: "yes", False: "**MISSED**", None: "not measured"}[goal["met"]]
        lines.append(f"| {goal['goal']} | {goal['concurrency']} | {_fmt(goal['value'])} | {_fmt(goal['target'])} "
                     f"| {met} | {_fmt(goal['margin'])} |")
    return "\n".join(lines)


def markdown_report(result: Mapping) -> str:
    """The whole run as markdown: settings, results, ratios, goals."""
    meta = result["meta"]
    return "\n\n".join([
        f"# TTS benchmark {meta['stamp']}",
        f"Machine: {meta['machine']}. Command: `{meta['command']}`.",
        f"Settings: {meta['settings_text']}",
        "## Results\n\n" + results_table(result["rows"]),
        "## Ratios of requests/s (closed loop)\n\n" + ratios_table(result["ratios"]),
        "## Goals\n\n" + goals_table(result["goals"]),
    ]) + "\n"


def plot(rows: Sequence[Mapping], path: Path) -> None:
    """Throughput (requests/s) and p95 latency (ms, log scale) vs concurrency, one line per system."""
    closed = [r for r in rows if r.get("mode", "closed") == "closed"]
    fig, (ax_rps, ax_p95) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system in [s for s in SYSTEMS if any(r["system"] == s for r in closed)]:
        mine = sorted((r for r in closed if r["system"] == system), key=lambda r: r["concurrency"])
        levels = [r["concurrency"] for r in mine]
        ax_rps.plot(levels, [r["requests_per_s"] for r in mine], marker="o", label=system)
        ax_p95.plot(levels, [r["p95_ms"] for r in mine], marker="o", label=system)
    levels = sorted({r["concurrency"] for r in closed})
    for ax, title, label in ((ax_rps, "Throughput", "requests / s"), (ax_p95, "p95 latency", "ms")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("concurrency (closed-loop clients)")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax_p95.set_yscale("log")
    fig.legend(*ax_rps.get_legend_handles_labels(), loc="upper center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def latest_rows(rows: Sequence[Mapping]) -> list[dict]:
    """Rows for ``latest.json``: the issue's keys first, then the rest."""
    return [{**{key: row.get(key) for key in ROW_KEYS}, **{k: v for k, v in row.items() if k != "records"}}
            for row in rows]


def write_outputs(result: Mapping, out_dir: Path) -> dict[str, Path]:
    """Write the run's JSON, markdown, PNG and ``latest.json``; returns their paths by kind."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"bench-{result['meta']['stamp']}"
    paths = {"json": stem.with_suffix(".json"), "markdown": stem.with_suffix(".md"),
             "plot": stem.with_suffix(".png"), "latest": out_dir / "latest.json"}
    paths["json"].write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(result), encoding="utf-8")
    plot(result["rows"], paths["plot"])
    paths["latest"].write_text(json.dumps(latest_rows(result["rows"]), indent=2) + "\n", encoding="utf-8")
    for kind, path in paths.items():
        _LOGGER.info("wrote %s: %s", kind, path)
    return paths
