"""The actor's side of a model: interpreter, quantization, exploration."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from actorq_tf import export
from actorq_tf import networks
from actorq_tf.errors import ActorQError
from actorq_tf.tflite_policy import EpsilonGreedy
from actorq_tf.tflite_policy import ObservationNormalizer
from actorq_tf.tflite_policy import TFLiteQNetwork


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
  q_values = TFLiteQNetwork(model, normalizer).q_values(observations)
  reference = network(observations)[0].numpy()
  assert q_values.shape == (256, 3)
  assert q_values.dtype == np.float32
  scale = np.abs(reference).max()
  assert np.abs(q_values - reference).max() < 0.05 * scale


def test_greedy_action_is_argmax_of_q_values(int8_model):
  _, observations, normalizer, model = int8_model
  batch_network = TFLiteQNetwork(model, normalizer)
  single_network = TFLiteQNetwork(model, normalizer)
  expected = np.argmax(batch_network.q_values(observations[:50]), axis=1)
  actions = [single_network.greedy_action(o) for o in observations[:50]]
  np.testing.assert_array_equal(actions, expected)
  assert single_network.observation_shape == (4,)
  assert single_network.num_actions == 3


def test_observations_outside_calibration_saturate_instead_of_wrapping(
    int8_model):
  _, observations, normalizer, model = int8_model
  network = TFLiteQNetwork(model, normalizer)
  far = observations[:1] * 1000
  assert np.all(np.isfinite(network.q_values(far)))


def test_bytes_that_are_not_a_model_are_refused():
  with pytest.raises(ActorQError, match='do not load'):
    TFLiteQNetwork(b'not a flatbuffer at all')


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
  draws = lambda e: [(e.explore(10), e.random_action()) for _ in range(50)]
  first_draws = draws(first)
  assert first_draws == draws(second)
  assert first_draws != draws(other)
  explored = np.mean([explore for explore, _ in first_draws])
  assert 0.2 < explored < 0.8
