"""The replay table: actors write transitions, the learner samples batches.

Beside it a small table keeps the observations the actors saw most
recently: int8 models are calibrated on those, the states the current policy
visits, not on the whole replay history.

Reverb has no authentication, so every item an actor writes carries the run
key's MAC over its steps (see `WindowSigner`). The learner trains only on
items its key verifies, and calibrates only on verified observations; it
counts the rest as refused.
"""
import collections
import math
import threading
import time
from typing import Callable, Dict, NamedTuple, Optional, Tuple

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

from actorq_tf import signing
from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS

REPLAY_TABLE = 'replay'
RECENT_OBSERVATIONS_TABLE = 'recent_observations'
# The priority of replay items that end an episode; the others have 1. It
# only decides what a `keep_episode_ends` table removes: sampling is uniform.
EPISODE_END_PRIORITY = 2.0


class SignedStep(NamedTuple):
  """One step as an actor appends it: the step, and the run key's MAC of
  the window of steps that ends with it (see `WindowSigner`)."""
  step: trajectory_lib.Trajectory
  signature: np.ndarray


class SignedItem(NamedTuple):
  """One item of the tables: `sequence_length` steps and their MAC."""
  steps: trajectory_lib.Trajectory
  signature: np.ndarray


def signed_item_spec(collect_data_spec, sequence_length: int) -> SignedItem:
  return SignedItem(
      tensor_spec.add_outer_dim(collect_data_spec, sequence_length),
      tf.TensorSpec([signing.MAC_BYTES], tf.uint8, 'signature'))


def _step_bytes(step: trajectory_lib.Trajectory) -> bytes:
  leaves = tree.flatten(step)
  try:  # numpy arrays and scalars are buffers already: no copies
    return b''.join(leaves)
  except (TypeError, ValueError, BufferError):  # a Python number, a view
    return b''.join(np.ascontiguousarray(leaf) for leaf in leaves)


class WindowSigner:
  """Signs, at each step an actor appends, the newest `length` steps of its
  episode: the bytes of each step's leaves (in `tree.flatten` order), step
  after step. That is the message of the item whose newest step it is, so
  the learner checks one MAC per item, and steps put together in an order
  no actor wrote them fail it. Each step's bytes are made once; the MAC
  then goes over the whole window (a keyed BLAKE2b: one C call)."""

  def __init__(self, key: signing.RunKey, length: int):
    self._mac = key.replay_mac()
    self._window = collections.deque(maxlen=length)

  def sign(self, step: trajectory_lib.Trajectory) -> SignedStep:
    self._window.append(_step_bytes(step))
    mac = self._mac.copy()
    mac.update(b''.join(self._window))
    return SignedStep(step, np.frombuffer(mac.digest(), np.uint8))

  def end_episode(self) -> None:
    self._window.clear()


class Refusals:
  """What the learner refused of what it read from the tables (thread-safe:
  tf.data checks batches on its own threads)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._checked = 0
    self._refused = 0
    self._in_a_row = 0  # refused since the last accepted item
    self._last = ''

  def check(self, key: signing.RunKey, signature: np.ndarray,
            step_leaves) -> np.ndarray:
    """Which items `authentic` accepts, the others counted."""
    accepted, reason = authentic(key, signature, step_leaves)
    checked, refused = len(accepted), int((~accepted).sum())
    with self._lock:
      self._checked += checked
      self._refused += refused
      self._in_a_row = (self._in_a_row + refused if refused == checked
                        else 0)
      if refused:
        self._last = reason
    return accepted

  def figures(self) -> Dict:
    with self._lock:
      return {'replay_items_checked': self._checked,
              'replay_items_refused': self._refused,
              'replay_items_refused_in_a_row': self._in_a_row,
              'last_replay_refusal': self._last}


def authentic(key: signing.RunKey, signature: np.ndarray,
              step_leaves) -> Tuple[np.ndarray, str]:
  """Which of N items ([N, T, ...] arrays of the steps' leaves in
  `tree.flatten` order, [N, 32] signatures) the key's MAC verifies, as a
  `WindowSigner` made it; and why the others are refused."""
  items = signature.shape[0]
  # [N, T, bytes of a step]: each step's leaves one after the other.
  messages = np.concatenate(
      [np.ascontiguousarray(a).reshape(items, a.shape[1], -1).view(np.uint8)
       for a in step_leaves], axis=2).reshape(items, -1)
  mac = key.replay_mac()
  expected = []
  for message in messages:
    copy = mac.copy()
    copy.update(message)
    expected.append(copy.digest())
  accepted = (np.frombuffer(b''.join(expected), np.uint8).reshape(
      items, -1) == signature).all(axis=1)
  reason = '' if accepted.all() else (
      'items that the run key does not sign: another key, changed, or '
      'steps put together in an order no actor wrote them')
  return accepted, reason


# How the replay paces the learner against the actors (`replay_table`).
FIXED_RATIO, FREE_RUNNING = 'fixed_ratio', 'free_running'
REGIMES = (FIXED_RATIO, FREE_RUNNING)


@gin.configurable
def replay_table(collect_data_spec, sequence_length: int,
                 capacity: int = 100_000,
                 samples_per_insert: float = 32.0,
                 min_size_to_sample: int = 1_000,
                 samples_per_insert_tolerance: float = 0.1,
                 keep_episode_ends: bool = False,
                 regime: str = FIXED_RATIO) -> reverb.Table:
  """Uniform replay, paced by its `regime`.

  Args:
    collect_data_spec: the agent's trajectory spec (one step).
    sequence_length: steps per item (n-step update + 1).
    capacity: items kept; the oldest are removed first.
    samples_per_insert: in 'fixed_ratio', sampled items per inserted item
      (with batch B the learner makes samples_per_insert / B train steps per
      env step); in 'free_running', the most times one item is sampled
      (rounded up) before it is removed.
    min_size_to_sample: items needed before the first sample.
    samples_per_insert_tolerance: ('fixed_ratio') slack of the ratio, as a
      fraction of min_size_to_sample * samples_per_insert: after n inserts
      past min_size_to_sample, samples stay within samples_per_insert * (n
      +- tolerance * min_size_to_sample). At 0.5 a 5,000-step Pendulum run
      could sample at 0.62-0.76 of its ratio, the side that binds (actors
      or learner) depending on actor speed.
    keep_episode_ends: remove the items that end an episode (by termination
      or time limit; `ExperienceWriter` gives them a higher priority) only
      once no other item is left. As a policy improves its episodes grow
      long, and with first-in first-out removal its terminations grow rare
      in the table: a CartPole-v1 network that balances then forgets that
      the cart may leave the track. Sampling stays uniform.
    regime: 'fixed_ratio': a rate limiter holds samples per insert, so a run
      learns the same per env step whatever the actors' speed: fast actors
      wait for the learner, a slow learner waits for data, and one CPU
      learner sets the pace for every actor precision. 'free_running' (how
      QuaRL's ActorQ ran): only `min_size_to_sample` gates sampling and
      each item is sampled at most `samples_per_insert` times, so the
      learner never waits for a ratio and faster actors bring it more, and
      fresher, data per train step; runs of different actor speeds then
      learn from different ratios (the summary records the one that
      resulted), and the learner waits only when every item is used up.
  """
  if regime not in REGIMES:
    raise ActorQError(f'unknown replay regime {regime!r}; choose one of '
                      f'{", ".join(REGIMES)}')
  if regime == FREE_RUNNING:
    rate_limiter = reverb.rate_limiters.MinSize(min_size_to_sample)
    max_times_sampled = math.ceil(samples_per_insert)
  else:
    rate_limiter = reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=samples_per_insert,
        min_size_to_sample=min_size_to_sample,
        error_buffer=max(samples_per_insert, samples_per_insert_tolerance *
                         min_size_to_sample * samples_per_insert))
    max_times_sampled = 0
  return reverb.Table(
      name=REPLAY_TABLE,
      sampler=reverb.selectors.Uniform(),
      # A min-heap removes the oldest of the lowest priority first.
      remover=(reverb.selectors.MinHeap() if keep_episode_ends
               else reverb.selectors.Fifo()),
      max_size=capacity,
      max_times_sampled=max_times_sampled,
      rate_limiter=rate_limiter,
      signature=signed_item_spec(collect_data_spec, sequence_length))


def rate_figures(table_info) -> Dict[str, float]:
  """The replay table's regime, size, inserts, samples and the ratio of the
  two, over the whole run and after the first `min_size_to_sample` items
  (the ratio a fixed-ratio limiter holds), beside the configured one."""
  limiter = table_info.rate_limiter_info
  inserts = limiter.insert_stats.completed
  samples = limiter.sample_stats.completed
  after_warmup = inserts - limiter.min_size_to_sample
  # Only the free-running regime removes items once sampled enough.
  free_running = table_info.max_times_sampled > 0
  return {
      'replay_regime': FREE_RUNNING if free_running else FIXED_RATIO,
      'replay_max_times_sampled': table_info.max_times_sampled or None,
      'replay_size': table_info.current_size,
      'replay_inserts': inserts,
      'replay_samples': samples,
      'replay_samples_per_insert': samples / inserts if inserts else None,
      'replay_samples_per_insert_after_warmup': (
          samples / after_warmup if after_warmup > 0 else None),
      'replay_samples_per_insert_configured': (
          None if free_running else limiter.samples_per_insert),
  }


@gin.configurable
def recent_observations_table(collect_data_spec, sequence_length: int,
                              capacity: int = 2048) -> reverb.Table:
  """The newest `capacity` observations that actors sent for calibration,
  each the newest step of a signed item (its steps are in the replay's
  chunks already: Reverb sends them once).

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
      signature=signed_item_spec(collect_data_spec, sequence_length))


class RecentObservations:
  """The observations actors sent since the last call, for calibration.

  Each `sample` reads the table with a dataset that stops after `count`
  samples, so nothing is prefetched for the next call (a live dataset keeps
  its next batch in flight from the moment it gives one, and the export after
  would be calibrated on states from before the previous one). The table is
  then cleared: the next call sees only what came after. Observations whose
  steps the run key does not verify are counted in `refusals` and left out.
  """

  def __init__(self, server_address: str, collect_data_spec,
               sequence_length: int, count: int, key: signing.RunKey,
               refusals: Refusals, min_fresh: int = 64,
               rate_limiter_timeout_ms: int = 1_000):
    self._client = reverb.Client(server_address)
    self._server_address = server_address
    self._spec = signed_item_spec(collect_data_spec, sequence_length)
    self._key = key
    self._refusals = refusals
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
        dtypes=tf.nest.map_structure(lambda s: s.dtype, self._spec),
        shapes=tf.nest.map_structure(lambda s: s.shape, self._spec),
        max_in_flight_samples_per_worker=self._count,
        rate_limiter_timeout_ms=self._timeout_ms, max_samples=self._count)
    try:
      samples = list(dataset.batch(self._count).as_numpy_iterator())
      self._client.reset(RECENT_OBSERVATIONS_TABLE)
    except (tf.errors.OutOfRangeError, tf.errors.CancelledError,
            *SERVER_ERRORS) as e:
      self.failure = f'reading the observations failed ({type(e).__name__})'
      return None
    if not samples:
      self.failure = 'no observation came within the timeout'
      return None
    signed = samples[0].data
    accepted = self._refusals.check(self._key, signed.signature,
                                    tree.flatten(signed.steps))
    if not accepted.any():
      self.failure = (f'all {len(accepted)} observations were refused: '
                      f'{self._refusals.figures()["last_replay_refusal"]}')
      return None
    return signed.steps.observation[accepted, -1]


def replay_dataset(collect_data_spec, sequence_length: int,
                   server_address: str, batch_size: int,
                   rate_limiter_timeout_ms: int, key: signing.RunKey,
                   refusals: Refusals) -> tf.data.Dataset:
  """Batches of [batch, sequence_length] trajectories from the table, each
  with the number of its items that the run key verified (see `authentic`).

  The others are counted in `refusals`, and replaced by verified items of
  the same batch drawn at random, so that batches keep their size and the
  learner is never held by a stream of refused items: a batch with no
  verified item (count 0) is for the learner to skip.

  One sampling stream batched in the dataset: TF-Agents' ReverbReplayBuffer
  interleaves up to 32 streams, which costs more CPU than it saves on small
  machines. A sample that waits on the rate limiter past the timeout ends
  the dataset, so the learner gets control back to check for shutdown.
  """
  item_spec = signed_item_spec(collect_data_spec, sequence_length)
  dataset = reverb.TrajectoryDataset(
      server_address,
      table=REPLAY_TABLE,
      dtypes=tf.nest.map_structure(lambda s: s.dtype, item_spec),
      shapes=tf.nest.map_structure(lambda s: s.shape, item_spec),
      max_in_flight_samples_per_worker=2 * batch_size,
      rate_limiter_timeout_ms=rate_limiter_timeout_ms)

  def authentic_steps(sample):
    signed = sample.data
    accepted = tf.numpy_function(
        lambda signature, *leaves: refusals.check(key, signature, leaves),
        [signed.signature, *tf.nest.flatten(signed.steps)], tf.bool,
        stateful=True)
    accepted.set_shape([batch_size])
    verified = tf.concat([tf.where(accepted)[:, 0], [0]], axis=0)
    count = tf.size(verified) - 1
    draws = tf.random.uniform([batch_size], maxval=tf.maximum(count, 1),
                              dtype=tf.int32)
    rows = tf.where(accepted, tf.range(batch_size, dtype=tf.int64),
                    tf.gather(verified, draws))
    return (tf.nest.map_structure(lambda x: tf.gather(x, rows), signed.steps),
            count)

  # Batches are checked whole: one call into Python per batch.
  return dataset.batch(batch_size, drop_remainder=True).map(
      authentic_steps).prefetch(1)


def sequence_length_of(client: reverb.Client, timeout_s: float = 10.0) -> int:
  """The replay table's item length, read from its signature."""
  info = client.server_info(timeout=max(1, int(timeout_s)))
  if REPLAY_TABLE not in info:
    raise ActorQError(f'the Reverb server has no {REPLAY_TABLE!r} table')
  return int(tf.nest.flatten(_signed_steps_spec(info))[0].shape[0])


def _signed_steps_spec(server_info):
  steps = getattr(server_info[REPLAY_TABLE].signature, 'steps', None)
  if steps is None:
    raise ActorQError(
        f'the replay server\'s {REPLAY_TABLE!r} table holds unsigned items '
        '(made by an ActorQ-TF from before replay was signed): start the '
        'run in a new --root_dir')
  return steps


def check_same_environment(client: reverb.Client, collect_data_spec,
                           timeout_s: float = 10.0) -> None:
  """ActorQError unless the server's replay items hold this role's
  environment's steps: every role must load the same environment (the same
  gin files), or its items would be refused or misread."""
  info = client.server_info(timeout=max(1, int(timeout_s)))
  if REPLAY_TABLE not in info:
    raise ActorQError(f'the Reverb server has no {REPLAY_TABLE!r} table')
  # Items are [sequence_length, ...] of each step field, and a signature.
  theirs = [f'{s.dtype.name}{list(s.shape)[1:]}'
            for s in tf.nest.flatten(_signed_steps_spec(info))]
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
    key: the run key every item is signed with (see `WindowSigner`).
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
               key: signing.RunKey, max_in_flight_items: int = 8,
               timeout_s: float = 5.0, give_up_s: float = 120.0,
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
    self._signer = WindowSigner(key, sequence_length)
    self._writer = None
    self._appended = 0
    self.blocked_seconds = 0.0  # Time spent waiting on the rate limiter.

  def _create_writer(self, signed_step: SignedStep):
    structure = tree.map_structure(lambda _: None, signed_step)
    reference = structured_writer.create_reference_step(structure)
    # The window of steps, and the newest step's MAC, which covers them.
    item = SignedItem(
        tree.map_structure(lambda column: column[-self._sequence_length:],
                           reference.step),
        reference.signature[-1])
    full_window = (structured_writer.Condition.step_index() >=
                   self._sequence_length - 1)
    newest_step_type = structured_writer.Condition.data(
        structure).step.step_type
    # Items whose newest step is an episode's boundary hold its end.
    window_configs = [
        structured_writer.create_config(
            item, REPLAY_TABLE,
            conditions=[full_window, newest_step_type != StepType.LAST]),
        structured_writer.create_config(
            item, REPLAY_TABLE,
            conditions=[full_window, newest_step_type == StepType.LAST],
            priority=structured_writer.constant_priority_fn(
                EPISODE_END_PRIORITY)),
    ]
    # The same items: only their newest observation calibrates, but only
    # the whole window is signed.
    newest_observation = structured_writer.create_config(
        item, RECENT_OBSERVATIONS_TABLE,
        conditions=[full_window,
                    structured_writer.Condition.steps_since_applied() >=
                    self._recent_observation_interval])
    return self._client.structured_writer(
        window_configs + [newest_observation])

  def write(self, trajectory: trajectory_lib.Trajectory) -> None:
    """Appends one step; an observer of TF-Agents' `Actor` or `PyDriver`
    calls it with each trajectory (`__call__`)."""
    self._append(trajectory)
    if trajectory.step_type == StepType.LAST:  # last -> first: a boundary
      if self._pad_episode_ends:
        for _ in range(self._sequence_length - 2):
          self._append(trajectory)
      self._wait(lambda timeout_ms: self._writer.end_episode(
          clear_buffers=True, timeout_ms=timeout_ms))
      self._signer.end_episode()

  def _append(self, trajectory: trajectory_lib.Trajectory) -> None:
    signed_step = self._signer.sign(trajectory)
    if self._writer is None:
      self._writer = self._create_writer(signed_step)
    self._writer.append(signed_step)
    self._appended += 1
    # A flush finalizes the chunks of pending items before their time; once
    # every max_in_flight_items steps it costs a third of what it does at
    # every step, and holds the actor within twice that many items.
    if self._appended % self._max_in_flight_items == 0:
      self._wait(lambda timeout_ms: self._writer.flush(
          self._max_in_flight_items, timeout_ms=timeout_ms))

  __call__ = write

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


def replay_observer(client: reverb.Client, key: signing.RunKey,
                    **options) -> ExperienceWriter:
  """The writer an actor adds as its observer: items as long as the replay
  table's, n-step items padded at episode ends (see `ExperienceWriter`,
  whose arguments `options` may give)."""
  sequence_length = sequence_length_of(client)
  # n-step items (DQN's n_step_update, D4PG's n_step): without padding the
  # last n - 1 steps of each episode, those before its end, would never
  # start an item.
  options.setdefault('pad_episode_ends', sequence_length > 2)
  return ExperienceWriter(client, sequence_length, key, **options)
