"""Publishing policy models and variables through Reverb, and pulling them.

Each precision has a table of size one that keeps the newest model: the
learner inserts (version, precision, signature, model bytes, observation
shift and scale) and actors sample it. The signature is the run key's HMAC
of the rest (see `signing`): a row it does not verify is refused, whatever
its version, and never blocks the learner's later versions.
Actors keep the version they run and never step back to an older one.
"""
import dataclasses
import time
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import reverb
from reverb.cc import schema_pb2
import tensorflow as tf
from tf_agents.experimental.distributed import reverb_variable_container

from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS
from actorq_tf.normalization import ObservationNormalizer
from actorq_tf.signing import RunKey

VARIABLES_TABLE = 'variables'  # TF-Agents' ReverbVariableContainer default.
POLICY_KEY = 'policy'
VERSION_KEY = 'version'
SIGNATURE_KEY = 'signature'


# The largest model one Reverb item carries here: 1.1 GB went through a local
# server in 23 s (insert) and 2.7 s (sample); protobuf caps a message at 2 GB.
MAX_MODEL_BYTES = 1 << 30


def check_model_size(precision: str, model_bytes: int) -> None:
  """Raises ActorQError if a model of this size cannot be published."""
  if model_bytes > MAX_MODEL_BYTES:
    raise ActorQError(
        f'the {precision} model is {model_bytes:,} bytes, over the '
        f'{MAX_MODEL_BYTES:,} bytes that one model update through Reverb '
        'may carry; use int8 or a smaller policy network')


def model_table_name(precision: str) -> str:
  return f'model_{precision}'


def _newest_only_table(name: str, signature) -> reverb.Table:
  return reverb.Table(
      name=name,
      sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(),
      max_size=1,
      max_times_sampled=0,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=signature)


def model_table(precision: str, observation_shape) -> reverb.Table:
  return _newest_only_table(model_table_name(precision),
                            PublishedModel.table_signature(observation_shape))


def variables_table(variables) -> reverb.Table:
  signature = tf.nest.map_structure(
      lambda v: tf.TensorSpec(v.shape, v.dtype), variables)
  return _newest_only_table(VARIABLES_TABLE, signature)


@dataclasses.dataclass(frozen=True)
class PublishedModel:
  """One model update on the wire: a row of its precision's table.

  The row is (version, precision, signature, model bytes, normalizer shift,
  normalizer scale); `table_signature`, `columns` and `from_columns` are the
  only places that know it. Its signature, made by `signed`, covers the rest:
  version, precision, bytes and normalizer all decide what an actor does.
  """
  version: int
  precision: str
  model_bytes: bytes
  normalizer: ObservationNormalizer
  signature: str = ''

  def _signed_parts(self) -> List[bytes]:
    return [np.int64(self.version).tobytes(), self.precision.encode(),
            self.model_bytes,
            np.ascontiguousarray(self.normalizer.shift, np.float32).tobytes(),
            np.ascontiguousarray(self.normalizer.scale, np.float32).tobytes()]

  def signed(self, key: RunKey) -> 'PublishedModel':
    return dataclasses.replace(self, signature=key.sign(self._signed_parts()))

  def signed_by(self, key: RunKey) -> bool:
    return key.verifies(self.signature, self._signed_parts())

  @staticmethod
  def table_signature(observation_shape) -> Tuple[tf.TensorSpec, ...]:
    return (tf.TensorSpec([], tf.int64, 'version'),
            tf.TensorSpec([], tf.string, 'precision'),
            tf.TensorSpec([], tf.string, 'signature'),
            tf.TensorSpec([], tf.string, 'model'),
            tf.TensorSpec(observation_shape, tf.float32, 'shift'),
            tf.TensorSpec(observation_shape, tf.float32, 'scale'))

  def columns(self) -> List[np.ndarray]:
    """The row to insert."""
    return [np.int64(self.version),
            np.array(self.precision.encode(), dtype=object),
            np.array(self.signature.encode(), dtype=object),
            np.array(self.model_bytes, dtype=object),
            self.normalizer.shift.astype(np.float32),
            self.normalizer.scale.astype(np.float32)]

  @classmethod
  def from_columns(cls, columns: Sequence[np.ndarray]) -> 'PublishedModel':
    """The model a row holds, with the signature the row claims for it."""
    version, precision, signature, model_bytes, shift, scale = columns
    return cls(int(version), bytes(precision).decode(errors='replace'),
               bytes(model_bytes),
               ObservationNormalizer(shift.astype(np.float32),
                                     scale.astype(np.float32)),
               bytes(signature).decode(errors='replace'))


def variables_signed_parts(version: int, values) -> List[bytes]:
  """What a variables row's signature covers: its version and one
  version's fp32 variables (arrays, in the network's order)."""
  return [np.int64(version).tobytes(), b'variables'] + [
      np.ascontiguousarray(np.asarray(v)).tobytes() for v in values]


def wait_for_server(address: str, timeout_s: float) -> reverb.Client:
  """Connects to a Reverb server, or fails naming the address."""
  client = reverb.Client(address)
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      client.server_info(timeout=max(1, int(min(5, timeout_s))))
      return client
    except SERVER_ERRORS + (ValueError,) as e:
      if time.monotonic() >= deadline:
        raise ActorQError(
            f'could not reach the Reverb server at {address} within '
            f'{timeout_s:g} s ({type(e).__name__})') from e
      time.sleep(0.5)


class ModelPublisher:
  """Learner side: signs each model and inserts it with its version into its
  table, then the signed fp32 variables of the same version for `tf` actors
  and the evaluator."""

  def __init__(self, client: reverb.Client, key: RunKey):
    self._client = client
    self._key = key
    self._variable_container = None

  def publish_exports(self, results, network_weights) -> None:
    """Publishes one version: each checked export.ExportResult, then the
    fp32 weights the models were converted from."""
    for result in results:
      self.publish(PublishedModel(result.version, result.precision,
                                  result.model_bytes, result.normalizer))
    self.publish_variables(network_weights, results[0].version)

  def publish_variables(self, network_weights, version: int) -> None:
    if self._variable_container is None:
      self._variable_container = (
          reverb_variable_container.ReverbVariableContainer(
              self._client.server_address, table_names=[VARIABLES_TABLE]))
    self._variable_container.push(
        policy_variables(network_weights, np.int64(version),
                         self._key.sign(variables_signed_parts(
                             version, network_weights))),
        table=VARIABLES_TABLE)

  def publish(self, model: PublishedModel) -> None:
    check_model_size(model.precision, len(model.model_bytes))
    self._client.insert(model.signed(self._key).columns(),
                        priorities={model_table_name(model.precision): 1.0})


class Refusals:
  """What a role refused of the rows it pulled, and since when.

  A refused row is remembered by its version and signature: one that no
  key signed can never keep the learner's own row of the same version out.
  """

  def __init__(self, what: str):
    self._what = what
    self._rows = set()
    self.consecutive = 0  # Refused since the last accepted row.
    self.since: Optional[float] = None  # time.time() of the first of those.
    self.last = ''

  def known(self, version: int, signature: str) -> bool:
    return (version, signature) in self._rows

  def refuse(self, version: int, signature: str, reason: str,
             kept_version: int) -> None:
    """Never takes this row; logs why once."""
    self._rows.add((version, signature))
    if not self.consecutive:
      self.since = time.time()
    self.consecutive += 1
    self.last = f'version {version}: {reason}'
    logging.warning('Refusing %s version %d: %s; keeping version %d.',
                    self._what, version, reason, kept_version)

  def accepted(self) -> None:
    self.consecutive = 0
    self.since = None

  def status(self) -> Dict[str, object]:
    """The figures that status files, TensorBoard and the launcher show."""
    return {'refused_versions': len(self._rows),
            'consecutive_refusals': self.consecutive,
            'refusing_since': self.since,
            'last_refusal': self.last}


def _unsigned_reason(key: RunKey) -> str:
  return (f'its signature does not verify with the run key from '
          f'{key.source} (a row that did not come from this run\'s learner, '
          'a corrupted one, or a key that is not the learner\'s)')


class ModelPuller:
  """Actor side: fetches the newest model of one precision if it is new and
  signed with the run key.

  Keeps count of the rows it refused, so that an actor that cannot run
  what the learner publishes says so (status files, TensorBoard, the
  launcher) instead of acting at random unnoticed.
  """

  def __init__(self, client: reverb.Client, precision: str, key: RunKey,
               server_timeout_s: float = 10.0,
               resample_interval_s: float = 60.0,
               refusals: Optional[Refusals] = None):
    self._client = client
    self._precision = precision
    self._key = key
    self._table = model_table_name(precision)
    self._server_timeout_s = server_timeout_s
    self.refusals = refusals or Refusals(f'{precision} model')
    # The table's insert count when it was last sampled: a paper-size model
    # is megabytes, and sampling it again only to find the same version
    # would cost the actor a transfer at every pull. A restarted server
    # counts from 0 again and may come back to the same count with another
    # model, so the table is sampled anyway after a server error and at
    # least every `resample_interval_s`.
    self._sampled_at_inserts = None
    self._sampled_at_time = -float('inf')
    self._resample_interval_s = resample_interval_s
    self.version = 0

  def _inserts_if_any(self) -> Optional[int]:
    """The table's insert count, or None while it holds no model."""
    # Sampling an empty table blocks on its rate limiter, and a restarted
    # server without a checkpoint has an empty table again: ask every time.
    # Sampling also waits, with no timeout, while the server is down; asking
    # first with a timeout makes that a short race rather than the rule.
    info = _table_info(self._client, self._table,
                       max(1, int(self._server_timeout_s)))
    if info is None:
      raise ActorQError(f'the Reverb server has no table {self._table!r}: '
                        'is it serving this precision?')
    if info.current_size == 0:
      return None
    return info.rate_limiter_info.insert_stats.completed

  def pull_newer(self) -> Optional[PublishedModel]:
    """The newest model if its version is above the one in use, else None.

    A model that its signature does not vouch for, or whose precision is not
    the one asked for, is refused with a warning (once per row).
    """
    try:
      inserts = self._inserts_if_any()
      if inserts is None:
        return None
      if (inserts == self._sampled_at_inserts and time.monotonic() <
          self._sampled_at_time + self._resample_interval_s):
        return None
      sample = next(self._client.sample(self._table, num_samples=1,
                                        emit_timesteps=False))
    except SERVER_ERRORS:
      self._sampled_at_inserts = None
      raise
    self._sampled_at_inserts = inserts
    self._sampled_at_time = time.monotonic()
    # Each column holds the one step that `insert` wrote.
    model = PublishedModel.from_columns(
        [np.asarray(column)[0] for column in sample.data])
    if (model.version <= self.version or
        self.refusals.known(model.version, model.signature)):
      return None
    if not model.signed_by(self._key):
      self.refuse(model, _unsigned_reason(self._key))
      return None
    if model.precision != self._precision:
      self.refuse(model, f'it is a {model.precision!r} model, not '
                  f'{self._precision!r}')
      return None
    return model

  def forget_sample(self) -> None:
    """The next `pull_newer` samples the table even if no model came since:
    for a model put aside, not refused, to be taken up again."""
    self._sampled_at_inserts = None

  def refuse(self, model: PublishedModel, reason: str) -> None:
    """Never takes this row; logs why once."""
    self.refusals.refuse(model.version, model.signature, reason, self.version)

  def accept(self, model: PublishedModel) -> None:
    """Records that the actor now runs `model`; versions only go forward."""
    if model.version <= self.version:
      raise ValueError(f'model version {model.version} is not newer than '
                       f'{self.version}')
    self.version = model.version
    self.refusals.accepted()


class VariablesPuller:
  """`tf` actors and the evaluator: the learner's fp32 variables, assigned
  to `variables` only when a newer version's row is signed with the run
  key. The whole row comes at each `update` (TF-Agents' own variable
  container does the same); only a newer version's is verified."""

  def __init__(self, server_address: str, variables, key: RunKey,
               refusals: Optional[Refusals] = None):
    self._variables = variables
    self._key = key
    self._container = reverb_variable_container.ReverbVariableContainer(
        server_address, table_names=[VARIABLES_TABLE])
    self.refusals = refusals or Refusals('fp32 variables')
    self.version = 0

  def update(self) -> bool:
    """True if a newer signed version is now in the variables."""
    row = self._container.pull(VARIABLES_TABLE)
    version = int(row[VERSION_KEY].numpy())
    signature = row[SIGNATURE_KEY].numpy().decode(errors='replace')
    if version <= self.version or self.refusals.known(version, signature):
      return False
    values = row[POLICY_KEY]
    if not self._key.verifies(signature,
                              variables_signed_parts(version, values)):
      self.refusals.refuse(version, signature, _unsigned_reason(self._key),
                           self.version)
      return False
    for variable, value in zip(self._variables, values):
      variable.assign(value)
    self.version = version
    self.refusals.accepted()
    return True


def _table_info(client: reverb.Client, table: str, timeout_s: int
               ) -> Optional[schema_pb2.TableInfo]:
  """One table's size and counters, without decoding any signature.

  `Client.server_info` decodes every table's signature in Python: about 5 ms
  per call here, which at one model check per 100 env steps was a fifth of
  a CartPole-v1 actor's time. The raw protos hold the same figures.
  """
  try:
    # pylint: disable-next=protected-access
    serialized = client._client.ServerInfo(timeout_s)
  except RuntimeError as e:
    if 'Deadline Exceeded' in str(e):
      raise reverb.errors.DeadlineExceededError(str(e)) from e
    raise
  for proto in serialized:
    info = schema_pb2.TableInfo.FromString(proto)
    if info.name == table:
      return info
  return None


def policy_variables(network_variables, version, signature):
  """The nest pushed to and pulled from the variables table."""
  return {POLICY_KEY: network_variables, VERSION_KEY: version,
          SIGNATURE_KEY: signature}
