"""Ledger compaction in tiers (issue 44): live files grow like the log of the rows, every key is
read once, a crash inside a higher-level merge loses and duplicates nothing."""
from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import Ledger, LedgerError, error_row
from opteval.sweepcore.ledger.schema import _FILE_RE, file_level
from opteval.sweepcore.plan import expand_plan
from tests.sweepcore.test_ledger import _row

IDS = {"sample": [f"p{i}" for i in range(60)]}


def _setup(out):
    cfg = load_config([f"sweep.output_dir={out}", "methods=[direct,opticycle]", "samples.default=1"])
    res = resolved(cfg)
    plan = expand_plan(cfg, IDS)
    return res, sweep_fingerprint(res), [p for p in plan if p.method == "direct"]


def _levels(led):
    out: dict[int, int] = {}
    for f in led.files():
        match = _FILE_RE.match(os.path.basename(f))
        assert match is not None, f
        lv = file_level(match)
        out[lv] = out.get(lv, 0) + 1
    return out


def test_live_files_stay_logarithmic_and_every_key_is_read_once(tmp_path):
    res, fp, direct = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, compact_every=3, compact_fan_in=3)
    for p in direct[:54]:  # one row a commit, as at GPU commit rates
        led.commit([_row(p)])
    # 54 parts = 18 level-1 merges = 2 x 9: base 3 with 3 levels -> 2 files at level 3, none below
    assert _levels(led) == {3: 2}
    assert led.live_levels() == {os.path.dirname(led.files()[0]): {3: 2}}
    for p in direct[54:59]:
        led.commit([_row(p)])
    assert _levels(led) == {0: 2, 1: 1, 3: 2}  # 5 more: one level-1 file, two parts
    names = sorted(os.path.basename(f) for f in led.files())
    assert all(n.startswith(("compact-", "part-")) for n in names)
    assert sum("-l3-" in n for n in names) == 2 and sum(n.startswith("compact-") and "-l" not in n for n in names) == 1
    keys = led.read_table(columns=["key"]).column("key").to_pylist()
    assert sorted(keys) == sorted(p.key for p in direct[:59])  # each once
    again = Ledger.open(str(tmp_path), "demo", res, fp, read_only=True)
    assert again.committed_keys() == set(keys) and _levels(again) == _levels(led)


def test_a_merge_writes_full_row_groups_and_lists_its_inputs(tmp_path):
    res, fp, direct = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, compact_every=6)
    for p in direct[:6]:
        led.commit([_row(p)])
    (only,) = led.files()
    meta = pq.read_metadata(only)
    assert meta.num_rows == 6 and meta.num_row_groups == 1  # not six one-row groups
    replaced = pq.read_schema(only).metadata[b"opteval.replaces"]
    assert replaced.count(b"part-") == 6


def test_a_crash_inside_a_higher_level_merge_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    res, fp, direct = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, compact_every=2, compact_fan_in=2)
    for p in direct[:3]:
        led.commit([_row(p)])
    assert _levels(led) == {0: 1, 1: 1}
    deleted: list[str] = []

    def crash(path):
        deleted.append(path)
        if len(deleted) == 2:
            raise OSError("crash between deleting the merged inputs")
        os.remove(path)

    monkeypatch.setattr(led, "_delete", crash)
    with pytest.raises(OSError):
        led.commit([_row(direct[3])])  # parts full, level 1 full: a level-2 merge of all three
    left = sorted(os.path.basename(f) for f in led._list())
    assert sum("-l2-" in n for n in left) == 1 and len(left) == 3  # the new file and two inputs
    ro = Ledger.open(str(tmp_path), "demo", res, fp, read_only=True)
    assert ro.read_table(columns=["key"]).num_rows == 4 and len(ro.files()) == 1
    monkeypatch.undo()
    led.close()
    rw = Ledger.open(str(tmp_path), "demo", res, fp)  # a writer deletes what the merge replaced
    assert len(rw._list()) == 1 and rw.committed_keys() == {p.key for p in direct[:4]}


def test_retry_errors_after_tiers_keeps_the_rest_once(tmp_path):
    res, fp, direct = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, compact_every=2, compact_fan_in=2)
    for i, p in enumerate(direct[:7]):
        led.commit([error_row(p, "worker died", 3, sweep="demo") if i in (1, 5) else _row(p)])
    assert sorted(led.supersede_errors()) == sorted([direct[1].key, direct[5].key])
    for p in direct[7:12]:
        led.commit([_row(p)])
    keys = led.read_table(columns=["key"]).column("key").to_pylist()
    assert sorted(keys) == sorted(p.key for i, p in enumerate(direct[:12]) if i not in (1, 5))
    names = [os.path.basename(f) for f in led.files()]
    assert sum(n.startswith("rewrite-") for n in names) == 1  # the rewrite is never merged away
    again = Ledger.open(str(tmp_path), "demo", res, fp, read_only=True)
    assert sorted(again.committed_keys()) == sorted(keys)


def test_a_fan_in_below_two_is_refused_by_name(tmp_path):
    res, fp, _ = _setup(tmp_path)
    with pytest.raises(LedgerError, match="compact_fan_in"):
        Ledger.open(str(tmp_path), "demo", res, fp, compact_fan_in=1)
