"""The run directory: status files, files replaced whole, the code version."""
import os
import time

import pytest

from actorq_tf import records
from actorq_tf import run_directory


def test_status_files_round_trip_and_a_damaged_one_reads_as_none(tmp_path):
  root_dir = str(tmp_path)
  assert run_directory.read_status(root_dir, 'learner') is None
  run_directory.write_status(root_dir, run_directory.LEARNER_ROLE,
                             records.LearnerStatus(train_step=7))
  status = run_directory.read_status(root_dir, 'learner')
  assert status == records.LearnerStatus(train_step=7, pid=os.getpid(),
                                         time=status.time)
  assert status.time == pytest.approx(time.time(), abs=60)
  path = os.path.join(root_dir, run_directory.STATUS_DIR, 'learner.json')
  with open(path, 'w') as f:
    f.write('{"train_step": ')  # As a crash in mid-write would leave it.
  assert run_directory.read_status(root_dir, 'learner') is None
  assert os.listdir(os.path.dirname(path)) == ['learner.json']


def test_a_directory_is_replaced_whole(tmp_path):
  path = str(tmp_path / 'kept')

  def fill(version):
    def write(new_path):
      os.makedirs(new_path)
      with open(os.path.join(new_path, 'version'), 'w') as f:
        f.write(version)
    return write

  run_directory.write_directory_atomically(path, fill('1'))
  run_directory.write_directory_atomically(path, fill('2'))
  assert sorted(os.listdir(tmp_path)) == ['kept']
  with open(os.path.join(path, 'version')) as f:
    assert f.read() == '2'


def test_roles_and_code_version():
  assert run_directory.actor_role(3) == 'actor_3'
  # The tests run from a git checkout (CI clones one).
  assert run_directory.code_version().startswith('git ')


def test_roles_find_the_checkout_then_the_launch_directory(tmp_path,
                                                           monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv('PYTHONPATH', '/opt/elsewhere')
  assert run_directory.roles_python_path().split(os.pathsep) == [
      run_directory.PROJECT_ROOT, str(tmp_path), '/opt/elsewhere']
