"""The actor with each precision, against a real Reverb server."""
import collections
import contextlib
import os

import gin
import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree
from tf_agents.specs import tensor_spec
from tf_agents.trajectories.time_step import StepType

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import dqn
from actorq_tf import exploration
from actorq_tf import games
from actorq_tf import interpreter
from actorq_tf import model_channel
from actorq_tf import networks
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import signing
from actorq_tf.errors import ActorQError
from helpers import publish_policy


def _replay_size(address):
  return reverb.Client(address).server_info()[replay.REPLAY_TABLE].current_size


@pytest.mark.parametrize('precision',
                         ['int8', 'fp16', 'fp32', 'int4_weights', 'tf'])
def test_actor_runs_the_published_model_and_fills_replay(
    reverb_server, tmp_path, precision):
  publish_policy(reverb_server, version=42, root_dir=str(tmp_path),
                 precisions=('int8', 'fp16', 'fp32', 'int4_weights'))
  env_steps = 3000
  steps = actor.run_actor(str(tmp_path), reverb_server, precision=precision,
                          max_env_steps=env_steps, model_pull_interval=50,
                          wait_for_first_model_s=60)
  assert steps == env_steps
  status = run_directory.read_status(str(tmp_path), 'actor_0')
  assert status.model_version == 42
  assert status.precision == precision
  # ai-edge-litert is in the requirements: TFLite models run in LiteRT.
  assert status.interpreter == ('' if precision == 'tf' else
                                interpreter.runtime_name())
  assert status.interpreter.startswith('litert 2.') or precision == 'tf'
  assert status.episodes > 0
  assert status.steps_without_model == 0
  assert status.model_share == 1.0
  # Where the loop's time went, on its own clock.
  assert set(status.time_share) == {'policy', 'env', 'replay', 'other'}
  assert all(status.time_share[part] > 0 for part in
             ('policy', 'env', 'replay'))
  assert sum(status.time_share.values()) == pytest.approx(1.0, abs=0.01)
  # One item per step, less the first step of each episode.
  assert (env_steps - status.episodes - 1 <= _replay_size(reverb_server)
          <= env_steps)
  assert os.listdir(tmp_path / 'actor_0')  # TensorBoard events


def test_actor_acts_randomly_until_a_model_arrives(reverb_server, tmp_path):
  actor.run_actor(str(tmp_path), reverb_server, max_env_steps=300)
  status = run_directory.read_status(str(tmp_path), 'actor_0')
  assert status.model_version == 0
  assert status.steps_without_model == 300
  assert status.model_share == 0.0
  assert _replay_size(reverb_server) > 50
  # Uniformly random: both of CartPole's actions, neither one dominating.
  dataset = reverb.TrajectoryDataset.from_table_signature(
      reverb_server, replay.REPLAY_TABLE, max_in_flight_samples_per_worker=64,
      rate_limiter_timeout_ms=10_000)
  actions = np.array([sample.data.steps.action[0] for sample in
                      dataset.take(200).as_numpy_iterator()])
  assert 0.25 < np.mean(actions == 1) < 0.75


def test_a_novelty_bonus_goes_into_replay_rewards_only(reverb_server,
                                                       tmp_path):
  with gin.unlock_config():
    gin.bind_parameter('CountBonus.scale', 0.5)
  actor.run_actor(str(tmp_path), reverb_server, max_env_steps=300)
  status = run_directory.read_status(str(tmp_path), 'actor_0')
  assert status.episodes > 0
  dataset = reverb.TrajectoryDataset.from_table_signature(
      reverb_server, replay.REPLAY_TABLE, max_in_flight_samples_per_worker=64,
      rate_limiter_timeout_ms=10_000)
  first_steps = [sample.data.steps for sample in
                 dataset.take(200).as_numpy_iterator()]
  # CartPole pays 1 per step; the boundary pseudo-steps, 0.
  rewards = np.array([data.reward[0] for data in first_steps
                      if data.step_type[0] != StepType.LAST])
  assert np.all((rewards > 1.0) & (rewards <= 1.5)), rewards
  assert rewards.max() == pytest.approx(1.5)  # a first visit


def test_an_actor_that_waits_for_a_model_fails_when_none_comes(
    reverb_server, tmp_path):
  with pytest.raises(ActorQError, match=r'no model was accepted within 1 s '
                     r'\(refused 0; last: none\)'):
    actor.run_actor(str(tmp_path), reverb_server, max_env_steps=100,
                    wait_for_first_model_s=1)


def test_replay_items_have_the_layout_the_learner_samples(reverb_server,
                                                          tmp_path):
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  actor.run_actor(str(tmp_path), reverb_server, max_env_steps=200)
  env = environments.load_environment()
  agent = dqn.create_dqn_agent(env, agents.builder().policy_network(env),
                               tf.Variable(0, dtype=tf.int64))
  length = agent.train_sequence_length  # n-step windows: n + 1 steps
  assert length > 2
  refusals = replay.Refusals()
  dataset = replay.replay_dataset(agent.collect_data_spec, length,
                                  reverb_server, batch_size=16,
                                  rate_limiter_timeout_ms=5000,
                                  key=signing.run_key(str(tmp_path)),
                                  refusals=refusals)
  experience, verified_items = next(iter(dataset))
  assert verified_items == 16
  assert experience.observation.shape == (16, length, 4)
  assert experience.action.shape == (16, length)
  # A window never crosses into the next episode: after an episode's last
  # step come only its padding copies.
  step_types = experience.step_type.numpy()
  assert not (step_types[:, 1:] == StepType.FIRST).any()
  after_last = np.maximum.accumulate(step_types == StepType.LAST, axis=1)
  np.testing.assert_array_equal(step_types[after_last], StepType.LAST)
  loss = agent.train(experience).loss
  assert np.isfinite(loss.numpy())
  figures = refusals.figures()
  assert figures['replay_items_checked'] >= 16
  assert figures['replay_items_refused'] == 0


def test_an_actor_pulls_on_time_as_well_as_on_steps(reverb_server, tmp_path):
  # Its first pull (at step 0) only starts the model's check; with pulls
  # counted in steps alone it would take the model a million steps later,
  # as an actor held by the rate limiter takes it minutes later.
  publish_policy(reverb_server, version=42, root_dir=str(tmp_path))
  actor.run_actor(str(tmp_path), reverb_server, max_env_steps=3000,
                  model_pull_interval=10**6, model_pull_interval_s=0.2)
  status = run_directory.read_status(str(tmp_path), 'actor_0')
  assert status.model_version == 42
  assert status.versions_run == [42]
  assert 0 < status.model_share < 1  # Random steps while it checked.


def test_actor_keeps_its_model_when_a_new_one_does_not_fit(reverb_server,
                                                           tmp_path):
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  env = environments.load_environment()
  publish_policy(reverb_server, version=10, root_dir=str(tmp_path))
  policy = actor.TFLitePyPolicy(env, reverb_server,
                                signing.run_key(str(tmp_path)))
  assert policy.update(wait=True)
  assert policy.version == 10
  three_actions = networks.create_q_network(
      tensor_spec.TensorSpec([4], tf.float32), 3)
  publish_policy(reverb_server, version=20, root_dir=str(tmp_path),
                 q_network=three_actions, publish_variables=False)
  assert not policy.update(wait=True)
  assert policy.version == 10
  assert policy.greedy_action(env.reset().observation) in (0, 1)


def _insert_model(client, model, key):
  client.insert(model.signed(key).columns(),
                priorities={model_channel.model_table_name('int8'): 1.0})


def test_actor_keeps_a_valid_model_when_the_table_holds_bad_bytes(
    reverb_server, tmp_path):
  client = model_channel.wait_for_server(reverb_server, 10)
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  env = environments.load_environment()
  publish_policy(reverb_server, version=10, root_dir=str(tmp_path))
  key = signing.run_key(str(tmp_path))
  policy = actor.TFLitePyPolicy(env, reverb_server, key)
  assert policy.update(wait=True)
  good = model_channel.ModelPuller(client, 'int8', key).pull_newer()
  observation = env.reset().observation
  action = policy.greedy_action(observation)

  # Each signed with the run key: a learner's bug, not a stranger's row.
  corrupt = [
      # Bytes that are not a TFLite model.
      model_channel.PublishedModel(11, 'int8', b'\x00' * 1024,
                                   good.normalizer),
      # A model cut short, as a bad copy would leave it.
      model_channel.PublishedModel(12, 'int8', good.model_bytes[:5000],
                                   good.normalizer),
      # A float model published under the int8 name.
      model_channel.PublishedModel(13, 'fp32', good.model_bytes,
                                   good.normalizer),
  ]
  for model in corrupt:
    _insert_model(client, model, key)
    assert not policy.update(wait=True)
  # A valid model signed with another key.
  _insert_model(client, model_channel.PublishedModel(
      14, 'int8', good.model_bytes, good.normalizer),
                signing.run_key(str(tmp_path / 'another_run')))
  assert not policy.update(wait=True)
  assert policy.refusals()['refused_versions'] == 4

  assert policy.version == 10
  assert policy.greedy_action(observation) == action
  _insert_model(client, model_channel.PublishedModel(
      15, 'int8', good.model_bytes, good.normalizer), key)
  assert policy.update(wait=True)
  assert policy.version == 15


def test_the_stock_policy_is_greedy_on_the_published_variables(
    reverb_server, tmp_path):
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  env = environments.load_environment()
  q_network = publish_policy(reverb_server, version=5,
                             root_dir=str(tmp_path))
  policy = actor.StockPyPolicy(env, reverb_server,
                               signing.run_key(str(tmp_path)))
  assert policy.update()
  observations = np.random.default_rng(1).normal(
      0, 0.3, (500, 4)).astype(np.float32)
  argmax = np.argmax(q_network(observations)[0].numpy(), axis=1)
  # TF-Agents' QPolicy alone samples the softmax of the Q-values.
  np.testing.assert_array_equal(policy.greedy_actions(observations), argmax)
  assert [policy.greedy_action(o) for o in observations[:50]] == list(
      argmax[:50])


def _every_item(address):
  """Each item of a replay table that removes items once sampled, with its
  priority: its leaves' bytes, sorted (the order actors wrote them in is
  not what is compared)."""
  client = reverb.Client(address)
  size = client.server_info()[replay.REPLAY_TABLE].current_size
  items = sorted(
      (b''.join(np.ascontiguousarray(leaf).tobytes()
                for leaf in tree.flatten(sample.data)), sample.info.priority)
      for sample in client.sample(replay.REPLAY_TABLE, num_samples=size,
                                  emit_timesteps=False,
                                  unpack_as_table_signature=True))
  assert client.server_info()[replay.REPLAY_TABLE].current_size == 0
  return items


@pytest.mark.parametrize('precision', ['int8', 'tf'])
def test_an_actor_of_n_environments_writes_what_n_single_actors_would(
    tmp_path, precision):
  environments_per_actor, steps_each = 3, 400
  # Each item is sampled once and then removed: sampling them all reads
  # the table's every item.
  with _served('dqn_cartpole.gin', [
      'create_q_network.fc_layer_params = (64, 64)',
      "replay_table.regime = 'free_running'",
      'replay_table.samples_per_insert = 1',
      'replay_table.min_size_to_sample = 1']) as address:
    publish_policy(address, version=3, root_dir=str(tmp_path / 'batched'))
    key_file = str(tmp_path / 'batched' / signing.KEY_FILE)
    common = dict(precision=precision, wait_for_first_model_s=60,
                  model_key_file=key_file, seed=7)
    steps = actor.run_actor(
        str(tmp_path / 'batched'), address, num_actors=2, actor_index=1,
        max_env_steps=environments_per_actor * steps_each,
        envs_per_actor=environments_per_actor, **common)
    assert steps == environments_per_actor * steps_each
    batched = run_directory.read_status(str(tmp_path / 'batched'), 'actor_1')
    batched_items = _every_item(address)

    # Actor 1 of 2 with 3 environments each: single actors 3, 4 and 5 of 6.
    single = [run_directory.read_status(
        str(tmp_path / 'single'),
        f'actor_{i}') for i in range(3, 6) if actor.run_actor(
            str(tmp_path / 'single'), address, num_actors=6, actor_index=i,
            max_env_steps=steps_each, **common)]
    single_items = _every_item(address)

  assert batched.environments == 3
  assert batched.model_share == 1.0
  assert batched.model_version == 3
  assert batched.episodes == sum(status.episodes for status in single)
  assert batched.episodes > 3  # episodes ended, and were padded
  assert len(batched_items) > environments_per_actor * (steps_each - 30)
  priorities = collections.Counter(priority for _, priority in batched_items)
  assert priorities[replay.EPISODE_END_PRIORITY] > 0
  assert batched_items == single_items


def test_unknown_precision_is_refused(reverb_server, tmp_path):
  with pytest.raises(ActorQError, match='unknown precision'):
    actor.run_actor(str(tmp_path), reverb_server, precision='int4',
                    max_env_steps=10)


def test_actor_epsilons_spread_like_ape_x():
  epsilons = [exploration.actor_epsilon(i, 4, base_epsilon=0.4, alpha=7)
              for i in range(4)]
  assert epsilons[0] == pytest.approx(0.4)
  assert epsilons[-1] == pytest.approx(0.4 ** 8)
  assert epsilons == sorted(epsilons, reverse=True)
  assert exploration.actor_epsilon(0, 1, base_epsilon=0.05) == 0.05


@contextlib.contextmanager
def _served(gin_file, bindings):
  """gin parsed for `gin_file` and a real Reverb server with its tables."""
  import gin  # pylint: disable=g-import-not-at-top
  from actorq_tf import config  # pylint: disable=g-import-not-at-top
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  from actorq_tf import server  # pylint: disable=g-import-not-at-top
  config.parse_gin([gin_file], [
      'replay_table.min_size_to_sample = 100',
      'replay_table.samples_per_insert_tolerance = 1000.0', *bindings])
  reverb_server = reverb.Server(
      server.create_tables(environments.load_environment()), port=None)
  try:
    yield f'localhost:{reverb_server.port}'
  finally:
    reverb_server.stop()
    gin.clear_config()


@pytest.fixture
def paper_size_control_suite_server():
  """D4PG on cartpole-balance with ActorQ's 2048x2048x2048 policy, and
  actors without exploration noise."""
  with _served('d4pg_cartpole_balance.gin', [
      'create_actor_network.fc_layer_params = (2048, 2048, 2048)',
      'DistributionalCriticNetwork.fc_layer_params = (64, 64)',
      'load_environment.max_episode_steps = 200',
      'actor_sigma.sigma = 0.0']) as address:
    yield address


def test_a_gym_continuous_actor_writes_whole_episodes(tmp_path):
  # Pendulum-v1's action bounds are scalars in its spec: the boundary step
  # written at each episode's end must still have the action's shape.
  with _served('d4pg_pendulum.gin', []) as address:
    actor.run_actor(str(tmp_path), address, max_env_steps=400)
    status = run_directory.read_status(str(tmp_path), 'actor_0')
    # 200 steps each: the boundary step after an episode is no env step
    # (counted, the second episode would end past the budget).
    assert status.episodes == 2
    # Windows of n + 1 = 6 steps, episode ends padded: one per env step.
    assert _replay_size(address) == 400


def test_every_step_of_an_actor_comes_from_a_paper_size_int8_model(
    paper_size_control_suite_server, tmp_path):
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  from actorq_tf import export  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from actorq_tf.interpreter import TFLiteModel
  address = paper_size_control_suite_server
  env = environments.load_environment()
  client = model_channel.wait_for_server(address, 10)
  publisher = model_channel.ModelPublisher(client,
                                           signing.run_key(str(tmp_path)))
  exporter = export.PolicyExporter(
      agents.builder().policy_network(env),
      agents.builder().model_outputs(env), ['int8'],
      publisher.publish_exports, str(tmp_path / 'models'))
  rng = np.random.default_rng(0)
  observations = rng.normal(size=(256, 5)).astype(np.float32)
  (result,) = exporter.export(7, observations)
  assert result.check.passed, result.check.reason
  assert len(result.model_bytes) > 8_000_000  # 2048x2048x2048 in int8

  env_steps = 500
  actor.run_actor(str(tmp_path), address, max_env_steps=env_steps,
                  wait_for_first_model_s=60)
  status = run_directory.read_status(str(tmp_path), 'actor_0')
  assert status.model_version == 7
  assert status.steps_without_model == 0
  assert status.model_share == 1.0
  assert status.refused_versions == 0

  # Without noise, every action in replay is the model's own action.
  model = TFLiteModel(result.model_bytes, result.normalizer)
  for item in reverb.Client(address).sample(
      replay.REPLAY_TABLE, num_samples=50, emit_timesteps=False,
      unpack_as_table_signature=True):
    step_type, observation, action = (item.data.steps.step_type[0],
                                      item.data.steps.observation[0],
                                      item.data.steps.action[0])
    assert step_type != StepType.LAST  # a window starts before its boundary
    np.testing.assert_allclose(action, np.clip(model.action(observation),
                                               -1.0, 1.0), atol=1e-6)


def test_an_actor_of_another_environment_is_refused_before_it_writes(
    reverb_server, tmp_path):
  # The server holds CartPole steps; this actor's gin loads Catch's pixels.
  with gin.unlock_config():
    gin.bind_parameter('load_environment.env_name', None)
    gin.bind_parameter('load_environment.factory', games.Catch)
  with pytest.raises(ActorQError, match=r"not the one the replay server was "
                     r"made for \(observation uint8\[10, 5, 1\] here, "
                     r"float32\[4\] there.*same gin files"):
    actor.run_actor(str(tmp_path), reverb_server, max_env_steps=10,
                    server_timeout_s=10)
  assert _replay_size(reverb_server) == 0


def test_the_tflite_policy_drives_tf_agents_own_actor_into_replay(
    reverb_server, tmp_path):
  from tf_agents.train import actor as tf_agents_actor  # pylint: disable=g-import-not-at-top
  from actorq_tf import environments  # pylint: disable=g-import-not-at-top
  from actorq_tf.interpreter import TFLiteModel  # pylint: disable=g-import-not-at-top
  env = environments.load_environment()
  key = signing.run_key(str(tmp_path))
  greedy = actor.TFLitePyPolicy(env, reverb_server, key)
  collect = actor.collect_policy(env, greedy)
  client = model_channel.wait_for_server(reverb_server, 10)
  actions = []
  observers = [replay.replay_observer(client, key),
               lambda t: actions.append((t.observation, t.action))]

  def stock_actor(policy):
    return tf_agents_actor.Actor(
        env, policy, tf.Variable(0, dtype=tf.int64), steps_per_run=200,
        observers=observers)

  # No model yet: every action at random, and counted (the driver also asks
  # for an action at each episode's last step).
  stock_actor(collect).run()
  random_steps = collect.steps_without_model
  assert greedy.version == 0 and random_steps == collect.steps >= 200
  publish_policy(reverb_server, version=5, root_dir=str(tmp_path))
  assert greedy.update(wait=True) and greedy.version == 5
  actions.clear()
  stock_actor(greedy).run()
  assert greedy.steps_without_model == 0  # driven directly, with a model
  stock_actor(collect).run()
  observers[0].close()
  assert collect.steps_without_model == random_steps
  assert collect.steps >= random_steps + 200
  published = model_channel.ModelPuller(client, 'int8', key).pull_newer()
  model_greedy = agents.check_environment(env).model_policy(
      TFLiteModel(published.model_bytes, published.normalizer))
  agreed = [action == model_greedy(observation)
            for observation, action in actions[:200]]
  assert np.mean(agreed) >= 0.98  # ties may break the other way
  # The items went in signed with the run key.
  refusals = replay.Refusals()
  dataset = replay.replay_dataset(
      agents.check_environment(env).collect_data_spec(env),
      replay.sequence_length_of(client), reverb_server, 32, 100, key,
      refusals)
  for _, verified_items in dataset.take(3):
    assert int(verified_items) == 32
  assert refusals.figures()['replay_items_refused'] == 0
