"""Short real runs: Reverb server, learner, evaluator and actor processes."""
import json
import os
import subprocess

import gin
import numpy as np
import pytest
import tensorflow as tf

from actorq_tf import agents
from actorq_tf import config
from actorq_tf import environments
from actorq_tf import evaluation
from actorq_tf import export
from actorq_tf import run_directory
from actorq_tf.interpreter import TFLiteModel
from helpers import SMALL_CONTROL_SUITE_RUN
from helpers import start_launcher

SUMMARY_KEYS = {'precision', 'target_return', 'target_reached',
                'time_to_target_s', 'wall_time_s', 'env_steps', 'train_steps',
                'eval_return_int8', 'eval_return_fp32'}


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def _role_pids(root_dir):
  statuses = (run_directory.read_status(root_dir, role)
              for role in ('learner', 'eval', 'actor_0'))
  return [s.pid for s in statuses if s]


def test_experience_flows_in_and_models_reach_the_actor(tmp_path):
  root_dir = str(tmp_path / 'run')
  launcher = start_launcher(root_dir, '--max_env_steps', '3000')
  out, err = launcher.communicate(timeout=400)
  assert launcher.returncode == 0, err[-3000:]
  assert 'env steps' in out  # progress lines

  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert SUMMARY_KEYS <= set(summary)
  assert summary['status'] == 'max_env_steps'
  assert summary['precision'] == 'int8'
  assert not summary['target_reached']
  assert summary['env_steps'] >= 3000
  # Which code made the run: this checkout's commit (a machine without git
  # gets the package's version).
  try:
    commit = subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'],
                            capture_output=True, text=True, check=True,
                            cwd=os.path.dirname(__file__)).stdout.strip()
    assert summary['code_version'].startswith(f'git {commit}')
  except (OSError, subprocess.CalledProcessError):
    assert summary['code_version'] in ('actorq-tf 0.1.0', 'unknown')
  with open(os.path.join(root_dir, 'run.json')) as f:
    assert json.load(f)['code_version'] == summary['code_version']
  assert summary['train_steps'] >= 500
  assert summary['eval_return_int8'] is not None
  assert set(summary['exit_codes'].values()) == {0}
  # Past the first 200 items the rate limiter holds the configured ratio.
  assert summary['replay_regime'] == 'fixed_ratio'
  assert summary['replay_max_times_sampled'] is None
  assert summary['replay_samples_per_insert_configured'] == 32.0
  assert summary['replay_samples_per_insert_after_warmup'] == pytest.approx(
      32.0, rel=0.05)
  # One actor against one CPU learner at 32 samples per insert: the
  # learner held it.
  assert summary['actor_replay_blocked_share']['actor_0'] > 0.2
  # No target: the run keeps its best evaluated version, which is what
  # the summary reports.
  assert summary['model_path'] == summary['best_model_path']
  assert summary['eval_version'] == summary['best_evaluation']['version']
  assert summary['eval_return_int8'] == max(
      r['return_int8'] for r in run_directory.read_results(root_dir))
  # The launcher measured the machine for the whole run (learner included).
  assert summary['energy_kwh'] > 0 and summary['emissions_kg'] > 0
  assert summary['energy_duration_s'] >= summary['wall_time_s'] - 5
  assert summary['energy_country'] == 'USA'
  assert 'CPU:' in summary['energy_method']
  assert os.path.isdir(os.path.join(root_dir, 'energy'))
  int8_bytes = os.path.getsize(
      os.path.join(root_dir, 'models', 'policy_int8.tflite'))
  assert summary['model_update_bytes'] == int8_bytes

  actor_status = run_directory.read_status(root_dir, 'actor_0')
  assert actor_status.model_version > 0
  assert run_directory.read_results(root_dir)
  for path in ('models/policy_int8.tflite', 'checkpoints', 'learner',
               'actor_0', 'eval', 'logs/learner.log', 'config.gin'):
    assert os.path.exists(os.path.join(root_dir, path)), path
  for pid in _role_pids(root_dir):
    assert not _alive(pid)


def _play_on_the_evaluators_seeds(greedy_actions, episodes):
  envs = [environments.load_environment() for _ in range(episodes)]
  returns = evaluation.greedy_returns(
      envs, greedy_actions, [10**6 + i for i in range(episodes)])
  return sum(returns) / episodes


def test_a_run_that_meets_its_target_keeps_the_model_that_met_it(tmp_path):
  root_dir = str(tmp_path / 'run')
  # Any CartPole evaluation scores at least 0: the rule decides the stop.
  launcher = start_launcher(root_dir, '--max_env_steps', '0',
                            '--max_wall_time_s', '300', '--target_return', '0')
  out, err = launcher.communicate(timeout=400)
  assert launcher.returncode == 0, err[-3000:]
  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'target_reached'
  episodes = summary['stopping_rule'].pop('episodes_per_evaluation')
  assert summary['stopping_rule'] == {
      'metric': 'return_int8', 'target_return': 0.0,
      'evaluations_in_a_row': 2}
  first, second = run_directory.read_results(root_dir)[:2]
  target = summary['target_evaluation']
  assert target['version'] == second['version'] > first['version']
  assert summary['train_steps_to_target'] == second['version']
  assert summary['model_path'] == summary['target_model_path']
  assert summary['eval_return_int8'] == target['return_int8']
  assert f'Target met: evaluations of versions {first["version"]}, ' in out

  # The kept files are that version's and play what the summary says.
  gin.clear_config()
  gin.parse_config_file(os.path.join(root_dir, 'config.gin'))
  try:
    assert episodes == config.bound_parameter(evaluation.run_evaluator,
                                              'num_episodes')
    model_bytes, normalizer, description = export.load_kept_model(
        summary['model_path'][:-len('.tflite')])
    assert description['version'] == target['version']
    model = TFLiteModel(model_bytes, normalizer)
    assert _play_on_the_evaluators_seeds(
        model.greedy_actions, episodes) == target['return_int8']
    q_network = agents.builder().policy_network(environments.load_environment())
    tf.train.Checkpoint(policy_network=q_network).read(os.path.join(
        os.path.dirname(summary['model_path']),
        run_directory.KEPT_CHECKPOINT)).assert_existing_objects_matched()
    assert _play_on_the_evaluators_seeds(
        lambda o: np.argmax(q_network(o)[0].numpy(), axis=-1), episodes
    ) == target['return_fp32']
  finally:
    gin.clear_config()


def test_d4pg_on_a_control_suite_task_flows_end_to_end(tmp_path):
  root_dir = str(tmp_path / 'run')
  # Its actor steps two environments, with one model call for both.
  launcher = start_launcher(root_dir, '--max_env_steps', '2000',
                            '--envs_per_actor', '2',
                            small_run=SMALL_CONTROL_SUITE_RUN)
  out, err = launcher.communicate(timeout=400)
  assert launcher.returncode == 0, err[-3000:]

  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'max_env_steps'
  assert summary['env_steps'] >= 2000
  assert summary['train_steps'] >= 200
  assert set(summary['exit_codes'].values()) == {0}
  actor_status = run_directory.read_status(root_dir, 'actor_0')
  assert actor_status.model_version >= 100
  assert actor_status.environments == 2
  assert actor_status.model_share > 0.5
  learner_status = run_directory.read_status(root_dir, 'learner')
  assert learner_status.train_step >= 200
  results = run_directory.read_results(root_dir)
  assert results, out[-2000:]
  # Control Suite rewards lie in [0, 1]: 250 steps score at most 250.
  assert all(0.0 <= r['return_int8'] <= 250.0 for r in results)
  with open(os.path.join(root_dir, 'models', 'policy_int8.json')) as f:
    model_info = json.load(f)
  assert model_info['output'] == 'action'
  assert model_info['check']['mean_action_error'] <= 0.1  # the ceiling
