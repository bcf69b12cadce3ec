"""ActorQ-TF: TF-Agents reinforcement learning with int8 TFLite actors.

Dependencies are ranges; constraints.txt pins the versions the suite was
tested with (`pip install actorq-tf -c constraints.txt`).
"""
import setuptools

# Console script -> the binary in binaries/, installed as actorq_tf.binaries.
CONSOLE_SCRIPTS = {
    'actorq-local': 'local_main',
    'actorq-ray': 'ray_main',
    'actorq-reverb-server': 'reverb_server_main',
    'actorq-learner': 'learner_main',
    'actorq-actor': 'actor_main',
    'actorq-eval': 'eval_main',
}

setuptools.setup(
    name='actorq-tf',
    version='0.1.0',
    description='Distributed TF-Agents RL whose actors run int8 TFLite '
                'policies (ActorQ).',
    long_description=open('README.md', encoding='utf-8').read(),  # pylint: disable=consider-using-with
    long_description_content_type='text/markdown',
    # The design's layout (binaries/ and gin_configs/ beside the library),
    # installed under the project's own name.
    packages=['actorq_tf', 'actorq_tf.binaries', 'actorq_tf.gin_configs'],
    package_dir={'actorq_tf.binaries': 'binaries',
                 'actorq_tf.gin_configs': 'gin_configs'},
    package_data={'actorq_tf.gin_configs': ['*.gin']},
    python_requires='>=3.11,<3.12',  # dm-reverb 0.14 has wheels for 3.11
    install_requires=[
        'absl-py>=1.0',
        'dm-env>=1.6',
        'dm-reverb>=0.14,<0.15',
        'dm-tree>=0.1.8',
        'gin-config>=0.5',
        'gym>=0.23,<0.24',  # what tf-agents 0.19 runs
        'numpy>=1.23,<2',
        'portpicker>=1.5',
        'tensorflow>=2.15,<2.16',
        'tensorflow-model-optimization>=0.8,<0.9',
        'tensorflow-probability>=0.23,<0.24',
        'tf-agents>=0.19,<0.20',
        'tf-keras>=2.15,<2.16',
    ],
    extras_require={
        'ray': ['ray>=2.60,<3'],
        # codecarbon 2.8+ needs pydantic 2, which tf-agents 0.19's pinned
        # typing-extensions cannot have; pynvml 12+ warns at import.
        'energy': ['codecarbon>=2.5,<2.6', 'pandas>=2.0', 'pynvml>=11.5,<12'],
        # mujoco 4 breaks these dm-control releases.
        'control': ['dm-control>=1.0.20,<1.1', 'mujoco>=3.1,<4'],
        'plots': ['matplotlib>=3.8'],
        # LiteRT's interpreter for every model (TensorFlow's is the
        # fallback), and AI Edge Quantizer for int4_weights models.
        'litert': ['ai-edge-litert>=2.3,<2.4', 'ai-edge-quantizer>=0.10,<0.11'],
    },
    entry_points={'console_scripts': [
        f'{script} = actorq_tf.binaries.{module}:run'
        for script, module in CONSOLE_SCRIPTS.items()]},
)
