"""The harness paper's own cost figures: tokens per trajectory per method on Qwen3.5-9B.

Source: "Harnessing Language Models as Optimization Modeling Agents", section 4.4 "Accuracy and
Token Consumption" (Figure 2, right), with the accounting of Appendix A.1 "Token accounting":
input plus output tokens summed over a trajectory's model calls, the mean within each
benchmark, then the unweighted mean of the nine benchmark means, on Qwen3.5-9B (17,852 scored
trajectories per method).

What the text gives, exactly:

* OptiCycle 11.77 thousand tokens per trajectory; Reflexion 14.54; OptiMUS 31.60;
  AutoFormulation 34.38 (stated);
* OptiState "84.2% higher token consumption" than OptiCycle: 11.77 x 1.842 = 21.68 (derived);
* Direct Generation and CAFA "use fewer tokens" than OptiCycle (a bound, no figure);
* OptiCycle uses "fewer recorded tokens than Reflexion, Chain-of-Experts, OptiMUS,
  AutoFormulation, and ORMind": Chain-of-Experts and ORMind above 11.77 (a bound, no figure).

The paper prints no calls per trajectory in its text, and its Table 4 (per-method call or step
limits) is not in the text we have: no calls figure is stated here. Why a module of its own:
the report prints these beside the measured figures and ``bench/bench_budgets.py`` and the
method YAMLs' calibration cite them; one place keeps them equal.
"""
from __future__ import annotations

from dataclasses import dataclass

SOURCE = ('"Harnessing Language Models as Optimization Modeling Agents", section 4.4 (Figure 2, right); '
          'token accounting: Appendix A.1')
BACKBONE = "Qwen3.5-9B"
REFERENCE = "opticycle"  # every ratio is to OptiCycle of the same backbone


@dataclass(frozen=True)
class PaperTokens:
    """One method's figure: ``tokens_k`` (thousand input + output tokens per trajectory) when the
    paper states or implies one; ``relation`` ``"="`` for a figure, ``"<"`` / ``">"`` for a bound
    relative to OptiCycle only; ``basis`` says which (``stated``, ``derived``, ``bound``)."""

    method: str
    tokens_k: float | None
    relation: str
    basis: str
    quote: str

    @property
    def ratio(self) -> float | None:
        """tokens / OptiCycle's tokens, when the paper gives a figure."""
        return None if self.tokens_k is None else self.tokens_k / OPTICYCLE_TOKENS_K

    def ratio_text(self) -> str:
        """``"1.235"``, or ``"< 1"`` / ``"> 1"`` for a bound."""
        if self.ratio is not None:
            return f"{self.ratio:.3f}"
        return f"{self.relation} 1"


OPTICYCLE_TOKENS_K = 11.77
OPTISTATE_INCREASE = 0.842  # "84.2% higher token consumption" than OptiCycle

PAPER_TOKENS: dict[str, PaperTokens] = {p.method: p for p in (
    PaperTokens("opticycle", OPTICYCLE_TOKENS_K, "=", "stated", "It uses 11.77 thousand input plus output tokens per trajectory"),
    PaperTokens("reflexion", 14.54, "=", "stated", "versus 14.54 for Reflexion"),
    PaperTokens("optimus", 31.60, "=", "stated", "31.60 for OptiMUS"),
    PaperTokens("autoformulation", 34.38, "=", "stated", "and 34.38 for AutoFormulation"),
    PaperTokens("optistate", round(OPTICYCLE_TOKENS_K * (1 + OPTISTATE_INCREASE), 2), "=", "derived",
                "OptiState adds 2.31 percentage points over OptiCycle at 84.2% higher token consumption"),
    PaperTokens("direct", None, "<", "bound", "Direct Generation and CAFA use fewer tokens"),
    PaperTokens("cafa", None, "<", "bound", "Direct Generation and CAFA use fewer tokens"),
    PaperTokens("coe", None, ">", "bound", "OptiCycle achieves higher macro accuracy with fewer recorded tokens than "
                                           "Reflexion, Chain-of-Experts, OptiMUS, AutoFormulation, and ORMind"),
    PaperTokens("ormind", None, ">", "bound", "OptiCycle achieves higher macro accuracy with fewer recorded tokens than "
                                              "Reflexion, Chain-of-Experts, OptiMUS, AutoFormulation, and ORMind"),
)}


def paper_tokens(method: str) -> PaperTokens | None:
    """The paper's figure or bound for ``method`` (None: the paper says nothing about it)."""
    return PAPER_TOKENS.get(method)


__all__ = ["PAPER_TOKENS", "PaperTokens", "paper_tokens", "SOURCE", "BACKBONE", "REFERENCE", "OPTICYCLE_TOKENS_K",
           "OPTISTATE_INCREASE"]
