"""Helpers shared by tests: publishing real models, running the launcher."""
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import model_channel
from actorq_tf import signing
from conftest import PROJECT_ROOT


def users_project(directory):
  """The README's example as a user has it: examples/corridor.py as their
  own module, my_corridor.py, in the directory they launch from, and
  examples/corridor.gin naming it."""
  with open(os.path.join(PROJECT_ROOT, 'examples', 'corridor.py')) as f:
    (directory / 'my_corridor.py').write_text(f.read())
  with open(os.path.join(PROJECT_ROOT, 'examples', 'corridor.gin')) as f:
    gin_text = f.read()
  assert "'examples.corridor." in gin_text
  (directory / 'my_corridor.gin').write_text(
      gin_text.replace("'examples.corridor.", "'my_corridor."))


def cartpole_observations(count=256, seed=0):
  env = environments.load_environment()
  env.seed(seed)
  rng = np.random.default_rng(seed)
  observations = []
  time_step = env.reset()
  while len(observations) < count:
    observations.append(time_step.observation)
    time_step = env.step(np.array(rng.integers(2)))
  return np.array(observations, np.float32)


def publish_policy(server_address, version, root_dir, precisions=('int8',),
                   q_network=None, publish_variables=True):
  """Exports the configured Q-network and publishes models and variables,
  signed with the key of the run in `root_dir`."""
  env = environments.load_environment()
  q_network = q_network or agents.builder().policy_network(env)
  client = model_channel.wait_for_server(server_address, 10)
  publisher = model_channel.ModelPublisher(client, signing.run_key(root_dir))

  def publish_models_only(results, _):
    for result in results:
      publisher.publish(model_channel.PublishedModel(
          result.version, result.precision, result.model_bytes,
          result.normalizer))

  exporter = export.PolicyExporter(
      q_network, agents.builder().model_outputs(env), precisions,
      publisher.publish_exports if publish_variables else publish_models_only,
      model_dir=tempfile.mkdtemp())
  exporter.export(version, cartpole_observations())
  return q_network


# Replay that samples early, a small net and frequent exports and evals.
SMALL_RUN = [
    '--gin_bindings', 'replay_table.min_size_to_sample = 200',
    '--gin_bindings', 'create_q_network.fc_layer_params = (64, 64)',
    '--gin_bindings', 'train.export_interval = 100',
    '--gin_bindings', 'run_evaluator.min_interval_s = 1.0',
    '--target_return', '1000',  # CartPole never gets there: run the budget.
]


# A Control Suite task with D4PG: small nets, short evaluations.
SMALL_CONTROL_SUITE_RUN = [
    '--gin_file', 'd4pg_cartpole_balance.gin',
    '--gin_bindings', 'replay_table.min_size_to_sample = 200',
    '--gin_bindings', 'create_actor_network.fc_layer_params = (64, 64)',
    '--gin_bindings', 'DistributionalCriticNetwork.fc_layer_params = (64, 64)',
    '--gin_bindings', 'train.export_interval = 100',
    '--gin_bindings', 'run_evaluator.num_episodes = 2',
    '--gin_bindings', 'load_environment.max_episode_steps = 250',
    '--target_return', '1000',  # more than 250 steps can score
]


def start_launcher(root_dir, *args, small_run=tuple(SMALL_RUN)):
  """The local launcher on a small run (CartPole unless `small_run` says
  otherwise), as a user starts it."""
  return subprocess.Popen(
      [sys.executable, '-m', 'binaries.local_main', '--root_dir', root_dir,
       *small_run, *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))


@contextlib.contextmanager
def launcher_running(root_dir, *args):
  """start_launcher, stopped with Ctrl-C (then killed) if the test leaves
  it running, so that no role outlives a failed test; prints its output."""
  launcher = start_launcher(root_dir, *args)
  try:
    yield launcher
  finally:
    if launcher.poll() is None:
      launcher.send_signal(signal.SIGINT)
      try:
        out, err = launcher.communicate(timeout=120)
      except subprocess.TimeoutExpired:
        launcher.kill()
        out, err = launcher.communicate()
      print('launcher stdout:', out[-3000:], 'launcher stderr:', err[-3000:],
            sep='\n')


def wait_for(condition, timeout_s, what, explain=lambda: ''):
  """Polls `condition`; on timeout fails with `what` and what `explain`
  returns (the state that tells why, read at that moment)."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if condition():
      return
    time.sleep(0.5)
  raise AssertionError(f'timed out waiting for {what}\n{explain()}')
