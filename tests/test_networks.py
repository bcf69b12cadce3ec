"""Policy networks; the quantization-aware Q- and actor networks through a
real learner."""
import json
import os
import tempfile

import gin
import numpy as np
import pytest
import tensorflow as tf

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import evaluation
from actorq_tf import export
from actorq_tf import learner
from actorq_tf import model_checks
from actorq_tf import networks
from actorq_tf import run_directory
from actorq_tf.errors import ActorQError
from actorq_tf.interpreter import TFLiteModel
from actorq_tf.normalization import spec_bounds
from helpers import publish_policy


@pytest.fixture
def quantization_aware(cartpole_gin):  # pylint: disable=unused-argument
  with gin.unlock_config():
    gin.bind_parameter('create_q_network.quantization_aware', True)


def test_quantization_aware_network_is_normalized_and_dueling(
    quantization_aware):
  del quantization_aware
  env = environments.load_environment()
  q_network = agents.builder().policy_network(env)
  assert isinstance(q_network, networks.QuantizationAwareQNetwork)
  normalizer = q_network.observation_normalizer
  observations = environments.random_walk_observations(env, 500, seed=3)
  # Random-walk statistics: the normalized inputs are about unit-scale (the
  # raw features' spreads differ 10-fold), except where the observation
  # spec's bounds lie further out: the cart's position spans 1/70 of its
  # bounds under random actions, and its bounds come within 4.
  spread = normalizer(observations).std(0)
  assert np.all(spread < 2.0), spread
  bounds = env.observation_spec()
  bounded = np.isfinite(spec_bounds(bounds)).all(axis=0)
  np.testing.assert_array_equal(bounded, [True, False, True, False])
  assert np.all(spread[~bounded] > 0.5), spread
  assert spread[0] < 0.1, spread
  for bound in (bounds.minimum, bounds.maximum):
    assert np.all(np.abs(normalizer(bound)[bounded]) <= 4.0 + 1e-4)
  # A training pass learns the fake-quant ranges; Q then has A's argmax.
  q_network(observations, training=True)
  q_values = q_network(observations)[0].numpy()
  advantages = q_network.exported_outputs(normalizer(observations)).numpy()
  assert np.ptp(q_values) > 0
  np.testing.assert_allclose(
      q_values - q_values.mean(-1, keepdims=True),
      advantages - advantages.mean(-1, keepdims=True), atol=1e-5)
  # Copies (target network, export snapshot) rebuild the same network.
  copy = q_network.copy(name='Copy')
  copy.create_variables(q_network.input_tensor_spec)
  copy.set_weights(q_network.get_weights())
  np.testing.assert_array_equal(copy(observations)[0].numpy(), q_values)


def test_quantization_aware_network_exports_int8_only(quantization_aware):
  del quantization_aware
  env = environments.load_environment()
  with pytest.raises(ActorQError, match='exports int8 only'):
    export.PolicyExporter(agents.builder().policy_network(env),
                          model_checks.QValueOutputs(), ['int8', 'fp32'],
                          lambda *_: None, '/tmp/unused')


def _kept_int8_model(root_dir):
  """The int8 model a run kept: its path, description, bytes and an
  interpreter of it, whose input must be int8 and output float."""
  model_path = os.path.join(root_dir, 'models', 'policy_int8')
  with open(model_path + '.json') as f:
    metadata = json.load(f)
  with open(model_path + '.tflite', 'rb') as f:
    model_bytes = f.read()
  interpreter = tf.lite.Interpreter(model_content=model_bytes)
  assert interpreter.get_input_details()[0]['dtype'] == np.int8
  assert interpreter.get_output_details()[0]['dtype'] == np.float32
  return model_path, metadata, model_bytes, interpreter


def _weight_and_hidden_dtypes(interpreter):
  """Dtypes of the weight matrices with more than one output unit, and of
  the 64-unit hidden activations."""
  details = interpreter.get_tensor_details()
  return ([np.dtype(t['dtype']).name for t in details
           if len(t['shape']) == 2 and t['shape'][0] > 1],
          [np.dtype(t['dtype']).name for t in details
           if list(t['shape']) == [1, 64]])


def test_quantization_aware_learner_trains_checkpoints_resumes_and_exports(
    quantization_aware, reverb_server, tmp_path):
  del quantization_aware
  root_dir = str(tmp_path)
  actor.run_actor(root_dir, reverb_server, max_env_steps=1500)
  assert learner.train(root_dir, reverb_server, max_train_steps=300,
                       export_interval=100, checkpoint_interval=1000) == 300

  model_path, metadata, model_bytes, interpreter = _kept_int8_model(root_dir)
  # int8 input, weights and hidden layers; the advantages come out in float.
  weights, hidden = _weight_and_hidden_dtypes(interpreter)
  assert sorted(weights) == ['float32', 'int8', 'int8'], weights  # head, 2
  assert hidden.count('int8') == 2, hidden
  assert metadata['output'].startswith('advantages')

  env, q_network, step = learner.restore_policy_network(root_dir)
  assert step == 300
  assert isinstance(q_network, networks.QuantizationAwareQNetwork)
  # The int8 model computes what the restored network was trained to: its
  # greedy action on nearly all states, with no ties to speak of.
  exporter = export.PolicyExporter(q_network, model_checks.QValueOutputs(),
                                   ['int8'], lambda *_: None,
                                   str(tmp_path / 'export'))
  observations = environments.random_walk_observations(env, 500, seed=4)
  result, = exporter.export(step, observations)
  figures = result.check.figures
  assert result.check.passed, result.check.reason
  assert figures['agreement'] >= 0.95 and figures['tie_rate'] == 0, figures
  np.testing.assert_array_equal(result.normalizer.shift,
                                q_network.observation_normalizer.shift)
  # The kept model plays what the fp32 weights saved beside it play.
  q_network.set_weights(export.kept_network_weights(model_path))
  kept = model_checks.check_q_model(model_bytes, q_network, observations, 0.95,
                              0.05, q_network.observation_normalizer)
  assert kept.passed and kept.figures['tie_rate'] == 0, kept

  # The same root_dir resumes from the final checkpoint.
  assert learner.train(root_dir, reverb_server, max_train_steps=350,
                       export_interval=100) == 350


def test_tf_actors_and_the_evaluator_run_a_quantization_aware_network(
    quantization_aware, reverb_server, tmp_path):
  del quantization_aware
  env = environments.load_environment()
  q_network = agents.builder().policy_network(env)
  # Fake-quantization ranges are learned in training passes; before the
  # first, every output is the same and the export check refuses the model.
  q_network(environments.random_walk_observations(env, 256), training=True)
  publish_policy(reverb_server, version=7, root_dir=str(tmp_path), q_network=q_network)
  assert actor.run_actor(str(tmp_path), reverb_server, precision='tf',
                         max_env_steps=500, model_pull_interval=50,
                         wait_for_first_model_s=60) == 500
  status = run_directory.read_status(str(tmp_path), 'actor_0')
  assert status.model_version == 7 and status.model_share == 1.0
  assert evaluation.run_evaluator(str(tmp_path), reverb_server,
                                  num_episodes=2, max_evaluations=1) == 1
  [result] = run_directory.read_results(str(tmp_path))
  assert result['version'] == result['fp32_version'] == 7


@pytest.mark.parametrize('quantization_aware_network', [False, True])
def test_the_seed_fixes_the_initial_weights(cartpole_gin,
                                           quantization_aware_network):
  del cartpole_gin
  with gin.unlock_config():
    gin.bind_parameter('create_q_network.quantization_aware',
                       quantization_aware_network)
  env = environments.load_environment()

  def initial_weights(seed):
    networks.set_seed(seed)
    network = agents.builder().policy_network(env)
    network.create_variables(network.input_tensor_spec)
    return network.get_weights()

  first, again = initial_weights(3), initial_weights(3)
  other = initial_weights(4)
  assert len(first) == len(again) == len(other)
  for weights, same in zip(first, again):
    np.testing.assert_array_equal(weights, same)
  assert any(np.any(a != b) for a, b in zip(first, other))


@pytest.fixture
def quantization_aware_d4pg():
  """D4PG on cartpole-balance with a quantization-aware actor network, and
  a real Reverb server with the run's tables."""
  import reverb  # pylint: disable=g-import-not-at-top
  from actorq_tf import config  # pylint: disable=g-import-not-at-top
  from actorq_tf import server  # pylint: disable=g-import-not-at-top
  config.parse_gin(['d4pg_cartpole_balance.gin'], [
      'create_actor_network.quantization_aware = True',
      'create_actor_network.fc_layer_params = (64, 64)',
      'DistributionalCriticNetwork.fc_layer_params = (64, 64)',
      'load_environment.max_episode_steps = 250',
      'replay_table.min_size_to_sample = 100',
      'replay_table.samples_per_insert_tolerance = 1000.0'])
  reverb_server = reverb.Server(
      server.create_tables(environments.load_environment()), port=None)
  yield f'localhost:{reverb_server.port}'
  reverb_server.stop()
  gin.clear_config()


def _head_bias(actor_network, value: float, action_spec) -> None:
  """Sets the action head's bias (the last layer's, before tanh) to
  `value`: a saturating policy."""
  bias = [variable for variable in actor_network.trainable_variables
          if 'bias' in variable.name][-1]
  assert tuple(bias.shape) == tuple(action_spec.shape), bias
  bias.assign(np.full(bias.shape, value, np.float32))


def test_quantization_aware_actor_network_trains_checkpoints_resumes_and_drives_an_int8_actor(
    quantization_aware_d4pg, tmp_path):
  address, root_dir = quantization_aware_d4pg, str(tmp_path)
  actor.run_actor(root_dir, address, max_env_steps=1000)
  assert learner.train(root_dir, address, max_train_steps=300,
                       export_interval=100, checkpoint_interval=1000) == 300

  model_path, metadata, model_bytes, interpreter = _kept_int8_model(root_dir)
  # int8 input, hidden layers and hidden weights; the head, tanh and the
  # bounds in float.
  weights, hidden = _weight_and_hidden_dtypes(interpreter)
  assert sorted(weights) == ['int8', 'int8'], weights
  assert hidden.count('int8') == 2, hidden
  # pylint: disable-next=protected-access
  ops = [op['op_name'] for op in interpreter._get_ops_details()]
  assert ops[-2:] == ['FULLY_CONNECTED', 'TANH'], ops
  assert metadata['output'].startswith('action, in float')

  env, actor_network, step = learner.restore_policy_network(root_dir)
  assert step == 300
  assert isinstance(actor_network, networks.QuantizationAwareActorNetwork)
  # The int8 model computes what the network was trained to.
  exporter = export.PolicyExporter(
      actor_network, agents.builder().model_outputs(env), ['int8'],
      lambda *_: None, str(tmp_path / 'export'))
  observations = environments.random_walk_observations(env, 500, seed=4)
  result, = exporter.export(step, observations)
  assert result.check.passed, result.check.reason
  assert result.check.figures['mean_action_error'] < 1e-3, result.check
  actor_network.set_weights(export.kept_network_weights(model_path))
  kept = model_checks.check_action_model(
      model_bytes, actor_network, observations, env.action_spec(), 1e-3,
      actor_network.observation_normalizer)
  assert kept.passed, kept

  # The same root_dir resumes from the final checkpoint; an int8 actor
  # plays the published model on every step.
  assert learner.train(root_dir, address, max_train_steps=350,
                       export_interval=100) == 350
  assert actor.run_actor(root_dir, address, precision='int8', actor_index=1,
                         num_actors=2, max_env_steps=300,
                         model_pull_interval=50,
                         wait_for_first_model_s=60) == 300
  status = run_directory.read_status(root_dir, 'actor_1')
  with open(model_path + '.json') as f:
    assert status.model_version == json.load(f)['version']
  assert status.model_share == 1.0


def test_a_quantization_aware_actor_reaches_the_action_bounds(
    quantization_aware_d4pg):
  del quantization_aware_d4pg
  env = environments.load_environment()
  observations = environments.random_walk_observations(env, 256, seed=5)
  bounds = {}
  for quantization_aware in (False, True):
    with gin.unlock_config():
      gin.bind_parameter('create_actor_network.quantization_aware',
                         quantization_aware)
    actor_network = agents.builder().policy_network(env)
    actor_network(observations, training=True)
    bounds[quantization_aware] = []
    for bias in (10.0, -10.0):
      _head_bias(actor_network, bias, env.action_spec())
      exporter = export.PolicyExporter(
          actor_network, agents.builder().model_outputs(env).unchecked(),
          ['int8'], lambda *_: None, tempfile.mkdtemp())
      result, = exporter.export(1, observations)
      bounds[quantization_aware].append(TFLiteModel(
          result.model_bytes, result.normalizer).outputs(observations))
  # TFLite's int8 tanh has an output scale of 1/128: a post-training model
  # stops at 127/128 of the upper bound; the quantization-aware one computes
  # tanh in float and reaches both bounds.
  upper, lower = bounds[False]
  np.testing.assert_allclose(upper, 127 / 128, atol=1e-6)
  np.testing.assert_allclose(lower, -1.0, atol=1e-6)
  upper, lower = bounds[True]
  np.testing.assert_array_equal(upper, 1.0)
  np.testing.assert_array_equal(lower, -1.0)
