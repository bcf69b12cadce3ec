"""The configured algorithm's builder, chosen by `agent_algorithm.name` in
the gin config. A new algorithm is one module with its builder (see
`builder.AlgorithmBuilder`), one line here and its gin file."""
import gin

from actorq_tf.builder import AlgorithmBuilder
from actorq_tf.d4pg import D4pgBuilder
from actorq_tf.dqn import DqnBuilder
from actorq_tf.errors import ActorQError

BUILDERS = {builder.name: builder for builder in (DqnBuilder, D4pgBuilder)}


@gin.configurable
def agent_algorithm(name: str = 'dqn') -> str:
  """The configured algorithm's name: a key of BUILDERS."""
  if name not in BUILDERS:
    raise ActorQError(f'unknown agent algorithm {name!r}; expected one of '
                      f'{tuple(BUILDERS)}')
  return name


def builder() -> AlgorithmBuilder:
  """The configured algorithm's builder."""
  return BUILDERS[agent_algorithm()]()


def check_environment(env) -> AlgorithmBuilder:
  """The configured builder, if the environment's actions suit it; else
  ActorQError (before any role starts)."""
  algorithm = builder()
  algorithm.policy_output_size(env)
  return algorithm
