"""Builders: what an algorithm decides, and that nothing else decides it."""
import os
import re

import gin
import numpy as np
import pytest
import tensorflow as tf

from actorq_tf import agents
from actorq_tf import config
from actorq_tf import d4pg
from actorq_tf import dqn
from actorq_tf import environments
from actorq_tf import model_checks
from actorq_tf import server
from actorq_tf.errors import ActorQError
from conftest import PROJECT_ROOT

CONFIGS = {'dqn_cartpole.gin': dqn.DqnBuilder,
           'dqn_cartpole_qat.gin': dqn.DqnBuilder,
           'd4pg_pendulum.gin': d4pg.D4pgBuilder}


@pytest.mark.parametrize('gin_file', sorted(CONFIGS))
def test_replay_specs_come_without_an_agent_and_match_the_agents(gin_file):
  config.parse_gin([gin_file], ['create_q_network.fc_layer_params = (8,)',
                                'create_actor_network.fc_layer_params = (8,)'])
  try:
    env = environments.load_environment()
    algorithm = agents.check_environment(env)
    assert isinstance(algorithm, CONFIGS[gin_file])
    agent, _ = algorithm.create_agent(env, tf.Variable(0, dtype=tf.int64))
    # What the server's replay table is made of, and what the learner
    # samples, are the same items.
    assert algorithm.collect_data_spec(env) == agent.collect_data_spec
    assert algorithm.sequence_length() == agent.train_sequence_length
    replay_signature = server.create_tables(env)[0].info.signature
    assert [(s.shape, s.dtype)
            for s in tf.nest.flatten(replay_signature.steps)] == [
        ((agent.train_sequence_length, *s.shape), s.dtype)
        for s in tf.nest.flatten(agent.collect_data_spec)]
  finally:
    gin.clear_config()


def test_n_step_settings_set_the_replay_item_length():
  config.parse_gin(['dqn_cartpole.gin'],
                   ['create_dqn_agent.n_step_update = 3'])
  try:
    assert agents.builder().sequence_length() == 4
  finally:
    gin.clear_config()
  config.parse_gin(['d4pg_pendulum.gin'], ['create_d4pg_agent.n_step = 2'])
  try:
    assert agents.builder().sequence_length() == 3
  finally:
    gin.clear_config()


def test_an_n_step_setting_through_a_macro_is_refused_clearly():
  config.parse_gin(['dqn_cartpole.gin'],
                   ['N_STEPS = 3', 'create_dqn_agent.n_step_update = %N_STEPS'])
  try:
    with pytest.raises(ActorQError, match='must be bound to a value here'):
      agents.builder().sequence_length()
  finally:
    gin.clear_config()


def test_the_dqn_learning_rate_runs_through_its_points_and_stays_at_the_last():
  schedule = dqn.PiecewiseLinearLearningRate(
      1e-3, ((100, 1e-4), (300, 1e-4), (500, 2e-5)))
  rates = [float(schedule(step)) for step in (0, 50, 100, 200, 400, 500, 9000)]
  assert rates == pytest.approx([1e-3, 5.5e-4, 1e-4, 1e-4, 6e-5, 2e-5, 2e-5])
  with pytest.raises(ActorQError, match='increasing train steps'):
    dqn.PiecewiseLinearLearningRate(1e-3, ((500, 1e-4), (100, 1e-5)))


def test_each_builder_gives_its_exploration_outputs_and_greedy_actions():
  config.parse_gin(['dqn_cartpole.gin'],
                   ['epsilon_greedy.decay_steps = 50'])
  try:
    env = environments.load_environment()
    algorithm = agents.builder()
    explorer = algorithm.explorer(env, actor_index=0, num_actors=1, seed=0)
    assert explorer.epsilon(25) == pytest.approx(1.0 - 0.5 * (1.0 - 0.05))
    assert isinstance(algorithm.model_outputs(env), model_checks.QValueOutputs)
    q_values = tf.constant([[0.1, 0.3], [0.5, -1.0]])
    assert algorithm.greedy_actions(q_values, env.action_spec()
                                   ).numpy().tolist() == [1, 0]
  finally:
    gin.clear_config()
  config.parse_gin(['d4pg_pendulum.gin'], [])
  try:
    env = environments.load_environment()
    algorithm = agents.builder()
    explorer = algorithm.explorer(env, actor_index=0, num_actors=1, seed=0)
    actions = np.array([explorer.act(np.array([1.9], np.float32), step)
                        for step in range(200)])
    assert np.all(np.abs(actions) <= 2.0) and actions.std() > 0.2
    outputs = algorithm.model_outputs(env)
    assert isinstance(outputs, model_checks.ActionOutputs)
    assert outputs.action_spec == env.action_spec()
    clipped = algorithm.greedy_actions(tf.constant([[3.0], [-0.5]]),
                                       env.action_spec())
    assert clipped.numpy().ravel().tolist() == [2.0, -0.5]
  finally:
    gin.clear_config()


def test_only_the_builders_know_the_algorithm():
  """No module outside an algorithm's own (and the registry) branches on an
  algorithm's name or on the kind of actions."""
  allowed = {'agents.py', 'dqn.py', 'd4pg.py', 'environments.py'}
  branching = re.compile(
      r"""==\s*['"](dqn|d4pg)['"]|is_discrete\(|issubdtype\(.*integer""")
  offenders = []
  for directory in ('actorq_tf', 'binaries'):
    for name in sorted(os.listdir(os.path.join(PROJECT_ROOT, directory))):
      if not name.endswith('.py') or name in allowed:
        continue
      with open(os.path.join(PROJECT_ROOT, directory, name)) as f:
        for number, line in enumerate(f, 1):
          if branching.search(line):
            offenders.append(f'{directory}/{name}:{number}: {line.strip()}')
  assert not offenders, offenders
