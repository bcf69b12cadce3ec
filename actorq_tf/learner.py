"""The learner: trains the configured agent from replay, publishes its policy.

A loop as TF-Agents' Learner runs one: a replay batch, a train step, then
triggers. The export trigger copies the weights every `export_interval`
steps for the exporter's thread (TFLite models and fp32 variables -> Reverb
-> actors and evaluator); others checkpoint and write the status. The step
lock covers only what changes or reads the weights: the train step, the
weight copy and the checkpoint.
"""
import dataclasses
import os
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import gin
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.utils import common

from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import agents
from actorq_tf import energy
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import metrics
from actorq_tf import model_channel
from actorq_tf import records
from actorq_tf import networks
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf import signing
from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS


@gin.configurable
def train(root_dir: str,
          server_address: str,
          actor_precision: str = 'int8',
          seed: int = 0,
          batch_size: int = 64,
          max_train_steps: int = 0,
          export_interval: int = 250,
          checkpoint_interval: int = 1_000,
          summary_interval: int = 100,
          num_calibration_observations: int = 256,
          calibration_extremes_window: int = 10,
          policy_average_decay: float = 0.0,
          server_timeout_s: float = runtime.SERVER_TIMEOUT_S,
          stop: Optional[threading.Event] = None,
          stop_grace_s: float = 10.0,
          energy_meter: Optional[energy.EnergyMeter] = None,
          on_finish: Callable[[], None] = lambda: None,
          model_key_file: str = '') -> int:
  """Trains until `max_train_steps` (0: until stopped); returns the step.

  Args:
    root_dir: run directory; checkpoints, models and summaries go here.
    server_address: host:port of the Reverb server.
    actor_precision: what the actors run. int8 models are always exported
      (the evaluator compares them with fp32); fp16 and fp32 are exported
      too when actors run them; `tf` actors take the fp32 variables.
    seed: fixes the initial weights and TensorFlow's random streams.
    batch_size: transitions per train step.
    max_train_steps: stop after this many train steps; 0 runs until stopped.
    export_interval: train steps between policy exports.
    checkpoint_interval: train steps between checkpoints. A restarted
      learner goes on from the last one, and actors take its models only
      once their versions pass the newest one published before the restart.
    summary_interval: train steps between TensorBoard summaries.
    num_calibration_observations: observations that calibrate int8 models,
      sampled from the actors' most recent ones.
    calibration_extremes_window: int8 ranges cover, besides those, the
      observations at each feature's extremes over the calibration sets of
      this many exports (see export.ObservationExtremes).
    policy_average_decay: above 0, what the actors, the evaluator and the
      kept models get is not the newest weights but their exponential
      moving average with this decay, updated at every train step (see
      `PolicyAverage`); 0 exports the newest weights.
    server_timeout_s: how long the Reverb server may not answer before the
      learner gives up (it waits, and goes on, if the server comes back).
    stop: set (by SIGTERM in the binary) to checkpoint and return.
    stop_grace_s: if the loop is still blocked on replay sampling this long
      after `stop`, a watchdog checkpoints and ends the process.
    energy_meter: if given (started), the machine's energy and emissions
      go to TensorBoard and the status file with the other figures.
    on_finish: called after the final save when the learner's watchdog
      finishes it (`stop_grace_s`), just before it ends the process: a
      replay server hosted in this process checkpoints there. (When the
      loop ends by itself, the caller goes on after `train` returns.)
    model_key_file: the run key's file, which signs every model and
      variables row (see `signing.run_key`); '' takes the key the launcher
      handed over, else root_dir's, made there if there is none.
  """
  networks.set_seed(seed)
  env = environments.load_environment()
  train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
  algorithm = agents.check_environment(env)
  agent, policy_network = algorithm.create_agent(env, train_step)
  if agent.train_sequence_length != algorithm.sequence_length():
    # The server made the replay table from the builder's length.
    raise ActorQError(
        f'the agent trains on items of {agent.train_sequence_length} steps, '
        f'its builder says {algorithm.sequence_length()}: bind the n-step '
        'setting without a scope')

  if not 0 <= policy_average_decay < 1:
    raise ActorQError(f'policy_average_decay must lie in [0, 1), not '
                      f'{policy_average_decay}')
  key = signing.run_key(root_dir, model_key_file)
  client = model_channel.wait_for_server(server_address, server_timeout_s)
  replay.check_same_environment(client, algorithm.collect_data_spec(env))
  policy_average = (PolicyAverage(policy_network, policy_average_decay)
                    if policy_average_decay else None)
  checkpointer = common.Checkpointer(
      os.path.join(root_dir, run_directory.CHECKPOINTS_DIR), max_to_keep=3,
      agent=agent, train_step=train_step,
      **({_POLICY_AVERAGE_KEY: policy_average} if policy_average else {}))
  checkpointer.initialize_or_restore()
  restored_train_step = int(train_step)
  if restored_train_step:
    logging.info('Resumed from checkpoint at train step %d.',
                 restored_train_step)

  writer = metrics.summary_writer(root_dir, run_directory.LEARNER_ROLE)
  # Every version this run's learner published: the launcher checks the
  # actors' versions against them.
  publication = Publication(
      model_channel.ModelPublisher(client, key), writer,
      (run_directory.read_status(root_dir, run_directory.LEARNER_ROLE) or
       records.LearnerStatus()).published_versions)

  step_lock = threading.Lock()  # Held while the weights change or are read.
  # Replay items and calibration observations that the run key does not
  # verify: left out, and shown.
  replay_refusals = replay.Refusals()
  export_trigger = create_export_trigger(
      env, policy_network, server_address, key,
      os.path.join(root_dir, run_directory.MODELS_DIR), export_interval,
      precisions=['int8'] + (
          [actor_precision] if actor_precision in TFLITE_PRECISIONS and
          actor_precision != 'int8' else []),
      publish=publication,
      weights_source=policy_average.get_weights if policy_average else None,
      num_calibration_observations=num_calibration_observations,
      calibration_extremes_window=calibration_extremes_window,
      refusals=replay_refusals, step_lock=step_lock)
  checkpoint_trigger = CheckpointTrigger(checkpointer, train_step,
                                         checkpoint_interval, step_lock)

  def energy_figures(step):
    if energy_meter is None:
      return {}
    reading = energy_meter.reading()
    metrics.write_energy(writer, reading, step)
    return reading.as_summary()

  def figures(step):
    return dict(train_step=step, restored_train_step=restored_train_step,
                **publication.figures(),
                **replay_refusals.figures(), **export_trigger.figures(),
                **energy_figures(step))

  status_trigger = StatusTrigger(root_dir, client, summary_interval, figures,
                                 start_step=restored_train_step)
  publication.amend_status = status_trigger.amend
  finished = threading.Event()

  def finish():
    logging.info('Stopping at train step %d: writing a final checkpoint.',
                 int(train_step))
    checkpointer.save(train_step)
    export_trigger.wait()
    final_figures = figures(int(train_step))
    writer.close()
    status_trigger.write(stopped=True, **final_figures)
    finished.set()

  stop = stop or threading.Event()
  watchdog = runtime.Watchdog(
      server_timeout_s, f'sampling replay from the Reverb server at '
      f'{server_address}')
  def finish_from_watchdog():
    finish()
    on_finish()

  runtime.finish_if_stuck(stop, finished, step_lock, finish_from_watchdog,
                          stop_grace_s)

  dataset = replay.replay_dataset(
      agent.collect_data_spec, agent.train_sequence_length, server_address,
      batch_size, rate_limiter_timeout_ms=1_000, key=key,
      refusals=replay_refusals)
  train_fn = common.function(agent.train)
  iterator = iter(dataset)
  step = int(train_step)
  loss = float('nan')
  waiting_since = None
  # The loop, as TF-Agents' Learner runs it: a train step, then triggers.
  triggers = (export_trigger, checkpoint_trigger, status_trigger)
  with writer.as_default(), tf.summary.record_if(
      lambda: tf.math.equal(train_step % summary_interval, 0)):
    while not stop.is_set() and not (max_train_steps and
                                     step >= max_train_steps):
      watchdog.beat()
      try:
        experience, verified_items = next(iterator)
        waiting_since = None
      except (tf.errors.OutOfRangeError, tf.errors.DeadlineExceededError,
              tf.errors.UnavailableError, tf.errors.CancelledError,
              StopIteration):
        # The rate limiter held sampling past its timeout: actors are
        # behind (or stopped), or the server is gone.
        if stop.is_set():
          break  # Replacing the iterator would wait on its samples.
        waiting_since = waiting_since or time.monotonic()
        _check_server(client, server_timeout_s, waiting_since)
        iterator = iter(dataset)
        continue
      if not verified_items:  # the run key verified none: see replay
        status_trigger(step, loss)
        continue
      with step_lock:
        loss = train_fn(experience).loss
        if policy_average:
          policy_average.update()
      step = int(train_step)
      for trigger in triggers:
        trigger(step, loss)

  watchdog.stop()
  with step_lock:
    finish()
  stop.set()  # Lets the finishing thread end.
  holder = [iterator]
  del iterator
  runtime.release_off_thread(holder)
  return step


# The checkpoint key of a run's `PolicyAverage`.
_POLICY_AVERAGE_KEY = 'policy_average'


class PolicyAverage(tf.Module):
  """An exponential moving average of a policy network's weights.

  DQN's greedy policy can change on a third of the states it visits from
  one version to the next while its values barely move; an average over
  the last 1 / (1 - decay) train steps changes slowly. The first update
  (of a run, or of a resumed run whose checkpoints had no average) copies
  the network. Checkpointed with the agent.
  """

  def __init__(self, policy_network, decay: float):
    super().__init__(name=_POLICY_AVERAGE_KEY)
    self._decay = decay
    self._sources = list(policy_network.weights)  # `get_weights` order
    self.averages = [tf.Variable(source, trainable=False)
                     for source in self._sources]
    self.started = tf.Variable(False)
    self._update = tf.function(self._update_eagerly)

  def _update_eagerly(self) -> None:
    decay = tf.where(self.started, self._decay, 0.0)
    for average, source in zip(self.averages, self._sources):
      if source.dtype.is_floating:
        average.assign(decay * average + (1 - decay) * source)
      else:
        average.assign(source)
    self.started.assign(True)

  def update(self) -> None:
    self._update()

  def get_weights(self):
    return [average.numpy() for average in self.averages]


class ExportTrigger:
  """Every `interval` train steps: calibration observations from the
  server, a copy of the weights under the step lock, and their conversion
  on the exporter's thread. An export that cannot start is counted and
  said why.

  Called as TF-Agents' `Learner` calls its triggers, `trigger(train_step)`
  (triggers run between train steps there: a lock of its own will do), or
  with the loss as this project's learner loop calls it.
  """

  def __init__(self, exporter: export.PolicyExporter,
               calibration: replay.RecentObservations,
               extremes: export.ObservationExtremes, interval: int,
               step_lock: Optional[threading.Lock] = None):
    self._exporter = exporter
    self._calibration = calibration
    self._extremes = extremes
    self._interval = interval
    self._step_lock = step_lock or threading.Lock()
    self._skipped = 0
    self._last_skipped = ''

  def __call__(self, step: int, loss=None) -> None:
    del loss
    step = int(step)
    if step % self._interval:
      return
    reason = self._start(step)
    if reason:
      self._skipped += 1
      self._last_skipped = f'step {step}: {reason}'
      logging.warning('Export skipped at %s.', self._last_skipped)
    with tf.summary.record_if(True):  # At every export, not every Nth step.
      tf.summary.scalar('export/skipped', self._skipped, step=step)
      tf.summary.scalar('export/refused', self._exporter.refused_exports,
                        step=step)

  def _start(self, step: int) -> Optional[str]:
    """Starts an export; returns why none started, if so."""
    if self._exporter.busy:
      return 'the previous export is still running'
    observations = self._calibration.sample()
    if observations is None:
      # Calibrating on older states would fit int8 to states the actors left.
      return self._calibration.failure
    extremes = self._extremes.add(observations)
    with self._step_lock:
      self._exporter.export_async(step, observations, extremes)
    return None

  def wait(self) -> None:
    """Waits for the export under way, if any, to be published."""
    self._exporter.wait()

  def figures(self) -> dict:
    return dict(exports=self._exporter.versions_exported,
                refused_exports=self._exporter.refused_exports,
                last_refused_export=self._exporter.last_refused_export,
                skipped_exports=self._skipped,
                last_skipped_export=self._last_skipped)


def export_policy(env, policy_network, calibration_observations,
                  precisions: Sequence[str] = ('int8',),
                  model_dir: Optional[str] = None
                 ) -> Sequence[export.ExportResult]:
  """Exports `policy_network` (trained on `env`'s algorithm) now, as the
  learner's exporter does at each version: the exact weight transforms,
  conversion calibrated on `calibration_observations`, and the model's
  check. Returns one `ExportResult` per precision (`.model_bytes`,
  `.normalizer`, `.check.passed`, `.check.reason`); models that passed are
  kept in `model_dir` if given. For a run, use `create_export_trigger`."""
  with tempfile.TemporaryDirectory() as scratch_dir:
    exporter = export.PolicyExporter(
        policy_network, agents.check_environment(env).model_outputs(env),
        precisions, publish=lambda results, weights: None,
        model_dir=model_dir or scratch_dir)
    return exporter.export(0, calibration_observations)


class Publication:
  """What the learner does with the models its exporter passed: lists the
  version in its status, sends the signed rows, and shows each model's check
  figures in TensorBoard and the log. Called as `PolicyExporter`'s publish.

  Args:
    publisher: sends the rows.
    writer: the learner's TensorBoard writer.
    published_versions: versions published by earlier runs of the learner.
  """

  def __init__(self, publisher: model_channel.ModelPublisher, writer,
               published_versions: List[int]):
    self._publisher = publisher
    self._writer = writer
    self.published_versions = published_versions
    # What one model update costs to send to an actor, per actor precision.
    self.model_update_bytes: Dict[str, int] = {}
    # The status trigger's `amend`, once there is one.
    self.amend_status: Callable[..., None] = lambda **figures: None

  def __call__(self, results: Sequence[export.ExportResult],
               weights: Sequence[np.ndarray]) -> None:
    version = results[0].version
    # Listed in the status before the rows go out: a learner killed between
    # the two would else leave actors running a version that the launcher
    # finds in no list of the learner's. A version listed but not sent is
    # harmless.
    self.published_versions.append(version)
    self.amend_status(published_versions=self.published_versions)
    try:
      self._publisher.publish_exports(results, weights)
    except SERVER_ERRORS as e:
      logging.warning('Could not publish version %d (%s); the next export '
                      'will try again.', version, e)
      return
    self.model_update_bytes.update(
        {r.precision: len(r.model_bytes) for r in results},
        tf=sum(w.nbytes for w in weights))
    with self._writer.as_default(step=version):
      for result in results:
        prefix = f'export/{result.precision}'
        for name, value in result.check.figures.items():
          tf.summary.scalar(f'{prefix}/{name}', value)
        tf.summary.scalar(f'{prefix}/convert_seconds', result.convert_seconds)
        tf.summary.scalar(f'{prefix}/model_bytes', len(result.model_bytes))
    logging.info('Published version %d: %s', version, '; '.join(
        f'{r.precision} ' + ' '.join(
            f'{name} {value:.4f}' for name, value in r.check.figures.items()) +
        f' ({r.convert_seconds:.2f} s)' for r in results))

  def figures(self) -> Dict:
    return dict(model_update_bytes=self.model_update_bytes,
                published_versions=self.published_versions)


def create_export_trigger(
    env, policy_network, server_address: str, key: signing.RunKey,
    model_dir: str, interval: int, precisions: Sequence[str] = ('int8',),
    publish: Optional[Callable] = None,
    weights_source: Optional[Callable] = None,
    num_calibration_observations: int = 256,
    calibration_extremes_window: int = 10,
    refusals: Optional[replay.Refusals] = None,
    step_lock: Optional[threading.Lock] = None) -> ExportTrigger:
  """An `ExportTrigger` for `policy_network`, trained on `env`'s algorithm:
  TFLite models of `precisions`, calibrated on the actors' recent verified
  observations, checked, and by default signed with `key` and published to
  the Reverb server (`publish` replaces that). Newest models kept in
  `model_dir`.

  Args:
    env: the environment, which picks the algorithm (its builder says what
      the model outputs and how it is checked).
    policy_network: the network the agent trains; its structure is exported.
    server_address: the Reverb server with the run's tables.
    key: the run key (`signing.run_key`).
    model_dir: where the newest model of each precision is kept.
    interval: train steps between exports.
    precisions: what to export: int8, and fp16 or fp32 for such actors.
    publish: called with the checked ExportResults and the fp32 weights; a
      `ModelPublisher`'s `publish_exports` by default.
    weights_source: gives the weights to export (`get_weights` order); the
      network's own by default.
    num_calibration_observations: observations per calibration set.
    calibration_extremes_window: calibration sets whose extremes are kept
      (see `export.ObservationExtremes`).
    refusals: counts replay items the key did not verify.
    step_lock: held by the caller while weights change, if they change on
      another thread than the trigger's.
  """
  algorithm = agents.check_environment(env)
  if publish is None:
    publish = model_channel.ModelPublisher(
        model_channel.wait_for_server(server_address, 10), key
    ).publish_exports
  exporter = export.PolicyExporter(
      policy_network, algorithm.model_outputs(env), precisions, publish,
      model_dir, weights_source=weights_source)
  calibration = replay.RecentObservations(
      server_address, algorithm.collect_data_spec(env),
      algorithm.sequence_length(), num_calibration_observations, key,
      refusals or replay.Refusals())
  return ExportTrigger(
      exporter, calibration,
      export.ObservationExtremes(calibration_extremes_window), interval,
      step_lock)


class CheckpointTrigger:
  """Every `interval` train steps, a TF checkpoint (under the step lock: it
  reads the weights)."""

  def __init__(self, checkpointer: common.Checkpointer,
               train_step: tf.Variable, interval: int,
               step_lock: threading.Lock):
    self._checkpointer = checkpointer
    self._train_step = train_step
    self._interval = interval
    self._step_lock = step_lock

  def __call__(self, step: int, loss) -> None:
    del loss
    if step % self._interval == 0:
      with self._step_lock:
        self._checkpointer.save(self._train_step)


class StatusTrigger:
  """Every `interval` train steps, and at least every 5 s: the train rate
  and replay figures to TensorBoard, and `figures(step)` with them to the
  learner's status file."""

  def __init__(self, root_dir: str, client: reverb.Client, interval: int,
               figures, start_step: int):
    self._root_dir = root_dir
    self._client = client
    self._interval = interval
    self._figures = figures
    self._rate = metrics.RateMeter(start_step)
    self._last_time = 0.0
    self._last_step = None
    self.replay_figures = {}  # The newest, for the final status too.
    # Set by the final status: a loop still running while the runtime
    # finishes the learner must not overwrite it.
    self._stopped = False
    # The newest status, which `amend` changes.
    self._written = records.LearnerStatus()
    # The train loop and the exporter's thread both write.
    self._lock = threading.Lock()

  def __call__(self, step: int, loss) -> None:
    """Also called without a train step (same `step`): then on time only."""
    on_step = step % self._interval == 0 and step != self._last_step
    if self._stopped or (not on_step and time.time() - self._last_time <= 5):
      return
    self._last_step = step
    rate = self._rate.rate(step)
    self.replay_figures = {**self.replay_figures,
                           **_replay_figures(self._client)}
    tf.summary.scalar('learner/train_steps_per_second', rate, step=step)
    for name in ('replay_size', 'replay_samples_per_insert_after_warmup'):
      if self.replay_figures.get(name) is not None:
        tf.summary.scalar(f'learner/{name}', self.replay_figures[name],
                          step=step)
    status = self.write(loss=float(loss), train_steps_per_second=rate,
                        **self._figures(step))
    if status:
      tf.summary.scalar('learner/replay_items_refused',
                        status.replay_items_refused, step=step)
      if status.last_replay_refusal:
        tf.summary.text('learner/last_replay_refusal',
                        status.last_replay_refusal, step=step)
    self._last_time = time.time()

  def write(self, stopped: bool = False,
            **figures) -> Optional[records.LearnerStatus]:
    """Writes the status of `figures` and the newest replay figures;
    returns it (None once the final status is written)."""
    with self._lock:
      if self._stopped:
        return None
      self._stopped = stopped
      self._written = records.LearnerStatus(
          **{**self.replay_figures, **figures}, stopped=stopped)
      run_directory.write_status(self._root_dir, run_directory.LEARNER_ROLE,
                                 self._written)
      return self._written

  def amend(self, **figures) -> None:
    """Rewrites the newest status with `figures` changed, at once."""
    with self._lock:
      if self._stopped:
        return
      self._written = dataclasses.replace(self._written, **figures)
      run_directory.write_status(self._root_dir, run_directory.LEARNER_ROLE,
                                 self._written)


def restore_policy_network(root_dir: str, step: Optional[int] = None):
  """(env, policy network, train step) of a run's newest checkpoint, or of
  the one at `step`; gin must hold the run's config (its `config.gin`).
  The network has the weights the run exports: its `PolicyAverage`, if the
  run kept one."""
  env = environments.load_environment()
  train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
  agent, policy_network = agents.check_environment(env).create_agent(
      env, train_step)
  directory = os.path.join(root_dir, run_directory.CHECKPOINTS_DIR)
  path = (tf.train.latest_checkpoint(directory) if step is None
          else os.path.join(directory, f'ckpt-{step}'))
  if not path or not tf.io.gfile.exists(path + '.index'):
    raise ActorQError(f'no checkpoint {"" if step is None else step} in '
                      f'{directory}')
  # The objects TF-Agents' Checkpointer saves in the train loop.
  saved = {'agent': agent, 'train_step': train_step}
  if any(name.startswith(_POLICY_AVERAGE_KEY + '/')
         for name, _ in tf.train.list_variables(path)):
    saved[_POLICY_AVERAGE_KEY] = PolicyAverage(policy_network, decay=0.0)
  tf.train.Checkpoint(**saved).restore(path).assert_existing_objects_matched()
  if _POLICY_AVERAGE_KEY in saved:
    policy_network.set_weights(saved[_POLICY_AVERAGE_KEY].get_weights())
  return env, policy_network, int(train_step)


def _replay_figures(client: reverb.Client) -> dict:
  try:
    return replay.rate_figures(
        client.server_info(timeout=5)[replay.REPLAY_TABLE])
  except SERVER_ERRORS:
    return {}


def _check_server(client: reverb.Client, timeout_s: float,
                  waiting_since: float) -> None:
  try:
    client.server_info(timeout=5)
  except SERVER_ERRORS as e:
    if time.monotonic() - waiting_since > timeout_s:
      raise ActorQError(f'lost the Reverb server at {client.server_address}: '
                        f'no answer for {timeout_s:g} s') from e
