"""Published protocols this tool does not reproduce, and what a result under a stand-in means.

Why here: a bar computed under our prompt for a model trained on its own must say so wherever it
is printed (the sweep's table, ``opteval report``), whichever sweep config ran it. Keyed by
(model family, method): a model config's ``family`` (``configs/models/*.yaml``), or the model
name's first dash-separated part when the family is not known.

StepORLM (Zhou et al., "StepORLM: A Self-Evolving Framework With Generative Process Supervision
For Operations Research Language Models", arXiv 2509.22558, ICLR 2026): the paper names its code,
github.com/0xzhouchenyu/StepORLM; no snapshot of that repository could be read here, and the
copies of its README and project page (0xzhouchenyu.github.io/StepORLM) that could be read hold
its results table and framework overview, not an inference prompt, extraction rule or solver. A
third-party training repository mentions a ``<step>`` block format with coptpy for StepORLM; that
is not the authors' and is not followed. So ``configs/sweeps/figure4.yaml`` runs
StepORLM-Qwen3-8B under ``direct`` (our prompt) and every output says this bar is not its protocol.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

NOT_ITS_PROTOCOL: dict[tuple[str, str], str] = {
    ("StepORLM", "direct"): (
        "not StepORLM's protocol: StepORLM (arXiv 2509.22558) ran under our Direct prompt and extraction, "
        "because its inference prompt is not available to us (github.com/0xzhouchenyu/StepORLM could not be read; "
        "its README and project page hold results only); compare this bar with StepORLM's published numbers with care"
    ),
}


def family_of(model: str, families: Mapping[str, str | None] | None = None) -> str:
    fam = (families or {}).get(model)
    return fam or model.split("-", 1)[0]


def protocol_notes(pairs: Iterable[tuple[str, str]], families: Mapping[str, str | None] | None = None) -> list[str]:
    """One line per (model, method) pair that ran under a stand-in for its own protocol."""
    out = []
    for model, method in dict.fromkeys((str(m), str(x)) for m, x in pairs):
        note = NOT_ITS_PROTOCOL.get((family_of(model, families), method))
        if note:
            out.append(f"{model} / {method}: {note}")
    return out
