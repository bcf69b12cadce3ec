"""Turns the report's measurements (results.json) into report.md and plots.

Every ratio is stated explicitly, and every goal of `benchmarks/goals.py`
(the design card's) is checked: where one is not met the report says so in
words.
"""
import json
import math
import os
import statistics
from typing import Dict, List, Optional, Sequence

import matplotlib

from actorq_tf.evaluation import retention
from benchmarks import goals as G
from benchmarks.end_to_end import ROWS
from benchmarks.end_to_end import STOCK
from benchmarks.end_to_end import post_target_held

matplotlib.use('Agg')  # Files only; no display on a benchmark machine.
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

RESULTS_FILE = 'results.json'
REPORT_FILE = 'report.md'
RETURN_PLOT = 'eval_return_vs_wall_time.png'
ACTOR_PLOT = 'actor_steps_per_second.png'
PRECISION_COLOURS = {'tf': 'tab:blue', 'fp32': 'tab:orange',
                     'int8': 'tab:green', 'fp16': 'tab:purple',
                     STOCK: 'tab:grey'}
NOT_REACHED = math.inf


def write_json(path: str, results: Dict) -> None:
  with open(path + '.tmp', 'w') as f:
    json.dump(results, f, indent=1)
  os.replace(path + '.tmp', path)


def retention_over_evaluations(run: Dict) -> Optional[float]:
  """Retention of the summed returns of every evaluation of a run.

  The last evaluation is chosen by the stopping rule (the run stops when
  the precision's own metric peaks over the target), which biases its
  retention; every evaluation compares the same version and seeds too.
  """
  if not run['curve'] or any(point[1] is None for point in run['curve']):
    return None  # A stock run has no int8 model.
  return retention(sum(point[1] for point in run['curve']),
                   sum(point[2] for point in run['curve']))


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def _range(values: Sequence[Optional[float]]) -> Optional[tuple]:
  values = [v for v in values if v is not None]
  return (min(values), max(values)) if values else None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
  if a is None or b is None or b == 0 or math.isinf(a) or math.isinf(b):
    return None
  return a / b


def _replay_regime(run: Dict) -> str:
  # Runs before the option was recorded ran the only regime there was.
  return run.get('replay_regime') or 'fixed_ratio'


# Actors held by the replay's rate limiter for at least this share of their
# loop: the learner set the run's pace.
LEARNER_BOUND_HELD_SHARE = 0.5


def learner_bound(table: Dict, precisions: Sequence[str]) -> Optional[bool]:
  """Whether the learner bound the runs of every one of `precisions`
  (their actors waited for a fixed ratio at least LEARNER_BOUND_HELD_SHARE
  of the time); None where the runs did not record it."""
  rows = [table.get(p, {}) for p in precisions]
  if any(row.get('held_by_learner') is None for row in rows):
    return None
  return all(row['replay_regimes'] == ['fixed_ratio'] and
             row['held_by_learner'] >= LEARNER_BOUND_HELD_SHARE
             for row in rows)


def _to_target_goal(table: Dict, figure: str, goal: float,
                    other: str = 'tf'):
  """`_bounded_ratio`, except that a goal which the learner made
  unreachable (it bound both precisions' runs) says so."""
  ratio, status = _bounded_ratio(table, figure, goal, other)
  if status != 'met' and learner_bound(table, ('int8', other)):
    status = ('cannot be met in this regime: the learner bound both runs '
              '(fixed ratio; actors held ' + ', '.join(
                  f'{p} {table[p]["held_by_learner"]:.0%}'
                  for p in ('int8', other)) + ' of their time)')
  return ratio, status


def _bounded_ratio(table: Dict, figure: str, goal: float,
                   other: str = 'tf'):
  """int8 / other of a to-target figure, and whether the goal is met.

  Where a median fell on a run that missed the target, only a lower bound
  of it is known (`experiment_table`'s `<figure>_lower_bound`): the ratio is
  then a bound.
  """
  int8, base = table.get('int8', {}), table.get(other, {})
  a, b = int8.get(figure), base.get(figure)
  if a is None or b is None:
    return 'n/a', 'not measured'
  if math.isinf(a) and math.isinf(b):
    return 'n/a (neither reached the target)', 'not measured'
  lower_bound = lambda t: t.get(f'{figure}_lower_bound')
  if (math.isinf(a) and not lower_bound(int8)) or (math.isinf(b) and
                                                  not lower_bound(base)):
    return 'n/a', 'not measured'
  if math.isinf(b):
    bound = a / lower_bound(base)
    return (f'< {bound:.2f} ({other} missed the target)',
            'met' if bound <= goal else f'undecided ({other} missed the '
            f'target)')
  if math.isinf(a):
    return (f'> {lower_bound(int8) / b:.2f} (int8 missed the target)',
            '**NOT met**')
  ratio = a / b
  return f'{ratio:.2f}', _met(ratio, goal, at_most=True)


def _fmt(value, spec: str = '.2f', none: str = 'n/a') -> str:
  if value is None:
    return none
  if isinstance(value, float) and math.isinf(value):
    return 'not reached'
  return format(value, spec)


def _fmt_held(held: Optional[Sequence[int]]) -> str:
  if held is None:
    return 'n/a'
  kept, evaluations = held
  return f'{kept / evaluations:.2f} ({kept}/{evaluations})'


def _met(value: Optional[float], goal: float, at_most: bool) -> str:
  if value is None:
    return 'not measured'
  met = value <= goal if at_most else value >= goal
  return 'met' if met else '**NOT met**'


def _at_budget(run: Dict, figure: str, budget: float) -> Optional[float]:
  if run[figure] is None or not run.get('energy_duration_s'):
    return None
  return run[figure] * min(1.0, budget / run['energy_duration_s'])


# The to-target figures, each with what a run that missed the target had
# spent of it when its budget ran out: less than reaching it would have
# taken.
_SPENT_BY_BUDGET = {
    'time_to_target_s': lambda run, budget: budget,
    'env_steps_to_target': lambda run, budget: run['env_steps'],
    'train_steps_to_target': lambda run, budget: run['train_steps'],
    'energy_kwh_to_target': lambda run, budget: _at_budget(
        run, 'energy_kwh', budget),
    'emissions_kg_to_target': lambda run, budget: _at_budget(
        run, 'emissions_kg', budget),
}


def _to_target_lower_bound(runs: Sequence[Dict], figure: str,
                           budget: float) -> Optional[float]:
  """A lower bound of the median of `figure` over runs: a run that missed
  the target counts with what it had spent by the end of its budget (an
  order statistic falls when any value falls). None where a missed run
  did not record it."""
  values = [r[figure] if r['target_reached']
            else _SPENT_BY_BUDGET[figure](r, budget) for r in runs]
  return None if None in values else statistics.median(values)


def experiment_table(experiment: Dict) -> Dict[str, Dict]:
  """Per precision: medians over seeds of each end-to-end figure."""
  budget = experiment['max_wall_time_s']
  hold_return = experiment.get('hold_return')
  table = {}
  for precision in ROWS:
    runs = [r for r in experiment['runs'] if r['precision'] == precision]
    if not runs:
      continue
    # A run that missed the target counts as slower than any that made it.
    to_target = lambda key: [r[key] if r['target_reached'] else NOT_REACHED
                             for r in runs]
    table[precision] = {
        'seeds': len(runs),
        'reached': sum(r['target_reached'] for r in runs),
        'times': to_target('time_to_target_s'),
        **{figure: _median(to_target(figure)) for figure in _SPENT_BY_BUDGET},
        **{f'{figure}_lower_bound': _to_target_lower_bound(runs, figure,
                                                           budget)
           for figure in _SPENT_BY_BUDGET},
        'energy_kwh': _median([r['energy_kwh'] for r in runs]),
        'emissions_kg': _median([r['emissions_kg'] for r in runs]),
        'retention_all': _median([retention_over_evaluations(r)
                                  for r in runs]),
        'retention_all_range': _range([retention_over_evaluations(r)
                                       for r in runs]),
        'model_update_bytes': _median([r['model_update_bytes']
                                       for r in runs]),
        # Sampled over inserted items once replay reached its minimum size:
        # whether every precision trained as much per env step.
        'replay_ratio_range': _range([
            r.get('replay_samples_per_insert_after_warmup') for r in runs]),
        # The replay's regime, and how much of their loop the actors spent
        # held by its rate limiter (the most held actor of each run).
        'replay_regimes': sorted({_replay_regime(r) for r in runs}),
        'held_by_learner': _median([
            max(r['actor_replay_blocked_share'].values())
            for r in runs if r.get('actor_replay_blocked_share')]),
        'failed': [r['seed'] for r in runs if r['status'] == 'failed'],
        'energy_method': runs[0]['energy_method'],
        # Per seed, the evaluations after the target at or above
        # hold_return and all of them (None: no target or no evaluation
        # after it). A target late in the budget leaves fewer.
        'held_after_target': [
            post_target_held(r, hold_return) if hold_return is not None
            else None for r in runs],
    }
  return table


def _stock_goals(table: Dict, label: str) -> List[Sequence]:
  return [
      [f'wall time to target int8 / stock TF-Agents DQN, {label}',
       f'<= {G.TIME_TO_TARGET_OVER_STOCK:g}',
       *_bounded_ratio(table, 'time_to_target_s',
                       G.TIME_TO_TARGET_OVER_STOCK, STOCK)],
      [f'env steps to target int8 / stock TF-Agents DQN, {label}',
       f'<= {G.ENV_STEPS_TO_TARGET_OVER_STOCK:g}',
       *_bounded_ratio(table, 'env_steps_to_target',
                       G.ENV_STEPS_TO_TARGET_OVER_STOCK, STOCK)]]


def _held_goals(experiment: Dict, int8: Dict, label: str) -> List[Sequence]:
  """The hold after the target: the median seed's share (the goal is a
  median over seeds; a seed without a target held nothing), and the worst
  share of the seeds that reached it."""
  shares = [held[0] / held[1] if held else None
            for held in int8['held_after_target']]
  reached = [share for share in shares if share is not None]
  where = (f'int8 runs: share of evaluations in the '
           f'{experiment["continue_after_target_s"]:g} s after the target at '
           f'or above {experiment["hold_return"]:g}, {label}')
  median = _median([share or 0.0 for share in shares])
  worst = min(reached) if reached else None
  return [
      [f'{where} (median of {len(shares)} seeds)',
       f'>= {G.HELD_AFTER_TARGET:g}', _fmt(median, '.2f'),
       _met(median, G.HELD_AFTER_TARGET, False)],
      [f'{where} (worst seed; {len(reached)} of {int8["seeds"]} seeds '
       f'reached it)',
       f'>= {G.HELD_AFTER_TARGET:g}', _fmt(worst, '.2f'),
       _met(worst, G.HELD_AFTER_TARGET, False)]]


def _rows_to_markdown(header: Sequence[str], rows: List[Sequence]) -> str:
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
  return '\n'.join(lines)


def _goals(results: Dict) -> List[Sequence]:
  goals = []
  for case in results.get('actors', []):
    rates = case['steps_per_second']
    paper_size = '2048x2048x2048' in case['network']
    for other, goal in (
        (('fp32', G.PAPER_ACTOR_SPEEDUP_OVER_FP32),
         ('tf', G.PAPER_ACTOR_SPEEDUP_OVER_TF)) if paper_size else
        (('tf', G.ACTOR_SPEEDUP_OVER_TF),)):
      ratio = _ratio(rates['int8'], rates[other])
      goals.append([f'actor env steps/s int8 / {other}, {case["label"]}',
                    f'>= {goal:g}', _fmt(ratio), _met(ratio, goal, False)])
    envs = case.get('envs_per_actor', 1)
    many = f'int8_{envs}_envs'
    for row in ('int8', many) if many in rates else ('int8',):
      efficiency = case.get('efficiency', {}).get(row)
      goals.append([f'{row} actor efficiency (env step + invoke) / actor '
                    f'step, {case["label"]}', f'>= {G.ACTOR_EFFICIENCY:g}',
                    _fmt(efficiency),
                    _met(efficiency, G.ACTOR_EFFICIENCY, at_most=False)])
    if many in rates:
      goal = (G.MANY_ENVIRONMENTS_SPEEDUP if paper_size else
              G.MANY_ENVIRONMENTS_SPEEDUP_SMALL_NETWORK)
      ratio = _ratio(rates[many], rates['int8'])
      goals.append([f'int8 actor env steps/s, {envs} environments / 1, '
                    f'{case["label"]}', f'>= {goal:g}', _fmt(ratio),
                    _met(ratio, goal, False)])
  for case in results.get('inference', []):
    goal = G.LATENCY_OVER_FP32.get(case['label'])
    if goal is None:
      continue
    rows = case['rows']
    ratio = _ratio(rows['int8']['us_per_call'], rows['fp32']['us_per_call'])
    goals.append([f'batch-1 latency int8 / TFLite fp32, {case["label"]}',
                  f'<= {goal:g}', _fmt(ratio, '.3f'), _met(ratio, goal, True)])
  for case in results.get('inference', []):
    goal = G.BEYOND_INT8_LATENCY_OVER_INT8.get(case['label'])
    rows = case['rows']
    if goal is None or 'int4_weights' not in rows:
      continue
    ratio = _ratio(rows['int4_weights']['us_per_call'],
                   rows['int8']['us_per_call'])
    goals.append([f'batch-1 latency int4_weights / int8, {case["label"]}',
                  f'<= {goal:g}', _fmt(ratio, '.3f'), _met(ratio, goal, True)])
  for experiment in results.get('end_to_end', []):
    table = experiment_table(experiment)
    int8, fp32 = table.get('int8', {}), table.get('fp32', {})
    label = experiment['label']
    goals.append([f'wall time to target int8 / tf, {label}',
                  f'<= {G.TO_TARGET_OVER_TF:g}',
                  *_to_target_goal(table, 'time_to_target_s',
                                   G.TO_TARGET_OVER_TF)])
    all_evaluations = [retention_over_evaluations(r)
                       for r in experiment['runs']]
    median_all = _median(all_evaluations)
    spread = _range(all_evaluations)
    goals.append([f'greedy return int8 / fp32, same version, {label}, '
                  f'every evaluation (median over all runs; min-max)',
                  f'>= {G.RETURN_RETENTION_PER_EVALUATION:g}',
                  f'{_fmt(median_all, ".3f")}' + (
                      f' ({spread[0]:.3f}-{spread[1]:.3f})' if spread
                      else ''),
                  _met(median_all, G.RETURN_RETENTION_PER_EVALUATION,
                       False)])
    for figure, name in (('energy_kwh_to_target', 'energy'),
                         ('emissions_kg_to_target', 'CO2')):
      goals.append([f'{name} to target int8 / tf, {label}',
                    f'<= {G.TO_TARGET_OVER_TF:g}',
                    *_to_target_goal(table, figure, G.TO_TARGET_OVER_TF)])
    ratio = _ratio(int8.get('model_update_bytes'),
                   fp32.get('model_update_bytes'))
    goals.append([f'bytes per model update int8 / fp32, {label}',
                  f'<= {G.MODEL_UPDATE_BYTES_OVER_FP32:g}', _fmt(ratio, '.3f'),
                  _met(ratio, G.MODEL_UPDATE_BYTES_OVER_FP32, True)])
    if STOCK in table:
      goals += _stock_goals(table, label)
    if experiment.get('hold_return') is not None and 'int8' in table:
      goals += _held_goals(experiment, table['int8'], label)
  for checkpoint in results.get('retention', []):
    goals.append(retention_goal(checkpoint))
  goals.append(['learner train steps/s, export on / off',
                f'>= {G.LEARNER_RATE_WITH_EXPORTS:g}', 'n/a',
                'not measured by this report'])
  return goals


# The int8 mode a retention goal is read on: the exporter's default, or the
# model of a network trained quantization-aware (see benchmarks.retention).
INT8_MODES = ('int8 (default)', 'int8, quantization-aware training')


def retention_goal(checkpoint: Dict) -> List[str]:
  """The goal row of one fixed checkpoint: int8's return over fp32's (fp32
  over int8 when both are negative, see `retention`), with the bounds that
  the paired 95% interval of their difference gives."""
  figure = (f'greedy return int8 / fp32 on a fixed checkpoint, the same '
            f'seeded episodes, {checkpoint["label"]}')
  if 'error' in checkpoint:
    return [figure, f'>= {G.RETURN_RETENTION_FIXED_CHECKPOINT:g}', 'n/a',
            f'not measured: {checkpoint["error"]}']
  fp32 = checkpoint['modes']['fp32 (TF)']['mean_return']
  int8 = next(checkpoint['modes'][mode] for mode in INT8_MODES
              if mode in checkpoint['modes'])
  spread = int8.get('minus_fp32_ci95', 0.0)
  ratio = retention(int8['mean_return'], fp32)
  bounds = sorted(x for x in (retention(fp32 + int8['minus_fp32'] - spread,
                                        fp32),
                              retention(fp32 + int8['minus_fp32'] + spread,
                                        fp32)) if x is not None)
  measured = _fmt(ratio, '.3f', 'n/a (returns of both signs)')
  if ratio is not None and len(bounds) == 2:
    measured += f' (95%: {bounds[0]:.3f}-{bounds[1]:.3f})'
  return [figure, f'>= {G.RETURN_RETENTION_FIXED_CHECKPOINT:g}', measured,
          _met(ratio, G.RETURN_RETENTION_FIXED_CHECKPOINT, False)]


def _retention_section(results: Dict) -> List[str]:
  lines = ['## 5. Retention on fixed checkpoints', '',
           'Each checkpoint is restored once, and every mode plays the same '
           'seeded episodes (`benchmarks.retention`): greedy fp32 through TF, '
           'the fp32 and fp16 TFLite models, and full int8 as the exporter '
           'made it before equalization and clipping and as it makes it now; '
           'a network trained quantization-aware against its int8 model '
           'only (it exports no other precision). '
           'Fidelity is measured on the states fp32\'s greedy play visits: '
           'agreement (a tie counts against it), ties, regret over that of '
           'random actions, or the action error in half ranges. Returns are '
           'means +- the 95% interval.', '']
  for checkpoint in results['retention']:
    lines += [f'### {checkpoint["label"]}', '']
    if 'error' in checkpoint:
      lines += [f'Not measured: {checkpoint["error"]}.', '']
      continue
    lines += [f'Checkpoint of train step {checkpoint["train_step"]} in '
              f'`{checkpoint["run_dir"]}`, {checkpoint["episodes"]} '
              f'episodes per mode'
              + (f', measured {checkpoint["measured"]}'
                 if checkpoint.get('measured') else '') + '.', '']
    rows = []
    for mode, row in checkpoint['modes'].items():
      if 'agreement' in row:
        fidelity = (f'agreement {row["agreement"]:.3f}, ties '
                    f'{row["tie_rate"]:.3f}, regret/random '
                    f'{row["regret_vs_random"]:.3f}')
      elif 'mean_action_error' in row:
        fidelity = (f'action error mean {row["mean_action_error"]:.4f}, '
                    f'max {row["max_action_error"]:.3f}')
      else:
        fidelity = 'reference'
      rows.append([
          mode, f'{row["mean_return"]:.1f} +- {row["ci95"]:.1f}',
          _fmt(row.get('ratio_to_fp32'), '.3f'),
          f'{row["minus_fp32"]:+.1f}' if 'minus_fp32' in row else '',
          fidelity, _fmt(row.get('call_us'), '.1f'),
          f'{row["model_bytes"]:,}' if 'model_bytes' in row else ''])
    lines += [_rows_to_markdown(
        ['mode', 'return', 'ratio to fp32', 'minus fp32', 'fidelity',
         'us per call', 'bytes'], rows), '']
  return lines


def _inference_section(results: Dict) -> List[str]:
  lines = ['## 1. Batch-1 policy inference', '',
           'Median over repeats, rows taking turns, one process, one '
           'interpreter thread. *us/call*: as an actor calls the policy '
           '(observation in, action out: normalization, quantization, '
           'invoke, dequantization, argmax); *invoke us*: the TFLite '
           'interpreter alone. `tf` is TF-Agents\' stock policy in '
           '`PyTFEagerPolicy`; its bytes are the fp32 variables a tf actor '
           'pulls. `dynamic_int8`: int8 weights, float activations (what '
           'PyTorch dynamic quantization, so the original ActorQ, ran). '
           '`int4_weights`: 4-bit per-channel weights, float activations '
           'quantized on the fly (AI Edge Quantizer). TFLite models run in '
           'the interpreter the report\'s header names (LiteRT where '
           'installed).', '']
  for case in results['inference']:
    rows = case['rows']
    int8_us = rows['int8']['us_per_call']
    lines += [f'**{case["label"]}** ({case["environment"]}, '
              f'{case["network"]}; {case["repeats"]} x {case["calls"]} '
              f'calls)', '']
    lines.append(_rows_to_markdown(
        ['precision', 'us/call', 'int8 / this', 'invoke us', 'bytes',
         'conversion s'],
        [[p, _fmt(r['us_per_call'], '.1f'),
          _fmt(_ratio(int8_us, r['us_per_call']), '.3f'),
          _fmt(r['invoke_us'], '.1f', '-'), f'{r["bytes"]:,}',
          _fmt(r['convert_s'], '.2f') if p != 'tf' else '-']
         for p, r in rows.items()]))
    lines.append('')
  return lines


def _actor_section(results: Dict) -> List[str]:
  lines = ['## 2. Actor throughput', '',
           'Env steps/s of one actor process doing the real work (env step, '
           'policy, exploration, Reverb writes) against a real Reverb server '
           'that never blocks inserts; median over repeats, rows taking '
           'turns. Each actor waits for its first model, its rate counts its '
           'env loop only, and *model share* is the share of its measured '
           'steps whose action its model chose (a row under 0.99 is an '
           'error, not a figure). *env only*: random actions, no policy, '
           'no Reverb, the environment stepped as actors step it (and '
           'through TF-Agents\' PyEnvironment, which actors bypass). '
           '*replay only*: the steps of a random walk written by the actor\'s '
           'replay writer alone. *int8_N_envs*: an actor of N environments '
           'and one model call for their N observations '
           '(`--envs_per_actor`). '
           '*efficiency*: (env-only step time + interpreter invoke time per '
           'observation, at the row\'s batch) / actor step time, the share '
           'of an actor\'s time spent on the two things it must do. '
           '*loop time*: the shares of the actor\'s loop '
           'on its own clock: policy call and exploration, env step (and '
           'reset), replay writes, and the rest (model pulls, status). '
           'TFLite actors pull a model every 100 steps; '
           'the stock `tf` actor pulls variables every step, as TF-Agents\' '
           'distributed examples do.', '',
           f'![actor steps/s]({ACTOR_PLOT})', '']
  for case in results['actors']:
    rates = case['steps_per_second']
    lines += [f'**{case["label"]}** ({case["environment"]}, '
              f'{case["network"]}; median of {case["repeats"]} x '
              f'{case["env_steps"]:,} steps, tf rows a quarter, env only '
              f'twice as many)', '']
    shares = case.get('model_share', {})
    efficiency = case.get('efficiency', {})
    invoke_us = case.get('invoke_us', {})
    time_share = case.get('time_share', {})
    lines.append(_rows_to_markdown(
        ['actor', 'env steps/s', 'int8 / this', 'model share',
         'invoke us', 'efficiency', 'loop time: policy / env / replay / other'],
        [[row, f'{rate:,.0f}', _fmt(_ratio(rates['int8'], rate)),
          _fmt(shares.get(row), '.3f', '-'),
          _fmt(invoke_us.get(row), '.1f', '-'),
          _fmt(efficiency.get(row), '.2f', '-'),
          ' / '.join(f'{time_share[row][part]:.2f}' for part in
                     ('policy', 'env', 'replay', 'other'))
          if row in time_share else '-']
         for row, rate in rates.items()]))
    envs = case.get('envs_per_actor', 1)
    at_many = (f'; with {envs} environments per actor, int8 / fp32 = '
               f'{_fmt(_ratio(rates[f"int8_{envs}_envs"], rates[f"fp32_{envs}_envs"]))}'
               f' and int8 {envs} environments / 1 = '
               f'{_fmt(_ratio(rates[f"int8_{envs}_envs"], rates["int8"]))}'
               if f'int8_{envs}_envs' in rates else '')
    replay_floor = (f'; the replay writer alone takes '
                    f'{rates["replay_only"]:,.0f} steps/s'
                    if 'replay_only' in rates else '')
    lines += ['', f'int8 / tf (stock) = {_fmt(_ratio(rates["int8"], rates["tf"]))}'
              f'; int8 / fp32 = {_fmt(_ratio(rates["int8"], rates["fp32"]))}'
              f'{at_many}; int8 / env-only = '
              f'{_fmt(_ratio(rates["int8"], rates["env_only"]))}'
              f'{replay_floor}.', '']
  return lines


def _regime_sentence(table: Dict) -> str:
  """Which replay regime the experiment ran and which side held it."""
  regimes = sorted({r for row in table.values()
                    for r in row['replay_regimes']})
  sentence = f'Replay regime: {" and ".join(regimes).replace("_", " ")}'
  held = {p: row['held_by_learner'] for p, row in table.items()
          if row['held_by_learner'] is not None}
  if not held:
    return (sentence + '; which side the rate limiter held was not '
            'recorded (runs before the summary had '
            '`actor_replay_blocked_share`).')
  sentence += ('; share of their loop the actors waited for the rate '
               'limiter (median): ' + ', '.join(
                   f'{p} {share:.2f}' for p, share in held.items()))
  if learner_bound(table, list(held)):
    return sentence + ('. The learner bound every run: a time ratio near 1 '
                       'is what this regime gives, not a miss.')
  return sentence + '.'


def _stopping_rule(run: Dict) -> str:
  rule = run.get('stopping_rule')
  if rule is None:
    return ('one evaluation at or above the target (these runs predate '
            '`run_training.target_evaluations_in_a_row`)')
  # Runs before 2026-12-06 recorded no count: their evaluator's default.
  episodes = rule.get('episodes_per_evaluation', 10)
  return (f'mean greedy return of {episodes} episodes at or above '
          f'{rule["target_return"]:g} on '
          f'{rule["evaluations_in_a_row"]} evaluation(s) in a row')


def _end_to_end_section(results: Dict) -> List[str]:
  lines = ['## 3. End to end: time, reward retention, energy and carbon', '',
           'Each run is `local_main` as a user starts it: learner (hosting '
           'the Reverb server in runs measured from 2026-12-05 12:00 on; '
           'before, the server ran as a process of its own), evaluator and '
           'one actor on this machine, the same '
           'config and rate limiter for every precision; seeds take turns '
           'over the precisions. Time to target counts from the launch '
           '(process start-up included) to the evaluation that meets the '
           'stopping rule: the mean greedy return (of the evaluator\'s '
           '`num_episodes`, each experiment says how many) at or above '
           'the target on evaluations of that many versions in a row '
           '(`run_training.target_evaluations_in_a_row`, two by default; each '
           'experiment says its own), of the int8 '
           'model for int8 actors, of the fp32 network for tf and fp32 '
           'actors. Where the experiment says so, each run then trains on '
           'for a fixed time, within its budget, and *held after target* is '
           'the share of its later evaluations at or above the hold return '
           '(with their count: a target late in the budget leaves fewer). '
           'Medians over seeds; a run that missed its target within '
           'the budget counts as slower than any that made it. Where a '
           'median falls on such a run, a ratio to it is a bound (`<` or '
           '`>`): that run counts with what it had spent when its budget '
           'ran out (time, env steps, energy). *Retention*: '
           'greedy return of the int8 model over that of the fp32 network '
           'of the same version, same seeds (fp32 / int8 when both are '
           'negative), over every evaluation of the run (summed returns). '
           'The run\'s last evaluation is not shown: the stopping rule picks '
           'it (a run stops when its own metric reaches the target, often '
           'at a peak the other precision does not share), so it leans '
           'towards the run\'s precision. Section 5 measures retention on '
           'fixed checkpoints instead. Energy and CO2 are '
           'the whole machine\'s over the run, measured with codecarbon '
           f'offline for the grid of {results.get("energy_country", "?")}.'
           ' On a machine with few cores the learner, evaluator and actor '
           'share them: time to target is then bound by the learner\'s '
           'train steps/s, and an actor\'s precision counts through the CPU '
           'time it leaves the learner.',
           '', f'![eval return vs wall time]({RETURN_PLOT})', '']
  part_measured = results.get('measured', {}).get('end_to_end', {}).get(
      'date', results.get('date'))
  for experiment in results['end_to_end']:
    table = experiment_table(experiment)
    lines += [f'### {experiment["label"]}', '',
              f'`{experiment["gin_file"]}`, target '
              f'{experiment["runs"][0]["target_return"]}, budget '
              f'{experiment["max_wall_time_s"]:g} s per run. Stopping rule: '
              f'{_stopping_rule(experiment["runs"][0])}. Measured '
              f'{experiment.get("measured") or part_measured}. '
              f'{_regime_sentence(table)}', '']
    lines.append(_rows_to_markdown(
        ['actors', 'reached', 'time to target s (each seed)',
         'env steps to target', 'learner steps to target',
         'retention, every eval (min-max)',
         'bytes per model update', 'kWh to target',
         'kg CO2 to target', 'kWh whole run',
         'sampled / inserted after warm-up (min-max)',
         'held after target (each seed)'],
        [[p, f'{t["reached"]}/{t["seeds"]}',
          f'{_fmt(t["time_to_target_s"], ".1f")} ('
          + ', '.join(_fmt(x, '.1f') for x in t['times']) + ')',
          _fmt(t['env_steps_to_target'], ',.0f'),
          _fmt(t['train_steps_to_target'], ',.0f'),
          _fmt(t['retention_all'], '.3f') + (
              ' ({:.3f}-{:.3f})'.format(*t['retention_all_range'])
              if t['retention_all_range'] else ''),
          _fmt(t['model_update_bytes'], ',.0f'),
          _fmt(t['energy_kwh_to_target'], '.5f'),
          _fmt(t['emissions_kg_to_target'], '.5f'),
          _fmt(t['energy_kwh'], '.5f'),
          '{:.2f}-{:.2f}'.format(*t['replay_ratio_range'])
          if t['replay_ratio_range'] else 'n/a',
          ', '.join(_fmt_held(h) for h in t['held_after_target'])
          if any(h is not None for h in t['held_after_target']) else 'n/a']
         for p, t in table.items()]))
    lines.append('')
    for other in [o for o in (STOCK, 'tf', 'fp32') if o in table]:
      ratios = [f'{name} ' + _bounded_ratio(table, figure,
                                            G.TO_TARGET_OVER_TF, other)[0]
                for name, figure in (
                    ('time to target', 'time_to_target_s'),
                    ('energy to target', 'energy_kwh_to_target'),
                    ('CO2 to target', 'emissions_kg_to_target'),
                    ('env steps to target', 'env_steps_to_target'))]
      int8, base = table.get('int8', {}), table.get(other, {})
      ratios.append('bytes per model update ' + _fmt(_ratio(
          int8.get('model_update_bytes'), base.get('model_update_bytes')),
                                                     '.3f'))
      lines.append(f'- int8 / {other}: ' + ', '.join(ratios) + '.')
      lines += _per_seed_ratio(experiment, other)
    if STOCK in table:
      lines.append(
          f'- `{STOCK}`: TF-Agents\' single-process DQN (its DQN example\'s '
          'loop: one process, fp32 TF collect policy, local Reverb), with '
          'this config\'s network size, DQN settings, batch, train steps '
          'per env step, replay warm-up and exploration, on the same '
          'seeds, evaluation episodes and stopping rule '
          '(`benchmarks.stock_dqn`). It measures no energy, and it '
          'samples in step with its env loop, with no rate limiter: its '
          'sampled / inserted is n/a.')
    lines.append('- A `tf` actor pulls the variables after every env step '
                 '(TF-Agents\' stock behaviour), TFLite actors a model every '
                 '100 steps: per env step a tf actor receives about 100 times '
                 'its bytes per update.')
    failed = {p: t['failed'] for p, t in table.items() if t['failed']}
    if failed:
      lines.append(f'- Runs that failed (seeds): {failed}; see their '
                   f'`summary.json`.')
    methods = {t['energy_method'] for t in table.values()}
    lines += ['', 'Energy method: ' + '; '.join(
        sorted(m or 'not measured' for m in methods)) + '.', '']
    if experiment.get('projection'):
      lines += _projection_lines(experiment)
  return lines


# ActorQ's end-to-end gain: training reached its reward 1.5x to 5.41x sooner
# with int8 actors, i.e. int8 / fp32 time ratios of 1 / 5.41 to 1 / 1.5.
PAPER_TIME_RATIO_RANGE = (1 / 5.41, 1 / 1.5)


def _per_seed_ratio(experiment: Dict, other: str) -> List[str]:
  """int8 / `other` time to target on each seed both ran (a seed that
  missed its target makes its ratio a bound), beside the paper's range;
  nothing with fewer than two such seeds."""
  runs = {(r['precision'], r['seed']): r for r in experiment['runs']}
  seeds = sorted(seed for precision, seed in runs
                 if precision == 'int8' and (other, seed) in runs)
  if len(seeds) < 2:
    return []
  ratios = []
  for seed in seeds:
    int8, base = runs[('int8', seed)], runs[(other, seed)]
    spent = [r['time_to_target_s'] if r['target_reached'] else
             r['wall_time_s'] for r in (int8, base)]
    mark = ('' if int8['target_reached'] and base['target_reached'] else
            '<' if int8['target_reached'] else
            '>' if base['target_reached'] else '?')
    ratios.append((seed, mark, _ratio(*spent)))
  exact = [ratio for _, mark, ratio in ratios if not mark and ratio]
  low, high = PAPER_TIME_RATIO_RANGE
  return [f'  - time to target int8 / {other} per seed: ' + ', '.join(
      f'seed {seed} {mark}{_fmt(ratio, ".3f")}' for seed, mark, ratio in ratios)
          + (f' (min-max of the exact ones {min(exact):.3f}-{max(exact):.3f})'
             if exact else '')
          + f'; ActorQ\'s paper: {low:.3f}-{high:.3f} (1.5x to 5.41x '
          'sooner).']


def _projection_lines(experiment: Dict) -> List[str]:
  """The projection made before the runs, against what each run took."""
  projection = experiment['projection']
  if 'error' in projection:
    return [f'No projection: {projection["error"]}.', '']
  inputs = projection['inputs']
  u = inputs['train_steps_per_env_step']
  lines = [f'Projected before the runs ({projection["made"]}): T = E / '
           f'min(r, L / u) with E = {inputs["env_steps"]:,} env steps (the '
           'paper-size int8 run, section 4), L = '
           f'{inputs["learner_steps_per_s"]:.2f} train steps/s (the same run), '
           + (f'u = {u:g} train steps per env step (this config)'
              if u is not None else 'no u (free-running replay: the learner '
              'does not hold the actors)')
           + ', r = one actor\'s env steps/s (section 2): '
           + ', '.join(f'{p} {rate:,.0f}' for p, rate in
                       inputs['actor_steps_per_s'].items()) + '.', '']
  rows = []
  for run in experiment['runs']:
    projected = projection['time_to_target_s'].get(run['precision'])
    measured = (run['time_to_target_s'] if run['target_reached'] else None)
    rows.append([run['precision'], run['seed'], _fmt(projected, ',.0f'),
                 _fmt(measured, ',.0f') if run['target_reached'] else
                 f'not reached in {run["wall_time_s"]:,.0f}',
                 _fmt(_ratio(measured, projected), '.2f')])
  lines += [_rows_to_markdown(['actors', 'seed', 'projected s',
                               'measured s', 'measured / projected'], rows),
            '']
  return lines


# Actor cores and learner train steps/s the projection is tabulated for.
PROJECTED_ACTORS = (1, 4, 16, 64)


def projected_time_to_target(env_steps: float, actor_steps_per_s: float,
                             num_actors: int, learner_steps_per_s: float,
                             train_steps_per_env_step: Optional[float]
                            ) -> float:
  """Seconds to collect `env_steps` when K actors produce K * r env steps/s
  and the rate limiter lets the learner consume L / u of them (no limit
  where `train_steps_per_env_step` is None: a free-running replay)."""
  learner_limit = (math.inf if train_steps_per_env_step is None
                   else learner_steps_per_s / train_steps_per_env_step)
  return env_steps / min(num_actors * actor_steps_per_s, learner_limit)


def _paper_size_section(results: Dict) -> List[str]:
  paper = results['paper_size']
  runs = {r['precision']: r for r in paper['runs']}
  lines = ['## 4. The paper\'s setting end to end, and where the gain lives',
           '', f'`{paper["gin_file"]}` with '
           + ', '.join(f'`{b}`' for b in paper['gin_bindings']) +
           f'; one seed, budget {paper["max_wall_time_s"]:g} s. Learner '
           'steps/s is train steps to target over time to target (start-up '
           'and the wait for the replay\'s first samples included).', '']
  lines.append(_rows_to_markdown(
      ['actors', 'status', 'time to target s', 'env steps to target',
       'train steps to target', 'learner steps/s', 'eval int8 / fp32'],
      [[p, r['status'], _fmt(r['time_to_target_s'], '.1f'),
        _fmt(r['env_steps_to_target'], ',.0f'),
        _fmt(r['train_steps_to_target'], ',.0f'),
        _fmt(_ratio(r['train_steps_to_target'], r['time_to_target_s']),
             '.2f'),
        f'{_fmt(r["eval_return_int8"], ".1f")} / '
        f'{_fmt(r["eval_return_fp32"], ".1f")}']
       for p, r in runs.items()]))
  actor_case = next((c for c in results.get('actors', [])
                     if c['label'] == paper['actor_case']), None)
  int8 = runs.get('int8', {})
  if actor_case is None or not int8.get('target_reached'):
    lines += ['', 'No projection: it needs the int8 run\'s env steps to '
              'target and the actor figures of the same task (section 2).',
              '']
    return lines
  rates = actor_case['steps_per_second']
  ratio = paper['samples_per_insert'] / paper['batch_size']
  env_steps = int8['env_steps_to_target']
  measured_learner = int8['train_steps_to_target'] / int8['time_to_target_s']
  lines += ['', '### Projection to K actor cores (a projection, not a '
            'measurement)', '',
            f'T(K, L) = E / min(K * r, L / u): E = {env_steps:,} env steps '
            'to target (the int8 run above), r = one actor\'s env steps/s '
            f'per precision ({paper["actor_case"]}, section 2), u = '
            f'samples per insert / batch = {paper["samples_per_insert"]:g} / '
            f'{paper["batch_size"]} = {ratio:g} train steps per env step (the '
            'rate limiter), L = the learner\'s train steps/s. It leaves out '
            'start-up, the replay\'s warm-up and evaluation, and assumes '
            'each actor has a core of its own and that every precision needs '
            'the same env steps.', '']
  check = projected_time_to_target(env_steps, rates['int8'], 1,
                                   measured_learner, ratio)
  lines += [f'Check against this machine: K = 1 and L = {measured_learner:.2f} '
            f'(measured in the int8 run) give {check:,.0f} s; the run took '
            f'{int8["time_to_target_s"]:,.0f} s to target. Here the learner '
            f'bounds the run: L / u = {measured_learner / ratio:,.1f} env '
            f'steps/s against {rates["int8"]:,.0f} for one int8 actor.', '']
  learners = sorted({round(measured_learner, 2), 100.0, 1000.0})
  rows = []
  for learner in learners:
    for num_actors in PROJECTED_ACTORS:
      times = {p: projected_time_to_target(env_steps, rates[p], num_actors,
                                           learner, ratio)
               for p in ('int8', 'fp32', 'tf')}
      rows.append([f'{learner:g}', num_actors] +
                  [f'{times[p]:,.0f}' for p in times] +
                  [_fmt(_ratio(times['int8'], times['tf']), '.3f'),
                   _fmt(_ratio(times['int8'], times['fp32']), '.3f')])
  lines.append(_rows_to_markdown(
      ['learner steps/s L', 'actor cores K', 'int8 s', 'fp32 s', 'tf s',
       'int8 / tf', 'int8 / fp32'], rows))
  lines += ['', 'Where int8 / tf is under 1 the run is actor-bound and int8 '
            'actors shorten it; where it is 1 the learner bounds it and the '
            'actors\' precision only frees CPU. L = 100 and 1000 stand for '
            'faster learners (a GPU) that this machine does not have.', '']
  return lines


def write_report(results: Dict, output_dir: str) -> str:
  """Writes report.md and the plots; returns the report's path."""
  os.makedirs(output_dir, exist_ok=True)
  machine = results['machine']
  lines = [
      '# The ActorQ-TF report', '',
      f'Plan `{results["plan"]}`; parts measured (the newest run of each):',
      '', *[f'- {part}: {when["date"]} with `{when["command"]}`'
            for part, when in results.get('measured', {}).items()], '',
      f'Machine: {machine["cpu"]}, {machine["cores"]} cores, '
      f'{machine["memory_gb"]} GB, GPU: {machine["gpu"] or "none"}; '
      f'{machine["os"]}, Python {machine["python"]}.', '',
      'Versions: ' + ', '.join(f'{k} {v}' for k, v in
                               results['versions'].items()) + '.', '',
      '## Goals (benchmarks/goals.py)', '',
      _rows_to_markdown(['figure', 'goal', 'measured', ''],
                        _goals(results)), '']
  if results.get('inference'):
    lines += _inference_section(results)
  if results.get('actors'):
    lines += _actor_section(results)
    _plot_actors(results['actors'], os.path.join(output_dir, ACTOR_PLOT))
  if results.get('end_to_end'):
    lines += _end_to_end_section(results)
    _plot_returns(results['end_to_end'], os.path.join(output_dir, RETURN_PLOT))
  if results.get('paper_size'):
    lines += _paper_size_section(results)
  if results.get('retention'):
    lines += _retention_section(results)
  path = os.path.join(output_dir, REPORT_FILE)
  with open(path, 'w') as f:
    f.write('\n'.join(lines))
  return path


def _plot_returns(experiments: List[Dict], path: str) -> None:
  figure, axes = plt.subplots(1, len(experiments), squeeze=False,
                              figsize=(6 * len(experiments), 4))
  for ax, experiment in zip(axes[0], experiments):
    labelled = set()
    for run in experiment['runs']:
      if not run['curve']:
        continue
      precision = run['precision']
      # The return that decides the target for this precision.
      column = 1 if precision == 'int8' else 2
      times = [point[0] for point in run['curve']]
      returns = [point[column] for point in run['curve']]
      ax.plot(times, returns, color=PRECISION_COLOURS[precision], alpha=0.8,
              label=None if precision in labelled else (
                  'stock TF-Agents DQN' if precision == STOCK
                  else f'{precision} actors'))
      labelled.add(precision)
    ax.axhline(experiment['runs'][0]['target_return'], color='grey',
               linestyle='--', linewidth=1, label='target')
    ax.set_title(experiment['label'])
    ax.set_xlabel('wall time since launch (s)')
    ax.set_ylabel('greedy eval return (mean of an evaluation)')
    ax.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def _plot_actors(cases: List[Dict], path: str) -> None:
  figure, axes = plt.subplots(1, len(cases), squeeze=False,
                              figsize=(6 * len(cases), 4))
  for ax, case in zip(axes[0], cases):
    rates = case['steps_per_second']
    names = list(rates)
    colours = [PRECISION_COLOURS.get(name.split('_')[0], 'tab:grey')
               for name in names]
    ax.bar(names, [rates[n] for n in names], color=colours)
    ax.set_yscale('log')
    ax.set_ylabel('env steps/s (log scale)')
    ax.set_title(case['label'])
    ax.tick_params(axis='x', labelrotation=30)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
