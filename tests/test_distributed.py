"""Short real runs: Reverb server, learner, evaluator and actor processes."""
import json
import os
import signal
import subprocess
import sys
import time

from actorq_tf import evaluation
from actorq_tf import metrics
from conftest import PROJECT_ROOT

SMALL_RUN = [
    '--gin_bindings', 'replay_table.min_size_to_sample = 200',
    '--gin_bindings', 'create_q_network.fc_layer_params = (64, 64)',
    '--gin_bindings', 'train.export_interval = 100',
    '--gin_bindings', 'run_evaluator.min_interval_s = 1.0',
    '--target_return', '1000',  # CartPole never gets there: run the budget.
]
SUMMARY_KEYS = {'precision', 'target_return', 'target_reached',
                'time_to_target_s', 'wall_time_s', 'env_steps', 'train_steps',
                'eval_return_int8', 'eval_return_fp32'}


def _start_launcher(root_dir, *args):
  return subprocess.Popen(
      [sys.executable, '-m', 'binaries.local_main', '--root_dir', root_dir,
       *SMALL_RUN, *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))


def _wait_for(condition, timeout_s, what):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if condition():
      return
    time.sleep(0.5)
  raise AssertionError(f'timed out waiting for {what}')


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def _role_pids(root_dir):
  return [s['pid'] for s in (metrics.read_status(root_dir, role) for role in
                             ('learner', 'eval', 'actor_0')) if s]


def test_experience_flows_in_and_models_reach_the_actor(tmp_path):
  root_dir = str(tmp_path / 'run')
  launcher = _start_launcher(root_dir, '--max_env_steps', '5000')
  out, err = launcher.communicate(timeout=400)
  assert launcher.returncode == 0, err[-3000:]
  assert 'env steps' in out  # progress lines

  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert SUMMARY_KEYS <= set(summary)
  assert summary['status'] == 'max_env_steps'
  assert summary['precision'] == 'int8'
  assert not summary['target_reached']
  assert summary['env_steps'] >= 5000
  assert summary['train_steps'] >= 500
  assert summary['eval_return_int8'] is not None
  assert set(summary['exit_codes'].values()) == {0}

  actor_status = metrics.read_status(root_dir, 'actor_0')
  assert actor_status['model_version'] > 0
  assert evaluation.read_results(root_dir)
  for path in ('models/policy_int8.tflite', 'checkpoints', 'learner',
               'actor_0', 'eval', 'logs/learner.log', 'config.gin'):
    assert os.path.exists(os.path.join(root_dir, path)), path
  for pid in _role_pids(root_dir):
    assert not _alive(pid)


def test_a_dying_role_stops_the_run_with_an_error(tmp_path):
  root_dir = str(tmp_path / 'run')
  launcher = _start_launcher(root_dir, '--max_env_steps', '0')
  try:
    _wait_for(lambda: len(_role_pids(root_dir)) == 3, 180,
              'every role to start')
    os.kill(metrics.read_status(root_dir, 'actor_0')['pid'], signal.SIGKILL)
    _, err = launcher.communicate(timeout=120)
  finally:
    launcher.kill()
  assert launcher.returncode == 1
  assert 'role actor_0 exited with code -9' in err
  with open(os.path.join(root_dir, 'summary.json')) as f:
    assert json.load(f)['status'] == 'failed'
  for pid in _role_pids(root_dir):
    assert not _alive(pid)


def test_ctrl_c_shuts_every_role_down_cleanly(tmp_path):
  root_dir = str(tmp_path / 'run')
  launcher = _start_launcher(root_dir, '--max_env_steps', '0')
  try:
    _wait_for(lambda: len(_role_pids(root_dir)) == 3, 180,
              'every role to start')
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=120)
  finally:
    launcher.kill()
  assert launcher.returncode == 0, err[-3000:]
  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'interrupted (SIGINT)'
  assert set(summary['exit_codes'].values()) == {0}
  assert os.listdir(os.path.join(root_dir, 'checkpoints'))
