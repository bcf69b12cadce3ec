"""A run's directory: where each thing goes, who writes it, and how.

  root_dir/
    config.gin        the run's gin config (what every role parses)
    run.json          the run's identity: config, precision, seed, code
    summary.json      the launcher's verdict, written when a launch ends
    status/<role>.json  each role's figures, rewritten every few seconds
    checkpoints/      the learner's TF checkpoints
    replay_checkpoints/  the Reverb server's
    models/           the newest published model of each precision, and
                      the ones a run keeps (see run_results.ResultKeeper)
    eval/results.jsonl, eval/versions/v<version>/  the evaluator's
    logs/<role>.log   each role's output
    <role>/           each role's TensorBoard summaries

Roles are `reverb_server`, `learner`, `eval` and `actor_<i>`. Files that
others read while they are written are replaced whole.
"""
import dataclasses
import functools
import importlib.metadata
import json
import os
import shutil
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Type

from absl import logging

from actorq_tf import records
from actorq_tf.errors import ActorQError

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The role binaries that launchers start: binaries/, which is
# actorq_tf/binaries in a checkout (a link) and once installed (setup.py).
BINARIES = 'actorq_tf.binaries'


def roles_python_path() -> str:
  """The PYTHONPATH every role process gets: this checkout first, then the
  directory the run was launched from (where a user's own environment and
  network modules usually are: gin files `import` them in every role), then
  the launcher's own PYTHONPATH."""
  return os.pathsep.join(dict.fromkeys(
      p for p in (PROJECT_ROOT, os.getcwd(), os.environ.get('PYTHONPATH'))
      if p))

CONFIG_FILE = 'config.gin'
RUN_IDENTITY_FILE = 'run.json'
SUMMARY_FILE = 'summary.json'
STATUS_DIR = 'status'
CHECKPOINTS_DIR = 'checkpoints'
REPLAY_CHECKPOINTS_DIR = 'replay_checkpoints'
MODELS_DIR = 'models'
LOGS_DIR = 'logs'
EVAL_RESULTS_FILE = os.path.join('eval', 'results.jsonl')
EVAL_VERSIONS_DIR = os.path.join('eval', 'versions')

# What an evaluated version leaves in its directory (and a kept one in
# models/<name>/): the int8 model and,
# beside it, its normalizer and the fp32 weights it was evaluated against
# (export.save_model_files), and those weights as a TF checkpoint.
KEPT_MODEL = 'policy_int8'
KEPT_CHECKPOINT = 'fp32_network'

SERVER_ROLE = 'reverb_server'
LEARNER_ROLE = 'learner'
EVALUATOR_ROLE = 'eval'


def actor_role(actor_index: int) -> str:
  return f'actor_{actor_index}'


def write_json_atomically(path: str, data: Dict[str, Any]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.tmp', 'w') as f:
    json.dump(data, f, indent=1, sort_keys=True)
  os.replace(path + '.tmp', path)


def write_directory_atomically(path: str, fill: Callable[[str], None]
                              ) -> None:
  """Replaces directory `path` with one that `fill(new_path)` creates
  (`new_path` does not exist yet), so that no reader sees it half written."""
  partial = path + '.partial'
  shutil.rmtree(partial, ignore_errors=True)
  fill(partial)
  shutil.rmtree(path, ignore_errors=True)
  os.rename(partial, path)


def role_status_type(role: str) -> Type[records.RoleStatus]:
  """The status record a role writes."""
  if role.startswith('actor_'):
    return records.ActorStatus
  return {LEARNER_ROLE: records.LearnerStatus,
          EVALUATOR_ROLE: records.EvaluatorStatus,
          SERVER_ROLE: records.ServerStatus}[role]


def write_status(root_dir: str, role: str,
                 status: records.RoleStatus) -> None:
  if not isinstance(status, role_status_type(role)):
    raise TypeError(f'{role} writes a {role_status_type(role).__name__}, '
                    f'not a {type(status).__name__}')
  status = dataclasses.replace(status, time=time.time(), pid=os.getpid())
  write_json_atomically(os.path.join(root_dir, STATUS_DIR, f'{role}.json'),
                        status.to_dict())


def read_status(root_dir: str, role: str) -> Optional[records.RoleStatus]:
  """The role's newest status, or None before its first."""
  try:
    with open(os.path.join(root_dir, STATUS_DIR, f'{role}.json')) as f:
      return role_status_type(role).from_dict(json.load(f))
  except (FileNotFoundError, json.JSONDecodeError):
    return None


def write_summary(root_dir: str, summary: records.RunSummary) -> None:
  write_json_atomically(os.path.join(root_dir, SUMMARY_FILE),
                        summary.to_dict())


def read_summary(root_dir: str) -> Optional[records.RunSummary]:
  """The summary of the run's last launch, or None while it runs (or
  before it ran)."""
  try:
    with open(os.path.join(root_dir, SUMMARY_FILE)) as f:
      return records.RunSummary.from_dict(json.load(f))
  except FileNotFoundError:
    return None


def version_dir(root_dir: str, version: int) -> str:
  return os.path.join(root_dir, EVAL_VERSIONS_DIR, f'v{version}')


def read_results(root_dir: str) -> List[Dict]:
  """Every evaluation so far; a line cut short by a killed evaluator is
  left out."""
  try:
    with open(os.path.join(root_dir, EVAL_RESULTS_FILE)) as f:
      lines = [line for line in f if line.strip()]
  except FileNotFoundError:
    return []
  results = []
  for line in lines:
    try:
      results.append(json.loads(line))
    except json.JSONDecodeError:
      logging.warning('Skipping a damaged line of %s.',
                      EVAL_RESULTS_FILE)
  return results


def kept_model_path(root_dir: str, name: str) -> str:
  """The int8 model of the evaluated version kept as `name` ('target',
  'best')."""
  return os.path.join(root_dir, MODELS_DIR, name, KEPT_MODEL + '.tflite')


def keep_version(root_dir: str, version: int, name: str) -> None:
  """Copies evaluated version `version` (model, weights, checkpoint and its
  evaluation) to `models/<name>/`, replacing what was kept there."""
  source = version_dir(root_dir, version)
  write_directory_atomically(
      os.path.join(root_dir, MODELS_DIR, name),
      lambda destination: shutil.copytree(source, destination))


def read_kept_evaluation(root_dir: str, name: str) -> Optional[Dict]:
  """The evaluation of the version kept as `name`, if any."""
  path = kept_model_path(root_dir, name)[:-len('.tflite')] + '.json'
  try:
    with open(path) as f:
      return json.load(f)['evaluation']
  except (OSError, KeyError, json.JSONDecodeError):
    return None


@functools.lru_cache(maxsize=None)
def code_version() -> str:
  """The git commit of the code that runs (with '-dirty' for uncommitted
  changes), or the installed package's version outside a git checkout."""
  try:
    described = subprocess.run(
        ['git', '-C', PROJECT_ROOT, 'describe', '--always', '--dirty',
         '--abbrev=12', '--exclude=*'], capture_output=True, text=True,
        timeout=10, check=True).stdout.strip()
    if described:
      return f'git {described}'
  except (OSError, subprocess.SubprocessError):
    pass
  try:
    return f'actorq-tf {importlib.metadata.version("actorq-tf")}'
  except importlib.metadata.PackageNotFoundError:
    return 'unknown'


def resumable(summary: records.RunSummary) -> bool:
  """Whether a launch that left `summary` can be resumed."""
  return summary.status == 'failed' or summary.status.startswith(
      'interrupted')


def claim(root_dir: str, identity: Dict[str, Any]) -> List[Dict[str, Any]]:
  """Makes root_dir the run's that `identity` names (its gin config, actor
  precision and seed); returns the summaries of earlier launches of an
  unfinished (interrupted or failed) run there, which it resumes.

  The identity is kept in `run.json`, with the code version; a directory
  holding another run, a finished one or anything else is refused, not
  mixed.
  """
  summary_path = os.path.join(root_dir, SUMMARY_FILE)
  earlier_launches = []
  if os.path.exists(summary_path):
    try:
      earlier_summary = read_summary(root_dir)
    except json.JSONDecodeError:
      earlier_summary = records.RunSummary()  # Not resumable.
    if not resumable(earlier_summary):
      raise ActorQError(
          f'{root_dir} holds a finished run ({SUMMARY_FILE} exists); choose '
          'another --root_dir')
    earlier_launches = earlier_summary.earlier_launches
    launch = earlier_summary.to_dict()
    del launch['earlier_launches']
    earlier_launches.append(launch)
  identity_path = os.path.join(root_dir, RUN_IDENTITY_FILE)
  try:
    with open(identity_path) as f:
      earlier = json.load(f)
  except FileNotFoundError:
    earlier = None
  except (OSError, json.JSONDecodeError) as e:
    raise ActorQError(f'cannot read {identity_path}: {e}') from e
  if earlier is None and os.path.isdir(root_dir) and os.listdir(root_dir):
    raise ActorQError(f'{root_dir} is not empty and holds no ActorQ run; '
                      'choose another --root_dir')
  differences = [k for k in identity
                 if earlier is not None and earlier.get(k) != identity[k]]
  if differences:
    raise ActorQError(f'{root_dir} holds an unfinished run of another '
                      f'config (its {", ".join(differences)} differ); resume '
                      'it with the same flags and gin files, or choose '
                      'another --root_dir')
  os.makedirs(os.path.join(root_dir, LOGS_DIR), exist_ok=True)
  with open(os.path.join(root_dir, CONFIG_FILE), 'w') as f:
    f.write(identity['gin_config'])
  # The code may change between launches of one run: not part of identity.
  write_json_atomically(identity_path,
                        dict(identity, code_version=code_version()))
  if earlier_launches:
    # Running again: the directory must not look finished meanwhile.
    os.remove(summary_path)
  return earlier_launches
