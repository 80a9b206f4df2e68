"""A small client: text in, WAV out, through a running TorchServe.

Examples::

    python -m scripts.synthesize "The birch canoe slid on the smooth planks." -o out/hello.wav
    echo "Read from stdin." | python -m scripts.synthesize - -o out/stdin.wav --speed 1.2

Reads the server's URLs and token from ``--run-dir`` (as written by
``make serve``). Exit status 1 and the server's JSON error on failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import requests

from scripts.tslib import DEFAULT_RUN_DIR, ServerInfo, TorchServeClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", help="text to speak, or - to read stdin")
    parser.add_argument("-o", "--output", default="out/speech.wav", help="where to write the audio")
    parser.add_argument("--model", default="tts", help="registered model name")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--format", choices=("wav", "pcm"), default="wav")
    parser.add_argument("--run-dir", default=str(DEFAULT_RUN_DIR))
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.text == "-" else args.text
    try:
        client = TorchServeClient(ServerInfo.load(Path(args.run_dir)))
    except FileNotFoundError:
        print(f"no server recorded in {args.run_dir}; run `make serve` first", file=sys.stderr)
        return 1
    try:
        response = client.synthesize(args.model, {"text": text, "speed": args.speed, "format": args.format})
    except requests.RequestException as exc:
        print(f"cannot reach TorchServe at {client.info.inference_url}: {type(exc).__name__}", file=sys.stderr)
        return 1
    if response.status_code != 200:
        print(f"HTTP {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(response.content)
    print(f"wrote {out} ({response.headers.get('X-Audio-Duration-Seconds')} s of audio, "
          f"{response.headers.get('X-Sample-Rate')} Hz)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
