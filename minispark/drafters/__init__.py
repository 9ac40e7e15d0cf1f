"""Drafters: objects that propose draft tokens for the speculative loop (see ``base.Drafter``)."""

from minispark.drafters.base import Drafter, FixedLength, LengthPolicy, Proposal

__all__ = ["Drafter", "FixedLength", "LengthPolicy", "Proposal"]
