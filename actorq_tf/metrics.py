"""Run-time figures: TensorBoard writers, the status files roles share, and
files and directories replaced whole.

Each role rewrites `root_dir/status/<role>.json` every few seconds; the local
launcher reads them to print progress and decide when to stop.
"""
import json
import os
import shutil
import time
from typing import Any, Callable, Dict, Optional

import tensorflow as tf

STATUS_DIR = 'status'


def summary_writer(root_dir: str, role: str):
  return tf.summary.create_file_writer(os.path.join(root_dir, role),
                                       flush_millis=10_000)


def write_energy(writer, reading, step: int) -> None:
  """An energy.EnergyReading's figures as TensorBoard scalars."""
  with writer.as_default(step=step):
    tf.summary.scalar('energy/energy_kwh', reading.energy_kwh)
    tf.summary.scalar('energy/emissions_kg', reading.emissions_kg)


def write_json_atomically(path: str, data: Dict[str, Any]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.tmp', 'w') as f:
    json.dump(data, f, indent=1, sort_keys=True)
  os.replace(path + '.tmp', path)


def write_directory_atomically(path: str, fill: Callable[[str], None]
                              ) -> None:
  """Replaces directory `path` with one that `fill(new_path)` creates
  (`new_path` does not exist yet), so that no reader sees it half written."""
  partial = path + '.partial'
  shutil.rmtree(partial, ignore_errors=True)
  fill(partial)
  shutil.rmtree(path, ignore_errors=True)
  os.rename(partial, path)


def write_status(root_dir: str, role: str, **figures) -> None:
  figures['time'] = time.time()
  figures['pid'] = os.getpid()
  write_json_atomically(os.path.join(root_dir, STATUS_DIR, f'{role}.json'),
                        figures)


def read_status(root_dir: str, role: str) -> Optional[Dict[str, Any]]:
  try:
    with open(os.path.join(root_dir, STATUS_DIR, f'{role}.json')) as f:
      return json.load(f)
  except (FileNotFoundError, json.JSONDecodeError):
    return None


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
