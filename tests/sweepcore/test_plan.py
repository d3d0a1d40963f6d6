"""Plan expansion: model-major order, per-benchmark sample counts, keys = trajectory_key."""
from __future__ import annotations

import pytest

from opteval.evalcore.records import trajectory_key
from opteval.sweepcore.config import ConfigError, item_fingerprint, load_config
from opteval.sweepcore.plan import Plan, by_model, expand_plan, plan_bench_counts, plan_counts, remaining

IDS = {"sample": ["s1", "s2", "s3"], "complexor": ["c1", "c2"]}


def _cfg(*extra):
    return load_config(["models=[sim-small,sim-fast]", "methods=[direct,optistate]",
                        "benchmarks=[sample,complexor]", "samples.default=2", *extra])


def test_order_is_model_major_then_method_benchmark_problem_sample():
    plan = expand_plan(_cfg(), IDS)
    tuples = [(p.model, p.method, p.benchmark, p.problem_id, p.sample) for p in plan]
    models, methods, benches = ["sim-small", "sim-fast"], ["direct", "optistate"], ["sample", "complexor"]
    def rank(t):
        return models.index(t[0]), methods.index(t[1]), benches.index(t[2]), IDS[t[2]].index(t[3]), t[4]

    assert tuples == sorted(tuples, key=rank)
    first_fast = next(i for i, t in enumerate(tuples) if t[0] == "sim-fast")
    assert all(t[0] == "sim-small" for t in tuples[:first_fast])


def test_counts_per_benchmark_and_model_method():
    plan = expand_plan(_cfg(), IDS)
    # sample: default 2 samples x 3 problems; complexor: its yaml says 64 x 2 problems
    per = plan_bench_counts(plan)
    assert per[("sim-small", "direct", "sample")] == 6
    assert per[("sim-small", "direct", "complexor")] == 128
    assert plan_counts(plan) == {(m, x): 134 for m in ("sim-small", "sim-fast") for x in ("direct", "optistate")}
    plan2 = expand_plan(_cfg("samples.per_benchmark={complexor: 3}", "limit_problems=1"), IDS)
    per2 = plan_bench_counts(plan2)
    assert per2[("sim-fast", "optistate", "complexor")] == 3 and per2[("sim-fast", "optistate", "sample")] == 2


def test_keys_equal_trajectory_key_and_are_unique():
    cfg = _cfg()
    plan = expand_plan(cfg, IDS)
    assert len({p.key for p in plan}) == len(plan)
    for p in plan[::17]:
        fp = item_fingerprint(cfg, p.model, p.method, p.benchmark)
        assert p.fingerprint == fp
        assert p.key == trajectory_key(cfg.sweep.name, p.model, p.method, p.benchmark, p.problem_id, p.sample, fp)


def test_keys_stable_when_only_plan_membership_changes():
    base = {p.key for p in expand_plan(_cfg(), IDS)}
    more = {p.key for p in expand_plan(_cfg("samples.default=3", "models=[sim-small,sim-fast,sim-small2]")
                                       if False else _cfg("samples.default=3"), IDS)}
    assert base < more  # more samples keep the old keys
    hotter = {p.key for p in expand_plan(_cfg("sampling.temperature=0.9"), IDS)}
    assert not (base & hotter)  # an outcome-relevant change gives new keys


def test_remaining_keeps_order_and_missing_ids_error():
    plan = expand_plan(_cfg(), IDS)
    done = {p.key for p in plan[::2]}
    rest = remaining(plan, done)
    assert rest == [p for p in plan if p.key not in done] and len(rest) == len(plan) // 2
    with pytest.raises(ConfigError, match="complexor"):
        expand_plan(_cfg(), {"sample": ["s1"]})


def test_compact_plan_behaves_like_the_list_of_items():
    """The Plan is a Sequence: indexing, slicing, iteration and remaining() agree with a plain list."""
    plan = expand_plan(_cfg(), IDS)
    items = list(plan)
    assert len(items) == len(plan) == 536
    assert [plan[i] for i in (0, 5, 6, 133, 134, 535, -1, -536)] == [items[i] for i in (0, 5, 6, 133, 134, 535, -1, -536)]
    assert list(plan[3:300:7]) == items[3:300:7] and plan[10:20] == items[10:20]
    with pytest.raises(IndexError):
        plan[536]
    done = {p.key for p in items[::3]} | {"not-a-plan-key"}
    rest = remaining(plan, done)
    as_list = remaining(items, done)  # the list path, as before
    assert list(rest) == as_list and [rest[i] for i in (0, -1)] == [as_list[0], as_list[-1]]
    assert plan_counts(rest) == plan_counts(as_list) and plan_bench_counts(rest) == plan_bench_counts(as_list)
    again = remaining(rest, {p.key for p in as_list[:50]})  # a subset of a subset
    assert list(again) == as_list[50:]
    assert remaining(plan, set()) == items and len(remaining(plan, {p.key for p in items})) == 0


def test_plan_table_and_summary_match_the_item_by_item_recording(tmp_path):
    """record_plan stores the same rows and the same sorted-key digest for a Plan as for its items."""
    import hashlib

    import pyarrow as pa

    from opteval.sweepcore.ledger import PLAN_SCHEMA
    from opteval.sweepcore.ledger.manifest import _sorted_keys_sha256

    plan = expand_plan(_cfg(), IDS)
    items = list(plan)
    want = pa.table({n: [getattr(p, n) for p in items] for n in PLAN_SCHEMA.names}, schema=PLAN_SCHEMA)
    assert plan.to_table(PLAN_SCHEMA).equals(want)
    sub = remaining(plan, {p.key for p in items[1::2]})
    assert isinstance(sub, Plan)
    assert sub.to_table(PLAN_SCHEMA).equals(want.take(list(range(0, len(items), 2))))
    old = hashlib.sha256("\n".join(sorted(p.key for p in items)).encode()).hexdigest()
    assert _sorted_keys_sha256(want.column("key"), chunk=100) == old
    assert _sorted_keys_sha256(pa.chunked_array([], type=pa.string())) == hashlib.sha256(b"").hexdigest()
    # chunk by chunk (one per group, ranges apart) and the one-sort fallback give the same digest
    assert plan.key_array().num_chunks > 1 and _sorted_keys_sha256(plan.key_array(), chunk=7) == old
    assert _sorted_keys_sha256(sub.key_array()) == \
        hashlib.sha256("\n".join(sorted(p.key for p in items[::2])).encode()).hexdigest()
    overlapping = pa.chunked_array([["b", "d"], [], ["a", "c"], ["e"]])
    assert _sorted_keys_sha256(overlapping, chunk=1) == hashlib.sha256(b"a\nb\nc\nd\ne").hexdigest()
    # the plan written a piece at a time is the same table
    for whole, p in ((want, plan), (want.take(list(range(0, len(items), 2))), sub)):
        pieces = list(p.iter_tables(PLAN_SCHEMA, max_rows=5))
        assert len(pieces) > 1 and pa.concat_tables(pieces).equals(whole)
    none_left = remaining(plan, {p.key for p in items})
    assert isinstance(none_left, Plan) and list(none_left.iter_tables(PLAN_SCHEMA)) == []


def test_record_plan_writes_the_plan_in_pieces_and_reads_it_back(tmp_path):
    from opteval.sweepcore.config import resolved, sweep_fingerprint
    from opteval.sweepcore.ledger import PLAN_SCHEMA, Ledger

    cfg = _cfg()
    res = resolved(cfg)
    plan = expand_plan(cfg, IDS)
    led = Ledger.open(str(tmp_path), cfg.sweep.name, res, sweep_fingerprint(res))
    summary = led.record_plan(plan)
    assert summary["total"] == len(plan)
    stored = led.read_plan()
    assert stored is not None and stored.equals(plan.to_table(PLAN_SCHEMA))
    assert led.record_plan(list(plan))["keys_sha256"] == summary["keys_sha256"]  # items, one table
    empty = remaining(plan, {p.key for p in plan})
    assert led.record_plan(empty)["total"] == 0
    stored = led.read_plan()
    assert stored is not None and stored.num_rows == 0


def test_by_model_groups_the_pending_items_once_in_plan_order():
    plan = expand_plan(_cfg(), IDS)
    done = {plan[0].key, plan[len(plan) - 1].key}
    pending = remaining(plan, done)
    groups = by_model(pending)
    assert list(groups) == ["sim-small", "sim-fast"]
    for model, items in groups.items():
        assert isinstance(items, Plan)  # rows over the same groups: no item made until dispatched
        assert list(items) == [p for p in pending if p.model == model]
    assert sum(len(v) for v in groups.values()) == len(plan) - 2
    assert by_model(list(pending)) == {m: list(v) for m, v in groups.items()}


def test_remaining_against_sorted_committed_keys_matches_the_set_path():
    """Sorted committed keys (the ledger's at open) are tested group by group; unsorted ones by
    one hash table: both give what a Python set gives."""
    import pyarrow as pa

    plan = expand_plan(_cfg(), IDS)
    items = list(plan)
    first = {p.key for p in items if (p.model, p.method, p.benchmark) == (items[0].model, items[0].method, items[0].benchmark)}
    done = sorted({p.key for p in items[::3]} | first | {"zz-not-planned", "a-not-planned"})
    want = [p for p in items if p.key not in set(done)]
    for values in (pa.array(done), pa.array(done[::-1]), pa.chunked_array([done[:5], done[5:]]),
                   pa.array([], type=pa.string()), pa.array(done[:1])):
        kept = set(values.to_pylist())
        assert list(remaining(plan, values)) == [p for p in items if p.key not in kept]
    assert list(remaining(plan, pa.array(done))) == want
    assert list(remaining(remaining(plan, pa.array(done[:7])), pa.array(done))) == want  # a subset of a plan
