"""Return retention on a fixed checkpoint: every precision plays the same
seeded episodes.

The evaluator's per-version returns compare int8 and fp32 at the version a
run stopped on, which the stopping rule picks for a good int8 score. Here a
trained checkpoint is restored once and each mode plays `--episodes`
episodes on the same seeds: greedy fp32 through TF, the fp32 and fp16 TFLite
models, and full int8 as the exporter made it before equalization and
clipping and as it makes it now; for a network trained quantization-aware,
its int8 model. Each mode gets its mean return with a 95%
confidence interval, its difference from fp32 (and its ratio, where fp32's
return is positive), its fidelity on the states fp32's
greedy play visits (agreement, ties and regret, or action error), its time
per batch-1 call as an actor makes it, and its bytes. Models are calibrated
as the learner calibrates (256 observations of exploring play).

  .venv/bin/python -m benchmarks.retention --run_dir runs/cartpole_seed0
"""
import functools
import tempfile
from typing import Dict, Optional

from absl import app
import numpy as np

from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import evaluation
from actorq_tf import export
from actorq_tf import networks
from actorq_tf.interpreter import TFLiteModel
from benchmarks import common

common.define_checkpoint_flags(episodes=100, calls=1000)

# Exploration of the play that calibration observations come from, as the
# actors explore (epsilon; sigma in half ranges).
CALIBRATION_NOISE = {True: 0.05, False: 0.3}
# TFLite modes: (precision, whether the exporter readies the network for
# quantization: Q-value outputs clipped at a quantile, layers equalized).
MODES = {
    'fp32 TFLite': ('fp32', True),
    'fp16': ('fp16', True),
    'int8, before (full range, not equalized)': ('int8', False),
    'int8 (default)': ('int8', True),
    'int4 weights': ('int4_weights', True),
}
QUANTIZATION_AWARE = 'int8, quantization-aware training'


def _interval(returns) -> Dict[str, float]:
  returns = np.asarray(returns, np.float64)
  return {'mean_return': float(returns.mean()), 'ci95': _half_width(returns)}


def _half_width(values: np.ndarray) -> float:
  """Of the 95% interval of the mean (normal approximation)."""
  if len(values) < 2:
    return 0.0
  return float(1.96 * values.std(ddof=1) / np.sqrt(len(values)))


def measure_run(run_dir: str, episodes: int, calls: int,
                step: Optional[int] = None) -> Dict:
  env, network, train_step = common.restore_run(run_dir, step)
  algorithm = agents.check_environment(env)
  discrete = environments.is_discrete(env)
  spec = env.action_spec()

  def fp32_outputs(observations):
    return network(observations, training=False)[0].numpy()

  def fp32_policy(observations):
    return algorithm.greedy_actions(fp32_outputs(observations), spec).numpy()

  played, _ = common.play(env, lambda o: fp32_policy(o[None])[0], 10, seed=1,
                          noise=CALIBRATION_NOISE[discrete])
  calibration = played[np.random.default_rng(0).integers(len(played),
                                                         size=256)]
  # As the learner adds them: the extremes of what the actors played lately.
  extremes = export.ObservationExtremes(window=1).add(played)
  fp32_states, _ = common.play(env, lambda o: fp32_policy(o[None])[0], 10,
                               seed=10**6)
  reference = fp32_outputs(fp32_states)
  envs = [environments.load_environment() for _ in range(episodes)]
  seeds = [2 * 10**6 + i for i in range(episodes)]
  fp32_returns = evaluation.greedy_returns(envs, fp32_policy, seeds)
  fp32_mean = float(np.mean(fp32_returns))
  rows = {'fp32 (TF)': _interval(fp32_returns)}
  modes = MODES
  if isinstance(network, networks.QuantizationAwareNetwork):
    # Trained for int8 and exported int8 only; "fp32 (TF)" is the network
    # as trained, fake-quantization included.
    modes = {QUANTIZATION_AWARE: ('int8', True)}
  for mode, (precision, readied) in modes.items():
    outputs = algorithm.model_outputs(env).unchecked()
    exporter = export.PolicyExporter(
        network, outputs if readied else outputs.full_range(), [precision],
        lambda *_: None, tempfile.mkdtemp(), equalize=readied)
    result = exporter.export(train_step, calibration,
                             extremes if readied else None)[0]
    model = TFLiteModel(result.model_bytes, result.normalizer)
    policy = functools.partial(algorithm.model_actions, model,
                               action_spec=spec)
    act = algorithm.model_policy(model)
    fidelity = outputs.fidelity(reference, model.outputs(fp32_states))
    returns = evaluation.greedy_returns(envs, policy, seeds)
    figures = _interval(returns)
    # Every mode plays the same seeds: the interval of the difference is
    # paired, episode by episode.
    differences = np.asarray(returns) - np.asarray(fp32_returns)
    rows[mode] = {
        **figures,
        'minus_fp32': figures['mean_return'] - fp32_mean,
        'minus_fp32_ci95': _half_width(differences),
        # A ratio reads backwards for negative returns (Acrobot's).
        'ratio_to_fp32': (figures['mean_return'] / fp32_mean
                          if fp32_mean > 0 else None),
        **fidelity,
        'call_us': 1e6 * common.seconds_per_call(act, fp32_states, calls),
        'model_bytes': len(result.model_bytes)}
  return {'run_dir': run_dir, 'train_step': train_step,
          'environment': common.environment_name(),
          'episodes': episodes, 'modes': rows}


def print_table(figures: Dict) -> None:
  print(f'\n{figures["environment"]}, {figures["run_dir"]} (train step '
        f'{figures["train_step"]}, {figures["episodes"]} episodes per mode, '
        f'the same seeds)')
  for mode, row in figures['modes'].items():
    line = f'{mode:>42}: return {row["mean_return"]:8.1f} +- {row["ci95"]:6.1f}'
    if 'minus_fp32' in row:
      line += f', {row["minus_fp32"]:+.1f} against fp32'
    if row.get('ratio_to_fp32') is not None:
      line += f', ratio {row["ratio_to_fp32"]:.3f}'
    if 'agreement' in row:
      line += (f', agreement {row["agreement"]:.3f}, ties '
               f'{row["tie_rate"]:.3f}, regret/random '
               f'{row["regret_vs_random"]:.3f}')
    elif 'mean_action_error' in row:
      line += (f', action error mean {row["mean_action_error"]:.4f} max '
               f'{row["max_action_error"]:.3f}')
    if 'call_us' in row:
      line += f', {row["call_us"]:.1f} us/call, {row["model_bytes"]:,} B'
    print(line)


def main(_):
  common.measure_checkpoints(measure_run, print_table)


if __name__ == '__main__':
  app.run(main)
