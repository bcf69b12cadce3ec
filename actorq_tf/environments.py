"""The run's environment, as a TF-Agents PyEnvironment.

A name is a Gym id ('CartPole-v1', 'Pendulum-v1') or a DeepMind Control
Suite task as 'domain-task' ('cartpole-balance', 'humanoid-walk'), whose
observations are flattened to one float32 vector. Any other environment
comes from the user's factory (`load_environment.factory`).
"""
import os
from typing import Callable, Optional, Tuple, Union
import warnings

from absl import logging
import dm_env
import gin
import gym
import numpy as np
import tensorflow as tf
from tf_agents.environments import dm_control_wrapper
from tf_agents.environments import gym_wrapper
from tf_agents.environments import py_environment
from tf_agents.environments import suite_gym
from tf_agents.environments import wrappers
from tf_agents.specs import array_spec
from tf_agents.trajectories.time_step import StepType

from actorq_tf import config
from actorq_tf.errors import ActorQError
from actorq_tf.errors import described

# Nothing renders; without this dm_control looks for an OpenGL backend.
os.environ.setdefault('MUJOCO_GL', 'disable')
try:
  # pylint: disable=g-import-not-at-top,g-bad-import-order
  from dm_control import suite as control_suite
  # pylint: enable=g-import-not-at-top,g-bad-import-order
except ImportError:  # The Control Suite is an extra: actorq-tf[control].
  control_suite = None

# gym 0.23 warns on every seed() call that TF-Agents' wrapper makes.
warnings.filterwarnings('ignore', category=DeprecationWarning, module='gym')
warnings.filterwarnings('ignore', message='.*seed.*', module='gym')


def _control_suite_task(env_name: str):
  """(domain, task) if `env_name` names a Control Suite task, else None."""
  if '-' not in env_name or '-v' in env_name:
    return None
  domain, task = env_name.split('-', 1)
  if control_suite is None:
    raise ActorQError(
        f'{env_name!r} names a Control Suite task (domain-task), and '
        "dm_control is not installed: pip install 'actorq-tf[control]'")
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
def load_environment(env_name: Optional[str] = None,
                     max_episode_steps: int = 0,
                     factory: Union[None, str, Callable[[], object]] = None
                    ) -> py_environment.PyEnvironment:
  """The run's environment, by name or from the user's factory.

  Every role calls this with no arguments, so the gin config alone decides
  which environment a run has, in every process.

  Args:
    env_name: a registered Gym id such as 'CartPole-v1' (a package's own ids
      too: 'my_package:Corridor-v0' imports my_package first), or a Control
      Suite task such as 'cartpole-balance'.
    max_episode_steps: episode step limit; 0 keeps the environment's own.
    factory: instead of a name, a callable with no arguments, or its import
      path ('my_envs.make_corridor'), that returns a TF-Agents
      PyEnvironment, a Gym environment or a dm_control (dm_env) environment;
      the latter two are wrapped as named ones are.

  Observations must be one float32 array or a uint8 image (HxWxC); a dict
  or tuple of vectors is flattened into one float32 vector. Anything else
  is refused here, before any role starts.
  """
  if env_name is None and factory is None:
    raise ActorQError('no environment: bind load_environment.env_name or '
                      'load_environment.factory')
  if env_name is not None and factory is not None:
    raise ActorQError(
        f'load_environment has both a name ({env_name!r}) and a factory; '
        f'bind load_environment.env_name = None to use the factory in place '
        f'of an included config\'s name')
  if factory is not None:
    env = _wrap(_call_factory(factory), max_episode_steps)
  else:
    env = _load_by_name(env_name, max_episode_steps)
  return _with_supported_observations(env)


def _call_factory(factory):
  make = config.resolve_callable(factory, 'load_environment.factory')
  name = getattr(make, '__name__', repr(make))
  try:
    env = make()
  except ActorQError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # The user's code: one line naming it and what it raised.
    raise ActorQError(f'the environment factory {name} failed: '
                      f'{described(e)}') from e
  if not isinstance(env, (py_environment.PyEnvironment, gym.Env,
                          dm_env.Environment)):
    raise ActorQError(f'the environment factory {name} returned a '
                      f'{type(env).__name__}, not a TF-Agents PyEnvironment, '
                      f'a Gym environment or a dm_env (dm_control) '
                      f'environment')
  return env


def _wrap(env, max_episode_steps: int) -> py_environment.PyEnvironment:
  """A factory's environment as a PyEnvironment, wrapped as named ones are."""
  if isinstance(env, gym.Env):
    # Gym's own time limit ends episodes as if the state were terminal
    # (discount 0), so targets would not bootstrap past it; TF-Agents' limit
    # ends them with discount 1, as a time limit should.
    own_limit = 0
    if isinstance(env, gym.wrappers.TimeLimit):
      own_limit = env._max_episode_steps or 0  # pylint: disable=protected-access
      env = env.env
    return suite_gym.wrap_env(env,
                              max_episode_steps=max_episode_steps or own_limit)
  if isinstance(env, dm_env.Environment):
    task = getattr(env, 'task', None)
    wrapped = dm_control_wrapper.DmControlWrapper(env)
    if max_episode_steps:
      wrapped = wrappers.TimeLimit(wrapped, max_episode_steps)
    wrapped = wrappers.FlattenObservationsWrapper(wrapped)
    if task is not None and hasattr(task, 'random'):
      return _SeedableControlSuiteTask(wrapped, task)
    return wrapped
  if max_episode_steps:
    env = wrappers.TimeLimit(env, max_episode_steps)
  return env


def _load_by_name(env_name: str, max_episode_steps: int
                 ) -> py_environment.PyEnvironment:
  control_suite_task = _control_suite_task(env_name)
  if control_suite_task is not None:
    return _wrap(control_suite.load(*control_suite_task), max_episode_steps)
  try:
    gym_spec = gym.spec(env_name)
  except (gym.error.Error, ModuleNotFoundError) as e:
    raise ActorQError(
        f'unknown environment {env_name!r}: not a Gym id ({e}) nor a '
        f'DeepMind Control Suite task such as cartpole-balance; an '
        f'environment of your own goes in load_environment.factory') from e
  return _wrap(gym_spec.make(), max_episode_steps)


def _with_supported_observations(env: py_environment.PyEnvironment
                                ) -> py_environment.PyEnvironment:
  """`env`, its nested vector observations flattened into one; ActorQError
  for observations an exported model cannot take."""
  spec = env.observation_spec()
  if tf.nest.is_nested(spec):
    leaves = tf.nest.flatten(spec)
    images = [s for s in leaves if len(s.shape) > 1]
    if images:
      raise ActorQError(
          f'the observations are a {type(spec).__name__} holding arrays of '
          f'shape {images[0].shape}: only a structure of vectors can be '
          f'flattened into one input; give the model one image instead')
    env = _FlatVectorObservations(env)
    spec = env.observation_spec()
  if spec.dtype == np.uint8 and len(spec.shape) == 3:
    return env
  if spec.dtype != np.float32:
    raise ActorQError(
        f'the observations are {spec.dtype.name} of shape {spec.shape}: '
        f'exported models take float32 arrays or uint8 images (HxWxC); '
        f'cast them in the environment')
  return env


class _FlatVectorObservations(wrappers.PyEnvironmentBaseWrapper):
  """A structure of vectors (a dict or tuple, of any dtypes) as one float32
  vector, its parts concatenated in tf.nest's order."""

  def observation_spec(self):
    size = sum(int(np.prod(s.shape))
               for s in tf.nest.flatten(self._env.observation_spec()))
    return array_spec.ArraySpec((size,), np.float32, 'observation')

  def _reset(self):
    return self._flat(self._env.reset())

  def _step(self, action):
    return self._flat(self._env.step(action))

  @staticmethod
  def _flat(time_step):
    return time_step._replace(observation=np.concatenate(
        [np.asarray(x, np.float32).reshape(-1)
         for x in tf.nest.flatten(time_step.observation)]))


def seed_environment(env: py_environment.PyEnvironment, value: int) -> None:
  """Seeds `env` if it can be seeded; a user's environment without `seed`
  runs unseeded, which the log says once per process."""
  global _unseedable_reported
  try:
    env.seed(value)
  except NotImplementedError:
    if not _unseedable_reported:
      logging.warning('The environment has no seed(): its episodes will not '
                      'repeat with the run\'s seed.')
      _unseedable_reported = True


_unseedable_reported = False


def is_discrete(env: py_environment.PyEnvironment) -> bool:
  """Whether the environment's actions are integers (for random actions;
  which algorithm suits them is its builder's call)."""
  return np.issubdtype(env.action_spec().dtype, np.integer)


# observation, reward, discount, and whether the step ended the episode.
Step = Tuple[np.ndarray, np.float32, np.float32, bool]


class DirectSteps:
  """The actor's hot path into an environment loaded here.

  `reset()` gives the first observation and `step(action)` the next
  observation, reward, discount and whether the episode ended, with the
  values, dtypes and time limit of the TF-Agents environment it was taken
  from, on the same underlying environment (so its seed holds).

  Why not `env.step`: TF-Agents' PyEnvironment.step checks for an
  auto-reset, builds a TimeStep and converts nests at every wrapper layer.
  On this machine that cost 9x a CartPole-v1 gym step (176 us against 10
  us) and 0.75x a walker-stand physics step (921 us against 528 us), more
  than a full-int8 call of a 2048x2048x2048 policy. Environments whose
  wrapper chain is not one this module builds are stepped through
  TF-Agents as before.
  """

  def __init__(self, env: py_environment.PyEnvironment):
    self._env = env
    self._duration: Optional[int] = None
    self._observation_dtype = env.observation_spec().dtype
    self._discrete = is_discrete(env)
    self._gym = None
    self._dm_env = None
    # pylint: disable=protected-access
    inner = env
    if isinstance(inner, _SeedableControlSuiteTask):
      inner = inner._env
      if isinstance(inner, wrappers.FlattenObservationsWrapper):
        inner = self._unwrap_time_limit(inner._env)
        if isinstance(inner, dm_control_wrapper.DmControlWrapper):
          self._dm_env = inner._env
    # pylint: enable=protected-access
    else:
      inner = self._unwrap_time_limit(inner)
      if isinstance(inner, gym_wrapper.GymWrapper):
        self._gym = inner.gym
    self._steps = 0

  def _unwrap_time_limit(self, env):
    if isinstance(env, wrappers.TimeLimit):
      self._duration = env.duration
      return env._env  # pylint: disable=protected-access
    return env

  @property
  def direct(self) -> bool:
    """False if steps go through TF-Agents' wrappers."""
    return self._gym is not None or self._dm_env is not None

  def reset(self) -> np.ndarray:
    self._steps = 0
    if self._gym is not None:
      return np.asarray(self._gym.reset(), self._observation_dtype)
    if self._dm_env is not None:
      return self._flatten(self._dm_env.reset().observation)
    return self._env.reset().observation

  def step(self, action) -> Step:
    self._steps += 1
    out_of_time = self._duration is not None and self._steps >= self._duration
    if self._gym is not None:
      observation, reward, done, _ = self._gym.step(
          action.item() if self._discrete else action)
      return (np.asarray(observation, self._observation_dtype),
              np.float32(reward), np.float32(0.0 if done else 1.0),
              done or out_of_time)
    if self._dm_env is not None:
      time_step = self._dm_env.step(action)
      return (self._flatten(time_step.observation),
              np.float32(time_step.reward or 0.0),
              np.float32(1.0 if time_step.discount is None
                         else time_step.discount),
              time_step.last() or out_of_time)
    time_step = self._env.step(action)
    return (time_step.observation, time_step.reward, time_step.discount,
            time_step.step_type == StepType.LAST)

  @staticmethod
  def _flatten(observation) -> np.ndarray:
    # What DmControlWrapper and FlattenObservationsWrapper do, in their
    # order: each feature to float32, flattened in tf.nest's order.
    return np.concatenate([np.asarray(x, np.float32).reshape(-1)
                           for x in tf.nest.flatten(observation)])


# Random-walk steps whose statistics normalize a quantization-aware
# network's inputs (fixed at creation; checkpoints keep them).
NORMALIZATION_STEPS = 2000


def random_walk_observations(env: py_environment.PyEnvironment, count: int,
                             seed: int = 0) -> np.ndarray:
  """Observations of episodes under uniformly random actions; the
  environment is seeded with `seed` first, so they repeat."""
  rng = np.random.default_rng(seed)
  seed_environment(env, seed)
  spec = env.action_spec()
  observations = []
  time_step = env.reset()
  while len(observations) < count:
    observations.append(time_step.observation)
    if is_discrete(env):
      action = rng.integers(spec.minimum, spec.maximum + 1)
    else:
      action = rng.uniform(spec.minimum, spec.maximum, spec.shape)
    time_step = env.step(np.asarray(action, spec.dtype))
    if time_step.is_last():
      time_step = env.reset()
  return np.array(observations, env.observation_spec().dtype)
