"""Exploration in the actors' Python: epsilon-greedy and Gaussian noise."""
import numpy as np
import pytest
from tf_agents.specs import array_spec

from actorq_tf.errors import ActorQError
from actorq_tf.exploration import CountBonus
from actorq_tf.exploration import EpsilonGreedy
from actorq_tf.exploration import GaussianNoise
from actorq_tf.exploration import actor_sigma


def test_epsilon_decays_linearly_to_its_final_value():
  exploration = EpsilonGreedy(2, final_epsilon=0.1, decay_steps=100)
  assert exploration.epsilon(0) == 1.0
  assert exploration.epsilon(50) == pytest.approx(0.55)
  assert exploration.epsilon(100) == 0.1
  assert exploration.epsilon(10_000) == 0.1


def test_exploration_follows_the_actor_seed():
  first = EpsilonGreedy(4, 0.5, seed=3)
  second = EpsilonGreedy(4, 0.5, seed=3)
  other = EpsilonGreedy(4, 0.5, seed=4)
  draws = lambda e: [e.act(-1, 10) for _ in range(100)]
  first_draws = draws(first)
  assert first_draws == draws(second)
  assert first_draws != draws(other)
  explored = np.mean([action != -1 for action in first_draws])
  assert 0.2 < explored < 0.8
  assert set(first_draws) - {-1} <= {0, 1, 2, 3}
  assert 0 <= first.act(None, 10_000) < 4  # random before any model


def _run_lengths(actions):
  lengths, current = [], 1
  for before, after in zip(actions, actions[1:]):
    if after == before:
      current += 1
    else:
      lengths.append(current)
      current = 1
  return lengths + [current]


def test_random_actions_are_held_for_zeta_distributed_runs():
  single = EpsilonGreedy(10, 1.0, seed=0)
  held = EpsilonGreedy(10, 1.0, seed=0, repeat_exponent=1.5, max_repeat=50)
  single_runs = _run_lengths([single.act(None, 0) for _ in range(5000)])
  held_runs = _run_lengths([held.act(None, 0) for _ in range(5000)])
  # One draw per step: runs of the same action are rare and short.
  assert np.mean(single_runs) < 1.2
  assert np.mean(held_runs) > 3 and max(held_runs) >= 50
  # With epsilon 0 the greedy action comes, never a held random one.
  greedy = EpsilonGreedy(10, 0.0, seed=0, repeat_exponent=1.5)
  assert {greedy.act(7, 0) for _ in range(100)} == {7}
  with pytest.raises(ActorQError, match='exponent above 1'):
    EpsilonGreedy(2, 0.1, repeat_exponent=1.0)


def test_gaussian_noise_is_scaled_to_the_bounds_and_clipped():
  spec = array_spec.BoundedArraySpec((2,), np.float32, [-2.0, 0.0],
                                     [2.0, 1.0])
  noise = GaussianNoise(spec, sigma=0.1, seed=0)
  noisy = np.array([noise.act(np.array([0.0, 0.5], np.float32), 0)
                    for _ in range(2000)])
  assert noisy.dtype == np.float32
  # sigma is in units of half the range: 0.2 and 0.05 here.
  np.testing.assert_allclose(noisy.std(axis=0), [0.2, 0.05], rtol=0.1)
  at_bound = np.array([noise.act(np.array([2.0, 1.0], np.float32), 0)
                       for _ in range(200)])
  assert np.all(at_bound <= [2.0, 1.0])
  assert np.any(at_bound < [2.0, 1.0])
  before_model = np.array([noise.act(None, 0) for _ in range(2000)])
  assert np.all(before_model >= [-2.0, 0.0])
  assert np.all(before_model <= [2.0, 1.0])
  assert before_model[:, 0].std() > 1.0  # uniform over [-2, 2]: 1.15


def test_exploration_sigmas_spread_across_actors():
  assert actor_sigma(0, 1, sigma=0.3) == 0.3
  sigmas = [actor_sigma(i, 5, sigma=0.3, spread=2.0) for i in range(5)]
  assert sigmas[0] == pytest.approx(0.6)
  assert sigmas[2] == pytest.approx(0.3)
  assert sigmas[4] == pytest.approx(0.15)
  assert sigmas == sorted(sigmas, reverse=True)


def test_count_bonus_falls_with_visits_and_is_fresh_in_new_cells():
  # Mean 0 and spread 1: cells are unit squares of the raw observation.
  walk = np.array([[-1.0, -1.0], [1.0, 1.0]], np.float32)
  bonus = CountBonus(lambda: walk, scale=2.0, cell_size=1.0)
  here = np.array([0.2, 0.2], np.float32)
  first = [bonus(here, step) for step in range(4)]
  assert first == pytest.approx([2.0, 2.0 / np.sqrt(2), 2.0 / np.sqrt(3), 1.0])
  # The same cell, then a new one.
  assert bonus(np.array([0.9, 0.9], np.float32), 4) == pytest.approx(
      2.0 / np.sqrt(5))
  assert bonus(np.array([3.5, 0.2], np.float32), 5) == 2.0
  figures = bonus.summary()
  assert figures['visited_cells'] == 2
  assert figures['mean_bonus'] == pytest.approx(
      (sum(first) + 2.0 / np.sqrt(5) + 2.0) / 6)


def test_count_bonus_decays_to_nothing_over_its_steps():
  walk = np.array([[-1.0], [1.0]], np.float32)
  bonus = CountBonus(lambda: walk, scale=1.0, cell_size=1.0, decay_steps=100)
  new_cells = [np.array([x], np.float32) for x in (0.5, 1.5, 2.5, 3.5)]
  assert [bonus(o, step) for o, step in zip(new_cells, (0, 25, 100, 500))
         ] == pytest.approx([1.0, 0.75, 0.0, 0.0])


def test_count_bonus_is_off_by_default_and_then_walks_nowhere():
  def no_walk():
    raise AssertionError('a disabled bonus needs no observations')
  assert not CountBonus(no_walk).enabled
  with pytest.raises(ActorQError, match='scale >= 0'):
    CountBonus(no_walk, scale=-1.0)
