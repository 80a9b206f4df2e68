"""End-to-end demo: build the default voice's archive, serve it with dynamic batching, synthesise.

Steps: build ``model_store/tts.mar`` (unless ``--no-build``), start TorchServe
on free loopback ports, register ``tts`` with batchSize 8 and maxBatchDelay
50 ms, send the first 32 Harvard sentences with 8 requests in flight, write
one WAV per sentence to ``out/demo/``, print a summary, stop the server.
Exit status 1 when any request failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import scipy.io.wavfile

from scripts.bench_stats import mean_batch_size, percentiles_ms
from scripts.build_archive import build, parse_args as build_args
from scripts.tslib import REPO_ROOT, TorchServeClient, parse_batch_sizes, start_server, stop_server

_LOGGER = logging.getLogger(__name__)
SENTENCES = REPO_ROOT.parent / "shared" / "data" / "harvard-sentences.txt"


def send_all(client: TorchServeClient, texts: list[str], out_dir: Path, concurrency: int) -> list[dict]:
    """Send every text with ``concurrency`` requests in flight; write the WAVs.

    Returns:
        One row per text: ``{"index", "status", "latency_s", "audio_s"}``.
    """
    def one(index: int) -> dict:
        start = time.perf_counter()
        response = client.synthesize("tts", {"text": texts[index], "id": str(index)})
        row = {"index": index, "status": response.status_code, "latency_s": time.perf_counter() - start, "audio_s": 0.0}
        if response.status_code == 200:
            path = out_dir / f"{index:03d}.wav"
            path.write_bytes(response.content)
            rate, samples = scipy.io.wavfile.read(path)
            row["audio_s"] = len(samples) / rate
        else:
            _LOGGER.error("sentence %d: HTTP %d %s", index, response.status_code, response.text)
        return row

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, range(len(texts))))


def summary(rows: list[dict], wall_s: float, batch_sizes: dict[int, int]) -> str:
    """The printed summary: counts, audio seconds, throughput, p50/p95 latency, batch sizes."""
    latency = percentiles_ms([r["latency_s"] for r in rows], (50, 95))
    audio_s = sum(r["audio_s"] for r in rows)
    failures = sum(1 for r in rows if r["status"] != 200)
    mean_batch = mean_batch_size(batch_sizes) or 0.0
    return "\n".join([
        "== demo summary ==",
        f"requests:            {len(rows)}",
        f"failures:            {failures}",
        f"total audio:         {audio_s:.2f} s",
        f"wall time:           {wall_s:.2f} s",
        f"throughput:          {audio_s / wall_s:.2f} audio s per wall s",
        f"latency p50 / p95:   {latency['p50_ms']:.0f} / {latency['p95_ms']:.0f} ms",
        f"handler batch sizes: {batch_sizes} (size: handler calls; mean {mean_batch:.2f})",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-batch-delay-ms", type=int, default=50)
    parser.add_argument("--out", default=str(REPO_ROOT / "out" / "demo"))
    parser.add_argument("--no-build", action="store_true", help="reuse model_store/tts.mar")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    texts = [line.strip() for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line.strip()][: args.sentences]
    if not args.no_build:
        build(build_args([]))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = start_server(run_dir=REPO_ROOT / "out" / "demo-server", free_ports=True)
    try:
        client = TorchServeClient(info)
        client.register("tts.mar", model_name="tts", batch_size=args.batch_size,
                        max_batch_delay_ms=args.max_batch_delay_ms, initial_workers=1)
        start = time.perf_counter()
        rows = send_all(client, texts, out_dir, args.concurrency)
        wall_s = time.perf_counter() - start
        batch_sizes = parse_batch_sizes(client.metrics_text(), "tts")
    finally:
        stop_server(info)
    print(summary(rows, wall_s, batch_sizes))
    print(f"WAV files: {out_dir}")
    return 1 if any(r["status"] != 200 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
