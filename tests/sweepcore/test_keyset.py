"""The ledger's committed keys in Arrow (issue 44 item 5): a set's behaviour, Arrow's memory."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from opteval.sweepcore.ledger.keyset import KeySet


def _keys(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"m{i % 7}/direct/nl4opt/nl4opt-{i:04d}/{i % 3}/{rng.getrandbits(48):012x}" for i in range(n)]


def test_behaves_like_the_python_set_it_replaces_under_random_edits():
    rng = random.Random(1)
    universe = _keys(400)
    start = rng.sample(universe, 150)
    ks, ref = KeySet(pa.array(start)), set(start)
    for _ in range(300):
        batch = rng.sample(universe, rng.randint(1, 5))
        if rng.random() < 0.5:
            new = [k for k in batch if k not in ref]
            ks.update(new)
            ref.update(new)
        else:
            ks.difference_update(batch)
            ref.difference_update(batch)
        probe = rng.choice(universe)
        assert (probe in ks) == (probe in ref)
    assert len(ks) == len(ref)
    assert set(ks) == ref and ks == ref
    assert sorted(ks.to_arrow().to_pylist()) == sorted(ref)
    assert "x" not in ks and 3 not in ks


def test_every_key_found_and_none_else_over_chunked_input():
    keys = _keys(5000)
    ks = KeySet(pa.chunked_array([pa.array(keys[:1234]), pa.array(keys[1234:])]))
    assert len(ks) == 5000 and all(k in ks for k in keys)
    assert not any(k + "0" in ks for k in keys[:200]) and "" not in ks
    assert not ks.duplicates()


def test_a_key_given_twice_is_found_as_a_duplicate():
    keys = _keys(50)
    assert KeySet(pa.array([*keys, keys[17]])).duplicates()
    assert not KeySet(pa.array(keys[:1])).duplicates() and not KeySet().duplicates()


def test_unchanged_keys_are_handed_over_without_a_copy():
    ks = KeySet(pa.array(_keys(100)))
    first = ks.to_arrow()
    assert ks.to_arrow() is first  # the array read at open, not a copy
    ks.update(["new/key"])
    assert ks.to_arrow() is not first and len(ks.to_arrow()) == 101


def test_a_null_key_is_refused():
    with pytest.raises(ValueError, match="null"):
        KeySet(pa.array(["a", None]))


def test_a_resumed_ledger_hands_the_scheduler_its_own_array(tmp_path):
    from opteval.sweepcore.ledger import Ledger
    from opteval.sweepcore.plan import remaining
    from tests.sweepcore.test_ledger import _row
    from tests.sweepcore.test_ledger_tiers import _setup

    res, fp, direct = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "t", res, fp)
    led.commit([_row(p) for p in direct[:5]])
    led.close()
    again = Ledger.open(str(tmp_path), "t", res, fp)
    arr = again.committed_array()
    assert again.committed_array() is arr and sorted(arr.to_pylist()) == sorted(p.key for p in direct[:5])
    assert [p.key for p in remaining(direct, arr)] == [p.key for p in direct[5:]]
    again.commit([_row(direct[5])])
    assert again.is_committed(direct[5].key) and len(again.committed_array()) == 6
    again.close()
