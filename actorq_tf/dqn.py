"""DQN: the builder of Double DQN runs, for discrete actions.

Actors run the Q-network as an int8 model and act epsilon-greedy on its
argmax; the learner trains TF-Agents' DqnAgent (Double DQN by default).
"""
from typing import Optional, Sequence, Tuple

import gin
import numpy as np
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import py_environment
from tf_agents.networks import network
from tf_agents.policies import greedy_policy
from tf_agents.policies import q_policy
from tf_agents.specs import tensor_spec
from tf_agents.utils import common

from actorq_tf import config
from actorq_tf import environments
from actorq_tf import exploration
from actorq_tf import model_checks
from actorq_tf import networks
from actorq_tf.builder import AlgorithmBuilder
from actorq_tf.errors import ActorQError

def number_of_actions(env: py_environment.PyEnvironment) -> int:
  """The number of actions of a scalar discrete action spec, or
  ActorQError."""
  spec = env.action_spec()
  if (not np.issubdtype(spec.dtype, np.integer) or
      int(np.prod(spec.shape)) != 1):
    raise ActorQError(
        f'DQN needs one discrete action; the environment has {spec}. Use '
        f'a D4PG config (e.g. d4pg_pendulum.gin) for continuous actions')
  return int(spec.maximum - spec.minimum + 1)


@gin.configurable
def policy_network(env: py_environment.PyEnvironment,
                   factory: Optional[networks.NetworkFactory] = None
                  ) -> network.Network:
  """The Q-network (observation -> one Q-value per action) that the learner
  trains and the actors run.

  Args:
    env: the run's environment.
    factory: None for `networks.create_q_network` (an MLP, bound on its
      own), or `factory(observation_spec, action_spec)`: TF-Agents'
      q_network.QNetwork (`dqn.policy_network.factory = @QNetwork`, its
      conv_layer_params and fc_layer_params bound on it), a function that
      returns a sequential.Sequential of Keras layers, or its import path.
  """
  observation_spec = tensor_spec.from_spec(env.observation_spec())
  if factory is None:
    return networks.create_q_network(
        observation_spec, number_of_actions(env),
        example_observations=lambda: environments.random_walk_observations(
            env, environments.NORMALIZATION_STEPS))
  return networks.build_policy_network(
      factory, observation_spec, tensor_spec.from_spec(env.action_spec()),
      number_of_actions(env), 'dqn.policy_network.factory')


@gin.configurable
def epsilon_greedy(num_actions: int, actor_index: int, num_actors: int,
                   seed: int, decay_steps: int = 10_000,
                   random_action_repeat_exponent: float = 0.0
                  ) -> exploration.EpsilonGreedy:
  """Actor `actor_index`'s epsilon-greedy exploration.

  Args:
    num_actions: the environment's.
    actor_index: sets the final epsilon (see `exploration.actor_epsilon`).
    num_actors: how many actors the run has.
    seed: the actor's seed.
    decay_steps: env steps over which epsilon falls from 1 to this actor's
      final epsilon.
    random_action_repeat_exponent: above 1, a random action is held for a
      zeta-distributed number of steps (see `exploration.EpsilonGreedy`);
      0 draws one per step.
  """
  return exploration.EpsilonGreedy(
      num_actions,
      final_epsilon=exploration.actor_epsilon(actor_index, num_actors),
      decay_steps=decay_steps, seed=seed,
      repeat_exponent=random_action_repeat_exponent)


class DqnBuilder(AlgorithmBuilder):
  """Q-network policies, epsilon-greedy actors, Q-value models."""

  name = 'dqn'

  def policy_output_size(self, env):
    return number_of_actions(env)

  def policy_network(self, env):
    return policy_network(env)

  def users_policy_network(self):
    return config.is_bound(policy_network, 'factory')

  def agent(self, env, policy_network, train_step):
    number_of_actions(env)
    return create_dqn_agent(env, policy_network, train_step)

  def sequence_length(self):
    return config.bound_parameter(create_dqn_agent, 'n_step_update') + 1

  def explorer(self, env, actor_index, num_actors, seed):
    return epsilon_greedy(number_of_actions(env), actor_index, num_actors,
                          seed)

  def model_outputs(self, env):
    return model_checks.QValueOutputs()

  def greedy_actions(self, outputs, action_spec):
    del action_spec  # An argmax is always an action.
    return tf.argmax(outputs, axis=-1)

  def model_policy(self, model):
    return model.greedy_actions

  def model_actions(self, model, observations, action_spec):
    del action_spec  # An argmax is always an action.
    return model.greedy_actions(observations)

  def stock_policy(self, env, policy_network):
    # A QPolicy's action samples its softmax over Q-values; DqnAgent's
    # greedy policy takes their argmax, as the TFLite actors do.
    return greedy_policy.GreedyPolicy(q_policy.QPolicy(
        tensor_spec.from_spec(env.time_step_spec()),
        tensor_spec.from_spec(env.action_spec()), q_network=policy_network))


class PiecewiseLinearLearningRate(
    tf.keras.optimizers.schedules.LearningRateSchedule):
  """A learning rate linear between (train step, rate) points."""

  def __init__(self, initial_rate: float,
               points: Sequence[Tuple[int, float]]):
    steps = [0] + [int(step) for step, _ in points]
    if any(later <= earlier for earlier, later in zip(steps, steps[1:])):
      raise ActorQError(
          'learning_rate_points must have increasing train steps above 0, '
          f'got {list(points)}')
    self._steps = tf.constant(steps, tf.float32)
    self._rates = tf.constant(
        [initial_rate] + [float(rate) for _, rate in points], tf.float32)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    segment = tf.clip_by_value(
        tf.searchsorted(self._steps, [step], side='right')[0] - 1,
        0, len(self._steps) - 2)
    start, end = self._steps[segment], self._steps[segment + 1]
    fraction = tf.clip_by_value((step - start) / (end - start), 0.0, 1.0)
    return self._rates[segment] + fraction * (
        self._rates[segment + 1] - self._rates[segment])


@gin.configurable
def create_dqn_agent(env: py_environment.PyEnvironment,
                     q_network: network.Network,
                     train_step: tf.Variable,
                     learning_rate: float = 1e-3,
                     learning_rate_points: Sequence[Tuple[int, float]] = (),
                     gamma: float = 0.99,
                     target_update_period: int = 100,
                     target_update_tau: float = 1.0,
                     n_step_update: int = 1,
                     huber_loss: bool = True,
                     gradient_clipping: float = 10.0,
                     double_dqn: bool = True) -> dqn_agent.DqnAgent:
  """A DqnAgent (Double DQN by default) with a target network.

  Exploration lives in the actors, so the agent's own collect policy is
  never used. `learning_rate_points` are (train step, learning rate) pairs
  in increasing order of train steps: the rate runs linearly from
  `learning_rate` at step 0 through each of them and stays at the last.
  """
  time_step_spec = tensor_spec.from_spec(env.time_step_spec())
  action_spec = tensor_spec.from_spec(env.action_spec())
  loss_fn = (common.element_wise_huber_loss if huber_loss
             else common.element_wise_squared_loss)
  agent_class = dqn_agent.DdqnAgent if double_dqn else dqn_agent.DqnAgent
  if learning_rate_points:
    learning_rate = PiecewiseLinearLearningRate(learning_rate,
                                                learning_rate_points)
  optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)
  # Slots exist before a checkpoint is restored, or Adam's moments would be
  # created afresh at the first step after a resume.
  optimizer.build(q_network.trainable_variables)
  agent = agent_class(
      time_step_spec,
      action_spec,
      q_network=q_network,
      optimizer=optimizer,
      td_errors_loss_fn=loss_fn,
      gamma=gamma,
      n_step_update=n_step_update,
      target_update_period=target_update_period,
      target_update_tau=target_update_tau,
      gradient_clipping=gradient_clipping,
      train_step_counter=train_step)
  agent.initialize()
  return agent
