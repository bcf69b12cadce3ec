"""The learner's TF-Agents agent."""
import gin
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import py_environment
from tf_agents.networks import network
from tf_agents.specs import tensor_spec
from tf_agents.utils import common


@gin.configurable
def create_dqn_agent(env: py_environment.PyEnvironment,
                     q_network: network.Network,
                     train_step: tf.Variable,
                     learning_rate: float = 1e-3,
                     gamma: float = 0.99,
                     target_update_period: int = 100,
                     target_update_tau: float = 1.0,
                     n_step_update: int = 1,
                     huber_loss: bool = True,
                     gradient_clipping: float = 10.0,
                     double_dqn: bool = True) -> dqn_agent.DqnAgent:
  """A DqnAgent (Double DQN by default) with a target network.

  Exploration lives in the actors, so the agent's own collect policy is
  never used.
  """
  time_step_spec = tensor_spec.from_spec(env.time_step_spec())
  action_spec = tensor_spec.from_spec(env.action_spec())
  loss_fn = (common.element_wise_huber_loss if huber_loss
             else common.element_wise_squared_loss)
  agent_class = dqn_agent.DdqnAgent if double_dqn else dqn_agent.DqnAgent
  agent = agent_class(
      time_step_spec,
      action_spec,
      q_network=q_network,
      optimizer=tf.keras.optimizers.Adam(learning_rate=learning_rate),
      td_errors_loss_fn=loss_fn,
      gamma=gamma,
      n_step_update=n_step_update,
      target_update_period=target_update_period,
      target_update_tau=target_update_tau,
      gradient_clipping=gradient_clipping,
      train_step_counter=train_step)
  agent.initialize()
  return agent
