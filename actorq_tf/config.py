"""gin parsing with errors a user can act on."""
import contextlib
import importlib
import inspect
import logging
import os
import tokenize
from typing import Callable, Sequence, Union

import gin

from actorq_tf.errors import ActorQError
from actorq_tf.errors import described

# The shipped experiments: gin_configs/, which is actorq_tf/gin_configs in a
# checkout (a link) and once installed (package data, see setup.py).
GIN_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              'gin_configs')
DEFAULT_GIN_FILE = os.path.join(GIN_CONFIG_DIR, 'dqn_cartpole_qat.gin')
# Lets a config `include` a shared one by its name in gin_configs/.
gin.add_config_file_search_path(GIN_CONFIG_DIR)


def resolve_gin_file(path: str) -> str:
  """Finds a gin file as given, or by name in the project's gin_configs/."""
  if os.path.isfile(path):
    return path
  in_config_dir = os.path.join(GIN_CONFIG_DIR, path)
  if os.path.isfile(in_config_dir):
    return in_config_dir
  raise ActorQError(f'gin file not found: {path!r} (also looked in '
                    f'{GIN_CONFIG_DIR})')


class _GinIncludeProbeFilter(logging.Filter):
  """Drops the logs gin writes while it looks for an `include`d file in each
  search path in turn; a file found nowhere still fails the parse."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(
        ('Path not found: ', 'system_path_file_exists:'))


@contextlib.contextmanager
def _quiet_include_probes():
  probe_filter = _GinIncludeProbeFilter()
  logging.getLogger().addFilter(probe_filter)
  try:
    yield
  finally:
    logging.getLogger().removeFilter(probe_filter)


def parse_gin(gin_files: Sequence[str], gin_bindings: Sequence[str]) -> None:
  """Parses gin files and bindings; every failure becomes an ActorQError."""
  # Every configurable module is imported first, so that an unknown name in
  # a gin file is a user error rather than a missing import.
  # pylint: disable=g-import-not-at-top,unused-import
  import actorq_tf.actor  # noqa: F401
  import actorq_tf.agents  # noqa: F401
  import actorq_tf.d4pg  # noqa: F401
  import actorq_tf.dqn  # noqa: F401
  import actorq_tf.environments  # noqa: F401
  import actorq_tf.evaluation  # noqa: F401
  import actorq_tf.export  # noqa: F401
  import actorq_tf.launcher  # noqa: F401
  import actorq_tf.learner  # noqa: F401
  import actorq_tf.model_checks  # noqa: F401
  import actorq_tf.networks  # noqa: F401
  import actorq_tf.replay  # noqa: F401
  import actorq_tf.runtime  # noqa: F401
  import actorq_tf.server  # noqa: F401
  # pylint: enable=g-import-not-at-top,unused-import
  files = [resolve_gin_file(f) for f in gin_files]
  try:
    with _quiet_include_probes():
      gin.parse_config_files_and_bindings(files, gin_bindings)
  except (ValueError, KeyError, SyntaxError, TypeError, ImportError, OSError,
          tokenize.TokenError) as e:
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    if "'run_local'" in first_line:
      first_line += (' (the launcher\'s gin name is run_training now: '
                     'bind run_training.<parameter>)')
    raise ActorQError(f'bad gin config {files + list(gin_bindings)}: '
                      f'{first_line}') from e


def is_bound(configurable, parameter: str) -> bool:
  """Whether the parsed gin config binds `parameter` of a configurable
  (unscoped), to a value or a reference."""
  module = configurable.__module__.split('.')[-1]
  try:
    gin.query_parameter(f'{module}.{configurable.__name__}.{parameter}')
  except ValueError:
    return False
  return True


def bound_parameter(configurable, parameter: str):
  """`parameter` of a gin-configurable function as the parsed config binds
  it (unscoped; a macro or reference is an ActorQError), else the
  function's own default (None if it has none)."""
  name = f'{configurable.__name__}.{parameter}'
  try:
    value = gin.query_parameter(name)
  except ValueError:
    default = inspect.signature(configurable).parameters[parameter].default
    return None if default in (inspect.Parameter.empty, gin.REQUIRED) \
        else default
  if isinstance(value, gin.config.ConfigurableReference):
    raise ActorQError(f'{name} must be bound to a value here, not to a '
                      f'macro or reference ({value})')
  return value


def resolve_callable(target: Union[str, Callable], what: str) -> Callable:
  """`target` itself if callable, else the function or class its import path
  names ('my_envs.make_corridor' or 'my_envs:make_corridor'), imported
  here; anything else is an ActorQError that names `what` (the setting)."""
  if callable(target):
    return target
  if not isinstance(target, str) or not target.strip():
    raise ActorQError(f'{what} must be a callable or its import path such as '
                      f"'my_package.my_module.make', not {target!r}")
  module_name, separator, attribute = target.strip().rpartition(
      ':' if ':' in target else '.')
  if not separator or not module_name:
    raise ActorQError(f"{what} {target!r} is not an import path such as "
                      f"'my_package.my_module.make'")
  try:
    module = importlib.import_module(module_name)
  except Exception as e:  # pylint: disable=broad-except
    # Any failure of the user's module (ImportError, or an error in its
    # code) is theirs to fix: one line naming the module.
    raise ActorQError(f'{what} {target!r}: module {module_name!r} does not '
                      f'import ({described(e)}); is it on the PYTHONPATH?'
                     ) from e
  found = getattr(module, attribute, None)
  if not callable(found):
    raise ActorQError(f'{what} {target!r}: module {module_name!r} has no '
                      f'callable {attribute!r}')
  return found
