"""The report's plumbing on a tiny case: real benchmarks, real launcher runs,
a well-formed report. Speed is the benchmarks' business, not the tests'."""
import dataclasses
import json
import os
import re

import pytest

from benchmarks import report
from benchmarks import report_writer

TINY_NET = 'create_q_network.fc_layer_params = (8, 8)'
TINY_PLAN = report.Plan(
    name='tiny',
    # Dynamic-range quantization leaves matrices under 1,024 weights in
    # float: an 8x8 network would have no int8 weights to show.
    inference_cases=(report.InferenceCase(
        '64x64', 'dqn_cartpole.gin',
        ('create_q_network.fc_layer_params = (64, 64)',)),),
    inference_calls=20, inference_repeats=1,
    actor_cases=(report.ActorCase('CartPole-v1, 8x8', 'dqn_cartpole.gin',
                                  (TINY_NET,), 200, envs_per_actor=2),),
    actor_repeats=1,
    experiments=(report.Experiment(
        'CartPole-v1, low target', 'dqn_cartpole.gin', 60,
        (TINY_NET, 'replay_table.min_size_to_sample = 200',
         'train.export_interval = 100', 'run_evaluator.min_interval_s = 1.0',
         'run_evaluator.num_episodes = 5',
         # An untrained greedy policy scores about 9: the first evaluation
         # reaches the target, and one is enough here.
         'run_training.target_return = 9.0',
         'run_training.target_evaluations_in_a_row = 1'),
        continue_after_target_s=5, hold_return=9.0),),
    seeds=(0,), precisions=('stock', 'int8'), retention_episodes=5)


@pytest.fixture(scope='module')
def tiny_report(tmp_path_factory):
  output_dir = str(tmp_path_factory.mktemp('report'))
  work_dir = str(tmp_path_factory.mktemp('work'))
  results = report.run_report(TINY_PLAN, output_dir, work_dir, 'FRA',
                              command='test')
  return results, output_dir, work_dir


def test_the_report_holds_every_part(tiny_report):
  results, output_dir, _ = tiny_report
  with open(os.path.join(output_dir, report_writer.RESULTS_FILE)) as f:
    assert json.load(f) == results
  for name in (report_writer.REPORT_FILE, report_writer.RETURN_PLOT,
               report_writer.ACTOR_PLOT):
    assert os.path.getsize(os.path.join(output_dir, name)) > 0, name

  rows = results['inference'][0]['rows']
  assert list(rows) == ['tf', 'fp32', 'fp16', 'dynamic_int8', 'int8',
                        'int4_weights']
  assert all(row['us_per_call'] > 0 and row['bytes'] > 0
             for row in rows.values())
  assert (rows['int4_weights']['bytes'] < rows['int8']['bytes'] <
          rows['fp32']['bytes'])
  assert all(row['op_types'] for row in list(rows.values())[1:])
  actors = results['actors'][0]
  rates = actors['steps_per_second']
  assert set(rates) == {'env_only', 'env_only_tf_agents', 'replay_only',
                        'int8', 'fp16', 'fp32', 'int4_weights', 'tf',
                        'tf_pull_100', 'int8_2_envs', 'fp32_2_envs'}
  assert all(rate > 0 for rate in rates.values())
  # Every actor row proves that its model chose its actions.
  assert set(actors['model_share']) == {'int8', 'fp16', 'fp32',
                                        'int4_weights', 'tf', 'tf_pull_100',
                                        'int8_2_envs', 'fp32_2_envs'}
  assert all(share >= 0.99 for share in actors['model_share'].values())
  assert all(0 < e for e in actors['efficiency'].values())
  assert all(0 < us for us in actors['invoke_us'].values())
  for share in actors['time_share'].values():
    assert set(share) == {'policy', 'env', 'replay', 'other'}
    assert sum(share.values()) == pytest.approx(1.0, abs=0.01)

  runs = results['end_to_end'][0]['runs']
  assert [r['precision'] for r in runs] == ['stock', 'int8']
  stock, runs = runs[0], runs[1:]
  assert stock['target_reached'] and stock['stopping_rule'] == {
      'metric': 'return_fp32', 'target_return': 9.0,
      'evaluations_in_a_row': 1, 'episodes_per_evaluation': 5}
  assert 0 < stock['env_steps_to_target'] <= stock['env_steps']
  for run in runs:
    assert run['target_reached'], run
    assert run['stopping_rule'] == dict(stock['stopping_rule'],
                                        metric=f'return_{run["precision"]}')
    assert 0 < run['energy_kwh_to_target'] <= run['energy_kwh']
    assert run['energy_method'] and run['curve']
    assert set(run['exit_codes'].values()) == {0}
    assert run['model_update_bytes'] > 0

  # Every mode on the int8 run's own checkpoint, the same 5 episodes.
  (checkpoint,) = results['retention']
  assert checkpoint['run_dir'] == runs[0]['root_dir']
  assert checkpoint['episodes'] == 5
  assert list(checkpoint['modes']) == [
      'fp32 (TF)', 'fp32 TFLite', 'fp16',
      'int8, before (full range, not equalized)', 'int8 (default)',
      'int4 weights']
  fp32_tflite = checkpoint['modes']['fp32 TFLite']
  assert fp32_tflite['agreement'] >= 0.99  # the same network, in TFLite
  assert checkpoint['modes']['int8 (default)']['model_bytes'] > 0

  with open(os.path.join(output_dir, report_writer.REPORT_FILE)) as f:
    text = f.read()
  assert '## 5. Retention on fixed checkpoints' in text
  assert 'int8 actor env steps/s, 2 environments / 1, CartPole-v1, 8x8' in text
  assert 'the replay writer alone takes' in text
  assert 'Machine:' in text and 'tensorflow 2.15.1' in text
  assert '| dynamic_int8 |' in text
  assert '| stock | 1/1 |' in text and '- int8 / stock: time to target' in text
  assert ('wall time to target int8 / stock TF-Agents DQN, CartPole-v1, low '
          'target | <= 0.5 | ') in text
  assert 'Energy method: RAM: codecarbon' in text
  # Without tf and fp32 actors their goals are said to be unmeasured.
  assert 'wall time to target int8 / tf, CartPole-v1, low target | <= 0.5 | ' \
         'n/a | not measured' in text
  assert 'bytes per model update int8 / fp32, CartPole-v1, low target | ' \
         '<= 0.3 | n/a | not measured' in text
  assert '- int8 / fp32:' not in text


def test_finished_runs_are_reused(tiny_report):
  _, output_dir, work_dir = tiny_report
  summaries = [os.path.join(r['root_dir'], 'summary.json')
               for r in tiny_report[0]['end_to_end'][0]['runs']]
  before = [os.path.getmtime(p) for p in summaries]
  results = report.run_report(TINY_PLAN, output_dir, work_dir, 'FRA',
                              parts=['end_to_end'], command='test again')
  assert [os.path.getmtime(p) for p in summaries] == before
  # Parts not measured again keep their figures.
  assert results['inference'] == tiny_report[0]['inference']


def test_benchmark_subprocesses_print_no_tensorflow_registration_errors(
    tiny_report):
  stock_run = next(r for r in tiny_report[0]['end_to_end'][0]['runs']
                   if r['precision'] == 'stock')
  with open(stock_run['root_dir'] + '.log') as f:
    log = f.read()
  assert 'env steps' in log  # The stock run's own progress came through.
  assert 'Unable to register' not in log, log


def test_experiments_not_measured_again_keep_their_figures(tiny_report,
                                                           tmp_path):
  results, _, work_dir = tiny_report
  # An experiment measured before the stopping rule was recorded.
  kept = {'label': 'Pendulum, earlier', 'gin_file': 'd4pg_pendulum.gin',
          'max_wall_time_s': 300, 'runs': [_run('int8', 0, 120.0, -150.0,
                                                -150.0)]}
  output_dir = str(tmp_path)
  with open(os.path.join(output_dir, report_writer.RESULTS_FILE), 'w') as f:
    json.dump(dict(results, end_to_end=[kept, *results['end_to_end']]), f)
  plan = dataclasses.replace(TINY_PLAN, experiments=(
      report.Experiment('Pendulum, earlier', 'd4pg_pendulum.gin', 300),
      *TINY_PLAN.experiments))
  again = report.run_report(plan, output_dir, work_dir, 'FRA',
                            parts=['end_to_end'], command='test',
                            end_to_end_gin_files=['dqn_cartpole.gin'])
  earlier = results['measured']['end_to_end']['date']
  assert again['end_to_end'][0] == dict(kept, measured=earlier)
  measured = again['end_to_end'][1]
  assert measured['runs'] == results['end_to_end'][0]['runs']  # reused
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  assert ('Stopping rule: one evaluation at or above the target (these runs '
          f'predate `run_training.target_evaluations_in_a_row`). Measured '
          f'{earlier}.') in text
  assert ('Stopping rule: mean greedy return of 5 episodes at or above 9 '
          'on 1 evaluation(s) in a row. '
          f'Measured {measured["measured"]}.') in text


def _run(precision, seed, seconds, int8_return, fp32_return, reached=True):
  return {
      'precision': precision, 'seed': seed, 'status': 'target_reached'
      if reached else 'max_wall_time', 'target_return': -200.0,
      'target_reached': reached, 'time_to_target_s': seconds,
      'env_steps_to_target': 100 * seconds, 'train_steps_to_target': 1000,
      'wall_time_s': seconds + 10, 'env_steps': 100 * seconds,
      'train_steps': 1000, 'eval_return_int8': int8_return,
      'eval_return_fp32': fp32_return,
      'model_update_bytes': {'int8': 70_000}.get(precision, 270_000),
      'energy_kwh': seconds / 1e4, 'emissions_kg': seconds / 1e5,
      'energy_duration_s': seconds + 10,
      'energy_kwh_to_target': seconds / 1e4,
      'emissions_kg_to_target': seconds / 1e5, 'energy_method': 'estimate',
      'energy_country': 'USA', 'exit_codes': {}, 'role_restarts': {},
      'replay_samples_per_insert_after_warmup': 31.5 + seed,
      'root_dir': '/nowhere', 'curve': [[5.0, -900.0, -800.0],
                                        [seconds, int8_return, fp32_return]]}


def test_goals_that_are_not_met_are_said_plainly(tmp_path):
  results = {'plan': 'canned', 'date': 'today', 'command': 'none',
             'machine': report.machine(), 'versions': report.versions()}
  # int8 actors slower than tf, and an int8 model 10% worse on Pendulum.
  results['end_to_end'] = [{
      'label': 'Pendulum', 'gin_file': 'd4pg_pendulum.gin',
      'max_wall_time_s': 300,
      'runs': [_run('tf', 0, 80.0, -150.0, -150.0),
               _run('int8', 0, 120.0, -165.0, -150.0),
               _run('tf', 1, 70.0, -140.0, -140.0),
               _run('int8', 1, 0.0, -400.0, -380.0, reached=False)]}]
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  table = report_writer.experiment_table(results['end_to_end'][0])
  assert table['int8']['reached'] == 1
  assert table['int8']['time_to_target_s'] == float('inf')  # median of 2
  assert table['tf']['time_to_target_s'] == 75.0
  # The int8 median (of 120 s and a miss in the 300 s budget) is over
  # (120 + 300) / 2: slower than tf by more than 210/75.
  assert ('wall time to target int8 / tf, Pendulum | <= 0.5 | > 2.80 (int8 '
          'missed the target) | **NOT met**') in text
  # The last evaluation, which the stopping rule picks, is not a figure.
  assert 'last evaluation (median' not in text
  assert 'retention, last eval' not in text
  assert report_writer.retention_over_evaluations(
      results['end_to_end'][0]['runs'][1]) == pytest.approx(950 / 1065)
  assert '| int8 | 1/2 | not reached (120.0, not reached)' in text
  # Whether each precision trained as much per env step (seeds 0 and 1).
  assert re.search(r'^\| tf \|.* \| 31\.50-32\.50 \| [^|]* \|$', text, re.M)


def test_the_report_says_which_side_held_each_experiment(tmp_path):
  def run(precision, seed, seconds, regime, held):
    return dict(_run(precision, seed, seconds, -150.0, -150.0),
                replay_regime=regime,
                actor_replay_blocked_share={'actor_0': held})

  results = {'plan': 'canned', 'date': 'today', 'command': 'none',
             'machine': report.machine(), 'versions': report.versions()}
  results['end_to_end'] = [
      # A fixed ratio and one CPU learner: both precisions wait for it.
      {'label': 'held', 'gin_file': 'd4pg_pendulum.gin',
       'max_wall_time_s': 300,
       'runs': [run('tf', 0, 80.0, 'fixed_ratio', 0.6),
                run('int8', 0, 78.0, 'fixed_ratio', 0.9)]},
      # QuaRL's regime: no ratio, the actors set the pace.
      {'label': 'free', 'gin_file': 'd4pg_pendulum.gin',
       'max_wall_time_s': 300,
       'runs': [run('tf', 0, 80.0, 'free_running', 0.0),
                run('int8', 0, 78.0, 'free_running', 0.0)]},
      # Runs from before the summary said.
      {'label': 'old', 'gin_file': 'd4pg_pendulum.gin',
       'max_wall_time_s': 300,
       'runs': [_run('tf', 0, 80.0, -150.0, -150.0),
                _run('int8', 0, 78.0, -150.0, -150.0)]}]
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  assert ('Replay regime: fixed ratio; share of their loop the actors '
          'waited for the rate limiter (median): tf 0.60, int8 0.90. The '
          'learner bound every run: a time ratio near 1 is what this regime '
          'gives, not a miss.') in text
  assert ('wall time to target int8 / tf, held | <= 0.5 | 0.97 | cannot be '
          'met in this regime: the learner bound both runs (fixed ratio; '
          'actors held int8 90%, tf 60% of their time)') in text
  assert ('Replay regime: free running; share of their loop the actors '
          'waited for the rate limiter (median): tf 0.00, int8 0.00.') in text
  assert ('wall time to target int8 / tf, free | <= 0.5 | 0.97 | '
          '**NOT met**') in text
  assert ('Replay regime: fixed ratio; which side the rate limiter held was '
          'not recorded') in text
  assert ('wall time to target int8 / tf, old | <= 0.5 | 0.97 | '
          '**NOT met**') in text


def test_retention_keeps_what_it_cannot_measure_again(tmp_path):
  measured = dict(_retention_checkpoint('Pendulum', -150.0, -151.0, 5.0),
                  measured='2026-12-03 15:46')
  of_a_run_dir = dict(_retention_checkpoint('Acrobot-v1, run ac0', -130.0,
                                            -129.0, 8.0))
  results = {'end_to_end': [
      {'label': 'Pendulum', 'runs': [_run('int8', 0, 120.0, -150.0, -150.0)]},
      {'label': 'CartPole', 'runs': [_run('int8', 0, 0.0, 9.0, 9.0,
                                          reached=False)]}],
             'retention': [measured, {'label': 'CartPole', 'error': 'old'},
                           of_a_run_dir]}
  rows = report.run_retention(TINY_PLAN, results, str(tmp_path))
  # The Pendulum run's directory is gone: its earlier figures stay.
  assert rows == [measured, {
      'label': 'CartPole',
      'error': 'no int8 run of this experiment reached its target'},
                  of_a_run_dir]


def _retention_checkpoint(label, fp32_return, int8_return, ci95):
  fidelity = {'agreement': 0.9, 'tie_rate': 0.01, 'regret_vs_random': 0.02,
              'call_us': 10.0, 'model_bytes': 70_000}
  modes = {'fp32 (TF)': {'mean_return': fp32_return, 'ci95': 0.0}}
  for mode, mean in (('fp32 TFLite', fp32_return), ('fp16', fp32_return),
                     ('int8, before (full range, not equalized)', fp32_return),
                     ('int8 (default)', int8_return)):
    modes[mode] = {'mean_return': mean, 'ci95': ci95,
                   'minus_fp32': mean - fp32_return, 'minus_fp32_ci95': ci95,
                   'ratio_to_fp32': mean / fp32_return if fp32_return > 0
                                    else None, **fidelity}
  return {'label': label, 'run_dir': '/nowhere', 'train_step': 17000,
          'episodes': 100, 'modes': modes}


def test_retention_on_fixed_checkpoints_is_the_return_goal(tmp_path):
  results = {'plan': 'canned', 'machine': report.machine(),
             'versions': report.versions(), 'retention': [
                 _retention_checkpoint('CartPole', 500.0, 498.6, 2.8),
                 _retention_checkpoint('Pendulum', -150.0, -165.0, 5.0),
                 _retention_checkpoint('Acrobot', -500.0, -136.6, 8.8),
                 {'label': 'Gone', 'error': 'its run directories are gone'}]}
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  assert '## 5. Retention on fixed checkpoints' in text
  prefix = ('greedy return int8 / fp32 on a fixed checkpoint, the same '
            'seeded episodes, ')
  assert (prefix + 'CartPole | >= 0.99 | 0.997 (95%: 0.992-1.003) | met'
          ) in text
  # Negative returns: fp32 / int8, so that worse is still under 1.
  assert (prefix + 'Pendulum | >= 0.99 | 0.909 (95%: 0.882-0.938) | '
          '**NOT met**') in text
  assert (prefix + 'Acrobot | >= 0.99 | 3.660 (95%: 3.439-3.912) | met'
          ) in text
  assert prefix + 'Gone | >= 0.99 | n/a | not measured: its run' in text
  assert '| int8 (default) | 498.6 +- 2.8 | 0.997 | -1.4 |' in text


def test_the_projection_says_when_actors_or_the_learner_bound_the_run(
    tmp_path):
  # One int8 actor: 1,000 env steps/s; learner: 5 train steps/s at 0.5 train
  # steps per env step, so it consumes 10 env steps/s: learner-bound.
  assert report_writer.projected_time_to_target(
      20_000, 1_000.0, 1, 5.0, 0.5) == 2_000.0
  # 64 tf actors of 40 env steps/s against a learner of 1,000 steps/s:
  # 2,560 env steps/s produced, 2,000 consumed: still learner-bound.
  assert report_writer.projected_time_to_target(
      20_000, 40.0, 64, 1000.0, 0.5) == 10.0
  # 4 of them: actor-bound, 160 env steps/s.
  assert report_writer.projected_time_to_target(
      20_000, 40.0, 4, 1000.0, 0.5) == 125.0

  results = {'plan': 'canned', 'date': 'today', 'command': 'none',
             'machine': report.machine(), 'versions': report.versions()}
  results['actors'] = [{
      'label': 'paper task', 'environment': 'cartpole-balance',
      'network': '5 -> 2048x2048x2048x1', 'repeats': 1, 'env_steps': 10,
      'steps_per_second': {'env_only': 3000.0, 'int8': 1000.0,
                           'fp32': 300.0, 'tf': 40.0}}]
  int8_run = _run('int8', 0, 2000.0, 950.0, 980.0)
  int8_run.update(env_steps_to_target=20_000, train_steps_to_target=8_000)
  results['paper_size'] = {
      'label': 'paper', 'gin_file': 'd4pg_cartpole_balance.gin',
      'gin_bindings': ['big'], 'max_wall_time_s': 3000,
      'actor_case': 'paper task', 'samples_per_insert': 64.0,
      'batch_size': 128, 'runs': [int8_run]}
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  assert 'T(K, L) = E / min(K * r, L / u)' in text
  # L = 8,000 / 2,000 = 4 steps/s: the learner bounds this machine.
  assert ('K = 1 and L = 4.00 (measured in the int8 run) give 2,500 s; the '
          'run took 2,000 s') in text
  # 64 int8 actors and a learner of 1,000 steps/s: 20,000 / 2,000 = 10 s;
  # tf: 20,000 / min(2,560, 2,000) = 10 s too.
  assert '| 1000 | 64 | 10 | 10 | 10 | 1.000 | 1.000 |' in text
  # 4 actors: int8 20,000 / min(4,000, 2,000) = 10 s, tf 125 s.
  assert '| 1000 | 4 | 10 | 17 | 125 | 0.080 | 0.600 |' in text
  assert 'actor env steps/s int8 / tf, paper task | >= 30 | 25.00 | ' \
         '**NOT met**' in text
  assert 'actor env steps/s int8 / fp32, paper task | >= 3 | 3.33 | met' \
      in text


def test_the_hold_is_the_median_and_the_worst_seeds_share(tmp_path):
  held_well = dict(_run('int8', 0, 50.0, 500.0, 500.0), post_target_returns=[
      [1, 500.0], [2, 480.0], [3, 120.0], [4, 500.0]])
  # A target late in the budget leaves a short hold.
  cut_short = dict(_run('int8', 1, 90.0, 500.0, 500.0),
                   post_target_returns=[[1, 500.0], [2, 300.0]])
  held_all = dict(_run('int8', 3, 60.0, 500.0, 500.0),
                  post_target_returns=[[1, 500.0], [2, 450.0]])
  results = {'plan': 'canned', 'date': 'today', 'command': 'none',
             'machine': report.machine(), 'versions': report.versions(),
             'end_to_end': [{
                 'label': 'CartPole', 'gin_file': 'dqn_cartpole.gin',
                 'max_wall_time_s': 300, 'hold_return': 400.0,
                 'continue_after_target_s': 60,
                 'runs': [held_well, cut_short,
                          _run('int8', 2, 0.0, 20.0, 20.0, reached=False),
                          held_all]}]}
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  assert re.search(r'^\| int8 \|.* \| 0\.75 \(3/4\), 0\.50 \(1/2\), n/a, '
                   r'1\.00 \(2/2\) \|$',
                   text, re.M)
  # The seed that missed the target held nothing: the median of 0.75,
  # 0.50, 0 and 1.00 is 0.62; the worst of the three that reached it, 0.50.
  assert ('| int8 runs: share of evaluations in the 60 s after the target at '
          'or above 400, CartPole (median of 4 seeds) | >= 0.9 | 0.62 | '
          '**NOT met** |') in text
  assert ('| int8 runs: share of evaluations in the 60 s after the target at '
          'or above 400, CartPole (worst seed; 3 of 4 seeds reached it) | '
          '>= 0.9 | 0.50 | **NOT met** |') in text


def test_a_median_on_a_missed_run_bounds_the_ratio_by_what_it_spent(
    tmp_path):
  int8 = [_run('int8', seed, seconds, 500.0, 500.0)
          for seed, seconds in enumerate((100.0, 120.0, 140.0))]
  stock = [_run('stock', 0, 200.0, 500.0, 500.0)] + [
      dict(_run('stock', seed, 0.0, 100.0, 100.0, reached=False),
           env_steps=env_steps)
      for seed, env_steps in ((1, 9_000), (2, 30_000))]
  results = {'plan': 'canned', 'date': 'today', 'command': 'none',
             'machine': report.machine(), 'versions': report.versions(),
             'end_to_end': [{
                 'label': 'CartPole', 'gin_file': 'dqn_cartpole.gin',
                 'max_wall_time_s': 300, 'runs': int8 + stock}]}
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  # Stock's median time is over the median of 200, 300 and 300 s; its env
  # steps over the median of 20,000, 9,000 and 30,000.
  assert ('| wall time to target int8 / stock TF-Agents DQN, CartPole | '
          '<= 0.5 | < 0.40 (stock missed the target) | met |') in text
  assert ('| env steps to target int8 / stock TF-Agents DQN, CartPole | '
          '<= 1 | < 0.60 (stock missed the target) | met |') in text


def test_an_experiment_is_projected_before_its_runs_and_judged_by_it(
    tmp_path):
  experiment = report.Experiment(
      'cartpole-balance, low ratio', 'd4pg_cartpole_balance.gin', 3000,
      report.PAPER_NETWORKS + ('replay_table.samples_per_insert = 4.0',),
      projected_by='cartpole-balance, 2048x2048x2048 policy')
  paper_int8 = dict(_run('int8', 0, 2000.0, 950.0, 960.0),
                    env_steps_to_target=20_000, train_steps_to_target=6_000)
  results = {'paper_size': {'runs': [paper_int8]},
             'actors': [{'label': 'cartpole-balance, 2048x2048x2048 policy',
                         'steps_per_second': {'int8': 1000.0, 'fp32': 400.0,
                                              'tf': 50.0}}]}
  projection = report.project_experiment(experiment, ['int8', 'fp32', 'tf'],
                                         results)
  # u = 4 / 128 train steps per env step: the learner takes L / u = 96 env
  # steps/s; tf (50) bounds its run, fp32 and int8 wait for the learner.
  assert projection['inputs']['train_steps_per_env_step'] == 4 / 128
  times = projection['time_to_target_s']
  assert times['tf'] == pytest.approx(20_000 / 50)
  assert times['int8'] == times['fp32'] == pytest.approx(20_000 / 96)
  # Free-running: nothing holds the actors.
  free = dataclasses.replace(experiment, gin_bindings=(
      'replay_table.regime = "free_running"',))
  assert report.project_experiment(free, ['int8'], results)[
      'time_to_target_s']['int8'] == pytest.approx(20)
  assert 'error' in report.project_experiment(experiment, ['int8'], {})

  # Made once, before the runs: a resumed experiment keeps the prediction
  # even when the inputs have changed since.
  # pylint: disable=protected-access
  made = report._projection_before_runs(experiment, ['int8', 'fp32', 'tf'],
                                        results, str(tmp_path))
  results['actors'][0]['steps_per_second']['tf'] = 10.0
  assert report._projection_before_runs(
      experiment, ['int8', 'fp32', 'tf'], results, str(tmp_path)) == made

  runs = [_run(p, seed, seconds, 950.0, 950.0)
          for seed, (int8, fp32) in enumerate(((200.0, 400.0),
                                               (220.0, 330.0),
                                               (250.0, 250.0)))
          for p, seconds in (('int8', int8), ('fp32', fp32))]
  runs.append(_run('tf', 0, 0.0, 300.0, 300.0, reached=False))
  results = {'plan': 'canned', 'date': 'today', 'command': 'none',
             'machine': report.machine(), 'versions': report.versions(),
             'end_to_end': [{'label': experiment.label,
                             'gin_file': experiment.gin_file,
                             'max_wall_time_s': 3000, 'projection': made,
                             'runs': runs}]}
  report_writer.write_report(results, str(tmp_path))
  text = (tmp_path / report_writer.REPORT_FILE).read_text()
  assert ('time to target int8 / fp32 per seed: seed 0 0.500, seed 1 0.667, '
          'seed 2 1.000 (min-max of the exact ones 0.500-1.000); ActorQ\'s '
          'paper: 0.185-0.667 (1.5x to 5.41x sooner).') in text
  assert 'u = 0.03125 train steps per env step (this config)' in text
  assert '| int8 | 0 | 208 | 200 | 0.96 |' in text
  assert '| tf | 0 | 400 | not reached in 10 | n/a |' in text
