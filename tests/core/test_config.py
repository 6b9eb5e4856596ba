"""Settings: credentials never printed, the TOML file, environment over file, strict file keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from search.core.config import Settings
from search.core.errors import FlysiftError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FLYSIFT_CONFIG", "FLYSIFT_DATA_DIR", "FLYSIFT_PORT", "FLYSIFT_CLUSTER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "flysift.toml"
    path.write_text(text)
    monkeypatch.setenv("FLYSIFT_CONFIG", str(path))
    return path


def test_credentials_never_appear_in_repr_or_str():
    s = Settings(cluster_api_key="key-123456", cluster_username="u", cluster_password="pw-654321",
                 cursor_secret="c" * 32)
    for text in (repr(s), str(s), s.model_dump_json()):
        assert "key-123456" not in text and "pw-654321" not in text and "c" * 32 not in text
    assert s.cluster_api_key is not None and s.cluster_api_key.get_secret_value() == "key-123456"
    assert s.cluster_password is not None and s.cluster_password.get_secret_value() == "pw-654321"


def test_toml_file_sets_keys_and_the_environment_wins(tmp_path, monkeypatch):
    _config(tmp_path, monkeypatch, 'data_dir = "/srv/flysift"\nport = 9001\ncluster_password = "from-file"\n')
    s = Settings()
    assert s.data_dir == Path("/srv/flysift") and s.port == 9001
    assert s.cluster_password is not None and s.cluster_password.get_secret_value() == "from-file"
    monkeypatch.setenv("FLYSIFT_PORT", "9002")
    assert Settings().port == 9002
    assert Settings(port=9003).port == 9003


def test_unknown_toml_key_is_refused_with_the_valid_names(tmp_path, monkeypatch):
    path = _config(tmp_path, monkeypatch, 'data_dir = "d"\nprot = 9001\n')
    with pytest.raises(FlysiftError) as e:
        Settings()
    assert e.value.code == "config_error" and "\n" not in e.value.message
    assert str(path) in e.value.message and "prot" in e.value.message and "port" in e.value.message.split("valid:")[1]


def test_missing_or_broken_config_file_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYSIFT_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(FlysiftError) as e:
        Settings()
    assert e.value.code == "config_error" and "no such file" in e.value.message and "\n" not in e.value.message
    _config(tmp_path, monkeypatch, "port = \n")
    with pytest.raises(FlysiftError) as e:
        Settings()
    assert "not valid TOML" in e.value.message and "\n" not in e.value.message


def test_cli_prints_a_config_error_as_one_line(tmp_path, monkeypatch):
    from search.cli.main import main

    monkeypatch.setenv("FLYSIFT_CONFIG", str(tmp_path / "absent.toml"))
    result = CliRunner().invoke(main, ["stats", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error [config_error]:") and "absent.toml" in lines[0]


def test_a_refused_value_is_one_line_naming_the_setting_value_and_what_it_accepts(tmp_path, monkeypatch):
    from search.cli.main import main

    monkeypatch.setenv("FLYSIFT_MAX_PAGE_SIZE", "abc")
    monkeypatch.setenv("FLYSIFT_ENGINE", "elastic")
    result = CliRunner().invoke(main, ["stats", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error [config_error]:")
    assert "FLYSIFT_MAX_PAGE_SIZE='abc': expected an integer" in lines[0]
    assert "FLYSIFT_ENGINE='elastic': expected one of embedded, cluster" in lines[0]
    # --debug: the exception and its pydantic cause, for a bug report
    result = CliRunner().invoke(main, ["--debug", "stats", "--data-dir", str(tmp_path)])
    assert isinstance(result.exception, FlysiftError) and result.exception.__cause__ is not None


def test_a_refused_value_in_the_file_names_the_key_and_file_never_a_secret(tmp_path, monkeypatch):
    from search.core.config import load_settings

    path = _config(tmp_path, monkeypatch, 'port = "eighty"\nmax_body_bytes = 3\n')
    with pytest.raises(FlysiftError) as e:
        load_settings()
    msg = e.value.message
    assert e.value.code == "config_error" and "\n" not in msg
    assert f"port='eighty' (in {path}): expected an integer" in msg and "expected an integer (>= 1024)" in msg
    monkeypatch.delenv("FLYSIFT_CONFIG")
    with pytest.raises(FlysiftError) as e:
        load_settings(cluster_password=["not", "a", "string-secret-123"])
    assert "string-secret-123" not in e.value.message and "<hidden>" in e.value.message


def test_environment_names_any_case_and_tables_merge_with_the_file(tmp_path, monkeypatch):
    _config(tmp_path, monkeypatch, '[collections.med]\nbm25_b = 0.5\n[collections.med.field_weights]\nbody = 3\n')
    monkeypatch.setenv("flysift_port", "9005")
    monkeypatch.setenv("FLYSIFT_COLLECTIONS", '{"med": {"field_weights": {"title": 2}}, "x": {}}')
    s = Settings(cluster_url="http://127.0.0.1:1")
    assert s.port == 9005 and sorted(s.collections) == ["med", "x"]
    med = s.collections["med"]
    assert med.bm25_b == 0.5 and med.field_weights is not None
    assert (med.field_weights.title, med.field_weights.body) == (2, 3)


def test_a_table_that_is_not_json_in_the_environment_is_one_line(monkeypatch):
    monkeypatch.setenv("FLYSIFT_COLLECTIONS", "{med: title=2}")
    with pytest.raises(FlysiftError) as e:
        Settings()
    assert e.value.code == "config_error" and "\n" not in e.value.message
    assert e.value.message.startswith("invalid setting FLYSIFT_COLLECTIONS='{med: title=2}': not valid JSON")


def test_settings_need_no_pydantic_settings():
    """The settings read their own sources: pydantic-settings' import (asyncio among others) cost every CLI call."""
    code = ("import sys, search.core.config\n"
            "print(sorted(m for m in ('pydantic_settings', 'asyncio') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
