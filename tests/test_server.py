"""Replay checkpoints: what a restarted server restores, and that the
restored rate limiter lets the learner sample at once."""
import reverb
import tensorflow as tf

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import dqn
from actorq_tf import environments
from actorq_tf import replay
from actorq_tf import server
from helpers import publish_policy


def _dataset(address, batch_size):
  env = environments.load_environment()
  agent = dqn.create_dqn_agent(env, agents.builder().policy_network(env),
                                  tf.Variable(0, dtype=tf.int64))
  return replay.replay_dataset(agent.collect_data_spec,
                               agent.train_sequence_length, address,
                               batch_size, rate_limiter_timeout_ms=2_000)


def test_a_restarted_server_restores_replay_models_and_sampling(
    cartpole_gin, tmp_path):  # pylint: disable=unused-argument
  checkpoint_dir = str(tmp_path / 'replay_checkpoints')
  first = server.start_server(None, checkpoint_dir)
  address = f'localhost:{first.port}'
  actor.run_actor(str(tmp_path), address, max_env_steps=300)
  publish_policy(address, version=7)
  client = reverb.Client(address)
  for _ in _dataset(address, 32).take(3):
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
  batches = list(_dataset(address, 32).take(5))
  assert len(batches) == 5
  second.stop()
