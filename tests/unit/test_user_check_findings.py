"""The simulated-user check finds the same on every labelled set as the code it was
tuned with: each turn's rules finding (``user_check.check_user_turn``), the run's check
(``turn_model.check``: the rules, then the learned reading) and the learned reading's
P(clean), against tests/data/user_turn_findings.json, written by the check before its
patterns, stems and features were cached (issue 44).

The caches are per seed, group, lexicon and word; a cache keyed on too little (a
group's pattern reused for another seed, a seed's stems for another seed) would show
here as a turn checked after other contexts finding something else. So the sets are
checked twice: each set fresh, then every set again in reverse order with new context
objects, after every other seed and group has been seen.

A deliberate change to the rules, the lexicon or the model changes the findings: write
the file again with ``python -m tests.test_user_check_findings`` and say why in the
commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "user_turn_findings.json"


def _finding(found) -> str | None:
    return None if found is None else f"{found.kind}: {found.detail}"


def findings(path: Path, fresh_contexts: bool = False) -> list[list]:
    """[context id, rules finding, the run's finding, learned P(clean) of a turn the rules
    pass (9 decimals)] for every turn of a labelled set, in file order."""
    import dataclasses

    from pytest_socialbias.protocols import turn_model, user_check
    from pytest_socialbias.research.train_turn_model import labelled_turns

    model = turn_model.load()
    out = []
    for cid, _, text, context in labelled_turns(path):
        if fresh_contexts:  # an equal context, another object (as each turn of a run builds)
            context = dataclasses.replace(context)
        rules = user_check.check_user_turn(text, context)
        clean = None if rules is not None else round(model.probabilities(turn_model.features(text, context))[0], 9)
        out.append([cid, _finding(rules), _finding(turn_model.check(text, context)), clean])
    return out


def sets() -> list[Path]:
    return sorted(DATA.glob("user_turns*.yaml"))


def test_the_golden_file_covers_every_labelled_set():
    assert sorted(json.loads(GOLDEN.read_text(encoding="utf-8"))) == [p.name for p in sets()]


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", [p.name for p in sets()])
def test_each_labelled_set_finds_what_it_found_before(golden, name):
    got = findings(DATA / name)
    assert len(got) == len(golden[name])
    for i, (mine, theirs) in enumerate(zip(got, golden[name])):
        assert mine == theirs, (name, i)


def test_after_every_other_seed_and_group_the_findings_are_the_same(golden):
    for path in reversed(sets()):
        got = findings(path, fresh_contexts=True)
        for i, (mine, theirs) in enumerate(zip(got, golden[path.name])):
            assert mine == theirs, (path.name, i)


# ---- the measures computed the faster way give what the plain ones gave ---------------------


@pytest.fixture(scope="module")
def turns() -> list:
    from pytest_socialbias.research.train_turn_model import labelled_turns

    return [(text, context) for path in sets() for _, _, text, context in labelled_turns(path)]


def test_copied_trigrams_and_runs_are_those_of_the_plain_measures(turns):
    from pytest_socialbias.protocols import user_check as uc

    for text, context in turns:
        if not context.previous_reply:
            continue
        mine, theirs = uc.words(text), uc.words(context.previous_reply)
        grams = [tuple(mine[i:i + 3]) for i in range(len(mine) - 2)]
        found = {tuple(theirs[i:i + 3]) for i in range(len(theirs) - 2)}
        plain = (sum(1 for g in grams if g in found) / len(grams), uc._longest_run(mine, theirs)) if grams else (0.0, 0)
        assert uc.copy_share(text, context.previous_reply) == plain, text


def test_seed_similarity_is_that_of_the_plain_measures(turns):
    from pytest_socialbias.protocols import user_check as uc

    def lcs(a, b):  # every pair, no shortcut
        previous = [0] * (len(b) + 1)
        for x in a:
            current = [0]
            for j, y in enumerate(b):
                current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
            previous = current
        return previous[-1]

    def grams(text):
        flat = " ".join(uc.words(text))
        return {flat[i:i + 4] for i in range(len(flat) - 3)}

    for text, context in turns:
        if context.seed:
            named = uc.name_the_group(text, context)
            stems, seed_grams = uc.content_stems(context.seed), grams(context.seed)
            plain = (lcs(stems, uc.content_stems(named)) / len(stems), len(seed_grams & grams(named)) / len(seed_grams))
            assert uc.seed_similarity(named, context.seed) == plain, text


def test_a_hidden_prompt_is_echoed_where_the_longest_run_says_so(turns):
    from pytest_socialbias.protocols import user_check as uc

    echoed = 0
    for text, context in turns:
        for hidden in context.hidden:
            long_run = uc._longest_run(uc.words(text), uc.words(hidden)) >= uc.HIDDEN_RUN
            known = bytes(map(uc._vocabulary(hidden).__contains__, uc.words(text)))
            shortcut = b"\x01" * uc.HIDDEN_RUN in known and not uc._gram_set(hidden, uc.HIDDEN_RUN).isdisjoint(
                uc._grams(uc.words(text), uc.HIDDEN_RUN))
            assert long_run == shortcut, text
            echoed += long_run
    assert echoed  # the sets hold echoes


def test_stems_find_the_first_listed_suffix():
    from pytest_socialbias.protocols import user_check as uc

    # The suffixes are tried by length, which is the list's order only while it is longest first.
    assert list(uc._SUFFIXES) == sorted(uc._SUFFIXES, key=len, reverse=True)

    def plain(word):
        word = uc._IRREGULAR.get(word, word)
        for suffix in uc._SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
                break
        return word[:-1] if word.endswith("e") and len(word) > 3 else word

    for word in ["studies", "sing", "singing", "tested", "roles", "women", "allies", "quickly", "a", "es", "sees", "ness"]:
        assert uc.stem(word) == plain(word), word


def test_rewritten_patterns_match_as_the_plain_ones(turns):
    import re

    from pytest_socialbias.protocols import turn_model, user_check

    plain = {turn_model._YOU: r"\byou(?:r|rs|'re|'ll|'ve|'d)?\b", turn_model._ME: r"\b(?:i|my|me|i'm|i've|i'd|mine)\b",
             turn_model._SENTENCE_BREAK: r"(?<=[.!?])\s+", user_check._CLAUSES: r"(?<=[.!?;])\s+|,\s+(?=(?:and|but|so)\b)",
             user_check._QUOTED: r"(?:^|(?<=[\s(\[]))['\"‘“]([^\"‘’“”]{3,}?)['\"’”](?=[\s.,;:!?)\]]|$)"}
    texts = [text for text, _ in turns] + ["I'm, i've; mine.  You're  yours? you'd!\nyoure", "x.\n\n y", "a , and b", "'ab cd' (\"xyz\")"]
    for text in texts + [t.lower() for t in texts]:
        for fast, source in plain.items():
            assert [(m.span(), m.groups()) for m in fast.finditer(text)] == [
                (m.span(), m.groups()) for m in re.finditer(source, text)], (source, text)
    # Patterns matched (not searched) at the start: every alternative is anchored there.
    from pytest_socialbias.protocols.fast_pattern import top_level_alternatives

    for anchored in (user_check._GENERIC, user_check._LOADED_WHY, user_check._WHY_OTHERS, user_check._CLAIM_OPENERS):
        assert all(a.startswith("^") for a in top_level_alternatives(anchored.pattern)), anchored.pattern


def write() -> None:
    """One turn a line, so that a change reads as a diff of turns."""
    blocks = []
    for path in sets():
        rows = ",\n".join("  " + json.dumps(row) for row in findings(path))
        blocks.append(f" {json.dumps(path.name)}: [\n{rows}\n ]")
    GOLDEN.write_text("{\n" + ",\n".join(blocks) + "\n}\n", encoding="utf-8")


if __name__ == "__main__":
    write()
    print(f"wrote {GOLDEN}")
