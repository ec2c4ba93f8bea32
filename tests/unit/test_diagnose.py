"""A compiler's diagnostics → one line: the op, where it came from in the model, the reason."""

from edgekit.toolchain.torch_mlir import diagnose, ops_in

TORCH_MLIR = (
    'loc("aten.where.self @ encoder.layer.0.attention.self"(callsite("/x/modeling_bert.py":192:0'
    ' at callsite("/x/modeling_bert.py":314:0 at "/x/modeling_bert.py":669:0)))): error: '
    "'tosa.cast' op is not profile-aligned: element type 'f64' is not legal\n"
    'loc("/x/modeling_bert.py":314:0): note: called from')

IREE = ("/x/modeling_gpt2.py:581:0: error: 'tosa.gather' op illegal: operation operand/result "
        "data types did not align with any profile or extension, got (i64,i32,i64)\n"
        "/x/modeling_gpt2.py:600:0: note: called from\n"
        '/x/modeling_gpt2.py:581:0: note: see current operation: %69 = "tosa.gather"(%7, %68)')


def test_a_named_location_gives_the_module_path_the_aten_op_and_the_source_line():
    d = diagnose(TORCH_MLIR)
    assert d.op == "tosa.cast"
    assert d.where == "aten.where.self @ encoder.layer.0.attention.self, modeling_bert.py:192"
    assert d.reason == "'tosa.cast' op is not profile-aligned: element type 'f64' is not legal"
    assert "loc(" not in d.line() and "callsite" not in d.line()


def test_a_file_line_diagnostic_keeps_the_source_line_and_the_reason():
    d = diagnose(IREE)
    assert d.op == "tosa.gather" and d.where == "modeling_gpt2.py:581"
    assert d.reason.startswith("'tosa.gather' op illegal: operation operand/result")


def test_the_ops_of_every_error_line_are_listed_never_none():
    assert ops_in(TORCH_MLIR) == ("tosa.cast",)
    assert ops_in(IREE) == ("tosa.gather",)


def test_a_legalization_failure_names_the_op_without_its_printed_form():
    d = diagnose('loc("aten.atan2 @ forward"("/m.py":25:0)): error: failed to legalize operation '
                 "'torch.aten.atan2' that was explicitly marked illegal: %15 = \"torch.aten."
                 'atan2"(%arg0, %14) : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>')
    assert d.line() == ("torch.aten.atan2 (aten.atan2 @ forward, m.py:25): failed to legalize "
                        "operation 'torch.aten.atan2' that was explicitly marked illegal")


def test_an_importer_exception_without_diagnostics_is_its_own_line():
    d = diagnose("error: AssertionError: Could not find state mapping for buffer")
    assert d.line() == "AssertionError: Could not find state mapping for buffer"
