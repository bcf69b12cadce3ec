"""The one exception type that reaches the user as a one-line message, and
the errors of a Reverb server that does not answer."""
import reverb

# What Reverb calls raise when the server does not answer in time.
SERVER_ERRORS = (reverb.errors.DeadlineExceededError, RuntimeError)


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
