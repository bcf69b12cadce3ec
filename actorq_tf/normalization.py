"""The per-feature affine map between raw observations and a model's input."""
import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class ObservationNormalizer:
  """Per-feature affine map the exported models expect on their input.

  A full-int8 model quantizes its whole input with one scale; raw features of
  very different ranges (CartPole's pole angle spans a tenth of its velocity)
  would lose most of their resolution. The exporter folds this map into the
  first layer and ships it with the model; the actor applies it together
  with the input quantization, at no extra cost.
  """
  shift: np.ndarray
  scale: np.ndarray

  @classmethod
  def identity(cls, shape) -> 'ObservationNormalizer':
    return cls(np.zeros(shape, np.float32), np.ones(shape, np.float32))

  @classmethod
  def from_observations(cls, observations: np.ndarray,
                        extremes: Optional[np.ndarray] = None,
                        extremes_within: float = 4.0
                       ) -> 'ObservationNormalizer':
    """Centres and scales each feature by the observations' mean and
    standard deviation; a feature whose `extremes` lie further than
    `extremes_within` deviations from the mean is scaled so that they lie at
    most that far, so that one int8 input scale covers them without losing
    the other features' resolution."""
    mean = observations.mean(axis=0)
    std = observations.std(axis=0)
    # Constant features keep unit scale instead of dividing by zero.
    floor = max(1e-6, 1e-3 * float(std.max(initial=0.0)))
    scale = np.where(std > floor, std, 1.0)
    if extremes is not None and len(extremes):
      # An unbounded feature's infinite extreme says nothing of its range.
      distance = np.abs(extremes - mean)
      distance = np.where(np.isfinite(distance), distance, 0.0)
      scale = np.maximum(scale, distance.max(axis=0) / extremes_within)
    return cls(mean.astype(np.float32), scale.astype(np.float32))

  @property
  def is_identity(self) -> bool:
    return bool(np.all(self.shift == 0) and np.all(self.scale == 1))

  def __call__(self, observations: np.ndarray) -> np.ndarray:
    return (observations - self.shift) / self.scale


def spec_bounds(spec) -> Optional[np.ndarray]:
  """A bounded spec's minimum and maximum as two observations, inf where a
  feature is unbounded (gym writes float32's largest value for that); None
  for an unbounded spec."""
  if not hasattr(spec, 'minimum'):
    return None
  bounds = np.stack([np.broadcast_to(spec.minimum, spec.shape),
                     np.broadcast_to(spec.maximum, spec.shape)]
                   ).astype(np.float64)
  largest = float(np.finfo(np.float32).max)
  return np.where(np.abs(bounds) < largest, bounds, np.inf)
