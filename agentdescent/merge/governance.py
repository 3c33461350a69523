"""Governance layers: which artifacts may evolve, and how carefully.

This module owns the single definition of the boundary between fast (L2) and slow (L1)
artifacts and the set of frozen (L0) ids. Every other module asks `classify`;
none re-derives the threshold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["FAST_MAX", "RESERVED_IDS", "ArtifactInfo", "Layer", "classify"]

#: Largest blast radius an artifact may have and still be a fast (L2) artifact.
FAST_MAX = 0.30

#: Artifact ids that are frozen (L0) whatever their blast radius: the run's own
#: governance, safety and evaluation contracts must never be evolved by the run.
RESERVED_IDS = frozenset({"governance", "safety", "evaluator", "reward", "oracle", "ledger"})


class Layer(str, enum.Enum):
    """Governance layer of an artifact."""

    L0_FROZEN = "L0"
    L1_SLOW = "L1"
    L2_FAST = "L2"


class _HasBlastRadius(Protocol):
    artifact_id: str
    blast_radius: float


@dataclass(frozen=True)
class ArtifactInfo:
    """What governance needs to know of an artifact.

    Args:
        artifact_id: the artifact's id.
        blast_radius: in [0, 1], the share of the system a bad change to it can hurt.
    """

    artifact_id: str
    blast_radius: float


def classify(artifact: _HasBlastRadius) -> Layer:
    """Classify an artifact into its governance layer.

    Reserved ids (and ids starting with ``"L0:"``) are frozen; otherwise
    ``blast_radius <= FAST_MAX`` is L2 (fast, loose staleness ``alpha_tail``) and
    anything above is L1 (slow: every merge must strictly beat the head on the full
    held-out set).

    Args:
        artifact: anything with ``artifact_id`` and ``blast_radius`` attributes
            (for example `ArtifactInfo`).

    Returns:
        The artifact's `Layer`.
    """
    artifact_id = artifact.artifact_id
    if artifact_id in RESERVED_IDS or artifact_id.startswith("L0:"):
        return Layer.L0_FROZEN
    if float(artifact.blast_radius) <= FAST_MAX:
        return Layer.L2_FAST
    return Layer.L1_SLOW
