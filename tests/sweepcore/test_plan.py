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
