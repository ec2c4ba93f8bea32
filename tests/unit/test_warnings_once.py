"""torch.compile graphs show a dependency's warning once per process (issue: torch's pytree
FutureWarning printed once per graph, and again from torch's own calls afterwards)."""

import warnings

from edgekit.compile import backend


def _torch_like_warning():
    warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated (test)", FutureWarning)


def test_a_warning_is_shown_once_inside_and_never_again_outside_the_compile(monkeypatch):
    shown = []
    monkeypatch.setattr(warnings, "showwarning",
                        lambda message, category, *a, **k: shown.append(str(message)))
    monkeypatch.setattr(backend, "_SHOWN_WARNINGS", set())
    with warnings.catch_warnings():           # leaves the process's filters as they were
        warnings.simplefilter("default")
        for _ in range(2):                    # two graphs compiled
            with backend._warnings_once():
                _torch_like_warning()
        _torch_like_warning()                 # torch calling the same code after the compile
        warnings.warn("another warning", FutureWarning)
    assert shown == ["`isinstance(treespec, LeafSpec)` is deprecated (test)", "another warning"]
