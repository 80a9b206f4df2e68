"""The runtime copy of config.properties: absolute paths, loopback ports, restricted URLs."""

from __future__ import annotations

import re

from scripts.tslib import REPO_ROOT, write_runtime_config


def read_props(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))


def test_runtime_config_moves_every_port_and_keeps_loopback(tmp_path):
    store = tmp_path / "model store.x"
    urls = write_runtime_config(REPO_ROOT / "config.properties", tmp_path / "c.properties",
                                model_store=store, ports=(1001, 1002, 1003, 1004, 1005))
    props = read_props(tmp_path / "c.properties")
    assert urls == {"inference": "http://127.0.0.1:1001", "management": "http://127.0.0.1:1002",
                    "metrics": "http://127.0.0.1:1003"}
    assert (props["grpc_inference_port"], props["grpc_management_port"]) == ("1004", "1005")
    assert props["grpc_inference_address"] == props["grpc_management_address"] == "127.0.0.1"
    assert props["model_store"] == str(store)
    assert props["metrics_config"] == str(REPO_ROOT / "metrics.yaml")
    assert props["enable_model_api"] == "true"
    assert "disable_token_authorization" not in props  # token authorization stays on
    # allowed_urls: java-properties-escaped regex matching only archives inside the store
    pattern = re.compile(props["allowed_urls"].replace("\\\\", "\\"))
    assert pattern.fullmatch(f"file://{store}/tts.mar")
    assert not pattern.fullmatch("http://127.0.0.1:9/tts.mar")
    assert not pattern.fullmatch(f"file://{store}/../etc/x.mar")
    assert not pattern.fullmatch(f"file://{tmp_path}/other/tts.mar")


def test_template_ports_kept_without_free_ports(tmp_path):
    urls = write_runtime_config(REPO_ROOT / "config.properties", tmp_path / "c.properties", model_store=tmp_path)
    assert urls["inference"] == "http://127.0.0.1:8080"
