"""The NPU part of a build, for targets with an `npu:` section: one module per NPU family
(an `NpuFamily`, family.py, listed in registry.py), each driving its toolchain in its own venv
(edgekit/toolchain/venvs.py) by subprocess, with files as the protocol. Each returns an NpuPart
(part.py: the manifest's NpuNote and the files it lists)."""
