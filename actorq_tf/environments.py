"""Environments by name, as TF-Agents PyEnvironments."""
import warnings

import gin
import gym
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.environments import suite_gym

from actorq_tf.errors import ActorQError

# gym 0.23 warns on every seed() call that TF-Agents' wrapper makes.
warnings.filterwarnings('ignore', category=DeprecationWarning, module='gym')
warnings.filterwarnings('ignore', message='.*seed.*', module='gym')


@gin.configurable
def load_environment(env_name: str = gin.REQUIRED,
                     max_episode_steps: int = 0
                    ) -> py_environment.PyEnvironment:
  """Loads a Gym environment by name; unknown names get a clear error.

  Args:
    env_name: a registered Gym id such as 'CartPole-v1'.
    max_episode_steps: episode step limit; 0 keeps the environment's own.
  """
  try:
    gym.spec(env_name)
  except gym.error.Error as e:
    raise ActorQError(f'unknown environment {env_name!r}: {e}') from e
  return suite_gym.load(env_name, max_episode_steps=max_episode_steps or None)


def check_discrete_actions(env: py_environment.PyEnvironment) -> int:
  """Returns the number of actions of a scalar discrete action spec."""
  spec = env.action_spec()
  if not np.issubdtype(spec.dtype, np.integer) or int(np.prod(spec.shape)) != 1:
    raise ActorQError(
        f'DQN needs one discrete action; the environment has {spec}')
  return int(spec.maximum - spec.minimum + 1)
