"""The wheel and sdist built from the repo: what they hold and require.

(Installing the wheel in a new virtual environment and training with it
needs the package index; README, "Install as a package", gives the commands.)
"""
import email.parser
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

from packaging import requirements
import pytest

from conftest import PROJECT_ROOT

_SOURCES = ('actorq_tf', 'binaries', 'gin_configs', 'docs', 'setup.py',
            'pyproject.toml',
            'MANIFEST.in',
            'README.md', 'requirements.txt', 'requirements-test.txt',
            'constraints.txt')


@pytest.fixture(scope='module')
def built(tmp_path_factory):
  """(wheel path, sdist path), built from a copy of the sources (a build
  leaves build/ and egg-info behind)."""
  source = tmp_path_factory.mktemp('source')
  for name in _SOURCES:
    path = os.path.join(PROJECT_ROOT, name)
    if os.path.isdir(path):
      shutil.copytree(path, source / name, symlinks=True,
                      ignore=shutil.ignore_patterns('__pycache__'))
    else:
      shutil.copy(path, source / name)
  dist = source / 'dist'
  for command in (['-m', 'pip', 'wheel', '--quiet', '--no-deps',
                   '--no-build-isolation', '-w', str(dist), '.'],
                  ['setup.py', '--quiet', 'sdist', '-d', str(dist)]):
    subprocess.run([sys.executable, *command], cwd=source, check=True,
                   capture_output=True, timeout=300)
  return (glob.glob(str(dist / '*.whl'))[0],
          glob.glob(str(dist / '*.tar.gz'))[0])


def _pins():
  with open(os.path.join(PROJECT_ROOT, 'constraints.txt')) as f:
    lines = [line.split('#')[0].strip() for line in f]
  pins = [requirements.Requirement(line) for line in lines if line]
  return {pin.name.lower().replace('_', '-'): next(iter(pin.specifier)).version
          for pin in pins}


def test_the_wheel_installs_binaries_and_gin_configs_under_actorq_tf(built):
  wheel, _ = built
  names = zipfile.ZipFile(wheel).namelist()
  top_level = {name.split('/')[0] for name in names}
  assert top_level == {'actorq_tf', 'actorq_tf-0.1.0.dist-info'}, top_level
  for binary in glob.glob(os.path.join(PROJECT_ROOT, 'binaries', '*.py')):
    assert f'actorq_tf/binaries/{os.path.basename(binary)}' in names
  configs = glob.glob(os.path.join(PROJECT_ROOT, 'gin_configs', '*.gin'))
  assert len(configs) >= 10
  for config in configs:
    assert f'actorq_tf/gin_configs/{os.path.basename(config)}' in names
  entry_points = zipfile.ZipFile(wheel).read(
      'actorq_tf-0.1.0.dist-info/entry_points.txt').decode()
  scripts = [line.split(' = ') for line in entry_points.splitlines()
             if ' = ' in line]
  assert {script for script, _ in scripts} >= {'actorq-local', 'actorq-ray'}
  for _, target in scripts:
    module, function = target.split(':')
    assert module.replace('.', '/') + '.py' in names and function == 'run'


def test_the_wheel_requires_ranges_that_the_pins_satisfy(built):
  wheel, _ = built
  metadata = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(
      'actorq_tf-0.1.0.dist-info/METADATA').decode())
  pins = _pins()
  core, extras = set(), set()
  for line in metadata.get_all('Requires-Dist'):
    requirement = requirements.Requirement(line)
    name = requirement.name.lower().replace('_', '-')
    assert '==' not in str(requirement.specifier), line
    assert requirement.specifier.contains(pins[name]), (line, pins[name])
    (extras if requirement.marker else core).add(name)
  for optional in ('ray', 'codecarbon', 'dm-control', 'mujoco', 'matplotlib',
                   'pandas', 'pygame'):
    assert optional not in core
  assert {'ray', 'codecarbon', 'dm-control', 'matplotlib', 'ai-edge-litert',
          'ai-edge-quantizer'} <= extras
  assert {'tensorflow', 'tf-agents', 'dm-reverb', 'tf-keras'} <= core


def test_the_sdist_holds_what_setup_py_and_the_pins_need(built):
  _, sdist = built
  names = {name.split('/', 1)[1] for name in tarfile.open(sdist).getnames()
           if '/' in name}
  assert {'setup.py', 'pyproject.toml', 'requirements.txt', 'constraints.txt',
          'gin_configs/dqn_cartpole_qat.gin', 'binaries/local_main.py',
          'actorq_tf/actor.py'} <= names
