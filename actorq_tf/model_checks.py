"""Checks a model must pass before actors get it: its precision (ops and
bytes), and its outputs against the fp32 network's on the calibration
observations (greedy-action agreement for Q-values, action error for
actions); and what each algorithm's models output (`QValueOutputs`,
`ActionOutputs`: how the exporter readies and checks them).
"""
import dataclasses
from typing import Dict, List, Optional, Tuple

import gin
import numpy as np
import tensorflow as tf
from tf_agents.networks import network as network_lib

from actorq_tf import conversion
from actorq_tf.errors import ActorQError
from actorq_tf.interpreter import TFLiteModel
from actorq_tf.normalization import ObservationNormalizer


# Bytes per weight that each precision stores, and the dtypes of its
# weight matrices, input and output tensors.
STORAGE = {
    'fp32': (4, np.float32, np.float32),
    'fp16': (2, np.float16, np.float32),
    conversion.DYNAMIC_RANGE_INT8: (1, np.int8, np.float32),
    'int8': (1, np.int8, np.int8),
    # Two weights per byte; interpreters show INT4 tensors as int8.
    conversion.INT4_WEIGHTS: (0.5, np.int8, np.float32),
}


def _int4_parameters(model_bytes: bytes) -> int:
  """Weights the flatbuffer stores in INT4 tensors."""
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.lite.python import schema_py_generated as schema
  model = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
  return sum(int(np.prod(tensor.shape)) for subgraph in model.subgraphs
             for tensor in subgraph.tensors
             if tensor.type == schema.TensorType.INT4)


def check_precision(model_bytes: bytes, precision: str,
                    parameter_count: int, pixel_input: bool = False) -> None:
  """Raises ActorQError unless the model is stored as `precision` says.

  Every weight matrix and convolution kernel must have the precision's
  dtype, the input and output the dtype the precision runs (int8 only for
  full int8; uint8 input at every precision if `pixel_input`), and the
  bytes must be close to parameter_count times the precision's bytes per
  weight.
  """
  weight_bytes, weight_dtype, io_dtype = STORAGE[precision]
  interpreter = tf.lite.Interpreter(model_content=model_bytes)
  # Weights, not activations: at batch 1 an activation's first dimension
  # is 1, a weight's is its number of output units or filters.
  matrices = [t for t in interpreter.get_tensor_details()
              if len(t['shape']) >= 2 and t['shape'][0] > 1 and
              np.prod(t['shape'][1:]) > 1]
  # fp16 and int8 weights may have float32 copies made at load time; what
  # counts is that the stored weights hold most parameters (dynamic-range
  # quantization leaves matrices under 1,024 weights in float).
  stored = (_int4_parameters(model_bytes)
            if precision == conversion.INT4_WEIGHTS else
            sum(int(np.prod(t['shape'])) for t in matrices
                if t['dtype'] == weight_dtype))
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
    stored_as = ('int4' if precision == conversion.INT4_WEIGHTS
                 else np.dtype(weight_dtype).name)
    problems.append(f'{stored:,} of {parameter_count:,} parameters in '
                    f'{stored_as} weight matrices')
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
  reference = conversion.network_outputs(
      policy_network,
      conversion.network_inputs(policy_network, observations, normalizer)
  ).numpy()
  if not np.all(np.isfinite(reference)):
    return ModelCheck(False, 'the fp32 network gives non-finite outputs', {})
  try:
    outputs = TFLiteModel(model_bytes, normalizer).outputs(
        np.asarray(observations, policy_network.input_tensor_spec.dtype
                   .as_numpy_dtype if conversion.takes_pixels(policy_network)
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
  Q-values divided by `output_scale`, see `conversion.scale_q_head`) and
  takes the observations after `normalizer`; the model takes raw
  observations, and its outputs are clipped to [-1, 1] if `clipped` (int8).
  It passes with an
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


@gin.configurable
@dataclasses.dataclass(frozen=True)
class QValueOutputs:
  """Exported Q-value models: centred Q-values (see
  `conversion.centre_q_values`) divided by a scale that int8 clips above
  (see `conversion.scale_q_head`); actors need only their argmax. DQN's
  builder gives these.

  Args:
    min_agreement: greedy-action agreement with fp32 on the calibration
      observations, ties counted as disagreements, that a model needs (see
      ModelCheck). Collapsed CartPole networks, whose action gaps are a
      fraction of a percent of Q, agree on well under all of the states
      fp32 visits while their int8 models play as well; 0.5 is a coin on
      two actions.
    max_regret_vs_random: the Q-value a model may lose against fp32's
      greedy actions, as a fraction of what random actions lose; such
      networks' int8 models lose far less than this.
    q_output_quantile: the int8 model's outputs cover this quantile of the
      calibration states' largest centred Q-value and clip the rest (see
      `conversion.scale_q_head`); None gives them the whole range. The
      median had fewer ties than 0.9 on every checkpoint
      `benchmarks.q_fidelity` measured: a clipped state keeps its greedy
      action unless two actions both clip.
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
    before = conversion.network_outputs(network, inputs).numpy()
    centred = before - before.mean(-1, keepdims=True)
    if not conversion.exactly(
        network, lambda: conversion.centre_q_values(network), inputs,
        centred):
      return 1.0, []
    scale = (float(np.quantile(np.abs(centred).max(-1),
                               self.q_output_quantile))
             if self.q_output_quantile is not None else 0.0)
    if not scale > 0 or not conversion.exactly(
        network, lambda: conversion.scale_q_head(network, inputs,
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
    if quantization_aware:
      return ('action, in float (head, tanh and bounds) from int8 hidden '
              'layers')
    return 'action'
