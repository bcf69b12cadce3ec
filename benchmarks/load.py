"""Many actors, and faults under them: one local run as a user starts it
(`local_main`, the Reverb server a role of its own), watched from outside.

While the run goes, every 2 s: each role's CPU (cores, from /proc) and
resident memory, and the replay's size. With `--chaos_kill_interval_s`, the
launcher SIGKILLs a random role that often; for each kill this records how
long the role was gone (until a new process of it wrote its status), and for
a server kill the replay items before it, in its last checkpoint and after
its restart. With `--ray_nodes`, the run is `ray_main` on a local Ray
cluster of that many actor nodes beside a head node (server, learner,
evaluator), and `--node_kill_interval_s` removes a random actor node that
often (kill -9 of its processes) and adds a fresh one. At the end: per actor, env steps/s, the share of the learner's
published versions it acted with and how far behind the newest it ended,
model pull time per version and bytes per update; the launcher's time per
look at the roles; the replay ratio; processes of the run left behind.

  .venv/bin/python -m benchmarks.load --num_actors 16 --max_wall_time_s 240 \\
      --output_json benchmarks/results/load/cartpole_16.json
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

from absl import app
from absl import flags
import numpy as np

from actorq_tf import records
from actorq_tf import run_directory

flags.DEFINE_multi_string('gin_file', ['dqn_cartpole.gin'], 'Experiment.')
flags.DEFINE_multi_string('gin_bindings', [], 'gin bindings.')
flags.DEFINE_integer('num_actors', 16, 'Actors.')
flags.DEFINE_float('max_wall_time_s', 240, 'Length of the run.')
flags.DEFINE_float('chaos_kill_interval_s', 0, 'SIGKILL a random role this '
                   'often; 0 never.')
flags.DEFINE_float('target_return', 100_000, 'The run\'s target; the '
                   'default none reaches, so that the run lasts its wall time.')
flags.DEFINE_float('continue_after_target_s', 0, 'Train on this long after '
                   'the target.')
flags.DEFINE_integer('ray_nodes', 0, 'Run on a local Ray cluster with this '
                     'many actor nodes; 0 runs local_main.')
flags.DEFINE_float('node_kill_interval_s', 0, 'With --ray_nodes: remove a '
                   'random actor node this often and add a new one; 0 never.')
flags.DEFINE_string('root_dir', None, 'Run directory (replaced).')
flags.DEFINE_string('output_json', None, 'Also write the figures here.')
FLAGS = flags.FLAGS

_CLOCK_TICKS = os.sysconf('SC_CLK_TCK')


def _cpu_seconds(pid: int) -> Optional[float]:
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
  except (OSError, IndexError, ValueError):
    return None


def _rss_mb(pid: int) -> Optional[float]:
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith('VmRSS:'):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return None


def _processes_of(root_dir: str) -> List[int]:
  """Processes whose command line names the run directory."""
  pids = []
  for name in os.listdir('/proc'):
    if not name.isdigit() or int(name) == os.getpid():
      continue
    try:
      with open(f'/proc/{name}/cmdline', 'rb') as f:
        if root_dir.encode() in f.read():
          pids.append(int(name))
    except OSError:
      pass
  return pids


class _Watcher:
  """Samples the roles' processes and the launcher's chaos kills."""

  def __init__(self, root_dir: str, roles: List[str]):
    self._root_dir = root_dir
    self._roles = roles
    self.cpu = {role: [] for role in roles}  # (wall, cpu s, pid) samples
    self.rss_mb = {role: [] for role in roles}
    self.kills = []
    self.node_kills = []

  def status(self, role: str) -> records.RoleStatus:
    """The role's newest status; an empty one before its first."""
    return (run_directory.read_status(self._root_dir, role) or
            run_directory.role_status_type(role)())

  def sample(self) -> None:
    now = time.time()
    for role in self._roles:
      pid = self.status(role).pid
      cpu = pid and _cpu_seconds(pid)
      if cpu is not None:
        self.cpu[role].append((now, cpu, pid))
        self.rss_mb[role].append(_rss_mb(pid) or 0.0)
    for kill in self.kills:
      self._follow(kill, now)
    for kill in self.node_kills:
      self._follow_node(kill, now)

  def killed(self, role: str) -> None:
    before = self.status(role)
    kill = {'role': role, 'time': time.time(), 'old_pid': before.pid,
            'gone_s': None}
    if role == run_directory.SERVER_ROLE:
      kill['replay_items_before'] = self.status(
          run_directory.LEARNER_ROLE).replay_size
      kill['checkpoint_items'] = before.last_checkpoint_items
    self.kills.append(kill)

  def lost_node(self, kill: Dict) -> None:
    """A node removed: every actor's pid then, to tell when each is back."""
    kill['actors_before'] = {
        role: self.status(role).env_steps for role in self._roles
        if role.startswith('actor_')}
    kill['actors_back_s'] = None
    self.node_kills.append(kill)

  def _follow_node(self, kill: Dict, now: float) -> None:
    # The node's actors come back elsewhere and collect again: the time
    # until every actor has collected more than before the kill.
    if kill['actors_back_s'] is None and all(
        self.status(role).env_steps > steps and
        self.status(role).time > kill['time']
        for role, steps in kill['actors_before'].items()):
      kill['actors_back_s'] = round(now - kill['time'], 1)

  def _follow(self, kill: Dict, now: float) -> None:
    if kill['gone_s'] is not None:
      return
    status = self.status(kill['role'])
    if status.pid not in (0, kill['old_pid']) and status.time > kill['time']:
      kill['gone_s'] = round(status.time - kill['time'], 1)
      if kill['role'] == run_directory.SERVER_ROLE:
        kill['replay_items_restored'] = status.restored_items

  def cpu_cores(self, role: str) -> Optional[float]:
    """Mean cores over the run, summed over the role's processes."""
    samples = self.cpu[role]
    used = wall = 0.0
    for (t0, c0, p0), (t1, c1, p1) in zip(samples, samples[1:]):
      if p0 == p1:
        used += c1 - c0
        wall += t1 - t0
    return round(used / wall, 3) if wall else None


def _ray_cluster():
  """A local cluster: a head node for the server, learner and evaluator,
  and `--ray_nodes` nodes that share the actors."""
  from ray.cluster_utils import Cluster  # pylint: disable=g-import-not-at-top
  per_node = -(-FLAGS.num_actors // FLAGS.ray_nodes)
  cluster = Cluster(initialize_head=True, head_node_args={
      'num_cpus': 3, 'resources': {'head_node': 3}})
  for _ in range(FLAGS.ray_nodes):
    cluster.add_node(num_cpus=per_node, resources={'actor_node': per_node})
  return cluster


def _replace_a_node(cluster, rng) -> Dict:
  """Removes a random actor node at once (its processes killed) and adds
  fresh ones until the cluster has `--ray_nodes` again; what was lost."""
  workers = [n for n in cluster.list_all_nodes() if n is not cluster.head_node]
  lost = workers[rng.integers(len(workers))]
  cluster.remove_node(lost, allow_graceful=False)
  added = _add_actor_nodes(cluster, FLAGS.ray_nodes - len(workers) + 1)
  print(f'Node kill: removed node {lost.unique_id[:8]} and added {added} '
        'new one(s).', flush=True)
  return {'time': time.time(), 'node': lost.unique_id, 'nodes_added': added}


def _add_actor_nodes(cluster, count: int) -> int:
  """Adds up to `count` actor nodes; how many started. On 2 cores under
  load a raylet can miss Ray's start-up deadline: that is reported, and the
  next node kill tries again."""
  per_node = -(-FLAGS.num_actors // FLAGS.ray_nodes)
  added = 0
  for _ in range(count):
    try:
      cluster.add_node(num_cpus=per_node, resources={'actor_node': per_node})
      added += 1
    except Exception as e:  # pylint: disable=broad-except
      # Ray raises a bare Exception when a node does not start in time.
      print(f'Node kill: a new node did not start ({e}).', flush=True)
  return added


def run(root_dir: str) -> Dict:
  shutil.rmtree(root_dir, ignore_errors=True)
  os.makedirs(os.path.dirname(root_dir) or '.', exist_ok=True)
  cluster = _ray_cluster() if FLAGS.ray_nodes else None
  command = [sys.executable, '-m',
             'binaries.ray_main' if cluster else 'binaries.local_main',
             '--root_dir', root_dir, '--num_actors', str(FLAGS.num_actors),
             '--max_env_steps', '0', '--max_wall_time_s',
             str(FLAGS.max_wall_time_s), '--target_return',
             str(FLAGS.target_return), '--continue_after_target_s',
             str(FLAGS.continue_after_target_s),
             '--chaos_kill_interval_s', str(FLAGS.chaos_kill_interval_s),
             '--notrack_energy',
             '--gin_bindings', 'run_training.replay_in_learner = False']
  for gin_file in FLAGS.gin_file:
    command += ['--gin_file', gin_file]
  for binding in FLAGS.gin_bindings:
    command += ['--gin_bindings', binding]
  if cluster:
    command += ['--ray_address', cluster.address,
                '--ray_resources', 'reverb_server:head_node=1',
                '--ray_resources', 'learner:head_node=1',
                '--ray_resources', 'eval:head_node=1',
                '--ray_resources', 'actor:actor_node=1']
  roles = ([run_directory.SERVER_ROLE, run_directory.LEARNER_ROLE,
            run_directory.EVALUATOR_ROLE] +
           [run_directory.actor_role(i) for i in range(FLAGS.num_actors)])
  watcher = _Watcher(root_dir, roles)
  launcher = subprocess.Popen(
      command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      cwd=run_directory.PROJECT_ROOT,
      env=dict(os.environ, PYTHONPATH=run_directory.PROJECT_ROOT))
  lines = []

  def read_output():
    for line in launcher.stdout:
      lines.append(line)
      print(line, end='', flush=True)
      killed = re.match(r'Chaos: killing (\S+) \(SIGKILL\)', line)
      if killed:
        watcher.killed(killed.group(1))

  reader = threading.Thread(target=read_output, daemon=True)
  reader.start()
  next_node_kill = time.monotonic() + (FLAGS.node_kill_interval_s or
                                       float('inf'))
  rng = np.random.default_rng(0)
  try:
    while launcher.poll() is None:
      watcher.sample()
      if cluster and time.monotonic() >= next_node_kill:
        watcher.lost_node(_replace_a_node(cluster, rng))
        next_node_kill += FLAGS.node_kill_interval_s
      time.sleep(2.0)
  finally:
    if launcher.poll() is None:  # the benchmark itself failed
      launcher.terminate()
      launcher.wait(120)
    reader.join()
    if cluster:
      cluster.shutdown()
  stray = _processes_of(root_dir)
  return _figures(run_directory.read_summary(root_dir), watcher, stray)


def _figures(summary: records.RunSummary, watcher: _Watcher,
             stray: List[int]) -> Dict:
  published = watcher.status(run_directory.LEARNER_ROLE).published_versions
  actors = {}
  for i in range(summary.num_actors):
    role = run_directory.actor_role(i)
    status = watcher.status(role)
    ran = status.versions_run
    pulled = max(len(ran), 1)
    actors[role] = {
        'env_steps': status.env_steps,
        # The final status: steps over the loop's seconds (one launch).
        'env_steps_per_second': round(
            status.env_steps / max(status.loop_seconds, 1e-9), 1),
        'model_share': status.model_share,
        'versions_run': len(ran),
        'published_versions_run_share': round(
            len(set(ran) & set(published)) / max(len(published), 1), 3),
        'versions_behind_at_end': (
            len([v for v in published if v > ran[-1]]) if ran else None),
        'not_published_by_learner': sorted(set(ran) - set(published)),
        'model_pull_s_per_version': round(
            status.model_pull_seconds / pulled, 4),
        'replay_blocked_s': status.replay_blocked_seconds,
        'refused_versions': status.refused_versions,
        'cpu_cores': watcher.cpu_cores(role),
        'max_rss_mb': round(max(watcher.rss_mb[role], default=0), 1),
    }
  roles = {role: {'cpu_cores': watcher.cpu_cores(role),
                  'max_rss_mb': round(max(watcher.rss_mb[role], default=0), 1)}
           for role in (run_directory.SERVER_ROLE, run_directory.LEARNER_ROLE,
                        run_directory.EVALUATOR_ROLE)}
  rates = [a['env_steps_per_second'] or 0.0 for a in actors.values()]
  return {
      'status': summary.status,
      'error': summary.error,
      'precision': summary.precision,
      'num_actors': summary.num_actors,
      'gin_files': summary.gin_files,
      'gin_bindings': summary.gin_bindings,
      'wall_time_s': summary.wall_time_s,
      'env_steps': summary.env_steps,
      'train_steps': summary.train_steps,
      'published_versions': len(published),
      'model_update_bytes': summary.model_update_bytes,
      'replay_samples_per_insert_configured':
          summary.replay_samples_per_insert_configured,
      'replay_samples_per_insert_after_warmup':
          summary.replay_samples_per_insert_after_warmup,
      'actor_env_steps_per_second': {
          'sum': round(sum(rates), 1), 'min': round(min(rates), 1),
          'max': round(max(rates), 1)},
      'monitor_look_s': summary.monitor_look_s,
      'roles': roles,
      'actors': actors,
      'chaos_kills': watcher.kills,
      'node_kills': [{k: v for k, v in kill.items() if k != 'actors_before'}
                     for kill in watcher.node_kills],
      'ray_nodes': FLAGS.ray_nodes,
      'role_restarts': summary.role_restarts,
      'last_evaluation': summary.last_evaluation,
      'target_reached': summary.target_reached,
      'time_to_target_s': summary.time_to_target_s,
      'post_target_returns': summary.post_target_returns,
      'stray_processes': stray,
  }


def print_table(figures: Dict) -> None:
  print(f'\n{figures["num_actors"]} {figures["precision"]} actors, '
        f'{figures["gin_files"]}: {figures["status"]} after '
        f'{figures["wall_time_s"]} s, {figures["env_steps"]:,} env steps, '
        f'{figures["train_steps"]:,} train steps, '
        f'{figures["published_versions"]} versions published '
        f'({figures["model_update_bytes"]:,} bytes each to each actor)')
  print(f'replay samples/insert after warm-up '
        f'{figures["replay_samples_per_insert_after_warmup"]} (configured '
        f'{figures["replay_samples_per_insert_configured"]}); launcher look '
        f'at the roles {figures["monitor_look_s"]}; stray processes '
        f'{figures["stray_processes"]}')
  print('| role | cores | max RSS MB | env steps/s | versions run (share of '
        'published) | behind at end | pull s/version |')
  print('| --- | --- | --- | --- | --- | --- | --- |')
  for role, f in figures['roles'].items():
    print(f'| {role} | {f["cpu_cores"]} | {f["max_rss_mb"]} | | | | |')
  for role, f in figures['actors'].items():
    print(f'| {role} | {f["cpu_cores"]} | {f["max_rss_mb"]} | '
          f'{f["env_steps_per_second"]} | {f["versions_run"]} '
          f'({f["published_versions_run_share"]}) | '
          f'{f["versions_behind_at_end"]} | {f["model_pull_s_per_version"]} |')
  for kill in figures['chaos_kills']:
    print(f'kill: {kill}')
  for kill in figures['node_kills']:
    print(f'node kill: {kill}')


def main(_):
  root_dir = os.path.abspath(FLAGS.root_dir or os.path.join(
      'runs', f'load_{FLAGS.num_actors}_actors'))
  figures = run(root_dir)
  print_table(figures)
  if FLAGS.output_json:
    os.makedirs(os.path.dirname(FLAGS.output_json) or '.', exist_ok=True)
    with open(FLAGS.output_json, 'w') as f:
      json.dump(figures, f, indent=1)


if __name__ == '__main__':
  app.run(main)
