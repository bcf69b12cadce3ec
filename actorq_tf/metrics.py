"""Run-time figures: TensorBoard writers and rates. (Status files are the
run directory's, see run_directory.)"""
import os
import time
from typing import Dict, Sequence

import numpy as np
import tensorflow as tf


def summary_writer(root_dir: str, role: str):
  return tf.summary.create_file_writer(os.path.join(root_dir, role),
                                       flush_millis=10_000)


def write_energy(writer, reading, step: int) -> None:
  """An energy.EnergyReading's figures as TensorBoard scalars."""
  with writer.as_default(step=step):
    tf.summary.scalar('energy/energy_kwh', reading.energy_kwh)
    tf.summary.scalar('energy/emissions_kg', reading.emissions_kg)


class RateMeter:
  """Counts per second over the interval since the last reading."""

  def __init__(self, count: int = 0):
    self._count = count
    self._time = time.monotonic()

  def rate(self, count: int) -> float:
    now = time.monotonic()
    rate = (count - self._count) / max(now - self._time, 1e-9)
    self._count, self._time = count, now
    return rate


def mean_figures(figures: Sequence[Dict[str, float]]) -> Dict[str, float]:
  """Each figure's mean over several sources of the same figures (an
  actor's environments); none gives none."""
  return {name: float(np.mean([f[name] for f in figures]))
          for name in (figures[0] if figures else ())}
