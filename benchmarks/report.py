"""The ActorQ report: speed, reward retention, energy and carbon, one command.

Runs every benchmark side by side on this machine, then writes
`report.md`, `results.json` and two plots into `--output_dir`:

  1. batch-1 policy inference per precision at 64x64, 256x256 and
     2048x2048x2048, and of convolutional Q-networks on pixels (latency,
     model bytes, conversion time);
  2. actor env steps/s per precision beside the env-only limit, on
     CartPole-v1, on Control Suite tasks with ActorQ's policy size and on
     pixels with convolutional Q-networks;
  3. end to end: time, env steps, learner steps, energy and CO2 to a target
     return for tf, fp32 and int8 actors, reward retention (int8 vs fp32
     greedy return of the same version), bytes per model update.

  .venv/bin/python -m benchmarks.report            # full: most of a day on 2 cores
  .venv/bin/python -m benchmarks.report --parts end_to_end \
      --experiments dqn_cartpole_qat.gin           # one experiment again
  .venv/bin/python -m benchmarks.report --quick    # under 10 min on 2 cores

Each part runs in subprocesses of its own (a fresh TensorFlow and gin for
every measurement). Finished end-to-end runs in `--work_dir` are reused, so
an interrupted report goes on where it stopped; `--parts` reruns a part.
"""
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags

from actorq_tf import run_directory
from benchmarks import end_to_end
from benchmarks import report_writer

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ('inference', 'actors', 'end_to_end', 'paper_size', 'retention')
PAPER_POLICY = 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
# ActorQ's D4PG networks: the policy above and a 512x512x256 critic with
# layer norm.
PAPER_NETWORKS = (PAPER_POLICY,
                  'DistributionalCriticNetwork.fc_layer_params = '
                  '(512, 512, 256)',
                  'DistributionalCriticNetwork.layer_norm = True')


@dataclasses.dataclass
class InferenceCase:
  label: str
  gin_file: str
  gin_bindings: Tuple[str, ...]


@dataclasses.dataclass
class ActorCase:
  label: str
  gin_file: str
  gin_bindings: Tuple[str, ...]
  env_steps: int
  # Environments of the case's many-environment actor rows (1: none).
  envs_per_actor: int = 4


@dataclasses.dataclass
class Experiment:
  label: str
  gin_file: str
  max_wall_time_s: float
  gin_bindings: Tuple[str, ...] = ()
  # The actor precisions the config can run (quantization-aware networks
  # export int8 only), and `stock` for DQN; None: the plan's.
  precisions: Optional[Tuple[str, ...]] = None
  # Each run trains on this long after the target; the share of its later
  # evaluations that stay at or above `hold_return` says whether it holds.
  continue_after_target_s: float = 0.0
  hold_return: Optional[float] = None
  # None: the plan's seeds.
  seeds: Optional[Tuple[int, ...]] = None
  # The actor case (section 2) whose env steps/s project each run's time
  # before it starts (see `project_experiment`); None: no projection.
  projected_by: Optional[str] = None

  def precisions_of(self, plan_precisions: Sequence[str]) -> List[str]:
    return [p for p in plan_precisions
            if self.precisions is None or p in self.precisions]


@dataclasses.dataclass
class Plan:
  name: str
  inference_cases: Sequence[InferenceCase]
  inference_calls: int
  inference_repeats: int
  actor_cases: Sequence[ActorCase]
  actor_repeats: int
  experiments: Sequence[Experiment]
  seeds: Sequence[int]
  precisions: Sequence[str] = end_to_end.ROWS
  # The paper's setting end to end (one seed per precision), and the actor
  # case of the same task whose figures project it to K actors.
  paper_experiment: Optional[Experiment] = None
  paper_actor_case: Optional[str] = None
  # Episodes per mode of the retention part, on the checkpoint of each
  # experiment's first int8 run that reached its target.
  retention_episodes: int = 100


# Convolutional policies on pixels: dqn_catch_pixels.gin's own network, and
# the Nature-DQN torso on 84x84x4 images (Catch rendered at that size).
NATURE_DQN_PIXELS = (
    'Catch.rows = 84', 'Catch.columns = 84', 'Catch.frames = 4',
    'QNetwork.conv_layer_params = ((32, 8, 4), (64, 4, 2), (64, 3, 1))',
    'QNetwork.fc_layer_params = (512,)')

_INFERENCE_CASES = (
    InferenceCase('64x64', 'dqn_cartpole.gin',
                  ('create_q_network.fc_layer_params = (64, 64)',)),
    InferenceCase('256x256', 'dqn_cartpole.gin',
                  ('create_q_network.fc_layer_params = (256, 256)',)),
    InferenceCase('2048x2048x2048', 'd4pg_walker_stand.gin', (PAPER_POLICY,)),
    InferenceCase('conv, Catch 10x5x1 pixels', 'dqn_catch_pixels.gin', ()),
    InferenceCase('conv, Nature-DQN torso on 84x84x4 pixels',
                  'dqn_catch_pixels.gin', NATURE_DQN_PIXELS),
)

PLANS = {
    'full': Plan(
        name='full',
        inference_cases=_INFERENCE_CASES, inference_calls=2000,
        inference_repeats=5,
        actor_cases=(
            ActorCase('CartPole-v1, 256x256 Q-network', 'dqn_cartpole.gin',
                      (), 20_000),
            ActorCase('walker-stand, 2048x2048x2048 policy',
                      'd4pg_walker_stand.gin', (PAPER_POLICY,), 2_000),
            ActorCase('cartpole-balance, 2048x2048x2048 policy',
                      'd4pg_cartpole_balance.gin', (PAPER_POLICY,), 2_000),
            ActorCase('Catch 10x5x1 pixels, conv Q-network',
                      'dqn_catch_pixels.gin', (), 20_000),
            ActorCase('84x84x4 pixels, Nature-DQN torso',
                      'dqn_catch_pixels.gin', NATURE_DQN_PIXELS, 2_000)),
        actor_repeats=3,
        experiments=(
            # The default config first: against TF-Agents' own DQN, and
            # whether what it learned holds after the target.
            Experiment('CartPole-v1 (DQN, quantization-aware training)',
                       'dqn_cartpole_qat.gin', 780,
                       precisions=('stock', 'int8', 'tf'),
                       continue_after_target_s=300, hold_return=400,
                       seeds=(0, 1, 2, 3, 4)),
            Experiment('CartPole-v1 (DQN)', 'dqn_cartpole.gin', 780,
                       precisions=end_to_end.PRECISIONS),
            Experiment('Pendulum-v1 (D4PG)', 'd4pg_pendulum.gin', 240,
                       precisions=end_to_end.PRECISIONS),
            # The end-to-end gain: paper-size networks at a ratio low enough
            # that the learner (about 3 train steps/s here) takes about 100
            # env steps/s, more than one tf actor makes at this size and
            # less than one fp32 or int8 actor, so the projection expects
            # tf's runs to be held by their actor. At most 9 runs of 3,000 s
            # (7.5 machine hours); resumable run by run.
            Experiment('cartpole-balance (D4PG), paper-size networks, 4 '
                       'samples per insert', 'd4pg_cartpole_balance.gin',
                       3000, PAPER_NETWORKS + (
                           'replay_table.samples_per_insert = 4.0',),
                       precisions=end_to_end.PRECISIONS, seeds=(0, 1, 2),
                       projected_by='cartpole-balance, 2048x2048x2048 '
                       'policy')),
        seeds=(0, 1, 2),
        paper_experiment=Experiment(
            'cartpole-balance (D4PG), paper-size networks',
            'd4pg_cartpole_balance.gin', 3000, PAPER_NETWORKS,
            precisions=end_to_end.PRECISIONS),
        paper_actor_case='cartpole-balance, 2048x2048x2048 policy',
        retention_episodes=100),
    'quick': Plan(
        name='quick',
        inference_cases=_INFERENCE_CASES, inference_calls=300,
        inference_repeats=3,
        actor_cases=(ActorCase('CartPole-v1, 256x256 Q-network',
                               'dqn_cartpole.gin', (), 2_000),),
        actor_repeats=1,
        experiments=(
            Experiment('Pendulum-v1 (D4PG)', 'd4pg_pendulum.gin', 90,
                       precisions=end_to_end.PRECISIONS),),
        seeds=(0,), retention_episodes=10),
}


def _run_benchmark(module: str, gin_file: Optional[str],
                   gin_bindings: Sequence[str], args: Sequence[str],
                   log_path: str) -> Dict:
  with tempfile.TemporaryDirectory() as tmp:
    output = os.path.join(tmp, 'figures.json')
    command = [sys.executable, '-m', module, '--output_json', output, *args]
    if gin_file:
      command += ['--gin_file', gin_file]
    for binding in gin_bindings:
      command += ['--gin_bindings', binding]
    with open(log_path, 'w') as log:
      result = subprocess.run(
          command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT,
          check=False, env=dict(os.environ, PYTHONPATH=PROJECT_ROOT,
                                TF_CPP_MIN_LOG_LEVEL='2'))
    if result.returncode != 0:
      raise RuntimeError(f'{module} failed (exit {result.returncode}); see '
                         f'{log_path}')
    with open(output) as f:
      return json.load(f)


def run_inference(plan: Plan, work_dir: str, log=print) -> List[Dict]:
  figures = []
  for case in plan.inference_cases:
    log(f'Policy inference, {case.label}...')
    measured = _run_benchmark(
        'benchmarks.policy_inference', case.gin_file, case.gin_bindings,
        ['--calls', str(plan.inference_calls),
         '--repeats', str(plan.inference_repeats)],
        os.path.join(work_dir, f'inference_{case.label}.log'))
    figures.append({'label': case.label, **measured})
  return figures


def run_actors(plan: Plan, work_dir: str, log=print) -> List[Dict]:
  figures = []
  for i, case in enumerate(plan.actor_cases):
    log(f'Actor throughput, {case.label}...')
    measured = _run_benchmark(
        'benchmarks.actor_throughput', case.gin_file, case.gin_bindings,
        ['--env_steps', str(case.env_steps),
         '--repeats', str(plan.actor_repeats),
         '--envs_per_actor', str(case.envs_per_actor)],
        os.path.join(work_dir, f'actors_{i}.log'))
    figures.append({'label': case.label, **measured})
  return figures


def replay_settings(gin_file: str, gin_bindings: Sequence[str]) -> Dict:
  """The replay regime, samples per insert and batch of a config."""
  # pylint: disable=g-import-not-at-top
  import gin
  from actorq_tf import config
  from actorq_tf import learner
  from actorq_tf import replay
  # pylint: enable=g-import-not-at-top
  config.parse_gin([gin_file], gin_bindings)
  try:
    return {'regime': config.bound_parameter(replay.replay_table, 'regime'),
            'samples_per_insert': config.bound_parameter(
                replay.replay_table, 'samples_per_insert'),
            'batch_size': config.bound_parameter(learner.train,
                                                 'batch_size')}
  finally:
    gin.clear_config()


def project_experiment(experiment: Experiment, precisions: Sequence[str],
                       results: Dict) -> Dict:
  """Each precision's time to target, projected before its runs start:
  T = E / min(r, L / u) (report_writer.projected_time_to_target) with E
  and L from the paper-size int8 run, r from the actor case
  `experiment.projected_by` and u from the experiment's own config (a
  free-running replay has no u: T = E / r). Or {'error': why not}."""
  paper_runs = (results.get('paper_size') or {}).get('runs', [])
  int8 = next((r for r in paper_runs
               if r['precision'] == 'int8' and r['target_reached']), None)
  case = next((c for c in results.get('actors') or []
               if c['label'] == experiment.projected_by), None)
  if int8 is None or case is None:
    return {'error': 'it needs the paper-size int8 run at its target and '
                     f'the actor case {experiment.projected_by!r}'}
  replay = replay_settings(experiment.gin_file, experiment.gin_bindings)
  train_steps_per_env_step = (
      None if replay['regime'] == 'free_running'
      else replay['samples_per_insert'] / replay['batch_size'])
  inputs = {'env_steps': int8['env_steps_to_target'],
            'learner_steps_per_s': (int8['train_steps_to_target'] /
                                    int8['time_to_target_s']),
            'train_steps_per_env_step': train_steps_per_env_step,
            'actor_steps_per_s': {p: case['steps_per_second'][p]
                                  for p in precisions
                                  if p in case['steps_per_second']}}
  return {'made': _now(), 'inputs': inputs,
          'time_to_target_s': {
              p: report_writer.projected_time_to_target(
                  inputs['env_steps'], rate, 1,
                  inputs['learner_steps_per_s'], train_steps_per_env_step)
              for p, rate in inputs['actor_steps_per_s'].items()}}


def _projection_before_runs(experiment: Experiment, precisions: Sequence[str],
                            results: Dict, work_dir: str) -> Dict:
  """The experiment's projection, written to `work_dir` before its first
  run starts; the one written there earlier if the experiment resumes, so
  that it stays a prediction."""
  name = ''.join(c if c.isalnum() else '_' for c in experiment.label)
  path = os.path.join(work_dir, f'projection_{name}.json')
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  projection = project_experiment(experiment, precisions, results)
  if 'error' not in projection:
    report_writer.write_json(path, projection)
  return projection


def run_end_to_end(plan: Plan, work_dir: str, energy_country: str,
                   earlier: Sequence[Dict] = (),
                   gin_files: Optional[Sequence[str]] = None,
                   log=print, results: Optional[Dict] = None) -> List[Dict]:
  """The plan's experiments; with `gin_files`, only those of these configs
  are measured and the others keep their `earlier` figures (each figure
  says when it was measured). An experiment with `projected_by` has its
  runs projected from `results` before the first starts; a projection made
  earlier is kept, so a resumed experiment is judged by what was predicted
  before it began."""
  kept = {figure['label']: figure for figure in earlier}
  figures = []
  for experiment in plan.experiments:
    precisions = experiment.precisions_of(plan.precisions)
    if gin_files is not None and experiment.gin_file not in gin_files:
      if experiment.label in kept:
        figures.append(kept[experiment.label])
      continue
    if not precisions:
      continue
    seeds = experiment.seeds or plan.seeds
    projection = None
    if experiment.projected_by:
      projection = _projection_before_runs(experiment, precisions,
                                           results or {}, work_dir)
      log(f'Projected time to target, {experiment.label}: '
          f'{projection.get("time_to_target_s") or projection["error"]}')
    log(f'End to end, {experiment.label}: seeds {list(seeds)} x '
        f'{precisions}, at most {experiment.max_wall_time_s:g} s each...')
    runs = end_to_end.run_experiment(
        work_dir, experiment.gin_file, seeds, experiment.max_wall_time_s,
        energy_country, precisions, experiment.gin_bindings,
        experiment.continue_after_target_s, log=log)
    figures.append({'label': experiment.label,
                    'gin_file': experiment.gin_file,
                    'gin_bindings': list(experiment.gin_bindings),
                    'max_wall_time_s': experiment.max_wall_time_s,
                    'continue_after_target_s':
                        experiment.continue_after_target_s,
                    'hold_return': experiment.hold_return,
                    'measured': _now(),
                    **({'projection': projection} if projection else {}),
                    'runs': runs})
  return figures


def run_paper_size(plan: Plan, work_dir: str, energy_country: str,
                   earlier: Optional[Dict] = None,
                   log=print) -> Optional[Dict]:
  """The paper-size experiment, one seed per precision, with what its
  projection needs: the replay ratio and batch of its config. Runs of
  precisions not measured now are kept from `earlier` (each costs most of an
  hour)."""
  experiment = plan.paper_experiment
  if experiment is None:
    return None
  precisions = experiment.precisions_of(plan.precisions)
  log(f'Paper size, {experiment.label}: {precisions}, at most '
      f'{experiment.max_wall_time_s:g} s each...')
  runs = end_to_end.run_experiment(
      os.path.join(work_dir, 'paper_size'), experiment.gin_file, (0,),
      experiment.max_wall_time_s, energy_country, precisions,
      experiment.gin_bindings, log=log)
  if earlier and earlier.get('gin_bindings') == list(experiment.gin_bindings):
    kept = [run for run in earlier['runs']
            if run['precision'] not in precisions]
    runs = sorted(kept + runs, key=lambda run: end_to_end.PRECISIONS.index(
        run['precision']))
  replay = replay_settings(experiment.gin_file, experiment.gin_bindings)
  replay_ratio = {key: replay[key]
                  for key in ('samples_per_insert', 'batch_size')}
  return {'label': experiment.label, 'gin_file': experiment.gin_file,
          'gin_bindings': list(experiment.gin_bindings),
          'max_wall_time_s': experiment.max_wall_time_s,
          'actor_case': plan.paper_actor_case, **replay_ratio, 'runs': runs}


def _measure_retention(plan: Plan, label: str, run_dir: str, index: int,
                       work_dir: str, log) -> Dict:
  log(f'Retention, {label}: {plan.retention_episodes} episodes per mode on '
      f'{run_dir}...')
  try:
    measured = _run_benchmark(
        'benchmarks.retention', None, (),
        ['--run_dir', run_dir, '--episodes', str(plan.retention_episodes)],
        os.path.join(work_dir, f'retention_{index}.log'))
  except RuntimeError as e:
    return {'label': label, 'error': str(e)}
  return {'label': label, 'measured': _now(), **measured['runs'][0]}


def run_retention(plan: Plan, results: Dict, work_dir: str, log=print,
                  run_dirs: Sequence[str] = ()) -> List[Dict]:
  """Every precision on the same seeded episodes, on the checkpoint of each
  experiment's (and the paper-size experiment's) first int8 run that reached
  its target: the last evaluation of a run is picked by the stopping rule.

  With `run_dirs`, on those trained run directories instead. Earlier rows
  of other labels are kept, and so are those of experiments whose run
  directories are gone."""
  if run_dirs:
    figures = []
    for run_dir in run_dirs:
      name = os.path.basename(os.path.normpath(run_dir))
      row = _measure_retention(plan, f'run {name}', os.path.abspath(run_dir),
                               len(figures), work_dir, log)
      if 'environment' in row:
        row['label'] = f'{row["environment"]}, run {name}'
      figures.append(row)
    labels = {row['label'] for row in figures}
    return [row for row in results.get('retention') or []
            if row['label'] not in labels] + figures
  experiments = list(results.get('end_to_end') or [])
  if results.get('paper_size'):
    experiments.append(results['paper_size'])
  earlier = {row['label']: row for row in results.get('retention') or []}
  figures = []
  for experiment in experiments:
    runs = [r for r in experiment['runs']
            if r['precision'] == 'int8' and r['target_reached']]
    found = [os.path.abspath(r['root_dir']) for r in runs
             if os.path.isdir(os.path.join(r['root_dir'],
                                          run_directory.CHECKPOINTS_DIR))]
    kept = earlier.get(experiment['label'])
    if found:
      figures.append(_measure_retention(plan, experiment['label'], found[0],
                                        len(figures), work_dir, log))
    elif runs and kept and 'error' not in kept:
      # Measured before its run directories went: the figures still hold.
      figures.append(kept)
    else:
      figures.append({'label': experiment['label'], 'error': (
          'no int8 run of this experiment reached its target' if not runs
          else 'its run directories are gone; measure end_to_end again')})
  # Rows of trained run directories (`run_dirs` of an earlier call) stay.
  labels = {experiment['label'] for experiment in experiments}
  return figures + [row for label, row in earlier.items()
                    if label not in labels]


def machine() -> Dict:
  cpu = platform.processor()
  try:
    with open('/proc/cpuinfo') as f:
      cpu = next(line.split(':', 1)[1].strip() for line in f
                 if line.startswith('model name'))
  except (OSError, StopIteration):
    pass
  memory_gb = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30
  return {'cpu': cpu, 'cores': os.cpu_count(),
          'memory_gb': round(memory_gb, 1), 'os': platform.platform(),
          'python': platform.python_version(), 'gpu': _gpu()}


def _gpu() -> Optional[str]:
  try:
    result = subprocess.run(['nvidia-smi', '--query-gpu=name',
                             '--format=csv,noheader'], capture_output=True,
                            text=True, timeout=10, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return result.stdout.strip() or None


def versions() -> Dict:
  names = ('tensorflow', 'tf-agents', 'dm-reverb', 'tensorflow-probability',
           'tf-keras', 'gym', 'dm-control', 'mujoco', 'numpy', 'codecarbon',
           'matplotlib', 'ai-edge-litert', 'ai-edge-quantizer')
  found = {}
  for name in names:
    try:
      found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      found[name] = None
  return found


def _now() -> str:
  return datetime.datetime.now().strftime('%Y-%m-%d %H:%M')


def run_report(plan: Plan, output_dir: str, work_dir: str,
               energy_country: str, parts: Sequence[str] = PARTS,
               command: str = '', log=print,
               retention_run_dirs: Sequence[str] = (),
               end_to_end_gin_files: Optional[Sequence[str]] = None) -> Dict:
  """Measures the parts asked for, keeps earlier figures of the others (in
  `output_dir/results.json`), writes the report; returns the results. The
  retention part measures `retention_run_dirs` if given (see
  run_retention); the end-to-end part only the experiments of
  `end_to_end_gin_files` if given (see run_end_to_end)."""
  os.makedirs(output_dir, exist_ok=True)
  os.makedirs(work_dir, exist_ok=True)
  results_path = os.path.join(output_dir, report_writer.RESULTS_FILE)
  results = {}
  if os.path.exists(results_path):
    with open(results_path) as f:
      results = json.load(f)
    if results.get('plan') != plan.name:
      results = {}
  # Figures from before experiments and checkpoints carried their own date.
  for part in ('end_to_end', 'retention'):
    for figure in results.get(part) or []:
      if 'error' not in figure:
        figure.setdefault('measured', results['measured'][part]['date'])
  results.update(plan=plan.name, command=command,
                 date=_now(),
                 machine=machine(), versions=versions(),
                 energy_country=energy_country)
  for part in parts:
    if part == 'inference':
      results['inference'] = run_inference(plan, work_dir, log)
    elif part == 'actors':
      results['actors'] = run_actors(plan, work_dir, log)
    elif part == 'end_to_end':
      results['end_to_end'] = run_end_to_end(
          plan, work_dir, energy_country, results.get('end_to_end') or (),
          end_to_end_gin_files, log, results)
    elif part == 'retention':
      results['retention'] = run_retention(plan, results, work_dir, log,
                                           retention_run_dirs)
    elif part == 'paper_size':
      results['paper_size'] = run_paper_size(
          plan, work_dir, energy_country, results.get('paper_size'), log)
    results.setdefault('measured', {})[part] = {
        'date': _now(),
        'command': command}
    # Written after every part: hours of measurements survive a crash.
    report_writer.write_json(results_path, results)
  report_writer.write_report(results, output_dir)
  return results


flags.DEFINE_bool('quick', False, 'The quick plan: smaller measurements and '
                  'one short end-to-end seed per precision (under 10 min).')
flags.DEFINE_string('output_dir', None, 'Where the report goes; default '
                    'benchmarks/results (quick: benchmarks/results/quick).')
flags.DEFINE_string('work_dir', None, 'Run directories and logs; default '
                    'runs/benchmarks_<plan>.')
flags.DEFINE_list('parts', list(PARTS), 'Parts to measure now; the others '
                  'keep the figures of an earlier run of the same plan.')
flags.DEFINE_string('energy_country', 'USA', 'Grid whose carbon intensity '
                    'applies (3-letter ISO code).')
flags.DEFINE_multi_string('retention_run_dir', [], 'Trained run '
                          'directories the retention part measures instead '
                          'of the end-to-end runs (earlier rows of other '
                          'runs are kept).')
flags.DEFINE_list('experiments', None, 'Gin files of the end-to-end '
                  'experiments to measure; the others keep their earlier '
                  'figures. Default: every experiment of the plan.')
flags.DEFINE_list('precisions', None, 'Actor precisions of the end-to-end '
                  'and paper-size runs; default the plan\'s (tf, fp32, '
                  'int8).')
FLAGS = flags.FLAGS


def main(_):
  unknown = set(FLAGS.parts) - set(PARTS)
  if unknown:
    raise app.UsageError(f'unknown --parts {sorted(unknown)}; choose from '
                         f'{list(PARTS)}')
  plan = PLANS['quick' if FLAGS.quick else 'full']
  if FLAGS.precisions:
    unknown = set(FLAGS.precisions) - set(end_to_end.ROWS)
    if unknown:
      raise app.UsageError(f'unknown --precisions {sorted(unknown)}; choose '
                           f'from {list(end_to_end.ROWS)}')
    plan = dataclasses.replace(plan, precisions=tuple(FLAGS.precisions))
  if FLAGS.experiments:
    unknown = set(FLAGS.experiments) - {e.gin_file for e in plan.experiments}
    if unknown:
      raise app.UsageError(
          f'unknown --experiments {sorted(unknown)}; the plan\'s are '
          f'{[e.gin_file for e in plan.experiments]}')
  output_dir = FLAGS.output_dir or os.path.join(
      PROJECT_ROOT, 'benchmarks', 'results', *(['quick'] if FLAGS.quick
                                               else []))
  work_dir = FLAGS.work_dir or os.path.join(PROJECT_ROOT, 'runs',
                                            f'benchmarks_{plan.name}')
  run_report(plan, output_dir, work_dir, FLAGS.energy_country, FLAGS.parts,
             command=' '.join(['python -m benchmarks.report'] + sys.argv[1:]),
             retention_run_dirs=FLAGS.retention_run_dir,
             end_to_end_gin_files=FLAGS.experiments)
  print(f'Report: {os.path.join(output_dir, report_writer.REPORT_FILE)}')


if __name__ == '__main__':
  app.run(main)
