"""Roles on the nodes of a Ray cluster, seen through Ray.

Each role runs as on one machine (the same binary, as a subprocess) inside
a Ray actor, its host, that Ray places and restarts:

  - the learner, with a GPU when the cluster has one, and the Reverb
    server in its process (or, with `run_training.replay_in_learner = False`,
    in a role of its own) on a node Ray chooses, pinned there so that a
    restart finds its checkpoints and keeps the server's address (a run
    whose server node is lost stops with the reason: its clients know only
    that address);
  - the evaluator;
  - the actors with one CPU each, spread over the nodes.

A host whose process or node is lost is restarted by Ray and starts its role
again (the learner and server from their checkpoints); the launcher counts
that as the role's restart and applies its usual give-up rules. Status,
evaluation results and kept versions are read on the node that wrote them,
through the role's host, so the launcher needs no filesystem shared with the
nodes; it writes the summary on its own machine. Checkpoints, models and
TensorBoard summaries go to `root_dir` on each role's node: share it (NFS)
for a run that can resume, or for one place to read it all.

Reverb and Ray have no authentication: keep the cluster on a trusted
network.
"""
import os
import signal
import socket
import time
import uuid
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import portpicker
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actorq_tf import placement
from actorq_tf import run_directory
from actorq_tf.errors import ActorQError

# How long the launcher tries to reach a running cluster's address.
CONNECT_TIMEOUT_S = 10.0
# What one call to a role's host may take before the launcher treats the
# host as out of reach for this round; the monitor loop calls each host in
# turn, so this bounds its stalls when a node is lost.
CALL_TIMEOUT_S = 3.0
# Copying an evaluated version into models/ may take longer (shared disks).
KEEP_TIMEOUT_S = 60.0
# How long a restarted host waits for its predecessor's role process (told
# to stop when its host died) before it kills it.
PREDECESSOR_GRACE_S = 30.0
# How long a role may be placed (its node found, its host started) or stay
# unreachable before the run stops with the reason.
PLACEMENT_TIMEOUT_S = 120.0
# What the launcher reads as the exit code of a role whose host Ray
# restarted: the role was killed with its process or node.
LOST_EXIT_CODE = -signal.SIGKILL
# Role kinds, for per-kind resources: the role's name, or 'actor'.
ROLE_KINDS = (run_directory.SERVER_ROLE, run_directory.LEARNER_ROLE,
              run_directory.EVALUATOR_ROLE, 'actor')


def role_kind(name: str) -> str:
  return 'actor' if name.startswith('actor_') else name


class RoleHost:
  """A Ray actor that runs one role as a subprocess on its node and reads
  the role's files there."""

  def __init__(self, root_dir: str, name: str, module: str,
               args: Sequence[str], environment: Dict[str, str]):
    self._root_dir = root_dir
    self._name = name
    # Tells this host from the one Ray starts in its place.
    self._token = uuid.uuid4().hex
    _wait_for_predecessor(root_dir, name, module)
    self._role = placement.RoleProcess(
        name, module, args, os.path.join(root_dir, run_directory.LOGS_DIR),
        environment)
    self._started = time.time()

  def poll(self) -> Tuple[str, Optional[int]]:
    """This host's token (new when Ray restarts the host) and the role's
    exit code (None while it runs)."""
    return self._token, self._role.exit_code()

  def node(self) -> Dict:
    return {'node_id': ray.get_runtime_context().get_node_id(),
            'node_ip': ray.util.get_node_ip_address(), 'token': self._token,
            'started': self._started}

  def restart(self) -> None:
    self._role.restart()

  def kill(self) -> None:
    self._role.kill()

  def terminate(self) -> None:
    self._role.terminate()

  def wait(self, timeout_s: float) -> Optional[int]:
    self._role.wait(timeout_s)
    return self._role.exit_code()

  def log_tail(self, lines: int) -> str:
    return self._role.log_tail(lines)

  def read_status(self, role: str) -> Optional[Dict]:
    return run_directory.read_status(self._root_dir, role)

  def read_results_after(self, version: int) -> List[Dict]:
    return [r for r in run_directory.read_results(self._root_dir)
            if r['version'] > version]

  def keep_version(self, version: int, name: str) -> Optional[str]:
    try:
      run_directory.keep_version(self._root_dir, version, name)
    except OSError as e:
      return str(e)
    return None

  def read_kept_evaluation(self, name: str) -> Optional[Dict]:
    return run_directory.read_kept_evaluation(self._root_dir, name)


def _call(method, *args, timeout_s: float = CALL_TIMEOUT_S):
  return ray.get(method.remote(*args), timeout=timeout_s)


_UNREACHABLE = (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
                ray.exceptions.ActorUnschedulableError)


def _wait_for_predecessor(root_dir: str, name: str, module: str) -> None:
  """Waits until the role process of the host this one replaces (on this
  node) has stopped, killing it after PREDECESSOR_GRACE_S: two servers
  cannot share a port, nor two learners a checkpoint directory."""
  status = run_directory.read_status(root_dir, name)
  pid = status and status.pid
  if not pid:
    return
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as f:
      command = f.read().split(b'\0')
  except OSError:
    return  # Gone, or on another node.
  if module.encode() not in command or root_dir.encode() not in command:
    return  # The pid is someone else's now.
  deadline = time.monotonic() + PREDECESSOR_GRACE_S
  while os.path.exists(f'/proc/{pid}') and time.monotonic() < deadline:
    time.sleep(0.2)
  try:
    os.kill(pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


class RayRole:
  """The launcher's handle on a role hosted on the cluster; it answers as
  `placement.RoleProcess` does."""

  def __init__(self, name: str, host, log_path: str, options: Dict):
    self.name = name
    self.log_path = log_path
    self.restarts = 0
    self.node: Dict = {}
    self.placement_s: Optional[float] = None
    self._requested = time.time()
    self._host = host
    self._options = options
    # Roles are placed side by side: each handle waits for its own host
    # when first asked about it.
    self._placed = host.node.remote()
    self._host_token: Optional[str] = None
    self._restarted_by_ray = False
    self._stopping = False
    self._unreachable_since: Optional[float] = None
    self._last_exit_code: Optional[int] = None
    self.started = time.monotonic()

  def _wait_until_placed(self) -> None:
    if self._placed is None:
      return
    timeout_s = PLACEMENT_TIMEOUT_S - (time.monotonic() - self.started)
    try:
      self.node = ray.get(self._placed, timeout=max(timeout_s, 0.1))
    except _UNREACHABLE as e:
      self._placed = None  # Said once; later calls find it out of reach.
      raise ActorQError(
          f'Ray could not place role {self.name} within '
          f'{PLACEMENT_TIMEOUT_S:g} s ({type(e).__name__}); it asks for '
          f'{_readable(self._options)}, the cluster has '
          f'{ray.cluster_resources()}') from e
    # From the request to the role's process started on its node.
    self.placement_s = round(self.node['started'] - self._requested, 2)
    self._placed = None
    self._host_token = self.node['token']

  def exit_code(self) -> Optional[int]:
    """The role's exit code; LOST_EXIT_CODE once when Ray restarted its
    host; None while it runs or while its host is out of reach."""
    if not self._stopping:
      self._wait_until_placed()
    try:
      host_token, code = _call(self._host.poll)
    except _UNREACHABLE as e:
      now = time.monotonic()
      self._unreachable_since = self._unreachable_since or now
      if (now - self._unreachable_since > PLACEMENT_TIMEOUT_S and
          not self._stopping):
        raise ActorQError(
            f'role {self.name} has been out of reach for '
            f'{PLACEMENT_TIMEOUT_S:g} s and Ray did not restart it '
            f'({type(e).__name__}: {str(e).splitlines()[0][:200]})') from e
      return self._last_exit_code
    self._unreachable_since = None
    if host_token != self._host_token:
      self._host_token = host_token
      self._restarted_by_ray = True
    self._last_exit_code = (LOST_EXIT_CODE if self._restarted_by_ray
                            else code)
    return self._last_exit_code

  def restart(self) -> None:
    self.restarts += 1
    self.started = time.monotonic()
    try:
      if self._restarted_by_ray:  # Its new host started it already.
        self._restarted_by_ray = False
        self.node = _call(self._host.node)
      else:
        _call(self._host.restart)
    except _UNREACHABLE as e:
      raise ActorQError(f'could not restart role {self.name}: its host is '
                        f'out of reach ({type(e).__name__})') from e
    self._last_exit_code = None

  def uptime_s(self) -> float:
    return time.monotonic() - self.started

  def kill(self) -> None:
    try:
      _call(self._host.kill)
    except _UNREACHABLE:
      pass  # Out of reach is as good as killed here.

  def terminate(self) -> None:
    self._stopping = True
    try:
      _call(self._host.terminate)
    except _UNREACHABLE:
      pass

  def wait(self, timeout_s: float) -> None:
    try:
      self._last_exit_code = _call(self._host.wait, timeout_s,
                                   timeout_s=timeout_s + CALL_TIMEOUT_S)
    except _UNREACHABLE:
      pass

  def log_tail(self, lines: int = 8) -> str:
    try:
      return _call(self._host.log_tail, lines)
    except _UNREACHABLE:
      return f'(the log on node {self.node.get("node_ip")} is out of reach)'

  def call(self, method: str, *args, default=None,
           timeout_s: float = CALL_TIMEOUT_S):
    """A call on the role's host, once placed; `default` when the host is
    out of reach."""
    self._wait_until_placed()
    try:
      return _call(getattr(self._host, method), *args, timeout_s=timeout_s)
    except _UNREACHABLE:
      return default

  def stop_host(self) -> None:
    ray.kill(self._host, no_restart=True)


def _readable(options: Mapping) -> Dict:
  return {k: v for k, v in options.items() if k != 'scheduling_strategy'}


def parse_resources(specs: Sequence[str]) -> Dict[str, Dict[str, float]]:
  """'KIND:RESOURCE=AMOUNT' flags (e.g. 'actor:cpu_node=1') as custom Ray
  resources per role kind."""
  resources: Dict[str, Dict[str, float]] = {}
  for spec in specs:
    kind, _, assignment = spec.partition(':')
    name, _, amount = assignment.partition('=')
    try:
      value = float(amount)
    except ValueError:
      value = None
    if kind not in ROLE_KINDS or not name or value is None or value <= 0:
      raise ActorQError(
          f'--ray_resources {spec!r}: expected KIND:RESOURCE=AMOUNT with '
          f'KIND one of {", ".join(ROLE_KINDS)} and AMOUNT > 0')
    resources.setdefault(kind, {})[name] = value
  return resources


def role_options(name: str, resources: Mapping[str, Mapping[str, float]],
                 has_gpu: bool, hosts_server: bool = False) -> Dict:
  """Ray options of a role's host. A role that hosts the Reverb server (the
  learner, by default) also asks for the server's resources, so that
  `reverb_server:...` places the server wherever it runs."""
  kind = role_kind(name)
  wanted = dict(resources.get(kind, {}))
  if hosts_server:
    # One process: a resource both name is needed once.
    for resource, amount in resources.get(run_directory.SERVER_ROLE,
                                          {}).items():
      wanted[resource] = max(amount, wanted.get(resource, 0.0))
  options = {'num_cpus': 1, 'max_restarts': -1, 'max_task_retries': 0,
             'resources': wanted}
  if kind == run_directory.LEARNER_ROLE and has_gpu:
    options['num_gpus'] = 1
  if kind == 'actor':
    options['scheduling_strategy'] = 'SPREAD'
  return options


class RayCluster:
  """A placement (see `placement`) on a Ray cluster: a new local one
  (address None) or a running one ('auto', or its address)."""

  def __init__(self, root_dir: str, address: Optional[str] = None,
               num_actors: int = 1,
               resources: Optional[Mapping[str, Mapping[str, float]]] = None):
    self.root_dir = root_dir
    self._resources = dict(resources or {})
    self._roles: Dict[str, RayRole] = {}
    # Every evaluation read so far, in the order of their versions.
    self._results: List[Dict] = []
    # Workers find this checkout's code first, and the user's modules, as
    # role processes do.
    runtime_env = {'env_vars': {
        'PYTHONPATH': run_directory.roles_python_path()}}
    init_args = dict(address=address, runtime_env=runtime_env,
                     logging_level='ERROR', log_to_driver=False)
    if address is None:
      # Logical CPUs: every role gets one, as processes share this machine's
      # cores in a local run.
      init_args.update(num_cpus=max(os.cpu_count() or 1, 3 + num_actors),
                       include_dashboard=False)
    started = time.monotonic()
    try:
      if address is not None:
        _check_reachable(address)
      context = ray.init(**init_args)
    except (OSError, ValueError, RuntimeError) as e:
      raise ActorQError(f'cannot reach the Ray cluster at {address!r}: '
                        f'{str(e).splitlines()[0]}') from e
    self.address = context.address_info.get('address') or address
    self._connect_s = round(time.monotonic() - started, 2)
    self._has_gpu = ray.cluster_resources().get('GPU', 0) >= 1
    self._host_class = ray.remote(RoleHost)

  def describe(self) -> str:
    return (f'the Ray cluster at {self.address} (logs in '
            f'{os.path.join(self.root_dir, run_directory.LOGS_DIR)} on each '
            'role\'s node)')

  def _options(self, name: str, hosts_server: bool = False) -> Dict:
    return role_options(name, self._resources, self._has_gpu, hosts_server)

  def _start(self, name: str, module: str, args: List[str],
             environment: Dict[str, str], options: Dict) -> RayRole:
    host = self._host_class.options(**options).remote(
        self.root_dir, name, module, args, environment)
    role = RayRole(name, host, os.path.join(
        self.root_dir, run_directory.LOGS_DIR, f'{name}.log'), options)
    self._roles[name] = role
    return role

  def start_server(self, name: str, module: str, args: List[str],
                   environment: Dict[str, str]) -> Tuple[RayRole, str]:
    options = self._options(name, hosts_server=True)
    probe = ray.remote(_node_and_free_port).options(
        num_cpus=options['num_cpus'], num_gpus=options.get('num_gpus', 0),
        resources=options['resources'])
    try:
      node_id, node_ip, port = ray.get(probe.remote(),
                                       timeout=PLACEMENT_TIMEOUT_S)
    except ray.exceptions.RayError as e:
      raise ActorQError(
          f'Ray found no node for the Reverb server (in {name}) within '
          f'{PLACEMENT_TIMEOUT_S:g} s ({type(e).__name__}); it asks for '
          f'{_readable(options)}, the cluster has '
          f'{ray.cluster_resources()}') from e
    options['scheduling_strategy'] = NodeAffinitySchedulingStrategy(
        node_id, soft=False)
    server = self._start(name, module, args + ['--replay_port', str(port)],
                         environment, options)
    return server, f'{node_ip}:{port}'

  def start_role(self, name: str, module: str, args: List[str],
                 environment: Dict[str, str]) -> RayRole:
    return self._start(name, module, args, environment, self._options(name))

  def read_status(self, role: str) -> Optional[Dict]:
    host = self._roles.get(role)
    return host and host.call('read_status', role)

  def read_results(self) -> List[Dict]:
    evaluator = self._roles.get(run_directory.EVALUATOR_ROLE)
    if evaluator:
      # By version, not by count: an evaluator restarted on another node
      # starts a results file of its own.
      newest = self._results[-1]['version'] if self._results else -1
      self._results += evaluator.call('read_results_after', newest,
                                      default=[])
    return list(self._results)

  def keep_version(self, version: int, name: str) -> None:
    evaluator = self._roles[run_directory.EVALUATOR_ROLE]
    error = evaluator.call('keep_version', version, name,
                           default='its host is out of reach',
                           timeout_s=KEEP_TIMEOUT_S)
    if error:
      raise OSError(error)

  def read_kept_evaluation(self, name: str) -> Optional[Dict]:
    evaluator = self._roles.get(run_directory.EVALUATOR_ROLE)
    return evaluator and evaluator.call('read_kept_evaluation', name)

  def summary(self) -> Dict:
    # What Ray adds to a run's start: joining (or starting) the cluster,
    # and per role the time from asking for its host to its role process
    # started (the roles are placed side by side).
    overhead = {'connect_s': self._connect_s,
                'role_start_s': {name: role.placement_s
                                 for name, role in self._roles.items()}}
    return {'ray_address': self.address, 'ray_overhead': overhead,
            'role_nodes': {name: {k: role.node.get(k)
                                  for k in ('node_ip', 'node_id')}
                           for name, role in self._roles.items()}}

  def close(self) -> None:
    """Stops every host (no Ray actor outlives the run) and leaves the
    cluster, shutting it down if this run started it."""
    for role in self._roles.values():
      try:
        role.stop_host()
      except ray.exceptions.RayError:
        pass  # Gone with its node or its cluster.
    self._roles.clear()
    ray.shutdown()


def _check_reachable(address: str) -> None:
  """Raises OSError unless the cluster's address answers: ray.init would
  wait for an unreachable one for minutes."""
  # pylint: disable-next=protected-access
  resolved = ray._private.services.canonicalize_bootstrap_address(address)
  if resolved is None:
    raise ConnectionError('no running Ray cluster found')
  host, _, port = resolved.rpartition(':')
  with socket.create_connection((host, int(port)),
                                timeout=CONNECT_TIMEOUT_S):
    pass


def _node_and_free_port() -> Tuple[str, str, int]:
  return (ray.get_runtime_context().get_node_id(),
          ray.util.get_node_ip_address(), portpicker.pick_unused_port())
