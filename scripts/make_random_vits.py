"""Write a randomly initialised VITS checkpoint for offline tests and benchmarks.

Usage::

    python scripts/make_random_vits.py --out build/vits-tiny [--size tiny|mms] [--seed 0]

The directory loads with ``HfVitsEngine(checkpoint_dir=...)`` or
``VitsModel.from_pretrained(DIR, local_files_only=True)``; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from handler.engines.hf_vits import build_random_checkpoint  # noqa: E402

_LOGGER = logging.getLogger("make_random_vits")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, build the checkpoint, log where it is; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--size", choices=("tiny", "mms"), default="tiny", help="model size (default tiny)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the weights (default 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = build_random_checkpoint(args.out, size=args.size, seed=args.seed)
    _LOGGER.info("checkpoint ready: %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
