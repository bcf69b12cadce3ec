"""Runs through ray_main on a real multi-node Ray cluster on this machine."""
import json
import os
import signal
import subprocess
import sys

import pytest
from ray.cluster_utils import Cluster

from actorq_tf import ray_cluster
from actorq_tf import run_directory
from actorq_tf.errors import ActorQError
from conftest import PROJECT_ROOT
from conftest import run_binary
from helpers import users_project
from helpers import wait_for


def test_resources_per_role_kind():
  assert ray_cluster.parse_resources(
      ['actor:cpu_node=1', 'actor:big=0.5', 'learner:gpu_node=1']) == {
          'actor': {'cpu_node': 1.0, 'big': 0.5},
          'learner': {'gpu_node': 1.0}}
  for bad in ('actors:cpu_node=1', 'actor:cpu_node', 'actor:=1',
              'actor:cpu_node=-1'):
    with pytest.raises(ActorQError, match='KIND:RESOURCE=AMOUNT'):
      ray_cluster.parse_resources([bad])


def test_the_role_that_hosts_the_server_takes_its_resources():
  resources = {'reverb_server': {'replay_node': 1.0, 'big': 0.5},
               'learner': {'big': 1.0}, 'actor': {'cpu_node': 1.0}}
  hosting = ray_cluster.role_options('learner', resources, has_gpu=True,
                                     hosts_server=True)
  assert hosting['resources'] == {'replay_node': 1.0, 'big': 1.0}
  assert hosting['num_gpus'] == 1
  assert ray_cluster.role_options('learner', resources, has_gpu=False)[
      'resources'] == {'big': 1.0}
  actor = ray_cluster.role_options('actor_3', resources, has_gpu=True)
  assert actor['resources'] == {'cpu_node': 1.0}
  assert 'num_gpus' not in actor and actor['scheduling_strategy'] == 'SPREAD'


@pytest.fixture
def cluster():
  """A head node that alone offers `head_node` (for the server, learner and
  evaluator), and two worker nodes that each offer one `actor_node`: where
  each role lands is known, and the actor has a node to go to when it
  loses its own."""
  three_nodes = Cluster(initialize_head=True, head_node_args={
      'num_cpus': 3, 'resources': {'head_node': 3}})
  for _ in range(2):
    three_nodes.add_node(num_cpus=1, resources={'actor_node': 1})
  yield three_nodes
  three_nodes.shutdown()


def _hosts_alive():
  """Pids of processes that Ray titled as role hosts."""
  alive = []
  for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        if f.read().startswith(b'ray::RoleHost'):
          alive.append(pid)
    except OSError:
      pass  # Ended meanwhile.
  return alive


def _status(root_dir, role):
  return (run_directory.read_status(root_dir, role) or
          run_directory.role_status_type(role)())


def _parent_pid(pid):
  with open(f'/proc/{pid}/stat') as f:
    return int(f.read().rsplit(')', 1)[1].split()[1])


def _node_of(cluster, role_pid):
  """The cluster node whose raylet started the host of the role process."""
  raylet_pid = _parent_pid(_parent_pid(role_pid))
  (node,) = [n for n in cluster.list_all_nodes() if n.all_processes[
      'raylet'][0].process.pid == raylet_pid]
  return node


def _collects_again(root_dir, lost):
  status = _status(root_dir, 'actor_0')
  return (status.pid != lost.pid and
          status.env_steps > lost.env_steps + 300)


def test_a_run_spreads_over_nodes_and_survives_lost_actors(tmp_path,
                                                           cluster):
  # A user's own environment and network (README, "Your own environment"),
  # in a module that only the launch directory holds: roles that Ray starts
  # on every node import it.
  users_project(tmp_path)
  root_dir = str(tmp_path / 'run')
  launcher = subprocess.Popen(
      [sys.executable, '-m', 'binaries.ray_main', '--root_dir', root_dir,
       '--ray_address', cluster.address,
       '--ray_resources', 'learner:head_node=1',
       '--ray_resources', 'eval:head_node=1',
       '--ray_resources', 'actor:actor_node=1',
       '--gin_file', 'my_corridor.gin',
       '--gin_bindings', 'run_evaluator.min_interval_s = 1.0',
       '--target_return', '1000',  # out of reach: the run goes on
       '--max_env_steps', '0', '--max_wall_time_s', '300',
       '--notrack_energy'],
      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))
  try:
    wait_for(lambda: _status(root_dir, 'actor_0').model_version > 0
             and _status(root_dir, 'actor_0').env_steps > 500, 240,
             'experience and a model in the actor')

    # Its host killed (kill -9 of the Ray worker): Ray starts it again, and
    # the new actor collects on.
    lost = _status(root_dir, 'actor_0')
    os.kill(_parent_pid(lost.pid), signal.SIGKILL)
    wait_for(lambda: _collects_again(root_dir, lost), 180,
             'the restarted actor to collect')

    # Its node lost: Ray starts it on the other actor node.
    lost = _status(root_dir, 'actor_0')
    lost_node = _node_of(cluster, lost.pid)
    cluster.remove_node(lost_node, allow_graceful=False)
    wait_for(lambda: _collects_again(root_dir, lost), 180,
             'the actor to collect on another node')
    launcher.send_signal(signal.SIGINT)
    out, err = launcher.communicate(timeout=120)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      out, err = launcher.communicate()
      print('launcher stdout:', out[-3000:], 'launcher stderr:', err[-3000:],
            sep='\n')
  assert launcher.returncode == 0, err[-3000:]
  assert 'env steps' in out and 'restarting it' in out

  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'interrupted (SIGINT)'
  assert summary['ray_address'] == cluster.address
  nodes = summary['role_nodes']
  assert nodes['actor_0']['node_id'] not in (nodes['learner']['node_id'],
                                             lost_node.unique_id)
  # The learner hosts the Reverb server.
  assert summary['replay_server_address'].startswith(
      nodes['learner']['node_ip'] + ':')
  assert summary['role_restarts'] == {'learner': 0, 'eval': 0, 'actor_0': 2}
  assert summary['env_steps'] > lost.env_steps and summary['train_steps']
  assert summary['eval_return_int8'] is not None
  assert set(summary['exit_codes'].values()) == {0}
  # No Ray actor outlives the run.
  wait_for(lambda: not _hosts_alive(), 30, 'the role hosts to stop')


def test_an_unreachable_cluster_is_named_and_no_run_directory_is_left(
    tmp_path):
  root_dir = str(tmp_path / 'run')
  result = run_binary('binaries.ray_main', '--root_dir', root_dir,
                      '--ray_address', 'localhost:1', timeout=60)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      "ray_main.py: error: cannot reach the Ray cluster at 'localhost:1': "
      '[Errno 111] Connection refused')
  assert not os.path.exists(root_dir)


def test_role_hosts_start_without_tensorflow():
  # Each role's host is a Ray worker beside the role's own process: it
  # must not pay for (or hold the memory of) TensorFlow a second time.
  result = subprocess.run(
      [sys.executable, '-c', 'import sys, actorq_tf.ray_cluster; '
       'print(sorted({"tensorflow", "reverb"} & set(sys.modules)))'],
      cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))
  assert result.stdout.strip() == '[]', result.stderr[-2000:]


def test_a_restarted_host_stops_its_predecessors_role_first(tmp_path,
                                                           monkeypatch):
  root_dir = str(tmp_path)
  monkeypatch.setattr(ray_cluster, 'PREDECESSOR_GRACE_S', 0.5)
  sleep = [sys.executable, '-c', 'import time; time.sleep(60)']
  # What a host leaves behind when Ray replaces it on the same node: its
  # role process, still running, named in the role's status.
  predecessor = subprocess.Popen(
      sleep + ['binaries.learner_main', '--root_dir', root_dir])
  stranger = subprocess.Popen(sleep + ['something', 'else'])
  status_path = os.path.join(root_dir, run_directory.STATUS_DIR,
                             'learner.json')
  try:
    run_directory.write_json_atomically(status_path, {'pid': predecessor.pid})
    ray_cluster._wait_for_predecessor(  # pylint: disable=protected-access
        root_dir, 'learner', 'binaries.learner_main')
    assert predecessor.wait(timeout=10) == -signal.SIGKILL
    # A pid that now belongs to another program is left alone.
    run_directory.write_json_atomically(status_path, {'pid': stranger.pid})
    ray_cluster._wait_for_predecessor(  # pylint: disable=protected-access
        root_dir, 'learner', 'binaries.learner_main')
    assert stranger.poll() is None
  finally:
    for process in (predecessor, stranger):
      process.kill()
      process.wait()
