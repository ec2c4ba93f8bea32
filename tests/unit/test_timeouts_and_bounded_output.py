"""Deadlines for talking to devices (one record, layered: defaults < target profile < recipe <
environment) and the bounded buffer that keeps a command's output small."""

import pytest

from edgekit.api.deploy import DeployOptions, deploy_timeouts
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.config.timeouts import Timeouts, resolve_timeouts
from edgekit.errors import ConfigError
from edgekit.transport.base import BoundedOutput


def test_each_layer_sets_only_the_keys_it_names_and_the_environment_wins():
    profile = Timeouts(banner_s=40, sftp_s=90)
    recipe = Timeouts(sftp_s=30)
    resolved = resolve_timeouts(profile, recipe, environ={"EDGEKIT_TIMEOUT_CONNECT_S": "2.5"})
    assert resolved == Timeouts(connect_s=2.5, banner_s=40, sftp_s=30)
    assert resolve_timeouts(None, None, environ={}) == Timeouts()


@pytest.mark.parametrize("value", ["soon", "0", "-3", "inf"])
def test_a_bad_timeout_in_the_environment_names_the_variable(value):
    with pytest.raises(ConfigError) as err:
        resolve_timeouts(environ={"EDGEKIT_TIMEOUT_SFTP_S": value})
    assert err.value.key == "EDGEKIT_TIMEOUT_SFTP_S" and err.value.exit_code == 2


def test_profile_and_recipe_timeouts_reach_a_deploy_without_changing_what_is_built(
        tmp_path, write_recipe, monkeypatch):
    monkeypatch.delenv("EDGEKIT_TIMEOUT_SFTP_S", raising=False)
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    profile = tmp_path / "with" / "board.yaml"
    profile.write_text("extends: host\ntimeouts:\n  banner_s: 45\n  sftp_s: 200\n")
    (tmp_path / "without" / "board.yaml").write_text("extends: host\n")
    recipe = write_recipe("""
        name: demo
        model:
          python: "@TINY@:linear_softmax"
        timeouts:
          sftp_s: 20
    """)
    plain = write_recipe("""
        name: demo
        model:
          python: "@TINY@:linear_softmax"
    """, name="plain.yaml")
    options = DeployOptions(host="local:/nowhere", recipe=recipe, target=str(profile))
    assert deploy_timeouts(options) == Timeouts(banner_s=45, sftp_s=20)
    # timeouts are not part of the target's identity nor of the build's cache key
    assert load_target(str(profile)).fingerprint() == \
        load_target(str(tmp_path / "without" / "board.yaml")).fingerprint()
    assert load_recipe(recipe).model_dump(mode="json") == load_recipe(plain).model_dump(mode="json")


def test_a_misspelled_timeout_key_is_a_config_error_with_its_line(write_recipe):
    path = write_recipe("""
        name: demo
        model:
          python: "@TINY@:linear_softmax"
        timeouts:
          stfp_s: 20
    """)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.where == f"{path}:5" and "stfp_s" in str(err.value)


def test_bounded_output_keeps_head_and_tail_and_says_how_much_was_cut():
    out = BoundedOutput(head=4, tail=3)
    for chunk in (b"ab", b"cdefgh", b"ijklmnop", b"qrstuvwxyz"):
        out.write(chunk)
    assert out.total == 26 and out.cut == 19
    assert out.getvalue() == b"abcd\n[edgekit: 19 bytes of output cut here]\nxyz"
    small = BoundedOutput(head=4, tail=3)
    small.write(b"abcdefg")
    assert (small.getvalue(), small.cut) == (b"abcdefg", 0)


def test_bounded_output_memory_stays_bounded_whatever_the_stream_length():
    out = BoundedOutput(head=1000, tail=1000)
    for _ in range(10_000):
        out.write(b"x" * 4096)
    assert len(out._tail) <= 2 * 1000 and len(out.getvalue()) < 2100
