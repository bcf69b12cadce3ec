"""What the benchmarks share: observations to measure on, the usual flags."""
import json
import os
import time

from absl import flags
import gin
import numpy as np

from actorq_tf import config
from actorq_tf import conversion
from actorq_tf import environments
from actorq_tf import interpreter
from actorq_tf import learner
from actorq_tf import run_directory


def define_flags(default_gin_file: str) -> None:
  flags.DEFINE_multi_string('gin_file', [default_gin_file], 'Experiment.')
  flags.DEFINE_multi_string('gin_bindings', [], 'gin bindings.')
  flags.DEFINE_string('output_json', None, 'Also write the figures here.')


def define_checkpoint_flags(episodes: int, calls: int) -> None:
  """The flags of a benchmark that measures trained run directories."""
  flags.DEFINE_multi_string('run_dir', [], 'Trained run directories.')
  flags.DEFINE_integer('checkpoint_step', None, 'The checkpoint to measure; '
                       'default each run\'s newest.')
  flags.DEFINE_integer('episodes', episodes, 'Episodes per measurement.')
  flags.DEFINE_integer('calls', calls, 'Calls per per-call timing.')
  flags.DEFINE_string('output_json', None, 'Also write the figures here.')


def measure_checkpoints(measure_run, print_table) -> None:
  """`measure_run(run_dir, episodes, calls, step)` for each --run_dir, each
  printed, all written to --output_json."""
  options = flags.FLAGS
  results = []
  for run_dir in options.run_dir:
    figures = measure_run(run_dir, options.episodes, options.calls,
                          options.checkpoint_step)
    print_table(figures)
    results.append(figures)
  if options.output_json:
    write_json(options.output_json, {'runs': results})


def restore_run(run_dir: str, step=None):
  """(env, policy network, train step) of a run's checkpoint, under the
  run's own gin config."""
  with open(os.path.join(run_dir, run_directory.CONFIG_FILE)) as f:
    config.parse_gin([], [f.read()])
  return learner.restore_policy_network(run_dir, step)


def write_json(path: str, figures: dict) -> None:
  with open(path, 'w') as f:
    json.dump(figures, f, indent=1)


def play(env, act, episodes: int, seed: int, noise: float = 0.0):
  """(observations, mean return) of `episodes` episodes, episode i on seed
  seed + i, of `act(observation)` with exploration: epsilon = `noise` for
  discrete actions, Gaussian noise of `noise` half ranges for continuous
  ones (clipped to the bounds)."""
  rng = np.random.default_rng(seed)
  spec = env.action_spec()
  discrete = environments.is_discrete(env)
  observations, total_return = [], 0.0
  for episode in range(episodes):
    environments.seed_environment(env, seed + episode)
    time_step = env.reset()
    while not time_step.is_last():
      observation = np.asarray(time_step.observation)
      observations.append(observation)
      if discrete:
        action = (rng.integers(spec.minimum, spec.maximum + 1)
                  if rng.random() < noise else act(observation))
      else:
        action = np.clip(
            act(observation) + noise * (spec.maximum - spec.minimum) / 2 *
            rng.standard_normal(spec.shape), spec.minimum, spec.maximum)
      time_step = env.step(np.asarray(action, spec.dtype))
      total_return += float(time_step.reward)
  return np.array(observations), total_return / episodes


def environment_name() -> str:
  """The configured environment's name, or its factory's."""
  name = config.bound_parameter(environments.load_environment, 'env_name')
  if name is None:
    factory = gin.query_parameter('load_environment.factory')
    name = str(getattr(factory, 'selector', factory)).split('.')[-1]
  return name


def describe(env, policy_network) -> dict:
  """The environment's name (or its factory's) and the policy network's
  layers, for reports."""
  layers = []
  for layer in conversion.leaf_layers(policy_network):
    if hasattr(layer, 'filters'):
      layers.append(f'conv{layer.filters}/{layer.kernel_size[0]}'
                    f's{layer.strides[0]}')
    elif hasattr(layer, 'units'):
      layers.append(str(layer.units))
  spec = env.observation_spec()
  return {'environment': environment_name(),
          'network': (f'{spec.dtype.name}{list(spec.shape)} -> '
                      f'{"x".join(layers)}')}


def seconds_per_call(act, inputs, calls: int) -> float:
  """Mean seconds of `act(input)` over `calls` calls, cycling the inputs."""
  start = time.perf_counter()
  for i in range(calls):
    act(inputs[i % len(inputs)])
  return (time.perf_counter() - start) / calls


def invoke_only(model_bytes: bytes):
  """The interpreter alone, without the actor's Python around it."""
  model = interpreter.interpreter_class()(model_content=model_bytes,
                                         num_threads=1)
  model.allocate_tensors()
  return lambda _: model.invoke()
