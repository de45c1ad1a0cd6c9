"""core.fingerprint: one word for what a confirmation page showed. The same facts give the same word; any
change of a fact (its value, its type, the order of a sequence) gives another; the order of a mapping's or
a set's items does not count."""

import copy
import datetime as dt
import decimal
import hashlib
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core.fingerprint import fingerprint

# What the three confirmations fingerprint: pks, counts, flags, states, names (any text, lone surrogates
# included: a job's name is the submitter's), nested in tuples.
scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=12) | st.floats(allow_nan=False)
facts = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner),
    max_leaves=12,
)
parts = st.lists(facts, max_size=5)


def _same(a, b) -> bool:
    """Equal as a confirmation means it: same types all the way down (a list and a tuple are alike)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return repr(a) == repr(b)  # 0.0 and -0.0 are two values shown
    return type(a) is type(b) and a == b


# Budgets (300 and 500 before: 2.3 s of CPU in make test-fast): an encoding that flattens nesting, ((1, 2), 3)
# as (1, 2, 3), fails the different-facts property in 8 of 8 seeds at 200 cases as at 500; the same facts
# give the same word is determinism, which a hundred-odd cases of the same generators show as well.
@settings(max_examples=120, deadline=None)
@given(parts)
def test_the_same_facts_give_the_same_word(values):
    word = fingerprint(*values)
    assert len(word) == 64 and int(word, 16) >= 0
    # Computed again from equal facts (a fresh copy, its tuples as lists): the same word.
    assert fingerprint(*copy.deepcopy(values)) == word
    assert fingerprint(*json.loads(json.dumps(values, allow_nan=True))) == word


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=200, deadline=None)
@given(parts, parts)
def test_different_facts_give_different_words(a, b):
    assume(not _same(a, b))
    assert fingerprint(*a) != fingerprint(*b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(), min_size=2, max_size=6, unique=True))
def test_a_sequence_keeps_its_order(values):
    assert fingerprint(values) != fingerprint(list(reversed(values)))
    assert fingerprint(*values) != fingerprint(*reversed(values))
    # A part is not its neighbour's: (1, 2), 3 is not 1, (2, 3).
    assert fingerprint(values[:1], values[1:]) != fingerprint(values[:-1], values[-1:]) or len(values) == 2


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers() | st.text(max_size=5), st.integers(), max_size=6), st.randoms())
def test_a_mapping_or_a_set_counts_its_items_not_their_order(mapping, random):
    items = list(mapping.items())
    random.shuffle(items)
    assert fingerprint(mapping) == fingerprint(dict(items))
    keys = list(mapping)
    random.shuffle(keys)
    assert fingerprint(set(mapping)) == fingerprint(set(keys))
    assert fingerprint(set(mapping)) != fingerprint(sorted(mapping, key=repr)) or not mapping


def test_types_are_told_apart():
    words = {
        fingerprint(value)
        for value in (1, "1", 1.0, True, None, "None", [1], {1}, {1: None}, {"1": None}, decimal.Decimal(1))
    }
    assert len(words) == 11
    assert fingerprint(dt.date(2026, 11, 30)) != fingerprint("2026-11-30")


def test_the_serialisation_is_pinned():
    # A confirmation page left open across an upgrade stays valid only while this word does not change.
    text = '[[1,true,null,"a"],{"float":"0.5"}]'
    assert fingerprint((1, True, None, "a"), 0.5) == hashlib.sha256(text.encode()).hexdigest()


def test_an_object_without_a_stable_form_is_refused():
    with pytest.raises(TypeError, match="no stable form"):
        fingerprint(object())


@pytest.mark.parametrize(
    "module", ["scheduling.project_changes", "integrations.views.tray_actions", "integrations.plans.service"]
)
def test_the_confirmations_use_the_one_fingerprint(module):
    """The three confirmations that refuse a stale page (409) compare core.fingerprint words, none hashed
    by hand with its own serialisation (repr of model fields, a joined string)."""
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(module))
    assert "from core.fingerprint import fingerprint" in source
    assert "hashlib" not in source
