"""Builds kvevict's Python package: the compiled module kvevict._kvevict, the
pure-Python half in kvevict/, its stub and py.typed (metadata: pyproject.toml).

The module is built by the project's own CMake, configured from the
repository root with the tests, benchmarks and Node addon off, and only the
kvevict_python target built; the .so it leaves in <cmake build>/python/kvevict/
is copied where setuptools packs it. Why CMake rather than setuptools
compiling the sources itself (pybind11.setup_helpers): the C++ libraries the
module links (core, eval, model) are about forty sources in src/ (a glob over
src/core/policies/ among them) with Highway's
per-target dispatch, -ffp-contract=off (the canonical parity hash depends on
it), OpenMP and the project's warning set; a second list of sources and flags
here would drift from CMakeLists.txt the first time a source or flag changes,
and setuptools compiles one file at a time. CMake builds exactly what the
ctest-tested module is, in parallel. It needs only what building the project
needs anyway (cmake, ninja or make, g++, pybind11-dev, python3-dev and the core's
-dev packages) -- all Debian 12 packages, nothing from PyPI.

The sources are read from the repository this folder lies in (../..), so the
package builds from a checkout (pip builds in place), not from an sdist.

Environment:
  KVEVICT_BUILD_DIR   build here instead of ./build (setuptools' files and the
                      CMake build in KVEVICT_BUILD_DIR/cmake); a second build
                      with the same folder is incremental
  KVEVICT_REUSE_BUILD a CMake build of this repository that is already
                      configured with the Python binding (the release preset's
                      build/): only its kvevict_python target is built there
                      (nothing, when it is up to date), with its own
                      configuration, and that module packed; no configure, no
                      second compile of the libraries (the pip test in make test)
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: the CPU count)
  CMAKE_ARGS          extra CMake arguments, space-separated
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def project_version() -> str:
    cmakelists = ROOT / "CMakeLists.txt"
    if not cmakelists.is_file():
        sys.exit(f"kvevict: {cmakelists} not found: the package builds from a checkout of the "
                 "repository (pip install ./bindings/python), not from a copy of this folder alone")
    found = re.search(r"project\(\s*kvevict\s+VERSION\s+([0-9][0-9.]*)", cmakelists.read_text())
    if not found:
        sys.exit(f"kvevict: no project(kvevict VERSION ...) in {cmakelists}")
    return found.group(1)


class CMakeExtension(Extension):
    """The module CMake's kvevict_python target builds; no sources of its own here."""

    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


def reused_build() -> Path:
    """KVEVICT_REUSE_BUILD, checked: a configured build of this repository's
    sources with the Python binding on."""
    build_dir = Path(os.environ["KVEVICT_REUSE_BUILD"]).resolve()
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        sys.exit(f"kvevict: KVEVICT_REUSE_BUILD={build_dir}: not a configured CMake build (no CMakeCache.txt)")
    values = dict(re.findall(r"^(\w+):\w+=(.*)$", cache.read_text(), re.M))
    home = values.get("CMAKE_HOME_DIRECTORY", "")
    if not home or Path(home).resolve() != ROOT:
        sys.exit(f"kvevict: KVEVICT_REUSE_BUILD={build_dir} builds {home or 'an unknown source'}, not {ROOT}")
    if values.get("KVEVICT_BUILD_BINDINGS", "").upper() not in ("ON", "1", "TRUE", "YES"):
        sys.exit(f"kvevict: KVEVICT_REUSE_BUILD={build_dir} is configured without the bindings "
                 "(KVEVICT_BUILD_BINDINGS=OFF)")
    return build_dir


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if shutil.which("cmake") is None:
            sys.exit("kvevict: cmake is not installed (Debian 12: apt-get install cmake ninja-build)")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(self.parallel or os.cpu_count() or 1)
        if os.environ.get("KVEVICT_REUSE_BUILD"):
            build_dir = reused_build()
            subprocess.run(["cmake", "--build", str(build_dir), "--target", "kvevict_python",
                            "--parallel", jobs], check=True)
            self.copy_module(ext, build_dir)
            return
        build_dir = Path(self.build_temp).resolve() / "cmake"
        if os.environ.get("KVEVICT_BUILD_DIR"):
            build_dir = Path(os.environ["KVEVICT_BUILD_DIR"]).resolve() / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DKVEVICT_BUILD_TESTS=OFF",
            "-DKVEVICT_BUILD_BENCH=OFF",
            "-DKVEVICT_BUILD_BINDINGS=ON",
            "-DKVEVICT_NODE=OFF",
            # The interpreter pip runs is the one the module is for (a venv's
            # python3 included); the CMake default is Debian's /usr/bin/python3.
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
        if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "kvevict_python",
                        "--parallel", jobs], check=True)
        self.copy_module(ext, build_dir)

    def copy_module(self, ext: Extension, build_dir: Path) -> None:
        """The module CMake left in <build_dir>/python/kvevict/, for this interpreter."""
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        built = sorted((build_dir / "python" / "kvevict").glob("_kvevict*.so"))
        if not built:
            sys.exit(f"kvevict: CMake built no module in {build_dir}/python/kvevict: the Python binding was "
                     "skipped (see the 'kvevict: Python binding skipped' line above: pybind11-dev or "
                     "python3-dev missing?)")
        mine = [b for b in built if b.name == "_kvevict" + suffix]
        if not mine:
            sys.exit(f"kvevict: the module in {build_dir}/python/kvevict ({', '.join(b.name for b in built)}) "
                     f"is not for this interpreter ({sys.executable}, _kvevict{suffix})")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mine[0], dest)


options = {}
if os.environ.get("KVEVICT_BUILD_DIR"):
    base = Path(os.environ["KVEVICT_BUILD_DIR"]).resolve()
    options = {"build": {"build_base": str(base)}, "egg_info": {"egg_base": str(base)}}
    base.mkdir(parents=True, exist_ok=True)

setup(
    version=project_version(),
    ext_modules=[CMakeExtension("kvevict._kvevict")],
    cmdclass={"build_ext": CMakeBuild},
    options=options,
)
