"""The launcher: what it tells the user from the roles' status files, its
restart policy, and the run directory it claims."""
import collections
import dataclasses
import functools
import json
import os
import random
import time
import types

import pytest

from actorq_tf import evaluation
from actorq_tf import launcher
from actorq_tf import placement
from actorq_tf import records
from actorq_tf import run_directory
from actorq_tf import run_results
from actorq_tf import supervision
from actorq_tf.errors import ActorQError


def _write_actor(root_dir, index, **figures):
  run_directory.write_status(root_dir, f'actor_{index}', records.ActorStatus(
      **{'env_steps': 1000, 'recent_model_share': 1.0, **figures}))


def test_progress_line_shows_random_actions_and_refusals(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  _write_actor(root_dir, 1, recent_model_share=0.25, consecutive_refusals=2,
               last_refusal='version 300: it fails its checksum')
  # pylint: disable-next=protected-access
  line = run_results.progress_line(
      12.0, run_results.read_progress(placement.Machine(root_dir), 2), [])
  assert 'actor model v0 (75% of recent steps random: no model)' in line
  assert ('actor_1 REFUSED 2 version(s), last version 300: it fails its '
          'checksum') in line
  assert 'actor_0 REFUSED' not in line


def test_progress_line_shows_actors_that_fell_back_to_tensorflows_interpreter(
    tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, interpreter='litert 2.3.0')
  _write_actor(root_dir, 1, interpreter='')  # a tf actor
  line = run_results.progress_line(
      12.0, run_results.read_progress(placement.Machine(root_dir), 2), [])
  assert 'interpreter' not in line
  _write_actor(root_dir, 1, interpreter='tensorflow 2.15.1')
  line = run_results.progress_line(
      12.0, run_results.read_progress(placement.Machine(root_dir), 2), [])
  assert line.endswith(' | actors run TFLite in tensorflow 2.15.1\'s '
                       'interpreter (ai-edge-litert not installed)')


def test_progress_line_shows_rows_refused_earlier_and_versions_no_one_published(
    tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300, versions_run=[100, 300],
               refused_versions=1,
               last_refusal='version 10000000: its signature does not verify')
  _write_actor(root_dir, 1, model_version=300, versions_run=[100, 250, 300])
  run_directory.write_status(root_dir, 'eval', records.EvaluatorStatus(
      model_version=200, consecutive_refusals=1, refused_versions=1,
      last_refusal='version 9: its signature does not verify'))
  run_directory.write_status(root_dir, 'learner', records.LearnerStatus(
      train_step=300, published_versions=[100, 200, 300]))
  # pylint: disable-next=protected-access
  progress = run_results.read_progress(placement.Machine(root_dir), 2)
  line = run_results.progress_line(12.0, progress, [])  # pylint: disable=protected-access
  assert ('actor_0 refused 1 row(s) earlier, last version 10000000: its '
          'signature does not verify') in line
  assert 'eval REFUSED 1 version(s), last version 9' in line
  assert 'actor_1 RAN VERSION(S) THE LEARNER NEVER PUBLISHED: [250]' in line
  assert 'actor_0 RAN' not in line
  # pylint: disable-next=protected-access
  assert run_results.versions_run(progress.actors[1], progress.learner) == {
      'count': 3, 'first': 100, 'last': 300, 'not_published_by_learner': [250]}


def test_progress_line_shows_skipped_and_refused_exports(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  run_directory.write_status(root_dir, 'learner', records.LearnerStatus(
      train_step=2000, skipped_exports=1,
      last_skipped_export='step 1500: 3 observations came from the actors '
      'since the last export', refused_exports=2,
      last_refused_export='int8 version 2000: mean Q regret 0.9'))
  # pylint: disable-next=protected-access
  line = run_results.progress_line(
      12.0, run_results.read_progress(placement.Machine(root_dir), 1), [])
  assert ('learner SKIPPED 1 export(s), last step 1500: 3 observations came '
          'from the actors since the last export') in line
  assert ('learner REFUSED 2 export(s), last int8 version 2000: mean Q '
          'regret 0.9') in line


def test_progress_line_is_quiet_when_every_step_comes_from_a_model(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  # pylint: disable-next=protected-access
  line = run_results.progress_line(
      12.0, run_results.read_progress(placement.Machine(root_dir), 1), [])
  assert 'random' not in line and 'REFUSED' not in line


def test_refusals_stop_the_run_by_count_or_by_time():
  now = time.time()
  watch = supervision.RefusalWatch(  # pylint: disable=protected-access
      max_versions=3, max_seconds=60, max_replay_items=1000, since=now - 10)
  actor, evaluator = records.ActorStatus, records.EvaluatorStatus
  learner = records.LearnerStatus
  watch.check({'actor_0': actor(consecutive_refusals=2, refusing_since=now,
                                time=now)}, learner())
  watch.check({'actor_0': actor(consecutive_refusals=0, time=now)}, learner())
  with pytest.raises(ActorQError, match='actor_1 refused 3 model version'):
    watch.check({'actor_0': actor(), 'actor_1': actor(
        consecutive_refusals=3, refusing_since=now, time=now,
        last_refusal='version 9: it fails its checksum')}, learner())
  with pytest.raises(ActorQError, match='eval refused 1 .* the first 61 s ago'):
    watch.check({'eval': evaluator(consecutive_refusals=1,
                                   refusing_since=now - 61, time=now)},
                learner())
  # A role that runs an earlier model is held to the count alone.
  watch.check({'actor_0': actor(consecutive_refusals=1,
                                refusing_since=now - 61, model_version=500,
                                time=now)}, learner())
  # A status of an earlier launch (a resumed run) does not count.
  watch.check({'actor_0': actor(consecutive_refusals=5,
                                refusing_since=now - 600, time=now - 20)},
              learner())
  # The learner's replay: refusals in a row, not refusals at all.
  watch.check({}, learner(replay_items_refused=50_000,
                          replay_items_refused_in_a_row=999, time=now))
  with pytest.raises(ActorQError, match=r'the learner refused the last 1,000 '
                     r'replay items it read \(another key\)'):
    watch.check({}, learner(replay_items_refused_in_a_row=1000, time=now,
                            last_replay_refusal='another key'))


def _evaluated(root_dir, version, return_int8):
  """An evaluation as the evaluator leaves it: its result and its files."""
  directory = run_directory.version_dir(root_dir, version)
  os.makedirs(directory)
  with open(os.path.join(directory, run_directory.KEPT_MODEL + '.tflite'),
            'w') as f:
    f.write(f'model {version}')
  return {'version': version, 'return_int8': return_int8,
          'return_fp32': return_int8, 'time': 0.0, 'returns_int8': [0.0] * 3}


def test_one_lucky_evaluation_does_not_meet_the_target(tmp_path):
  root_dir = str(tmp_path)
  keeper = run_results.ResultKeeper(  # pylint: disable=protected-access
      root_dir, evaluation.StoppingRule('return_int8', 475.0, 2, 3),
      placement.Machine(root_dir), log=print)
  met = [keeper.add(_evaluated(root_dir, version, score)) for version, score
         in ((1000, 20.0), (2000, 500.0), (3000, 30.0), (4000, 480.0),
             (5000, 476.0), (6000, 10.0), (7000, 499.0))]
  assert met == [False, False, False, False, True, False, False]
  assert keeper.rule.streak[-1]['version'] == keeper.target['version'] == 5000
  assert keeper.best['version'] == 2000
  assert [r['version'] for r in keeper.post_target] == [6000, 7000]
  with open(keeper.model_path('target')) as f:
    assert f.read() == 'model 5000'
  with open(keeper.model_path('best')) as f:
    assert f.read() == 'model 2000'
  # Ended after the stop: kept if best, never a target or a later result.
  keeper.add_after_stop(_evaluated(root_dir, 8000, 500.0))
  keeper.add_after_stop(_evaluated(root_dir, 9000, 600.0))
  assert keeper.best['version'] == 9000 and len(keeper.post_target) == 2


def test_restart_policy():
  settings = launcher.RunSettings(
      root_dir='unused', gin_files=[], gin_bindings=[], actor_precision='int8',
      num_actors=1, seed=0, max_env_steps=0, max_wall_time_s=60.0,
      max_role_restarts=2, min_uptime_for_restart_s=20.0)
  refusal = functools.partial(supervision.restart_refusal, settings)
  # A role that ran a while and failed is restarted, up to the limit.
  assert refusal(0, 1, 60.0, False) is None
  assert 'restarted 2 times' in refusal(2, 1, 60.0, False)
  # Failing right after its start is a set-up error a restart repeats...
  assert 'failed 5 s after its start' in refusal(0, 1, 5.0, False)
  # ...but a signal (kill -9, the OOM killer) or chaos is not.
  assert refusal(0, -9, 5.0, False) is None
  assert refusal(0, 1, 5.0, True) is None
  # Fault injection never uses up a role's restarts: the launcher counts
  # only those chaos did not cause, and restarts a chaos kill regardless.
  assert refusal(5, -9, 60.0, True) is None
  off = dataclasses.replace(settings, restart_failed_roles=False)
  assert supervision.restart_refusal(off, 0, -9, 60.0, False) == (
      'restarts are off')


IDENTITY = {'gin_config': 'a = 1', 'actor_precision': 'int8', 'seed': 0}


def test_claiming_a_run_directory(tmp_path):
  root_dir = str(tmp_path / 'run')
  assert run_directory.claim(root_dir, IDENTITY) == []
  with open(os.path.join(root_dir, 'run.json')) as f:
    assert json.load(f)['code_version'].startswith('git ')
  with open(os.path.join(root_dir, 'config.gin')) as f:
    assert f.read() == 'a = 1'
  # Claimed again before any summary: the same run, going on.
  assert run_directory.claim(root_dir, IDENTITY) == []
  with pytest.raises(ActorQError, match='its seed differ'):
    run_directory.claim(root_dir, dict(IDENTITY, seed=1))
  summary_path = os.path.join(root_dir, 'summary.json')
  run_directory.write_json_atomically(summary_path,
                                      {'status': 'interrupted (SIGINT)'})
  assert [launch['status'] for launch in run_directory.claim(
      root_dir, IDENTITY)] == ['interrupted (SIGINT)']
  assert not os.path.exists(summary_path)  # It does not look finished.
  run_directory.write_json_atomically(summary_path,
                                      {'status': 'target_reached'})
  with pytest.raises(ActorQError, match='holds a finished run'):
    run_directory.claim(root_dir, IDENTITY)
  other = tmp_path / 'other'
  other.mkdir()
  (other / 'notes.txt').write_text('mine')
  with pytest.raises(ActorQError, match='not empty and holds no ActorQ run'):
    run_directory.claim(str(other), IDENTITY)
  assert os.listdir(other) == ['notes.txt']


def test_chaos_hits_each_kind_of_role_alike_however_many_actors():
  roles = [placement_role(name) for name in
           ['learner', 'eval'] + [f'actor_{i}' for i in range(16)]]
  rng = random.Random(0)
  # pylint: disable-next=protected-access
  victims = [supervision.chaos_victim(rng, roles).name for _ in range(3000)]
  kinds = collections.Counter(
      'actor' if v.startswith('actor_') else v for v in victims)
  assert set(kinds) == {'learner', 'eval', 'actor'}
  for count in kinds.values():
    assert 900 <= count <= 1100, kinds
  assert len({v for v in victims if v.startswith('actor_')}) == 16


def placement_role(name):
  """A role handle as the launcher sees it, for what reads only its name."""
  return types.SimpleNamespace(name=name)
