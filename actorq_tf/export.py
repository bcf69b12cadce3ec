"""Turning the learner's policy network into TFLite models, checked before use.

The network (observation -> Q-values for DQN, observation -> action for
D4PG) is exported, never the policy's sampling graph: exploration stays in
the actors' Python. Full int8 models are calibrated on the actors' most
recent observations (see replay.recent_observations_table), together with
the most extreme ones of the last few exports (`ObservationExtremes`).
"""
import collections
import dataclasses
import json
import os
import re
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging
import gin
import numpy as np
import tensorflow as tf
from tf_agents.networks import network as network_lib

from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import model_channel
from actorq_tf import networks
from actorq_tf import run_directory
from actorq_tf.errors import ActorQError
from actorq_tf.normalization import ObservationNormalizer
from actorq_tf.interpreter import TFLiteModel


def _network_outputs(policy_network: network_lib.Network, inputs):
  """What the network's exported model computes, on its inputs (normalized
  observations, or raw pixels): a quantization-aware network exports its
  advantages (see networks.QuantizationAwareQNetwork), the others their
  outputs."""
  if isinstance(policy_network, networks.QuantizationAwareQNetwork):
    return policy_network.advantages(inputs)
  return policy_network(inputs, training=False)[0]


def takes_pixels(policy_network: network_lib.Network) -> bool:
  """Whether the network takes uint8 images: their models take the raw
  pixels (no normalizer: each of the 256 values is its own input level)."""
  return policy_network.input_tensor_spec.dtype == tf.uint8


def network_inputs(policy_network: network_lib.Network,
                   observations: np.ndarray,
                   normalizer: Optional[ObservationNormalizer] = None
                  ) -> np.ndarray:
  """Observations as the network (and so its model) takes them: pixels as
  they are, float observations after `normalizer`."""
  if takes_pixels(policy_network):
    return np.asarray(observations, np.uint8)
  observations = np.asarray(observations, np.float32)
  return normalizer(observations) if normalizer else observations


def leaf_layers(policy_network: network_lib.Network):
  """The network's Keras layers that hold no others, in the order they were
  made: for TF-Agents' and Keras's networks, the order they are applied.
  (tf.Module's walk: a TF-Agents network's layers may belong to either of
  the two Keras packages, see networks._point_keras_names_at_tf_keras, and
  Keras's own walk sees only its own package's.)"""
  # pylint: disable=protected-access
  return [module for module in policy_network._flatten_modules(
              include_self=False)
          if hasattr(module, 'get_weights') and
          not any(True for _ in module._flatten_modules(include_self=False))]


def _weighted_layers(policy_network: network_lib.Network):
  return [layer for layer in leaf_layers(policy_network) if layer.weights]


def _activation(layer) -> str:
  # By name: TF-Agents' networks may hold the other Keras package's function.
  return getattr(layer.activation, '__name__', '')


def _output_head(policy_network: network_lib.Network):
  """The last layer with weights, if it is a Dense layer with a bias (where
  a transform of the outputs folds in exactly); else None."""
  layers = _weighted_layers(policy_network)
  head = layers[-1] if layers else None
  if (isinstance(head, tf.keras.layers.Dense) and head.use_bias and
      _activation(head) == 'linear'):
    return head
  return None


def centre_q_values(q_network: network_lib.Network) -> bool:
  """Subtracts the mean over actions from the Q-head, in place; False (and
  nothing changed) if the network has no Dense head to fold it into.

  Q-values of a trained agent sit near r / (1 - gamma) and differ between
  actions by a small fraction of that; one int8 scale over the whole range
  would round those differences away. Centred values keep every action's
  advantage over the mean, which has the same argmax and a range int8 can
  resolve. Folding the centring into the last layer's weights is exact.
  """
  head = _output_head(q_network)
  if head is None:
    return False
  kernel, bias = head.get_weights()
  head.set_weights([kernel - kernel.mean(axis=1, keepdims=True),
                    bias - bias.mean()])
  return True


def scale_q_head(q_network: network_lib.Network, inputs: np.ndarray,
                 quantile: float) -> float:
  """Divides the (centred) Q-head by the `quantile` of max_a |Q(o, a)| over
  `inputs` (the network's, see `network_inputs`), in place; returns that
  scale (1.0, nothing changed, where there is no Dense head).

  The int8 model clips these outputs to [-1, 1] (a fused activation, free).
  A trained Q-network has a few states with large action gaps, and int8's
  output scale would follow them: one level was about the median action
  gap. Clipping them keeps their greedy action (it saturates, and two
  actions rarely both do) and gives the other states the levels.
  """
  head = _output_head(q_network)
  if head is None:
    return 1.0
  values = _network_outputs(q_network, inputs).numpy()
  scale = float(np.quantile(np.abs(values).max(-1), quantile))
  if not scale > 0:
    return 1.0
  kernel, bias = head.get_weights()
  head.set_weights([kernel / scale, bias / scale])
  return scale


def fold_normalization(policy_network: network_lib.Network,
                       normalizer: ObservationNormalizer) -> bool:
  """Makes the network take normalized observations, in place and exactly;
  False (nothing changed) unless its first layer with weights is a Dense
  layer on the flattened observation.

  With z = (x - shift) / scale, the first layer W x + b becomes
  (W diag(scale)) z + (b + W shift).
  """
  layers = _weighted_layers(policy_network)
  first = layers[0] if layers else None
  if (not isinstance(first, tf.keras.layers.Dense) or
      first.kernel.shape[0] != normalizer.scale.size):
    return False
  kernel, bias = first.get_weights()
  first.set_weights([kernel * normalizer.scale.reshape(-1, 1),
                     bias + normalizer.shift.reshape(-1) @ kernel])
  return True


def equalize_layers(policy_network: network_lib.Network,
                    passes: int = 4) -> bool:
  """Evens out each hidden unit's weight range between its two layers, in
  place and exactly (cross-layer equalization, Nagel et al. 2019); False
  if no two Dense layers follow each other through a ReLU.

  int8 weights have one scale per matrix here (TFLite 2.15 has no
  per-channel FULLY_CONNECTED), so a unit whose weights are small next to the
  matrix's largest gets few levels. For ReLU units, scaling unit j's incoming
  weights and bias by 1 / s_j and its outgoing weights by s_j gives the same
  outputs; s_j makes both ranges the geometric mean of the two.
  """
  layers = _weighted_layers(policy_network)
  pairs = [(first, second) for first, second in zip(layers[:-1], layers[1:])
           if isinstance(first, tf.keras.layers.Dense) and
           isinstance(second, tf.keras.layers.Dense) and
           _activation(first) == 'relu' and first.use_bias
           and first.kernel.shape[1] == second.kernel.shape[0]]
  for _ in range(passes):
    for first, second in pairs:
      kernel_in, bias_in = first.get_weights()
      kernel_out, *rest_out = second.get_weights()
      range_in = np.abs(kernel_in).max(0)
      range_out = np.abs(kernel_out).max(1)
      usable = (range_in > 0) & (range_out > 0)
      scale = np.where(usable, np.sqrt(range_in / np.where(usable, range_out,
                                                           1.0)), 1.0)
      first.set_weights([kernel_in / scale, bias_in / scale])
      second.set_weights([kernel_out * scale[:, None], *rest_out])
  return bool(pairs)


def exactly(policy_network: network_lib.Network,
            transform: Callable[[], object], inputs: np.ndarray,
            expected: np.ndarray, relative_tolerance: float = 1e-3) -> bool:
  """Runs `transform` on the network in place and keeps it only if the
  network then gives `expected` on `inputs` (to float rounding); otherwise
  puts the weights back. A transform that returns False (nothing to do)
  counts as not applied. Layer shapes and orders differ between networks:
  this is what makes each transform safe on a network it was not written
  for."""
  weights = policy_network.get_weights()
  if transform() is not False:
    outputs = _network_outputs(policy_network, inputs).numpy()
    tolerance = relative_tolerance * max(1.0, float(np.abs(expected).max()))
    if (outputs.shape == expected.shape and
        float(np.abs(outputs - expected).max()) <= tolerance):
      return True
  policy_network.set_weights(weights)
  return False


def outputs_function(policy_network: network_lib.Network, clip: bool):
  """The traced function `convert` converts: the network's input (normalized
  observation, or raw uint8 pixels) -> outputs, clipped to [-1, 1] if
  `clip`. It reads the network's variables, so one trace serves every later
  weight of the same network."""
  observation_spec = policy_network.input_tensor_spec
  signature = tf.TensorSpec(
      [1, *observation_spec.shape],
      tf.uint8 if takes_pixels(policy_network) else tf.float32,
      name='observation')

  # Without autograph: the network's Python control flow is on static
  # values, and converting TF-Agents' and Keras's call code took 11 s of a
  # fresh process's first export.
  @tf.function(input_signature=[signature], autograph=False)
  def outputs(observation):
    values = _network_outputs(policy_network, observation)
    # The converter fuses this clip into the last layer (RELU_N1_TO_1).
    return tf.clip_by_value(values, -1.0, 1.0) if clip else values

  return outputs.get_concrete_function()


def pixel_calibration(observations: np.ndarray, spec) -> np.ndarray:
  """Pixel calibration observations, with one frame at the spec's minimum
  but for one pixel per channel at its maximum.

  The model's first quantized tensor takes its range from calibration; over
  the spec's whole range, 256 pixel values get 256 int8 levels, and every
  pixel maps to its own level. A frame of single bright pixels stretches no
  later layer further than a real bright pixel does.
  """
  minimum = np.broadcast_to(
      np.asarray(getattr(spec, 'minimum', 0), np.uint8), spec.shape)
  maximum = np.broadcast_to(
      np.asarray(getattr(spec, 'maximum', 255), np.uint8), spec.shape)
  frame = minimum.copy()
  frame[(0,) * (len(spec.shape) - 1)] = maximum[(0,) * (len(spec.shape) - 1)]
  return np.concatenate([np.asarray(observations, np.uint8), frame[None]])


# Dynamic-range int8 (int8 weights, float activations, no calibration) is
# what PyTorch's dynamic quantization, and so the original ActorQ, ran; it is
# converted for benchmarks, actors run the full-int8 model.
DYNAMIC_RANGE_INT8 = 'dynamic_int8'


def convert(policy_network: network_lib.Network, precision: str,
            calibration_observations: Optional[np.ndarray] = None,
            clip_outputs: bool = False,
            traced_outputs=None) -> bytes:
  """TFLite flatbuffer of `policy_network` at `precision` (int8, fp16,
  fp32, or dynamic_int8), with outputs clipped to [-1, 1] if
  `clip_outputs`. `traced_outputs`, if given, is the network's
  `outputs_function(policy_network, clip_outputs)`, traced once by a caller
  that converts the same network again and again."""
  if precision not in TFLITE_PRECISIONS + (DYNAMIC_RANGE_INT8,):
    raise ActorQError(f'unknown TFLite precision {precision!r}; '
                      f'expected one of {TFLITE_PRECISIONS}')
  # The converter saves the function with the object that holds its
  # variables; the network itself drags its Keras layers' functions along
  # (2.0 s against 0.6 s per quantization-aware export, measured alone).
  holder = tf.Module()
  holder.variables_ = list(policy_network.variables)
  traced_outputs = traced_outputs or outputs_function(policy_network,
                                                      clip_outputs)
  converter = tf.lite.TFLiteConverter.from_concrete_functions(
      [traced_outputs], holder)
  if precision == DYNAMIC_RANGE_INT8:
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  elif precision == 'fp16':
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
  elif (precision == 'int8' and
        isinstance(policy_network, networks.QuantizationAwareQNetwork)):
    # The ranges were learned in training: no calibration. The head's
    # output stays float (see networks.AdvantageHeadQuantizeConfig).
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.inference_input_type = tf.int8
  elif precision == 'int8':
    if calibration_observations is None or not len(calibration_observations):
      raise ActorQError('int8 export needs calibration observations')
    if takes_pixels(policy_network):
      observations = pixel_calibration(calibration_observations,
                                       policy_network.input_tensor_spec)
    else:
      observations = np.asarray(calibration_observations, np.float32)
      # Pixels stay uint8: the model casts them itself (one CAST and
      # QUANTIZE in its first op, no pass in the actor's Python).
      converter.inference_input_type = tf.int8

    def representative_dataset():
      for observation in observations:
        yield [observation[None]]

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_output_type = tf.int8
  try:
    return converter.convert()
  except Exception as e:  # pylint: disable=broad-except
    layer_names = [layer.name for layer in leaf_layers(policy_network)]
    reason = conversion_failure(str(e), traced_outputs, layer_names)
    raise ActorQError(f'{precision} TFLite conversion failed: {reason}'
                     ) from e


def conversion_failure(message: str, traced_outputs,
                       layer_names: Sequence[str] = ()) -> str:
  """The converter's error in one line, naming the layer of the op it
  refused where the traced function has it (op names carry their Keras
  layer's: 'sequential/my_layer/BesselI0e'); `layer_names`: the network's
  layers, to pick the layer out of the op's name scope."""
  lines = [line.strip() for line in message.strip().splitlines()
           if line.strip()]
  reason = next((line for line in lines if 'error:' in line), None)
  reason = (reason.split('error:', 1)[1].strip() if reason
            else lines[0] if lines else 'unknown error')
  refused = set(re.findall(r"'tf\.(\w+)' op", message))
  for operation in traced_outputs.graph.get_operations():
    if operation.type in refused:
      scope = operation.name.split('/')[:-1]
      layer = next((part for part in reversed(scope) if part in layer_names),
                   scope[-1] if scope else operation.name)
      return f'layer {layer!r} ({reason})'
  return reason


def check_convertible(policy_network: network_lib.Network,
                      precisions: Sequence[str],
                      observations: np.ndarray) -> None:
  """Converts the network as it is at each of `precisions` and loads the
  model, or raises ActorQError naming the layer that does not convert:
  run before training, so that a network TFLite cannot take stops the run
  before anything starts."""
  for precision in precisions:
    model_bytes = convert(
        policy_network, precision,
        network_inputs(policy_network, observations)
        if precision == 'int8' else None)
    TFLiteModel(model_bytes)


# Bytes per weight that each precision stores, and the dtypes of its
# weight matrices, input and output tensors.
_STORAGE = {
    'fp32': (4, np.float32, np.float32),
    'fp16': (2, np.float16, np.float32),
    DYNAMIC_RANGE_INT8: (1, np.int8, np.float32),
    'int8': (1, np.int8, np.int8),
}


def check_precision(model_bytes: bytes, precision: str,
                    parameter_count: int, pixel_input: bool = False) -> None:
  """Raises ActorQError unless the model is stored as `precision` says.

  Every weight matrix and convolution kernel must have the precision's
  dtype, the input and output the dtype the precision runs (int8 only for
  full int8; uint8 input at every precision if `pixel_input`), and the
  bytes must be close to parameter_count times the precision's bytes per
  weight.
  """
  weight_bytes, weight_dtype, io_dtype = _STORAGE[precision]
  interpreter = tf.lite.Interpreter(model_content=model_bytes)
  # Weights, not activations: at batch 1 an activation's first dimension
  # is 1, a weight's is its number of output units or filters.
  matrices = [t for t in interpreter.get_tensor_details()
              if len(t['shape']) >= 2 and t['shape'][0] > 1 and
              np.prod(t['shape'][1:]) > 1]
  # fp16 and int8 weights may have float32 copies made at load time; what
  # counts is that the stored weights hold most parameters (dynamic-range
  # quantization leaves matrices under 1,024 weights in float).
  stored = sum(int(np.prod(t['shape'])) for t in matrices
               if t['dtype'] == weight_dtype)
  other = sorted({np.dtype(t['dtype']).name for t in matrices
                  if t['dtype'] != weight_dtype})
  io_dtypes = {np.dtype(d['dtype']).name for d in
               interpreter.get_output_details()}
  input_dtypes = {np.dtype(d['dtype']).name for d in
                  interpreter.get_input_details()}
  expected_input = 'uint8' if pixel_input else np.dtype(io_dtype).name
  expected = parameter_count * weight_bytes
  # Biases (int32 in int8 models) and the flatbuffer's own tables on top.
  low, high = 0.9 * expected, 1.25 * expected + 32_768
  problems = []
  if stored < 0.8 * parameter_count:
    problems.append(f'{stored:,} of {parameter_count:,} parameters in '
                    f'{np.dtype(weight_dtype).name} weight matrices')
  if precision == 'fp32' and other:
    problems.append(f'weight matrices of {other}')
  if io_dtypes != {np.dtype(io_dtype).name}:
    problems.append(f'output {sorted(io_dtypes)}, not '
                    f'{np.dtype(io_dtype).name}')
  if input_dtypes != {expected_input}:
    problems.append(f'input {sorted(input_dtypes)}, not {expected_input}')
  if not low <= len(model_bytes) <= high:
    problems.append(f'{len(model_bytes):,} bytes, outside {low:,.0f} to '
                    f'{high:,.0f} for {parameter_count:,} parameters')
  if problems:
    raise ActorQError(f'the {precision} model is not what it names: ' +
                      '; '.join(problems))


@dataclasses.dataclass
class ModelCheck:
  """How a TFLite model compares with the fp32 network on observations.

  `figures` holds, for Q-value models: agreement (fraction of observations
  where the model's greedy action is fp32's and no other action ties with
  it: actors break ties at random, so a tie is a coin toss), tie_rate
  (observations whose top model outputs are equal), mean_q_regret (fp32
  Q-value lost per step by the model's greedy action, ties at random),
  regret_vs_random (that regret over the regret of uniformly random
  actions: 0 plays fp32's policy, 1 plays at random) and
  mean_q_error (of the centred Q-values, where the model does not clip
  them). For action models: max_action_error and mean_action_error, in
  units of half the action range.
  """
  passed: bool
  reason: str
  figures: Dict[str, float]


def _outputs_or_failure(model_bytes, policy_network, observations,
                        normalizer):
  """(fp32 outputs, model outputs), or a failed ModelCheck."""
  reference = _network_outputs(
      policy_network,
      network_inputs(policy_network, observations, normalizer)).numpy()
  if not np.all(np.isfinite(reference)):
    return ModelCheck(False, 'the fp32 network gives non-finite outputs', {})
  try:
    outputs = TFLiteModel(model_bytes, normalizer).outputs(
        np.asarray(observations, policy_network.input_tensor_spec.dtype
                   .as_numpy_dtype if takes_pixels(policy_network)
                   else np.float32))
  except ActorQError as e:
    return ModelCheck(False, e.message, {})
  if not np.all(np.isfinite(outputs)):
    return ModelCheck(False, 'the model gives non-finite outputs', {})
  return reference, outputs


def q_fidelity(reference: np.ndarray, q_values: np.ndarray) -> Dict[str, float]:
  """Agreement, tie rate and regret of model outputs against fp32 Q-values
  (see ModelCheck), over a batch of states."""
  is_max = q_values == q_values.max(-1, keepdims=True)
  ties = is_max.sum(-1) > 1
  fp32_actions = np.argmax(reference, -1)
  agree = ~ties & (np.argmax(q_values, -1) == fp32_actions)
  # Expected regret of a uniform pick among the model's top actions.
  loss = reference.max(-1, keepdims=True) - reference
  regret = (loss * is_max).sum(-1) / is_max.sum(-1)
  # The same for uniformly random actions: the scale regret is read on, as
  # Q-values (and so regret) scale with the task's rewards.
  random_regret = loss.mean(-1).mean()
  return {'agreement': float(agree.mean()), 'tie_rate': float(ties.mean()),
          'mean_q_regret': float(regret.mean()),
          'regret_vs_random': float(regret.mean() / random_regret)
                              if random_regret > 0 else 0.0}


def check_q_model(model_bytes: bytes, q_network: network_lib.Network,
                  observations: np.ndarray, min_agreement: float,
                  max_regret_vs_random: float,
                  normalizer: Optional[ObservationNormalizer] = None,
                  output_scale: float = 1.0, clipped: bool = False
                 ) -> ModelCheck:
  """Compares greedy actions and Q-values of a TFLite model with fp32.

  `q_network` is the network the model was converted from (centred
  Q-values divided by `output_scale`, see `scale_q_head`) and takes the
  observations after `normalizer`; the model takes raw observations, and
  its outputs are clipped to [-1, 1] if `clipped` (int8). It passes with an
  agreement of at least `min_agreement` (ties count against it) and a mean
  regret of at most `max_regret_vs_random` times that of random actions.
  """
  compared = _outputs_or_failure(model_bytes, q_network, observations,
                                 normalizer)
  if isinstance(compared, ModelCheck):
    return compared
  reference, outputs = compared
  # Where the model clips, its outputs are not the Q-values' to compare.
  unclipped = (np.abs(reference) < 1.0 if clipped
               else np.ones(reference.shape, bool))
  reference, q_values = reference * output_scale, outputs * output_scale
  figures = q_fidelity(reference, q_values)
  errors = np.abs(q_values - reference)[unclipped]
  figures['mean_q_error'] = float(errors.mean()) if errors.size else 0.0
  problems = []
  if figures['agreement'] < min_agreement:
    problems.append(f'greedy-action agreement {figures["agreement"]:.3f} '
                    f'(ties {figures["tie_rate"]:.3f}) is under the floor '
                    f'{min_agreement:.3f}')
  if figures['regret_vs_random'] > max_regret_vs_random:
    problems.append(f'mean Q regret {figures["mean_q_regret"]:.4f} is '
                    f'{figures["regret_vs_random"]:.3f} of random actions\', '
                    f'over the ceiling {max_regret_vs_random:.3f}')
  return ModelCheck(not problems, '; '.join(problems), figures)


def check_action_model(model_bytes: bytes,
                       actor_network: network_lib.Network,
                       observations: np.ndarray, action_spec,
                       max_mean_action_error: float,
                       normalizer: Optional[ObservationNormalizer] = None
                      ) -> ModelCheck:
  """Compares a TFLite model's actions with the fp32 actor network's.

  Errors are in units of half the action range; the model passes if the
  mean error is at most `max_mean_action_error`.
  """
  compared = _outputs_or_failure(model_bytes, actor_network, observations,
                                 normalizer)
  if isinstance(compared, ModelCheck):
    return compared
  reference, actions = compared
  half_range = (np.asarray(action_spec.maximum, np.float32) -
                np.asarray(action_spec.minimum, np.float32)) / 2
  errors = np.abs(actions - reference) / half_range
  mean_error = float(errors.mean())
  passed = mean_error <= max_mean_action_error
  reason = '' if passed else (
      f'mean action error {mean_error:.4f} (of half the action range) is '
      f'over the ceiling {max_mean_action_error:.4f}')
  return ModelCheck(passed, reason, {'max_action_error': float(errors.max()),
                                     'mean_action_error': mean_error})


def kept_network_weights(model_path: str) -> Sequence[np.ndarray]:
  """The policy network weights (`get_weights` order) of the model at
  `model_path` (`<model_dir>/policy_<precision>`), as PolicyExporter saved
  them with it."""
  with np.load(model_path + '.network.npz') as saved:
    return [saved[f'arr_{i}'] for i in range(len(saved.files))]


@gin.configurable
@dataclasses.dataclass(frozen=True)
class QValueOutputs:
  """Exported Q-value models: centred Q-values (see `centre_q_values`)
  divided by a scale that int8 clips above (see `scale_q_head`); actors
  need only their argmax. DQN's builder gives these.

  Args:
    min_agreement: greedy-action agreement with fp32 on the calibration
      observations, ties counted as disagreements, that a model needs (see
      ModelCheck). Collapsed CartPole networks whose action gaps are 0.1%
      of Q agreed on 0.59-0.74 of the states fp32 visits while their int8
      models played as well; 0.5 is a coin on two actions.
    max_regret_vs_random: the Q-value a model may lose against fp32's
      greedy actions, as a fraction of what random actions lose. Those
      networks' int8 models lost 0.07-0.11.
    q_output_quantile: the int8 model's outputs cover this quantile of the
      calibration states' largest centred Q-value and clip the rest (see
      `scale_q_head`); None gives them the whole range. The median (0.5)
      had fewer ties than 0.9 on every checkpoint measured (0.2-0.8%
      against 1.0-22%): a clipped state keeps its greedy action unless two
      actions both clip.
  """
  min_agreement: float = 0.5
  max_regret_vs_random: float = 0.25
  q_output_quantile: Optional[float] = 0.5

  def unchecked(self) -> 'QValueOutputs':
    """The same outputs with a check that refuses nothing (benchmarks that
    measure every model)."""
    return dataclasses.replace(self, min_agreement=0.0,
                               max_regret_vs_random=np.inf)

  def full_range(self) -> 'QValueOutputs':
    return dataclasses.replace(self, q_output_quantile=None)

  def prepare(self, network: network_lib.Network, inputs: np.ndarray
             ) -> Tuple[float, List[str]]:
    """Readies the network for post-training quantization, in place (same
    argmax), where its head allows it exactly on `inputs`; returns the
    output scale and the transforms applied."""
    before = _network_outputs(network, inputs).numpy()
    centred = before - before.mean(-1, keepdims=True)
    if not exactly(network, lambda: centre_q_values(network), inputs,
                   centred):
      return 1.0, []
    scale = (float(np.quantile(np.abs(centred).max(-1),
                               self.q_output_quantile))
             if self.q_output_quantile is not None else 0.0)
    if not scale > 0 or not exactly(
        network, lambda: scale_q_head(network, inputs,
                                      self.q_output_quantile),
        inputs, centred / scale):
      return 1.0, ['centre_q_values']
    return scale, ['centre_q_values', 'scale_q_head']

  def check(self, model_bytes: bytes, network: network_lib.Network,
            observations: np.ndarray, normalizer, output_scale: float,
            clipped: bool) -> ModelCheck:
    return check_q_model(model_bytes, network, observations,
                         self.min_agreement, self.max_regret_vs_random,
                         normalizer, output_scale, clipped)

  def fidelity(self, reference: np.ndarray, outputs: np.ndarray
              ) -> Dict[str, float]:
    """How a model's outputs compare with fp32's (see ModelCheck)."""
    return q_fidelity(reference, outputs)

  @staticmethod
  def description(quantization_aware: bool) -> str:
    if quantization_aware:
      return ('advantages, Q-values less the state value (same argmax as '
              'Q), in float from int8 hidden layers')
    return ('Q-values centred over actions (same argmax as Q), divided by '
            'output_scale (int8: clipped to [-1, 1])')


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ActionOutputs:
  """Exported action models: the action itself. D4PG's builder gives these.

  Args:
    action_spec: the environment's action spec (errors are in units of half
      its range).
    max_mean_action_error: mean distance from the fp32 action, in units of
      half the action range, that a model may have. Trained
      cartpole-balance policies showed 0.03-0.07 in full int8 (int8 weights
      alone: 0.015), a fraction of the actors' exploration noise (sigma
      0.3); 0.05 stopped publishing halfway through a run.
  """
  action_spec: object
  max_mean_action_error: float = 0.1

  def unchecked(self) -> 'ActionOutputs':
    return dataclasses.replace(self, max_mean_action_error=np.inf)

  def full_range(self) -> 'ActionOutputs':
    return self  # Actions always keep their whole range.

  def prepare(self, network: network_lib.Network, inputs: np.ndarray
             ) -> Tuple[float, List[str]]:
    del network, inputs  # Converted as it is.
    return 1.0, []

  def check(self, model_bytes: bytes, network: network_lib.Network,
            observations: np.ndarray, normalizer, output_scale: float,
            clipped: bool) -> ModelCheck:
    del output_scale, clipped  # Actions are neither scaled nor clipped.
    return check_action_model(model_bytes, network, observations,
                              self.action_spec, self.max_mean_action_error,
                              normalizer)

  def fidelity(self, reference: np.ndarray, outputs: np.ndarray
              ) -> Dict[str, float]:
    """Action errors in units of half the action range."""
    half_range = (np.asarray(self.action_spec.maximum, np.float32) -
                  np.asarray(self.action_spec.minimum, np.float32)) / 2
    errors = np.abs(outputs - reference) / half_range
    return {'mean_action_error': float(errors.mean()),
            'max_action_error': float(errors.max())}

  @staticmethod
  def description(quantization_aware: bool) -> str:
    del quantization_aware  # Only Q-networks train quantization-aware.
    return 'action'


@dataclasses.dataclass
class ExportResult:
  precision: str
  version: int
  model_bytes: bytes
  normalizer: ObservationNormalizer
  check: ModelCheck
  convert_seconds: float


class ObservationExtremes:
  """The real observations at each feature's lowest and highest value over
  the calibration sets of the last `window` exports.

  A calibration set holds the few episodes since the last export. Pendulum's
  swing-up from the bottom reaches angular velocities that two or three
  episodes started near the top never show; an int8 model calibrated without
  them clips its input there and does not swing up (seed 0, versions 4,000
  and 5,000: int8 -492 and -330 where fp32 played -146 and -147). Only
  observations the actors met: synthetic corners would stretch every layer's
  range with activations no state produces. A feature whose extremes lie far
  out is scaled down alone (`ObservationNormalizer.from_observations`), so
  the one int8 input scale covers them without coarsening the others.
  """

  def __init__(self, window: int):
    if window < 1:
      raise ActorQError(f'the extremes window must be at least one export, '
                        f'not {window}')
    self._sets = collections.deque(maxlen=window)

  @staticmethod
  def _extreme_rows(observations: np.ndarray) -> np.ndarray:
    flat = observations.reshape(len(observations), -1)
    # A non-finite observation would stay the extreme for `window` exports.
    finite = np.isfinite(flat).all(axis=1)
    observations, flat = observations[finite], flat[finite]
    if not len(flat):
      return observations
    rows = np.unique(np.concatenate([flat.argmin(0), flat.argmax(0)]))
    return observations[rows]

  def add(self, observations: np.ndarray) -> np.ndarray:
    """Takes one export's calibration set; returns the window's extremes."""
    self._sets.append(self._extreme_rows(np.asarray(observations)))
    return self._extreme_rows(np.concatenate(self._sets))


@gin.configurable
class PolicyExporter:
  """Converts, checks and publishes models on a thread of its own.

  What the model outputs, how it is readied for conversion and how it is
  checked is the algorithm's (`outputs`, from its builder).

  The train loop hands over a copy of the weights and goes on training; an
  export requested while the previous one still runs is skipped, so
  conversion never stalls training.

  Args:
    policy_network: the learner's policy network; its structure is
      exported, with the weights of `weights_source`.
    outputs: `QValueOutputs` or `ActionOutputs`, from the builder.
    precisions: TFLite precisions to export at each version.
    publish: called with each ExportResult that passes its check.
    model_dir: where the newest published model of each precision is kept.
    equalize: even out hidden units' weight ranges before conversion (see
      `equalize_layers`). With Q-value outputs clipped at the median it gave
      the best agreement on all four trained checkpoints measured
      (`benchmarks.q_fidelity`: CartPole v17000 0.535 before -> 0.896).
    weights_source: what gives the weights to export, in `get_weights`
      order: the policy network's own by default, or the learner's
      `PolicyAverage`.
  """

  def __init__(self, policy_network: network_lib.Network, outputs,
               precisions: Sequence[str],
               publish: Callable[[Sequence[ExportResult], Sequence[np.ndarray]],
                                 None],
               model_dir: str,
               equalize: bool = True,
               weights_source: Optional[
                   Callable[[], Sequence[np.ndarray]]] = None):
    self._quantization_aware = isinstance(
        policy_network, networks.QuantizationAwareQNetwork)
    if self._quantization_aware and tuple(precisions) != ('int8',):
      raise ActorQError(
          'a quantization-aware network is trained for int8 and exports '
          f'int8 only, not {", ".join(precisions)}: give the actors int8 or '
          'tf, or train without create_q_network.quantization_aware')
    for precision in precisions:
      # Before any training: the size follows from the parameter count.
      model_channel.check_model_size(
          precision, _STORAGE[precision][0] * policy_network.count_params())
    self._weights_source = weights_source or policy_network.get_weights
    self._snapshot_network = policy_network.copy(name='ExportSnapshot')
    self._snapshot_network.create_variables(policy_network.input_tensor_spec)
    # Tracing took 0.3 s of a 0.7-1.1 s quantization-aware export, all of it
    # holding the GIL the train loop needs.
    self._traced_outputs = {}  # clip -> outputs_function of the snapshot
    self.outputs = outputs
    self._precisions = tuple(precisions)
    self._publish = publish
    self._model_dir = model_dir
    self._equalize = equalize
    self._thread: Optional[threading.Thread] = None
    self._error: Optional[BaseException] = None
    # The newest version's ExportResults; earlier ones are dropped so that a
    # long run does not keep every model's bytes.
    self.results: Sequence[ExportResult] = []
    self.versions_exported = 0
    # The weight transforms that were exact on this network (see
    # `_transform`), at the newest export.
    self.transforms: List[str] = []
    # Models its check refused: shown in the learner's status, TensorBoard
    # and the launcher's progress line.
    self.refused_exports = 0
    self.last_refused_export = ''
    os.makedirs(model_dir, exist_ok=True)

  @property
  def busy(self) -> bool:
    return self._thread is not None and self._thread.is_alive()

  def export_async(self, version: int, calibration_observations: np.ndarray,
                   extreme_observations: Optional[np.ndarray] = None) -> bool:
    """Starts exporting the current weights; False if still busy.

    `calibration_observations` set the observation normalizer and, with
    `extreme_observations` (see `ObservationExtremes`), the int8 ranges and
    the observations the check compares outputs on.
    """
    self.raise_error()
    if self.busy:
      return False
    weights = self._weights_source()  # Copies: training goes on.
    self._thread = threading.Thread(
        target=self._export_guarded,
        args=(version, weights, np.array(calibration_observations),
              extreme_observations),
        name='PolicyExporter', daemon=True)
    self._thread.start()
    return True

  def export(self, version: int, calibration_observations: np.ndarray,
             extreme_observations: Optional[np.ndarray] = None
            ) -> Sequence[ExportResult]:
    """Exports synchronously; used at shutdown and in tests."""
    self.wait()
    self._export(version, self._weights_source(),
                 np.array(calibration_observations), extreme_observations)
    return self.results

  def wait(self) -> None:
    if self._thread is not None:
      self._thread.join()
    self.raise_error()

  def raise_error(self) -> None:
    if self._error is not None:
      error, self._error = self._error, None
      raise error

  def _export_guarded(self, version, weights, observations, extremes):
    try:
      self._export(version, weights, observations, extremes)
    except BaseException as e:  # pylint: disable=broad-except
      self._error = e

  def _export(self, version, weights, observations, extremes):
    if not all(np.isfinite(w).all() for w in weights):
      logging.warning('Not exporting version %d: the network has NaN or inf '
                      'weights.', version)
      return
    self._snapshot_network.set_weights(weights)
    output_scale, transforms = 1.0, []
    if self._quantization_aware:
      # Exported as it was trained, with its own normalization.
      normalizer = self._snapshot_network.observation_normalizer
    else:
      output_scale, normalizer, transforms = self._transform(
          observations, extremes)
    if transforms != self.transforms:
      logging.info('Transforms that are exact on this network, applied '
                   'before conversion: %s.', ', '.join(transforms) or 'none')
      self.transforms = transforms
    if extremes is not None and len(extremes):
      observations = np.concatenate([observations, extremes])
    results, passed = [], []
    for precision in self._precisions:
      start = time.monotonic()
      clip = precision == 'int8' and output_scale != 1.0
      if clip not in self._traced_outputs:
        self._traced_outputs[clip] = outputs_function(self._snapshot_network,
                                                      clip)
      model_bytes = convert(self._snapshot_network, precision,
                            network_inputs(self._snapshot_network,
                                           observations, normalizer),
                            clip_outputs=clip,
                            traced_outputs=self._traced_outputs[clip])
      seconds = time.monotonic() - start
      check = self.outputs.check(model_bytes, self._snapshot_network,
                                 observations, normalizer, output_scale, clip)
      result = ExportResult(precision, version, model_bytes, normalizer,
                            check, seconds)
      results.append(result)
      if not check.passed:
        self.refused_exports += 1
        self.last_refused_export = (f'{precision} version {version}: '
                                    f'{check.reason}')
        logging.warning('Not publishing %s.', self.last_refused_export)
        continue
      self._save(result, output_scale, weights)
      passed.append(result)
    self.results = results
    self.versions_exported += 1
    if passed:
      self._publish(passed, weights)

  def _transform(self, observations, extremes):
    """Readies the snapshot for post-training quantization, in place (same
    greedy actions), each transform only where it is exact on the
    calibration observations; returns the output scale, the normalizer the
    model takes and the transforms applied."""
    network = self._snapshot_network
    raw = network_inputs(network, observations)
    output_scale, transforms = self.outputs.prepare(network, raw)
    normalizer = ObservationNormalizer.identity(
        network.input_tensor_spec.shape)
    if not takes_pixels(network):
      fitted = ObservationNormalizer.from_observations(raw, extremes)
      if exactly(network, lambda: fold_normalization(network, fitted),
                 fitted(raw), _network_outputs(network, raw).numpy()):
        normalizer = fitted
        transforms.append('fold_normalization')
    inputs = network_inputs(network, observations, normalizer)
    if self._equalize and exactly(
        network, lambda: equalize_layers(network), inputs,
        _network_outputs(network, inputs).numpy()):
      transforms.append('equalize_layers')
    return output_scale, normalizer, transforms

  def _save(self, result: ExportResult, output_scale: float,
            weights: Sequence[np.ndarray]) -> None:
    """Writes the model and, beside it, what an interpreter needs with it
    and the fp32 network weights it was made from (checkpoints come at
    other steps; see `kept_network_weights`)."""
    save_model_files(
        os.path.join(self._model_dir, f'policy_{result.precision}'),
        result.model_bytes, result.normalizer, weights,
        version=result.version, precision=result.precision,
        check=result.check.figures,
        output=self.outputs.description(self._quantization_aware),
        output_scale=output_scale, transforms=self.transforms)


def save_model_files(path: str, model_bytes: bytes,
                     normalizer: ObservationNormalizer,
                     weights: Sequence[np.ndarray], **description) -> None:
  """`path`.tflite, the fp32 network weights it was made from
  (`path`.network.npz, see `kept_network_weights`) and `path`.json: the
  normalizer and `description`. Each file is replaced whole."""
  with open(path + '.tflite.tmp', 'wb') as f:
    f.write(model_bytes)
  os.replace(path + '.tflite.tmp', path + '.tflite')
  with open(path + '.network.npz.tmp', 'wb') as f:
    np.savez(f, *weights)
  os.replace(path + '.network.npz.tmp', path + '.network.npz')
  run_directory.write_json_atomically(path + '.json', {
      **description,
      'observation_shift': normalizer.shift.tolist(),
      'observation_scale': normalizer.scale.tolist(),
  })


def load_kept_model(path: str):
  """(model bytes, normalizer, description) saved by `save_model_files`."""
  with open(path + '.json') as f:
    description = json.load(f)
  with open(path + '.tflite', 'rb') as f:
    model_bytes = f.read()
  normalizer = ObservationNormalizer(
      np.array(description.pop('observation_shift'), np.float32),
      np.array(description.pop('observation_scale'), np.float32))
  return model_bytes, normalizer, description
