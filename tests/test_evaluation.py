"""The evaluator: int8 model and fp32 network on the same seeds."""
import os
import time

import numpy as np

from actorq_tf import environments
from actorq_tf import evaluation
from actorq_tf import export
from actorq_tf import run_directory
from actorq_tf.interpreter import TFLiteModel
from helpers import publish_policy


def test_evaluator_logs_int8_and_fp32_returns_of_one_version(reverb_server,
                                                             tmp_path):
  q_network = publish_policy(reverb_server, version=9, root_dir=str(tmp_path))
  evaluations = evaluation.run_evaluator(
      str(tmp_path), reverb_server, num_episodes=4, max_evaluations=1)
  assert evaluations == 1
  [result] = run_directory.read_results(str(tmp_path))
  assert result['version'] == result['fp32_version'] == 9
  # The returns are those of the published network and of the int8 model the
  # evaluator kept, played greedily on the evaluator's seeds (seed 0).
  seeds = [10**6 + i for i in range(4)]
  envs = [environments.load_environment() for _ in seeds]
  assert result['returns_fp32'] == evaluation.greedy_returns(
      envs, lambda o: np.argmax(q_network(o)[0].numpy(), axis=1), seeds)
  model_bytes, normalizer, _ = export.load_kept_model(os.path.join(
      run_directory.version_dir(str(tmp_path), 9), run_directory.KEPT_MODEL))
  int8_model = TFLiteModel(model_bytes, normalizer)
  assert result['returns_int8'] == evaluation.greedy_returns(
      envs, int8_model.greedy_actions, seeds)
  assert result['return_int8'] == sum(result['returns_int8']) / 4


def test_evaluator_never_compares_int8_with_fp32_of_another_version(
    reverb_server, tmp_path):
  publish_policy(reverb_server, version=9, root_dir=str(tmp_path))
  # Version 12's model comes without its variables: fp32 stays at 9.
  publish_policy(reverb_server, version=12, root_dir=str(tmp_path), publish_variables=False)
  deadline = time.monotonic() + 60
  unmatched_since = []

  def seen_unmatched_for_a_while():
    # Stops 3 s after the evaluator said it found no matching variables, so
    # that it would have had time to compare the two versions anyway.
    status = run_directory.read_status(str(tmp_path), 'eval')
    if status and status.unmatched_versions and not unmatched_since:
      unmatched_since.append(time.monotonic())
    return (time.monotonic() > deadline or
            bool(unmatched_since) and time.monotonic() > unmatched_since[0] + 3)

  evaluations = evaluation.run_evaluator(
      str(tmp_path), reverb_server, num_episodes=2, variables_timeout_s=1.0,
      should_stop=seen_unmatched_for_a_while)
  assert evaluations == 0
  assert not run_directory.read_results(str(tmp_path))
  status = run_directory.read_status(str(tmp_path), 'eval')
  assert status.evaluations == 0 and status.unmatched_versions == 1

  publish_policy(reverb_server, version=14, root_dir=str(tmp_path))
  assert evaluation.run_evaluator(
      str(tmp_path), reverb_server, num_episodes=2, max_evaluations=1) == 1
  [result] = run_directory.read_results(str(tmp_path))
  assert result['version'] == result['fp32_version'] == 14
  kept = os.path.join(run_directory.version_dir(str(tmp_path), 14),
                      run_directory.KEPT_MODEL)
  assert export.load_kept_model(kept)[2]['evaluation']['version'] == 14


def test_greedy_episodes_repeat_with_their_seeds(cartpole_gin):
  envs = [environments.load_environment() for _ in range(3)]
  # Pushes the cart under the pole: how long that lasts depends on the
  # episode's start, so the returns tell the seeds apart.
  push_under_pole = lambda observations: [int(o[2] > 0) for o in observations]
  first = evaluation.greedy_returns(envs, push_under_pole, [1, 2, 3])
  again = evaluation.greedy_returns(envs, push_under_pole, [1, 2, 3])
  others = evaluation.greedy_returns(envs, push_under_pole, [4, 5, 6])
  assert first == again
  assert first != others
  assert len(set(first + others)) > 2


def test_retention_is_below_one_when_int8_is_worse():
  assert evaluation.retention(90.0, 100.0) == 0.9
  assert evaluation.retention(-200.0, -180.0) == 0.9
  assert evaluation.retention(-10.0, 5.0) == -2.0
  assert evaluation.retention(5.0, -10.0) is None
  assert evaluation.retention(None, 1.0) is None
