"""The exporter: the learner's weights -> checked TFLite models on a thread
of its own -> published and kept with what an interpreter needs.

Full int8 models are calibrated on the actors' most recent observations
(see replay.recent_observations_table), together with the most extreme ones
of the last few exports (`ObservationExtremes`).
"""
import collections
import dataclasses
import json
import os
import threading
import time
from typing import Callable, List, Optional, Sequence

from absl import logging
import gin
import numpy as np
from tf_agents.networks import network as network_lib

from actorq_tf import conversion
from actorq_tf import model_channel
from actorq_tf import model_checks
from actorq_tf import networks
from actorq_tf import run_directory
from actorq_tf.errors import ActorQError
from actorq_tf.normalization import ObservationNormalizer


def kept_network_weights(model_path: str) -> Sequence[np.ndarray]:
  """The policy network weights (`get_weights` order) of the model at
  `model_path` (`<model_dir>/policy_<precision>`), as PolicyExporter saved
  them with it."""
  with np.load(model_path + '.network.npz') as saved:
    return [saved[f'arr_{i}'] for i in range(len(saved.files))]


@dataclasses.dataclass
class ExportResult:
  precision: str
  version: int
  model_bytes: bytes
  normalizer: ObservationNormalizer
  check: model_checks.ModelCheck
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
    outputs: `model_checks.QValueOutputs` or `model_checks.ActionOutputs`,
      from the builder.
    precisions: TFLite precisions to export at each version.
    publish: called with each ExportResult that passes its check.
    model_dir: where the newest published model of each precision is kept.
    equalize: even out hidden units' weight ranges before conversion (see
      `conversion.equalize_layers`). With Q-value outputs clipped at the
      median it gave the best greedy-action agreement on every trained
      checkpoint `benchmarks.q_fidelity` measured.
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
        policy_network, networks.QuantizationAwareNetwork)
    if self._quantization_aware and tuple(precisions) != ('int8',):
      raise ActorQError(
          'a quantization-aware network is trained for int8 and exports '
          f'int8 only, not {", ".join(precisions)}: give the actors int8 or '
          'tf, or train without quantization_aware (create_q_network, '
          'create_actor_network)')
    for precision in precisions:
      # Before any training: the size follows from the parameter count.
      model_channel.check_model_size(
          precision,
          model_checks.STORAGE[precision][0] * policy_network.count_params())
    self._weights_source = weights_source or policy_network.get_weights
    self._snapshot_network = policy_network.copy(name='ExportSnapshot')
    self._snapshot_network.create_variables(policy_network.input_tensor_spec)
    # Tracing took 0.3 s of a 0.7-1.1 s quantization-aware export, all of it
    # holding the GIL the train loop needs.
    # clip -> conversion.outputs_function of the snapshot
    self._traced_outputs = {}
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
        self._traced_outputs[clip] = conversion.outputs_function(
            self._snapshot_network, clip)
      model_bytes = conversion.convert(self._snapshot_network, precision,
                            conversion.network_inputs(self._snapshot_network,
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
    raw = conversion.network_inputs(network, observations)
    output_scale, transforms = self.outputs.prepare(network, raw)
    normalizer = ObservationNormalizer.identity(
        network.input_tensor_spec.shape)
    if not conversion.takes_pixels(network):
      fitted = ObservationNormalizer.from_observations(raw, extremes)
      if conversion.exactly(
          network, lambda: conversion.fold_normalization(network, fitted),
          fitted(raw), conversion.network_outputs(network, raw).numpy()):
        normalizer = fitted
        transforms.append('fold_normalization')
    inputs = conversion.network_inputs(network, observations, normalizer)
    if self._equalize and conversion.exactly(
        network, lambda: conversion.equalize_layers(network), inputs,
        conversion.network_outputs(network, inputs).numpy()):
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
