"""Tests of ``scripts/bench_planner.py`` with a fake engine (no timing asserts)."""

from __future__ import annotations

import json

import numpy as np

from scripts import bench_planner
from tests.fakes import FakeEngine

_WORDS = "one two three four five six seven eight".split()
_SENTENCES = [f"Sentence number {word} is here." for word in _WORDS * 5]


def _args(*extra: str):
    return bench_planner.parse_args(["--batch-sizes", "2", "4", "--batches", "2", "--repeats", "3", *extra])


def test_texts_are_sentences_or_paragraphs_of_three_to_six():
    texts = bench_planner.make_texts(_SENTENCES, 200, np.random.default_rng(0), paragraph_share=0.5)
    counts = [text.count("Sentence") for text in texts]
    assert set(counts) <= {1, 3, 4, 5, 6}
    assert 70 <= counts.count(1) <= 130
    again = bench_planner.make_texts(_SENTENCES, 200, np.random.default_rng(0), paragraph_share=0.5)
    assert again == texts


def test_batches_hold_every_segment_of_their_requests():
    texts = ["One. Two three.", "Four five six.", "Seven!", "Eight nine."]
    batches = bench_planner.make_batches(FakeEngine(), texts, 2, {})
    assert [b.num_requests for b in batches] == [2, 2]
    assert [len(b.ids) for b in batches] == [3, 2]
    assert batches[0].ids[0] == [15, 14, 5]  # "One" -> o, n, e


def test_strategies_cover_every_item_once():
    batch = bench_planner.Batch(num_requests=2, ids=[[1] * n for n in (5, 3, 5, 9)])
    limits = bench_planner.PlanLimits(max_items=32, max_padded_tokens=100)
    bench = bench_planner.Bench(FakeEngine(), pad_id=0, limits=limits)
    for strategy in bench_planner.STRATEGIES:
        plan = bench_planner.sub_batches_for(strategy, batch, bench.fitter, bench.limits)
        assert sorted(i for sub in plan for i in sub) == [0, 1, 2, 3], strategy
    assert bench_planner.sub_batches_for("one_batch", batch, bench.fitter, bench.limits) == [[0, 1, 2, 3]]
    assert len(bench_planner.sub_batches_for("singles", batch, bench.fitter, bench.limits)) == 4


def test_run_benchmark_tallies_and_summary(tmp_path):
    engine = FakeEngine()
    args = _args("--records", str(tmp_path / "records.jsonl"))
    tallies = bench_planner.run_benchmark(engine, _SENTENCES, args)
    assert list(tallies) == [2, 4]
    for by_strategy in tallies.values():
        assert list(by_strategy) == list(bench_planner.STRATEGIES)
        for tally in by_strategy.values():
            assert len(tally.seconds) == 2 and all(len(per_pass) == 3 for per_pass in tally.seconds)
            assert tally.total_s() > 0
        assert by_strategy["one_batch"].calls_per_pass() == 2  # one call per batch, 2 batches
        assert by_strategy["singles"].padding_ratio() == 1.0
    summary = bench_planner.summary(tallies)
    assert set(summary) == {"2", "4"}
    assert set(summary["4"]) == {"one_batch_s", "singles_s", "planner_s", "padding_ratio"}
    table = bench_planner.markdown_table(tallies).splitlines()
    assert len(table) == 2 + 2 * 3 and table[2].startswith("| 2 | one_batch |")
    bench_planner.write_records(args.records, tallies)
    kinds = [json.loads(line)["kind"] for line in args.records.read_text().splitlines()]
    assert kinds.count("run") == 2 * 3 * 2 * 3  # sizes x strategies x batches x passes
    assert kinds.count("call") == sum(t.calls for s in tallies.values() for t in s.values())


def test_strategy_order_rotates_between_batches_and_passes():
    engine = FakeEngine()
    limits = bench_planner.PlanLimits(max_items=32, max_padded_tokens=10_000)
    bench = bench_planner.Bench(engine, pad_id=0, limits=limits)
    order: list[str] = []
    real_run = bench.run

    def spy(strategy, batch):
        order.append(strategy)
        return real_run(strategy, batch)

    bench.run = spy
    batch = bench_planner.Batch(num_requests=1, ids=[[1, 2, 3]])
    bench_planner.timed_passes(bench, {1: [batch, batch]}, repeats=2)
    firsts = order[::3]
    assert firsts == ["one_batch", "planner", "planner", "singles"]
