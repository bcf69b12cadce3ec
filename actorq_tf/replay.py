"""The replay table: actors write transitions, the learner samples batches.

Beside it a small table keeps the observations the actors saw most
recently: int8 models are calibrated on those, the states the current policy
visits, not on the whole replay history.
"""
import time
from typing import Callable, Dict, Optional

import numpy as np

from absl import logging
import gin
import reverb
from reverb import structured_writer
import tensorflow as tf
import tree
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType

from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS

REPLAY_TABLE = 'replay'
RECENT_OBSERVATIONS_TABLE = 'recent_observations'
# The priority of replay items that end an episode; the others have 1. It
# only decides what a `keep_episode_ends` table removes: sampling is uniform.
EPISODE_END_PRIORITY = 2.0


@gin.configurable
def replay_table(collect_data_spec, sequence_length: int,
                 capacity: int = 100_000,
                 samples_per_insert: float = 32.0,
                 min_size_to_sample: int = 1_000,
                 samples_per_insert_tolerance: float = 0.1,
                 keep_episode_ends: bool = False) -> reverb.Table:
  """Uniform replay whose rate limiter fixes samples per insert.

  With a fixed ratio a run learns the same per env step whatever the actors'
  speed: fast actors wait for the learner, a slow learner waits for data.

  Args:
    collect_data_spec: the agent's trajectory spec (one step).
    sequence_length: steps per item (n-step update + 1).
    capacity: items kept; the oldest are removed first.
    keep_episode_ends: remove the items that end an episode (by termination
      or time limit; `ExperienceWriter` gives them a higher priority) only
      once no other item is left. As a policy improves its episodes grow
      long, and with first-in first-out removal its terminations grow rare
      in the table: a CartPole-v1 network that balances then forgets that
      the cart may leave the track. Sampling stays uniform.
    samples_per_insert: sampled items per inserted item; with batch B the
      learner makes samples_per_insert / B train steps per env step.
    min_size_to_sample: items needed before the first sample.
    samples_per_insert_tolerance: slack of the ratio, as a fraction of
      min_size_to_sample * samples_per_insert: after n inserts past
      min_size_to_sample, samples stay within samples_per_insert * (n +- 
      tolerance * min_size_to_sample). At 0.5 a 5,000-step Pendulum run
      could sample at 0.62-0.76 of its ratio, the side that binds (actors
      or learner) depending on actor speed.
  """
  error_buffer = max(
      samples_per_insert,
      samples_per_insert_tolerance * min_size_to_sample * samples_per_insert)
  signature = tensor_spec.add_outer_dim(collect_data_spec, sequence_length)
  return reverb.Table(
      name=REPLAY_TABLE,
      sampler=reverb.selectors.Uniform(),
      # A min-heap removes the oldest of the lowest priority first.
      remover=(reverb.selectors.MinHeap() if keep_episode_ends
               else reverb.selectors.Fifo()),
      max_size=capacity,
      max_times_sampled=0,
      rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
          samples_per_insert=samples_per_insert,
          min_size_to_sample=min_size_to_sample,
          error_buffer=error_buffer),
      signature=signature)


def rate_figures(table_info) -> Dict[str, float]:
  """The replay table's size, inserts, samples and the ratio of the two,
  over the whole run and after the first `min_size_to_sample` items (the
  ratio the rate limiter holds), beside the configured one."""
  limiter = table_info.rate_limiter_info
  inserts = limiter.insert_stats.completed
  samples = limiter.sample_stats.completed
  after_warmup = inserts - limiter.min_size_to_sample
  return {
      'replay_size': table_info.current_size,
      'replay_inserts': inserts,
      'replay_samples': samples,
      'replay_samples_per_insert': samples / inserts if inserts else None,
      'replay_samples_per_insert_after_warmup': (
          samples / after_warmup if after_warmup > 0 else None),
      'replay_samples_per_insert_configured': limiter.samples_per_insert,
  }


@gin.configurable
def recent_observations_table(observation_spec, capacity: int = 2048
                             ) -> reverb.Table:
  """The newest `capacity` observations that actors sent for calibration.

  Replay holds the whole history, from the random first steps on, and its
  feature ranges are far wider than those of the states the trained policy
  visits (Control Suite cartpole: pole velocities of +-12 in replay, +-0.2
  under the policy). Calibrated on replay, int8 spends its levels on states
  the policy no longer sees.
  """
  return reverb.Table(
      name=RECENT_OBSERVATIONS_TABLE,
      sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(),
      max_size=capacity,
      max_times_sampled=0,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=tf.TensorSpec(observation_spec.shape,
                              tf.as_dtype(observation_spec.dtype),
                              'observation'))


class RecentObservations:
  """The observations actors sent since the last call, for calibration.

  Each `sample` reads the table with a dataset that stops after `count`
  samples, so nothing is prefetched for the next call (a live dataset keeps
  its next batch in flight from the moment it gives one, and the export after
  would be calibrated on states from before the previous one). The table is
  then cleared: the next call sees only what came after.
  """

  def __init__(self, server_address: str, observation_spec, count: int,
               min_fresh: int = 64, rate_limiter_timeout_ms: int = 1_000):
    self._client = reverb.Client(server_address)
    self._server_address = server_address
    self._shape = tf.TensorShape(observation_spec.shape)
    self._dtype = tf.as_dtype(observation_spec.dtype)
    self._count = count
    self._min_fresh = min_fresh
    self._timeout_ms = rate_limiter_timeout_ms
    self.fresh_count = 0  # Observations in the table at the last call.
    self.failure = ''  # Why the last call gave None.

  def sample(self) -> Optional[np.ndarray]:
    """`count` observations (with repeats) of those sent since the last
    call, or None when fewer than `min_fresh` came or the server failed
    (see `failure`)."""
    self.failure = ''
    try:
      self.fresh_count = self._client.server_info(timeout=5)[
          RECENT_OBSERVATIONS_TABLE].current_size
    except SERVER_ERRORS as e:
      self.fresh_count = 0
      self.failure = f'the Reverb server did not answer ({type(e).__name__})'
      return None
    if self.fresh_count < self._min_fresh:
      self.failure = (f'{self.fresh_count} observations came from the actors '
                      f'since the last export')
      return None
    dataset = reverb.TrajectoryDataset(
        self._server_address, table=RECENT_OBSERVATIONS_TABLE,
        dtypes=self._dtype, shapes=self._shape,
        max_in_flight_samples_per_worker=self._count,
        rate_limiter_timeout_ms=self._timeout_ms, max_samples=self._count)
    try:
      observations = [sample.data.numpy() for sample in dataset]
      self._client.reset(RECENT_OBSERVATIONS_TABLE)
    except (tf.errors.OutOfRangeError, tf.errors.CancelledError,
            *SERVER_ERRORS) as e:
      self.failure = f'reading the observations failed ({type(e).__name__})'
      return None
    if not observations:
      self.failure = 'no observation came within the timeout'
      return None
    return np.stack(observations)


def replay_dataset(collect_data_spec, sequence_length: int,
                   server_address: str, batch_size: int,
                   rate_limiter_timeout_ms: int) -> tf.data.Dataset:
  """Batches of [batch, sequence_length] trajectories from the table.

  One sampling stream batched in the dataset: TF-Agents' ReverbReplayBuffer
  interleaves up to 32 streams, which costs more CPU than it saves on small
  machines. A sample that waits on the rate limiter past the timeout ends
  the dataset, so the learner gets control back to check for shutdown.
  """
  item_spec = tensor_spec.add_outer_dim(collect_data_spec, sequence_length)
  dataset = reverb.TrajectoryDataset(
      server_address,
      table=REPLAY_TABLE,
      dtypes=tf.nest.map_structure(lambda s: s.dtype, item_spec),
      shapes=tf.nest.map_structure(lambda s: s.shape, item_spec),
      max_in_flight_samples_per_worker=2 * batch_size,
      rate_limiter_timeout_ms=rate_limiter_timeout_ms)
  return dataset.batch(batch_size, drop_remainder=True).map(
      lambda sample: sample.data).prefetch(1)


def sequence_length_of(client: reverb.Client, timeout_s: float = 10.0) -> int:
  """The replay table's item length, read from its signature."""
  info = client.server_info(timeout=max(1, int(timeout_s)))
  if REPLAY_TABLE not in info:
    raise ActorQError(f'the Reverb server has no {REPLAY_TABLE!r} table')
  signature = info[REPLAY_TABLE].signature
  return int(tf.nest.flatten(signature)[0].shape[0])


def check_same_environment(client: reverb.Client, collect_data_spec,
                           timeout_s: float = 10.0) -> None:
  """ActorQError unless the server's replay items hold this role's
  environment's steps: every role must load the same environment (the same
  gin files), or its items would be refused or misread."""
  info = client.server_info(timeout=max(1, int(timeout_s)))
  if REPLAY_TABLE not in info:
    raise ActorQError(f'the Reverb server has no {REPLAY_TABLE!r} table')
  # Items are [sequence_length, ...] of each step field.
  theirs = [f'{s.dtype.name}{list(s.shape)[1:]}'
            for s in tf.nest.flatten(info[REPLAY_TABLE].signature)]
  ours = [(path, f'{s.dtype.name}{list(s.shape)}')
          for path, s in tree.flatten_with_path(collect_data_spec)]
  if [spec for _, spec in ours] == theirs:
    return
  differing = [f'{".".join(map(str, path))} {spec} here, {other} there'
               for (path, spec), other in zip(ours, theirs) if spec != other]
  raise ActorQError(
      'this role\'s environment is not the one the replay server was made '
      f'for ({"; ".join(differing) or "other step fields"}): give every '
      'role the same gin files')


class ExperienceWriter:
  """Writes overlapping windows of `sequence_length` steps to the replay.

  Called once per env step with a one-step Trajectory, like TF-Agents'
  ReverbAddTrajectoryObserver, but every blocking call has a timeout: a
  rate limiter may hold inserts for a long time while the learner catches
  up, and a dead server must not hang the actor.

  Items are made by Reverb's StructuredWriter from patterns given once (the
  newest `sequence_length` steps of the episode; every few steps, the newest
  observation), in C++. The TrajectoryWriter that TF-Agents' observer uses
  builds column histories and flattens nests in Python at every step: that
  cost more per step than a CartPole-v1 environment step (310 against 170
  us per step for the writer alone, side by side on this machine).

  Args:
    client: Reverb client of the replay server.
    sequence_length: steps per item, from the table's signature.
    max_in_flight_items: items that may wait for the server before `write`
      blocks; keeps actors in step with the rate limiter.
    timeout_s: how long one blocking call may wait before the server is
      checked; the writer keeps waiting while the server answers.
    give_up_s: how long the server may stay unreachable before the actor
      fails with a clear error. The writer reconnects by itself when the
      server comes back (a restarted server gets the items still in flight).
    on_server_answer: called whenever the server answers during a wait, to
      tell a watchdog that the actor is alive though held.
    recent_observation_interval: every this many steps the step's
      observation also goes to the recent-observations table.
    pad_episode_ends: also write the windows that start in an episode's
      last sequence_length - 2 steps, padded with copies of the episode's
      boundary step. n-step targets (D4PG's, and TF-Agents' DQN loss) stop
      at the episode's terminal discount; without these windows the last
      n - 1 states of every episode are never trained on.
  """

  def __init__(self, client: reverb.Client, sequence_length: int,
               max_in_flight_items: int = 8, timeout_s: float = 5.0,
               give_up_s: float = 120.0,
               on_server_answer: Callable[[], None] = lambda: None,
               recent_observation_interval: int = 4,
               pad_episode_ends: bool = False):
    self._client = client
    self._sequence_length = sequence_length
    self._max_in_flight_items = max_in_flight_items
    self._timeout_ms = int(timeout_s * 1000)
    self._give_up_s = give_up_s
    self._on_server_answer = on_server_answer
    self._recent_observation_interval = recent_observation_interval
    self._pad_episode_ends = pad_episode_ends
    self._writer = None
    self._appended = 0
    self.blocked_seconds = 0.0  # Time spent waiting on the rate limiter.

  def _create_writer(self, trajectory: trajectory_lib.Trajectory):
    structure = tree.map_structure(lambda _: None, trajectory)
    reference = structured_writer.create_reference_step(structure)
    window = tree.map_structure(
        lambda column: column[-self._sequence_length:], reference)
    full_window = (structured_writer.Condition.step_index() >=
                   self._sequence_length - 1)
    newest_step_type = structured_writer.Condition.data(structure).step_type
    # Items whose newest step is an episode's boundary hold its end.
    window_configs = [
        structured_writer.create_config(
            window, REPLAY_TABLE,
            conditions=[full_window, newest_step_type != StepType.LAST]),
        structured_writer.create_config(
            window, REPLAY_TABLE,
            conditions=[full_window, newest_step_type == StepType.LAST],
            priority=structured_writer.constant_priority_fn(
                EPISODE_END_PRIORITY)),
    ]
    newest_observation = structured_writer.create_config(
        reference.observation[-1], RECENT_OBSERVATIONS_TABLE,
        conditions=[structured_writer.Condition.steps_since_applied() >=
                    self._recent_observation_interval])
    return self._client.structured_writer(
        window_configs + [newest_observation])

  def write(self, trajectory: trajectory_lib.Trajectory) -> None:
    if self._writer is None:
      self._writer = self._create_writer(trajectory)
    self._append(trajectory)
    if trajectory.step_type == StepType.LAST:  # last -> first: a boundary
      if self._pad_episode_ends:
        for _ in range(self._sequence_length - 2):
          self._append(trajectory)
      self._wait(lambda timeout_ms: self._writer.end_episode(
          clear_buffers=True, timeout_ms=timeout_ms))

  def _append(self, trajectory: trajectory_lib.Trajectory) -> None:
    self._writer.append(trajectory)
    self._appended += 1
    # A flush finalizes the chunks of pending items before their time; once
    # every max_in_flight_items steps it costs a third of what it does at
    # every step, and holds the actor within twice that many items.
    if self._appended % self._max_in_flight_items == 0:
      self._wait(lambda timeout_ms: self._writer.flush(
          self._max_in_flight_items, timeout_ms=timeout_ms))

  def close(self) -> None:
    if self._writer is None:
      return
    self._wait(lambda timeout_ms: self._writer.flush(timeout_ms=timeout_ms))

  def _wait(self, blocking_call) -> None:
    start = time.monotonic()
    unreachable_since: Optional[float] = None
    next_warning = start + 60
    while True:
      try:
        blocking_call(self._timeout_ms)
        self.blocked_seconds += time.monotonic() - start
        return
      except reverb.errors.DeadlineExceededError:
        pass
      # Either the rate limiter holds us (the learner is behind) or the
      # server is gone; only the latter is an error.
      try:
        self._client.server_info(timeout=max(1, self._timeout_ms // 1000))
        self._on_server_answer()
        if unreachable_since is not None:
          logging.info('Reverb server %s answers again after %.0f s.',
                       self._client.server_address,
                       time.monotonic() - unreachable_since)
          unreachable_since = None
        if time.monotonic() >= next_warning:
          logging.warning('The replay rate limiter has held inserts for %.0f '
                          's: is the learner sampling?',
                          time.monotonic() - start)
          next_warning = time.monotonic() + 60
      except SERVER_ERRORS as e:
        now = time.monotonic()
        if unreachable_since is None:
          unreachable_since = now
          logging.warning('Reverb server %s is not answering; waiting up to '
                          '%.0f s.', self._client.server_address,
                          self._give_up_s)
        if now - unreachable_since > self._give_up_s:
          raise ActorQError(
              f'lost the Reverb server at {self._client.server_address}: no '
              f'answer for {self._give_up_s:g} s') from e
