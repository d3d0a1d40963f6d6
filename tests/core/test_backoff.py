"""The one backoff schedule (opteval/evalcore/backoff.py) of the four retry loops."""
from __future__ import annotations

import pytest

from opteval.evalcore.backoff import Backoff


def test_doubles_from_the_base_up_to_the_cap():
    b = Backoff(5.0, 60.0)
    assert [b.delay(n) for n in range(6)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert Backoff(1.0).delay(2000) > 1e300  # no cap, and no OverflowError


def test_jitter_stays_within_half_and_one_and_a_half_and_retry_after_is_a_floor():
    b = Backoff(1.0, 30.0, jitter=True)
    assert b.delay(3, rng=lambda: 0.0) == 4.0 and b.delay(3, rng=lambda: 0.999) == pytest.approx(11.992)
    assert b.delay(0, at_least=7.5, rng=lambda: 0.0) == 7.5  # a server's Retry-After wins over a shorter wait
    assert b.delay(0, at_least=90.0) == 30.0  # the cap wins over both


def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="base_s=-1"):
        Backoff(-1.0)
    with pytest.raises(ValueError, match="retry index must be >= 0, got -1"):
        Backoff(1.0).delay(-1)


def test_the_model_call_keeps_its_schedule():
    """openai_backend's ``_backoff``: jittered 2^n around ``backoff_s``, Retry-After a floor, capped."""
    from opteval.evalcore.models.openai_backend import MAX_BACKOFF_S, ChatCompletionsModel

    m = ChatCompletionsModel.__new__(ChatCompletionsModel)
    m.backoff_s = 0.5
    for n in range(8):
        d = m._backoff(n, None)
        assert min(0.25 * 2**n, MAX_BACKOFF_S) <= d <= min(0.75 * 2**n, MAX_BACKOFF_S)
    assert m._backoff(0, 3.0) == 3.0
