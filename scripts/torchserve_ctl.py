"""Start, stop and manage a TorchServe for this repo (the operator's workflow).

Examples::

    python -m scripts.torchserve_ctl start                 # ports from config.properties
    python -m scripts.torchserve_ctl register tts.mar --model-name tts --batch-size 8 --max-batch-delay-ms 50
    python -m scripts.torchserve_ctl scale tts --workers 2
    python -m scripts.torchserve_ctl describe tts
    python -m scripts.torchserve_ctl unregister tts
    python -m scripts.torchserve_ctl batch-sizes           # handler batch-size histogram (metrics)
    python -m scripts.torchserve_ctl stop

State lives in ``--run-dir`` (default ``out/torchserve``): the runtime
config, logs, TorchServe's ``key_file.json`` and ``server.json`` (pid, URLs).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import requests

from scripts.tslib import DEFAULT_RUN_DIR, ServerInfo, TorchServeClient, parse_batch_sizes, start_server, stop_server

_LOGGER = logging.getLogger(__name__)


def _client(args: argparse.Namespace) -> TorchServeClient:
    try:
        return TorchServeClient(ServerInfo.load(Path(args.run_dir)))
    except FileNotFoundError:
        raise SystemExit(f"no server started from {args.run_dir} (run `make serve` first)") from None


def cmd_start(args: argparse.Namespace) -> dict:
    run_dir = Path(args.run_dir)
    if (run_dir / "server.json").exists():
        raise SystemExit(f"a server is already recorded in {run_dir}/server.json; run `make stop` first")
    info = start_server(run_dir=run_dir, free_ports=args.free_ports)
    return {"pid": info.pid, "inference": info.inference_url, "management": info.management_url,
            "metrics": info.metrics_url, "key_file": str(info.key_file)}


def cmd_stop(args: argparse.Namespace) -> dict:
    try:
        info = ServerInfo.load(Path(args.run_dir))
    except FileNotFoundError:
        return {"stopped": None, "note": f"no server recorded in {args.run_dir}"}
    stop_server(info)
    return {"stopped": info.pid}


def cmd_register(args: argparse.Namespace) -> dict:
    return _client(args).register(
        args.archive, model_name=args.model_name, batch_size=args.batch_size,
        max_batch_delay_ms=args.max_batch_delay_ms, initial_workers=args.workers,
    )


def cmd_scale(args: argparse.Namespace) -> dict:
    return _client(args).scale(args.model_name, min_workers=args.workers, max_workers=args.max_workers)


def cmd_describe(args: argparse.Namespace) -> list:
    return _client(args).describe(args.model_name)


def cmd_unregister(args: argparse.Namespace) -> dict:
    return _client(args).unregister(args.model_name)


def cmd_batch_sizes(args: argparse.Namespace) -> dict:
    return parse_batch_sizes(_client(args).metrics_text(), args.model_name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", default=str(DEFAULT_RUN_DIR))
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start TorchServe and wait until healthy")
    start.add_argument("--free-ports", action="store_true", help="pick free loopback ports instead of 8080-8082")
    start.set_defaults(func=cmd_start)
    sub.add_parser("stop", help="stop the server started from --run-dir").set_defaults(func=cmd_stop)
    reg = sub.add_parser("register", help="register an archive from model_store/")
    reg.add_argument("archive")
    reg.add_argument("--model-name")
    reg.add_argument("--batch-size", type=int)
    reg.add_argument("--max-batch-delay-ms", type=int)
    reg.add_argument("--workers", type=int, default=1)
    reg.set_defaults(func=cmd_register)
    scale = sub.add_parser("scale", help="set the number of workers")
    scale.add_argument("model_name")
    scale.add_argument("--workers", type=int, required=True)
    scale.add_argument("--max-workers", type=int)
    scale.set_defaults(func=cmd_scale)
    for name, func in (("describe", cmd_describe), ("unregister", cmd_unregister)):
        p = sub.add_parser(name)
        p.add_argument("model_name")
        p.set_defaults(func=func)
    sizes = sub.add_parser("batch-sizes", help="histogram of handler batch sizes from the metrics endpoint")
    sizes.add_argument("model_name", nargs="?")
    sizes.set_defaults(func=cmd_batch_sizes)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        answer = args.func(args)
    except (requests.RequestException, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))  # the CLI's output is its JSON answer
    return 0


if __name__ == "__main__":
    sys.exit(main())
