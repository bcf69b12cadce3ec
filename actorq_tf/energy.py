"""Energy (kWh) and carbon (kg CO2eq) of a run, measured with codecarbon.

codecarbon runs offline: the carbon intensity comes from its table for
`country_iso_code`, nothing is sent anywhere. CPU energy is read from Intel
RAPL where the machine exposes it (/sys/class/powercap/intel-rapl); without
RAPL codecarbon's documented estimate applies: a constant 50% of the CPU's
TDP (85 W when the model is not in its table), whatever the load, so energy
is then proportional to wall time. RAM is estimated at 3/8 W per GB. The
figures are the whole machine's, not one process's: `method` says which.
"""
import dataclasses
import logging as std_logging
import threading
from typing import Dict, Optional

from actorq_tf.errors import ActorQError

_NEVER_S = 365 * 24 * 3600


@dataclasses.dataclass
class EnergyReading:
  energy_kwh: float
  emissions_kg: float
  duration_s: float
  method: str
  country_iso_code: str

  def as_summary(self) -> Dict:
    return {'energy_kwh': self.energy_kwh, 'emissions_kg': self.emissions_kg,
            'energy_duration_s': round(self.duration_s, 1),
            'energy_method': self.method,
            'energy_country': self.country_iso_code}


class EnergyMeter:
  """Machine energy and emissions since `start()`, read whenever asked."""

  def __init__(self, country_iso_code: str = 'USA'):
    # Importing codecarbon costs a second (pandas): only meters pay it.
    # pylint: disable=g-import-not-at-top
    try:
      from codecarbon import OfflineEmissionsTracker
      from codecarbon.core import cpu
      from codecarbon.input import DataSource
    except ImportError as e:  # An extra: actorq-tf[energy].
      raise ActorQError(
          'energy is measured with codecarbon, which is not installed: '
          "pip install 'actorq-tf[energy]', or run with --notrack_energy"
      ) from e
    # pylint: enable=g-import-not-at-top
    std_logging.getLogger('codecarbon').setLevel(std_logging.ERROR)
    countries = DataSource().get_global_energy_mix_data()
    if country_iso_code not in countries:
      raise ActorQError(
          f'unknown energy country {country_iso_code!r}: expected a 3-letter '
          f'ISO code codecarbon has grid data for, e.g. USA, FRA, DEU, CHN')
    try:
      # Readings are taken by `reading()`, from one thread under a lock,
      # not by codecarbon's timer thread, whose first tick never comes.
      self._tracker = OfflineEmissionsTracker(
          country_iso_code=country_iso_code, save_to_file=False,
          log_level='error', measure_power_secs=_NEVER_S,
          tracking_mode='machine')
    except Exception as e:  # pylint: disable=broad-except
      raise ActorQError(f'cannot measure energy ({e}); --notrack_energy '
                        f'runs without measuring') from e
    self._country = country_iso_code
    self._method = _method(self._tracker, cpu.is_rapl_available())
    self._lock = threading.Lock()
    self._stopped: Optional[EnergyReading] = None

  def start(self) -> 'EnergyMeter':
    self._tracker.start()
    return self

  def reading(self) -> EnergyReading:
    with self._lock:
      if self._stopped:
        return self._stopped
      # pylint: disable=protected-access
      # codecarbon 2.5.1 (pinned) has no public "so far" reading; these are
      # the two steps its own flush() takes.
      self._tracker._measure_power_and_energy()
      data = self._tracker._prepare_emissions_data()
      # pylint: enable=protected-access
      return EnergyReading(float(data.energy_consumed),
                           float(data.emissions), float(data.duration),
                           self._method, self._country)

  def stop(self) -> EnergyReading:
    final = self.reading()
    with self._lock:
      self._stopped = final
      self._tracker.stop()
    return final


def _method(tracker, rapl: bool) -> str:
  # pylint: disable=protected-access
  parts = []
  for hardware in tracker._hardware:
    name = type(hardware).__name__
    if name == 'CPU':
      if rapl:
        parts.append('CPU: Intel RAPL energy counters (measured)')
      else:
        tdp = hardware._tdp
        generic = ' (generic: model not in codecarbon\'s table)' if getattr(
            hardware, '_is_generic_tdp', False) else ''
        parts.append(f'CPU: codecarbon estimate, constant {tdp * 0.5:g} W = '
                     f'50% of TDP {tdp:g} W{generic}, no RAPL on this '
                     f'machine, so energy is proportional to wall time')
    elif name == 'RAM':
      parts.append(f'RAM: codecarbon estimate, 3/8 W per GB '
                   f'({tracker._conf.get("ram_total_size", 0):.1f} GB)')
    elif name == 'GPU':
      parts.append('GPU: NVML energy counters (measured)')
  return '; '.join(parts) + '; whole machine'
