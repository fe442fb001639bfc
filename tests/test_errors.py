"""The install hint for a missing extra: one wording, from errors.require and from the CLI boundary."""

from __future__ import annotations

import pytest

from diffbench.errors import MissingDependencyError, install_hint, require


def test_require_names_the_checkout_install_command() -> None:
    with pytest.raises(MissingDependencyError) as info:
        require("diffbench_no_such_module_xyz", "quality")
    msg = str(info.value)
    assert msg.startswith("diffbench_no_such_module_xyz is not installed (")
    assert msg.endswith("install it with: pip install -c constraints.txt -e '.[quality]' (or '.[all]')")
    assert install_hint("quality") in msg


def test_cli_missing_module_uses_the_same_hint(monkeypatch, capsys) -> None:
    import diffbench.cli.main as cli_main

    def missing(*_a, **_k):
        raise ModuleNotFoundError("No module named 'torchmetrics'", name="torchmetrics")

    monkeypatch.setattr(cli_main, "_command", lambda: missing)
    assert cli_main.main(["bench"]) == 3
    err = capsys.readouterr().err
    assert err.strip() == (
        "error: torchmetrics is not installed; this command needs the 'quality' extra: "
        "pip install -c constraints.txt -e '.[quality]' (or '.[all]')"
    )


def test_the_cli_command_tree_is_built_once_per_process(monkeypatch) -> None:
    """``main`` reuses one click command: typer's ``app(...)`` rebuilds it on every call (~0.08 s), which the
    in-process CLI tests would pay hundreds of times."""
    import typer

    import diffbench.cli.main as cli_main

    built: list[object] = []
    real = typer.main.get_command

    def counting(app):  # type: ignore[no-untyped-def]
        built.append(app)
        return real(app)

    monkeypatch.setattr(typer.main, "get_command", counting)
    cli_main._command.cache_clear()
    try:
        for _ in range(3):
            assert cli_main.main(["ledger", "--help"]) == 0
    finally:
        cli_main._command.cache_clear()
    assert built == [cli_main.app]
