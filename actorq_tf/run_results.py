"""A run's results: the stopping rule applied to each evaluation and the
models kept (target, best), the progress read from the roles' status and
its line, and the summary written when the run ends."""
import dataclasses
import time
from typing import TYPE_CHECKING, Dict, List, Optional

import numpy as np

from actorq_tf import energy
from actorq_tf import evaluation
from actorq_tf import metrics
from actorq_tf import records
from actorq_tf import run_directory

if TYPE_CHECKING:
  from actorq_tf.launcher import RunSettings


@dataclasses.dataclass(frozen=True)
class Clock:
  start: float  # time.monotonic()
  wall_time: float  # time.time() at the same moment


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How a run ended: its status ('target_reached', a budget's name,
  'interrupted (SIGINT)', 'failed') and, if a role failed, why."""
  status: str
  error: Optional[str] = None


def target_metric(precision: str) -> str:
  # int8 actors are judged by the int8 model they run; the other precisions
  # run (a close copy of) the fp32 network.
  return 'return_int8' if precision == 'int8' else 'return_fp32'


class ResultKeeper:
  """Applies the stopping rule to each evaluation as it comes, and keeps
  (in `models/target/` and `models/best/`, where the evaluator runs) the
  evaluated versions that met it and that scored best: their int8 model,
  fp32 weights and checkpoint, and evaluation."""

  def __init__(self, root_dir: str, rule: evaluation.StoppingRule,
               roles_placement, log):
    self._root_dir = root_dir
    self.rule = rule
    self._placement = roles_placement
    self._log = log
    self.best: Optional[Dict] = None
    self.target: Optional[Dict] = None
    self.post_target: List[Dict] = []

  def recall_best(self) -> None:
    """Takes up what an earlier launch of a resumed run kept as its best
    (read where the evaluator runs, once it does)."""
    self.best = self._placement.read_kept_evaluation('best')

  def add_after_stop(self, result: Dict) -> None:
    """An evaluation that ended after the run stopped: it may be the best,
    but it neither meets the rule nor follows the target."""
    self._keep_if_best(result)

  def _keep_if_best(self, result: Dict) -> None:
    metric = self.rule.metric
    if self.best is None or result[metric] > self.best[metric]:
      if self._keep(result, 'best'):
        self.best = result

  def add(self, result: Dict) -> bool:
    """Takes the next evaluation; True when it completes the rule."""
    self._keep_if_best(result)
    if self.target is not None:
      self.post_target.append(result)
      return False
    if not self.rule.met_by(result) or not self._keep(result, 'target'):
      return False
    self.target = result
    return True

  def model_path(self, name: str) -> str:
    return run_directory.kept_model_path(self._root_dir, name)

  def _keep(self, result: Dict, name: str) -> bool:
    try:
      self._placement.keep_version(result['version'], name)
    except OSError as e:
      self._log(f'WARNING: could not keep evaluated version '
                f'{result["version"]} as the {name} model ({e}).')
      return False
    return True


def evaluation_summary(result: Optional[Dict]) -> Optional[Dict]:
  if result is None:
    return None
  return {'version': result['version'],
          'return_int8': result['return_int8'],
          'return_fp32': result['return_fp32'],
          'time': result.get('time'),
          'episodes': len(result['returns_int8'])}


def summarize(summary: records.RunSummary, outcome: Outcome,
              settings: 'RunSettings', roles_on, roles: List,
              keeper: 'ResultKeeper', clock: Clock,
              seen_results: int) -> records.RunSummary:
  """`summary` completed once every role stopped: how the run ended, the
  model it keeps and what it played, the counters, the roles' fates and
  where they ran."""
  progress = read_progress(roles_on, settings.num_actors)
  learner = progress.learner
  results = roles_on.read_results()
  for result in results[seen_results:]:  # Ended while the roles stopped.
    keeper.add_after_stop(result)
  kept_name = 'target' if keeper.target else 'best' if keeper.best else None
  kept = keeper.target or keeper.best
  actors = {run_directory.actor_role(i): actor
            for i, actor in enumerate(progress.actors)}
  summary.status = outcome.status
  summary.error = outcome.error
  summary.wall_time_s = round(time.monotonic() - clock.start, 1)
  summary.env_steps = progress.env_steps
  summary.train_steps = progress.train_steps
  summary.model_path = kept_name and keeper.model_path(kept_name)
  summary.eval_version = kept and kept['version']
  summary.eval_return_int8 = kept and kept['return_int8']
  summary.eval_return_fp32 = kept and kept['return_fp32']
  summary.target_evaluation = evaluation_summary(keeper.target)
  summary.target_model_path = (keeper.target and
                               keeper.model_path('target'))
  summary.best_evaluation = evaluation_summary(keeper.best)
  summary.best_model_path = keeper.best and keeper.model_path('best')
  summary.last_evaluation = evaluation_summary(
      results[-1] if results else None)
  summary.post_target_returns = [[r['version'], r[summary.target_metric]]
                                 for r in keeper.post_target]
  for field in dataclasses.fields(records.ReplayFigures):
    setattr(summary, field.name, getattr(learner, field.name))
  summary.model_update_bytes = learner.model_update_bytes.get(
      settings.actor_precision)
  summary.actor_model_share = {name: actor.model_share
                               for name, actor in actors.items()}
  summary.actor_refused_versions = {name: actor.refused_versions
                                    for name, actor in actors.items()}
  summary.eval_refused_versions = progress.evaluator.refused_versions
  summary.actor_replay_blocked_share = {
      name: round(actor.replay_blocked_seconds / actor.loop_seconds, 4)
      for name, actor in actors.items() if actor.loop_seconds}
  summary.actor_versions_run = {name: versions_run(actor, learner)
                                for name, actor in actors.items()}
  summary.role_restarts = {role.name: role.restarts for role in roles}
  summary.exit_codes = {role.name: role.exit_code() for role in roles}
  # A field the schema lacks fails here rather than vanish from the file.
  return dataclasses.replace(summary, **roles_on.summary())


@dataclasses.dataclass
class Progress:
  """The roles' newest status: an empty one for a role yet to write."""
  actors: List[records.ActorStatus]
  evaluator: records.EvaluatorStatus
  learner: records.LearnerStatus

  @property
  def env_steps(self) -> int:
    return sum(actor.env_steps for actor in self.actors)

  @property
  def env_steps_per_second(self) -> float:
    return sum(actor.env_steps_per_second for actor in self.actors)

  @property
  def train_steps(self) -> int:
    return self.learner.train_step

  def pullers(self) -> Dict[str, records.PullerStatus]:
    """The status of each role that pulls models, by role name."""
    pullers = {run_directory.actor_role(i): actor
               for i, actor in enumerate(self.actors)}
    pullers[run_directory.EVALUATOR_ROLE] = self.evaluator
    return pullers


def read_progress(roles_on, num_actors: int) -> Progress:
  return Progress(
      actors=[roles_on.read_status(run_directory.actor_role(i)) or
              records.ActorStatus() for i in range(num_actors)],
      evaluator=(roles_on.read_status(run_directory.EVALUATOR_ROLE) or
                 records.EvaluatorStatus()),
      learner=(roles_on.read_status(run_directory.LEARNER_ROLE) or
               records.LearnerStatus()))


def versions_run(actor: records.ActorStatus,
                 learner: records.LearnerStatus) -> Dict:
  versions = actor.versions_run
  return {'count': len(versions),
          'first': versions[0] if versions else None,
          'last': versions[-1] if versions else None,
          'not_published_by_learner': sorted(
              set(versions) - set(learner.published_versions))}


def progress_line(elapsed_s: float, progress: Progress,
                  results: List) -> str:
  oldest_model = min((a.model_version for a in progress.actors), default=0)
  line = (f'[{elapsed_s:6.0f} s] env steps {progress.env_steps:,} '
          f'({progress.env_steps_per_second:,.0f}/s) | train steps '
          f'{progress.train_steps:,} '
          f'({progress.learner.train_steps_per_second:,.0f}/s) | actor '
          f'model v{oldest_model}')
  random_share = max((1.0 - a.recent_model_share for a in progress.actors
                      if a.env_steps), default=0.0)
  if random_share >= 0.005:
    line += f' ({random_share:.0%} of recent steps random: no model)'
  fallback = sorted({a.interpreter for a in progress.actors
                     if a.interpreter.startswith('tensorflow')})
  if fallback:
    line += (f' | actors run TFLite in {fallback[0]}\'s interpreter '
             '(ai-edge-litert not installed)')
  learner = progress.learner
  for name, status in progress.pullers().items():
    if status.consecutive_refusals:
      line += (f' | {name} REFUSED {status.consecutive_refusals} '
               f'version(s), last {status.last_refusal}')
    elif status.refused_versions:
      line += (f' | {name} refused {status.refused_versions} row(s) '
               f'earlier, last {status.last_refusal}')
  for index, actor in enumerate(progress.actors):
    # Cannot happen unless the run key leaked: said, not assumed.
    unpublished = versions_run(actor, learner)['not_published_by_learner']
    if learner.time and unpublished:
      line += (f' | actor_{index} RAN VERSION(S) THE LEARNER NEVER '
               f'PUBLISHED: {unpublished[:3]}')
  if learner.replay_items_refused:
    line += (f' | learner REFUSED {learner.replay_items_refused:,} of '
             f'{learner.replay_items_checked:,} replay items, last '
             f'{learner.last_replay_refusal}')
  for kind in ('skipped', 'refused'):
    if getattr(learner, f'{kind}_exports'):
      line += (f' | learner {kind.upper()} '
               f'{getattr(learner, f"{kind}_exports")} export(s), last '
               f'{getattr(learner, f"last_{kind}_export")}')
  if results:
    r = results[-1]
    line += (f' | eval v{r["version"]}: int8 {r["return_int8"]:.1f}, '
             f'fp32 {r["return_fp32"]:.1f}')
  return line


class LaunchReporter:
  """What the launcher shows and measures beside its loop: the progress
  line (every `interval_s`, and when the run ends), the machine's energy
  (TensorBoard under `energy/`, and the summary's figures to the target and
  in all), and how long each look at the roles took, sleep excluded: what
  many roles cost the launcher."""

  def __init__(self, root_dir: str, clock: Clock, interval_s: float,
               meter: Optional[energy.EnergyMeter], log):
    self._clock = clock
    self._interval_s = interval_s
    self._next_time = time.monotonic() + interval_s
    self._meter = meter
    self._writer = meter and metrics.summary_writer(root_dir, 'energy')
    self.log = log
    self._look_start = 0.0
    self._look_seconds: List[float] = []

  def look_started(self) -> None:
    self._look_start = time.monotonic()

  def look_ended(self) -> None:
    self._look_seconds.append(time.monotonic() - self._look_start)

  def show(self, progress: Progress, results: List, ending: bool) -> None:
    """The progress line, when it is due or the run is `ending`."""
    now = time.monotonic()
    if not ending and now < self._next_time:
      return
    self.log(progress_line(now - self._clock.start, progress, results[-1:]))
    self._next_time = now + self._interval_s
    if self._meter:
      metrics.write_energy(self._writer, self._meter.reading(),
                           int(now - self._clock.start))

  def target_met(self, summary: records.RunSummary) -> None:
    if self._meter:
      reading = self._meter.reading()
      summary.energy_kwh_to_target = reading.energy_kwh
      summary.emissions_kg_to_target = reading.emissions_kg

  def finish(self, summary: records.RunSummary) -> records.RunSummary:
    """`summary` with the launcher's own figures: its looks at the roles
    and the energy of the whole run."""
    looks = self._look_seconds
    summary = dataclasses.replace(summary, monitor_look_s={
        'looks': len(looks),
        'median': round(float(np.median(looks)), 4) if looks else None,
        'max': round(max(looks), 4) if looks else None})
    if not self._meter:
      return summary
    reading = self._meter.stop()
    metrics.write_energy(self._writer, reading,
                         int(time.monotonic() - self._clock.start))
    self._writer.close()
    return dataclasses.replace(summary, **reading.as_summary())
