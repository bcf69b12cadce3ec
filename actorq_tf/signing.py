"""The run key: only rows the run's learner signed reach the actors.

Reverb has no authentication: anyone who reaches its port can insert a model
row with a valid checksum. The learner therefore signs every model row and
variables row with HMAC-SHA256 under a key of the run's own, and actors and
the evaluator refuse every row whose signature their key does not give.

The key is made at the run's first start (`model.key` in the run directory,
readable by its owner only). Launchers hand it to the roles they start in
their environment (`ACTORQ_MODEL_KEY`), so that roles on other machines need
no shared run directory; a role started by hand reads `--model_key_file`, or
the run directory's key. Actors sign the steps they write to replay with it
too (see `replay.WindowSigner`).

This module stays free of TensorFlow: Ray workers that host roles import it.
"""
import hashlib
import hmac
import os
from typing import Dict, Iterable, Optional

from absl import logging

from actorq_tf.errors import ActorQError

KEY_FILE = 'model.key'
KEY_ENVIRONMENT_VARIABLE = 'ACTORQ_MODEL_KEY'
_KEY_BYTES = 32
MAC_BYTES = 32  # of a replay item's MAC


class RunKey:
  """Signs and verifies the parts of one row (bytes, in a fixed order)."""

  def __init__(self, key: bytes, source: str):
    if len(key) < 16:
      raise ActorQError(f'the model key from {source} has {len(key)} bytes; '
                        'at least 16 are needed')
    self._key = key
    self.source = source  # Where it came from, for messages.

  def sign(self, parts: Iterable[bytes]) -> str:
    mac = hmac.new(self._key, digestmod=hashlib.sha256)
    for part in parts:
      # Each part's length first: no two ways to split the same stream.
      mac.update(len(part).to_bytes(8, 'little'))
      mac.update(part)
    return mac.hexdigest()

  def verifies(self, signature: str, parts: Iterable[bytes]) -> bool:
    return hmac.compare_digest(self.sign(parts), signature)

  def replay_mac(self):
    """A keyed BLAKE2b for replay items, to `copy` per item: it runs at
    every env step, where an HMAC-SHA256 costs three times as much. Its key
    is derived from the run key, apart from the rows' HMACs."""
    return hashlib.blake2b(
        key=hmac.digest(self._key, b'actorq-tf replay items', 'sha256'),
        digest_size=MAC_BYTES)

  def environment(self) -> Dict[str, str]:
    """What a launcher adds to a role's environment to hand it the key."""
    return {KEY_ENVIRONMENT_VARIABLE: self._key.hex()}


def run_key(root_dir: Optional[str], key_file: str = '') -> RunKey:
  """The key of the run in `root_dir`, for any role.

  From `key_file` if given, else from the environment a launcher set, else
  `root_dir/model.key`, made there if no role made it yet (the first role of
  a run started by hand). A role whose key is not the learner's refuses
  every model, and the launcher stops the run with that reason.
  """
  if key_file:
    return _read_key_file(key_file)
  handed = os.environ.get(KEY_ENVIRONMENT_VARIABLE)
  if handed:
    try:
      return RunKey(bytes.fromhex(handed), KEY_ENVIRONMENT_VARIABLE)
    except ValueError as e:
      raise ActorQError(f'{KEY_ENVIRONMENT_VARIABLE} is not a hex key') from e
  if not root_dir:
    raise ActorQError('no model key: give --model_key_file or a --root_dir')
  path = os.path.join(root_dir, KEY_FILE)
  if _make_key_file(path):
    logging.info('Made the run\'s model key at %s.', path)
  return _read_key_file(path)


def _make_key_file(path: str) -> bool:
  """Writes a new random key to `path` unless a key is there; True if it
  wrote one. Readers never see a partial key: it is written aside, then
  linked into place, which fails if another role won the race."""
  if os.path.exists(path):
    return False
  os.makedirs(os.path.dirname(path), exist_ok=True)
  partial = f'{path}.{os.getpid()}.partial'
  descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  try:
    with os.fdopen(descriptor, 'w') as f:
      f.write(os.urandom(_KEY_BYTES).hex() + '\n')
    os.link(partial, path)
    return True
  except FileExistsError:
    return False
  finally:
    os.remove(partial)


def _read_key_file(path: str) -> RunKey:
  try:
    with open(path) as f:
      text = f.read().strip()
  except OSError as e:
    raise ActorQError(f'cannot read the model key file {path}: '
                      f'{e.strerror}') from e
  if os.stat(path).st_mode & 0o077:
    logging.warning('The model key file %s is readable by others than its '
                    'owner (chmod 600 it).', path)
  try:
    return RunKey(bytes.fromhex(text), path)
  except ValueError as e:
    raise ActorQError(f'the model key file {path} does not hold a hex '
                      'key') from e
