"""In-process classifier heads: ``hfcls:PATH_OR_ID``, a transformers checkpoint saved from
``AutoModelForSequenceClassification`` (a fine-tuned BERT, ToxiGen's RoBERTa, Regard).

A classifier reads a text and scores its labels; it does not write. It is a detector
only (``--socialbias-guard=hfcls:...``, judges/classifier.py maps its labels to N / OB /
BB). Its answer travels the same road as a chat model's (``Model.chat``: the cache,
counters, one call per distinct text) as a ChatResponse whose ``text`` is the label the
head scores highest and whose one ``logprobs`` entry holds every label's
log-probability in ``top``, in the head's id order (log-sigmoid for multi-label heads).
The text to classify is the content of the call's one message.

Where the checkpoint comes from: a folder (``save_pretrained``), or a Hugging Face model
id already in the local cache; nothing is ever downloaded (``local_files_only``), and a
checkpoint that is not there is a usage error before the run, as is one whose
``config.json`` names no ``...ForSequenceClassification`` architecture (its head would be
random). The cache key names the checkpoint by the sha256 of its files' content
(``checkpoint_fingerprint``): a retrained head with the same shapes is a new model.

Truncation: a text longer than the model's input limit (the tokenizer's
``model_max_length``, else ``max_position_embeddings``; ``max_length=`` lowers it) is cut
to fit, by default keeping its first and last halves (``truncate=head_tail``, as the
BenevDial paper fed its fine-tuned BERT); ``head`` keeps the start, ``tail`` the end. A
cut answer has ``finish_reason`` ``length``, its ``prompt_tokens`` are the tokens read,
and its ``logprobs`` entry says ``input_tokens``: the reports say which dialogues were cut.

Settings, as spec parameters: ``device`` (as hf:), ``dtype`` (float32 by default, so CPU
and GPU agree to rounding; float16, bfloat16), ``max_batch`` (default 32),
``batch_wait_ms`` (default 5), ``max_length``, ``truncate``, and the label settings
judges/classifier.py reads (``labels``, ``threshold``). Requests in flight together are
scored in padded batches (eval mode, no sampling: the same text in the same batch gets
the same scores). Float arithmetic depends on a batch's shape, so what shares a batch
can move a score by about 1e-6: scores are rounded to 6 decimals and the decision is
the top label's, so a class moves only where two labels tie to that precision. The
record/replay cache replays scores exactly; ``max_batch=1`` scores each text alone, the
same to the bit in every run. Needs the ``gpu`` extra (torch, transformers).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..runcache import current
from .base import FINISH_LENGTH, FINISH_STOP, ChatResponse
from .batcher import RowBatcher

INSTALL_HINT = "pip install 'pytest-socialbias[gpu]' (torch and transformers)"
DEFAULT_MAX_BATCH = 32
DEFAULT_BATCH_WAIT_MS = 5.0
TRUNCATIONS = ("head_tail", "head", "tail")
DEFAULT_TRUNCATION = "head_tail"
DTYPES = ("float32", "float16", "bfloat16")
#: Spec parameters of the runtime (this module) and of the label reading (judges/classifier.py).
RUNTIME_SETTINGS = ("device", "dtype", "max_batch", "batch_wait_ms", "max_length", "truncate", "pair")
LABEL_SETTINGS = ("labels", "threshold")
SETTINGS = RUNTIME_SETTINGS + LABEL_SETTINGS
#: Settings that change what the head answers: they travel with every call, so the cache
#: key has them (device does not: CPU and GPU agree to the rounding).
ANSWER_SETTINGS = ("dtype", "max_length", "truncate", "pair")
#: Decimals kept of every score (float noise from batch shapes is about 1e-6).
DIGITS = 6
#: ``model_max_length`` of a tokenizer that sets none (transformers' "very large" sentinel).
_NO_LIMIT = 1_000_000
#: Held while a head is loaded (the run's loaded heads: runcache.py, classifier_models).
_LOADED_LOCK = threading.Lock()
#: (folder, every file's name, size and modification time) -> fingerprint: process-wide, as
#: the fingerprint is a function of the files' content, which the key follows (a file
#: rewritten has another modification time): each checkpoint is read once per process.
_FINGERPRINTS: dict = {}


def check_available(option: str) -> None:
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"{option}: the hfcls backend needs {' and '.join(missing)}: {INSTALL_HINT}")


def check_spec(spec, option: str) -> None:
    """The spec's settings, before the run: known names, sane values, no request parameters."""
    where = f"{option}={spec}"
    if spec.params:
        raise ConfigError(
            f"{where}: a classifier head takes no request parameters ({', '.join(sorted(spec.params))}); "
            f"its settings: {', '.join(SETTINGS)}"
        )
    unknown = sorted(set(spec.runtime) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"{where}: unknown hfcls setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
    for name in ("max_batch", "max_length"):
        value = spec.runtime.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "max_batch" else 8)):
            raise ConfigError(f"{where}: {name}={value!r}: expected a whole number >= {1 if name == 'max_batch' else 8}")
    wait = spec.runtime.get("batch_wait_ms")
    if wait is not None and (not isinstance(wait, (int, float)) or isinstance(wait, bool) or wait < 0):
        raise ConfigError(f"{where}: batch_wait_ms={wait!r}: expected a number of milliseconds >= 0")
    truncate = spec.runtime.get("truncate", DEFAULT_TRUNCATION)
    if truncate not in TRUNCATIONS:
        raise ConfigError(f"{where}: truncate={truncate!r}: expected one of {', '.join(TRUNCATIONS)}")
    dtype = spec.runtime.get("dtype", "float32")
    if dtype not in DTYPES:
        raise ConfigError(f"{where}: dtype={dtype!r}: expected one of {', '.join(DTYPES)}")
    pair = spec.runtime.get("pair", False)
    if not isinstance(pair, bool):
        raise ConfigError(f"{where}: pair={pair!r}: expected true (the user turn and the agent turn as a sentence pair, "
                          "as a moderation classifier of prompt and response reads them) or false")


def answer_params(spec) -> dict:
    """What a call to this classifier carries so that its cache key changes with every
    setting that changes the answer (``ANSWER_SETTINGS``, with their defaults)."""
    out = {"truncate": spec.runtime.get("truncate", DEFAULT_TRUNCATION), "dtype": spec.runtime.get("dtype", "float32")}
    if spec.runtime.get("max_length") is not None:
        out["max_length"] = spec.runtime["max_length"]
    if spec.runtime.get("pair"):
        out["pair"] = True
    return out


# --------------------------------------------------------------------------- the checkpoint


def locate(model: str, where: str) -> Path:
    """The folder of checkpoint ``model``: the folder itself, or the snapshot of a model id
    in the local Hugging Face cache. Never downloads; ConfigError with the fix otherwise."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise ConfigError(f"{where}: {model} is a file; give the checkpoint's folder (config.json, weights, tokenizer)")
    found = _cached_snapshot(model)
    if found is not None:
        return found
    raise ConfigError(
        f"{where}: no checkpoint folder {model} here, and no model {model!r} in the local Hugging Face cache; "
        "give the folder a fine-tuned model was saved to (save_pretrained), or fetch the model beforehand "
        f"(huggingface-cli download {model}) on a machine with network: the run never downloads"
    )


def _cached_snapshot(model: str) -> Path | None:
    if model.count("/") > 1 or model.startswith((".", "/", "~")):
        return None  # a path that is not there, not a model id
    snapshots = current().hub_snapshots  # per run: a download in between finds a newer one
    if model not in snapshots:
        try:
            from huggingface_hub import snapshot_download

            snapshots[model] = Path(snapshot_download(repo_id=model, local_files_only=True))
        except Exception:  # not installed, not cached, or not a valid id: the caller says what to do
            return None
    return snapshots[model]


@dataclass(frozen=True)
class Head:
    """What a checkpoint's ``config.json`` says of its classification head."""

    folder: str
    labels: tuple  # label names by id
    multi_label: bool  # sigmoid per label (problem_type multi_label_classification), else softmax
    architecture: str
    model_type: str | None = None


def read_head(folder: Path, where: str) -> Head:
    """The head of the checkpoint in ``folder``, or ConfigError: no config.json, not a
    sequence classifier, no weights, no tokenizer."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ConfigError(f"{where}: {folder} has no config.json: not a transformers checkpoint (save it with save_pretrained)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot read {config_path}: {exc}") from None
    architectures = config.get("architectures") or []
    heads = [a for a in architectures if isinstance(a, str) and a.endswith("ForSequenceClassification")]
    if not heads:
        named = ", ".join(map(str, architectures)) or "none named"
        raise ConfigError(
            f"{where}: {folder} is not a sequence classifier (its config.json architectures: {named}); hfcls: "
            "takes a checkpoint saved from AutoModelForSequenceClassification (a fine-tuned classification head); "
            "for a chat model write hf:PATH"
        )
    raw = config.get("id2label") or {}
    try:
        by_id = {int(k): str(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {config_path}: id2label keys must be label ids (0, 1, ...)") from None
    count = config.get("num_labels") or len(by_id)
    if not by_id and count:
        by_id = {i: f"LABEL_{i}" for i in range(int(count))}
    if sorted(by_id) != list(range(len(by_id))) or len(by_id) < 2:
        raise ConfigError(f"{where}: {config_path}: id2label must name labels 0..N-1, at least two; it has {raw!r}")
    if not any(p.is_file() for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") or p.name.endswith(".index.json")):
        raise ConfigError(f"{where}: {folder} has no weights (model.safetensors or pytorch_model.bin)")
    tokenizer_files = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model")
    if not any((folder / name).is_file() for name in tokenizer_files):
        raise ConfigError(
            f"{where}: {folder} has no tokenizer ({', '.join(tokenizer_files[:3])}, ...); save the tokenizer the "
            "head was trained with into the same folder (tokenizer.save_pretrained)"
        )
    return Head(
        folder=str(folder),
        labels=tuple(by_id[i] for i in range(len(by_id))),
        multi_label=config.get("problem_type") == "multi_label_classification",
        architecture=heads[0],
        model_type=config.get("model_type"),
    )


def checkpoint_fingerprint(folder: Path) -> str:
    """``sha256:...`` of the content of every file of the checkpoint folder (config,
    tokenizer, weights; READMEs and dot-files aside), so the cache never mixes two
    trainings of one architecture. Read once per process (a BERT-base reads in about a
    second)."""
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() != ".md")
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    key = (str(Path(folder).resolve()), stats)
    if key not in _FINGERPRINTS:
        digest = hashlib.sha256()
        for path in files:
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            digest.update(b"\0")
        _FINGERPRINTS[key] = "sha256:" + digest.hexdigest()
    return _FINGERPRINTS[key]


# --------------------------------------------------------------------------- the backend


@dataclass
class _Row:
    text: str
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    pair: str | None = None  # the agent turn, read as the second sequence (pair=true)
    result: ChatResponse | None = None


class HFClassifierBackend:
    def __init__(self, spec, option: str, gpus: str | None = None):
        check_available(option)
        check_spec(spec, option)
        self.spec = spec
        self.option = option
        self.gpus = gpus
        self.folder = locate(spec.model, f"{option}={spec}")
        settings = spec.runtime
        self.max_batch = int(settings.get("max_batch", DEFAULT_MAX_BATCH))
        self.batch_wait_s = float(settings.get("batch_wait_ms", DEFAULT_BATCH_WAIT_MS)) / 1000.0
        self.truncate = settings.get("truncate", DEFAULT_TRUNCATION)
        self.base_url = "in-process"
        self._loaded = None  # (tokenizer, model, device, limit)
        self._load_lock = threading.Lock()
        self._batcher = RowBatcher("socialbias-hfcls-batcher", self.max_batch, self.batch_wait_s, self._score)
        #: Rows per batch scored, for tests and benchmarks.
        self.batches: list[int] = []

    def batch_stats(self) -> dict:
        """What this backend's batcher gathered in this process, and where it scored."""
        device = self._loaded[2] if self._loaded is not None else None
        return {**self._batcher.stats(), "device": device, "max_batch": self.max_batch}

    # ---- loading ----------------------------------------------------------------------

    def _load(self):
        with self._load_lock:
            if self._loaded is None:
                settings = self.spec.runtime
                # The fingerprint too: a folder retrained in place is another model.
                key = (str(self.folder), checkpoint_fingerprint(self.folder), settings.get("device"),
                       settings.get("dtype", "float32"), settings.get("max_length"), self.gpus)
                loaded = current().classifier_models  # once per run, shared by its roles
                with _LOADED_LOCK:
                    if key not in loaded:
                        loaded[key] = self._load_model()
                self._loaded = loaded[key]
            return self._loaded

    def _load_model(self) -> tuple:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from .hf_backend import worker_device

        where = f"{self.option}={self.spec}"
        settings = self.spec.runtime
        device = settings.get("device") or worker_device(self.gpus)
        dtype = getattr(torch, settings.get("dtype", "float32"))
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
            model, info = AutoModelForSequenceClassification.from_pretrained(
                str(self.folder), local_files_only=True, dtype=dtype, output_loading_info=True
            )
        except (OSError, ValueError, ImportError, KeyError) as exc:
            raise ConfigError(f"{where}: cannot load the classifier: {exc}") from None
        missing = list(info.get("missing_keys") or [])
        if missing:
            # transformers would start these at random: the scores would mean nothing.
            raise ConfigError(
                f"{where}: the checkpoint lacks weights the classifier needs ({', '.join(sorted(missing)[:4])}"
                f"{', ...' if len(missing) > 4 else ''}): it would score at random; give the folder the "
                "fine-tuned model was saved to"
            )
        model.to(device)
        model.eval()
        limits = [n for n in (getattr(tokenizer, "model_max_length", None),) if isinstance(n, int) and n < _NO_LIMIT]
        limit = limits[0] if limits else int(getattr(model.config, "max_position_embeddings", 512))
        wanted = settings.get("max_length")
        if wanted is not None:
            if wanted > limit:
                raise ConfigError(f"{where}: max_length={wanted} is more than the model reads ({limit} tokens)")
            limit = wanted
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        return tokenizer, model, device, limit

    # ---- the call ---------------------------------------------------------------------

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0,
        **_constrain,
    ) -> ChatResponse:
        pair = bool(params.get("pair"))
        if len(messages) != (2 if pair else 1):
            raise ValueError("a classifier call carries one message, the text to classify, or with pair=true two: "
                             "the user turn and the agent turn")
        unknown = sorted(set(params) - set(ANSWER_SETTINGS))
        if unknown:
            raise ConfigError(f"{self.option}={self.spec}: a classifier takes no parameter {', '.join(unknown)}")
        if self._loaded is None:
            await asyncio.to_thread(self._load)
        loop = asyncio.get_running_loop()
        row = _Row(text=messages[0]["content"], future=loop.create_future(), loop=loop,
                   pair=messages[1]["content"] if pair else None)
        self._batcher.submit(row)
        await row.future
        assert row.result is not None  # the batch sets it before it resolves the future (or raises)
        return row.result

    def encode(self, text: str, pair: str | None = None) -> tuple[list[int], int]:
        """(the token ids the head reads, the text's full length in tokens): cut to the
        model's limit as ``truncate`` says, the tokenizer's special tokens kept. A
        ``pair`` (the agent turn after the user turn) goes in as the tokenizer's second
        sequence; when the two are too long, the user turn is cut from its start, then
        (if the agent turn alone is too long) both, as the tokenizer's longest_first does."""
        return self.encode_with_types(text, pair)[:2]

    def encode_with_types(self, text: str, pair: str | None = None) -> tuple[list[int], int, list[int] | None]:
        """``encode``, and the segment of each token for a pair (None for one text)."""
        tokenizer, _, _, limit = self._load()
        if pair is not None:
            whole = tokenizer(text, pair, verbose=False)
            full = len(whole["input_ids"])
            if full <= limit:
                return list(whole["input_ids"]), full, _types(whole)
            for strategy in ("only_first", "longest_first"):
                try:
                    cut = tokenizer(text, pair, truncation=strategy, max_length=limit, verbose=False)
                except Exception:  # only_first cannot make room: the agent turn alone is too long
                    continue
                if len(cut["input_ids"]) <= limit:
                    return list(cut["input_ids"]), full, _types(cut)
            raise ValueError(f"the user and agent turns do not fit the classifier's {limit} tokens")
        ids, full = self._encode_one(tokenizer, limit, text)
        return ids, full, None

    def _encode_one(self, tokenizer, limit: int, text: str) -> tuple[list[int], int]:
        encoded = tokenizer(text, return_special_tokens_mask=True, verbose=False)
        ids, special = list(encoded["input_ids"]), list(encoded["special_tokens_mask"])
        if len(ids) <= limit:
            return ids, len(ids)
        start = next((i for i, s in enumerate(special) if not s), len(ids))
        end = len(ids) - next((i for i, s in enumerate(reversed(special)) if not s), 0)
        head, body, tail = ids[:start], ids[start:end], ids[end:]
        room = max(1, limit - len(head) - len(tail))
        if self.truncate == "head":
            body = body[:room]
        elif self.truncate == "tail":
            body = body[-room:]
        else:
            first = (room + 1) // 2
            body = body[:first] + (body[-(room - first):] if room - first else [])
        return head + body + tail, len(ids)

    def _score(self, rows: list[_Row]) -> None:
        import torch

        tokenizer, model, device, limit = self._load()
        self.batches.append(len(rows))
        typed = [self.encode_with_types(row.text, row.pair) for row in rows]
        encoded = [(ids_, full) for ids_, full, _ in typed]
        width = max(len(ids) for ids, _ in encoded)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in encoded], device=device)
        mask = torch.tensor([[1] * len(ids_) + [0] * (width - len(ids_)) for ids_, _ in encoded], device=device)
        inputs = {"input_ids": ids, "attention_mask": mask}
        if any(types is not None for _, _, types in typed):  # sentence pairs: the second segment marked
            inputs["token_type_ids"] = torch.tensor(
                [(types or [0] * len(ids_)) + [0] * (width - len(ids_)) for ids_, _, types in typed], device=device)
        with torch.no_grad():
            logits = model(**inputs).logits.float().cpu()
        multi = getattr(model.config, "problem_type", None) == "multi_label_classification"
        scores = torch.nn.functional.logsigmoid(logits) if multi else torch.log_softmax(logits, dim=-1)
        names = [str(model.config.id2label[i]) for i in range(logits.shape[-1])]
        for row, (kept, full), values in zip(rows, encoded, scores.tolist()):
            rounded = [round(float(v), DIGITS) for v in values]
            best = max(range(len(rounded)), key=lambda i: (rounded[i], -i))  # ties: the lower id
            entry = {"token": names[best], "logprob": rounded[best],
                     "top": [{"token": name, "logprob": value} for name, value in zip(names, rounded)]}
            if full > len(kept):
                entry["input_tokens"] = full
            row.result = ChatResponse(
                text=names[best], finish_reason=FINISH_LENGTH if full > len(kept) else FINISH_STOP,
                prompt_tokens=len(kept), completion_tokens=0, logprobs=[entry], model=self.spec.model,
            )

    async def aclose(self) -> None:
        self._batcher.close()


def _types(encoded) -> list[int] | None:
    """The segment ids a tokenizer gave a pair (None where it gives none: RoBERTa-style
    models tell the segments apart by their separator alone)."""
    types = encoded.get("token_type_ids") if hasattr(encoded, "get") else None
    return list(types) if types is not None else None
