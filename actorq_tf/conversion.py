"""Turning a policy network into TFLite models: the weight transforms that
ready it for int8 (each applied only where it is exact), and the conversion.

The network (observation -> Q-values for DQN, observation -> action for
D4PG) is converted, never the policy's sampling graph: exploration stays in
the actors' Python.
"""
import contextlib
import io
import re
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
from tf_agents.networks import network as network_lib

from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import networks
from actorq_tf.errors import ActorQError
from actorq_tf.interpreter import require_runtime
from actorq_tf.interpreter import TFLiteModel
from actorq_tf.normalization import ObservationNormalizer


def network_outputs(policy_network: network_lib.Network, inputs):
  """What the network's exported model computes, on its inputs (normalized
  observations, or raw pixels): a quantization-aware network its exported
  outputs (a Q-network's advantages, see networks.QuantizationAwareNetwork),
  the others their outputs."""
  if isinstance(policy_network, networks.QuantizationAwareNetwork):
    return policy_network.exported_outputs(inputs)
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
  values = network_outputs(q_network, inputs).numpy()
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
    outputs = network_outputs(policy_network, inputs).numpy()
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
    values = network_outputs(policy_network, observation)
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
# 4-bit weights with one scale per output channel, float activations
# quantized on the fly: AI Edge Quantizer's `dynamic_wi4_afp32` recipe on the
# fp32 model. TensorFlow 2.15's converter has no 4-bit or per-channel dense
# weights, and its interpreter computes these models wrongly: LiteRT runs
# them (interpreter.require_runtime).
INT4_WEIGHTS = 'int4_weights'


def quantize_int4_weights(fp32_model: bytes) -> bytes:
  """The fp32 model with 4-bit per-channel weights (see INT4_WEIGHTS)."""
  try:
    # pylint: disable=g-import-not-at-top
    from ai_edge_quantizer import quantizer
    from ai_edge_quantizer import recipe
    # pylint: enable=g-import-not-at-top
  except ImportError as e:
    raise ActorQError(f'{INT4_WEIGHTS} export needs ai-edge-quantizer (as '
                      'requirements.txt pins it)') from e
  # It prints a size summary per call.
  with contextlib.redirect_stdout(io.StringIO()):
    result = quantizer.Quantizer(bytearray(fp32_model),
                                 recipe.dynamic_wi4_afp32()).quantize()
  return bytes(result.quantized_model)


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
  require_runtime(precision)
  if precision == INT4_WEIGHTS:
    if isinstance(policy_network, networks.QuantizationAwareNetwork):
      raise ActorQError(f'a quantization-aware network exports int8 only, '
                        f'not {INT4_WEIGHTS}')
    return quantize_int4_weights(convert(policy_network, 'fp32',
                                         clip_outputs=clip_outputs,
                                         traced_outputs=traced_outputs))
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
        isinstance(policy_network, networks.QuantizationAwareNetwork)):
    # The ranges were learned in training: no calibration. The head's
    # output stays float (see networks.FloatOutputQuantizeConfig).
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
