"""Does an int8 Q-model play its fp32 network's policy? Trained checkpoints.

For each run directory given (a DQN run with checkpoints): restores its
newest checkpoint (or `--checkpoint_step`) and converts it through the
learner's own exporter once per int8 output mode, calibrated as the learner
calibrates (observations of actor-like epsilon-greedy play of the fp32
network); a network trained quantization-aware is exported once, as the
learner exports it. Each model is then
compared with fp32 on the states the fp32 greedy policy visits and on those
the int8 model's own greedy play visits, over fixed seeds: greedy-action
agreement (a tie counts as a disagreement), tie rate, mean Q regret, and
the cost of a call as an actor makes it.

  .venv/bin/python -m benchmarks.q_fidelity --run_dir runs/cartpole_seed0
"""
import json
import os
import tempfile
from typing import Dict, Optional

from absl import app
import gin
import numpy as np
import tensorflow as tf

from actorq_tf import export
from actorq_tf import model_checks
from actorq_tf import networks
from actorq_tf import run_directory
from actorq_tf.interpreter import TFLiteModel
from benchmarks import common

common.define_checkpoint_flags(episodes=10, calls=2000)

CALIBRATION_EPSILON = 0.05

# Export settings compared, (QValueOutputs.q_output_quantile,
# PolicyExporter.equalize): int8 outputs over the whole range of the centred
# Q-values or clipped above a quantile, with or without cross-layer
# equalization.
MODES = {
    'full range (before)': (None, False),
    'full range, equalized': (None, True),
    'clipped at q0.99': (0.99, False),
    'clipped at q0.9': (0.9, False),
    'clipped at q0.9, equalized': (0.9, True),
    'clipped at q0.5, equalized (default)': (0.5, True),
}
QUANTIZATION_AWARE = 'quantization-aware training'


def measure_run(run_dir: str, episodes: int, calls: int,
                step: Optional[int] = None) -> Dict:
  env, q_network, train_step = common.restore_run(run_dir, step)

  def fp32_q(observations):
    return q_network(observations, training=False)[0].numpy()

  def fp32_greedy(observations):
    return np.argmax(fp32_q(observations), -1)

  # As actors send them: epsilon-greedy play; the exporter draws 256.
  played, _ = common.play(env, lambda o: fp32_greedy(o[None])[0], episodes,
                          seed=1, noise=CALIBRATION_EPSILON)
  calibration = played[np.random.default_rng(0).integers(len(played),
                                                         size=256)]
  fp32_states, fp32_return = common.play(
      env, lambda o: fp32_greedy(o[None])[0], episodes, seed=10**6)
  rows = {}
  modes = {mode: (model_checks.QValueOutputs(q_output_quantile=quantile),
                  equalize)
           for mode, (quantile, equalize) in MODES.items()}
  if isinstance(q_network, networks.QuantizationAwareQNetwork):
    # Trained for int8: exported as it is, with its learned ranges.
    modes = {QUANTIZATION_AWARE: (model_checks.QValueOutputs(), True)}
  for mode, (outputs, equalize) in modes.items():
    exporter = export.PolicyExporter(
        q_network, outputs.unchecked(), ['int8'], lambda *_: None,
        tempfile.mkdtemp(), equalize=equalize)
    result = exporter.export(train_step, calibration)[0]
    model = TFLiteModel(result.model_bytes, result.normalizer)
    int8_states, int8_return = common.play(env, model.greedy_action,
                                           episodes, seed=10**6)
    rows[mode] = {
        'calibration': result.check.figures,
        'fp32_visited': model_checks.q_fidelity(fp32_q(fp32_states),
                                          model.outputs(fp32_states)),
        'int8_visited': model_checks.q_fidelity(fp32_q(int8_states),
                                          model.outputs(int8_states)),
        'int8_return': int8_return,
        'greedy_action_us': 1e6 * common.seconds_per_call(
            model.greedy_action, fp32_states, calls),
        'model_bytes': len(result.model_bytes)}
  figures = {'run_dir': run_dir, 'train_step': train_step,
             # Last: it loads the kept model's weights into q_network.
             'kept_model': kept_model(run_dir, env, q_network, episodes),
             'environment': gin.query_parameter('load_environment.env_name'),
             'fp32_return': fp32_return,
             'states': {'fp32_visited': len(fp32_states)},
             'modes': rows}
  tf.keras.backend.clear_session()
  return figures


def kept_model(run_dir: str, env, q_network, episodes: int
              ) -> Optional[Dict]:
  """The int8 model the run's summary names (`model_path`; a run without
  a summary: the newest in `models/`), against the fp32 network of the same
  version (its weights, saved beside it, go into `q_network`), on its own
  visited states."""
  path = os.path.join(run_dir, run_directory.MODELS_DIR,
                      'policy_int8.tflite')
  try:
    summary = run_directory.read_summary(run_dir)
    kept = summary and summary.model_path
    if kept:  # models/<target or best>/..., wherever the run dir is now
      path = os.path.join(run_dir, run_directory.MODELS_DIR, os.path.basename(
          os.path.dirname(kept)), os.path.basename(kept))
  except (OSError, json.JSONDecodeError):
    pass
  path = path[:-len('.tflite')]
  if not os.path.exists(path + '.json'):
    return None
  model_bytes, normalizer, description = export.load_kept_model(path)
  if not os.path.exists(path + '.network.npz'):
    return {'version': description['version'], 'path': path,
            'error': 'the run saved no fp32 weights beside its model'}
  q_network.set_weights(export.kept_network_weights(path))
  model = TFLiteModel(model_bytes, normalizer)
  states, mean_return = common.play(env, model.greedy_action, episodes,
                                    seed=10**6)
  return {'version': description['version'], 'path': path,
          'int8_return': mean_return,
          'int8_visited': model_checks.q_fidelity(
              q_network(states, training=False)[0].numpy(),
              model.outputs(states))}


def print_table(figures: Dict) -> None:
  print(f'\n{figures["environment"]}, {figures["run_dir"]} (train step '
        f'{figures["train_step"]}, {figures["states"]["fp32_visited"]} '
        f'fp32-visited states, fp32 return {figures["fp32_return"]:.1f})')
  print(f'{"int8 mode":>36} | {"agree fp32-vis":>14} {"ties":>6} '
        f'{"regret/rnd":>10} | '
        f'{"agree int8-vis":>14} {"ties":>6} {"return":>7} | {"us/call":>7} | '
        f'calib agree')
  for mode, row in figures['modes'].items():
    a, b = row['fp32_visited'], row['int8_visited']
    print(f'{mode:>36} | {a["agreement"]:14.3f} {a["tie_rate"]:6.3f} '
          f'{a["regret_vs_random"]:10.4f} | {b["agreement"]:14.3f} '
          f'{b["tie_rate"]:6.3f} {row["int8_return"]:7.1f} | '
          f'{row["greedy_action_us"]:7.1f} | '
          f'{row["calibration"].get("agreement", float("nan")):.3f}')
  kept = figures['kept_model']
  if kept and 'error' in kept:
    print(f'kept model v{kept["version"]}: {kept["error"]}')
  elif kept:
    print(f'kept model ({kept["path"]}.tflite) v{kept["version"]}: on its '
          f'own visited states agreement '
          f'{kept["int8_visited"]["agreement"]:.3f}, ties '
          f'{kept["int8_visited"]["tie_rate"]:.3f}, return '
          f'{kept["int8_return"]:.1f}')


def main(_):
  common.measure_checkpoints(measure_run, print_table)


if __name__ == '__main__':
  app.run(main)
