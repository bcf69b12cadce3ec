"""The run key: made once per run directory, readable by its owner only,
handed over by environment, and one-line errors for a key that is not."""
import os
import stat

import pytest

from actorq_tf import signing
from actorq_tf.errors import ActorQError


@pytest.fixture(autouse=True)
def no_handed_key(monkeypatch):
  monkeypatch.delenv(signing.KEY_ENVIRONMENT_VARIABLE, raising=False)


def test_the_first_role_makes_the_key_and_the_others_read_it(tmp_path):
  root_dir = str(tmp_path / 'run')
  first = signing.run_key(root_dir)
  path = os.path.join(root_dir, signing.KEY_FILE)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
  assert os.listdir(root_dir) == [signing.KEY_FILE]  # Nothing partial left.
  signature = first.sign([b'version', b'bytes'])
  assert signing.run_key(root_dir).verifies(signature, [b'version', b'bytes'])
  other_run = signing.run_key(str(tmp_path / 'other'))
  assert not other_run.verifies(signature, [b'version', b'bytes'])


def test_parts_are_signed_with_their_boundaries(tmp_path):
  key = signing.run_key(str(tmp_path))
  assert key.sign([b'ab', b'c']) != key.sign([b'a', b'bc'])


def test_a_handed_key_or_a_key_file_comes_before_the_run_directory(
    tmp_path, monkeypatch):
  root_dir = str(tmp_path / 'run')
  own = signing.run_key(root_dir)
  handed = signing.RunKey(os.urandom(32), 'launcher')
  monkeypatch.setenv(*handed.environment().popitem())
  signature = handed.sign([b'x'])
  assert signing.run_key(root_dir).verifies(signature, [b'x'])
  assert not own.verifies(signature, [b'x'])
  key_file = tmp_path / 'given.key'
  key_file.write_text(os.urandom(32).hex())
  assert signing.run_key(root_dir, str(key_file)).source == str(key_file)


@pytest.mark.parametrize('content, message', [
    (None, 'cannot read the model key file .*missing.key'),
    ('not hex', 'does not hold a hex key'),
    ('00ff', 'has 2 bytes; at least 16'),
])
def test_a_key_file_that_is_not_a_key_is_one_line(tmp_path, content,
                                                   message):
  path = tmp_path / 'missing.key'
  if content is not None:
    path.write_text(content)
  with pytest.raises(ActorQError, match=message):
    signing.run_key(str(tmp_path), str(path))
