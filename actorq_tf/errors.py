"""The one exception type that reaches the user as a one-line message, and
the errors of a Reverb server that does not answer."""
import errno


class ActorQError(Exception):
  """A problem the user can fix: bad input, unreachable server, failed export.

  Binaries print its message on one line and exit non-zero instead of showing
  a traceback.
  """

  def __init__(self, message: str):
    super().__init__(message)
    # gin appends "In call to configurable ..." lines to str() of exceptions
    # that pass through a configurable; the message alone stays here.
    self.message = message


def described(error: BaseException) -> str:
  """An exception as one line: its type and the first line of its message
  (gin and TensorFlow append pages of context to theirs)."""
  lines = str(error).strip().splitlines()
  return f'{type(error).__name__}: {lines[0]}' if lines else type(
      error).__name__


def disk_full(error: BaseException) -> bool:
  """Whether `error` is a write that found its disk full: an OSError of
  ENOSPC, or TensorFlow's or Reverb's errors, which carry it in words."""
  while error is not None:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
      return True
    if 'No space left on device' in str(error):
      return True
    error = error.__cause__ or error.__context__
  return False


def __getattr__(name: str):
  # SERVER_ERRORS: what Reverb calls raise when the server does not answer
  # in time or goes away during the call: the Python client's errors, and
  # those of Reverb's TensorFlow ops (ReverbVariableContainer's push raises
  # InternalError when the server dies under it). Reverb (and TensorFlow
  # with it) is imported only when they are asked for: processes that host
  # roles on a Ray cluster import this module and need neither.
  if name == 'SERVER_ERRORS':
    import reverb  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return (reverb.errors.DeadlineExceededError, RuntimeError,
            tf.errors.DeadlineExceededError, tf.errors.UnavailableError,
            tf.errors.InternalError)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
