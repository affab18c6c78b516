"""`kbroker ui`'s command line: Kafka-style options, bad input refused with a clear message before anything
starts (the UI itself runs as a process in tests/ui/test_pages_browser.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.cli import main
from kbroker.ui.command import DEFAULT_LISTEN, listen_address


@pytest.mark.parametrize(("text", "expected"), [("127.0.0.1:9021", ("127.0.0.1", 9021)),
                                                ("[::1]:80", ("::1", 80)), ("0.0.0.0:0", ("0.0.0.0", 0)),
                                                ("localhost:8080", ("localhost", 8080))])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert listen_address(text) == expected


def test_it_listens_on_this_host_only_unless_told() -> None:
    assert DEFAULT_LISTEN.startswith("127.0.0.1:")


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "example.com:80"], "not an IP address or localhost"),
    (["--listen", "127.0.0.1"], "is not HOST:PORT"),
    (["--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
    (["--interval", "0"], "must be positive"),
    (["--interval", "soon"], "is not a number of seconds"),
    (["--history-cap-mb", "-5"], "is not a positive whole number"),
])
def test_bad_options_are_refused_by_name(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ui", "--bootstrap-server", "127.0.0.1:9092", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_file_is_refused_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["ui", "--bootstrap-server", "127.0.0.1:9092", "--history", str(tmp_path / "h.sqlite")]
    assert main([*base, "--basic-auth-file", str(tmp_path / "absent")]) == 2
    assert "absent" in capsys.readouterr().err
    (tmp_path / "auth").write_text("just-a-user\n")
    assert main([*base, "--basic-auth-file", str(tmp_path / "auth")]) == 2
    assert "expected one line user:password" in capsys.readouterr().err
    assert main(["ui", "--bootstrap-server", "127.0.0.1:9092", "--history", str(tmp_path / "no" / "h.sqlite")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "h.sqlite").exists()
