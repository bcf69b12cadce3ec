"""What an algorithm decides, in one place: its builder.

The launcher, actor loop, learner loop, evaluator, exporter and benchmarks
ask the configured builder (`agents.builder()`) and never branch on the
algorithm's name, as Acme's agent builders serve its experiment layout.
(Uniformly random actions, the environment's and not an algorithm's, are
drawn from the action spec directly.) A builder knows:
  - whether the environment's actions suit it, and the policy network's
    output size (the exported model's);
  - the policy network (what actors run) and the agent (what the learner
    trains);
  - the replay items' spec and length, without building an agent (the
    Reverb server needs them, not optimizers and target networks);
  - the exploration each actor adds in Python;
  - the meaning of the exported model's outputs (Q-values or an action),
    how it is readied for conversion and checked;
  - the greedy action, from the network's outputs in TF and from a TFLite
    model in Python, and TF-Agents' own greedy policy for the stock actor.
"""
import abc
from typing import Callable, Tuple

import numpy as np
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.environments import py_environment
from tf_agents.networks import network
from tf_agents.policies import tf_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import trajectory

from actorq_tf.interpreter import TFLiteModel


class AlgorithmBuilder(abc.ABC):
  """The parts of a run that depend on its algorithm."""

  name: str

  @abc.abstractmethod
  def policy_output_size(self, env: py_environment.PyEnvironment) -> int:
    """Values the policy network outputs per observation; ActorQError if
    the environment's actions do not suit the algorithm."""

  @abc.abstractmethod
  def policy_network(self, env: py_environment.PyEnvironment
                    ) -> network.Network:
    """The configured policy network: what the actors run."""

  @abc.abstractmethod
  def agent(self, env: py_environment.PyEnvironment,
            policy_network: network.Network,
            train_step: tf.Variable) -> tf_agent.TFAgent:
    """The configured agent that trains `policy_network`."""

  def users_policy_network(self) -> bool:
    """Whether the policy network comes from the user's factory rather than
    the library's own (which are known to convert): launches try to convert
    a user's network before anything starts."""
    return False

  def create_agent(self, env: py_environment.PyEnvironment,
                   train_step: tf.Variable
                  ) -> Tuple[tf_agent.TFAgent, network.Network]:
    """The agent and its policy network, for the learner."""
    policy_network = self.policy_network(env)
    return self.agent(env, policy_network, train_step), policy_network

  @abc.abstractmethod
  def sequence_length(self) -> int:
    """Steps per replay item: the agent's `train_sequence_length`."""

  def collect_data_spec(self, env: py_environment.PyEnvironment):
    """The replay items' step spec (the agent's `collect_data_spec`):
    actors send no policy info, exploration being theirs."""
    time_step_spec = tensor_spec.from_spec(env.time_step_spec())
    return trajectory.from_transition(
        time_step_spec,
        policy_step.PolicyStep(tensor_spec.from_spec(env.action_spec()), (),
                               ()),
        time_step_spec)

  @abc.abstractmethod
  def explorer(self, env: py_environment.PyEnvironment, actor_index: int,
               num_actors: int, seed: int):
    """Actor `actor_index`'s exploration (see `exploration`): `act(greedy
    action or None, env step)` and `summary(env step)`."""

  @abc.abstractmethod
  def model_outputs(self, env: py_environment.PyEnvironment):
    """What exported models output (`model_checks.QValueOutputs` or
    `model_checks.ActionOutputs`): how the exporter readies and checks them."""

  @abc.abstractmethod
  def greedy_actions(self, outputs: tf.Tensor,
                     action_spec: tensor_spec.BoundedTensorSpec) -> tf.Tensor:
    """Actions, within bounds, from a batch of the policy network's
    outputs (in TF, for fp32 evaluation)."""

  @abc.abstractmethod
  def model_policy(self, model: TFLiteModel
                  ) -> Callable[[np.ndarray], object]:
    """The TFLite model's own method that gives its greedy actions for a
    batch of observations (one per environment of an actor), as the actor's
    exploration takes them: unclipped, no call layer added on the actor's
    hot path."""

  @abc.abstractmethod
  def model_actions(self, model: TFLiteModel, observations: np.ndarray,
                    action_spec) -> np.ndarray:
    """Greedy actions, within bounds, of a TFLite model for a batch."""

  @abc.abstractmethod
  def stock_policy(self, env: py_environment.PyEnvironment,
                   policy_network: network.Network) -> tf_policy.TFPolicy:
    """TF-Agents' own greedy policy over `policy_network` (the `tf`
    actor's)."""
