"""D4PG: the projection, n-step targets, learning on a fixed batch, specs."""
import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType
from tf_agents.utils import common

from actorq_tf import agents
from actorq_tf import config
from actorq_tf import d4pg
from actorq_tf import environments
from actorq_tf import networks
from actorq_tf.errors import ActorQError

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


@pytest.fixture
def pendulum_config():
  config.parse_gin(['d4pg_pendulum.gin'], [
      'create_actor_network.fc_layer_params = (32, 32)',
      'DistributionalCriticNetwork.fc_layer_params = (64, 64)',
      'create_d4pg_agent.critic_learning_rate = 1e-3'])
  yield
  gin.clear_config()


def test_projection_matches_a_hand_worked_example():
  atoms = tf.constant([0.0, 1.0, 2.0])
  values = tf.constant([[0.5, 2.7, -1.0], [1.25, 1.0, 0.0]])
  probabilities = tf.constant([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2]])
  projected = d4pg.categorical_projection(values, probabilities, atoms)
  # Row 1: 0.5 splits half-half over atoms 0 and 1 (0.25 each); 2.7 is
  # clipped to atom 2; -1 to atom 0. Row 2: 1.25 gives 0.75 of 0.4 to atom 1
  # and 0.25 of it to atom 2; 1.0 and 0.0 land on their atoms.
  np.testing.assert_allclose(projected.numpy(), [[0.45, 0.25, 0.3],
                                                 [0.2, 0.7, 0.1]], atol=1e-6)
  np.testing.assert_allclose(tf.reduce_sum(projected, -1), [1.0, 1.0],
                             atol=1e-6)


def _trajectories(step_types, rewards, discounts, observations):
  step_types = tf.constant(step_types, tf.int32)
  batch, length = step_types.shape
  observations = tf.constant(observations, tf.float32)[..., None]
  return trajectory_lib.Trajectory(
      step_type=step_types, observation=observations,
      action=tf.zeros([batch, length, 1]), policy_info=(),
      next_step_type=tf.zeros([batch, length], tf.int32),
      reward=tf.constant(rewards, tf.float32),
      discount=tf.constant(discounts, tf.float32))


def test_n_step_targets_stop_at_the_end_of_an_episode():
  gamma = 0.5
  experience = _trajectories(
      step_types=[[MID, MID, MID, MID],     # three whole steps
                  [MID, MID, LAST, FIRST],  # time limit after two steps
                  [MID, MID, LAST, FIRST],  # terminal after two steps
                  [LAST, FIRST, MID, MID]],  # a boundary: no transition
      rewards=[[1, 2, 4, 8], [1, 2, 99, 99], [1, 2, 99, 99], [9, 9, 9, 9]],
      discounts=[[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]],
      observations=[[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33],
                    [40, 41, 42, 43]])
  targets = d4pg.n_step_targets(experience, gamma)
  np.testing.assert_allclose(targets.returns[:3], [1 + 1 + 1, 1 + 1, 1 + 1])
  np.testing.assert_allclose(targets.bootstrap_discount[:3],
                             [0.125, 0.25, 0.0])
  np.testing.assert_allclose(targets.bootstrap_observation[:3, 0],
                             [13, 22, 32])
  np.testing.assert_allclose(targets.mask, [1, 1, 1, 0])


def test_critic_loss_falls_on_a_fixed_batch(pendulum_config):
  del pendulum_config
  networks.set_seed(0)
  env = environments.load_environment()
  agent, _ = agents.builder().create_agent(env, tf.Variable(0, dtype=tf.int64))
  rng = np.random.default_rng(0)
  batch, length = 64, agent.train_sequence_length
  # Terminal transitions: each target is a point (its reward), whose
  # projection has an entropy of at most ln 2, far under the untrained
  # critic's ln 51.
  experience = _trajectories(
      step_types=np.full((batch, length), MID),
      rewards=-rng.uniform(0, 1500, (batch, length)),
      discounts=np.zeros((batch, length)),
      observations=np.zeros((batch, length)))
  experience = experience._replace(
      observation=tf.constant(rng.uniform(-1, 1, (batch, length, 3)),
                              tf.float32),
      action=tf.constant(rng.uniform(-2, 2, (batch, length, 1)), tf.float32))
  train = tf.function(agent.train)
  first = float(agent.critic_loss(experience))
  for _ in range(300):
    train(experience)
  last = float(agent.critic_loss(experience))
  assert first > 3.5
  assert last < 0.6 * first, (first, last)
  assert int(agent.train_step_counter) == 300


def test_actor_network_stays_within_the_action_bounds(pendulum_config):
  del pendulum_config
  env = environments.load_environment()
  agent, actor_network = agents.builder().create_agent(
      env, tf.Variable(0, dtype=tf.int64))
  assert actor_network is agent.actor_network
  weights = actor_network.get_weights()
  actor_network.set_weights([w * 100 for w in weights])  # saturate tanh
  actions, _ = actor_network(
      tf.constant(np.random.default_rng(0).normal(size=(256, 3)) * 10,
                  tf.float32))
  assert np.all(np.abs(actions.numpy()) <= 2.0 + 1e-6)
  assert np.abs(actions.numpy()).max() > 1.9


def test_algorithm_and_action_kind_must_match():
  try:
    config.parse_gin(['d4pg_pendulum.gin'],
                     ["load_environment.env_name = 'CartPole-v1'"])
    with pytest.raises(ActorQError, match='D4PG needs .* continuous'):
      agents.check_environment(environments.load_environment())
    gin.clear_config()
    config.parse_gin(['dqn_cartpole.gin'],
                     ["load_environment.env_name = 'Pendulum-v1'"])
    with pytest.raises(ActorQError, match='DQN needs one discrete action'):
      agents.check_environment(environments.load_environment())
    gin.clear_config()
    config.parse_gin([], ["agent_algorithm.name = 'ppo'"])
    with pytest.raises(ActorQError, match='unknown agent algorithm'):
      agents.agent_algorithm()
  finally:
    gin.clear_config()


def test_a_checkpoint_restores_networks_targets_and_optimizers(
    pendulum_config, tmp_path):
  del pendulum_config
  env = environments.load_environment()
  rng = np.random.default_rng(0)

  def trained_agent(train_steps):
    train_step = tf.Variable(0, dtype=tf.int64)
    agent, _ = agents.builder().create_agent(env, train_step)
    length = agent.train_sequence_length
    experience = _trajectories(
        step_types=np.full((8, length), MID),
        rewards=-rng.uniform(0, 16, (8, length)),
        discounts=np.ones((8, length)), observations=np.zeros((8, length)))
    experience = experience._replace(observation=tf.constant(
        rng.uniform(-1, 1, (8, length, 3)), tf.float32))
    for _ in range(train_steps):
      agent.train(experience)
    return agent, train_step

  agent, train_step = trained_agent(5)
  checkpointer = common.Checkpointer(str(tmp_path), agent=agent,
                                     train_step=train_step)
  checkpointer.save(train_step)

  restored, restored_step = trained_agent(0)
  common.Checkpointer(str(tmp_path), agent=restored,
                      train_step=restored_step).initialize_or_restore()
  assert int(restored_step) == 5
  # pylint: disable=protected-access
  for original, copy in [
      (agent.actor_network, restored.actor_network),
      (agent.critic_network, restored.critic_network),
      (agent._target_actor_network, restored._target_actor_network),
      (agent._target_critic_network, restored._target_critic_network)]:
    for a, b in zip(original.get_weights(), copy.get_weights()):
      np.testing.assert_array_equal(a, b)
  for original, copy in [
      (agent._critic_optimizer, restored._critic_optimizer),
      (agent._actor_optimizer, restored._actor_optimizer)]:
    assert int(copy.iterations) == 5
    assert len(copy.variables) == len(original.variables) > 1
    for a, b in zip(original.variables, copy.variables):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
