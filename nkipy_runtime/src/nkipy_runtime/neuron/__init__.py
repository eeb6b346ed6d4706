"""What ``neuronx-cc`` accepts: the Neuron target profiles (``profile``), HLO text read as
instructions (``hlo_text``) and the check of a module against a profile (``check``)."""

from .check import NeuronProfileError, Violation, violations
from .profile import RULES, NeuronProfile, Rule, profile_for

__all__ = [
    "RULES",
    "NeuronProfile",
    "NeuronProfileError",
    "Rule",
    "Violation",
    "profile_for",
    "violations",
]
