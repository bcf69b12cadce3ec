"""Environments by name, as TF-Agents PyEnvironments.

A name is a Gym id ('CartPole-v1', 'Pendulum-v1') or a DeepMind Control
Suite task as 'domain-task' ('cartpole-balance', 'humanoid-walk'), whose
observations are flattened to one float32 vector.
"""
import os
import warnings

import gin
import gym
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.environments import suite_gym
from tf_agents.environments import wrappers

from actorq_tf.errors import ActorQError

# Nothing renders; without this dm_control looks for an OpenGL backend.
os.environ.setdefault('MUJOCO_GL', 'disable')
# pylint: disable=g-import-not-at-top,g-bad-import-order
# Imported before any gin config is parsed: it registers a configurable.
from dm_control import suite as control_suite
from tf_agents.environments import suite_dm_control
# pylint: enable=g-import-not-at-top,g-bad-import-order

# gym 0.23 warns on every seed() call that TF-Agents' wrapper makes.
warnings.filterwarnings('ignore', category=DeprecationWarning, module='gym')
warnings.filterwarnings('ignore', message='.*seed.*', module='gym')


def _control_suite_task(env_name: str):
  """(domain, task) if `env_name` names a Control Suite task, else None."""
  if '-' not in env_name or '-v' in env_name:
    return None
  domain, task = env_name.split('-', 1)
  task = task.replace('-', '_')
  return (domain, task) if (domain, task) in control_suite.ALL_TASKS else None


class _SeedableControlSuiteTask(wrappers.PyEnvironmentBaseWrapper):
  """Gives a Control Suite environment Gym's `seed`: reseeding the task's
  generator makes the next episodes' initial states repeat."""

  def seed(self, seed):
    self._task.random.seed(seed)

  def __init__(self, env, task):
    super().__init__(env)
    self._task = task

  def _step(self, action):
    return self._env.step(action)

  def _reset(self):
    return self._env.reset()


@gin.configurable
def load_environment(env_name: str = gin.REQUIRED,
                     max_episode_steps: int = 0
                    ) -> py_environment.PyEnvironment:
  """Loads an environment by name; unknown names get a clear error.

  Args:
    env_name: a registered Gym id such as 'CartPole-v1', or a Control Suite
      task such as 'cartpole-balance'.
    max_episode_steps: episode step limit; 0 keeps the environment's own.
  """
  control_suite_task = _control_suite_task(env_name)
  if control_suite_task is not None:
    env = suite_dm_control.load(*control_suite_task)
    task = env.task
    if max_episode_steps:
      env = wrappers.TimeLimit(env, max_episode_steps)
    return _SeedableControlSuiteTask(
        wrappers.FlattenObservationsWrapper(env), task)
  try:
    gym_spec = gym.spec(env_name)
  except gym.error.Error as e:
    raise ActorQError(
        f'unknown environment {env_name!r}: not a Gym id ({e}) nor a '
        f'DeepMind Control Suite task such as cartpole-balance') from e
  gym_env = gym_spec.make()
  # Gym's own time limit ends episodes as if the state were terminal
  # (discount 0), so targets would not bootstrap past it; TF-Agents' limit
  # ends them with discount 1, as a time limit should.
  if isinstance(gym_env, gym.wrappers.TimeLimit):
    gym_env = gym_env.env
  return suite_gym.wrap_env(
      gym_env,
      max_episode_steps=max_episode_steps or gym_spec.max_episode_steps or 0)


def is_discrete(env: py_environment.PyEnvironment) -> bool:
  return np.issubdtype(env.action_spec().dtype, np.integer)


def check_discrete_actions(env: py_environment.PyEnvironment) -> int:
  """Returns the number of actions of a scalar discrete action spec."""
  spec = env.action_spec()
  if not is_discrete(env) or int(np.prod(spec.shape)) != 1:
    raise ActorQError(
        f'DQN needs one discrete action; the environment has {spec}. Use '
        f'a D4PG config (e.g. d4pg_pendulum.gin) for continuous actions')
  return int(spec.maximum - spec.minimum + 1)


def check_continuous_actions(env: py_environment.PyEnvironment) -> int:
  """Returns the size of a bounded, one-dimensional float action spec."""
  spec = env.action_spec()
  if (not np.issubdtype(spec.dtype, np.floating) or len(spec.shape) != 1 or
      not np.all(np.isfinite(spec.minimum)) or
      not np.all(np.isfinite(spec.maximum))):
    raise ActorQError(
        f'D4PG needs a bounded vector of continuous actions; the environment '
        f'has {spec}. Use a DQN config (e.g. dqn_cartpole.gin) for discrete '
        f'actions')
  return int(spec.shape[0])


def policy_output_size(env: py_environment.PyEnvironment) -> int:
  """What an exported policy model outputs per observation: one Q-value per
  action for discrete actions, the action vector for continuous ones."""
  return (check_discrete_actions(env) if is_discrete(env)
          else check_continuous_actions(env))
