"""What the launcher tells the user from the roles' status files."""
import time

import pytest

from actorq_tf import launcher
from actorq_tf import metrics
from actorq_tf.errors import ActorQError


def _write_actor(root_dir, index, **figures):
  metrics.write_status(root_dir, f'actor_{index}', **{
      'env_steps': 1000, 'model_version': 0, 'recent_model_share': 1.0,
      'consecutive_refusals': 0, **figures})


def test_progress_line_shows_random_actions_and_refusals(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  _write_actor(root_dir, 1, recent_model_share=0.25, consecutive_refusals=2,
               last_refusal='version 300: it fails its checksum')
  line = launcher._progress_line(  # pylint: disable=protected-access
      12.0, launcher._progress(root_dir, 2), [])  # pylint: disable=protected-access
  assert 'actor model v0 (75% of recent steps random: no model)' in line
  assert ('actor_1 REFUSED 2 version(s), last version 300: it fails its '
          'checksum') in line
  assert 'actor_0 REFUSED' not in line


def test_progress_line_is_quiet_when_every_step_comes_from_a_model(tmp_path):
  root_dir = str(tmp_path)
  _write_actor(root_dir, 0, model_version=300)
  line = launcher._progress_line(  # pylint: disable=protected-access
      12.0, launcher._progress(root_dir, 1), [])  # pylint: disable=protected-access
  assert 'random' not in line and 'REFUSED' not in line


def test_refusals_stop_the_run_by_count_or_by_time():
  watch = launcher._RefusalWatch(  # pylint: disable=protected-access
      max_versions=3, max_seconds=60)
  now = time.time()
  watch.check([{'consecutive_refusals': 2, 'refusing_since': now}])
  watch.check([{'consecutive_refusals': 0}])
  with pytest.raises(ActorQError, match='refused 3 model version'):
    watch.check([{'consecutive_refusals': 3, 'refusing_since': now,
                  'last_refusal': 'version 9: it fails its checksum'}])
  with pytest.raises(ActorQError, match='the first 61 s ago'):
    watch.check([{'consecutive_refusals': 1, 'refusing_since': now - 61}])
