"""The evaluator: int8 model and fp32 network on the same seeds."""
from actorq_tf import environments
from actorq_tf import evaluation
from helpers import publish_policy


def test_evaluator_logs_int8_and_fp32_returns_of_one_version(reverb_server,
                                                             tmp_path):
  publish_policy(reverb_server, version=9)
  evaluations = evaluation.run_evaluator(
      str(tmp_path), reverb_server, num_episodes=4, max_evaluations=1)
  assert evaluations == 1
  [result] = evaluation.read_results(str(tmp_path))
  assert result['version'] == result['fp32_version'] == 9
  assert len(result['returns_int8']) == len(result['returns_fp32']) == 4
  assert all(r >= 8 for r in result['returns_int8'] + result['returns_fp32'])
  assert result['return_int8'] == sum(result['returns_int8']) / 4


def test_greedy_episodes_repeat_with_their_seeds(cartpole_gin):
  envs = [environments.load_environment() for _ in range(3)]
  always_left = lambda observations: [0] * len(observations)
  first = evaluation.greedy_returns(envs, always_left, [1, 2, 3])
  again = evaluation.greedy_returns(envs, always_left, [1, 2, 3])
  assert first == again
  assert all(8 <= r < 100 for r in first)
