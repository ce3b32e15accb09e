"""In-process batched generation with a transformers causal LM: ``hf:PATH_OR_NAME``.

For a release candidate on the team's own GPUs without a server. Requests that are in
flight together (the event loop runs every case of a batch concurrently) are gathered into
padded batches: a request waits at most ``batch_wait_ms`` for others, a batch holds at most
``max_batch`` requests, and one decode loop serves the whole batch with each row's own
settings:

- sampling per row: temperature (0 = greedy), top-p, its own budget (``max_tokens``) and
  its own ``torch.Generator``, seeded from the request's ``seed`` or, without one, from
  the request itself, so the same request gives the same answer whatever else shares its
  batch;
- answers held to labels (a judge's ``Yes``/``No``, ``N``/``O``/``B``): at every step only
  the tokens that continue one of the labels are allowed, so the first token already
  decides the label (its log-probabilities are those the treatment judge reads);
- token log-probabilities of the model's own distribution (before temperature), with
  the top alternatives, when asked.

Settings, as spec parameters (never sent, not in the cache key): ``device`` (default cuda
when available, else cpu; under xdist a worker takes the ``--socialbias-gpus`` id of its
index), ``device_map`` (``auto``: one model spread over the visible GPUs; the model is
always loaded straight onto its device), ``dtype`` (auto, float32, float16, bfloat16), ``max_batch`` (default 16),
``batch_wait_ms`` (default 5), ``gguf_file`` (a GGUF file inside a folder). A ``.gguf`` file
as the model loads through transformers' GGUF support (dequantised), so the embedded
SmolLM2 serves this path in tests. Needs the ``gpu`` extra (torch, transformers, gguf).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..runcache import current
from .base import FINISH_LENGTH, FINISH_STOP, ChatResponse, request_seed
from .batcher import RowBatcher

INSTALL_HINT = "pip install 'pytest-socialbias[gpu]' (torch, transformers and gguf)"
DEFAULT_MAX_BATCH = 16
DEFAULT_BATCH_WAIT_MS = 5.0
DEFAULT_MAX_TOKENS = 256
SETTINGS = ("device", "device_map", "dtype", "max_batch", "batch_wait_ms", "gguf_file")
#: Held while a model is loaded: the run's models and failed loads (runcache.py: hf_models,
#: hf_failed) are shared by every backend of the run.
_LOADED_LOCK = threading.Lock()
#: The decoding parameters this backend takes; any other is refused with the spec.
DECODING = ("temperature", "top_p", "max_tokens", "seed")
#: Every batch this process decoded: (rows, generated tokens, seconds). A log, not a cache:
#: process-wide so that a benchmark reads it after an in-process run (benchmarks/gpu.py),
#: which empties it first; nothing in a run reads it.
BATCH_LOG: list = []


def check_available(option: str) -> None:
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"{option}: the hf backend needs {' and '.join(missing)}: {INSTALL_HINT}")


def check_spec(spec, option: str) -> None:
    unknown = sorted(set(spec.runtime) - set(SETTINGS))
    if unknown:
        raise ConfigError(
            f"{option}={spec}: unknown hf setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)} "
            "(decoding parameters: temperature, top_p, max_tokens, seed)"
        )
    refused = sorted(name for name, value in spec.params.items() if name not in DECODING and value is not None)
    if refused:
        raise ConfigError(
            f"{option}={spec}: the hf backend takes no parameter {', '.join(refused)}; its decoding parameters: "
            f"{', '.join(DECODING)} (serve the model with vllm: or server: for others)"
        )
    for name in ("max_batch",):
        value = spec.runtime.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{option}={spec}: {name}={value!r}: expected a whole number >= 1")
    wait = spec.runtime.get("batch_wait_ms")
    if wait is not None and (not isinstance(wait, (int, float)) or isinstance(wait, bool) or wait < 0):
        raise ConfigError(f"{option}={spec}: batch_wait_ms={wait!r}: expected a number of milliseconds >= 0")


def worker_device(gpus: str | None) -> str:
    """The device of this process: the ``--socialbias-gpus`` id of its xdist worker index
    (round robin), else cuda, else cpu."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    from .managed import logical

    ids = logical(gpus) if gpus else list(range(torch.cuda.device_count()))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return f"cuda:{ids[index % len(ids)]}" if ids else "cpu"


def device_plan(spec, gpus: str | None, workers: int) -> str:
    """Where ``spec``'s model will run, in words, as ``worker_device`` will choose: its
    ``device=``, else each process's CUDA device (per xdist worker), else the CPU."""
    if spec.runtime.get("device_map"):
        return f"spread by device_map={spec.runtime['device_map']} over the GPUs the process sees"
    if spec.runtime.get("device"):
        return f"on {spec.runtime['device']} (its device=)"
    import torch

    if not torch.cuda.is_available():
        return "on cpu (no CUDA device visible to this process)"
    from .managed import logical

    ids = logical(gpus) if gpus else list(range(torch.cuda.device_count()))
    from .managed import visible_devices

    visible = visible_devices()

    def shown(n: int) -> str:  # with the physical device where a scheduler renumbered them
        return f"cuda:{n}" + (f" (CUDA_VISIBLE_DEVICES entry {visible[n]})" if visible and n < len(visible) else "")

    if not workers:
        return f"on {shown(ids[0])}"
    return "on " + ", ".join(f"{shown(ids[i % len(ids)])} for gw{i}" for i in range(workers))


@dataclass
class _Row:
    """One request in a batch."""

    prompt: list
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    top_logprobs: int | None
    choices: list | None  # token-id sequences of the labels, when held to them
    # None: a row decoded directly (``token_row``), never queued on the batcher
    future: asyncio.Future | None
    loop: asyncio.AbstractEventLoop | None
    tokens: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    done: bool = False
    finish: str = FINISH_STOP


def token_row(prompt: list, max_tokens: int, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> _Row:
    """A request given as token ids, outside any event loop: what ``complete`` queues for
    a chat call, without the tokenizer and its chat template (benchmarks/gpu_probe.py)."""
    return _Row(prompt=list(prompt), max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed,
                top_logprobs=None, choices=None, future=None, loop=None)


class HFBackend:
    def __init__(self, spec, option: str, gpus: str | None = None):
        check_available(option)
        check_spec(spec, option)
        self.spec = spec
        self.option = option
        self.gpus = gpus
        settings = spec.runtime
        self.max_batch = int(settings.get("max_batch", DEFAULT_MAX_BATCH))
        self.batch_wait_s = float(settings.get("batch_wait_ms", DEFAULT_BATCH_WAIT_MS)) / 1000.0
        self.base_url = "in-process"
        # transformers' model and tokenizer: untyped to the checker (no stubs)
        self._model: Any = None
        self._tokenizer: Any = None
        self._device: str | None = None
        self._load_lock = threading.Lock()
        self._batcher = RowBatcher("socialbias-hf-batcher", self.max_batch, self.batch_wait_s, self._decode)
        #: Batches run and rows per batch, for benchmarks and tests.
        self.batches: list[int] = []
        #: Rows computed over every step of every batch (a finished row stops counting).
        self.row_steps = 0
        #: Positions whose logits each forward pass computes: the last one (the only one
        #: a step reads). 0 means every position, as transformers takes it: the
        #: behaviour before logits_to_keep, kept for benchmarks/gpu_probe.py to measure.
        self.logits_to_keep = 1

    def use_loaded(self, tokenizer, model, device: str) -> None:
        """Serve an already built model (benchmarks/gpu_probe.py drives ``_decode`` with a
        randomly initialised one and token ids: no checkpoint, no download). ``tokenizer``
        needs ``pad_token_id`` and ``eos_token_id``, and ``decode`` for log-probabilities."""
        self._tokenizer, self._model, self._device = tokenizer, model, device

    def batch_stats(self) -> dict:
        """What this backend's batcher gathered in this process, and where it decoded."""
        return {**self._batcher.stats(), "device": self._device, "max_batch": self.max_batch}

    # ---- loading ----------------------------------------------------------------------

    def _load(self) -> None:
        with self._load_lock:
            if self._model is not None:
                return
            settings = self.spec.runtime
            key = (self.spec.model, settings.get("device"), settings.get("dtype"), settings.get("gguf_file"), self.gpus)
            # Loaded once per run and shared by its roles; the next run loads it again
            # (runcache.py), and tries again a load that failed.
            caches = current()
            loaded, failed = caches.hf_models, caches.hf_failed
            with _LOADED_LOCK:
                if key in failed:  # a load that failed is not tried again for every case
                    raise failed[key]
                if key not in loaded:
                    try:
                        loaded[key] = self._load_model()
                    except ConfigError as exc:
                        failed[key] = exc
                        raise
                    except Exception as exc:  # late failures too: out of memory while moving it
                        failed[key] = ConfigError(f"{self.option}={self.spec}: cannot load the model: "
                                                  f"{type(exc).__name__}: {exc}")
                        raise failed[key] from None
            self._tokenizer, self._model, self._device = loaded[key]

    def _load_model(self) -> tuple:
        """(tokenizer, model, device): loading a GGUF file dequantises it and converts its
        tokenizer, which takes a while, so a process loads each model once."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        settings = self.spec.runtime
        device = settings.get("device") or worker_device(self.gpus)
        dtype = settings.get("dtype", "auto")
        dtypes = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        if dtype not in dtypes:
            raise ConfigError(f"{self.option}={self.spec}: dtype={dtype!r}: expected one of {', '.join(dtypes)}")
        path = Path(self.spec.model).expanduser()
        kwargs: dict = {}
        source = self.spec.model
        if path.is_file() and path.suffix == ".gguf":
            source, kwargs["gguf_file"] = str(path.parent), path.name
        elif settings.get("gguf_file"):
            kwargs["gguf_file"] = settings["gguf_file"]
        # Loaded straight onto its device (no copy of the whole model in host memory first);
        # device_map=auto spreads a model too large for one GPU over the visible ones.
        device_map = settings.get("device_map") or device
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=dtypes[dtype] if dtype != "auto" or device != "cpu" else torch.float32,
                device_map=device_map, **kwargs,
            )
        except (OSError, ValueError, ImportError) as exc:
            raise ConfigError(f"{self.option}={self.spec}: cannot load the model: {exc}") from None
        if settings.get("device_map"):
            device = str(next(model.parameters()).device)  # inputs go where the first layers are
        model.eval()
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        return tokenizer, model, device

    # ---- the call ---------------------------------------------------------------------

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0,
        constrain: str | None = None,
    ) -> ChatResponse:
        if self._model is None:
            await asyncio.to_thread(self._load)
        unknown = sorted(set(params) - set(DECODING))
        if unknown:
            raise ConfigError(
                f"{self.option}={self.spec}: the hf backend takes no parameter {', '.join(unknown)}; "
                "decoding parameters: temperature, top_p, max_tokens, seed"
            )
        tokenizer = self._tokenizer
        # The template's text, then its tokens (the template writes any special tokens).
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        labels = None
        if choices:
            labels = [tokenizer.encode(str(c), add_special_tokens=False) for c in choices]
            labels = [ids for ids in labels if ids]
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        row = _Row(
            prompt=list(prompt),
            max_tokens=int(params.get("max_tokens") or DEFAULT_MAX_TOKENS),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            seed=int(params["seed"]) + sample if "seed" in params else request_seed(messages, params, sample),
            top_logprobs=top_logprobs,
            choices=labels or None,
            future=future,
            loop=loop,
        )
        self._batcher.submit(row)
        await future
        text = tokenizer.decode(row.tokens, skip_special_tokens=True).strip()
        return ChatResponse(
            text=text,
            finish_reason=row.finish,
            prompt_tokens=len(row.prompt),
            completion_tokens=len(row.tokens),
            logprobs=row.logprobs if top_logprobs is not None else None,
            model=self.spec.model,
        )

    def _decode(self, rows: list[_Row]) -> None:
        """One decode loop for the batch. Each step keeps only the last position's logits
        (``logits_to_keep``), picks every row's token on the device in one go
        (``_pick_batch``) and copies the chosen tokens to the host once."""
        import torch

        self.batches.append(len(rows))
        started = time.perf_counter()
        model, tokenizer, device = self._model, self._tokenizer, self._device
        width = max(len(r.prompt) for r in rows)
        pad = tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r.prompt)) + r.prompt for r in rows], device=device)
        mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in rows], device=device)
        kind = torch.device(device).type
        generators = [torch.Generator(device=kind).manual_seed(r.seed) for r in rows]
        temperature = torch.tensor([r.temperature for r in rows], device=device, dtype=torch.float32)
        top_p = torch.tensor([r.top_p for r in rows], device=device, dtype=torch.float32)
        eos = set(_eos_ids(model, tokenizer))
        parameters = inspect.signature(model.forward).parameters
        # The KV cache argument is ``cache`` in newer transformers, ``past_key_values`` before.
        cache_arg = "cache" if "cache" in parameters else "past_key_values"
        keep = next(({name: self.logits_to_keep} for name in ("logits_to_keep", "num_logits_to_keep")
                     if name in parameters), {})
        past: Any = None
        steps = max(r.max_tokens if r.choices is None else max(len(c) for c in r.choices) for r in rows)
        batch = list(rows)  # the rows still decoding: a finished row leaves the batch
        with torch.no_grad():
            for step in range(steps):
                positions = (mask.cumsum(-1) - 1).clamp(min=0)
                if past is None:
                    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
                else:
                    out = model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:],
                                use_cache=True, **{cache_arg: past}, **keep)
                past = getattr(out, cache_arg, None)
                self.row_steps += len(batch)
                chosen = self._pick_batch(batch, out.logits[:, -1, :].float(), generators, step, temperature, top_p)
                for row, token in zip(batch, chosen):
                    if row.done:
                        continue
                    row.tokens.append(token)
                    if row.choices is not None:
                        if any(c == row.tokens for c in row.choices):
                            row.done = True
                    elif token in eos:
                        row.tokens.pop()
                        row.done = True
                    elif len(row.tokens) >= row.max_tokens:
                        row.done, row.finish = True, FINISH_LENGTH
                if all(r.done for r in batch):
                    break
                active = [i for i, row in enumerate(batch) if not row.done]
                if len(active) < len(batch) and hasattr(past, "batch_select_indices"):
                    # Finished rows leave the batch (and the KV cache): no more compute for them.
                    still = torch.tensor(active, device=device)
                    past.batch_select_indices(still)
                    ids, mask, temperature, top_p = ids[still], mask[still], temperature[still], top_p[still]
                    generators = [generators[i] for i in active]
                    batch = [batch[i] for i in active]
                    chosen = [chosen[i] for i in active]
                chosen = [pad if row.done else token for row, token in zip(batch, chosen)]
                ids = torch.cat([ids, torch.tensor(chosen, device=device)[:, None]], dim=1)
                mask = torch.cat([mask, torch.ones((len(batch), 1), dtype=mask.dtype, device=device)], dim=1)
        for row in rows:
            row.done = True
        BATCH_LOG.append((len(rows), sum(len(r.tokens) for r in rows), time.perf_counter() - started))

    def _pick_batch(self, rows: list[_Row], logits, generators, step: int, temperature, top_p) -> list[int]:
        """Every row's next token, on the device: labels enforced by a mask, greedy where
        the temperature is 0, else a draw from the tempered distribution cut to its top-p
        set (Gumbel-max, with noise from the row's own generator, so a row's draw never
        depends on what shares its batch). One host copy of the chosen tokens (and of
        the log-probabilities of the rows that asked for them)."""
        import torch

        count, vocabulary = logits.shape
        logprobs = torch.log_softmax(logits, dim=-1)  # the model's own distribution, for the report
        scores = logits
        held = [i for i, row in enumerate(rows) if row.choices is not None and not row.done]
        if held:
            allowed = torch.zeros_like(scores, dtype=torch.bool)
            for i in held:
                row = rows[i]
                tokens = sorted({c[step] for c in row.choices or () if len(c) > step and c[:step] == row.tokens})
                allowed[i, tokens] = True
            constrained = torch.zeros(count, dtype=torch.bool, device=scores.device)
            constrained[held] = True
            scores = scores.masked_fill(constrained[:, None] & ~allowed, float("-inf"))
        greedy = temperature <= 0
        chosen = torch.argmax(scores, dim=-1)
        if not bool(greedy.all()):
            probs = torch.softmax(scores / torch.where(greedy, 1.0, temperature)[:, None], dim=-1)
            if bool((top_p < 1.0).any()):
                ordered, order = torch.sort(probs, dim=-1, descending=True)
                cut = torch.cumsum(ordered, dim=-1) - ordered > top_p[:, None]  # the smallest set reaching top_p
                probs = torch.zeros_like(probs).scatter(1, order, ordered.masked_fill(cut, 0.0))
            noise = torch.stack([
                torch.rand(vocabulary, generator=generators[i], device=scores.device) if not bool(greedy[i])
                else torch.full((vocabulary,), 0.5, device=scores.device)
                for i in range(count)
            ])
            gumbel = -torch.log(-torch.log(noise.clamp(1e-20, 1.0 - 1e-7)))
            sampled = torch.argmax(torch.log(probs) + gumbel, dim=-1)
            chosen = torch.where(greedy, chosen, sampled)
        tokens = chosen.tolist()
        wanted = [i for i, row in enumerate(rows) if row.top_logprobs is not None and not row.done]
        if wanted:
            k = max(1, max(rows[i].top_logprobs or 0 for i in wanted))
            index = torch.tensor(wanted, device=logprobs.device)
            picked = logprobs[index].gather(1, chosen[index][:, None]).squeeze(1).tolist()
            top = torch.topk(logprobs[index], k, dim=-1)
            values, positions = top.values.tolist(), top.indices.tolist()
            tokenizer = self._tokenizer
            for n, i in enumerate(wanted):
                row = rows[i]
                row.logprobs.append({
                    "token": tokenizer.decode([tokens[i]]),
                    "logprob": float(picked[n]),
                    "top": [{"token": tokenizer.decode([t]), "logprob": float(v)}
                            for v, t in list(zip(values[n], positions[n]))[: max(1, row.top_logprobs or 0)]],
                })
        return tokens

    async def aclose(self) -> None:
        self._batcher.close()


def _eos_ids(model, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id if getattr(model, "generation_config", None) else None
    ids = ids if isinstance(ids, list) else [ids] if ids is not None else []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return [int(i) for i in ids]
