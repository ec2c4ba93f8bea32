"""ONNX lowering paths as pure logic: the child process that runs torch-mlir (a crash is a
failure with its signal), the lazy ONNX→torch conversion that cannot stop the `torch` lowering,
the attempt order, and outputs read back in the graph's declared dtype."""

import os
import signal
import time

import numpy as np
import pytest

from edgekit.api.onnx_backend import _as_declared
from edgekit.pipeline.lower import ImportedGraph, LoweringSource
from edgekit.toolchain import torch_mlir
from edgekit.toolchain.torch_mlir import LowerFailure, in_child


def _bytes_back(n):
    return bytes(range(256)) * n


def _fails():
    raise LowerFailure(("onnx.Foo",), "error: failed to legalize 'onnx.Foo'")


def _segfaults():
    os.write(2, b"last words before the crash\n")   # as C++ code writes: to fd 2
    os.kill(os.getpid(), signal.SIGSEGV)


def _bare_exception():
    raise KeyError(0)


def _hangs():
    time.sleep(60)


def test_a_child_returns_large_results_whole():
    assert in_child(_bytes_back, 1000, what="t") == _bytes_back(1000)


def test_a_lower_failure_in_the_child_comes_back_with_its_ops():
    with pytest.raises(LowerFailure) as failed:
        in_child(_fails, what="t")
    assert failed.value.ops == ("onnx.Foo",)


def test_a_crashing_child_is_a_failure_naming_the_signal_and_its_last_stderr_line():
    with pytest.raises(LowerFailure) as failed:
        in_child(_segfaults, what="torch-mlir's ONNX→torch conversion")
    assert str(failed.value) == ("torch-mlir's ONNX→torch conversion crashed with SIGSEGV: "
                                 "last words before the crash")


def test_any_other_exception_in_the_child_is_a_failure_with_its_type():
    with pytest.raises(LowerFailure, match="KeyError: 0"):
        in_child(_bare_exception, what="t")


def test_a_child_past_its_deadline_is_killed_and_is_a_one_line_failure(monkeypatch):
    monkeypatch.setenv("EDGEKIT_CHILD_DEADLINE_S", "1")
    started = time.monotonic()
    with pytest.raises(LowerFailure) as failed:
        in_child(_hangs, what="torch-mlir's ONNX→torch conversion")
    assert time.monotonic() - started < 10
    assert str(failed.value) == ("torch-mlir's ONNX→torch conversion gave no answer within "
                                 "1 s (killed)")


def test_a_failing_conversion_fails_tosa_and_linalg_once_and_never_the_torch_lowering():
    calls = []

    def convert():
        calls.append(1)
        raise LowerFailure((), "torch-mlir's ONNX→torch conversion crashed with SIGSEGV")

    graph = ImportedGraph(provided={"torch": LoweringSource(b"onnx-form", "onnx")},
                          convert=convert, first=("torch",))
    assert graph.lowered("torch") == LoweringSource(b"onnx-form", "onnx")
    assert calls == []
    for lowering in ("tosa", "linalg"):
        with pytest.raises(LowerFailure, match="SIGSEGV"):
            graph.lowered(lowering)
    assert calls == [1]
    # the reproducer of a failed conversion is the ONNX form and the conversion's command
    assert graph.failed_input("tosa")[0] == b"onnx-form"


def test_the_torch_backend_form_is_made_once_when_needed(monkeypatch):
    monkeypatch.setattr(torch_mlir, "lower", lambda module, lowering: module + lowering.encode())
    made = []
    graph = ImportedGraph(convert=lambda: made.append(1) or b"torch-")
    assert graph.lowered("tosa").module == b"torch-tosa"
    assert graph.lowered("linalg").module == b"torch-linalg"
    assert made == [1]


def test_signless_outputs_are_read_back_as_the_graphs_declared_type():
    got = np.array([-1, 127, -128], dtype=np.int8)
    as_uint8 = _as_declared(got, np.dtype("uint8"))
    assert as_uint8.dtype == np.uint8 and as_uint8.tolist() == [255, 127, 128]
    assert _as_declared(np.float32([1.5]), np.dtype("uint8")).dtype == np.float32
    assert _as_declared(np.int64([3]), np.dtype("int64")).dtype == np.int64
