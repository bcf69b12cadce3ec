"""Time, env steps, energy and carbon to a target return, per actor precision.

Each run is the local launcher exactly as a user starts it (`local_main`,
one actor, same config and rate limiter for every precision), in its own
run directory under `--work_dir`; the seeds take turns over the precisions,
so drift in the machine's speed hits every precision alike. DQN experiments
have one more row, `stock`: TF-Agents' single-process DQN on the same config,
seeds and stopping rule (`benchmarks.stock_dqn`). A finished run
directory is read, not run again, so an interrupted benchmark goes on where
it stopped; an unfinished one is started anew.

Run by `benchmarks.report` (`--parts end_to_end`).
"""
import json
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from actorq_tf import records
from actorq_tf import run_directory

PRECISIONS = ('tf', 'fp32', 'int8')
# TF-Agents' single-process DQN (benchmarks.stock_dqn), run as a subprocess.
STOCK = 'stock'
# Rows of an experiment, in the order they are run and shown.
ROWS = (STOCK,) + PRECISIONS
_FINISHED = ('target_reached', 'max_wall_time', 'max_env_steps')


def run_root_dir(work_dir: str, gin_file: str, precision: str,
                 seed: int) -> str:
  experiment = os.path.splitext(os.path.basename(gin_file))[0]
  return os.path.join(work_dir, f'{experiment}_{precision}_seed{seed}')


def _finished_summary(root_dir: str) -> Optional[records.RunSummary]:
  try:
    summary = run_directory.read_summary(root_dir)
  except (OSError, json.JSONDecodeError):
    return None
  return summary if summary and summary.status in _FINISHED else None


def run_one(root_dir: str, gin_file: str, precision: str, seed: int,
            max_wall_time_s: float, energy_country: str,
            gin_bindings: Sequence[str] = (),
            continue_after_target_s: float = 0.0) -> Dict:
  """One launcher run, or a stock one (or the finished one already there);
  its figures."""
  summary = _finished_summary(root_dir)
  if summary is None:
    shutil.rmtree(root_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(root_dir), exist_ok=True)
    if precision == STOCK:
      command = [sys.executable, '-m', 'benchmarks.stock_dqn']
    else:
      command = [sys.executable, '-m', 'binaries.local_main',
                 '--actor_precision', precision,
                 '--energy_country', energy_country]
    command += ['--root_dir', root_dir, '--gin_file', gin_file,
                '--seed', str(seed), '--max_wall_time_s',
                str(max_wall_time_s), '--max_env_steps', '0',
                '--continue_after_target_s', str(continue_after_target_s)]
    for binding in gin_bindings:
      command += ['--gin_bindings', binding]
    with open(root_dir + '.log', 'w') as log:
      subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                     cwd=run_directory.PROJECT_ROOT, check=False,
                     env=dict(os.environ,
                              PYTHONPATH=run_directory.PROJECT_ROOT))
    try:
      # 'failed' runs too: the report says so.
      summary = run_directory.read_summary(root_dir)
    except (OSError, json.JSONDecodeError):
      summary = None
    if summary is None:
      raise RuntimeError(f'the {precision} run (seed {seed}) left no '
                         f'summary; see {root_dir}.log')
  return figures_of(root_dir, summary)


def figures_of(root_dir: str, summary: records.RunSummary) -> Dict:
  """What the report needs from one finished run."""
  results = run_directory.read_results(root_dir)
  start = summary.start_time
  keys = ('precision', 'seed', 'status', 'target_return', 'target_reached',
          'time_to_target_s', 'env_steps_to_target', 'train_steps_to_target',
          'wall_time_s', 'env_steps', 'train_steps', 'eval_return_int8',
          'eval_return_fp32', 'model_update_bytes', 'energy_kwh',
          'emissions_kg', 'energy_duration_s', 'energy_kwh_to_target',
          'emissions_kg_to_target', 'energy_method', 'energy_country',
          'exit_codes', 'role_restarts', 'stopping_rule',
          'post_target_returns', 'replay_samples_per_insert_after_warmup',
          'replay_regime', 'actor_replay_blocked_share')
  figures = {key: getattr(summary, key) for key in keys}
  figures['root_dir'] = root_dir
  figures['curve'] = [[round(r['time'] - start, 1), r.get('return_int8'),
                       r['return_fp32']] for r in results]
  return figures


def post_target_held(run: Dict,
                     hold_return: float) -> Optional[Tuple[int, int]]:
  """Of the evaluations after the target, how many returned (the run's
  metric) at least `hold_return`, and how many there were; None without
  any."""
  returns = [r for _, r in run.get('post_target_returns') or []]
  if not returns:
    return None
  return sum(r >= hold_return for r in returns), len(returns)


def run_experiment(work_dir: str, gin_file: str, seeds: Sequence[int],
                   max_wall_time_s: float, energy_country: str,
                   precisions: Sequence[str] = PRECISIONS,
                   gin_bindings: Sequence[str] = (),
                   continue_after_target_s: float = 0.0,
                   log=print) -> List[Dict]:
  runs = []
  for seed in seeds:
    for precision in precisions:
      root_dir = run_root_dir(work_dir, gin_file, precision, seed)
      figures = run_one(root_dir, gin_file, precision, seed, max_wall_time_s,
                        energy_country, gin_bindings, continue_after_target_s)
      energy = (f'{figures["energy_kwh"]:.5f} kWh'
                if figures['energy_kwh'] is not None else 'energy not measured')
      log(f'  {os.path.basename(root_dir)}: {figures["status"]}, '
          f'time to target {figures["time_to_target_s"]} s, {energy}')
      runs.append(figures)
  return runs
