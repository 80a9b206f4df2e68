"""Benchmark: the TTS engine in-process vs TorchServe (unbatched, batched) vs the design note's Flask server.

Examples::

    python -m scripts.bench                                   # the default sweep (about 13 minutes)
    python -m scripts.bench --concurrency 1 8 --requests 16 --systems ceiling torchserve-batched
    python -m scripts.bench --concurrency --rates 1 2 3       # open-loop Poisson arrivals only

Systems, in one run, with the same voice (the default Piper voice), the same
engine settings (one archive build: ``--threads`` onnxruntime intra-op
threads, noise scales 0) and the same thread budget:

* ``ceiling`` (a): ``TTSHandler`` in-process (planner + engine), no HTTP;
* ``torchserve-unbatched`` (b): TorchServe, batchSize 1, one worker;
* ``torchserve-batched`` (c): TorchServe, batchSize 8, maxBatchDelay 50 ms, one worker;
* ``seed-flask`` (d): ``benchmarks/baselines/seed_flask.py``, the design note's server.

All systems are started and warmed up (not measured); then, level by level
(closed-loop concurrencies, then open-loop rates), each system is measured in
turn while the others idle; at the end every process is stopped by pid. The
workload is fixed (``scripts/bench_workload.py``); the load loops are in
``scripts/bench_load.py``, the maths in ``scripts/bench_stats.py``; the files
written are described in ``scripts/bench_report.py``; results and their
reading in ``BENCHMARKS.md``. Timing runs should hold ``flock /tmp/tts-bench.lock``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from scripts import bench_load
from scripts.bench_report import results_table, ratios_table, goals_table, write_outputs
from scripts.bench_stats import SYSTEMS, goal_checks, histogram_delta, mean_batch_size, ratio_table
from scripts.bench_stats import summarize_closed, summarize_open
from scripts.bench_systems import CeilingSystem, SeedFlaskSystem, Snapshot, TorchServeSystem
from scripts.bench_workload import DEFAULT_PARAGRAPH_FRACTION, DEFAULT_SEED, build_workload, load_sentences
from scripts.tslib import REPO_ROOT, TorchServeClient, start_server, stop_server

_LOGGER = logging.getLogger(__name__)

#: Requests in the fixed workload stream (cycled if a run needs more).
WORKLOAD_SIZE = 4096
#: Batch settings of (b); (c) takes ``--batch-size`` and ``--max-batch-delay-ms``.
UNBATCHED = {"batch_size": 1, "max_batch_delay_ms": 50}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--concurrency", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32],
                        help="closed-loop levels (none: skip the closed loop)")
    parser.add_argument("--rates", nargs="*", type=float, default=[], help="open-loop Poisson rates, requests/s")
    parser.add_argument("--requests", type=int, default=64,
                        help="closed loop: measured requests per level (the same texts everywhere)")
    parser.add_argument("--duration-s", type=float, default=15.0, help="open loop: arrival window per rate, s")
    parser.add_argument("--ramp-s", type=float, default=3.0, help="open loop: unmeasured arrivals first, s")
    parser.add_argument("--max-level-s", type=float, default=240.0, help="closed loop: no new request after this, s")
    parser.add_argument("--warmup-requests", type=int, default=16,
                        help="per-system warm-up (not measured) at concurrency 8, requests")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads, every system")
    parser.add_argument("--batch-size", type=int, default=8, help="(c) batchSize")
    parser.add_argument("--max-batch-delay-ms", type=int, default=50, help="(c) maxBatchDelay, ms")
    parser.add_argument("--paragraph-fraction", type=float, default=DEFAULT_PARAGRAPH_FRACTION)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--model-name", default="ttsbench", help="archive name (model_store/<name>.mar)")
    parser.add_argument("--no-build", action="store_true", help="reuse model_store/<name>.mar and build/<name>/")
    parser.add_argument("--out-dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    parser.add_argument("--run-dir", default=str(REPO_ROOT / "out" / "bench"), help="server logs")
    args = parser.parse_args(argv)
    if not args.concurrency and not args.rates:
        parser.error("nothing to run: give --concurrency levels or --rates")
    return args


# -- systems ----------------------------------------------------------------------------------


def build_archive(args: argparse.Namespace) -> Path:
    """Build the one archive every system uses; returns its build folder ``build/<name>``."""
    from scripts.build_archive import build, parse_args as build_args

    if not args.no_build:
        build(build_args(["--model-name", args.model_name, "--threads", str(args.threads), "--deterministic",
                          "--batch-size", str(args.batch_size), "--max-batch-delay-ms", str(args.max_batch_delay_ms)]))
    return REPO_ROOT / "build" / args.model_name


@contextlib.contextmanager
def torchserve_system(name: str, args: argparse.Namespace) -> Iterator[TorchServeSystem]:
    """A fresh TorchServe with the archive registered under (b)'s or (c)'s batch settings.

    The server (its whole process group) is stopped on the way out.
    """
    batch = UNBATCHED if name == "torchserve-unbatched" else {
        "batch_size": args.batch_size, "max_batch_delay_ms": args.max_batch_delay_ms}
    model = name.replace("-", "_")
    run_dir = Path(args.run_dir) / name
    shutil.rmtree(run_dir / "logs", ignore_errors=True)  # TorchServe appends to its logs: keep this run's only
    info = start_server(run_dir=run_dir, free_ports=True)
    try:
        client = TorchServeClient(info)
        client.register(f"{args.model_name}.mar", model_name=model, initial_workers=1, **batch)
        described = client.describe(model)[0]
        _LOGGER.info("%s: batchSize=%s maxBatchDelay=%s workers=%d", name, described.get("batchSize"),
                     described.get("maxBatchDelay"), len(described.get("workers", [])))
        yield TorchServeSystem(name, client, model)
    finally:
        stop_server(info)


@contextlib.contextmanager
def started(name: str, args: argparse.Namespace, build_dir: Path) -> Iterator[object]:
    """Start system ``name``; stop it (every process by pid) on the way out."""
    if name.startswith("torchserve"):
        with torchserve_system(name, args) as system:
            yield system
        return
    system = CeilingSystem(build_dir) if name == "ceiling" else SeedFlaskSystem(build_dir, Path(args.run_dir) / name)
    try:
        yield system
    finally:
        system.stop()


# -- one level --------------------------------------------------------------------------------


def measured_range(args: argparse.Namespace) -> range:
    """The closed loop's measured workload indices: after the largest level's start-up wave."""
    first = max(args.concurrency, default=0)
    return range(first, first + args.requests)


def run_closed(system, concurrency: int, texts: list[str], measured: range, args: argparse.Namespace,
               on_done=None) -> list:
    """Closed loop at ``concurrency``: a start-up wave of ``concurrency`` requests, then ``measured``."""
    in_process = isinstance(system, CeilingSystem)
    loop = bench_load.closed_loop_batches if in_process else bench_load.closed_loop_http
    return loop(system.handle_batch if in_process else system.send, texts, concurrency=concurrency,
                measured=measured, warmup=concurrency, max_level_s=args.max_level_s, on_done=on_done)


def run_open(system, rate_rps: float, texts: list[str], args: argparse.Namespace, on_done=None) -> tuple:
    """Open loop at ``rate_rps``; in-process batches are capped at (c)'s ``--batch-size``."""
    if isinstance(system, CeilingSystem):
        return bench_load.open_loop_batches(system.handle_batch, texts, rate_rps=rate_rps, ramp_s=args.ramp_s,
                                            duration_s=args.duration_s, seed=args.seed, max_batch=args.batch_size,
                                            on_done=on_done)
    return bench_load.open_loop_http(system.send, texts, rate_rps=rate_rps, ramp_s=args.ramp_s,
                                     duration_s=args.duration_s, seed=args.seed, on_done=on_done)


def resource_fields(before: Snapshot, after: Snapshot, audio_s: float) -> dict:
    """Batch sizes, engine use and CPU use (cores) between two snapshots.

    Args:
        before, after: the system's counters around the level.
        audio_s: seconds of audio answered in the level (every request, not only the measured).

    Returns:
        ``mean_batch_size``, ``batch_sizes``, ``engine_busy`` (engine seconds per wall second),
        ``engine_rtf`` (engine seconds per audio second: the machine's speed for the same calls,
        which drifts on a shared VM), ``server_cpu_cores``, ``machine_cpu_cores``, ``level_wall_s``.
    """
    wall_s = max(after.wall_s - before.wall_s, 1e-9)
    sizes = histogram_delta(before.batch_sizes, after.batch_sizes) if after.batch_sizes is not None else None
    engine_s = after.engine_s - before.engine_s if after.engine_s is not None else None
    tree_s = sum(cpu - before.tree_cpu_s.get(pid, 0.0) for pid, cpu in after.tree_cpu_s.items())
    return {
        "mean_batch_size": mean_batch_size(sizes) if sizes else None,
        "batch_sizes": {str(k): v for k, v in sizes.items()} if sizes else None,
        "engine_busy": engine_s / wall_s if engine_s is not None else None,
        "engine_rtf": engine_s / audio_s if engine_s is not None and audio_s > 0 else None,
        "server_cpu_cores": tree_s / wall_s,
        "machine_cpu_cores": (after.machine_busy_s - before.machine_busy_s) / wall_s,
        "level_wall_s": wall_s,
    }


def measure(system, mode: str, level: float, args: argparse.Namespace, texts: list[str]) -> dict:
    """One level: snapshot, load, drain, snapshot; returns the row (with its raw ``records``)."""
    label = f"{system.name} {'c=' if mode == 'closed' else 'rate='}{level:g}"
    started_at = time.time()
    before = system.snapshot()
    with tqdm(desc=label, unit="req", leave=False) as progress:
        if mode == "closed":
            records = run_closed(system, int(level), texts, measured_range(args), args, progress.update)
            summary = summarize_closed(records, concurrency=int(level), measured=measured_range(args))
        else:
            records, start_s, end_s = run_open(system, level, texts, args, progress.update)
            summary = summarize_open(records, window_start_s=start_s, window_end_s=end_s)
    time.sleep(0.5 if isinstance(system, TorchServeSystem) else 0.0)  # let the frontend ingest the last metrics
    after = system.snapshot()
    row = {"system": system.name, "mode": mode, "concurrency": int(level) if mode == "closed" else None,
           "rate_rps": level if mode == "open" else None, **summary,
           **resource_fields(before, after, sum(r.audio_s for r in records if r.ok)),
           "wall_clock": [started_at, time.time()],
           "records": [[r.index, round(r.start_s, 4), round(r.end_s, 4), r.status, round(r.audio_s, 3)]
                       for r in records]}
    _LOGGER.info("%s: %.2f req/s, p95 %s ms, errors %s, mean batch %s", label, row["requests_per_s"] or 0.0,
                 None if row["p95_ms"] is None else round(row["p95_ms"]), row["errors_by_status"],
                 row["mean_batch_size"])
    return row


def sweep(args: argparse.Namespace, texts: list[str], build_dir: Path, bar: tqdm) -> list[dict]:
    """Start every system, warm each up, run every level on each in turn, stop them all.

    The systems take turns level by level (in reverse order every other level),
    so that a slow drift of the machine's speed, which on a shared VM is large,
    falls on all systems alike instead of on whichever ran last. An idle
    system uses next to no CPU while another is measured.

    Returns:
        One row per (system, level), grouped by system in ``args.systems`` order.
    """
    levels = [("closed", n) for n in args.concurrency] + [("open", rate) for rate in args.rates]
    rows = []
    with contextlib.ExitStack() as stack:
        systems = [stack.enter_context(started(name, args, build_dir)) for name in args.systems]
        for system in systems:
            _LOGGER.info("%s: warming up with %d requests at concurrency 8", system.name, args.warmup_requests)
            run_closed(system, 8, texts, range(8, 8 + args.warmup_requests), args)
        for turn, (mode, level) in enumerate(levels):
            for system in systems if turn % 2 == 0 else systems[::-1]:
                rows.append(measure(system, mode, level, args, texts))
                bar.update()
    return sorted(rows, key=lambda row: args.systems.index(row["system"]))


# -- the run ------------------------------------------------------------------------------------


def machine_description() -> str:
    """``"<cores> cores (<CPU model>), <GiB> GiB RAM, GPU: ..."`` from /proc/cpuinfo and psutil."""
    import psutil

    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    gpu = "none" if shutil.which("nvidia-smi") is None else "nvidia-smi present (not used)"
    return (f"{os.cpu_count()} logical cores ({model}), {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
            f"GPU: {gpu}, Linux {platform.release()}, Python {platform.python_version()}")


def source_state() -> dict:
    """The code measured: git commit, uncommitted changes, and a hash of ``handler/`` as built."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=REPO_ROOT, capture_output=True, text=True).stdout.rstrip("\n")

    digest = hashlib.sha256()
    for path in sorted((REPO_ROOT / "handler").rglob("*.py")):
        digest.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return {"git_commit": git("rev-parse", "--short", "HEAD") or None,
            "uncommitted": git("status", "--porcelain", "--untracked-files=no").splitlines(),
            "handler_sha256": digest.hexdigest()[:16]}


def run_meta(args: argparse.Namespace, argv: list[str] | None) -> dict:
    """Everything needed to read or reproduce the run."""
    import onnxruntime

    settings = (f"engine threads {args.threads} (onnxruntime intra-op, inter-op 1) for every system; one worker; "
                f"noise scales 0; (b) batchSize 1; (c) batchSize {args.batch_size}, maxBatchDelay "
                f"{args.max_batch_delay_ms} ms; closed loop: {args.requests} measured requests per level (workload "
                f"indices {measured_range(args).start}-{measured_range(args).stop - 1}) after a start-up wave; open "
                f"loop: {args.duration_s:g} s of arrivals after {args.ramp_s:g} s; warm-up {args.warmup_requests} "
                f"requests per system; workload seed {args.seed}, paragraph fraction "
                f"{args.paragraph_fraction:g}; onnxruntime {onnxruntime.__version__}")
    return {"stamp": datetime.now().strftime("%Y%m%d-%H%M%S"), "machine": machine_description(),
            "command": " ".join(["python -m scripts.bench", *(shlex.quote(a) for a in (argv or sys.argv[1:]))]),
            **source_state(), "settings_text": settings, "args": vars(args)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("handler").setLevel(logging.WARNING)  # the in-process ceiling's per-batch lines
    meta = run_meta(args, argv)
    workload = build_workload(load_sentences(), count=WORKLOAD_SIZE, seed=args.seed,
                              paragraph_fraction=args.paragraph_fraction)
    texts = [item.text for item in workload]
    started_s = time.perf_counter()
    with logging_redirect_tqdm():
        build_dir = build_archive(args)
        with tqdm(total=len(args.systems) * (len(args.concurrency) + len(args.rates)), desc="bench",
                  unit="level") as bar:
            rows = sweep(args, texts, build_dir, bar)
    meta["total_wall_s"] = time.perf_counter() - started_s
    result = {"meta": meta, "rows": rows, "ratios": ratio_table(rows),
              "goals": goal_checks(rows, max_batch_delay_ms=args.max_batch_delay_ms)}
    paths = write_outputs(result, Path(args.out_dir))
    print("\n\n".join([results_table(rows), ratios_table(result["ratios"]), goals_table(result["goals"]),
                       f"total {meta['total_wall_s']:.0f} s; files: " + ", ".join(str(p) for p in paths.values())]))
    return 1 if any(row["num_ok"] == 0 for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
