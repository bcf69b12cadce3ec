"""What a run's processes write for one another to read: each role's status
(`status/<role>.json`) and the launcher's `summary.json`.

One schema for the writer and the reader. A writer builds the record, so a
field that is not in the schema fails where it is written, not where it is
missed; a reader gets the record back typed, with the defaults of the fields
that a file of an older launch lacks (and without the fields it no longer
knows).
"""
import dataclasses
from typing import Any, Dict, List, Optional, Type, TypeVar

RecordType = TypeVar('RecordType', bound='Record')


@dataclasses.dataclass
class Record:

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls: Type[RecordType], fields: Dict[str, Any]) -> RecordType:
    known = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in fields.items()
                  if name in known})


@dataclasses.dataclass
class RoleStatus(Record):
  time: float = 0.0  # time.time() of the writing.
  pid: int = 0
  stopped: bool = False  # The role's last status: it ended on its own.


@dataclasses.dataclass
class PullerStatus(RoleStatus):
  """A role that pulls models: its newest model and the rows it refused
  (see `model_channel.Refusals`)."""
  model_version: int = 0  # 0: none yet.
  refused_versions: int = 0
  consecutive_refusals: int = 0
  refusing_since: Optional[float] = None  # time.time() of the first.
  last_refusal: Optional[str] = None


@dataclasses.dataclass
class ActorStatus(PullerStatus):
  precision: str = ''
  env_steps: int = 0
  episodes: int = 0
  environments: int = 1  # stepped in turn, one model call for all
  # The runtime TFLite models run in, with its version (see
  # interpreter.runtime_name); empty for tf actors.
  interpreter: str = ''
  # Of the last interval; absent (0) in the status of a stopped actor.
  env_steps_per_second: float = 0.0
  episode_return: Optional[float] = None  # Mean of the last interval's.
  # Env steps whose action no model chose (before the first model), and the
  # share of all env steps, and of the last interval's, that a model chose.
  steps_without_model: int = 0
  model_share: float = 0.0
  recent_model_share: float = 0.0
  versions_run: List[int] = dataclasses.field(default_factory=list)
  # Seconds of the env loop (model pulls included), of the model pulls, and
  # of waits for the replay's rate limiter.
  loop_seconds: float = 0.0
  model_pull_seconds: float = 0.0
  replay_blocked_seconds: float = 0.0
  # Share of the loop's time in the policy, env, replay and the rest.
  time_share: Dict[str, float] = dataclasses.field(default_factory=dict)
  novelty: Dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class EvaluatorStatus(PullerStatus):
  evaluations: int = 0
  # int8 versions not evaluated: their fp32 variables never came.
  unmatched_versions: int = 0
  # The newest evaluation (see `evaluation.run_evaluator`).
  version: Optional[int] = None
  fp32_version: Optional[int] = None
  return_int8: Optional[float] = None
  return_fp32: Optional[float] = None


@dataclasses.dataclass
class ReplayFigures(Record):
  """The replay's regime ('fixed_ratio', 'free_running'; see
  `replay.replay_table`) and counters (`replay.rate_figures`), and the
  items the run key did not verify (`replay.Refusals`): in the learner's
  status as they go, in the summary as they ended."""
  replay_regime: Optional[str] = None
  replay_max_times_sampled: Optional[int] = None
  replay_inserts: Optional[int] = None
  replay_samples: Optional[int] = None
  replay_samples_per_insert: Optional[float] = None
  replay_samples_per_insert_after_warmup: Optional[float] = None
  replay_samples_per_insert_configured: Optional[float] = None
  replay_items_checked: int = 0
  replay_items_refused: int = 0
  replay_items_refused_in_a_row: int = 0
  last_replay_refusal: Optional[str] = None


@dataclasses.dataclass
class EnergyFigures(Record):
  """An `energy.EnergyReading`: the learner's own meter in its status, the
  launcher's machine over the whole run in the summary."""
  energy_kwh: Optional[float] = None
  emissions_kg: Optional[float] = None
  energy_duration_s: Optional[float] = None
  energy_method: Optional[str] = None
  energy_country: Optional[str] = None


@dataclasses.dataclass
class LearnerStatus(EnergyFigures, ReplayFigures, RoleStatus):
  train_step: int = 0
  restored_train_step: int = 0  # Where this launch of the learner began.
  loss: Optional[float] = None
  train_steps_per_second: float = 0.0
  replay_size: Optional[int] = None
  # Every version this run's learner published, in every launch, and what
  # one model update costs to send, per actor precision.
  published_versions: List[int] = dataclasses.field(default_factory=list)
  model_update_bytes: Dict[str, int] = dataclasses.field(default_factory=dict)
  # Exports (see `learner.ExportTrigger`).
  exports: int = 0
  refused_exports: int = 0
  last_refused_export: Optional[str] = None
  skipped_exports: int = 0
  last_skipped_export: Optional[str] = None


@dataclasses.dataclass
class ServerStatus(RoleStatus):
  port: Optional[int] = None
  restored_items: Optional[int] = None  # From the replay checkpoint.
  last_checkpoint: Optional[str] = None
  last_checkpoint_items: Optional[int] = None


@dataclasses.dataclass
class RunSummary(EnergyFigures, ReplayFigures):
  """The launcher's verdict on a run (`summary.json`)."""
  # What ran.
  precision: str = ''
  num_actors: int = 0
  seed: int = 0
  code_version: Optional[str] = None
  gin_files: List[str] = dataclasses.field(default_factory=list)
  gin_bindings: List[str] = dataclasses.field(default_factory=list)
  start_time: float = 0.0
  resumed: bool = False
  earlier_launches: List[Dict] = dataclasses.field(default_factory=list)
  replay_server_address: Optional[str] = None
  # The stopping rule and whether, when and after what it was met.
  target_return: Optional[float] = None
  target_metric: str = ''
  stopping_rule: Dict = dataclasses.field(default_factory=dict)
  target_reached: bool = False
  time_to_target_s: Optional[float] = None
  env_steps_to_target: Optional[int] = None
  train_steps_to_target: Optional[int] = None
  energy_kwh_to_target: Optional[float] = None
  emissions_kg_to_target: Optional[float] = None
  # How it ended ('target_reached', a budget's name, 'interrupted (...)',
  # 'failed') and why, if a role failed.
  status: str = ''
  error: Optional[str] = None
  wall_time_s: Optional[float] = None
  env_steps: int = 0
  train_steps: int = 0
  # The kept model and what it played: the version that met the target,
  # else the best evaluated one.
  model_path: Optional[str] = None
  eval_version: Optional[int] = None
  eval_return_int8: Optional[float] = None
  eval_return_fp32: Optional[float] = None
  target_evaluation: Optional[Dict] = None
  target_model_path: Optional[str] = None
  best_evaluation: Optional[Dict] = None
  best_model_path: Optional[str] = None
  last_evaluation: Optional[Dict] = None
  # [version, return] of the evaluations after the target.
  post_target_returns: List[List] = dataclasses.field(default_factory=list)
  model_update_bytes: Optional[int] = None  # At the actors' precision.
  # Per actor: the share of its env steps whose action a model chose, the
  # versions it refused, and which versions it acted with (all signed with
  # the run key and published by the learner, else named).
  actor_model_share: Dict[str, float] = dataclasses.field(
      default_factory=dict)
  actor_refused_versions: Dict[str, int] = dataclasses.field(
      default_factory=dict)
  actor_versions_run: Dict[str, Dict] = dataclasses.field(
      default_factory=dict)
  eval_refused_versions: int = 0
  # Per actor, the share of its loop's time that it waited for the replay's
  # rate limiter: near 0, the actors set the pace; well above 0, the
  # learner held them (a fixed ratio with a slower learner).
  actor_replay_blocked_share: Dict[str, float] = dataclasses.field(
      default_factory=dict)
  # The roles' fates, and the launcher's own cost.
  role_restarts: Dict[str, int] = dataclasses.field(default_factory=dict)
  exit_codes: Dict[str, Optional[int]] = dataclasses.field(
      default_factory=dict)
  chaos_kills: List[List] = dataclasses.field(default_factory=list)
  monitor_look_s: Dict = dataclasses.field(default_factory=dict)
  # Where the roles ran, on a Ray cluster (see `ray_cluster`).
  ray_address: Optional[str] = None
  ray_overhead: Optional[Dict] = None
  role_nodes: Optional[Dict] = None

