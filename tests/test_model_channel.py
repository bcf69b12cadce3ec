"""The model channel through a real Reverb server: versions only go forward,
and only rows signed with the run key get through."""
import dataclasses
import os
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from actorq_tf import model_channel
from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS
from actorq_tf.normalization import ObservationNormalizer
from actorq_tf.signing import RunKey

RUN_KEY = RunKey(os.urandom(32), 'the test\'s run key')


def _model(version, payload=b'model'):
  return model_channel.PublishedModel(
      version, 'int8', payload + str(version).encode(),
      ObservationNormalizer(np.arange(4, dtype=np.float32),
                            np.full(4, 2.0, np.float32)))


@pytest.fixture
def channel(reverb_server):
  client = model_channel.wait_for_server(reverb_server, timeout_s=10)
  return (model_channel.ModelPublisher(client, RUN_KEY),
          model_channel.ModelPuller(client, 'int8', RUN_KEY), client)


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


def _insert(client, model):
  client.insert(model.columns(),
                priorities={model_channel.model_table_name('int8'): 1.0})


def test_bytes_changed_under_their_signature_are_refused(channel):
  _, puller, client = channel
  for changed in (
      dataclasses.replace(_model(4).signed(RUN_KEY), model_bytes=b'tampered'),
      dataclasses.replace(_model(5).signed(RUN_KEY), version=6),
      dataclasses.replace(_model(7).signed(RUN_KEY), precision='fp32'),
      dataclasses.replace(_model(8).signed(RUN_KEY),
                          normalizer=ObservationNormalizer(
                              np.zeros(4, np.float32), np.ones(4, np.float32)))):
    _insert(client, changed)
    assert puller.pull_newer() is None
  assert puller.version == 0
  assert puller.refusals.status()['refused_versions'] == 4


def test_a_row_another_key_signed_is_refused_and_never_blocks_the_learner(
    channel):
  publisher, puller, client = channel
  stranger = RunKey(os.urandom(32), 'a stranger\'s key')
  publisher.publish(_model(5))
  puller.accept(puller.pull_newer())
  # Far above the learner's versions, and at the learner's next version.
  for version in (10_000_000, 6):
    _insert(client, _model(version, b'forged').signed(stranger))
    assert puller.pull_newer() is None
    assert puller.version == 5
  status = puller.refusals.status()
  assert status['refused_versions'] == 2
  assert status['consecutive_refusals'] == 2
  assert 'does not verify with the run key from the test' in (
      status['last_refusal'])
  publisher.publish(_model(6))
  learners = puller.pull_newer()
  assert learners.model_bytes == b'model6'
  puller.accept(learners)
  assert puller.refusals.status()['consecutive_refusals'] == 0


def test_a_puller_with_another_key_refuses_every_model(channel):
  publisher, _, client = channel
  puller = model_channel.ModelPuller(
      client, 'int8', RunKey(os.urandom(32), 'a wrong key'))
  for version in (1, 2, 3):
    publisher.publish(_model(version))
    assert puller.pull_newer() is None
  assert puller.refusals.status()['consecutive_refusals'] == 3


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
      model_channel.policy_variables(weights, np.int64(0), np.array(b'')))],
                         port=None)
  publisher = model_channel.ModelPublisher(
      model_channel.wait_for_server(f'localhost:{server.port}', 10), RUN_KEY)
  publisher.publish_variables(weights, 1)
  server.stop()
  with pytest.raises(SERVER_ERRORS):
    publisher.publish_variables(weights, 2)


def test_variables_are_taken_only_when_signed_with_the_run_key():
  weights = [np.arange(8, dtype=np.float32).reshape(4, 2),
             np.ones(2, np.float32)]
  server = reverb.Server([model_channel.variables_table(
      model_channel.policy_variables(weights, np.int64(0), np.array(b'')))],
                         port=None)
  address = f'localhost:{server.port}'
  try:
    client = model_channel.wait_for_server(address, 10)
    variables = [tf.Variable(np.zeros_like(w)) for w in weights]
    puller = model_channel.VariablesPuller(address, variables, RUN_KEY)
    forger = model_channel.ModelPublisher(
        client, RunKey(os.urandom(32), 'a stranger\'s key'))
    forger.publish_variables([w + 100 for w in weights], 10_000_000)
    assert not puller.update()
    assert puller.version == 0
    assert puller.refusals.status()['refused_versions'] == 1
    np.testing.assert_array_equal(variables[0].numpy(), 0)
    model_channel.ModelPublisher(client, RUN_KEY).publish_variables(weights, 7)
    assert puller.update()
    assert puller.version == 7
    np.testing.assert_array_equal(variables[0].numpy(), weights[0])
    assert not puller.update()  # The same version again.
  finally:
    server.stop()
