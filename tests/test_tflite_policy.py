"""The actor's side of a model: interpreter, quantization, exploration."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import array_spec
from tf_agents.specs import tensor_spec

from actorq_tf import export
from actorq_tf import networks
from actorq_tf.actor import actor_sigma
from actorq_tf.errors import ActorQError
from actorq_tf.tflite_policy import EpsilonGreedy
from actorq_tf.tflite_policy import GaussianNoise
from actorq_tf.tflite_policy import ObservationNormalizer
from actorq_tf.tflite_policy import TFLiteModel


@pytest.fixture(scope='module')
def int8_model():
  tf.random.set_seed(1)
  network = networks.create_q_network(
      tensor_spec.TensorSpec([4], tf.float32), 3, (32,))
  observations = np.random.default_rng(1).normal(size=(256, 4)).astype(
      np.float32)
  normalizer = ObservationNormalizer.from_observations(observations)
  folded = network.copy()
  folded.create_variables(network.input_tensor_spec)
  folded.set_weights(network.get_weights())
  export.fold_normalization(folded, normalizer)
  model = export.convert(folded, 'int8', normalizer(observations))
  return network, observations, normalizer, model


def test_int8_q_values_track_fp32_on_raw_observations(int8_model):
  network, observations, normalizer, model = int8_model
  q_values = TFLiteModel(model, normalizer).outputs(observations)
  reference = network(observations)[0].numpy()
  assert q_values.shape == (256, 3)
  assert q_values.dtype == np.float32
  scale = np.abs(reference).max()
  assert np.abs(q_values - reference).max() < 0.05 * scale


def test_greedy_action_is_argmax_of_q_values(int8_model):
  _, observations, normalizer, model = int8_model
  batch_network = TFLiteModel(model, normalizer)
  single_network = TFLiteModel(model, normalizer)
  q_values = batch_network.outputs(observations[:50])
  untied = (q_values == q_values.max(1, keepdims=True)).sum(1) == 1
  assert untied.mean() > 0.8
  actions = np.array([single_network.greedy_action(o)
                      for o in observations[:50]])
  np.testing.assert_array_equal(actions[untied],
                                np.argmax(q_values, axis=1)[untied])
  np.testing.assert_array_equal(
      batch_network.greedy_actions(observations[:50])[untied],
      actions[untied])
  assert single_network.observation_shape == (4,)
  assert single_network.output_size == 3


def test_tied_q_values_are_broken_at_random_not_towards_action_0():
  tf.random.set_seed(2)
  network = networks.create_q_network(
      tensor_spec.TensorSpec([4], tf.float32), 3, (32,))
  kernel, bias = network.layers[-1].get_weights()
  network.layers[-1].set_weights([np.repeat(kernel[:, :1], 3, axis=1),
                                  np.zeros_like(bias)])  # equal Q-values
  observations = np.random.default_rng(2).normal(size=(300, 4)).astype(
      np.float32)
  model = TFLiteModel(export.convert(network, 'int8', observations))
  assert np.all(model.outputs(observations) ==
                model.outputs(observations)[:, :1])
  for actions in (np.array([model.greedy_action(o) for o in observations]),
                  model.greedy_actions(observations)):
    counts = np.bincount(actions, minlength=3)
    assert counts.min() > 70, counts  # about 100 each
  model_bytes = export.convert(network, 'int8', observations)
  first, second, other_seed = (TFLiteModel(model_bytes, tie_break_seed=seed)
                               for seed in (5, 5, 6))
  draws = [[m.greedy_action(o) for o in observations[:40]]
           for m in (first, second, other_seed)]
  assert draws[0] == draws[1] != draws[2]  # per actor, reproducible


def test_observations_outside_calibration_saturate_instead_of_wrapping(
    int8_model):
  _, observations, normalizer, model = int8_model
  network = TFLiteModel(model, normalizer)
  # Past the calibrated range every int8 input is clamped to its end, so
  # twice as far gives the same outputs; wrapped inputs would differ.
  far = observations[:1] * 1000
  np.testing.assert_array_equal(network.outputs(far),
                                network.outputs(far * 2))
  assert not np.array_equal(network.outputs(far), network.outputs(-far))


def test_bytes_that_are_not_a_model_are_refused():
  with pytest.raises(ActorQError, match='do not load'):
    TFLiteModel(b'not a flatbuffer at all')


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
