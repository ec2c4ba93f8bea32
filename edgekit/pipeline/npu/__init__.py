"""The NPU part of a build, for targets with an `npu:` section: one module per NPU family
(ethos.py: ExecuTorch's Arm backend → integer TOSA → Vela; rknn.py: rknn-toolkit2 plugin),
each driving its toolchain in its own venv (edgekit/toolchain/venvs.py) by subprocess, with
files as the protocol. They return a NpuNote (models/bundle.py) and the files it lists."""
