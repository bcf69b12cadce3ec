"""Environments by name: Gym and the Control Suite, limits, seeds, errors."""
import gin
import numpy as np
import pytest

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
