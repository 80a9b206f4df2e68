"""The benchmark's fixed workload: Harvard sentences mixed with 3-6-sentence paragraphs.

Every system and every load level consumes the same list in the same order
(request ``i`` is ``workload[i % len(workload)]``), so systems see identical
texts. The list depends only on the sentence file, the count, the paragraph
fraction and the seed.

This module is pure apart from ``load_sentences`` (which reads the file).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Sequence

from scripts.tslib import REPO_ROOT

#: The Harvard sentences (IEEE 1969): 72 lists of 10 phonetically balanced sentences.
SENTENCES_PATH: Final = REPO_ROOT.parent / "shared" / "data" / "harvard-sentences.txt"
DEFAULT_SEED: Final = 20240601
#: Share of requests that are paragraphs; the rest are single sentences.
DEFAULT_PARAGRAPH_FRACTION: Final = 0.25
#: Paragraph length range, sentences (inclusive).
PARAGRAPH_SENTENCES: Final = (3, 6)


@dataclass(frozen=True)
class WorkloadItem:
    """One request's text.

    Attributes:
        text: what the client sends.
        num_sentences: 1 for a single sentence, 3-6 for a paragraph.
    """

    text: str
    num_sentences: int


def load_sentences(path: Path = SENTENCES_PATH) -> list[str]:
    """Non-empty, stripped lines of the sentence file, in file order.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: it holds fewer sentences than the longest paragraph.
    """
    sentences = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(sentences) < PARAGRAPH_SENTENCES[1]:
        raise ValueError(f"{path}: need at least {PARAGRAPH_SENTENCES[1]} sentences, found {len(sentences)}")
    return sentences


def build_workload(
    sentences: Sequence[str],
    *,
    count: int,
    seed: int = DEFAULT_SEED,
    paragraph_fraction: float = DEFAULT_PARAGRAPH_FRACTION,
) -> list[WorkloadItem]:
    """A deterministic list of ``count`` requests.

    Each request is, with probability ``paragraph_fraction``, a paragraph of
    3-6 consecutive sentences (uniform length, uniform start) joined by a
    space, else one uniformly drawn sentence.

    Args:
        sentences: the sentence pool (at least 6).
        count: number of requests (>= 1).
        seed: random seed; same inputs and seed, same list.
        paragraph_fraction: probability of a paragraph, in [0, 1].

    Raises:
        ValueError: a bad count, fraction or pool size.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if not 0.0 <= paragraph_fraction <= 1.0:
        raise ValueError(f"paragraph_fraction must be in [0, 1], got {paragraph_fraction}")
    low, high = PARAGRAPH_SENTENCES
    if len(sentences) < high:
        raise ValueError(f"need at least {high} sentences, got {len(sentences)}")
    rng = random.Random(seed)
    items: list[WorkloadItem] = []
    for _ in range(count):
        if rng.random() < paragraph_fraction:
            length = rng.randint(low, high)
            start = rng.randrange(len(sentences) - length + 1)
            items.append(WorkloadItem(" ".join(sentences[start : start + length]), length))
        else:
            items.append(WorkloadItem(sentences[rng.randrange(len(sentences))], 1))
    return items


def poisson_arrivals(rate_rps: float, horizon_s: float, *, seed: int = DEFAULT_SEED) -> list[float]:
    """Arrival times of a Poisson process: exponential gaps of mean ``1 / rate_rps`` seconds.

    Args:
        rate_rps: mean arrival rate, requests per second (> 0).
        horizon_s: arrivals at times in ``[0, horizon_s)`` seconds are returned.
        seed: random seed; same arguments, same times.

    Returns:
        Ascending arrival times in seconds.

    Raises:
        ValueError: ``rate_rps <= 0``.
    """
    if rate_rps <= 0:
        raise ValueError(f"rate_rps must be > 0, got {rate_rps}")
    rng = random.Random(seed)
    times: list[float] = []
    now_s = rng.expovariate(rate_rps)
    while now_s < horizon_s:
        times.append(now_s)
        now_s += rng.expovariate(rate_rps)
    return times
