"""The actors' writer: replay windows and the recent observations table,
of steps signed with the run key."""
import numpy as np
import pytest
import reverb
import tensorflow as tf
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType
import tree

from actorq_tf import replay
from actorq_tf import signing
from actorq_tf.errors import ActorQError

KEY = signing.RunKey(b'the run key of this test', 'test')


def _step(index, step_type=StepType.MID):
  return trajectory_lib.Trajectory(
      step_type=np.int32(step_type),
      observation=np.full(3, index, np.float32),
      action=np.int64(0), policy_info=(),
      next_step_type=np.int32(StepType.MID), reward=np.float32(index),
      discount=np.float32(1.0))


COLLECT_DATA_SPEC = tf.nest.map_structure(
    lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype)),
    _step(0))


def _server(recent_capacity, sequence_length=2, **replay_table_settings):
  collect_data_spec = COLLECT_DATA_SPEC
  # By default a ratio that never holds a test back.
  replay_table_settings = {'min_size_to_sample': 1,
                           'samples_per_insert_tolerance': 1000.0,
                           **replay_table_settings}
  tables = [
      replay.replay_table(collect_data_spec, sequence_length=sequence_length,
                          **replay_table_settings),
      replay.recent_observations_table(collect_data_spec, sequence_length,
                                       capacity=recent_capacity)]
  return reverb.Server(tables, port=None)


def test_calibration_sees_only_observations_sent_since_the_last_export():
  server = _server(recent_capacity=8)
  client = reverb.Client(f'localhost:{server.port}')
  recent = replay.RecentObservations(f'localhost:{server.port}',
                                     COLLECT_DATA_SPEC, 2, 64, KEY,
                                     replay.Refusals(), min_fresh=4,
                                     rate_limiter_timeout_ms=200)
  assert recent.sample() is None and recent.fresh_count == 0
  writer = replay.ExperienceWriter(client, sequence_length=2, key=KEY,
                                   recent_observation_interval=4)
  for index in range(100):
    writer.write(_step(index))
  writer.close()
  info = client.server_info()
  assert info[replay.REPLAY_TABLE].current_size == 99  # windows of two
  assert info[replay.RECENT_OBSERVATIONS_TABLE].current_size == 8
  observations = recent.sample()
  assert observations.shape == (64, 3)
  # Every 4th step, the newest 8 of them: steps 71, 75, ..., 99.
  assert set(observations[:, 0].astype(int)) <= set(range(71, 100, 4))
  assert len(set(observations[:, 0].astype(int))) > 4
  # Nothing new yet: no calibration set, rather than the old one again.
  assert recent.sample() is None and recent.fresh_count == 0
  for index in range(100, 108):  # two new observations: too few
    writer.write(_step(index))
  writer.close()
  assert recent.sample() is None and recent.fresh_count == 2
  for index in range(108, 200):
    writer.write(_step(index))
  writer.close()
  observations = recent.sample()
  assert observations.shape == (64, 3)
  assert set(observations[:, 0].astype(int)) <= set(range(171, 200, 4))
  server.stop()


def _sampled_items(client, count):
  return [sample.data for sample in client.sample(
      replay.REPLAY_TABLE, num_samples=count, emit_timesteps=False,
      unpack_as_table_signature=True)]


def _sampled_steps(client, count):
  return [item.steps for item in _sampled_items(client, count)]


def _episode(length, first_index=0):
  return ([_step(first_index, StepType.FIRST)] +
          [_step(first_index + index) for index in range(1, length)] +
          [_step(first_index + length, StepType.LAST)])  # LAST -> FIRST


def _replay_items(client, sequence_length, pad_episode_ends):
  writer = replay.ExperienceWriter(client, sequence_length, KEY,
                                   pad_episode_ends=pad_episode_ends)
  for step in _episode(6):
    writer.write(step)
  writer.close()
  return client.server_info()[replay.REPLAY_TABLE].current_size


def test_padded_episode_ends_give_every_step_a_window():
  for pad_episode_ends, expected_items in ((False, 4), (True, 6)):
    server = _server(recent_capacity=8, sequence_length=4)
    client = reverb.Client(f'localhost:{server.port}')
    # 6 transitions and a boundary: windows of 4 start at steps 0..3, and
    # with padding also at 4 and 5; never at the boundary itself.
    assert _replay_items(client, 4, pad_episode_ends) == expected_items
    if pad_episode_ends:
      starts = sorted(
          int(steps.observation[0, 0]) for steps in _sampled_steps(client, 200))
      assert set(starts) == set(range(6))
    server.stop()


def test_a_table_that_keeps_episode_ends_removes_the_other_items_first():
  # Windows of 2: an episode of 3 transitions gives 3 items, the last of
  # them (its newest step the boundary) the episode's end.
  for keep_episode_ends, expected_newest_steps in (
      (False, {201, 202, 203, 301, 302, 303}),  # first in, first out
      (True, {103, 202, 203, 301, 302, 303})):
    server = _server(recent_capacity=8, capacity=6,
                     keep_episode_ends=keep_episode_ends)
    client = reverb.Client(f'localhost:{server.port}')
    writer = replay.ExperienceWriter(client, sequence_length=2, key=KEY)
    for episode in range(1, 4):
      for step in _episode(3, first_index=100 * episode):
        writer.write(step)
    writer.close()
    newest_steps = {int(steps.observation[-1, 0])
                    for steps in _sampled_steps(client, 300)}
    assert newest_steps == expected_newest_steps
    server.stop()


def _write_transitions(client, count):
  writer = replay.ExperienceWriter(client, sequence_length=2, key=KEY)
  for step in [_step(0, StepType.FIRST)] + [_step(i) for i in range(1, count + 1)]:
    writer.write(step)
  writer.close()


def _samples_within_a_second(server, count):
  """Whether the learner's kind of reader gets `count` more items within a
  second (the rate limiter's timeout)."""
  dataset = reverb.TrajectoryDataset.from_table_signature(
      f'localhost:{server.port}', replay.REPLAY_TABLE,
      max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=1000)
  try:
    return len(list(dataset.take(count))) == count
  except tf.errors.DeadlineExceededError:
    return False


def test_free_running_samples_each_item_at_most_its_count_and_says_so():
  # QuaRL's regime: no ratio holds the learner back, but an item is gone
  # once sampled `samples_per_insert` times.
  server = _server(recent_capacity=8, samples_per_insert=3.0,
                   regime=replay.FREE_RUNNING)
  client = reverb.Client(f'localhost:{server.port}')
  _write_transitions(client, 10)
  info = client.server_info()[replay.REPLAY_TABLE]
  assert info.current_size == 10
  newest = [int(steps.observation[-1, 0])
            for steps in _sampled_steps(client, 30)]
  assert sorted(newest) == sorted(list(range(1, 11)) * 3)
  figures = replay.rate_figures(client.server_info()[replay.REPLAY_TABLE])
  assert figures['replay_regime'] == 'free_running'
  assert figures['replay_max_times_sampled'] == 3
  assert figures['replay_size'] == 0 and figures['replay_samples'] == 30
  assert figures['replay_samples_per_insert'] == 3.0
  assert figures['replay_samples_per_insert_configured'] is None
  # Used up: the learner waits for new items, whatever it sampled before.
  assert not _samples_within_a_second(server, 1)
  _write_transitions(client, 1)
  assert _samples_within_a_second(server, 3)
  server.stop()


def test_a_fixed_ratio_holds_the_learner_to_its_samples_per_insert():
  # An error buffer of 30 samples: 10 inserts pass without a sample, and
  # 10 inserts allow 3 * 10 + 27 samples.
  server = _server(recent_capacity=8, samples_per_insert=3.0,
                   samples_per_insert_tolerance=10.0)
  client = reverb.Client(f'localhost:{server.port}')
  _write_transitions(client, 10)
  assert _samples_within_a_second(server, 50)
  assert not _samples_within_a_second(server, 20)
  figures = replay.rate_figures(client.server_info()[replay.REPLAY_TABLE])
  assert figures['replay_regime'] == 'fixed_ratio'
  assert figures['replay_max_times_sampled'] is None
  assert figures['replay_size'] == 10
  assert figures['replay_samples_per_insert_configured'] == 3.0
  server.stop()


def test_an_unknown_regime_is_named():
  with pytest.raises(ActorQError, match="unknown replay regime 'greedy'; "
                     'choose one of fixed_ratio, free_running'):
    _server(recent_capacity=8, regime='greedy')


def test_the_learner_samples_only_what_the_run_key_signed_in_its_order():
  server = _server(recent_capacity=8, sequence_length=3)
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  writer = replay.ExperienceWriter(client, sequence_length=3, key=KEY)
  for index in range(100):
    writer.write(_step(index))
  writer.close()
  # Someone who reaches the port: steps signed with another key, ...
  stranger = replay.ExperienceWriter(
      client, sequence_length=3,
      key=signing.RunKey(b'somebody else\'s key', 'stranger'))
  for index in range(1000, 1100):
    stranger.write(_step(index))
  stranger.close()
  # ... and this run's own signed items, read and put back with their
  # steps in reverse.
  reversed_items = 0
  with client.trajectory_writer(num_keep_alive_refs=3) as trajectory_writer:
    for item in _sampled_items(client, 40):
      if item.steps.observation[0, 0] >= 1000:  # the stranger's
        continue
      for t in reversed(range(3)):
        trajectory_writer.append(replay.SignedStep(
            tree.map_structure(lambda x, t=t: x[t], item.steps),
            item.signature))
      trajectory_writer.create_item(
          replay.REPLAY_TABLE, 1.0, replay.SignedItem(
              tree.map_structure(lambda column: column[-3:],
                                 trajectory_writer.history.step),
              trajectory_writer.history.signature[-1]))
      trajectory_writer.end_episode(clear_buffers=True)
      reversed_items += 1
    trajectory_writer.flush()
  assert reversed_items > 5

  refusals = replay.Refusals()
  dataset = replay.replay_dataset(COLLECT_DATA_SPEC, 3, address, 32, 1_000,
                                  KEY, refusals)
  for batch, verified_items in dataset.take(20):
    assert 0 < verified_items < 32
    first = batch.observation[:, 0, 0].numpy()
    assert (first < 100).all()  # only the run's writer's steps, ...
    np.testing.assert_array_equal(  # ... in the order it wrote them
        batch.observation[:, :, 0].numpy(), first[:, None] + np.arange(3))
  figures = refusals.figures()
  assert figures['replay_items_checked'] >= 20 * 32
  # About half the items are the stranger's, a few reversed.
  assert 0.3 < (figures['replay_items_refused'] /
                figures['replay_items_checked']) < 0.8
  assert 'does not sign' in figures['last_replay_refusal']

  # The newest observations are the stranger's: none calibrates a model.
  recent = replay.RecentObservations(address, COLLECT_DATA_SPEC, 3, 64, KEY,
                                     refusals, min_fresh=1,
                                     rate_limiter_timeout_ms=200)
  assert recent.sample() is None
  assert recent.failure.startswith('all 64 observations were refused')
  server.stop()
