import json
import os
import subprocess
import sys

import numpy as np

from edgekit.models.bundle import MANIFEST, sha256_file


def edgekit(*args: str, cwd=None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI as a user would (`env`: extra environment variables)."""
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def tamper_golden_output(bundle_dir, scale: float = 2.0, update_manifest: bool = True) -> None:
    """Change a golden output (and, if asked, its recorded sha256, so only numerics differ)."""
    golden = bundle_dir / "golden" / "output_0.npy"
    np.save(golden, np.load(golden) * scale + 1.0)
    if update_manifest:
        manifest = json.loads((bundle_dir / MANIFEST).read_text())
        manifest["files"]["golden/output_0.npy"] = sha256_file(golden)
        (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
