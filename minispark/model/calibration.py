"""What serving applies of a confidence calibration: the fitted STS map and its JSON file.

Sequential Temperature Scaling (design notes §7.2) maps the drafter's raw confidence at draft
position k to σ((logit(c_k) + b_k) / T_k). This module holds that map, its validation and its
``calibration.json`` beside a drafter; fitting it (ECE/AUC, the grid search, the reliability plot)
is ``measuring/calibrate.py``'s, which serving never imports.

    python -c "from minispark.model.calibration import Calibration; print(Calibration([2.0, 1.0]).scale(1, 0.9))"
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from minispark.core.atomic import write_json_atomic
from minispark.core.errors import MinisparkError, json_reason
from minispark.core.checks import edited_text

DEFAULT_BINS = 15
CALIBRATION_VERSION = 1


class CalibrationError(MinisparkError):
    """A calibration file is missing or malformed (one-line message naming file and field)."""


@dataclass
class Calibration:
    """Per-position temperatures T_1..T_γ and logit shifts b_1..b_γ; c_k ↦ σ((logit(c_k) + b_k) / T_k).

    A temperature alone only moves scores toward or away from 0.5, so it cannot fix a head whose
    scores sit on the wrong side of 0.5 (e.g. trained where acceptance was high, served where it is
    low); the shift can. Both keep each position's ranking (the map is increasing in c_k).

    ``drafter``/``target`` name what the temperatures were fitted for (for people);
    ``target_identity`` and ``sampling`` (temperature, top_p, top_k) are what loading checks
    (``checkpoint.load_calibration``; empty in files written before they existed). ``rounds`` and
    ``n_bins`` describe the fit and ``metrics`` holds ECE/AUC/Brier before and after.
    """

    temperatures: list[float]
    shifts: list[float] = field(default_factory=list)
    drafter: str = ""
    target: str = ""
    target_identity: str = ""
    sampling: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    n_bins: int = DEFAULT_BINS
    metrics: dict[str, Any] = field(default_factory=dict)
    version: int = CALIBRATION_VERSION

    def __post_init__(self) -> None:
        self.temperatures = [float(t) for t in self.temperatures]
        self.shifts = [float(b) for b in self.shifts] or [0.0] * len(self.temperatures)
        if len(self.shifts) != len(self.temperatures) or not all(math.isfinite(b) for b in self.shifts):
            raise CalibrationError(f"calibration shifts must be finite, one per temperature, got {self.shifts}")
        bad = [t for t in self.temperatures if not (math.isfinite(t) and t > 0)]
        if bad:
            raise CalibrationError(
                f"calibration temperatures must be positive and finite, got {bad}"
            )

    @property
    def gamma(self) -> int:
        return len(self.temperatures)

    def scale(self, position: int, confidence: float) -> float:
        """σ((logit(c) + b)/T) at a 1-based position for one float; 0 and 1 stay 0 and 1."""
        if confidence <= 0.0 or confidence >= 1.0:
            return min(max(confidence, 0.0), 1.0)
        z = (math.log(confidence / (1.0 - confidence)) + self.shifts[position - 1]) / self.temperatures[position - 1]
        # Two branches so exp never overflows for very confident scores.
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    def apply(self, confidences: np.ndarray) -> np.ndarray:
        """Calibrate a (rounds, γ') array column by column (γ' <= γ); NaN stays NaN."""
        confidences = np.asarray(confidences, dtype=np.float64)
        if confidences.shape[-1] > self.gamma:
            raise CalibrationError(
                f"calibration has {self.gamma} temperatures, confidences have "
                f"{confidences.shape[-1]} positions"
            )
        temps = np.asarray(self.temperatures[: confidences.shape[-1]])
        return temperature_scale(confidences, temps, np.asarray(self.shifts[: confidences.shape[-1]]))

    def save(self, path: str | Path) -> Path:
        return write_json_atomic(path, asdict(self))

    @staticmethod
    def load(path: str | Path) -> Calibration:
        path = Path(path)
        try:
            data = json.loads(edited_text(path))
        except FileNotFoundError:
            raise CalibrationError(f"{path}: calibration file not found") from None
        except (OSError, json.JSONDecodeError, RecursionError) as err:  # RecursionError: nested too deeply
            raise CalibrationError(f"{path}: not readable as JSON ({err})") from None
        except UnicodeDecodeError:
            raise CalibrationError(f"{path}: not UTF-8 text (a calibration is JSON)") from None
        except ValueError as err:  # an integer of more than 4300 digits: a ValueError traceback
            raise CalibrationError(f"{path}: not readable as JSON ({json_reason(err)})") from None
        if not isinstance(data, dict):
            raise CalibrationError(f"{path}: expected a JSON object")
        known = {f.name for f in fields(Calibration)}
        for name in sorted(set(data) - known):
            raise CalibrationError(f"{path}: field '{name}': unknown field")
        if data.get("version") != CALIBRATION_VERSION:
            raise CalibrationError(
                f"{path}: field 'version': expected {CALIBRATION_VERSION}, "
                f"got {data.get('version')!r}"
            )
        temps = data.get("temperatures")
        if not isinstance(temps, list) or not temps or not all(_finite(t) and t > 0 for t in temps):
            raise CalibrationError(
                f"{path}: field 'temperatures': expected a list of positive numbers, got {temps!r}"
            )
        # What loading reads besides the map (a traceback when hand-edited: a number as the identity, text as
        # the fitted temperature; a list as the sampling was taken as "fitted at any settings")
        for name in ("drafter", "target", "target_identity"):
            if not isinstance(data.get(name, ""), str):
                raise CalibrationError(f"{path}: field '{name}': expected a string, got {data[name]!r}")
        sampling = data.get("sampling", {})
        if not isinstance(sampling, dict) or not all(k in _SAMPLING and _finite(v) for k, v in sampling.items()):
            raise CalibrationError(f"{path}: field 'sampling': expected an object of numbers "
                                   f"({', '.join(_SAMPLING)}), got {sampling!r}")
        try:
            return Calibration(**data)
        except (TypeError, CalibrationError) as err:
            raise CalibrationError(f"{path}: {err}") from None


#: The sampling settings a calibration records it was fitted at (``checkpoint.sampling_record``).
_SAMPLING = ("temperature", "top_p", "top_k")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def temperature_scale(confidences: np.ndarray, temperatures: np.ndarray | float,
                      shifts: np.ndarray | float = 0.0) -> np.ndarray:
    """σ((logit(c) + b)/T), elementwise with broadcasting; c = 0 → 0, c = 1 → 1, NaN → NaN."""
    c = np.asarray(confidences, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        z = (np.log(c) - np.log1p(-c) + shifts) / temperatures
        return 1.0 / (1.0 + np.exp(-z))
