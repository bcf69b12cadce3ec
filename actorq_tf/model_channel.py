"""Publishing policy models and variables through Reverb, and pulling them.

Each precision has a table of size one that keeps the newest model: the
learner inserts (version, precision, sha256, model bytes, observation shift
and scale) and actors sample it.
Actors keep the version they run and never step back to an older one.
"""
import dataclasses
import hashlib
import time
from typing import List, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import reverb
from reverb.cc import schema_pb2
import tensorflow as tf
from tf_agents.experimental.distributed import reverb_variable_container

from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS
from actorq_tf.normalization import ObservationNormalizer

VARIABLES_TABLE = 'variables'  # TF-Agents' ReverbVariableContainer default.
POLICY_KEY = 'policy'
VERSION_KEY = 'version'


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
                            PublishedModel.signature(observation_shape))


def variables_table(variables) -> reverb.Table:
  signature = tf.nest.map_structure(
      lambda v: tf.TensorSpec(v.shape, v.dtype), variables)
  return _newest_only_table(VARIABLES_TABLE, signature)


@dataclasses.dataclass(frozen=True)
class PublishedModel:
  """One model update on the wire: a row of its precision's table.

  The row is (version, precision, SHA-256, model bytes, normalizer shift,
  normalizer scale); `signature`, `columns` and `from_columns` are the only
  places that know it.
  """
  version: int
  precision: str
  model_bytes: bytes
  normalizer: ObservationNormalizer

  @property
  def sha256(self) -> str:
    """Covers the bytes and the normalizer: both decide the actions."""
    digest = hashlib.sha256(self.model_bytes)
    for values in (self.normalizer.shift, self.normalizer.scale):
      digest.update(np.ascontiguousarray(values, np.float32).tobytes())
    return digest.hexdigest()

  @staticmethod
  def signature(observation_shape) -> Tuple[tf.TensorSpec, ...]:
    return (tf.TensorSpec([], tf.int64, 'version'),
            tf.TensorSpec([], tf.string, 'precision'),
            tf.TensorSpec([], tf.string, 'sha256'),
            tf.TensorSpec([], tf.string, 'model'),
            tf.TensorSpec(observation_shape, tf.float32, 'shift'),
            tf.TensorSpec(observation_shape, tf.float32, 'scale'))

  def columns(self, claimed_sha256: Optional[str] = None) -> List[np.ndarray]:
    """The row to insert. It claims this model's checksum unless told
    otherwise (a tampered row claims another's)."""
    return [np.int64(self.version),
            np.array(self.precision.encode(), dtype=object),
            np.array((claimed_sha256 or self.sha256).encode(), dtype=object),
            np.array(self.model_bytes, dtype=object),
            self.normalizer.shift.astype(np.float32),
            self.normalizer.scale.astype(np.float32)]

  @classmethod
  def from_columns(cls, columns: Sequence[np.ndarray]
                  ) -> Tuple['PublishedModel', str]:
    """The model a row holds, and the checksum the row claims for it."""
    version, precision, claimed, model_bytes, shift, scale = columns
    return cls(int(version), bytes(precision).decode(errors='replace'),
               bytes(model_bytes),
               ObservationNormalizer(shift.astype(np.float32),
                                     scale.astype(np.float32))
              ), bytes(claimed).decode(errors='replace')


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
  """Learner side: inserts each model with its version into its table, and
  the fp32 variables of the same version for `tf` actors and the evaluator."""

  def __init__(self, client: reverb.Client):
    self._client = client
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
        policy_variables(network_weights, np.int64(version)),
        table=VARIABLES_TABLE)

  def publish(self, model: PublishedModel) -> None:
    check_model_size(model.precision, len(model.model_bytes))
    self._client.insert(
        model.columns(), priorities={model_table_name(model.precision): 1.0})


class ModelPuller:
  """Actor side: fetches the newest model of one precision if it is new.

  Keeps count of the versions it refused, so that an actor that cannot run
  what the learner publishes says so (status files, TensorBoard, the
  launcher) instead of acting at random unnoticed.
  """

  def __init__(self, client: reverb.Client, precision: str,
               server_timeout_s: float = 10.0,
               resample_interval_s: float = 60.0):
    self._client = client
    self._precision = precision
    self._table = model_table_name(precision)
    self._server_timeout_s = server_timeout_s
    self._refused_versions = set()
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
    self.consecutive_refusals = 0  # Refused since the last accepted model.
    self.refusing_since: Optional[float] = None  # time.time() of the first.
    self.last_refusal = ''

  @property
  def refused_count(self) -> int:
    return len(self._refused_versions)

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

    A model whose bytes fail their checksum or whose precision is not the
    one asked for is refused with a warning (once per version).
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
    model, claimed_sha256 = PublishedModel.from_columns(
        [np.asarray(column)[0] for column in sample.data])
    if (model.version <= self.version or
        model.version in self._refused_versions):
      return None
    if model.sha256 != claimed_sha256:
      self.refuse(model, 'it fails its checksum')
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
    """Never takes this version; logs why once."""
    self._refused_versions.add(model.version)
    if not self.consecutive_refusals:
      self.refusing_since = time.time()
    self.consecutive_refusals += 1
    self.last_refusal = f'version {model.version}: {reason}'
    logging.warning('Refusing %s model version %d: %s; keeping version %d.',
                    self._precision, model.version, reason, self.version)

  def accept(self, model: PublishedModel) -> None:
    """Records that the actor now runs `model`; versions only go forward."""
    if model.version <= self.version:
      raise ValueError(f'model version {model.version} is not newer than '
                       f'{self.version}')
    self.version = model.version
    self.consecutive_refusals = 0
    self.refusing_since = None


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


def policy_variables(network_variables, version):
  """The nest pushed to and pulled from the variables table."""
  return {POLICY_KEY: network_variables, VERSION_KEY: version}
