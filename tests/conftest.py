"""Shared fixtures: gin configured for CartPole and a real Reverb server."""
import os
import sys

import gin
import pytest

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_ROOT)

from actorq_tf import config  # pylint: disable=g-import-not-at-top

# Small replay so tests sample after a few hundred steps, and a wide rate
# limiter so an actor with no learner behind it is not held back.
TEST_BINDINGS = (
    'replay_table.min_size_to_sample = 100',
    'replay_table.samples_per_insert_tolerance = 100.0',
    'create_q_network.fc_layer_params = (64, 64)',
)


# Test modules that start whole runs (the launcher and its roles, Ray
# clusters, the report's benchmarks): minutes, where the others take seconds.
# `bash scripts/test.sh -m 'not end_to_end'` runs the others alone.
END_TO_END_MODULES = ('test_benchmarks', 'test_distributed', 'test_faults',
                      'test_ray_cluster', 'test_trust_and_load',
                      'test_your_own_problem')


def pytest_collection_modifyitems(items):
  for item in items:
    if item.module.__name__ in END_TO_END_MODULES:
      item.add_marker(pytest.mark.end_to_end)


@pytest.fixture
def cartpole_gin():
  config.parse_gin(['dqn_cartpole.gin'], TEST_BINDINGS)
  yield
  gin.clear_config()


@pytest.fixture
def reverb_server(cartpole_gin):  # pylint: disable=unused-argument
  """A real Reverb server on localhost with the run's tables."""
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  from actorq_tf import server  # pylint: disable=g-import-not-at-top
  import reverb  # pylint: disable=g-import-not-at-top
  reverb_server = reverb.Server(
      server.create_tables(environments.load_environment()), port=None)
  yield f'localhost:{reverb_server.port}'
  reverb_server.stop()


def run_binary(module, *args, timeout=180):
  """Runs `python -m module args` the way a user would; returns the result."""
  import subprocess  # pylint: disable=g-import-not-at-top
  return subprocess.run(
      [sys.executable, '-m', module, *args], cwd=PROJECT_ROOT,
      capture_output=True, text=True, timeout=timeout,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))
