"""What a run loads, and when: no SDK where no model is called, and the garbage
collector as it was once the run is over (heap.py).

The SDK imports are the largest fixed cost of a run (openai about 1.4 s of CPU, anthropic
about 3 s on the project's machine): a replay calls nothing, and an xdist controller
hands every case to its workers, so neither should pay it. Each check runs in a fresh
interpreter, since this test process imported both SDKs long ago.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import anthropic
import openai
import pytest

from pytest_socialbias import heap
from pytest_socialbias.models.providers import ANTHROPIC, OPENAI

from ..support.helpers import suite_yaml


def fresh_python(code: str, **env) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON object as its last line."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("provider, client", [(OPENAI, openai.AsyncOpenAI), (ANTHROPIC, anthropic.AsyncAnthropic)])
def test_declared_default_urls_are_the_sdks(provider, client, monkeypatch):
    # The cache key names the default URL without the SDK: it must be the very string the
    # SDK's client reports, or a replay would miss what the record run stored.
    monkeypatch.delenv(provider.default_url[0], raising=False)
    sdk = client(api_key="sk-test-not-a-real-key")
    assert str(sdk.base_url).rstrip("/") == provider.default_url[1]


REQUEST_OF = """
    import json, sys
    from pytest_socialbias.models import Model, CallPool, parse_spec
    model = Model("target", parse_spec({spec!r}, "--target"), "--target", CallPool(cache=None))
    request = model.request([{{"role": "user", "content": "hi"}}])
    print(json.dumps({{"base_url": request["base_url"], "openai": "openai" in sys.modules,
                      "anthropic": "anthropic" in sys.modules}}))
"""


@pytest.mark.parametrize("spec, url", [
    ("openai:gpt-4o-mini", "https://api.openai.com/v1"),
    ("anthropic:claude-x", "https://api.anthropic.com"),
    ("openai:m@http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
])
def test_a_request_key_needs_no_sdk(spec, url):
    # What a replay computes for every call: the key, hence the base URL, with no SDK.
    seen = fresh_python(REQUEST_OF.format(spec=spec), OPENAI_API_KEY="sk-test", ANTHROPIC_API_KEY="sk-ant-test")
    assert seen == {"base_url": url, "openai": False, "anthropic": False}


def test_a_base_url_from_the_environment_is_the_sdks_reading():
    # OPENAI_BASE_URL set: the SDK decides what it means (its normalisation), so the key
    # names exactly where the calls go, and the SDK is loaded for it.
    seen = fresh_python(REQUEST_OF.format(spec="openai:m"), OPENAI_API_KEY="sk-test",
                        OPENAI_BASE_URL="HTTP://LOCALHOST:8000/v1")
    assert seen == {"base_url": "http://localhost:8000/v1", "openai": True, "anthropic": False}


def test_collector_resumes_after_the_warm_up_and_keeps_what_loaded_out_of_it(monkeypatch):
    from pytest_socialbias.models import CallPool, parse_spec
    from pytest_socialbias.modelset import ModelSet

    def failing_backend(self, spec, option):
        assert not gc.isenabled()  # paused while the SDKs load
        raise RuntimeError("no such endpoint")

    monkeypatch.setattr(CallPool, "backend_for", failing_backend)

    class Stub:
        settings = type("S", (), {"dry_run": False, "record": "off"})()
        specs = {"target": parse_spec("openai:m@http://127.0.0.1:9/v1", "--target")}
        pool = CallPool(cache=None)
        _warm_thread = None

    threshold = gc.get_threshold()
    for enabled_before in (True, False):
        stub = Stub()
        (gc.enable if enabled_before else gc.disable)()
        try:
            frozen = gc.get_freeze_count()
            ModelSet.start_warm_up(stub)
            stub._warm_thread.join(30)
            # A failed build too: the collector is as it was, never left off by us.
            assert gc.isenabled() is enabled_before
            assert gc.get_freeze_count() > frozen or frozen > 0
            assert gc.get_threshold()[0] == max(threshold[0], heap.YOUNG_THRESHOLD)
        finally:
            heap.restore()
            heap.thaw()
            gc.enable()
        assert gc.get_threshold() == threshold


def test_settling_leaves_a_collector_turned_off_by_threshold_alone():
    saved = gc.get_threshold()
    gc.set_threshold(0)  # the user's way of turning automatic collection off
    try:
        heap.settle()
        assert gc.get_threshold()[0] == 0
        heap.restore()
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*saved)
        heap.thaw()


def test_a_run_leaves_the_collector_as_it_found_it(pytester, server, keys):
    # In-process, as an IDE's runner or pytester would see it: the threshold as it was;
    # what the run froze is unfrozen when the next session starts, so nothing piles up.
    gc.unfreeze()
    before, enabled = gc.get_threshold(), gc.isenabled()
    try:
        pytester.makefile(".yaml", demo=suite_yaml([("age-001", "age", "Statement one.")]))
        url = server.openai_base_url
        result = pytester.runpytest_inprocess(
            "demo.yaml", "-p", "no:cacheprovider", f"--target=openai:t@{url}", f"--judge=openai:j@{url}",
            f"--user-model=openai:u@{url}", "--socialbias-record=off",
        )
        result.assert_outcomes(passed=1)
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() > 0  # left for the process's exit, not walked again
        pytester.makepyfile(test_plain="def test_one():\n    pass\n")
        pytester.runpytest_inprocess("test_plain.py", "-p", "no:cacheprovider").assert_outcomes(passed=1)
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == before
    finally:  # whatever failed above, later tests find the collector as this one did
        heap.restore()
        heap.thaw()
        gc.unfreeze()
        gc.set_threshold(*before)
        (gc.enable if enabled else gc.disable)()


def test_an_xdist_controller_loads_no_sdk_and_a_worker_only_the_one_named(server, tmp_path):
    # The workers call the models; the controller only gathers their results.
    (tmp_path / "demo.yaml").write_text(suite_yaml([("age-001", "age", "Statement one."),
                                                    ("age-002", "age", "Statement two.")]))
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import json, sys

        def pytest_unconfigure(config):
            who = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
            with open(f"loaded-{who}.json", "w") as out:
                json.dump({"openai": "openai" in sys.modules, "anthropic": "anthropic" in sys.modules}, out)
    """))
    url = server.openai_base_url
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", "-n", "1",
         f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
         "--socialbias-record=off"],
        cwd=tmp_path, env=dict(os.environ, OPENAI_API_KEY="sk-test"), capture_output=True, text=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert json.loads((tmp_path / "loaded-controller.json").read_text()) == {"openai": False, "anthropic": False}
    # A worker loads the SDK of the provider named, and no other.
    assert json.loads((tmp_path / "loaded-gw0.json").read_text()) == {"openai": True, "anthropic": False}
    assert len(server.requests) > 0
