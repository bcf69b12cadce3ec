"""The actors' writer: replay windows and the recent observations table."""
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType

from actorq_tf import replay


def _step(index, step_type=StepType.MID):
  return trajectory_lib.Trajectory(
      step_type=np.int32(step_type),
      observation=np.full(3, index, np.float32),
      action=np.int64(0), policy_info=(),
      next_step_type=np.int32(StepType.MID), reward=np.float32(index),
      discount=np.float32(1.0))


def _server(recent_capacity, sequence_length=2, **replay_table_settings):
  step_spec = _step(0)
  collect_data_spec = tf.nest.map_structure(
      lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype)),
      step_spec)
  tables = [
      replay.replay_table(collect_data_spec, sequence_length=sequence_length,
                          min_size_to_sample=1,
                          samples_per_insert_tolerance=1000.0,
                          **replay_table_settings),
      replay.recent_observations_table(
          tensor_spec.TensorSpec([3], tf.float32), capacity=recent_capacity)]
  return reverb.Server(tables, port=None)


def test_calibration_sees_only_observations_sent_since_the_last_export():
  server = _server(recent_capacity=8)
  client = reverb.Client(f'localhost:{server.port}')
  recent = replay.RecentObservations(f'localhost:{server.port}',
                                     tensor_spec.TensorSpec([3], tf.float32),
                                     64,
                                     min_fresh=4, rate_limiter_timeout_ms=200)
  assert recent.sample() is None and recent.fresh_count == 0
  writer = replay.ExperienceWriter(client, sequence_length=2,
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


def _episode(length, first_index=0):
  return ([_step(first_index, StepType.FIRST)] +
          [_step(first_index + index) for index in range(1, length)] +
          [_step(first_index + length, StepType.LAST)])  # LAST -> FIRST


def _replay_items(client, sequence_length, pad_episode_ends):
  writer = replay.ExperienceWriter(client, sequence_length,
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
          int(sample[0].data[1][0]) for sample in
          client.sample(replay.REPLAY_TABLE, num_samples=200))
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
    writer = replay.ExperienceWriter(client, sequence_length=2)
    for episode in range(1, 4):
      for step in _episode(3, first_index=100 * episode):
        writer.write(step)
    writer.close()
    newest_steps = {
        int(sample[-1].data[1][0]) for sample in
        client.sample(replay.REPLAY_TABLE, num_samples=300)}
    assert newest_steps == expected_newest_steps
    server.stop()
