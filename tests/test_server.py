"""Replay checkpoints: what a restarted server restores, that the restored
rate limiter lets the learner sample at once, and when a replay service
checkpoints."""
import os
import threading

import portpicker
import pytest
import reverb
import tensorflow as tf
from tf_agents.specs import tensor_spec

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import dqn
from actorq_tf import environments
from actorq_tf import model_channel
from actorq_tf import replay
from actorq_tf import records
from actorq_tf import run_directory
from actorq_tf import server
from actorq_tf import signing
from actorq_tf.errors import ActorQError
from helpers import publish_policy
from helpers import wait_for


def _dataset(address, batch_size, root_dir):
  env = environments.load_environment()
  agent = dqn.create_dqn_agent(env, agents.builder().policy_network(env),
                                  tf.Variable(0, dtype=tf.int64))
  return replay.replay_dataset(agent.collect_data_spec,
                               agent.train_sequence_length, address,
                               batch_size, rate_limiter_timeout_ms=2_000,
                               key=signing.run_key(root_dir),
                               refusals=replay.Refusals())


def test_a_restarted_server_restores_replay_models_and_sampling(
    cartpole_gin, tmp_path):  # pylint: disable=unused-argument
  checkpoint_dir = str(tmp_path / 'replay_checkpoints')
  first = server.start_server(None, checkpoint_dir)
  address = f'localhost:{first.port}'
  actor.run_actor(str(tmp_path), address, max_env_steps=300)
  publish_policy(address, version=7, root_dir=str(tmp_path))
  client = reverb.Client(address)
  for _ in _dataset(address, 32, str(tmp_path)).take(3):
    pass
  items = server.replay_size(client)
  client.checkpoint()
  first.stop()

  second = server.start_server(None, checkpoint_dir)
  address = f'localhost:{second.port}'
  client = reverb.Client(address)
  assert server.replay_size(client) == items > 250
  info = client.server_info(timeout=5)
  assert info['model_int8'].current_size == 1
  assert info['variables'].current_size == 1
  # The restored counters (inserts and samples so far) still allow sampling:
  # a blocked sampler would end the dataset after its 2 s timeout.
  batches = list(_dataset(address, 32, str(tmp_path)).take(5))
  assert len(batches) == 5
  # The restored items still carry the run key's signatures.
  assert [int(verified_items) for _, verified_items in batches] == [32] * 5
  second.stop()


def test_a_damaged_replay_checkpoint_stops_the_server_and_is_kept(
    cartpole_gin, tmp_path):  # pylint: disable=unused-argument
  checkpoint_dir = str(tmp_path / 'replay_checkpoints')
  first = server.start_server(None, checkpoint_dir)
  address = f'localhost:{first.port}'
  actor.run_actor(str(tmp_path), address, max_env_steps=200)
  reverb.Client(address).checkpoint()
  first.stop()
  [checkpoint] = os.listdir(checkpoint_dir)
  chunks = os.path.join(checkpoint_dir, checkpoint, 'chunks.tfrecord')
  with open(chunks, 'r+b') as f:
    damaged = bytes(b ^ 0x5a for b in f.read(300))
    f.seek(0)
    f.write(damaged)
  files = {name: open(os.path.join(checkpoint_dir, checkpoint, name),
                      'rb').read()
           for name in os.listdir(os.path.join(checkpoint_dir, checkpoint))}
  with pytest.raises(ActorQError, match=(
      rf'^the replay checkpoint in {checkpoint_dir} does not load '
      r'\(corrupted record.*\); it is left as it is')):
    server.start_server(None, checkpoint_dir)
  assert os.listdir(checkpoint_dir) == [checkpoint]
  for name, content in files.items():
    with open(os.path.join(checkpoint_dir, checkpoint, name), 'rb') as f:
      assert f.read() == content, name


def test_a_replay_checkpoint_of_unsigned_items_stops_the_server_and_is_kept(
    cartpole_gin, tmp_path):  # pylint: disable=unused-argument
  # A run directory from before replay was signed: Reverb restores its
  # table as it was, whose items every role would refuse.
  checkpoint_dir = str(tmp_path / 'replay_checkpoints')
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  tables = server.create_tables(env)
  tables[0] = reverb.Table(
      replay.REPLAY_TABLE, reverb.selectors.Uniform(), reverb.selectors.Fifo(),
      1000, reverb.rate_limiters.MinSize(1),
      signature=tensor_spec.add_outer_dim(algorithm.collect_data_spec(env),
                                          algorithm.sequence_length()))
  old = reverb.Server(tables, port=None,
                      checkpointer=reverb.checkpointers.DefaultCheckpointer(
                          checkpoint_dir))
  reverb.Client(f'localhost:{old.port}').checkpoint()
  old.stop()
  [checkpoint] = os.listdir(checkpoint_dir)
  with pytest.raises(ActorQError, match=(
      rf'^the replay checkpoint in {checkpoint_dir} is left as it is: the '
      r'replay server\'s \'replay\' table holds unsigned items')):
    server.start_server(None, checkpoint_dir)
  assert os.listdir(checkpoint_dir) == [checkpoint]


def test_a_replay_service_checkpoints_on_schedule_and_once_at_close(
    cartpole_gin, tmp_path):  # pylint: disable=unused-argument
  root_dir = str(tmp_path)
  service = server.ReplayService(root_dir, portpicker.pick_unused_port(),
                                 checkpoint_interval_s=1.0)
  actor.run_actor(str(tmp_path / 'actor_1'), service.address,
                  max_env_steps=200)
  wait_for(lambda: ((run_directory.read_status(root_dir, 'reverb_server') or
                     records.ServerStatus()).last_checkpoint_items or 0) > 150,
           30,
           'a scheduled replay checkpoint')
  actor.run_actor(str(tmp_path / 'actor_2'), service.address,
                  max_env_steps=200)
  items = server.replay_size(reverb.Client(service.address))
  # Two callers at once (the learner's watchdog and its main thread): one
  # checkpoints and stops the server, the other returns once that is done.
  closers = [threading.Thread(target=service.close) for _ in range(2)]
  for closer in closers:
    closer.start()
  for closer in closers:
    closer.join(timeout=60)
  assert (run_directory.read_status(
      root_dir, 'reverb_server').last_checkpoint_items == items > 300)
  with pytest.raises(ActorQError):
    model_channel.wait_for_server(service.address, timeout_s=1)
  service.close()

  restarted = server.ReplayService(root_dir, portpicker.pick_unused_port())
  assert server.replay_size(reverb.Client(restarted.address)) == items
  restarted.close()
