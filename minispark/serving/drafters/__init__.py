"""Drafters: objects that propose draft blocks for the speculative loop (see ``base.Drafter``)."""

from minispark.serving.drafters.base import Drafter, NoDrafter

__all__ = ["Drafter", "NoDrafter"]
