"""What the launcher tells the user from the roles' status files."""
import os
import time

import pytest

from actorq_tf import evaluation
from actorq_tf import launcher
from actorq_tf import run_directory
from actorq_tf.errors import ActorQError


def _write_actor(root_dir, index, **figures):
  run_directory.write_status(root_dir, f'actor_{index}', **{
      'env_steps': 1000, 'model_version': 0, 'recent_model_share': 1.0,
      'consecutive_refusals': 0, **figures})


def test_progress_line_shows_random_actions_and_refusals(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  _write_actor(root_dir, 1, recent_model_share=0.25, consecutive_refusals=2,
               last_refusal='version 300: it fails its checksum')
  # pylint: disable-next=protected-access
  line = launcher._progress_line(12.0, launcher._progress(root_dir, 2), [])
  assert 'actor model v0 (75% of recent steps random: no model)' in line
  assert ('actor_1 REFUSED 2 version(s), last version 300: it fails its '
          'checksum') in line
  assert 'actor_0 REFUSED' not in line


def test_progress_line_shows_skipped_and_refused_exports(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  run_directory.write_status(
      root_dir, 'learner', train_step=2000, skipped_exports=1,
      last_skipped_export='step 1500: 3 observations came from the actors '
      'since the last export', refused_exports=2,
      last_refused_export='int8 version 2000: mean Q regret 0.9')
  # pylint: disable-next=protected-access
  line = launcher._progress_line(12.0, launcher._progress(root_dir, 1), [])
  assert ('learner SKIPPED 1 export(s), last step 1500: 3 observations came '
          'from the actors since the last export') in line
  assert ('learner REFUSED 2 export(s), last int8 version 2000: mean Q '
          'regret 0.9') in line


def test_progress_line_is_quiet_when_every_step_comes_from_a_model(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  # pylint: disable-next=protected-access
  line = launcher._progress_line(12.0, launcher._progress(root_dir, 1), [])
  assert 'random' not in line and 'REFUSED' not in line


def test_refusals_stop_the_run_by_count_or_by_time():
  now = time.time()
  watch = launcher._RefusalWatch(  # pylint: disable=protected-access
      max_versions=3, max_seconds=60, since=now - 10)
  watch.check([{'consecutive_refusals': 2, 'refusing_since': now,
                'time': now}])
  watch.check([{'consecutive_refusals': 0, 'time': now}])
  with pytest.raises(ActorQError, match='refused 3 model version'):
    watch.check([{'consecutive_refusals': 3, 'refusing_since': now,
                  'time': now,
                  'last_refusal': 'version 9: it fails its checksum'}])
  with pytest.raises(ActorQError, match='the first 61 s ago'):
    watch.check([{'consecutive_refusals': 1, 'refusing_since': now - 61,
                  'time': now}])
  # An actor that runs an earlier model is held to the count alone.
  watch.check([{'consecutive_refusals': 1, 'refusing_since': now - 61,
                'model_version': 500, 'time': now}])
  # A status of an earlier launch (a resumed run) does not count.
  watch.check([{'consecutive_refusals': 5, 'refusing_since': now - 600,
                'time': now - 20}])


def _evaluated(root_dir, version, return_int8):
  """An evaluation as the evaluator leaves it: its result and its files."""
  directory = evaluation.version_dir(root_dir, version)
  os.makedirs(directory)
  with open(os.path.join(directory, evaluation.KEPT_MODEL + '.tflite'),
            'w') as f:
    f.write(f'model {version}')
  return {'version': version, 'return_int8': return_int8,
          'return_fp32': return_int8, 'time': 0.0, 'returns_int8': [0.0] * 3}


def test_one_lucky_evaluation_does_not_meet_the_target(tmp_path):
  root_dir = str(tmp_path)
  keeper = launcher._ResultKeeper(  # pylint: disable=protected-access
      root_dir, evaluation.StoppingRule('return_int8', 475.0, 2), log=print)
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
