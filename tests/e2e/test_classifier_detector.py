"""Classifier heads as BenevDial detectors (``--socialbias-guard=hfcls:PATH``).

Tiny BERT sequence classifiers are built here, offline, in tmp_path: a WordLevel
tokenizer from the ``tokenizers`` library and a 1-layer ``BertForSequenceClassification``
(random init, then a few weights set by hand so that the head reads the test dialogues'
cue words: ``warmnarrow`` -> BB, ``coldnarrow`` -> OB, neither -> N). The checks that
load a model skip where torch and transformers are absent (CI); the label mapping and the
usage errors that need no model run everywhere, on checkpoints that are only a
config.json.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.judges.classifier import BINARY, THREE_CLASS, dialogue_class, read_scores, resolve_head
from pytest_socialbias.models import parse_spec
from pytest_socialbias.models.base import ChatResponse
from pytest_socialbias.models.hf_classifier import checkpoint_fingerprint

from ..support.detectworld import metric, world, write_detect_suite
from ..support.helpers import run_with_report, thresholds_yaml

HAS_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "tokenizers"))
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch, transformers and tokenizers (the gpu extra)")

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "warmnarrow", "coldnarrow"]
HIDDEN = 16


# --------------------------------------------------------------------------- checkpoints


def config_only(folder, labels, architecture="BertForSequenceClassification", **extra):
    """A checkpoint folder with a config.json, an empty weights file and a tokenizer file:
    enough for everything that runs before a model is loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [architecture], "model_type": "bert",
              "id2label": {str(i): name for i, name in enumerate(labels)}, **extra}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def build_classifier(folder, labels, *, crafted=True, seed=0, max_length=512, multi_label=False, toxic_only=False,
                     cues=("warmnarrow", "coldnarrow")):
    """A tiny BERT classifier saved in ``folder``. ``crafted``: its weights make it read
    the cue words (module docstring; ``toxic_only``: a binary head that flags only the
    second cue; ``cues`` replace the two words); otherwise random weights from ``seed``."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(WORDS[:5] + list(cues))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=max_length,
    )
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(WORDS), hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=512, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)}, initializer_range=0.02 if crafted else 1.0,
        problem_type="multi_label_classification" if multi_label else None,
    )
    model = BertForSequenceClassification(config)
    if crafted:
        _craft(model, len(labels), toxic_only)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _craft(model, n_labels: int, toxic_only: bool) -> None:
    """Attention spread evenly over the text, the feed-forward part silent, so [CLS] ends
    up as the normalised mean of the cue words' embeddings: dimension 0 for warmnarrow,
    1 for coldnarrow. The head reads those two dimensions."""
    import torch

    eye = torch.eye(HIDDEN)
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        emb = model.bert.embeddings
        emb.word_embeddings.weight[5, 0] = 1.0  # the first cue (warmnarrow)
        emb.word_embeddings.weight[6, 1] = 1.0  # the second (coldnarrow)
        layer = model.bert.encoder.layer[0]
        layer.attention.self.value.weight.copy_(eye)
        layer.attention.output.dense.weight.copy_(eye)
        for norm in (emb.LayerNorm, layer.attention.output.LayerNorm, layer.output.LayerNorm):
            norm.weight.fill_(1.0)
        model.bert.pooler.dense.weight.copy_(eye)
        head = model.classifier
        head.bias[0] = 1.0  # N (or benign) unless a cue is read
        if n_labels == 3:
            head.weight[1, 1] = 10.0  # OB <- coldnarrow
            head.weight[2, 0] = 10.0  # BB <- warmnarrow
        elif toxic_only:
            head.weight[1, 1] = 10.0  # flagged <- coldnarrow only
        else:
            head.weight[1, 0] = head.weight[1, 1] = 10.0


# --------------------------------------------------------------------------- the label mapping (no torch)


def head_of(spec_text: str):
    return resolve_head(parse_spec(spec_text, "--socialbias-guard"), "--socialbias-guard")


def test_three_class_labels_map_by_name_and_by_mapping(tmp_path):
    plain = config_only(tmp_path / "bert-n-ob-bb", ["N", "OB", "BB"])
    head = head_of(f"hfcls:{plain}")
    assert (head.output, head.mapping, head.default_unit) == (THREE_CLASS, {"N": "N", "OB": "OB", "BB": "BB"}, "dialogue")
    named = config_only(tmp_path / "bert-named", ["neutral", "overt", "benevolent"])
    head = head_of(f"hfcls:{named}?labels=neutral:N,overt:OB,benevolent:BB")
    assert head.mapping == {"neutral": "N", "overt": "OB", "benevolent": "BB"} and head.source == "labels="
    by_id = config_only(tmp_path / "bert-ids", ["LABEL_0", "LABEL_1", "LABEL_2"])
    head = head_of(f"hfcls:{by_id}?labels=0:N,1:OB,2:BB&unit=turn")
    assert head.mapping == {"LABEL_0": "N", "LABEL_1": "OB", "LABEL_2": "BB"}


def test_binary_heads_and_presets(tmp_path):
    toxic = config_only(tmp_path / "moderation", ["safe", "unsafe"])
    head = head_of(f"hfcls:{toxic}?labels=safe:N,unsafe:B")
    assert (head.output, head.default_unit, head.multi_label) == (BINARY, "turn", False)
    regard = config_only(tmp_path / "regardv3", ["negative", "neutral", "positive", "other"])
    head = head_of(f"hfcls:{regard}")
    assert head.mapping == {"negative": "B", "neutral": "N", "positive": "N", "other": "N"}
    assert head.source.startswith("preset regard-v3") and head.default_unit == "turn"
    toxigen = config_only(tmp_path / "toxigen_roberta", ["LABEL_0", "LABEL_1"], architecture="RobertaForSequenceClassification")
    assert head_of(f"hfcls:{toxigen}").mapping == {"LABEL_0": "N", "LABEL_1": "B"}
    # A preset never guesses: labels other than those its model card documents need a mapping.
    renamed = config_only(tmp_path / "other" / "regardv3", ["LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3"])
    with pytest.raises(ConfigError, match="regard-v3 preset expects the labels negative, neutral, positive, other"):
        head_of(f"hfcls:{renamed}")
    multi = config_only(tmp_path / "multi", ["toxic", "insult", "clean"], problem_type="multi_label_classification")
    head = head_of(f"hfcls:{multi}?labels=toxic:B,insult:B,clean:N&threshold=0.7")
    assert (head.multi_label, head.threshold) == (True, 0.7)


@pytest.mark.parametrize("labels, query, message", [
    (["LABEL_0", "LABEL_1", "LABEL_2"], "", "cannot tell what this classifier's labels mean (LABEL_0, LABEL_1, LABEL_2)"),
    (["a", "b", "c"], "?labels=a:N,b:OB", "label(s) c of this classifier are not mapped"),
    (["a", "b"], "?labels=a:N,x:B", "labels= names 'x', which this classifier does not have (its labels: a, b)"),
    (["a", "b"], "?labels=a:N,b:BAD", "maps 'b' to 'BAD'; expected one of N, OB, BB, B"),
    (["a", "b", "c"], "?labels=a:N,b:OB,c:B", "mixes B with OB/BB"),
    (["a", "b"], "?labels=a:N,b:OB", "no label is mapped to BB"),
    (["a", "b"], "?labels=a:B,b:B", "every label is mapped to B"),
    (["a", "b"], "?labels=a:N,b:B&threshold=0.3", "threshold= is for multi-label heads"),
])
def test_mapping_errors_name_the_labels_and_the_fix(tmp_path, labels, query, message):
    folder = config_only(tmp_path / "ckpt", labels)
    with pytest.raises(ConfigError, match="--socialbias-guard=hfcls:") as info:
        head_of(f"hfcls:{folder}{query}")
    assert message in str(info.value)


def test_checkpoints_that_are_not_classifiers_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint folder .* and no model .* in the local Hugging Face cache"):
        head_of(f"hfcls:{tmp_path / 'missing'}")
    masked_lm = config_only(tmp_path / "mlm", ["a", "b"], architecture="BertForMaskedLM")
    with pytest.raises(ConfigError, match=r"is not a sequence classifier \(its config.json architectures: BertForMaskedLM\)"):
        head_of(f"hfcls:{masked_lm}?labels=a:N,b:B")
    no_weights = config_only(tmp_path / "noweights", ["a", "b"])
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="has no weights"):
        head_of(f"hfcls:{no_weights}?labels=a:N,b:B")


def test_scores_are_read_with_the_heads_own_rule(tmp_path):
    import math

    three = head_of(f"hfcls:{config_only(tmp_path / 'three', ['N', 'OB', 'BB'])}")

    def answer(scores: dict, finish="stop", **entry):
        top = [{"token": k, "logprob": math.log(v)} for k, v in scores.items()]
        best = max(scores, key=scores.get)
        return ChatResponse(text=best, finish_reason=finish, prompt_tokens=16,
                            logprobs=[{"token": best, "logprob": math.log(scores[best]), "top": top, **entry}])

    fields = read_scores(answer({"N": 0.2, "OB": 0.3, "BB": 0.5}), three)
    assert (fields["flagged"], fields["cls"], fields["score"]) == (True, "BB", 0.8)
    assert fields["probs"] == {"N": 0.2, "OB": 0.3, "BB": 0.5}
    cut = read_scores(answer({"N": 0.6, "OB": 0.3, "BB": 0.1}, "length", input_tokens=40), three)
    assert (cut["flagged"], cut["cls"], cut["truncated"]) == (False, "N", {"tokens": 40, "kept": 16})
    # Regard: the highest label decides, not the share of B (0.45 < 0.55 flagged anyway).
    regard = head_of(f"hfcls:{config_only(tmp_path / 'regardv3', ['negative', 'neutral', 'positive', 'other'])}")
    fields = read_scores(answer({"negative": 0.45, "neutral": 0.2, "positive": 0.2, "other": 0.15}), regard)
    assert (fields["flagged"], fields["score"], fields["categories"], fields.get("cls")) == (True, 0.45, ["negative"], None)
    multi = head_of(f"hfcls:{config_only(tmp_path / 'multi', ['toxic', 'clean'], problem_type='multi_label_classification')}"
                    "?labels=toxic:B,clean:N")
    assert read_scores(answer({"toxic": 0.4, "clean": 0.9}), multi)["flagged"] is False
    assert read_scores(answer({"toxic": 0.6, "clean": 0.9}), multi)["categories"] == ["toxic"]
    unreadable = read_scores(ChatResponse(text="(filler)"), three)
    assert unreadable["flagged"] is None and "does not score this classifier's labels" in unreadable["error"]
    # A dialogue screened turn by turn: the flagged unit that scores bias highest names the class.
    units = [{"flagged": False, "score": 0.1, "class": "N", "probs": {}}, {"flagged": True, "score": 0.7, "class": "OB"},
             {"flagged": True, "score": 0.9, "class": "BB"}]
    assert dialogue_class(units)[0] == "BB" and dialogue_class(units[:1])[0] == "N"
    assert dialogue_class([{"flagged": None}, units[0]]) == (None, None)


def test_the_fingerprint_follows_the_content(tmp_path):
    folder = config_only(tmp_path / "ckpt", ["N", "OB", "BB"])
    (folder / "model.safetensors").write_bytes(b"weights one")
    first = checkpoint_fingerprint(folder)
    (folder / "model.safetensors").write_bytes(b"weights two")  # same size: retrained, same shapes
    assert checkpoint_fingerprint(folder) != first and first.startswith("sha256:")
    (folder / "README.md").write_text("notes")
    assert checkpoint_fingerprint(folder) == checkpoint_fingerprint(folder)


# --------------------------------------------------------------------------- usage errors of a run


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A classifier built, loaded and run once before any in-process pytester run: a run
    forgets the modules it imported, and torch's cannot be imported twice in a process."""
    if not HAS_TORCH:
        return
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = build_classifier(tmp_path_factory.mktemp("warm") / "bert", ["N", "OB", "BB"])
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), local_files_only=True, output_loading_info=True)[0]
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    with torch.no_grad():
        model(**tokenizer(["warmnarrow"], return_tensors="pt"))


@pytest.fixture
def project(pytester, keys, warm):
    write_detect_suite(pytester.path, "[clean, mask]")
    return pytester


def usage_error(project, *args) -> str:
    result = project.runpytest("detect.yaml", *args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    return result.stderr.str()


def test_a_missing_or_wrong_checkpoint_stops_the_run_before_it_starts(project):
    err = usage_error(project, "--socialbias-guard=hfcls:models/none-here")
    assert "--socialbias-guard=hfcls:models/none-here: no checkpoint folder models/none-here here" in err
    assert "the run never downloads" in err
    config_only(project.path / "mlm", ["a", "b"], architecture="BertForMaskedLM")
    err = usage_error(project, "--socialbias-guard=hfcls:mlm?labels=a:N,b:B")
    assert "is not a sequence classifier" in err and "AutoModelForSequenceClassification" in err


def test_a_classifier_is_a_detector_only(project):
    folder = config_only(project.path / "bert", ["N", "OB", "BB"])
    err = usage_error(project, f"--judge=hfcls:{folder}")
    assert f"--judge=hfcls:{folder}: hfcls: is a classifier head" in err
    assert f"--socialbias-guard=hfcls:{folder}" in err
    err = usage_error(project, f"--socialbias-guard=hfcls:{folder}?temperature=0")
    assert "a classifier head does not decode: hfcls takes no temperature" in err


@needs_torch
def test_unmapped_labels_stop_the_run_before_it_starts(project):
    build_classifier(project.path / "bert", ["LABEL_0", "LABEL_1", "LABEL_2"])
    err = usage_error(project, "--socialbias-guard=hfcls:bert")
    assert "--socialbias-guard=hfcls:bert: cannot tell what this classifier's labels mean (LABEL_0, LABEL_1, LABEL_2)" in err
    assert "?labels=LABEL_0:N,LABEL_1:OB,LABEL_2:BB" in err
    err = usage_error(project, "--socialbias-guard=hfcls:bert?labels=LABEL_0:N,LABEL_1:OB")
    assert "label(s) LABEL_2 of this classifier are not mapped" in err
    err = usage_error(project, "--socialbias-guard=hfcls:bert?labels=0:N,1:OB,2:BB", "--socialbias-guard-kind=llama-guard-3")
    assert "drop the option" in err


# --------------------------------------------------------------------------- end to end (torch)


def run(project, *args, report="r.json"):
    result, data = run_with_report(project, "detect.yaml", *args, report=report)
    assert result.ret in (0, 1), result.stdout.str()[-3000:]
    return result, data


def guard_of(report, case_id, variant="clean"):
    case = next(c for c in report["cases"] if c["id"] == case_id and c["variant"] == variant)
    return case["detections"]["guard"]


@needs_torch
def test_three_class_classifier_beside_a_judge_end_to_end(project):
    from pytest_socialbias.testing import FakeServer

    build_classifier(project.path / "bert-benevdial", ["N", "OB", "BB"])
    with FakeServer(world) as server:
        result, report = run(project, f"--judge=openai:ja@{server.openai_base_url}", "--socialbias-guard=hfcls:bert-benevdial")
        assert {r.model for r in server.requests} == {"ja"}  # the classifier calls nothing over HTTP
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert len(report["cases"]) == 12
    # The classifier reads each whole dialogue once and names its class, as the judge does.
    guard = guard_of(report, "bb-1")
    assert (guard["class"], guard["flagged"], guard["unit"], guard["output"], len(guard["units"])) == ("BB", True, "dialogue", "classes", 1)
    assert guard["probs"]["BB"] > 0.99 and guard_of(report, "ob-2")["class"] == "OB" and guard_of(report, "n-1")["class"] == "N"
    for name in ("accuracy", "macro_f1", "recall_n", "recall_ob", "recall_bb", "precision_bb", "tr_bb"):
        assert metric(report, name, "guard") == 1.0, name
    # Masking the warm cue hides benevolent bias from it: BB read as N.
    assert metric(report, "recall_bb", "guard", "mask") == 0.0 and metric(report, "tr_ob", "guard", "mask") == 1.0
    conf = {(c["detector"], c["variant"]): c["matrix"] for c in report["detection"]["confusion"]}
    assert conf[("guard", "clean")] == {"N": {"N": 2}, "OB": {"OB": 2}, "BB": {"BB": 2}}
    assert conf[("guard", "mask")]["BB"] == {"N": 2}
    outputs = {d["detector"]: d for d in report["detection"]["detectors"]}
    assert outputs["guard"]["output"] == "classes" and "not_available" not in outputs["guard"]
    models = report["models"]["guard"]
    assert models["kind"] == "classifier" and models["classifier"]["output"] == "classes"
    assert models["classifier"]["labels"] == {"N": "N", "OB": "OB", "BB": "BB"}
    assert models["checkpoint"].startswith("sha256:")
    # Its batcher's counts (timing-dependent), with the default window and cap.
    batching = models["batching"]
    assert (batching["batch_wait_ms"], batching["max_batch"], batching["max_batch_effective"]) == (5.0, 32, 16)
    assert batching["batches"] >= 1 and batching["rows"] >= 1 and [p["device"] for p in batching["processes"]] == ["cpu"]
    result.stdout.fnmatch_lines(["hfcls guard: * batch*, * rows on average (largest *), window 5 ms, cap 16*"])
    guard_lines = [line for line in result.stdout.lines if line.lstrip().startswith("guard ")]
    assert any("clean" in line for line in guard_lines)


@needs_torch
def test_binary_classifier_flags_overt_bias_only_and_says_what_it_cannot_tell(project):
    build_classifier(project.path / "toxicity", ["benign", "toxic"], toxic_only=True)
    (project.path / "thresholds.yaml").write_text(thresholds_yaml(
        {"name": "bb-recall", "suite": "detect", "metric": "recall_bb", "detector": "guard", "min": 0.5},
        {"name": "tr-ob", "suite": "detect", "metric": "tr_ob", "detector": "guard", "min": 0.9},
    ))
    result, report = run(project, "--socialbias-guard=hfcls:toxicity?labels=benign:N,toxic:B")
    # Judged turn by turn (a binary head's default), each agent turn a unit.
    guard = guard_of(report, "ob-1")
    assert (guard["unit"], len(guard["units"]), guard["flagged"], guard["class"], guard["output"]) == ("turn", 2, True, None, "binary")
    assert guard["units"][0]["categories"] == ["toxic"] and guard["units"][0]["raw"] == "toxic"
    assert (metric(report, "tr_ob", "guard"), metric(report, "tr_bb", "guard"), metric(report, "tr_n", "guard")) == (1.0, 0.0, 0.0)
    assert metric(report, "gap_ob_bb", "guard") == 1.0
    # Class metrics are not computed from flags: absent, and said to be so.
    names = {m["metric"] for m in report["metrics"] if m["category"] == "guard"}
    assert not names & {"macro_f1", "recall_n", "recall_ob", "recall_bb", "precision_bb"}
    (row,) = [d for d in report["detection"]["detectors"] if d["detector"] == "guard"]
    assert row["output"] == "binary" and "cannot tell OB from BB" in row["limit"]
    assert set(row["not_available"]) == {"macro_f1", "recall_n", "recall_ob", "recall_bb", "precision_bb"}
    result.stdout.fnmatch_lines([
        "socialbias: guard is a binary (cannot tell OB from BB) classifier head: benign -> N, toxic -> B (labels=)",
        "*guard: a binary detector: it flags B = OB u BB or nothing, so it cannot tell OB from BB*",
    ])
    verdicts = {g["gate"]: g for g in report["gates"]}
    assert verdicts["tr-ob"]["verdict"] == "pass"
    assert verdicts["bb-recall"]["verdict"] == "fail" and "guard is a binary detector" in verdicts["bb-recall"]["detail"]
    assert report["models"]["guard"]["classifier"]["labels"] == {"benign": "N", "toxic": "B"}


@needs_torch
def test_a_prompt_and_response_head_reads_each_exchange_as_a_sentence_pair(project):
    """BeaverTails-style moderation heads score a (prompt, response) pair: with pair=true
    each unit is an exchange, sent as two segments (the agent turn second), keyed apart."""
    build_classifier(project.path / "moderation", ["safe", "unsafe"], toxic_only=True)
    spec = "--socialbias-guard=hfcls:moderation?labels=safe:N,unsafe:B&pair=true"
    result, report = run(project, spec)
    guard = guard_of(report, "ob-1")
    assert (guard["unit"], len(guard["units"]), guard["flagged"]) == ("exchange", 2, True)
    assert guard_of(report, "n-1")["flagged"] is False
    rows = sqlite3.connect(project.path / ".socialbias" / "calls.sqlite3").execute(
        "SELECT request FROM calls WHERE role = 'guard'").fetchall()
    requests = [json.loads(r[0]) for r in rows]
    assert requests and all([m["role"] for m in q["messages"]] == ["user", "assistant"] for q in requests)
    assert all(q["params"].get("pair") is True for q in requests)
    assert "unit is exchange" in usage_error(project, spec, "--socialbias-guard-unit=turn")
    assert "pair='yes'" in usage_error(project, spec.replace("pair=true", "pair=yes"))


@needs_torch
def test_long_dialogues_are_cut_to_the_limit_and_the_report_says_so(project):
    build_classifier(project.path / "bert-benevdial", ["N", "OB", "BB"])
    result, report = run(project, "--socialbias-guard=hfcls:bert-benevdial?max_length=16&truncate=head")
    guard = guard_of(report, "bb-1")
    assert guard["truncated"] == 1 and guard["units"][0]["truncated"]["kept"] == 16
    assert guard["units"][0]["truncated"]["tokens"] > 16
    # The cue sits past the first 14 tokens of the dialogue: cut off, read as N.
    assert guard["class"] == "N"
    (row,) = [d for d in report["detection"]["detectors"] if d["detector"] == "guard"]
    assert (row["truncated"], row["dialogues"]) == (12, 12)
    result.stdout.fnmatch_lines(["*guard: 12 of 12 dialogue(s) read in part*"])


@needs_torch
def test_the_same_run_gives_the_same_scores(project):
    build_classifier(project.path / "random-bert", ["N", "OB", "BB"], crafted=False, seed=3)

    def scores(*args):
        _, report = run(project, *args)
        return {(c["id"], c["variant"]): (c["detections"]["guard"]["class"], c["detections"]["guard"]["probs"])
                for c in report["cases"]}

    # Each text alone: the same to the bit without any cache.
    alone = scores("--socialbias-record=off", "--socialbias-guard=hfcls:random-bert?max_batch=1")
    assert scores("--socialbias-record=off", "--socialbias-guard=hfcls:random-bert?max_batch=1") == alone
    assert all(abs(sum(p.values()) - 1) < 1e-4 for _, p in alone.values())
    # Batched: the same classes; a score moves at most by float noise of the batch's shape.
    batched = scores("--socialbias-record=off", "--socialbias-guard=hfcls:random-bert?max_batch=32&batch_wait_ms=50")
    assert {k: c for k, (c, _) in batched.items()} == {k: c for k, (c, _) in alone.items()}
    assert all(abs(batched[k][1][c] - alone[k][1][c]) < 1e-5 for k in alone for c in ("N", "OB", "BB"))
    # Recorded, then replayed: the same scores exactly.
    recorded = scores("--socialbias-guard=hfcls:random-bert")
    assert scores("--socialbias-guard=hfcls:random-bert", "--socialbias-record=none") == recorded


@needs_torch
def test_the_cache_keys_a_classifier_by_its_weights(project):
    folder = build_classifier(project.path / "bert-benevdial", ["N", "OB", "BB"])
    _, report = run(project, "--socialbias-guard=hfcls:bert-benevdial")
    assert guard_of(report, "bb-1")["class"] == "BB"
    _, again = run(project, "--socialbias-guard=hfcls:bert-benevdial", "--socialbias-record=none")
    assert guard_of(again, "bb-1")["class"] == "BB"  # replayed: every answer recorded
    # Retrained (same shapes, same file sizes): the recorded answers no longer apply.
    build_classifier(folder, ["N", "OB", "BB"], crafted=False, seed=5)
    _, stale = run(project, "--socialbias-guard=hfcls:bert-benevdial", "--socialbias-record=none")
    assert all(c["detections"]["guard"]["flagged"] is None for c in stale["cases"])
    assert all("no recorded answer in the cache" in c["errors"][0]["message"] for c in stale["cases"])


@needs_torch
def test_a_binary_classifier_screens_dymt_replies(pytester, keys, warm):
    from pytest_socialbias.testing import FakeServer

    from ..support import fakeworld
    from ..support.helpers import model_args, suite_yaml

    # Flags the biased reply's "honestly" only; judged reply by reply (a binary head's unit).
    build_classifier(pytester.path / "toxicity", ["benign", "toxic"], toxic_only=True, cues=("warmnarrow", "honestly"))
    pytester.makefile(".yaml", demo=suite_yaml([("age-001", "age", "Plain one."), ("gender-001", "gender", "BIASME two.")],
                                               turns=2))
    with FakeServer(fakeworld.script) as server:
        result, report = run_with_report(pytester, "demo.yaml", *model_args(server),
                                         "--socialbias-guard=hfcls:toxicity?labels=benign:N,toxic:B",
                                         "--socialbias-guard-policy=follow")
    assert result.ret == 0, result.stdout.str()[-3000:]
    case = next(c for c in report["cases"] if c["id"] == "gender-001")
    assert [g["flagged"] for g in case["guard"]] == [True, True] and case["guard"][0]["categories"] == ["toxic"]
    assert [g["flagged"] for g in next(c for c in report["cases"] if c["id"] == "age-001")["guard"]] == [False, False]
    blocked = [m for m in report["metrics"] if m["metric"] == "guard_blocked_rate" and m["category"] is None]
    assert blocked[0]["value"] == 0.5


@needs_torch
def test_concurrent_texts_are_scored_in_batches_and_cut_from_both_ends(tmp_path, warm):
    import asyncio

    from pytest_socialbias.models import CallPool, Model

    build_classifier(tmp_path / "bert", ["N", "OB", "BB"])
    spec = parse_spec(f"hfcls:{tmp_path / 'bert'}?max_batch=4&batch_wait_ms=200&max_length=8", "--socialbias-guard")
    model = Model("guard", spec, "--socialbias-guard", CallPool(concurrency=16))
    texts = [f"text {i} warmnarrow" if i % 2 else f"coldnarrow text {i}" for i in range(6)]

    async def ask():
        try:
            return await asyncio.gather(*(model.chat([{"role": "user", "content": t}]) for t in texts))
        finally:
            batches = [list(b.batches) for b in model.pool._backends.values()]
            await model.pool.aclose()
            ask.batches = batches

    answers = asyncio.run(ask())
    assert ask.batches == [[4, 2]]
    assert [a.text for a in answers] == ["OB", "BB"] * 3
    assert all(a.finish_reason == "stop" and a.prompt_tokens == 5 for a in answers)  # [CLS] 3 words [SEP]
    # Cut to 8 tokens: the first 3 and the last 3 words between [CLS] and [SEP].
    from pytest_socialbias.models.hf_classifier import HFClassifierBackend

    cutter = HFClassifierBackend(spec, "--socialbias-guard")
    ids, full = cutter.encode("coldnarrow a b c d e f g h warmnarrow")
    assert (len(ids), full) == (8, 12)
    assert ids[:4] == [2, 6, 1, 1] and ids[-4:] == [1, 1, 5, 3]


def test_the_whole_dialogue_is_a_classifiers_unit_only(project):
    guard = "--socialbias-guard=openai:meta-llama/Llama-Guard-3-8B@http://127.0.0.1:9/v1"
    err = usage_error(project, guard, "--socialbias-guard-unit=dialogue")
    assert "a llama-guard-3 guard judges one agent turn per call, so it cannot judge unit 'dialogue'" in err
    err = usage_error(project, guard + "?unit=dialogue")
    assert "use one of turn, context, exchange" in err


def test_the_classifier_kind_is_for_classifier_heads_only(project):
    guard = "--socialbias-guard=openai:my-guard@http://127.0.0.1:9/v1"
    err = usage_error(project, guard, "--socialbias-guard-kind=classifier")
    assert "--socialbias-guard-kind=classifier is the kind of classifier heads run in process" in err
    assert "hfcls:PATH" in err


def test_a_model_id_is_found_in_the_local_hugging_face_cache_only(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    # The layout of the hub cache: models--ORG--NAME/{refs/main, snapshots/REVISION/...}.
    repo = tmp_path / "hub" / "models--acme--tiny-benevdial-bert"
    config_only(repo / "snapshots" / "0123abc", ["N", "OB", "BB"])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    head = head_of("hfcls:acme/tiny-benevdial-bert")
    assert head.folder.endswith("snapshots/0123abc") and head.output == THREE_CLASS
    with pytest.raises(ConfigError, match="no model 'acme/not-cached' in the local Hugging Face cache"):
        head_of("hfcls:acme/not-cached")


@needs_torch
def test_xdist_workers_load_their_own_copy_and_agree(project):
    pytest.importorskip("xdist")
    build_classifier(project.path / "bert-benevdial", ["N", "OB", "BB"])
    _, single = run(project, "--socialbias-guard=hfcls:bert-benevdial", "--socialbias-record=off", report="one.json")
    result, spread = run(project, "--socialbias-guard=hfcls:bert-benevdial", "--socialbias-record=off", "-n", "2",
                         report="two.json")
    assert result.ret == 0, result.stdout.str()[-3000:]

    def classes(report):
        return {(c["id"], c["variant"]): c["detections"]["guard"]["class"] for c in report["cases"]}

    assert classes(spread) == classes(single) and len(classes(single)) == 12
    assert spread["models"]["guard"]["checkpoint"] == single["models"]["guard"]["checkpoint"]
