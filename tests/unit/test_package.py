import subprocess
import sys

import edgekit


def test_every_public_name_resolves_to_its_defining_module():
    for name in edgekit.__all__:
        value = getattr(edgekit, name)
        assert value.__name__ == name and value.__module__.startswith("edgekit.")
    assert set(edgekit.__all__) <= set(dir(edgekit))


def test_importing_edgekit_imports_no_compiler():
    code = "import sys, edgekit; print(sorted(m for m in ('torch', 'torch_mlir', 'iree.compiler') " \
           "if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
