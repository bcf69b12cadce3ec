"""The learner's TF-Agents agent: DQN for discrete actions, D4PG for
continuous ones, chosen by `agent_algorithm.name` in the gin config."""
from typing import Tuple

import gin
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import py_environment
from tf_agents.networks import network
from tf_agents.specs import tensor_spec
from tf_agents.utils import common

from actorq_tf import d4pg
from actorq_tf import environments
from actorq_tf import networks
from actorq_tf.errors import ActorQError

ALGORITHMS = ('dqn', 'd4pg')


@gin.configurable
def agent_algorithm(name: str = 'dqn') -> str:
  """The configured algorithm: 'dqn' or 'd4pg'."""
  if name not in ALGORITHMS:
    raise ActorQError(f'unknown agent algorithm {name!r}; expected one of '
                      f'{ALGORITHMS}')
  return name


def check_environment(env: py_environment.PyEnvironment) -> str:
  """The algorithm, if it fits the environment's actions; else ActorQError."""
  algorithm = agent_algorithm()
  if algorithm == 'dqn':
    environments.check_discrete_actions(env)
  else:
    environments.check_continuous_actions(env)
  return algorithm


def create_agent(env: py_environment.PyEnvironment, train_step: tf.Variable
                ) -> Tuple[tf_agent.TFAgent, network.Network]:
  """The configured agent and its policy network (what actors run)."""
  algorithm = check_environment(env)
  policy_network = networks.policy_network_for(env)
  if algorithm == 'dqn':
    return create_dqn_agent(env, policy_network, train_step), policy_network
  return create_d4pg_agent(env, policy_network, train_step), policy_network


@gin.configurable
def create_dqn_agent(env: py_environment.PyEnvironment,
                     q_network: network.Network,
                     train_step: tf.Variable,
                     learning_rate: float = 1e-3,
                     learning_rate_decay_steps: int = 0,
                     final_learning_rate: float = 0.0,
                     gamma: float = 0.99,
                     target_update_period: int = 100,
                     target_update_tau: float = 1.0,
                     n_step_update: int = 1,
                     huber_loss: bool = True,
                     gradient_clipping: float = 10.0,
                     double_dqn: bool = True) -> dqn_agent.DqnAgent:
  """A DqnAgent (Double DQN by default) with a target network.

  Exploration lives in the actors, so the agent's own collect policy is
  never used. With `learning_rate_decay_steps` the learning rate falls
  linearly to `final_learning_rate` over that many train steps and stays
  there.
  """
  time_step_spec = tensor_spec.from_spec(env.time_step_spec())
  action_spec = tensor_spec.from_spec(env.action_spec())
  loss_fn = (common.element_wise_huber_loss if huber_loss
             else common.element_wise_squared_loss)
  agent_class = dqn_agent.DdqnAgent if double_dqn else dqn_agent.DqnAgent
  if learning_rate_decay_steps:
    learning_rate = tf.keras.optimizers.schedules.PolynomialDecay(
        learning_rate, learning_rate_decay_steps, final_learning_rate)
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


@gin.configurable
def create_d4pg_agent(env: py_environment.PyEnvironment,
                      actor_network: network.Network,
                      train_step: tf.Variable,
                      actor_learning_rate: float = 1e-4,
                      critic_learning_rate: float = 1e-4,
                      v_min: float = -150.0,
                      v_max: float = 150.0,
                      num_atoms: int = 51,
                      n_step: int = 5,
                      gamma: float = 0.99,
                      target_update_tau: float = 0.005,
                      target_update_period: int = 1,
                      gradient_clipping: float = 40.0) -> d4pg.D4pgAgent:
  """A D4PG agent; defaults are Acme's for the Control Suite except the
  soft target updates. See d4pg.D4pgAgent for the arguments."""
  time_step_spec = tensor_spec.from_spec(env.time_step_spec())
  action_spec = tensor_spec.from_spec(env.action_spec())
  critic_network = networks.DistributionalCriticNetwork(
      (time_step_spec.observation, action_spec), num_atoms=num_atoms)
  agent = d4pg.D4pgAgent(
      time_step_spec, action_spec, actor_network, critic_network,
      actor_optimizer=tf.keras.optimizers.Adam(actor_learning_rate),
      critic_optimizer=tf.keras.optimizers.Adam(critic_learning_rate),
      v_min=v_min, v_max=v_max, num_atoms=num_atoms, n_step=n_step,
      gamma=gamma, target_update_tau=target_update_tau,
      target_update_period=target_update_period,
      gradient_clipping=gradient_clipping, train_step_counter=train_step)
  agent.initialize()
  return agent
