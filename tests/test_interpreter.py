"""The actor's side of a model: normalization, quantization, interpreter."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from actorq_tf import conversion
from actorq_tf import model_trial
from actorq_tf import networks
from actorq_tf.errors import ActorQError
from actorq_tf.interpreter import TFLiteModel
from actorq_tf.normalization import ObservationNormalizer


@pytest.fixture(scope='module')
def int8_model():
  networks.set_seed(1)
  network = networks.create_q_network(
      tensor_spec.TensorSpec([4], tf.float32), 3, (32,))
  observations = np.random.default_rng(1).normal(size=(256, 4)).astype(
      np.float32)
  normalizer = ObservationNormalizer.from_observations(observations)
  folded = network.copy()
  folded.create_variables(network.input_tensor_spec)
  folded.set_weights(network.get_weights())
  conversion.fold_normalization(folded, normalizer)
  model = conversion.convert(folded, 'int8', normalizer(observations))
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
  networks.set_seed(2)
  network = networks.create_q_network(
      tensor_spec.TensorSpec([4], tf.float32), 3, (32,))
  kernel, bias = network.layers[-1].get_weights()
  network.layers[-1].set_weights([np.repeat(kernel[:, :1], 3, axis=1),
                                  np.zeros_like(bias)])  # equal Q-values
  observations = np.random.default_rng(2).normal(size=(300, 4)).astype(
      np.float32)
  model = TFLiteModel(conversion.convert(network, 'int8', observations))
  assert np.all(model.outputs(observations) ==
                model.outputs(observations)[:, :1])
  for actions in (np.array([model.greedy_action(o) for o in observations]),
                  model.greedy_actions(observations)):
    counts = np.bincount(actions, minlength=3)
    assert counts.min() > 70, counts  # about 100 each
  model_bytes = conversion.convert(network, 'int8', observations)
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


def test_a_model_whose_trial_runs_out_of_time_is_refused(int8_model):
  # A trial process that does not finish in time: the model is refused,
  # never loaded in the actor's own process.
  with pytest.raises(ActorQError, match=r'did not load and run within '
                     r'0\.001 s in a trial process'):
    model_trial.trial_load(int8_model[3], timeout_s=0.001)
  model_trial.trial_load(int8_model[3])  # In time, it passes.
