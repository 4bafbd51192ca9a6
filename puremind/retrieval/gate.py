"""The rerank gate (`[retrieval] rerank = "auto"`): whether the cross-encoder runs, read from the vault's last
`puremind eval` (puremind.evaluate), which the index keeps in its meta table under META_EVAL.

The rule: the reranker runs when the last eval of this reranker found that it raises MRR@10 over hybrid search
beyond the bootstrap interval, that is when the 95% interval of the paired difference (reranked minus hybrid, the
same resampled queries for both) lies above zero. With no eval of this reranker yet, it runs (the spec's default).
Pure: data in, a decision out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: the meta key of the last eval's summary (figures only: no query, no answer)
META_EVAL = "eval_summary"


@dataclass(frozen=True)
class Gate:
    """The gate's decision: whether the reranker runs, and why (one line, for `notes` and `puremind doctor`)."""

    run: bool
    reason: str


def read_summary(text: str | None) -> dict[str, Any] | None:
    """The stored eval summary, or None when there is none or it cannot be read (an older or damaged value)."""
    if not text:
        return None
    try:
        summary = json.loads(text)
    except ValueError:
        return None
    return summary if isinstance(summary, dict) else None


def verdict(comparison: dict[str, Any] | None) -> str | None:
    """"helps", "hurts" or "unclear" from an eval's reranked-against-hybrid comparison (None: none was made)."""
    if not comparison:
        return None
    low, high = comparison["difference"]["low"], comparison["difference"]["high"]
    return "helps" if low > 0 else "hurts" if high < 0 else "unclear"


def reranker_name(models: Any) -> str | None:
    """What the eval summary calls the reranker of a models object (puremind.models.lazy.Models): its configured
    name (hub id or folder), else the model a handed-in one's fingerprint names, else its class; None for none.
    Known without loading a model."""
    if not models.has("reranker"):
        return None
    choice = models.choice("reranker")
    if choice is not None:
        return choice.name
    model = models.reranker()  # handed in ready: nothing to load
    fingerprint = getattr(model, "fingerprint", None)
    return fingerprint.split("|", 1)[0].rsplit("@", 1)[0] if fingerprint else type(model).__name__


def rerank_gate(summary: dict[str, Any] | None, reranker: str | None) -> Gate:
    """Whether the reranker named `reranker` runs under `rerank = "auto"`, from the last eval's summary."""
    if summary is None:
        return Gate(True, "no eval on this vault yet: the reranker runs (run `puremind eval` to measure it)")
    comparison = summary.get("rerank_vs_hybrid")
    evaluated = (summary.get("models") or {}).get("reranker") or {}
    if not comparison or evaluated.get("name") != reranker:
        return Gate(True, "the last eval on this vault did not measure this reranker: it runs (run `puremind eval`)")
    try:
        said = verdict(comparison)
        before, after = comparison["hybrid"], comparison["reranked"]
        low, high = comparison["difference"]["low"], comparison["difference"]["high"]
    except (KeyError, TypeError):
        return Gate(True, "the last eval's summary cannot be read: the reranker runs (run `puremind eval` again)")
    when = str(summary.get("date", ""))[:10]
    figures = f"MRR@10 {before:.2f} -> {after:.2f}, 95% interval of the difference {low:+.3f} to {high:+.3f}"
    if said == "helps":
        return Gate(True, f"eval on this vault ({when}): the reranker raised {figures}")
    if said == "hurts":
        return Gate(False, f"eval on this vault ({when}): the reranker lowered {figures}")
    return Gate(False, f"eval on this vault ({when}): the reranker did not raise MRR@10 beyond the interval ({figures})")


__all__ = ["Gate", "META_EVAL", "read_summary", "rerank_gate", "reranker_name", "verdict"]
