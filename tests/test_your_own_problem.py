"""A user's own environment and network, trained through local_main by gin
alone: the README's example files, and the pixel config. (On a Ray cluster:
tests/test_ray_cluster.py.)"""
import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from conftest import PROJECT_ROOT
from conftest import run_binary
from helpers import users_project


def _scalars(event_dir, tag):
  """{step: value} of a TensorBoard scalar written with tf.summary."""
  values = {}
  for name in sorted(os.listdir(event_dir)):
    if not name.startswith('events.out.tfevents'):
      continue
    for event in tf.compat.v1.train.summary_iterator(
        os.path.join(event_dir, name)):
      for value in event.summary.value:
        if value.tag == tag:
          values[event.step] = float(tf.make_ndarray(value.tensor))
  return values


def _read_json(path):
  with open(path) as f:
    return json.load(f)


def _assert_the_model_chose_every_step_after_the_first(root_dir):
  """The actor took a model above version 0, and from then on each of its
  status intervals had a model share of 1 (an interval that began before
  the first model may hold random steps)."""
  assert _read_json(root_dir / 'status' / 'actor_0.json')[
      'model_version'] > 0
  versions = _scalars(root_dir / 'actor_0', 'actor/model_version')
  shares = _scalars(root_dir / 'actor_0', 'actor/model_share')
  steps = sorted(versions)
  after_first_model = [later for earlier, later in zip(steps, steps[1:])
                       if versions[earlier] > 0]
  assert after_first_model, versions
  assert [shares[step] for step in after_first_model] == [1.0] * len(
      after_first_model)


def _launch(directory, module, *args):
  """`python -m module` run from `directory`, as a user runs it."""
  return subprocess.run(
      [sys.executable, '-m', module, *args], cwd=directory,
      capture_output=True, text=True, timeout=400,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))


def test_a_users_environment_and_network_train_by_gin_alone(tmp_path):
  # A PyEnvironment with dict observations and a Sequential network, in a
  # module registered nowhere that only the launch directory holds; the gin
  # file names them by import path (README, "Your own environment"). Every
  # role imports it.
  users_project(tmp_path)
  root_dir = tmp_path / 'run'
  result = _launch(tmp_path, 'binaries.local_main', '--root_dir',
                   str(root_dir), '--gin_file', 'my_corridor.gin',
                   '--max_wall_time_s', '120', '--notrack_energy',
                   '--gin_bindings', 'run_actor.status_interval_s = 1')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = _read_json(root_dir / 'summary.json')
  assert summary['replay_inserts'] > 0 and summary['train_steps'] > 0
  _assert_the_model_chose_every_step_after_the_first(root_dir)
  # The kept model is the user's network, in full int8.
  interpreter = tf.lite.Interpreter(
      model_path=str(root_dir / 'models' / 'policy_int8.tflite'))
  assert interpreter.get_input_details()[0]['dtype'] == np.int8
  assert list(interpreter.get_input_details()[0]['shape']) == [1, 2]


def test_pixels_run_end_to_end_with_int8_actors_on_raw_uint8(tmp_path):
  # In the replay regime QuaRL ran: no ratio holds the learner or the
  # actor, and each item is sampled at most samples_per_insert times.
  root_dir = tmp_path / 'run'
  result = run_binary(
      'binaries.local_main', '--root_dir', str(root_dir), '--gin_file',
      'dqn_catch_pixels.gin', '--max_wall_time_s', '90', '--notrack_energy',
      '--gin_bindings', 'run_actor.status_interval_s = 1',
      '--gin_bindings', "replay_table.regime = 'free_running'", timeout=400)
  assert result.returncode == 0, result.stderr[-3000:]
  summary = _read_json(root_dir / 'summary.json')
  assert summary['replay_regime'] == 'free_running'
  # The config's replay_table.samples_per_insert.
  assert summary['replay_max_times_sampled'] == 16
  assert summary['replay_samples_per_insert_configured'] is None
  assert 0 < summary['replay_samples_per_insert'] <= 16
  _assert_the_model_chose_every_step_after_the_first(root_dir)
  model_path = root_dir / 'models' / 'policy_int8'
  interpreter = tf.lite.Interpreter(model_path=f'{model_path}.tflite')
  interpreter.allocate_tensors()
  assert interpreter.get_input_details()[0]['dtype'] == np.uint8
  # pylint: disable-next=protected-access
  ops = [op['op_name'] for op in interpreter._get_ops_details()]
  assert ops[:3] == ['CAST', 'QUANTIZE', 'CONV_2D'], ops
  description = _read_json(f'{model_path}.json')
  # No normalizer: the actor hands the image to the model as it is.
  assert set(np.ravel(description['observation_shift'])) == {0.0}
  assert set(np.ravel(description['observation_scale'])) == {1.0}
  assert summary['last_evaluation'] is not None


def test_a_users_network_tflite_cannot_take_stops_the_launch(tmp_path):
  # The user's module sits in the directory they launch from.
  (tmp_path / 'my_networks.py').write_text(
      'import tensorflow as tf\n'
      'from tf_agents.networks import sequential\n\n\n'
      'def q_network(observation_spec, action_spec):\n'
      '  return sequential.Sequential(\n'
      '      [tf.keras.layers.Dense(8),\n'
      '       tf.keras.layers.Lambda(tf.math.special.bessel_i0e,\n'
      '                              name="my_bessel"),\n'
      '       tf.keras.layers.Dense(2)], input_spec=observation_spec)\n')
  root_dir = tmp_path / 'run'
  result = _launch(tmp_path, 'binaries.local_main', '--root_dir',
                   str(root_dir), '--gin_bindings',
                   "dqn.policy_network.factory = 'my_networks.q_network'")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      "local_main.py: error: int8 TFLite conversion failed: layer "
      "'my_bessel' ('tf.BesselI0e' op is neither a custom op nor a flex op)")
  assert 'Traceback' not in result.stderr
  assert not root_dir.exists()


def test_the_docs_show_the_files_these_tests_run():
  with open(os.path.join(PROJECT_ROOT, 'docs', 'your_own_problem.md')) as f:
    page = f.read()
  for path in ('examples/corridor.py', 'examples/corridor.gin',
               'gin_configs/dqn_catch_pixels.gin'):
    with open(os.path.join(PROJECT_ROOT, path)) as f:
      assert f.read() in page, (
          f'docs/your_own_problem.md does not show {path} as it is')
