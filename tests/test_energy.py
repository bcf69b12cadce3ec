"""The energy meter: codecarbon offline, readings that grow with time."""
import time

import pytest

from actorq_tf import energy
from actorq_tf.errors import ActorQError


def test_readings_grow_and_stop_freezes_them():
  meter = energy.EnergyMeter('FRA').start()
  time.sleep(0.5)
  first = meter.reading()
  time.sleep(0.5)
  final = meter.stop()
  assert 0 < first.energy_kwh < final.energy_kwh
  assert 0 < first.emissions_kg < final.emissions_kg
  assert final.duration_s >= 1.0
  assert final.country_iso_code == 'FRA'
  assert 'CPU:' in final.method and 'RAM:' in final.method
  time.sleep(0.2)
  assert meter.reading() == final
  summary = final.as_summary()
  assert summary['energy_kwh'] == final.energy_kwh
  assert summary['energy_method'] == final.method


def test_grid_intensity_follows_the_country():
  # The same energy emits more on a coal-heavy grid than on a nuclear one.
  readings = {}
  for country in ('FRA', 'POL'):
    meter = energy.EnergyMeter(country).start()
    time.sleep(0.3)
    readings[country] = meter.stop()
  intensity = {c: r.emissions_kg / r.energy_kwh for c, r in readings.items()}
  assert intensity['POL'] > 3 * intensity['FRA']


def test_unknown_country_is_refused():
  with pytest.raises(ActorQError, match='unknown energy country'):
    energy.EnergyMeter('XYZ')
