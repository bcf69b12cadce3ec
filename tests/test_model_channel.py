"""The model channel through a real Reverb server: versions only go forward."""
import dataclasses
import time

import numpy as np
import pytest
import reverb

from actorq_tf import model_channel
from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS
from actorq_tf.normalization import ObservationNormalizer


def _model(version, payload=b'model'):
  return model_channel.PublishedModel(
      version, 'int8', payload + str(version).encode(),
      ObservationNormalizer(np.arange(4, dtype=np.float32),
                            np.full(4, 2.0, np.float32)))


@pytest.fixture
def channel(reverb_server):
  client = model_channel.wait_for_server(reverb_server, timeout_s=10)
  return (model_channel.ModelPublisher(client),
          model_channel.ModelPuller(client, 'int8'), client)


def test_puller_sees_nothing_before_the_first_model(channel):
  _, puller, _ = channel
  assert puller.pull_newer() is None
  assert puller.version == 0


def test_newest_model_arrives_whole(channel):
  publisher, puller, _ = channel
  publisher.publish(_model(5))
  model = puller.pull_newer()
  assert model.version == 5
  assert model.precision == 'int8'
  assert model.model_bytes == b'model5'
  np.testing.assert_array_equal(model.normalizer.shift, np.arange(4))
  np.testing.assert_array_equal(model.normalizer.scale, np.full(4, 2.0))


def test_versions_only_go_forward(channel):
  publisher, puller, _ = channel
  publisher.publish(_model(5))
  puller.accept(puller.pull_newer())
  assert puller.pull_newer() is None  # same version again
  publisher.publish(_model(3))  # a stale publisher
  assert puller.pull_newer() is None
  assert puller.version == 5
  publisher.publish(_model(8))
  newer = puller.pull_newer()
  assert newer.version == 8
  puller.accept(newer)
  with pytest.raises(ValueError):
    puller.accept(_model(6))
  assert puller.version == 8


def test_bytes_failing_the_checksum_are_ignored(channel):
  _, puller, client = channel
  good = _model(4)
  tampered = dataclasses.replace(good, model_bytes=b'tampered bytes')
  client.insert(tampered.columns(claimed_sha256=good.sha256),
                priorities={model_channel.model_table_name('int8'): 1.0})
  assert puller.pull_newer() is None
  assert puller.version == 0


def test_unreachable_server_is_a_clear_error_within_the_timeout():
  start = time.monotonic()
  with pytest.raises(ActorQError, match='localhost:1 within'):
    model_channel.wait_for_server('localhost:1', timeout_s=2)
  assert time.monotonic() - start < 15


def test_a_server_gone_under_a_variables_push_is_a_server_error():
  # The learner's exports go on past what SERVER_ERRORS holds; anything
  # else ends the learner.
  weights = [np.zeros((4, 2), np.float32)]
  server = reverb.Server([model_channel.variables_table(
      model_channel.policy_variables(weights, np.int64(0)))], port=None)
  publisher = model_channel.ModelPublisher(
      model_channel.wait_for_server(f'localhost:{server.port}', 10))
  publisher.publish_variables(weights, 1)
  server.stop()
  with pytest.raises(SERVER_ERRORS):
    publisher.publish_variables(weights, 2)
