"""Policy models in the TFLite interpreter, as actors and the evaluator run
them, and the loading of model bytes that came over the network.

Models run in LiteRT's interpreter (`ai-edge-litert`) where it is
installed, else in TensorFlow's own, and the log says so once. LiteRT's ran
our int8 models about as fast at batch 1 and faster at the batches of many
environments per actor (benchmarks/results/many_environments.md); and
TensorFlow 2.15's runs the 4-bit weights of `int4_weights` models (AI Edge
Quantizer's per-channel layout) without an error but wrongly, so those need
LiteRT (`require_runtime`).
"""
import functools
import importlib.metadata
from typing import Optional, Sequence, Tuple, Union

from absl import logging
import numpy as np

from actorq_tf import model_trial
from actorq_tf.errors import ActorQError
from actorq_tf.normalization import ObservationNormalizer

LITERT = 'litert'
TENSORFLOW = 'tensorflow'
# Precisions whose models only LiteRT computes correctly.
LITERT_ONLY_PRECISIONS = ('int4_weights',)


@functools.lru_cache(maxsize=None)
def runtime() -> str:
  """LITERT where `ai-edge-litert` is installed, else TENSORFLOW (logged)."""
  try:
    # pylint: disable-next=g-import-not-at-top
    import ai_edge_litert.interpreter  # noqa: F401  pylint: disable=unused-import
  except ImportError:
    logging.warning(
        'ai-edge-litert is not installed: TFLite models run in TensorFlow\'s '
        'interpreter, and int4_weights models are refused (it computes them '
        'wrongly).')
    return TENSORFLOW
  logging.info('TFLite models run in LiteRT %s.',
               importlib.metadata.version('ai-edge-litert'))
  return LITERT


@functools.lru_cache(maxsize=None)
def runtime_name() -> str:
  """The runtime and its version, for status files and logs."""
  package = {LITERT: 'ai-edge-litert', TENSORFLOW: 'tensorflow'}[runtime()]
  return f'{runtime()} {importlib.metadata.version(package)}'


def require_runtime(precision: str) -> None:
  """ActorQError if this process's runtime cannot run `precision`."""
  if precision in LITERT_ONLY_PRECISIONS and runtime() != LITERT:
    raise ActorQError(
        f'{precision} models need LiteRT\'s interpreter (pip install '
        f'ai-edge-litert, as requirements.txt pins it): TensorFlow 2.15\'s '
        f'runs them without an error but computes them wrongly')


def interpreter_class():
  """The Interpreter class of this process's runtime."""
  if runtime() == LITERT:
    # pylint: disable-next=g-import-not-at-top
    from ai_edge_litert.interpreter import Interpreter
    return Interpreter
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.lite.Interpreter


class TFLiteModel:
  """Runs a TFLite policy model on a batch of observations (1 at first).

  The model maps observations to Q-values (discrete actions; the greedy
  action is their argmax) or to the action itself (continuous actions).
  Full-int8 models take and give int8 tensors: observations are normalized
  and quantized with the input's scale and zero point in one affine step, and
  outputs dequantized with the output's, so callers always see float32.

  int8 Q-values of near-equal actions often round to the same level, and
  argmax alone would always take the lowest action of a tie: ties are
  broken at random, with one generator seeded by `tie_break_seed`, or, given
  a sequence of seeds, one generator per row of a batch of that size (an
  actor's environments, each breaking its ties as a single actor of its
  seed would).
  """

  def __init__(self, model_bytes: bytes,
               normalizer: Optional[ObservationNormalizer] = None,
               num_threads: int = 1,
               tie_break_seed: Union[int, Sequence[int]] = 0):
    try:
      # One thread per interpreter: with more threads than cores each call
      # becomes thousands of times slower on small machines.
      self._interpreter = interpreter_class()(model_content=model_bytes,
                                               num_threads=num_threads)
      self._interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as e:
      raise ActorQError(f'model bytes do not load in TFLite: {e}') from e
    inputs = self._interpreter.get_input_details()
    outputs = self._interpreter.get_output_details()
    if len(inputs) != 1 or len(outputs) != 1:
      raise ActorQError(f'the model has {len(inputs)} inputs and '
                        f'{len(outputs)} outputs; a policy model maps one '
                        f'observation tensor to one output tensor')
    self._input, self._output = inputs[0], outputs[0]
    self._input_index = self._input['index']
    self._output_index = self._output['index']
    self._input_dtype = self._input['dtype']
    self._input_scale, self._input_zero_point = self._input['quantization']
    self._output_scale, self._output_zero_point = self._output['quantization']
    self._batch_size = int(self._input['shape'][0])
    self._quantized_input = self._input_dtype == np.int8
    self._quantized_output = self._output['dtype'] == np.int8
    # A pixel model takes the uint8 image as it is (it casts and quantizes
    # it in its first op): no per-step pass over the observation here.
    self._raw_input = self._input_dtype == np.uint8
    if self._raw_input and normalizer is not None and not normalizer.is_identity:
      raise ActorQError('a model with uint8 (pixel) input takes raw pixels; '
                        'it came with an observation normalizer')
    self._int8_min = np.full(self.observation_shape, -128, np.float32)
    self._int8_max = np.full(self.observation_shape, 127, np.float32)
    seeds = np.atleast_1d(tie_break_seed).tolist()
    self._tie_breakers = [np.random.default_rng(seed) for seed in seeds]
    # Functions returning numpy views of the interpreter's buffers; a view
    # must not be held across invoke().
    self._input_buffer = self._interpreter.tensor(self._input_index)
    self._output_buffer = self._interpreter.tensor(self._output_index)
    normalizer = normalizer or ObservationNormalizer.identity(
        self.observation_shape)
    # observation -> (observation - shift) / scale [/ input_scale + zero].
    input_scale = self._input_scale if self.is_quantized else 1.0
    self._input_multiplier = (
        1.0 / (normalizer.scale * input_scale)).astype(np.float32)
    self._input_offset = (
        -normalizer.shift * self._input_multiplier +
        (self._input_zero_point if self.is_quantized else 0.0)
    ).astype(np.float32)

  @property
  def observation_shape(self) -> Tuple[int, ...]:
    return tuple(int(d) for d in self._input['shape'][1:])

  @property
  def output_size(self) -> int:
    """Q-values (one per action) or action components per observation."""
    return int(self._output['shape'][-1])

  @property
  def is_quantized(self) -> bool:
    return self._quantized_input

  def _affine(self, observations: np.ndarray) -> np.ndarray:
    """Normalized (and, for int8 inputs, quantized) observations, as floats
    ready to be cast to the input's dtype; pixels as they are."""
    if self._raw_input:
      return observations
    affine = observations * self._input_multiplier
    affine += self._input_offset
    if self._quantized_input:
      np.rint(affine, out=affine)
      # np.clip costs twice these two on small arrays.
      np.maximum(affine, self._int8_min, out=affine)
      np.minimum(affine, self._int8_max, out=affine)
    return affine

  def _dequantize(self, outputs: np.ndarray) -> np.ndarray:
    if not self._quantized_output:
      return outputs
    return ((outputs.astype(np.float32) - self._output_zero_point) *
            self._output_scale)

  def _invoke(self, observations: np.ndarray) -> np.ndarray:
    """The outputs for a batch of observations, as a view of the
    interpreter's own buffer: valid until the next call."""
    batch = observations.shape[0]
    if batch != self._batch_size:
      self._interpreter.resize_tensor_input(
          self._input_index, [batch, *self.observation_shape])
      self._interpreter.allocate_tensors()
      self._batch_size = batch
    # The hot path of every actor step: writes into the interpreter's own
    # input buffer and reads its output buffer, without set_tensor's and
    # get_tensor's checks and copies (half the call time of a small model).
    self._input_buffer()[:] = self._affine(observations)  # casts the dtype
    self._interpreter.invoke()
    return self._output_buffer()

  def outputs(self, observations: np.ndarray) -> np.ndarray:
    """Outputs for a batch of observations, shape [batch, output_size]."""
    outputs = self._invoke(observations)
    return (self._dequantize(outputs) if self._quantized_output
            else outputs.copy())

  def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
    """argmax_a Q(o, a) for a batch, ties broken at random (see the class)."""
    # argmax of int8 outputs equals argmax of their dequantized values (the
    # scale is positive), so dequantization is skipped. A few values are
    # cheaper to compare as a Python list than as an array, and a random
    # number is drawn only for a tie.
    actions = []
    rows = self._invoke(observations).tolist()
    if len(self._tie_breakers) not in (1, len(rows)):
      raise ActorQError(f'a batch of {len(rows)} observations for '
                        f'{len(self._tie_breakers)} tie-breaking seeds')
    for row, values in enumerate(rows):
      best = max(values)
      if values.count(best) == 1:
        actions.append(values.index(best))
      else:
        tie_breaker = self._tie_breakers[row % len(self._tie_breakers)]
        actions.append(int(tie_breaker.choice(
            [action for action, value in enumerate(values) if value == best])))
    return np.asarray(actions)

  def greedy_action(self, observation: np.ndarray) -> int:
    """argmax_a Q(observation, a) for one unbatched observation, ties broken
    at random."""
    return int(self.greedy_actions(observation[None])[0])

  def action(self, observation: np.ndarray) -> np.ndarray:
    """The continuous action for one unbatched observation."""
    return self.outputs(observation[None])[0]

  def op_names(self):
    """Names of the builtin ops in the model, for checks and tests."""
    # pylint: disable-next=protected-access
    return [op['op_name'] for op in self._interpreter._get_ops_details()]


def load_untrusted_model(model_bytes: bytes, normalizer: ObservationNormalizer,
                         observation_shape, output_size: int,
                         tie_break_seed: int = 0) -> TFLiteModel:
  """A model from bytes that came over the network, or ActorQError.

  The bytes are first trial-run in a child process (a damaged model can
  crash the interpreter), then must map this environment's observations to
  `output_size` values (its number of actions, or its action size).
  """
  model_trial.trial_load(model_bytes)
  model = TFLiteModel(model_bytes, normalizer, tie_break_seed=tie_break_seed)
  if (model.observation_shape != tuple(observation_shape) or
      model.output_size != output_size):
    raise ActorQError(
        f'it maps {model.observation_shape} to {model.output_size} '
        f'outputs, the environment needs {tuple(observation_shape)} to '
        f'{output_size}')
  return model
