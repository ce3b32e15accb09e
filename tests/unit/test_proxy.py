"""A proxy set for the machine (corporate CI runners) never carries calls to loopback: the
SDK clients, managed servers' readiness probes and the fake server of the tests are all
reached directly (models/transport.keep_loopback_off_proxies)."""

from __future__ import annotations

import socket

import pytest

from pytest_socialbias.models.transport import keep_loopback_off_proxies

from ..support.helpers import model_args, read_report, suite_yaml


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_loopback_is_added_to_no_proxy_only_where_a_proxy_is_set():
    quiet = {"PATH": "/bin"}
    keep_loopback_off_proxies(quiet)
    assert quiet == {"PATH": "/bin"}
    corporate = {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "internal.example.com,localhost"}
    keep_loopback_off_proxies(corporate)
    assert corporate["NO_PROXY"] == corporate["no_proxy"] == "internal.example.com,localhost,127.0.0.1,::1"
    everything = {"all_proxy": "socks5://proxy:1080", "no_proxy": "*"}
    keep_loopback_off_proxies(everything)
    assert everything == {"all_proxy": "socks5://proxy:1080", "no_proxy": "*"}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_reaches_a_loopback_server_with_a_dead_proxy_set(pytester, server, keys, monkeypatch, workers):
    dead = f"http://127.0.0.1:{closed_port()}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    pytester.makefile(".yaml", demo=suite_yaml([("age-001", "age", "x"), ("age-002", "age", "y")], turns=1))
    result = pytester.runpytest_subprocess("demo.yaml", *model_args(server), "-p", "no:cacheprovider", "-n", str(workers),
                                           "--socialbias-report=r.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert {case["outcome"] for case in read_report(pytester.path / "r.json")["cases"]} == {"clean"}
    assert server.request_count > 0


def test_the_gpu_extra_brings_what_a_gguf_load_needs():
    """transformers loads a .gguf file only with accelerate installed ("accelerate is
    required when loading a GGUF file"): the gpu extra must bring it."""
    from pathlib import Path

    import tomllib

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {requirement.split(">")[0].split("=")[0].strip() for requirement in extras["gpu"]}
    assert {"torch", "transformers", "gguf", "accelerate"} <= names
