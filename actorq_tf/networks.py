"""Networks built from Keras layers, so the exporter can trace them.

The policy network is what actors run: a Q-network (observation ->
Q-values) for discrete actions, a deterministic actor network (observation
-> action) for continuous ones. The D4PG critic stays in the learner.

With `create_q_network.quantization_aware = True` (or
`create_actor_network.quantization_aware = True` for D4PG) the policy network
trains with int8 fake-quantization (tensorflow-model-optimization), so that
the int8 model the actors run is the network that was trained.
"""
import importlib
from typing import Callable, Dict, List, Optional, Sequence, Union

import gin
import numpy as np
import tensorflow as tf
import tensorflow_model_optimization as tfmot
from tensorflow.python.util import tf_export
from tf_agents.networks import network
from tf_agents.networks import sequential
from tf_agents.specs import tensor_spec

from actorq_tf import config
from actorq_tf.errors import ActorQError
from actorq_tf.errors import described
from actorq_tf.normalization import ObservationNormalizer
from actorq_tf.normalization import spec_bounds


def _point_keras_names_at_tf_keras() -> None:
  """Points TensorFlow's export table at the classes of tf.keras's package.

  Two Keras 2 packages can be live in one process: tf_keras (what tf.keras
  is when TF_USE_LEGACY_KERAS is set before tf.keras is first touched, see
  actorq_tf/__init__.py) and TensorFlow 2.15's own `keras`, which tfmot's
  pruning registry imports. Whichever loads last takes the public names
  (`keras.layers.Dense`), and Keras rebuilds layers from their configs by
  those names: tfmot's clones and TF-Agents' network copies would get layers
  of the other package, which tfmot's wrappers (built on tf.keras) refuse.
  """
  package = tf.keras.layers.Dense.__module__.split('.')[0]
  other = {'tf_keras': 'keras', 'keras': 'tf_keras'}[package]
  # pylint: disable=protected-access
  table = tf_export._NAME_TO_SYMBOL_MAPPING
  for name, symbol in list(table.items()):
    module = getattr(symbol, '__module__', None) or ''
    if not module.startswith(other + '.src'):
      continue
    try:
      own = getattr(importlib.import_module(package + module[len(other):]),
                    getattr(symbol, '__name__', ''), None)
    except ImportError:
      continue
    if own is not None:
      table[name] = own


_point_keras_names_at_tf_keras()


def _keep_autograph_out_of_tf_keras() -> None:
  """Gives tf_keras the rule TensorFlow 2.15's autograph has for its own
  `keras`: never convert it. Without it, every tf.function that runs Keras
  layers also converts tf_keras's own code when it is traced, and the first
  call of each traced network (in the learner, the evaluator, the exporter,
  a tf actor) takes several times longer (benchmarks/results/suite_time.md).
  """
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.python.autograph.core import config as autograph_config
  rule = autograph_config.DoNotConvert('tf_keras')
  if not any(str(r) == str(rule) for r in autograph_config.CONVERSION_RULES):
    autograph_config.CONVERSION_RULES = (
        (rule,) + tuple(autograph_config.CONVERSION_RULES))


_keep_autograph_out_of_tf_keras()


def set_seed(seed: int) -> None:
  """Makes `seed` fix the networks' initial weights, and TensorFlow's,
  NumPy's and Python's global random streams.

  `tf.random.set_seed` alone does not: Keras initializers given no seed
  draw theirs from Python's `random` (or a generator Keras keeps), so
  networks built after it start from other weights in every process.
  """
  tf.keras.utils.set_random_seed(seed)


# A user's policy network: factory(observation_spec, action_spec) -> Network,
# or its import path. TF-Agents' own networks take exactly these two first
# arguments (q_network.QNetwork, ddpg's actor_network.ActorNetwork).
NetworkFactory = Union[str, Callable[..., network.Network]]


def build_policy_network(factory: NetworkFactory,
                         observation_spec: tensor_spec.TensorSpec,
                         action_spec: tensor_spec.BoundedTensorSpec,
                         output_size: int, setting: str) -> network.Network:
  """`factory(observation_spec, action_spec)`, with its variables created,
  if it is a TF-Agents Network mapping one observation to `output_size`
  values; otherwise ActorQError naming `setting` (the gin binding)."""
  make = config.resolve_callable(factory, setting)
  name = getattr(make, '__name__', repr(make))
  try:
    policy_network = make(observation_spec, action_spec)
  except ActorQError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise ActorQError(f'{setting} {name} failed: {described(e)}') from e
  if not isinstance(policy_network, network.Network):
    raise ActorQError(
        f'{setting} {name} returned a {type(policy_network).__name__}, not a '
        f'TF-Agents Network (Keras layers go in '
        f'tf_agents.networks.sequential.Sequential)')
  try:
    output_spec = policy_network.create_variables(observation_spec)
  except Exception as e:  # pylint: disable=broad-except
    observations = (f'{observation_spec.dtype.name}'
                    f'{list(observation_spec.shape)}')
    hint = ('; uint8 images need a first layer that makes them float, '
            'e.g. networks.pixel_scaling()'
            if observation_spec.dtype == tf.uint8 else '')
    raise ActorQError(f'{setting} {name} does not take the observations '
                      f'{observations}: {described(e)}{hint}') from e
  shape = tuple(getattr(output_spec, 'shape', ()) or ())
  if tf.nest.is_nested(output_spec) or shape != (output_size,):
    raise ActorQError(f'{setting} {name} outputs {output_spec}, the policy '
                      f'needs {output_size} values per observation')
  return policy_network


def _fixed_normalization(observation_spec, example_observations
                        ) -> Dict[str, List[float]]:
  """A quantization-aware network's input normalization: the statistics of
  `example_observations()`, widened so that the observation spec's finite
  bounds lie within 4 deviations (see create_q_network)."""
  if example_observations is None:
    raise ValueError('a quantization-aware network needs example '
                     'observations to normalize its inputs with')
  normalizer = ObservationNormalizer.from_observations(
      example_observations(), extremes=spec_bounds(observation_spec))
  return {'observation_shift': normalizer.shift.tolist(),
          'observation_scale': normalizer.scale.tolist()}


@gin.configurable
def create_q_network(observation_spec: tensor_spec.TensorSpec,
                     num_actions: int,
                     fc_layer_params: Sequence[int] = (256, 256),
                     quantization_aware: bool = False,
                     example_observations: Optional[
                         Callable[[], np.ndarray]] = None
                    ) -> network.Network:
  """MLP observation -> Q-values with one output per action.

  A `sequential.Sequential` of plain Keras layers: TF-Agents trains it, and
  the exporter converts it to TFLite without the policy's sampling graph.
  With `quantization_aware`, a QuantizationAwareQNetwork normalized with
  the statistics of `example_observations()`, widened so that the
  observation spec's finite bounds lie within 4 deviations. Its int8 input
  has one scale for all features: CartPole's cart position, normalized by
  its random-walk spread alone, reached 35 at the track's end, and the
  learned input step (0.27) was wider than a balanced pole's normalized
  angle (under 0.2); those runs balanced but let the cart drift off, and
  returns swung between 100 and 500 for the rest of training.
  """
  if quantization_aware:
    q_network = QuantizationAwareQNetwork(
        observation_spec, num_actions, fc_layer_params,
        **_fixed_normalization(observation_spec, example_observations))
    q_network.create_variables(observation_spec)
    return q_network
  layers = [tf.keras.layers.Flatten()]
  layers += [tf.keras.layers.Dense(units, activation='relu')
             for units in fc_layer_params]
  layers.append(tf.keras.layers.Dense(
      num_actions,
      kernel_initializer=tf.keras.initializers.RandomUniform(-0.03, 0.03),
      bias_initializer=tf.keras.initializers.Constant(-0.2)))
  q_network = sequential.Sequential(layers, input_spec=observation_spec)
  q_network.create_variables(observation_spec)
  return q_network


@gin.configurable
def pixel_scaling() -> tf.keras.layers.Layer:
  """A network's first layer for uint8 images: pixels to [0, 1] in float
  (e.g. `QNetwork.preprocessing_layers = @networks.pixel_scaling()`). In an
  int8 model it folds into the input's quantization: each pixel value maps
  to its own int8 level (see conversion.pixel_calibration)."""
  return tf.keras.layers.Rescaling(1.0 / 255.0, name='pixel_scaling')


@tf.keras.utils.register_keras_serializable(package='actorq_tf')
class FloatOutputQuantizeConfig(tfmot.quantization.keras.QuantizeConfig):
  """Weights quantized as the other layers' are, and a float output: the
  head of a quantization-aware network.

  For Q-values: one int8 output scale cannot resolve the advantages: on a trained
  Acrobot-v1 network (median gap between the two best actions 0.06) an int8
  output over the whole range tied the best actions on 34% of the states
  the greedy policy visits, and one clipped at the median of the largest
  centred advantage on 11%. The actors' model computes this layer in
  float from the last hidden layer's int8 values (a DEQUANTIZE and a
  256 x num_actions float product, 0.1 us of a 3.6 us call).
  """

  def get_weights_and_quantizers(self, layer):
    return [(layer.kernel, tfmot.quantization.keras.quantizers.
             LastValueQuantizer(num_bits=8, per_axis=False, symmetric=True,
                                narrow_range=True))]

  def get_activations_and_quantizers(self, layer):
    return []

  def set_quantize_weights(self, layer, quantize_weights):
    layer.kernel = quantize_weights[0]

  def set_quantize_activations(self, layer, quantize_activations):
    pass

  def get_output_quantizers(self, layer):
    return []

  def get_config(self):
    return {}


class QuantizationAwareNetwork(network.Network):
  """A policy network trained through int8 fake-quantization.

  Inputs are normalized with fixed statistics (the actors apply them, as
  for post-training models). A Keras Functional model of the normalized
  observation, quantized by `tfmot.quantization.keras` where its layers are
  annotated (int8 weights, int8 activations with learned ranges), gives
  the exported outputs (what the actors' int8 model computes) first and the
  network's outputs last. A subclass builds the layers and calls
  `_quantize`.

  Args:
    input_tensor_spec: the observation spec.
    observation_shift, observation_scale: inputs become
      (observation - shift) / scale, per feature.
  """

  def __init__(self, input_tensor_spec, observation_shift, observation_scale,
               name):
    super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(),
                     name=name)
    size = int(np.prod(input_tensor_spec.shape))
    # Variables, so that checkpoints carry them with the weights.
    self._observation_shift = tf.Variable(
        np.reshape(observation_shift, [size]).astype(np.float32),
        trainable=False, name='observation_shift')
    self._observation_scale = tf.Variable(
        np.reshape(observation_scale, [size]).astype(np.float32),
        trainable=False, name='observation_scale')
    self._model = None

  def _normalized_input(self) -> tf.Tensor:
    return tf.keras.Input([self._observation_shift.shape[0]],
                          name='normalized_observation')

  def _quantize(self, inputs, exported_outputs, network_outputs) -> None:
    with tfmot.quantization.keras.quantize_scope():
      self._model = tfmot.quantization.keras.quantize_apply(
          tf.keras.Model(inputs, [exported_outputs, network_outputs]))

  @property
  def observation_normalizer(self) -> ObservationNormalizer:
    shape = self.input_tensor_spec.shape
    return ObservationNormalizer(
        self._observation_shift.numpy().reshape(shape),
        self._observation_scale.numpy().reshape(shape))

  def exported_outputs(self, normalized_observations, training=False):
    """What the actors' model computes, of normalized observations."""
    return self._model(normalized_observations, training=training)[0]

  def call(self, observation, step_type=None, network_state=(),
           training=False):
    del step_type  # The network has no state.
    batch_dims = tf.shape(observation)[:-len(self.input_tensor_spec.shape)]
    flat = tf.reshape(tf.cast(observation, tf.float32),
                      [-1, self._observation_shift.shape[0]])
    normalized = (flat - self._observation_shift) / self._observation_scale
    _, outputs = self._model(normalized, training=training)
    return tf.reshape(outputs, tf.concat([batch_dims, [-1]], 0)), network_state


def _quantized_hidden_layers(inputs, fc_layer_params: Sequence[int]):
  hidden = inputs
  for units in fc_layer_params:
    hidden = tfmot.quantization.keras.quantize_annotate_layer(
        tf.keras.layers.Dense(units, activation='relu'))(hidden)
  return hidden


def _float_output_head(hidden, units: int, initial_range: float, name: str):
  """A Dense layer with int8 weights and a float output (see
  FloatOutputQuantizeConfig), initialized within +-`initial_range`."""
  return tfmot.quantization.keras.quantize_annotate_layer(
      tf.keras.layers.Dense(
          units, kernel_initializer=tf.keras.initializers.RandomUniform(
              -initial_range, initial_range), name=name),
      FloatOutputQuantizeConfig())(hidden)


class QuantizationAwareQNetwork(QuantizationAwareNetwork):
  """Observation -> Q-values, trained through int8 fake-quantization.

  A dueling head: Q = V + A - mean(A). The hidden layers and the advantage
  head A are quantized; observation -> A is what actors run: int8 input,
  hidden layers and weights, and a float output (see
  FloatOutputQuantizeConfig). A has Q's argmax; V and the centring stay in
  float and never leave the learner.

  Args:
    input_tensor_spec: the observation spec.
    num_actions: one Q-value per action.
    fc_layer_params: hidden layer sizes.
    observation_shift, observation_scale: see QuantizationAwareNetwork.
  """

  def __init__(self, input_tensor_spec, num_actions: int,
               fc_layer_params: Sequence[int], observation_shift,
               observation_scale, name='QuantizationAwareQNetwork'):
    super().__init__(input_tensor_spec, observation_shift, observation_scale,
                     name)
    inputs = self._normalized_input()
    hidden = _quantized_hidden_layers(inputs, fc_layer_params)
    advantages = _float_output_head(hidden, num_actions, 0.03, 'advantages')
    value = tf.keras.layers.Dense(1, name='value')(hidden)
    centring = tf.keras.layers.Dense(
        num_actions, use_bias=False, trainable=False,
        kernel_initializer=tf.keras.initializers.Constant(
            np.eye(num_actions) - 1.0 / num_actions),
        name='centring')
    q_values = tf.keras.layers.Add(name='q_values')(
        [value, centring(advantages)])
    self._quantize(inputs, advantages, q_values)


class QuantizationAwareActorNetwork(QuantizationAwareNetwork):
  """Observation -> action within the bounds, trained through int8
  fake-quantization: the deterministic actor of D4PG.

  The hidden layers are quantized; the head is a Dense layer with int8
  weights and a float output (FloatOutputQuantizeConfig), then tanh and the
  scaling to the action bounds in float. The actors' model is the whole
  network. TFLite's int8 tanh has an output scale of 1/128, so an int8
  head would cap actions at 127/128 of the half range: the float tail
  reaches the bounds, for a DEQUANTIZE and a hidden x action-size float
  product.

  Args:
    input_tensor_spec: the observation spec.
    action_spec: the bounded action spec.
    fc_layer_params: hidden layer sizes.
    observation_shift, observation_scale: see QuantizationAwareNetwork.
  """

  def __init__(self, input_tensor_spec, action_spec,
               fc_layer_params: Sequence[int], observation_shift,
               observation_scale, name='QuantizationAwareActorNetwork'):
    super().__init__(input_tensor_spec, observation_shift, observation_scale,
                     name)
    inputs = self._normalized_input()
    hidden = _quantized_hidden_layers(inputs, fc_layer_params)
    head = _float_output_head(hidden, action_spec.shape[0], 3e-3,
                              'action_head')
    actions = _action_scaling(action_spec)(
        tf.keras.layers.Activation('tanh', name='squash')(head))
    self._quantize(inputs, actions, actions)


def _action_scaling(action_spec) -> tf.keras.layers.Layer:
  """[-1, 1] -> the action bounds."""
  minimum = np.broadcast_to(action_spec.minimum, action_spec.shape)
  maximum = np.broadcast_to(action_spec.maximum, action_spec.shape)
  return tf.keras.layers.Rescaling(
      scale=((maximum - minimum) / 2).astype(np.float32).tolist(),
      offset=((maximum + minimum) / 2).astype(np.float32).tolist())


@gin.configurable
def create_actor_network(observation_spec: tensor_spec.TensorSpec,
                         action_spec: tensor_spec.BoundedTensorSpec,
                         fc_layer_params: Sequence[int] = (256, 256),
                         quantization_aware: bool = False,
                         example_observations: Optional[
                             Callable[[], np.ndarray]] = None
                        ) -> network.Network:
  """MLP observation -> action, squashed by tanh into the action bounds.

  ActorQ's Control Suite policies are 2048x2048x2048: bind
  `create_actor_network.fc_layer_params = (2048, 2048, 2048)`. With
  `quantization_aware`, a QuantizationAwareActorNetwork normalized as
  create_q_network's quantization-aware network is.
  """
  if quantization_aware:
    actor_network = QuantizationAwareActorNetwork(
        observation_spec, action_spec, fc_layer_params,
        **_fixed_normalization(observation_spec, example_observations))
    actor_network.create_variables(observation_spec)
    return actor_network
  layers = [tf.keras.layers.Flatten()]
  layers += [tf.keras.layers.Dense(units, activation='relu')
             for units in fc_layer_params]
  layers += [
      tf.keras.layers.Dense(
          action_spec.shape[0], activation='tanh',
          kernel_initializer=tf.keras.initializers.RandomUniform(-3e-3, 3e-3)),
      _action_scaling(action_spec),
  ]
  actor_network = sequential.Sequential(layers, input_spec=observation_spec)
  actor_network.create_variables(observation_spec)
  return actor_network


@gin.configurable
class DistributionalCriticNetwork(network.Network):
  """(observation, action) -> logits over the value atoms of D4PG.

  Args:
    input_tensor_spec: (observation spec, action spec).
    num_atoms: size of the categorical value distribution.
    fc_layer_params: hidden layer sizes. ActorQ's Control Suite critics are
      512x512x256 with layer norm: bind `DistributionalCriticNetwork.
      fc_layer_params = (512, 512, 256)` and `.layer_norm = True`.
    layer_norm: as Acme's LayerNormMLP, the first hidden layer is
      normalized and squashed with tanh, the others use ELU.
  """

  def __init__(self, input_tensor_spec, num_atoms: int = 51,
               fc_layer_params: Sequence[int] = (256, 256),
               layer_norm: bool = False, name='DistributionalCritic'):
    super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(),
                     name=name)
    self._hidden = []
    for index, units in enumerate(fc_layer_params):
      if layer_norm and index == 0:
        self._hidden += [tf.keras.layers.Dense(units),
                         tf.keras.layers.LayerNormalization(),
                         tf.keras.layers.Activation('tanh')]
      else:
        self._hidden.append(tf.keras.layers.Dense(
            units, activation='elu' if layer_norm else 'relu'))
    self._logits = tf.keras.layers.Dense(
        num_atoms,
        kernel_initializer=tf.keras.initializers.RandomUniform(-3e-3, 3e-3))

  def call(self, inputs, step_type=(), network_state=(), training=False):
    del step_type  # The critic has no state.
    observation, action = inputs
    batch_dims = tf.shape(action)[:-1]
    features = tf.concat([
        tf.reshape(observation, tf.concat([batch_dims, [-1]], 0)),
        tf.cast(action, observation.dtype)], axis=-1)
    for layer in self._hidden:
      features = layer(features, training=training)
    return self._logits(features), network_state
