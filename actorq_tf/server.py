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
from actorq_tf import replay
from actorq_tf import run_directory


def create_tables(env) -> list:
  """Replay, recent observations, one newest-model table per TFLite
  precision, and variables. The builder gives the replay items' spec
  without an agent: the server needs no optimizers or target networks."""
  algorithm = agents.check_environment(env)
  policy_network = algorithm.policy_network(env)
  tables = [replay.replay_table(algorithm.collect_data_spec(env),
                                algorithm.sequence_length()),
            replay.recent_observations_table(env.observation_spec())]
  observation_shape = env.observation_spec().shape
  tables += [model_channel.model_table(p, observation_shape)
             for p in TFLITE_PRECISIONS]
  tables.append(model_channel.variables_table(
      model_channel.policy_variables(policy_network.variables,
                                     tf.Variable(0, dtype=tf.int64))))
  return tables


def start_server(port: int, checkpoint_dir: Optional[str]) -> reverb.Server:
  """Serves the run's tables, restored from `checkpoint_dir` if it has a
  checkpoint. Without a directory the tables live in memory only."""
  env = environments.load_environment()
  checkpointer = None
  if checkpoint_dir:
    os.makedirs(checkpoint_dir, exist_ok=True)
    checkpointer = reverb.checkpointers.DefaultCheckpointer(checkpoint_dir)
  return reverb.Server(create_tables(env), port=port,
                       checkpointer=checkpointer)


def replay_size(client: reverb.Client) -> int:
  return client.server_info(timeout=10)[replay.REPLAY_TABLE].current_size


@gin.configurable
def serve(root_dir: Optional[str], port: int, stop: threading.Event,
          checkpoint_interval_s: float = 60.0) -> None:
  """Serves until `stop`, checkpointing into root_dir/replay_checkpoints.

  Args:
    root_dir: run directory; None serves without checkpoints.
    port: port to listen on (all interfaces: dm-reverb 0.14 takes no host).
    stop: set by SIGTERM / SIGINT; the server checkpoints, then stops.
    checkpoint_interval_s: seconds between checkpoints. Reverb keeps the
      newest complete checkpoint and deletes older ones itself.
  """
  checkpoint_dir = root_dir and os.path.join(
      root_dir, run_directory.REPLAY_CHECKPOINTS_DIR)
  server = start_server(port, checkpoint_dir)
  client = reverb.Client(f'localhost:{server.port}')
  restored_items = replay_size(client)
  logging.info('Reverb server listening on port %d (all interfaces); replay '
               'holds %d items.', server.port, restored_items)
  if checkpoint_dir is None:
    logging.warning('No --root_dir: the tables are not checkpointed.')
    stop.wait()
    server.stop()
    return

  def checkpoint():
    start = time.monotonic()
    items = replay_size(client)
    path = client.checkpoint()
    logging.info('Checkpointed about %d replay items to %s in %.2f s.', items,
                 path, time.monotonic() - start)
    run_directory.write_status(root_dir, run_directory.SERVER_ROLE,
                               port=server.port,
                               restored_items=restored_items,
                               last_checkpoint_items=items,
                               last_checkpoint=path)

  run_directory.write_status(root_dir, run_directory.SERVER_ROLE,
                             port=server.port,
                             restored_items=restored_items)
  while not stop.wait(checkpoint_interval_s):
    checkpoint()
  checkpoint()
  logging.info('Stopping the Reverb server.')
  server.stop()
