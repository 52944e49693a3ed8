"""``--app module:callable``: the module may live in the current directory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schemas.settings import Settings
from streams.app.extensions import Extensions, load_extensions
from streams.errors import ConfigurationError

HOOKS = textwrap.dedent(
    """
    from streams.app.extensions import Extensions

    def build(settings):
        return Extensions()
    """
)


def test_module_from_the_current_directory_is_importable(tmp_path: Path) -> None:
    (tmp_path / "cwd_hooks_mod.py").write_text(HOOKS)
    # A fresh interpreter launched like the console script: sys.path[0] is not the cwd.
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
        "import os; assert os.getcwd() not in sys.path\n"
        "from schemas.settings import Settings\n"
        "from streams.app.extensions import Extensions, load_extensions\n"
        "assert isinstance(load_extensions('cwd_hooks_mod:build', Settings()), Extensions)\n"
    )
    repo = Path(__file__).resolve().parents[3]
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_loader_adds_cwd_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_hooks_mod2.py").write_text(HOOKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert isinstance(load_extensions("cwd_hooks_mod2:build", Settings()), Extensions)
    monkeypatch.delitem(sys.modules, "cwd_hooks_mod2")


def test_bad_spec_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        load_extensions("no_colon", Settings())
    with pytest.raises(ConfigurationError):
        load_extensions("surely_not_a_module_xyz:build", Settings())
