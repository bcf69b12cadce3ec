"""D4PG (Barth-Maron et al. 2018) as a TF-Agents agent, and its builder.

A deterministic actor, a distributional critic over fixed value atoms, the
categorical projection of n-step targets onto those atoms, and target
networks. Exploration noise is not here: actors add it in Python.
"""
from typing import NamedTuple, Optional

import gin
import numpy as np
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.environments import py_environment
from tf_agents.networks import network
from tf_agents.policies import actor_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories.time_step import StepType
from tf_agents.utils import common

from actorq_tf import config
from actorq_tf import environments
from actorq_tf import exploration
from actorq_tf import model_checks
from actorq_tf import networks
from actorq_tf.builder import AlgorithmBuilder
from actorq_tf.errors import ActorQError


class D4pgLossInfo(NamedTuple):
  actor_loss: tf.Tensor
  critic_loss: tf.Tensor


def categorical_projection(values: tf.Tensor, probabilities: tf.Tensor,
                           atoms: tf.Tensor) -> tf.Tensor:
  """Projects a distribution on arbitrary points onto evenly spaced atoms.

  Each point's probability goes to its two neighbouring atoms in proportion
  to closeness; points outside [atoms[0], atoms[-1]] go to the end atom.
  This is the projection of C51 and D4PG, written as a triangular kernel.

  Args:
    values: [batch, K] positions of the target distribution's points.
    probabilities: [batch, K] their probabilities.
    atoms: [N] evenly spaced, increasing support.

  Returns:
    [batch, N] probabilities on `atoms`.
  """
  spacing = atoms[1] - atoms[0]
  clipped = tf.clip_by_value(values, atoms[0], atoms[-1])
  weights = tf.nn.relu(
      1.0 - tf.abs(clipped[:, :, None] - atoms[None, None, :]) / spacing)
  return tf.reduce_sum(probabilities[:, :, None] * weights, axis=1)


class NStepTargets(NamedTuple):
  returns: tf.Tensor  # [batch] discounted reward sum up to the bootstrap
  bootstrap_discount: tf.Tensor  # [batch] gamma**m times env discounts
  bootstrap_observation: tf.Tensor  # [batch, ...] observation m steps on
  mask: tf.Tensor  # [batch] 1 where the first step is a real transition


def n_step_targets(experience, gamma: float) -> NStepTargets:
  """n-step returns from [batch, n + 1] trajectories.

  A window may reach the end of its episode: the return then stops at the
  episode's last observation and bootstraps from it with the environment's
  discount (0 at a terminal state, 1 at a time limit).
  """
  n = experience.step_type.shape[1] - 1
  not_last = tf.cast(
      tf.not_equal(experience.step_type, StepType.LAST), tf.float32)
  # Transition k counts if no step 0..k is an episode's last.
  valid = tf.math.cumprod(not_last[:, :n], axis=1)
  rewards = tf.cast(experience.reward[:, :n], tf.float32)
  discounts = tf.cast(experience.discount[:, :n], tf.float32)
  discount_before = tf.math.cumprod(discounts, axis=1, exclusive=True)
  gamma_powers = gamma ** tf.range(n, dtype=tf.float32)
  returns = tf.reduce_sum(valid * gamma_powers * discount_before * rewards,
                          axis=1)
  steps = tf.reduce_sum(valid, axis=1)
  env_discount = tf.reduce_prod(valid * discounts + (1.0 - valid), axis=1)
  bootstrap_observation = tf.gather(
      experience.observation, tf.cast(steps, tf.int32), axis=1, batch_dims=1)
  return NStepTargets(returns, gamma ** steps * env_discount,
                      bootstrap_observation, valid[:, 0])


class D4pgAgent(tf_agent.TFAgent):
  """D4PG on trajectories of n + 1 steps.

  Args:
    time_step_spec, action_spec: the environment's, as TensorSpecs.
    actor_network: observation -> action within the action bounds.
    critic_network: (observation, action) -> logits over `num_atoms`.
    actor_optimizer, critic_optimizer: Keras optimizers.
    v_min, v_max: support of the value distribution. Discounted returns
      outside it are clipped to its ends.
    num_atoms: atoms of the value distribution; the critic outputs as many
      logits.
    n_step: steps summed before bootstrapping.
    gamma: discount per step.
    target_update_tau: 1 copies the networks into the targets every
      `target_update_period` steps; smaller values move the targets by that
      fraction (soft updates).
    target_update_period: train steps between target updates.
    gradient_clipping: global norm to clip each network's gradients to.
  """

  def __init__(self, time_step_spec, action_spec,
               actor_network: network.Network,
               critic_network: network.Network,
               actor_optimizer: tf.keras.optimizers.Optimizer,
               critic_optimizer: tf.keras.optimizers.Optimizer,
               v_min: float, v_max: float, num_atoms: int = 51,
               n_step: int = 5, gamma: float = 0.99,
               target_update_tau: float = 0.005,
               target_update_period: int = 1,
               gradient_clipping: Optional[float] = None,
               train_step_counter: Optional[tf.Variable] = None,
               name: Optional[str] = None):
    tf.Module.__init__(self, name=name)
    if v_max <= v_min or num_atoms < 2:
      raise ValueError(f'D4PG needs v_min < v_max and at least 2 atoms; got '
                       f'[{v_min}, {v_max}] with {num_atoms}')
    observation_spec = time_step_spec.observation
    self._actor_network = actor_network
    actor_network.create_variables(observation_spec)
    self._target_actor_network = common.maybe_copy_target_network_with_checks(
        actor_network, None, input_spec=observation_spec,
        name='TargetActorNetwork')
    critic_input_spec = (observation_spec, action_spec)
    self._critic_network = critic_network
    critic_network.create_variables(critic_input_spec)
    self._target_critic_network = common.maybe_copy_target_network_with_checks(
        critic_network, None, input_spec=critic_input_spec,
        name='TargetCriticNetwork')
    # Slots exist before a checkpoint is restored, or Adam's moments would
    # be created afresh at the first step after a resume.
    actor_optimizer.build(actor_network.trainable_variables)
    critic_optimizer.build(critic_network.trainable_variables)
    self._actor_optimizer = actor_optimizer
    self._critic_optimizer = critic_optimizer
    self._atoms = tf.linspace(float(v_min), float(v_max), num_atoms)
    self._gamma = gamma
    self._gradient_clipping = gradient_clipping
    self._target_update_tau = target_update_tau
    self._target_update_period = target_update_period

    policy = actor_policy.ActorPolicy(time_step_spec, action_spec,
                                      actor_network=actor_network, clip=True)
    super().__init__(time_step_spec, action_spec, policy,
                     collect_policy=policy, train_sequence_length=n_step + 1,
                     train_step_counter=train_step_counter)
    self._update_target = common.Periodically(
        self._update_targets, target_update_period, 'update_targets')

  @property
  def actor_network(self) -> network.Network:
    return self._actor_network

  @property
  def critic_network(self) -> network.Network:
    return self._critic_network

  @property
  def atoms(self) -> tf.Tensor:
    return self._atoms

  def _initialize(self):
    self._copy_to_targets(tau=1.0)

  def _update_targets(self):
    return self._copy_to_targets(self._target_update_tau)

  def _copy_to_targets(self, tau):
    return tf.group(
        common.soft_variables_update(
            self._actor_network.variables,
            self._target_actor_network.variables, tau, tau_non_trainable=1.0),
        common.soft_variables_update(
            self._critic_network.variables,
            self._target_critic_network.variables, tau,
            tau_non_trainable=1.0))

  def critic_loss(self, experience, training: bool = False) -> tf.Tensor:
    """Cross-entropy of the critic against projected n-step targets."""
    targets = n_step_targets(experience, self._gamma)
    target_actions, _ = self._target_actor_network(
        targets.bootstrap_observation, training=False)
    target_logits, _ = self._target_critic_network(
        (targets.bootstrap_observation, target_actions), training=False)
    target_points = (targets.returns[:, None] +
                     targets.bootstrap_discount[:, None] * self._atoms[None])
    target_distribution = tf.stop_gradient(categorical_projection(
        target_points, tf.nn.softmax(target_logits), self._atoms))
    logits, _ = self._critic_network(
        (experience.observation[:, 0], experience.action[:, 0]),
        training=training)
    cross_entropy = tf.nn.softmax_cross_entropy_with_logits(
        labels=target_distribution, logits=logits)
    return (tf.reduce_sum(targets.mask * cross_entropy) /
            tf.maximum(tf.reduce_sum(targets.mask), 1.0))

  def actor_loss(self, experience, training: bool = False) -> tf.Tensor:
    """Minus the critic's mean value of the actor's actions."""
    observations = experience.observation[:, 0]
    actions, _ = self._actor_network(observations, training=training)
    logits, _ = self._critic_network((observations, actions), training=False)
    values = tf.reduce_sum(tf.nn.softmax(logits) * self._atoms, axis=-1)
    mask = n_step_targets(experience, self._gamma).mask
    return -tf.reduce_sum(mask * values) / tf.maximum(tf.reduce_sum(mask), 1.0)

  def _train(self, experience, weights=None):
    del weights  # Uniform replay: every item weighs the same.
    critic_loss = self._minimize(
        lambda: self.critic_loss(experience, training=True),
        self._critic_network, self._critic_optimizer)
    actor_loss = self._minimize(
        lambda: self.actor_loss(experience, training=True),
        self._actor_network, self._actor_optimizer)
    self.train_step_counter.assign_add(1)
    self._update_target()
    tf.summary.scalar('losses/actor_loss', actor_loss,
                      step=self.train_step_counter)
    tf.summary.scalar('losses/critic_loss', critic_loss,
                      step=self.train_step_counter)
    return tf_agent.LossInfo(actor_loss + critic_loss,
                             D4pgLossInfo(actor_loss, critic_loss))

  def _minimize(self, loss_fn, net: network.Network,
                optimizer: tf.keras.optimizers.Optimizer) -> tf.Tensor:
    variables = net.trainable_variables
    with tf.GradientTape(watch_accessed_variables=False) as tape:
      tape.watch(variables)
      loss = loss_fn()
    tf.debugging.check_numerics(loss, f'{net.name} loss is NaN or inf')
    gradients = tape.gradient(loss, variables)
    if self._gradient_clipping:
      gradients, _ = tf.clip_by_global_norm(gradients, self._gradient_clipping)
    optimizer.apply_gradients(zip(gradients, variables))
    return loss

  def _loss(self, experience, weights=None, training=False):
    del weights
    actor_loss = self.actor_loss(experience, training=training)
    critic_loss = self.critic_loss(experience, training=training)
    return tf_agent.LossInfo(actor_loss + critic_loss,
                             D4pgLossInfo(actor_loss, critic_loss))


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
                      gradient_clipping: float = 40.0) -> D4pgAgent:
  """A D4PG agent; defaults are Acme's for the Control Suite except the
  soft target updates. See D4pgAgent for the arguments."""
  time_step_spec = tensor_spec.from_spec(env.time_step_spec())
  action_spec = tensor_spec.from_spec(env.action_spec())
  critic_network = networks.DistributionalCriticNetwork(
      (time_step_spec.observation, action_spec), num_atoms=num_atoms)
  agent = D4pgAgent(
      time_step_spec, action_spec, actor_network, critic_network,
      actor_optimizer=tf.keras.optimizers.Adam(actor_learning_rate),
      critic_optimizer=tf.keras.optimizers.Adam(critic_learning_rate),
      v_min=v_min, v_max=v_max, num_atoms=num_atoms, n_step=n_step,
      gamma=gamma, target_update_tau=target_update_tau,
      target_update_period=target_update_period,
      gradient_clipping=gradient_clipping, train_step_counter=train_step)
  agent.initialize()
  return agent


def action_size(env: py_environment.PyEnvironment) -> int:
  """The size of a bounded, one-dimensional float action spec, or
  ActorQError."""
  spec = env.action_spec()
  if (not np.issubdtype(spec.dtype, np.floating) or len(spec.shape) != 1 or
      not np.all(np.isfinite(spec.minimum)) or
      not np.all(np.isfinite(spec.maximum))):
    raise ActorQError(
        f'D4PG needs a bounded vector of continuous actions; the environment '
        f'has {spec}. Use a DQN config (e.g. dqn_cartpole.gin) for discrete '
        f'actions')
  return int(spec.shape[0])


@gin.configurable
def policy_network(env: py_environment.PyEnvironment,
                   factory: Optional[networks.NetworkFactory] = None
                  ) -> network.Network:
  """The deterministic actor network (observation -> action within the
  action bounds) that the learner trains and the actors run.

  Args:
    env: the run's environment.
    factory: None for `networks.create_actor_network` (an MLP, bound on its
      own), or `factory(observation_spec, action_spec)`: e.g. TF-Agents'
      ddpg actor_network.ActorNetwork, a function that returns a
      sequential.Sequential of Keras layers, or its import path.
  """
  observation_spec = tensor_spec.from_spec(env.observation_spec())
  action_spec = tensor_spec.from_spec(env.action_spec())
  if factory is None:
    action_size(env)
    return networks.create_actor_network(
        observation_spec, action_spec,
        example_observations=lambda: environments.random_walk_observations(
            env, environments.NORMALIZATION_STEPS))
  return networks.build_policy_network(
      factory, observation_spec, action_spec, action_size(env),
      'd4pg.policy_network.factory')


class D4pgBuilder(AlgorithmBuilder):
  """Deterministic actor policies with Gaussian exploration, action
  models."""

  name = 'd4pg'

  def policy_output_size(self, env):
    return action_size(env)

  def policy_network(self, env):
    return policy_network(env)

  def users_policy_network(self):
    return config.is_bound(policy_network, 'factory')

  def agent(self, env, policy_network, train_step):
    action_size(env)
    return create_d4pg_agent(env, policy_network, train_step)

  def sequence_length(self):
    return config.bound_parameter(create_d4pg_agent, 'n_step') + 1

  def explorer(self, env, actor_index, num_actors, seed):
    return exploration.GaussianNoise(
        env.action_spec(), exploration.actor_sigma(actor_index, num_actors),
        seed=seed)

  def model_outputs(self, env):
    return model_checks.ActionOutputs(env.action_spec())

  def greedy_actions(self, outputs, action_spec):
    return tf.clip_by_value(outputs, action_spec.minimum, action_spec.maximum)

  def model_policy(self, model):
    return model.outputs  # Exploration clips them.

  def model_actions(self, model, observations, action_spec):
    return np.clip(model.outputs(observations), action_spec.minimum,
                   action_spec.maximum)

  def stock_policy(self, env, policy_network):
    return actor_policy.ActorPolicy(
        tensor_spec.from_spec(env.time_step_spec()),
        tensor_spec.from_spec(env.action_spec()),
        actor_network=policy_network, clip=True)
