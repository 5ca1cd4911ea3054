"""`cmake --install` puts the package where the interpreter finds it under the prefix, and the
installed module finds the installed liblamina.so (its RPATH), not the build tree's."""
import os
import subprocess
import sys
import sysconfig

import pytest


def test_installed_module_imports_from_the_prefix(tmp_path):
    build = os.environ.get("LAMINA_BUILD_DIR")
    if not build:
        pytest.skip("the build folder is not known (ctest sets LAMINA_BUILD_DIR)")
    prefix = tmp_path / "prefix"
    for component in ("Unspecified", "python"):  # liblamina.so and the headers; the module
        subprocess.run(["cmake", "--install", build, "--prefix", str(prefix), "--component",
                        component], check=True, capture_output=True)
    folder = "dist-packages" if "deb_system" in sysconfig.get_scheme_names() else "site-packages"
    packages = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / folder
    assert (packages / "lamina" / "__init__.py").exists()
    script = ("import lamina, numpy\n"
              "net = lamina.Net.from_text('layer { name: \"d\" type: \"Input\" top: \"d\" "
              "input_param { shape { dim: 2 } } }')\n"
              "net.blobs['d'].data[...] = 3\n"
              "print(lamina.__file__, float(net.forward()['d'].sum()))\n")
    environment = dict(os.environ, PYTHONPATH=str(packages), LD_LIBRARY_PATH="")
    printed = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environment,
                             check=True, capture_output=True, text=True).stdout.split()
    assert printed[0].startswith(str(packages)) and printed[1] == "6.0"
    libraries = subprocess.run(["ldd", str(next((packages / "lamina").glob("_lamina*.so")))],
                               check=True, capture_output=True, text=True).stdout
    assert str(prefix) in libraries  # liblamina.so from the prefix
