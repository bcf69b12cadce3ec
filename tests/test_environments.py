"""Environments by name (Gym and the Control Suite) and from the user's
factories: wrapping, flattening, limits, seeds, errors."""
import gin
import numpy as np
import pytest

from tf_agents.environments import py_environment
from tf_agents.specs import array_spec

from actorq_tf import config
from actorq_tf import d4pg
from actorq_tf import environments
from actorq_tf.errors import ActorQError


def test_control_suite_tasks_load_flat_and_seeded():
  env = environments.load_environment('cartpole-balance')
  assert env.observation_spec().shape == (5,)
  assert env.observation_spec().dtype == np.float32
  assert d4pg.action_size(env) == 1
  env.seed(7)
  first = env.reset().observation
  env.seed(7)
  np.testing.assert_array_equal(env.reset().observation, first)
  env.seed(8)
  assert np.any(env.reset().observation != first)
  with pytest.raises(ActorQError, match='Control Suite task'):
    environments.load_environment('cartpole-wobble')


@pytest.mark.parametrize('env_name,action', [
    ('Pendulum-v1', np.zeros(1, np.float32)),
    ('MountainCar-v0', np.int64(1)),
])
def test_a_time_limit_is_not_a_terminal_state(env_name, action):
  env = environments.load_environment(env_name, max_episode_steps=30)
  time_step, steps = env.reset(), 0
  while not time_step.is_last():
    time_step = env.step(action)
    steps += 1
  assert steps == 30
  assert time_step.discount == 1.0  # targets bootstrap past the limit


def test_a_terminal_state_has_discount_zero():
  env = environments.load_environment('CartPole-v1')
  time_step = env.reset()
  while not time_step.is_last():
    time_step = env.step(np.int64(0))  # always push left: the pole falls
  assert time_step.discount == 0.0


@pytest.mark.parametrize('gin_file, bindings', [
    ('dqn_cartpole.gin', []),
    ('d4pg_pendulum.gin', []),
    ('d4pg_cartpole_balance.gin', ['load_environment.max_episode_steps = 120']),
])
def test_direct_steps_see_what_the_tf_agents_environment_gives(
    gin_file, bindings):
  config.parse_gin([gin_file], bindings)
  try:
    stock, direct_env = (environments.load_environment() for _ in range(2))
    stock.seed(3)
    direct_env.seed(3)
    direct = environments.DirectSteps(direct_env)
    assert direct.direct  # not through TF-Agents' wrappers
    spec = stock.action_spec()
    rng = np.random.default_rng(0)
    time_step, observation = stock.reset(), direct.reset()
    episodes = 0
    for _ in range(700):
      np.testing.assert_array_equal(time_step.observation, observation)
      assert time_step.observation.dtype == observation.dtype
      if environments.is_discrete(stock):
        action = rng.integers(spec.minimum, spec.maximum + 1)
      else:
        action = rng.uniform(spec.minimum, spec.maximum, spec.shape)
      action = np.asarray(action, spec.dtype)
      time_step = stock.step(action)
      observation, reward, discount, last = direct.step(action)
      assert (reward, reward.dtype) == (time_step.reward,
                                        time_step.reward.dtype)
      assert (discount, discount.dtype) == (time_step.discount,
                                            time_step.discount.dtype)
      assert last == time_step.is_last()
      if last:
        np.testing.assert_array_equal(time_step.observation, observation)
        episodes += 1
        time_step, observation = stock.step(action), direct.reset()
        assert time_step.is_first()
    assert episodes >= 3  # CartPole ends by termination, the others by time
  finally:
    gin.clear_config()


# The user's own environments: a factory (callable or import path) that
# returns a PyEnvironment, a Gym or a dm_control environment.

_SLIDER_XML = """
<mujoco>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" range="-1 1"/>
      <geom type="box" size=".1 .1 .1" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="slider" ctrllimited="true" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def _slider_task():
  """A dm_control task of the user's own domain, outside the suite."""
  # pylint: disable=g-import-not-at-top
  from dm_control.rl import control
  from dm_control.suite import base
  from dm_control import mujoco

  class Centre(base.Task):

    def initialize_episode(self, physics):
      physics.named.data.qpos['slider'] = self.random.uniform(-0.5, 0.5)

    def get_observation(self, physics):
      return {'position': physics.position().copy(),
              'velocity': physics.velocity().copy()}

    def get_reward(self, physics):
      return float(abs(physics.position()[0]) < 0.1)

  return control.Environment(mujoco.Physics.from_xml_string(_SLIDER_XML),
                             Centre(random=0), time_limit=2.0)


def test_a_factory_gives_a_py_environment_as_it_is():
  from actorq_tf import games  # pylint: disable=g-import-not-at-top
  env = environments.load_environment(factory=lambda: games.Catch(rows=6))
  spec = env.observation_spec()
  assert (spec.shape, spec.dtype) == ((6, 5, 1), np.uint8)
  assert env.reset().observation.dtype == np.uint8


def test_a_factory_by_import_path_gives_a_gym_environment_wrapped():
  env = environments.load_environment(
      factory='gym.envs.classic_control.cartpole:CartPoleEnv',
      max_episode_steps=20)
  assert environments.DirectSteps(env).direct
  time_step, steps = env.reset(), 0
  while not time_step.is_last():
    time_step = env.step(np.int64(steps % 2))
    steps += 1
  assert steps <= 20


def test_a_dm_control_task_outside_the_suite_loads_flat_and_seeded():
  env = environments.load_environment(factory=_slider_task)
  spec = env.observation_spec()
  assert (spec.shape, spec.dtype) == ((2,), np.float32)
  assert environments.DirectSteps(env).direct
  env.seed(3)
  first = env.reset().observation
  env.seed(3)
  np.testing.assert_array_equal(env.reset().observation, first)
  env.seed(4)
  assert np.any(env.reset().observation != first)


def test_dict_observations_of_vectors_become_one_float32_vector():
  from examples import corridor  # pylint: disable=g-import-not-at-top
  env = environments.load_environment(factory=corridor.Corridor)
  assert env.observation_spec().shape == (2,)
  assert env.observation_spec().dtype == np.float32
  np.testing.assert_array_equal(env.reset().observation, [0.0, 7.0])
  observation = env.step(np.int64(1)).observation
  # tf.nest's order: sorted keys, position then to_goal.
  np.testing.assert_array_equal(observation, [1.0, 6.0])
  assert observation.dtype == np.float32


class _Observing(py_environment.PyEnvironment):
  """An environment whose observations have the spec given; never stepped."""

  def __init__(self, spec):
    super().__init__()
    self._spec = spec

  def observation_spec(self):
    return self._spec

  def action_spec(self):
    return array_spec.BoundedArraySpec((), np.int64, 0, 1)

  def _reset(self):
    raise NotImplementedError

  def _step(self, action):
    raise NotImplementedError


_PIXELS_AND_SPEED = {'pixels': array_spec.ArraySpec((84, 84, 3), np.uint8),
                     'speed': array_spec.ArraySpec((1,), np.float32)}


@pytest.mark.parametrize('observation_spec, message', [
    (_PIXELS_AND_SPEED, 'only a structure of vectors can be flattened'),
    (array_spec.ArraySpec((4,), np.float64),
     'float64 .* take float32 arrays or uint8 images'),
    (array_spec.ArraySpec((84, 84), np.uint8),
     r'uint8 of shape \(84, 84\).* uint8 images \(HxWxC\)'),
])
def test_observations_a_model_cannot_take_are_refused(observation_spec,
                                                      message):
  with pytest.raises(ActorQError, match=message):
    environments.load_environment(
        factory=lambda: _Observing(observation_spec))


def test_a_bad_factory_is_one_clear_error():
  with pytest.raises(ActorQError, match=r"module 'no_such_module' does not "
                     r'import .*PYTHONPATH'):
    environments.load_environment(factory='no_such_module.make')
  with pytest.raises(ActorQError, match=r"module 'examples.corridor' has no "
                     r"callable 'Nope'"):
    environments.load_environment(factory='examples.corridor.Nope')
  with pytest.raises(ActorQError, match=r'returned a int, not a TF-Agents '
                     r'PyEnvironment'):
    environments.load_environment(factory=lambda: 3)
  with pytest.raises(ActorQError, match=r'factory <lambda> failed: '
                     r'ZeroDivisionError'):
    environments.load_environment(factory=lambda: 1 / 0)
  with pytest.raises(ActorQError, match='both a name'):
    environments.load_environment('CartPole-v1', factory=_slider_task)
  with pytest.raises(ActorQError, match='no environment'):
    environments.load_environment()
