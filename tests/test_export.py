"""The exporter: int8 conversion, the fp32 check, refusing bad models."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.ddpg import actor_network
from tf_agents.networks import q_network
from tf_agents.networks import sequential
from tf_agents.specs import array_spec
from tf_agents.specs import tensor_spec

from actorq_tf import conversion
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import interpreter
from actorq_tf import model_channel
from actorq_tf import model_checks
from actorq_tf import networks
from actorq_tf.errors import ActorQError
from actorq_tf.normalization import ObservationNormalizer
from actorq_tf.interpreter import TFLiteModel

OBSERVATION_SPEC = tensor_spec.TensorSpec([4], tf.float32)
PENDULUM_ACTIONS = array_spec.BoundedArraySpec((1,), np.float32, -2.0, 2.0)


def _network(seed=0, layers=(64, 64)):
  networks.set_seed(seed)
  return networks.create_q_network(OBSERVATION_SPEC, 2, layers)


def _observations(count=256, seed=0):
  # CartPole-like ranges: features of very different scales.
  scales = np.array([1.0, 2.0, 0.1, 2.0], np.float32)
  return (np.random.default_rng(seed).normal(size=(count, 4)) *
          scales).astype(np.float32)


def _tensor_types(model_bytes):
  interpreter = tf.lite.Interpreter(model_content=model_bytes)
  return {d['name']: d['dtype'] for d in interpreter.get_tensor_details()}


def test_int8_model_runs_every_fully_connected_in_int8():
  model = conversion.convert(_network(), 'int8', _observations())
  network = TFLiteModel(model)
  ops = network.op_names()
  assert ops.count('FULLY_CONNECTED') == 3
  assert 'DEQUANTIZE' not in ops and 'QUANTIZE' not in ops
  assert network.is_quantized
  dtypes = set(_tensor_types(model).values())
  assert np.int8 in dtypes
  assert np.float32 not in dtypes  # no float activations or weights


def test_fp16_and_fp32_models_keep_float_activations():
  fp16 = conversion.convert(_network(), 'fp16')
  fp32 = conversion.convert(_network(), 'fp32')
  assert np.float16 in set(_tensor_types(fp16).values())
  assert np.float16 not in set(_tensor_types(fp32).values())
  assert not TFLiteModel(fp32).is_quantized
  # float16 weights take about half the bytes.
  assert len(fp16) < 0.6 * len(fp32)


def test_int8_model_is_a_quarter_of_fp32():
  network = _network(layers=(256, 256))
  int8 = conversion.convert(network, 'int8', _observations())
  fp32 = conversion.convert(network, 'fp32')
  assert len(int8) < 0.3 * len(fp32)


def test_check_reports_agreement_and_errors_against_fp32():
  network = _network()
  observations = _observations()
  model = conversion.convert(network, 'int8', observations)
  check = model_checks.check_q_model(model, network, observations,
                                     min_agreement=0.5,
                                     max_regret_vs_random=np.inf)
  assert check.passed, check.reason
  figures = check.figures
  assert 0.5 <= figures['agreement'] <= 1.0
  assert 0.0 <= figures['tie_rate'] <= 1.0 - figures['agreement']
  assert 0.0 < figures['mean_q_error'] < 0.5
  assert figures['mean_q_regret'] >= 0.0


def test_check_refuses_agreement_under_the_floor():
  network = _network()
  observations = _observations()
  model = conversion.convert(network, 'int8', observations)
  check = model_checks.check_q_model(model, network, observations,
                                     min_agreement=1.01,
                                     max_regret_vs_random=np.inf)
  assert not check.passed
  assert 'under the floor' in check.reason
  check = model_checks.check_q_model(model, network, observations,
                                     min_agreement=0.0,
                                     max_regret_vs_random=-1.0)
  assert not check.passed
  assert 'regret' in check.reason


def test_fidelity_counts_ties_as_disagreements_and_regret_at_random():
  reference = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
  model = np.array([[5, 3], [4, 4], [1, 2], [1, 1]], np.int8)
  figures = model_checks.q_fidelity(reference, model)
  assert figures['agreement'] == 0.5  # the two ties count against it
  assert figures['tie_rate'] == 0.5
  # A tie loses half the gap on average: (0 + 0.5 + 0 + 1) / 4.
  assert figures['mean_q_regret'] == pytest.approx(0.375)


def _lopsided_network_and_states():
  """A Q-network whose rare states have action gaps far larger than the
  rest, as trained ones do."""
  network = _network(layers=(256, 256))
  observations = _observations(512)
  observations[:16] *= 40.0
  return network, observations


def test_clipped_q_head_keeps_the_greedy_action_where_full_range_ties():
  network, observations = _lopsided_network_and_states()
  centred = network.copy()
  centred.create_variables(OBSERVATION_SPEC)
  centred.set_weights(network.get_weights())
  conversion.centre_q_values(centred)
  full_range = model_checks.check_q_model(
      conversion.convert(centred, 'int8', observations), centred, observations,
      0.0, np.inf)
  scale = conversion.scale_q_head(centred, observations, 0.9)
  assert scale > 0
  clipped_model = conversion.convert(centred, 'int8', observations,
                                 clip_outputs=True)
  ops = TFLiteModel(clipped_model).op_names()  # the clip is fused: free
  assert ops.count('FULLY_CONNECTED') == 3
  assert not {'MINIMUM', 'MAXIMUM', 'RELU_N1_TO_1'} & set(ops)
  clipped = model_checks.check_q_model(clipped_model, centred, observations,
                                       0.0, np.inf, output_scale=scale,
                                       clipped=True)
  assert full_range.figures['tie_rate'] > 0.05, full_range.figures
  assert clipped.figures['tie_rate'] < 0.5 * full_range.figures['tie_rate']
  assert clipped.figures['agreement'] > full_range.figures['agreement']


def test_check_refuses_a_badly_calibrated_model_and_passes_a_good_one(
    tmp_path):
  network, observations = _lopsided_network_and_states()
  exporter = export.PolicyExporter(network, model_checks.QValueOutputs(),
                                   ['int8'], lambda *_: None, str(tmp_path))
  assert exporter.export(1, observations)[0].check.passed
  thresholds = (exporter.outputs.min_agreement,
                exporter.outputs.max_regret_vs_random)
  good = conversion.convert(network, 'int8', observations)
  assert model_checks.check_q_model(good, network, observations,
                              *thresholds).passed
  # Calibrated on states close to 0: int8 saturates on nearly all others.
  bad = conversion.convert(network, 'int8', 0.001 * _observations(256, seed=1))
  check = model_checks.check_q_model(bad, network, observations, *thresholds)
  assert not check.passed, check.figures
  assert 'regret' in check.reason or 'agreement' in check.reason


def test_check_refuses_non_finite_networks():
  network = _network()
  weights = network.get_weights()
  weights[0][0, 0] = np.nan
  network.set_weights(weights)
  model = conversion.convert(network, 'fp32')
  check = model_checks.check_q_model(model, network, _observations(), 0.0,
                                     np.inf)
  assert not check.passed
  assert 'non-finite' in check.reason


def test_centring_and_normalization_folding_keep_greedy_actions():
  network = _network()
  observations = _observations()
  reference = network(observations)[0].numpy()
  transformed = network.copy()
  transformed.create_variables(OBSERVATION_SPEC)
  transformed.set_weights(network.get_weights())
  normalizer = ObservationNormalizer.from_observations(observations)
  conversion.centre_q_values(transformed)
  conversion.fold_normalization(transformed, normalizer)
  centred = transformed(normalizer(observations))[0].numpy()
  np.testing.assert_allclose(centred.mean(axis=1), 0.0, atol=1e-5)
  np.testing.assert_allclose(
      centred, reference - reference.mean(axis=1, keepdims=True), atol=1e-4)


def test_normalization_makes_int8_closer_to_fp32():
  network = _network(layers=(256, 256))
  # A feature with a small range that the network depends on strongly, like
  # CartPole's pole angle: one input scale leaves it a few int8 levels.
  weights = network.get_weights()
  weights[0][2] *= 50.0
  network.set_weights(weights)
  observations = _observations(512)
  observations[:, 2] *= 0.2
  plain = model_checks.check_q_model(
      conversion.convert(network, 'int8', observations), network,
      observations, 0, np.inf)
  normalizer = ObservationNormalizer.from_observations(observations)
  folded = network.copy()
  folded.create_variables(OBSERVATION_SPEC)
  folded.set_weights(network.get_weights())
  conversion.fold_normalization(folded, normalizer)
  normalized = model_checks.check_q_model(
      conversion.convert(folded, 'int8', normalizer(observations)), folded,
      observations, 0, np.inf, normalizer)
  assert (normalized.figures['mean_q_error'] <
          0.5 * plain.figures['mean_q_error']), (normalized, plain)


def test_conversion_failures_are_clear_errors():
  with pytest.raises(ActorQError, match='calibration observations'):
    conversion.convert(_network(), 'int8', None)
  with pytest.raises(ActorQError, match='unknown TFLite precision'):
    conversion.convert(_network(), 'int4')


def test_exporter_publishes_checked_models_and_saves_them(tmp_path):
  published = []
  network = _network()
  exporter = export.PolicyExporter(
      network, model_checks.QValueOutputs(), ['int8', 'fp32'],
      lambda results, weights: published.append((results, weights)),
      str(tmp_path))
  results = exporter.export(7, _observations())
  assert [r.precision for r in results] == ['int8', 'fp32']
  assert len(published) == 1
  (published_results, weights) = published[0]
  assert [r.version for r in published_results] == [7, 7]
  np.testing.assert_array_equal(weights[0], network.get_weights()[0])
  saved = (tmp_path / 'policy_int8.tflite').read_bytes()
  assert saved == results[0].model_bytes
  assert (tmp_path / 'policy_int8.json').exists()


def test_each_export_converts_the_weights_it_was_handed(tmp_path):
  # The exporter traces its snapshot once; later exports must still carry
  # their own weights.
  network = _network(seed=0)
  exporter = export.PolicyExporter(network, model_checks.QValueOutputs(),
                                   ['fp32'], lambda *_: None, str(tmp_path))
  observations = _observations()
  greedy = {}
  for version, source in ((1, network), (2, _network(seed=1))):
    network.set_weights(source.get_weights())
    result, = exporter.export(version, observations)
    model_actions = TFLiteModel(
        result.model_bytes, result.normalizer).greedy_actions(observations)
    np.testing.assert_array_equal(
        model_actions, np.argmax(network(observations)[0], axis=-1))
    greedy[version] = model_actions
  assert (greedy[1] != greedy[2]).any()


def test_exporter_does_not_publish_a_nan_network(tmp_path):
  published = []
  network = _network()
  weights = network.get_weights()
  weights[2][:] = np.nan
  network.set_weights(weights)
  exporter = export.PolicyExporter(
      network, model_checks.QValueOutputs(), ['int8'],
      lambda *args: published.append(args), str(tmp_path))
  exporter.export(3, _observations())
  assert not published
  assert not exporter.results  # Not even converted.
  assert exporter.versions_exported == 0
  assert not (tmp_path / 'policy_int8.tflite').exists()


def test_async_export_runs_off_the_caller_and_skips_when_busy(tmp_path):
  published = []
  exporter = export.PolicyExporter(
      _network(), model_checks.QValueOutputs(), ['int8'],
      lambda results, _: published.append(results[0]), str(tmp_path))
  assert exporter.export_async(1, _observations())
  assert not exporter.export_async(2, _observations())  # still converting
  exporter.wait()
  assert [r.version for r in published] == [1]


def _actor_network(seed=0, layers=(64, 64)):
  networks.set_seed(seed)
  return networks.create_actor_network(
      OBSERVATION_SPEC, tensor_spec.from_spec(PENDULUM_ACTIONS), layers)


def test_int8_action_model_stays_close_to_fp32_actions(tmp_path):
  published = []
  network = _actor_network()
  exporter = export.PolicyExporter(
      network, model_checks.ActionOutputs(PENDULUM_ACTIONS), ['int8'],
      lambda results, _: published.extend(results), str(tmp_path))
  observations = _observations()
  (result,) = exporter.export(4, observations)
  assert result.check.passed, result.check.reason
  assert 0.0 < result.check.figures['mean_action_error'] < 0.05
  assert published == [result]
  model = TFLiteModel(result.model_bytes, result.normalizer)
  assert model.is_quantized and model.output_size == 1
  actions = model.outputs(observations)
  assert np.all(np.abs(actions) <= 2.0)
  expected = network(observations)[0].numpy()
  np.testing.assert_allclose(actions, expected, atol=0.1)
  # The Q-value transforms are not applied: the output is the action.
  assert model.action(observations[0]) == pytest.approx(expected[0], abs=0.1)


def test_extremes_are_real_observations_of_the_last_exports():
  extremes = export.ObservationExtremes(window=2)
  outlier = np.array([[0.0, 30.0, 0.0, 0.0]], np.float32)
  first = extremes.add(np.concatenate([_observations(seed=1), outlier]))
  assert any((row == outlier[0]).all() for row in first)
  second = extremes.add(_observations(seed=2))
  assert any((row == outlier[0]).all() for row in second)
  third = extremes.add(_observations(seed=3))  # The outlier's set has left.
  assert not any((row == outlier[0]).all() for row in third)
  assert third[:, 1].max() < 30.0
  # Each feature's lowest and highest value over the window, and only rows
  # that were given.
  window = np.concatenate([_observations(seed=2), _observations(seed=3)])
  np.testing.assert_array_equal(third.max(0), window.max(0))
  np.testing.assert_array_equal(third.min(0), window.min(0))
  assert all((window == row).all(1).any() for row in third)
  broken = _observations(seed=4)
  broken[0, 2] = np.nan
  broken[1, 0] = np.inf
  assert np.isfinite(extremes.add(broken)).all()
  with pytest.raises(ActorQError, match='at least one export'):
    export.ObservationExtremes(window=0)


def _int8_input_range(result):
  """The raw observations an int8 model's input can represent, per feature."""
  details = tf.lite.Interpreter(
      model_content=result.model_bytes).get_input_details()[0]
  scale, zero_point = details['quantization']
  normalized = (np.array([-128, 127]) - zero_point) * scale
  return (result.normalizer.shift[None] +
          normalized[:, None] * result.normalizer.scale[None])


def test_int8_input_covers_extremes_the_calibration_set_missed(tmp_path):
  # Pendulum's swing-up: the last episodes stayed near the top (small
  # angular velocity), an earlier one swung up from the bottom.
  network = _actor_network()
  calibration = _observations() * np.array([1, 1, 1, 0.2], np.float32)
  swing_up = np.array([[0.5, -0.5, 0.0, 8.0], [-0.5, 0.5, 0.0, -8.0]],
                      np.float32)
  results = {}
  for extremes in (None, swing_up):
    exporter = export.PolicyExporter(
        network, model_checks.ActionOutputs(PENDULUM_ACTIONS), ['int8'],
        lambda *_: None, str(tmp_path))
    (results[extremes is not None],) = exporter.export(1, calibration,
                                                       extremes)
  low, high = _int8_input_range(results[False])[:, 3]
  assert high < 4.0 and low > -4.0  # Clipped: the swing-up is lost.
  low, high = _int8_input_range(results[True])[:, 3]
  assert low < -7.9 and high > 7.9  # Within a quantization step of 8.
  model = TFLiteModel(results[True].model_bytes, results[True].normalizer)
  np.testing.assert_allclose(model.outputs(swing_up),
                             network(swing_up)[0].numpy(), atol=0.05)
  # Only the velocity is scaled down to reach them; the other features keep
  # their resolution on the recent observations.
  np.testing.assert_array_equal(results[True].normalizer.scale[:3],
                                results[False].normalizer.scale[:3])
  assert results[True].normalizer.scale[3] > results[False].normalizer.scale[3]
  with_extremes = _int8_input_range(results[True])[:, :3]
  without = _int8_input_range(results[False])[:, :3]
  assert (np.ptp(with_extremes, axis=0) < 1.25 * np.ptp(without, axis=0)).all()


def test_action_check_refuses_errors_over_the_ceiling():
  network = _actor_network()
  observations = _observations()
  model = conversion.convert(network, 'int8', observations)
  check = model_checks.check_action_model(model, network, observations,
                                    PENDULUM_ACTIONS, 1e-6)
  assert not check.passed
  assert 'over the ceiling' in check.reason


def test_models_too_large_for_one_update_are_refused_before_training(
    cartpole_gin, tmp_path, monkeypatch):  # pylint: disable=unused-argument
  with pytest.raises(ActorQError, match=r'the fp32 model is 2,147,483,648 '
                     r'bytes, over the 1,073,741,824 bytes that one model '
                     r'update'):
    model_channel.check_model_size('fp32', 2**31)
  env = environments.load_environment()
  mlp = networks.create_q_network(
      env.observation_spec(), 2, fc_layer_params=(256, 256))
  # 67,586 parameters: 270 kB in fp32, 68 kB in int8.
  monkeypatch.setattr(model_channel, 'MAX_MODEL_BYTES', 100_000)
  with pytest.raises(ActorQError, match='the fp32 model is 270,344 bytes, '
                     'over the 100,000 bytes'):
    export.PolicyExporter(mlp, model_checks.QValueOutputs(), ['int8', 'fp32'],
                          lambda *_: None, str(tmp_path))
  export.PolicyExporter(mlp, model_checks.QValueOutputs(), ['int8'],
                        lambda *_: None, str(tmp_path))


def test_a_model_must_be_stored_as_the_precision_it_names():
  network = _network(layers=(256, 256))
  observations = _observations()
  models = {p: conversion.convert(network, p, observations)
            for p in ('fp32', 'fp16', 'int8')}
  for precision, model_bytes in models.items():
    model_checks.check_precision(model_bytes, precision, network.count_params())
  with pytest.raises(ActorQError, match=r'the int8 model is not what it '
                     r'names: .*output \[.float32.\], not int8; '
                     r'input \[.float32.\], not int8'):
    model_checks.check_precision(models['fp32'], 'int8', network.count_params())
  with pytest.raises(ActorQError, match='bytes, outside'):
    model_checks.check_precision(models['fp32'], 'fp16', network.count_params())


def test_layer_equalization_is_exact_and_evens_out_unit_ranges():
  for network in (_network(layers=(64, 64)), _actor_network()):
    weights = network.get_weights()
    weights[0][:, :8] *= 30.0  # a few hidden units with far larger weights
    network.set_weights(weights)
    observations = _observations()
    before = network(observations)[0].numpy()
    kernel = network.get_weights()[0]
    spread_before = np.abs(kernel).max() / np.median(np.abs(kernel).max(0))
    conversion.equalize_layers(network)
    np.testing.assert_allclose(network(observations)[0].numpy(), before,
                               rtol=1e-4, atol=1e-4)
    kernel = network.get_weights()[0]
    spread_after = np.abs(kernel).max() / np.median(np.abs(kernel).max(0))
    assert spread_after < 0.5 * spread_before, (spread_before, spread_after)


# Any TF-Agents network: TF-Agents' own QNetwork, Keras Sequentials, pixels.

_DISCRETE_ACTIONS = tensor_spec.BoundedTensorSpec((), tf.int32, 0, 2)


def _image_observations(shape, count=256, seed=0):
  return np.random.default_rng(seed).normal(
      size=(count, *shape)).astype(np.float32)


def _users_network(factory, observation_spec, seed=0):
  networks.set_seed(seed)
  return networks.build_policy_network(factory, observation_spec,
                                       _DISCRETE_ACTIONS, 3, 'test factory')


def _exported(network, observations, tmp_path, precisions=('int8', 'fp32')):
  exporter = export.PolicyExporter(network, model_checks.QValueOutputs(),
                                   precisions, lambda *_: None,
                                   str(tmp_path))
  return exporter, {r.precision: r for r in exporter.export(1, observations)}


@pytest.mark.parametrize('name, factory', [
    ('QNetwork with a conv layer', lambda o, a: q_network.QNetwork(
        o, a, conv_layer_params=((8, 3, 1),), fc_layer_params=(32,))),
    ('conv Sequential', lambda o, a: sequential.Sequential(
        [tf.keras.layers.Conv2D(16, 3, activation='relu'),
         tf.keras.layers.Flatten(),
         tf.keras.layers.Dense(32, activation='relu'),
         tf.keras.layers.Dense(3)], input_spec=o)),
])
def test_tf_agents_and_keras_conv_networks_export_to_full_int8(
    name, factory, tmp_path):
  spec = tensor_spec.TensorSpec([6, 6, 3], tf.float32)
  network = _users_network(factory, spec)
  observations = _image_observations([6, 6, 3])
  exporter, results = _exported(network, observations, tmp_path)
  for precision, result in results.items():
    assert result.check.passed, (name, precision, result.check.reason)
    model_checks.check_precision(result.model_bytes, precision,
                           network.count_params())
  # The first layer is a convolution: nothing to fold the normalizer into,
  # so the model takes the observations as they are.
  assert 'fold_normalization' not in exporter.transforms
  assert 'centre_q_values' in exporter.transforms
  assert results['int8'].normalizer.is_identity
  model = TFLiteModel(results['int8'].model_bytes, results['int8'].normalizer)
  assert model.is_quantized and 'CONV_2D' in model.op_names()
  agreement = np.mean(model.greedy_actions(observations) ==
                      np.argmax(network(observations)[0], -1))
  assert agreement >= 0.9, (name, agreement)


def test_transforms_apply_only_where_they_are_exact(tmp_path):
  # TF-Agents' QNetwork on vectors: its Dense layers sit inside an
  # EncodingNetwork. All transforms fold in there, but not the normalizer
  # when a preprocessing layer stands before the first Dense layer.
  plain = _users_network(lambda o, a: q_network.QNetwork(
      o, a, fc_layer_params=(32, 32)), OBSERVATION_SPEC)
  exporter, results = _exported(plain, _observations(), tmp_path / 'plain')
  assert exporter.transforms == ['centre_q_values', 'scale_q_head',
                                 'fold_normalization', 'equalize_layers']
  assert not results['int8'].normalizer.is_identity
  scaled = _users_network(lambda o, a: q_network.QNetwork(
      o, a, preprocessing_layers=tf.keras.layers.Rescaling(0.5),
      fc_layer_params=(32, 32)), OBSERVATION_SPEC)
  exporter, results = _exported(scaled, _observations(), tmp_path / 'scaled')
  assert 'fold_normalization' not in exporter.transforms
  assert results['int8'].normalizer.is_identity
  for result in results.values():
    assert result.check.passed, result.check.reason
    model = TFLiteModel(result.model_bytes, result.normalizer)
    np.testing.assert_array_equal(
        model.greedy_actions(_observations()[:8]),
        np.argmax(scaled(_observations()[:8])[0], -1))


def test_pixel_models_take_raw_uint8_and_every_pixel_value_has_a_level(
    tmp_path):
  # 16x16 pixels: one image can hold each of the 256 values once.
  spec = tensor_spec.BoundedTensorSpec([16, 16, 1], tf.uint8, 0, 255)
  network = _users_network(lambda o, a: q_network.QNetwork(
      o, a, preprocessing_layers=networks.pixel_scaling(),
      conv_layer_params=((8, 3, 2),), fc_layer_params=(32,)), spec)
  rng = np.random.default_rng(0)
  # Dim images: calibration alone would never reach the brightest levels.
  observations = rng.integers(0, 60, (256, 16, 16, 1)).astype(np.uint8)
  _, results = _exported(network, observations, tmp_path)
  for precision, result in results.items():
    assert result.check.passed, (precision, result.check.reason)
    model_checks.check_precision(result.model_bytes, precision,
                           network.count_params(), pixel_input=True)
    model = TFLiteModel(result.model_bytes, result.normalizer)
    assert model._raw_input  # pylint: disable=protected-access
    assert model.greedy_action(observations[0]) in (0, 1, 2)
  interpreter = tf.lite.Interpreter(
      model_content=results['int8'].model_bytes,
      experimental_preserve_all_tensors=True)
  interpreter.allocate_tensors()
  assert interpreter.get_input_details()[0]['dtype'] == np.uint8
  every_value = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
  interpreter.set_tensor(interpreter.get_input_details()[0]['index'],
                         every_value)
  interpreter.invoke()
  # pylint: disable-next=protected-access
  ops = {op['op_name']: op for op in interpreter._get_ops_details()}
  assert ops['CAST']['outputs'][0] in ops['QUANTIZE']['inputs']
  levels = interpreter.get_tensor(ops['QUANTIZE']['outputs'][0])
  assert levels.dtype == np.int8
  assert len(np.unique(levels)) == 256


def test_a_layer_tflite_cannot_take_is_refused_by_name():
  network = _users_network(lambda o, a: sequential.Sequential(
      [tf.keras.layers.Dense(8),
       tf.keras.layers.Lambda(tf.math.special.bessel_i0e, name='my_bessel'),
       tf.keras.layers.Dense(3)], input_spec=o), OBSERVATION_SPEC)
  with pytest.raises(ActorQError, match=r"int8 TFLite conversion failed: "
                     r"layer 'my_bessel' \('tf.BesselI0e' op is neither"):
    conversion.check_convertible(network, ['int8'], _observations(16))


def test_a_network_factory_that_does_not_fit_is_refused():
  with pytest.raises(ActorQError, match=r'outputs .* needs 3 values'):
    _users_network(lambda o, a: sequential.Sequential(
        [tf.keras.layers.Dense(2)], input_spec=o), OBSERVATION_SPEC)
  with pytest.raises(ActorQError, match='not a TF-Agents Network'):
    _users_network(lambda o, a: tf.keras.Sequential(
        [tf.keras.layers.Dense(3)]), OBSERVATION_SPEC)
  with pytest.raises(ActorQError, match=r'does not take the observations '
                     r'uint8\[6, 6, 3\]'):
    _users_network(lambda o, a: q_network.QNetwork(
        o, a, conv_layer_params=((8, 3, 1),)),
                   tensor_spec.TensorSpec([6, 6, 3], tf.uint8))


def test_a_tf_agents_d4pg_actor_network_exports_to_full_int8(tmp_path):
  # ddpg's ActorNetwork: Keras layers, tanh scaled into the action bounds.
  network = networks.build_policy_network(
      lambda o, a: actor_network.ActorNetwork(o, a, fc_layer_params=(64, 64)),
      OBSERVATION_SPEC, tensor_spec.from_spec(PENDULUM_ACTIONS), 1,
      'test factory')
  exporter = export.PolicyExporter(
      network, model_checks.ActionOutputs(PENDULUM_ACTIONS), ['int8'],
      lambda *_: None, str(tmp_path))
  (result,) = exporter.export(1, _observations())
  assert result.check.passed, result.check.reason
  assert 'fold_normalization' in exporter.transforms
  model_checks.check_precision(result.model_bytes, 'int8',
                               network.count_params())
  actions = TFLiteModel(result.model_bytes, result.normalizer).outputs(
      _observations())
  np.testing.assert_allclose(actions, network(_observations())[0].numpy(),
                             atol=0.1)


def test_int4_weights_models_store_4_bit_weights_that_only_litert_computes(
    monkeypatch):
  network = _network(layers=(256, 256))
  observations = _observations()
  int4 = conversion.convert(network, 'int4_weights')
  int8 = conversion.convert(network, 'int8', observations)
  model_checks.check_precision(int4, 'int4_weights', network.count_params())
  with pytest.raises(ActorQError, match=r'0 of 67,586 parameters in int4'):
    model_checks.check_precision(int8, 'int4_weights', network.count_params())
  with pytest.raises(ActorQError, match='bytes, outside'):
    model_checks.check_precision(int4, 'int8', network.count_params())
  assert len(int4) < 0.7 * len(int8)
  # In LiteRT, the model computes the network to 4-bit precision...
  expected = network(observations)[0].numpy()
  assert interpreter.runtime() == interpreter.LITERT
  litert_error = np.abs(TFLiteModel(int4).outputs(observations) -
                        expected).mean()
  assert litert_error < 0.1 * np.abs(expected).mean(), litert_error
  # ... TensorFlow 2.15's interpreter loads it and computes something else.
  tf_model = tf.lite.Interpreter(model_content=int4)
  tf_model.allocate_tensors()
  tf_outputs = []
  for observation in observations[:32]:
    tf_model.set_tensor(tf_model.get_input_details()[0]['index'],
                        observation[None])
    tf_model.invoke()
    tf_outputs.append(tf_model.get_tensor(
        tf_model.get_output_details()[0]['index'])[0])
  tf_error = np.abs(np.array(tf_outputs) - expected[:32]).mean()
  assert tf_error > 5 * litert_error, (tf_error, litert_error, np.abs(expected).mean())
  # So without LiteRT, int4_weights is refused, in one line, before export.
  monkeypatch.setattr(interpreter, 'runtime', lambda: interpreter.TENSORFLOW)
  with pytest.raises(ActorQError, match='int4_weights models need LiteRT'):
    conversion.convert(network, 'int4_weights')


def test_int4_weights_action_model_passes_its_check(tmp_path):
  network = _actor_network(layers=(256, 256))
  exporter = export.PolicyExporter(
      network, model_checks.ActionOutputs(PENDULUM_ACTIONS),
      ['int8', 'int4_weights'], lambda *_: None, str(tmp_path))
  int8, int4 = exporter.export(4, _observations())
  assert int4.precision == 'int4_weights'
  assert int4.check.passed, int4.check.reason
  assert 0.0 < int4.check.figures['mean_action_error'] < 0.1
  model_checks.check_precision(int4.model_bytes, 'int4_weights',
                               network.count_params())
  assert len(int4.model_bytes) < 0.7 * len(int8.model_bytes)
