"""The Reverb server: the one place where actors and the learner meet.

Its tables (replay with its rate-limiter counters, the newest models and
variables) are checkpointed with Reverb's own checkpointer on a schedule and
at a clean stop; a server started on the same directory loads the newest
complete checkpoint, so a restarted run keeps its replay.
"""
import os
import threading
import time
from typing import Optional

from absl import logging
import gin
import reverb
import tensorflow as tf

from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import model_channel
from actorq_tf import records
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf.errors import ActorQError
from actorq_tf.errors import described


def create_tables(env, policy_network=None) -> list:
  """Replay, recent observations, one newest-model table per TFLite
  precision, and variables (of `policy_network`; the builder's by default).
  The builder gives the replay items' spec without an agent: the server
  needs no optimizers or target networks."""
  algorithm = agents.check_environment(env)
  policy_network = policy_network or algorithm.policy_network(env)
  policy_network.create_variables()  # A user's network may be unbuilt.
  tables = [replay.replay_table(algorithm.collect_data_spec(env),
                                algorithm.sequence_length()),
            replay.recent_observations_table(algorithm.collect_data_spec(env),
                                             algorithm.sequence_length())]
  observation_shape = env.observation_spec().shape
  tables += [model_channel.model_table(p, observation_shape)
             for p in TFLITE_PRECISIONS]
  tables.append(model_channel.variables_table(
      model_channel.policy_variables(policy_network.variables,
                                     tf.constant(0, tf.int64),
                                     tf.constant(''))))
  return tables


def start_server(port: Optional[int], checkpoint_dir: Optional[str],
                 env=None, policy_network=None) -> reverb.Server:
  """Serves the run's tables (see `create_tables`) for `env` and
  `policy_network` (the gin config's by default), restored from
  `checkpoint_dir` if it has a checkpoint. Without a directory the tables
  live in memory only.

  A checkpoint that does not load (damaged files), or whose replay items
  are not this run's (Reverb restores a table as it was checkpointed, so
  items of another layout would be refused by every role), stops the server
  with one line and is left as it is: replay is what the run cannot rebuild.
  """
  env = env or environments.load_environment()
  checkpointer = None
  if checkpoint_dir:
    os.makedirs(checkpoint_dir, exist_ok=True)
    checkpointer = reverb.checkpointers.DefaultCheckpointer(checkpoint_dir)
  try:
    replay_server = reverb.Server(create_tables(env, policy_network),
                                  port=port,
                                  checkpointer=checkpointer)
  except RuntimeError as e:
    if checkpointer is None:
      raise
    reason = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    raise ActorQError(
        f'the replay checkpoint in {checkpoint_dir} does not load ({reason}); '
        'it is left as it is: restore it from a copy, or move it aside to '
        'resume with empty replay') from e
  if checkpointer is not None:
    try:
      replay.check_same_environment(
          reverb.Client(f'localhost:{replay_server.port}'),
          agents.check_environment(env).collect_data_spec(env))
    except ActorQError as e:
      replay_server.stop()
      raise ActorQError(f'the replay checkpoint in {checkpoint_dir} is left '
                        f'as it is: {e.message}') from e
  return replay_server


def replay_size(client: reverb.Client) -> int:
  return client.server_info(timeout=10)[replay.REPLAY_TABLE].current_size


@gin.configurable
class ReplayService:
  """The run's tables served on `port` by this process, checkpointed into
  root_dir/replay_checkpoints on a schedule and at `close`.

  The Reverb server binary runs one alone; the learner may host one, so
  that it samples in its own process (Reverb then skips gRPC: a learner
  loop at 360 train steps/s here instead of 226 from a server process).
  """

  def __init__(self, root_dir: Optional[str], port: int,
               checkpoint_interval_s: float = 60.0):
    """
    Args:
      root_dir: run directory; None serves without checkpoints.
      port: port to listen on (all interfaces: dm-reverb 0.14 takes no
        host).
      checkpoint_interval_s: seconds between checkpoints. Reverb keeps the
        newest complete checkpoint and deletes older ones itself.
    """
    self._root_dir = root_dir
    checkpoint_dir = root_dir and os.path.join(
        root_dir, run_directory.REPLAY_CHECKPOINTS_DIR)
    self._server = start_server(port, checkpoint_dir)
    self._close_lock = threading.Lock()
    self._closing = threading.Event()
    self._checkpoints = None
    try:
      self.address = f'localhost:{self._server.port}'
      self._client = reverb.Client(self.address)
      self._restored_items = replay_size(self._client)
      logging.info('Reverb server listening on port %d (all interfaces); '
                   'replay holds %d items.', self._server.port,
                   self._restored_items)
      if checkpoint_dir is None:
        logging.warning('No --root_dir: the tables are not checkpointed.')
        return
      self._write_status()
    except BaseException:
      self._server.stop()
      raise
    self._checkpoints = threading.Thread(
        target=self._checkpoint_on_schedule, args=(checkpoint_interval_s,),
        name='replay_checkpoints', daemon=True)
    self._checkpoints.start()

  def __enter__(self) -> 'ReplayService':
    return self

  def __exit__(self, *unused_exception) -> None:
    self.close()

  def close(self) -> None:
    """Checkpoints once more (if it checkpoints at all), then stops. Once:
    a second caller waits until the first is done."""
    with self._close_lock:
      if self._closing.is_set():
        return
      self._closing.set()
      try:
        if self._checkpoints:
          self._checkpoints.join()
          self._checkpoint()
      finally:
        logging.info('Stopping the Reverb server.')
        self._server.stop()

  def _checkpoint_on_schedule(self, interval_s: float) -> None:
    while not self._closing.wait(interval_s):
      try:
        self._checkpoint()
      except Exception as e:  # pylint: disable=broad-except
        # As when the server was a process of its own: the process ends
        # with the reason, and the launcher restarts it from the newest
        # complete checkpoint.
        runtime.give_up(f'could not checkpoint the replay into '
                        f'{self._root_dir} ({described(e)}); the newest '
                        'complete checkpoint is kept', 1)

  def _checkpoint(self) -> None:
    start = time.monotonic()
    items = replay_size(self._client)
    path = self._client.checkpoint()
    logging.info('Checkpointed about %d replay items to %s in %.2f s.',
                 items, path, time.monotonic() - start)
    self._write_status(last_checkpoint_items=items, last_checkpoint=path)

  def _write_status(self, **checkpoint) -> None:
    run_directory.write_status(
        self._root_dir, run_directory.SERVER_ROLE, records.ServerStatus(
            port=self._server.port, restored_items=self._restored_items,
            **checkpoint))
